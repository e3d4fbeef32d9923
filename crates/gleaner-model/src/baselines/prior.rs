//! The prior for a young host: how far `logistic`'s forecast is trusted when
//! the host's record is only days long, and what it leans on instead.
//!
//! Why: a fit on a few days learns a few days' hours. The windows of one day
//! overlap and share the owner's mood of that day, so 24 hourly windows are
//! worth about one look at the host, not 24: a host whose only day was a
//! quiet Sunday forecasts near 1 for a busy Monday. The forecast is
//! therefore shrunk by the record's effective days, not its windows:
//!
//! ```text
//! base = (d · r + POPULATION_DAYS · p0(T)) / (d + POPULATION_DAYS)
//! TR   = (d · p + BASE_DAYS · base)        / (d + BASE_DAYS)
//! ```
//!
//! - `p`: the fit's forecast; `r`: the host's own share of surviving windows
//!   that began in the same state (the fit's class share);
//! - `d`: effective days of record, each training day weighing its recency
//!   weight (so a long record counts about 30 days at a 28-day half-life);
//! - `p0(T)`: a population survival for a window of length T
//!   ([`population_survival`]), the built-in prior a host has before its
//!   own days outweigh it.
//!
//! A Beta prior in day units, twice: on the host's base rate (strength
//! [`POPULATION_DAYS`]) and on the hour-by-hour forecast (strength
//! [`BASE_DAYS`]). On a long record both weights are a few per cent.
//! Pure code: no clock, no I/O. It must not know how the evaluation scores it.

use crate::state::State;

/// Days of its own record a host's base rate is worth against the fitted
/// forecast.
pub const BASE_DAYS: f64 = 1.0;
/// Days of a host's own record the population survival is worth against
/// its base rate.
pub const POPULATION_DAYS: f64 = 0.5;

/// The population survival p0(T) at a few window lengths (hours, share of
/// windows starting in S1/S2 that met no failure). Between them log p0 is
/// interpolated linearly in T; past the last, its last slope continues.
/// Measured on volunteer desktops as the project models them, never on the
/// hosts the prior is evaluated on: two 140-day `gleaner trace synth` hosts
/// of seeds 201 and 202 (`--step 60`), every window of 270 days at every
/// hour, `gleaner eval --methods freq --test-from 0 --mem 256` (their
/// `empirical_tr`: 0.843, 0.755, 0.690, 0.587, 0.383), rounded.
const POPULATION: [(f64, f64); 5] = [
    (1.0, 0.84),
    (2.0, 0.75),
    (3.0, 0.69),
    (5.0, 0.59),
    (10.0, 0.38),
];

/// The prior's two strengths, in days of a host's own record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct YoungHostPrior {
    /// Days the host's base rate is worth against the fitted forecast.
    pub base_days: f64,
    /// Days the population survival is worth against the host's base rate.
    pub population_days: f64,
}

impl YoungHostPrior {
    /// The prior `logistic` answers with.
    pub const DEFAULT: YoungHostPrior = YoungHostPrior {
        base_days: BASE_DAYS,
        population_days: POPULATION_DAYS,
    };

    /// No prior: the fit's forecast as it is (`logistic-noprior`).
    pub const NONE: YoungHostPrior = YoungHostPrior {
        base_days: 0.0,
        population_days: 0.0,
    };

    /// The forecast `fitted` of a host with `days` effective days of record
    /// whose own share for the start state is `host_rate`, for a window of
    /// `window_secs`, shrunk as the module says. Inputs out of range are
    /// clamped (a probability into [0, 1], days to at least 0); one that is
    /// not a number is not known (no days, no rate, no fitted forecast).
    /// [`YoungHostPrior::NONE`] returns `fitted` unchanged.
    pub fn apply(&self, fitted: f64, host_rate: f64, days: f64, window_secs: u64) -> f64 {
        self.apply_towards(fitted, host_rate, days, population_survival(window_secs))
    }

