//! `hazard`: a discrete-time hazard model of the first resource failure
//! after W, fitted per host with shrinkage towards a prior, whose survival
//! S(T) = ∏ (1 − h_j) answers every window length in one forward pass.
//!
//! Why: `logistic` fits one model per window length and answers one length
//! per call; the node's answer carries a curve of five lengths. A hazard
//! model is fitted once per day and walks the future once: the TR of every
//! length is the survival at that length.
//!
//! The model. Time after W is cut into coarse steps of [`COARSE_SECS`] (or
//! the record's step when coarser). The hazard of step j — the chance that
//! the first failure (S3, S4, S5) after W falls in it, given none before — is
//! h_j = σ(β · x_j) with x_j:
//!
//! - `base`: the logit of the host's own hazard at that local hour on that
//!   kind of day (the share of coarse steps begun in S1/S2 that ended in a
//!   failure, ±1 h at quarter weight, shrunk towards the host's overall
//!   share with [`BASE_PSEUDO`] pseudo-steps; recent days weigh more);
//! - `decay` = 1 / (1 + e) with e the hours since W (at the step's
//!   elapsed-time bucket: log2 of the coarse step index), alone and times
//!   what is known at W: the start state (S2), the age of its run, the
//!   EWMA of host load (half-life 30 min), the time since the last failure
//!   and the free memory over the last hour against the job's need; the
//!   present matters most just after W and fades;
//! - log(1 + e), so survival so far can lower (or raise) the hazard, and the
//!   memory head-room once more, undecayed (a host short of memory stays so).
//!
//! The fit. Every local hour of every day before W's date (at most
//! [`MAX_TRAINING_DAYS`]) that begins in S1 or S2 is an origin; its coarse
//! steps are followed until the first failure (the last step carries the
//! event) or until the follow-up is cut, by W's local midnight or the
//! horizon: a censored origin contributes survival only, never an event it
//! has not seen. Consecutive steps of one origin with the same features are
//! merged into one binomial row. Origins overlap (an hourly origin followed
//! for 12 h shares its steps with 11 others), so each row's weight is
//! divided by the origins that cover a step, which keeps the data's weight
//! that of the distinct steps it has. Newton's method minimises the
//! weighted log loss plus (λ/2)|β − [`PRIOR`]|² ([`RIDGE`]).
//!
//! The prior. [`PRIOR`] is the same model fitted pooled (ridge 1 towards
//! [`NEUTRAL`]: base hazard as it is, nothing else) on three synthetic
//! 140-day desktop hosts, `gleaner trace synth --days 140 --seed 61|62|63`,
//! by `cargo run --release --example hazard_prior`. It saw no shared trace
//! and none of the evaluation's seeds (41–43), so it leaks nothing into the
//! round-four evaluation.
//!
//! No peeking: the fit reads steps before W's local midnight only; the
//! present reads rows at or before W. Cost: the fit is cached (keyed by the
//! record before W's date, the horizon and the reading rules) and shared by
//! every window length up to its horizon; a forecast walks the coarse
//! steps of the longest length asked once.
//! Pure code: no clock, no I/O; the cache is plain memory behind a mutex.

use super::grid::{hour_slots, prefix_fingerprint, GridCache, GridIndex};
use super::recent::{each_recent_sample, recent_states};
use super::ridge::{self, dot, sigmoid, Settings};
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

