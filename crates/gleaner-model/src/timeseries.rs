//! Linear time-series baselines of the seed papers (000, section VI.B,
//! Table I and Fig. 7): AR(p), BM(p), MA(q), ARMA(p, q) and LAST, as in the
//! RPS toolkit the papers used.
//!
//! This module owns fitting such a model on one window of samples (one
//! series: host load or free memory), the iterated point forecast the papers
//! compare against, simulated future paths for a probabilistic variant, and
//! the translation of a forecast load/free-memory pair into the first failure
//! state. It must not know where series come from (traces, the live monitor),
//! nor read a clock or do I/O: randomness is passed in as an [`rand::Rng`].
//!
//! Fitting never panics and never refuses a window that has at least one
//! finite value: a fit that is impossible (too short, constant) or unsound
//! (non-stationary AR part, non-invertible MA part, singular system) falls
//! back along ARMA/MA → AR → lower-order AR → BM → LAST, and every step is
//! recorded in [`FittedModel::fallbacks`].

use crate::state::{ExcursionTracker, State, Thresholds};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which linear model to fit, with its orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimeSeriesModel {
    /// Purely autoregressive with `p` coefficients (Yule–Walker).
    Ar(usize),
    /// "Best mean": the mean of the last N values, N ≤ p chosen on the fit
    /// window (RPS's BM; Table I: "mean over the previous N values, N ≤ p").
    Bm(usize),
    /// Moving average with `q` coefficients (Hannan–Rissanen).
    Ma(usize),
    /// Autoregressive moving average with `p + q` coefficients (Hannan–Rissanen).
    Arma(usize, usize),
    /// The last measured value.
    Last,
}

impl TimeSeriesModel {
    /// The five models and orders of Fig. 7: AR(8), BM(8), MA(8), ARMA(8,8), LAST.
    pub const PAPER_SUITE: [TimeSeriesModel; 5] = [
        TimeSeriesModel::Ar(8),
        TimeSeriesModel::Bm(8),
        TimeSeriesModel::Ma(8),
        TimeSeriesModel::Arma(8, 8),
        TimeSeriesModel::Last,
    ];
}

impl fmt::Display for TimeSeriesModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeSeriesModel::Ar(p) => write!(f, "AR({p})"),
            TimeSeriesModel::Bm(p) => write!(f, "BM({p})"),
            TimeSeriesModel::Ma(q) => write!(f, "MA({q})"),
            TimeSeriesModel::Arma(p, q) => write!(f, "ARMA({p},{q})"),
            TimeSeriesModel::Last => f.write_str("LAST"),
        }
    }
}

/// Error for a model name that is not `AR(p)`, `BM(p)`, `MA(q)`, `ARMA(p,q)` or `LAST`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown time-series model {0:?}: expected AR(p), BM(p), MA(q), ARMA(p,q) or LAST")]
pub struct UnknownModel(String);

impl FromStr for TimeSeriesModel {
    type Err = UnknownModel;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || UnknownModel(s.to_string());
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let text = text.to_ascii_uppercase();
        if text == "LAST" {
            return Ok(TimeSeriesModel::Last);
        }
        let (name, rest) = text.split_once('(').ok_or_else(bad)?;
        let args = rest.strip_suffix(')').ok_or_else(bad)?;
        let order = |a: &str| a.parse::<usize>().map_err(|_| bad());
        match name {
            "AR" => Ok(TimeSeriesModel::Ar(order(args)?)),
            "BM" => Ok(TimeSeriesModel::Bm(order(args)?)),
            "MA" => Ok(TimeSeriesModel::Ma(order(args)?)),
            "ARMA" => {
                let (p, q) = args.split_once(',').ok_or_else(bad)?;
                Ok(TimeSeriesModel::Arma(order(p)?, order(q)?))
            }
            _ => Err(bad()),
        }
    }
}

/// Why a requested fit was replaced by a simpler one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// The window has (numerically) no variance: only LAST is meaningful.
    Constant,
    /// The window has `len` usable samples but the fit needs `needed`.
    TooShort { len: usize, needed: usize },
    /// The Yule–Walker or least-squares system was not positive definite.
    Singular,
    /// The fitted AR polynomial has a root on or inside the unit circle.
    NonStationary,
    /// The fitted MA polynomial has a root on or inside the unit circle.
    NonInvertible,
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackReason::Constant => f.write_str("the window is constant"),
            FallbackReason::TooShort { len, needed } => {
                write!(f, "{len} usable samples, {needed} needed")
            }
            FallbackReason::Singular => f.write_str("the estimation system is singular"),
            FallbackReason::NonStationary => f.write_str("the AR part is not stationary"),
            FallbackReason::NonInvertible => f.write_str("the MA part is not invertible"),
        }
    }
}

/// One abandoned attempt: `from` could not be fitted because of `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback {
    pub from: TimeSeriesModel,
    pub reason: FallbackReason,
}

/// Why no model at all can be fitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    #[error("the window has no finite sample to fit")]
    NoFiniteValues,
}

/// The one-step predictor behind a fitted model.
#[derive(Debug, Clone, PartialEq)]
enum Predictor {
    /// The mean of the last `window` values (BM; LAST is a window of one).
    WindowMean { window: usize },
    /// `y_t = Σ ar_i y_{t-i} + e_t + Σ ma_j e_{t-j}` on the de-meaned series `y`.
    Linear { ar: Vec<f64>, ma: Vec<f64> },
}

/// A model fitted on one window, ready to forecast or simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedModel {
    /// What the caller asked for.
    requested: TimeSeriesModel,
    /// What was actually fitted after the fallbacks.
    used: TimeSeriesModel,
    /// Each abandoned attempt, in order.
    fallbacks: Vec<Fallback>,
    /// Samples of the window left out because they are non-finite or lie
    /// before the last non-finite one: only the last finite run is fitted.
    unused_samples: usize,
    /// Mean of the fitted samples; linear models work on deviations from it,
    /// and it stands in for missing history.
    mean: f64,
    predictor: Predictor,
    /// In-sample one-step prediction errors after the burn-in: the pool the
    /// bootstrap simulation draws from.
    residuals: Vec<f64>,
    /// Mean square of `residuals` (zero when there are none).
    innovation_variance: f64,
}

impl FittedModel {
    /// The model the caller asked for.
    pub fn requested(&self) -> TimeSeriesModel {
        self.requested
    }
    /// The model that was fitted in the end.
    pub fn used(&self) -> TimeSeriesModel {
        self.used
    }
    /// The abandoned attempts between `requested` and `used`, in order.
    pub fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }
    /// True when the model fitted is not the one requested.
    pub fn fell_back(&self) -> bool {
        !self.fallbacks.is_empty()
    }
    /// How many samples of the window were left out (NaN or infinity, or
    /// cut off by one): only the last unbroken finite run is fitted.
    pub fn unused_samples(&self) -> usize {
        self.unused_samples
    }
    /// Mean of the fitted samples.
    pub fn mean(&self) -> f64 {
        self.mean
    }
    /// AR coefficients φ_1..φ_p (empty for BM and LAST).
    pub fn ar_coefficients(&self) -> &[f64] {
        match &self.predictor {
            Predictor::Linear { ar, .. } => ar,
            Predictor::WindowMean { .. } => &[],
        }
    }
    /// MA coefficients θ_1..θ_q (empty for AR, BM and LAST).
    pub fn ma_coefficients(&self) -> &[f64] {
        match &self.predictor {
            Predictor::Linear { ma, .. } => ma,
            Predictor::WindowMean { .. } => &[],
        }
    }
    /// The averaging window chosen for BM (1 for LAST); `None` for linear models.
    pub fn mean_window(&self) -> Option<usize> {
        match self.predictor {
            Predictor::WindowMean { window } => Some(window),
            Predictor::Linear { .. } => None,
        }
    }
    /// In-sample one-step prediction errors (after the burn-in).
    pub fn residuals(&self) -> &[f64] {
        &self.residuals
    }
    /// Estimated innovation variance: the mean square of [`Self::residuals`].
    pub fn innovation_variance(&self) -> f64 {
        self.innovation_variance
    }
    /// How many past values one prediction reads.
    fn value_lag(&self) -> usize {
        match &self.predictor {
            Predictor::WindowMean { window } => *window,
            Predictor::Linear { ar, .. } => ar.len(),
        }
    }
    /// How many past innovations one prediction reads.
    fn innovation_lag(&self) -> usize {
        self.ma_coefficients().len()
    }
}

