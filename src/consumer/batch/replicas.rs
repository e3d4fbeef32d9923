//! The batch queue's side of verified results (a child module of `queue`,
//! so the queue's own code stays about placement): which tasks of a
//! verifying batch need another copy and where it may run, judging each
//! landed copy off the loop, accepting a quorum (its copy renamed into the
//! task's results with `provenance.json`), growing the copies on
//! disagreement up to a bound, "no quorum" past it, and the hosts'
//! reputation. See [`crate::consumer::batch::verify`] and docs/trust.md.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};

use libp2p::PeerId;
use rand::Rng;

use super::{BatchQueue, QueueMsg};
use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::store::TaskState;
use crate::consumer::batch::verify::{
    self, CopyView, LandedCopy, Provenance, ProvenanceCopy, VerifyMode, VerifySpec,
};
use crate::consumer::pool::JobPool;
use crate::consumer::reputation::Reputation;
use crate::model::ids::BatchId;
use crate::model::trust::AdaptiveRule;

/// A landed copy waiting for its digest.
#[derive(Debug, Clone)]
pub(super) struct Landing {
    host: String,
    dir: PathBuf,
    exit_status: i32,
    missing: Vec<String>,
    wall_secs: f64,
}

/// One task's copies as far as they are judged.
#[derive(Debug, Default)]
pub(super) struct Judging {
    /// Copies wanted in all (landed, being judged and running).
    wanted: u32,
    /// Agreeing copies that accept a result.
    quorum: u32,
    /// Judged copies, each with the group of agreeing copies it is in.
    landed: Vec<(LandedCopy, usize)>,
    pending: VecDeque<Landing>,
    /// A judgment is running on the blocking pool, of this host's copy.
    busy: bool,
    judged_host: Option<String>,
    /// A quorum was found: later ends are ignored.
    decided: bool,
    /// Copies that ended without a result (host failed, refused).
    failures: u32,
}

/// The trust state of the queue.
#[derive(Default)]
pub(super) struct Trust {
    specs: HashMap<BatchId, VerifySpec>,
    tree: Option<sled::Tree>,
    pub(super) reputation: Option<Reputation>,
    judging: HashMap<(BatchId, u32), Judging>,
    /// Hosts that returned an invalid result for a batch: none of its
    /// tasks go there again.
    tainted: HashMap<BatchId, HashSet<PeerId>>,
    rule: AdaptiveRule,
}

/// What a judgment reports back to the actor.
#[derive(Debug)]
pub enum Verdict {
    Judged {
        copy: Result<LandedCopy, String>,
        agrees_with: Vec<usize>,
    },
    Promoted(Result<(), String>),
}

use crate::consumer::batch::codec::{self, batch_key};

