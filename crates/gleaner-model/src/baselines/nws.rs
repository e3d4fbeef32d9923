//! `nws` and `nws+mix`: a per-host tournament among a few methods, the
//! Network Weather Service's idea (Wolski et al.): every candidate is scored
//! on the host's own past windows, and the forecast is the current leader's
//! (`nws`) or the candidates' forecasts mixed by exponential weights on
//! their past Brier loss (`nws+mix`).
//!
//! Why: round five (`docs/accuracy.md`) found a different best method per
//! host kind (`logistic` on desktop hosts, `logistic+iso` on server VMs,
//! `hazard` on cluster nodes), and `stack`'s ten-day backtest was too noisy
//! to pick between parts. Here the score covers every past day the fits
//! themselves see ([`MAX_SCORED_DAYS`]), each day weighing less with its
//! age ([`HALF_LIFE_DAYS`], the fits' own half-life), and each past window
//! is forecast by every candidate as it would have been at the time.
//!
//! - Past windows: one per local hour of each past day, of the asked length
//!   and step, that began in a transient state and ended by W's local
//!   midnight (so the scores are a function of the record before W's date,
//!   and nothing after W is read). Each candidate forecasts it with the
//!   request moved to the window's start; a window some candidate refuses
//!   is not scored (as the evaluation leaves out a case any method refuses).
//! - Loss: the Brier score (TR − outcome)², summed with weight
//!   2^(−age / [`HALF_LIFE_DAYS`]), age in days (yesterday 0).
//! - `nws`: fewer than [`MIN_SCORED_DAYS`] scored days: `logistic`;
//!   otherwise the candidate with the lowest weighted mean loss, `logistic`
//!   keeping ties (it is listed first and only a strictly lower loss passes).
//! - `nws+mix`: the same minimum; then TR = Σ w_c TR_c / Σ w_c with
//!   w_c = exp(−η (L_c − min L)), L the weighted loss sums and η = [`ETA`]:
//!   the exponentially weighted average forecaster, whose regret against
//!   the best candidate is at most ln K / η for a loss that is η-exp-concave
//!   (the square loss on [0, 1] is, for η ≤ ½).
//!
//! Cost: a past day's scores are cached once every window starting on it
//! has ended (keyed by the record up to then, the length, the step and the
//! request's N), and a date's sums once per record before its midnight, so
//! the node pays the past once and then a day per day, and each answer only
//! the candidates' own (cached-fit) forecasts at W.
//! Pure code: no I/O, no clock.

use super::past_days::{each_past_window, PastDayCache, PastDayLearner};
use super::{Hazard, Logistic};
use crate::predict::{geometry, PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use jiff::civil::Date;
use std::sync::{Arc, OnceLock};

/// Forgetting: a past day's losses weigh 2^(−age / this), age in days. The
/// same half-life as the `logistic` fits' training days
/// ([`super::logistic::HALF_LIFE_DAYS`]): a method's record is trusted for
/// as long as the data it learned from.
pub const HALF_LIFE_DAYS: f64 = super::logistic::HALF_LIFE_DAYS;
/// The most past days scored: the fits' own reach
/// ([`super::logistic::MAX_TRAINING_DAYS`]); beyond it a day weighs under
/// 2^(−120/28) ≈ 5 % of yesterday.
pub const MAX_SCORED_DAYS: i64 = super::logistic::MAX_TRAINING_DAYS;
/// Fewer scored days than this: `logistic`. Two weeks, the held-out span
/// `logistic+cal` and `logistic+iso` learn on: both kinds of day seen
/// twice, and before that those two candidates equal `logistic` anyway.
pub const MIN_SCORED_DAYS: usize = 14;
/// The exponential weights' learning rate: ½, the largest for which the
/// square loss on [0, 1] is exp-concave (Cesa-Bianchi and Lugosi, §3.3),
/// so the mix's regret is at most 2 ln K whatever the number of windows.
pub const ETA: f64 = 0.5;

/// At most this many candidates (the sums are fixed arrays).
pub const MAX_CANDIDATES: usize = 4;

/// How the forecast is made from the scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The current leader's forecast (`nws`).
    Leader,
    /// The exponentially weighted mix (`nws+mix`).
    Mix,
}

