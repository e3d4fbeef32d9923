//! What every run of an estimate needs of each host, computed once per
//! estimate: its slowdown, its horizon, its curve laid out for sampling and
//! for the rule's expected turnarounds, its past, and how the rule weighs
//! it as a run goes on: by its curve at submission until it first fails,
//! then by the up-spell a run draws after a return, each read as of how
//! long the host has been up.

use super::super::curve::{FailureSampler, PreparedCurve, TrCurve};
use super::bootstrap::SpellBootstrap;
use super::replay::DayReplay;
use super::{EstimateHost, PastFailures};
use rand::Rng;

/// What a run needs of each host, computed once per estimate.
pub(super) struct HostFacts {
    /// SP = 1/Γ (infinite when the host cannot run anything).
    pub(super) slowdown: f64,
    /// Runs this long or longer can never succeed here (TR below 1e-12).
    pub(super) horizon: f64,
    pub(super) sampler: FailureSampler,
    /// The host's curve, laid out for the rule's expected turnarounds.
    pub(super) curve: PreparedCurve,
    pub(super) recovery: f64,
    pub(super) past: Option<PastFailures>,
    /// The curve's last window and its TR there: beyond it, a host with a
    /// known failure rate fails at that rate (see
    /// [`super::run::Run::first_failure_at`]; a host with past days draws
    /// its first failure from them instead).
    pub(super) curve_end: (f64, f64),
    pub(super) checkpoint: f64,
    pub(super) checkpoint_cost: f64,
    pub(super) bootstrap: Option<SpellBootstrap>,
    /// The host's past days, which a run replays.
    pub(super) replay: Option<DayReplay>,
    /// The rule's curve for the host once it is back from a failure (or
    /// from the outage it was in at submission): the survival of the
    /// up-spell a run draws after a return ([`back_curve`]). `None`: the
    /// same as `curve`.
    pub(super) back: Option<PreparedCurve>,
    /// The host as the rule weighs it, per [`block`]: its curve (`curve`
    /// or `back`) read as of an age.
    pub(super) views: Vec<AgedView>,
    /// The longest of the views' horizons: a task at least this long can
    /// never succeed here, whenever the rule weighs it.
    pub(super) max_horizon: f64,
}

/// Ages (seconds up since the host's clock started: its return, or the
/// submission) the rule reads a host's curve as of: the age it has reached,
/// rounded down to one of these. Finer where bursty up-spells (many of a few
/// minutes, some of days) change most.
pub(super) const AGES: [f64; 8] = [
    0.0, 900.0, 1_800.0, 3_600.0, 7_200.0, 14_400.0, 28_800.0, 57_600.0,
];

/// How the rule weighs a host in a run: `back` (it has come back from a
/// failure, or from the outage it was in at submission) and up for `age`
/// seconds; an index into [`HostFacts::views`] and into a memo row's
/// blocks: [`AGES`]' index, plus `AGES.len()` when back.
pub(super) fn block(back: bool, age: f64) -> usize {
    let k = AGES.partition_point(|&a| a <= age).saturating_sub(1);
    if back {
        AGES.len() + k
    } else {
        k
    }
}

/// A curve read as of an age: survival there, its integral up to there, and
/// the horizon from there.
#[derive(Debug, Clone, Copy)]
pub(super) struct AgedView {
    back: bool,
    /// The age read at (0 when the curve leaves no chance to have reached it).
    age: f64,
    /// ∫₀^age TR.
    before: f64,
    /// Runs this long or longer from `age` on can never succeed (TR falls
    /// below 1e-12 of TR at `age`).
    horizon: f64,
}

/// Survival below this share of survival at the age read is none.
const TINY: f64 = 1e-12;

impl AgedView {
    fn new(curve: &TrCurve, back: bool, age: f64) -> AgedView {
        let at = curve.tr_at(age);
        let age = if at > 1e-9 { age } else { 0.0 };
        let at = if age > 0.0 { at } else { 1.0 };
        let horizon = curve
            .failure_time_at(TINY * at)
            .map_or(f64::INFINITY, |t| t - age);
        AgedView {
            back,
            age,
            before: curve.integral(age),
            horizon,
        }
    }
}

impl HostFacts {
    pub(super) fn new(host: &EstimateHost) -> HostFacts {
        let past = host
            .past
            .filter(|p| p.up_secs.is_finite() && p.up_secs > 0.0);
        let bootstrap = host.spells.as_ref().and_then(SpellBootstrap::new);
        let back = back_curve(&host.view.curve, past.as_ref(), bootstrap.as_ref());
        let views = [false, true]
            .iter()
            .flat_map(|&b| AGES.iter().map(move |&age| (b, age)))
            .map(|(b, age)| match (&back, b) {
                (Some(c), true) => AgedView::new(c, true, age),
                _ => AgedView::new(&host.view.curve, false, age),
            })
            .collect::<Vec<AgedView>>();
        let max_horizon = views.iter().map(|v| v.horizon).fold(0.0, f64::max);
        HostFacts {
            slowdown: host.view.expected_run_secs(1.0),
            horizon: host
                .view
                .curve
                .failure_time_at(1e-12)
                .unwrap_or(f64::INFINITY),
            sampler: FailureSampler::new(&host.view.curve),
            curve: PreparedCurve::new(&host.view.curve),
            recovery: host.recovery_secs.max(0.0),
            past,
            curve_end: host
                .view
                .curve
                .points()
                .last()
                .copied()
                .unwrap_or((0.0, 1.0)),
            checkpoint: host.checkpoint_secs.max(0.0),
            checkpoint_cost: if host.checkpoint_cost_secs.is_finite() {
                host.checkpoint_cost_secs.max(0.0)
            } else {
                0.0
            },
            bootstrap,
            replay: host.days.as_ref().and_then(DayReplay::new),
            back: back.as_ref().map(PreparedCurve::new),
            views,
            max_horizon,
        }
    }

