//! The batch queue: every batch this node submitted, its tasks, and which
//! host runs what. It lives inside the consumer actor (the actor calls it
//! from its loop; nothing here blocks), and writes through [`BatchStore`]
//! before acting on a change that must survive a restart.
//!
//! Dispatch: while tasks wait, the queue surveys the pool (in a task of its
//! own); the oldest batch with waiting tasks orders the free hosts by its
//! placement policy ([`PolicyName::order`]) and hands them its waiting
//! tasks that may run there (the batch's `max_running`, hosts that failed
//! the task); the next batch gets the hosts left. Each attempt runs as a task
//! ([`attempt`]) and reports its end back to the actor as a [`QueueMsg`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::forecast::BatchEstimate;
use crate::consumer::batch::policy::PolicyName;
use crate::consumer::batch::record::{BatchRecord, CheckpointSpec, TaskRecord, TaskState};
use crate::consumer::batch::spec::{self, Sweep, TaskTemplate};
use crate::consumer::batch::store::BatchStore;
use crate::consumer::pool::{JobPool, JobSettings};
use crate::consumer::survey::SurveyedHost;
use crate::consumer::Inbox;
use crate::model::ids::BatchId;

mod commands;
mod deadlines;
mod driver;
mod outputs;
mod placement;
mod quorum;
mod retries;
mod trust;

pub use outputs::copy_task_results;
pub use trust::Verdict;

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
        news: crate::consumer::batch::checkpoint::CheckpointNews,
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

struct LiveBatch {
    record: BatchRecord,
    tasks: Vec<TaskRecord>,
    running: u32,
}

impl LiveBatch {
    /// The numbers of the tasks in `state`, lowest first.
    fn tasks_in(&self, state: TaskState) -> Vec<u32> {
        self.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.state == state)
            .map(|(i, _)| i as u32)
            .collect()
    }
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

/// The queue. Owned by the consumer actor.
pub struct BatchQueue<P: JobPool + Clone + 'static> {
    pool: P,
    inbox: Inbox,
    store: BatchStore,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    settings: JobSettings,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    batches: BTreeMap<BatchId, LiveBatch>,
    /// Attempts in flight (a task's main attempt and its copies, by host),
    /// each with the token that cancels it.
    running: HashMap<(BatchId, u32, PeerId), CancellationToken>,
    hosts_in_use: HashSet<PeerId>,
    /// Hosts that refused a task for good (not allowed, too big): not
    /// offered that task again while this node runs.
    refused_by: HashMap<(BatchId, u32), HashSet<PeerId>>,
    events: broadcast::Sender<TaskEvent>,
    to_self: mpsc::UnboundedSender<QueueMsg>,
    surveying: bool,
    last_survey: Option<tokio::time::Instant>,
    /// The hosts the last survey found, and when: a host that just
    /// finished a task takes the next one without waiting for a new survey
    /// while this is fresh.
    last_hosts: Vec<SurveyedHost>,
    last_hosts_at: Option<tokio::time::Instant>,
    /// Draws for the `random` policy.
    rng: rand_chacha::ChaCha8Rng,
    last_deadline_check: Option<tokio::time::Instant>,
    /// Set when something changed that may let a task start.
    wanted: bool,
    /// Checkpoint intervals: each host's last TR and the measured cost of
    /// each batch's checkpoints (`batch::checkpoint`).
    checkpoints: crate::consumer::batch::checkpoint::Intervals,
    /// Verified results and the hosts' reputation (`trust`, `quorum`).
    trust: trust::Trust,
    /// Copies to output directories in flight (`outputs`).
    outputs: outputs::OutputCopies,
}

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.events.subscribe()
    }

    pub(super) fn results_dir(&self, id: BatchId) -> PathBuf {
        self.dir.join(id.to_string()).join("results")
    }

    /// Every host's checked results as this node has counted them.
    pub fn reputation(&self) -> HashMap<PeerId, crate::model::trust::HostTrack> {
        self.trust
            .reputation
            .as_ref()
            .map(|r| r.all().clone())
            .unwrap_or_default()
    }

    pub(super) fn task(&self, batch: BatchId, task: u32) -> Option<&TaskRecord> {
        self.batches.get(&batch)?.tasks.get(task as usize)
    }

    pub(super) fn persist(&mut self, batch: BatchId, task: u32) {
        let Some(t) = self.task(batch, task) else {
            return;
        };
        if let Err(e) = self.store.put_task(batch, task, t) {
            tracing::error!(%batch, task, error = %e, "cannot record a task's state");
        }
        self.emit(batch, task, None);
    }

    /// Tells watchers how a task stands, with a host's job event when one
    /// is the news.
    pub(super) fn emit(&self, batch: BatchId, task: u32, event: Option<String>) {
        let Some(t) = self.task(batch, task) else {
            return;
        };
        let _ = self.events.send(TaskEvent {
            batch,
            task,
            state: t.state,
            host: t.host.clone(),
            attempts: t.attempts,
            exit_status: t.exit_status,
            reason: t.reason.clone(),
            event,
            at_unix: self.clock.unix_secs(),
        });
    }
}