/// The parts of a successful attempt; `fit` adds the bookkeeping.
struct Estimate {
    predictor: Predictor,
    residuals: Vec<f64>,
}

/// Fits `model` on `series` (the previous window, oldest first), falling back
/// as described in the module docs. Only the last unbroken run of finite
/// samples is used; the only error is a window without any finite sample.
pub fn fit(model: TimeSeriesModel, series: &[f64]) -> Result<FittedModel, FitError> {
    let data = last_finite_run(series).ok_or(FitError::NoFiniteValues)?;
    let unused = series.len() - data.len();
    let mean = data.iter().sum::<f64>() / data.len() as f64;
    let constant = is_constant(data, mean);

    let mut fallbacks = Vec::new();
    let mut attempt = model;
    // Each fallback moves strictly down ARMA/MA → AR(p) → AR(<p) → BM → LAST
    // and LAST always succeeds, so the loop ends; the bound is a second guard.
    for _ in 0..64 {
        let result = if constant && attempt != TimeSeriesModel::Last {
            Err(FallbackReason::Constant)
        } else {
            estimate(attempt, data, mean)
        };
        match result {
            Ok(est) => return Ok(assemble(model, attempt, fallbacks, unused, mean, est)),
            Err(reason) => {
                fallbacks.push(Fallback {
                    from: attempt,
                    reason,
                });
                attempt = next_model(attempt, reason, data.len());
            }
        }
    }
    let est = window_mean_estimate(data, 1);
    Ok(assemble(
        model,
        TimeSeriesModel::Last,
        fallbacks,
        unused,
        mean,
        est,
    ))
}

/// The last unbroken run of finite samples: a gap (NaN) or a broken value
/// (infinity) cuts the lag structure, so only the stretch after the last one
/// is fitted; non-finite samples at the very end are skipped first.
fn last_finite_run(series: &[f64]) -> Option<&[f64]> {
    let end = series.iter().rposition(|x| x.is_finite())? + 1;
    let start = series[..end]
        .iter()
        .rposition(|x| !x.is_finite())
        .map_or(0, |i| i + 1);
    Some(&series[start..end])
}

fn assemble(
    requested: TimeSeriesModel,
    used: TimeSeriesModel,
    fallbacks: Vec<Fallback>,
    unused_samples: usize,
    mean: f64,
    est: Estimate,
) -> FittedModel {
    let innovation_variance = mean_square(&est.residuals);
    FittedModel {
        requested,
        used,
        fallbacks,
        unused_samples,
        mean,
        predictor: est.predictor,
        residuals: est.residuals,
        innovation_variance,
    }
}

/// True when the spread of `data` is at rounding level relative to its size.
fn is_constant(data: &[f64], mean: f64) -> bool {
    let variance = data.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / data.len() as f64;
    let floor = 1e-10 * (1.0 + mean.abs());
    // A NaN variance (overflow) also counts as degenerate.
    !exceeds(variance, floor * floor)
}

/// The next, simpler model to try after `failed` could not be fitted.
fn next_model(failed: TimeSeriesModel, reason: FallbackReason, len: usize) -> TimeSeriesModel {
    use TimeSeriesModel::*;
    if reason == FallbackReason::Constant {
        return Last;
    }
    match failed {
        // A pure AR of the larger order is the usual stand-in for an MA part.
        Arma(p, q) => Ar(p.max(q)),
        Ma(q) => Ar(q),
        Ar(p) => match reason {
            FallbackReason::TooShort { .. } => {
                let supported = max_ar_order(len);
                if supported >= 1 && supported < p {
                    Ar(supported)
                } else {
                    Bm(p.max(1))
                }
            }
            _ => Bm(p.max(1)),
        },
        Bm(_) | Last => Last,
    }
}

fn estimate(model: TimeSeriesModel, data: &[f64], mean: f64) -> Result<Estimate, FallbackReason> {
    match model {
        TimeSeriesModel::Ar(p) => fit_ar(data, mean, p),
        TimeSeriesModel::Ma(q) => fit_arma(data, mean, 0, q),
        TimeSeriesModel::Arma(p, q) => fit_arma(data, mean, p, q),
        TimeSeriesModel::Bm(p) => fit_best_mean(data, p.max(1)),
        TimeSeriesModel::Last => Ok(window_mean_estimate(data, 1)),
    }
}

/// Shortest window on which AR(p) is fitted: two samples per coefficient and two more.
fn ar_min_len(p: usize) -> usize {
    2 * p + 2
}

/// Largest AR order `ar_min_len` allows on `len` samples.
fn max_ar_order(len: usize) -> usize {
    len.saturating_sub(2) / 2
}

/// AR(p) by Yule–Walker on the de-meaned window, solved with Levinson–Durbin.
fn fit_ar(data: &[f64], mean: f64, p: usize) -> Result<Estimate, FallbackReason> {
    let needed = ar_min_len(p);
    if data.len() < needed {
        return Err(FallbackReason::TooShort {
            len: data.len(),
            needed,
        });
    }
    let y: Vec<f64> = data.iter().map(|x| x - mean).collect();
    let ar = yule_walker(&y, p)?;
    if !is_stationary(&ar) {
        return Err(FallbackReason::NonStationary);
    }
    let mut e = vec![0.0; y.len()];
    arma_innovations(&ar, &[], &y, &mut e);
    Ok(Estimate {
        residuals: e.split_off(p),
        predictor: Predictor::Linear { ar, ma: Vec::new() },
    })
}

/// Yule–Walker coefficients of order `p` for the de-meaned series `y`.
fn yule_walker(y: &[f64], p: usize) -> Result<Vec<f64>, FallbackReason> {
    let r = autocovariances(y, p);
    levinson_durbin(&r)
        .map(|(ar, _)| ar)
        .ok_or(FallbackReason::Singular)
}

/// Biased sample autocovariances γ(0..=max_lag) of a de-meaned series. The
/// biased (1/n) form keeps the Toeplitz matrix positive semi-definite, so the
/// Yule–Walker fit is stationary.
pub fn autocovariances(y: &[f64], max_lag: usize) -> Vec<f64> {
    let n = y.len();
    (0..=max_lag)
        .map(|k| {
            if k >= n {
                return 0.0;
            }
            let s: f64 = y[k..].iter().zip(y).map(|(a, b)| a * b).sum();
            s / n as f64
        })
        .collect()
}

/// Solves the Yule–Walker equations `Σ_j φ_j γ(|i-j|) = γ(i)`, i = 1..p, for
/// `r = γ(0..=p)` by the Levinson–Durbin recursion. Returns the coefficients
/// φ_1..φ_p and the innovation variance, or `None` when the system is not
/// positive definite (a reflection coefficient reaches ±1, or NaN).
pub fn levinson_durbin(r: &[f64]) -> Option<(Vec<f64>, f64)> {
    let p = r.len().checked_sub(1)?;
    let mut err = r[0];
    if !exceeds(err, 0.0) {
        return None;
    }
    let mut a = vec![0.0; p];
    let mut prev = vec![0.0; p];
    for m in 1..=p {
        let acc = r[m] - (1..m).map(|j| a[j - 1] * r[m - j]).sum::<f64>();
        let k = acc / err;
        if !exceeds(1.0, k.abs()) {
            return None;
        }
        prev[..m - 1].copy_from_slice(&a[..m - 1]);
        for j in 1..m {
            a[j - 1] = prev[j - 1] - k * prev[m - j - 1];
        }
        a[m - 1] = k;
        err *= 1.0 - k * k;
        if !exceeds(err, 0.0) {
            return None;
        }
    }
    Some((a, err))
}

