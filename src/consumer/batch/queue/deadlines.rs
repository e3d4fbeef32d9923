//! Deadlines in the queue's core: a running task of a batch with
//! `--deadline` whose chance of ending in time has fallen gets a second copy
//! on a better free host; the first copy to land wins (`retries`). The host
//! is chosen from a fresh round's answers; without one, the members'
//! summaries say whether a copy would help and a round asks to confirm it
//! (a bounded number of times per task, `rounds`). Pure: the time comes
//! with each tick.

use std::collections::HashSet;
use std::time::Duration;

use libp2p::PeerId;

use super::rounds::free_now;
use super::state::{Action, Now, QueueCore};
use crate::consumer::batch::estimate::{running_view, view_or_guess};
use crate::consumer::batch::record::TaskState;
use crate::consumer::batch::runtime::{planned_runtime, PlannedRuntime};
use crate::consumer::rank;
use crate::model::ids::BatchId;
use crate::model::sched::deadline::{p_fresh_copy_in_time, p_running_copy_in_time};

/// How often running tasks of batches with a deadline are looked at.
const DEADLINE_CHECK_EVERY: Duration = Duration::from_secs(1);
/// A running task whose chance of meeting its batch's deadline is below
/// this gets a second copy on another free host...
const COPY_BELOW: f64 = 0.5;
/// ...when a fresh copy there has at least this much more chance.
const COPY_GAIN: f64 = 0.1;

impl QueueCore {
    /// A timer tick: asks for a round when a waiting task's avoid list has
    /// lapsed (`avoid`), and looks at the running tasks of batches with a deadline: a task whose
    /// chance of ending in time has fallen below [`COPY_BELOW`] gets a second
    /// copy on the free host where a fresh copy's chance is best, when that
    /// is at least [`COPY_GAIN`] higher. Called on every tick; works at
    /// most once per [`DEADLINE_CHECK_EVERY`].
    #[must_use = "the driver performs every action"]
    pub fn tick(&mut self, now: Now) -> Vec<Action> {
        self.at(now);
        self.watch_avoid();
        self.watch_holds();
        self.watch_deadlines();
        self.actions()
    }

    /// Whether the timer has anything to watch: an attempt in flight, a
    /// verified task being judged, or a task not ended in a batch not
    /// cancelled. Everything
    /// [`QueueCore::tick`] and the rounds look at (avoid lists, holds,
    /// deadlines, rounds wanted) serves one of those (a round's answers
    /// come as messages, not on the timer), so without them the driver
    /// stops its timer: an idle node (every host is one) woke ten times a
    /// second for nothing.
    pub fn wants_ticks(&self) -> bool {
        !self.running.is_empty()
            || !self.trust.judging.is_empty()
            || self
                .batches
                .values()
                .any(|b| !b.record.cancelled && b.tasks.iter().any(|t| !t.state.is_final()))
    }

    fn watch_deadlines(&mut self) {
        if self
            .last_deadline_check
            .is_some_and(|t| self.now.mono.saturating_duration_since(t) < DEADLINE_CHECK_EVERY)
        {
            return;
        }
        self.last_deadline_check = Some(self.now.mono);
        if !self
            .batches
            .values()
            .any(|b| b.record.deadline_unix.is_some() && !b.record.cancelled)
        {
            return;
        }
        // A fresh round's answers place a copy; without them the members'
        // summaries say whether one would help, and a round asks to confirm.
        let confirmed = !self.fresh_hosts().is_empty();
        let hosts: &[crate::consumer::survey::SurveyedHost] = if confirmed {
            self.fresh_hosts()
        } else {
            &self.last_hosts
        };
        if hosts.is_empty() {
            return;
        }
        let usable = |h: &crate::consumer::survey::SurveyedHost| {
            if confirmed {
                rank::eligible(h)
            } else {
                (h.answered || h.summarised) && free_now(h)
            }
        };
        let now = self.now.unix_secs;
        let mut taken: HashSet<PeerId> = self.hosts_in_use.clone();
        let mut copies = Vec::new();
        let mut to_ask = Vec::new();
        for (id, live) in &self.batches {
            let Some(deadline) = live.record.deadline_unix else {
                continue;
            };
            if self.trust.spec(*id).is_some() {
                // Its copies are for checking, not for racing.
                continue;
            }
            let time_left = (deadline - now) as f64;
            if live.record.cancelled || time_left <= 0.0 {
                continue;
            }
            let PlannedRuntime {
                median: runtime,
                spread,
                ..
            } = planned_runtime(live.record.runtime_secs, &live.tasks);
            let window = live.record.runtime_secs;
            for (i, t) in live.tasks.iter().enumerate() {
                if t.state != TaskState::Running || !t.copies.is_empty() {
                    continue;
                }
                let Some((started, view)) = running_view(t, hosts, window) else {
                    continue;
                };
                let p_main = p_running_copy_in_time(
                    view.expected_run_secs(runtime),
                    spread,
                    (now - started).max(0) as f64,
                    time_left,
                    |s| view.curve.tr_at(s),
                );
                if p_main >= COPY_BELOW {
                    continue;
                }
                let refused = self.refused_by.get(&(*id, i as u32));
                let best = hosts
                    .iter()
                    .filter(|h| {
                        usable(h)
                            && !taken.contains(&h.peer)
                            && !t.avoid.contains(&h.peer.to_base58())
                            && !refused.is_some_and(|r| r.contains(&h.peer))
                            && !self.trust.is_excluded(&h.peer)
                    })
                    .map(|h| {
                        let v = view_or_guess(h, window);
                        let p = p_fresh_copy_in_time(
                            v.expected_run_secs(runtime),
                            spread,
                            time_left,
                            |s| v.curve.tr_at(s),
                        );
                        (h.peer, p)
                    })
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                if let Some((peer, p_copy)) = best {
                    if p_copy >= p_main + COPY_GAIN {
                        tracing::debug!(batch = %id, task = i, p_main, p_copy, confirmed, "deadline at risk");
                        taken.insert(peer);
                        if confirmed {
                            copies.push((*id, i as u32, peer));
                        } else {
                            to_ask.push((*id, i as u32));
                        }
                    }
                }
            }
        }
        for (batch, task, host) in copies {
            self.start_copy(batch, task, host, "deadline at risk");
        }
        for (batch, task) in to_ask {
            self.ask_for_deadline(batch, task);
        }
    }

    /// Starts a further copy of a running task on `host` (a deadline at
    /// risk, a tail copy: `why`): the first copy to land wins, the others
    /// are killed.
    pub(super) fn start_copy(&mut self, batch: BatchId, task: u32, host: PeerId, why: &str) {
        if self.task(batch, task).map(|t| t.state) != Some(TaskState::Running) {
            return;
        }
        let Some(job_id) = self.add_attempt(batch, task, host) else {
            return;
        };
        tracing::info!(%batch, task, %host, why, "a second copy of the task starts");
        self.persist(batch, task);
        self.launch(batch, task, host, job_id);
    }
}
