//! `logistic+hourbias`: `logistic` with its log-odds corrected by the hour
//! of day, per host and window length: TR = σ(logit p + c(h)), p
//! `logistic`'s forecast, h W's local hour and c(h) = a + Σ_{k=1,2}
//! (u_k cos 2πkh/24 + v_k sin 2πkh/24), learned on the host's own past
//! forecasts — every hourly window of every past day up to
//! [`MAX_PAST_DAYS`], each forecast by `logistic` as it was at the window's
//! start — with forgetting ([`HALF_LIFE_DAYS`]).
//!
//! Why (round seven's diagnosis, `docs/accuracy.md`): on desktop hosts at
//! 3–10 h `logistic`'s error out of sample is a bias by the hour the window
//! starts — windows starting before the owner's working day (04–11 h) are
//! forecast too high, those starting in the afternoon and evening (12–23 h)
//! too low, by up to 0.09 at 10 h — and it is the same from week to week,
//! so the host's past forecasts show it. A Platt slope on the forecast
//! (tried first, on development hosts only) did not carry over from past to
//! future; the hour's bias did.
//!
//! - Past windows: one per local hour of each past day, of the asked length
//!   and step, begun in a transient state and ended by W's local midnight
//!   (the correction is a function of the record before W's date: no
//!   peeking). A window `logistic` refuses is left out.
//! - Fit: ridge logistic regression of the outcome with offset logit p on
//!   the five terms of c(h), each window weighing 2^(−age/[`HALF_LIFE_DAYS`])
//!   (age in days, yesterday 0), pulled towards c = 0 with [`RIDGE`].
//! - Fewer than [`MIN_PAST_DAYS`] days with a scored window: `logistic`.
//!
//! Cost: as `nws`, a past day's (forecast, hour, outcome) triples are
//! cached once all its windows have ended, and a date's correction once per
//! record before its midnight; an answer is `logistic`'s plus one lookup,
//! four cosines and a sigmoid.
//! Pure code: no I/O, no clock.

use super::past_days::{each_past_window, PastDayCache, PastDayLearner};
use super::ridge::{dot, sigmoid, solve};
use super::Logistic;
use crate::predict::{PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use jiff::civil::Date;
use jiff::Timestamp;
use std::sync::{Arc, OnceLock};

/// Forgetting of a past day's windows: `logistic`'s own half-life (the
/// correction is trusted as long as the data the fits learn from).
pub const HALF_LIFE_DAYS: f64 = super::logistic::HALF_LIFE_DAYS;
/// Past days read: `logistic`'s own reach.
pub const MAX_PAST_DAYS: i64 = super::logistic::MAX_TRAINING_DAYS;
/// Fewer days with a scored window than this: `logistic` itself. Two weeks,
/// as `nws` and the held-out span of `logistic+cal` and `logistic+iso`.
pub const MIN_PAST_DAYS: usize = 14;
/// Pull of the correction's terms towards 0: `logistic+cal`'s, for the same
/// reason (one host's hourly windows overlap and count for less than their
/// number).
pub const RIDGE: f64 = super::logistic::RECAL_RIDGE;
/// Terms of c(h): the intercept and two harmonics of the day.
pub const TERMS: usize = 5;
/// Forecasts are kept inside [EPS, 1 − EPS] (a logit needs it).
const EPS: f64 = 1e-3;
/// Newton steps at most, and the move below which the fit stops.
const MAX_STEPS: usize = 25;
const MIN_MOVE: f64 = 1e-7;

/// One past window: the base's log-odds, its local start hour (fractional)
/// and whether it survived (1).
type Past = (f64, f64, f64);

/// The terms of c(h) at local hour `hour` (0 ≤ hour < 24, fractional).
pub fn terms(hour: f64) -> [f64; TERMS] {
    let x = std::f64::consts::TAU * hour / 24.0;
    [1.0, x.cos(), x.sin(), (2.0 * x).cos(), (2.0 * x).sin()]
}

/// A fitted correction, or none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HourCorrection {
    /// Coefficients of [`terms`].
    pub coef: [f64; TERMS],
    /// Past days with at least one scored window (0: no correction).
    pub days: usize,
}

