//! The guest supervisor: runs at most one guest process and carries out the
//! policy's actions on it (renice, suspend, resume, kill).
//!
//! It owns the guest's process group, its job directory under the data dir,
//! its sandbox (user switch, rlimits, namespaces, the narrow view, Landlock,
//! the work dir's quota), its job group, its captured output and the pid
//! file used to kill orphans after a crash. It must not know
//! about sled, libp2p, tokio or the monitor: the node drives it through
//! [`Supervisor::start`], [`Supervisor::apply`] and [`Supervisor::poll_exit`]
//! and receives timestamped [`GuestEvent`]s through an [`EventSink`].
//!
//! The API is synchronous and never blocks for long (`poll_exit` is a
//! `try_wait`); a tokio node calls it from its loop or `spawn_blocking`. The
//! fork itself always happens on the supervisor's own launcher thread, because
//! the parent-death signal is tied to the forking thread.

mod capture;
pub mod checkpoint;
pub mod containment;
mod event;
mod landlock;
mod launch;
mod orphan;
mod quota;
mod throttle;
mod view;

/// The `/proc` reader the supervisor shares with the monitor.
pub use crate::procfs;

pub use crate::model::policy::{GuestAction, GuestRunState, KillCause, Priority};
pub use capture::{CaptureReport, Stream};
pub use checkpoint::CheckpointPlan;
pub use event::{
    Clock, EventSink, ExitInfo, GuestEvent, GuestEventKind, SandboxReport, SystemClock,
};
pub use throttle::ThrottleMode;

use crate::model::ids::JobId;
use capture::Capture;
use containment::{Containment, ContainmentReport, GroupLimits, JobGroup};
use jiff::Timestamp;
use launch::{ChildSetup, Ids, Launcher, Limit};
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The nice value of a guest in the background (S2) and at start.
pub const BACKGROUND_NICE: i32 = 19;

/// The `PATH` a guest gets; the node's own is not passed on.
pub const GUEST_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The default work dir quota, MiB (`guest.disk_mib`).
pub const DEFAULT_DISK_MIB: u64 = 1024;

/// Supervisor-wide settings (the `[guest]` config section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestConfig {
    /// The node's data dir: job directories go in `jobs/`, the pid file is `guest.pid`.
    pub data_dir: PathBuf,
    /// The user a guest runs as when the node is root (`guest.user`).
    pub user: String,
    /// Added to the declared memory for the address-space limit: address space
    /// counts mappings, not use, and glibc reserves 64 MiB arenas per thread.
    pub mem_headroom_mib: u64,
    /// `RLIMIT_NOFILE` for the guest.
    pub max_open_files: u64,
    /// `RLIMIT_FSIZE` for the guest: the largest file it may write.
    pub max_file_bytes: u64,
    /// Most processes and threads a job may have at once (its group's `pids.max`).
    pub max_processes: u64,
    /// Added to the declared memory for the job group's memory limit: what
    /// the kernel needs for the job's page tables, pipes and the supervisor's
    /// helper process. Over the sum the job is killed ("over its declared memory").
    pub mem_margin_mib: u64,
    /// Size of the tmpfs a job's work dir is while it runs (`guest.disk_mib`):
    /// its disk quota, inputs included. 0 turns the quota off. Needs a root node.
    pub disk_mib: u64,
    /// Give each job a cgroup where the kernel allows (`guest.job_cgroups`).
    /// Off, a job is held by its PID namespace alone.
    pub job_cgroups: bool,
    /// Directories a guest must not see even where they lie inside the system
    /// dirs of its view (the node's config dir, when it is under `/etc`).
    pub hidden_dirs: Vec<PathBuf>,
    /// Share of one core a job may use, percent (`guest.cpu_limit_percent`);
    /// 100 is no limit.
    pub cpu_limit_percent: u64,
}

impl GuestConfig {
    /// The defaults, with job directories under `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> GuestConfig {
        GuestConfig {
            data_dir: data_dir.into(),
            user: "nobody".into(),
            mem_headroom_mib: 512,
            max_open_files: 256,
            max_file_bytes: 1 << 30,
            max_processes: 512,
            mem_margin_mib: 64,
            disk_mib: DEFAULT_DISK_MIB,
            job_cgroups: true,
            // The packaged node's config dir; a user's own lies under
            // /home or /root, which the view never shows.
            hidden_dirs: vec![PathBuf::from("/etc/gleaner")],
            cpu_limit_percent: 100,
        }
    }

    fn jobs_dir(&self) -> PathBuf {
        self.data_dir.join("jobs")
    }

    fn pid_file(&self) -> PathBuf {
        self.data_dir.join("guest.pid")
    }
}

/// One guest to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSpec {
    /// Program and arguments; the program is looked up in [`GUEST_PATH`].
    pub argv: Vec<String>,
    /// Variables added to the few the guest always gets (`PATH`, `HOME`,
    /// `TMPDIR`, `LANG`, `GLEANER_JOB_ID`); later entries win.
    pub env: Vec<(String, String)>,
    /// Declared memory; the address-space limit is this plus the headroom.
    pub mem_mib: u64,
    /// `RLIMIT_CPU` per process (SIGXCPU at the limit, SIGKILL 2 s later).
    pub cpu_time_limit: Duration,
    /// Wall-clock limit, suspension included, enforced by [`Supervisor::poll_exit`].
    pub wall_limit: Duration,
    /// Cap on each of stdout and stderr; output past it is dropped.
    pub max_output_bytes: u64,
    /// Let the guest use the network. Without it the guest gets a fresh
    /// network namespace (or Landlock TCP rules) where the kernel allows.
    pub allow_network: bool,
    /// Overrides `guest.user` when the node is root. Never root itself; the
    /// node should set this from its own config, not from a consumer.
    pub user: Option<String>,
    /// Files moved into the work directory before launch: the relative path
    /// there (checked by [`safe_relative_path`]; owned by the guest's user)
    /// and a file the node prepared for this job alone (a verified copy of a
    /// peer's input). Moved by a rename, so a large input costs nothing here;
    /// copied by the kernel if the rename crosses filesystems.
    pub inputs: Vec<(String, PathBuf)>,
    /// The guest saves its state to a file (docs/checkpoint.md): it gets the
    /// `GLEANER_CHECKPOINT*` variables, SIGTERM and a grace before SIGKILL on
    /// an S3/S4 kill, and the node snapshots the file as it changes.
    pub checkpoint: Option<CheckpointPlan>,
}

