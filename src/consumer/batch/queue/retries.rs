//! An attempt's end in the queue's core: a landed result (the first copy
//! to land wins: its staging directory is moved into the task's results;
//! the others are killed, and one that lands anyway is discarded), a refusal (the task waits for
//! another host; a lasting one skips this host), a failure on the host (the
//! task queued again for another host, up to `max_retries`), the host's
//! owner taking it back (queued again, no retry spent: issue 28), the
//! job's own failure, a cancel; and the end of one of several copies of a task. Pure:
//! no tokio, no files.

use libp2p::PeerId;

use super::state::{Action, Now, QueueCore};
use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::record::{TaskRecord, TaskState};
use crate::consumer::batch::runtime::landed_work;
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;
use crate::model::trust::Outcome;
use crate::net::protocol::GuestUsage;

impl QueueCore {
    /// An attempt ended (the driver has dropped its cancel token).
    #[must_use = "the driver performs every action"]
    pub fn on_ended(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        host: PeerId,
        end: AttemptEnd,
    ) -> Vec<Action> {
        self.at(now);
        self.ended(batch, task, host, end);
        self.note_avoid(batch, task);
        self.actions()
    }

    fn ended(&mut self, batch: BatchId, task: u32, host: PeerId, end: AttemptEnd) {
        self.running.remove(&(batch, task, host));
        self.hosts_in_use.remove(&host);
        let claimed_tr = self.claimed_tr.remove(&(batch, task, host));
        let staged = self.staging.remove(&(batch, task, host));
        self.wanted = true;
        let now = self.now.unix_secs;
        let max_retries = self.settings.max_retries;
        let Some(live) = self.batches.get_mut(&batch) else {
            return;
        };
        live.running = live.running.saturating_sub(1);
        // A copy that lost (another landed first) ends with nothing to say,
        // and what it fetched is thrown away: a landed result is never
        // replaced.
        if live
            .tasks
            .get(task as usize)
            .is_some_and(|t| t.state.is_final())
        {
            if let (AttemptEnd::Landed { .. }, Some(dir)) = (&end, staged) {
                tracing::info!(%batch, task, %host, "a copy landed after the task's result: discarded");
                self.push(Action::Discard { dir });
            }
            return;
        }
        // What the host did counts in its record whatever `--verify` says
        // (a cancelled batch's ends say nothing of the host).
        if let Some(outcome) = (!live.record.cancelled)
            .then(|| conduct(&end, claimed_tr))
            .flatten()
        {
            self.trust.conduct(host, outcome);
            self.push(Action::Conduct {
                peer: host,
                outcome,
            });
        }

        if self.trust.spec(batch).is_some() && self.replica_ended(batch, task, host, &end) {
            let fresh: Vec<SurveyedHost> = self
                .fresh_hosts()
                .iter()
                .filter(|h| h.peer == host)
                .cloned()
                .collect();
            self.place_on(&fresh);
            return;
        }
        if self.end_one_of_several(batch, task, host, &end) {
            return;
        }
        // The first copy to land wins: the others are killed on their hosts.
        if matches!(end, AttemptEnd::Landed { .. }) {
            self.kill_running(batch, Some(task));
        }
        // The host's relative power, to turn the guest's CPU seconds into
        // reference seconds.
        let power = self
            .last_hosts
            .iter()
            .find(|h| h.peer == host)
            .and_then(|h| h.speed);
        let Some(live) = self.batches.get_mut(&batch) else {
            return;
        };
        let cancelled = live.record.cancelled;
        let Some(t) = live.tasks.get_mut(task as usize) else {
            return;
        };
        let host_text = host.to_base58();
        let mut landed = false;
        // The winner's staging, moved into the task's results before its
        // record says it landed.
        let mut promote = None;
        match end {
            AttemptEnd::Landed {
                exit_status,
                wall_secs,
                usage,
                missing,
            } => {
                let end = Landing {
                    exit_status,
                    wall_secs,
                    usage,
                    missing,
                };
                record_landing(t, &host_text, end, power, now);
                landed = true;
                if staged.is_none() {
                    tracing::warn!(%batch, task, host = %host_text, "a landing with no staging directory known");
                }
                promote = staged;
            }
            AttemptEnd::Cancelled if cancelled => {
                t.state = TaskState::Cancelled;
                t.ended_unix = Some(now);
                t.reason = Some("cancelled".into());
            }
            // The node is stopping: the task stays running in the store and
            // is re-attached at the next start.
            AttemptEnd::Cancelled => return,
            _ if cancelled => {
                t.state = TaskState::Cancelled;
                t.ended_unix = Some(now);
                t.reason = Some("cancelled".into());
            }
            AttemptEnd::Refused { reason, lasting } => {
                if lasting {
                    self.refused_by
                        .entry((batch, task))
                        .or_default()
                        .insert(host);
                }
                // Not the task's fault: back in the queue, this host skipped
                // until the next survey says it is free.
                tracing::debug!(%batch, task, host = %host_text, %reason, "host refused a task");
                t.state = TaskState::Queued;
                t.host = None;
                // Shown while the task waits, so `submit` can say why no
                // host took it.
                t.reason = Some(format!("refused by {host_text}: {reason}"));
            }
            AttemptEnd::JobFailed(reason) => {
                t.state = TaskState::Failed;
                t.ended_unix = Some(now);
                t.reason = Some(reason);
            }
            // A misbehaving host is handled as a failed one (its record
            // has counted the offence above).
            AttemptEnd::HostFailed(reason) | AttemptEnd::Misbehaved { reason, .. } => {
                if record_host_failure(t, &host_text, reason, max_retries, now) {
                    let reason = t.reason.as_deref().unwrap_or_default();
                    tracing::info!(%batch, task, host = %host_text, %reason, "task failed on a host; queued again");
                }
            }
            AttemptEnd::OwnerKilled(reason) => {
                tracing::info!(%batch, task, host = %host_text, %reason, "the host's owner took it back (or its node restarted); the task is queued again");
                record_owner_kill(t, &host_text, reason);
            }
        }
        if let Some(from) = promote {
            let to = self.results_dir(batch).join(task.to_string());
            self.push(Action::Land {
                batch,
                task,
                from,
                to,
            });
        }
        self.persist(batch, task);
        if self
            .task(batch, task)
            .is_some_and(|t| !matches!(t.state, TaskState::Queued | TaskState::Running))
        {
            self.refused_by.remove(&(batch, task));
        }
        self.push(Action::Flush);
        // A host that just ended a task well is free now: while the last
        // survey is fresh it takes the next task at once.
        let fresh: Vec<SurveyedHost> = self
            .fresh_hosts()
            .iter()
            .filter(|h| h.peer == host)
            .cloned()
            .collect();
        if landed && !fresh.is_empty() {
            self.place_on(&fresh);
        }
        if landed {
            self.copy_out(batch, task);
        }
    }

