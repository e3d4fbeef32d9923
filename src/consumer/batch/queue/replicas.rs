//! Verified tasks' copies in the queue's core: how many copies a task of a
//! verifying batch wants (K, or the adaptive rule's 1 or 2), which task
//! wants another copy and which host may run it, the copies `batch status`
//! shows, and a restart's landed copies handed back for judging. Deciding
//! from the judged copies is `quorum`. Pure: no tokio, no files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use libp2p::PeerId;
use rand::Rng;

use super::state::{Action, Now, QueueCore};
use super::trust::Landing;
use crate::consumer::batch::record::TaskState;
use crate::consumer::batch::verify::{self, CopyView, VerifyMode, VerifySpec};
use crate::model::ids::BatchId;

impl QueueCore {
    /// The batch's verification, as submitted (none when it does not verify).
    pub(super) fn verify_spec(&self, batch: BatchId) -> Option<VerifySpec> {
        self.trust.spec(batch).cloned()
    }

    /// The copies of each task of `batch` still being decided: running,
    /// being judged, judged (with their agreement group).
    pub(super) fn live_copies(&self, batch: BatchId) -> BTreeMap<u32, Vec<CopyView>> {
        let mut out = BTreeMap::new();
        if self.trust.spec(batch).is_none() {
            return out;
        }
        let Some(live) = self.batches.get(&batch) else {
            return out;
        };
        for (i, t) in live.tasks.iter().enumerate() {
            let task = i as u32;
            let judging = self.trust.judging.get(&(batch, task));
            if t.state.is_final() && judging.is_none() {
                continue;
            }
            let mut copies: Vec<CopyView> = Vec::new();
            if let Some(j) = judging {
                copies.extend(j.landed.iter().map(|(c, g)| CopyView {
                    host: c.host.clone(),
                    state: "landed",
                    group: Some(*g as u32),
                }));
                copies.extend(
                    j.pending
                        .iter()
                        .map(|c| c.host.clone())
                        .chain(j.judged_host.clone())
                        .map(|host| CopyView {
                            host,
                            state: "judging",
                            group: None,
                        }),
                );
            }
            // A verified task's attempts in flight: its main one and copies.
            if t.state == TaskState::Running {
                copies.extend(
                    t.host
                        .iter()
                        .chain(t.copies.iter().map(|c| &c.host))
                        .map(|h| CopyView {
                            host: h.clone(),
                            state: "running",
                            group: None,
                        }),
                );
            }
            if !copies.is_empty() {
                out.insert(task, copies);
            }
        }
        out
    }

    /// Where an attempt of a verifying batch's task lands: its own copy
    /// directory, never the task's results.
    pub(super) fn copy_result_dir(
        &self,
        batch: BatchId,
        task: u32,
        host: PeerId,
    ) -> Option<PathBuf> {
        self.trust.spec(batch)?;
        Some(verify::copy_dir(
            &self.batch_dir(batch),
            task,
            &host.to_base58(),
        ))
    }

