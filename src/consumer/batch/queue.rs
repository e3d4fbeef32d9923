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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;
use rand::SeedableRng;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::consumer::batch::attempt::{self, AttemptEnd, AttemptNews, AttemptPlan};
use crate::consumer::batch::forecast::{
    estimate_batch, view_or_guess, BatchEstimate, BatchShape, RunningShape,
};
use crate::consumer::batch::policy::{PolicyName, TaskNeeds};
use crate::consumer::batch::runtime::{landed_work, planned_runtime, PlannedRuntime};
use crate::consumer::batch::spec::{self, Sweep, TaskTemplate};
use crate::consumer::batch::store::{
    BatchRecord, BatchStore, CheckpointSpec, TaskCopy, TaskRecord, TaskState,
};
use crate::consumer::pool::{JobPool, JobSettings};
use crate::consumer::rank;
use crate::consumer::survey::{SurveyQuery, SurveyedHost};
use crate::consumer::Inbox;
use crate::data::{InputSpec, Offer};
use crate::model::ids::{BatchId, JobId};
use crate::model::sched::deadline::{p_fresh_copy_in_time, p_running_copy_in_time};
use crate::net::protocol::JobSubmit;

#[path = "output_dir.rs"]
mod output_dir;
#[path = "replicas.rs"]
mod replicas;
pub use output_dir::copy_task_results;
pub use replicas::Verdict;

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
    /// Verified results and the hosts' reputation (`replicas`).
    trust: replicas::Trust,
    /// Copies to output directories in flight (`output_dir`).
    outputs: output_dir::OutputCopies,
}

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    /// Opens the queue on `dir` (its store and results) and picks up what an
    /// earlier run left: tasks that were running are re-attached.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        pool: P,
        inbox: Inbox,
        dir: &Path,
        clock: Arc<dyn Clock>,
        settings: JobSettings,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<(Self, mpsc::UnboundedReceiver<QueueMsg>), BatchError> {
        let store =
            BatchStore::open(&dir.join("store")).map_err(|e| BatchError::Store(e.to_string()))?;
        let (loaded, problems) = store.load().map_err(|e| BatchError::Store(e.to_string()))?;
        for p in problems {
            tracing::warn!("batch store: {p}");
        }
        let (to_self, from_tasks) = mpsc::unbounded_channel();
        let (events, _) = broadcast::channel(4096);
        let trust = replicas::Trust::open(&store);
        let mut queue = BatchQueue {
            pool,
            inbox,
            store,
            dir: dir.to_path_buf(),
            clock,
            settings,
            tracker,
            shutdown,
            batches: BTreeMap::new(),
            running: HashMap::new(),
            hosts_in_use: HashSet::new(),
            refused_by: HashMap::new(),
            events,
            to_self,
            surveying: false,
            last_survey: None,
            last_hosts: Vec::new(),
            last_hosts_at: None,
            rng: rand_chacha::ChaCha8Rng::from_os_rng(),
            last_deadline_check: None,
            wanted: true,
            checkpoints: Default::default(),
            trust,
            outputs: Default::default(),
        };
        for (record, tasks) in loaded {
            let id = record.id;
            queue.batches.insert(
                id,
                LiveBatch {
                    record,
                    tasks,
                    running: 0,
                },
            );
            for task in queue.batches[&id].tasks_in(TaskState::Running) {
                queue.reattach(id, task);
            }
            queue.restore_copies(id);
            queue.restore_output_copies(id);
        }
        Ok((queue, from_tasks))
    }

    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.events.subscribe()
    }

    fn results_dir(&self, id: BatchId) -> PathBuf {
        self.dir.join(id.to_string()).join("results")
    }

    /// Checks, expands and stores a new batch; its tasks start as hosts free up.
    pub fn submit(&mut self, new: NewBatch) -> Result<BatchId, BatchError> {
        let tasks = spec::expand(&new.template, &new.sweep)?;
        if let Some(checkpoint) = &new.checkpoint {
            // The checkpoint comes back like an output: same confinement.
            spec::check_output(&checkpoint.path)?;
        }
        check_inputs(&tasks)?;
        let now_ms = self.clock.now().as_millisecond().max(0) as u64;
        let last = self.batches.keys().next_back().map_or(0, |b| b.number());
        let id = BatchId::new(now_ms.max(last + 1));
        // `{batch}` in the output directory is the new batch's id, so a
        // default such as `./gleaner-results/{batch}` never mixes batches.
        let output_dir = new
            .output_dir
            .map(|d| PathBuf::from(d.to_string_lossy().replace("{batch}", &id.to_string())));
        if let Some(dir) = &output_dir {
            std::fs::create_dir_all(dir).map_err(|e| BatchError::OutputDir {
                path: dir.display().to_string(),
                why: e.to_string(),
            })?;
        }
        let record = BatchRecord {
            id,
            name: new.name,
            created_unix: self.clock.unix_secs(),
            command: new.template.argv.clone(),
            mem_mib: new.mem_mib,
            runtime_secs: new.runtime_secs.max(1),
            limit_secs: new.limit_secs.max(1),
            outputs: new.template.outputs.clone(),
            output_dir,
            max_running: new.max_running.filter(|n| *n > 0),
            task_count: tasks.len() as u32,
            cancelled: false,
            policy: new.policy,
            deadline_unix: new.deadline_unix,
            checkpoint: new.checkpoint,
        };
        let records: Vec<TaskRecord> = tasks
            .into_iter()
            .map(|t| TaskRecord::queued(t.argv, t.env, t.inputs))
            .collect();
        self.store
            .create(&record, &records)
            .map_err(|e| BatchError::Store(e.to_string()))?;
        std::fs::create_dir_all(self.results_dir(id))
            .map_err(|e| BatchError::Store(e.to_string()))?;
        self.trust
            .set_spec(id, new.verify)
            .map_err(BatchError::Store)?;
        tracing::info!(batch = %id, tasks = records.len(), "batch queued");
        self.batches.insert(
            id,
            LiveBatch {
                record,
                tasks: records,
                running: 0,
            },
        );
        self.wanted = true;
        // While the last survey is fresh its free hosts take the new tasks
        // at once (a host that became busy since refuses, and the task
        // waits for the next survey): `submit` does not wait for one.
        let fresh = self.fresh_hosts().to_vec();
        self.place_on(&fresh);
        Ok(id)
    }

    pub fn list(&self) -> Vec<BatchView> {
        self.batches
            .keys()
            .filter_map(|id| self.view(*id).ok())
            .collect()
    }

    pub fn view(&self, id: BatchId) -> Result<BatchView, BatchError> {
        let live = self.batches.get(&id).ok_or(BatchError::UnknownBatch(id))?;
        let counts = Counts::of(&live.tasks);
        Ok(BatchView {
            record: live.record.clone(),
            tasks: live.tasks.clone(),
            counts,
            eta_unix: eta(&live.tasks, counts, self.clock.unix_secs()),
            results_dir: self.results_dir(id),
            estimate: None,
            verify: self.verify_spec(id),
            copies: self.live_copies(id),
        })
    }

    /// Estimates a batch before it is queued: checked as `submit` checks it,
    /// nothing queued or sent but the survey. The Monte Carlo runs off the
    /// actor's loop; the answer comes on `reply`.
    pub fn estimate_new(
        &mut self,
        new: &NewBatch,
        reply: oneshot::Sender<Result<BatchEstimate, BatchError>>,
    ) {
        let tasks = match spec::expand(&new.template, &new.sweep)
            .map_err(BatchError::from)
            .and_then(|tasks| check_inputs(&tasks).map(|()| tasks))
        {
            Ok(tasks) => tasks,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let now = self.clock.unix_secs();
        let runtime = new.runtime_secs.max(1);
        let prior = planned_runtime(runtime, &[]);
        let shape = BatchShape {
            // The prior's mean: the estimate draws runtimes around it.
            runtime_secs: prior.mean,
            window_secs: runtime,
            running: Vec::new(),
            waiting: (0..tasks.len() as u32).collect(),
            deadline_in: new.deadline_unix.map(|d| (d - now) as f64),
            checkpoint_cost_secs: new.checkpoint.as_ref().map(|c| c.cost_secs as f64),
            runtime_sigma_log: Some(prior.spread),
        };
        let query = SurveyQuery {
            window_start_unix: now,
            window_secs: runtime,
            mem_mib: new.mem_mib,
            rounds: 1,
        };
        let pool = self.pool.clone();
        self.tracker.spawn(async move {
            let result = match pool.survey(query).await {
                Err(e) => Err(BatchError::Estimate(format!("cannot survey the pool: {e}"))),
                Ok(hosts) => run_estimate(hosts, shape, now).await,
            };
            let _ = reply.send(result);
        });
    }

    /// A running batch's view with its estimate from the last survey's
    /// hosts, computed off the loop; without one when the batch has ended
    /// or no survey has been made.
    pub fn view_with_estimate(
        &self,
        id: BatchId,
        reply: oneshot::Sender<Result<BatchView, BatchError>>,
    ) {
        let mut view = match self.view(id) {
            Ok(view) => view,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let Some(live) = self.batches.get(&id) else {
            return;
        };
        if view.counts.finished() || live.record.cancelled || self.last_hosts.is_empty() {
            let _ = reply.send(Ok(view));
            return;
        }
        let now = self.clock.unix_secs();
        let running = live
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.state == TaskState::Running)
            .filter_map(|(i, t)| {
                Some(RunningShape {
                    task: i as u32,
                    host: t.host.as_deref()?.parse::<PeerId>().ok()?,
                    elapsed_secs: (now - t.started_unix?).max(0) as f64,
                })
            })
            .collect();
        // Waiting tasks are placed lowest number first (`next_task_of`).
        let waiting = live.tasks_in(TaskState::Queued);
        let planned = planned_runtime(live.record.runtime_secs, &live.tasks);
        let shape = BatchShape {
            // The mean: the estimate draws runtimes around it keeping it.
            runtime_secs: planned.mean,
            window_secs: live.record.runtime_secs,
            running,
            waiting,
            deadline_in: live.record.deadline_unix.map(|d| (d - now) as f64),
            checkpoint_cost_secs: live.record.checkpoint.as_ref().map(|c| c.cost_secs as f64),
            runtime_sigma_log: Some(planned.spread),
        };
        let hosts = self.last_hosts.clone();
        self.tracker.spawn(async move {
            view.estimate = run_estimate(hosts, shape, now).await.ok();
            let _ = reply.send(Ok(view));
        });
    }

    /// Marks every task not yet ended cancelled and kills running copies on
    /// their hosts.
    pub fn cancel(&mut self, id: BatchId) -> Result<Counts, BatchError> {
        let now = self.clock.unix_secs();
        let live = self
            .batches
            .get_mut(&id)
            .ok_or(BatchError::UnknownBatch(id))?;
        live.record.cancelled = true;
        self.store
            .put_batch(&live.record)
            .map_err(|e| BatchError::Store(e.to_string()))?;
        let mut changed = Vec::new();
        for (i, task) in live.tasks.iter_mut().enumerate() {
            // A verified task between copies runs nowhere: it ends now too.
            let idle = task.state == TaskState::Running && task.host.is_none();
            if task.state == TaskState::Queued || idle {
                task.state = TaskState::Cancelled;
                task.ended_unix = Some(now);
                task.reason = Some("cancelled".into());
                changed.push(i as u32);
            }
        }
        for (key, cancel) in &self.running {
            if key.0 == id {
                cancel.cancel();
            }
        }
        for task in changed {
            self.persist(id, task);
        }
        let _ = self.store.flush();
        Ok(Counts::of(&self.batches[&id].tasks))
    }

    /// Forgets an ended batch: its records and the node's copy of its
    /// results (copies in its output directory stay). A batch with tasks
    /// queued or running is refused: cancel it first.
    pub fn remove(&mut self, id: BatchId) -> Result<Counts, BatchError> {
        let live = self.batches.get(&id).ok_or(BatchError::UnknownBatch(id))?;
        let counts = Counts::of(&live.tasks);
        if !counts.finished() {
            return Err(BatchError::NotEnded(id));
        }
        self.store
            .remove(id, live.record.task_count)
            .map_err(|e| BatchError::Store(e.to_string()))?;
        self.batches.remove(&id);
        self.trust.forget(id);
        self.forget_output_copies(id);
        self.refused_by.retain(|(b, _), _| *b != id);
        let dir = self.dir.join(id.to_string());
        let store = self.store.clone();
        self.tracker.spawn_blocking(move || {
            let _ = store.flush();
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot delete a removed batch's results");
            }
        });
        tracing::info!(batch = %id, "batch removed");
        Ok(counts)
    }

    /// True when a survey should start now.
    pub fn wants_survey(&self) -> bool {
        if self.surveying || self.shutdown.is_cancelled() {
            return false;
        }
        let waiting = || {
            self.batches.values().any(|b| {
                !b.record.cancelled
                    && b.record.max_running.is_none_or(|m| b.running < m)
                    && b.tasks.iter().any(|t| t.state == TaskState::Queued)
            })
        };
        // A batch with a deadline keeps the view of free hosts fresh while
        // its tasks run, for second copies.
        let watching = || {
            self.batches.values().any(|b| {
                !b.record.cancelled
                    && b.record.deadline_unix.is_some()
                    && b.tasks
                        .iter()
                        .any(|t| t.state == TaskState::Running && t.copies.is_empty())
            })
        };
        let waiting = waiting() || watching() || self.any_wants_copy();
        if !waiting {
            return false;
        }
        let since = self.last_survey.map(|t| t.elapsed());
        match since {
            None => true,
            Some(s) if self.wanted => s >= SURVEY_GAP,
            Some(s) => s >= IDLE_SURVEY_EVERY,
        }
    }

    /// Starts a survey for the oldest waiting task's window.
    pub fn start_survey(&mut self) {
        let Some(first) = self.batches.values().find(|b| {
            !b.record.cancelled
                && b.tasks.iter().any(|t| {
                    t.state == TaskState::Queued
                        || ((b.record.deadline_unix.is_some()
                            || self.trust.spec(b.record.id).is_some())
                            && t.state == TaskState::Running)
                })
        }) else {
            return;
        };
        let query = SurveyQuery {
            window_start_unix: self.clock.unix_secs(),
            window_secs: first.record.runtime_secs,
            mem_mib: first.record.mem_mib,
            rounds: 1,
        };
        self.surveying = true;
        self.wanted = false;
        self.last_survey = Some(tokio::time::Instant::now());
        let pool = self.pool.clone();
        let tx = self.to_self.clone();
        self.tracker.spawn(async move {
            let hosts = pool.survey(query).await.map_err(|e| e.to_string());
            let _ = tx.send(QueueMsg::Surveyed(hosts));
        });
    }

    /// Handles what a task reported.
    pub fn on_msg(&mut self, msg: QueueMsg) {
        match msg {
            QueueMsg::Surveyed(Ok(hosts)) => {
                self.surveying = false;
                self.place(hosts);
            }
            QueueMsg::Surveyed(Err(e)) => {
                self.surveying = false;
                tracing::debug!(error = %e, "batch queue: survey failed");
            }
            QueueMsg::Accepted { batch, task } => {
                self.emit(batch, task, None);
            }
            QueueMsg::HostEvent { batch, task, text } => {
                self.emit(batch, task, Some(text));
            }
            QueueMsg::Checkpoint { batch, task, news } => {
                let now = self.clock.unix_secs();
                let Some(t) = self
                    .batches
                    .get_mut(&batch)
                    .and_then(|b| b.tasks.get_mut(task as usize))
                else {
                    return;
                };
                let text = self.checkpoints.record(batch, t, news, now);
                if let Err(e) =
                    self.store
                        .put_task(batch, task, &self.batches[&batch].tasks[task as usize])
                {
                    tracing::error!(%batch, task, error = %e, "cannot record a task's checkpoint");
                }
                if let Some(text) = text {
                    self.emit(batch, task, Some(text));
                }
            }
            QueueMsg::Ended {
                batch,
                task,
                host,
                end,
            } => self.ended(batch, task, host, end),
            QueueMsg::Verdict {
                batch,
                task,
                verdict,
            } => self.on_verdict(batch, task, verdict),
            QueueMsg::Copied { batch, task, error } => self.copied(batch, task, error),
        }
    }

    fn place(&mut self, hosts: Vec<SurveyedHost>) {
        self.checkpoints.surveyed(&hosts);
        self.last_hosts = hosts;
        self.last_hosts_at = Some(tokio::time::Instant::now());
        let hosts = self.last_hosts.clone();
        self.place_on(&hosts);
    }

    /// The last survey's hosts while it is fresh; empty after that.
    fn fresh_hosts(&self) -> &[SurveyedHost] {
        if self
            .last_hosts_at
            .is_some_and(|t| t.elapsed() < RANKING_FRESH_FOR)
        {
            &self.last_hosts
        } else {
            &[]
        }
    }

    /// Hands waiting tasks to the free hosts among `hosts`: batches in
    /// order of age, each taking the hosts its policy puts first.
    fn place_on(&mut self, hosts: &[SurveyedHost]) {
        let mut free: Vec<SurveyedHost> = hosts
            .iter()
            .filter(|h| !self.hosts_in_use.contains(&h.peer))
            .cloned()
            .collect();
        let waiting: Vec<BatchId> = self
            .batches
            .iter()
            .filter(|(id, b)| {
                !b.record.cancelled
                    && (b.tasks.iter().any(|t| t.state == TaskState::Queued)
                        || self.trust.spec(**id).is_some())
            })
            .map(|(id, _)| *id)
            .collect();
        for batch in waiting {
            if free.is_empty() {
                break;
            }
            let Some(live) = self.batches.get(&batch) else {
                continue;
            };
            let needs = TaskNeeds {
                runtime_secs: planned_runtime(live.record.runtime_secs, &live.tasks).median,
                window_secs: live.record.runtime_secs,
            };
            let ordered: Vec<(PeerId, Option<f64>)> = live
                .record
                .policy
                .order(&free, needs, &mut self.rng)
                .into_iter()
                .map(|h| (h.peer, h.power))
                .collect();
            let ordered = self.trust.order(batch, ordered);
            let verifying = self.trust.spec(batch).is_some();
            // Hosts in an unsettled dispute over a verified task take only
            // further copies (tie-breaks), no new task, until it settles.
            let disputed = self.trust.disputed(batch);
            for (peer, gamma) in ordered {
                // A verified task's further copies go before new tasks.
                if let Some(task) = verifying.then(|| self.copy_task_for(batch, peer)).flatten() {
                    self.start_replica(batch, task, peer);
                } else if disputed.contains(&peer.to_base58()) {
                    continue;
                } else if let Some(task) = self.next_task_of(batch, peer) {
                    self.start(batch, task, peer, gamma);
                    if verifying {
                        self.plan_copies(batch, task, peer);
                    }
                } else {
                    continue;
                }
                free.retain(|h| h.peer != peer);
            }
        }
    }

    /// The first waiting task of `batch` that may run on `host`.
    fn next_task_of(&self, batch: BatchId, host: PeerId) -> Option<u32> {
        let b = self.batches.get(&batch)?;
        if b.record.cancelled || b.record.max_running.is_some_and(|m| b.running >= m) {
            return None;
        }
        let name = host.to_base58();
        b.tasks
            .iter()
            .enumerate()
            .position(|(i, t)| {
                t.state == TaskState::Queued
                    && !t.avoid.contains(&name)
                    && !self
                        .refused_by
                        .get(&(batch, i as u32))
                        .is_some_and(|r| r.contains(&host))
            })
            .map(|i| i as u32)
    }

    fn plan(&self, batch: BatchId, task: u32, host: PeerId, job_id: JobId) -> Option<AttemptPlan> {
        let live = self.batches.get(&batch)?;
        let copy_dir = self.copy_result_dir(batch, task, host);
        Some(AttemptPlan {
            host,
            job_id,
            outputs: live.record.outputs.clone(),
            provenance_task: copy_dir.is_none().then_some(task),
            result_dir: copy_dir.unwrap_or_else(|| self.results_dir(batch).join(task.to_string())),
            limit: Duration::from_secs(live.record.limit_secs),
            settings: self.settings,
            checkpoint_dest: live.record.checkpoint.as_ref().map(|_| {
                crate::consumer::batch::checkpoint::checkpoint_file(
                    &self.dir.join(batch.to_string()),
                    task,
                )
            }),
        })
    }

    /// Hands a waiting task to `host`: its main attempt.
    fn start(&mut self, batch: BatchId, task: u32, host: PeerId, gamma: Option<f64>) {
        let now = self.clock.unix_secs();
        let Some(live) = self.batches.get_mut(&batch) else {
            return;
        };
        let Some(t) = live.tasks.get_mut(task as usize) else {
            return;
        };
        let job_id = batch.job_id(task, t.attempts);
        t.attempts += 1;
        t.state = TaskState::Running;
        t.host = Some(host.to_base58());
        t.job_id = Some(job_id.clone());
        t.started_unix = Some(now);
        t.host_gamma = gamma;
        live.running += 1;
        self.persist(batch, task);
        self.launch(batch, task, host, job_id);
    }

    /// Starts a further copy of a running task on `host` (a deadline at
    /// risk): the first copy to land wins, the others are killed.
    fn start_copy(&mut self, batch: BatchId, task: u32, host: PeerId) {
        if self.task(batch, task).map(|t| t.state) != Some(TaskState::Running) {
            return;
        }
        let Some(job_id) = self.add_attempt(batch, task, host) else {
            return;
        };
        tracing::info!(%batch, task, %host, "deadline at risk: a second copy of the task starts");
        self.persist(batch, task);
        self.launch(batch, task, host, job_id);
    }

    /// Records one more attempt of a task on `host`, not yet started: its
    /// main attempt when it has none, else a further copy. Returns the
    /// attempt's job id.
    fn add_attempt(&mut self, batch: BatchId, task: u32, host: PeerId) -> Option<JobId> {
        let now = self.clock.unix_secs();
        let live = self.batches.get_mut(&batch)?;
        let t = live.tasks.get_mut(task as usize)?;
        let job_id = batch.job_id(task, t.attempts);
        t.attempts += 1;
        if t.host.is_none() {
            t.host = Some(host.to_base58());
            t.job_id = Some(job_id.clone());
            t.started_unix.get_or_insert(now);
        } else {
            t.copies.push(TaskCopy {
                host: host.to_base58(),
                job_id: job_id.clone(),
                started_unix: now,
            });
        }
        live.running += 1;
        Some(job_id)
    }

    /// Runs one attempt (the main one or a copy) of a task as a tracked task.
    fn launch(&mut self, batch: BatchId, task: u32, host: PeerId, job_id: JobId) {
        let Some(live) = self.batches.get(&batch) else {
            return;
        };
        let record = live.record.clone();
        let Some(t) = live.tasks.get(task as usize) else {
            return;
        };
        let mut submit_parts = (t.argv.clone(), t.env.clone(), t.inputs.clone());
        // A checkpointing task gets its order, and its latest checkpoint as
        // an input at the checkpoint path, so it resumes wherever it runs
        // (a deadline's second copy too).
        let batch_dir = self.dir.join(batch.to_string());
        let order = self.checkpoints.order(
            batch,
            task,
            t,
            &record,
            host,
            &batch_dir,
            &mut submit_parts.2,
        );
        let Some(plan) = self.plan(batch, task, host, job_id) else {
            return;
        };
        let cancel = self.shutdown.child_token();
        self.running.insert((batch, task, host), cancel.clone());
        self.hosts_in_use.insert(host);
        let (pool, inbox, store, tx) = (
            self.pool.clone(),
            self.inbox.clone(),
            self.store.clone(),
            self.to_self.clone(),
        );
        self.tracker.spawn(async move {
            // The hand-over is durable before the host hears of it: a restart
            // then asks the host instead of running the task twice.
            let flushed = tokio::task::spawn_blocking(move || store.flush()).await;
            let end = match flushed {
                Ok(Ok(())) => match job_submit(&pool, &plan, &record, submit_parts, order).await {
                    Ok((submit, offer)) => {
                        let end = attempt::run(
                            &pool,
                            &inbox,
                            &plan,
                            submit,
                            &cancel,
                            news_to(tx.clone(), batch, task),
                        )
                        .await;
                        drop(offer);
                        end
                    }
                    Err(e) => AttemptEnd::JobFailed(e),
                },
                _ => AttemptEnd::Refused {
                    reason: "cannot write the batch store".into(),
                    lasting: false,
                },
            };
            let _ = tx.send(QueueMsg::Ended {
                batch,
                task,
                host,
                end,
            });
        });
    }

    /// After a restart: asks the hosts of a task that was running (its main
    /// attempt and any copies) how it stands.
    fn reattach(&mut self, batch: BatchId, task: u32) {
        let Some(t) = self.task(batch, task) else {
            return;
        };
        let main = t
            .host
            .as_deref()
            .and_then(|h| h.parse::<PeerId>().ok())
            .zip(t.job_id.clone());
        let copies: Vec<(PeerId, JobId)> = t
            .copies
            .iter()
            .filter_map(|c| Some((c.host.parse::<PeerId>().ok()?, c.job_id.clone())))
            .collect();
        let Some(main) = main else {
            // Nothing to ask: run it again.
            if let Some(t) = self
                .batches
                .get_mut(&batch)
                .and_then(|b| b.tasks.get_mut(task as usize))
            {
                t.state = TaskState::Queued;
                t.copies.clear();
            }
            self.persist(batch, task);
            return;
        };
        for (host, job_id) in std::iter::once(main).chain(copies) {
            let Some(plan) = self.plan(batch, task, host, job_id) else {
                continue;
            };
            tracing::info!(%batch, task, %host, "re-attaching to a task that was running");
            if let Some(b) = self.batches.get_mut(&batch) {
                b.running += 1;
            }
            let cancel = self.shutdown.child_token();
            self.running.insert((batch, task, host), cancel.clone());
            self.hosts_in_use.insert(host);
            let (pool, inbox, tx) = (self.pool.clone(), self.inbox.clone(), self.to_self.clone());
            self.tracker.spawn(async move {
                let news = news_to(tx.clone(), batch, task);
                let end = attempt::reattach(&pool, &inbox, &plan, &cancel, news).await;
                let _ = tx.send(QueueMsg::Ended {
                    batch,
                    task,
                    host,
                    end,
                });
            });
        }
    }

    /// Looks at the running tasks of batches with a deadline: a task whose
    /// chance of ending in time has fallen below [`COPY_BELOW`] gets a second
    /// copy on the free host where a fresh copy's chance is best, when that
    /// is at least [`COPY_GAIN`] higher. Called on every tick; works at
    /// most once per [`DEADLINE_CHECK_EVERY`].
    pub fn watch_deadlines(&mut self) {
        if self
            .last_deadline_check
            .is_some_and(|t| t.elapsed() < DEADLINE_CHECK_EVERY)
        {
            return;
        }
        self.last_deadline_check = Some(tokio::time::Instant::now());
        let hosts = self.fresh_hosts().to_vec();
        if hosts.is_empty() {
            return;
        }
        let now = self.clock.unix_secs();
        let mut taken: HashSet<PeerId> = self.hosts_in_use.clone();
        let mut copies = Vec::new();
        for (id, live) in &self.batches {
            let Some(deadline) = live.record.deadline_unix else {
                continue;
            };
            if self.trust.spec(*id).is_some() {
                // Its copies are for checking, not for racing.
                continue;
            }
            let time_left = (deadline - now) as f64;
            if live.record.cancelled || time_left <= 0.0 {
                continue;
            }
            let PlannedRuntime {
                median: runtime,
                spread,
                ..
            } = planned_runtime(live.record.runtime_secs, &live.tasks);
            let window = live.record.runtime_secs;
            for (i, t) in live.tasks.iter().enumerate() {
                if t.state != TaskState::Running || !t.copies.is_empty() {
                    continue;
                }
                let (Some(started), Some(host)) = (
                    t.started_unix,
                    t.host.as_deref().and_then(|h| h.parse::<PeerId>().ok()),
                ) else {
                    continue;
                };
                let view = match hosts.iter().find(|h| h.peer == host) {
                    Some(h) => view_or_guess(h, window),
                    None => view_or_guess(&SurveyedHost::new(host), window),
                };
                let p_main = p_running_copy_in_time(
                    view.expected_run_secs(runtime),
                    spread,
                    (now - started).max(0) as f64,
                    time_left,
                    |s| view.curve.tr_at(s),
                );
                if p_main >= COPY_BELOW {
                    continue;
                }
                let refused = self.refused_by.get(&(*id, i as u32));
                let best = hosts
                    .iter()
                    .filter(|h| {
                        rank::eligible(h)
                            && !taken.contains(&h.peer)
                            && !t.avoid.contains(&h.peer.to_base58())
                            && !refused.is_some_and(|r| r.contains(&h.peer))
                    })
                    .map(|h| {
                        let v = view_or_guess(h, window);
                        let p = p_fresh_copy_in_time(
                            v.expected_run_secs(runtime),
                            spread,
                            time_left,
                            |s| v.curve.tr_at(s),
                        );
                        (h.peer, p)
                    })
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                if let Some((peer, p_copy)) = best {
                    if p_copy >= p_main + COPY_GAIN {
                        tracing::debug!(batch = %id, task = i, p_main, p_copy, "deadline at risk");
                        taken.insert(peer);
                        copies.push((*id, i as u32, peer));
                    }
                }
            }
        }
        for (batch, task, host) in copies {
            self.start_copy(batch, task, host);
        }
    }

    /// Takes one ended attempt of a task that has others still running (a
    /// copy): the task goes on with them. A copy that landed wins instead
    /// (`ended` handles that). Returns true when this handled the end.
    fn end_one_of_several(
        &mut self,
        batch: BatchId,
        task: u32,
        host: PeerId,
        end: &AttemptEnd,
    ) -> bool {
        if matches!(end, AttemptEnd::Landed { .. }) {
            return false;
        }
        let batch_cancelled = self.batches.get(&batch).is_some_and(|b| b.record.cancelled);
        let Some(t) = self
            .batches
            .get_mut(&batch)
            .and_then(|b| b.tasks.get_mut(task as usize))
        else {
            return false;
        };
        if t.copies.is_empty() || t.state != TaskState::Running || batch_cancelled {
            return false;
        }
        if matches!(end, AttemptEnd::Cancelled) {
            // The node is stopping: every copy is re-attached at the next start.
            return true;
        }
        let name = host.to_base58();
        if t.host.as_deref() == Some(name.as_str()) {
            // The main attempt ended: the oldest copy takes its place.
            let next = t.copies.remove(0);
            t.host = Some(next.host);
            t.job_id = Some(next.job_id);
        } else {
            t.copies.retain(|c| c.host != name);
        }
        if let AttemptEnd::HostFailed(reason) = end {
            t.avoid.push(name);
            t.reason = Some(reason.clone());
        }
        self.persist(batch, task);
        true
    }

    fn ended(&mut self, batch: BatchId, task: u32, host: PeerId, end: AttemptEnd) {
        self.running.remove(&(batch, task, host));
        self.hosts_in_use.remove(&host);
        self.wanted = true;
        let now = self.clock.unix_secs();
        let max_retries = self.settings.max_retries;
        let Some(live) = self.batches.get_mut(&batch) else {
            return;
        };
        live.running = live.running.saturating_sub(1);
        // A copy that lost (another landed first) ends with nothing to say.
        if live
            .tasks
            .get(task as usize)
            .is_some_and(|t| t.state.is_final())
        {
            return;
        }
        if self.trust.spec(batch).is_some() && self.replica_ended(batch, task, host, &end) {
            let fresh: Vec<SurveyedHost> = self
                .fresh_hosts()
                .iter()
                .filter(|h| h.peer == host)
                .cloned()
                .collect();
            self.place_on(&fresh);
            return;
        }
        if self.end_one_of_several(batch, task, host, &end) {
            return;
        }
        // The first copy to land wins: the others are killed on their hosts.
        let siblings: Vec<PeerId> = self
            .running
            .keys()
            .filter(|k| k.0 == batch && k.1 == task)
            .map(|k| k.2)
            .collect();
        if matches!(end, AttemptEnd::Landed { .. }) {
            for other in siblings {
                if let Some(cancel) = self.running.get(&(batch, task, other)) {
                    cancel.cancel();
                }
            }
        }
        // The host's relative power, to turn the guest's CPU seconds into
        // reference seconds.
        let power = self
            .last_hosts
            .iter()
            .find(|h| h.peer == host)
            .and_then(|h| h.speed);
        let Some(live) = self.batches.get_mut(&batch) else {
            return;
        };
        let cancelled = live.record.cancelled;
        let Some(t) = live.tasks.get_mut(task as usize) else {
            return;
        };
        let host_text = host.to_base58();
        let mut landed = false;
        match end {
            AttemptEnd::Landed {
                exit_status,
                wall_secs,
                usage,
                missing,
            } => {
                if t.host.as_deref() != Some(host_text.as_str()) {
                    // A copy won: it is the attempt the task's record shows.
                    if let Some(copy) = t.copies.iter().find(|c| c.host == host_text) {
                        t.job_id = Some(copy.job_id.clone());
                        t.started_unix = Some(copy.started_unix);
                    }
                    t.host = Some(host_text.clone());
                }
                t.copies.clear();
                t.state = if exit_status == 0 && missing.is_empty() {
                    TaskState::Done
                } else {
                    TaskState::Failed
                };
                t.exit_status = Some(exit_status);
                let (wall, gamma) = landed_work(wall_secs, usage, power, t.host_gamma);
                t.wall_secs = Some(wall);
                t.host_gamma = gamma;
                t.ended_unix = Some(now);
                t.reason = if exit_status != 0 {
                    Some(format!("exit status {exit_status}"))
                } else if !missing.is_empty() {
                    Some(format!(
                        "declared output(s) not written: {}",
                        missing.join(", ")
                    ))
                } else {
                    None
                };
                landed = true;
            }
            AttemptEnd::Cancelled if cancelled => {
                t.state = TaskState::Cancelled;
                t.ended_unix = Some(now);
                t.reason = Some("cancelled".into());
            }
            // The node is stopping: the task stays running in the store and
            // is re-attached at the next start.
            AttemptEnd::Cancelled => return,
            _ if cancelled => {
                t.state = TaskState::Cancelled;
                t.ended_unix = Some(now);
                t.reason = Some("cancelled".into());
            }
            AttemptEnd::Refused { reason, lasting } => {
                if lasting {
                    self.refused_by
                        .entry((batch, task))
                        .or_default()
                        .insert(host);
                }
                // Not the task's fault: back in the queue, this host skipped
                // until the next survey says it is free.
                tracing::debug!(%batch, task, host = %host_text, %reason, "host refused a task");
                t.state = TaskState::Queued;
                t.host = None;
                // Shown while the task waits, so `submit` can say why no
                // host took it.
                t.reason = Some(format!("refused by {host_text}: {reason}"));
            }
            AttemptEnd::JobFailed(reason) => {
                t.state = TaskState::Failed;
                t.ended_unix = Some(now);
                t.reason = Some(reason);
            }
            AttemptEnd::HostFailed(reason) => {
                t.avoid.push(host_text.clone());
                let failures = t.avoid.len() as u32;
                if failures > max_retries {
                    t.state = TaskState::Failed;
                    t.ended_unix = Some(now);
                    t.reason = Some(format!(
                        "failed on {failures} host(s); no retries left (max_retries = {max_retries}); last: {reason}"
                    ));
                } else {
                    tracing::info!(%batch, task, host = %host_text, %reason, "task failed on a host; queued again");
                    t.state = TaskState::Queued;
                    t.reason = Some(reason);
                }
            }
        }
        self.persist(batch, task);
        if self
            .task(batch, task)
            .is_some_and(|t| !matches!(t.state, TaskState::Queued | TaskState::Running))
        {
            self.refused_by.remove(&(batch, task));
        }
        let store = self.store.clone();
        self.tracker.spawn_blocking(move || {
            let _ = store.flush();
        });
        // A host that just ended a task well is free now: while the last
        // survey is fresh it takes the next task at once.
        let fresh: Vec<SurveyedHost> = self
            .fresh_hosts()
            .iter()
            .filter(|h| h.peer == host)
            .cloned()
            .collect();
        if landed && !fresh.is_empty() {
            self.place_on(&fresh);
        }
        if landed {
            self.copy_out(batch, task);
        }
    }

    /// Every host's checked results as this node has counted them.
    pub fn reputation(&self) -> HashMap<PeerId, crate::model::trust::HostTrack> {
        self.trust
            .reputation
            .as_ref()
            .map(|r| r.all().clone())
            .unwrap_or_default()
    }

    fn task(&self, batch: BatchId, task: u32) -> Option<&TaskRecord> {
        self.batches.get(&batch)?.tasks.get(task as usize)
    }

    fn persist(&mut self, batch: BatchId, task: u32) {
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
    fn emit(&self, batch: BatchId, task: u32, event: Option<String>) {
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

/// Where an attempt's news goes: the queue's own channel, as messages for
/// the actor.
fn news_to(
    tx: mpsc::UnboundedSender<QueueMsg>,
    batch: BatchId,
    task: u32,
) -> impl Fn(AttemptNews) + Send + Sync {
    move |news| {
        if let Some(news) = crate::consumer::batch::checkpoint::CheckpointNews::of(&news) {
            let _ = tx.send(QueueMsg::Checkpoint { batch, task, news });
        }
        let _ = tx.send(match news {
            AttemptNews::Accepted => QueueMsg::Accepted { batch, task },
            AttemptNews::HostEvent(kind) => QueueMsg::HostEvent {
                batch,
                task,
                text: attempt::event_text(&kind),
            },
            AttemptNews::Checkpoint { .. } => return,
        });
    }
}

/// Runs [`estimate_batch`] on the blocking pool.
async fn run_estimate(
    hosts: Vec<SurveyedHost>,
    shape: BatchShape,
    now: i64,
) -> Result<BatchEstimate, BatchError> {
    tokio::task::spawn_blocking(move || {
        let mut rng = rand_chacha::ChaCha8Rng::from_os_rng();
        estimate_batch(&hosts, &shape, now, &mut rng)
            .map_err(|e| BatchError::Estimate(e.to_string()))
    })
    .await
    .unwrap_or_else(|e| Err(BatchError::Estimate(e.to_string())))
}

/// When the last task should end: the tasks left, at the pace tasks have
/// ended so far over the hosts in use.
fn eta(tasks: &[TaskRecord], counts: Counts, now: i64) -> Option<i64> {
    if counts.finished() {
        return None;
    }
    let ended: Vec<&TaskRecord> = tasks
        .iter()
        .filter(|t| matches!(t.state, TaskState::Done | TaskState::Failed))
        .collect();
    let first_start = tasks.iter().filter_map(|t| t.started_unix).min()?;
    if ended.is_empty() {
        return None;
    }
    let elapsed = (now - first_start).max(1) as f64;
    let rate = ended.len() as f64 / elapsed;
    let left = f64::from(counts.queued + counts.running);
    Some(now + (left / rate).ceil() as i64)
}

/// Every input must be a readable regular file now, not when a host asks
/// for it. Each distinct file is checked once.
fn check_inputs(tasks: &[spec::TaskSpec]) -> Result<(), BatchError> {
    let mut checked = HashSet::new();
    for task in tasks {
        for (local, _) in &task.inputs {
            if checked.insert(local.clone()) {
                check_input(local)?;
            }
        }
    }
    Ok(())
}

fn check_input(path: &Path) -> Result<(), BatchError> {
    crate::fsutil::open_regular(path)
        .map(|_| ())
        .map_err(|e| BatchError::Input {
            path: path.display().to_string(),
            why: e.to_string(),
        })
}

/// A task's command line, environment and inputs (local file, remote path).
type TaskParts = (Vec<String>, Vec<(String, String)>, Vec<(PathBuf, String)>);

/// The job a task's attempt hands to its host, and the offer of its inputs
/// by hash (kept for the attempt; the host reads what it lacks over
/// `/gleaner/data/1`). A file shared by every task is hashed once.
async fn job_submit<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    record: &BatchRecord,
    (argv, env, inputs): TaskParts,
    checkpoint: Option<crate::net::protocol::CheckpointOrder>,
) -> Result<(JobSubmit, Offer), String> {
    let specs: Vec<InputSpec> = inputs
        .into_iter()
        .map(|(local, path)| InputSpec { path, local })
        .collect();
    let offer = pool.offer(&specs).await?;
    offer.allow(plan.host);
    let submit = JobSubmit {
        job_id: plan.job_id.to_string(),
        argv,
        env,
        inputs: offer.refs().to_vec(),
        outputs: record.outputs.clone(),
        memory_mib: record.mem_mib,
        expected_runtime_secs: record.runtime_secs,
        wall_time_limit_secs: record.limit_secs,
        checkpoint,
    };
    Ok((submit, offer))
}
