//! `logistic+hostcal`: `logistic` passed through a per-host, per-length
//! recalibration on the logit scale, TR = σ(a + b · logit p), p
//! `logistic`'s forecast, learned only on the host's own past forecasts and
//! their outcomes — every hourly window of every past day up to
//! [`MAX_PAST_DAYS`] that had ended by W's local midnight, each forecast by
//! `logistic` as it was at the window's start — with forgetting
//! ([`HALF_LIFE_DAYS`]).
//!
//! Why (issue 29's audit, `docs/accuracy.md`): pooled over desktops of
//! several habits, `logistic`'s ECE sits above the floor of a perfectly
//! calibrated forecaster because each host carries a small bias of its own
//! (weekends-away +0.03 to +0.04 at 5–10 h, nights-off −0.04 at 10 h), and
//! on VMs and cluster nodes its forecasts are a little too spread (Cox
//! slope 0.76–0.93). An intercept removes a host's bias and a slope its
//! spread; unlike `logistic+cal` (two held-out weeks, an early fit) it
//! reads every past forecast `logistic` itself made, as
//! `logistic+hourbias` does, but with no term for the hour.
//!
//! - Past windows and cut: [`each_past_window`] (one a local hour of each
//!   past day, of the asked length and step, begun transient, ended by W's
//!   local midnight): a window of length T started at t is read only once
//!   t + T is before W's date, so no outcome later than the forecast's
//!   origin is used. A window `logistic` refuses is left out.
//! - Fit: ridge logistic regression of the outcome with offset logit p on
//!   (1, logit p), so a = c₀ and b = 1 + c₁, each window weighing
//!   2^(−age/[`HALF_LIFE_DAYS`]), pulled towards the identity (c = 0) with
//!   [`RIDGE`]: the pull gives way as resolved days add up, so a host with
//!   a short past stays near `logistic`.
//! - Fewer than [`MIN_PAST_DAYS`] days with a resolved window: `logistic`
//!   unchanged.
//!
//! Cost: `logistic+hourbias`'s (a past day's pairs cached once its windows
//! have ended, a date's map once per record before its midnight).
//! Pure code: no I/O, no clock.

use super::hourbias::{fit_offset, logit};
use super::past_days::{each_past_window, PastDayCache, PastDayLearner};
use super::ridge::sigmoid;
use super::Logistic;
use crate::predict::{PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use jiff::civil::Date;
use std::sync::{Arc, OnceLock};

/// Forgetting of a past day's windows: `logistic`'s own half-life.
pub const HALF_LIFE_DAYS: f64 = super::logistic::HALF_LIFE_DAYS;
/// Past days read: `logistic`'s own reach.
pub const MAX_PAST_DAYS: i64 = super::logistic::MAX_TRAINING_DAYS;
/// Fewer days with a resolved window than this: `logistic` itself (two
/// weeks, as `logistic+hourbias`, `nws` and `logistic+cal`).
pub const MIN_PAST_DAYS: usize = super::hourbias::MIN_PAST_DAYS;
/// Pull of (a, b − 1) towards 0: `logistic+cal`'s and
/// `logistic+hourbias`'s (one host's hourly windows overlap and count for
/// less than their number).
pub const RIDGE: f64 = super::logistic::RECAL_RIDGE;
/// Forecasts are kept inside [EPS, 1 − EPS] (a logit needs it).
const EPS: f64 = 1e-3;

/// One past window: the base's log-odds and whether it survived (1).
type Past = (f64, f64);

/// A host's recalibration for one length, or the identity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCalibration {
    /// a: added to the log-odds.
    pub intercept: f64,
    /// b: multiplies the log-odds.
    pub slope: f64,
    /// Past days with at least one resolved window (0: the identity).
    pub days: usize,
}

impl HostCalibration {
    /// The recalibration that changes nothing.
    pub const IDENTITY: HostCalibration = HostCalibration {
        intercept: 0.0,
        slope: 1.0,
        days: 0,
    };

