//! The batch queue: every batch this node submitted, its tasks, and which
//! host runs what, as a pure core and a thin driver.
//!
//! - [`QueueCore`] (`state`, with one file per concern: `placement`,
//!   `retries`, `deadlines`, `replicas` and `quorum` with their state in
//!   `trust`, `outputs`, `checkpoints`, `restore`, `commands`) decides
//!   everything: it takes one input at a time (a command, a survey's
//!   answer, an attempt's news or end, a judged copy, a copied result, a
//!   timer tick), each with the time, and returns the [`Action`]s to
//!   perform. No tokio, no sled, no files, no clock: `tests` drives it alone.
//! - [`BatchQueue`] (`driver`, with `tasks`, `files` and `trust_store`) is
//!   the thin async half the consumer actor owns: it reads the clock,
//!   performs the actions (writes through [`crate::consumer::batch::store`]
//!   before acting on a change that must survive a restart, sends task
//!   events, spawns attempts, surveys, judgments and copies as tracked
//!   tasks) and feeds what they report ([`QueueMsg`]) back to the core.
//!
//! Dispatch: while tasks wait, the queue surveys the pool; the oldest batch
//! with waiting tasks orders the free hosts by its placement policy
//! ([`crate::consumer::batch::PolicyName::order`]) and hands them its
//! waiting tasks that may run there (the batch's `max_running`, hosts that
//! failed the task); the next batch gets the hosts left. Each attempt runs
//! as a task ([`crate::consumer::batch::attempt`]) and reports its end back
//! to the actor as a [`QueueMsg`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use libp2p::PeerId;

use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::checkpoint::CheckpointNews;
use crate::consumer::batch::forecast::BatchEstimate;
use crate::consumer::batch::policy::PolicyName;
use crate::consumer::batch::record::{BatchRecord, CheckpointSpec, TaskRecord, TaskState};
use crate::consumer::batch::spec::{self, Sweep, TaskTemplate};
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;

mod checkpoints;
mod commands;
mod deadlines;
mod driver;
mod files;
mod outputs;
mod placement;
mod quorum;
mod replicas;
mod restore;
mod retries;
mod state;
mod tasks;
#[cfg(test)]
mod tests;
mod trust;
mod trust_store;

pub use driver::BatchQueue;
pub use files::copy_task_results;
pub use state::{Action, Launch, Now, QueueCore};
pub use trust::{Judge, Landing, Trust, Verdict};

/// A new batch, as the control API hands it over (paths absolute).
#[derive(Debug, Clone)]
pub struct NewBatch {
    pub name: Option<String>,
    pub template: TaskTemplate,
    pub sweep: Sweep,
    pub mem_mib: u64,
    pub runtime_secs: u64,
    pub limit_secs: u64,
    pub max_running: Option<u32>,
    pub output_dir: Option<PathBuf>,
    pub policy: PolicyName,
    /// When the user wants the last task done, Unix seconds.
    pub deadline_unix: Option<i64>,
    pub checkpoint: Option<CheckpointSpec>,
    /// `--replicas/--quorum/--verify/--validator` (checked).
    pub verify: crate::consumer::batch::verify::VerifySpec,
}

/// Seconds one checkpoint is taken to cost when a batch does not say.
pub const DEFAULT_CHECKPOINT_COST_SECS: u64 = 5;

/// Why a batch was refused or a batch command failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error("no batch {0} on this node (`gleaner batch list`)")]
    UnknownBatch(BatchId),
    #[error("batch {0} has tasks queued or running; `gleaner batch cancel {0}` first")]
    NotEnded(BatchId),
    #[error("input {path}: {why}")]
    Input { path: String, why: String },
    #[error("--output-dir {path}: {why}")]
    OutputDir { path: String, why: String },
    #[error("{0}")]
    Store(String),
    #[error("no estimate: {0}")]
    Estimate(String),
}

/// One change of one task, for `batch wait` and the progress bar.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvent {
    pub batch: BatchId,
    pub task: u32,
    pub state: TaskState,
    pub host: Option<String>,
    pub attempts: u32,
    pub exit_status: Option<i32>,
    pub reason: Option<String>,
    /// A host's job event, when that is what happened.
    pub event: Option<String>,
    pub at_unix: i64,
}

/// A batch as `batch status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchView {
    pub record: BatchRecord,
    pub tasks: Vec<TaskRecord>,
    pub counts: Counts,
    /// When the last task should end, from the pace of the tasks so far.
    pub eta_unix: Option<i64>,
    /// The node's copy of the results: `<dir>/<task>/`.
    pub results_dir: PathBuf,
    /// CISNE's estimate of its end from the last survey's hosts (`batch
    /// status`; not in `batch list`).
    pub estimate: Option<BatchEstimate>,
    /// How its results are checked (`None`: taken as they come).
    pub verify: Option<crate::consumer::batch::verify::VerifySpec>,
    /// The copies of each verified task still being decided.
    pub copies: BTreeMap<u32, Vec<crate::consumer::batch::verify::CopyView>>,
}

/// Tasks by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub queued: u32,
    pub running: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
}

impl Counts {
    pub fn of(tasks: &[TaskRecord]) -> Counts {
        let mut c = Counts::default();
        for t in tasks {
            match t.state {
                TaskState::Queued => c.queued += 1,
                TaskState::Running => c.running += 1,
                TaskState::Done => c.done += 1,
                TaskState::Failed => c.failed += 1,
                TaskState::Cancelled => c.cancelled += 1,
            }
        }
        c
    }

    pub fn finished(&self) -> bool {
        self.queued == 0 && self.running == 0
    }
}

/// What attempt and survey tasks report back to the actor.
#[derive(Debug)]
pub enum QueueMsg {
    Surveyed(Result<Vec<SurveyedHost>, String>),
    Accepted {
        batch: BatchId,
        task: u32,
    },
    /// The host of a running attempt reported an event of its job.
    HostEvent {
        batch: BatchId,
        task: u32,
        text: String,
    },
    Ended {
        batch: BatchId,
        task: u32,
        host: PeerId,
        end: AttemptEnd,
    },
    /// A checkpoint or the guest's usage came from a task's host.
    Checkpoint {
        batch: BatchId,
        task: u32,
        news: CheckpointNews,
    },
    /// A landed task's results were copied to the batch's output directory
    /// (or could not be).
    Copied {
        batch: BatchId,
        task: u32,
        error: Option<String>,
    },
    /// A copy of a verified task was judged, or its accepted copy kept.
    Verdict {
        batch: BatchId,
        task: u32,
        verdict: Verdict,
    },
}

/// Least time between two surveys, so a burst of ends makes one survey.
const SURVEY_GAP: Duration = Duration::from_millis(200);
/// How often the queue looks again while tasks wait and nothing happens.
pub const IDLE_SURVEY_EVERY: Duration = Duration::from_secs(2);
/// How long a survey's ranking may place tasks on hosts that free up.
const RANKING_FRESH_FOR: Duration = Duration::from_secs(10);
/// How often the consumer actor asks the queue whether to survey.
pub const TICK: Duration = Duration::from_millis(100);
/// How often running tasks of batches with a deadline are looked at.
const DEADLINE_CHECK_EVERY: Duration = Duration::from_secs(1);
/// A running task whose chance of meeting its batch's deadline is below
/// this gets a second copy on another free host...
const COPY_BELOW: f64 = 0.5;
/// ...when a fresh copy there has at least this much more chance.
const COPY_GAIN: f64 = 0.1;
