//! Job containment: a guest job is a group of processes the kernel holds
//! together, so that ending the job ends every process it made (escapees
//! that called `setsid` and double-forked included), and so that the job as
//! a whole has a process limit, a memory limit and the idle CPU class.
//!
//! One trait, [`JobGroup`], with two backends found at start-up by
//! [`Containment::detect`]:
//! - **cgroup v2** (volunteers' distributions): one cgroup per job under the
//!   node's own (delegated) cgroup, with `pids.max`, `memory.max`,
//!   `memory.swap.max = 0`, `memory.oom.group = 1`, `cpu.idle = 1` (else
//!   `cpu.weight = 1`), frozen with `cgroup.freeze` and ended with `cgroup.kill`.
//! - **cgroup v1** (hybrid hosts): one cgroup per job in each of the `pids`,
//!   `memory`, `cpu` and `freezer` hierarchies; ended by freezing, SIGKILLing
//!   every member and thawing; where the v2 unified hierarchy is mounted too
//!   (without controllers) the job also gets a cgroup there, and its
//!   `cgroup.kill` ends the job in one write.
//!
//! Where neither can be made the supervisor falls back to a PID namespace
//! (see `launch`). Groups are named after the job under `gleaner-<key>`,
//! where the key is a hash of the node's data dir, so that a restarted node
//! finds and kills whatever its previous run left ([`Containment::kill_leftovers`]).
//!
//! This module knows cgroup files and nothing of policy, jobs' contents or
//! the node. It allocates and reads files: it runs in the supervisor, never
//! between `fork` and `exec` (the child only writes "0" to descriptors
//! opened here).
//!
//! This file holds the choice of containment, the trait and the report;
//! `v2` and `v1` hold the two backends, `mounts` the reading of the
//! hierarchies and `files` the cgroup file primitives.

mod files;
mod mounts;
mod v1;
mod v2;

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use files::{fresh_dir, open_procs, write_file};
use mounts::{parse_cgroup_mounts, parse_own_cgroups};
use v1::{V1Dirs, V1Group};
use v2::{kill_v2, v2_base, V2Group};

/// What the group allows the job as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    /// Most processes and threads at once (`pids.max`).
    pub pids_max: u64,
    /// Most memory, bytes (`memory.max` / `memory.limit_in_bytes`).
    pub memory_max_bytes: u64,
}