    /// σ(a + b · logit p), inside [EPS, 1 − EPS].
    pub fn apply(&self, p: f64) -> f64 {
        sigmoid(self.intercept + self.slope * logit(p)).clamp(EPS, 1.0 - EPS)
    }

    /// Fits the map to `days` (each `(age, that day's windows)`, age 0 for
    /// yesterday); the identity with fewer than [`MIN_PAST_DAYS`] days
    /// holding a window.
    pub fn fit(days: &[(i64, Arc<Vec<Past>>)]) -> HostCalibration {
        let resolved = days.iter().filter(|(_, p)| !p.is_empty()).count();
        if resolved < MIN_PAST_DAYS {
            return HostCalibration::IDENTITY;
        }
        let rows: Vec<([f64; 2], f64, f64, f64)> = days
            .iter()
            .flat_map(|(age, pairs)| {
                let w = (-(*age).max(0) as f64 / HALF_LIFE_DAYS).exp2();
                pairs.iter().map(move |&(z, y)| ([1.0, z], z, w, y))
            })
            .collect();
        match fit_offset(&rows) {
            Some([a, c]) => HostCalibration {
                intercept: a,
                slope: 1.0 + c,
                days: resolved,
            },
            None => HostCalibration::IDENTITY,
        }
    }
}

/// The `logistic+hostcal` method (or any base method with its own past's
/// recalibration, for tests).
pub struct HostCal {
    base: Box<dyn ReliabilityPredictor>,
    cache: Arc<PastDayCache<Arc<Vec<Past>>, HostCalibration>>,
}

impl HostCal {
    /// The registry's method: `logistic` with its process-wide cache, and a
    /// process-wide cache of pairs and maps.
    pub fn shared() -> Self {
        static SHARED: OnceLock<Arc<PastDayCache<Arc<Vec<Past>>, HostCalibration>>> =
            OnceLock::new();
        HostCal {
            base: Box::new(Logistic::shared()),
            cache: SHARED.get_or_init(Arc::default).clone(),
        }
    }

    /// `base` with its own past's recalibration, with a cache of its own.
    pub fn over(base: Box<dyn ReliabilityPredictor>) -> Self {
        HostCal {
            base,
            cache: Arc::default(),
        }
    }

    /// The recalibration for `req`'s length on W's date, learned on the
    /// windows that ended by W's local midnight.
    pub fn calibration(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<HostCalibration, PredictError> {
        self.cache.learned(self, series, req, MAX_PAST_DAYS)
    }
}

impl PastDayLearner for HostCal {
    type Day = Arc<Vec<Past>>;
    type Learned = HostCalibration;

    fn identity(&self) -> Vec<String> {
        vec![self.base.name(), "hostcal".to_string()]
    }

    /// The base's (logit, outcome) on the day's past windows
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
        each_past_window(series, req, step, m, day, cut, |start, _, survived| {
            let past = PredictRequest {
                at: start,
                ..req.clone()
            };
            if let Ok(f) = self.base.forecast(series, &past) {
                if f.tr.is_finite() {
                    out.push((logit(f.tr), f64::from(u8::from(survived))));
                }
            }
        });
        Arc::new(out)
    }

    fn learn(&self, days: &[(i64, Arc<Vec<Past>>)]) -> HostCalibration {
        HostCalibration::fit(days)
    }
}

impl ReliabilityPredictor for HostCal {
    fn name(&self) -> String {
        format!("{}+hostcal", self.base.name())
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let first = self.base.forecast(series, req)?;
        // A host failed at W, or W beyond the record: the base's answer.
        match super::observed_state(series, req) {
            Some(state) if !state.is_failure() => {}
            _ => return Ok(first),
        }
        if !first.tr.is_finite() {
            return Ok(first);
        }
        let calibration = self.calibration(series, req)?;
        if calibration.days == 0 {
            return Ok(first);
        }
        let tr = calibration.apply(first.tr);
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
#[path = "hostcal_tests.rs"]
mod tests;
