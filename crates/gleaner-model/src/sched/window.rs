//! Windows that come later (issue 28): for a task that no free host is
//! likely to finish now, which (host, start time) pair over the coming hours
//! to hold it for, which hosts to leave out for it (Kondo, Chien and
//! Casanova's exclusion), and how many kills a task may take before it
//! starts only at its best window.
//!
//! A window is a host, a start time from now, the wall time the run takes
//! there and the chance it passes unhit (the predictor's TR(W, T) for a W
//! that may lie hours ahead). Windows are weighed by their expected finish:
//! the start, the run, and for every expected failed attempt the time a
//! failure costs before the task runs again ([`WindowRule::retry_secs`]: on
//! a desktop that is the wait for the next good window, not an immediate
//! restart). [`counted_tr`] answers TR for a window that starts later from a
//! replayed host's past: the share of past days of the same kind whose
//! same window passed unhit, which is what `freq` answers for a window that
//! does not start at the last sample (and what the default answered there
//! until it modelled such windows, `baselines::later`;
//! shared/findings/future-windows.md). The simulator still counts.
//!
//! A held task's plan is bounded ([`Plan::lapse`]): it ends when its host
//! leaves, when its window comes and the host is not free, or when a run in
//! it would end after the task's deadline; the task then goes back to
//! normal placement. The simulator's `windows` policy and the node's batch
//! queue (`consumer::batch::queue::later`) both decide through
//! [`WindowRule::choose`] and [`follow_plan`], and both leave out the
//! later windows other held tasks keep ([`WindowRule::kept`]; a start
//! now on a free host is always offered).
//!
//! Pure code: the caller passes the time, the windows and the host's past;
//! nothing here knows the queue, the network or the clock.

use super::timeline::Timeline;

/// How far ahead a task's windows are weighed.
pub const HORIZON_SECS: f64 = 36.0 * 3600.0;
/// The grid of later start times weighed.
pub const SLOT_SECS: f64 = 3600.0;
/// Past days of the same kind counted for a later window (the papers' N).
pub const HISTORY_DAYS: usize = 10;
/// Days looked back at most to find [`HISTORY_DAYS`] of the same kind.
pub const MAX_LOOKBACK_DAYS: i64 = 40;
/// Kills after which a task is weighed by its likeliest window rather than
/// its soonest expected finish, and starts now only about as likely.
pub const KILL_LIMIT: u32 = 2;
/// Below this chance a run counts as never finishing (no finite expected finish).
const MIN_P: f64 = 1e-3;

/// The chance that a run of `wall_secs` starting at trace time `start` is
/// not hit, counted on the past: the same window (same owner's time of
/// day) on up to `days` earlier days of the same kind (weekday or weekend)
/// that had ended by `now`, so nothing after `now` is read. Smoothed by
/// half a window either way, so that ten days never make a certainty.
/// `None` when no such day lies in the trace.
pub fn counted_tr(tl: &Timeline, now: f64, start: f64, wall_secs: f64, days: usize) -> Option<f64> {
    if !(wall_secs.is_finite() && wall_secs > 0.0) || days == 0 {
        return None;
    }
    let weekend = tl.is_weekend(start);
    let (mut seen, mut passed) = (0usize, 0usize);
    for d in 1..=MAX_LOOKBACK_DAYS {
        let a = start - (d * 86_400) as f64;
        if a < tl.start() as f64 {
            break;
        }
        if a + wall_secs > now || tl.is_weekend(a) != weekend {
            continue;
        }
        seen += 1;
        if tl.keeps_run(a, wall_secs) {
            passed += 1;
        }
        if seen == days {
            break;
        }
    }
    (seen > 0).then(|| (passed as f64 + 0.5) / (seen as f64 + 1.0))
}

/// A later window's chance on the predictor's level: the count over past
/// days says how much better or worse the window's time of day is than
/// now's (`counted_later` against `counted_now`, as a shift of log-odds),
/// and the predictor, which knows the host's present state, says how
/// likely a start now is (`predicted_now`). Counts alone run on another
/// level than the predictor (on the shared lab traces, 0.6 where the
/// predictor said 0.3 and the runs were killed), which made every later
/// window look better than now.
pub fn anchored(counted_later: f64, counted_now: f64, predicted_now: f64) -> f64 {
    let logit = |p: f64| {
        let p = p.clamp(1e-4, 1.0 - 1e-4);
        (p / (1.0 - p)).ln()
    };
    let x = logit(counted_later) - logit(counted_now) + logit(predicted_now);
    let p = 1.0 / (1.0 + (-x).exp());
    if p.is_nan() {
        predicted_now.clamp(0.0, 1.0)
    } else {
        p
    }
}

/// One (host, start time) pair a task could run in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub host: usize,
    /// Seconds from now until the run would start (0: the host is free now).
    pub start_in: f64,
    /// Wall seconds the run takes there.
    pub wall_secs: f64,
    /// The chance the run passes unhit.
    pub p: f64,
}