/// The hazard's step, seconds (the record's own step when that is coarser).
pub const COARSE_SECS: i64 = 300;
/// Half-life of a training day's weight, in days before W's date.
pub const HALF_LIFE_DAYS: f64 = 28.0;
/// Training origins come from at most this many days before W's date.
pub const MAX_TRAINING_DAYS: i64 = 120;
/// Pseudo-steps of the host's overall hazard added to an hour's.
pub const BASE_PSEUDO: f64 = 24.0;
/// L2 pull of the host's coefficients towards [`PRIOR`].
pub const RIDGE: f64 = 10.0;
/// Number of features, the intercept included.
pub const FEATURES: usize = 10;
/// The prior before any data: the host's hour-of-day hazard as it is.
/// Order: intercept, base, decay, decay·S2, decay·age, decay·load,
/// decay·since-failure, decay·memory, log elapsed, memory.
pub const NEUTRAL: [f64; FEATURES] = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
/// The pooled fit on synthetic seeds 61–63 (see the module's doc), to four
/// places: the hour's hazard as it is (1.03); just after W a long run (age
/// −1.30), a light start state (S2 +0.49) and a low load (+0.23) lower the
/// hazard; it falls as the window survives (log elapsed −0.28).
pub const PRIOR: [f64; FEATURES] = [
    -0.0478, 1.0269, 0.2848, 0.4879, -1.2954, 0.2314, -0.0233, -0.0076, -0.2839, 0.2127,
];
/// Fit horizons, hours: a fit serves every window up to its horizon.
const HORIZONS_H: [i64; 3] = [12, 48, 192];
/// How far back the present features look.
const LOOKBACK_SECS: i64 = 86_400;
/// Half-life of the load EWMA, and how far back it reads.
const EWMA_HALF_LIFE_SECS: f64 = 1800.0;
const EWMA_SPAN_SECS: i64 = 7200;
/// Forecasts are kept inside [EPS, 1 − EPS], as `logistic`'s.
const EPS: f64 = 1e-3;
/// Hazards are kept inside [H_EPS, 1 − H_EPS] (a logit needs it).
const H_EPS: f64 = 1e-6;
/// Elapsed-time buckets (log2 of the coarse step index).
const BUCKETS: usize = 16;
/// Most fits kept; the fits are emptied when full.
const MAX_FITS: usize = 4096;

/// The `hazard` method. Clones share one cache.
#[derive(Clone)]
pub struct Hazard {
    cache: Arc<HazardCache>,
}

#[derive(Default)]
struct HazardCache {
    inner: Mutex<CacheInner>,
    grids: GridCache,
}

#[derive(Default)]
struct CacheInner {
    fits: HashMap<u64, Arc<HazardFit>>,
}

impl HazardCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // A poisoned lock only means another thread panicked mid-insert; the maps stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Hazard {
    /// The method with the process-wide cache (every registry instance shares it).
    pub fn shared() -> Self {
        static SHARED: OnceLock<Arc<HazardCache>> = OnceLock::new();
        Hazard {
            cache: SHARED
                .get_or_init(|| Arc::new(HazardCache::default()))
                .clone(),
        }
    }

    /// The method with a cache of its own.
    pub fn with_own_cache() -> Self {
        Hazard {
            cache: Arc::new(HazardCache::default()),
        }
    }

    /// Drops every cached grid and fit.
    pub fn clear_cache(&self) {
        self.cache.lock().fits.clear();
        self.cache.grids.clear();
    }

    /// Drops the cached grids, keeping the fits ([`super::release_shared_grids`]).
    pub fn release_grids(&self) {
        self.cache.grids.release();
    }
}

/// What is known at an origin (a training hour's start, or W), scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Origin {
    class: usize,
    /// ln(1 + age of the run in hours, capped at a day) / ln 25.
    age: f64,
    /// EWMA of host load / 100 − 0.3.
    load: f64,
    /// ln(1 + hours since the last failure, capped at a day) / ln 25.
    since: f64,
    /// ln(min free / job's need) / 3, in [−1, 1]; 0 without a need.
    mem: f64,
}