impl Trust {
    pub(super) fn open(store: &crate::consumer::batch::store::BatchStore) -> Trust {
        let tree = store
            .tree("verify")
            .map_err(|e| tracing::error!(error = %e, "cannot open the verify tree"))
            .ok();
        let mut specs = HashMap::new();
        let mut tainted: HashMap<BatchId, HashSet<PeerId>> = HashMap::new();
        if let Some(tree) = &tree {
            for (key, value) in tree.iter().flatten() {
                match codec::decode_verify_key(&key) {
                    Ok(Some((batch, peer))) => {
                        tainted.entry(batch).or_default().insert(peer);
                    }
                    Ok(None) => {
                        let Ok(key) = codec::decode_batch_key(&key) else {
                            continue;
                        };
                        match VerifySpec::decode(&value) {
                            Ok(spec) => {
                                specs.insert(key, spec);
                            }
                            Err(e) => tracing::warn!(error = %e, "verify record skipped"),
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "verify record skipped"),
                }
            }
        }
        let reputation = Reputation::load(
            store
                .tree("reputation")
                .map_err(|e| tracing::error!(error = %e, "cannot open the reputation tree"))
                .ok(),
        );
        Trust {
            specs,
            tainted,
            tree,
            reputation: Some(reputation),
            ..Default::default()
        }
    }

    pub(super) fn spec(&self, batch: BatchId) -> Option<&VerifySpec> {
        self.specs.get(&batch).filter(|s| s.verifies())
    }

    pub(super) fn set_spec(&mut self, batch: BatchId, spec: VerifySpec) -> Result<(), String> {
        if !spec.verifies() {
            return Ok(());
        }
        if let Some(tree) = &self.tree {
            tree.insert(batch_key(batch), spec.encode())
                .map_err(|e| e.to_string())?;
        }
        self.specs.insert(batch, spec);
        Ok(())
    }

    pub(super) fn forget(&mut self, batch: BatchId) {
        if let Some(tree) = &self.tree {
            // The settings and every tainted host share the batch's prefix.
            for key in tree.scan_prefix(batch_key(batch)).keys().flatten() {
                let _ = tree.remove(key);
            }
        }
        self.specs.remove(&batch);
        self.judging.retain(|(b, _), _| *b != batch);
        self.tainted.remove(&batch);
    }

    /// `peer` returned an invalid result for `batch`: it gets none of the
    /// batch's tasks again, after a restart too (written through to the
    /// `verify` tree).
    pub(super) fn taint(&mut self, batch: BatchId, peer: PeerId) {
        if let Some(tree) = &self.tree {
            if let Err(e) = tree.insert(codec::tainted_key(batch, &peer), &[][..]) {
                tracing::error!(%batch, %peer, error = %e, "cannot record a host's exclusion from a batch");
            }
        }
        self.tainted.entry(batch).or_default().insert(peer);
    }

    fn has_invalid(&self, peer: &PeerId) -> bool {
        self.reputation
            .as_ref()
            .is_some_and(|r| r.get(peer).invalid > 0)
    }

    /// Hosts whose copy of a task of this batch disagrees with another
    /// copy and the dispute is not settled yet: one of them is wrong, so
    /// neither gets more of the batch until a further copy decides.
    pub(super) fn disputed(&self, batch: BatchId) -> HashSet<String> {
        let mut out = HashSet::new();
        for ((b, _), j) in &self.judging {
            if *b != batch || j.decided {
                continue;
            }
            let first = j.landed.first().map(|(_, g)| *g);
            if j.landed.iter().any(|(_, g)| Some(*g) != first) {
                out.extend(j.landed.iter().map(|(c, _)| c.host.clone()));
            }
        }
        out
    }

    /// Hosts in the policy's order with every host that ever returned an
    /// invalid result moved behind those that did not (order kept within
    /// each part), and hosts tainted for this batch left out.
    pub(super) fn order<T>(&self, batch: BatchId, hosts: Vec<(PeerId, T)>) -> Vec<(PeerId, T)> {
        let tainted = self.tainted.get(&batch);
        let (mut clean, bad): (Vec<_>, Vec<_>) = hosts
            .into_iter()
            .filter(|(p, _)| !tainted.is_some_and(|t| t.contains(p)))
            .partition(|(p, _)| !self.has_invalid(p));
        clean.extend(bad);
        clean
    }
}

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    fn batch_dir(&self, batch: BatchId) -> PathBuf {
        self.dir.join(batch.to_string())
    }

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

