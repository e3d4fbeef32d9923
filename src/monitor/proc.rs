//! Reading the host's load straight from Linux's `/proc`: aggregate CPU time
//! from `/proc/stat`, the guest tree's CPU time from `/proc/<pid>/stat`, and
//! `MemAvailable` from `/proc/meminfo`.
//!
//! The file formats are [`crate::procfs`]'s (one `/proc/PID/stat` parser, one
//! meminfo parser for the whole node); this module keeps files open between
//! samples and does the per-process bookkeeping needed to subtract the guest.
//! It must not know about states, thresholds or the sampling period.
//!
//! *Why not `sysinfo`.* `sysinfo` (0.37, dev-dependency only) was measured
//! against this reader on the same data — host CPU, MemAvailable and the CPU
//! of a guest tree found from its root — with `cargo run --release --example
//! monitor_overhead -- --bench 300 --source {proc,sysinfo} [--guest PID]`
//! (CPU per sample by getrusage, 300 samples 20 ms apart, 2-core VM shared
//! with other builds, guest = a shell with two children):
//!
//! | | this reader | `sysinfo` | ratio |
//! |---|---|---|---|
//! | no guest | 69 µs | 82 µs | 1.2× |
//! | guest tree of 3 | 180 µs | 2 280 µs | 12.7× |
//!
//! `sysinfo` can find a tree only by refreshing the whole process table; this
//! reader follows children links (or reads the job cgroup's member list) and
//! keeps each guest `stat` file open, and gives exact jiffy deltas where
//! `sysinfo` gives a rounded percentage per refresh.

use super::{LoadSource, RawSample, SampleError};
use crate::procfs::{parse_meminfo, parse_stat, ProcStat, ProcessScope};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Cumulative CPU time of the whole machine, in clock ticks summed over all CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct CpuTimes {
    /// All accounted time: user, nice, system, idle, iowait, irq, softirq, steal.
    total: u64,
    /// Time no CPU had work: idle plus iowait.
    idle: u64,
}

/// The fields of `/proc/<pid>/stat` the guest accounting needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcTimes {
    /// The parent, to credit a reaped child's time to the right process.
    ppid: i32,
    /// utime + stime: CPU used by the process itself, ticks.
    own: u64,
    /// cutime + cstime: CPU of children it has waited for, ticks.
    reaped: u64,
    /// Start time in ticks after boot; tells a reused pid from the old one.
    start: u64,
}

impl From<&ProcStat> for ProcTimes {
    fn from(s: &ProcStat) -> Self {
        ProcTimes {
            ppid: s.ppid,
            own: s.utime.saturating_add(s.stime),
            reaped: s.reaped,
            start: s.starttime,
        }
    }
}

/// A `/proc` file kept open: re-reading it from offset 0 makes the kernel
/// generate fresh contents, which saves the path lookup, open and close
/// that dominate the cost of a sample.
#[derive(Debug)]
struct OpenFile {
    path: PathBuf,
    file: File,
}

impl OpenFile {
    fn open(path: PathBuf) -> Result<Self, SampleError> {
        match File::open(&path) {
            Ok(file) => Ok(OpenFile { path, file }),
            Err(source) => Err(SampleError::Read { path, source }),
        }
    }

    /// The file's current contents, read into `bytes`.
    fn read_fresh<'a>(&self, bytes: &'a mut Vec<u8>) -> Result<Cow<'a, str>, SampleError> {
        read_all_at_zero(&self.file, bytes).map_err(|source| SampleError::Read {
            path: self.path.clone(),
            source,
        })?;
        Ok(String::from_utf8_lossy(bytes))
    }
}

/// A guest process as last seen.
#[derive(Debug)]
struct GuestProcess {
    times: ProcTimes,
    /// Its open `stat` file; reading it fails once the process is gone.
    stat: File,
}

