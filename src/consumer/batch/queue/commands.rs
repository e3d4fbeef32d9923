//! The queue's commands from the consumer actor: open (and pick up what an
//! earlier run left), submit, list and view, estimates, cancel and remove.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libp2p::PeerId;
use rand::SeedableRng;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{BatchError, BatchQueue, BatchView, Counts, LiveBatch, NewBatch, QueueMsg};
use crate::clock::Clock;
use crate::consumer::batch::forecast::{estimate_batch, BatchEstimate, BatchShape, RunningShape};
use crate::consumer::batch::record::{BatchRecord, TaskRecord, TaskState};
use crate::consumer::batch::runtime::planned_runtime;
use crate::consumer::batch::spec::{self};
use crate::consumer::batch::store::BatchStore;
use crate::consumer::pool::{JobPool, JobSettings};
use crate::consumer::survey::{SurveyQuery, SurveyedHost};
use crate::consumer::Inbox;
use crate::model::ids::BatchId;

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
        let trust = super::trust::Trust::open(&store);
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
}

/// Runs [`estimate_batch`] on the blocking pool.
pub(super) async fn run_estimate(
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
pub(super) fn eta(tasks: &[TaskRecord], counts: Counts, now: i64) -> Option<i64> {
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
pub(super) fn check_inputs(tasks: &[spec::TaskSpec]) -> Result<(), BatchError> {
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

pub(super) fn check_input(path: &Path) -> Result<(), BatchError> {
    crate::fsutil::open_regular(path)
        .map(|_| ())
        .map_err(|e| BatchError::Input {
            path: path.display().to_string(),
            why: e.to_string(),
        })
}