/// True when `1 - φ_1 z - … - φ_p z^p` has all roots outside the unit circle,
/// checked by the step-down (inverse Levinson) recursion: the polynomial is
/// stable exactly when every reflection coefficient has magnitude below one.
pub fn is_stationary(ar: &[f64]) -> bool {
    let mut a = ar.to_vec();
    for m in (1..=a.len()).rev() {
        let k = a[m - 1];
        if !exceeds(1.0, k.abs()) {
            return false;
        }
        let d = 1.0 - k * k;
        let prev: Vec<f64> = (1..m).map(|j| (a[j - 1] + k * a[m - j - 1]) / d).collect();
        a.truncate(m - 1);
        a.copy_from_slice(&prev);
    }
    true
}

/// True when `1 + θ_1 z + … + θ_q z^q` has all roots outside the unit circle.
pub fn is_invertible(ma: &[f64]) -> bool {
    let negated: Vec<f64> = ma.iter().map(|t| -t).collect();
    is_stationary(&negated)
}

/// Order of the long AR that estimates the innovations in Hannan–Rissanen:
/// above p + q and growing like 10·log10(n), the usual choice.
fn long_ar_order(p: usize, q: usize, n: usize) -> usize {
    let by_length = (10.0 * (n.max(1) as f64).log10()).ceil() as usize;
    (p + q + 1).max(by_length)
}

/// MA(q) and ARMA(p, q) by Hannan–Rissanen: a long AR estimates the
/// innovations, then least squares regresses y_t on y_{t-1..p} and the
/// estimated innovations e_{t-1..q}.
fn fit_arma(data: &[f64], mean: f64, p: usize, q: usize) -> Result<Estimate, FallbackReason> {
    if q == 0 {
        return fit_ar(data, mean, p);
    }
    let n = data.len();
    let m = long_ar_order(p, q, n);
    let k = p + q;
    let start = m + p.max(q);
    let needed = (start + 2 * k + 10).max(ar_min_len(m));
    if n < needed {
        return Err(FallbackReason::TooShort { len: n, needed });
    }
    let y: Vec<f64> = data.iter().map(|x| x - mean).collect();
    let long_ar = yule_walker(&y, m)?;
    let mut e_hat = vec![0.0; n];
    arma_innovations(&long_ar, &[], &y, &mut e_hat);

    // Normal equations of the regression, accumulated row by row so the
    // (n × k) design matrix is never stored.
    let mut xtx = vec![0.0; k * k];
    let mut xty = vec![0.0; k];
    let mut row = vec![0.0; k];
    for t in start..n {
        for i in 0..p {
            row[i] = y[t - 1 - i];
        }
        for j in 0..q {
            row[p + j] = e_hat[t - 1 - j];
        }
        for a in 0..k {
            xty[a] += row[a] * y[t];
            for b in 0..=a {
                xtx[a * k + b] += row[a] * row[b];
            }
        }
    }
    for a in 0..k {
        for b in 0..a {
            xtx[b * k + a] = xtx[a * k + b];
        }
    }
    let coef = cholesky_solve(&mut xtx, &mut xty, k).ok_or(FallbackReason::Singular)?;
    let (ar, ma) = (coef[..p].to_vec(), coef[p..].to_vec());
    if !is_stationary(&ar) {
        return Err(FallbackReason::NonStationary);
    }
    if !is_invertible(&ma) {
        return Err(FallbackReason::NonInvertible);
    }
    let mut e = vec![0.0; n];
    arma_innovations(&ar, &ma, &y, &mut e);
    // The first innovations carry the zero start-up values; skip them like
    // the regression did.
    Ok(Estimate {
        residuals: e.split_off(start),
        predictor: Predictor::Linear { ar, ma },
    })
}

/// Solves `A x = b` for a symmetric positive-definite `k × k` matrix `A`
/// (row-major, overwritten by its Cholesky factor). `None` when a pivot is
/// not clearly positive.
fn cholesky_solve(a: &mut [f64], b: &mut [f64], k: usize) -> Option<Vec<f64>> {
    let scale = (0..k).map(|i| a[i * k + i].abs()).fold(0.0, f64::max);
    let tiny = scale * 1e-12;
    for j in 0..k {
        let mut d = a[j * k + j];
        for l in 0..j {
            d -= a[j * k + l] * a[j * k + l];
        }
        if !exceeds(d, tiny) {
            return None;
        }
        let d = d.sqrt();
        a[j * k + j] = d;
        for i in j + 1..k {
            let mut s = a[i * k + j];
            for l in 0..j {
                s -= a[i * k + l] * a[j * k + l];
            }
            a[i * k + j] = s / d;
        }
    }
    // Forward then backward substitution: L z = b, Lᵀ x = z.
    for i in 0..k {
        let s: f64 = (0..i).map(|l| a[i * k + l] * b[l]).sum();
        b[i] = (b[i] - s) / a[i * k + i];
    }
    for i in (0..k).rev() {
        let s: f64 = (i + 1..k).map(|l| a[l * k + i] * b[l]).sum();
        b[i] = (b[i] - s) / a[i * k + i];
    }
    b.iter().all(|x| x.is_finite()).then(|| b.to_vec())
}

/// Runs the ARMA filter backwards to recover innovations:
/// `e_t = y_t - Σ ar_i y_{t-i} - Σ ma_j e_{t-j}`, with values before the
/// start taken as zero. `e` must be as long as `y`.
fn arma_innovations(ar: &[f64], ma: &[f64], y: &[f64], e: &mut [f64]) {
    for t in 0..y.len() {
        let mut v = y[t];
        for (i, phi) in ar.iter().enumerate().take(t) {
            v -= phi * y[t - 1 - i];
        }
        for (j, theta) in ma.iter().enumerate().take(t) {
            v -= theta * e[t - 1 - j];
        }
        e[t] = v;
    }
}

/// BM(p): picks the window N ≤ p whose mean best predicts the next value
/// (least mean squared one-step error over the same stretch for every N;
/// ties go to the shorter window).
fn fit_best_mean(data: &[f64], p: usize) -> Result<Estimate, FallbackReason> {
    let n = data.len();
    if n < 2 {
        return Err(FallbackReason::TooShort { len: n, needed: 2 });
    }
    let largest = p.min(n - 1);
    let mut prefix = Vec::with_capacity(n + 1);
    prefix.push(0.0);
    let mut running = 0.0;
    for x in data {
        running += x;
        prefix.push(running);
    }
    let mut best = (1, f64::INFINITY);
    for window in 1..=largest {
        let sse: f64 = (largest..n)
            .map(|t| {
                let predicted = (prefix[t] - prefix[t - window]) / window as f64;
                (data[t] - predicted).powi(2)
            })
            .sum();
        if sse < best.1 {
            best = (window, sse);
        }
    }
    let window = best.0;
    let residuals = (largest..n)
        .map(|t| data[t] - (prefix[t] - prefix[t - window]) / window as f64)
        .collect();
    Ok(Estimate {
        predictor: Predictor::WindowMean { window },
        residuals,
    })
}

/// LAST (or a fixed window mean): residuals are the one-step errors.
fn window_mean_estimate(data: &[f64], window: usize) -> Estimate {
    let residuals = (window..data.len())
        .map(|t| data[t] - data[t - window..t].iter().sum::<f64>() / window as f64)
        .collect();
    Estimate {
        predictor: Predictor::WindowMean { window },
        residuals,
    }
}