/// A [`LoadSource`] reading `/proc` directly.
#[derive(Debug)]
pub struct ProcLoadSource {
    /// `/proc`, or a fake tree in tests.
    root: PathBuf,
    /// USER_HZ: the unit of every tick count in `/proc`.
    ticks_per_sec: u64,
    stat: OpenFile,
    uptime: OpenFile,
    meminfo: OpenFile,
    /// Machine CPU times at the previous sample.
    prev_cpu: CpuTimes,
    /// Ticks since boot at the previous sample, to tell guest processes born
    /// since then (all their time is new) from ones seen for the first time.
    prev_uptime: u64,
    /// Guest processes at the previous sample.
    guests: HashMap<i32, GuestProcess>,
    /// Reused read buffer, so a sample does not allocate.
    bytes: Vec<u8>,
}

impl ProcLoadSource {
    /// Opens the real `/proc` and takes the baseline the first sample is measured from.
    pub fn new() -> Result<Self, SampleError> {
        Self::with_root("/proc", clock_ticks_per_sec())
    }

    /// Opens a `/proc`-shaped tree at `root` whose tick unit is `ticks_per_sec`.
    pub fn with_root(root: impl Into<PathBuf>, ticks_per_sec: u64) -> Result<Self, SampleError> {
        let root = root.into();
        let mut source = ProcLoadSource {
            stat: OpenFile::open(root.join("stat"))?,
            uptime: OpenFile::open(root.join("uptime"))?,
            meminfo: OpenFile::open(root.join("meminfo"))?,
            root,
            ticks_per_sec: ticks_per_sec.max(1),
            prev_cpu: CpuTimes::default(),
            prev_uptime: 0,
            guests: HashMap::new(),
            bytes: Vec::with_capacity(8192),
        };
        source.prev_cpu = source.read_cpu()?;
        source.prev_uptime = source.read_uptime()?;
        Ok(source)
    }

    fn read_cpu(&mut self) -> Result<CpuTimes, SampleError> {
        let text = self.stat.read_fresh(&mut self.bytes)?;
        parse_cpu_line(&text).ok_or_else(|| SampleError::Parse {
            path: self.stat.path.clone(),
            what: "no aggregate \"cpu\" line",
        })
    }

    fn read_uptime(&mut self) -> Result<u64, SampleError> {
        let text = self.uptime.read_fresh(&mut self.bytes)?;
        let secs = parse_uptime_secs(&text).ok_or_else(|| SampleError::Parse {
            path: self.uptime.path.clone(),
            what: "no uptime in seconds",
        })?;
        // Truncation is fine: a tick is the resolution of the start times compared with it.
        Ok((secs * self.ticks_per_sec as f64) as u64)
    }

    fn read_available_mib(&mut self) -> Result<u64, SampleError> {
        let text = self.meminfo.read_fresh(&mut self.bytes)?;
        let kib = parse_meminfo(&text)
            .map(|m| m.available_kib)
            .ok_or_else(|| SampleError::Parse {
                path: self.meminfo.path.clone(),
                what: "neither MemAvailable nor MemFree",
            })?;
        Ok(kib / 1024)
    }

    /// Reads one process's times through its already open `stat` file if it
    /// has one (that fails once the process is gone, so a reused pid is
    /// opened afresh); `None` when there is no such process now.
    fn read_guest(&mut self, pid: i32, open: Option<File>) -> Option<(ProcTimes, File)> {
        let parse = |bytes: &Vec<u8>| {
            parse_stat(&String::from_utf8_lossy(bytes)).map(|s| ProcTimes::from(&s))
        };
        if let Some(file) = open {
            if read_all_at_zero(&file, &mut self.bytes).is_ok() {
                if let Some(times) = parse(&self.bytes) {
                    return Some((times, file));
                }
            }
        }
        let file = File::open(self.root.join(pid.to_string()).join("stat")).ok()?;
        read_all_at_zero(&file, &mut self.bytes).ok()?;
        parse(&self.bytes).map(|times| (times, file))
    }