/// Weighted sums of the candidates' losses over some past windows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scores {
    /// Σ weight over the scored windows.
    pub weight: f64,
    /// Σ weight · Brier per candidate.
    pub loss: [f64; MAX_CANDIDATES],
    /// Past days with at least one scored window.
    pub days: usize,
}

impl Scores {
    /// Adds one day's unweighted sums with weight `w`.
    fn add_day(&mut self, day: &Scores, w: f64) {
        if day.weight <= 0.0 {
            return;
        }
        self.weight += w * day.weight;
        for (l, d) in self.loss.iter_mut().zip(day.loss) {
            *l += w * d;
        }
        self.days += 1;
    }

    /// The leader among the first `k` candidates: the lowest mean loss, the
    /// first (`logistic`) keeping ties; the first with too little evidence.
    pub fn leader(&self, k: usize) -> usize {
        if self.days < MIN_SCORED_DAYS {
            return 0;
        }
        let mut best = 0;
        for c in 1..k.min(MAX_CANDIDATES) {
            if self.loss[c] < self.loss[best] {
                best = c;
            }
        }
        best
    }

    /// The mix's weights of the first `k` candidates (summing to 1); all on
    /// the first with too little evidence.
    pub fn weights(&self, k: usize) -> [f64; MAX_CANDIDATES] {
        let k = k.clamp(1, MAX_CANDIDATES);
        let mut w = [0.0; MAX_CANDIDATES];
        if self.days < MIN_SCORED_DAYS {
            w[0] = 1.0;
            return w;
        }
        let min = self.loss[..k].iter().copied().fold(f64::INFINITY, f64::min);
        for (wc, lc) in w.iter_mut().zip(&self.loss).take(k) {
            *wc = (-ETA * (lc - min)).exp();
        }
        let total: f64 = w.iter().sum();
        w.iter_mut().for_each(|x| *x /= total);
        w
    }
}

/// The weight of a day `age` days before yesterday.
pub fn day_weight(age: i64) -> f64 {
    (-(age.max(0) as f64) / HALF_LIFE_DAYS).exp2()
}

/// Sums `days` (each `(age, that day's unweighted sums)`) with forgetting.
pub fn discounted(days: &[(i64, Scores)]) -> Scores {
    let mut out = Scores::default();
    for (age, day) in days {
        out.add_day(day, day_weight(*age));
    }
    out
}

/// The `nws` and `nws+mix` methods.
pub struct Nws {
    mode: Mode,
    /// The candidates, the fallback (`logistic`) first.
    candidates: Vec<Box<dyn ReliabilityPredictor>>,
    cache: Arc<PastDayCache<Scores, Scores>>,
}

impl Nws {
    /// The registry's method: `logistic`, `logistic+iso`, `logistic+cal`
    /// and `hazard` with their process-wide caches, and a process-wide
    /// cache of scores (shared by `nws` and `nws+mix`).
    pub fn shared(mode: Mode) -> Self {
        static SHARED: OnceLock<Arc<PastDayCache<Scores, Scores>>> = OnceLock::new();
        Nws {
            mode,
            candidates: vec![
                Box::new(Logistic::shared()),
                Box::new(Logistic::shared().isotonic()),
                Box::new(Logistic::shared().calibrated()),
                Box::new(Hazard::shared()),
            ],
            cache: SHARED.get_or_init(Arc::default).clone(),
        }
    }

    /// A tournament among `candidates` (the first is the fallback), with a
    /// cache of its own; at most [`MAX_CANDIDATES`] are kept.
    pub fn with_candidates(mode: Mode, mut candidates: Vec<Box<dyn ReliabilityPredictor>>) -> Self {
        candidates.truncate(MAX_CANDIDATES);
        Nws {
            mode,
            candidates,
            cache: Arc::default(),
        }
    }

    /// Drops every cached score (the candidates' own caches stay).
    pub fn clear_cache(&self) {
        self.cache.clear();
    }

    /// The candidates' names, in order.
    pub fn candidate_names(&self) -> Vec<String> {
        self.candidates.iter().map(|c| c.name()).collect()
    }