impl Origin {
    /// From the run's age and the time since the last failure (steps,
    /// already capped at the lookback), and the load and free memory of the
    /// steps ending at the origin (the last element is the origin's).
    fn new(
        state: State,
        age_steps: usize,
        since_steps: usize,
        step: i64,
        cpu: &[u8],
        free: &[u32],
        job_mem: u64,
    ) -> Origin {
        let hours = |steps: usize| (steps as f64 * step as f64 / 3600.0).clamp(0.0, 24.0);
        let scale = 25f64.ln();
        // Load: exponentially weighted over the last two hours.
        let span = ((EWMA_SPAN_SECS / step).max(1) as usize).min(cpu.len());
        let (mut num, mut den) = (0.0, 0.0);
        for (back, &c) in cpu[cpu.len() - span..].iter().rev().enumerate() {
            let w = 0.5f64.powf(back as f64 * step as f64 / EWMA_HALF_LIFE_SECS);
            num += w * f64::from(c);
            den += w;
        }
        let load = if den > 0.0 { num / den } else { 0.0 };
        let w60 = ((3600 / step).max(1) as usize).min(free.len());
        let min_free = free[free.len() - w60..].iter().copied().min().unwrap_or(0);
        let mem = if job_mem == 0 {
            0.0
        } else {
            ((u64::from(min_free).max(1) as f64) / job_mem as f64)
                .ln()
                .clamp(-3.0, 3.0)
                / 3.0
        };
        Origin {
            class: usize::from(state == State::S2),
            age: (1.0 + hours(age_steps)).ln() / scale,
            load: load / 100.0 - 0.3,
            since: (1.0 + hours(since_steps)).ln() / scale,
            mem,
        }
    }
}

/// Elapsed-time bucket of coarse step j (0-based): ⌊log2(j + 1)⌋.
fn bucket(j: usize) -> usize {
    ((usize::BITS - (j + 1).leading_zeros() - 1) as usize).min(BUCKETS - 1)
}

/// The features of a coarse step in elapsed bucket `b` of an origin, with
/// `base` the logit of the hour's hazard and `coarse_h` the step in hours.
fn features(base: f64, b: usize, coarse_h: f64, o: &Origin) -> [f64; FEATURES] {
    // Midpoint of the bucket's steps, in hours since W.
    let e = (1.5 * (1u64 << b) as f64 - 1.0) * coarse_h;
    let decay = 1.0 / (1.0 + e);
    [
        1.0,
        base,
        decay,
        decay * o.class as f64,
        decay * o.age,
        decay * o.load,
        decay * o.since,
        decay * o.mem,
        (1.0 + e).ln() / 49f64.ln(),
        o.mem,
    ]
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(H_EPS, 1.0 - H_EPS);
    (p / (1.0 - p)).ln()
}

fn base_slot(weekend: bool, hour: u8) -> usize {
    usize::from(weekend) * 24 + usize::from(hour % 24)
}

/// A fitted hazard model for one (record before a date, horizon, rules).
#[derive(Debug, Clone)]
pub struct HazardFit {
    /// Logit of the smoothed hazard per coarse step, by (weekend, hour).
    base: [f64; 48],
    beta: [f64; FEATURES],
    /// Failure weight by cause per start class.
    causes: [[f64; CAUSES]; 2],
    /// Fine steps per coarse step.
    coarse: usize,
    /// Training origins used.
    pub origins: usize,
}

impl HazardFit {
    /// The coefficients.
    pub fn coefficients(&self) -> [f64; FEATURES] {
        self.beta
    }
}

/// How many coarse steps an origin is followed and whether the last holds
/// its failure: `first_fail` is the coarse index of the first failure (if
/// any is known), `available` the steps before the cut. A failure at or
/// beyond the cut is not seen: the origin is censored there.
pub(crate) fn follow_up(first_fail: Option<usize>, available: usize) -> (usize, bool) {
    match first_fail {
        Some(j) if j < available => (j + 1, true),
        _ => (available, false),
    }
}

/// Training rows of one host: (features, weight, events / weight).
type Row = ([f64; FEATURES], f64, f64);

/// What a fit learns from: the base table, the failures' causes by start
/// class, the merged training rows and the number of origins.
struct Training {
    base: [f64; 48],
    causes: [[f64; CAUSES]; 2],
    rows: Vec<Row>,
    origins: usize,
}