/// `a > b`, false when either is NaN: every numeric check in this module
/// routes NaN (from overflow or bad input) to the failing side.
fn exceeds(a: f64, b: f64) -> bool {
    a > b
}

fn mean_square(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64
    }
}

/// The forecasting recursion, seeded from a history once and then run for
/// the point forecast or for each simulated path without further allocation.
struct Recursion<'a> {
    fitted: &'a FittedModel,
    /// Values (deviations from the mean for linear models, levels for window
    /// means): the seed from the history first, then one slot per step.
    values: Vec<f64>,
    /// Innovations: the last q estimated from the history, then one per step.
    innovations: Vec<f64>,
    /// The seed parts, copied back in before every run.
    seed_values: Vec<f64>,
    seed_innovations: Vec<f64>,
}

impl<'a> Recursion<'a> {
    /// Seeds from `history` (oldest first). Non-finite history values and
    /// history shorter than the model's lag read as the fitted mean.
    fn new(fitted: &'a FittedModel, history: &[f64], horizon: usize) -> Self {
        let lag = fitted.value_lag();
        let qlag = fitted.innovation_lag();
        let mean = fitted.mean;
        let linear = matches!(fitted.predictor, Predictor::Linear { .. });
        let clean = |x: &f64| match (x.is_finite(), linear) {
            (true, true) => x - mean,
            (true, false) => *x,
            (false, true) => 0.0,
            (false, false) => mean,
        };
        let pad = if linear { 0.0 } else { mean };
        let mut seed_values = vec![pad; lag];
        let tail = &history[history.len().saturating_sub(lag)..];
        for (slot, x) in seed_values[lag - tail.len()..].iter_mut().zip(tail) {
            *slot = clean(x);
        }
        let mut seed_innovations = vec![0.0; qlag];
        if qlag > 0 {
            let y: Vec<f64> = history.iter().map(clean).collect();
            let mut e = vec![0.0; y.len()];
            arma_innovations(
                fitted.ar_coefficients(),
                fitted.ma_coefficients(),
                &y,
                &mut e,
            );
            let tail = &e[e.len().saturating_sub(qlag)..];
            seed_innovations[qlag - tail.len()..].copy_from_slice(tail);
        }
        Recursion {
            fitted,
            values: vec![0.0; lag + horizon],
            innovations: vec![0.0; qlag + horizon],
            seed_values,
            seed_innovations,
        }
    }

    /// Writes one path into `out` (its length is the horizon), adding
    /// `draw()` as the innovation of every step.
    fn run(&mut self, out: &mut [f64], draw: impl FnMut() -> f64) {
        let steps = out.len();
        self.run_until(steps, draw, |h, v| {
            out[h] = v;
            false
        });
    }

    /// Runs one path of at most `steps` steps (no more than the horizon),
    /// adding `draw()` as the innovation of every step and handing each value
    /// to `visit(step, value)`; the path stops at the first step for which
    /// `visit` returns true, and that step is returned.
    fn run_until(
        &mut self,
        steps: usize,
        mut draw: impl FnMut() -> f64,
        mut visit: impl FnMut(usize, f64) -> bool,
    ) -> Option<usize> {
        let lag = self.seed_values.len();
        let qlag = self.seed_innovations.len();
        let steps = steps.min(self.values.len() - lag);
        self.values[..lag].copy_from_slice(&self.seed_values);
        self.innovations[..qlag].copy_from_slice(&self.seed_innovations);
        match &self.fitted.predictor {
            Predictor::Linear { ar, ma } => {
                let mean = self.fitted.mean;
                for h in 0..steps {
                    let past = &self.values[h..lag + h];
                    let past_e = &self.innovations[h..qlag + h];
                    // Coefficient i multiplies the value i + 1 steps back.
                    let mut y: f64 = ar.iter().zip(past.iter().rev()).map(|(a, v)| a * v).sum();
                    y += ma
                        .iter()
                        .zip(past_e.iter().rev())
                        .map(|(t, e)| t * e)
                        .sum::<f64>();
                    let e = draw();
                    y += e;
                    self.values[lag + h] = y;
                    self.innovations[qlag + h] = e;
                    if visit(h, mean + y) {
                        return Some(h);
                    }
                }
            }
            Predictor::WindowMean { window } => {
                let n = *window as f64;
                let mut sum: f64 = self.values[..lag].iter().sum();
                for h in 0..steps {
                    let v = sum / n + draw();
                    sum += v - self.values[h];
                    self.values[lag + h] = v;
                    if visit(h, v) {
                        return Some(h);
                    }
                }
            }
        }
        None
    }
}

/// Simulates futures one path at a time so the caller can stop a path early
/// (the probabilistic baselines stop at a path's first failure) and bring
/// its own innovations. Seeding from the history happens once in
/// [`PathSimulator::new`]; running a path allocates nothing.
pub struct PathSimulator<'a> {
    recursion: Recursion<'a>,
    horizon: usize,
}

impl<'a> PathSimulator<'a> {
    /// Prepares paths of up to `horizon` steps after `history` (oldest first).
    pub fn new(fitted: &'a FittedModel, history: &[f64], horizon: usize) -> Self {
        PathSimulator {
            recursion: Recursion::new(fitted, history, horizon),
            horizon,
        }
    }

    /// The longest path this simulator runs.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// Runs one path of at most `steps` steps (capped at the horizon):
    /// `draw()` gives each step's innovation (use the fitted residuals or
    /// zero), `visit(step, value)` sees each simulated value and returns true
    /// to stop the path there. Returns the step at which it stopped.
    pub fn run_until(
        &mut self,
        steps: usize,
        draw: impl FnMut() -> f64,
        visit: impl FnMut(usize, f64) -> bool,
    ) -> Option<usize> {
        self.recursion.run_until(steps, draw, visit)
    }
}

/// Simulates many futures of one fitted model in lockstep: each call to
/// [`PathBatch::step`] advances every live path by one step. State is kept
/// column-wise (one row per lag, one column per path), so the inner loops
/// run over paths and compile to vector code, and only the last `lag`
/// values and `q` innovations of each path are kept: memory does not grow
/// with the horizon. A caller ends a path with [`PathBatch::drop_path`]
/// (swap-remove: the last live path takes its column), which is how a
/// simulation stops each path at its first failure.
pub struct PathBatch<'a> {
    fitted: &'a FittedModel,
    /// Columns in use (live paths), and allocated.
    live: usize,
    width: usize,
    /// Past values: `lag` rows of `width`; row `head` is the oldest.
    values: Vec<f64>,
    head: usize,
    /// Past innovations: `qlag` rows of `width`; row `ehead` is the oldest.
    innovations: Vec<f64>,
    ehead: usize,
    /// Window means: each path's sum of its `lag` past values.
    sums: Vec<f64>,
    /// The values of the last step, as levels (the mean added back).
    out: Vec<f64>,
}

impl<'a> PathBatch<'a> {
    /// `paths` futures of `fitted` after `history` (oldest first), seeded
    /// as [`PathSimulator`] seeds each path.
    pub fn new(fitted: &'a FittedModel, history: &[f64], paths: usize) -> Self {
        let seed = Recursion::new(fitted, history, 0);
        let width = paths;
        let lag = seed.seed_values.len();
        let qlag = seed.seed_innovations.len();
        let mut values = vec![0.0; lag * width];
        for (row, v) in values.chunks_exact_mut(width.max(1)).zip(&seed.seed_values) {
            row.fill(*v);
        }
        let mut innovations = vec![0.0; qlag * width];
        for (row, e) in innovations
            .chunks_exact_mut(width.max(1))
            .zip(&seed.seed_innovations)
        {
            row.fill(*e);
        }
        let sum: f64 = seed.seed_values.iter().sum();
        PathBatch {
            fitted,
            live: paths,
            width,
            values,
            head: 0,
            innovations,
            ehead: 0,
            sums: vec![sum; width],
            out: vec![0.0; width],
        }
    }

