//! Which waiting task goes to which free host, per policy: the FIFO
//! policies (`random`, `power`, `tr-freq`, `tr`), the proactive rule (and
//! `windows`' holds on top of it) and the oracle. Starting the attempt and
//! what follows is `events.rs`'s.

use super::avoid::keeps_off;
use super::{Ev, Forecaster, Policy, Sim, Slot};
use crate::sched::place::{by_slowdown, Rule, Scan, LOOKAHEAD};
use crate::sched::window::Choice;
use rand::Rng;

impl Sim<'_> {
    pub(super) fn dispatch<R: Rng + ?Sized>(
        &mut self,
        forecaster: &mut dyn Forecaster,
        rng: &mut R,
    ) {
        self.start_critical_copies(forecaster);
        if self.summaries.is_some() {
            self.dispatch_summaries(forecaster);
        } else if !self.queue.is_empty() && !self.free.is_empty() {
            match self.config.policy {
                Policy::Random | Policy::Power | Policy::TrFreq | Policy::Tr => {
                    while !self.free.is_empty() {
                        // Every free host, but those a record passes over
                        // and those the task keeps off.
                        let Some((pos, free)) = self.fifo_head(&self.placeable()) else {
                            break;
                        };
                        let task = self.queue[pos];
                        let i = self.choose_fifo(task, &free, forecaster, rng);
                        let host = free[i];
                        self.take(host);
                        self.queue.remove(pos);
                        self.start(task, host, forecaster);
                    }
                }
                Policy::Proactive
                | Policy::ProactiveCheckpoint
                | Policy::Windows
                | Policy::ProactiveAuto => self.dispatch_proactive(forecaster),
                Policy::Oracle => self.dispatch_oracle(forecaster),
            }
            if !self.queue.is_empty() && !self.free.is_empty() && !self.recheck_pending {
                self.recheck_pending = true;
                self.push(self.now + self.config.recheck_secs.max(1.0), Ev::Recheck);
            }
        }
        self.start_tail_copies(forecaster);
        self.fresh.clear();
        self.recheck_all = false;
        // Hosts still idle go down when their trace next fails.
        while let Some(host) = self.armed.pop() {
            if !matches!(self.slots[host], Slot::Free) {
                continue;
            }
            let h = self.hosts[host];
            let tt = self.trace_time(host, self.now);
            if let Some((f, _)) = self.timelines[h.timeline].next_failure(tt) {
                let epoch = self.epoch[host];
                self.push(
                    (f - h.offset as f64).max(self.now),
                    Ev::IdleDown { host, epoch },
                );
            }
        }
    }

    /// The proactive rule over the free hosts: everyone on a full recheck,
    /// else only the hosts freed since the last look (see `Rule::pick_pair`
    /// for why the others' answers cannot have improved while busy hosts'
    /// waits shrink; a down host's wait grows once it is overdue,
    /// `back_in`, and the free hosts it held back are asked again at the
    /// next recheck, `SimConfig::recheck_secs` on; a task's avoidance of a
    /// host lapses with a recheck of its own, `avoid.rs`).
    pub(super) fn dispatch_proactive(&mut self, forecaster: &mut dyn Forecaster) {
        let asked: Vec<usize> = if self.recheck_all {
            self.free.clone()
        } else {
            self.fresh.clone()
        };
        for &host in &asked {
            self.view(host, forecaster);
        }
        if self.order_stale {
            let slowdowns: Vec<f64> = self
                .views
                .iter()
                .map(|v| v.expected_run_secs(1.0))
                .collect();
            self.order = by_slowdown(&slowdowns);
            self.order_stale = false;
        }
        // A host freed: held tasks may be weighed again (each once here).
        let give_way = self.config.hold_gives_way && !self.fresh.is_empty();
        let mut weighed: Vec<usize> = Vec::new();
        let mut fresh = asked;
        let windows = self.config.policy == Policy::Windows;
        loop {
            if self.queue.is_empty() || self.free.is_empty() {
                return;
            }
            let now = self.now;
            // The queue as the rule sees it: without the tasks held for a
            // later window (all of it under the other policies).
            let eligible: Vec<usize> = (0..self.queue.len())
                .filter(|&i| {
                    let task = self.queue[i];
                    !windows
                        || self.held_until[task] <= now
                        || (give_way && self.plans[task].is_some() && !weighed.contains(&task))
                })
                .collect();
            if eligible.is_empty() {
                return;
            }
            // Free hosts a record passes over are, to the rule, unusable
            // (empty outside `--claim-scoring record`).
            let passed = self.passed_over_all();
            let passed_over = |g: usize| passed.get(g).copied().unwrap_or(false);
            let (slots, views, left) = (&self.slots, &self.views, &self.left);
            let queue: Vec<usize> = eligible.iter().map(|&i| self.queue[i]).collect();
            let queue = &queue;
            let rule = Rule {
                order: &self.order,
                free_sorted: None,
                lower: |j: usize, g: usize| match queue.get(j) {
                    Some(&task) => views[g].expected_run_secs(left[task]),
                    None => f64::INFINITY,
                },
                free_in: |g: usize| match &slots[g] {
                    Slot::Free if passed_over(g) => f64::INFINITY,
                    Slot::Free => 0.0,
                    slot => slot.free_in(now).max(f64::MIN_POSITIVE),
                },
                queue_len: queue.len(),
            };
            // A host the task keeps off at its start is no place for it.
            let avoid = &self.avoid;
            let turnaround = |j: usize, g: usize| match queue.get(j) {
                Some(&task) if keeps_off(avoid, task, g, now + slots[g].free_in(now)) => {
                    f64::INFINITY
                }
                Some(&task) => views[g].expected_turnaround(left[task]),
                None => f64::INFINITY,
            };
            let placed = if self.recheck_all {
                rule.pick_pair(&mut Scan(turnaround))
            } else {
                let mut placed = None;
                while let Some(host) = fresh.pop() {
                    if !matches!(slots[host], Slot::Free) || passed_over(host) {
                        continue;
                    }
                    if let Some(j) = rule.pick_for_host(host, &mut Scan(turnaround)) {
                        placed = Some((j, host));
                        break;
                    }
                }
                placed
            };
            let Some((j, host)) = placed else {
                return;
            };
            let Some(&at) = eligible.get(j) else {
                return;
            };
            let bulk = windows
                && !self
                    .config
                    .windows
                    .weighs(self.queue.len(), self.hosts_soon());
            let host = if bulk {
                // The bulk: a free host takes the placement rule's pick.
                host
            } else if windows {
                weighed.push(self.queue[at]);
                match self.window_choice(self.queue[at], host, forecaster) {
                    Some(Choice::Hold(w)) => {
                        self.hold(self.queue[at], w);
                        // The host that picked it may take another task.
                        fresh.push(host);
                        continue;
                    }
                    Some(Choice::Start { host: best, .. }) => {
                        if best != host {
                            fresh.push(host);
                        }
                        best
                    }
                    None => host,
                }
            } else {
                host
            };
            let Some(task) = self.queue.remove(at) else {
                return;
            };
            if windows {
                self.release(task, host);
            }
            self.take(host);
            self.start(task, host, forecaster);
        }
    }

    /// Hosts free now (but those a record passes over) or expected free
    /// within the window rule's `tail_within_secs`: how many tasks the
    /// pool could start about now ([`crate::sched::window::WindowRule::weighs`]).
    pub(super) fn hosts_soon(&self) -> usize {
        let within = self.config.windows.tail_within_secs;
        (0..self.slots.len())
            .filter(|&g| match &self.slots[g] {
                Slot::Free => !self.passed_over(g),
                slot @ Slot::Down { .. } => slot.free_in(self.now) <= within,
                Slot::Busy(a) => a.expected_end - self.now <= within,
            })
            .count()
    }

    /// The oracle: each of the first [`LOOKAHEAD`] tasks goes to the free
    /// host where it ends soonest without being hit, if there is one. An
    /// idle host that fits none of them cannot come to fit one while it
    /// stays up (its next failure stays where it is, the finish only moves
    /// later), so a task already offered to every idle host is offered only
    /// to the fresh ones. Nothing else the rule weighs changes: a task's
    /// work changes only when it is killed and requeued, and only a requeue
    /// can push an offered task out of the window while hosts are freed, so
    /// only a requeue makes every task new again (not every full recheck:
    /// hosts going down, which is most events, change no idle host's answer).
    pub(super) fn dispatch_oracle(&mut self, forecaster: &mut dyn Forecaster) {
        let fresh = if self.oracle_requeued {
            self.oracle_requeued = false;
            self.offered.iter_mut().for_each(|o| *o = false);
            self.free.clone()
        } else {
            self.fresh.clone()
        };
        'place: while !self.free.is_empty() && !self.queue.is_empty() {
            for j in 0..self.queue.len().min(LOOKAHEAD) {
                let task = self.queue[j];
                let candidates = if self.offered[task] {
                    &fresh
                } else {
                    &self.free
                };
                let best = candidates
                    .iter()
                    .filter(|&&h| matches!(self.slots[h], Slot::Free))
                    .filter_map(|&h| self.unhit_finish(task, h).map(|t| (h, t)))
                    .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                self.offered[task] = true;
                if let Some((host, _)) = best {
                    self.queue.remove(j);
                    self.take(host);
                    self.start(task, host, forecaster);
                    continue 'place;
                }
            }
            break;
        }
    }

    /// When `task` would end on `host` started now, if nothing hits it (the oracle's look).
    pub(super) fn unhit_finish(&self, task: usize, host: usize) -> Option<f64> {
        let h = self.hosts[host];
        let tl = &self.timelines[h.timeline];
        let tt = self.trace_time(host, self.now);
        let end = tl.finish_time(tt, self.left[task] / h.power)?;
        match tl.next_failure(tt) {
            Some((f, _)) if f < end => None,
            _ => Some(end),
        }
    }

    /// Index into `free` of the host a FIFO policy gives `task`.
    pub(super) fn choose_fifo<R: Rng + ?Sized>(
        &mut self,
        task: usize,
        free: &[usize],
        forecaster: &mut dyn Forecaster,
        rng: &mut R,
    ) -> usize {
        match self.config.policy {
            Policy::Random => rng.random_range(0..free.len()),
            Policy::Power => {
                let mut best = (0, f64::NEG_INFINITY);
                for (i, &h) in free.iter().enumerate() {
                    let tl = &self.timelines[self.hosts[h].timeline];
                    let g = self.hosts[h].power * tl.rate_at(self.trace_time(h, self.now));
                    if g > best.1 {
                        best = (i, g);
                    }
                }
                best.0
            }
            _ => {
                let runtime = self.left[task];
                let mut best = (0, f64::NEG_INFINITY, f64::NEG_INFINITY);
                for (i, &h) in free.iter().enumerate() {
                    let v = self.view(h, forecaster);
                    let (tr, g) = (v.p_success(runtime), v.gamma());
                    if tr > best.1 || (tr == best.1 && g > best.2) {
                        best = (i, tr, g);
                    }
                }
                best.0
            }
        }
    }
}
