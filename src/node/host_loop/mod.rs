//! The host loop: the actor that owns this machine's side of the node — the
//! history store, the guest supervisor, the monitor's readings and the
//! five-state policy. Every input (readings, guest events, [`HostCommand`]s
//! from the control API and the pool host, timers, shutdown) is selected into
//! one closed event and handled in one `match` (rust-analyzer's
//! `main_loop`), so the store and the supervisor have a single owner.
//!
//! A reading flows: record the sample (and a transition when the state
//! changed) → judge the guest's state (S4 against its declared memory) →
//! policy `decide` → supervisor `apply`. Guest events flow into the job log,
//! out to `run-local` streams (a broadcast) and to the pool host (an
//! unbounded channel, so no remote job's event is ever dropped).
//!
//! The folder, by job:
//! - `handle`: the public face, [`HostHandle`] and its [`HostCommand`]s;
//! - `messages`: what one asks the loop and what it answers;
//! - `engine`: the loop itself, its state, its events and its one `match`;
//! - `supervision`: readings, the policy, the guest's start and end;
//! - `owner`: the owner's pause and rules (schedule, battery);
//! - `transfer`: the streamed import and export, off the loop;
//! - `series`: the history as a series, cached for predictions;
//! - `reader`: [`HostReader`], the read-only queries (predict, a peer's
//!   reliability answer, the history) on the shared caches, off the loop.
//!
//! This module must not know HTTP or JSON (that is `control`), the Swarm
//! (`net`), peers' jobs (`pool_host`) nor how states are defined or when a
//! guest may start (`model`). Its answers are domain values and its errors
//! a [`HostError`].

#[cfg(test)]
mod ahead_tests;
mod engine;
mod handle;
mod messages;
mod owner;
mod reader;
mod series;
mod streams;
mod supervision;
mod transfer;

pub use engine::{HostInputs, HostLoop, HostParts};
pub use handle::{HostCommand, HostHandle};
pub use messages::{
    guest_spec, GuestJob, GuestOrigin, GuestStart, HistoryView, HostSnapshot, HostStatus,
    ImportOutcome, PauseOutcome, PredictQuery,
};
pub use owner::schedule_allows;
pub use reader::HostReader;
pub use streams::{ExportBody, ImportBody};
pub use transfer::MAX_IMPORT_BYTES;

use crate::model::admit::Refusal;
use crate::model::ids::JobId;
use crate::model::owner::{PauseOutOfRange, S5Cause};
use crate::model::state::State;

/// The windows `status` predicts for.
pub const STATUS_WINDOWS_SECS: [u64; 3] = [3600, 3 * 3600, 10 * 3600];
/// Most job-log events one `JobLog` command returns.
pub const MAX_JOB_LOG: usize = 1000;

/// Why the host loop refused or could not do what it was asked. The control
/// API maps these to HTTP statuses; this type knows no HTTP. Its refusals
/// are the admission rule's ([`Refusal`], the same messages).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostError {
    #[error("this node hosts no guests (consumer-only)")]
    NoGuests,
    #[error("the owner has paused this node; `gleaner resume` first")]
    Paused,
    #[error("this node withholds itself now ({0}) and takes no guest")]
    Withheld(S5Cause),
    #[error("the node pauses once its running guest has finished (`pause --after-job`)")]
    Finishing,
    #[error("a guest is already running here (job {job_id})")]
    Busy { job_id: JobId },
    #[error("the host is in {0} now and takes no guest")]
    HostState(State),
    #[error(
        "the job declares {asked} MiB; this node accepts at most {limit} MiB ([guest] max_mem_mib)"
    )]
    TooMuchMemory { asked: u64, limit: u64 },
    /// A timed pause outside the one bound (`model::owner::check_pause`).
    #[error(transparent)]
    PauseLength(#[from] PauseOutOfRange),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Internal(String),
    #[error("the node is shutting down")]
    Unavailable,
}

impl From<Refusal> for HostError {
    /// The one place the admission rule's refusal becomes the host's error.
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NoGuests => HostError::NoGuests,
            Refusal::Paused => HostError::Paused,
            Refusal::Withheld(cause) => HostError::Withheld(cause),
            Refusal::Finishing => HostError::Finishing,
            Refusal::TooMuchMemory { asked, limit } => HostError::TooMuchMemory { asked, limit },
            Refusal::Busy { job_id } => HostError::Busy { job_id },
            Refusal::HostState(state) => HostError::HostState(state),
        }
    }
}
