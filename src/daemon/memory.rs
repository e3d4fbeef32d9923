//! What a running node gives back to the system: one malloc arena for all
//! its threads, the heap's free pages every minute, and the pages of its own
//! code that it ran while starting and no longer runs.
//!
//! A volunteer sees the node's resident memory (`top`'s RES), and about half
//! of it was the binary's code: starting a node (the store's open, the
//! config, the network's set-up, the CLI) runs code an idle node never runs
//! again, and the kernel maps the page cache around each page a fault asks
//! for, so those pages stay mapped for as long as the node runs. They are
//! clean copies of the executable file; dropping them from the node's page
//! tables costs nothing but a minor fault (a mapping of the same page-cache
//! page) if one is ever run again.

use std::io::{self, Read};
use std::time::Duration;

/// How often the heap's free pages go back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(60);

/// When the code the node ran while starting is dropped: past the start,
/// the network's first bootstrap and the first summaries.
const FIRST_CODE_DROP: Duration = Duration::from_secs(5 * 60);

/// How often the code pages are dropped again, so a rare path (a batch
/// submitted, a daily compaction) does not stay mapped for the node's life.
const CODE_DROP_EVERY: Duration = Duration::from_secs(60 * 60);

/// `/proc/self/smaps` of a node is ~100 KiB; past this it is not read.
const MAX_SMAPS_BYTES: u64 = 8 << 20;

/// glibc gives each thread that allocates its own arena (up to 8 per
/// core), and memory freed in one is kept for that arena. The node's
/// threads are the runtime's one, the blocking pool's and sled's, which
/// allocate in bursts (a forecast, a flush) and then idle, so each burst's
/// arena stays resident. One arena measured 1.2–1.5 MiB (7 %) less
/// anonymous memory per host at N = 20 and 50 (docs/scale.md); the threads rarely allocate at
/// the same moment, so sharing one lock costs nothing measurable. Called
/// before any thread starts.
pub(super) fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; no thread of ours
    // exists yet to race with it.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Runs for the node's life: trims the heap every [`TRIM_EVERY`] and drops
/// the code pages at [`FIRST_CODE_DROP`] and every [`CODE_DROP_EVERY`] after.
pub(super) async fn give_back_memory() {
    let mut trim = tokio::time::interval(TRIM_EVERY);
    trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let first = tokio::time::Instant::now() + FIRST_CODE_DROP;
    let mut code = tokio::time::interval_at(first, CODE_DROP_EVERY);
    code.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = trim.tick() => trim_heap(),
            _ = code.tick() => match drop_code_pages() {
                Ok(bytes) => tracing::debug!(bytes, "dropped the code pages mapped so far"),
                Err(e) => tracing::debug!(error = %e, "could not drop the code pages"),
            },
        }
    }
}

/// Gives the heap's free pages back to the system (glibc's `malloc_trim`).
/// With one arena, memory freed between live allocations stays resident: a
/// burst of connections (a DHT re-check opens ~40) or a forecast leaves
/// holes the allocator keeps but no longer uses. Measured on a host of a
/// 300-node pool: anonymous RSS 35.5 -> 25.9 MiB after one trim (`gdb -p
/// PID -ex 'call (int)malloc_trim(0)'`); the heap's in-use bytes were 23 of
/// 37 MB (`malloc_stats`). A trim walks the free chunks: about a
/// millisecond a minute.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the allocator's locks itself and only
    // releases pages no allocation uses.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Drops from the page tables every page of the node's own executable
/// mapped read-only and never written ([`code_mappings`]); returns the
/// bytes of the mappings advised. The kernel maps them again from the page
/// cache at their next use.
fn drop_code_pages() -> io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let exe = exe.to_string_lossy();
    let mut smaps = String::new();
    std::fs::File::open("/proc/self/smaps")?
        .take(MAX_SMAPS_BYTES)
        .read_to_string(&mut smaps)?;
    let mut advised = 0;
    for m in code_mappings(&smaps, &exe) {
        // SAFETY: the range is one whole mapping of our executable, private,
        // not writable and with no anonymous (written) page, so every page
        // is the file's own content, which MADV_DONTNEED maps back in at the
        // next access: nothing the process reads changes. (A debugger's
        // breakpoint written after smaps was read would be undone.)
        let rc = unsafe { libc::madvise(m.start as *mut libc::c_void, m.len, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        advised += m.len;
    }
    Ok(advised)
}

/// A mapping of the executable's file read-only and never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CodeMapping {
    start: usize,
    len: usize,
}

/// The mappings in `smaps` (the text of `/proc/<pid>/smaps`) of the file
/// `exe` that are private, readable, not writable and hold no anonymous
/// page: the code and read-only data as the file has them. The relocated
/// read-only data (RELRO: written at load, then protected) has anonymous
/// pages and is left, as is every writable mapping. A line that does not
/// parse ends the mapping it is in without taking it.
fn code_mappings(smaps: &str, exe: &str) -> Vec<CodeMapping> {
    let mut found = Vec::new();
    // The mapping being read, and whether it is still a candidate.
    let mut current: Option<CodeMapping> = None;
    for line in smaps.lines() {
        if let Some(h) = mapping_header(line) {
            current = (h.path == exe && read_only_private(h.perms)).then_some(h.range);
            continue;
        }
        let Some(m) = current else { continue };
        if let Some(value) = line.strip_prefix("Anonymous:") {
            current = None;
            if kib(value) == Some(0) {
                found.push(m);
            }
        }
    }
    found
}

