//! `markov`: a discrete-time Markov chain over S1..S5 on the step grid, the
//! memoryless (geometric holding time) counterpart of the semi-Markov model.
//!
//! Per-step transition probabilities are estimated from every step-to-step
//! transition out of S1 or S2 (self-transitions included) in the same
//! history windows the semi-Markov predictor uses; S3, S4 and S5 are
//! absorbing. TR from state i is the mass still in S1 ∪ S2 after m steps,
//! computed with the 5 × 5 matrix raised to the m-th power by squaring, so
//! m = 6000 costs 13 squarings. The absorbed mass by state is the failure
//! probability by cause.
//!
//! Fallbacks: a transient state never left in the history (no transition
//! counted from it) borrows the pooled transitions of both transient states;
//! when the history has no transition out of S1 or S2 at all (every window
//! began failed) TR is 0 — nothing in the record shows the host surviving.
//! W's state unknown: the start distribution of the history windows, as the
//! semi-Markov predictor does. W's state a failure: TR = 0.
//!
//! Pure code; it must not know how the evaluation scores it.

use super::{certain_failure, for_each_history_window, observed_state};
use crate::predict::{PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use crate::solver::CAUSES;
use crate::state::State;

/// The Markov chain baseline; it has no parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MarkovChain;

/// A 5 × 5 row-stochastic matrix over S1..S5.
pub type Matrix5 = [[f64; 5]; 5];

/// Transition counts out of S1 (row 0) and S2 (row 1) to each state.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TransitionCounts {
    pub from: [[u64; 5]; 2],
    /// Windows by the state they began in.
    pub starts: [u64; 5],
}

impl TransitionCounts {
    /// Adds the step-to-step transitions out of S1 and S2 of one window.
    pub fn add_window(&mut self, states: &[State]) {
        if let Some(first) = states.first() {
            self.starts[first.index()] += 1;
        }
        for pair in states.windows(2) {
            let i = pair[0].index();
            if i < 2 {
                self.from[i][pair[1].index()] += 1;
            }
        }
    }

    /// The per-step transition matrix, or `None` when no transition out of
    /// S1 or S2 was seen.
    pub fn matrix(&self) -> Option<Matrix5> {
        let pooled: [u64; 5] = std::array::from_fn(|j| self.from[0][j] + self.from[1][j]);
        if pooled.iter().sum::<u64>() == 0 {
            return None;
        }
        let mut p = identity();
        for (i, row) in self.from.iter().enumerate() {
            let counts = if row.iter().sum::<u64>() > 0 {
                row
            } else {
                &pooled
            };
            let total = counts.iter().sum::<u64>() as f64;
            for j in 0..5 {
                p[i][j] = counts[j] as f64 / total;
            }
        }
        Some(p)
    }
}

fn identity() -> Matrix5 {
    std::array::from_fn(|i| std::array::from_fn(|j| if i == j { 1.0 } else { 0.0 }))
}

fn multiply(a: &Matrix5, b: &Matrix5) -> Matrix5 {
    std::array::from_fn(|i| std::array::from_fn(|j| (0..5).map(|k| a[i][k] * b[k][j]).sum()))
}

/// `p` to the power `n` by repeated squaring.
pub fn matrix_power(p: &Matrix5, mut n: usize) -> Matrix5 {
    let mut result = identity();
    let mut base = *p;
    while n > 0 {
        if n & 1 == 1 {
            result = multiply(&result, &base);
        }
        n >>= 1;
        if n > 0 {
            base = multiply(&base, &base);
        }
    }
    result
}

/// TR and failure by cause after `m` steps from the start distribution `start`.
fn answer(pm: &Matrix5, start: &[f64; 5]) -> ReliabilityForecast {
    let mass = |j: usize| -> f64 { (0..5).map(|i| start[i] * pm[i][j]).sum() };
    let fail: [f64; CAUSES] = std::array::from_fn(|c| mass(c + 2).clamp(0.0, 1.0));
    let tr = (mass(0) + mass(1)).clamp(0.0, 1.0);
    ReliabilityForecast {
        tr,
        fail_by_cause: Some(fail),
    }
}

impl ReliabilityPredictor for MarkovChain {
    fn name(&self) -> String {
        "markov".to_string()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let mut counts = TransitionCounts::default();
        let mut m = 0;
        for_each_history_window(series, req, |states| {
            m = states.len().saturating_sub(1);
            counts.add_window(states);
        })?;
        let init = observed_state(series, req);
        if let Some(state) = init.filter(|s| s.is_failure()) {
            return Ok(certain_failure(state));
        }
        let start: [f64; 5] = match init {
            Some(state) => std::array::from_fn(|i| if i == state.index() { 1.0 } else { 0.0 }),
            None => {
                let total = counts.starts.iter().sum::<u64>().max(1) as f64;
                counts.starts.map(|c| c as f64 / total)
            }
        };
        let Some(p) = counts.matrix() else {
            return Ok(ReliabilityForecast {
                tr: 0.0,
                fail_by_cause: None,
            });
        };
        Ok(answer(&matrix_power(&p, m), &start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_power_matches_repeated_multiplication() {
        let mut p = identity();
        p[0] = [0.9, 0.05, 0.03, 0.01, 0.01];
        p[1] = [0.2, 0.7, 0.1, 0.0, 0.0];
        let mut slow = identity();
        for _ in 0..37 {
            slow = multiply(&slow, &p);
        }
        let fast = matrix_power(&p, 37);
        for i in 0..5 {
            for j in 0..5 {
                assert!((slow[i][j] - fast[i][j]).abs() < 1e-12);
            }
        }
        assert_eq!(matrix_power(&p, 0), identity());
    }
}