    /// Paths still running.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Advances every live path one step, adding `draws[i]` as path `i`'s
    /// innovation (`draws` holds at least [`Self::live`] values), and
    /// returns the new values, one per live path.
    pub fn step(&mut self, draws: &[f64]) -> &[f64] {
        let n = self.live;
        let w = self.width;
        let draws = &draws[..n];
        let out = &mut self.out[..n];
        match &self.fitted.predictor {
            Predictor::Linear { ar, ma } => {
                let lag = ar.len();
                let qlag = ma.len();
                out.fill(0.0);
                // Coefficient i multiplies the value i + 1 steps back: row
                // head + lag - 1 - i of the ring.
                for (i, a) in ar.iter().enumerate() {
                    let row = (self.head + lag - 1 - i) % lag;
                    let past = &self.values[row * w..row * w + n];
                    for (o, v) in out.iter_mut().zip(past) {
                        *o += a * v;
                    }
                }
                for (j, t) in ma.iter().enumerate() {
                    let row = (self.ehead + qlag - 1 - j) % qlag;
                    let past = &self.innovations[row * w..row * w + n];
                    for (o, e) in out.iter_mut().zip(past) {
                        *o += t * e;
                    }
                }
                for (o, e) in out.iter_mut().zip(draws) {
                    *o += e;
                }
                if lag > 0 {
                    let row = self.head;
                    self.values[row * w..row * w + n].copy_from_slice(out);
                    self.head = (self.head + 1) % lag;
                }
                if qlag > 0 {
                    let row = self.ehead;
                    self.innovations[row * w..row * w + n].copy_from_slice(draws);
                    self.ehead = (self.ehead + 1) % qlag;
                }
                let mean = self.fitted.mean;
                for o in out.iter_mut() {
                    *o += mean;
                }
            }
            Predictor::WindowMean { window } => {
                let lag = *window;
                let len = lag as f64;
                let row = self.head;
                let oldest = &mut self.values[row * w..row * w + n];
                let sums = &mut self.sums[..n];
                for (((o, s), old), e) in out.iter_mut().zip(sums).zip(oldest).zip(draws) {
                    let v = *s / len + e;
                    *s += v - *old;
                    *old = v;
                    *o = v;
                }
                self.head = (self.head + 1) % lag;
            }
        }
        &self.out[..n]
    }

    /// Ends path `i`: the last live path moves into its column.
    pub fn drop_path(&mut self, i: usize) {
        let last = self.live.saturating_sub(1);
        if i > last {
            return;
        }
        let w = self.width;
        for row in self.values.chunks_exact_mut(w.max(1)) {
            row[i] = row[last];
        }
        for row in self.innovations.chunks_exact_mut(w.max(1)) {
            row[i] = row[last];
        }
        self.sums[i] = self.sums[last];
        self.out[i] = self.out[last];
        self.live = last;
    }
}

/// The papers' forecast: the point forecast iterated `horizon` steps past the
/// end of `history` (future innovations set to zero).
pub fn forecast(fitted: &FittedModel, history: &[f64], horizon: usize) -> Vec<f64> {
    let mut out = vec![0.0; horizon];
    Recursion::new(fitted, history, horizon).run(&mut out, || 0.0);
    out
}

/// Where simulated innovations come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum InnovationDraw {
    /// Resample the fitted residuals with replacement. The default: host load
    /// residuals are bursty and bounded (spikes to 100 %, floors at 0), far
    /// from Gaussian, and the threshold crossings we count live in the tails;
    /// the bootstrap keeps the observed tails with no distribution assumed.
    #[default]
    Bootstrap,
    /// Gaussian with the fitted innovation variance: smooth tails, and usable
    /// when only a handful of residuals exist.
    Gaussian,
}

/// Simulates `n_paths` futures of `horizon` steps after `history` with
/// bootstrapped residuals (see [`InnovationDraw::Bootstrap`]). `out` is
/// cleared and filled path after path: path `i` is
/// `out[i * horizon..(i + 1) * horizon]` (see [`paths`]). Reusing `out`
/// across calls avoids all per-call allocation but two small buffers.
pub fn simulate_paths<R: Rng + ?Sized>(
    fitted: &FittedModel,
    history: &[f64],
    horizon: usize,
    n_paths: usize,
    rng: &mut R,
    out: &mut Vec<f64>,
) {
    simulate_paths_with(
        fitted,
        history,
        horizon,
        n_paths,
        InnovationDraw::Bootstrap,
        rng,
        out,
    );
}

/// [`simulate_paths`] with an explicit choice of innovations. A model without
/// residuals (a window of one sample) simulates its point forecast.
pub fn simulate_paths_with<R: Rng + ?Sized>(
    fitted: &FittedModel,
    history: &[f64],
    horizon: usize,
    n_paths: usize,
    draw: InnovationDraw,
    rng: &mut R,
    out: &mut Vec<f64>,
) {
    out.clear();
    out.resize(horizon * n_paths, 0.0);
    if horizon == 0 {
        return;
    }
    let mut recursion = Recursion::new(fitted, history, horizon);
    let pool = fitted.residuals();
    let sd = fitted.innovation_variance().sqrt();
    let mut normal = StandardNormal::default();
    for path in out.chunks_exact_mut(horizon) {
        match draw {
            InnovationDraw::Bootstrap if !pool.is_empty() => {
                recursion.run(path, || pool[rng.random_range(0..pool.len())])
            }
            InnovationDraw::Gaussian if sd > 0.0 => recursion.run(path, || sd * normal.sample(rng)),
            _ => recursion.run(path, || 0.0),
        }
    }
}

/// The simulated paths in `out`, one slice per path.
pub fn paths(out: &[f64], horizon: usize) -> impl Iterator<Item = &[f64]> {
    out.chunks_exact(horizon.max(1))
}

/// Standard normal draws by the Marsaglia polar method, which yields two per
/// accepted pair; the second is kept for the next call.
#[derive(Debug, Default)]
struct StandardNormal {
    spare: Option<f64>,
}

impl StandardNormal {
    fn sample<R: Rng + ?Sized>(&mut self, rng: &mut R) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        loop {
            let u = 2.0 * rng.random::<f64>() - 1.0;
            let v = 2.0 * rng.random::<f64>() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                let f = (-2.0 * s.ln() / s).sqrt();
                self.spare = Some(v * f);
                return u * f;
            }
        }
    }
}

/// The fixed time grid of a forecast: sample `i` is at `start_time + i·step_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForecastGrid {
    /// Unix seconds of the first forecast sample.
    pub start_time: i64,
    /// Seconds between forecast samples (the monitor's period, 6 s in the papers).
    pub step_secs: u32,
}

/// The first failure state a forecast enters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForecastFailure {
    /// Index of the forecast sample at which it is entered.
    pub step: usize,
    /// Its time on the grid.
    pub time: i64,
    /// S3 (sustained CPU contention) or S4 (memory shortage).
    pub state: State,
}

