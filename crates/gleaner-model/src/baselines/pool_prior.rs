//! The pool's own prior (issue 29): what a host with no day of record
//! answers once it has heard enough of its pool, in place of the built-in
//! desktop population's survival ([`super::prior::no_record_tr`]) — the
//! typical TR curve of the members it heard, so a host in a pool of
//! servers does not start out as a desktop.
//!
//! **What counts.** A member's summary claims a TR curve from the moment it
//! computed it. It is read when the member has days of its own record
//! (`days_used` ≥ 1: a member answering with a prior itself is not heard,
//! so priors never echo round the pool), is usable now (S1 or S2: a failed
//! member's TR is 0 by rule, not by its record, and a new host's prior is
//! for a window that starts usable, as the built-in one is), and its
//! summary is at most [`MAX_AGE_SECS`] old. At most [`MAX_MEMBERS`] are
//! read, the most recently computed first.
//!
//! **The typical curve.** At each of the caller's lengths (the summaries'
//! ladder), the median of the members' TR whose curve reaches that length,
//! when at least [`MIN_MEMBERS`] do; past the first length that too few
//! reach, the curve keeps its last hazard ([`TrCurve`]). A median is what
//! peers' claims allow (conventions: a median, never the maximum): one
//! hostile member claiming TR 1 or 0 moves it at most to the neighbouring
//! honest claim. Every point is kept inside [[`TR_FLOOR`], [`TR_CEIL`]]: a
//! prior for a host nobody has seen never promises a window for certain,
//! nor its certain loss.
//!
//! Pure: the caller reads the members and the clock. It must not know the
//! wire format or how members are heard.

use crate::sched::curve::TrCurve;
use crate::state::State;

use super::prior::no_record_tr;

/// Members with a record needed at a length for the pool's median there;
/// fewer at the first length and the built-in prior stands.
pub const MIN_MEMBERS: usize = 5;
/// Members read at most, the most recently computed summaries first.
pub const MAX_MEMBERS: usize = 1024;
/// A summary older than this is not read: its windows started a day ago.
pub const MAX_AGE_SECS: i64 = 24 * 3600;
/// The pool prior's TR stays inside these.
pub const TR_FLOOR: f64 = 0.01;
pub const TR_CEIL: f64 = 0.99;

/// One member's claim as this node heard it.
#[derive(Debug, Clone, Copy)]
pub struct HeardCurve<'a> {
    /// Days of its own record behind the curve (0: it answers with a prior).
    pub days_used: u32,
    /// Its state is S1 or S2.
    pub usable: bool,
    /// When it computed the curve, Unix seconds.
    pub computed_at_unix: i64,
    /// TR over window lengths from then.
    pub curve: &'a TrCurve,
}

/// What a prior answer stands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorSource {
    /// The built-in desktop population ([`super::prior::population_survival`]).
    BuiltIn,
    /// The pool's typical curve, from this many members at its first length.
    Pool { members: usize },
}

impl PriorSource {
    /// How `status` and the wire name it.
    pub fn label(&self) -> &'static str {
        match self {
            PriorSource::BuiltIn => "built-in prior",
            PriorSource::Pool { .. } => "pool prior",
        }
    }
}

/// The pool's typical TR curve (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPrior {
    curve: TrCurve,
    members: usize,
}

impl PoolPrior {
    /// The typical curve of the members heard by `now_unix`, at `lengths`
    /// (seconds); `None` when fewer than [`MIN_MEMBERS`] count at the
    /// shortest.
    pub fn from_heard<'a>(
        heard: impl IntoIterator<Item = HeardCurve<'a>>,
        now_unix: i64,
        lengths: &[f64],
    ) -> Option<PoolPrior> {
        let mut members: Vec<HeardCurve<'a>> = heard
            .into_iter()
            .filter(|h| {
                let age = now_unix.saturating_sub(h.computed_at_unix);
                h.days_used >= 1
                    && h.usable
                    && (0..=MAX_AGE_SECS).contains(&age)
                    && !h.curve.points().is_empty()
            })
            .collect();
        members.sort_by_key(|h| std::cmp::Reverse(h.computed_at_unix));
        members.truncate(MAX_MEMBERS);
        let mut lengths: Vec<f64> = lengths
            .iter()
            .copied()
            .filter(|l| l.is_finite() && *l > 0.0)
            .collect();
        lengths.sort_by(f64::total_cmp);
        lengths.dedup();
        let mut points = Vec::with_capacity(lengths.len());
        let mut first = None;
        for &len in &lengths {
            let mut trs: Vec<f64> = members
                .iter()
                .filter(|h| h.curve.points().last().is_some_and(|&(t, _)| t >= len))
                .map(|h| h.curve.tr_at(len))
                .collect();
            if trs.len() < MIN_MEMBERS {
                break;
            }
            if first.is_none() {
                first = Some(trs.len());
            }
            trs.sort_by(f64::total_cmp);
            points.push((len, median(&trs).clamp(TR_FLOOR, TR_CEIL)));
        }
        Some(PoolPrior {
            curve: TrCurve::new(points),
            members: first?,
        })
    }

    /// TR of a window of `window_secs` for a host with no day of record
    /// whose window starts in `start` (unknown: as if usable): 0 from a
    /// failure state, else the typical curve kept inside the bounds.
    pub fn tr(&self, window_secs: u64, start: Option<State>) -> f64 {
        match start {
            Some(state) if state.is_failure() => 0.0,
            _ => self
                .curve
                .tr_at(window_secs as f64)
                .clamp(TR_FLOOR, TR_CEIL),
        }
    }

    /// Members the curve's first length was the median of.
    pub fn members(&self) -> usize {
        self.members
    }

    /// The typical curve's points, `(seconds, TR)`.
    pub fn points(&self) -> &[(f64, f64)] {
        self.curve.points()
    }
}

