//! The consumer's commands in the queue's core: a new batch made into
//! records and admitted (after the driver has checked its inputs and stored
//! it), views and the inputs of an estimate (the hosts as last heard),
//! cancel (the record first, then the tasks) and forgetting a removed
//! batch. Pure: the driver does the store and file work around each step.

use std::collections::HashSet;
use std::path::PathBuf;

use libp2p::PeerId;

use super::state::{Action, LiveBatch, Now, QueueCore};
use super::types::{BatchError, BatchView, Counts, NewBatch};
use crate::consumer::batch::estimate::{BatchShape, RunningShape};
use crate::consumer::batch::record::{BatchRecord, TaskRecord, TaskState};
use crate::consumer::batch::runtime::planned_runtime;
use crate::consumer::batch::spec::TaskSpec;
use crate::consumer::batch::verify::VerifySpec;
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;

impl QueueCore {
    /// A new batch's records: its id (the time in milliseconds, after every
    /// batch this queue holds), `{batch}` in its output directory replaced
    /// by that id, and its expanded tasks queued. Nothing is admitted yet.
    pub fn new_batch(
        &self,
        now: Now,
        new: NewBatch,
        tasks: Vec<TaskSpec>,
    ) -> (BatchRecord, Vec<TaskRecord>, VerifySpec) {
        let last = self.batches.keys().next_back().map_or(0, |b| b.number());
        let id = BatchId::new(now.unix_ms.max(last + 1));
        // `{batch}` in the output directory is the new batch's id, so a
        // default such as `./gleaner-results/{batch}` never mixes batches.
        let output_dir = new
            .output_dir
            .map(|d| PathBuf::from(d.to_string_lossy().replace("{batch}", &id.to_string())));
        let record = BatchRecord {
            id,
            name: new.name,
            created_unix: now.unix_secs,
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
            image: new.image,
        };
        let records = tasks
            .into_iter()
            .map(|t| TaskRecord::queued(t.argv, t.env, t.inputs))
            .collect();
        (record, records, new.verify)
    }

    /// Admits a new batch the driver has stored: its tasks start as hosts
    /// free up.
    #[must_use = "the driver performs every action"]
    pub fn admit(
        &mut self,
        now: Now,
        record: BatchRecord,
        tasks: Vec<TaskRecord>,
        verify: VerifySpec,
    ) -> Vec<Action> {
        self.at(now);
        let id = record.id;
        self.trust.set_spec(id, verify);
        tracing::info!(batch = %id, tasks = tasks.len(), "batch queued");
        self.batches.insert(
            id,
            LiveBatch {
                record,
                tasks,
                running: 0,
            },
        );
        self.wanted = true;
        // While the last survey is fresh its free hosts take the new tasks
        // at once (a host that became busy since refuses, and the task
        // waits for the next survey): `submit` does not wait for one.
        let fresh = self.fresh_hosts().to_vec();
        self.place_on(&fresh);
        self.actions()
    }

    pub fn list(&self, now: Now) -> Vec<BatchView> {
        self.batches
            .keys()
            .filter_map(|id| self.view(now, *id).ok())
            .collect()
    }

    pub fn view(&self, now: Now, id: BatchId) -> Result<BatchView, BatchError> {
        let live = self.batches.get(&id).ok_or(BatchError::UnknownBatch(id))?;
        let counts = Counts::of(&live.tasks);
        Ok(BatchView {
            record: live.record.clone(),
            tasks: live.tasks.clone(),
            counts,
            eta_unix: eta(&live.tasks, counts, now.unix_secs),
            results_dir: self.results_dir(id),
            estimate: None,
            verify: self.verify_spec(id),
            copies: self.live_copies(id),
            holds: self.hold_views(id),
        })
    }

