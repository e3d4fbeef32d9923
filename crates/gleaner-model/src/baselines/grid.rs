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
pub(super) const LOOKBACK_SECS: i64 = 86_400;
/// Most grids kept (each six bytes and a little per step of a record). A
/// grid is keyed by the whole record, so it serves only the fits asked of
/// one record; `gleaner eval` asks several records' in turn, and a node
/// lets its grids go after each answer ([`GridCache::release`]).
const MAX_GRIDS: usize = 3;

/// A hash of the rows before `end` (their count, the first and last, and 32
/// spread between) and the reading rules: equal for two records that agree
/// before `end`, almost surely different otherwise.
pub(crate) fn prefix_fingerprint(series: &HostSeries, end: i64, th: &Thresholds) -> u64 {
    let n = series.row_at(end.saturating_sub(1)).map_or(0, |r| r + 1);
    let mut h = DefaultHasher::new();
    n.hash(&mut h);
    hash_reading_rules(&mut h, series, th);
    if n > 0 {
        for k in 0..=32usize {
            let i = (n - 1) * k / 32;
            if let Some(s) = series.get(i) {
                hash_row(&mut h, &s);
            }
        }
    }
    h.finish()
}

/// Feeds `h` the rules a record's states are read by: its step, its
/// longest gap, its time zone and the thresholds. Everything made from a
/// record's states (a grid, a table of its hours) is keyed by them.
pub(super) fn hash_reading_rules(h: &mut impl Hasher, series: &HostSeries, th: &Thresholds) {
    series.step_secs.hash(h);
    series.max_gap_secs.hash(h);
    series.tz.iana_name().hash(h);
    th.th1.to_bits().hash(h);
    th.th2.to_bits().hash(h);
    th.sustain_secs.hash(h);
    th.job_mem_mib.hash(h);
}

/// Feeds `h` one row of a record (its time, load, free memory and up),
/// as the fingerprints that tell one record from another sample it.
pub(super) fn hash_row(h: &mut impl Hasher, s: &crate::series::Sample) {
    s.time.hash(h);
    s.cpu.to_bits().hash(h);
    s.free_mib.hash(h);
    s.up.hash(h);
}

/// The grid's shape for a record: its first time, its step and its steps
/// (at least two, under `u32::MAX / 2`); `None` for an empty or one-row
/// record or one too long to index. The grid and the table of the record's
/// hours (`slots`) are laid on the same steps.
pub(super) fn shape(series: &HostSeries) -> Option<(i64, i64, usize)> {
    let t0 = series.first_time()?;
    let last = series.last_time()?;
    let step = i64::from(series.step_secs.max(1));
    let m = usize::try_from((last - t0) / step).ok()?;
    if m == 0 || m >= u32::MAX as usize / 2 {
        return None;
    }
    Some((t0, step, m + 1))
}

/// The states of a whole record on its own step grid, with what the
/// features need at each step.
///
/// Six bytes a step (the state, the load, the free memory); where the
/// failures and the runs of one state lie is kept as the steps where they
/// change ([`GridIndex::next_fail`], [`GridIndex::last_fail`],
/// [`GridIndex::run_start`] search them), a few per hour of record, where
/// three `u32` a step (18 bytes in all) were kept before: a two-month record
/// of 6 s steps is ~800,000 steps, and the node builds one grid per job
/// memory it is asked about.
pub struct GridIndex {
    pub(crate) t0: i64,
    pub(crate) step: i64,
    pub(crate) states: Vec<State>,
    /// Host load at each step, percent rounded.
    pub(crate) cpu: Vec<u8>,
    pub(crate) free: Vec<u32>,
    /// The runs of steps in a failure state, `[start, end)`, in order and
    /// apart (a failure state after another is the same run).
    fail_runs: Vec<(u32, u32)>,
    /// Every step after the first whose state differs from the step
    /// before's, in order.
    changes: Vec<u32>,

    /// Every local hour of every date of the record: (date, hour, start).
    pub(crate) slots: Vec<(Date, u8, i64)>,
}

