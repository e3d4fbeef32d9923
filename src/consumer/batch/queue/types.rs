//! The batch queue's vocabulary, shared by its core, its driver and the
//! consumer actor: a new batch as the control API hands it over, the
//! queue's errors, a task's event for watchers, a batch's view, its counts,
//! and what the driver's tasks report back ([`QueueMsg`]). Values only.

use std::collections::BTreeMap;
use std::path::PathBuf;

use libp2p::PeerId;

use super::trust::Verdict;
use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::checkpoint::CheckpointNews;
use crate::consumer::batch::estimate::BatchEstimate;
use crate::consumer::batch::policy::PolicyName;
use crate::consumer::batch::record::{BatchRecord, CheckpointSpec, TaskRecord, TaskState};
use crate::consumer::batch::spec::{self, Sweep, TaskTemplate};
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;
use std::time::Duration;

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
    /// `--image`, checked on this node (its argv and env are in `template`).
    pub image: Option<crate::consumer::batch::record::BatchImage>,
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
    /// The later window the task is held for, while it is: watchers (`gleaner
    /// submit`'s queue limit) tell a task waiting for a host's window from
    /// one no host takes.
    pub hold: Option<HoldView>,
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
    /// The queued tasks held for a host's later window (`later`).
    pub holds: BTreeMap<u32, HoldView>,
}

/// A queued task held for a host's later window, as `batch status` shows
/// it: "waiting for host X's window at 19:00 (P 0.83)".
#[derive(Debug, Clone, PartialEq)]
pub struct HoldView {
    /// The host, base58.
    pub host: String,
    /// When the window opens, Unix seconds.
    pub start_unix: i64,
    /// The host's TR for a run in that window (as its record discounts it).
    pub p: f64,
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
    /// The host of a running attempt sent job events past its budget.
    Flooded {
        batch: BatchId,
        task: u32,
        host: PeerId,
        dropped: u64,
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
    /// The winning attempt's staging directory could not be moved into
    /// the task's results.
    LandFailed {
        batch: BatchId,
        task: u32,
        error: String,
    },
    /// A landing found a result already in the task's place (moved in by a
    /// run of the node killed before its record said so) and kept it: what
    /// that result says of itself, for the record.
    KeptEarlier {
        batch: BatchId,
        task: u32,
        /// The host its provenance names.
        host: Option<String>,
        /// Its exit status.
        exit_status: Option<i32>,
    },
    /// A copy of a verified task was judged, or its accepted copy kept.
    Verdict {
        batch: BatchId,
        task: u32,
        verdict: Verdict,
    },
    /// Hosts' TR for windows of `length_secs` that start later
    /// ([`super::state::Action::AskLater`]): per host, `(start, TR)` for
    /// the starts it answered (checked: TR within 0..=1).
    Later {
        length_secs: u64,
        answers: Vec<(PeerId, Vec<(i64, f64)>)>,
    },
}

/// Least time between two rounds, so a burst of ends makes one round.
pub(super) const SURVEY_GAP: Duration = Duration::from_millis(200);
/// The first wait between two looks while work waits and nothing changes;
/// each look that finds nothing new doubles it.
pub const IDLE_SURVEY_EVERY: Duration = Duration::from_secs(2);

/// What a round does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Round {
    /// Asks a few hosts per placeable task: something changed.
    Ask,
    /// Asks a few hosts per member with news.
    News,
    /// Asks nobody: the members' summaries only.
    Look,
}

/// When each entry of a task's avoid list stops applying (the same order
/// as the list, which only grows), and how many of them have lapsed and
/// been looked at (`tick`). Kept by the core's state, read and written by
/// `avoid` alone; here so that neither imports the other.
#[derive(Debug, Clone, Default)]
pub(super) struct AvoidLapses {
    pub(super) until: Vec<std::time::Instant>,
    /// Entries whose lapse has asked for a round already.
    pub(super) announced: usize,
}

/// A queued task held for one host's later window (`later`). Kept by the
/// core's state, read and written by `later` (and `placement`, which starts
/// a held task only on its host once the window is open).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Held {
    pub(super) peer: PeerId,
    /// When the window opens, Unix seconds.
    pub(super) start_unix: i64,
    /// The run's expected wall seconds there.
    pub(super) wall_secs: f64,
    /// The host's TR for the window, as its record discounts it.
    pub(super) p: f64,
    /// The window has come with its host free: the task starts there, and
    /// only there, in this round.
    pub(super) open: bool,
    /// A round has asked the host since the window came.
    pub(super) due_asked: bool,
}

/// Hosts' TR for windows of one length that start later (`later`), asked
/// at most every `LATER_FRESH` (`later`).
#[derive(Debug, Clone, Default)]
pub(super) struct LaterTr {
    /// When they were last asked.
    pub(super) asked: Option<std::time::Instant>,
    /// The answers to that ask are in.
    pub(super) answered: bool,
    /// Per host, `(start, TR)`, starts in Unix seconds.
    pub(super) by_peer: std::collections::HashMap<PeerId, Vec<(i64, f64)>>,
}
