//! The one place that knows Linux's `/proc` formats: `/proc/PID/stat` (one
//! parser for the monitor and the supervisor), `/proc/meminfo`, thread lists,
//! autogroups, the boot id, and the walks that find a guest's processes
//! ([`ProcessScope`]: its cgroup's member list, or its process tree).
//!
//! It knows nothing about policy, jobs or the node. A process that vanishes
//! while it is being read is simply skipped: guest processes come and go at
//! any moment.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The fields of `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) the supervisor uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 1: process (or thread) id.
    pub pid: i32,
    /// Field 3: `R`, `S`, `D`, `T` (stopped), `Z` (zombie) and so on.
    pub state: char,
    /// Field 4: parent process id.
    pub ppid: i32,
    /// Field 5: process group id.
    pub pgrp: i32,
    /// Field 6: session id.
    pub session: i32,
    /// Field 14: user-mode CPU time in clock ticks.
    pub utime: u64,
    /// Field 15: kernel-mode CPU time in clock ticks.
    pub stime: u64,
    /// Fields 16 + 17: CPU time of children it has waited for, in clock ticks.
    pub reaped: u64,
    /// Field 19: nice value, -20..=19.
    pub nice: i32,
    /// Field 22: start time after boot in clock ticks; tells a reused pid apart.
    pub starttime: u64,
}

impl ProcStat {
    /// True for a process that has not exited (zombies and dead entries are gone for us).
    pub fn is_alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses one stat line. The command name (field 2) is in parentheses and may
/// itself contain spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<ProcStat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let pid = line.get(..open)?.trim().parse().ok()?;
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // `rest[0]` is field 3, so field N is `rest[N - 3]`.
    let field = |n: usize| rest.get(n - 3).copied();
    Some(ProcStat {
        pid,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        session: field(6)?.parse().ok()?,
        utime: field(14)?.parse().ok()?,
        stime: field(15)?.parse().ok()?,
        reaped: field(16)?
            .parse::<u64>()
            .ok()?
            .saturating_add(field(17)?.parse().ok()?),
        nice: field(19)?.parse().ok()?,
        starttime: field(22)?.parse().ok()?,
    })
}

/// Reads `/proc/PID/stat`; `None` when the process is gone.
pub fn read_stat(pid: i32) -> Option<ProcStat> {
    read_stat_file(&Path::new("/proc").join(pid.to_string()).join("stat"))
}

fn read_stat_file(path: &Path) -> Option<ProcStat> {
    fs::read_to_string(path).ok().and_then(|s| parse_stat(&s))
}

/// The stat lines of every thread of `pid` (empty when the process is gone).
pub fn thread_stats(pid: i32) -> Vec<ProcStat> {
    let dir = Path::new("/proc").join(pid.to_string()).join("task");
    numeric_entries(&dir)
        .into_iter()
        .filter_map(|tid| read_stat_file(&dir.join(tid.to_string()).join("stat")))
        .collect()
}

/// The stat lines of every process on the machine.
pub fn all_processes() -> Vec<ProcStat> {
    numeric_entries(Path::new("/proc"))
        .into_iter()
        .filter_map(read_stat)
        .collect()
}

fn numeric_entries(dir: &Path) -> Vec<i32> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// True when some live process belongs to process group `pgid` or session `pgid`.
pub fn group_has_members(pgid: i32) -> bool {
    all_processes()
        .iter()
        .any(|p| p.is_alive() && (p.pgrp == pgid || p.session == pgid))
}

/// The live processes of a guest: its leader `root`, every descendant of it
/// (found through parent links, so a child that left the group is still
/// found while its parent lives), and every process in the leader's process
/// group or session (so an orphaned grandchild, reparented to init, is still
/// found). Sorted by pid.
pub fn guest_tree(root: i32, pgid: i32) -> Vec<ProcStat> {
    tree_of(&all_processes(), root, pgid)
}

fn tree_of(procs: &[ProcStat], root: i32, pgid: i32) -> Vec<ProcStat> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut members: BTreeSet<i32> = procs
        .iter()
        .filter(|p| p.pid == root || p.pgrp == pgid || p.session == pgid)
        .map(|p| p.pid)
        .collect();
    let mut stack: Vec<i32> = members.iter().copied().collect();
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if members.insert(child) {
                stack.push(child);
            }
        }
    }
    procs
        .iter()
        .filter(|p| p.is_alive() && members.contains(&p.pid))
        .cloned()
        .collect()
}

