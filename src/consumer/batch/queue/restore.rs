//! A restart in the queue's core: each batch the store kept comes back,
//! and each task that was running is re-attached (its main attempt and any
//! copies: the driver asks their hosts how they stand) or, with nobody to
//! ask, queued again. A verified task's landed copies come back through
//! `replicas`, missing output copies through `outputs`. Pure: the driver
//! reads the store and the disk.

use libp2p::PeerId;

use super::state::{Action, LiveBatch, Now, QueueCore};
use crate::consumer::batch::record::{BatchRecord, TaskRecord, TaskState};
use crate::model::ids::{BatchId, JobId};

impl QueueCore {
    /// At start: a batch as the store kept it. Its tasks that were running
    /// are re-attached.
    #[must_use = "the driver performs every action"]
    pub fn restore_batch(
        &mut self,
        now: Now,
        record: BatchRecord,
        tasks: Vec<TaskRecord>,
    ) -> Vec<Action> {
        self.at(now);
        let id = record.id;
        self.batches.insert(
            id,
            LiveBatch {
                record,
                tasks,
                running: 0,
            },
        );
        let running = self
            .batches
            .get(&id)
            .map(|b| b.tasks_in(TaskState::Running))
            .unwrap_or_default();
        for task in running {
            self.reattach(id, task);
        }
        self.restore_avoid(id);
        self.actions()
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
            self.track(batch, task, &plan);
            self.push(Action::Reattach {
                batch,
                task,
                plan: Box::new(plan),
            });
        }
    }
}
