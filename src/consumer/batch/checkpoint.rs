//! Checkpoint-aware migration on the consumer's side (issue 11, item 4): the
//! interval a task is asked to checkpoint at (Young/Daly from the checkpoint's
//! cost and the chosen host's predicted mean time to failure), where a task's
//! latest verified checkpoint is kept, and fetching a host's snapshot into it.
//!
//! A task's checkpoint lives at `<data>/batches/<id>/checkpoints/<task>`,
//! replaced atomically (fetched to a temporary file, checked against the hash
//! the host reported, renamed); the next attempt of the task, on any host,
//! gets it as an input at the checkpoint path, so its guest resumes from it.
//! Pure arithmetic here takes its inputs as parameters; the fetch is the
//! attempt's (`attempt::fetch_checkpoint`), and the attempt's news become
//! [`CheckpointNews`] in the queue: this module knows neither.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use libp2p::PeerId;

use crate::consumer::batch::record::{BatchRecord, CheckpointRef, TaskRecord};
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;
use crate::model::sched::curve::young_daly_interval;
use crate::model::sched::estimate::{checkpoint_mttf, PastFailures};
use crate::net::protocol::CheckpointOrder;

/// Shortest interval asked for: a checkpoint every few seconds costs more in
/// transfers and host work than it saves.
pub const MIN_INTERVAL_SECS: u64 = 30;
/// Longest interval asked for, whatever the host's reliability: a host's
/// prediction can be wrong, and an hour is what one loses at most.
pub const MAX_INTERVAL_SECS: u64 = 3600;
/// The grace a consumer asks for between SIGTERM and SIGKILL (hosts grant at
/// most 5 s): enough to write a small state file, short for the owner.
pub const GRACE_SECS: u64 = 3;

/// The mean time to failure implied by a TR over a window of `window_secs`,
/// under a constant hazard: TR = e^{-T/M}, so M = T / -ln(TR). `None` when
/// the host is predicted never to fail in the window (TR = 1) or TR is not a
/// probability.
pub fn mttf_from_tr(tr: f64, window_secs: u64) -> Option<f64> {
    if !(tr > 0.0 && tr < 1.0) || window_secs == 0 {
        // TR = 0: failure at once; the shortest interval is the answer.
        return (tr == 0.0).then_some(0.0);
    }
    Some(window_secs as f64 / -tr.ln())
}

/// The cost C of one checkpoint: the declared `--checkpoint-cost` is the
/// prior; once a checkpoint has been fetched, the measured time it took to
/// bring it here replaces it when larger (the host's copy and the transfer
/// are what the consumer can see of a checkpoint's cost).
pub fn checkpoint_cost(declared_secs: u64, measured_secs: Option<f64>) -> f64 {
    let declared = declared_secs as f64;
    match measured_secs {
        Some(m) if m.is_finite() && m > declared => m,
        _ => declared,
    }
}

/// The interval the task is asked to checkpoint at: τ = sqrt(2·C·M), bounded
/// to [`MIN_INTERVAL_SECS`], [`MAX_INTERVAL_SECS`]. No MTTF (a host that
/// never fails) asks for the longest; a zero MTTF for the shortest.
pub fn interval_secs(cost_secs: f64, mttf_secs: Option<f64>) -> u64 {
    let tau = match mttf_secs {
        None => MAX_INTERVAL_SECS as f64,
        Some(m) if m <= 0.0 => MIN_INTERVAL_SECS as f64,
        Some(m) => young_daly_interval(cost_secs.max(1.0), m).unwrap_or(MAX_INTERVAL_SECS as f64),
    };
    (tau.round() as u64).clamp(MIN_INTERVAL_SECS, MAX_INTERVAL_SECS)
}

/// Where a task's latest checkpoint is kept.
pub fn checkpoint_file(batch_dir: &Path, task: u32) -> PathBuf {
    batch_dir.join("checkpoints").join(task.to_string())
}

/// What the queue learns from an attempt about its checkpoints and usage.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointNews {
    /// A checkpoint was fetched and verified into the task's file.
    Saved {
        size: u64,
        hash: [u8; 32],
        fetch_secs: f64,
    },
    /// The guest of an attempt ended having used this much CPU.
    Used { cpu_secs: f64 },
}

/// What the queue keeps to choose checkpoint intervals: each host's TR from
/// the last survey and the last measured cost of each batch's checkpoints.
/// In memory: after a restart the declared cost is the prior again.
#[derive(Debug, Default)]
pub struct Intervals {
    /// Each host's MTTF from its TR curve (`None`: it never fails), or
    /// failing a curve its TR for the surveyed window.
    host_mttf: HashMap<PeerId, Option<f64>>,
    host_tr: HashMap<PeerId, f64>,
    measured_cost: HashMap<BatchId, f64>,
}

impl Intervals {
    /// Remembers the TRs a survey returned.
    pub fn surveyed(&mut self, hosts: &[SurveyedHost]) {
        for h in hosts {
            if let Some(curve) = &h.curve {
                // A flat tail (no failure seen) yields to what the host's
                // past week shows, as in the estimate and the simulator.
                let past = h.spells.map(PastFailures::from);
                let m = checkpoint_mttf(curve, past.as_ref());
                self.host_mttf.insert(h.peer, m.is_finite().then_some(m));
            }
            if let Some(tr) = h.tr {
                self.host_tr.insert(h.peer, tr);
            }
        }
    }