/// True for a path that stays inside the directory it is joined to: relative,
/// only normal components (no `..`, `.`, root or prefix), no NUL, not empty,
/// at most 255 bytes a component and 1024 in all.
pub fn safe_relative_path(path: &str) -> bool {
    // Checked on the text, not through `Path::components`, which quietly
    // drops `.` and doubled slashes.
    !path.is_empty()
        && path.len() <= 1024
        && !path.contains('\0')
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && part.len() <= 255)
}

/// What [`Supervisor::start`] started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestHandle {
    pub job_id: JobId,
    /// The guest's pid, which is also its process group and session id.
    pub pid: i32,
    /// The job directory: `stdout`, `stderr` and `work/`.
    pub dir: PathBuf,
    /// The guest's working directory, the only place it may write.
    pub work_dir: PathBuf,
    pub sandbox: SandboxReport,
}

/// Whether the guest runs, is stopped or has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestPhase {
    Running,
    Stopped,
    Exited,
}

/// A snapshot of the guest for `gleaner status` and the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestStatus {
    pub job_id: JobId,
    pub pid: i32,
    pub started_at: Timestamp,
    pub phase: GuestPhase,
    /// The main process's nice value as the kernel shows it (`None` once it has exited).
    pub nice: Option<i32>,
    /// The policy's view: the level last asked for and whether it is suspended.
    pub run_state: GuestRunState,
    /// Set when nice 0 was asked for but the kernel refused to lower nice.
    pub nice_not_lowered: bool,
    pub exit: Option<ExitInfo>,
    pub kill_cause: Option<KillCause>,
    /// Filled once the stream has closed.
    pub stdout: Option<CaptureReport>,
    pub stderr: Option<CaptureReport>,
}

/// Why the supervisor could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("cannot create the guest directory {path}: {source}")]
    DataDir { path: PathBuf, source: io::Error },
    #[error("cannot start the guest launcher thread: {0}")]
    Launcher(io::Error),
}

/// Why a guest was not started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("a guest is already running (job {job_id}); the supervisor runs at most one")]
    Busy { job_id: JobId },
    #[error("the guest command line is empty")]
    EmptyArgv,
    #[error("invalid guest argument or environment entry {0:?}")]
    InvalidText(String),
    #[error("guest user {0:?} does not exist")]
    UnknownUser(String),
    #[error("refusing to run a guest as root (user {0:?} has uid 0)")]
    RootGuest(String),
    #[error("the node does not run as root, so the guest cannot run as {0:?}")]
    CannotSwitchUser(String),
    #[error("cannot prepare the job directory {path}: {source}")]
    JobDir { path: PathBuf, source: io::Error },
    #[error("cannot start the guest process: {0}")]
    Spawn(io::Error),
}

/// Why an action could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("no guest is running")]
    NoGuest,
    #[error("cannot signal the guest group: {0}")]
    Signal(Errno),
}

/// The running (or last) guest.
#[derive(Debug)]
struct Guest {
    handle: GuestHandle,
    started_at: Timestamp,
    wall_limit: Duration,
    run_state: GuestRunState,
    nice_not_lowered: bool,
    kill_cause: Option<KillCause>,
    exit: Option<ExitInfo>,
    stdout: Capture,
    stderr: Capture,
    /// The job's cgroup(s), when this node can make them.
    group: Option<Box<dyn JobGroup>>,
    /// The process the launcher forked: the guest itself, or, in a PID
    /// namespace, its keeper (whose descendants are the whole job).
    leader: i32,
    /// The work dir's tmpfs and its size, while mounted.
    quota: Option<quota::WorkMount>,
    /// How the first process ended, while the end is being finished.
    pending_exit: Option<ExitInfo>,
    /// Removing the job's group and saving its work dir off the loop.
    ending: Option<JoinHandle<()>>,
    /// How the CPU limit is enforced for this job.
    throttle: ThrottleMode,
    /// The SIGSTOP/SIGCONT cycle, when the limit has no cgroup quota.
    duty: Option<throttle::DutyCycle>,
    /// The checkpoint order, when the guest checkpoints.
    checkpoint: Option<CheckpointPlan>,
    /// The thread that snapshots the checkpoint file while the guest runs.
    watcher: Option<checkpoint::Watcher>,
    /// SIGTERM was sent (a kill with grace): SIGKILL follows at this instant
    /// unless the guest is gone by then.
    term_deadline: Option<std::time::Instant>,
    /// CPU time of the job's processes, from the keeper's rusage once reaped.
    cpu_time: Option<Duration>,
}

impl Guest {
    /// Members of the job's group beyond its tree (escapees included).
    fn group_members(&self) -> Vec<i32> {
        self.group.as_ref().map(|g| g.members()).unwrap_or_default()
    }

    fn pgid(&self) -> i32 {
        self.handle.pid
    }

    /// The root of the job's process tree.
    fn tree_root(&self) -> i32 {
        self.leader
    }

    fn is_running(&self) -> bool {
        self.exit.is_none()
    }
}

/// Runs at most one guest and applies policy actions to it.
pub struct Supervisor {
    config: GuestConfig,
    clock: Arc<dyn Clock>,
    sink: Arc<dyn EventSink>,
    launcher: Launcher,
    guest: Option<Guest>,
    containment: Containment,
    /// What this kernel lets a guest have, probed once at start-up.
    layers: Layers,
}

/// The namespace layers and quota a guest gets here, probed once (each
/// probe forks, so `status` must not run them).
#[derive(Debug, Clone, Copy)]
struct Layers {
    /// User, mount, PID and IPC namespaces and the mounts of the narrow view.
    view: bool,
    /// A user and network namespace (the layer without the view).
    netns: bool,
    /// The node can mount the work dir's tmpfs (it is root).
    quota: bool,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("config", &self.config)
            .field("guest", &self.guest)
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Creates the job directory root and kills a guest group that a previous
    /// run of the node left behind (recorded in the pid file).
    pub fn new(
        config: GuestConfig,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn EventSink>,
    ) -> Result<Supervisor, SupervisorError> {
        let jobs = config.jobs_dir();
        std::fs::create_dir_all(&jobs).map_err(|source| SupervisorError::DataDir {
            path: jobs.clone(),
            source,
        })?;
        let pid_file = config.pid_file();
        if let Some(record) = orphan::read(&pid_file) {
            if orphan::kill_if_live(&record) {
                tracing::warn!(pgid = record.pgid, job = %record.job_id, "killed an orphaned guest");
                sink.record(GuestEvent {
                    at: clock.now(),
                    job_id: record.job_id.clone(),
                    kind: GuestEventKind::OrphanKilled { pgid: record.pgid },
                });
            }
        }
        if let Err(e) = orphan::remove(&pid_file) {
            tracing::warn!(path = %pid_file.display(), error = %e, "cannot remove the guest pid file");
        }
        for point in quota::unmount_leftovers(&jobs) {
            tracing::warn!(dir = %point.display(), "unmounted a job's work dir left mounted");
        }
        let containment = if config.job_cgroups {
            Containment::detect(&containment::node_key(&config.data_dir))
        } else {
            Containment::disabled()
        };
        let ids = default_ids(&config);
        let layers = Layers {
            view: view::can_build(ids, VIEW_FLAGS | libc::CLONE_NEWNET),
            netns: launch::can_unshare_net(ids),
            quota: nix::unistd::geteuid().is_root() && config.disk_mib > 0,
        };
        match &containment {
            Containment::None { reason } => {
                tracing::warn!(%reason, "guest jobs get no cgroup; a PID namespace must hold them")
            }
            c => tracing::info!(kind = c.kind(), "guest jobs are contained in cgroups"),
        }
        let launcher = Launcher::new().map_err(SupervisorError::Launcher)?;
        let supervisor = Supervisor {
            config,
            clock,
            sink,
            launcher,
            guest: None,
            containment,
            layers,
        };
        supervisor.kill_leftover_groups();
        Ok(supervisor)
    }

