//! `logistic`: a per-host logistic model of "the job survives [W, W + T]",
//! fitted on every past hour of the host's own record and asked about the
//! present.
//!
//! Why: `freq` counts same-window survival on ten days and ignores the
//! present beyond the start state; `km` and `stack` model the window's
//! dynamics but are noisy on ten days and cost 1–15 ms. Here every hour of
//! every past day is a training window (24 × days of them, not 10), and the
//! forecast conditions on what is known at W:
//!
//! - `tod`: the survival share of windows of the same length that began in
//!   the same state (S1/S2) at the same local hour on the same kind of day
//!   (±1 h at half weight), recent days weighing more (half-life
//!   [`HALF_LIFE_DAYS`]), shrunk towards `age` with [`TOD_PSEUDO`] pseudo-windows
//!   (empirical Bayes: few same-hour days lean on the wider estimate);
//! - `age`: the share among windows that began in the same state whose run
//!   had lasted about as long (log2-minute buckets, capped at a day), at any
//!   hour, shrunk towards the state's share;
//! - the mean host load over the 30 minutes before W, the time since the
//!   last failure (capped at a day), and the free memory over the last hour
//!   against the job's need.
//!
//! The shares of the training windows are computed leaving each window out
//! of its own share, so the fit learns how far to trust them out of sample.
//! The coefficients are fitted by Newton's method on the weighted log loss
//! with an L2 pull towards [`PRIOR`] (the forecast `tod` itself), so a host
//! with few days stays close to the smoothed frequency.
//!
//! No peeking: the fit for W uses only windows that ended before W's local
//! midnight; the present features read rows at or before W.
//!
//! Cost: the fit is a function of the record before W's local date, so it is
//! cached ([`FitCache`], keyed by a fingerprint of that part of the record and
//! the request's shape) and reused for every query of the day, even after
//! new samples arrive. A cached forecast reads one day of states before W;
//! a new fit reads the training windows off a table of the record's hours
//! ([`SlotTable`]: each hour's present and first failure after it, 48 bytes
//! an hour), kept between answers and brought up to the record as it grows
//! (the hours added, the first failures still awaited, the front a
//! retention cut), and made from the whole record only when none is kept
//! (issue 29, goal 6: a state grid of the whole record, six bytes a step,
//! was built for every new fit before).
//!
//! `logistic+cal` adds one out-of-sample step per fit: the fit the record
//! had [`HOLDOUT_DAYS`] days before W's date forecasts the windows of the
//! days since, and a three-coefficient recalibration ([`Recalibration`]) is
//! fitted on those forecasts and applied to today's. It is the issue's
//! "per-host calibration", parametric rather than isotonic because two
//! weeks of one host's windows are few and overlap.
//! Pure code: no clock, no I/O; the cache is plain memory behind a mutex.

use super::grid::{day_start, prefix_fingerprint, GridCache, Present};
pub use super::grid::{HALF_LIFE_DAYS, MAX_TRAINING_DAYS};
use super::isotonic::Isotonic;
use super::later::{self, LaterCache};
use super::pool_prior::{young_host_target, PoolPrior};
use super::prior::YoungHostPrior;
use super::ridge::{self, dot, sigmoid, Settings};
use super::slots::{SlotCache, SlotTable};
use super::{certain_failure, observed_state, Frequency};
use crate::predict::{geometry, is_weekend, PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use crate::solver::CAUSES;
use crate::state::{State, Thresholds};
use jiff::civil::Date;
use jiff::Timestamp;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

/// Pseudo-windows of the `age` share added to the same-hour share.
pub const TOD_PSEUDO: f64 = 1.0;
/// Pseudo-windows of the state's share added to an age bucket's share.
pub const AGE_PSEUDO: f64 = 4.0;
/// L2 pull of the coefficients towards [`PRIOR`].
pub const RIDGE: f64 = 2.0;
/// Prior coefficients: intercept, logit tod, logit age, load, since-failure, memory.
pub const PRIOR: [f64; FEATURES] = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
/// Number of features, the intercept included.
pub const FEATURES: usize = 6;
/// Fewer training windows than this: the forecast is the `tod` share itself.
const MIN_TRAINING: usize = 24;
/// Forecasts are kept inside [EPS, 1 − EPS] (a logit needs it).
const EPS: f64 = 1e-3;
/// Most fits kept; the cache is emptied when it is full.
const MAX_FITS: usize = 8192;
/// `logistic+cal`: the most recent days before W's date held out to learn
/// the recalibration (a fit made without them forecasts them).
pub const HOLDOUT_DAYS: i64 = 14;
/// `logistic+cal`: L2 pull of the recalibration towards the identity. The
/// held-out windows of one host overlap (hourly starts, windows up to 10 h),
/// so they count for less than their number; the pull is stronger than the
/// fit's.
pub const RECAL_RIDGE: f64 = 10.0;
/// `logistic+cal`: fewer held-out windows than this, no recalibration.
const MIN_HOLDOUT: usize = 48;

/// The `logistic` method (and `logistic+cal`, the same with a per-host
/// recalibration on held-out days). Clones share one cache.
#[derive(Clone)]
pub struct Logistic {
    cache: Arc<FitCache>,
    /// Fits for windows that start after the record's last sample ([`later`]).
    later: Arc<LaterCache>,
    calibration: Calibration,
    /// What a young host's forecast leans on ([`YoungHostPrior`]).
    prior: YoungHostPrior,
    /// The pool's prior, when the host answers with it before its first
    /// day: then the young host's prior shrinks towards it, not towards
    /// the built-in population ([`young_host_target`]).
    pool: Option<Arc<PoolPrior>>,
}

/// What a forecast passes through after the fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Calibration {
    /// `logistic`: the fit's own forecast.
    None,
    /// `logistic+cal`: the parametric [`Recalibration`].
    Recal,
    /// `logistic+iso`: the per-host isotonic map ([`Isotonic`]).
    Isotonic,
}