    /// Records a task's news; returns the line watchers see, if any.
    pub fn record(
        &mut self,
        batch: BatchId,
        task: &mut TaskRecord,
        news: CheckpointNews,
        now_unix: i64,
    ) -> Option<String> {
        match news {
            CheckpointNews::Saved {
                size,
                hash,
                fetch_secs,
            } => {
                task.checkpoint = Some(CheckpointRef {
                    hash,
                    size,
                    saved_unix: now_unix,
                });
                self.measured_cost.insert(batch, fetch_secs);
                Some(format!(
                    "checkpoint saved ({size} bytes, fetched in {:.0} ms)",
                    fetch_secs * 1000.0
                ))
            }
            CheckpointNews::Used { cpu_secs } => {
                // Every attempt's CPU counts: what the task cost the pool.
                task.cpu_secs = Some(task.cpu_secs.unwrap_or(0.0) + cpu_secs);
                None
            }
        }
    }

    /// The checkpoint order for an attempt on `host`. `None` for a batch
    /// without `--checkpoint`: nothing changes for it.
    pub fn order(
        &self,
        batch: BatchId,
        batch_record: &BatchRecord,
        host: PeerId,
    ) -> Option<CheckpointOrder> {
        let spec = batch_record.checkpoint.as_ref()?;
        // M from the host's TR curve (`TrCurve::mttf`) when it answered
        // with one, else from its TR over the window, T / -ln TR.
        let mttf = match self.host_mttf.get(&host) {
            Some(m) => *m,
            None => self
                .host_tr
                .get(&host)
                .and_then(|tr| mttf_from_tr(*tr, batch_record.runtime_secs)),
        };
        let cost = checkpoint_cost(spec.cost_secs, self.measured_cost.get(&batch).copied());
        Some(CheckpointOrder {
            path: spec.path.clone(),
            interval_secs: interval_secs(cost, mttf),
            grace_secs: GRACE_SECS,
        })
    }
}

/// A task's latest checkpoint as an input of its next attempt: (the file
/// where the consumer keeps it, the checkpoint path in the task's work
/// directory). `None` for a batch without `--checkpoint` or a task without
/// a checkpoint yet. Whoever launches the attempt adds it (replacing an
/// input the task declared at that path, [`with_resume`]) only when the
/// file is there.
pub fn resume_input(
    task: u32,
    record: &TaskRecord,
    batch_record: &BatchRecord,
    batch_dir: &Path,
) -> Option<(PathBuf, String)> {
    let spec = batch_record.checkpoint.as_ref()?;
    record.checkpoint.as_ref()?;
    Some((checkpoint_file(batch_dir, task), spec.path.clone()))
}

/// Adds a task's checkpoint to its inputs at the checkpoint path,
/// replacing an input the task declared there.
pub fn with_resume(inputs: &mut Vec<(PathBuf, String)>, (file, path): (PathBuf, String)) {
    inputs.retain(|(_, remote)| remote != &path);
    inputs.push((file, path));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mttf_follows_a_constant_hazard() {
        // TR = e^{-1} over an hour: M is one hour.
        let m = mttf_from_tr((-1.0f64).exp(), 3600).unwrap();
        assert!((m - 3600.0).abs() < 1e-6, "{m}");
        // TR = 0.5 over 2 h: M = 7200 / ln 2 = 10 387.4 s.
        let m = mttf_from_tr(0.5, 7200).unwrap();
        assert!((m - 10_387.4).abs() < 0.1, "{m}");
        assert_eq!(mttf_from_tr(1.0, 3600), None);
        assert_eq!(mttf_from_tr(0.0, 3600), Some(0.0));
        assert_eq!(mttf_from_tr(f64::NAN, 3600), None);
    }

    #[test]
    fn the_interval_is_young_daly_bounded() {
        // C = 10 s, M = 10 387.4 s: τ = sqrt(2·10·10 387.4) = 455.8 s.
        assert_eq!(interval_secs(10.0, mttf_from_tr(0.5, 7200)), 456);
        // A host that never fails: the longest; one that fails at once: the shortest.
        assert_eq!(interval_secs(10.0, None), MAX_INTERVAL_SECS);
        assert_eq!(interval_secs(10.0, Some(0.0)), MIN_INTERVAL_SECS);
        // C = 1 s, M = 100 s: τ = 14 s, raised to the floor.
        assert_eq!(interval_secs(1.0, Some(100.0)), MIN_INTERVAL_SECS);
        // C = 60 s, M = 10 days: τ = 10 182 s, capped.
        assert_eq!(interval_secs(60.0, Some(864_000.0)), MAX_INTERVAL_SECS);
    }

    #[test]
    fn a_measured_cost_replaces_the_declared_one_when_larger() {
        assert_eq!(checkpoint_cost(10, None), 10.0);
        assert_eq!(checkpoint_cost(10, Some(2.0)), 10.0);
        assert_eq!(checkpoint_cost(10, Some(25.5)), 25.5);
        assert_eq!(checkpoint_cost(0, Some(f64::INFINITY)), 0.0);
    }
}