/// The processes in the trees rooted at `roots` (roots included, those that
/// no longer exist left out), read from the real `/proc`.
pub fn process_tree(roots: &[i32]) -> Vec<i32> {
    process_tree_in(Path::new("/proc"), roots)
}

/// [`process_tree`] over a `/proc`-shaped tree at `root`.
pub fn process_tree_in(root: &Path, roots: &[i32]) -> Vec<i32> {
    if roots.is_empty() {
        return Vec::new();
    }
    match walk_children_files(root, roots) {
        Some(tree) => tree,
        // Kernels without CONFIG_PROC_CHILDREN: scan every process's parent.
        None => walk_parent_links(root, roots),
    }
}

/// Breadth-first walk through `/proc/<pid>/task/<tid>/children`: cheap, as it
/// reads only the tree's own files. `None` when the kernel lacks those files.
fn walk_children_files(root: &Path, roots: &[i32]) -> Option<Vec<i32>> {
    let mut seen = BTreeSet::new();
    let mut queue: std::collections::VecDeque<i32> = roots.iter().copied().collect();
    let mut tree = Vec::new();
    let mut buf = String::new();
    while let Some(pid) = queue.pop_front() {
        if !seen.insert(pid) {
            continue;
        }
        let Ok(tasks) = fs::read_dir(root.join(pid.to_string()).join("task")) else {
            continue; // Gone, or never was.
        };
        tree.push(pid);
        for task in tasks.flatten() {
            buf.clear();
            match fs::File::open(task.path().join("children"))
                .and_then(|mut f| io::Read::read_to_string(&mut f, &mut buf))
            {
                Ok(_) => queue.extend(buf.split_whitespace().filter_map(|c| c.parse::<i32>().ok())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // The task dir exists but has no children file: unsupported,
                    // unless the thread exited between listing and reading.
                    if task.path().exists() {
                        return None;
                    }
                }
                Err(_) => {}
            }
        }
    }
    Some(tree)
}

/// Builds the parent → children map from every `/proc/<pid>/stat` and walks it.
fn walk_parent_links(root: &Path, roots: &[i32]) -> Vec<i32> {
    let procs: Vec<ProcStat> = numeric_entries(root)
        .into_iter()
        .filter_map(|pid| read_stat_file(&root.join(pid.to_string()).join("stat")))
        .collect();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in &procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut seen = BTreeSet::new();
    let mut queue: std::collections::VecDeque<i32> = roots
        .iter()
        .copied()
        .filter(|r| procs.iter().any(|p| p.pid == *r))
        .collect();
    let mut tree = Vec::new();
    while let Some(pid) = queue.pop_front() {
        if seen.insert(pid) {
            tree.push(pid);
            queue.extend(children.get(&pid).into_iter().flatten().copied());
        }
    }
    tree
}

/// Where a guest's processes are found: the one description the supervisor
/// hands to the monitor, so each sample resolves it once ([`ProcessScope::pids`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProcessScope {
    /// No guest runs.
    #[default]
    Nothing,
    /// Every process listed in these `cgroup.procs` files (a contained job:
    /// escapees that left the session are still members).
    Cgroup(Vec<PathBuf>),
    /// The tree under `root` through children links. With `whole_session`,
    /// also every member of the group and session `root` leads, found by a
    /// scan of all of `/proc` (no cgroup and no PID namespace holds the job).
    Tree { root: i32, whole_session: bool },
}

impl ProcessScope {
    /// The live processes of the scope now, sorted and without duplicates.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = match self {
            ProcessScope::Nothing => Vec::new(),
            ProcessScope::Cgroup(files) => {
                let mut pids = Vec::new();
                for f in files {
                    if let Ok(text) = fs::read_to_string(f) {
                        pids.extend(
                            text.split_whitespace()
                                .filter_map(|p| p.parse::<i32>().ok()),
                        );
                    }
                }
                pids
            }
            ProcessScope::Tree {
                root,
                whole_session: true,
            } => guest_tree(*root, *root)
                .into_iter()
                .map(|p| p.pid)
                .collect(),
            ProcessScope::Tree {
                root,
                whole_session: false,
            } => process_tree(&[*root]),
        };
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// The fields of `/proc/meminfo` the node uses, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meminfo {
    pub total_kib: u64,
    /// MemAvailable, or on kernels before 3.14 the usual approximation
    /// MemFree + Buffers + Cached.
    pub available_kib: u64,
}