    /// Kills and removes every job group an earlier run or job left.
    fn kill_leftover_groups(&self) {
        for (name, processes) in self.containment.kill_leftovers() {
            if processes > 0 {
                tracing::warn!(group = %name, processes, "killed a job group left behind");
                self.sink.record(GuestEvent {
                    at: self.clock.now(),
                    job_id: name,
                    kind: GuestEventKind::LeftoverGroupKilled { processes },
                });
            }
        }
    }

    /// Which containment layers a guest started now gets, for `status`.
    pub fn containment(&self) -> ContainmentReport {
        let mut namespaces = Vec::new();
        if self.layers.view {
            namespaces.extend(
                [
                    "user",
                    "mount",
                    "pid",
                    "ipc",
                    "net (when the job has no network)",
                ]
                .map(String::from),
            );
        } else if self.layers.netns {
            namespaces
                .extend(["user", "ipc", "net (when the job has no network)"].map(String::from));
        }
        let view = if self.layers.view {
            "narrow: system dirs, devices, own /proc and the work dir (mount namespace)"
        } else if landlock::abi_version().is_some() {
            "system dirs and the work dir readable (Landlock read rules); Unix sockets not hidden"
        } else {
            "whole filesystem readable; writes not confined"
        };
        ContainmentReport {
            cgroup: self.containment.kind().to_string(),
            group_controls: self.containment.controls(),
            no_cgroup_reason: match &self.containment {
                Containment::None { reason } => Some(reason.clone()),
                _ => None,
            },
            namespaces,
            view: view.into(),
            landlock_abi: landlock::abi_version(),
            work_quota_bytes: self
                .layers
                .quota
                .then(|| self.config.disk_mib.saturating_mul(1024 * 1024)),
        }
    }