/// One job's group of processes.
pub trait JobGroup: Send + fmt::Debug {
    /// Open `cgroup.procs` files: a new guest joins the group by writing "0"
    /// to each between `fork` and `exec`, before it drops root.
    fn join_fds(&self) -> Vec<RawFd>;
    /// The member lists, for the monitor to find every process of the job.
    fn procs_files(&self) -> Vec<PathBuf>;
    /// The processes in the group now.
    fn members(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .procs_files()
            .iter()
            .filter_map(|f| fs::read_to_string(f).ok())
            .flat_map(|t| {
                t.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
    /// Kills every process in the group and waits (briefly) until none is left.
    /// Blocks up to a few seconds on cgroup v1: never call it on the node's loop.
    fn kill_all(&self) -> io::Result<()>;
    /// Starts killing every process in the group without waiting: one write
    /// to `cgroup.kill` where there is one, else one SIGKILL to each member.
    /// [`JobGroup::remove`] finishes the work off the loop.
    fn start_kill(&self);
    /// Stops (or lets run again) every process of the group at once.
    fn set_frozen(&self, frozen: bool) -> io::Result<()>;
    /// How many processes the kernel killed because the group went over its
    /// memory limit (0 when it never did).
    fn memory_kills(&self) -> u64;
    /// The memory limit in force, bytes.
    fn memory_limit(&self) -> u64;
    /// Kills what is left and removes the group's directories.
    fn remove(&mut self) -> io::Result<()>;
    /// Caps the group's CPU at `percent` of one core per
    /// [`CPU_PERIOD_US`] (`cpu.max` on v2, `cpu.cfs_quota_us` on v1); an
    /// error when the cpu controller is not there.
    fn limit_cpu(&self, percent: u64) -> io::Result<()>;
}

/// The period of a cgroup CPU quota, µs (the kernel's default).
pub const CPU_PERIOD_US: u64 = 100_000;

/// The quota of `percent` of one core per [`CPU_PERIOD_US`], µs (at least
/// the kernel's 1 ms minimum).
pub fn cpu_quota_us(percent: u64) -> u64 {
    (CPU_PERIOD_US * percent.min(100) / 100).max(1_000)
}

/// Which containment the node can give its guests (decided once at start-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// Pure cgroup v2 with the controllers delegated to the node: `base` is
    /// the node's `gleaner-<key>` cgroup; `cpu_idle` when the cpu controller
    /// is delegated too (jobs get `cpu.idle = 1`, else `cpu.weight = 1`).
    V2 { base: PathBuf, cpu_idle: bool },
    /// cgroup v1 hierarchies (and the unified v2 one for `cgroup.kill`).
    V1 {
        pids: PathBuf,
        memory: PathBuf,
        cpu: PathBuf,
        freezer: PathBuf,
        /// The unified v2 `gleaner-<key>` cgroup, when it has `cgroup.kill`.
        unified_kill: Option<PathBuf>,
        cpu_idle: bool,
    },
    /// No cgroup can be made here; the reason, for `status`.
    None { reason: String },
}

/// The containment layers in force for guests on this node, for `status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainmentReport {
    /// "cgroup v2", "cgroup v1" or "none".
    pub cgroup: String,
    /// The job group's controls: `pids.max`, `memory.max`, `cpu.idle`, `cgroup.kill`, ...
    pub group_controls: Vec<String>,
    /// Why there is no cgroup, when there is none.
    pub no_cgroup_reason: Option<String>,
    /// Namespaces a guest gets: user, pid, mount, ipc, net (net only without network).
    pub namespaces: Vec<String>,
    /// The guest's filesystem view: "new root" (system dirs and its job dir only),
    /// else what Landlock confines.
    pub view: String,
    /// Landlock ABI version in force, if any.
    pub landlock_abi: Option<i32>,
    /// The quota on the job's work dir, bytes, when one is enforced.
    pub work_quota_bytes: Option<u64>,
}

impl fmt::Display for ContainmentReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job group: {}", self.cgroup)?;
        if !self.group_controls.is_empty() {
            write!(f, " ({})", self.group_controls.join(", "))?;
        }
        if let Some(reason) = &self.no_cgroup_reason {
            write!(f, " ({reason})")?;
        }
        if self.namespaces.is_empty() {
            write!(f, "; namespaces: none")?;
        } else {
            write!(f, "; namespaces: {}", self.namespaces.join(", "))?;
        }
        write!(f, "; view: {}", self.view)?;
        match self.landlock_abi {
            Some(abi) => write!(f, "; Landlock ABI {abi}")?,
            None => write!(f, "; no Landlock")?,
        }
        match self.work_quota_bytes {
            Some(q) => write!(f, "; work dir quota {} MiB", q / (1024 * 1024)),
            None => write!(f, "; no work dir quota"),
        }
    }
}