    /// CPU ticks the guest tree used since the previous sample; keeps the
    /// per-process baseline for the next one.
    fn guest_ticks(&mut self, guest_pids: &[i32]) -> u64 {
        let mut previous = std::mem::take(&mut self.guests);
        let baseline: Vec<(i32, ProcTimes)> = previous.iter().map(|(&p, g)| (p, g.times)).collect();
        let mut now: HashMap<i32, GuestProcess> = HashMap::with_capacity(guest_pids.len());
        let mut used: u64 = 0;
        // How much each still-known process's reaped-children counter grew.
        let mut reaped_growth: HashMap<i32, u64> = HashMap::new();
        for &pid in guest_pids {
            if now.contains_key(&pid) {
                continue;
            }
            let prev = previous.remove(&pid);
            let prev_times = prev.as_ref().map(|p| p.times);
            let Some((times, stat)) = self.read_guest(pid, prev.map(|p| p.stat)) else {
                continue;
            };
            match prev_times {
                Some(prev) if prev.start == times.start => {
                    used += times.own.saturating_sub(prev.own);
                    let growth = times.reaped.saturating_sub(prev.reaped);
                    used += growth;
                    reaped_growth.insert(pid, growth);
                }
                // Born since the previous sample: its whole life is in this interval.
                _ if times.start >= self.prev_uptime => used += times.own + times.reaped,
                // Older but never seen: no baseline yet, so nothing can be attributed.
                _ => {}
            }
            now.insert(pid, GuestProcess { times, stat });
        }
        // A guest process that ended and was waited for by a parent in the
        // tree moved its whole life into the parent's reaped counter, which was
        // just counted; the part already counted at earlier samples must come
        // off again, but never more than the parent's counter actually grew.
        let mut overlap: u64 = 0;
        for (pid, prev) in &baseline {
            if now.contains_key(pid) {
                continue;
            }
            if let Some(growth) = reaped_growth.get_mut(&prev.ppid) {
                let credit = (prev.own + prev.reaped).min(*growth);
                *growth -= credit;
                overlap += credit;
            }
        }
        self.guests = now;
        used.saturating_sub(overlap)
    }
}

impl LoadSource for ProcLoadSource {
    fn sample(&mut self, guest_pids: &[i32]) -> Result<RawSample, SampleError> {
        let cpu = self.read_cpu()?;
        let uptime = self.read_uptime()?;
        let total = cpu.total.saturating_sub(self.prev_cpu.total);
        if total == 0 {
            return Err(SampleError::TooSoon);
        }
        let busy = total.saturating_sub(cpu.idle.saturating_sub(self.prev_cpu.idle));
        let guest = self.guest_ticks(guest_pids);
        self.prev_cpu = cpu;
        self.prev_uptime = uptime;
        let host = busy.saturating_sub(guest);
        let load = (host as f64 / total as f64 * 100.0).clamp(0.0, 100.0);
        Ok(RawSample {
            cpu: load,
            free_mib: self.read_available_mib()?,
        })
    }

    fn guest_tree(&mut self, scope: &ProcessScope) -> Vec<i32> {
        match scope {
            // Keeps the fake `/proc` of the tests in play.
            ProcessScope::Tree {
                root,
                whole_session: false,
            } => crate::procfs::process_tree_in(&self.root, &[*root]),
            other => other.pids(),
        }
    }
}

