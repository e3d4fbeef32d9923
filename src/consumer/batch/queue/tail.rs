//! Tail copies in the queue's core (issue 28, scope 3): once a survey's
//! free hosts outnumber the waiting tasks, the running tasks most at risk
//! get one extra copy each (a task its hosts' owners killed again and
//! again, up to three: `TailRule::copies_allowed`), as
//! [`crate::model::sched::tail::tail_copies`] picks them (the simulator's
//! rule, `gleaner simulate --tail-copies`).
//! A copy is started with the machinery of the other copies: for a batch
//! without verification, a further attempt whose first landing wins while
//! the other is killed (`retries`); for a verifying batch, one more replica
//! judged with the others, a quorum deciding and the copies left killed
//! (`quorum`). Pure: no tokio, no files, no clock.

use std::collections::HashSet;

use libp2p::PeerId;

use super::state::QueueCore;
use crate::consumer::batch::estimate::{running_view, view_or_guess};
use crate::consumer::batch::record::TaskState;
use crate::consumer::batch::runtime::planned_runtime;
use crate::consumer::rank;
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;
use crate::model::sched::tail::{
    critical_copies, drain_secs, expected_left_secs, tail_copies, TailCandidate, TailRule,
};

/// The queue's tail rule: the simulator's default.
const TAIL_RULE: TailRule = TailRule::DEFAULT;

impl QueueCore {
    /// Turns tail copies on or off (for every batch).
    pub fn set_tail_copies(&mut self, on: bool) {
        self.tail_copies = on;
    }

    /// True when a batch has a running task that could get a tail copy
    /// (the queue then keeps looking at the pool, and a host newly free is
    /// asked: `rounds`).
    pub(super) fn watching_tail(&self) -> bool {
        self.tail_copies
            && self.batches.iter().any(|(id, b)| {
                !b.record.cancelled
                    && b.tasks
                        .iter()
                        .enumerate()
                        .any(|(i, t)| self.may_get_tail_copy(*id, i as u32, t.state))
            })
    }

    /// A running task that runs fewer copies beside its own attempt than
    /// the tail rule allows it (one; more once its owners killed it often),
    /// or for a verified task every replica it wants and no more (one tail
    /// copy at a time). When an attempt is lost, the others may be copied
    /// again.
    pub(super) fn may_get_tail_copy(&self, batch: BatchId, task: u32, state: TaskState) -> bool {
        if state != TaskState::Running {
            return false;
        }
        let Some(t) = self.task(batch, task) else {
            return false;
        };
        if t.host.is_none() {
            return false;
        }
        match self.trust.judging.get(&(batch, task)) {
            Some(j) if self.trust.spec(batch).is_some() => {
                !j.decided && self.copies_in_play(batch, task) == j.wanted
            }
            _ => (t.copies.len() as u64) < u64::from(TAIL_RULE.copies_allowed(t.owner_kills)),
        }
    }

    /// After placement: the hosts of `hosts` still free run tail copies,
    /// batches in order of age, while they outnumber the waiting tasks.
    pub(super) fn start_tail_copies(&mut self, hosts: &[SurveyedHost]) {
        if !self.tail_copies {
            return;
        }
        let free: Vec<SurveyedHost> = hosts
            .iter()
            .filter(|h| rank::eligible(h) && !self.hosts_in_use.contains(&h.peer))
            .cloned()
            .collect();
        let waiting = self.waiting_tasks();
        if free.len() > waiting {
            self.start_copies(hosts, free, Some(waiting));
        }
    }

    /// Before placement: a running task expected to end after the rest of
    /// its batch (`TailRule::critical_share`) gets a copy on one of `free`
    /// even while tasks wait; the hosts it takes leave `free`.
    pub(super) fn start_critical_copies(
        &mut self,
        hosts: &[SurveyedHost],
        free: &mut Vec<SurveyedHost>,
    ) {
        if !self.tail_copies || free.is_empty() || self.waiting_tasks() == 0 {
            return;
        }
        // Hosts a record excludes take no copy and count as no power.
        let eligible: Vec<SurveyedHost> = free
            .iter()
            .filter(|h| rank::eligible(h) && !self.trust.is_excluded(&h.peer))
            .cloned()
            .collect();
        let used = self.start_copies(hosts, eligible, None);
        free.retain(|h| !used.contains(&h.peer));
    }