impl Containment {
    /// Finds the cgroups this node can make for its jobs. `key` names the
    /// node's group (stable across restarts of the same node).
    pub fn detect(key: &str) -> Containment {
        let name = format!("gleaner-{key}");
        let mounts = match fs::read_to_string("/proc/self/mountinfo") {
            Ok(m) => parse_cgroup_mounts(&m),
            Err(e) => {
                return Containment::None {
                    reason: format!("cannot read /proc/self/mountinfo: {e}"),
                }
            }
        };
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let own = parse_own_cgroups(&own);
        let v2_dir = mounts.iter().find(|m| m.v2).map(|m| m.dir_of(&own));
        if let Some(Some(dir)) = &v2_dir {
            match v2_base(dir, &name) {
                Ok(Some(c)) => return c,
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "no cgroup v2 job groups"),
            }
        }
        let v1 = |ctrl: &str| -> Result<PathBuf, String> {
            let m = mounts
                .iter()
                .find(|m| !m.v2 && m.controllers.iter().any(|c| c == ctrl))
                .ok_or_else(|| format!("no {ctrl} controller mounted"))?;
            let dir = m
                .dir_of(&own)
                .ok_or_else(|| format!("own {ctrl} cgroup not found"))?
                .join(&name);
            fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            Ok(dir)
        };
        let found = (|| -> Result<Containment, String> {
            let pids = v1("pids")?;
            let memory = v1("memory")?;
            let cpu = v1("cpu")?;
            let freezer = v1("freezer")?;
            let unified_kill = match &v2_dir {
                Some(Some(dir)) if dir.join("cgroup.kill").exists() => {
                    let d = dir.join(&name);
                    fs::create_dir_all(&d).ok().map(|_| d)
                }
                _ => None,
            };
            let cpu_idle = cpu.join("cpu.idle").exists();
            // The node's base group competes with the owner's processes as
            // one entity: it must be idle (or minimal) too, not only the job.
            if cpu_idle {
                write_file(&cpu.join("cpu.idle"), "1").map_err(|e| e.to_string())?;
            } else {
                write_file(&cpu.join("cpu.shares"), "2").map_err(|e| e.to_string())?;
            }
            Ok(Containment::V1 {
                pids,
                memory,
                cpu,
                freezer,
                unified_kill,
                cpu_idle,
            })
        })();
        found.unwrap_or_else(|reason| Containment::None { reason })
    }

    /// No job cgroups, because the node's config turned them off.
    pub fn disabled() -> Containment {
        Containment::None {
            reason: "job cgroups turned off ([guest] job_cgroups = false)".into(),
        }
    }

    /// Removes the node's own `gleaner-<key>` groups (a clean stop, once
    /// every job group is gone), so that stopped nodes leave no trace.
    pub fn remove_base(&self) {
        let bases: Vec<&PathBuf> = match self {
            Containment::V2 { base, .. } => vec![base],
            Containment::V1 {
                pids,
                memory,
                cpu,
                freezer,
                unified_kill,
                ..
            } => {
                let mut v = vec![pids, memory, cpu, freezer];
                v.extend(unified_kill.as_ref());
                v
            }
            Containment::None { .. } => Vec::new(),
        };
        for base in bases {
            match fs::remove_dir(base) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(dir = %base.display(), error = %e, "cannot remove the node's job cgroup")
                }
            }
        }
    }

    /// True when jobs get a cgroup.
    /// Whether a job group can take a CPU quota (the cpu controller is
    /// there: always in v1's hierarchy, on v2 only when delegated).
    pub fn cpu_quota(&self) -> bool {
        match self {
            Containment::V2 { cpu_idle, .. } => *cpu_idle,
            Containment::V1 { .. } => true,
            Containment::None { .. } => false,
        }
    }

    pub fn has_cgroups(&self) -> bool {
        !matches!(self, Containment::None { .. })
    }

    /// Makes the group for `job` with `limits`. A group of that name left
    /// from before is killed and replaced.
    pub fn create(&self, job: &str, limits: GroupLimits) -> io::Result<Box<dyn JobGroup>> {
        match self {
            Containment::V2 { base, cpu_idle } => {
                let dir = base.join(job);
                fresh_dir(&dir, kill_v2)?;
                let group = V2Group {
                    dir,
                    limit: limits.memory_max_bytes,
                    join: Vec::new(),
                };
                let set = |file: &str, value: &str| write_file(&group.dir.join(file), value);
                set("pids.max", &limits.pids_max.to_string())?;
                set("memory.max", &limits.memory_max_bytes.to_string())?;
                // Optional: absent without swap accounting or on older kernels.
                let _ = set("memory.swap.max", "0");
                let _ = set("memory.oom.group", "1");
                if *cpu_idle && set("cpu.idle", "1").is_err() {
                    set("cpu.weight", "1")?;
                }
                let join = vec![open_procs(&group.dir)?];
                Ok(Box::new(V2Group { join, ..group }))
            }
            Containment::V1 {
                pids,
                memory,
                cpu,
                freezer,
                unified_kill,
                cpu_idle,
            } => {
                let dirs = V1Dirs {
                    pids: pids.join(job),
                    memory: memory.join(job),
                    cpu: cpu.join(job),
                    freezer: freezer.join(job),
                    unified: unified_kill.as_ref().map(|u| u.join(job)),
                };
                if dirs.pids.exists() || dirs.freezer.exists() {
                    let _ = dirs.kill();
                    dirs.remove();
                }
                for d in dirs.all() {
                    fs::create_dir_all(d)?;
                }
                write_file(&dirs.pids.join("pids.max"), &limits.pids_max.to_string())?;
                write_file(
                    &dirs.memory.join("memory.limit_in_bytes"),
                    &limits.memory_max_bytes.to_string(),
                )?;
                // With swap accounting, swap counts too (absent without it).
                let memsw = dirs.memory.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write_file(&memsw, &limits.memory_max_bytes.to_string())?;
                }
                if *cpu_idle {
                    write_file(&dirs.cpu.join("cpu.idle"), "1")?;
                } else {
                    write_file(&dirs.cpu.join("cpu.shares"), "2")?;
                }
                let mut join = Vec::new();
                for d in dirs.all() {
                    join.push(open_procs(d)?);
                }
                Ok(Box::new(V1Group {
                    dirs,
                    limit: limits.memory_max_bytes,
                    join,
                }))
            }
            Containment::None { reason } => Err(io::Error::other(reason.clone())),
        }
    }

    /// Kills every process in every job group an earlier run (or an earlier
    /// job) left, and removes the groups. Returns the groups found with how
    /// many processes each still had.
    pub fn kill_leftovers(&self) -> Vec<(String, usize)> {
        let mut found = Vec::new();
        let base = match self {
            Containment::V2 { base, .. } => base,
            Containment::V1 { freezer, .. } => freezer,
            Containment::None { .. } => return found,
        };
        let Ok(entries) = fs::read_dir(base) else {
            return found;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let mut group: Box<dyn JobGroup> = match self {
                Containment::V2 { base, .. } => Box::new(V2Group {
                    dir: base.join(&name),
                    limit: 0,
                    join: Vec::new(),
                }),
                Containment::V1 {
                    pids,
                    memory,
                    cpu,
                    freezer,
                    unified_kill,
                    ..
                } => Box::new(V1Group {
                    dirs: V1Dirs {
                        pids: pids.join(&name),
                        memory: memory.join(&name),
                        cpu: cpu.join(&name),
                        freezer: freezer.join(&name),
                        unified: unified_kill.as_ref().map(|u| u.join(&name)),
                    },
                    limit: 0,
                    join: Vec::new(),
                }),
                Containment::None { .. } => return found,
            };
            let members = group.members().len();
            if let Err(e) = group.remove() {
                tracing::warn!(group = %name, error = %e, "cannot remove a leftover job group");
            }
            found.push((name, members));
        }
        found
    }

    /// The group controls this containment gives a job, for the report.
    pub fn controls(&self) -> Vec<String> {
        let v: &[&str] = match self {
            Containment::V2 { cpu_idle: true, .. } => &[
                "pids.max",
                "memory.max",
                "cpu.idle (or cpu.weight=1)",
                "cgroup.freeze",
                "cgroup.kill",
            ],
            Containment::V2 {
                cpu_idle: false, ..
            } => &["pids.max", "memory.max", "cgroup.freeze", "cgroup.kill"],
            Containment::V1 {
                cpu_idle,
                unified_kill,
                ..
            } => {
                let mut v = vec!["pids.max", "memory.limit_in_bytes"];
                v.push(if *cpu_idle {
                    "cpu.idle"
                } else {
                    "cpu.shares=2"
                });
                v.push("freezer");
                if unified_kill.is_some() {
                    v.push("cgroup.kill (unified)");
                }
                return v.into_iter().map(String::from).collect();
            }
            Containment::None { .. } => &[],
        };
        v.iter().map(|s| s.to_string()).collect()
    }

    /// "cgroup v2", "cgroup v1" or "none".
    pub fn kind(&self) -> &'static str {
        match self {
            Containment::V2 { .. } => "cgroup v2",
            Containment::V1 { .. } => "cgroup v1",
            Containment::None { .. } => "none",
        }
    }
}

/// A stable key for a node: a hash of its data dir (FNV-1a, 64 bits).
pub fn node_key(data_dir: &Path) -> String {
    let path = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests;