    /// What a running batch's estimate is made from: the hosts as last
    /// heard ([`QueueCore::estimate_hosts`]) and the batch's shape now.
    /// `None` when the batch has ended or was cancelled, or no host has been
    /// heard of.
    pub fn estimate_inputs(
        &self,
        now: Now,
        id: BatchId,
    ) -> Option<(Vec<SurveyedHost>, BatchShape)> {
        let live = self.batches.get(&id)?;
        if Counts::of(&live.tasks).finished() || live.record.cancelled {
            return None;
        }
        let hosts = self.estimate_hosts();
        if hosts.is_empty() {
            return None;
        }
        let now = now.unix_secs;
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
            holds: self.held_shapes(id, now),
        };
        Some((hosts, shape))
    }

    /// The hosts an estimate weighs: the queue's view of the pool, where
    /// each host the last round did not ask is taken at its last answer
    /// (with the state and slot the view has heard since), and the hosts
    /// with a last answer the view does not list. The estimate weighs
    /// answers only, and with event-driven rounds the last one often asks
    /// nobody (every host runs our tasks, or it only read summaries) or
    /// finds no host: `batch status` keeps an estimate, and a task running
    /// on a host not asked since counts as running, not as waiting again.
    pub(super) fn estimate_hosts(&self) -> Vec<SurveyedHost> {
        let mut hosts: Vec<SurveyedHost> = self
            .last_hosts
            .iter()
            .map(|h| match self.answers.get(&h.peer) {
                Some(answer) if !h.answered => SurveyedHost {
                    state: h.state.or(answer.state),
                    slot_free: h.slot_free.or(answer.slot_free),
                    ..answer.clone()
                },
                _ => h.clone(),
            })
            .collect();
        let listed: HashSet<PeerId> = hosts.iter().map(|h| h.peer).collect();
        hosts.extend(
            self.answers
                .values()
                .filter(|a| !listed.contains(&a.peer))
                .cloned(),
        );
        hosts
    }

    /// Marks a batch cancelled: nothing more of it starts. Returns its
    /// record for the driver to store before [`QueueCore::cancel_tasks`].
    pub fn cancel_record(&mut self, id: BatchId) -> Result<BatchRecord, BatchError> {
        let live = self
            .batches
            .get_mut(&id)
            .ok_or(BatchError::UnknownBatch(id))?;
        live.record.cancelled = true;
        Ok(live.record.clone())
    }

    /// Marks every task of a cancelled batch not yet ended cancelled and
    /// kills its attempts in flight (their ends then cancel the rest).
    #[must_use = "the driver performs every action"]
    pub fn cancel_tasks(&mut self, now: Now, id: BatchId) -> Vec<Action> {
        self.at(now);
        let mut changed = Vec::new();
        if let Some(live) = self.batches.get_mut(&id) {
            for (i, task) in live.tasks.iter_mut().enumerate() {
                // A verified task between copies runs nowhere: it ends now too.
                let idle = task.state == TaskState::Running && task.host.is_none();
                if task.state == TaskState::Queued || idle {
                    task.state = TaskState::Cancelled;
                    task.ended_unix = Some(now.unix_secs);
                    task.reason = Some("cancelled".into());
                    changed.push(i as u32);
                }
            }
        }
        self.kill_running(id, None);
        for task in changed {
            self.persist(id, task);
        }
        self.actions()
    }

    /// A batch's tasks by state.
    pub fn counts(&self, id: BatchId) -> Result<Counts, BatchError> {
        let live = self.batches.get(&id).ok_or(BatchError::UnknownBatch(id))?;
        Ok(Counts::of(&live.tasks))
    }

    /// Whether a batch may be removed: known and ended (a batch with tasks
    /// queued or running must be cancelled first). Returns its counts and
    /// number of tasks.
    pub fn removable(&self, id: BatchId) -> Result<(Counts, u32), BatchError> {
        let live = self.batches.get(&id).ok_or(BatchError::UnknownBatch(id))?;
        let counts = Counts::of(&live.tasks);
        if !counts.finished() {
            return Err(BatchError::NotEnded(id));
        }
        Ok((counts, live.record.task_count))
    }

    /// Forgets a batch the driver has removed from the store.
    pub fn forget(&mut self, id: BatchId) {
        self.batches.remove(&id);
        self.trust.forget(id);
        self.refused_by.retain(|(b, _), _| *b != id);
        self.forget_avoid(id);
        self.forget_deadline_asks(id);
    }
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