/// Reads forecast host load (`cpu`, percent) and free memory (`free_mib`)
/// through the five-state model and returns the first failure state (S3 or
/// S4) entered, if any. Forecasts are clipped to their valid ranges first
/// (load to 0..=100, free memory to ≥ 0 and whole MiB, rounded down, which
/// is exact for the `free < job_mem` test). `tracker` carries an excursion
/// above Th2 already going on at the end of the history (use
/// `ExcursionTracker::default()` for none). Steps where either forecast is
/// NaN are skipped; the shorter series bounds the walk. S5 (revocation) is
/// not something a load forecast can show.
pub fn first_failure_in_forecast(
    th: &Thresholds,
    grid: ForecastGrid,
    mut tracker: ExcursionTracker,
    cpu: &[f64],
    free_mib: &[f64],
) -> Option<ForecastFailure> {
    let step = i64::from(grid.step_secs);
    for (i, (&c, &m)) in cpu.iter().zip(free_mib).enumerate() {
        if c.is_nan() || m.is_nan() {
            continue;
        }
        let time = grid
            .start_time
            .saturating_add(step.saturating_mul(i as i64));
        let c = c.clamp(0.0, 100.0);
        // `as` saturates: +inf becomes u64::MAX, which is plenty of memory.
        let m = m.max(0.0).floor() as u64;
        tracker.observe(th, time, c);
        let state = tracker.state_at(th, time, c, m);
        if state.is_failure() {
            return Some(ForecastFailure {
                step: i,
                time,
                state,
            });
        }
    }
    None
}