impl GridIndex {
    /// Builds the grid of `series` read with `th`; `None` for an empty or
    /// one-row record or one too long to index.
    pub fn build(series: &HostSeries, th: Thresholds) -> Option<GridIndex> {
        let (t0, step, steps) = shape(series)?;
        let last = series.last_time()?;
        let mut states = Vec::new();
        if !series.window_states(th, t0, step as u32, steps - 1, &mut states) {
            return None;
        }
        states.shrink_to_fit();
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
        let (mut fail_runs, mut changes) = (Vec::new(), Vec::new());
        for (k, state) in states.iter().enumerate() {
            // n < u32::MAX / 2 (checked above), so every step fits.
            let k32 = k as u32;
            if k > 0 && *state != states[k - 1] {
                changes.push(k32);
            }
            if state.is_failure() {
                match fail_runs.last_mut() {
                    Some((_, end)) if *end == k32 => *end = k32 + 1,
                    _ => fail_runs.push((k32, k32 + 1)),
                }
            }
        }
        fail_runs.shrink_to_fit();
        changes.shrink_to_fit();
        let slots = hour_slots(series, t0, last);
        Some(GridIndex {
            t0,
            step,
            states,
            cpu,
            free,
            fail_runs,
            changes,
            slots,
        })
    }

    /// First step at or after `k` in a failure state (`u32::MAX`: none).
    pub(crate) fn next_fail(&self, k: usize) -> u32 {
        let i = self
            .fail_runs
            .partition_point(|&(_, end)| end as usize <= k);
        match self.fail_runs.get(i) {
            // The run ends after k: k is in it, or it starts after k.
            Some(&(start, _)) => start.max(k as u32),
            None => u32::MAX,
        }
    }

    /// Last step at or before `k` in a failure state (`u32::MAX`: none).
    pub(crate) fn last_fail(&self, k: usize) -> u32 {
        let i = self
            .fail_runs
            .partition_point(|&(start, _)| start as usize <= k);
        match i.checked_sub(1).and_then(|i| self.fail_runs.get(i)) {
            // The run starts at or before k: k is in it, or it ended before.
            Some(&(_, end)) => (end - 1).min(k as u32),
            None => u32::MAX,
        }
    }

