//! Deciding a verified task in the queue's core: an attempt's end becomes
//! a landed copy to judge (the driver digests it off the loop and answers
//! with a [`Verdict`]), judged copies are grouped by agreement, a quorum
//! accepts its copy (promoted into the task's results with
//! `provenance.json`, the hosts' reputation counted, a liar excluded from
//! the batch), a disagreement asks for another copy up to the bound, "no
//! quorum" past it. Pure: no tokio, no files. See docs/trust.md.

use std::collections::HashMap;

use libp2p::PeerId;

use super::state::{Action, Now, QueueCore};
use super::trust::{Judge, Landing, Verdict};
use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::record::TaskState;
use crate::consumer::batch::verify::{self, LandedCopy, Provenance, ProvenanceCopy};
use crate::model::ids::BatchId;

impl QueueCore {
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
            AttemptEnd::HostFailed(reason)
            | AttemptEnd::JobFailed(reason)
            | AttemptEnd::Misbehaved { reason, .. } => {
                j.failures += 1;
                t.avoid.push(name);
                t.reason = Some(reason.clone());
            }
            // The owner took the host back: another copy will be wanted,
            // and no retry is spent.
            AttemptEnd::OwnerKilled(reason) => {
                t.avoid.push(name);
                t.owner_kills += 1;
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
        self.push(Action::Judge(Box::new(Judge {
            batch,
            task,
            landing,
            earlier,
            outputs,
            validator,
        })));
    }

    /// A copy of a verified task was judged, or its accepted copy kept.
    #[must_use = "the driver performs every action"]
    pub fn on_verdict(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        verdict: Verdict,
    ) -> Vec<Action> {
        self.at(now);
        self.verdict(batch, task, verdict);
        self.actions()
    }

    fn verdict(&mut self, batch: BatchId, task: u32, verdict: Verdict) {
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
        // No host of the last survey (asked, or known by its summary) may
        // run a further copy of this task.
        let no_host_left = !self.last_hosts.is_empty()
            && !self
                .last_hosts
                .iter()
                .any(|h| (h.answered || h.summarised) && self.may_copy_on(batch, task, h.peer));
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
        let now = self.now.unix_secs;
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
                self.trust.record(peer, valid);
                self.push(Action::Reputation { peer, valid });
                if !valid {
                    tracing::warn!(%batch, task, %peer, "invalid result: the host gets no more of this batch");
                    self.trust.taint(batch, peer);
                    self.push(Action::Taint { batch, peer });
                }
            }
        }
        self.kill_running(batch, Some(task));
        let to = self.results_dir(batch).join(task.to_string());
        self.push(Action::Promote {
            batch,
            task,
            from: chosen.dir,
            to,
            provenance: Box::new(provenance),
        });
    }

    /// The accepted copy is in the results: the task ends as a landed one
    /// does.
    fn promoted(&mut self, batch: BatchId, task: u32, result: Result<(), String>) {
        let now = self.now.unix_secs;
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
        self.push(Action::Flush);
        if landed {
            self.copy_out(batch, task);
        }
    }
}