/// The probabilistic reliability of simulated futures: the share of paired
/// paths (path i of `cpu_paths` with path i of `free_paths`, laid out as by
/// [`simulate_paths`]) on which no failure state is entered. `None` when
/// there are no paths.
pub fn share_of_paths_without_failure(
    th: &Thresholds,
    grid: ForecastGrid,
    tracker: ExcursionTracker,
    cpu_paths: &[f64],
    free_paths: &[f64],
    horizon: usize,
) -> Option<f64> {
    let mut total = 0usize;
    let mut survived = 0usize;
    for (cpu, free) in paths(cpu_paths, horizon).zip(paths(free_paths, horizon)) {
        total += 1;
        if first_failure_in_forecast(th, grid, tracker, cpu, free).is_none() {
            survived += 1;
        }
    }
    (total > 0).then(|| survived as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// `n` samples of a Gaussian ARMA process (unit innovations) around `mean`,
    /// after `burn` discarded start-up samples.
    fn simulate_arma(ar: &[f64], ma: &[f64], mean: f64, n: usize, seed: u64) -> Vec<f64> {
        let burn = 500;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut normal = StandardNormal::default();
        let mut y = vec![0.0; n + burn];
        let mut e = vec![0.0; n + burn];
        for t in 0..n + burn {
            e[t] = normal.sample(&mut rng);
            let mut v = e[t];
            for (i, a) in ar.iter().enumerate().filter(|(i, _)| *i < t) {
                v += a * y[t - 1 - i];
            }
            for (j, b) in ma.iter().enumerate().filter(|(j, _)| *j < t) {
                v += b * e[t - 1 - j];
            }
            y[t] = v;
        }
        y[burn..].iter().map(|v| v + mean).collect()
    }

    fn assert_close(got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= tol,
                "got {got:?}, want {want:?} (tol {tol})"
            );
        }
    }

    #[test]
    fn ar2_coefficients_are_recovered() {
        let x = simulate_arma(&[0.6, -0.3], &[], 40.0, 5000, 7);
        let f = fit(TimeSeriesModel::Ar(2), &x).unwrap();
        assert_eq!(f.used(), TimeSeriesModel::Ar(2));
        assert!(!f.fell_back());
        assert_close(f.ar_coefficients(), &[0.6, -0.3], 0.05);
        assert!((f.mean() - 40.0).abs() < 0.2, "mean {}", f.mean());
        assert!((f.innovation_variance() - 1.0).abs() < 0.1);
        assert_eq!(f.residuals().len(), 5000 - 2);
    }

    #[test]
    fn ar8_on_ar2_data_keeps_higher_lags_small() {
        let x = simulate_arma(&[0.6, -0.3], &[], 0.0, 5000, 11);
        let f = fit(TimeSeriesModel::Ar(8), &x).unwrap();
        let mut want = vec![0.0; 8];
        want[..2].copy_from_slice(&[0.6, -0.3]);
        assert_close(f.ar_coefficients(), &want, 0.07);
    }

    /// Gaussian elimination with partial pivoting, independent of the code under test.
    fn direct_solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
        let n = b.len();
        for c in 0..n {
            let piv = (c..n)
                .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
                .unwrap();
            a.swap(c, piv);
            b.swap(c, piv);
            for r in c + 1..n {
                let f = a[r][c] / a[c][c];
                let pivot_row = a[c].clone();
                for (x, p) in a[r][c..].iter_mut().zip(&pivot_row[c..]) {
                    *x -= f * p;
                }
                b[r] -= f * b[c];
            }
        }
        let mut x = vec![0.0; n];
        for r in (0..n).rev() {
            let s: f64 = (r + 1..n).map(|k| a[r][k] * x[k]).sum();
            x[r] = (b[r] - s) / a[r][r];
        }
        x
    }

    #[test]
    fn levinson_durbin_agrees_with_direct_yule_walker_solve() {
        let x = simulate_arma(&[0.5, 0.2, -0.1], &[0.3], 0.0, 300, 3);
        let r = autocovariances(&x, 4);
        let (phi, err) = levinson_durbin(&r).unwrap();
        let p: usize = 4;
        let toeplitz = (0..p)
            .map(|i| (0..p).map(|j| r[i.abs_diff(j)]).collect())
            .collect();
        let direct = direct_solve(toeplitz, r[1..].to_vec());
        assert_close(&phi, &direct, 1e-10);
        let direct_err = r[0] - phi.iter().zip(&r[1..]).map(|(a, g)| a * g).sum::<f64>();
        assert!((err - direct_err).abs() < 1e-10);
    }

    #[test]
    fn levinson_durbin_rejects_non_positive_definite_input() {
        assert!(levinson_durbin(&[0.0, 0.0]).is_none());
        assert!(levinson_durbin(&[1.0, 1.0]).is_none());
        assert!(levinson_durbin(&[1.0, f64::NAN]).is_none());
        assert!(levinson_durbin(&[]).is_none());
    }

    #[test]
    fn invertibility_follows_the_ma_roots() {
        assert!(is_invertible(&[0.5]));
        assert!(is_invertible(&[-0.9]));
        assert!(!is_invertible(&[-1.0]));
        assert!(!is_invertible(&[1.2]));
        // 1 + 2.5z + z² = (1 + 0.5z)(1 + 2z) has the root -0.5 inside.
        assert!(!is_invertible(&[2.5, 1.0]));
        assert!(is_invertible(&[]));
    }

    #[test]
    fn bm_picks_the_best_window_and_iterates_it() {
        // Alternating 1, 3: a window of 2 (or 4, 6, 8) predicts 2 with error 1;
        // the shortest of the tied windows wins.
        let x: Vec<f64> = (0..20)
            .map(|i| if i % 2 == 0 { 1.0 } else { 3.0 })
            .collect();
        let f = fit(TimeSeriesModel::Bm(8), &x).unwrap();
        assert_eq!(f.used(), TimeSeriesModel::Bm(8));
        assert_eq!(f.mean_window(), Some(2));
        assert!((f.innovation_variance() - 1.0).abs() < 1e-12);
        assert_close(&forecast(&f, &x, 3), &[2.0, 2.5, 2.25], 1e-12);
    }

    #[test]
    fn bm_on_a_ramp_uses_the_last_value() {
        let x: Vec<f64> = (0..30).map(f64::from).collect();
        let f = fit(TimeSeriesModel::Bm(8), &x).unwrap();
        assert_eq!(f.mean_window(), Some(1));
        assert_close(&forecast(&f, &x, 2), &[29.0, 29.0], 1e-12);
    }

    #[test]
    fn last_repeats_the_last_value() {
        let x = [5.0, 7.0, 4.0];
        let f = fit(TimeSeriesModel::Last, &x).unwrap();
        assert_close(&forecast(&f, &x, 3), &[4.0, 4.0, 4.0], 0.0);
        assert_close(f.residuals(), &[2.0, -3.0], 0.0);
        assert!((f.innovation_variance() - 6.5).abs() < 1e-12);
    }

    #[test]
    fn ar_point_forecast_follows_the_recursion() {
        let x = simulate_arma(&[0.6, -0.3], &[], 10.0, 400, 5);
        let f = fit(TimeSeriesModel::Ar(2), &x).unwrap();
        let (a, m) = (f.ar_coefficients().to_vec(), f.mean());
        let n = x.len();
        let y1 = a[0] * (x[n - 1] - m) + a[1] * (x[n - 2] - m);
        let y2 = a[0] * y1 + a[1] * (x[n - 1] - m);
        assert_close(&forecast(&f, &x, 2), &[m + y1, m + y2], 1e-12);
        // Far ahead a stationary forecast returns to the mean.
        let far = forecast(&f, &x, 200);
        assert!((far[199] - m).abs() < 1e-9);
    }

    #[test]
    fn ma1_is_recovered() {
        let x = simulate_arma(&[], &[0.5], 3.0, 5000, 21);
        let f = fit(TimeSeriesModel::Ma(1), &x).unwrap();
        assert_eq!(f.used(), TimeSeriesModel::Ma(1), "{:?}", f.fallbacks());
        assert_close(f.ma_coefficients(), &[0.5], 0.1);
        assert!((f.innovation_variance() - 1.0).abs() < 0.1);
        // One step ahead uses the last estimated innovation; two steps ahead
        // an MA(1) forecast is the mean.
        let fc = forecast(&f, &x, 2);
        assert!((fc[1] - f.mean()).abs() < 1e-12);
        assert!((fc[0] - f.mean()).abs() > 1e-9);
    }

    #[test]
    fn arma11_is_recovered() {
        let x = simulate_arma(&[0.7], &[0.4], 0.0, 5000, 33);
        let f = fit(TimeSeriesModel::Arma(1, 1), &x).unwrap();
        assert_eq!(f.used(), TimeSeriesModel::Arma(1, 1), "{:?}", f.fallbacks());
        assert_close(f.ar_coefficients(), &[0.7], 0.1);
        assert_close(f.ma_coefficients(), &[0.4], 0.1);
    }

    #[test]
    fn paper_suite_fits_arma_process_without_fallback() {
        let x = simulate_arma(&[0.7], &[0.4], 30.0, 600, 2);
        for model in TimeSeriesModel::PAPER_SUITE {
            let f = fit(model, &x).unwrap();
            assert_eq!(f.used(), model, "{model}: {:?}", f.fallbacks());
        }
    }

    #[test]
    fn constant_window_falls_back_to_last() {
        let x = vec![42.5; 50];
        for model in TimeSeriesModel::PAPER_SUITE {
            let f = fit(model, &x).unwrap();
            assert_eq!(f.used(), TimeSeriesModel::Last);
            if model != TimeSeriesModel::Last {
                assert_eq!(
                    f.fallbacks(),
                    &[Fallback {
                        from: model,
                        reason: FallbackReason::Constant
                    }]
                );
            }
            assert_close(&forecast(&f, &x, 4), &[42.5; 4], 0.0);
        }
    }

    #[test]
    fn windows_without_finite_values_are_refused() {
        assert_eq!(
            fit(TimeSeriesModel::Ar(8), &[]),
            Err(FitError::NoFiniteValues)
        );
        let nan = [f64::NAN, f64::INFINITY, f64::NAN];
        assert_eq!(
            fit(TimeSeriesModel::Last, &nan),
            Err(FitError::NoFiniteValues)
        );
    }

    #[test]
    fn only_the_last_finite_run_is_fitted() {
        let x = [100.0, f64::NAN, 1.0, 2.0, 3.0, f64::INFINITY, f64::NAN];
        let f = fit(TimeSeriesModel::Bm(8), &x).unwrap();
        assert_eq!(f.unused_samples(), 4);
        assert!((f.mean() - 2.0).abs() < 1e-12);
        let f = fit(TimeSeriesModel::Last, &[f64::NAN, 4.0]).unwrap();
        assert_eq!(forecast(&f, &[f64::NAN, 4.0], 1), vec![4.0]);
    }

    #[test]
    fn short_windows_lower_the_order_then_fall_to_bm_and_last() {
        let x = [1.0, 3.0, 2.0, 5.0, 4.0];
        let f = fit(TimeSeriesModel::Ar(8), &x).unwrap();
        assert_eq!(f.used(), TimeSeriesModel::Ar(1));
        assert_eq!(
            f.fallbacks(),
            &[Fallback {
                from: TimeSeriesModel::Ar(8),
                reason: FallbackReason::TooShort { len: 5, needed: 18 }
            }]
        );
        let f = fit(TimeSeriesModel::Arma(8, 8), &x[..3]).unwrap();
        assert_eq!(f.used(), TimeSeriesModel::Bm(8));
        let f = fit(TimeSeriesModel::Ma(8), &[7.0]).unwrap();
        assert_eq!(f.used(), TimeSeriesModel::Last);
        assert_eq!(forecast(&f, &[7.0], 2), vec![7.0, 7.0]);
    }

    #[test]
    fn model_names_round_trip() {
        for model in TimeSeriesModel::PAPER_SUITE {
            assert_eq!(model.to_string().parse::<TimeSeriesModel>(), Ok(model));
        }
        assert_eq!("arma( 2, 1 )".parse(), Ok(TimeSeriesModel::Arma(2, 1)));
        assert!("AR(x)".parse::<TimeSeriesModel>().is_err());
        assert!("GARCH(1,1)".parse::<TimeSeriesModel>().is_err());
    }

    fn moments(values: impl Iterator<Item = f64>) -> (f64, f64) {
        let v: Vec<f64> = values.collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        (mean, var)
    }

    #[test]
    fn white_noise_paths_have_the_fitted_mean_and_variance() {
        let x: Vec<f64> = simulate_arma(&[], &[], 0.0, 3000, 9)
            .iter()
            .map(|e| 10.0 + 2.0 * e)
            .collect();
        let f = fit(TimeSeriesModel::Ar(0), &x).unwrap();
        assert!((f.innovation_variance() - 4.0).abs() < 0.3);
        let (horizon, n_paths) = (5, 4000);
        let mut out = Vec::new();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for draw in [InnovationDraw::Bootstrap, InnovationDraw::Gaussian] {
            simulate_paths_with(&f, &x, horizon, n_paths, draw, &mut rng, &mut out);
            assert_eq!(out.len(), horizon * n_paths);
            for step in 0..horizon {
                let (m, v) = moments(paths(&out, horizon).map(|p| p[step]));
                assert!(
                    (m - f.mean()).abs() < 0.15,
                    "{draw:?} step {step}: mean {m}"
                );
                let rel = v / f.innovation_variance();
                assert!((rel - 1.0).abs() < 0.1, "{draw:?} step {step}: var {v}");
            }
        }
    }

    #[test]
    fn ar1_paths_spread_like_the_model_says() {
        // h steps ahead an AR(1) has variance σ²(1 - φ^{2h}) / (1 - φ²).
        let x = simulate_arma(&[0.8], &[], 0.0, 4000, 17);
        let f = fit(TimeSeriesModel::Ar(1), &x).unwrap();
        let phi = f.ar_coefficients()[0];
        let horizon = 10;
        let mut out = Vec::new();
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        simulate_paths(&f, &x, horizon, 4000, &mut rng, &mut out);
        let point = forecast(&f, &x, horizon);
        for h in [0, 4, 9] {
            let (m, v) = moments(paths(&out, horizon).map(|p| p[h]));
            let k = (h + 1) as i32;
            let want = f.innovation_variance() * (1.0 - phi.powi(2 * k)) / (1.0 - phi * phi);
            assert!(
                (m - point[h]).abs() < 0.15,
                "step {h}: mean {m} vs {}",
                point[h]
            );
            assert!((v / want - 1.0).abs() < 0.12, "step {h}: var {v} vs {want}");
        }
    }

    #[test]
    fn sustained_load_forecast_enters_s3_after_the_sustain_time() {
        let th = Thresholds::default();
        let grid = ForecastGrid {
            start_time: 1000,
            step_secs: 6,
        };
        let mut cpu = vec![10.0, 10.0];
        cpu.extend([150.0; 20]); // clipped to 100: still above Th2
        let free = vec![4096.0; cpu.len()];
        let hit = first_failure_in_forecast(&th, grid, ExcursionTracker::default(), &cpu, &free);
        // The excursion starts at step 2 (t = 1012) and is S3 from t = 1072.
        assert_eq!(
            hit,
            Some(ForecastFailure {
                step: 12,
                time: 1072,
                state: State::S3
            })
        );
        // A 54-second spike only suspends the guest.
        let spike = [
            10.0, 90.0, 90.0, 90.0, 90.0, 90.0, 90.0, 90.0, 90.0, 90.0, 90.0, 10.0,
        ];
        let free = vec![4096.0; spike.len()];
        assert_eq!(
            first_failure_in_forecast(&th, grid, ExcursionTracker::default(), &spike, &free),
            None
        );
    }

    #[test]
    fn memory_forecast_below_the_working_set_is_s4() {
        let th = Thresholds {
            job_mem_mib: 512,
            ..Thresholds::default()
        };
        let grid = ForecastGrid {
            start_time: 0,
            step_secs: 6,
        };
        let cpu = [5.0; 4];
        let free = [1000.0, 512.0, 511.9, -3.0];
        let hit = first_failure_in_forecast(&th, grid, ExcursionTracker::default(), &cpu, &free);
        assert_eq!(hit.map(|h| (h.step, h.state)), Some((2, State::S4)));
        let no_job = Thresholds::default();
        assert_eq!(
            first_failure_in_forecast(&no_job, grid, ExcursionTracker::default(), &cpu, &free),
            None
        );
    }

    #[test]
    fn share_of_surviving_paths_counts_failing_pairs() {
        let th = Thresholds {
            job_mem_mib: 100,
            ..Thresholds::default()
        };
        let grid = ForecastGrid {
            start_time: 0,
            step_secs: 6,
        };
        let cpu = [5.0, 5.0, 5.0, 5.0, 5.0, 5.0];
        let free = [500.0, 500.0, 500.0, 500.0, 50.0, 500.0];
        let share =
            share_of_paths_without_failure(&th, grid, ExcursionTracker::default(), &cpu, &free, 2);
        assert_eq!(share, Some(2.0 / 3.0));
        let none =
            share_of_paths_without_failure(&th, grid, ExcursionTracker::default(), &[], &[], 2);
        assert_eq!(none, None);
    }

    /// Each path of a [`PathBatch`] is the path [`PathSimulator`] runs with
    /// the same innovations, also after other paths were dropped.
    #[test]
    fn lockstep_paths_match_one_path_at_a_time() {
        let data = simulate_arma(&[0.5, -0.2], &[0.4], 30.0, 400, 3);
        let innovation = |path: usize, h: usize| ((path * 31 + h * 7) % 13) as f64 - 6.0;
        for model in TimeSeriesModel::PAPER_SUITE {
            let fitted = fit(model, &data).unwrap();
            let horizon = 40;
            let paths = 5;
            let want: Vec<Vec<f64>> = (0..paths)
                .map(|p| {
                    let mut sim = PathSimulator::new(&fitted, &data, horizon);
                    let mut values = Vec::new();
                    let mut h = 0;
                    sim.run_until(
                        horizon,
                        || {
                            h += 1;
                            innovation(p, h - 1)
                        },
                        |_, v| {
                            values.push(v);
                            false
                        },
                    );
                    values
                })
                .collect();
            let mut batch = PathBatch::new(&fitted, &data, paths);
            // Column i holds path ids[i]; path 1 ends after step 9, path 4 after step 19.
            let mut ids: Vec<usize> = (0..paths).collect();
            let by_step: Vec<Vec<f64>> = (0..horizon)
                .map(|h| want.iter().map(|path| path[h]).collect())
                .collect();
            for (h, expected) in by_step.iter().enumerate() {
                let draws: Vec<f64> = ids.iter().map(|&p| innovation(p, h)).collect();
                let got = batch.step(&draws).to_vec();
                assert_eq!(got.len(), ids.len());
                for (v, &p) in got.iter().zip(&ids) {
                    assert!(
                        (v - expected[p]).abs() < 1e-9,
                        "{model} path {p} step {h}: {v} vs {}",
                        expected[p]
                    );
                }
                for ended in [(9, 1), (19, 4)] {
                    if h == ended.0 {
                        let i = ids.iter().position(|&p| p == ended.1).unwrap();
                        batch.drop_path(i);
                        ids.swap_remove(i);
                    }
                }
            }
            assert_eq!(batch.live(), 3);
        }
    }

    fn any_model() -> impl Strategy<Value = TimeSeriesModel> {
        prop_oneof![
            (0usize..10).prop_map(TimeSeriesModel::Ar),
            (0usize..10).prop_map(TimeSeriesModel::Bm),
            (0usize..10).prop_map(TimeSeriesModel::Ma),
            (0usize..10, 0usize..10).prop_map(|(p, q)| TimeSeriesModel::Arma(p, q)),
            Just(TimeSeriesModel::Last),
        ]
    }

    fn any_sample() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => -1e6..1e6f64,
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
            2 => Just(50.0),
        ]
    }

    proptest! {
        #[test]
        fn any_window_fits_or_is_refused_without_panic(
            model in any_model(),
            x in prop::collection::vec(any_sample(), 0..150),
            seed in any::<u64>(),
        ) {
            let has_finite = x.iter().any(|v| v.is_finite());
            match fit(model, &x) {
                Err(FitError::NoFiniteValues) => prop_assert!(!has_finite),
                Ok(f) => {
                    let fitted = last_finite_run(&x).map_or(0, <[f64]>::len);
                    prop_assert_eq!(f.unused_samples(), x.len() - fitted);
                    prop_assert!(fitted > 0);
                    prop_assert_eq!(f.requested(), model);
                    if let Some(last) = f.fallbacks().last() {
                        prop_assert_ne!(last.from, f.used());
                    }
                    prop_assert!(is_stationary(f.ar_coefficients()));
                    prop_assert!(is_invertible(f.ma_coefficients()));
                    prop_assert!(f.innovation_variance().is_finite());
                    let fc = forecast(&f, &x, 12);
                    prop_assert!(fc.iter().all(|v| v.is_finite()), "{:?}", fc);
                    let mut rng = ChaCha8Rng::seed_from_u64(seed);
                    let mut out = Vec::new();
                    simulate_paths(&f, &x, 12, 3, &mut rng, &mut out);
                    prop_assert_eq!(out.len(), 36);
                    prop_assert!(out.iter().all(|v| v.is_finite()));
                }
            }
        }

        #[test]
        fn stationarity_check_agrees_with_ar2_roots(phi1 in -2.5..2.5f64, phi2 in -1.5..1.5f64) {
            // Roots of λ² - φ1 λ - φ2 (the inverses of the AR polynomial's roots).
            let disc = phi1 * phi1 + 4.0 * phi2;
            let largest = if disc >= 0.0 {
                (phi1.abs() + disc.sqrt()) / 2.0
            } else {
                (-phi2).sqrt()
            };
            prop_assume!((largest - 1.0).abs() > 1e-9);
            prop_assert_eq!(is_stationary(&[phi1, phi2]), largest < 1.0);
        }
    }
}
