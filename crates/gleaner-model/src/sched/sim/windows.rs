//! The `windows` policy's side of the simulator (issue 28): the windows a
//! waiting task could run in over the coming hours, as the consumer sees
//! them (each host's present view for a start now, its past days for a
//! start later, nothing of its future), handed to the config's
//! [`WindowRule`](crate::sched::window::WindowRule); the hold that follows,
//! and the window a held task keeps on its host so that the tasks weighed
//! after it plan around it (one task per host at a time). The rule itself
//! lives in `sched::window`; this file only gathers its inputs from the
//! simulated pool.

use super::result::HoldNote;
use super::{Ev, Forecaster, Sim, Slot};
use crate::sched::window::{
    anchored, counted_tr, follow_plan, later_windows, typical_p, Choice, HostNow, Plan, Window,
    HISTORY_DAYS,
};

/// Longest a held task waits before it is weighed again (hosts free up
/// and go down meanwhile), and the shortest (no spinning on a host about
/// to be free).
const REWEIGH_MAX_SECS: f64 = 3600.0;
const REWEIGH_MIN_SECS: f64 = 60.0;

impl Sim<'_> {
    /// What to do with `task`, which the proactive rule would start on
    /// free host `picked` now.
    pub(super) fn window_choice(
        &mut self,
        task: usize,
        picked: usize,
        forecaster: &mut dyn Forecaster,
    ) -> Option<Choice> {
        let now = self.now;
        // The task is weighed afresh: its own window is given up, and
        // windows whose start has passed are gone.
        for r in &mut self.reserved {
            r.retain(|&(t, start, _)| t != task && start >= now);
        }
        let rule = self.config.windows;
        let work = self.left[task];
        let mut windows: Vec<Window> = Vec::new();
        let mut mine: Vec<Window> = Vec::new();
        for g in 0..self.hosts.len() {
            // A host its record passes over is no window for anyone.
            if self.passed_over(g) {
                continue;
            }
            // Free hosts are seen as they are now; busy and down ones as
            // they were last seen (what the consumer knows of them).
            let free_in = match &self.slots[g] {
                Slot::Free => {
                    self.view(g, forecaster);
                    0.0
                }
                slot => slot.free_in(now),
            };
            let view = &self.views[g];
            let wall = view.expected_run_secs(work);
            if !wall.is_finite() {
                continue;
            }
            let p_view = view.p_success(work);
            let tl = &self.timelines[self.hosts[g].timeline];
            let now_tt = self.trace_time(g, now);
            let counted = |s: f64| counted_tr(tl, now_tt, now_tt + s, wall, HISTORY_DAYS);
            mine.clear();
            if matches!(self.slots[g], Slot::Free) {
                mine.push(Window {
                    host: g,
                    start_in: 0.0,
                    wall_secs: wall,
                    p: p_view,
                });
            }
            let counted_now = counted(0.0);
            let w = rule.present_weight.clamp(0.0, 1.0);
            later_windows(
                g,
                free_in,
                wall,
                |s| {
                    Some(match (counted(s), counted_now) {
                        (Some(later), Some(c_now)) => {
                            w * anchored(later, c_now, p_view) + (1.0 - w) * later
                        }
                        (Some(later), None) => later,
                        _ => p_view,
                    })
                },
                &mut mine,
            );
            // Nor one that starts while the task keeps off the host.
            mine.retain(|w| !self.avoids(task, g, now + w.start_in));
            // A window another held task keeps is not offered.
            let kept = &self.reserved[g];
            windows.extend(
                mine.iter()
                    .filter(|w| !rule.kept(w, now, kept.iter().map(|&(_, s, e)| (s, e)))),
            );
        }
        let p_now = windows
            .iter()
            .filter(|w| w.start_in <= 0.0)
            .map(|w| w.p)
            .fold(0.0, f64::max);
        self.last_weigh = (p_now, typical_p(&windows));
        let held = self.held_since[task].map_or(0.0, |t| now - t);
        let mut c = rule.choose_held(&windows, Some(picked), self.task_kills[task], held);
        if rule.held_enough(held) {
            self.plans[task] = None;
        }
        if let Some(plan) = self.plans[task] {
            // Simulated hosts never leave, and tasks have no deadline.
            let host = match self.slots.get(plan.host) {
                Some(Slot::Free) => HostNow::Free,
                Some(_) => HostNow::Busy,
                None => HostNow::Gone,
            };
            c = follow_plan(&plan, now, host, None, c);
        }
        c
    }

    /// Holds `task` for window `w`: the window is kept on its host, and
    /// the task is weighed again when it opens, or within the hour.
    pub(super) fn hold(&mut self, task: usize, w: Window) {
        let wait = w.start_in.clamp(REWEIGH_MIN_SECS, REWEIGH_MAX_SECS);
        self.held_until[task] = self.now + wait;
        let plan = Plan::of(&w, self.now);
        let kept = self.plans[task]
            .is_some_and(|p| p.host == plan.host && (p.start_at - plan.start_at).abs() < 1.0);
        // The same hold weighed again is not a new one.
        if !kept {
            self.holds += 1;
            self.hold_log.push(HoldNote {
                task,
                runtime_secs: self.config.runtimes[task],
                at_secs: self.now,
                host: w.host,
                start_in_secs: w.start_in,
                p_window: w.p,
                p_now: self.last_weigh.0,
                typical_p: self.last_weigh.1,
                kills: self.task_kills[task],
                queued: self.queue.len(),
                started_secs: None,
                started_on: None,
                killed_after: false,
            });
            self.hold_note[task] = Some(self.hold_log.len() - 1);
        }
        self.plans[task] = Some(plan);
        self.held_since[task].get_or_insert(self.now);
        if let Some(r) = self.reserved.get_mut(w.host) {
            let start = self.now + w.start_in;
            r.push((task, start, start + w.wall_secs));
        }
        self.push(self.now + wait, Ev::Look);
    }

    /// `task` starts on `host`: whatever window it kept is free again.
    pub(super) fn release(&mut self, task: usize, host: usize) {
        if self.plans[task].is_some() {
            if let Some(n) = self.hold_note[task].and_then(|i| self.hold_log.get_mut(i)) {
                n.started_secs = Some(self.now);
                n.started_on = Some(host);
            }
        } else {
            self.hold_note[task] = None;
        }
        self.plans[task] = None;
        self.held_since[task] = None;
        for r in &mut self.reserved {
            r.retain(|&(t, _, _)| t != task);
        }
    }
}
