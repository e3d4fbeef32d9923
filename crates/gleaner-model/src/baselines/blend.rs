//! `blend`: a linear opinion pool of other methods, each with the same
//! weight. TR is the mean of the parts' TR; the failure shares by cause are
//! the mean of theirs when every part gives them.
//!
//! Why: the semi-Markov kernel (`km`) is structured but can be far off when
//! its runs are few or the host's rhythm changes from day to day, while
//! `freq` is the plain share of history windows that survived: unbiased over
//! the history days but coarse. Their errors differ, so their mean scores a
//! lower Brier than the worse of the two and often lower than both (the
//! Brier score is convex in the forecast). Equal weights need no fitting, so
//! nothing is tuned on the days being tested.
//!
//! [`Stacked`] (`stack`) weights its parts by how well each did on the
//! host's own history: each part forecasts the same window on each of the N
//! history days before W (from the days before that day, so only the record
//! before W is read), is scored by Brier against what happened on that day,
//! and gets a weight proportional to 1 / (Brier + [`BRIER_FLOOR`]). With no
//! scorable history day the weights are equal.
//!
//! A part that refuses a request makes the blend refuse it with the same
//! error (the parts use the same history days, so they refuse together).
//! Pure code; it must not know how the evaluation scores it.

use crate::predict::{geometry, history_days, PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use crate::solver::CAUSES;

/// The equal-weight mean of its parts' forecasts.
pub struct Blend {
    name: String,
    parts: Vec<Box<dyn ReliabilityPredictor>>,
}

impl Blend {
    /// A blend called `name` of `parts`; `None` when `parts` is empty.
    pub fn new(name: &str, parts: Vec<Box<dyn ReliabilityPredictor>>) -> Option<Self> {
        if parts.is_empty() {
            return None;
        }
        Some(Blend {
            name: name.to_string(),
            parts,
        })
    }

    /// Names of the parts, in order.
    pub fn part_names(&self) -> Vec<String> {
        self.parts.iter().map(|p| p.name()).collect()
    }
}

/// The equal-weight mean of `forecasts` (not empty).
pub fn mean_forecast(forecasts: &[ReliabilityForecast]) -> ReliabilityForecast {
    let n = forecasts.len().max(1) as f64;
    let tr = forecasts.iter().map(|f| f.tr).sum::<f64>() / n;
    let fail_by_cause =
        forecasts
            .iter()
            .map(|f| f.fail_by_cause)
            .try_fold([0.0; CAUSES], |mut acc, fail| {
                let fail = fail?;
                for (a, v) in acc.iter_mut().zip(fail) {
                    *a += v / n;
                }
                Some(acc)
            });
    ReliabilityForecast {
        tr: tr.clamp(0.0, 1.0),
        fail_by_cause,
    }
}

impl ReliabilityPredictor for Blend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let forecasts = self
            .parts
            .iter()
            .map(|p| p.forecast(series, req))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(mean_forecast(&forecasts))
    }
}

/// Added to each part's backtest Brier before inverting it, so a part that
/// was perfect on a few days does not take all the weight.
pub const BRIER_FLOOR: f64 = 0.02;

/// Parts weighted by their Brier score on the host's own history days.
pub struct Stacked {
    inner: Blend,
}

impl Stacked {
    /// A stacked blend called `name` of `parts`; `None` when `parts` is empty.
    pub fn new(name: &str, parts: Vec<Box<dyn ReliabilityPredictor>>) -> Option<Self> {
        Blend::new(name, parts).map(|inner| Stacked { inner })
    }

    /// Each part's weight for `req`, from its forecasts of the same window on
    /// the history days before W. Sums to 1.
    pub fn weights(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<Vec<f64>, PredictError> {
        let parts = &self.inner.parts;
        let (step, m) = geometry(series, req)?;
        let span = i64::from(step) * m as i64;
        let days = history_days(series, req.at, span, req.days)?;
        let mut squared = vec![0.0; parts.len()];
        let mut scored = 0usize;
        let mut states = Vec::with_capacity(m + 1);
        for day in &days {
            if !series.window_states(req.thresholds, day.start, step, m, &mut states) {
                continue;
            }
            // Score only windows the evaluation would test: a job starts in S1/S2.
            if !states.first().is_some_and(|s| s.is_transient()) {
                continue;
            }
            let survived = states[1..].iter().all(|s| s.is_transient());
            let past = PredictRequest {
                at: day.start,
                ..req.clone()
            };
            let Ok(forecasts) = parts
                .iter()
                .map(|p| p.forecast(series, &past))
                .collect::<Result<Vec<_>, _>>()
            else {
                continue;
            };
            let y = if survived { 1.0 } else { 0.0 };
            for (sq, f) in squared.iter_mut().zip(&forecasts) {
                *sq += (f.tr - y).powi(2);
            }
            scored += 1;
        }
        Ok(inverse_brier_weights(&squared, scored))
    }
}

/// Weights ∝ 1 / (Brier + floor) from summed squared errors over `scored`
/// windows; equal weights when nothing was scored.
pub fn inverse_brier_weights(squared: &[f64], scored: usize) -> Vec<f64> {
    let n = squared.len().max(1) as f64;
    if scored == 0 {
        return vec![1.0 / n; squared.len()];
    }
    let raw: Vec<f64> = squared
        .iter()
        .map(|sq| 1.0 / (sq / scored as f64 + BRIER_FLOOR))
        .collect();
    let total: f64 = raw.iter().sum();
    raw.iter().map(|r| r / total).collect()
}

/// The weighted mean of `forecasts` with `weights` summing to 1.
pub fn weighted_forecast(
    forecasts: &[ReliabilityForecast],
    weights: &[f64],
) -> ReliabilityForecast {
    let tr = forecasts
        .iter()
        .zip(weights)
        .map(|(f, w)| f.tr * w)
        .sum::<f64>();
    let fail_by_cause = forecasts
        .iter()
        .zip(weights)
        .try_fold([0.0; CAUSES], |mut acc, (f, w)| {
            let fail = f.fail_by_cause?;
            for (a, v) in acc.iter_mut().zip(fail) {
                *a += v * w;
            }
            Some(acc)
        });
    ReliabilityForecast {
        tr: tr.clamp(0.0, 1.0),
        fail_by_cause,
    }
}

impl ReliabilityPredictor for Stacked {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let forecasts = self
            .inner
            .parts
            .iter()
            .map(|p| p.forecast(series, req))
            .collect::<Result<Vec<_>, _>>()?;
        let weights = self.weights(series, req)?;
        Ok(weighted_forecast(&forecasts, &weights))
    }
}