/// Reads an open file from its start to its end into `bytes` with positioned
/// reads, so the same descriptor can be read again at the next sample.
fn read_all_at_zero(file: &File, bytes: &mut Vec<u8>) -> std::io::Result<()> {
    bytes.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = file.read_at(&mut chunk, bytes.len() as u64)?;
        if n == 0 {
            return Ok(());
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// USER_HZ, the tick unit of `/proc`; 100 on every mainstream architecture.
fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf only reads a configuration value and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The aggregate `cpu` line of `/proc/stat`. Guest and guest_nice are left
/// out: the kernel already counts them inside user and nice.
fn parse_cpu_line(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if fields.len() < 4 {
        return None;
    }
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some(CpuTimes {
        total: fields.iter().sum(),
        idle,
    })
}

/// Seconds since boot, the first number of `/proc/uptime`.
fn parse_uptime_secs(uptime: &str) -> Option<f64> {
    uptime
        .split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::{process_tree, process_tree_in};
    use std::fs;
    use tempfile::TempDir;

    const MEMINFO: &str = "MemTotal:        8000000 kB\nMemFree:          100000 kB\nMemAvailable:    2048000 kB\nBuffers:           10000 kB\n";

    #[test]
    fn parses_the_aggregate_cpu_line() {
        let stat = "cpu  100 5 50 800 20 1 2 3 40 0\ncpu0 50 2 25 400 10 0 1 1 20 0\nintr 1\n";
        let t = parse_cpu_line(stat).unwrap();
        assert_eq!(t.total, 100 + 5 + 50 + 800 + 20 + 1 + 2 + 3);
        assert_eq!(t.idle, 820);
        assert!(parse_cpu_line("cpu0 1 2 3 4\n").is_none());
        assert!(parse_cpu_line("cpu  1 x 3 4\n").is_none());
    }

    #[test]
    fn parses_proc_stat_with_a_hostile_command_name() {
        let line = "4242 (a) b (c) S 17 4242 4242 0 -1 4194304 100 0 0 0 250 30 7 3 20 0 1 0 99999 1000 100";
        let stat = parse_stat(line).unwrap();
        let t = ProcTimes::from(&stat);
        assert_eq!(stat.pid, 4242);
        assert_eq!(t.ppid, 17);
        assert_eq!(t.own, 280);
        assert_eq!(t.reaped, 10);
        assert_eq!(t.start, 99999);
        assert!(parse_stat("4242 (a) S 1").is_none());
        assert!(parse_stat("").is_none());
    }

    /// A fake `/proc` the test rewrites between samples.
    struct FakeProc {
        dir: TempDir,
    }

    impl FakeProc {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join("meminfo"), MEMINFO).unwrap();
            let fake = FakeProc { dir };
            fake.machine(0, 0, 10.0);
            fake
        }

        /// Sets the machine's busy and idle ticks and the uptime (100 ticks/s).
        fn machine(&self, busy: u64, idle: u64, uptime: f64) {
            let stat = format!("cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\n");
            fs::write(self.dir.path().join("stat"), stat).unwrap();
            fs::write(
                self.dir.path().join("uptime"),
                format!("{uptime:.2} 0.00\n"),
            )
            .unwrap();
        }

        fn process(&self, pid: i32, ppid: i32, own: u64, reaped: u64, start: u64) {
            let d = self.dir.path().join(pid.to_string());
            fs::create_dir_all(d.join("task").join(pid.to_string())).unwrap();
            let line = format!(
                "{pid} (p) S {ppid} 0 0 0 -1 0 0 0 0 0 {own} 0 {reaped} 0 20 0 1 0 {start} 0 0"
            );
            fs::write(d.join("stat"), line).unwrap();
        }

        fn children(&self, pid: i32, kids: &[i32]) {
            let list: Vec<String> = kids.iter().map(|k| k.to_string()).collect();
            let f = self
                .dir
                .path()
                .join(pid.to_string())
                .join("task")
                .join(pid.to_string())
                .join("children");
            fs::write(f, list.join(" ")).unwrap();
        }

        fn end(&self, pid: i32) {
            fs::remove_dir_all(self.dir.path().join(pid.to_string())).unwrap();
        }
    }

    #[test]
    fn guest_time_is_subtracted_and_reaped_children_are_not_counted_twice() {
        let fake = FakeProc::new();
        let mut src = ProcLoadSource::with_root(fake.dir.path(), 100).unwrap();
        // Guest 10 and its child 11 both start after the baseline (tick 1000).

        // Interval 1: 1000 ticks, 600 busy of which the new guest used 300.
        fake.machine(600, 400, 15.0);
        fake.process(10, 1, 200, 0, 1_200);
        fake.process(11, 10, 100, 0, 1_300);
        let s = src.sample(&[10, 11]).unwrap();
        assert!((s.cpu - 30.0).abs() < 1e-9, "cpu {}", s.cpu);
        assert_eq!(s.free_mib, 2000);

        // Interval 2: child 11 used 50 more and exited; parent 10 reaped it
        // (its reaped counter gains the child's whole 150) and used 100 itself.
        // Guest use is 150; busy 400 of 1000 leaves 250 for the host.
        fake.machine(1000, 1000, 25.0);
        fake.process(10, 1, 300, 150, 1_200);
        fake.end(11);
        let s = src.sample(&[10]).unwrap();
        assert!((s.cpu - 25.0).abs() < 1e-9, "cpu {}", s.cpu);

        // Without the guest list the same interval counts everything busy.
        fake.machine(1500, 1500, 35.0);
        fake.process(10, 1, 400, 150, 1_200);
        let s = src.sample(&[]).unwrap();
        assert!((s.cpu - 50.0).abs() < 1e-9, "cpu {}", s.cpu);
    }

    #[test]
    fn an_old_process_seen_first_is_only_a_baseline_and_a_reused_pid_is_new() {
        let fake = FakeProc::new();
        fake.process(20, 1, 5_000, 0, 100); // Long-running before the monitor started.
        let mut src = ProcLoadSource::with_root(fake.dir.path(), 100).unwrap();
        fake.machine(500, 500, 20.0);
        let s = src.sample(&[20]).unwrap();
        assert!(
            (s.cpu - 50.0).abs() < 1e-9,
            "its 5000 old ticks must not be subtracted"
        );
        // The pid is reused by a process born in this interval (start 2100 > 2000).
        fake.machine(1000, 1000, 30.0);
        fake.process(20, 1, 200, 0, 2_100);
        let s = src.sample(&[20]).unwrap();
        assert!((s.cpu - 30.0).abs() < 1e-9, "cpu {}", s.cpu);
    }

    #[test]
    fn no_elapsed_ticks_is_too_soon() {
        let fake = FakeProc::new();
        let mut src = ProcLoadSource::with_root(fake.dir.path(), 100).unwrap();
        assert!(matches!(src.sample(&[]), Err(SampleError::TooSoon)));
    }

    #[test]
    fn missing_files_are_read_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            ProcLoadSource::with_root(dir.path(), 100),
            Err(SampleError::Read { .. })
        ));
        fs::write(dir.path().join("stat"), "garbage\n").unwrap();
        fs::write(dir.path().join("uptime"), "1.00 1.00\n").unwrap();
        fs::write(dir.path().join("meminfo"), MEMINFO).unwrap();
        assert!(matches!(
            ProcLoadSource::with_root(dir.path(), 100),
            Err(SampleError::Parse { .. })
        ));
    }

    #[test]
    fn process_tree_walks_children_files_and_falls_back_to_parent_links() {
        let fake = FakeProc::new();
        for (pid, ppid) in [(1, 0), (10, 1), (11, 10), (12, 10), (13, 11), (30, 1)] {
            fake.process(pid, ppid, 0, 0, 0);
        }
        let mut expected = vec![10, 11, 12, 13];
        // Without children files: the parent-link scan.
        let mut tree = process_tree_in(fake.dir.path(), &[10, 999]);
        tree.sort_unstable();
        assert_eq!(tree, expected);
        // With them (and a stale entry for a process that is gone).
        for (pid, kids) in [
            (1, vec![10, 30]),
            (10, vec![11, 12]),
            (11, vec![13, 77]),
            (12, vec![]),
            (13, vec![]),
            (30, vec![]),
        ] {
            fake.children(pid, &kids);
        }
        let mut tree = process_tree_in(fake.dir.path(), &[10]);
        tree.sort_unstable();
        assert_eq!(tree, expected);
        expected.clear();
        assert_eq!(process_tree_in(fake.dir.path(), &[]), expected);
    }

    #[test]
    fn real_proc_gives_a_plausible_sample_and_finds_this_process() {
        let mut src = ProcLoadSource::new().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let s = src.sample(&[]).unwrap();
        assert!((0.0..=100.0).contains(&s.cpu));
        assert!(s.free_mib > 0);
        let me = std::process::id() as i32;
        assert_eq!(process_tree(&[me])[0], me);
    }
}
