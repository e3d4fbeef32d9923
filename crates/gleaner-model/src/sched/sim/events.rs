//! The simulation's event loop and what each event does: an attempt starts
//! (its finish or kill scheduled from the host's trace), finishes, or is
//! killed (work since its last checkpoint lost, the task requeued); a host
//! goes down and comes back. Which task goes where is `dispatch.rs`'s.

use super::claims::AttemptEnd;
use super::{checkpoints_in, Attempt, Ev, Forecaster, Policy, Sim, Slot};
use crate::sched::curve::young_daly_interval;
use crate::sched::estimate::checkpoint_mttf;
use crate::state::State;
use rand::Rng;

impl Sim<'_> {
    pub(super) fn run<R: Rng + ?Sized>(
        &mut self,
        forecaster: &mut dyn Forecaster,
        rng: &mut R,
        progress: &mut dyn FnMut(f64),
    ) {
        let total = self.config.runtimes.len().max(1);
        let mut last_report = 0usize;
        for host in 0..self.hosts.len() {
            self.host_up(host);
        }
        if self.config.policy.proactive_rule() {
            // The rule weighs busy and down hosts too (what they would do
            // once back): each needs its view from the start, or a host
            // down at submission would look like the ideal host (full
            // speed, never failing) until it first came back.
            for host in 0..self.hosts.len() {
                self.view(host, forecaster);
            }
        }
        loop {
            self.dispatch(forecaster, rng);
            if self.done >= self.config.runtimes.len() {
                break;
            }
            let Some(event) = self.heap.pop() else {
                break;
            };
            if event.time > self.config.horizon_secs {
                break;
            }
            self.now = event.time;
            match event.ev {
                Ev::Round => self.round_tick(),
                Ev::Recheck => {
                    self.recheck_pending = false;
                    self.recheck_all = true;
                }
                Ev::Look => self.recheck_all = true,
                Ev::HostUp { host } => {
                    if matches!(self.slots[host], Slot::Down { .. }) {
                        self.host_up(host);
                    }
                }
                Ev::IdleDown { host, epoch } => {
                    if matches!(self.slots[host], Slot::Free) && self.epoch[host] == epoch {
                        self.go_down(host);
                    }
                }
                Ev::Finish { host, attempt } => self.finish(host, attempt),
                Ev::Fail {
                    host,
                    attempt,
                    cause,
                } => self.fail(host, attempt, cause),
            }
            if self.done * 100 / total != last_report {
                last_report = self.done * 100 / total;
                progress(self.done as f64 / total as f64);
            }
        }
        progress(self.done as f64 / total as f64);
    }

    pub(super) fn finish(&mut self, host: usize, attempt: u64) {
        let Slot::Busy(a) = &self.slots[host] else {
            return;
        };
        if a.id != attempt {
            return;
        }
        let a = a.clone();
        self.slot_changed(host, true);
        self.host_up(host);
        let overhead = a.cost * checkpoints_in(a.work, a.interval) as f64;
        self.attempt_ended(host, a.work + overhead, AttemptEnd::Landed, a.claimed_tr);
        self.wasted += overhead;
        self.checkpoints += checkpoints_in(a.work, a.interval);
        self.left[a.task] = 0.0;
        self.completions[a.task] += 1;
        self.running[a.task] = self.running[a.task].saturating_sub(1);
        if a.copy {
            self.tail_wins += 1;
        }
        if self.end[a.task].is_none() {
            self.end[a.task] = Some(self.now);
            self.end_host[a.task] = Some(host);
            self.done += 1;
        }
        // The first copy to finish wins: the other is cancelled on its host.
        if self.running[a.task] > 0 {
            self.cancel_copies_of(a.task);
        }
    }

    /// Cancels the attempts of `task` still running (another copy
    /// finished): their work is spent for nothing, and their hosts are free.
    fn cancel_copies_of(&mut self, task: usize) {
        for host in 0..self.slots.len() {
            let Slot::Busy(a) = &self.slots[host] else {
                continue;
            };
            if a.task != task {
                continue;
            }
            let (start, claimed_tr) = (a.start, a.claimed_tr);
            let h = self.hosts[host];
            let done_units = self.timelines[h.timeline].work_between(
                self.trace_time(host, start),
                self.trace_time(host, self.now),
            ) * h.power;
            self.attempt_ended(host, done_units, AttemptEnd::Cancelled, claimed_tr);
            self.wasted += done_units;
            self.tail_cpu += done_units;
            self.running[task] = self.running[task].saturating_sub(1);
            self.slot_changed(host, true);
            self.host_up(host);
        }
    }

    pub(super) fn fail(&mut self, host: usize, attempt: u64, cause: State) {
        let Slot::Busy(a) = &self.slots[host] else {
            return;
        };
        if a.id != attempt {
            return;
        }
        let a = a.clone();
        let h = self.hosts[host];
        let tl = &self.timelines[h.timeline];
        let done_units = tl.work_between(
            self.trace_time(host, a.start),
            self.trace_time(host, self.now),
        ) * h.power;
        let saved = if a.interval > 0.0 {
            let blocks = ((done_units / (a.interval + a.cost)).floor() as u64)
                .min(checkpoints_in(a.work, a.interval));
            self.checkpoints += blocks;
            blocks as f64 * a.interval
        } else {
            0.0
        };
        let saved = saved.min(a.work);
        let lost = (done_units - saved).max(0.0);
        self.wasted += lost;
        // The task resumes from the best checkpoint either copy wrote
        // (without tail copies, `left` is this attempt's work).
        self.left[a.task] = self.left[a.task].min((a.work - saved).max(0.0));
        let end = if let Some(i) = cause.failure_index() {
            self.kills[i] += 1;
            self.task_kills[a.task] += 1;
            self.note_kill(a.task, host);
            if let Some(n) = self.hold_note[a.task].and_then(|i| self.hold_log.get_mut(i)) {
                n.killed_after = true;
            }
            AttemptEnd::Killed
        } else {
            AttemptEnd::Ended
        };
        self.hold_note[a.task] = None;
        self.attempt_ended(host, done_units, end, a.claimed_tr);
        self.running[a.task] = self.running[a.task].saturating_sub(1);
        if a.copy {
            self.tail_cpu += lost;
        }
        // While its other copy runs on, the task is not waiting.
        if self.running[a.task] == 0 {
            self.queue.push_front(a.task);
            self.oracle_requeued = true;
        }
        self.slot_changed(host, true);
        self.go_down(host);
    }

    /// Host `host` may take work again, unless its trace is failing right now.
    pub(super) fn host_up(&mut self, host: usize) {
        let h = self.hosts[host];
        if self.timelines[h.timeline]
            .failure_at(self.trace_time(host, self.now))
            .is_some()
        {
            self.go_down(host);
        } else {
            self.set_free(host);
        }
    }

    pub(super) fn set_free(&mut self, host: usize) {
        self.slots[host] = Slot::Free;
        self.free.push(host);
        self.fresh.push(host);
        self.armed.push(host);
    }

    /// Host `host` is failing now: away until its trace is usable again
    /// (the consumer expects it back after its usual outage). Whatever the
    /// rules compared against it changed.
    pub(super) fn go_down(&mut self, host: usize) {
        if matches!(self.slots[host], Slot::Free) {
            if let Some(i) = self.free.iter().position(|&g| g == host) {
                self.free.swap_remove(i);
            }
        }
        let h = self.hosts[host];
        let tt = self.trace_time(host, self.now);
        let expected_up = self.now + self.outage_guess(host);
        self.slots[host] = Slot::Down {
            since: self.now,
            expected_up,
        };
        if let Some(up) = self.timelines[h.timeline].next_usable(tt) {
            self.push((up - h.offset as f64).max(self.now), Ev::HostUp { host });
        }
        self.recheck_all = true;
    }

    /// Takes `host` out of the free list for a start.
    pub(super) fn take(&mut self, host: usize) {
        if let Some(i) = self.free.iter().position(|&g| g == host) {
            self.free.swap_remove(i);
        }
        self.epoch[host] = self.epoch[host].wrapping_add(1);
    }

    pub(super) fn start(&mut self, task: usize, host: usize, forecaster: &mut dyn Forecaster) {
        let view = self.view(host, forecaster).clone();
        let h = self.hosts[host];
        let work = self.left[task];
        let (interval, cost) = if self.config.policy == Policy::ProactiveCheckpoint {
            let gamma = view.gamma().max(1e-6);
            let past = self.past_failures(host, self.now);
            let mttf = checkpoint_mttf(&view.curve, past.as_ref());
            match young_daly_interval(self.config.checkpoint_cost_secs, mttf) {
                // τ and C are wall seconds at the predicted speed; in work, × Γ.
                Some(tau) => (tau * gamma, self.config.checkpoint_cost_secs * gamma),
                None => (0.0, 0.0),
            }
        } else {
            (0.0, 0.0)
        };
        let units = work + cost * checkpoints_in(work, interval) as f64;
        self.next_attempt += 1;
        self.attempts += 1;
        let id = self.next_attempt;
        let tl = &self.timelines[h.timeline];
        let tt = self.trace_time(host, self.now);
        let end = tl.finish_time(tt, units / h.power);
        let fail = tl.next_failure(tt);
        let expected_end = self.now + view.expected_run_secs(work);
        // The claim the host is held to: its own, before any discount.
        let claimed_tr = Some(self.claimed_views[host].p_success(work));
        self.claim_book.attempts[host] += 1;
        match (end, fail) {
            (Some(e), Some((f, _))) if e <= f => {
                self.push(e - h.offset as f64, Ev::Finish { host, attempt: id })
            }
            (Some(e), None) => self.push(e - h.offset as f64, Ev::Finish { host, attempt: id }),
            (_, Some((f, cause))) => self.push(
                f - h.offset as f64,
                Ev::Fail {
                    host,
                    attempt: id,
                    cause,
                },
            ),
            // Never finishes and never fails: it runs until the horizon.
            (None, None) => {}
        }
        self.slot_changed(host, false);
        self.slots[host] = Slot::Busy(Attempt {
            id,
            task,
            start: self.now,
            work,
            interval,
            cost,
            expected_end,
            copy: false,
            claimed_tr,
        });
        self.running[task] += 1;
    }
}