    /// Queued tasks of the batches not cancelled.
    fn waiting_tasks(&self) -> usize {
        self.batches
            .values()
            .filter(|b| !b.record.cancelled)
            .map(|b| b.count_in(TaskState::Queued))
            .sum()
    }

    /// Copies on `free`, batches in order of age: in the tail (`waiting`
    /// tasks wait in all, fewer than the free hosts), or (`None`) for the
    /// tasks on each batch's critical path (its work left, queued tasks at
    /// the planned mean and each running task's time left, over the power
    /// of its running hosts and of `free`). Returns the hosts the copies
    /// took.
    fn start_copies(
        &mut self,
        hosts: &[SurveyedHost],
        mut free: Vec<SurveyedHost>,
        waiting: Option<usize>,
    ) -> HashSet<PeerId> {
        let mut used = HashSet::new();
        let now = self.now.unix_secs;
        let ids: Vec<BatchId> = self.batches.keys().copied().collect();
        for batch in ids {
            if free.is_empty() || waiting.is_some_and(|w| free.len() <= w) {
                break;
            }
            let Some(live) = self.batches.get(&batch) else {
                continue;
            };
            // Copies count against the batch's `max_running`.
            let room = live.room();
            if live.record.cancelled || room == 0 {
                continue;
            }
            let window = live.record.runtime_secs;
            let planned = planned_runtime(window, &live.tasks);
            let runtime = planned.median;
            let verified = self.trust.spec(batch).is_some();
            let mut tasks = Vec::new();
            let mut candidates = Vec::new();
            // The batch's reference work left and the power at hand for it
            // (its running hosts and the free ones), for its critical path.
            let queued = live.count_in(TaskState::Queued);
            let views: Vec<_> = free.iter().map(|h| view_or_guess(h, window)).collect();
            let mut work = queued as f64 * planned.mean;
            let mut capacity: f64 = views.iter().map(|v| v.gamma()).sum();
            for (i, t) in live.tasks.iter().enumerate() {
                let Some((started, view)) = running_view(t, hosts, window) else {
                    continue;
                };
                let left_secs = expected_left_secs(
                    view.expected_run_secs(runtime),
                    (now - started).max(0) as f64,
                );
                // A term that is not finite (a host of no power) is left
                // out rather than make the batch's drain infinite.
                if (left_secs * view.gamma()).is_finite() {
                    work += left_secs * view.gamma();
                    capacity += view.gamma();
                }
                if !self.may_get_tail_copy(batch, i as u32, t.state) {
                    continue;
                }
                tasks.push(i as u32);
                candidates.push(TailCandidate {
                    left_secs,
                    p_finish: view.curve.tr_at(left_secs),
                    work_secs: runtime,
                    kills: t.owner_kills,
                    // A verified task's replicas are its own attempts, not
                    // copies beside it (it gets one tail copy at a time).
                    copies: if verified {
                        0
                    } else {
                        t.copies.len().try_into().unwrap_or(u32::MAX)
                    },
                });
            }
            if candidates.is_empty() {
                continue;
            }
            let allowed = |c: usize, h: usize| self.may_copy_on(batch, tasks[c], free[h].peer);
            let picked = match waiting {
                Some(waiting) => tail_copies(&TAIL_RULE, waiting, &views, &candidates, allowed),
                None if queued == 0 => Vec::new(),
                None => {
                    let drain = drain_secs(work, capacity);
                    critical_copies(&TAIL_RULE, drain, &views, &candidates, allowed)
                }
            };
            for (c, h) in picked.into_iter().take(room) {
                let (task, peer) = (tasks[c], free[h].peer);
                used.insert(peer);
                tracing::debug!(%batch, task, host = %peer, "a tail copy of a task at risk");
                if self.trust.spec(batch).is_some() {
                    self.start_replica(batch, task, peer);
                } else {
                    self.start_copy(batch, task, peer, "tail copy");
                }
            }
            free.retain(|h| !used.contains(&h.peer));
        }
        used
    }
}
