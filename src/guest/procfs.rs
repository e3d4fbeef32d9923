//! Reading (and, for autogroups, writing) Linux `/proc` for the guest
//! supervisor: process stat lines, thread lists, autogroup nice values and the
//! guest's process tree.
//!
//! This module knows the `/proc` file formats and nothing about policy, jobs
//! or the node. A process that vanishes while it is being read is simply
//! skipped: guest processes come and go at any moment.

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
