//! Checkpoints in the queue's core: a task's news of a checkpoint saved (or
//! of the CPU its guest used) recorded in its task record, and each new
//! attempt's checkpoint order (Young/Daly's interval for its host) with the
//! task's latest checkpoint offered as an input. The arithmetic is
//! `batch::checkpoint`; the fetch is the attempt's. Pure: no files.

use std::path::PathBuf;

use libp2p::PeerId;

use super::state::{Action, Now, QueueCore};
use crate::consumer::batch::checkpoint::{resume_input, CheckpointNews};
use crate::consumer::batch::record::BatchRecord;
use crate::model::ids::BatchId;
use crate::net::protocol::CheckpointOrder;

impl QueueCore {
    /// A checkpoint or the guest's usage came from a task's host.
    #[must_use = "the driver performs every action"]
    pub fn on_checkpoint(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        news: CheckpointNews,
    ) -> Vec<Action> {
        self.at(now);
        let Some(t) = self
            .batches
            .get_mut(&batch)
            .and_then(|b| b.tasks.get_mut(task as usize))
        else {
            return self.actions();
        };
        let text = self.checkpoints.record(batch, t, news, now.unix_secs);
        self.persist_quietly(batch, task);
        if let Some(text) = text {
            self.emit(batch, task, Some(text));
        }
        self.actions()
    }

    /// The checkpoint order for an attempt of `task` on `host`, and the
    /// task's latest checkpoint as an input at the checkpoint path (the
    /// driver adds it when the file is there). Both `None` for a batch
    /// without `--checkpoint`.
    pub(super) fn checkpoint_order(
        &self,
        batch: BatchId,
        task: u32,
        record: &BatchRecord,
        host: PeerId,
    ) -> (Option<CheckpointOrder>, Option<(PathBuf, String)>) {
        let Some(t) = self.task(batch, task) else {
            return (None, None);
        };
        let order = self.checkpoints.order(batch, record, host);
        let resume = resume_input(task, t, record, &self.batch_dir(batch));
        (order, resume)
    }
}
