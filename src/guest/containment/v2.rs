//! cgroup v2 job groups: the node's base group with the controllers handed
//! down to it (the node moves itself into a leaf where the kernel's "no
//! internal processes" rule asks), and one job's group, frozen with
//! `cgroup.freeze` and ended with `cgroup.kill`.
//!
//! It must not know about v1 hierarchies or which containment the node
//! chose; [`super::Containment`] decides and makes the groups.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use super::files::{counter, rmdir_retrying, wait_empty, write_file};
use super::{cpu_quota_us, Containment, JobGroup, CPU_PERIOD_US};

/// The v2 job base under the node's own cgroup `own`, with `pids` and
/// `memory` enabled for its children; `None` when they are not delegated.
pub(super) fn v2_base(own: &Path, name: &str) -> io::Result<Option<Containment>> {
    let available = fs::read_to_string(own.join("cgroup.controllers"))?;
    let has = |c: &str| available.split_whitespace().any(|a| a == c);
    if !(has("pids") && has("memory")) {
        return Ok(None);
    }
    let wanted: Vec<&str> = ["pids", "memory", "cpu"]
        .into_iter()
        .filter(|c| has(c))
        .collect();
    let enable = wanted
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    if let Err(e) = write_file(&own.join("cgroup.subtree_control"), &enable) {
        // "No internal processes": a cgroup with members cannot hand
        // controllers to children, so the node moves itself into a leaf.
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(e);
        }
        let leaf = own.join("gleaner-supervisor");
        fs::create_dir_all(&leaf)?;
        write_file(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
        write_file(&own.join("cgroup.subtree_control"), &enable)?;
    }
    let base = own.join(name);
    fs::create_dir_all(&base)?;
    write_file(&base.join("cgroup.subtree_control"), &enable)?;
    // Whether `cpu.idle` exists shows only in a child; `create` falls back
    // to the lowest weight where it does not.
    let cpu_idle = wanted.contains(&"cpu");
    if cpu_idle && write_file(&base.join("cpu.idle"), "1").is_err() {
        let _ = write_file(&base.join("cpu.weight"), "1");
    }
    Ok(Some(Containment::V2 { base, cpu_idle }))
}

pub(super) fn kill_v2(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    write_file(&dir.join("cgroup.kill"), "1")?;
    wait_empty(dir)
}

/// A job's cgroup v2.
#[derive(Debug)]
pub(super) struct V2Group {
    pub(super) dir: PathBuf,
    pub(super) limit: u64,
    pub(super) join: Vec<File>,
}

impl JobGroup for V2Group {
    fn limit_cpu(&self, percent: u64) -> io::Result<()> {
        write_file(
            &self.dir.join("cpu.max"),
            &format!("{} {CPU_PERIOD_US}", cpu_quota_us(percent)),
        )
    }

    fn join_fds(&self) -> Vec<RawFd> {
        self.join.iter().map(|f| f.as_raw_fd()).collect()
    }
    fn procs_files(&self) -> Vec<PathBuf> {
        vec![self.dir.join("cgroup.procs")]
    }
    fn kill_all(&self) -> io::Result<()> {
        kill_v2(&self.dir)
    }
    fn start_kill(&self) {
        let _ = write_file(&self.dir.join("cgroup.kill"), "1");
    }
    fn set_frozen(&self, frozen: bool) -> io::Result<()> {
        write_file(
            &self.dir.join("cgroup.freeze"),
            if frozen { "1" } else { "0" },
        )
    }
    fn memory_kills(&self) -> u64 {
        let events = fs::read_to_string(self.dir.join("memory.events")).unwrap_or_default();
        counter(&events, "oom_kill").max(counter(&events, "oom_group_kill"))
    }
    fn memory_limit(&self) -> u64 {
        self.limit
    }
    fn remove(&mut self) -> io::Result<()> {
        self.join.clear();
        if !self.dir.exists() {
            return Ok(());
        }
        let killed = self.kill_all();
        rmdir_retrying(&self.dir).and(killed)
    }
}
