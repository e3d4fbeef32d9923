//! What the supervisor reports about its guest: timestamped [`GuestEvent`]s
//! handed to an [`EventSink`], and the [`Clock`] that stamps them.
//!
//! The supervisor does not store events; the node passes a sink that
//! forwards them to the job log. This module knows nothing about sled.

use super::capture::Stream;
use crate::model::policy::KillCause;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// The time source for event stamps is the crate-wide clock, so tests can fix it.
pub use crate::clock::{Clock, SystemClock};

/// Where events go. Called from the supervisor's caller and from the output
/// capture threads, so it must be cheap and must not call back into the supervisor.
pub trait EventSink: Send + Sync {
    fn record(&self, event: GuestEvent);
}

impl<F: Fn(GuestEvent) + Send + Sync> EventSink for F {
    fn record(&self, event: GuestEvent) {
        self(event)
    }
}

/// How a guest process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitInfo {
    /// It called `exit` with this code.
    Code(i32),
    /// It was ended by this signal (9 after a kill, 24 after the CPU-time limit).
    Signal(i32),
}

/// The isolation a guest actually got, for the log and for status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// The uid the guest runs as.
    pub uid: u32,
    /// True when the guest has its own user and network namespace.
    pub namespaces: bool,
    /// True when Landlock limits the guest's writes to its work directory.
    pub landlock: bool,
    /// True when the guest cannot use the network (namespace or Landlock TCP rules).
    pub network_blocked: bool,
    /// True when the guest sees only the system dirs, its work dir and its
    /// own processes (mount and PID namespaces); without it, Landlock read
    /// rules narrow what it reads where the kernel has Landlock.
    #[serde(default)]
    pub narrow_view: bool,
    /// True when the job runs in a PID namespace, so that ending its first
    /// process ends every process it made.
    #[serde(default)]
    pub pid_namespace: bool,
    /// The quota on the work dir (the size of its tmpfs), bytes, if any.
    #[serde(default)]
    pub work_quota_bytes: Option<u64>,
    /// Why something asked for could not be had, one line each.
    pub warnings: Vec<String>,
}

/// One thing that happened to the guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestEvent {
    /// When, from the supervisor's clock.
    pub at: Timestamp,
    /// The job the guest runs.
    pub job_id: String,
    pub kind: GuestEventKind,
}

/// The kinds of guest events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum GuestEventKind {
    /// The guest process started.
    Started {
        pid: i32,
        dir: PathBuf,
        sandbox: SandboxReport,
    },
    /// Every thread (and the autogroup) was set to `nice`.
    Reniced {
        nice: i32,
        threads: usize,
        autogroups: usize,
    },
    /// Nice 0 was asked for but the kernel refused to lower it; the guest stays at 19.
    NiceNotLowered { reason: String },
    /// The group was stopped with SIGSTOP.
    Suspended,
    /// The group was continued with SIGCONT.
    Resumed,
    /// SIGKILL was sent to the group.
    KillSent { cause: KillCause },
    /// SIGTERM was sent to a checkpointing guest's group: it has `grace_millis`
    /// to save its state before SIGKILL.
    TermSent { cause: KillCause, grace_millis: u64 },
    /// What the guest used, measured as it ended (just before `Exited`):
    /// CPU of the job's processes from the keeper's rusage (`None` when it
    /// could not be read), wall time from its start.
    Usage {
        cpu_millis: Option<u64>,
        wall_millis: u64,
    },
    /// The guest's checkpoint file changed and was copied to
    /// `<job dir>/checkpoint`, with this size and BLAKE3 hash.
    Checkpointed { size: u64, hash: [u8; 32] },
    /// The guest's checkpoint file was not taken (over the cap, not a
    /// regular file); the reason names it.
    CheckpointRefused { reason: String },
    /// The guest's main process ended.
    Exited {
        exit: ExitInfo,
        cause: Option<KillCause>,
    },
    /// Output past the cap was dropped.
    OutputTruncated { stream: Stream, cap_bytes: u64 },
    /// A job group (cgroup) left by a previous run of the node, or by an
    /// earlier job, was killed and removed; `processes` were still in it.
    LeftoverGroupKilled { processes: usize },
    /// A guest group left by a previous run of the node was killed on start-up.
    OrphanKilled { pgid: i32 },
}

/// One line an owner reads, e.g. in `gleaner run-local`.
impl fmt::Display for GuestEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestEventKind::Started { pid, dir, sandbox } => {
                write!(f, "started, pid {pid} in {}", dir.display())?;
                if !sandbox.warnings.is_empty() {
                    write!(f, " ({})", sandbox.warnings.join("; "))?;
                }
                Ok(())
            }
            GuestEventKind::Reniced { nice, threads, .. } => {
                write!(f, "priority set to nice {nice} ({threads} threads)")
            }
            GuestEventKind::NiceNotLowered { reason } => {
                write!(f, "stays at nice 19: {reason}")
            }
            GuestEventKind::Suspended => f.write_str("suspended: the owner's load is above th2"),
            GuestEventKind::Resumed => f.write_str("resumed"),
            GuestEventKind::KillSent { cause } => write!(f, "killed: {cause}"),
            GuestEventKind::TermSent {
                cause,
                grace_millis,
            } => write!(
                f,
                "asked to stop (SIGTERM, {grace_millis} ms to save its state): {cause}"
            ),
            GuestEventKind::Usage {
                cpu_millis,
                wall_millis,
            } => match cpu_millis {
                Some(cpu) => write!(f, "used {cpu} ms of CPU in {wall_millis} ms"),
                None => write!(f, "ran {wall_millis} ms"),
            },
            GuestEventKind::Checkpointed { size, .. } => {
                write!(f, "checkpoint taken ({size} bytes)")
            }
            GuestEventKind::CheckpointRefused { reason } => {
                write!(f, "checkpoint not taken: {reason}")
            }
            GuestEventKind::Exited { exit, cause } => {
                match exit {
                    ExitInfo::Code(code) => write!(f, "exited with code {code}")?,
                    ExitInfo::Signal(sig) => write!(f, "ended by signal {sig}")?,
                }
                match cause {
                    Some(cause) => write!(f, " ({cause})"),
                    None => Ok(()),
                }
            }
            GuestEventKind::OutputTruncated { stream, cap_bytes } => {
                write!(f, "{stream:?} output cut at {cap_bytes} bytes")
            }
            GuestEventKind::LeftoverGroupKilled { processes } => {
                write!(
                    f,
                    "removed a job group left behind ({processes} processes killed)"
                )
            }
            GuestEventKind::OrphanKilled { pgid } => {
                write!(f, "killed process group {pgid} left by an earlier run")
            }
        }
    }
}
