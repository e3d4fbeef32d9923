//! Tail copies in the simulator (issue 28, scope 3): once the free hosts
//! outnumber the waiting tasks, the running tasks and the free hosts as the
//! consumer sees them (each attempt's expected end, each host's view from
//! its past) are handed to [`crate::sched::tail::tail_copies`], and the
//! copies it picks start (a task killed again and again may run several
//! at once: `TailRule::copies_allowed`). A running task expected to end
//! after the rest of the batch gets its copy even while tasks wait, before
//! they take the free hosts (`TailRule::critical_share`). What happens when a copy ends
//! (the first to finish wins, the others are cancelled) is `events.rs`'s.

use super::{Forecaster, Sim, Slot};
use crate::sched::place::HostView;
use crate::sched::tail::{
    critical_copies, drain_secs, expected_left_secs, tail_copies, TailCandidate,
};

impl Sim<'_> {
    /// Starts the tail copies the rule picks, if tail copies are on and
    /// free hosts are left over after every waiting task.
    pub(super) fn start_tail_copies(&mut self, forecaster: &mut dyn Forecaster) {
        if self.free.len() > self.queue.len() {
            self.start_copies(forecaster, false);
        }
    }

    /// Starts copies of the running tasks on the batch's critical path
    /// (`TailRule::critical_share`), on free hosts, before the waiting
    /// tasks take them.
    pub(super) fn start_critical_copies(&mut self, forecaster: &mut dyn Forecaster) {
        if self.config.tail.critical_share.is_some()
            && !self.free.is_empty()
            && !self.queue.is_empty()
        {
            self.start_copies(forecaster, true);
        }
    }

    /// Seconds the batch's work left takes the pool ([`drain_secs`]): the
    /// reference work and the power to do it, as the consumer sees them:
    /// each running task once, by its `oldest` attempt (its copies do the
    /// same work), its time left as the rule counts it. A term that is not
    /// finite (a host of no power) is left out rather than make the whole
    /// pool's drain infinite.
    fn drain(&self, oldest: &[Option<(f64, f64, usize)>]) -> f64 {
        let mut work: f64 = self.queue.iter().map(|&t| self.left[t]).sum();
        let mut capacity = 0.0;
        for g in 0..self.slots.len() {
            let gamma = self.views[g].gamma();
            match &self.slots[g] {
                Slot::Busy(a) if oldest[a.task].is_some_and(|(_, _, host)| host == g) => {
                    let left = expected_left_secs(a.expected_end - a.start, self.now - a.start);
                    if (left * gamma).is_finite() {
                        work += left * gamma;
                        capacity += gamma;
                    }
                }
                // A free host its record passes over does no work.
                Slot::Free if !self.passed_over(g) => capacity += gamma,
                Slot::Free | Slot::Busy(_) | Slot::Down { .. } => {}
            }
        }
        drain_secs(work, capacity)
    }

    /// Each running task's oldest attempt, which stands for it (its
    /// copies counted beside it; a copy whose first attempt was killed
    /// becomes it): (start, expected end, host), by task.
    fn oldest_attempts(&self) -> Vec<Option<(f64, f64, usize)>> {
        let mut oldest: Vec<Option<(f64, f64, usize)>> = vec![None; self.running.len()];
        for host in 0..self.slots.len() {
            let Slot::Busy(a) = &self.slots[host] else {
                continue;
            };
            if let Some(o) = oldest.get_mut(a.task) {
                if o.is_none_or(|(start, _, _)| a.start < start) {
                    *o = Some((a.start, a.expected_end, host));
                }
            }
        }
        oldest
    }

    /// `host` as a copy is weighed on it: outside the tail (`critical`)
    /// asked without keeping the view, so that a look that starts no copy
    /// changes nothing else.
    fn copy_view(
        &mut self,
        host: usize,
        critical: bool,
        forecaster: &mut dyn Forecaster,
    ) -> HostView {
        if critical {
            self.view_at(host, self.now, forecaster)
        } else {
            self.view(host, forecaster).clone()
        }
    }

    /// The copies [`crate::sched::tail`] picks: in the tail, or
    /// (`critical`) for the tasks on the batch's critical path.
    fn start_copies(&mut self, forecaster: &mut dyn Forecaster, critical: bool) {
        if !self.config.tail_copies || !self.config.policy.proactive_rule() {
            return;
        }
        let oldest = self.oldest_attempts();
        let drain = critical.then(|| self.drain(&oldest));
        let mut tasks = Vec::new();
        let mut candidates = Vec::new();
        // In the hosts' order (the rule breaks ties by it).
        for host in 0..self.slots.len() {
            let Slot::Busy(a) = &self.slots[host] else {
                continue;
            };
            let task = a.task;
            let Some((start, expected_end, oldest_host)) = oldest[task] else {
                continue;
            };
            let copies = u32::from(self.running[task].saturating_sub(1));
            if oldest_host != host
                || copies >= self.config.tail.copies_allowed(self.task_kills[task])
            {
                continue;
            }
            let left_secs = expected_left_secs(expected_end - start, self.now - start);
            // Only a task on the critical path is looked at (and its host
            // asked for its view) outside the tail.
            if drain.is_some_and(|drain| !self.config.tail.on_critical_path(left_secs, drain)) {
                continue;
            }
            let p_finish = self
                .copy_view(host, critical, forecaster)
                .curve
                .tr_at(left_secs);
            tasks.push(task);
            candidates.push(TailCandidate {
                left_secs,
                p_finish,
                work_secs: self.left[task],
                kills: self.task_kills[task],
                copies,
            });
        }
        if candidates.is_empty() {
            return;
        }
        let mut free = self.placeable();
        // A stable order, whatever order hosts were freed in.
        free.sort_unstable();
        let views: Vec<_> = free
            .iter()
            .map(|&h| self.copy_view(h, critical, forecaster))
            .collect();
        let allowed = |c: usize, h: usize| !self.avoids(tasks[c], free[h], self.now);
        let picked = match drain {
            Some(drain) => critical_copies(&self.config.tail, drain, &views, &candidates, allowed),
            None => tail_copies(
                &self.config.tail,
                self.queue.len(),
                &views,
                &candidates,
                allowed,
            ),
        };
        for (c, h) in picked {
            let (task, host) = (tasks[c], free[h]);
            self.take(host);
            self.start(task, host, forecaster);
            if let Slot::Busy(a) = &mut self.slots[host] {
                a.copy = true;
            }
            self.tail_copies += 1;
        }
    }
}
