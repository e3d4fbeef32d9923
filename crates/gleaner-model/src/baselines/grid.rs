//! A host's record on its own step grid ([`GridIndex`]) and what is known
//! at a window's start ([`Present`]): what the methods that train on every
//! past hour of a host's record (`logistic`, its windows that start later,
//! `hazard`) read, with the record fingerprint and local-day helpers their
//! caches are keyed by, and the bounded cache of grids ([`GridCache`]) they
//! share.
//!
//! Why a module of its own: `logistic` dispatches to `later` and both read
//! the same grid and present; kept here, neither imports the other's
//! internals (no import circle) and `hazard` needs no copy of the cache.
//! Pure code: no clock, no I/O; the cache is plain memory behind a mutex.

use super::recent::{each_recent_sample, recent_states};
use crate::predict::PredictError;
use crate::series::HostSeries;
use crate::state::{State, Thresholds};
use jiff::civil::{Date, Time};
use jiff::Timestamp;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Half-life of a training window's weight, in days before W's date.
pub const HALF_LIFE_DAYS: f64 = 28.0;
/// Training windows come from at most this many days before W's date
/// (older ones weigh under 5 % at the half-life above), which bounds a fit's
/// cost on records that span years.
pub const MAX_TRAINING_DAYS: i64 = 120;
/// How far back the present features look.
const LOOKBACK_SECS: i64 = 86_400;
/// Most grids kept (each a few bytes per step of a record).
const MAX_GRIDS: usize = 3;

/// A hash of the rows before `end` (their count, the first and last, and 32
/// spread between) and the reading rules: equal for two records that agree
/// before `end`, almost surely different otherwise.
pub(crate) fn prefix_fingerprint(series: &HostSeries, end: i64, th: &Thresholds) -> u64 {
    let n = series.row_at(end.saturating_sub(1)).map_or(0, |r| r + 1);
    let mut h = DefaultHasher::new();
    n.hash(&mut h);
    series.step_secs.hash(&mut h);
    series.max_gap_secs.hash(&mut h);
    series.tz.iana_name().hash(&mut h);
    th.th1.to_bits().hash(&mut h);
    th.th2.to_bits().hash(&mut h);
    th.sustain_secs.hash(&mut h);
    th.job_mem_mib.hash(&mut h);
    if n > 0 {
        for k in 0..=32usize {
            let i = (n - 1) * k / 32;
            if let Some(s) = series.get(i) {
                s.time.hash(&mut h);
                s.cpu.to_bits().hash(&mut h);
                s.free_mib.hash(&mut h);
                s.up.hash(&mut h);
            }
        }
    }
    h.finish()
}

/// The states of a whole record on its own step grid, with what the
/// features need at each step.
pub struct GridIndex {
    pub(crate) t0: i64,
    pub(crate) step: i64,
    pub(crate) states: Vec<State>,
    /// Host load at each step, percent rounded.
    pub(crate) cpu: Vec<u8>,
    pub(crate) free: Vec<u32>,
    /// First step at or after i in a failure state (`u32::MAX`: none).
    pub(crate) next_fail: Vec<u32>,
    /// Step where the run of the same state holding at i began.
    pub(crate) run_start: Vec<u32>,
    /// Last step at or before i in a failure state (`u32::MAX`: none).
    pub(crate) last_fail: Vec<u32>,

    /// Every local hour of every date of the record: (date, hour, start).
    pub(crate) slots: Vec<(Date, u8, i64)>,
}