    /// [`apply`](Self::apply) towards another population survival `p0`
    /// for the window (a host that answers with its pool's prior shrinks
    /// towards the pool's typical curve, so its answer does not jump when
    /// its first day arrives: [`super::pool_prior::young_host_target`]).
    /// `p0` is clamped into [0, 1]; one that is not a number is not known:
    /// the host's own rate stands in for it (0.5 when that is not known
    /// either).
    pub fn apply_towards(&self, fitted: f64, host_rate: f64, days: f64, p0: f64) -> f64 {
        let (k, a) = (self.base_days.max(0.0), self.population_days.max(0.0));
        if k == 0.0 {
            return fitted;
        }
        let d = if days.is_finite() { days.max(0.0) } else { 0.0 };
        let r = host_rate.is_finite().then(|| host_rate.clamp(0.0, 1.0));
        let p0 = if p0.is_finite() {
            p0.clamp(0.0, 1.0)
        } else {
            r.unwrap_or(0.5)
        };
        let r = r.unwrap_or(p0);
        let base = if d + a > 0.0 {
            (d * r + a * p0) / (d + a)
        } else {
            p0
        };
        if !fitted.is_finite() {
            return base;
        }
        (d * fitted.clamp(0.0, 1.0) + k * base) / (d + k)
    }
}

/// p0(T): the population survival of a window of `window_secs`.
pub fn population_survival(window_secs: u64) -> f64 {
    let hours = window_secs as f64 / 3600.0;
    let mut prev = (0.0, 1.0f64);
    for &(h, p) in &POPULATION {
        if hours <= h {
            let f = (hours - prev.0) / (h - prev.0);
            return (prev.1.ln() + f * (p.ln() - prev.1.ln())).exp();
        }
        prev = (h, p);
    }
    let [.., (h1, p1), (h2, p2)] = POPULATION;
    let slope = (p2.ln() - p1.ln()) / (h2 - h1);
    (p2.ln() + slope * (hours - h2)).exp()
}