/// The base table, causes and training rows for windows up to `horizon`
/// coarse steps, from the grid's steps before `midnight` on dates before `date`.
fn training(
    grid: &GridIndex,
    job_mem: u64,
    coarse: usize,
    horizon: usize,
    date: Date,
    midnight: i64,
) -> Training {
    let oldest = midnight.saturating_sub(MAX_TRAINING_DAYS * 86_400);
    let from = grid.slots.partition_point(|s| s.2 < oldest);
    let to = grid.slots.partition_point(|s| s.2 < midnight);
    let slots = grid.slots.get(from..to).unwrap_or_default();
    let n = grid.states.len();
    let coarse_secs = coarse as i64 * grid.step;
    // Steps at or before this index end by midnight.
    let last_index = usize::try_from((midnight - grid.t0) / grid.step)
        .unwrap_or(0)
        .min(n.saturating_sub(1));
    let weight_of = |day: Date| {
        let age_days = (date - day).get_days().max(0) as f64;
        0.5f64.powf(age_days / HALF_LIFE_DAYS)
    };

    // The base hazard by (kind, hour): coarse steps from each hour's start.
    let mut at_risk = [0.0f64; 48];
    let mut failed = [0.0f64; 48];
    let per_hour = (3600 / coarse_secs).max(1) as usize;
    for &(day, hour, start) in slots {
        if day >= date || grid.t0 > start {
            continue;
        }
        let Some(k0) = grid.step_of(start) else {
            continue;
        };
        let w = weight_of(day);
        let slot = base_slot(is_weekend(day.weekday()), hour);
        for i in 0..per_hour {
            let k = k0 + i * coarse;
            if k + coarse > last_index {
                break;
            }
            if grid.states[k].is_transient() {
                at_risk[slot] += w;
                if (grid.next_fail(k + 1) as usize) <= k + coarse {
                    failed[slot] += w;
                }
            }
        }
    }
    let (all_n, all_d): (f64, f64) = (at_risk.iter().sum(), failed.iter().sum());
    let overall = (all_d + 0.5) / (all_n + 1.0);
    let mut base = [0.0; 48];
    for (slot, b) in base.iter_mut().enumerate() {
        let (kind, hour) = (slot / 24, slot % 24);
        let (mut sn, mut sd) = (0.0, 0.0);
        for (dh, c) in [(23usize, 0.25), (0, 1.0), (1, 0.25)] {
            let s = kind * 24 + (hour + dh) % 24;
            sn += c * at_risk[s];
            sd += c * failed[s];
        }
        *b = logit((sd + BASE_PSEUDO * overall) / (sn + BASE_PSEUDO));
    }

    // The origins and their follow-up.
    let cap = (LOOKBACK_SECS / grid.step).max(1) as usize;
    let span =
        ((EWMA_SPAN_SECS / grid.step).max(1) as usize).max((3600 / grid.step).max(1) as usize);
    let overlap = (horizon as f64 * coarse_secs as f64 / 3600.0).max(1.0);
    let coarse_h = coarse_secs as f64 / 3600.0;
    let mut causes = [[0.0; CAUSES]; 2];
    let mut rows: Vec<Row> = Vec::new();
    let mut origins = 0;
    for (si, &(day, _, start)) in slots.iter().enumerate() {
        if day >= date {
            continue;
        }
        let Some(k) = grid.step_of(start) else {
            continue;
        };
        if !grid.states[k].is_transient() || k >= last_index {
            continue;
        }
        let first = k.saturating_sub(cap);
        let age = k - (grid.run_start(k) as usize).max(first);
        let since = match grid.last_fail(k) {
            u32::MAX => cap,
            f if (f as usize) < first => cap,
            f => k - f as usize,
        };
        let lo = k + 1 - span.min(k + 1);
        let o = Origin::new(
            grid.states[k],
            age,
            since,
            grid.step,
            &grid.cpu[lo..=k],
            &grid.free[lo..=k],
            job_mem,
        );
        let available = ((last_index - k) / coarse).min(horizon);
        let nf = grid.next_fail(k + 1);
        let first_fail = (nf != u32::MAX).then(|| (nf as usize - k - 1) / coarse);
        let (steps, event) = follow_up(first_fail, available);
        if steps == 0 {
            continue;
        }
        origins += 1;
        let w = weight_of(day) / overlap;
        if event {
            if let Some(c) = grid.states[nf as usize].failure_index() {
                causes[o.class][c] += w;
            }
        }
        // Walk the steps, merging runs with the same (hour slot, bucket).
        let mut slot_i = si;
        let mut current: Option<(usize, usize, f64, f64)> = None; // (base slot, bucket, count, events)
        for j in 0..steps {
            let t = start + j as i64 * coarse_secs;
            while slots.get(slot_i + 1).is_some_and(|s| s.2 <= t) {
                slot_i += 1;
            }
            // Past the training slots (the last hours before midnight): the
            // grid's own slots carry on.
            let (sday, shour) = match slots.get(slot_i) {
                Some(&(d, h, _)) => (d, h),
                None => (day, 0),
            };
            let key = (base_slot(is_weekend(sday.weekday()), shour), bucket(j));
            let y = if event && j + 1 == steps { 1.0 } else { 0.0 };
            match &mut current {
                Some((s, b, cnt, ev)) if (*s, *b) == key => {
                    *cnt += 1.0;
                    *ev += y;
                }
                _ => {
                    if let Some((s, b, cnt, ev)) = current.take() {
                        rows.push((features(base[s], b, coarse_h, &o), w * cnt, ev / cnt));
                    }
                    current = Some((key.0, key.1, 1.0, y));
                }
            }
        }
        if let Some((s, b, cnt, ev)) = current {
            rows.push((features(base[s], b, coarse_h, &o), w * cnt, ev / cnt));
        }
    }
    Training {
        base,
        causes,
        rows,
        origins,
    }
}

