//! What one asks the host loop and what it answers: the domain values of its
//! commands and queries, the snapshot it publishes, and [`guest_spec`], the
//! one place a job becomes a [`GuestSpec`] under the node's limits.
//!
//! Plain values: this module must not know the loop, its channels, HTTP
//! (`control`) nor the wire (`net`), beyond the checkpoint order a peer's
//! job carries.

use crate::guest::{GuestSpec, GuestStatus};
use crate::model::admit::HostFacts;
use crate::model::baselines::MethodId;
use crate::model::ids::JobId;
use crate::model::owner::{IdleReason, S5Cause, Schedule};
use crate::model::series::HostSeries;
use crate::model::state::State;
use crate::monitor::MonitorReading;
use crate::node::config::Config;
use crate::node::OwnerLoad;
use crate::report::Basis;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One of `status`'s predictions: TR and what it stands on (a new host's
/// prior, or its record), or why there is none.
pub type StatusTr = Result<(f64, Basis), String>;

/// The node's history as its predictors read it.
#[derive(Debug, Clone)]
pub struct HistoryView {
    pub series: Arc<HostSeries>,
    /// The node's thresholds with no declared working set.
    pub thresholds: crate::model::state::Thresholds,
    /// Unix seconds when it was asked.
    pub now: i64,
}

/// What `predict` through the node asks.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictQuery {
    pub window_secs: u64,
    /// Window start, Unix seconds; now when absent.
    pub at: Option<i64>,
    pub mem_mib: u64,
    /// The node's default when absent.
    pub method: Option<MethodId>,
    /// History days; the node's `[history] days` when absent.
    pub days: Option<usize>,
    /// Discretisation step; the series' own when absent.
    pub step_secs: Option<u32>,
}

/// Who asks for a guest: which admission checks apply, and whether the
/// host loop names its job.
pub use crate::model::admit::GuestOrigin;

/// A guest to start.
#[derive(Debug, Clone)]
pub struct GuestStart {
    pub origin: GuestOrigin,
    /// The local job id (the pool host names remote jobs itself); `None`
    /// lets the host loop name a local one.
    pub job_id: Option<JobId>,
    pub job: GuestJob,
}

/// What the job itself asks for; the host loop adds the node's limits
/// ([`guest_spec`], the one place a [`GuestSpec`] is built).
#[derive(Debug, Clone, PartialEq)]
pub struct GuestJob {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Declared working set, MiB.
    pub mem_mib: u64,
    /// Wall-clock limit; the node's `[guest] max_runtime_secs` when absent
    /// and never above it.
    pub runtime_secs: Option<u64>,
    /// Files moved into the work directory before launch: (path there, a
    /// verified file prepared for this job on this machine).
    pub inputs: Vec<(String, PathBuf)>,
    /// The job's checkpoint order (a peer's `--checkpoint`); the host's cap
    /// on its size is added by [`guest_spec`].
    pub checkpoint: Option<crate::net::protocol::CheckpointOrder>,
    /// The unpacked image the job runs in (issue 31), if it brought one.
    pub image: Option<crate::guest::GuestImage>,
}

/// The answer to `pause` and `resume`.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseOutcome {
    pub paused: bool,
    /// False when the node already was in the asked-for state.
    pub changed: bool,
    /// When a timed pause ends, Unix seconds.
    pub until: Option<i64>,
    /// The job the pause killed, if one ran.
    pub killed_job: Option<JobId>,
    /// `pause --after-job` with a guest running: the node pauses when it ends.
    pub after_job: Option<JobId>,
}

/// The answer to an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOutcome {
    pub added: u64,
    pub already_present: u64,
}