/// TR for a host with no day of its own record yet (a new volunteer's first
/// hours): the population survival p0(T) when the window starts in S1 or S2,
/// or when its start state is not known; 0 when it starts in a failure
/// state (S3, S4, S5: a guest placed now is already suspended past its
/// limit, short of memory or revoked). What `logistic` answers at zero days
/// ([`YoungHostPrior::apply`] with no days and no fit), so the answer does
/// not jump when the first day arrives.
pub fn no_record_tr(window_secs: u64, start: Option<State>) -> f64 {
    match start {
        Some(state) if state.is_failure() => 0.0,
        _ => population_survival(window_secs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_with_no_record_answers_the_population_unless_it_is_failing_now() {
        for secs in [600, 3600, 3 * 3600, 10 * 3600] {
            let p0 = population_survival(secs);
            for start in [None, Some(State::S1), Some(State::S2)] {
                assert_eq!(no_record_tr(secs, start), p0, "{secs} s from {start:?}");
            }
            for start in [State::S3, State::S4, State::S5] {
                assert_eq!(
                    no_record_tr(secs, Some(start)),
                    0.0,
                    "{secs} s from {start:?}"
                );
            }
            // The same as the young-host prior at zero days: no jump when
            // the first day of record arrives.
            let at_zero = YoungHostPrior::DEFAULT.apply(f64::NAN, f64::NAN, 0.0, secs);
            assert!((no_record_tr(secs, None) - at_zero).abs() < 1e-12);
        }
    }

    #[test]
    fn population_survival_meets_its_table_and_falls_with_length() {
        for (h, p) in POPULATION {
            let at = population_survival((h * 3600.0) as u64);
            assert!((at - p).abs() < 1e-12, "{h} h: {at}");
        }
        assert!((population_survival(0) - 1.0).abs() < 1e-12);
        let mut last = 1.0;
        for secs in (0..=48).map(|h| h * 1800) {
            let p = population_survival(secs);
            assert!(p <= last && p > 0.0, "{secs}: {p}");
            last = p;
        }
        // Past the table the last slope continues: at twice the last
        // length past the one before, the last ratio applies twice.
        let [.., (h1, p1), (h2, p2)] = POPULATION;
        let beyond = h2 + 2.0 * (h2 - h1);
        let want = p2 * (p2 / p1).powi(2);
        let at = population_survival((beyond * 3600.0) as u64);
        assert!((at - want).abs() < 1e-9, "{at} against {want}");
    }

    /// The two Beta steps worked by hand for one day of record.
    #[test]
    fn one_day_of_record_leans_on_the_base_rate_and_the_population() {
        let prior = YoungHostPrior {
            base_days: 2.0,
            population_days: 1.0,
        };
        // base = (1·0.9 + 1·0.84) / 2 = 0.87; TR = (1·0.2 + 2·0.87) / 3 = 0.646 6….
        let tr = prior.apply(0.2, 0.9, 1.0, 3600);
        assert!((tr - 1.94 / 3.0).abs() < 1e-12, "{tr}");
        // No record at all: the population survival.
        assert!((prior.apply(0.2, 0.9, 0.0, 3600) - 0.84).abs() < 1e-12);
    }

    #[test]
    fn towards_another_population_the_prior_starts_there_and_fades_the_same() {
        let prior = YoungHostPrior::DEFAULT;
        for secs in [3600, 3 * 3600, 10 * 3600] {
            // `apply` is `apply_towards` the built-in population.
            let built_in = population_survival(secs);
            for (p, r, d) in [(0.3, 0.6, 1.0), (0.9, 0.95, 3.0), (f64::NAN, f64::NAN, 0.0)] {
                assert_eq!(
                    prior.apply(p, r, d, secs),
                    prior.apply_towards(p, r, d, built_in)
                );
            }
            // At zero days it answers the population it was given: a host
            // that answered the pool's prior goes on from it.
            assert_eq!(prior.apply_towards(f64::NAN, f64::NAN, 0.0, 0.97), 0.97);
            assert_eq!(prior.apply_towards(0.2, 0.4, 0.0, 0.97), 0.97);
            // The pull towards it fades with days as the built-in one does.
            let gap = |d: f64| (prior.apply_towards(0.5, 0.5, d, 0.97) - 0.5).abs();
            assert!(gap(1.0) > gap(3.0) && gap(3.0) > gap(30.0) && gap(30.0) < 0.03);
        }
        // An unknown population: the host's rate, or 0.5 without one.
        assert_eq!(prior.apply_towards(f64::NAN, 0.8, 0.0, f64::NAN), 0.8);
        assert_eq!(prior.apply_towards(f64::NAN, f64::NAN, 0.0, f64::NAN), 0.5);
        assert_eq!(prior.apply_towards(f64::NAN, f64::NAN, 0.0, 7.0), 1.0);
    }

    #[test]
    fn the_prior_fades_as_days_arrive_and_none_changes_nothing() {
        let prior = YoungHostPrior::DEFAULT;
        let pull = |days: f64| (prior.apply(0.1, 0.8, days, 3 * 3600) - 0.1).abs();
        assert!(pull(1.0) > pull(3.0) && pull(3.0) > pull(7.0) && pull(7.0) > pull(30.0));
        assert!(pull(30.0) < 0.03, "{}", pull(30.0));
        for days in [0.0, 1.0, 30.0] {
            assert_eq!(YoungHostPrior::NONE.apply(0.1, 0.8, days, 3600), 0.1);
        }
        // Hostile inputs stay probabilities.
        for (p, r, d) in [
            (2.0, -1.0, f64::NAN),
            (f64::NAN, 0.5, 1.0),
            (-0.5, 2.0, -3.0),
            (0.5, f64::INFINITY, f64::INFINITY),
        ] {
            let tr = prior.apply(p, r, d, 3600);
            assert!((0.0..=1.0).contains(&tr), "{p} {r} {d}: {tr}");
        }
    }
}