/// Fits the host's model (no origin before `date`: the prior with the
/// host's base table, and `origins` 0, which the forecast refuses).
fn fit(
    grid: &GridIndex,
    job_mem: u64,
    coarse: usize,
    horizon: usize,
    date: Date,
    midnight: i64,
) -> HazardFit {
    let t = training(grid, job_mem, coarse, horizon, date, midnight);
    HazardFit {
        base: t.base,
        beta: newton(&t.rows, PRIOR, RIDGE),
        causes: t.causes,
        coarse,
        origins: t.origins,
    }
}

/// The pooled fit of several hosts' rows towards [`NEUTRAL`] with ridge 1:
/// how [`PRIOR`] was made (`examples/hazard_prior.rs`). Each host's rows
/// are those of a fit on the day after its record, horizon 12 h.
pub fn pooled_prior(hosts: &[HostSeries], th: Thresholds) -> Option<[f64; FEATURES]> {
    let mut rows = Vec::new();
    for series in hosts {
        let grid = GridIndex::build(series, th)?;
        let coarse = coarse_of(series);
        let last = series.last_time()?;
        let (date, midnight) = local_midnight(series, last + 86_400)?;
        let horizon = horizon_steps(12, coarse, grid.step);
        rows.extend(training(&grid, th.job_mem_mib, coarse, horizon, date, midnight).rows);
    }
    Some(newton(&rows, NEUTRAL, 1.0))
}

fn coarse_of(series: &HostSeries) -> usize {
    let step = i64::from(series.step_secs.max(1));
    ((COARSE_SECS + step / 2) / step).max(1) as usize
}

fn horizon_steps(hours: i64, coarse: usize, step: i64) -> usize {
    let unit = (coarse as i64 * step).max(1);
    ((hours * 3600 + unit - 1) / unit).max(1) as usize
}

/// W's local date and the timestamp of its midnight.
fn local_midnight(series: &HostSeries, at: i64) -> Option<(Date, i64)> {
    let date = Timestamp::from_second(at)
        .ok()?
        .to_zoned(series.tz.clone())
        .date();
    let midnight = date
        .to_zoned(series.tz.clone())
        .ok()?
        .timestamp()
        .as_second();
    Some((date, midnight))
}