    /// This run's failure rate after a return, drawn from the past's
    /// posterior; `None`: redraw from the curve.
    pub(super) fn draw_rate<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<f64> {
        self.past.and_then(|p| p.draw_rate(rng))
    }

    /// [`super::super::place::HostView::expected_turnaround`] of a task of `runtime` reference
    /// seconds, bit for bit (`slowdown` is `expected_run_secs(1.0)`).
    pub(super) fn expected_turnaround(&self, runtime: f64) -> f64 {
        let run = runtime * self.slowdown;
        if run.is_finite() {
            self.curve.expected_time_with_restarts(run)
        } else {
            f64::INFINITY
        }
    }

    /// [`Self::expected_turnaround`] on the host as the rule weighs it in
    /// [`block`] `block`: its curve (at submission, or for a host just
    /// back) read as of the block's age, TR(t | up for `age`) =
    /// TR(age + t) / TR(age), and so ∫_age^(age + r) TR / TR(age + r).
    /// Block 0 (age 0, as at submission) is `expected_turnaround` bit for bit.
    pub(super) fn turnaround_in(&self, runtime: f64, block: usize) -> f64 {
        let Some(view) = self.views.get(block) else {
            return self.expected_turnaround(runtime);
        };
        let curve = match (&self.back, view.back) {
            (Some(c), true) => c,
            _ => &self.curve,
        };
        let run = runtime * self.slowdown;
        if !run.is_finite() {
            return f64::INFINITY;
        }
        if view.age == 0.0 {
            return curve.expected_time_with_restarts(run);
        }
        if run >= view.horizon {
            return f64::INFINITY;
        }
        let end = view.age + run;
        (curve.integral(end) - view.before) / curve.tr_at(end)
    }

    /// The horizon of the host as the rule weighs it in `block` (see
    /// [`Self::turnaround_in`]).
    pub(super) fn horizon_in(&self, block: usize) -> f64 {
        self.views.get(block).map_or(self.horizon, |v| v.horizon)
    }
}

/// Window lengths the curve of a host just back is given at besides its
/// past up-spells' (30 min to four weeks).
const BACK_WINDOWS: [f64; 8] = [
    1_800.0,
    3_600.0,
    4.0 * 3_600.0,
    12.0 * 3_600.0,
    86_400.0,
    2.0 * 86_400.0,
    7.0 * 86_400.0,
    28.0 * 86_400.0,
];

/// TR over window lengths for a host just back from a failure: the chance
/// that the up-spell a run draws after a return ([`super::run::Run::next_failure_after`])
/// outlasts the window, averaged over the run's draws. Its past up-spells
/// by their counts, with the bootstrap's fallback; a cut spell and the
/// fallback last on at the past's rate, taken over its posterior (Lomax:
/// (1 + t / up)^−(failures + ½)), or without a past, as the curve says.
/// Without spells, the past's rate alone; with neither, `None`: a run
/// draws the next failure from the curve, as the rule weighs it.
///
/// The curve at submission is the host's TR for windows that start then,
/// in the state it was in then (off for the weekend, say); once the host
/// has failed and come back in a run, the run draws its failures from
/// this law, and the rule weighs it by the same one.
pub(super) fn back_curve(
    curve: &TrCurve,
    past: Option<&PastFailures>,
    bootstrap: Option<&SpellBootstrap>,
) -> Option<TrCurve> {
    if past.is_none() && bootstrap.is_none() {
        return None;
    }
    let tail = |t: f64| match past {
        Some(p) => (1.0 + t / p.up_secs).powf(-(f64::from(p.failures) + 0.5)),
        None => curve.tr_at(t),
    };
    let mut windows: Vec<f64> = BACK_WINDOWS.to_vec();
    let Some(b) = bootstrap else {
        return Some(TrCurve::new(windows.into_iter().map(|t| (t, tail(t)))));
    };
    windows.extend(b.up.iter().map(|s| s.0));
    let total = b.up_mass.last().copied().unwrap_or(0.0);
    let fallback = b.up_mass.first().copied().unwrap_or(0.0);
    let survival = |t: f64| {
        let spells: f64 =
            b.up.iter()
                .map(|&(len, count, cut)| {
                    count
                        * if t < len {
                            1.0
                        } else if cut {
                            tail(t - len)
                        } else {
                            0.0
                        }
                })
                .sum();
        (fallback * tail(t) + spells) / total
    };
    Some(TrCurve::new(windows.into_iter().map(|t| (t, survival(t)))))
}

/// Whether a task of `runtime` reference seconds can succeed on a host of
/// this slowdown and horizon (its expected turnaround there is finite):
/// what the rule's bulk asks of each free host (`QueueTurnarounds::can_run`),
/// with the horizon of the host as the rule sees it now
/// ([`HostFacts::horizon_in`]).
pub(super) fn fits(runtime: f64, slowdown: f64, horizon: f64) -> bool {
    let run = runtime * slowdown;
    run.is_finite() && run < horizon
}