/// Parses `/proc/meminfo`; `None` without MemTotal or any estimate of what is available.
pub fn parse_meminfo(meminfo: &str) -> Option<Meminfo> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let available_kib = field("MemAvailable").or_else(|| {
        let free = field("MemFree")?;
        Some(free + field("Buffers").unwrap_or(0) + field("Cached").unwrap_or(0))
    })?;
    Some(Meminfo {
        total_kib: field("MemTotal")?,
        available_kib,
    })
}

/// Reads `/proc/meminfo`.
pub fn read_meminfo() -> Option<Meminfo> {
    parse_meminfo(&fs::read_to_string("/proc/meminfo").ok()?)
}

/// A process's autogroup as shown by `/proc/PID/autogroup`: `/autogroup-N nice X`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Autogroup {
    /// The autogroup's id (N).
    pub id: u64,
    /// Its nice value, which weighs the whole group against other sessions.
    pub nice: i32,
}

/// Parses the autogroup line.
pub fn parse_autogroup(line: &str) -> Option<Autogroup> {
    let rest = line.trim().strip_prefix("/autogroup-")?;
    let (id, nice) = rest.split_once(" nice ")?;
    Some(Autogroup {
        id: id.trim().parse().ok()?,
        nice: nice.trim().parse().ok()?,
    })
}

fn autogroup_path(pid: i32) -> PathBuf {
    Path::new("/proc").join(pid.to_string()).join("autogroup")
}

/// The autogroup of `pid`, or `None` when the kernel has no autogroups
/// (built without them or `kernel.sched_autogroup_enabled=0`) or the process is gone.
pub fn read_autogroup(pid: i32) -> Option<Autogroup> {
    if !autogroups_enabled() {
        return None;
    }
    fs::read_to_string(autogroup_path(pid))
        .ok()
        .and_then(|s| parse_autogroup(&s))
}

/// Sets the nice value of the autogroup `pid` belongs to.
pub fn write_autogroup_nice(pid: i32, nice: i32) -> io::Result<()> {
    fs::write(autogroup_path(pid), nice.to_string())
}

/// True when the scheduler groups processes by session (autogroup).
pub fn autogroups_enabled() -> bool {
    fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .map(|s| s.trim() == "1")
        .unwrap_or(false)
}

/// The boot id, so a pid recorded before a reboot is never taken for a live one.
pub fn boot_id() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, ppid: i32, pgrp: i32) -> ProcStat {
        ProcStat {
            pid,
            state: 'S',
            ppid,
            pgrp,
            session: pgrp,
            utime: 0,
            stime: 0,
            reaped: 0,
            nice: 0,
            starttime: 0,
        }
    }

    #[test]
    fn parses_a_stat_line_with_a_tricky_command_name() {
        let line = "4242 (a) b (c)) T 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 0 0 39 19 \
                    1 0 123456 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let s = parse_stat(line).expect("parses");
        assert_eq!(s.pid, 4242);
        assert_eq!(s.state, 'T');
        assert_eq!((s.ppid, s.pgrp, s.session), (1, 4242, 4242));
        assert_eq!((s.utime, s.stime), (7, 3));
        assert_eq!(s.nice, 19);
        assert_eq!(s.starttime, 123456);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn reads_our_own_stat() {
        let me = read_stat(std::process::id() as i32).expect("own stat");
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(me.is_alive());
        assert!(!thread_stats(me.pid).is_empty());
    }

    #[test]
    fn parses_meminfo_and_falls_back_on_old_kernels() {
        let now = "MemTotal:  8000 kB\nMemFree: 100 kB\nMemAvailable:  2048 kB\n";
        assert_eq!(
            parse_meminfo(now),
            Some(Meminfo {
                total_kib: 8000,
                available_kib: 2048
            })
        );
        let old = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 30 kB\n";
        assert_eq!(parse_meminfo(old).map(|m| m.available_kib), Some(150));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn parses_autogroup_lines() {
        assert_eq!(
            parse_autogroup("/autogroup-57 nice 19\n"),
            Some(Autogroup { id: 57, nice: 19 })
        );
        assert_eq!(parse_autogroup("nonsense"), None);
    }

    #[test]
    fn tree_follows_parents_and_the_group() {
        let procs = vec![
            stat(1, 0, 1),
            stat(10, 1, 10),  // guest leader
            stat(11, 10, 10), // child in the group
            stat(12, 11, 12), // grandchild that left the group: found by parent link
            stat(13, 1, 10),  // orphan reparented to init, still in the group
            stat(20, 1, 20),  // unrelated
        ];
        let pids: Vec<i32> = tree_of(&procs, 10, 10).iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![10, 11, 12, 13]);
    }
}