impl Logistic {
    /// The method with the process-wide cache: every instance made by the
    /// registry shares it, so a node that makes a fresh method per query
    /// still answers from cached fits.
    pub fn shared() -> Self {
        static SHARED: OnceLock<Arc<FitCache>> = OnceLock::new();
        static LATER: OnceLock<Arc<LaterCache>> = OnceLock::new();
        Logistic {
            cache: SHARED.get_or_init(|| Arc::new(FitCache::default())).clone(),
            later: LATER
                .get_or_init(|| Arc::new(LaterCache::default()))
                .clone(),
            calibration: Calibration::None,
            prior: YoungHostPrior::DEFAULT,
            pool: None,
        }
    }

    /// The method with a cache of its own (benchmarks measure cold answers with it).
    pub fn with_own_cache() -> Self {
        Logistic {
            cache: Arc::new(FitCache::default()),
            later: Arc::new(LaterCache::default()),
            calibration: Calibration::None,
            prior: YoungHostPrior::DEFAULT,
            pool: None,
        }
    }

    /// `logistic+cal`: the same fits (and cache), each forecast passed
    /// through the host's own recalibration ([`Recalibration`]).
    pub fn calibrated(self) -> Self {
        Logistic {
            calibration: Calibration::Recal,
            ..self
        }
    }

    /// `logistic+iso`: the same fits (and cache), each forecast passed
    /// through the host's own isotonic map ([`Isotonic`]), learned on the
    /// same held-out days as `logistic+cal`'s recalibration.
    pub fn isotonic(self) -> Self {
        Logistic {
            calibration: Calibration::Isotonic,
            ..self
        }
    }

    /// The same method with another young host's prior
    /// (`logistic-noprior`: [`YoungHostPrior::NONE`]).
    pub fn with_prior(self, prior: YoungHostPrior) -> Self {
        Logistic { prior, ..self }
    }

    /// The same method for a host that answers with its pool's prior
    /// while it has no day of record (`None`: the built-in one): its young
    /// host's prior shrinks towards the same curve. The fits and cache are
    /// shared; only the last step differs.
    pub fn towards_pool(self, pool: Option<Arc<PoolPrior>>) -> Self {
        Logistic { pool, ..self }
    }

    /// Drops every cached grid, fit and table of the record's hours.
    pub fn clear_cache(&self) {
        self.clear_fits();
        self.cache.slots.clear();
    }

    /// Drops every cached grid and fit, keeping the tables of the record's
    /// hours ([`SlotTable`]), which a node keeps as its record grows: what
    /// the day's first answer finds.
    pub fn clear_fits(&self) {
        self.cache.lock().fits.clear();
        self.cache.grids.clear();
        self.later.clear();
    }

    /// Drops the cached grids, keeping the fits ([`super::release_shared_grids`]).
    pub fn release_grids(&self) {
        self.cache.grids.release();
    }
}

/// Grids and fits, keyed by fingerprints of the record.
#[derive(Default)]
pub struct FitCache {
    inner: Mutex<CacheInner>,
    grids: GridCache,
    /// What the fits read of a record, by thresholds ([`SlotTable`]).
    slots: SlotCache,
}

#[derive(Default)]
struct CacheInner {
    fits: HashMap<u64, Arc<WindowFit>>,
}

impl FitCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // A poisoned lock only means another thread panicked mid-insert; the maps stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One training window.
struct Example {
    weekend: bool,
    hour: u8,
    class: usize,
    bucket: usize,
    weight: f64,
    /// Whole days between the window's date and W's date (1: the day before).
    age_days: i64,
    survived: bool,
    /// First failure's cause when it did not survive.
    cause: Option<usize>,
    tail: [f64; 3],
}

/// Weighted counts: total weight and survived weight.
#[derive(Debug, Clone, Copy, Default)]
struct Share {
    n: f64,
    s: f64,
}