impl Window {
    /// Expected seconds from now until the task is done if it starts in
    /// this window: the start, the run, and for each expected failed
    /// attempt ((1 − p) / p of them) what a failure costs under `rule`;
    /// infinite when it cannot pass.
    pub fn expected_finish(&self, rule: &WindowRule) -> f64 {
        if !(self.p >= MIN_P && self.wall_secs.is_finite() && self.start_in.is_finite()) {
            return f64::INFINITY;
        }
        let failure = rule.retry_secs + rule.retry_share * self.wall_secs;
        self.start_in + self.wall_secs + (1.0 / self.p - 1.0) * failure
    }
}

/// What to do with a task now.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Choice {
    /// Start it now on this free host.
    Start { host: usize, p: f64 },
    /// Hold it for this window (or whoever is best when the time comes).
    Hold(Window),
}

/// How windows are weighed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRule {
    /// What a failed attempt costs before the task runs again, seconds,
    /// besides the share of its run below.
    pub retry_secs: f64,
    /// The share of the run's wall time a failed attempt loses (a kill
    /// comes, on average, part-way through).
    pub retry_share: f64,
    /// Below this chance a host is left out for the task while some
    /// window reaches it (exclusion).
    pub hopeless: f64,
    /// Starting now is kept while its expected finish is within this share
    /// of the best window's (a later window is a forecast, now is certain).
    pub slack: f64,
    /// A task is held only while no free host gives it at least this
    /// chance now ("no free host is likely to finish it now").
    pub hold_below: f64,
    /// ... and only for a window whose chance beats the best start now by
    /// at least this much: near-equal chances are forecast noise, and
    /// holding for them leaves hosts idle.
    pub min_gain: f64,
    /// How a later window's chance is made: this weight on the count
    /// anchored to the predictor's level ([`anchored`]), the rest on the
    /// raw count over past days (1: anchored only).
    pub present_weight: f64,
    /// Kills after which a task is weighed by its likeliest window rather
    /// than its soonest expected finish, and starts now only about as
    /// likely ([`KILL_LIMIT`]; `u32::MAX`: never).
    pub kill_limit: u32,
    /// A task is held only while the median chance of the windows weighed
    /// for it (every host, every start) is below this: the task is longer
    /// than the pool's typical free spell, so a start now is likely to be
    /// killed wherever it goes. A shorter task that merely meets a bad hour
    /// runs now and, if killed, again soon (`None`: no such bound).
    pub typical_below: Option<f64>,
    /// A task that starts now starts on the placement rule's pick (when
    /// it is among the windows and not left out), not on the free host the
    /// window's expected finish prefers: placement weighs the whole batch,
    /// a window one task.
    pub keep_pick: bool,
    /// Whether a window another held task keeps also keeps a free host
    /// from a start now ([`WindowRule::kept`]; off: a free host is
    /// certain and a held window a forecast).
    pub free_now_kept: bool,
    /// Windows are weighed only in the batch's tail ([`WindowRule::weighs`]):
    /// while more tasks wait than there are hosts free or about to be, a
    /// free host takes the placement rule's pick at once. In the bulk a
    /// host left by a held task takes the next task anyway, so a hold
    /// only puts its task off (on the desktop pools every hold was made
    /// in the bulk, and 93–96 % of held tasks started elsewhere hours
    /// later: docs/scheduling.md).
    pub tail_only: bool,
    /// A busy or down host counts as about to be free for
    /// [`WindowRule::weighs`] when it is expected free within this many
    /// seconds.
    pub tail_within_secs: f64,
    /// Longest a task is held: windows that open later than this are not
    /// weighed (`None`: up to [`HORIZON_SECS`]).
    pub max_wait_secs: Option<f64>,
    /// Past the kill limit, the likeliest window is looked for only among
    /// those that open within this many seconds (`None`: all weighed).
    pub kill_near_secs: Option<f64>,
    /// Longest a task is kept waiting in all, from its first hold until it
    /// starts: past it only starts now are weighed (`None`: no bound).
    pub max_held_secs: Option<f64>,
}

/// The default [`WindowRule::max_wait_secs`]: windows opening more than
/// two hours on are not weighed. No longer than [`MAX_HELD_SECS`], so a
/// task is never held for a window it will be let go before (with six
/// hours, as first measured, a hold for a window 2-6 h on ended at 2 h
/// with the task placed as usual).
pub const MAX_WAIT_SECS: f64 = 2.0 * 3600.0;
/// The default [`WindowRule::max_held_secs`]: a task held two hours in all
/// is placed as usual.
pub const MAX_HELD_SECS: f64 = 2.0 * 3600.0;

impl Default for WindowRule {
    fn default() -> Self {
        WindowRule {
            retry_secs: 2.0 * 3600.0,
            retry_share: 0.5,
            hopeless: 0.1,
            slack: 0.15,
            present_weight: 1.0,
            hold_below: 0.3,
            min_gain: 0.35,
            kill_limit: KILL_LIMIT,
            typical_below: None,
            keep_pick: false,
            free_now_kept: false,
            tail_only: false,
            tail_within_secs: SLOT_SECS,
            // Bounded holds (docs/scheduling.md, "Bounded holds", "Which of
            // the must-show's comparisons are beyond noise" and "Holds within
            // two hours"): over seeds 1-32 no desktop pool measured ends later
            // than placing every task at once beyond noise.
            max_wait_secs: Some(MAX_WAIT_SECS),
            kill_near_secs: None,
            max_held_secs: Some(MAX_HELD_SECS),
        }
    }
}