    /// Step where the run of the same state holding at `k` began.
    pub(crate) fn run_start(&self, k: usize) -> u32 {
        let i = self.changes.partition_point(|&c| c as usize <= k);
        i.checked_sub(1)
            .and_then(|i| self.changes.get(i))
            .copied()
            .unwrap_or(0)
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
        let age = k - (self.run_start(k) as usize).max(first);
        let since_fail = match self.last_fail(k) {
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
#[derive(Debug, Clone, Copy, PartialEq)]
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
    /// A present from its parts (what [`super::slots`] keeps of it).
    pub(super) fn from_parts(
        state: State,
        age_secs: i64,
        since_fail_secs: i64,
        load: f64,
        min_free: u64,
        job_mem: u64,
    ) -> Present {
        Present {
            state,
            age_secs,
            since_fail_secs,
            load,
            min_free,
            job_mem,
        }
    }

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

    /// Drops every grid, keeping the present: the caller's next question
    /// is of another record (a node's next answer reads a newer one), so
    /// no grid kept could serve it, and a two-month record's grid is
    /// megabytes.
    pub(super) fn release(&self) {
        self.lock().grids.clear();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::test_series::MONDAY;
    use crate::series::Sample;
    use jiff::tz::TimeZone;

    /// 56 days of 6 s rows (a volunteer's retention), with every state in
    /// it: load that drifts between light, heavy and hot for minutes at a
    /// time (S1, S2, S3), memory dips (S4), the host off most nights (down
    /// rows, S5) and now and then silent past the gap limit.
    fn two_months() -> HostSeries {
        let mut s = HostSeries::new(6, 120, TimeZone::fixed(jiff::tz::offset(2)));
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut load, mut free) = (10.0f64, 6_000u64);
        let mut t = MONDAY;
        while t < MONDAY + 56 * 86_400 {
            let r = next();
            if r % 400 == 0 {
                load = [5.0, 35.0, 80.0][(r / 400 % 3) as usize];
            }
            if r % 1_500 == 1 {
                free = [6_000, 1_500, 9_000][(r / 1_500 % 3) as usize];
            }
            let hour = (t - MONDAY) % 86_400 / 3_600;
            let off = hour < 6 && (t - MONDAY) / 86_400 % 3 != 0;
            if r % 20_000 == 2 {
                t += 600; // silent for ten minutes: past the gap limit
                continue;
            }
            s.push(Sample {
                time: t,
                cpu: load + (r % 7) as f64,
                free_mib: free,
                up: !off,
            })
            .unwrap();
            t += 6;
        }
        s
    }

    /// The step arrays the grid kept before it kept their changes (the
    /// code it had), from its states.
    fn dense(states: &[State]) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let n = states.len();
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
        (next_fail, run_start, last_fail)
    }

    #[test]
    fn a_two_month_grid_answers_as_the_dense_arrays_did_in_a_third_of_the_memory() {
        let series = two_months();
        let th = Thresholds {
            job_mem_mib: 2_048,
            ..Thresholds::default()
        };
        let grid = GridIndex::build(&series, th).unwrap();
        let n = grid.states.len();
        assert_eq!(n, 56 * 14_400);
        for s in [State::S1, State::S2, State::S3, State::S4, State::S5] {
            assert!(grid.states.contains(&s), "{s:?} missing from the record");
        }
        let (next_fail, run_start, last_fail) = dense(&grid.states);
        for k in 0..n {
            assert_eq!(grid.next_fail(k), next_fail[k], "next_fail at {k}");
            assert_eq!(grid.run_start(k), run_start[k], "run_start at {k}");
            assert_eq!(grid.last_fail(k), last_fail[k], "last_fail at {k}");
        }
        // What a grid holds per step: 18 bytes with the dense arrays.
        let bytes = grid.states.capacity() * std::mem::size_of::<State>()
            + grid.cpu.capacity()
            + grid.free.capacity() * 4
            + grid.fail_runs.capacity() * 8
            + grid.changes.capacity() * 4
            + grid.slots.capacity() * std::mem::size_of::<(Date, u8, i64)>();
        let per_step = bytes as f64 / n as f64;
        eprintln!(
            "{n} steps, {} state changes, {} failure runs: {bytes} bytes, {per_step:.2} a step",
            grid.changes.len(),
            grid.fail_runs.len()
        );
        assert!(per_step < 7.0, "{per_step:.2} bytes a step");
    }

    #[test]
    fn grids_of_a_record_and_its_edges_agree_with_the_dense_arrays() {
        // Failures at the first and the last step, and a record in one state.
        for cpu in [[90.0, 90.0, 5.0, 5.0, 90.0], [5.0; 5], [90.0; 5]] {
            let mut s = HostSeries::new(60, 120, TimeZone::UTC);
            for (i, c) in cpu.iter().enumerate() {
                let t = MONDAY + 60 * i as i64;
                let up = i != 0 && i != 4 || *c < 50.0;
                s.push(Sample {
                    time: t,
                    cpu: *c,
                    free_mib: 4_096,
                    up,
                })
                .unwrap();
            }
            let grid = GridIndex::build(&s, Thresholds::default()).unwrap();
            let (next_fail, run_start, last_fail) = dense(&grid.states);
            for k in 0..grid.states.len() {
                assert_eq!(grid.next_fail(k), next_fail[k], "{cpu:?} next_fail at {k}");
                assert_eq!(grid.run_start(k), run_start[k], "{cpu:?} run_start at {k}");
                assert_eq!(grid.last_fail(k), last_fail[k], "{cpu:?} last_fail at {k}");
            }
        }
    }

    #[test]
    fn a_released_cache_builds_the_same_grid_again_and_keeps_none_meanwhile() {
        let series =
            crate::baselines::test_series::series_from(3, 60, |t| (t % 7_200) as f64 / 80.0);
        let th = Thresholds::default();
        let cache = GridCache::default();
        let first = cache.grid_for(&series, th).unwrap();
        assert!(Arc::ptr_eq(&first, &cache.grid_for(&series, th).unwrap()));
        cache.release();
        assert!(cache.lock().grids.is_empty());
        let again = cache.grid_for(&series, th).unwrap();
        assert!(!Arc::ptr_eq(&first, &again), "built anew");
        assert_eq!(first.states, again.states);
        assert_eq!(first.changes, again.changes);
        assert_eq!(first.fail_runs, again.fail_runs);
    }
}