impl Share {
    fn add(&mut self, w: f64, y: bool) {
        self.n += w;
        if y {
            self.s += w;
        }
    }
}

/// The shares of one fit: by (weekend, hour, class), (class, age bucket) and class.
#[derive(Debug, Clone)]
struct Tables {
    tod: Vec<Share>,
    age: Vec<Share>,
    class: [Share; 2],
    /// Failure weight by cause per class.
    causes: [[f64; CAUSES]; 2],
    /// Effective days of record: the recency weights of the distinct days
    /// the windows came from (the young host's prior, [`YoungHostPrior`]).
    days: f64,
}

fn tod_slot(weekend: bool, hour: u8, class: usize) -> usize {
    (usize::from(weekend) * 24 + usize::from(hour % 24)) * 2 + class
}

fn age_slot(class: usize, bucket: usize) -> usize {
    class * 12 + bucket.min(11)
}

impl Tables {
    fn new(examples: &[Example]) -> Tables {
        let mut t = Tables {
            tod: vec![Share::default(); 96],
            age: vec![Share::default(); 24],
            class: [Share::default(); 2],
            causes: [[0.0; CAUSES]; 2],
            days: 0.0,
        };
        let mut ages: Vec<(i64, f64)> = examples.iter().map(|e| (e.age_days, e.weight)).collect();
        ages.sort_by_key(|(age, _)| *age);
        ages.dedup_by_key(|(age, _)| *age);
        t.days = ages.iter().map(|(_, w)| w).sum();
        for e in examples {
            t.tod[tod_slot(e.weekend, e.hour, e.class)].add(e.weight, e.survived);
            t.age[age_slot(e.class, e.bucket)].add(e.weight, e.survived);
            t.class[e.class].add(e.weight, e.survived);
            if let Some(c) = e.cause {
                t.causes[e.class][c] += e.weight;
            }
        }
        t
    }

    /// The two shrunk shares for a window, leaving out `own` (weight, survived).
    fn shares(
        &self,
        weekend: bool,
        hour: u8,
        class: usize,
        bucket: usize,
        own: Option<(f64, bool)>,
    ) -> (f64, f64, f64) {
        let (ow, os) = own.map_or((0.0, 0.0), |(w, y)| (w, if y { w } else { 0.0 }));
        let cls = self.class[class];
        let overall = self.class[0].n + self.class[1].n;
        let all_s = self.class[0].s + self.class[1].s;
        let base = if overall - ow > 0.0 {
            (all_s - os + 1.0) / (overall - ow + 2.0)
        } else {
            0.5
        };
        let p_class = (cls.s - os + 2.0 * base) / (cls.n - ow + 2.0);
        let a = self.age[age_slot(class, bucket)];
        let p_age = (a.s - os + AGE_PSEUDO * p_class) / (a.n - ow + AGE_PSEUDO);
        let (mut n, mut s) = (0.0, 0.0);
        for (dh, c) in [(23u8, 0.25), (0, 1.0), (1, 0.25)] {
            let sh = self.tod[tod_slot(weekend, (hour + dh) % 24, class)];
            n += c * sh.n;
            s += c * sh.s;
        }
        let p_tod = (s - os + TOD_PSEUDO * p_age) / (n - ow + TOD_PSEUDO);
        (p_tod, p_age, p_class)
    }
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    (p / (1.0 - p)).ln()
}

fn features(p_tod: f64, p_age: f64, tail: [f64; 3]) -> [f64; FEATURES] {
    [1.0, logit(p_tod), logit(p_age), tail[0], tail[1], tail[2]]
}

/// A fitted model for one (record before a date, window length, thresholds).
#[derive(Debug, Clone)]
pub struct WindowFit {
    tables: Tables,
    /// `None` when there were too few training windows: the forecast is `tod`.
    beta: Option<[f64; FEATURES]>,
    /// Training windows used.
    pub windows: usize,
    /// `logistic+cal`'s recalibration for this fit, made on first use.
    recal: OnceLock<Recalibration>,
    /// `logistic+iso`'s map for this fit, made on first use.
    iso: OnceLock<Isotonic>,
}

/// `logistic+cal`'s map from a fit's score to the forecast: TR =
/// σ(a + b·z + c·logit(p_class)), where z is the fit's log-odds and p_class
/// the share of the start state among the training windows. It is fitted
/// (ridge [`RECAL_RIDGE`] towards a = 0, b = 1, c = 0: the identity) on the
/// last [`HOLDOUT_DAYS`] days before W's date as forecast by a fit made
/// without them, so it learns out of sample how far this host's features
/// can be trusted (b < 1, c > 0 lean towards the state's base rate where
/// they over-fit; a fixes a bias) — a per-host calibration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recalibration {
    /// (a, b, c) in the formula above, padded to the fitter's width.
    coef: [f64; FEATURES],
    /// Held-out windows it was fitted on (0: the identity).
    pub windows: usize,
}