impl WindowRule {
    /// Whether windows are weighed at all while `waiting` tasks wait (held
    /// ones included) and `hosts_soon` hosts are free or expected free
    /// within [`WindowRule::tail_within_secs`]: always, unless the rule
    /// holds only in the tail, which begins when every waiting task has
    /// such a host.
    pub fn weighs(&self, waiting: usize, hosts_soon: usize) -> bool {
        !self.tail_only || waiting <= hosts_soon
    }

    /// The latest start weighed for a task killed `kills` times that has
    /// been held `held_secs` so far: none later than now once it has been
    /// held [`WindowRule::max_held_secs`].
    fn latest_start(&self, kills: u32, held_secs: f64) -> f64 {
        if self.max_held_secs.is_some_and(|m| held_secs >= m) {
            return 0.0;
        }
        let near = if kills >= self.kill_limit {
            self.kill_near_secs
        } else {
            None
        };
        [self.max_wait_secs, near]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_nan())
            .fold(f64::INFINITY, f64::min)
    }

    /// Whether a task held `held_secs` so far may be held no longer (its
    /// plan is dropped and it starts now wherever it is best).
    pub fn held_enough(&self, held_secs: f64) -> bool {
        self.max_held_secs.is_some_and(|m| held_secs >= m)
    }

    /// Whether window `w` (weighed at `now`) is not offered to a task
    /// because it overlaps a window another held task keeps on its host
    /// (`kept`, as for [`kept_elsewhere`]). A start now on a free host is
    /// always offered: keeping free hosts idle for the windows of held
    /// tasks made holds breed holds in the simulator (a task whose free
    /// host was kept for a later window had no start now, so it was held
    /// in turn and kept another host; 90 % of the `windows` policy's holds
    /// on the desktop pools were of tasks with no start now left, and
    /// every task was held about once, waiting 2–3 h: docs/desktop-pools.md).
    /// If the start now runs into the held window, that hold lapses when
    /// its window comes ([`Plan::lapse`]).
    pub fn kept(&self, w: &Window, now: f64, kept: impl IntoIterator<Item = (f64, f64)>) -> bool {
        if w.start_in <= 0.0 && !self.free_now_kept {
            return false;
        }
        kept_elsewhere(w, now, kept)
    }

    /// Whether `w` is left out for a task, given the best chance any
    /// window offers it.
    fn excluded(&self, w: &Window, best_p: f64) -> bool {
        w.p < self.hopeless && best_p >= self.hopeless
    }

    /// The choice for a task among `windows` (now-windows, `start_in` 0,
    /// only on free hosts); `picked` is the free host the placement rule
    /// would give it, kept while it is about as good as the best window.
    /// `kills` is how often the task was killed so far. Windows that open
    /// later than [`WindowRule::max_wait_secs`] (past the kill limit,
    /// [`WindowRule::kill_near_secs`]) are not weighed. `None` when no
    /// window can finish it.
    pub fn choose(&self, windows: &[Window], picked: Option<usize>, kills: u32) -> Option<Choice> {
        self.choose_held(windows, picked, kills, 0.0)
    }

    /// [`WindowRule::choose`] for a task held `held_secs` so far (since it
    /// was first held and not started): past [`WindowRule::max_held_secs`]
    /// only starts now are weighed.
    pub fn choose_held(
        &self,
        windows: &[Window],
        picked: Option<usize>,
        kills: u32,
        held_secs: f64,
    ) -> Option<Choice> {
        let all = windows;
        let latest = self.latest_start(kills, held_secs);
        let near: Vec<Window>;
        let windows = if latest.is_finite() {
            near = all
                .iter()
                .filter(|w| w.start_in <= latest.max(0.0))
                .copied()
                .collect();
            near.as_slice()
        } else {
            all
        };
        let best_p = windows.iter().map(|w| w.p).fold(0.0, f64::max);
        let cost = |w: &Window| w.expected_finish(self);
        let usable = || {
            windows
                .iter()
                .filter(move |w| !self.excluded(w, best_p) && cost(w).is_finite())
        };
        // Past the kill limit, the likeliest window; before, the soonest
        // expected finish.
        let best = usable().min_by(|a, b| {
            let by_p = if kills >= self.kill_limit {
                b.p.total_cmp(&a.p)
            } else {
                std::cmp::Ordering::Equal
            };
            by_p.then(cost(a).total_cmp(&cost(b)))
                .then(a.start_in.total_cmp(&b.start_in))
                .then(a.host.cmp(&b.host))
        })?;
        let slack = if kills >= self.kill_limit {
            0.0
        } else {
            self.slack
        };
        let bound = cost(best) * (1.0 + slack);
        let start = |w: &Window| Choice::Start {
            host: w.host,
            p: w.p,
        };
        let now = usable()
            .filter(|w| w.start_in <= 0.0 && cost(w) <= bound)
            .filter(|w| kills < self.kill_limit || w.p + self.min_gain > best.p)
            .min_by(|a, b| {
                // The placement rule's host first, then the soonest finish.
                (Some(b.host) == picked)
                    .cmp(&(Some(a.host) == picked))
                    .then(cost(a).total_cmp(&cost(b)))
                    .then(a.host.cmp(&b.host))
            });
        // The placement rule's pick, when a start now goes to it anyway.
        let pick =
            || usable().find(|w| w.start_in <= 0.0 && Some(w.host) == picked && self.keep_pick);
        if let Some(w) = now {
            return Some(start(pick().unwrap_or(w)));
        }
        // A later window is better; it is waited for only when starting
        // now is unlikely to pass and the window is clearly likelier (on
        // the desktop pools measured, holding for less left hosts idle for
        // forecast noise, and holding every task killed twice for its
        // likeliest window made the worst makespans worse, not better).
        let soonest_now = usable()
            .filter(|w| w.start_in <= 0.0)
            .min_by(|a, b| cost(a).total_cmp(&cost(b)).then(a.host.cmp(&b.host)));
        let short = || {
            self.typical_below
                .is_some_and(|below| typical_p(all) >= below)
        };
        Some(match soonest_now {
            Some(w) if w.p >= self.hold_below || best.p < w.p + self.min_gain || short() => {
                start(pick().unwrap_or(w))
            }
            _ => Choice::Hold(*best),
        })
    }
}