impl HourCorrection {
    /// The correction that changes nothing.
    pub const NONE: HourCorrection = HourCorrection {
        coef: [0.0; TERMS],
        days: 0,
    };

    /// c(hour), added to the log-odds.
    pub fn shift(&self, hour: f64) -> f64 {
        dot(&self.coef, &terms(hour))
    }

    /// σ(logit p + c(hour)), inside [EPS, 1 − EPS].
    pub fn apply(&self, p: f64, hour: f64) -> f64 {
        sigmoid(logit(p) + self.shift(hour)).clamp(EPS, 1.0 - EPS)
    }

    /// Fits the correction to `days` (each `(age, that day's windows)`, age
    /// 0 for yesterday); none with fewer than [`MIN_PAST_DAYS`] days
    /// holding a window.
    pub fn fit(days: &[(i64, Arc<Vec<Past>>)]) -> HourCorrection {
        let scored = days.iter().filter(|(_, p)| !p.is_empty()).count();
        if scored < MIN_PAST_DAYS {
            return HourCorrection::NONE;
        }
        let rows: Vec<([f64; TERMS], f64, f64, f64)> = days
            .iter()
            .flat_map(|(age, pairs)| {
                let w = (-(*age).max(0) as f64 / HALF_LIFE_DAYS).exp2();
                pairs
                    .iter()
                    .map(move |&(z, hour, y)| (terms(hour), z, w, y))
            })
            .collect();
        match fit_offset(&rows) {
            Some(coef) => HourCorrection { coef, days: scored },
            None => HourCorrection::NONE,
        }
    }
}

/// Ridge logistic regression with an offset: minimises ½ [`RIDGE`] |c|² +
/// Σ w (log(1 + e^η) − y η), η = offset + c·x, by Newton's method (the loss
/// is convex and the ridge makes it strictly so; each step is halved until
/// the loss goes down). `None` when a step cannot be solved. Rows are
/// (x, offset, weight, outcome); `logistic+hostcal` fits its two terms with
/// it too.
pub(super) fn fit_offset<const N: usize>(rows: &[([f64; N], f64, f64, f64)]) -> Option<[f64; N]> {
    let loss = |c: &[f64; N]| -> f64 {
        let penalty = 0.5 * RIDGE * dot(c, c);
        rows.iter().fold(penalty, |acc, (x, z, w, y)| {
            let eta = z + dot(c, x);
            let softplus = if eta > 0.0 {
                eta + (-eta).exp().ln_1p()
            } else {
                eta.exp().ln_1p()
            };
            acc + w * (softplus - y * eta)
        })
    };
    let mut c = [0.0; N];
    let mut current = loss(&c);
    for _ in 0..MAX_STEPS {
        let mut grad = c.map(|ci| RIDGE * ci);
        let mut hess = [[0.0; N]; N];
        for (i, row) in hess.iter_mut().enumerate() {
            row[i] = RIDGE;
        }
        for (x, z, w, y) in rows {
            let p = sigmoid(z + dot(&c, x));
            let r = w * (p - y);
            let k = w * (p * (1.0 - p)).max(1e-9);
            for i in 0..N {
                grad[i] += r * x[i];
                for j in 0..N {
                    hess[i][j] += k * x[i] * x[j];
                }
            }
        }
        let delta = solve(hess, grad)?;
        let mut scale = 1.0;
        let mut moved = 0.0f64;
        for _ in 0..30 {
            let trial: [f64; N] = std::array::from_fn(|i| c[i] - scale * delta[i]);
            let trial_loss = loss(&trial);
            if trial_loss.is_finite() && trial_loss <= current {
                moved = delta.iter().fold(0.0, |m, d| m.max((scale * d).abs()));
                c = trial;
                current = trial_loss;
                break;
            }
            scale *= 0.5;
        }
        if moved <= MIN_MOVE {
            break;
        }
    }
    c.iter().all(|x| x.is_finite()).then_some(c)
}