impl Recalibration {
    /// The identity (no held-out days, or too few).
    pub const IDENTITY: Recalibration = Recalibration {
        coef: RECAL_PRIOR,
        windows: 0,
    };

    /// (a, b, c).
    pub fn coefficients(&self) -> [f64; 3] {
        [self.coef[0], self.coef[1], self.coef[2]]
    }

    fn apply(&self, z: f64, p_class: f64) -> f64 {
        sigmoid(dot(&self.coef, &recal_features(z, p_class)))
    }
}

/// The recalibration's prior (the identity), padded to [`FEATURES`].
const RECAL_PRIOR: [f64; FEATURES] = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0];

fn recal_features(z: f64, p_class: f64) -> [f64; FEATURES] {
    [1.0, z, logit(p_class), 0.0, 0.0, 0.0]
}

/// A fit's forecast as it leaves the method: itself, or through a
/// per-host calibration.
#[derive(Debug, Clone, Copy)]
enum After<'a> {
    Nothing,
    Recal(&'a Recalibration),
    Isotonic(&'a Isotonic),
}

impl WindowFit {
    /// The coefficients, when fitted.
    pub fn coefficients(&self) -> Option<[f64; FEATURES]> {
        self.beta
    }

    /// The fit's log-odds for a window out of its training set, and the
    /// share of its start state.
    fn score(
        &self,
        weekend: bool,
        hour: u8,
        class: usize,
        bucket: usize,
        tail: [f64; 3],
    ) -> (f64, f64) {
        let (p_tod, p_age, p_class) = self.tables.shares(weekend, hour, class, bucket, None);
        let z = match self.beta {
            Some(beta) => dot(&beta, &features(p_tod, p_age, tail)),
            None => logit(p_tod),
        };
        (z, p_class)
    }

    fn forecast(
        &self,
        weekend: bool,
        hour: u8,
        p: &Present,
        after: After<'_>,
    ) -> ReliabilityForecast {
        let class = p.class();
        let (z, p_class) = self.score(weekend, hour, class, p.age_bucket(), p.tail());
        let tr = match after {
            After::Nothing => sigmoid(z).clamp(EPS, 1.0 - EPS),
            After::Recal(r) => r.apply(z, p_class).clamp(EPS, 1.0 - EPS),
            After::Isotonic(iso) => iso
                .apply(sigmoid(z).clamp(EPS, 1.0 - EPS))
                .clamp(EPS, 1.0 - EPS),
        };
        let causes = self.tables.causes[class];
        let total: f64 = causes.iter().sum();
        let mut fail = [0.0; CAUSES];
        for (f, c) in fail.iter_mut().zip(causes) {
            *f = if total > 0.0 {
                (1.0 - tr) * c / total
            } else {
                (1.0 - tr) / CAUSES as f64
            };
        }
        ReliabilityForecast {
            tr,
            fail_by_cause: Some(fail),
        }
    }
}

impl WindowFit {
    /// `forecast` (this fit's answer for a window whose present is `p`)
    /// passed through the young host's prior: shrunk by the record's
    /// effective days towards the share of the start state, itself shrunk
    /// towards the population's survival, the pool's prior when the host
    /// has one ([`YoungHostPrior::apply_towards`]). The
    /// failure shares keep their proportions. [`YoungHostPrior::NONE`]
    /// returns `forecast` unchanged.
    fn with_prior(
        &self,
        forecast: ReliabilityForecast,
        (weekend, hour, p): (bool, u8, &Present),
        (prior, pool): (YoungHostPrior, Option<&PoolPrior>),
        window_secs: u64,
    ) -> ReliabilityForecast {
        if prior == YoungHostPrior::NONE {
            return forecast;
        }
        let (_, _, p_class) = self
            .tables
            .shares(weekend, hour, p.class(), p.age_bucket(), None);
        let p0 = young_host_target(pool, window_secs);
        let tr = prior
            .apply_towards(forecast.tr, p_class, self.tables.days, p0)
            .clamp(EPS, 1.0 - EPS);
        let before = 1.0 - forecast.tr;
        let fail_by_cause = forecast.fail_by_cause.map(|fail| {
            fail.map(|f| {
                if before > 0.0 {
                    f * (1.0 - tr) / before
                } else {
                    (1.0 - tr) / CAUSES as f64
                }
            })
        });
        ReliabilityForecast { tr, fail_by_cause }
    }
}

/// Fits the model for windows of `m` steps from the record before `midnight`
/// (W's local date `date` begins there).
fn fit(table: &SlotTable, job_mem: u64, m: usize, date: Date, midnight: i64) -> WindowFit {
    let oldest = midnight.saturating_sub(MAX_TRAINING_DAYS * 86_400);
    let examples = windows_between(table, job_mem, m, date, oldest, midnight);
    fit_examples(examples)
}

/// The training windows of `m` steps that start at or after `oldest` on a
/// date before `date` and end by `midnight`, weighted by their age in days
/// before `date`: the record's hours as the grid of the whole record would
/// read them ([`SlotTable`]).
fn windows_between(
    table: &SlotTable,
    job_mem: u64,
    m: usize,
    date: Date,
    oldest: i64,
    midnight: i64,
) -> Vec<Example> {
    let span = m as i64 * table.step;
    let mut examples = Vec::new();
    let from = table.entries.partition_point(|s| s.start < oldest);
    let to = table.entries.partition_point(|s| s.start < midnight);
    for slot in table.entries.get(from..to).unwrap_or_default() {
        let (day, hour, start) = (slot.date, slot.hour, slot.start);
        if day >= date || start.saturating_add(span) > midnight {
            continue;
        }
        let k = ((start - table.t0) / table.step) as usize;
        let end = k + m;
        if end >= table.steps || !slot.state.is_transient() {
            continue;
        }
        let p = slot.present(table.step, job_mem);
        let (survived, cause) = match slot.first_failure(table.t0, table.step) {
            Some((first_fail, cause)) if first_fail <= end => (false, cause),
            _ => (true, None),
        };
        let age_days = (date - day).get_days().max(0) as f64;
        examples.push(Example {
            weekend: is_weekend(day.weekday()),
            hour,
            class: p.class(),
            bucket: p.age_bucket(),
            weight: 0.5f64.powf(age_days / HALF_LIFE_DAYS),
            age_days: age_days as i64,
            survived,
            cause,
            tail: p.tail(),
        });
    }
    examples
}

/// The tables and the coefficients of a set of training windows.
fn fit_examples(examples: Vec<Example>) -> WindowFit {
    let tables = Tables::new(&examples);
    let windows = examples.len();
    if windows < MIN_TRAINING {
        return WindowFit {
            tables,
            beta: None,
            windows,
            recal: OnceLock::new(),
            iso: OnceLock::new(),
        };
    }
    let rows: Vec<([f64; FEATURES], f64, f64)> = examples
        .iter()
        .map(|e| {
            let (p_tod, p_age, _) = tables.shares(
                e.weekend,
                e.hour,
                e.class,
                e.bucket,
                Some((e.weight, e.survived)),
            );
            (
                features(p_tod, p_age, e.tail),
                e.weight,
                f64::from(u8::from(e.survived)),
            )
        })
        .collect();
    WindowFit {
        tables,
        beta: Some(newton(&rows, PRIOR, RIDGE)),
        windows,
        recal: OnceLock::new(),
        iso: OnceLock::new(),
    }
}

/// A past window as `logistic+iso` learns from it: `fit`'s forecast, as
/// [`WindowFit::forecast`] gives it before any calibration, the outcome
/// (1: survived) and the window's weight.
fn forecast_pair(fit: &WindowFit, e: &Example) -> (f64, f64, f64) {
    let (z, _) = fit.score(e.weekend, e.hour, e.class, e.bucket, e.tail);
    (
        sigmoid(z).clamp(EPS, 1.0 - EPS),
        f64::from(u8::from(e.survived)),
        e.weight,
    )
}

/// Fits the recalibration of `held_out` (windows the fit `early` never saw).
fn recalibrate(early: &WindowFit, held_out: &[Example]) -> Recalibration {
    if held_out.len() < MIN_HOLDOUT {
        return Recalibration::IDENTITY;
    }
    let rows: Vec<([f64; FEATURES], f64, f64)> = held_out
        .iter()
        .map(|e| {
            let (z, p_class) = early.score(e.weekend, e.hour, e.class, e.bucket, e.tail);
            (
                recal_features(z, p_class),
                e.weight,
                f64::from(u8::from(e.survived)),
            )
        })
        .collect();
    Recalibration {
        coef: newton(&rows, RECAL_PRIOR, RECAL_RIDGE),
        windows: held_out.len(),
    }
}

/// `logistic`'s Newton settings (its recorded answers were made with them).
const NEWTON: Settings = Settings {
    max_steps: 25,
    min_curvature: 1e-9,
    min_move: 1e-6,
    mirror: false,
};

/// Weighted ridge logistic regression towards `prior` ([`ridge::fit`]).
pub(crate) fn newton(
    rows: &[([f64; FEATURES], f64, f64)],
    prior: [f64; FEATURES],
    ridge: f64,
) -> [f64; FEATURES] {
    ridge::fit(rows, prior, ridge, &NEWTON)
}

/// What one fit answers: windows of `m` steps on the local `date`, which
/// begins at `midnight` (Unix seconds), read with `th`.
#[derive(Debug, Clone, Copy)]
struct FitDay {
    th: Thresholds,
    m: usize,
    date: Date,
    midnight: i64,
}

impl Logistic {
    /// The fit for windows of `m` steps on W's date, from the cache or made now.
    fn fit_for(&self, series: &HostSeries, asked: FitDay) -> Option<Arc<WindowFit>> {
        let FitDay {
            th,
            m,
            date,
            midnight,
        } = asked;
        let mut h = DefaultHasher::new();
        prefix_fingerprint(series, midnight, &th).hash(&mut h);
        m.hash(&mut h);
        date.hash(&mut h);
        let key = h.finish();
        if let Some(f) = self.cache.lock().fits.get(&key) {
            return Some(f.clone());
        }
        let table = self.cache.slots.table_for(series, th)?;
        let fitted = Arc::new(fit(&table, th.job_mem_mib, m, date, midnight));
        super::fits_made::count_fit_made();
        let mut inner = self.cache.lock();
        if inner.fits.len() >= MAX_FITS {
            inner.fits.clear();
        }
        inner.fits.insert(key, fitted.clone());
        Some(fitted)
    }

    /// `logistic+cal`'s recalibration of `fitted` (the fit for `asked`),
    /// made once per fit on [`Logistic::held_out`].
    fn recal_for(&self, series: &HostSeries, asked: FitDay, fitted: &WindowFit) -> Recalibration {
        *fitted.recal.get_or_init(|| {
            self.held_out(series, asked)
                .map_or(Recalibration::IDENTITY, |(early, held_out)| {
                    recalibrate(&early, &held_out)
                })
        })
    }

    /// `logistic+iso`'s isotonic map of `fitted` (the fit for `asked`), made
    /// once per fit from the host's own past forecasts: on each of the
    /// [`HOLDOUT_DAYS`] days before `date`, that day's own fit (cached: the
    /// fit its queries got) forecasts the windows starting on it that
    /// ended by `midnight` (W's date begins there), against what happened.
    /// The identity when the record before those days is shorter than
    /// [`HOLDOUT_DAYS`] too, as for `logistic+cal`.
    fn iso_for<'f>(
        &self,
        series: &HostSeries,
        asked: FitDay,
        fitted: &'f WindowFit,
    ) -> &'f Isotonic {
        fitted.iso.get_or_init(|| {
            self.past_forecasts(series, asked)
                .map_or(Isotonic::IDENTITY, |pairs| Isotonic::fit(&pairs))
        })
    }

    /// The `(forecast, outcome, weight)` triples of [`Logistic::iso_for`].
    fn past_forecasts(&self, series: &HostSeries, asked: FitDay) -> Option<Vec<(f64, f64, f64)>> {
        let FitDay {
            th,
            m,
            date,
            midnight,
        } = asked;
        let first = date
            .checked_sub(jiff::Span::new().days(HOLDOUT_DAYS))
            .ok()?;
        let first_midnight = day_start(series, first)?;
        if series.first_time()? > first_midnight - HOLDOUT_DAYS * 86_400 {
            return None;
        }
        let table = self.cache.slots.table_for(series, th)?;
        let mut pairs = Vec::new();
        let mut day = first;
        while day < date {
            let day_midnight = day_start(series, day)?;
            let next = day.tomorrow().ok()?;
            let fit = self.fit_for(
                series,
                FitDay {
                    date: day,
                    midnight: day_midnight,
                    ..asked
                },
            )?;
            let windows = windows_between(&table, th.job_mem_mib, m, next, day_midnight, midnight);
            pairs.extend(windows.iter().map(|e| forecast_pair(&fit, e)));
            day = next;
        }
        Some(pairs)
    }

    /// The fit the record had [`HOLDOUT_DAYS`] days before `date` (cached:
    /// it is that day's own fit) and the windows of `m` steps of the days
    /// since, which it never saw and which all end by `midnight` (W's date
    /// begins there). `None` when the record before those days is shorter
    /// than [`HOLDOUT_DAYS`] too (an early fit on a few days would teach a
    /// calibration to distrust a fit that has since seen more).
    fn held_out(
        &self,
        series: &HostSeries,
        asked: FitDay,
    ) -> Option<(Arc<WindowFit>, Vec<Example>)> {
        let FitDay {
            th,
            m,
            date,
            midnight,
        } = asked;
        let split = date
            .checked_sub(jiff::Span::new().days(HOLDOUT_DAYS))
            .ok()?;
        let split_midnight = split
            .to_zoned(series.tz.clone())
            .map(|z| z.timestamp().as_second())
            .ok()?;
        let long_enough = series
            .first_time()
            .is_some_and(|t| t <= split_midnight - HOLDOUT_DAYS * 86_400);
        if !long_enough {
            return None;
        }
        let early = self.fit_for(
            series,
            FitDay {
                date: split,
                midnight: split_midnight,
                ..asked
            },
        )?;
        let table = self.cache.slots.table_for(series, th)?;
        let held_out = windows_between(&table, th.job_mem_mib, m, date, split_midnight, midnight);
        Some((early, held_out))
    }
}