    /// Starts a guest for `job_id` in a fresh directory `jobs/<job_id>`.
    ///
    /// Refuses while another guest is running. The guest starts at nice 19
    /// (policy level `Background`); apply `RunNormal` when the host is in S1.
    pub fn start(&mut self, job: &JobId, spec: GuestSpec) -> Result<GuestHandle, StartError> {
        let job_id = job.as_str();
        if let Some(g) = self.guest.as_ref().filter(|g| g.is_running()) {
            return Err(StartError::Busy {
                job_id: g.handle.job_id.clone(),
            });
        }
        validate(&spec)?;
        let ids = guest_ids(&self.config, &spec)?;
        let dir = self.config.jobs_dir().join(job_id);
        let work_dir = dir.join("work");
        make_job_dir(&dir, &work_dir, ids)?;
        let quota_bytes = self.config.disk_mib.saturating_mul(1024 * 1024);
        let mut quota_warning = None;
        let quota = if self.layers.quota {
            let owner = ids.map_or_else(
                || {
                    (
                        nix::unistd::geteuid().as_raw(),
                        nix::unistd::getegid().as_raw(),
                    )
                },
                |i| (i.uid, i.gid),
            );
            match quota::WorkMount::mount(&work_dir, quota_bytes, owner) {
                Ok(m) => Some(m),
                Err(e) => {
                    quota_warning = Some(format!("no quota on the work dir: {e}"));
                    None
                }
            }
        } else {
            None
        };
        let unmount = |quota: Option<quota::WorkMount>| {
            if let Some(m) = quota {
                let _ = m.save();
            }
        };
        if let Err(e) = write_inputs(&work_dir, &spec.inputs, ids) {
            unmount(quota);
            return Err(e);
        }

        let mut plan = SandboxPlan::prepare(
            &work_dir,
            ids,
            spec.allow_network,
            self.layers,
            &self.config.hidden_dirs,
        );
        plan.report.warnings.extend(quota_warning);
        plan.report.work_quota_bytes = quota.as_ref().map(|q| q.cap());
        for w in &plan.report.warnings {
            tracing::warn!(job = job_id, "guest sandbox: {w}");
        }
        // One guest at a time: whatever is left in a job group now is stray.
        self.kill_leftover_groups();
        let group = if self.containment.has_cgroups() {
            let limits = GroupLimits {
                pids_max: self.config.max_processes,
                memory_max_bytes: spec
                    .mem_mib
                    .saturating_add(self.config.mem_margin_mib)
                    .saturating_mul(1024 * 1024),
            };
            match self.containment.create(job_id, limits) {
                Ok(g) => Some(g),
                Err(e) => {
                    tracing::warn!(job = job_id, error = %e, "cannot make the job's cgroup");
                    None
                }
            }
        } else {
            None
        };
        let limit = self.config.cpu_limit_percent;
        let mut throttle = ThrottleMode::Off;
        if limit < 100 {
            throttle = ThrottleMode::DutyCycle(limit);
            if let Some(g) = &group {
                match g.limit_cpu(limit) {
                    Ok(()) => throttle = ThrottleMode::Cgroup(limit),
                    Err(e) => tracing::info!(
                        job = job_id,
                        error = %e,
                        "no cgroup CPU quota; the limit is a SIGSTOP/SIGCONT duty cycle"
                    ),
                }
            }
        }
        let mut join_fds = [-1; launch::MAX_JOIN_FDS];
        if let Some(g) = &group {
            for (slot, fd) in join_fds.iter_mut().zip(g.join_fds()) {
                *slot = fd;
            }
        }
        let setup = ChildSetup {
            join_fds,
            limits: limits(&self.config, &spec),
            start_nice: BACKGROUND_NICE,
            ids,
            unshare_flags: plan.unshare_flags,
            landlock_fd: plan.landlock.as_ref().map(|r| r.raw_fd()),
            parent_pid: std::process::id() as libc::pid_t,
            view: plan.view.take().map(Arc::new),
        };
        let mut command = Command::new(&spec.argv[0]);
        command
            .args(&spec.argv[1..])
            .env_clear()
            .envs(guest_env(job_id, &work_dir, &spec))
            .current_dir(&work_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: `ChildSetup::apply` makes plain system calls and allocates nothing.
        unsafe {
            command.pre_exec(move || setup.apply());
        }
        let mut child = match self.launcher.spawn(command) {
            Ok(c) => c,
            Err(e) => {
                if let Some(mut g) = group {
                    let _ = g.remove();
                }
                unmount(quota);
                return Err(StartError::Spawn(e));
            }
        };
        drop(plan.landlock);
        let leader = child.id() as i32;
        // The guest's mount namespace holds the tmpfs now: off the node's
        // mount table with it, so a crash of the node leaves no mount.
        let mut quota = quota;
        if let Some(m) = quota.as_mut().filter(|_| plan.report.narrow_view) {
            if let Err(e) = m.detach() {
                tracing::warn!(job = job_id, error = %e, "the work dir's tmpfs stays mounted");
            }
        }
        // In a PID namespace the program runs in the keeper's grandchild.
        let pid = if plan.report.pid_namespace {
            first_child(leader).and_then(first_child).unwrap_or(leader)
        } else {
            leader
        };

        // Match the thread nice on the scheduling group the new session got.
        if procfs::read_autogroup(pid).is_some() {
            let _ = procfs::write_autogroup_nice(pid, BACKGROUND_NICE);
        }
        let (stdout, stderr) = match self.start_captures(&mut child, job_id, &dir, &spec) {
            Ok(c) => c,
            Err(source) => {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(leader), Signal::SIGKILL);
                let _ = child.wait();
                if let Some(mut g) = group {
                    let _ = g.remove();
                }
                unmount(quota);
                return Err(StartError::JobDir { path: dir, source });
            }
        };
        let record = orphan::GuestRecord {
            job_id: job_id.to_string(),
            pgid: pid,
            starttime: procfs::read_stat(pid).map_or(0, |s| s.starttime),
            boot_id: procfs::boot_id(),
        };
        if let Err(e) = orphan::write(&self.config.pid_file(), &record) {
            tracing::warn!(error = %e, "cannot write the guest pid file; an orphan would survive a crash");
        }
        let handle = GuestHandle {
            job_id: job.clone(),
            pid,
            dir,
            work_dir,
            sandbox: plan.report,
        };
        let started_at = self.clock.now();
        self.emit(
            job_id,
            GuestEventKind::Started {
                pid,
                dir: handle.dir.clone(),
                sandbox: handle.sandbox.clone(),
            },
        );
        let duty = match throttle {
            ThrottleMode::DutyCycle(percent) => {
                let members_of = group_member_reader(&group);
                let signal = move |run: bool| {
                    let sig = if run {
                        Signal::SIGCONT
                    } else {
                        Signal::SIGSTOP
                    };
                    let _ = signal_tree(leader, pid, &members_of(), sig);
                };
                match throttle::DutyCycle::start(percent, signal) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        tracing::warn!(job = job_id, error = %e, "cannot start the CPU duty cycle");
                        None
                    }
                }
            }
            _ => None,
        };
        let watcher = spec.checkpoint.clone().and_then(|plan| {
            // The node reads the work dir through the tmpfs's descriptor when
            // the mount left its table, else by its path.
            let root = match quota.as_ref().and_then(|q| q.root()) {
                Some(r) => r,
                None => std::fs::File::open(&handle.work_dir),
            };
            let parts = root.map(|root| checkpoint::WatchParts {
                job_id: job_id.to_string(),
                plan,
                root,
                job_dir: handle.dir.clone(),
                clock: self.clock.clone(),
                sink: self.sink.clone(),
            });
            match parts.and_then(checkpoint::Watcher::start) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(job = job_id, error = %e, "cannot watch the job's checkpoint");
                    None
                }
            }
        });
        self.guest = Some(Guest {
            handle: handle.clone(),
            started_at,
            wall_limit: spec.wall_limit,
            run_state: GuestRunState::Running(Priority::Background),
            nice_not_lowered: false,
            kill_cause: None,
            exit: None,
            stdout,
            stderr,
            group,
            leader,
            quota,
            pending_exit: None,
            ending: None,
            throttle,
            duty,
            checkpoint: spec.checkpoint,
            watcher,
            term_deadline: None,
            cpu_time: None,
        });
        Ok(handle)
    }

    fn start_captures(
        &self,
        child: &mut Child,
        job_id: &str,
        dir: &Path,
        spec: &GuestSpec,
    ) -> io::Result<(Capture, Capture)> {
        let cap = spec.max_output_bytes;
        let (clock, sink, job) = (self.clock.clone(), self.sink.clone(), job_id.to_string());
        let on_truncate: Arc<dyn Fn(Stream) + Send + Sync> = Arc::new(move |stream| {
            sink.record(GuestEvent {
                at: clock.now(),
                job_id: job.clone(),
                kind: GuestEventKind::OutputTruncated {
                    stream,
                    cap_bytes: cap,
                },
            })
        });
        let missing = || io::Error::other("the guest's output pipe is missing");
        let out = child.stdout.take().ok_or_else(missing)?;
        let err = child.stderr.take().ok_or_else(missing)?;
        let stdout = Capture::start(out, dir, Stream::Stdout, cap, on_truncate.clone())?;
        let stderr = Capture::start(err, dir, Stream::Stderr, cap, on_truncate)?;
        Ok((stdout, stderr))
    }

    /// Carries out one policy action on the running guest.
    pub fn apply(&mut self, action: GuestAction) -> Result<(), ApplyError> {
        let guest = self
            .guest
            .as_mut()
            .filter(|g| g.is_running())
            .ok_or(ApplyError::NoGuest)?;
        let (pid, pgid) = (guest.tree_root(), guest.pgid());
        let job_id = guest.handle.job_id.clone();
        let members = guest.group_members();
        // The duty cycle (if any) must not continue a guest the policy stops.
        let duty = guest.duty.as_ref().map(|d| d.shared.clone());
        let _duty_guard = duty.as_ref().map(|d| {
            if let GuestAction::Suspend | GuestAction::Resume = action {
                d.suspended.store(
                    action == GuestAction::Suspend,
                    std::sync::atomic::Ordering::Release,
                );
            }
            d.lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
        let kind = match action {
            GuestAction::Renice19 => {
                let (threads, autogroups, _) = set_tree_nice(pid, pgid, &members, BACKGROUND_NICE);
                GuestEventKind::Reniced {
                    nice: BACKGROUND_NICE,
                    threads,
                    autogroups,
                }
            }
            GuestAction::RunNormal => {
                let (threads, autogroups, refused) = set_tree_nice(pid, pgid, &members, 0);
                guest.nice_not_lowered = refused.is_some();
                match refused {
                    Some(err) => {
                        // Keep every thread at 19 rather than a mix.
                        set_tree_nice(pid, pgid, &members, BACKGROUND_NICE);
                        GuestEventKind::NiceNotLowered {
                            reason: err.to_string(),
                        }
                    }
                    None => GuestEventKind::Reniced {
                        nice: 0,
                        threads,
                        autogroups,
                    },
                }
            }
            GuestAction::Suspend => {
                signal_tree(pid, pgid, &members, Signal::SIGSTOP).map_err(ApplyError::Signal)?;
                GuestEventKind::Suspended
            }
            GuestAction::Resume => {
                signal_tree(pid, pgid, &members, Signal::SIGCONT).map_err(ApplyError::Signal)?;

                GuestEventKind::Resumed
            }
            GuestAction::Kill(cause) if guest.term_deadline.is_none() && graceful(guest, cause) => {
                let grace = guest
                    .checkpoint
                    .as_ref()
                    .map_or(Duration::ZERO, |c| c.granted_grace());
                // A stopped guest cannot save: continued, it gets its grace.
                signal_tree(pid, pgid, &members, Signal::SIGTERM).map_err(ApplyError::Signal)?;
                let _ = signal_tree(pid, pgid, &members, Signal::SIGCONT);
                guest.term_deadline = Some(std::time::Instant::now() + grace);
                guest.kill_cause.get_or_insert(cause);
                GuestEventKind::TermSent {
                    cause,
                    grace_millis: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                }
            }
            GuestAction::Kill(cause) => {
                signal_tree(pid, pgid, &members, Signal::SIGKILL).map_err(ApplyError::Signal)?;
                // Escapees too; waiting until the group is empty (seconds
                // on cgroup v1) is left to the end of the job, off the loop.
                if let Some(g) = &guest.group {
                    g.start_kill();
                }
                guest.kill_cause.get_or_insert(cause);
                GuestEventKind::KillSent { cause }
            }
        };
        guest.run_state = crate::model::policy::after(guest.run_state, action);
        if let GuestAction::Kill(_) = action {
            // Still running until reaped; the policy must not act on it again.
            guest.run_state = GuestRunState::Idle;
        }
        self.emit(job_id.as_str(), kind);
        Ok(())
    }

    /// Checks, without blocking, whether the guest has ended; kills it first
    /// if it has run past its wall-clock limit. Returns the final status once,
    /// when the end is first seen. Members of the guest group that outlive
    /// the main process are killed then.
    pub fn poll_exit(&mut self) -> Option<GuestStatus> {
        let now = self.clock.now();
        let guest = self.guest.as_mut().filter(|g| g.is_running())?;
        if guest.pending_exit.is_some() {
            return self.finish_if_done();
        }
        let over_time = now.as_millisecond() - guest.started_at.as_millisecond()
            >= i64::try_from(guest.wall_limit.as_millis()).unwrap_or(i64::MAX);
        let over_memory = guest.group.as_ref().is_some_and(|g| g.memory_kills() > 0);
        let grace_over = guest
            .term_deadline
            .is_some_and(|d| std::time::Instant::now() >= d);
        if over_memory && guest.kill_cause.is_none() {
            let _ = self.apply(GuestAction::Kill(KillCause::OverDeclaredMemory));
        } else if over_time && guest.kill_cause.is_none() {
            let _ = self.apply(GuestAction::Kill(KillCause::WallTimeLimit));
        } else if grace_over {
            // The grace is over: SIGKILL (the term deadline stays set, so
            // this is the plain kill of `apply`).
            let cause = guest.kill_cause.unwrap_or(KillCause::Revocation);
            guest.term_deadline = Some(std::time::Instant::now() + Duration::from_secs(3600));
            let _ = self.apply(GuestAction::Kill(cause));
        }
        let guest = self.guest.as_mut()?;
        let (status, cpu) = try_wait_rusage(guest.leader)?;
        guest.pending_exit = Some(exit_info(status));
        guest.cpu_time = cpu;
        guest.run_state = GuestRunState::Idle;
        let members = guest.group_members();
        let _ = signal_tree(guest.tree_root(), guest.pgid(), &members, Signal::SIGKILL);
        // The job ends with its first process: escapees included. Emptying
        // and removing the group (seconds on cgroup v1) and saving the work
        // dir off its tmpfs run on a thread; the end is reported once done.
        let (group, quota) = (guest.group.take(), guest.quota.take());
        // After a kill the last checkpoint is taken (off the loop, once the
        // work dir is saved) before the end is reported.
        let last_checkpoint = match (guest.checkpoint.clone(), guest.kill_cause) {
            (Some(plan), Some(_)) => {
                let seen = guest.watcher.take().and_then(|w| w.finish());
                let (clock, sink) = (self.clock.clone(), self.sink.clone());
                let (job_id, work_dir, dir) = (
                    guest.handle.job_id.to_string(),
                    guest.handle.work_dir.clone(),
                    guest.handle.dir.clone(),
                );
                Some(move || {
                    checkpoint::final_snapshot(
                        &job_id, &plan, &work_dir, &dir, seen, &*clock, &*sink,
                    )
                })
            }
            _ => {
                guest.watcher.take();
                None
            }
        };
        // Usually the group is empty by now (the namespace went with its
        // init) and the work dir small: then the end costs a few rmdirs and
        // a small copy, done here so the end is reported at once.
        let quick = last_checkpoint.is_none()
            && group.as_ref().is_none_or(|g| g.members().is_empty())
            && quota
                .as_ref()
                .is_none_or(|m| m.used_bytes().is_some_and(|u| u <= INLINE_SAVE_BYTES));
        if quick {
            end_job(guest.handle.job_id.as_str(), group, quota);
        } else if group.is_some() || quota.is_some() || last_checkpoint.is_some() {
            let job_id = guest.handle.job_id.clone();
            let end = move || {
                end_job(job_id.as_str(), group, quota);
                if let Some(snapshot) = last_checkpoint {
                    snapshot();
                }
            };
            match std::thread::Builder::new()
                .name("guest-end".into())
                .spawn(end)
            {
                Ok(thread) => guest.ending = Some(thread),
                Err(e) => {
                    tracing::warn!(error = %e, "no thread to end the job; ending it here");
                }
            }
        }
        self.finish_if_done()
    }

    /// Reports the end once the ending thread (if any) is done.
    fn finish_if_done(&mut self) -> Option<GuestStatus> {
        let guest = self.guest.as_mut()?;
        if guest.ending.as_ref().is_some_and(|t| !t.is_finished()) {
            return None;
        }
        if let Some(thread) = guest.ending.take() {
            let _ = thread.join();
        }
        let exit = guest.pending_exit.take()?;
        guest.exit = Some(exit);
        // Stops the duty-cycle thread (it joins within one period).
        guest.duty = None;
        guest.run_state = GuestRunState::Idle;
        let (job_id, cause) = (guest.handle.job_id.clone(), guest.kill_cause);
        let wall = self.clock.now().as_millisecond() - guest.started_at.as_millisecond();
        let usage = GuestEventKind::Usage {
            cpu_millis: guest
                .cpu_time
                .map(|c| u64::try_from(c.as_millis()).unwrap_or(u64::MAX)),
            wall_millis: u64::try_from(wall).unwrap_or(0),
        };
        if let Err(e) = orphan::remove(&self.config.pid_file()) {
            tracing::warn!(error = %e, "cannot remove the guest pid file");
        }
        self.emit(job_id.as_str(), usage);
        self.emit(job_id.as_str(), GuestEventKind::Exited { exit, cause });
        self.status()
    }

    /// Polls until the guest ends or `timeout` passes (for shutdown and tests).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<GuestStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Some(status);
            }
            if !self.guest.as_ref().is_some_and(|g| g.is_running()) {
                return self.status();
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// How `cpu_limit_percent` is enforced: for the running guest, how it
    /// is; with none, how it would be for the next.
    pub fn throttle_mode(&self) -> ThrottleMode {
        if let Some(g) = self.guest.as_ref().filter(|g| g.is_running()) {
            return g.throttle;
        }
        let limit = self.config.cpu_limit_percent;
        if limit >= 100 {
            ThrottleMode::Off
        } else if self.containment.cpu_quota() {
            ThrottleMode::Cgroup(limit)
        } else {
            ThrottleMode::DutyCycle(limit)
        }
    }

    /// The current (or last) guest's status; `None` if none was started.
    pub fn status(&mut self) -> Option<GuestStatus> {
        let g = self.guest.as_mut()?;
        let stat = g
            .is_running()
            .then(|| procfs::read_stat(g.handle.pid))
            .flatten();
        let phase = match (&g.exit, &stat) {
            (Some(_), _) => GuestPhase::Exited,
            (None, Some(s)) if matches!(s.state, 'T' | 't') => GuestPhase::Stopped,
            (None, _) => GuestPhase::Running,
        };
        Some(GuestStatus {
            job_id: g.handle.job_id.clone(),
            pid: g.handle.pid,
            started_at: g.started_at,
            phase,
            nice: stat.map(|s| s.nice),
            run_state: g.run_state,
            nice_not_lowered: g.nice_not_lowered,
            exit: g.exit,
            kill_cause: g.kill_cause,
            stdout: g.stdout.poll(),
            stderr: g.stderr.poll(),
        })
    }

    /// The directory a job with this id gets (`stdout`, `stderr`, `work/`).
    pub fn job_dir(&self, job_id: &JobId) -> PathBuf {
        self.config.jobs_dir().join(job_id.as_str())
    }

    /// The directory holding every job's directory.
    pub fn jobs_dir(&self) -> PathBuf {
        self.config.jobs_dir()
    }

    /// What the policy needs to know about the guest for `decide`.
    pub fn run_state(&self) -> GuestRunState {
        self.guest
            .as_ref()
            .filter(|g| g.is_running())
            .map_or(GuestRunState::Idle, |g| g.run_state)
    }

    /// Where the guest's processes are, for the monitor to resolve once per
    /// sample and subtract their CPU from the host load. Cheap: it walks nothing.
    pub fn process_scope(&self) -> procfs::ProcessScope {
        match self.guest.as_ref().filter(|g| g.is_running()) {
            Some(Guest {
                group: Some(group), ..
            }) => procfs::ProcessScope::Cgroup(group.procs_files()),
            Some(g) => procfs::ProcessScope::Tree {
                root: g.tree_root(),
                whole_session: true,
            },
            None => procfs::ProcessScope::Nothing,
        }
    }

    /// The pids of every live process of the guest (main process,
    /// descendants, group and session members). Empty when no guest runs.
    pub fn process_tree(&self) -> Vec<i32> {
        self.process_scope().pids()
    }

    fn emit(&self, job_id: &str, kind: GuestEventKind) {
        self.sink.record(GuestEvent {
            at: self.clock.now(),
            job_id: job_id.to_string(),
            kind,
        });
    }
}

impl Drop for Supervisor {
    /// The node is going away (S5): the guest must not outlive it.
    fn drop(&mut self) {
        if self.guest.as_ref().is_some_and(|g| g.is_running()) {
            let _ = self.apply(GuestAction::Kill(KillCause::Revocation));
            self.wait_exit(Duration::from_secs(2));
        }
        if let Some(guest) = self.guest.as_mut() {
            if let Some(thread) = guest.ending.take() {
                let _ = thread.join();
            }
            // A guest that did not end in time (a loaded machine): its group
            // and work dir are finished here, blocking, as the node goes.
            let (group, quota) = (guest.group.take(), guest.quota.take());
            end_job(guest.handle.job_id.as_str(), group, quota);
        }
        // A clean stop leaves no cgroup of this node behind.
        self.containment.remove_base();
    }
}

/// Most bytes of a work dir saved on the caller's thread at the job's end.
const INLINE_SAVE_BYTES: u64 = 1 << 20;

/// The namespaces of the narrow view (the network one is added when the job
/// has no network).
const VIEW_FLAGS: libc::c_int =
    libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;

/// Finishes a job off the loop: empties and removes its group, then copies
/// its work dir off the tmpfs and unmounts it.
fn end_job(job_id: &str, group: Option<Box<dyn JobGroup>>, quota: Option<quota::WorkMount>) {
    if let Some(mut g) = group {
        if let Err(e) = g.remove() {
            tracing::warn!(job = job_id, error = %e, "cannot remove the job's group");
        }
    }
    if let Some(work) = quota {
        match work.save() {
            Ok(saved) if saved.skipped > 0 => {
                tracing::warn!(job = job_id, ?saved, "some of the work dir was not kept")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(job = job_id, error = %e, "cannot save the work dir off its tmpfs")
            }
        }
    }
}

/// Whether a kill of this guest gets SIGTERM and a grace first: a
/// checkpointing guest killed for S3 or S4 (the owner needs the machine, but
/// a few seconds to save its state cost less than its lost work). Never for
/// S5 (revoked: the node may be going away), a cancel, or the job's own fault.
fn graceful(guest: &Guest, cause: KillCause) -> bool {
    guest
        .checkpoint
        .as_ref()
        .is_some_and(|c| !c.granted_grace().is_zero())
        && matches!(cause, KillCause::CpuContention | KillCause::MemoryShortage)
}

/// Reaps `pid` if it has ended, without blocking, with the CPU time of it
/// and of the descendants it reaped (the keeper reaps init, which reaps the
/// job: so the whole job's CPU). `None` while it runs.
fn try_wait_rusage(pid: i32) -> Option<(ExitStatus, Option<Duration>)> {
    let mut status = 0;
    // SAFETY: rusage is plain data, written by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a plain system call on our own child with valid pointers.
    let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    if rc <= 0 {
        return None;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
    Some((ExitStatus::from_raw(status), Some(cpu)))
}

/// The first child of `pid` (the kernel lists children in the order they came).
fn first_child(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The ids a guest of the config's own user gets (for the probes).
fn default_ids(config: &GuestConfig) -> Option<Ids> {
    let spec = GuestSpec {
        argv: vec!["true".into()],
        env: Vec::new(),
        mem_mib: 0,
        cpu_time_limit: Duration::ZERO,
        wall_limit: Duration::ZERO,
        max_output_bytes: 0,
        allow_network: false,
        user: None,
        inputs: Vec::new(),
        checkpoint: None,
    };
    guest_ids(config, &spec).ok().flatten()
}

/// Checks what the type of the job id does not already guarantee.
fn validate(spec: &GuestSpec) -> Result<(), StartError> {
    if spec.argv.is_empty() || spec.argv[0].is_empty() {
        return Err(StartError::EmptyArgv);
    }
    for text in &spec.argv {
        if text.contains('\0') {
            return Err(StartError::InvalidText(text.clone()));
        }
    }
    for (name, _) in &spec.inputs {
        if !safe_relative_path(name) {
            return Err(StartError::InvalidText(format!("input path {name}")));
        }
    }
    if let Some(c) = spec
        .checkpoint
        .as_ref()
        .filter(|c| !safe_relative_path(&c.path))
    {
        return Err(StartError::InvalidText(format!(
            "checkpoint path {}",
            c.path
        )));
    }
    for (name, value) in &spec.env {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(StartError::InvalidText(format!("{name}={value}")));
        }
    }
    Ok(())
}

/// The ids to switch to: only a root node switches, and never to root.
fn guest_ids(config: &GuestConfig, spec: &GuestSpec) -> Result<Option<Ids>, StartError> {
    let name = spec.user.as_deref().unwrap_or(&config.user);
    if !nix::unistd::geteuid().is_root() {
        let me = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map(|u| u.name);
        return match &spec.user {
            Some(wanted) if me.as_deref() != Some(wanted.as_str()) => {
                Err(StartError::CannotSwitchUser(wanted.clone()))
            }
            _ => Ok(None),
        };
    }
    let user = nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| StartError::UnknownUser(name.to_string()))?;
    if user.uid.is_root() {
        return Err(StartError::RootGuest(name.to_string()));
    }
    Ok(Some(Ids {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    }))
}

/// Makes `dir` (the supervisor's) and `work_dir` (the guest's) fresh.
fn make_job_dir(dir: &Path, work_dir: &Path, ids: Option<Ids>) -> Result<(), StartError> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StartError::JobDir { path, source }
    };
    std::fs::create_dir(dir).map_err(fail(dir))?;
    std::fs::create_dir(work_dir).map_err(fail(work_dir))?;
    std::fs::set_permissions(work_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(fail(work_dir))?;
    if let Some(ids) = ids {
        std::os::unix::fs::chown(work_dir, Some(ids.uid), Some(ids.gid)).map_err(fail(work_dir))?;
    }
    Ok(())
}