/// The prior a host with no day of record answers: the pool's when it has
/// one, else the built-in population's; and which it is.
pub fn prior_tr(
    pool: Option<&PoolPrior>,
    window_secs: u64,
    start: Option<State>,
) -> (f64, PriorSource) {
    match pool {
        Some(p) => (
            p.tr(window_secs, start),
            PriorSource::Pool { members: p.members },
        ),
        None => (no_record_tr(window_secs, start), PriorSource::BuiltIn),
    }
}

/// What a young host's forecast shrinks towards for a window of
/// `window_secs` that starts usable ([`super::prior::YoungHostPrior::apply_towards`]'s
/// p0): the pool's typical curve when the host answers with it, else the
/// built-in population's survival. The same prior a host with no day of
/// record answers with ([`prior_tr`]), so its answer does not jump to
/// another population when its first day arrives.
pub fn young_host_target(pool: Option<&PoolPrior>, window_secs: u64) -> f64 {
    prior_tr(pool, window_secs, None).0
}

/// The median of sorted values (the mean of the middle two for an even count).
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: f64 = 3600.0;
    const LADDER: [f64; 4] = [0.25 * HOUR, HOUR, 4.0 * HOUR, 16.0 * HOUR];
    const NOW: i64 = 1_760_000_000;

    /// A server-like member: TR `base` at 1 h, falling with length.
    fn server(base: f64) -> TrCurve {
        TrCurve::new(LADDER.iter().map(|&t| (t, base.powf(t / HOUR))))
    }

    fn heard(curve: &TrCurve) -> HeardCurve<'_> {
        HeardCurve {
            days_used: 20,
            usable: true,
            computed_at_unix: NOW - 600,
            curve,
        }
    }

    #[test]
    fn five_members_with_records_make_a_pool_prior_fewer_do_not() {
        let curves: Vec<TrCurve> = [0.97, 0.98, 0.99, 0.985, 0.975].map(server).to_vec();
        let prior = PoolPrior::from_heard(curves.iter().map(heard), NOW, &LADDER).unwrap();
        assert_eq!(prior.members(), 5);
        // The median member is 0.98 at 1 h: a server pool, not a desktop.
        let (tr, source) = prior_tr(Some(&prior), 3600, Some(State::S1));
        assert!((tr - 0.98).abs() < 1e-12, "{tr}");
        assert_eq!(source, PriorSource::Pool { members: 5 });
        assert_eq!(source.label(), "pool prior");
        let (built_in, source) = prior_tr(None, 3600, Some(State::S1));
        assert!((built_in - super::super::prior::population_survival(3600)).abs() < 1e-12);
        assert_eq!(source.label(), "built-in prior");
        assert!(tr > built_in + 0.1);
        // Failing now: 0, as the built-in prior says.
        assert_eq!(prior.tr(3600, Some(State::S3)), 0.0);
        // Four members are not enough.
        assert!(PoolPrior::from_heard(curves[..4].iter().map(heard), NOW, &LADDER).is_none());
    }

    #[test]
    fn members_without_a_record_failing_now_or_heard_long_ago_do_not_count() {
        let curves: Vec<TrCurve> = [0.97, 0.98, 0.99, 0.985, 0.975].map(server).to_vec();
        for spoil in 0..3 {
            let members = curves.iter().enumerate().map(|(i, c)| {
                let mut h = heard(c);
                if i == 0 {
                    match spoil {
                        0 => h.days_used = 0,
                        1 => h.usable = false,
                        _ => h.computed_at_unix = NOW - MAX_AGE_SECS - 1,
                    }
                }
                h
            });
            assert!(
                PoolPrior::from_heard(members, NOW, &LADDER).is_none(),
                "{spoil}"
            );
        }
    }

    #[test]
    fn one_liar_does_not_move_the_prior_past_the_honest_claims() {
        let honest: Vec<TrCurve> = [0.9, 0.95, 0.97, 0.99, 0.8].map(server).to_vec();
        let clean = PoolPrior::from_heard(honest.iter().map(heard), NOW, &LADDER).unwrap();
        for claim in [0.0, 1.0] {
            let liar = TrCurve::new(LADDER.iter().map(|&t| (t, claim)));
            let all = honest.iter().chain(std::iter::once(&liar)).map(heard);
            let lied = PoolPrior::from_heard(all, NOW, &LADDER).unwrap();
            for &len in &LADDER {
                let secs = len as u64;
                let mut trs: Vec<f64> = honest.iter().map(|c| c.tr_at(len)).collect();
                trs.sort_by(f64::total_cmp);
                // Between the honest claims either side of the honest median.
                let (lo, hi) = (trs[1].max(TR_FLOOR), trs[3].min(TR_CEIL));
                let tr = lied.tr(secs, None);
                assert!(
                    lo <= tr && tr <= hi,
                    "{claim} at {len}: {tr} outside [{lo}, {hi}]"
                );
                let moved = (tr - clean.tr(secs, None)).abs();
                assert!(
                    moved <= 0.5 * (hi - lo) + 1e-12,
                    "{claim} at {len}: {moved}"
                );
            }
        }
        // A pool that claims certainty still gets a bounded prior.
        let sure: Vec<TrCurve> = (0..5)
            .map(|_| TrCurve::new(LADDER.iter().map(|&t| (t, 1.0))))
            .collect();
        let prior = PoolPrior::from_heard(sure.iter().map(heard), NOW, &LADDER).unwrap();
        assert_eq!(prior.tr(3600, None), TR_CEIL);
    }

    /// A server joins a pool of servers and answers with their prior; its
    /// first day (never failing, like theirs) arrives. Its answer must lie
    /// between the prior it answered the moment before and its own record,
    /// not fall towards the built-in desktop population.
    #[test]
    fn a_young_host_with_the_pool_prior_does_not_jump_when_its_first_day_arrives() {
        use crate::baselines::prior::YoungHostPrior;
        use crate::baselines::test_series::{series_from, DAY, MONDAY};
        use crate::baselines::Logistic;
        use crate::predict::PredictRequest;
        use crate::predictor::ReliabilityPredictor;
        use crate::state::Thresholds;
        use std::sync::Arc;
        let curves: Vec<TrCurve> = [0.96, 0.97, 0.98, 0.99, 0.975].map(server).to_vec();
        let pool = PoolPrior::from_heard(curves.iter().map(heard), NOW, &LADDER).unwrap();
        // Monday and Tuesday, never failing; Tuesday's windows learn from Monday.
        let series = series_from(2, 60, |_| 5.0);
        let mut outside = 0;
        for (hour, secs) in [(10, 3600), (10, 4 * 3600), (2, 4 * 3600), (20, 16 * 3600)] {
            let req = PredictRequest::new(MONDAY + DAY + hour * 3600, secs, Thresholds::default());
            let before = pool.tr(secs, Some(State::S1));
            let ask = |l: Logistic| l.forecast(&series, &req).unwrap().tr;
            let own = ask(Logistic::with_own_cache().with_prior(YoungHostPrior::NONE));
            let pooled = ask(Logistic::with_own_cache().towards_pool(Some(Arc::new(pool.clone()))));
            let built_in = ask(Logistic::with_own_cache());
            let (lo, hi) = (before.min(own), before.max(own));
            assert!(
                (lo - 1e-9..=hi + 1e-9).contains(&pooled),
                "{hour} h, {secs} s: {pooled} outside [{lo}, {hi}]"
            );
            // Towards the built-in population the same day drags it down,
            // at 1 h below both the prior and its own record: the jump this
            // prevents.
            assert!(built_in < pooled, "{hour} h, {secs} s: {built_in}");
            outside += usize::from(built_in < lo);
        }
        assert!(outside >= 1);
    }

    #[test]
    fn lengths_too_few_members_reach_are_left_to_the_curves_tail() {
        // Five members reach 1 h, only two reach 16 h.
        let short: Vec<TrCurve> = (0..3)
            .map(|_| TrCurve::new([(0.25 * HOUR, 0.99), (HOUR, 0.95)]))
            .collect();
        let long: Vec<TrCurve> = (0..2).map(|_| server(0.95)).collect();
        let prior =
            PoolPrior::from_heard(short.iter().chain(&long).map(heard), NOW, &LADDER).unwrap();
        assert_eq!(prior.points().len(), 2, "{:?}", prior.points());
        let at_16h = prior.tr(16 * 3600, None);
        assert!(at_16h < prior.tr(3600, None) && at_16h >= TR_FLOOR);
    }
}
