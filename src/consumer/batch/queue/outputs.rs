//! The batch queue's side of `--output-dir`:
//! each landed task's results copied there off the loop, the copies in
//! flight counted per batch so `batch wait` ends only once the directory
//! holds every landed result, and copies a killed node never made redone at
//! the next start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio::sync::oneshot;

use super::{BatchError, BatchQueue, BatchView, QueueMsg};
use crate::consumer::pool::JobPool;
use crate::model::ids::BatchId;

/// A caller waiting for a batch's copies to drain.
type Waiter = oneshot::Sender<Result<BatchView, BatchError>>;

/// Copies to output directories in flight, and who waits for them.
#[derive(Debug, Default)]
pub(super) struct OutputCopies {
    /// Per batch with a copy in flight, how many (never 0: the entry goes).
    in_flight: HashMap<BatchId, u32>,
    waiters: HashMap<BatchId, Vec<Waiter>>,
}

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    /// Copies a landed task's results to the batch's output directory (when
    /// it has one), off the loop; [`QueueMsg::Copied`] says when.
    pub(super) fn copy_out(&mut self, batch: BatchId, task: u32) {
        let Some(out) = self
            .batches
            .get(&batch)
            .and_then(|b| b.record.output_dir.clone())
        else {
            return;
        };
        *self.outputs.in_flight.entry(batch).or_default() += 1;
        let from = self.results_dir(batch).join(task.to_string());
        let tx = self.to_self.clone();
        self.tracker.spawn_blocking(move || {
            let error = copy_task_results(&from, &out.join(task.to_string())).err();
            let _ = tx.send(QueueMsg::Copied { batch, task, error });
        });
    }

    /// A copy started by [`Self::copy_out`] ended; the batch's waiters are
    /// answered when it was the last in flight.
    pub(super) fn copied(&mut self, batch: BatchId, task: u32, error: Option<String>) {
        if let Some(error) = error {
            tracing::warn!(%batch, task, %error, "cannot copy results to the output directory");
        }
        let Some(n) = self.outputs.in_flight.get_mut(&batch) else {
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.outputs.in_flight.remove(&batch);
        for waiter in self.outputs.waiters.remove(&batch).unwrap_or_default() {
            let _ = waiter.send(self.view(batch));
        }
    }

    /// Answers `reply` with the batch once no copy of its results to its
    /// output directory is in flight: at once when none is.
    pub fn when_copied(&mut self, batch: BatchId, reply: Waiter) {
        if !self.outputs.in_flight.contains_key(&batch) {
            let _ = reply.send(self.view(batch));
        } else {
            self.outputs.waiters.entry(batch).or_default().push(reply);
        }
    }

    /// At start: copies again each landed result of `batch` that its
    /// output directory lacks (the node was killed between recording the
    /// task's end and finishing the copy; a half-made copy is redone whole).
    pub(super) fn restore_output_copies(&mut self, batch: BatchId) {
        let Some(live) = self.batches.get(&batch) else {
            return;
        };
        let Some(out) = live.record.output_dir.clone() else {
            return;
        };
        let results = self.results_dir(batch);
        let missing: Vec<u32> = live
            .tasks
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                let name = i.to_string();
                t.exit_status.is_some() && !out.join(&name).exists() && results.join(&name).is_dir()
            })
            .map(|(i, _)| i as u32)
            .collect();
        for task in missing {
            tracing::info!(%batch, task, "copying a landed result to the output directory again");
            self.copy_out(batch, task);
        }
    }

    /// A batch is forgotten: whoever waits for its copies hears so.
    pub(super) fn forget_output_copies(&mut self, batch: BatchId) {
        for waiter in self.outputs.waiters.remove(&batch).unwrap_or_default() {
            let _ = waiter.send(Err(BatchError::UnknownBatch(batch)));
        }
    }
}

/// Copies one task's results directory to `to` whole or not at all: into a
/// hidden `.NAME.partial` first (hard links where the filesystem allows),
/// then renamed over whatever `to` held.
pub fn copy_task_results(from: &Path, to: &Path) -> Result<(), String> {
    let parent = to.parent().ok_or("no parent directory")?;
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let name = to.file_name().and_then(|n| n.to_str()).ok_or("no name")?;
    let tmp: PathBuf = parent.join(format!(".{name}.partial"));
    let _ = std::fs::remove_dir_all(&tmp);
    copy_tree(from, &tmp).map_err(|e| format!("{}: {e}", from.display()))?;
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    std::fs::rename(&tmp, to).map_err(|e| format!("{}: {e}", to.display()))
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() && std::fs::hard_link(entry.path(), &target).is_err() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