/// Writes the job's input files into its work directory, owned by the guest.
fn write_inputs(
    work_dir: &Path,
    inputs: &[(String, PathBuf)],
    ids: Option<Ids>,
) -> Result<(), StartError> {
    for (name, source) in inputs {
        let path = work_dir.join(name);
        let fail = |source| StartError::JobDir {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| *p != work_dir) {
            std::fs::create_dir_all(parent).map_err(fail)?;
            if let Some(ids) = ids {
                let mut dir = parent;
                while dir != work_dir {
                    std::os::unix::fs::chown(dir, Some(ids.uid), Some(ids.gid)).map_err(fail)?;
                    let Some(up) = dir.parent() else { break };
                    dir = up;
                }
            }
        }
        if std::fs::rename(source, &path).is_err() {
            std::fs::copy(source, &path).map_err(fail)?;
        }
        if let Some(ids) = ids {
            std::os::unix::fs::chown(&path, Some(ids.uid), Some(ids.gid)).map_err(fail)?;
        }
    }
    Ok(())
}

/// The isolation this kernel allows for one guest, decided before the fork.
struct SandboxPlan {
    unshare_flags: libc::c_int,
    landlock: Option<landlock::Ruleset>,
    view: Option<view::ViewPlan>,
    report: SandboxReport,
}

