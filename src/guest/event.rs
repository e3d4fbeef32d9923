//! What the supervisor reports about its guest: timestamped [`GuestEvent`]s
//! handed to an [`EventSink`], and the [`Clock`] that stamps them.
//!
//! The supervisor does not store events; the node passes a sink that
//! forwards them to the job log. This module knows nothing about sled.

use super::capture::Stream;
use crate::model::policy::KillCause;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
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
    /// The guest's main process ended.
    Exited {
        exit: ExitInfo,
        cause: Option<KillCause>,
    },
    /// Output past the cap was dropped.
    OutputTruncated { stream: Stream, cap_bytes: u64 },
    /// A guest group left by a previous run of the node was killed on start-up.
    OrphanKilled { pgid: i32 },
}