/// `hazard`'s Newton settings (its recorded answers were made with them).
const NEWTON: Settings = Settings {
    max_steps: 30,
    min_curvature: 1e-12,
    min_move: 1e-7,
    mirror: true,
};

/// Weighted ridge logistic regression towards `prior` ([`ridge::fit`]).
fn newton(rows: &[Row], prior: [f64; FEATURES], ridge: f64) -> [f64; FEATURES] {
    ridge::fit(rows, prior, ridge, &NEWTON)
}

/// Survival at each of `lengths` (fine steps, any order) from one walk of
/// the coarse steps: S(m) = ∏_{j < q} (1 − h_j) · (1 − h_q)^{r / c} for
/// m = q·c + r. `hour_of(j)` gives the (weekend, hour) of coarse step j.
fn survival(
    fit: &HazardFit,
    origin: &Origin,
    coarse_h: f64,
    lengths: &[usize],
    mut hour_of: impl FnMut(usize) -> (bool, u8),
) -> Vec<f64> {
    let c = fit.coarse.max(1);
    let mut out = vec![1.0; lengths.len()];
    let longest = lengths.iter().copied().max().unwrap_or(0);
    let mut s = 1.0;
    let mut j = 0;
    while j * c < longest {
        let (weekend, hour) = hour_of(j);
        let x = features(
            fit.base[base_slot(weekend, hour)],
            bucket(j),
            coarse_h,
            origin,
        );
        let h = sigmoid(dot(&fit.beta, &x)).clamp(0.0, 1.0);
        for (o, &m) in out.iter_mut().zip(lengths) {
            if m / c == j {
                let r = (m % c) as f64 / c as f64;
                *o = s * (1.0 - h).powf(r);
            }
        }
        s *= 1.0 - h;
        j += 1;
    }
    for (o, &m) in out.iter_mut().zip(lengths) {
        if m / c == j && m > 0 {
            *o = s;
        }
    }
    out
}

/// The present at W read off the series (no grid of the record): the same
/// quantities the grid gives an origin, on a grid ending at W.
fn present(series: &HostSeries, th: Thresholds, at: i64, state: State) -> Option<Origin> {
    let recent = recent_states(series, th, at, state, LOOKBACK_SECS)?;
    let step = recent.step;
    let span = ((EWMA_SPAN_SECS / step).max(1) as usize)
        .max((3600 / step).max(1) as usize)
        .min(recent.len);
    let (mut cpu, mut free) = (Vec::with_capacity(span), Vec::with_capacity(span));
    each_recent_sample(series, at, step, span, |_, s| {
        cpu.push(s.cpu.round().clamp(0.0, 100.0) as u8);
        free.push(u32::try_from(s.free_mib).unwrap_or(u32::MAX));
    })?;
    Some(Origin::new(
        state,
        recent.run - 1,
        recent.since_fail,
        step,
        &cpu,
        &free,
        th.job_mem_mib,
    ))
}

impl Hazard {
    fn fit_for(
        &self,
        series: &HostSeries,
        th: Thresholds,
        horizon_h: i64,
        date: Date,
        midnight: i64,
    ) -> Option<Arc<HazardFit>> {
        let coarse = coarse_of(series);
        let mut h = DefaultHasher::new();
        prefix_fingerprint(series, midnight, &th).hash(&mut h);
        horizon_h.hash(&mut h);
        date.hash(&mut h);
        let key = h.finish();
        if let Some(f) = self.cache.lock().fits.get(&key) {
            return Some(f.clone());
        }
        let grid = self.cache.grids.grid_for(series, th)?;
        let horizon = horizon_steps(horizon_h, coarse, grid.step);
        let fitted = Arc::new(fit(&grid, th.job_mem_mib, coarse, horizon, date, midnight));
        let mut inner = self.cache.lock();
        if inner.fits.len() >= MAX_FITS {
            inner.fits.clear();
        }
        inner.fits.insert(key, fitted.clone());
        Some(fitted)
    }

