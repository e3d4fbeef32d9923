//! The batch queue's side of verified results: which tasks of a verifying
//! batch need another copy and where it may run, judging each landed copy
//! off the loop, accepting a quorum (its copy renamed into the task's
//! results with `provenance.json`), growing the copies on disagreement up to
//! a bound, "no quorum" past it, and the hosts' reputation (state in
//! `trust`). See [`crate::consumer::batch::verify`] and docs/trust.md.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use libp2p::PeerId;
use rand::Rng;

use super::trust::{Landing, Verdict};
use super::{BatchQueue, QueueMsg};
use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::record::TaskState;
use crate::consumer::batch::verify::{
    self, CopyView, LandedCopy, Provenance, ProvenanceCopy, VerifyMode, VerifySpec,
};
use crate::consumer::pool::JobPool;
use crate::model::ids::BatchId;

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    pub(super) fn batch_dir(&self, batch: BatchId) -> PathBuf {
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
    pub(super) fn judge_next(&mut self, batch: BatchId, task: u32) {
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
    pub(super) fn settle(&mut self, batch: BatchId, task: u32) {
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
    pub(super) fn accept(&mut self, batch: BatchId, task: u32, group: usize) {
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
    pub(super) fn promoted(&mut self, batch: BatchId, task: u32, result: Result<(), String>) {
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