    /// The winner's staging directory could not be moved into the task's
    /// results: the task ends failed with why (its record had said it
    /// landed), as a verified task whose accepted copy cannot be kept does.
    #[must_use = "the driver performs every action"]
    pub fn on_land_failed(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        error: String,
    ) -> Vec<Action> {
        self.at(now);
        let Some(t) = self
            .batches
            .get_mut(&batch)
            .and_then(|b| b.tasks.get_mut(task as usize))
        else {
            return self.actions();
        };
        t.state = TaskState::Failed;
        // Its results are not there: nothing may take it as landed (a
        // restart's copies to the output directory, `batch results`), as a
        // verified task whose accepted copy was not kept has no exit status.
        t.exit_status = None;
        t.reason = Some(format!("cannot keep the landed result: {error}"));
        self.persist(batch, task);
        self.push(Action::Flush);
        self.actions()
    }

    /// A landing kept the result already in the task's place (a run of
    /// the node killed between moving it in and its record): the record,
    /// written for the attempt that just landed, is made to name what is
    /// kept, its host and exit status, so that `batch status` and the
    /// result's `provenance.json` name one host. What is not known of the
    /// kept result (its job id, its time) is cleared.
    #[must_use = "the driver performs every action"]
    pub fn on_kept_earlier(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        host: Option<String>,
        exit_status: Option<i32>,
    ) -> Vec<Action> {
        self.at(now);
        let Some(t) = self
            .batches
            .get_mut(&batch)
            .and_then(|b| b.tasks.get_mut(task as usize))
        else {
            return self.actions();
        };
        if let Some(host) = host.filter(|h| t.host.as_deref() != Some(h.as_str())) {
            tracing::warn!(%batch, task, %host, "the kept result is another host's: recorded as its");
            t.host = Some(host);
            t.job_id = None;
            t.wall_secs = None;
            t.host_gamma = None;
        }
        if let Some(code) = exit_status.filter(|c| t.exit_status != Some(*c)) {
            t.exit_status = Some(code);
            (t.state, t.reason) = if code == 0 {
                (TaskState::Done, None)
            } else {
                (TaskState::Failed, Some(format!("exit status {code}")))
            };
        }
        self.persist(batch, task);
        self.push(Action::Flush);
        self.actions()
    }

