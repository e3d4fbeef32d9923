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

use super::logistic::{day_start, local_date, prefix_fingerprint};
use super::{Hazard, Logistic};
use crate::predict::{geometry, PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use jiff::civil::{Date, Time};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

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
/// Most cached day and date scores; each map is emptied when full.
const MAX_CACHED: usize = 65_536;

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

#[derive(Default)]
struct NwsCache {
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    days: HashMap<u64, Scores>,
    dates: HashMap<u64, Scores>,
}

impl NwsCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // A poisoned lock only means another thread panicked mid-insert; the maps stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The `nws` and `nws+mix` methods.
pub struct Nws {
    mode: Mode,
    /// The candidates, the fallback (`logistic`) first.
    candidates: Vec<Box<dyn ReliabilityPredictor>>,
    cache: Arc<NwsCache>,
}

impl Nws {
    /// The registry's method: `logistic`, `logistic+iso`, `logistic+cal`
    /// and `hazard` with their process-wide caches, and a process-wide
    /// cache of scores (shared by `nws` and `nws+mix`).
    pub fn shared(mode: Mode) -> Self {
        static SHARED: OnceLock<Arc<NwsCache>> = OnceLock::new();
        Nws {
            mode,
            candidates: vec![
                Box::new(Logistic::shared()),
                Box::new(Logistic::shared().isotonic()),
                Box::new(Logistic::shared().calibrated()),
                Box::new(Hazard::shared()),
            ],
            cache: SHARED.get_or_init(|| Arc::new(NwsCache::default())).clone(),
        }
    }

    /// A tournament among `candidates` (the first is the fallback), with a
    /// cache of its own; at most [`MAX_CANDIDATES`] are kept.
    pub fn with_candidates(mode: Mode, mut candidates: Vec<Box<dyn ReliabilityPredictor>>) -> Self {
        candidates.truncate(MAX_CANDIDATES);
        Nws {
            mode,
            candidates,
            cache: Arc::new(NwsCache::default()),
        }
    }

    /// Drops every cached score (the candidates' own caches stay).
    pub fn clear_cache(&self) {
        let mut inner = self.cache.lock();
        inner.days.clear();
        inner.dates.clear();
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
        let (step, m) = geometry(series, req)?;
        let date = local_date(series, req.at)?;
        let midnight = day_start(series, date).ok_or(PredictError::BadTime(req.at))?;
        let key = self.key(series, req, step, m, date, midnight);
        if let Some(s) = self.cache.lock().dates.get(&key) {
            return Ok(*s);
        }
        let span = i64::from(step).saturating_mul(m as i64);
        // Days after which every window starting on a day has ended.
        let settle = 1 + span.div_euclid(86_400) + i64::from(span.rem_euclid(86_400) != 0);
        let first_date = series
            .first_time()
            .and_then(|t| local_date(series, t).ok())
            .unwrap_or(date);
        let mut days = Vec::new();
        for back in 1..=MAX_SCORED_DAYS {
            let Ok(day) = date.checked_sub(jiff::Span::new().days(back)) else {
                break;
            };
            if day < first_date {
                break;
            }
            let scores = if back >= settle {
                self.settled_day(series, req, step, m, day, settle)
            } else {
                self.day_scores(series, req, step, m, day, midnight)
            };
            days.push((back - 1, scores));
        }
        let scores = discounted(&days);
        let mut inner = self.cache.lock();
        if inner.dates.len() >= MAX_CACHED {
            inner.dates.clear();
        }
        inner.dates.insert(key, scores);
        Ok(scores)
    }

    fn key(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        step: u32,
        m: usize,
        date: Date,
        end: i64,
    ) -> u64 {
        let mut h = DefaultHasher::new();
        prefix_fingerprint(series, end, &req.thresholds).hash(&mut h);
        (step, m, req.days, date, self.candidate_names()).hash(&mut h);
        h.finish()
    }

    /// A past day all of whose windows have ended `settle` days on: cached.
    fn settled_day(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        step: u32,
        m: usize,
        day: Date,
        settle: i64,
    ) -> Scores {
        let Some(end) = day
            .checked_add(jiff::Span::new().days(settle))
            .ok()
            .and_then(|d| day_start(series, d))
        else {
            return Scores::default();
        };
        let key = self.key(series, req, step, m, day, end);
        if let Some(s) = self.cache.lock().days.get(&key) {
            return *s;
        }
        let scores = self.day_scores(series, req, step, m, day, end);
        let mut inner = self.cache.lock();
        if inner.days.len() >= MAX_CACHED {
            inner.days.clear();
        }
        inner.days.insert(key, scores);
        scores
    }

    /// Unweighted sums over the windows starting at a whole local hour of
    /// `day` that began in a transient state and ended by `cut`.
    fn day_scores(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        step: u32,
        m: usize,
        day: Date,
        cut: i64,
    ) -> Scores {
        let span = i64::from(step).saturating_mul(m as i64);
        let k = self.candidates.len();
        let mut out = Scores::default();
        let mut states = Vec::with_capacity(m + 1);
        for hour in 0..24i8 {
            let Some(start) = Time::new(hour, 0, 0, 0)
                .ok()
                .and_then(|t| day.to_datetime(t).to_zoned(series.tz.clone()).ok())
                .map(|z| z.timestamp().as_second())
            else {
                continue;
            };
            if start.saturating_add(span) > cut
                || !series.window_states(req.thresholds, start, step, m, &mut states)
            {
                continue;
            }
            if !states.first().is_some_and(|s| s.is_transient()) {
                continue;
            }
            let outcome = if states[1..].iter().all(|s| s.is_transient()) {
                1.0
            } else {
                0.0
            };
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
        }
        out
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