impl GridIndex {
    /// Builds the grid of `series` read with `th`; `None` for an empty or
    /// one-row record or one too long to index.
    pub fn build(series: &HostSeries, th: Thresholds) -> Option<GridIndex> {
        let t0 = series.first_time()?;
        let last = series.last_time()?;
        let step = i64::from(series.step_secs.max(1));
        let m = usize::try_from((last - t0) / step).ok()?;
        if m == 0 || m >= u32::MAX as usize / 2 {
            return None;
        }
        let mut states = Vec::new();
        if !series.window_states(th, t0, step as u32, m, &mut states) {
            return None;
        }
        let n = states.len();
        let (mut cpu, mut free) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut row = 0usize;
        for k in 0..n {
            let t = t0 + k as i64 * step;
            while series.get(row + 1).is_some_and(|s| s.time <= t) {
                row += 1;
            }
            let s = series.get(row)?;
            cpu.push(s.cpu.round().clamp(0.0, 100.0) as u8);
            free.push(u32::try_from(s.free_mib).unwrap_or(u32::MAX));
        }
        let mut next_fail = vec![u32::MAX; n];
        let mut next = u32::MAX;
        for k in (0..n).rev() {
            if states[k].is_failure() {
                next = k as u32;
            }
            next_fail[k] = next;
        }
        let (mut run_start, mut last_fail) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut begun, mut lastf) = (0u32, u32::MAX);
        for k in 0..n {
            if k > 0 && states[k] != states[k - 1] {
                begun = k as u32;
            }
            if states[k].is_failure() {
                lastf = k as u32;
            }
            run_start.push(begun);
            last_fail.push(lastf);
        }
        let slots = hour_slots(series, t0, last);
        Some(GridIndex {
            t0,
            step,
            states,
            cpu,
            free,
            next_fail,
            run_start,
            last_fail,
            slots,
        })
    }

    pub(crate) fn step_of(&self, t: i64) -> Option<usize> {
        if t < self.t0 {
            return None;
        }
        let k = usize::try_from((t - self.t0) / self.step).ok()?;
        (k < self.states.len()).then_some(k)
    }

    /// The present at step k, as the features see it.
    pub(super) fn present(&self, k: usize, job_mem: u64) -> Present {
        let cap = (LOOKBACK_SECS / self.step).max(1) as usize;
        let first = k.saturating_sub(cap);
        let age = k - (self.run_start[k] as usize).max(first);
        let since_fail = match self.last_fail[k] {
            u32::MAX => cap,
            f if (f as usize) < first => cap,
            f => k - f as usize,
        };
        let w30 = ((1800 / self.step).max(1) as usize).min(k + 1);
        let load = self.cpu[k + 1 - w30..=k]
            .iter()
            .map(|&c| f64::from(c))
            .sum::<f64>()
            / w30 as f64;
        let w60 = ((3600 / self.step).max(1) as usize).min(k + 1);
        let min_free = self.free[k + 1 - w60..=k]
            .iter()
            .copied()
            .min()
            .unwrap_or(0);
        Present {
            state: self.states[k],
            age_secs: age as i64 * self.step,
            since_fail_secs: since_fail as i64 * self.step,
            load,
            min_free: u64::from(min_free),
            job_mem,
        }
    }
}

/// Every local hour of every date from `first` to `last`, in time order.
pub(crate) fn hour_slots(series: &HostSeries, first: i64, last: i64) -> Vec<(Date, u8, i64)> {
    let local = |t: i64| {
        Timestamp::from_second(t)
            .ok()
            .map(|ts| ts.to_zoned(series.tz.clone()).date())
    };
    let (Some(mut day), Some(end)) = (local(first), local(last)) else {
        return Vec::new();
    };
    let mut slots = Vec::new();
    while day <= end {
        for hour in 0..24u8 {
            let Ok(time) = Time::new(hour as i8, 0, 0, 0) else {
                continue;
            };
            if let Ok(z) = day.to_datetime(time).to_zoned(series.tz.clone()) {
                slots.push((day, hour, z.timestamp().as_second()));
            }
        }
        match day.tomorrow() {
            Ok(next) => day = next,
            Err(_) => break,
        }
    }
    slots
}

/// What is known at a window's start.
#[derive(Debug, Clone, Copy)]
pub(super) struct Present {
    pub(super) state: State,
    age_secs: i64,
    since_fail_secs: i64,
    /// Mean host load over the last 30 minutes, percent.
    load: f64,
    min_free: u64,
    job_mem: u64,
}

impl Present {
    pub(super) fn class(&self) -> usize {
        usize::from(self.state == State::S2)
    }

    /// Log2-minute bucket of the run's age, 0..=11.
    pub(super) fn age_bucket(&self) -> usize {
        let minutes = (self.age_secs / 60).max(0) as f64;
        ((1.0 + minutes).log2().floor() as usize).min(11)
    }

    /// The features after the two shares.
    pub(super) fn tail(&self) -> [f64; 3] {
        let since_h = (self.since_fail_secs as f64 / 3600.0).clamp(0.0, 24.0);
        let mem = if self.job_mem == 0 {
            0.0
        } else {
            ((self.min_free.max(1) as f64) / self.job_mem as f64)
                .ln()
                .clamp(-3.0, 3.0)
                / 3.0
        };
        [
            self.load / 100.0 - 0.3,
            (1.0 + since_h).ln() / 25f64.ln(),
            mem,
        ]
    }
}