    /// After a restart: the copies of running tasks that had landed are on
    /// disk; they are judged again (their digests are not stored).
    pub(super) fn restore_copies(&mut self, batch: BatchId) {
        let Some(spec) = self.trust.spec(batch).cloned() else {
            return;
        };
        let Some(live) = self.batches.get(&batch) else {
            return;
        };
        let outputs = live.record.outputs.clone();
        let running: Vec<u32> = live
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.state == TaskState::Running || t.state == TaskState::Queued)
            .map(|(i, _)| i as u32)
            .collect();
        for task in running {
            let dir = self.batch_dir(batch).join("copies").join(task.to_string());
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut pending = VecDeque::new();
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(host) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .map(str::to_string)
                else {
                    continue;
                };
                if host.starts_with('.') || host.parse::<PeerId>().is_err() {
                    continue;
                }
                let Ok(status) = std::fs::read_to_string(path.join("exit_status")) else {
                    continue;
                };
                let missing = outputs
                    .iter()
                    .filter(|o| !path.join(o).exists())
                    .cloned()
                    .collect();
                pending.push_back(Landing {
                    host,
                    dir: path,
                    exit_status: status.trim().parse().unwrap_or(-1),
                    missing,
                    wall_secs: 0.0,
                });
            }
            let running = self
                .task(batch, task)
                .is_some_and(|t| t.state == TaskState::Running);
            if pending.is_empty() && !running {
                continue;
            }
            let j = self.trust.judging.entry((batch, task)).or_default();
            j.wanted = spec.replicas.max(pending.len() as u32).max(2);
            j.quorum = spec.quorum.max(2);
            j.pending = pending;
            self.judge_next(batch, task);
        }
    }

    /// Copies of a task landed, being judged or running.
    fn copies_in_play(&self, batch: BatchId, task: u32) -> u32 {
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
    /// copies (running or landed), not avoided or tainted.
    pub(super) fn may_copy_on(&self, batch: BatchId, task: u32, host: PeerId) -> bool {
        let name = host.to_base58();
        let Some(t) = self.task(batch, task) else {
            return false;
        };
        if t.host.as_deref() == Some(name.as_str())
            || t.copies.iter().any(|c| c.host == name)
            || t.avoid.contains(&name)
            || self
                .refused_by
                .get(&(batch, task))
                .is_some_and(|r| r.contains(&host))
            || self
                .trust
                .tainted
                .get(&batch)
                .is_some_and(|s| s.contains(&host))
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
        if b.record.cancelled || b.record.max_running.is_some_and(|m| b.running >= m) {
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
        let streak = self
            .trust
            .reputation
            .as_ref()
            .map_or(0, |r| r.get(&host).streak);
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

    /// An attempt of a verifying batch's task ended (the queue's `ended`
    /// has already freed its host). Returns false to let the queue's own
    /// rules handle it (nothing of the task was landed or is running).
    pub(super) fn replica_ended(
        &mut self,
        batch: BatchId,
        task: u32,
        host: PeerId,
        end: &AttemptEnd,
    ) -> bool {
        let cancelled = self.batches.get(&batch).is_some_and(|b| b.record.cancelled);
        let decided = self
            .trust
            .judging
            .get(&(batch, task))
            .is_some_and(|j| j.decided);
        if matches!(end, AttemptEnd::Cancelled) && !cancelled && !decided {
            // The node is stopping: re-attached at the next start.
            return true;
        }
        let name = host.to_base58();
        let Some(t) = self
            .batches
            .get_mut(&batch)
            .and_then(|b| b.tasks.get_mut(task as usize))
        else {
            return true;
        };
        // This attempt no longer runs.
        if t.host.as_deref() == Some(name.as_str()) {
            if t.copies.is_empty() {
                t.host = None;
            } else {
                let next = t.copies.remove(0);
                t.host = Some(next.host);
                t.job_id = Some(next.job_id);
            }
        } else {
            t.copies.retain(|c| c.host != name);
        }
        let spec = self.trust.spec(batch).cloned().unwrap_or_default();
        let j = self.trust.judging.entry((batch, task)).or_default();
        if j.wanted == 0 {
            // Not planned in this run (a copy re-attached after a restart):
            // the batch's full check, never a single copy.
            j.wanted = spec.replicas.max(2);
            j.quorum = spec.quorum.max(2);
        }
        if j.decided {
            self.persist(batch, task);
            return true;
        }
        match end {
            AttemptEnd::Landed {
                exit_status,
                wall_secs,
                missing,
                ..
            } => {
                j.pending.push_back(Landing {
                    host: name,
                    dir: verify::copy_dir(
                        &self.dir.join(batch.to_string()),
                        task,
                        &host.to_base58(),
                    ),
                    exit_status: *exit_status,
                    missing: missing.clone(),
                    wall_secs: *wall_secs,
                });
                self.persist(batch, task);
                self.judge_next(batch, task);
                return true;
            }
            AttemptEnd::Refused { lasting: true, .. } => {
                self.refused_by
                    .entry((batch, task))
                    .or_default()
                    .insert(host);
            }
            AttemptEnd::Refused { .. } => {}
            AttemptEnd::HostFailed(reason) | AttemptEnd::JobFailed(reason) => {
                j.failures += 1;
                t.avoid.push(name);
                t.reason = Some(reason.clone());
            }
            AttemptEnd::Cancelled => {}
        }
        self.persist(batch, task);
        self.settle(batch, task);
        true
    }

    /// Judges the next landed copy of a task, off the loop, unless one is
    /// being judged.
    fn judge_next(&mut self, batch: BatchId, task: u32) {
        let validator = self.trust.spec(batch).and_then(|s| s.validator.clone());
        let outputs = self
            .batches
            .get(&batch)
            .map(|b| b.record.outputs.clone())
            .unwrap_or_default();
        let Some(j) = self.trust.judging.get_mut(&(batch, task)) else {
            return;
        };
        if j.busy || j.decided {
            return;
        }
        let Some(landing) = j.pending.pop_front() else {
            return;
        };
        j.busy = true;
        j.judged_host = Some(landing.host.clone());
        let earlier: Vec<LandedCopy> = j.landed.iter().map(|(c, _)| c.clone()).collect();
        let tx = self.to_self.clone();
        self.tracker.spawn_blocking(move || {
            let judged = verify::digest(&landing.dir, &outputs)
                .map_err(|e| format!("cannot read the copy of {}: {e}", landing.host))
                .map(|digest| LandedCopy {
                    host: landing.host,
                    dir: landing.dir,
                    digest,
                    exit_status: landing.exit_status,
                    missing: landing.missing,
                    wall_secs: landing.wall_secs,
                });
            let agrees_with = match &judged {
                Ok(copy) => verify::agreeing(copy, &earlier, validator.as_deref()),
                Err(_) => Vec::new(),
            };
            let _ = tx.send(QueueMsg::Verdict {
                batch,
                task,
                verdict: Verdict::Judged {
                    copy: judged,
                    agrees_with,
                },
            });
        });
    }

    pub(super) fn on_verdict(&mut self, batch: BatchId, task: u32, verdict: Verdict) {
        match verdict {
            Verdict::Judged { copy, agrees_with } => {
                let Some(j) = self.trust.judging.get_mut(&(batch, task)) else {
                    return;
                };
                j.busy = false;
                j.judged_host = None;
                match copy {
                    Ok(copy) if !j.landed.iter().any(|(c, _)| c.host == copy.host) => {
                        let group =
                            agrees_with
                                .first()
                                .map(|i| j.landed[*i].1)
                                .unwrap_or_else(|| {
                                    j.landed.iter().map(|(_, g)| g + 1).max().unwrap_or(0)
                                });
                        j.landed.push((copy, group));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(%batch, task, error = %e, "a landed copy could not be judged");
                        j.failures += 1;
                    }
                }
                self.settle(batch, task);
                self.judge_next(batch, task);
            }
            Verdict::Promoted(result) => self.promoted(batch, task, result),
        }
    }

    /// Decides a task from its judged copies: a quorum accepts it; with
    /// nothing left running or being judged, a disagreement asks for one
    /// more copy up to the bound, past which the task fails "no quorum" —
    /// as it does when no host of the pool is left to run another copy.
    fn settle(&mut self, batch: BatchId, task: u32) {
        let Some(spec) = self.trust.spec(batch).cloned() else {
            return;
        };
        let max_retries = self.settings.max_retries;
        let cancelled = self.batches.get(&batch).is_some_and(|b| b.record.cancelled);
        let in_play = self.copies_in_play(batch, task);
        // No host of the last survey may run a further copy of this task.
        let no_host_left = !self.last_hosts.is_empty()
            && !self
                .last_hosts
                .iter()
                .any(|h| h.answered && self.may_copy_on(batch, task, h.peer));
        let Some(j) = self.trust.judging.get_mut(&(batch, task)) else {
            return;
        };
        if j.decided {
            return;
        }
        let mut sizes: HashMap<usize, u32> = HashMap::new();
        for (_, g) in &j.landed {
            *sizes.entry(*g).or_default() += 1;
        }
        let quorum = j.quorum.max(1);
        if let Some((group, _)) = sizes.iter().find(|(_, n)| **n >= quorum) {
            let group = *group;
            j.decided = true;
            self.accept(batch, task, group);
            return;
        }
        let idle = in_play == j.landed.len() as u32 && !j.busy && j.pending.is_empty();
        if !idle {
            return;
        }
        let now = self.clock.unix_secs();
        let landed = j.landed.len() as u32;
        let disagree = landed >= 2 && sizes.len() > 1;
        let aside = self
            .dir
            .join(batch.to_string())
            .join("copies")
            .join(task.to_string());
        let fail = if cancelled {
            Some((TaskState::Cancelled, "cancelled".to_string()))
        } else if landed >= spec.max_copies() {
            Some((
                TaskState::Failed,
                format!(
                    "no quorum: {landed} copies, no {quorum} agreeing; every copy is kept in {}",
                    aside.display()
                ),
            ))
        } else if disagree && no_host_left {
            // Every host the last survey found has run a copy (or may not
            // run one): waiting would wait for a host that may never come.
            Some((
                TaskState::Failed,
                format!(
                    "no quorum: {landed} copies, no {quorum} agreeing, and no other host in the pool to run another; every copy is kept in {}",
                    aside.display()
                ),
            ))
        } else if j.failures > max_retries {
            Some((
                TaskState::Failed,
                format!(
                    "copies failed on {} host(s); no retries left (max_retries = {max_retries})",
                    j.failures
                ),
            ))
        } else {
            None
        };
        match fail {
            Some((state, reason)) => {
                j.decided = true;
                if let Some(t) = self
                    .batches
                    .get_mut(&batch)
                    .and_then(|b| b.tasks.get_mut(task as usize))
                {
                    t.state = state;
                    t.ended_unix = Some(now);
                    t.reason = Some(reason);
                }
                tracing::warn!(%batch, task, "verified task ended without a quorum");
                self.persist(batch, task);
            }
            None => {
                // Disagreement (or a lost copy): one more copy, on a host
                // that has not run one.
                if landed > 0 && sizes.len() > 1 {
                    tracing::info!(%batch, task, landed, "copies disagree; one more copy");
                }
                j.wanted = j.wanted.max(landed + 1).max(j.quorum);
                self.wanted = true;
            }
        }
    }

    /// A quorum agreed: its first copy becomes the task's result (with its
    /// provenance), the copies still running are cancelled, and every judged
    /// host's reputation is updated.
    fn accept(&mut self, batch: BatchId, task: u32, group: usize) {
        let Some(j) = self.trust.judging.get(&(batch, task)) else {
            return;
        };
        let mode = self.trust.spec(batch).map(|s| s.mode).unwrap_or_default();
        let checked = j.landed.len() > 1;
        let chosen = j
            .landed
            .iter()
            .find(|(_, g)| *g == group)
            .map(|(c, _)| c.clone());
        let Some(chosen) = chosen else {
            return;
        };
        let provenance = Provenance {
            task,
            verification: mode,
            quorum: j.quorum,
            host: chosen.host.clone(),
            // A single unchecked copy: nobody agreed.
            agreed: if checked {
                j.landed
                    .iter()
                    .filter(|(_, g)| *g == group)
                    .map(|(c, _)| c.host.clone())
                    .collect()
            } else {
                Vec::new()
            },
            disagreed: j
                .landed
                .iter()
                .filter(|(_, g)| *g != group)
                .map(|(c, _)| c.host.clone())
                .collect(),
            copies: j
                .landed
                .iter()
                .map(|(c, _)| ProvenanceCopy {
                    host: c.host.clone(),
                    digest: verify::hex(&c.digest),
                    exit_status: c.exit_status,
                })
                .collect(),
        };
        if checked {
            let verdicts: Vec<(String, bool)> = j
                .landed
                .iter()
                .map(|(c, g)| (c.host.clone(), *g == group))
                .collect();
            for (host, valid) in verdicts {
                let Ok(peer) = host.parse::<PeerId>() else {
                    continue;
                };
                if let Some(r) = self.trust.reputation.as_mut() {
                    r.record(peer, valid);
                }
                if !valid {
                    tracing::warn!(%batch, task, %peer, "invalid result: the host gets no more of this batch");
                    self.trust.taint(batch, peer);
                }
            }
        }
        for (key, cancel) in &self.running {
            if key.0 == batch && key.1 == task {
                cancel.cancel();
            }
        }
        let to = self.results_dir(batch).join(task.to_string());
        let tx = self.to_self.clone();
        self.tracker.spawn_blocking(move || {
            let result = promote(&chosen.dir, &to, &provenance);
            let _ = tx.send(QueueMsg::Verdict {
                batch,
                task,
                verdict: Verdict::Promoted(result),
            });
        });
    }

    /// The accepted copy is in the results: the task ends as a landed one
    /// does.
    fn promoted(&mut self, batch: BatchId, task: u32, result: Result<(), String>) {
        let now = self.clock.unix_secs();
        let chosen = self.trust.judging.get(&(batch, task)).and_then(|j| {
            let mut sizes: HashMap<usize, u32> = HashMap::new();
            for (_, g) in &j.landed {
                *sizes.entry(*g).or_default() += 1;
            }
            let group = sizes.iter().find(|(_, n)| **n >= j.quorum.max(1))?.0;
            j.landed
                .iter()
                .find(|(_, g)| g == group)
                .map(|(c, _)| c.clone())
        });
        let Some(live) = self.batches.get_mut(&batch) else {
            return;
        };
        let Some(t) = live.tasks.get_mut(task as usize) else {
            return;
        };
        t.ended_unix = Some(now);
        match (result, chosen) {
            (Ok(()), Some(c)) => {
                t.state = if c.exit_status == 0 && c.missing.is_empty() {
                    TaskState::Done
                } else {
                    TaskState::Failed
                };
                t.host = Some(c.host.clone());
                t.copies.clear();
                t.exit_status = Some(c.exit_status);
                t.wall_secs = Some(c.wall_secs);
                t.reason = if c.exit_status != 0 {
                    Some(format!("exit status {}", c.exit_status))
                } else if !c.missing.is_empty() {
                    Some(format!(
                        "declared output(s) not written: {}",
                        c.missing.join(", ")
                    ))
                } else {
                    None
                };
            }
            (Err(e), _) => {
                t.state = TaskState::Failed;
                t.reason = Some(format!("cannot keep the accepted result: {e}"));
            }
            (Ok(()), None) => {
                t.state = TaskState::Failed;
                t.reason = Some("the accepted copy was lost".into());
            }
        }
        let landed = t.state == TaskState::Done || t.exit_status.is_some();
        self.persist(batch, task);
        self.trust.judging.remove(&(batch, task));
        self.refused_by.remove(&(batch, task));
        let store = self.store.clone();
        self.tracker.spawn_blocking(move || {
            let _ = store.flush();
        });
        if landed {
            self.copy_out(batch, task);
        }
    }
}

/// Writes `provenance.json` into the accepted copy and renames the copy
/// into the task's results (replacing what was there).
fn promote(copy: &Path, to: &Path, provenance: &Provenance) -> Result<(), String> {
    let json = provenance.to_json()?;
    std::fs::write(copy.join(verify::PROVENANCE_FILE), json)
        .map_err(|e| format!("{}: {e}", copy.display()))?;
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| format!("cannot replace {}: {e}", to.display()))?;
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::rename(copy, to).map_err(|e| format!("cannot rename into {}: {e}", to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::batch::store::BatchStore;

    #[test]
    fn a_host_excluded_from_a_batch_stays_excluded_after_a_reopen_until_the_batch_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (batch, other) = (BatchId::new(41), BatchId::new(42));
        let (liar, honest) = (PeerId::random(), PeerId::random());
        let spec = VerifySpec {
            replicas: 2,
            quorum: 2,
            ..Default::default()
        }
        .checked()
        .unwrap();
        {
            let store = BatchStore::open(dir.path()).unwrap();
            let mut trust = Trust::open(&store);
            trust.set_spec(batch, spec.clone()).unwrap();
            trust.set_spec(other, spec.clone()).unwrap();
            trust.taint(batch, liar);
            store.flush().unwrap();
        }
        let hosts = || vec![(liar, ()), (honest, ())];
        let store = BatchStore::open(dir.path()).unwrap();
        let mut trust = Trust::open(&store);
        assert_eq!(trust.spec(batch), Some(&spec), "the settings came back");
        let order: Vec<PeerId> = trust
            .order(batch, hosts())
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(
            order,
            vec![honest],
            "the liar is still left out of its batch"
        );
        let order: Vec<PeerId> = trust
            .order(other, hosts())
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(order, vec![liar, honest], "other batches are not affected");
        trust.forget(batch);
        drop(trust);
        store.flush().unwrap();
        drop(store);
        let store = BatchStore::open(dir.path()).unwrap();
        let trust = Trust::open(&store);
        assert!(trust.spec(batch).is_none());
        assert!(
            !trust.tainted.contains_key(&batch),
            "forgotten with its batch"
        );
        assert_eq!(trust.spec(other), Some(&spec));
    }
}