impl SandboxPlan {
    fn prepare(
        work_dir: &Path,
        ids: Option<Ids>,
        allow_network: bool,
        layers: Layers,
        hidden: &[PathBuf],
    ) -> SandboxPlan {
        let mut warnings = Vec::new();
        let uid = ids.map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
        let gid = ids.map_or_else(|| nix::unistd::getegid().as_raw(), |i| i.gid);
        // The narrow view (user, mount, PID and IPC namespaces, and a network
        // one when the job has no network) wherever the kernel allows it.
        let view = if layers.view {
            match view::ViewPlan::new(work_dir, uid, gid, hidden) {
                Ok(v) => Some(v),
                Err(e) => {
                    warnings.push(format!("no narrow view: {e}"));
                    None
                }
            }
        } else {
            warnings.push(
                "no narrow view (the kernel refused the namespaces or mounts in them)".into(),
            );
            None
        };
        let net_flag = if allow_network { 0 } else { libc::CLONE_NEWNET };
        let unshare_flags = if view.is_some() {
            VIEW_FLAGS | net_flag
        } else if layers.netns {
            // A user namespace with an IPC namespace of its own, so System V
            // objects die with the job; a network namespace too without network.
            libc::CLONE_NEWUSER | libc::CLONE_NEWIPC | net_flag
        } else {
            0
        };
        let net_namespace = unshare_flags & libc::CLONE_NEWNET != 0;
        if !allow_network && !net_namespace {
            warnings.push("no user and network namespace (the kernel refused unshare)".into());
        }
        // Without the view, Landlock confines reads too.
        let mut readable: Vec<&Path> = view::SYSTEM_DIRS.iter().map(Path::new).collect();
        readable.extend(["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"].map(Path::new));
        let landlock = match landlock::abi_version() {
            Some(abi) => match landlock::build(
                abi,
                work_dir,
                !allow_network && !net_namespace,
                view.is_none().then_some(readable.as_slice()),
            ) {
                Ok(r) => Some(r),
                Err(e) => {
                    warnings.push(format!("Landlock ruleset not built: {e}"));
                    None
                }
            },
            None => {
                warnings.push("Landlock is not available: writes are not confined".into());
                None
            }
        };
        let tcp_denied = landlock.as_ref().is_some_and(|r| r.denies_tcp);
        let network_blocked = !allow_network && (net_namespace || tcp_denied);
        if !allow_network && !network_blocked {
            warnings.push("the guest can reach the network".into());
        }
        SandboxPlan {
            unshare_flags,
            report: SandboxReport {
                uid,
                namespaces: net_namespace,
                landlock: landlock.is_some(),
                network_blocked,
                narrow_view: view.is_some(),
                pid_namespace: view.is_some(),
                work_quota_bytes: None,
                warnings,
            },
            view,
            landlock,
        }
    }
}