    /// TR at each of `windows` (seconds) from `req.at`, one walk for all.
    fn curve(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        windows: &[u64],
    ) -> Vec<Result<ReliabilityForecast, PredictError>> {
        let checked: Vec<Result<(), PredictError>> = windows
            .iter()
            .map(|&w| {
                let mut r = req.clone();
                r.window_secs = w;
                geometry(series, &r).map(|_| ())
            })
            .collect();
        let good: Vec<u64> = windows
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(w, _)| *w)
            .collect();
        let answers = match self.curve_checked(series, req, &good) {
            Ok(a) => a,
            Err(e) => return checked.into_iter().map(|c| c.and(Err(e.clone()))).collect(),
        };
        let mut next = answers.into_iter();
        checked
            .into_iter()
            .map(|c| c.and_then(|_| next.next().ok_or_else(|| super::no_history(series, req.at))))
            .collect()
    }

    /// [`Hazard::curve`] for windows that passed the request's checks.
    fn curve_checked(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        windows: &[u64],
    ) -> Result<Vec<ReliabilityForecast>, PredictError> {
        if windows.is_empty() {
            return Ok(Vec::new());
        }
        let Some(state) = observed_state(series, req) else {
            // W beyond the record: nothing is known of the present.
            return windows
                .iter()
                .map(|&w| {
                    let mut r = req.clone();
                    r.window_secs = w;
                    Frequency.forecast(series, &r)
                })
                .collect();
        };
        if state.is_failure() {
            return Ok(vec![certain_failure(state); windows.len()]);
        }
        let (date, midnight) =
            local_midnight(series, req.at).ok_or(PredictError::BadTime(req.at))?;
        let step = series.step_secs.max(1);
        let longest = windows.iter().copied().max().unwrap_or(0);
        let horizon_h = HORIZONS_H
            .iter()
            .copied()
            .find(|h| (*h as u64) * 3600 >= longest)
            .unwrap_or(HORIZONS_H[HORIZONS_H.len() - 1]);
        let th = req.thresholds;
        let fitted = self
            .fit_for(series, th, horizon_h, date, midnight)
            .filter(|f| f.origins > 0)
            .ok_or_else(|| super::no_history(series, req.at))?;
        let origin = present(series, th, req.at, state).ok_or(PredictError::BadTime(req.at))?;
        let lengths: Vec<usize> = windows
            .iter()
            .map(|&w| {
                usize::try_from(w / u64::from(step))
                    .unwrap_or(usize::MAX)
                    .max(1)
            })
            .collect();
        let coarse_secs = fitted.coarse as i64 * i64::from(step);
        let future = hour_slots(series, req.at, req.at.saturating_add(longest as i64));
        let mut slot_i = 0;
        let tr = survival(
            &fitted,
            &origin,
            coarse_secs as f64 / 3600.0,
            &lengths,
            |j| {
                let t = req.at + j as i64 * coarse_secs;
                while future.get(slot_i + 1).is_some_and(|s| s.2 <= t) {
                    slot_i += 1;
                }
                future
                    .get(slot_i)
                    .map_or((false, 0), |&(d, h, _)| (is_weekend(d.weekday()), h))
            },
        );
        let causes = fitted.causes[origin.class];
        let total: f64 = causes.iter().sum();
        Ok(tr
            .into_iter()
            .map(|tr| {
                let tr = tr.clamp(EPS, 1.0 - EPS);
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
            })
            .collect())
    }
}

impl ReliabilityPredictor for Hazard {
    fn name(&self) -> String {
        "hazard".to_string()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        self.curve(series, req, &[req.window_secs])
            .pop()
            .unwrap_or_else(|| Err(super::no_history(series, req.at)))
    }

    fn forecast_curve(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        windows: &[u64],
    ) -> Vec<Result<ReliabilityForecast, PredictError>> {
        self.curve(series, req, windows)
    }
}

#[cfg(test)]
#[path = "hazard_tests.rs"]
mod tests;