/// The present at W read straight off the series (no grid of the record):
/// the same quantities as [`GridIndex::present`], on a grid ending at W.
fn present_at(series: &HostSeries, th: Thresholds, at: i64, state: State) -> Option<Present> {
    let recent = recent_states(series, th, at, state, LOOKBACK_SECS)?;
    let step = recent.step;
    // A run as old as the lookback reads as the cap, as on the grid.
    let age = recent.run - 1;
    let mut load_sum = 0.0;
    let w30 = ((1800 / step).max(1) as usize).min(recent.len);
    let w60 = ((3600 / step).max(1) as usize).min(recent.len);
    let mut min_free = u64::MAX;
    each_recent_sample(series, at, step, w60, |j, s| {
        min_free = min_free.min(s.free_mib.min(u64::from(u32::MAX)));
        if j + w30 >= w60 {
            load_sum += s.cpu.round().clamp(0.0, 100.0);
        }
    })?;
    Some(Present {
        state,
        age_secs: age as i64 * step,
        since_fail_secs: recent.since_fail as i64 * step,
        load: load_sum / w30 as f64,
        min_free,
        job_mem: th.job_mem_mib,
    })
}

/// Unix second of `date`'s local midnight (the instant after a skipped one).
/// The one reading of a local midnight for `logistic` and the methods that
/// walk its past days (`nws`, `logistic+hourbias`).
pub(super) fn day_start(series: &HostSeries, date: Date) -> Option<i64> {
    date.to_zoned(series.tz.clone())
        .ok()
        .map(|z| z.timestamp().as_second())
}

/// W's local date (`nws` and `logistic+hourbias` key their caches by it).
pub(super) fn local_date(series: &HostSeries, at: i64) -> Result<Date, PredictError> {
    Ok(jiff::Timestamp::from_second(at)
        .map_err(|_| PredictError::BadTime(at))?
        .to_zoned(series.tz.clone())
        .date())
}

/// Grids of the last few records, and the last present read, keyed by
/// fingerprints of the record. Clones of a method share one.
#[derive(Default)]
pub struct GridCache {
    inner: Mutex<GridsInner>,
}

#[derive(Default)]
struct GridsInner {
    grids: Vec<(u64, Arc<GridIndex>)>,
    /// The last present read, keyed by the whole record's fingerprint and
    /// W: the node asks the asked window and its curve's other lengths of
    /// one record and one W, and the present does not depend on the length.
    present: Option<(u64, Present)>,
}

impl GridCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, GridsInner> {
        // A poisoned lock only means another thread panicked mid-insert; the maps stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every grid and the present.
    pub(super) fn clear(&self) {
        let mut inner = self.lock();
        inner.grids.clear();
        inner.present = None;
    }

    /// [`present_at`], from the one-entry memo when the record (all of it:
    /// a row after W can change the state read at W, by the gap it closes)
    /// and W are those of the last call.
    pub(super) fn present_for(
        &self,
        series: &HostSeries,
        th: Thresholds,
        at: i64,
        state: State,
    ) -> Option<Present> {
        let end = series.last_time()?.saturating_add(1);
        let mut h = DefaultHasher::new();
        prefix_fingerprint(series, end, &th).hash(&mut h);
        at.hash(&mut h);
        state.index().hash(&mut h);
        let key = h.finish();
        if let Some((k, p)) = self.lock().present {
            if k == key {
                return Some(p);
            }
        }
        let present = present_at(series, th, at, state)?;
        self.lock().present = Some((key, present));
        Some(present)
    }

    pub(super) fn grid_for(&self, series: &HostSeries, th: Thresholds) -> Option<Arc<GridIndex>> {
        let end = series.last_time()?.saturating_add(1);
        let key = prefix_fingerprint(series, end, &th);
        if let Some((_, g)) = self.lock().grids.iter().find(|(k, _)| *k == key) {
            return Some(g.clone());
        }
        let grid = Arc::new(GridIndex::build(series, th)?);
        let mut inner = self.lock();
        if inner.grids.len() >= MAX_GRIDS {
            inner.grids.remove(0);
        }
        inner.grids.push((key, grid.clone()));
        Some(grid)
    }
}