/// The median chance of `windows` (every host, every start weighed): how
/// a task's length compares with the pool's typical free spell (below one
/// half: longer than most). 0 when there is none.
pub fn typical_p(windows: &[Window]) -> f64 {
    let mut ps: Vec<f64> = windows
        .iter()
        .map(|w| w.p)
        .filter(|p| p.is_finite())
        .collect();
    if ps.is_empty() {
        return 0.0;
    }
    ps.sort_by(f64::total_cmp);
    let mid = ps.len() / 2;
    if ps.len() % 2 == 1 {
        ps[mid]
    } else {
        (ps[mid - 1] + ps[mid]) / 2.0
    }
}

/// The window a held task waits for, at an absolute time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub host: usize,
    /// When the window opens (the caller's clock).
    pub start_at: f64,
    pub wall_secs: f64,
    pub p: f64,
}

impl Plan {
    /// The plan of holding for `w` at `now`.
    pub fn of(w: &Window, now: f64) -> Plan {
        Plan {
            host: w.host,
            start_at: now + w.start_in,
            wall_secs: w.wall_secs,
            p: w.p,
        }
    }

    /// Why the plan no longer stands at `now`, if it does not: its host
    /// left the pool, its window came while its host was not free, or a
    /// run in it would end after `deadline` (the caller's clock). A lapsed
    /// plan is dropped and its task weighed like any other.
    pub fn lapse(&self, now: f64, host: HostNow, deadline: Option<f64>) -> Option<Lapse> {
        if host == HostNow::Gone {
            return Some(Lapse::HostGone);
        }
        if deadline.is_some_and(|d| self.start_at.max(now) + self.wall_secs > d) {
            return Some(Lapse::Deadline);
        }
        (now >= self.start_at && host != HostNow::Free).then_some(Lapse::Missed)
    }
}

/// How a held task's host stands when its plan is weighed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostNow {
    /// No longer in the pool as the caller knows it.
    Gone,
    /// There, but not free for the task (running something, or failing).
    Busy,
    /// Free for the task now.
    Free,
}

/// Why a held task's plan ended before it started there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    /// Its host left the pool.
    HostGone,
    /// Its window came and its host was not free.
    Missed,
    /// A run in its window would end after the task's deadline.
    Deadline,
}

impl Lapse {
    pub fn as_str(self) -> &'static str {
        match self {
            Lapse::HostGone => "its host left",
            Lapse::Missed => "its host was not free when the window came",
            Lapse::Deadline => "the window would end after the deadline",
        }
    }
}

/// Whether window `w` (weighed at `now`) overlaps a window that another
/// held task keeps on the same host, given as `(start, end)` on the
/// caller's clock: such a window is not offered (one task per host at a
/// time, so tasks weighed later plan around the held ones).
pub fn kept_elsewhere(w: &Window, now: f64, kept: impl IntoIterator<Item = (f64, f64)>) -> bool {
    let (a, b) = (now + w.start_in, now + w.start_in + w.wall_secs);
    kept.into_iter().any(|(s, e)| a < e && s < b)
}

/// A held task weighed again at `now` keeps its word: once its window has
/// come and its host is free (`host`), it starts there unless the
/// fresh `choice` starts it now elsewhere; before then, a fresh choice to
/// hold for a window that opens later than the plan's is not taken (else
/// a task whose present always looks worse than its future would be put
/// off for ever). A plan that lapsed ([`Plan::lapse`]: its host gone, not
/// free when the window came, or the window past `deadline`) is dropped
/// for the fresh choice.
pub fn follow_plan(
    plan: &Plan,
    now: f64,
    host: HostNow,
    deadline: Option<f64>,
    choice: Option<Choice>,
) -> Option<Choice> {
    if plan.lapse(now, host, deadline).is_some() {
        return choice;
    }
    let keep = Choice::Hold(Window {
        host: plan.host,
        start_in: (plan.start_at - now).max(0.0),
        wall_secs: plan.wall_secs,
        p: plan.p,
    });
    if now >= plan.start_at {
        // Not lapsed: the host is free.
        return match choice {
            Some(c @ Choice::Start { .. }) => Some(c),
            _ => Some(Choice::Start {
                host: plan.host,
                p: plan.p,
            }),
        };
    }
    match choice {
        Some(Choice::Hold(w)) if now + w.start_in > plan.start_at => Some(keep),
        None => Some(keep),
        c => c,
    }
}