fn limits(config: &GuestConfig, spec: &GuestSpec) -> [Limit; launch::LIMIT_COUNT] {
    let mib = 1024 * 1024;
    let address_space = spec
        .mem_mib
        .saturating_add(config.mem_headroom_mib)
        .saturating_mul(mib);
    // Round up so a sub-second limit is not zero (which would mean "none left").
    let cpu = spec.cpu_time_limit.as_secs() + u64::from(spec.cpu_time_limit.subsec_nanos() > 0);
    let cpu = cpu.max(1);
    let same = |resource, value| Limit {
        resource,
        soft: value,
        hard: value,
    };
    [
        same(libc::RLIMIT_AS, address_space),
        Limit {
            resource: libc::RLIMIT_CPU,
            soft: cpu,
            hard: cpu + 2,
        },
        same(libc::RLIMIT_FSIZE, config.max_file_bytes),
        same(libc::RLIMIT_NOFILE, config.max_open_files),
        same(libc::RLIMIT_CORE, 0),
    ]
}

/// The guest's whole environment: a few fixed variables plus the spec's.
fn guest_env(job_id: &str, work_dir: &Path, spec: &GuestSpec) -> BTreeMap<String, String> {
    let work = work_dir.to_string_lossy().into_owned();
    let mut env: BTreeMap<String, String> = [
        ("PATH", GUEST_PATH.to_string()),
        ("HOME", work.clone()),
        ("TMPDIR", work),
        ("LANG", "C.UTF-8".to_string()),
        ("GLEANER_JOB_ID", job_id.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(spec.env.iter().cloned());
    // After the job's own: a job cannot point the node's variables elsewhere.
    if let Some(c) = &spec.checkpoint {
        env.extend(c.env(work_dir));
    }
    env
}

fn exit_info(status: ExitStatus) -> ExitInfo {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitInfo::Code(code),
        (None, Some(sig)) => ExitInfo::Signal(sig),
        (None, None) => ExitInfo::Code(-1),
    }
}

/// Sends `signal` to the guest's group and to every other process of its
/// tree (a child that changed its group). A group that is already gone is
/// not an error.
/// Reads the job group's members from another thread (the duty cycle):
/// the member lists, read afresh each time.
fn group_member_reader(group: &Option<Box<dyn JobGroup>>) -> impl Fn() -> Vec<i32> + Send {
    let files = group.as_ref().map(|g| g.procs_files()).unwrap_or_default();
    move || {
        let mut pids: Vec<i32> = files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
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
}

fn signal_tree(pid: i32, pgid: i32, members: &[i32], signal: Signal) -> Result<(), Errno> {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => return Err(e),
    }
    for p in procfs::guest_tree(pid, pgid) {
        if p.pgrp != pgid {
            let _ = kill(Pid::from_raw(p.pid), signal);
        }
    }
    for &member in members {
        let _ = kill(Pid::from_raw(member), signal);
    }
    Ok(())
}

/// Sets `nice` on every thread of the guest tree and on each autogroup it
/// uses. Returns the threads and autogroups changed, and the first
/// permission error (lowering nice needs `CAP_SYS_NICE` or `RLIMIT_NICE`).
fn set_tree_nice(
    pid: i32,
    pgid: i32,
    members: &[i32],
    nice: i32,
) -> (usize, usize, Option<io::Error>) {
    let mut threads = 0;
    let mut refused = None;
    let mut autogroups = BTreeMap::new();
    let mut pids: Vec<i32> = procfs::guest_tree(pid, pgid)
        .iter()
        .map(|p| p.pid)
        .collect();
    pids.extend_from_slice(members);
    pids.sort_unstable();
    pids.dedup();
    for p in pids {
        for t in procfs::thread_stats(p) {
            // SAFETY: a plain system call; a thread that has gone gives ESRCH.
            let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, t.pid as libc::id_t, nice) };
            if rc == 0 {
                threads += 1;
            } else {
                let err = io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::ESRCH) && refused.is_none() {
                    refused = Some(err);
                }
            }
        }
        if let Some(group) = procfs::read_autogroup(p) {
            autogroups.entry(group.id).or_insert(p);
        }
    }
    let mut groups_set = 0;
    for member in autogroups.into_values() {
        match write_autogroup_nice_retrying(member, nice) {
            Ok(()) => groups_set += 1,
            Err(e) => {
                tracing::warn!(pid = member, error = %e, "cannot set the guest's autogroup nice")
            }
        }
    }
    (threads, groups_set, refused)
}

/// Without `CAP_SYS_ADMIN` the kernel allows one autogroup nice change per
/// 100 ms system-wide and answers EAGAIN in between.
fn write_autogroup_nice_retrying(pid: i32, nice: i32) -> io::Result<()> {
    match procfs::write_autogroup_nice(pid, nice) {
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            std::thread::sleep(Duration::from_millis(110));
            procfs::write_autogroup_nice(pid, nice)
        }
        other => other,
    }
}
