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
//!
//! This file is the module's face: the settings, the spec of one guest, what
//! a start returns and a status shows, and the errors. The supervisor itself
//! lives in `supervisor`, the sandbox decisions in `sandbox` and the
//! user switch in `ids`.
//!
//! *Layers here and elsewhere.* On the development machine (kernel 6.18,
//! root, hybrid cgroups, Landlock ABI 7) a guest gets: cgroup v1
//! pids/memory/cpu.idle/freezer plus the unified `cgroup.kill`; user, mount,
//! PID, IPC and network namespaces; the narrow view; Landlock write rules and
//! no TCP; rlimits; nice 19 and its autogroup; the 1 GiB work-dir tmpfs. On a
//! machine without cgroup delegation (a non-root node outside a
//! `Delegate=yes` unit) the job group is "none" and the PID namespace alone
//! ends every process with the first (and after the node's kill -9, through
//! the keeper's and init's parent-death signals); there is no job-wide
//! process or memory limit beyond rlimits, no `cpu.idle` (renice and
//! autogroup nice only), and no work-dir quota (tmpfs needs root;
//! `RLIMIT_FSIZE` bounds each file). Where user namespaces are refused too,
//! the view falls back to Landlock read rules and the job to its session and
//! process group. `gleaner status` prints which hold.

mod capture;
pub mod checkpoint;
pub mod containment;
mod event;
mod ids;
mod landlock;
mod launch;
mod orphan;
mod quota;
mod sandbox;
mod supervisor;
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
pub use quota::unmount_leftovers;
pub use supervisor::Supervisor;
pub use throttle::ThrottleMode;

use crate::model::ids::JobId;
use jiff::Timestamp;
use nix::errno::Errno;
use std::io;
use std::path::PathBuf;
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
    /// there (checked as a [`RelPath`](crate::model::relpath::RelPath); owned by the guest's user)
    /// and a file the node prepared for this job alone (a verified copy of a
    /// peer's input). Moved by a rename, so a large input costs nothing here;
    /// copied by the kernel if the rename crosses filesystems.
    pub inputs: Vec<(String, PathBuf)>,
    /// The guest saves its state to a file (docs/checkpoint.md): it gets the
    /// `GLEANER_CHECKPOINT*` variables, SIGTERM and a grace before SIGKILL on
    /// an S3/S4 kill, and the node snapshots the file as it changes.
    pub checkpoint: Option<CheckpointPlan>,
    /// The image the guest's root is (issue 31); `None`: the host's system
    /// dirs, as before. A guest with an image needs the narrow view.
    pub image: Option<GuestImage>,
}

/// The root a guest runs in when its job brought an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestImage {
    /// The unpacked image in the node's image cache; bound read-only.
    pub rootfs: PathBuf,
    /// Where the work dir appears and the guest starts: the image's
    /// `WorkingDir`, else [`IMAGE_WORK_DIR`].
    pub work_dir: PathBuf,
    /// Keeps the image in the cache: the supervisor holds it until the
    /// guest's end is reported, so no eviction removes a running root.
    pub lease: crate::image::ImageLease,
}

/// Where a guest in an image finds its work dir when the image names none.
pub const IMAGE_WORK_DIR: &str = "/work";

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
    #[error("cannot run the guest in its image: {0}")]
    Image(String),
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