/// The later windows of one host for a run of `wall_secs`: a start every
/// [`SLOT_SECS`] from when the host is expected free (`free_in` seconds
/// from now; 0 when free) up to [`HORIZON_SECS`], with their chance from
/// `p_at(start_in)`. The now-window (free hosts) is the caller's to add: it
/// knows the host's present state, which a count over past days does not.
pub fn later_windows(
    host: usize,
    free_in: f64,
    wall_secs: f64,
    mut p_at: impl FnMut(f64) -> Option<f64>,
    out: &mut Vec<Window>,
) {
    if !(free_in.is_finite() && free_in >= 0.0 && wall_secs.is_finite()) {
        return;
    }
    let first = (free_in / SLOT_SECS).ceil().max(1.0) as usize;
    let last = (HORIZON_SECS / SLOT_SECS) as usize;
    let mut starts: Vec<f64> = Vec::with_capacity(last + 2);
    if free_in > 0.0 && free_in < first as f64 * SLOT_SECS {
        starts.push(free_in);
    }
    starts.extend((first..=last).map(|k| k as f64 * SLOT_SECS));
    for start_in in starts {
        if let Some(p) = p_at(start_in) {
            out.push(Window {
                host,
                start_in,
                wall_secs,
                p,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule without its default bounds on the wait and the time held,
    /// so that each test weighs one rule at a time.
    fn unbounded() -> WindowRule {
        WindowRule {
            max_wait_secs: None,
            max_held_secs: None,
            ..WindowRule::default()
        }
    }

    /// The default holds for a window at most two hours on, two hours in
    /// all: never for a window it would let the task go before.
    #[test]
    fn the_default_rule_bounds_the_wait_and_the_time_held() {
        let rule = WindowRule::default();
        assert_eq!(rule.max_wait_secs, Some(2.0 * 3600.0));
        assert_eq!(rule.max_held_secs, Some(2.0 * 3600.0));
        assert!(rule.max_wait_secs <= rule.max_held_secs);
        // Nine hours: 0.2 now, 0.85 in two hours is waited for; in three,
        // past the longest wait, it is not.
        let soon = [w(0, 0.0, 9.0, 0.2), w(1, 2.0, 9.0, 0.85)];
        assert_eq!(rule.choose(&soon, Some(0), 0), Some(Choice::Hold(soon[1])));
        let late = [w(0, 0.0, 9.0, 0.2), w(1, 3.0, 9.0, 0.85)];
        assert_eq!(
            rule.choose(&late, Some(0), 0),
            Some(Choice::Start { host: 0, p: 0.2 })
        );
        assert!(rule.held_enough(2.0 * 3600.0));
    }

    fn w(host: usize, start_h: f64, wall_h: f64, p: f64) -> Window {
        Window {
            host,
            start_in: start_h * 3600.0,
            wall_secs: wall_h * 3600.0,
            p,
        }
    }

    #[test]
    fn a_long_task_waits_for_the_evening_and_a_short_one_goes_now() {
        let rule = unbounded();
        // Nine hours: now has a 0.2 chance, the quiet evening in ten hours 0.85.
        let windows = [w(0, 0.0, 9.0, 0.2), w(1, 10.0, 9.0, 0.85)];
        assert_eq!(
            rule.choose(&windows, Some(0), 0),
            Some(Choice::Hold(windows[1]))
        );
        // Two hours: 0.7 now beats waiting ten hours for 0.95.
        let windows = [w(0, 0.0, 2.0, 0.7), w(1, 10.0, 2.0, 0.95)];
        assert_eq!(
            rule.choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 0, p: 0.7 })
        );
    }

    #[test]
    fn the_picked_host_is_kept_within_the_slack_else_the_best_free_one() {
        let rule = unbounded();
        let windows = [
            w(0, 0.0, 4.0, 0.92),
            w(1, 0.0, 4.0, 0.95),
            w(2, 5.0, 4.0, 1.0),
        ];
        // Host 0 is within 15 % of host 1: the placement rule's pick stays.
        assert_eq!(
            rule.choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 0, p: 0.92 })
        );
        // A pick far worse than another free host gives way to it.
        let windows = [w(0, 0.0, 4.0, 0.2), w(1, 0.0, 4.0, 0.95)];
        assert_eq!(
            rule.choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 1, p: 0.95 })
        );
        assert_eq!(rule.choose(&[], Some(0), 0), None);
        assert_eq!(rule.choose(&[w(0, 0.0, 1.0, 0.0)], Some(0), 0), None);
    }

    #[test]
    fn hopeless_hosts_are_left_out_and_kills_raise_the_bar() {
        let rule = WindowRule {
            retry_secs: 0.0,
            retry_share: 0.0,
            ..unbounded()
        };
        // With no retry cost, 0.05 now would win on expected time alone;
        // exclusion leaves it out while a better window exists.
        let windows = [w(0, 0.0, 1.0, 0.05), w(1, 3.0, 1.0, 0.6)];
        assert_eq!(
            rule.choose(&windows, Some(0), 0),
            Some(Choice::Hold(windows[1]))
        );
        // Alone, a poor host is still used.
        assert_eq!(
            rule.choose(&windows[..1], Some(0), 0),
            Some(Choice::Start { host: 0, p: 0.05 })
        );
        // A task killed twice does not start at 0.2 when 0.6 comes later,
        // though by expected time alone it would.
        let windows = [w(0, 0.0, 1.0, 0.2), w(1, 3.0, 1.0, 0.6)];
        assert!(matches!(
            rule.choose(&windows, Some(0), 0),
            Some(Choice::Start { .. })
        ));
        assert_eq!(
            rule.choose(&windows, Some(0), KILL_LIMIT),
            Some(Choice::Hold(windows[1]))
        );
        // Nor for a window hardly likelier.
        let close = [w(0, 0.0, 1.0, 0.45), w(1, 3.0, 1.0, 0.6)];
        assert!(matches!(
            rule.choose(&close, Some(0), KILL_LIMIT),
            Some(Choice::Start { host: 0, .. })
        ));
    }

    #[test]
    fn a_task_shorter_than_the_pools_typical_free_spell_is_not_held() {
        let bounded = WindowRule {
            typical_below: Some(0.5),
            ..unbounded()
        };
        // Five hours at 08:00 on a host taken back at noon: 0.1 now,
        // 0.95 from 13:00 on, and most windows of the coming day pass.
        let mut windows = vec![w(0, 0.0, 5.0, 0.1)];
        windows.extend((1..=36).map(|h| {
            let hour = (8 + h) % 24;
            let p = if (8..12).contains(&hour) { 0.1 } else { 0.95 };
            w(0, f64::from(h), 5.0, p)
        }));
        assert!(matches!(
            unbounded().choose(&windows, Some(0), 0),
            Some(Choice::Hold(_))
        ));
        assert_eq!(
            bounded.choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 0, p: 0.1 })
        );
        // Eleven hours on an office host: only evening starts pass, the
        // typical window does not, and the task waits for the evening.
        let mut windows = vec![w(0, 0.0, 11.0, 0.12)];
        windows.extend((1..=36).map(|h| {
            let hour = (8 + h) % 24;
            let p = if (17..21).contains(&hour) { 0.9 } else { 0.12 };
            w(0, f64::from(h), 11.0, p)
        }));
        assert!(matches!(
            bounded.choose(&windows, Some(0), 0),
            Some(Choice::Hold(Window { start_in, .. })) if start_in == 9.0 * 3600.0
        ));
    }

    #[test]
    fn holding_only_in_the_tail_waits_for_hosts_to_outnumber_tasks() {
        let tail = WindowRule {
            tail_only: true,
            ..unbounded()
        };
        // 200 tasks on 40 hosts: the bulk, no window weighed.
        assert!(!tail.weighs(200, 40));
        assert!(!tail.weighs(41, 40));
        // Every waiting task has a host free or about to be: the tail.
        assert!(tail.weighs(40, 40));
        assert!(tail.weighs(3, 12));
        // Without the bound, windows are weighed in the bulk too.
        assert!(unbounded().weighs(200, 40));
    }

    #[test]
    fn a_task_is_not_held_for_a_window_past_the_longest_wait() {
        let capped = WindowRule {
            max_wait_secs: Some(6.0 * 3600.0),
            ..unbounded()
        };
        // Nine hours: 0.2 now, 0.4 in two hours, 0.9 in eight.
        let windows = [
            w(0, 0.0, 9.0, 0.2),
            w(1, 2.0, 9.0, 0.4),
            w(1, 8.0, 9.0, 0.9),
        ];
        assert_eq!(
            unbounded().choose(&windows, Some(0), 0),
            Some(Choice::Hold(windows[2]))
        );
        // Eight hours is past the longest wait, and two hours' 0.4 is no
        // clear gain on now: the task starts now.
        assert_eq!(
            capped.choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 0, p: 0.2 })
        );
        // A window within the wait and clearly likelier is still held for.
        let windows = [
            w(0, 0.0, 9.0, 0.2),
            w(1, 5.0, 9.0, 0.6),
            w(1, 8.0, 9.0, 0.9),
        ];
        assert_eq!(
            unbounded().choose(&windows, Some(0), 0),
            Some(Choice::Hold(windows[2]))
        );
        assert_eq!(
            capped.choose(&windows, Some(0), 0),
            Some(Choice::Hold(windows[1]))
        );
    }

    #[test]
    fn a_task_held_long_enough_starts_now() {
        let bounded = WindowRule {
            max_held_secs: Some(2.0 * 3600.0),
            ..unbounded()
        };
        // Nine hours: 0.2 now, 0.85 in three hours.
        let windows = [w(0, 0.0, 9.0, 0.2), w(1, 3.0, 9.0, 0.85)];
        let h = 3600.0;
        assert_eq!(
            bounded.choose_held(&windows, Some(0), 0, 1.0 * h),
            Some(Choice::Hold(windows[1]))
        );
        assert!(!bounded.held_enough(1.0 * h));
        // Held two hours already: no more waiting.
        assert_eq!(
            bounded.choose_held(&windows, Some(0), 0, 2.0 * h),
            Some(Choice::Start { host: 0, p: 0.2 })
        );
        assert!(bounded.held_enough(2.0 * h));
        // Without the bound the task waits on.
        let rule = unbounded();
        assert_eq!(
            rule.choose_held(&windows, Some(0), 0, 20.0 * h),
            Some(Choice::Hold(windows[1]))
        );
        assert!(!rule.held_enough(20.0 * h));
    }

    #[test]
    fn past_the_kill_limit_only_near_windows_are_waited_for() {
        let near = WindowRule {
            kill_near_secs: Some(4.0 * 3600.0),
            ..unbounded()
        };
        // Killed twice: 0.25 now, 0.5 in three hours, 0.9 tomorrow.
        let windows = [
            w(0, 0.0, 6.0, 0.25),
            w(1, 3.0, 6.0, 0.5),
            w(2, 20.0, 6.0, 0.9),
        ];
        assert_eq!(
            unbounded().choose(&windows, Some(0), KILL_LIMIT),
            Some(Choice::Hold(windows[2]))
        );
        // Tomorrow is too far; the likeliest near window, in three hours,
        // is no clear gain on now.
        assert_eq!(
            near.choose(&windows, Some(0), KILL_LIMIT),
            Some(Choice::Start { host: 0, p: 0.25 })
        );
        // Before the limit, far windows are weighed as ever.
        assert_eq!(
            near.choose(&windows, Some(0), 0),
            unbounded().choose(&windows, Some(0), 0)
        );
    }

    #[test]
    fn a_start_now_keeps_the_placement_rules_pick() {
        let keep = WindowRule {
            keep_pick: true,
            ..unbounded()
        };
        // Host 1 finishes sooner by its window's reckoning; placement
        // picked host 0, which is far worse but not hopeless.
        let windows = [w(0, 0.0, 4.0, 0.4), w(1, 0.0, 4.0, 0.95)];
        assert_eq!(
            unbounded().choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 1, p: 0.95 })
        );
        assert_eq!(
            keep.choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 0, p: 0.4 })
        );
        // A hopeless pick is still left out.
        let windows = [w(0, 0.0, 4.0, 0.05), w(1, 0.0, 4.0, 0.95)];
        assert_eq!(
            keep.choose(&windows, Some(0), 0),
            Some(Choice::Start { host: 1, p: 0.95 })
        );
    }

    #[test]
    fn a_held_task_starts_when_its_window_comes_and_never_drifts_later() {
        let plan = Plan::of(&w(4, 10.0, 9.0, 0.85), 0.0);
        let later = Some(Choice::Hold(w(2, 12.0, 9.0, 0.9)));
        let sooner = Some(Choice::Hold(w(2, 5.0, 9.0, 0.9)));
        let elsewhere = Some(Choice::Start { host: 1, p: 0.8 });
        let h = 3600.0;
        let (busy, free) = (HostNow::Busy, HostNow::Free);
        // Before the window: a later one is not taken, a sooner one is.
        let kept = follow_plan(&plan, 2.0 * h, busy, None, later);
        assert_eq!(kept, Some(Choice::Hold(w(4, 8.0, 9.0, 0.85))));
        assert_eq!(follow_plan(&plan, 2.0 * h, busy, None, sooner), sooner);
        assert_eq!(
            follow_plan(&plan, 2.0 * h, busy, None, elsewhere),
            elsewhere
        );
        // The window has come: the task starts on its host if it is free.
        let start = Some(Choice::Start { host: 4, p: 0.85 });
        assert_eq!(follow_plan(&plan, 10.0 * h, free, None, later), start);
        assert_eq!(follow_plan(&plan, 10.0 * h, free, None, None), start);
        assert_eq!(
            follow_plan(&plan, 10.0 * h, free, None, elsewhere),
            elsewhere
        );
        // Its host is busy: the plan is dropped for the fresh choice.
        assert_eq!(follow_plan(&plan, 10.0 * h, busy, None, later), later);
    }

    #[test]
    fn a_hold_lapses_when_its_host_leaves_its_window_is_missed_or_the_deadline_passes() {
        let h = 3600.0;
        let plan = Plan::of(&w(4, 10.0, 9.0, 0.85), 0.0);
        let (gone, busy, free) = (HostNow::Gone, HostNow::Busy, HostNow::Free);
        assert_eq!(plan.lapse(2.0 * h, busy, None), None);
        assert_eq!(plan.lapse(2.0 * h, free, Some(19.0 * h)), None);
        assert_eq!(plan.lapse(2.0 * h, gone, None), Some(Lapse::HostGone));
        assert_eq!(plan.lapse(10.0 * h, busy, None), Some(Lapse::Missed));
        assert_eq!(plan.lapse(10.0 * h, free, None), None);
        // The run would end at 19 h: a deadline before that ends the hold.
        assert_eq!(
            plan.lapse(2.0 * h, busy, Some(18.0 * h)),
            Some(Lapse::Deadline)
        );
        // A lapsed plan gives way to the fresh choice, even none.
        assert_eq!(follow_plan(&plan, 2.0 * h, gone, None, None), None);
        let later = Some(Choice::Hold(w(2, 12.0, 9.0, 0.9)));
        assert_eq!(
            follow_plan(&plan, 2.0 * h, busy, Some(18.0 * h), later),
            later
        );
    }

    #[test]
    fn a_window_another_task_keeps_is_not_offered() {
        let evening = w(1, 10.0, 9.0, 0.85);
        let h = 3600.0;
        assert!(kept_elsewhere(&evening, 0.0, [(12.0 * h, 14.0 * h)]));
        assert!(!kept_elsewhere(&evening, 0.0, [(19.0 * h, 20.0 * h)]));
        assert!(!kept_elsewhere(&evening, 0.0, []));
        // Seen an hour later, the same window starts an hour sooner.
        let sooner = w(1, 9.0, 9.0, 0.85);
        assert!(kept_elsewhere(&sooner, h, [(18.5 * h, 20.0 * h)]));
    }

    #[test]
    fn a_free_host_is_never_kept_from_a_start_now_by_a_held_window() {
        let h = 3600.0;
        let held = [(2.0 * h, 11.0 * h)];
        let (now, later) = (w(1, 0.0, 3.0, 0.9), w(1, 4.0, 3.0, 0.9));
        let rule = unbounded();
        assert!(!rule.kept(&now, 0.0, held));
        assert!(rule.kept(&later, 0.0, held));
        let old = WindowRule {
            free_now_kept: true,
            ..rule
        };
        assert!(old.kept(&now, 0.0, held));
    }

    #[test]
    fn anchoring_keeps_the_predictors_level_and_the_counts_difference() {
        // Counts see no difference: the window gets the predictor's chance.
        assert!((anchored(0.6, 0.6, 0.3) - 0.3).abs() < 1e-12);
        // Counts say the evening is better than now: better than 0.3, on
        // the predictor's level rather than the counts' 0.9.
        let evening = anchored(0.9, 0.6, 0.3);
        assert!(evening > 0.5 && evening < 0.9, "{evening}");
        // And worse stays worse.
        assert!(anchored(0.2, 0.6, 0.3) < 0.3);
        assert_eq!(anchored(f64::NAN, 0.5, 0.4), 0.4);
    }

    #[test]
    fn later_windows_start_when_the_host_is_free_and_step_by_slots() {
        let mut out = Vec::new();
        later_windows(3, 5400.0, 3600.0, |s| Some(s / HORIZON_SECS), &mut out);
        assert_eq!(out[0].start_in, 5400.0);
        assert_eq!(out[1].start_in, 7200.0);
        assert_eq!(out.last().map(|w| w.start_in), Some(HORIZON_SECS));
        assert!(out
            .iter()
            .all(|w| w.host == 3 && w.p == w.start_in / HORIZON_SECS));
        let mut none = Vec::new();
        later_windows(0, f64::INFINITY, 3600.0, |_| Some(1.0), &mut none);
        later_windows(0, 0.0, 3600.0, |_| None, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn counted_tr_reads_the_same_window_on_past_days_up_to_now() {
        // Hourly cells over 14 days from a Monday 00:00 UTC (2025-09-01):
        // the owner's compile kills a guest at 10:00 every day.
        let start = 1_756_684_800i64;
        let hours = 14 * 24;
        let fail: Vec<u8> = (0..hours)
            .map(|h| if h % 24 == 10 { 3 } else { 0 })
            .collect();
        let tl = Timeline::from_cells(start, 3600, fail, vec![1.0; hours]);
        let day = |d: i64, h: i64| (start + d * 86_400 + h * 3600) as f64;
        // Wednesday of week two, now 08:00; weekdays before it: 7 in the trace.
        let now = day(9, 8);
        // 09:00-10:00 passes on every past weekday; 09:00-11:00 never.
        let short = counted_tr(&tl, now, day(9, 9), 3600.0, HISTORY_DAYS).unwrap();
        let long = counted_tr(&tl, now, day(9, 9), 7200.0, HISTORY_DAYS).unwrap();
        assert!((short - 7.5 / 8.0).abs() < 1e-12, "{short}");
        assert!((long - 0.5 / 8.0).abs() < 1e-12, "{long}");
        // A window tomorrow counts today only once today's window has passed.
        let evening = counted_tr(&tl, now, day(10, 7), 7200.0, HISTORY_DAYS).unwrap();
        let after = counted_tr(&tl, day(9, 9), day(10, 7), 7200.0, HISTORY_DAYS).unwrap();
        assert!((evening - 7.5 / 8.0).abs() < 1e-12, "{evening}");
        assert!((after - 8.5 / 9.0).abs() < 1e-12, "{after}");
        // Nothing before the trace: no answer.
        assert_eq!(counted_tr(&tl, day(0, 8), day(0, 9), 3600.0, 10), None);
    }
}