struct Header<'a> {
    range: CodeMapping,
    perms: &'a str,
    path: &'a str,
}

/// `start-end perms offset dev inode path`, or `None` for a field line.
fn mapping_header(line: &str) -> Option<Header<'_>> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms) = (fields.next()?, fields.next()?);
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let len = end.checked_sub(start).filter(|&l| l > 0)?;
    if perms.len() != 4 {
        return None;
    }
    // offset, device, inode; the path follows after padding.
    for _ in 0..3 {
        fields.next()?;
    }
    let path = fields.next().unwrap_or("").trim_start();
    Some(Header {
        range: CodeMapping { start, len },
        perms,
        path,
    })
}

fn read_only_private(perms: &str) -> bool {
    let p = perms.as_bytes();
    p[0] == b'r' && p[1] == b'-' && p[3] == b'p'
}

/// `   560 kB` -> 560.
fn kib(value: &str) -> Option<u64> {
    value.trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: &str = "/usr/bin/gleaner";

    fn smaps() -> String {
        [
            "5600-5700 r--p 00000000 fe:00 42                         /usr/bin/gleaner",
            "Rss:                2432 kB",
            "Anonymous:             0 kB",
            "5700-5900 r-xp 00100000 fe:00 42                         /usr/bin/gleaner",
            "Rss:               10980 kB",
            "Anonymous:             0 kB",
            "5900-5a00 r--p 00300000 fe:00 42                         /usr/bin/gleaner",
            "Rss:                 560 kB",
            "Anonymous:           560 kB",
            "5a00-5b00 rw-p 00400000 fe:00 42                         /usr/bin/gleaner",
            "Anonymous:             0 kB",
            "6000-6100 r-xp 00000000 fe:00 43                         /usr/lib/libc.so.6",
            "Anonymous:             0 kB",
            "7000-7100 r-xp 00000000 00:00 0 ",
            "Anonymous:             0 kB",
        ]
        .join("\n")
    }

    #[test]
    fn the_executables_unwritten_read_only_mappings_are_its_code() {
        assert_eq!(
            code_mappings(&smaps(), EXE),
            vec![
                CodeMapping { start: 0x5600, len: 0x100 },
                CodeMapping { start: 0x5700, len: 0x200 }
            ],
            "not the relocated data (anonymous pages), the writable data, a library or an anonymous mapping"
        );
    }

    #[test]
    fn a_mapping_with_a_written_page_or_no_anonymous_line_is_left() {
        let text = smaps()
            .replace(
                "Rss:               10980 kB\nAnonymous:             0 kB",
                "Rss: 1 kB\nAnonymous: 4 kB",
            )
            .replace(
                "Rss:                2432 kB\nAnonymous:             0 kB",
                "Rss: 1 kB",
            );
        assert_eq!(code_mappings(&text, EXE), vec![]);
    }

    #[test]
    fn garbage_and_odd_lines_take_nothing_and_do_not_panic() {
        for text in [
            "",
            "zzzz-5700 r-xp 0 0 0 /usr/bin/gleaner\nAnonymous: 0 kB",
            "5700-5600 r-xp 0 0 0 /usr/bin/gleaner\nAnonymous: 0 kB",
            "5700-5700 r-xp 0 0 0 /usr/bin/gleaner\nAnonymous: 0 kB",
            "5600-5700 r-x 0 0 0 /usr/bin/gleaner\nAnonymous: 0 kB",
            "5600-5700 r-xp 0 0 0 /usr/bin/gleaner\nAnonymous: lots",
            "5600-5700 r-xp 0 0 0 /usr/bin/gleaner-other\nAnonymous: 0 kB",
            "5600-5700 r-xp\nAnonymous: 0 kB",
        ] {
            assert_eq!(code_mappings(text, EXE), vec![], "{text:?}");
        }
    }

    #[test]
    fn a_path_with_spaces_is_matched_whole() {
        let text = "5600-5700 r-xp 00000000 fe:00 42     /opt/my apps/gleaner\nAnonymous: 0 kB";
        assert_eq!(code_mappings(text, "/opt/my apps/gleaner").len(), 1);
        assert_eq!(code_mappings(text, "/opt/my").len(), 0);
    }

    /// The resident pages of this test binary's own code mappings.
    fn resident_code_kib() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy().into_owned();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut ours = false;
        let mut total = 0;
        for line in smaps.lines() {
            if let Some(h) = mapping_header(line) {
                ours = h.path == exe && read_only_private(h.perms);
            } else if let (true, Some(v)) = (ours, line.strip_prefix("Rss:")) {
                total += kib(v).unwrap();
            }
        }
        total
    }

    #[test]
    fn dropping_the_code_pages_unmaps_them_and_the_process_runs_on() {
        // Only what runs between the drop and the count (this test's reading
        // of smaps, other tests' threads) is mapped again; a test starting
        // on another thread in that moment can map much, so up to three
        // tries, each of which must have dropped something.
        let mut counts = Vec::new();
        for _ in 0..3 {
            let before = resident_code_kib();
            let advised = drop_code_pages().unwrap();
            let after = resident_code_kib();
            assert!(advised > 0, "the test binary has code mappings");
            counts.push((before, after));
            if after < before {
                break;
            }
        }
        assert!(
            counts.iter().any(|(before, after)| after < before),
            "resident code KiB (before, after) the drop: {counts:?}"
        );
        // The code runs on from the file's pages.
        assert_eq!(code_mappings(&smaps(), EXE).len(), 2);
    }
}