impl ReliabilityPredictor for Logistic {
    fn name(&self) -> String {
        if self.prior == YoungHostPrior::NONE && self.calibration == Calibration::None {
            return "logistic-noprior".to_string();
        }
        match self.calibration {
            Calibration::None => "logistic",
            Calibration::Recal => "logistic+cal",
            Calibration::Isotonic => "logistic+iso",
        }
        .to_string()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        geometry(series, req)?;
        let Some(state) = observed_state(series, req) else {
            // W just after the last sample (the node asks at its clock's
            // now, a sampling period or a cached minute past it): the
            // window that starts at the last sample, whose present is W's.
            let just_after = series
                .last_time()
                .filter(|&last| req.at > last && !later::starts_later(last, req.at));
            if let Some(last) = just_after {
                let at_last = PredictRequest {
                    at: last,
                    ..req.clone()
                };
                // A record that ends down (the gap a node writes when it
                // starts after being off) says nothing of the present: the
                // node asking is up. Its present is unknown until the first
                // reading, so the base rate by the clock answers.
                if observed_state(series, &at_last) == Some(State::S5) {
                    return Frequency.forecast(series, req);
                }
                return self.forecast(series, &at_last);
            }
            // W later after the record's last sample: the model of [`later`].
            if let Some(answer) = later::forecast(&self.cache.grids, &self.later, series, req)? {
                return Ok(answer);
            }
            // W before the record: nothing is known of the present.
            return Frequency.forecast(series, req);
        };
        if state.is_failure() {
            return Ok(certain_failure(state));
        }
        let zoned = Timestamp::from_second(req.at)
            .map_err(|_| PredictError::BadTime(req.at))?
            .to_zoned(series.tz.clone());
        let date = zoned.date();
        let midnight = date
            .to_zoned(series.tz.clone())
            .map_err(|_| PredictError::BadTime(req.at))?
            .timestamp()
            .as_second();
        let step = u64::from(series.step_secs.max(1));
        let m = usize::try_from(req.window_secs / step)
            .unwrap_or(usize::MAX)
            .max(1);
        let th = req.thresholds;
        let day = FitDay {
            th,
            m,
            date,
            midnight,
        };
        let fitted = self.fit_for(series, day);
        let Some(fitted) = fitted.filter(|f| f.windows > 0) else {
            return Err(super::no_history(series, req.at));
        };
        let present = self
            .cache
            .grids
            .present_for(series, th, req.at, state)
            .ok_or(PredictError::BadTime(req.at))?;
        let (weekend, hour) = (is_weekend(date.weekday()), zoned.hour() as u8);
        let answer = match self.calibration {
            Calibration::None => fitted.forecast(weekend, hour, &present, After::Nothing),
            Calibration::Recal => {
                let recal = self.recal_for(series, day, &fitted);
                fitted.forecast(weekend, hour, &present, After::Recal(&recal))
            }
            Calibration::Isotonic => {
                let iso = self.iso_for(series, day, &fitted);
                fitted.forecast(weekend, hour, &present, After::Isotonic(iso))
            }
        };
        Ok(fitted.with_prior(
            answer,
            (weekend, hour, &present),
            (self.prior, self.pool.as_deref()),
            req.window_secs,
        ))
    }
}