    /// The weighted scores of the candidates on the past windows of `req`'s
    /// length that ended by the local midnight beginning W's date.
    pub fn scores(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<Scores, PredictError> {
        self.cache.learned(self, series, req, MAX_SCORED_DAYS)
    }
}

impl PastDayLearner for Nws {
    type Day = Scores;
    type Learned = Scores;

    fn identity(&self) -> Vec<String> {
        self.candidate_names()
    }

    /// Unweighted sums over the day's past windows
    /// ([`each_past_window`]) that every candidate answered.
    fn day(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        step: u32,
        m: usize,
        day: Date,
        cut: i64,
    ) -> Scores {
        let k = self.candidates.len();
        let mut out = Scores::default();
        each_past_window(series, req, step, m, day, cut, |start, _, survived| {
            let outcome = if survived { 1.0 } else { 0.0 };
            let past = PredictRequest {
                at: start,
                ..req.clone()
            };
            let mut loss = [0.0; MAX_CANDIDATES];
            let answered = self.candidates.iter().enumerate().all(|(c, method)| {
                match method.forecast(series, &past) {
                    Ok(f) if f.tr.is_finite() => {
                        let p = f.tr.clamp(0.0, 1.0);
                        loss[c] = (p - outcome) * (p - outcome);
                        true
                    }
                    _ => false,
                }
            });
            if answered {
                out.weight += 1.0;
                for (sum, l) in out.loss.iter_mut().zip(loss).take(k) {
                    *sum += l;
                }
            }
        });
        out
    }

    fn learn(&self, days: &[(i64, Scores)]) -> Scores {
        discounted(days)
    }
}

impl ReliabilityPredictor for Nws {
    fn name(&self) -> String {
        match self.mode {
            Mode::Leader => "nws",
            Mode::Mix => "nws+mix",
        }
        .to_string()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let Some(fallback) = self.candidates.first() else {
            return Err(PredictError::BadDays(0));
        };
        geometry(series, req)?;
        // A host failed at W, or W beyond the record: every candidate
        // answers the same way as the fallback; no scores needed.
        match super::observed_state(series, req) {
            Some(state) if !state.is_failure() => {}
            _ => return fallback.forecast(series, req),
        }
        let scores = self.scores(series, req)?;
        let k = self.candidates.len();
        match self.mode {
            Mode::Leader => {
                let leader = scores.leader(k);
                match finite(self.candidates[leader].forecast(series, req)) {
                    Some(f) => Ok(f),
                    None => fallback.forecast(series, req),
                }
            }
            Mode::Mix => {
                let weights = scores.weights(k);
                if weights[0] >= 1.0 {
                    return fallback.forecast(series, req);
                }
                let first = fallback.forecast(series, req)?;
                let (mut sum, mut total) = (0.0, 0.0);
                let mut causes = [0.0; crate::solver::CAUSES];
                for (c, method) in self.candidates.iter().enumerate() {
                    if weights[c] <= 0.0 {
                        continue;
                    }
                    let answer = if c == 0 {
                        Ok(first)
                    } else {
                        method.forecast(series, req)
                    };
                    // A candidate that refuses at W drops out of the mix.
                    if let Some(f) = finite(answer) {
                        sum += weights[c] * f.tr.clamp(0.0, 1.0);
                        total += weights[c];
                        for (acc, p) in causes.iter_mut().zip(f.fail_by_cause.unwrap_or_default()) {
                            *acc += weights[c] * p.max(0.0);
                        }
                    }
                }
                if total <= 0.0 {
                    return Ok(first);
                }
                let tr = sum / total;
                // The failure's split by cause: the candidates' splits mixed
                // by the same weights, scaled to sum to 1 − TR (a candidate
                // without one adds nothing to it).
                let split: f64 = causes.iter().sum();
                let fail_by_cause = (split > 0.0).then(|| causes.map(|p| p / split * (1.0 - tr)));
                Ok(ReliabilityForecast { tr, fail_by_cause })
            }
        }
    }
}

/// The answer when it is a finite forecast.
fn finite(answer: Result<ReliabilityForecast, PredictError>) -> Option<ReliabilityForecast> {
    answer.ok().filter(|f| f.tr.is_finite())
}

#[cfg(test)]
#[path = "nws_tests.rs"]
mod tests;
