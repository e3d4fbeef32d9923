//! The batch queue's driver: the thin async half around the pure core
//! ([`QueueCore`]). It lives inside the consumer actor (the actor calls it
//! from its loop; nothing here blocks): it reads the clock once per input,
//! hands the input to the core, and performs the actions the core returns —
//! it writes the sled store, sends task events, spawns surveys, attempts,
//! judgments and copies as tracked tasks, and cancels attempts. What those
//! tasks report comes back as [`QueueMsg`]s, which the driver feeds to the
//! core as inputs. It decides nothing itself: no placement, retry, deadline
//! or quorum rule lives here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use libp2p::PeerId;
use rand::SeedableRng;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::files;
use super::rounds::MemberNews;
use super::state::{Action, Now, QueueCore};
use super::trust_store::TrustStore;
use super::types::{BatchError, BatchView, Counts, NewBatch, QueueMsg, TaskEvent};
use crate::clock::Clock;
use crate::consumer::batch::estimate::BatchEstimate;
use crate::consumer::batch::spec;
use crate::consumer::batch::store::BatchStore;
use crate::consumer::job_pool::{JobPool, JobSettings};
use crate::consumer::Inbox;
use crate::model::ids::BatchId;

/// How often the consumer actor asks the queue whether to survey (and
/// ticks its timer).
pub const TICK: Duration = Duration::from_millis(100);

/// A caller waiting for a batch's copies to its output directory to drain.
type Waiter = oneshot::Sender<Result<BatchView, BatchError>>;

