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
//! A part that refuses a request makes the blend refuse it with the same
//! error (the parts use the same history days, so they refuse together).
//! Pure code; it must not know how the evaluation scores it.

use crate::model::predict::{PredictError, PredictRequest};
use crate::model::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::model::series::HostSeries;
use crate::model::solver::CAUSES;

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
    let fail_by_cause = forecasts
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