/// The node as `status` shows it.
#[derive(Debug, Clone)]
pub struct HostStatus {
    pub data_dir: PathBuf,
    pub started_at: i64,
    pub now: i64,
    pub paused: bool,
    pub paused_until: Option<i64>,
    /// The state a guest sees (S4 below its declared memory); S5 while paused.
    pub state: Option<State>,
    pub last: Option<MonitorReading>,
    pub samples: u64,
    pub guest: Option<(GuestStatus, u64)>,
    /// TR for each of [`super::STATUS_WINDOWS_SECS`] and what it stands
    /// on (a new host's prior, or its record), or why there is none.
    pub predictions: Vec<(u64, StatusTr)>,
    pub method: MethodId,
    pub owner_load: OwnerLoad,
    /// The containment layers a guest gets on this machine.
    pub containment: String,
    /// Sample rows found missing at the end of the store at start (a torn
    /// write sled dropped when recovering); 0 when none.
    pub samples_lost_at_start: u64,
    /// `[owner] hours`.
    pub schedule: Schedule,
    /// The schedule or the battery withholds the machine now.
    pub withheld: Option<S5Cause>,
    /// A `pause --after-job` waits for the running guest.
    pub pause_after_job: bool,
    /// Why no guest runs now; `None` while one runs.
    pub why_idle: Option<IdleReason>,
    /// How `[guest] cpu_limit_percent` is enforced.
    pub throttle: crate::guest::ThrottleMode,
}

/// What the host loop publishes on every change, for the pool host's
/// announcements, answers and admission (a `watch`: readers see the latest,
/// never block it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostSnapshot {
    /// The state peers see: the last reading's, S5 while paused, `None` before the first.
    pub state: Option<State>,
    pub paused: bool,
    /// A guest could start here now.
    pub slot_free: bool,
    /// The owner's CPU load at the last reading, percent.
    pub cpu: Option<f64>,
    /// Memory free for a guest at the last reading, MiB.
    pub free_mib: Option<u64>,
    /// The schedule or the battery withholds the machine (the state is S5).
    pub withheld: Option<S5Cause>,
    /// A `pause --after-job` waits for the running guest.
    pub pause_after_job: bool,
    /// Why no guest runs now; `None` while one runs.
    pub why_idle: Option<IdleReason>,
    /// How `[guest] cpu_limit_percent` is enforced.
    pub throttle: crate::guest::ThrottleMode,
    /// The guest running here, if one runs.
    pub running: Option<JobId>,
}

impl HostSnapshot {
    /// The admission rule's facts as of this snapshot, for a node whose
    /// `[guest] enabled` is `guests_enabled`. Its state is S5 while paused
    /// or withheld, which the rule refuses first anyway.
    pub fn admission_facts(&self, guests_enabled: bool) -> HostFacts {
        HostFacts {
            guests_enabled,
            paused: self.paused,
            withheld: self.withheld,
            finishing: self.pause_after_job,
            running: self.running.clone(),
            state: self.state,
            free_mib: self.free_mib,
        }
    }
}

/// A guest's spec, built one way for local and remote jobs: limits from the
/// node's `[guest]` config (the runtime at most `max_runtime_secs`, at least
/// a second), the job's own argv, environment, memory and input files.
pub fn guest_spec(config: &Config, job: GuestJob) -> GuestSpec {
    let guest = &config.guest;
    let max = guest.max_runtime_secs.max(1);
    let limit = Duration::from_secs(job.runtime_secs.unwrap_or(max).clamp(1, max));
    GuestSpec {
        argv: job.argv,
        env: job.env,
        mem_mib: job.mem_mib,
        cpu_time_limit: limit,
        wall_limit: limit,
        max_output_bytes: guest.max_output_mib.saturating_mul(1 << 20),
        allow_network: guest.allow_network,
        user: None,
        inputs: job.inputs,
        checkpoint: job.checkpoint.map(|c| crate::guest::CheckpointPlan {
            path: c.path,
            interval: Duration::from_secs(c.interval_secs),
            grace: Duration::from_secs(c.grace_secs),
            max_bytes: guest.max_checkpoint_mib.saturating_mul(1 << 20),
        }),
        image: job.image,
    }
}