pub(super) fn logit(p: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    (p / (1.0 - p)).ln()
}

/// The `logistic+hourbias` method (or any base method with its own past's
/// correction, for tests).
pub struct HourBias {
    base: Box<dyn ReliabilityPredictor>,
    cache: Arc<PastDayCache<Arc<Vec<Past>>, HourCorrection>>,
}

impl HourBias {
    /// The registry's method: `logistic` with its process-wide cache, and a
    /// process-wide cache of pairs and maps.
    pub fn shared() -> Self {
        static SHARED: OnceLock<Arc<PastDayCache<Arc<Vec<Past>>, HourCorrection>>> =
            OnceLock::new();
        HourBias {
            base: Box::new(Logistic::shared()),
            cache: SHARED.get_or_init(Arc::default).clone(),
        }
    }

    /// `base` with its own past's correction, with a cache of its own.
    pub fn over(base: Box<dyn ReliabilityPredictor>) -> Self {
        HourBias {
            base,
            cache: Arc::default(),
        }
    }

    /// Drops every cached window and correction (the base's own cache stays).
    pub fn clear_cache(&self) {
        self.cache.clear();
    }

    /// The correction for `req`'s length on W's date, learned on the
    /// windows that ended by W's local midnight.
    pub fn correction(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<HourCorrection, PredictError> {
        self.cache.learned(self, series, req, MAX_PAST_DAYS)
    }
}

impl PastDayLearner for HourBias {
    type Day = Arc<Vec<Past>>;
    type Learned = HourCorrection;

    fn identity(&self) -> Vec<String> {
        vec![self.base.name()]
    }

    /// The base's (logit, hour, outcome) on the day's past windows
    /// ([`each_past_window`]) that it answered.
    fn day(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        step: u32,
        m: usize,
        day: Date,
        cut: i64,
    ) -> Arc<Vec<Past>> {
        let mut out = Vec::new();
        each_past_window(series, req, step, m, day, cut, |start, hour, survived| {
            let past = PredictRequest {
                at: start,
                ..req.clone()
            };
            if let Ok(f) = self.base.forecast(series, &past) {
                if f.tr.is_finite() {
                    out.push((logit(f.tr), f64::from(hour), f64::from(u8::from(survived))));
                }
            }
        });
        Arc::new(out)
    }

    fn learn(&self, days: &[(i64, Arc<Vec<Past>>)]) -> HourCorrection {
        HourCorrection::fit(days)
    }
}

/// W's local hour of day, fractional (a node asks at any second).
pub(super) fn local_hour(series: &HostSeries, at: i64) -> Result<f64, PredictError> {
    let z = Timestamp::from_second(at)
        .map_err(|_| PredictError::BadTime(at))?
        .to_zoned(series.tz.clone());
    Ok(f64::from(z.hour()) + f64::from(z.minute()) / 60.0 + f64::from(z.second()) / 3600.0)
}

impl ReliabilityPredictor for HourBias {
    fn name(&self) -> String {
        format!("{}+hourbias", self.base.name())
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let first = self.base.forecast(series, req)?;
        // A host failed at W, or W beyond the record: the base's answer
        // (certain failure, or a frequency) needs no correction.
        match super::observed_state(series, req) {
            Some(state) if !state.is_failure() => {}
            _ => return Ok(first),
        }
        if !first.tr.is_finite() {
            return Ok(first);
        }
        let correction = self.correction(series, req)?;
        if correction.days == 0 {
            return Ok(first);
        }
        let tr = correction.apply(first.tr, local_hour(series, req.at)?);
        // The failure's split by cause: the base's, scaled to 1 − TR.
        let fail_by_cause = first.fail_by_cause.map(|split| {
            let total: f64 = split.iter().sum();
            if total > 0.0 {
                split.map(|p| p / total * (1.0 - tr))
            } else {
                split.map(|_| (1.0 - tr) / split.len() as f64)
            }
        });
        Ok(ReliabilityForecast { tr, fail_by_cause })
    }
}

#[cfg(test)]
#[path = "hourbias_tests.rs"]
mod tests;