#[cfg(test)]
mod recal_tests {
    use super::*;

    fn window(survived: bool) -> Example {
        Example {
            weekend: false,
            hour: 9,
            class: 0,
            bucket: 3,
            weight: 1.0,
            age_days: 1,
            survived,
            cause: (!survived).then_some(0),
            tail: [0.0; 3],
        }
    }

    #[test]
    fn recalibration_formula_by_hand() {
        let r = Recalibration {
            coef: [0.5, 2.0, -1.0, 0.0, 0.0, 0.0],
            windows: 60,
        };
        // σ(0.5 + 2·0.3 − logit 0.8) = σ(1.1 − ln 4), computed by hand.
        assert!((r.apply(0.3, 0.8) - 0.428_911_309_879_796_9).abs() < 1e-12);
        assert_eq!(Recalibration::IDENTITY.apply(0.7, 0.2), sigmoid(0.7));
        assert_eq!(r.coefficients(), [0.5, 2.0, -1.0]);
    }

    /// An early fit that knows nothing (z = 0, state share ½: both features
    /// 0) and held-out days where 45 of 60 windows survived: only the
    /// intercept moves, to the root of 60 (σ(a) − 0.75) + 10 a = 0, solved
    /// by bisection outside the code (0.610 994 387 890 291 7).
    #[test]
    fn recalibration_learns_the_held_out_bias_with_its_ridge() {
        let early = fit_examples(Vec::new());
        assert!(early.beta.is_none());
        let held_out: Vec<Example> = (0..60).map(|i| window(i < 45)).collect();
        let r = recalibrate(&early, &held_out);
        assert_eq!(r.windows, 60);
        let [a, b, c] = r.coefficients();
        assert!((a - 0.610_994_387_890_291_7).abs() < 1e-6, "a = {a}");
        assert!((b - 1.0).abs() < 1e-9 && c.abs() < 1e-9, "b = {b}, c = {c}");
        // Too few held-out windows: the identity.
        assert_eq!(
            recalibrate(&early, &held_out[..MIN_HOLDOUT - 1]),
            Recalibration::IDENTITY
        );
    }

