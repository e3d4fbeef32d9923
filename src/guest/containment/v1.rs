//! cgroup v1 job groups: one directory per job in each of the `pids`,
//! `memory`, `cpu` and `freezer` hierarchies (and the unified v2 one where
//! it has `cgroup.kill`), ended by freezing, SIGKILLing every member and
//! thawing.
//!
//! It must not know about the node's choice of containment or about v2
//! groups; [`super::Containment`] decides and makes the groups.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::files::{counter, procs_in, rmdir_retrying, wait_empty, write_file};
use super::{cpu_quota_us, JobGroup, CPU_PERIOD_US};

/// A job's directories in each v1 hierarchy.
#[derive(Debug)]
pub(super) struct V1Dirs {
    pub(super) pids: PathBuf,
    pub(super) memory: PathBuf,
    pub(super) cpu: PathBuf,
    pub(super) freezer: PathBuf,
    pub(super) unified: Option<PathBuf>,
}

impl V1Dirs {
    pub(super) fn all(&self) -> Vec<&PathBuf> {
        let mut v = vec![&self.pids, &self.memory, &self.cpu, &self.freezer];
        v.extend(self.unified.as_ref());
        v
    }

    /// `cgroup.kill` on the unified group where there is one; then freeze
    /// (so nothing forks between the listing and the signal), SIGKILL every
    /// member, thaw so the signals are delivered, and wait until it is empty.
    pub(super) fn kill(&self) -> io::Result<()> {
        if let Some(u) = self.unified.as_ref().filter(|u| u.exists()) {
            let _ = write_file(&u.join("cgroup.kill"), "1");
        }
        if !self.freezer.exists() {
            return Ok(());
        }
        if procs_in(&self.freezer).is_empty() && procs_in(&self.pids).is_empty() {
            // Nothing to freeze: a process cannot join from outside.
            return Ok(());
        }
        let state = self.freezer.join("freezer.state");
        let frozen = write_file(&state, "FROZEN").is_ok() && {
            let deadline = Instant::now() + Duration::from_millis(500);
            loop {
                let s = fs::read_to_string(&state).unwrap_or_default();
                if s.trim() == "FROZEN" {
                    break true;
                }
                if Instant::now() >= deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        for round in 0..50 {
            let mut pids = procs_in(&self.freezer);
            pids.extend(procs_in(&self.pids));
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: a plain system call; a pid that is gone gives ESRCH.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            if frozen && round == 0 {
                let _ = write_file(&state, "THAWED");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = write_file(&state, "THAWED");
        wait_empty(&self.freezer)?;
        wait_empty(&self.pids)
    }

    pub(super) fn remove(&self) {
        for d in self.all() {
            if let Err(e) = rmdir_retrying(d) {
                tracing::warn!(dir = %d.display(), error = %e, "cannot remove a job cgroup");
            }
        }
    }
}

/// A job's cgroups v1.
#[derive(Debug)]
pub(super) struct V1Group {
    pub(super) dirs: V1Dirs,
    pub(super) limit: u64,
    pub(super) join: Vec<File>,
}

impl JobGroup for V1Group {
    fn limit_cpu(&self, percent: u64) -> io::Result<()> {
        write_file(
            &self.dirs.cpu.join("cpu.cfs_period_us"),
            &CPU_PERIOD_US.to_string(),
        )?;
        write_file(
            &self.dirs.cpu.join("cpu.cfs_quota_us"),
            &cpu_quota_us(percent).to_string(),
        )
    }

    fn join_fds(&self) -> Vec<RawFd> {
        self.join.iter().map(|f| f.as_raw_fd()).collect()
    }
    fn procs_files(&self) -> Vec<PathBuf> {
        vec![self.dirs.freezer.join("cgroup.procs")]
    }
    fn kill_all(&self) -> io::Result<()> {
        self.dirs.kill()
    }
    fn start_kill(&self) {
        if let Some(u) = self.dirs.unified.as_ref() {
            if write_file(&u.join("cgroup.kill"), "1").is_ok() {
                return;
            }
        }
        for pid in self.members() {
            // SAFETY: a plain system call; a pid that is gone gives ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    fn set_frozen(&self, frozen: bool) -> io::Result<()> {
        write_file(
            &self.dirs.freezer.join("freezer.state"),
            if frozen { "FROZEN" } else { "THAWED" },
        )
    }
    fn memory_kills(&self) -> u64 {
        let text =
            fs::read_to_string(self.dirs.memory.join("memory.oom_control")).unwrap_or_default();
        counter(&text, "oom_kill")
    }
    fn memory_limit(&self) -> u64 {
        self.limit
    }
    fn remove(&mut self) -> io::Result<()> {
        self.join.clear();
        let killed = self.dirs.kill();
        self.dirs.remove();
        killed
    }
}