/// The queue. Owned by the consumer actor.
pub struct BatchQueue<P: JobPool + Clone + 'static> {
    pub(super) pool: P,
    pub(super) inbox: Inbox,
    pub(super) store: BatchStore,
    /// The store's `verify` and `reputation` trees.
    trust_store: TrustStore,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    pub(super) tracker: TaskTracker,
    pub(super) shutdown: CancellationToken,
    /// Every decision about batches and tasks.
    core: QueueCore,
    /// The cancel token of each attempt in flight (a task's main attempt
    /// and its copies, by host).
    pub(super) attempts: HashMap<(BatchId, u32, PeerId), CancellationToken>,
    events: broadcast::Sender<TaskEvent>,
    pub(super) to_self: mpsc::UnboundedSender<QueueMsg>,
    /// Callers waiting for a batch's copies to its output directory.
    waiters: HashMap<BatchId, Vec<Waiter>>,
}

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    /// Opens the queue on `dir` (its store and results) and picks up what an
    /// earlier run left: tasks that were running are re-attached, landed
    /// copies of verified tasks judged again, missing output copies redone.
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
        let (trust_store, trust) = TrustStore::open(&store);
        let now = now_of(clock.as_ref());
        let core = QueueCore::new(
            dir,
            settings,
            rand_chacha::ChaCha8Rng::from_os_rng(),
            trust,
            now,
        );
        let mut queue = BatchQueue {
            pool,
            inbox,
            store,
            trust_store,
            dir: dir.to_path_buf(),
            clock,
            tracker,
            shutdown,
            core,
            attempts: HashMap::new(),
            events,
            to_self,
            waiters: HashMap::new(),
        };
        for (record, tasks) in loaded {
            let id = record.id;
            queue.clean_staging(id);
            let actions = queue.core.restore_batch(queue.now(), record, tasks);
            queue.perform(actions);
            queue.restore_copies(id);
            queue.restore_output_copies(id);
        }
        Ok((queue, from_tasks))
    }

    /// The time of an input, read once.
    fn now(&self) -> Now {
        now_of(self.clock.as_ref())
    }

    /// Turns tail copies on or off for every batch (`[batch] tail_copies`).
    pub fn set_tail_copies(&mut self, on: bool) {
        self.core.set_tail_copies(on);
    }

    /// Turns holds for later windows on or off for every batch (`[batch]
    /// later_windows`).
    pub fn set_later_windows(&mut self, on: bool) {
        self.core.set_later_windows(on);
    }

    /// Sets the unit of the later-start grid, seconds (`[batch]
    /// later_unit_secs`).
    pub fn set_later_unit(&mut self, secs: u64) {
        self.core.set_later_unit(secs);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.events.subscribe()
    }

    /// Every host's checked results as this node has counted them.
    pub fn reputation(&self) -> HashMap<PeerId, crate::model::trust::HostTrack> {
        self.core.reputation()
    }

    /// Checks, expands and stores a new batch; its tasks start as hosts free up.
    pub fn submit(&mut self, new: NewBatch) -> Result<BatchId, BatchError> {
        let tasks = spec::expand(&new.template, &new.sweep)?;
        if let Some(checkpoint) = &new.checkpoint {
            // The checkpoint comes back like an output: same confinement.
            spec::check_output(&checkpoint.path)?;
        }
        files::check_inputs(&tasks)?;
        let now = self.now();
        let (record, tasks, verify) = self.core.new_batch(now, new, tasks);
        let id = record.id;
        if let Some(dir) = &record.output_dir {
            std::fs::create_dir_all(dir).map_err(|e| BatchError::OutputDir {
                path: dir.display().to_string(),
                why: e.to_string(),
            })?;
        }
        self.store
            .create(&record, &tasks)
            .map_err(|e| BatchError::Store(e.to_string()))?;
        std::fs::create_dir_all(self.core.results_dir(id))
            .map_err(|e| BatchError::Store(e.to_string()))?;
        self.trust_store
            .set_spec(id, &verify)
            .map_err(BatchError::Store)?;
        let actions = self.core.admit(now, record, tasks, verify);
        self.perform(actions);
        Ok(id)
    }

    pub fn list(&self) -> Vec<BatchView> {
        self.core.list(self.now())
    }

    pub fn view(&self, id: BatchId) -> Result<BatchView, BatchError> {
        self.core.view(self.now(), id)
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
            .and_then(|tasks| files::check_inputs(&tasks).map(|()| tasks))
        {
            Ok(tasks) => tasks,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        self.spawn_estimate_new(new, tasks.len(), self.now().unix_secs, reply);
    }

    /// A running batch's view with its estimate from the hosts as last
    /// heard, computed off the loop; without one when the batch has ended
    /// or no host has been heard of.
    pub fn view_with_estimate(
        &self,
        id: BatchId,
        reply: oneshot::Sender<Result<BatchView, BatchError>>,
    ) {
        let now = self.now();
        let view = match self.core.view(now, id) {
            Ok(view) => view,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        match self.core.estimate_inputs(now, id) {
            None => {
                let _ = reply.send(Ok(view));
            }
            Some((hosts, shape)) => self.spawn_estimate(view, hosts, shape, now.unix_secs, reply),
        }
    }

    /// Marks every task not yet ended cancelled and kills running copies on
    /// their hosts.
    pub fn cancel(&mut self, id: BatchId) -> Result<Counts, BatchError> {
        let record = self.core.cancel_record(id)?;
        self.store
            .put_batch(&record)
            .map_err(|e| BatchError::Store(e.to_string()))?;
        let actions = self.core.cancel_tasks(self.now(), id);
        self.perform(actions);
        let _ = self.store.flush();
        self.core.counts(id)
    }

    /// Forgets an ended batch: its records and the node's copy of its
    /// results (copies in its output directory stay). A batch with tasks
    /// queued or running is refused: cancel it first.
    pub fn remove(&mut self, id: BatchId) -> Result<Counts, BatchError> {
        let (counts, task_count) = self.core.removable(id)?;
        self.store
            .remove(id, task_count)
            .map_err(|e| BatchError::Store(e.to_string()))?;
        self.core.forget(id);
        self.trust_store.forget(id);
        // Whoever waits for its copies to its output directory hears so.
        for waiter in self.waiters.remove(&id).unwrap_or_default() {
            let _ = waiter.send(Err(BatchError::UnknownBatch(id)));
        }
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

    /// Answers `reply` with the batch once no copy of its results to its
    /// output directory is in flight: at once when none is.
    pub fn when_copied(&mut self, batch: BatchId, reply: Waiter) {
        if !self.core.copying_out(batch) {
            let _ = reply.send(self.view(batch));
        } else {
            self.waiters.entry(batch).or_default().push(reply);
        }
    }

    /// True while the queue has something for its timer to watch; the
    /// actor ticks only then.
    pub fn wants_ticks(&self) -> bool {
        self.core.wants_ticks()
    }

    /// True when a round (asking hosts, or only looking at the members'
    /// summaries) should start now.
    pub fn wants_survey(&self) -> bool {
        !self.shutdown.is_cancelled() && self.core.wants_survey(self.now())
    }

    /// Starts a survey for the oldest waiting task's window.
    pub fn start_survey(&mut self) {
        let actions = self.core.start_survey(self.now());
        self.perform(actions);
    }

    /// A member's announcement, as the pool host heard it: the core decides
    /// whether it is news a round should ask about.
    pub fn on_member(&mut self, news: MemberNews) {
        let actions = self.core.on_member(self.now(), news);
        self.perform(actions);
    }

    /// A peer went past one of this node's budgets: a flood in its record.
    pub fn on_overrun(&mut self, peer: PeerId, what: crate::model::budget::Overrun) {
        tracing::warn!(%peer, what = what.label(), "a peer went past its budget: a flood in its record");
        let actions = self.core.on_overrun(self.now(), peer);
        self.perform(actions);
    }

    /// The consumer's timer: second copies for deadlines at risk (the core
    /// looks at most once a second).
    pub fn watch_deadlines(&mut self) {
        let actions = self.core.tick(self.now());
        self.perform(actions);
    }

    /// Handles what a task reported.
    pub fn on_msg(&mut self, msg: QueueMsg) {
        let now = self.now();
        let actions = match msg {
            QueueMsg::Surveyed(hosts) => self.core.on_survey(now, hosts),
            QueueMsg::Accepted { batch, task } => self.core.on_news(now, batch, task, None),
            QueueMsg::HostEvent { batch, task, text } => {
                self.core.on_news(now, batch, task, Some(text))
            }
            QueueMsg::Flooded {
                batch,
                task,
                host,
                dropped,
            } => self.core.on_flood(now, batch, task, host, dropped),
            QueueMsg::Checkpoint { batch, task, news } => {
                self.core.on_checkpoint(now, batch, task, news)
            }
            QueueMsg::Ended {
                batch,
                task,
                host,
                end,
            } => {
                self.attempts.remove(&(batch, task, host));
                self.core.on_ended(now, batch, task, host, end)
            }
            QueueMsg::Verdict {
                batch,
                task,
                verdict,
            } => self.core.on_verdict(now, batch, task, verdict),
            QueueMsg::Copied { batch, task, error } => self.core.on_copied(now, batch, task, error),
            QueueMsg::LandFailed { batch, task, error } => {
                self.core.on_land_failed(now, batch, task, error)
            }
            QueueMsg::KeptEarlier {
                batch,
                task,
                host,
                exit_status,
            } => self
                .core
                .on_kept_earlier(now, batch, task, host, exit_status),
            QueueMsg::Later {
                length_secs,
                answers,
            } => self.core.on_later(now, length_secs, answers),
        };
        self.perform(actions);
    }

    /// Performs the core's actions, in order.
    fn perform(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Survey { query, skip } => self.spawn_survey(query, skip),
                Action::Launch(launch) => self.spawn_attempt(*launch),
                Action::Reattach { batch, task, plan } => self.spawn_reattach(batch, task, *plan),
                Action::Kill { batch, task, host } => {
                    if let Some(cancel) = self.attempts.get(&(batch, task, host)) {
                        cancel.cancel();
                    }
                }
                Action::Persist {
                    batch,
                    task,
                    record,
                } => {
                    if let Err(e) = self.store.put_task(batch, task, &record) {
                        tracing::error!(%batch, task, error = %e, "cannot record a task's state");
                    }
                }
                Action::Emit(event) => {
                    let _ = self.events.send(*event);
                }
                Action::Flush => {
                    let store = self.store.clone();
                    self.tracker.spawn_blocking(move || {
                        let _ = store.flush();
                    });
                }
                Action::Land {
                    batch,
                    task,
                    from,
                    to,
                } => self.land(batch, task, &from, &to),
                Action::Discard { dir } => {
                    self.tracker.spawn_blocking(move || files::discard(&dir));
                }
                Action::Judge(judge) => self.spawn_judge(*judge),
                Action::Promote {
                    batch,
                    task,
                    from,
                    to,
                    provenance,
                } => self.spawn_promote(batch, task, from, to, *provenance),
                Action::CopyOut {
                    batch,
                    task,
                    from,
                    to,
                } => self.spawn_copy_out(batch, task, from, to),
                Action::CopiesDrained(batch) => {
                    for waiter in self.waiters.remove(&batch).unwrap_or_default() {
                        let _ = waiter.send(self.view(batch));
                    }
                }
                Action::Taint { batch, peer } => self.trust_store.taint(batch, peer),
                Action::Reputation { peer, valid } => self.trust_store.record(peer, valid),
                Action::Conduct { peer, outcome } => self.trust_store.conduct(peer, outcome),
                Action::AskLater {
                    peers,
                    starts_unix,
                    length_secs,
                    mem_mib,
                } => self.spawn_ask_later(peers, starts_unix, length_secs, mem_mib),
            }
        }
    }

    /// Moves the winning attempt's staging directory into the task's
    /// results, on the loop (one rename, before the record that says so is
    /// written: the next actions). A result already there is kept, never
    /// replaced; a failure comes back as a message, after those actions.
    fn land(&mut self, batch: BatchId, task: u32, from: &Path, to: &Path) {
        match files::land(from, to) {
            Ok(files::Landed::Moved) => {}
            Ok(files::Landed::KeptEarlier) => {
                // Only a node killed between the move and its record gets
                // here: the result it moved stays, and the record (which
                // the next actions write for this landing) is made to say
                // whose it is, after them.
                tracing::warn!(%batch, task, dir = %to.display(), "a result was already there: kept, this landing discarded");
                let (host, exit_status) = files::kept_result(to);
                let _ = self.to_self.send(QueueMsg::KeptEarlier {
                    batch,
                    task,
                    host,
                    exit_status,
                });
                let dir = from.to_path_buf();
                self.tracker.spawn_blocking(move || files::discard(&dir));
            }
            Err(error) => {
                tracing::error!(%batch, task, %error, "cannot move a landed result into place");
                let _ = self
                    .to_self
                    .send(QueueMsg::LandFailed { batch, task, error });
            }
        }
    }

    /// At start: the staging directories an earlier run left in each
    /// batch's results (a landing cut off, a copy's fetch never discarded)
    /// are removed before anything is re-attached: each attempt in flight
    /// fetches its results again.
    fn clean_staging(&self, batch: BatchId) {
        let root = self.core.landing_root(batch);
        if root.exists() {
            tracing::info!(%batch, dir = %root.display(), "removing staging left by an earlier run");
            files::discard(&root);
        }
    }

    /// At start: the landed copies of a verified batch's unfinished tasks,
    /// read back from disk for the core to judge again.
    fn restore_copies(&mut self, batch: BatchId) {
        let Some((tasks, outputs)) = self.core.copies_to_restore(batch) else {
            return;
        };
        let copies = self.dir.join(batch.to_string()).join("copies");
        for task in tasks {
            let Some(pending) = files::landed_copies(&copies.join(task.to_string()), &outputs)
            else {
                continue;
            };
            let actions = self.core.restored_copies(self.now(), batch, task, pending);
            self.perform(actions);
        }
    }

    /// At start: copies again each landed result of `batch` that its output
    /// directory lacks.
    fn restore_output_copies(&mut self, batch: BatchId) {
        let Some((out, results, landed)) = self.core.landed_results(batch) else {
            return;
        };
        let missing: Vec<u32> = landed
            .into_iter()
            .filter(|task| {
                let name = task.to_string();
                !out.join(&name).exists() && results.join(&name).is_dir()
            })
            .collect();
        let actions = self.core.copy_again(self.now(), batch, &missing);
        self.perform(actions);
    }
}

/// The time of an input: the monotonic clock (tokio's, so paused tests
/// move it) and the wall clock, read once.
fn now_of(clock: &dyn Clock) -> Now {
    let wall = clock.now();
    Now {
        mono: tokio::time::Instant::now().into_std(),
        unix_secs: wall.as_second(),
        unix_ms: wall.as_millisecond().max(0) as u64,
    }
}