    /// Takes one ended attempt of a task that has others still running (a
    /// copy): the task goes on with them. A copy that landed wins instead
    /// (`ended` handles that). Returns true when this handled the end.
    fn end_one_of_several(
        &mut self,
        batch: BatchId,
        task: u32,
        host: PeerId,
        end: &AttemptEnd,
    ) -> bool {
        if matches!(end, AttemptEnd::Landed { .. }) {
            return false;
        }
        let batch_cancelled = self.batches.get(&batch).is_some_and(|b| b.record.cancelled);
        let Some(t) = self
            .batches
            .get_mut(&batch)
            .and_then(|b| b.tasks.get_mut(task as usize))
        else {
            return false;
        };
        if t.copies.is_empty() || t.state != TaskState::Running || batch_cancelled {
            return false;
        }
        if matches!(end, AttemptEnd::Cancelled) {
            // The node is stopping: every copy is re-attached at the next start.
            return true;
        }
        let name = host.to_base58();
        if t.host.as_deref() == Some(name.as_str()) {
            // The main attempt ended: the oldest copy takes its place, from
            // when it started (what the tail and deadline rules count the
            // task's time run from).
            let next = t.copies.remove(0);
            t.host = Some(next.host);
            t.job_id = Some(next.job_id);
            t.started_unix = Some(next.started_unix);
        } else {
            t.copies.retain(|c| c.host != name);
        }
        match end {
            AttemptEnd::HostFailed(reason) | AttemptEnd::Misbehaved { reason, .. } => {
                t.avoid.push(name);
                t.reason = Some(reason.clone());
            }
            AttemptEnd::OwnerKilled(reason) => {
                t.avoid.push(name);
                t.owner_kills += 1;
                t.reason = Some(reason.clone());
            }
            _ => {}
        }
        self.persist(batch, task);
        true
    }
}

/// How an attempt's end counts in its host's record: `None` when it says
/// nothing of the host (refused, the job's own fault, cancelled).
fn conduct(end: &AttemptEnd, claimed_tr: Option<f64>) -> Option<Outcome> {
    match end {
        AttemptEnd::Landed { .. } => Some(Outcome::Landed { claimed_tr }),
        // The host's claim of TR did not hold, whoever was at fault.
        AttemptEnd::HostFailed(_) | AttemptEnd::OwnerKilled(_) => {
            Some(Outcome::Failed { claimed_tr })
        }
        AttemptEnd::Misbehaved { offence, .. } => Some(Outcome::Offence(*offence)),
        AttemptEnd::Refused { .. } | AttemptEnd::JobFailed(_) | AttemptEnd::Cancelled => None,
    }
}

/// What a landed attempt brought back.
struct Landing {
    exit_status: i32,
    wall_secs: f64,
    usage: Option<GuestUsage>,
    missing: Vec<String>,
}

/// A task's record once an attempt on `host` landed: that attempt is the
/// one the record shows (a copy may have won), done or failed by its exit
/// status and declared outputs, its reference work noted for the batch's
/// runtime (`power` is the host's relative power, to turn CPU seconds into
/// reference seconds).
fn record_landing(t: &mut TaskRecord, host: &str, end: Landing, power: Option<f64>, now: i64) {
    let Landing {
        exit_status,
        wall_secs,
        usage,
        missing,
    } = end;
    if t.host.as_deref() != Some(host) {
        // A copy won: it is the attempt the task's record shows.
        if let Some(copy) = t.copies.iter().find(|c| c.host == host) {
            t.job_id = Some(copy.job_id.clone());
            t.started_unix = Some(copy.started_unix);
        }
        t.host = Some(host.to_string());
    }
    t.copies.clear();
    t.state = if exit_status == 0 && missing.is_empty() {
        TaskState::Done
    } else {
        TaskState::Failed
    };
    t.exit_status = Some(exit_status);
    let (wall, gamma) = landed_work(wall_secs, usage, power, t.host_gamma);
    t.wall_secs = Some(wall);
    t.host_gamma = gamma;
    t.ended_unix = Some(now);
    t.reason = if exit_status != 0 {
        Some(format!("exit status {exit_status}"))
    } else if !missing.is_empty() {
        Some(format!(
            "declared output(s) not written: {}",
            missing.join(", ")
        ))
    } else {
        None
    };
}

/// A task's record once its host's owner took the machine back: queued
/// again, that host avoided for it, the kill counted apart from the task's
/// own failures (no retry spent).
fn record_owner_kill(t: &mut TaskRecord, host: &str, reason: String) {
    t.avoid.push(host.to_string());
    t.owner_kills += 1;
    t.state = TaskState::Queued;
    t.reason = Some(reason);
}

/// A task's record once its attempt failed on `host`: that host is avoided
/// for it; the task waits for another host, or fails past `max_retries`
/// failed hosts. Returns true when it was queued again.
fn record_host_failure(
    t: &mut TaskRecord,
    host: &str,
    reason: String,
    max_retries: u32,
    now: i64,
) -> bool {
    t.avoid.push(host.to_string());
    let failures = t.host_failures();
    if failures > max_retries {
        t.state = TaskState::Failed;
        t.ended_unix = Some(now);
        t.reason = Some(format!(
            "failed on {failures} host(s); no retries left (max_retries = {max_retries}); last: {reason}"
        ));
        false
    } else {
        t.state = TaskState::Queued;
        t.reason = Some(reason);
        true
    }
}
