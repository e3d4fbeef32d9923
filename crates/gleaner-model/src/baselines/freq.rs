//! `freq`: the empirical frequency baseline. TR is the share of history
//! windows (the same same-kind days and local time of day the semi-Markov
//! predictor learns from) that began in W's state and met no failure.
//!
//! A window "met no failure" when none of its m + 1 states on the step grid
//! is S3, S4 or S5. Choice of days:
//! - W's state observed and transient: the windows that began in that state;
//!   when no history window began in it, all windows (documented fallback:
//!   the method then knows nothing more specific than the overall share).
//! - W's state unknown (W beyond the record): all windows; those that began
//!   in a failure state count as failed, as in the semi-Markov predictor.
//! - W's state a failure: TR = 0.
//!
//! Pure code; it must not know how the evaluation scores it.

use super::{certain_failure, for_each_history_window, observed_state};
use crate::predict::{PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use crate::solver::CAUSES;
use crate::state::State;

/// The frequency baseline; it has no parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Frequency;

/// History windows tallied by the state they began in.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Tally {
    windows: [usize; 5],
    /// Per start state: windows whose first failure was S3, S4, S5.
    failed: [[usize; CAUSES]; 5],
}

impl Tally {
    fn add(&mut self, states: &[State]) {
        let Some(first) = states.first() else {
            return;
        };
        let start = first.index();
        self.windows[start] += 1;
        if let Some(c) = states.iter().find_map(|s| s.failure_index()) {
            self.failed[start][c] += 1;
        }
    }

    /// TR and failure shares over the windows that began in `starts`.
    fn share(&self, starts: &[usize]) -> Option<ReliabilityForecast> {
        let total: usize = starts.iter().map(|&s| self.windows[s]).sum();
        if total == 0 {
            return None;
        }
        let mut fail = [0.0; CAUSES];
        for (c, f) in fail.iter_mut().enumerate() {
            let n: usize = starts.iter().map(|&s| self.failed[s][c]).sum();
            *f = n as f64 / total as f64;
        }
        let failed: usize = starts
            .iter()
            .map(|&s| self.failed[s].iter().sum::<usize>())
            .sum();
        Some(ReliabilityForecast {
            tr: (total - failed) as f64 / total as f64,
            fail_by_cause: Some(fail),
        })
    }
}

const ALL_STARTS: [usize; 5] = [0, 1, 2, 3, 4];

impl ReliabilityPredictor for Frequency {
    fn name(&self) -> String {
        "freq".to_string()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let mut tally = Tally::default();
        for_each_history_window(series, req, |states| tally.add(states))?;
        let init = observed_state(series, req);
        if let Some(state) = init.filter(|s| s.is_failure()) {
            return Ok(certain_failure(state));
        }
        let same_start = init.and_then(|s| tally.share(&[s.index()]));
        // for_each_history_window saw at least one window, so `share` over all starts is Some.
        Ok(same_start
            .or_else(|| tally.share(&ALL_STARTS))
            .unwrap_or(ReliabilityForecast {
                tr: 0.0,
                fail_by_cause: None,
            }))
    }
}