    /// An early fit trained on morning windows failing and afternoon ones
    /// surviving, and five held-out days the other way round.
    fn reversed_held_out() -> (WindowFit, Vec<Example>) {
        let by_hour = |days: u8, survives: fn(u8) -> bool| -> Vec<Example> {
            (0..days)
                .flat_map(|_| {
                    (0..24u8).map(move |hour| {
                        let mut e = window(survives(hour));
                        e.hour = hour;
                        e
                    })
                })
                .collect()
        };
        let early = fit_examples(by_hour(40, |hour| hour >= 12));
        (early, by_hour(5, |hour| hour < 12))
    }

    /// Held-out windows whose outcome the early fit's score predicts
    /// backwards: the slope on the score turns down from 1.
    #[test]
    fn recalibration_distrusts_a_score_that_failed_out_of_sample() {
        let (early, held_out) = reversed_held_out();
        let r = recalibrate(&early, &held_out);
        let [_, b, _] = r.coefficients();
        assert!(b < 0.5, "slope {b}");
        // The fit's own morning forecast was near 0; recalibrated it rises.
        let (z, p_class) = early.score(false, 9, 0, 3, [0.0; 3]);
        assert!(sigmoid(z) < 0.1 && r.apply(z, p_class) > sigmoid(z) + 0.2);
    }

