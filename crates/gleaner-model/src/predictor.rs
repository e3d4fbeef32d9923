//! The one interface every reliability method implements, so the evaluation
//! can run the semi-Markov predictor and every baseline the same way.
//!
//! A method sees the host series and a request for the window [W, W + T].
//! It must only use what was known at W: the state at W and rows before it
//! (the evaluation checks this by truncating the series at W). Pure code.

use crate::kernel::Method;
use crate::predict::{predict, PredictError, PredictRequest};
use crate::series::HostSeries;
use crate::solver::CAUSES;

/// What every method answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReliabilityForecast {
    /// Probability that no failure (S3, S4, S5) hits a job in the window.
    pub tr: f64,
    /// Failure probability by cause (S3, S4, S5), for methods that know it.
    pub fail_by_cause: Option<[f64; CAUSES]>,
}

/// A temporal-reliability method.
pub trait ReliabilityPredictor: Send + Sync {
    /// Short stable name used in reports and on the command line (`km`, `freq`, `ar8`…).
    fn name(&self) -> String;

    /// Forecasts the window of `req`. Parameters of the request a method has
    /// no use for (such as `method` or `age` for a baseline) are ignored.
    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError>;

    /// Forecasts the windows of `req` from the same start W with each of
    /// `windows` (seconds) as its length, in that order. The default asks
    /// [`ReliabilityPredictor::forecast`] once per length; a method that
    /// gets every length from one pass (`hazard`: survival at each length)
    /// overrides it.
    fn forecast_curve(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        windows: &[u64],
    ) -> Vec<Result<ReliabilityForecast, PredictError>> {
        windows
            .iter()
            .map(|&window_secs| {
                let req = PredictRequest {
                    window_secs,
                    ..req.clone()
                };
                self.forecast(series, &req)
            })
            .collect()
    }
}

/// The semi-Markov predictor of the seed papers, with a chosen estimator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemiMarkov {
    pub method: Method,
    /// Condition the first sojourn on its age at W.
    pub age: bool,
}

impl ReliabilityPredictor for SemiMarkov {
    fn name(&self) -> String {
        if self.age {
            format!("{}+age", self.method)
        } else {
            self.method.to_string()
        }
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let req = PredictRequest {
            method: self.method,
            age: self.age,
            ..req.clone()
        };
        let p = predict(series, &req)?;
        Ok(ReliabilityForecast {
            tr: p.tr,
            fail_by_cause: Some(p.fail_by_cause),
        })
    }
}
