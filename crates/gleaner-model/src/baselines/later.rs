//! `logistic` for a window that starts later: TR(W, T) asked at the
//! record's last sample (the origin, "now") about a W that lies k after it
//! (more than [`NOW_SECS`]),
//! as the node's 24-hour curves and the placement of windows that come
//! later (issue 28) ask. Without it the default answered `freq` there
//! (shared/findings/future-windows.md): a count over ten past days in steps
//! of 0.1, blind to the present.
//!
//! What is known at the origin is the host's habit by the clock and the
//! present, whose information fades with k. The model is a per-host
//! logistic, fitted like `logistic`'s on the host's own record (windows that
//! ended before the origin's local date, recent days weighing more), on
//! training pairs (origin o at every past local hour, lead k in [`LEADS_H`])
//! whose outcome is "a job placed at W = o + k runs T unhit": a window that
//! begins in S3/S4/S5 failed, since the job cannot run there. Features:
//!
//! - `tod`: the survival share of windows of length T beginning at W's local
//!   hour on W's kind of day, whatever their start state (±1 h at a quarter
//!   weight), shrunk towards the host's overall share: the base rate by the
//!   clock;
//! - `cond`: the same share among the pairs whose origin was in the same
//!   state class (S1, S2, failed) with the same lead, shrunk towards `tod`:
//!   how the present state carries over k hours at this time of day (its
//!   log-odds enter as the difference from `tod`'s, so a cell of few pairs
//!   leans on the clock);
//! - the present at the origin (load over 30 minutes, time since the last
//!   failure, free memory against the job's need), each times a decay in k
//!   (e^(−k/2 h), and e^(−k/12 h) for the time since a failure, which
//!   says whether the owner came in today).
//!
//! The coefficients are pulled towards `cond` itself ([`PRIOR`]), so a host
//! with few days answers its smoothed shares, and a host whose present says
//! nothing learns weights near zero and answers its base rate by the clock.
//! Shares of the training pairs leave each pair (and its window) out.
//!
//! No peeking: the fit for an origin uses only windows that ended by the
//! origin's local midnight; the present reads rows at or before the origin.
//! Pure code: no clock, no I/O; the cache is plain memory behind a mutex.

use super::grid::{
    day_start, local_date, prefix_fingerprint, GridCache, GridIndex, Present, HALF_LIFE_DAYS,
    MAX_TRAINING_DAYS,
};
use super::ridge::{self, dot, sigmoid, Settings};
use crate::predict::{is_weekend, PredictError, PredictRequest};
use crate::predictor::ReliabilityForecast;
use crate::series::HostSeries;
use crate::solver::CAUSES;
use crate::state::State;
use jiff::civil::Date;
use jiff::Timestamp;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

/// A W at most this long after the record's last sample is answered by
/// `logistic` as the window starting at that sample (the present is known
/// there; the node asks at its clock's now, up to a sampling period or its
/// series cache's minute after the last sample). Later ones get this model.
pub const NOW_SECS: i64 = 600;