    /// The isotonic map on the same reversed held-out days: the early fit's
    /// morning windows (forecast near 0) survived, its afternoon ones
    /// (near 1) failed, so the isotonic map pools them flat at the
    /// held-out share, and the forecast moves towards it by the blend.
    #[test]
    fn isotonic_map_of_a_score_that_failed_out_of_sample_is_flat() {
        let (early, held_out) = reversed_held_out();
        let pairs: Vec<_> = held_out.iter().map(|e| forecast_pair(&early, e)).collect();
        let iso = Isotonic::fit(&pairs);
        assert_eq!(iso.windows, 120);
        // Every held-out window pools into one block at share ½.
        assert!((iso.raw(0.01) - 0.5).abs() < 1e-12 && (iso.raw(0.99) - 0.5).abs() < 1e-12);
        let (z, _) = early.score(false, 9, 0, 3, [0.0; 3]);
        let p = sigmoid(z).clamp(EPS, 1.0 - EPS);
        let want = (120.0 * 0.5 + crate::baselines::isotonic::PSEUDO_WINDOWS * p)
            / (120.0 + crate::baselines::isotonic::PSEUDO_WINDOWS);
        assert!((iso.apply(p) - want).abs() < 1e-12);
        // Too few held-out windows: the identity.
        assert_eq!(Isotonic::fit(&pairs[..47]), Isotonic::IDENTITY);
    }

    /// No peeking: the map for W's date is learned from windows that ended
    /// by W's midnight, so a record cut at that midnight (its last row the
    /// one at midnight, where the last of them end) gives the same map
    /// as the whole record, whatever happened on W's date; and on a record
    /// long enough for the held-out days it is not the identity.
    #[test]
    fn isotonic_map_reads_nothing_after_w_midnight() {
        use crate::baselines::test_series::{series_from, DAY, HOUR, MONDAY};
        // 40 days: a hog at 10:00–11:00 on days divisible by 3, and on
        // W's date (day 36) a hog all morning, which the map must not see.
        let hog = |t: i64| {
            let (day, tod) = ((t - MONDAY).div_euclid(DAY), (t - MONDAY).rem_euclid(DAY));
            let hot = (day % 3 == 0 && (10 * HOUR..11 * HOUR).contains(&tod))
                || (day == 36 && tod < 12 * HOUR);
            if hot {
                95.0
            } else {
                5.0
            }
        };
        let series = series_from(40, 300, hog);
        let th = Thresholds::default();
        let date = jiff::civil::date(2025, 9, 1)
            .checked_add(jiff::Span::new().days(36))
            .unwrap();
        let midnight = MONDAY + 36 * DAY;
        let cut = crate::baselines::truncated(&series, midnight);
        let m = 12; // one hour of 5-minute steps
        let maps: Vec<Isotonic> = [&series, &cut]
            .into_iter()
            .map(|s| {
                let method = Logistic::with_own_cache().isotonic();
                let day = FitDay {
                    th,
                    m,
                    date,
                    midnight,
                };
                let fitted = method.fit_for(s, day).unwrap();
                method.iso_for(s, day, &fitted).clone()
            })
            .collect();
        assert!(maps[0].windows >= MIN_HOLDOUT, "{:?}", maps[0]);
        assert_eq!(maps[0], maps[1]);
    }
}
