//! `--output-dir` in the queue's core: each landed task's results are
//! copied there by the driver off the loop, the copies in flight counted per
//! batch so `batch wait` ends only once the directory holds every landed
//! result, and copies a killed node never made redone at the next start.
//! Pure: the driver does the copying and checks what is on disk.

use std::path::PathBuf;

use super::state::{Action, Now, QueueCore};
use crate::model::ids::BatchId;

impl QueueCore {
    /// Copies a landed task's results to the batch's output directory (when
    /// it has one); [`QueueCore::on_copied`] hears when that is done.
    pub(super) fn copy_out(&mut self, batch: BatchId, task: u32) {
        let Some(out) = self
            .batches
            .get(&batch)
            .and_then(|b| b.record.output_dir.clone())
        else {
            return;
        };
        *self.copies_out.entry(batch).or_default() += 1;
        let from = self.results_dir(batch).join(task.to_string());
        self.push(Action::CopyOut {
            batch,
            task,
            from,
            to: out.join(task.to_string()),
        });
    }

    /// A copy to the output directory ended; the batch's waiters are
    /// answered ([`Action::CopiesDrained`]) when it was the last in flight.
    #[must_use = "the driver performs every action"]
    pub fn on_copied(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        error: Option<String>,
    ) -> Vec<Action> {
        self.at(now);
        if let Some(error) = error {
            tracing::warn!(%batch, task, %error, "cannot copy results to the output directory");
        }
        let Some(n) = self.copies_out.get_mut(&batch) else {
            return self.actions();
        };
        *n -= 1;
        if *n == 0 {
            self.copies_out.remove(&batch);
            self.push(Action::CopiesDrained(batch));
        }
        self.actions()
    }

    /// True while a copy of the batch's results to its output directory is
    /// in flight.
    pub fn copying_out(&self, batch: BatchId) -> bool {
        self.copies_out.contains_key(&batch)
    }

    /// At start: the batch's output directory and results directory, and
    /// its landed tasks; the driver picks those whose copy the output
    /// directory lacks for [`QueueCore::copy_again`].
    pub fn landed_results(&self, batch: BatchId) -> Option<(PathBuf, PathBuf, Vec<u32>)> {
        let live = self.batches.get(&batch)?;
        let out = live.record.output_dir.clone()?;
        let landed = live
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.exit_status.is_some())
            .map(|(i, _)| i as u32)
            .collect();
        Some((out, self.results_dir(batch), landed))
    }

    /// At start: copies again each landed result of `batch` that its output
    /// directory lacks (the node was killed between recording the task's end
    /// and finishing the copy; a half-made copy is redone whole).
    #[must_use = "the driver performs every action"]
    pub fn copy_again(&mut self, now: Now, batch: BatchId, tasks: &[u32]) -> Vec<Action> {
        self.at(now);
        for &task in tasks {
            tracing::info!(%batch, task, "copying a landed result to the output directory again");
            self.copy_out(batch, task);
        }
        self.actions()
    }
}