/// Whether a window starting at `at` is this model's, on a record whose
/// last sample is at `last`: more than [`NOW_SECS`] after it.
pub fn starts_later(last: i64, at: i64) -> bool {
    at.saturating_sub(last) > NOW_SECS
}
/// Leads of the training pairs, hours. A query's lead picks the nearest
/// (log scale) for `cond`; the decays use the exact lead.
pub const LEADS_H: [i64; 10] = [1, 2, 3, 4, 6, 9, 12, 16, 24, 36];
/// Number of features, the intercept included.
pub const FEATURES: usize = 8;
/// Prior coefficients: the forecast is `cond`'s share.
pub const PRIOR: [f64; FEATURES] = [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
/// L2 pull of the coefficients towards [`PRIOR`].
pub const RIDGE: f64 = 2.0;
/// Pseudo-windows of the overall share added to a `tod` share.
const TOD_PSEUDO: f64 = 2.0;
/// Pseudo-pairs of `tod` added to a `cond` share.
const COND_PSEUDO: f64 = 4.0;
/// Decay of the present's features with the lead, hours.
const SHORT_DECAY_H: f64 = 2.0;
const LONG_DECAY_H: f64 = 12.0;
/// Fewer training pairs than this: the forecast is `cond` itself.
const MIN_TRAINING: usize = 48;
/// Forecasts are kept inside [EPS, 1 − EPS].
const EPS: f64 = 1e-3;
/// Most fits kept; the cache is emptied when it is full.
const MAX_FITS: usize = 4096;
/// Origin state classes: S1, S2, failed.
const CLASSES: usize = 3;

const NEWTON: Settings = Settings {
    max_steps: 25,
    min_curvature: 1e-9,
    min_move: 1e-6,
    mirror: true,
};

/// The origin's state as the model sees it.
pub(super) fn class_of(state: State) -> usize {
    match state {
        State::S1 => 0,
        State::S2 => 1,
        _ => 2,
    }
}

/// The [`LEADS_H`] index nearest to `lead_secs` on a log scale.
pub fn lead_bucket(lead_secs: i64) -> usize {
    let h = (lead_secs.max(1) as f64 / 3600.0).max(1e-3).ln();
    let mut best = 0;
    for (i, &l) in LEADS_H.iter().enumerate() {
        if (h - (l as f64).ln()).abs() < (h - (LEADS_H[best] as f64).ln()).abs() {
            best = i;
        }
    }
    best
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

/// One past window W as the `tod` share counts it.
#[derive(Debug, Clone, Copy)]
struct Window {
    weekend: bool,
    hour: u8,
    weight: f64,
    survived: bool,
}

/// One training pair: a window and an origin `lead` before it.
#[derive(Debug, Clone, Copy)]
struct Pair {
    /// Index of the window in the fit's window list.
    window: usize,
    class: usize,
    lead: usize,
    lead_h: f64,
    weight: f64,
    tail: [f64; 3],
}

fn tod_slot(weekend: bool, hour: u8) -> usize {
    usize::from(weekend) * 24 + usize::from(hour % 24)
}

fn cond_slot(weekend: bool, hour: u8, class: usize, lead: usize) -> usize {
    (tod_slot(weekend, hour) * CLASSES + class) * LEADS_H.len() + lead
}

/// The shares of one fit.
#[derive(Debug, Clone)]
struct Tables {
    tod: Vec<Share>,
    cond: Vec<Share>,
    all: Share,
    /// Failure weight by cause over the failed windows.
    causes: [f64; CAUSES],
}

/// Leaves out of a share: (weight, survived) of the row itself.
type Own = Option<(f64, bool)>;

fn minus(sh: Share, own: Own) -> (f64, f64) {
    let (w, s) = own.map_or((0.0, 0.0), |(w, y)| (w, if y { w } else { 0.0 }));
    (sh.n - w, sh.s - s)
}

impl Tables {
    /// `tod` and `cond` for a window, leaving out its own window and pair.
    fn shares(
        &self,
        weekend: bool,
        hour: u8,
        class: usize,
        lead: usize,
        own_window: Own,
        own_pair: Own,
    ) -> (f64, f64) {
        let (an, as_) = minus(self.all, own_window);
        let base = (as_ + 1.0) / (an.max(0.0) + 2.0);
        let smooth = |slot: &dyn Fn(u8) -> Share, own: Own| {
            let (mut n, mut s) = (0.0, 0.0);
            for (dh, c) in [(23u8, 0.25), (0, 1.0), (1, 0.25)] {
                let sh = slot((hour + dh) % 24);
                n += c * sh.n;
                s += c * sh.s;
            }
            minus(Share { n, s }, own)
        };
        let (n, s) = smooth(&|h| self.tod[tod_slot(weekend, h)], own_window);
        let p_tod = (s + TOD_PSEUDO * base) / (n.max(0.0) + TOD_PSEUDO);
        let (n, s) = smooth(&|h| self.cond[cond_slot(weekend, h, class, lead)], own_pair);
        let p_cond = (s + COND_PSEUDO * p_tod) / (n.max(0.0) + COND_PSEUDO);
        (p_tod, p_cond)
    }
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    (p / (1.0 - p)).ln()
}

fn features(p_tod: f64, p_cond: f64, lead_h: f64, tail: [f64; 3]) -> [f64; FEATURES] {
    let short = (-lead_h / SHORT_DECAY_H).exp();
    let long = (-lead_h / LONG_DECAY_H).exp();
    let (zt, zc) = (logit(p_tod), logit(p_cond));
    [
        1.0,
        zt,
        zc - zt,
        short * tail[0],
        short * tail[1],
        long * tail[1],
        short * tail[2],
        long * tail[0],
    ]
}

/// A fitted model for one (record before an origin's date, window length,
/// thresholds).
#[derive(Debug, Clone)]
pub struct LaterFit {
    tables: Tables,
    beta: Option<[f64; FEATURES]>,
    /// Training pairs used.
    pub pairs: usize,
    /// Past windows counted.
    pub windows: usize,
}

impl LaterFit {
    /// The coefficients, when fitted.
    pub fn coefficients(&self) -> Option<[f64; FEATURES]> {
        self.beta
    }

    /// TR for a window starting on a day of kind `weekend` at local `hour`,
    /// `lead_secs` after an origin whose present is `p`.
    pub(super) fn forecast(
        &self,
        weekend: bool,
        hour: u8,
        lead_secs: i64,
        p: &Present,
    ) -> ReliabilityForecast {
        let class = class_of(p.state);
        let lead = lead_bucket(lead_secs);
        let lead_h = lead_secs.max(0) as f64 / 3600.0;
        let (p_tod, p_cond) = self.tables.shares(weekend, hour, class, lead, None, None);
        let z = match self.beta {
            Some(beta) => dot(&beta, &features(p_tod, p_cond, lead_h, p.tail())),
            None => logit(p_cond),
        };
        let tr = sigmoid(z).clamp(EPS, 1.0 - EPS);
        let total: f64 = self.tables.causes.iter().sum();
        let mut fail = [0.0; CAUSES];
        for (f, c) in fail.iter_mut().zip(self.tables.causes) {
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

/// Fits the model for windows of `m` steps asked from an origin on local
/// `date`, which begins at `midnight`, from the windows that ended by then
/// (at most `max_days` days back, half-life `half_life_days`).
pub(super) fn fit(
    grid: &GridIndex,
    job_mem: u64,
    m: usize,
    date: Date,
    midnight: i64,
    (max_days, half_life_days): (i64, f64),
) -> LaterFit {
    let oldest = midnight.saturating_sub(max_days * 86_400);
    let span = m as i64 * grid.step;
    let slots = &grid.slots;
    let from = slots.partition_point(|s| s.2 < oldest);
    let to = slots.partition_point(|s| s.2 < midnight);
    let age_weight = |day: Date| {
        let age = (date - day).get_days().max(0) as f64;
        0.5f64.powf(age / half_life_days)
    };
    // Every past window W (by its slot), with its index in `windows`.
    let mut windows = Vec::new();
    let mut index_of: HashMap<usize, usize> = HashMap::new();
    let mut causes = [0.0; CAUSES];
    for (j, &(day, hour, start)) in slots.iter().enumerate().take(to).skip(from) {
        if start.saturating_add(span) > midnight {
            continue;
        }
        let Some(k) = grid.step_of(start) else {
            continue;
        };
        if k + m >= grid.states.len() {
            continue;
        }
        let first_fail = grid.next_fail(k);
        let survived = first_fail == u32::MAX || first_fail as usize > k + m;
        let weight = age_weight(day);
        if !survived {
            if let Some(c) = grid.states[first_fail as usize].failure_index() {
                causes[c] += weight;
            }
        }
        index_of.insert(j, windows.len());
        windows.push(Window {
            weekend: is_weekend(day.weekday()),
            hour,
            weight,
            survived,
        });
    }
    // Every (origin at a past hour, lead) pair whose window was counted.
    let mut pairs = Vec::new();
    for &(day, _, start) in slots.iter().take(to).skip(from) {
        let Some(k) = grid.step_of(start) else {
            continue;
        };
        let present = grid.present(k, job_mem);
        let weight = age_weight(day);
        for (lead, &h) in LEADS_H.iter().enumerate() {
            let w_at = start + h * 3600;
            // The slot holding W (W is on the hour, DST changes aside).
            let Some(j) = slots.partition_point(|s| s.2 <= w_at).checked_sub(1) else {
                continue;
            };
            if slots[j].2 != w_at {
                continue;
            }
            let Some(&window) = index_of.get(&j) else {
                continue;
            };
            pairs.push(Pair {
                window,
                class: class_of(present.state),
                lead,
                lead_h: h as f64,
                weight,
                tail: present.tail(),
            });
        }
    }
    let mut tables = Tables {
        tod: vec![Share::default(); 48],
        cond: vec![Share::default(); 48 * CLASSES * LEADS_H.len()],
        all: Share::default(),
        causes,
    };
    for w in &windows {
        tables.tod[tod_slot(w.weekend, w.hour)].add(w.weight, w.survived);
        tables.all.add(w.weight, w.survived);
    }
    for p in &pairs {
        let w = windows[p.window];
        tables.cond[cond_slot(w.weekend, w.hour, p.class, p.lead)].add(p.weight, w.survived);
    }
    let beta = (pairs.len() >= MIN_TRAINING).then(|| {
        let rows: Vec<ridge::Row<FEATURES>> = pairs
            .iter()
            .map(|p| {
                let w = windows[p.window];
                let (p_tod, p_cond) = tables.shares(
                    w.weekend,
                    w.hour,
                    p.class,
                    p.lead,
                    Some((w.weight, w.survived)),
                    Some((p.weight, w.survived)),
                );
                (
                    features(p_tod, p_cond, p.lead_h, p.tail),
                    p.weight,
                    f64::from(u8::from(w.survived)),
                )
            })
            .collect();
        ridge::fit(&rows, PRIOR, RIDGE, &NEWTON)
    });
    LaterFit {
        tables,
        beta,
        pairs: pairs.len(),
        windows: windows.len(),
    }
}

/// `logistic`'s TR for a W after the record's last sample (the origin): this
/// model, fitted on the record before the origin's local date and
/// asked with the present at the origin. `None` when W is not after
/// the record.
pub(super) fn forecast(
    grids: &GridCache,
    cache: &LaterCache,
    series: &HostSeries,
    req: &PredictRequest,
) -> Result<Option<ReliabilityForecast>, PredictError> {
    let Some(origin) = series.last_time().filter(|&last| req.at > last) else {
        return Ok(None);
    };
    let th = req.thresholds;
    let state = series
        .state_at(th, origin)
        .ok_or(PredictError::BadTime(origin))?;
    let date = local_date(series, origin)?;
    let midnight = day_start(series, date).ok_or(PredictError::BadTime(origin))?;
    let step = u64::from(series.step_secs.max(1));
    let m = usize::try_from(req.window_secs / step)
        .unwrap_or(usize::MAX)
        .max(1);
    let mut h = DefaultHasher::new();
    prefix_fingerprint(series, midnight, &th).hash(&mut h);
    m.hash(&mut h);
    date.hash(&mut h);
    let fitted = cache.get_or_fit(h.finish(), || {
        let grid = grids.grid_for(series, th)?;
        let shape = (MAX_TRAINING_DAYS, HALF_LIFE_DAYS);
        Some(fit(&grid, th.job_mem_mib, m, date, midnight, shape))
    });
    let Some(fitted) = fitted.filter(|f| f.windows > 0) else {
        return Err(super::no_history(series, req.at));
    };
    let present = grids
        .present_for(series, th, origin, state)
        .ok_or(PredictError::BadTime(origin))?;
    let w = Timestamp::from_second(req.at)
        .map_err(|_| PredictError::BadTime(req.at))?
        .to_zoned(series.tz.clone());
    let weekend = is_weekend(w.date().weekday());
    Ok(Some(fitted.forecast(
        weekend,
        w.hour() as u8,
        req.at - origin,
        &present,
    )))
}

/// Later fits, keyed by a fingerprint of the record before the origin's
/// date and the request's shape.
#[derive(Default)]
pub struct LaterCache {
    fits: Mutex<HashMap<u64, Arc<LaterFit>>>,
}

impl LaterCache {
    /// The fit under `key`, or `make`'s, kept.
    pub(super) fn get_or_fit(
        &self,
        key: u64,
        make: impl FnOnce() -> Option<LaterFit>,
    ) -> Option<Arc<LaterFit>> {
        if let Some(f) = self.lock().get(&key) {
            return Some(f.clone());
        }
        let fitted = Arc::new(make()?);
        super::fits_made::count_fit_made();
        let mut fits = self.lock();
        if fits.len() >= MAX_FITS {
            fits.clear();
        }
        fits.insert(key, fitted.clone());
        Some(fitted)
    }

    pub(super) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<LaterFit>>> {
        // A poisoned lock only means another thread panicked mid-insert.
        self.fits.lock().unwrap_or_else(|p| p.into_inner())
    }
}
