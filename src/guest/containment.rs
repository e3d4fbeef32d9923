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

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a kill waits for the group to empty before it reports failure.
const KILL_WAIT: Duration = Duration::from_secs(2);

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

/// A cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CgroupMount {
    /// Where it is mounted.
    point: PathBuf,
    /// The hierarchy path shown at the mount point (usually "/").
    root: String,
    v2: bool,
    /// v1 controllers (from the super options); empty for v2.
    controllers: Vec<String>,
}

impl CgroupMount {
    /// The directory of this process's own cgroup in this hierarchy.
    fn dir_of(&self, own: &[(Vec<String>, String)]) -> Option<PathBuf> {
        let path = own.iter().find_map(|(ctrls, path)| {
            let matches = if self.v2 {
                ctrls.is_empty()
            } else {
                ctrls.iter().any(|c| self.controllers.contains(c))
            };
            matches.then_some(path.as_str())
        })?;
        let rel = path.strip_prefix(self.root.as_str()).unwrap_or(path);
        let rel = rel.trim_start_matches('/');
        // Our own supervisor leaf (see `v2_base`) is not where jobs go.
        let rel = rel.strip_suffix("/gleaner-supervisor").unwrap_or(rel);
        let rel = if rel == "gleaner-supervisor" { "" } else { rel };
        Some(if rel.is_empty() {
            self.point.clone()
        } else {
            self.point.join(rel)
        })
    }
}

fn parse_cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split_whitespace().collect();
            let mut right = right.split_whitespace();
            let fstype = right.next()?;
            let _source = right.next();
            let options = right.next().unwrap_or("");
            let (root, point) = (left.get(3)?, left.get(4)?);
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            let controllers = if v2 {
                Vec::new()
            } else {
                options
                    .split(',')
                    .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                    .map(String::from)
                    .collect()
            };
            Some(CgroupMount {
                point: PathBuf::from(unescape_mount(point)),
                root: unescape_mount(root),
                v2,
                controllers,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// `(controllers, path)` per line of `/proc/self/cgroup`; v2 has none.
fn parse_own_cgroups(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrls = parts.next()?;
            let path = parts.next()?;
            let ctrls = ctrls
                .split(',')
                .filter(|c| !c.is_empty())
                .map(|c| c.trim_start_matches("name=").to_string())
                .collect();
            Some((ctrls, path.to_string()))
        })
        .collect()
}

/// The v2 job base under the node's own cgroup `own`, with `pids` and
/// `memory` enabled for its children; `None` when they are not delegated.
fn v2_base(own: &Path, name: &str) -> io::Result<Option<Containment>> {
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

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn open_procs(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join("cgroup.procs"))
}

/// Makes `dir` a new empty group, killing and removing one left there.
fn fresh_dir(dir: &Path, kill: impl Fn(&Path) -> io::Result<()>) -> io::Result<()> {
    if dir.exists() {
        let _ = kill(dir);
        rmdir_retrying(dir)?;
    }
    fs::create_dir(dir)
}

/// A group's directory can be removed only once its last process is gone
/// (a killed process leaves when it has exited, not when signalled).
fn rmdir_retrying(dir: &Path) -> io::Result<()> {
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn procs_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn wait_empty(dir: &Path) -> io::Result<()> {
    let deadline = Instant::now() + KILL_WAIT;
    while !procs_in(dir).is_empty() {
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} still has processes", dir.display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn kill_v2(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    write_file(&dir.join("cgroup.kill"), "1")?;
    wait_empty(dir)
}

/// A job's cgroup v2.
#[derive(Debug)]
struct V2Group {
    dir: PathBuf,
    limit: u64,
    join: Vec<File>,
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

/// `name N` from a flat-keyed cgroup file.
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// A job's directories in each v1 hierarchy.
#[derive(Debug)]
struct V1Dirs {
    pids: PathBuf,
    memory: PathBuf,
    cpu: PathBuf,
    freezer: PathBuf,
    unified: Option<PathBuf>,
}

impl V1Dirs {
    fn all(&self) -> Vec<&PathBuf> {
        let mut v = vec![&self.pids, &self.memory, &self.cpu, &self.freezer];
        v.extend(self.unified.as_ref());
        v
    }

    /// `cgroup.kill` on the unified group where there is one; then freeze
    /// (so nothing forks between the listing and the signal), SIGKILL every
    /// member, thaw so the signals are delivered, and wait until it is empty.
    fn kill(&self) -> io::Result<()> {
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

    fn remove(&self) {
        for d in self.all() {
            if let Err(e) = rmdir_retrying(d) {
                tracing::warn!(dir = %d.display(), error = %e, "cannot remove a job cgroup");
            }
        }
    }
}

/// A job's cgroups v1.
#[derive(Debug)]
struct V1Group {
    dirs: V1Dirs,
    limit: u64,
    join: Vec<File>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_v1_and_v2_mounts_and_own_paths() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                  31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                  32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n\
                  33 25 0:29 / /proc rw - proc proc rw\n";
        let mounts = parse_cgroup_mounts(mi);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[1].controllers, vec!["cpu", "cpuacct"]);
        assert!(mounts[2].v2);
        let own = parse_own_cgroups("4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice\n");
        assert_eq!(
            mounts[0].dir_of(&own),
            Some(PathBuf::from("/sys/fs/cgroup/memory/a/b"))
        );
        assert_eq!(
            mounts[1].dir_of(&own),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            mounts[2].dir_of(&own),
            Some(PathBuf::from("/sys/fs/cgroup/unified/user.slice"))
        );
        let leaf = parse_own_cgroups("0::/system.slice/g.service/gleaner-supervisor\n");
        assert_eq!(
            mounts[2].dir_of(&leaf),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/g.service"
            ))
        );
    }

    #[test]
    fn reads_counters_and_keys_are_stable() {
        assert_eq!(counter("oom 2\noom_kill 3\n", "oom_kill"), 3);
        assert_eq!(counter("oom_kill_disable 0\nunder_oom 0\n", "oom_kill"), 0);
        assert_eq!(node_key(Path::new("/x/y")), node_key(Path::new("/x/y")));
        assert_ne!(node_key(Path::new("/x/y")), node_key(Path::new("/x/z")));
    }

    #[test]
    fn the_report_says_what_holds() {
        let r = ContainmentReport {
            cgroup: "none".into(),
            group_controls: vec![],
            no_cgroup_reason: Some("no pids controller mounted".into()),
            namespaces: vec!["user".into(), "pid".into()],
            view: "new root".into(),
            landlock_abi: Some(7),
            work_quota_bytes: None,
        };
        let text = r.to_string();
        assert!(
            text.contains("job group: none (no pids controller mounted)"),
            "{text}"
        );
        assert!(text.contains("namespaces: user, pid"), "{text}");
    }
}