    /// After a restart, the tasks of `batch` whose landed copies may be on
    /// disk (running or queued ones of a verifying batch), and the batch's
    /// declared outputs: the driver reads them back for
    /// [`QueueCore::restored_copies`].
    pub fn copies_to_restore(&self, batch: BatchId) -> Option<(Vec<u32>, Vec<String>)> {
        self.trust.spec(batch)?;
        let live = self.batches.get(&batch)?;
        let tasks = live
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.state == TaskState::Running || t.state == TaskState::Queued)
            .map(|(i, _)| i as u32)
            .collect();
        Some((tasks, live.record.outputs.clone()))
    }

    /// After a restart: the copies of a task that had landed, read back from
    /// disk, are judged again (their digests are not stored).
    #[must_use = "the driver performs every action"]
    pub fn restored_copies(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        pending: Vec<Landing>,
    ) -> Vec<Action> {
        self.at(now);
        let Some(spec) = self.trust.spec(batch).cloned() else {
            return self.actions();
        };
        let running = self
            .task(batch, task)
            .is_some_and(|t| t.state == TaskState::Running);
        if pending.is_empty() && !running {
            return self.actions();
        }
        let j = self.trust.judging.entry((batch, task)).or_default();
        j.wanted = spec.replicas.max(pending.len() as u32).max(2);
        j.quorum = spec.quorum.max(2);
        j.pending = pending.into();
        self.judge_next(batch, task);
        self.actions()
    }

    /// Copies of a task landed, being judged or running.
    pub(super) fn copies_in_play(&self, batch: BatchId, task: u32) -> u32 {
        let running = self
            .task(batch, task)
            .map_or(0, |t| u32::from(t.host.is_some()) + t.copies.len() as u32);
        let judged = self.trust.judging.get(&(batch, task)).map_or(0, |j| {
            j.landed.len() as u32 + j.pending.len() as u32 + u32::from(j.busy)
        });
        running + judged
    }

    /// True when a running task of a verifying batch wants another copy.
    pub(super) fn wants_copy(&self, batch: BatchId, task: u32) -> bool {
        let Some(j) = self.trust.judging.get(&(batch, task)) else {
            return false;
        };
        !j.decided
            && self
                .task(batch, task)
                .is_some_and(|t| t.state == TaskState::Running)
            && self.copies_in_play(batch, task) < j.wanted
    }

    /// Whether `host` may run a copy of this task: not already one of its
    /// copies (running or landed), not avoided (`avoid`), tainted or
    /// excluded by its record.
    pub(super) fn may_copy_on(&self, batch: BatchId, task: u32, host: PeerId) -> bool {
        let name = host.to_base58();
        let Some(t) = self.task(batch, task) else {
            return false;
        };
        if t.host.as_deref() == Some(name.as_str())
            || t.copies.iter().any(|c| c.host == name)
            || self.avoids(batch, task, t, &name)
            || self
                .refused_by
                .get(&(batch, task))
                .is_some_and(|r| r.contains(&host))
            || self.trust.is_tainted(batch, &host)
            || self.trust.is_excluded(&host)
        {
            return false;
        }
        !self.trust.judging.get(&(batch, task)).is_some_and(|j| {
            j.landed.iter().any(|(c, _)| c.host == name)
                || j.pending.iter().any(|c| c.host == name)
                || j.judged_host.as_deref() == Some(name.as_str())
        })
    }

    /// Any task of a verifying batch that wants another copy.
    pub(super) fn any_wants_copy(&self) -> bool {
        self.trust
            .judging
            .keys()
            .any(|(b, t)| self.wants_copy(*b, *t))
    }

    /// The first task of `batch` that wants another copy `host` may run.
    pub(super) fn copy_task_for(&self, batch: BatchId, host: PeerId) -> Option<u32> {
        let b = self.batches.get(&batch)?;
        if b.record.cancelled || b.room() == 0 {
            return None;
        }
        let mut tasks: Vec<u32> = self
            .trust
            .judging
            .keys()
            .filter(|(b, _)| *b == batch)
            .map(|(_, t)| *t)
            .collect();
        tasks.sort_unstable();
        tasks
            .into_iter()
            .find(|t| self.wants_copy(batch, *t) && self.may_copy_on(batch, *t, host))
    }

    /// A task of a verifying batch starts on its first host: how many
    /// copies it wants (K, or 1 or 2 by the adaptive rule on that host's
    /// streak).
    pub(super) fn plan_copies(&mut self, batch: BatchId, task: u32, host: PeerId) {
        let Some(spec) = self.trust.spec(batch).cloned() else {
            return;
        };
        let streak = self.trust.streak(&host);
        let draw: f64 = self.rng.random();
        let rule = self.trust.rule;
        let j = self.trust.judging.entry((batch, task)).or_default();
        if j.wanted > 0 {
            return;
        }
        (j.wanted, j.quorum) = match spec.mode {
            VerifyMode::Adaptive => match rule.copies(streak, draw) {
                1 => (1, 1),
                _ => (2, 2),
            },
            _ => (spec.replicas, spec.quorum),
        };
        tracing::debug!(%batch, task, %host, streak, copies = j.wanted, "verified task starts");
    }

    /// Starts one more copy of a verifying task on `host`.
    pub(super) fn start_replica(&mut self, batch: BatchId, task: u32, host: PeerId) {
        let Some(job_id) = self.add_attempt(batch, task, host) else {
            return;
        };
        tracing::info!(%batch, task, %host, "a copy of a verified task starts");
        self.persist(batch, task);
        self.launch(batch, task, host, job_id);
    }
}
