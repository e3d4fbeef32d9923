//! What `logistic`'s fits read of a host's record, one entry per local hour
//! ([`SlotTable`]), kept between answers and brought up to date as the
//! record grows, instead of the state grid of the whole record
//! ([`super::grid::GridIndex`]) built anew for every day's first answer.
//!
//! A fit's training window is a local hour's start: what it needs of the
//! record is the present at that hour's grid step (the state, its run's
//! age and the time since the last failure, each capped at a day, the
//! load over the last 30 minutes and the least free memory over the last
//! hour) and the first failure after it. None of that depends on the
//! window's length, so one table serves every length (the node's curve
//! asks five) and every day: a day's rows add 24 entries, and the entries
//! of older hours stay as they are, but for the few the record's growth or
//! its retention can still move (below).
//!
//! Exactly the grid's numbers (a test checks every entry against the grid
//! on growing and pruned records): an entry is a pure function of the rows
//! at or before its step (the state at a time reads back at most the
//! sustain time and a gap) and of the record's first row time (the grid's
//! steps are `t0 + k·step`, and its look-backs stop at `t0`), so an update
//! keeps an entry only when
//! - the record is the one the table was made on with rows added at the
//!   end and old rows taken off the front, on the same steps (the new first
//!   row a whole number of steps after the old one), checked as the caches'
//!   fingerprints check a record (rows counted and sampled);
//! - its look-back lies wholly after what the new front can change: entries
//!   within a day and a margin of the first row are made again;
//! - its first failure is known: one not yet seen is looked for in the rows
//!   added.
//!
//! Otherwise the table is made from the whole record in one walk of its
//! states (a few thousand steps at a time, never the whole grid at once),
//! once: a job's memory only turns some steps into S4, so the table for a
//! memory is read off the table without one and the spans where the
//! record lacks that memory ([`SlotTable::for_memory`]), not walked again.
//! Size: 48 bytes an hour of record (65 KB for the store's 56 days), where
//! the grid is six bytes a step (4.8 MB at 6 s steps).
//! Pure code: no clock, no I/O.

use super::grid::{hash_reading_rules, hash_row, hour_slots, shape, Present, LOOKBACK_SECS};
use crate::series::HostSeries;
use crate::state::{State, Thresholds};
use jiff::civil::Date;
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex};

/// Tables kept at most (one per job memory asked about, and reading rules;
/// the node's summary asks three memories, its peers' tasks bring theirs,
/// and the table without a memory is kept for the others to be read off).
/// 65 KB each over the store's 56 days.
const MAX_TABLES: usize = 8;
/// Steps of states walked at once.
const CHUNK: usize = 4_096;
/// Rows sampled to recognise a record (as [`super::grid::prefix_fingerprint`]).
const ANCHORS: usize = 32;
/// No failure after the step (yet).
const NONE: i64 = i64::MAX;

/// One local hour of the record: what a training window starting there reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct SlotFacts {
    /// The hour's start (Unix seconds), local date and hour.
    pub(super) start: i64,
    pub(super) date: Date,
    pub(super) hour: u8,
    /// The grid step the hour starts in: `start - offset`.
    offset: u32,
    pub(super) state: State,
    /// Steps since the run of this state began, and since the last
    /// failure, each capped at a day of steps.
    age: u32,
    since_fail: u32,
    load: f64,
    min_free: u32,
    /// Time of the first step after this one in a failure state
    /// ([`NONE`]: none in the record), and that state's cause.
    next_fail: i64,
    cause: u8,
}

impl SlotFacts {
    /// The grid step's time.
    fn at(&self) -> i64 {
        self.start - i64::from(self.offset)
    }

    /// The present at this hour, as [`super::grid::GridIndex::present`] reads it.
    pub(super) fn present(&self, step: i64, job_mem: u64) -> Present {
        Present::from_parts(
            self.state,
            i64::from(self.age) * step,
            i64::from(self.since_fail) * step,
            self.load,
            u64::from(self.min_free),
            job_mem,
        )
    }

    /// The first failure after this hour's step: its step and cause index,
    /// counted from `t0`; `None` when the record has none.
    pub(super) fn first_failure(&self, t0: i64, step: i64) -> Option<(usize, Option<usize>)> {
        (self.next_fail != NONE).then(|| {
            let k = ((self.next_fail - t0) / step) as usize;
            (
                k,
                (self.cause != u8::MAX).then_some(usize::from(self.cause)),
            )
        })
    }
}

/// The entries of a whole record read with one set of thresholds, and how
/// to recognise the record when it has grown.
#[derive(Debug, Clone)]
pub struct SlotTable {
    th: Thresholds,
    /// The record's reading rules (a table is kept only for the same).
    rules: u64,
    pub(super) t0: i64,
    pub(super) step: i64,
    /// Steps in the record's grid (`(last - t0) / step + 1`).
    pub(super) steps: usize,
    last: i64,
    /// Rows sampled over the record: (time, hash of the row, row index).
    anchors: Vec<(i64, u64, usize)>,
    pub(super) entries: Vec<SlotFacts>,
}

fn rules_of(series: &HostSeries, th: &Thresholds) -> u64 {
    let mut h = DefaultHasher::new();
    hash_reading_rules(&mut h, series, th);
    h.finish()
}

fn row_hash(series: &HostSeries, i: usize) -> u64 {
    let mut h = DefaultHasher::new();
    if let Some(s) = series.get(i) {
        hash_row(&mut h, &s);
    }
    h.finish()
}

fn anchors_of(series: &HostSeries) -> Vec<(i64, u64, usize)> {
    let n = series.len();
    let mut out: Vec<(i64, u64, usize)> = (0..=ANCHORS)
        .filter_map(|k| {
            let i = n.checked_sub(1)? * k / ANCHORS;
            Some((series.time_at(i)?, row_hash(series, i), i))
        })
        .collect();
    out.dedup_by_key(|a| a.2);
    out
}

/// A local hour to fill: its slot and grid step.
#[derive(Clone, Copy)]
struct Wanted {
    date: Date,
    hour: u8,
    start: i64,
    k: usize,
}

/// One walk of the grid's states over steps `[from, to)`: fills the
/// entries of `wanted` (steps in that range, in order, each at least a
/// day of steps after `from` unless `from` is 0) and gives each entry
/// waiting in `pending` (indices into `entries`, in step order) the first
/// failure after its step, when the walk meets one.
struct Walk<'a> {
    series: &'a HostSeries,
    th: Thresholds,
    t0: i64,
    step: i64,
}

impl Walk<'_> {
    fn run(
        &self,
        (from, to): (usize, usize),
        wanted: &[Wanted],
        entries: &mut Vec<SlotFacts>,
        pending: &mut std::collections::VecDeque<usize>,
    ) -> Option<()> {
        let cap = (LOOKBACK_SECS / self.step).max(1) as usize;
        let w30 = (1800 / self.step).max(1) as usize;
        let w60 = (3600 / self.step).max(1) as usize;
        let (mut last_change, mut last_fail) = (from, None::<usize>);
        let mut previous: Option<State> = None;
        let mut next_wanted = 0usize;
        let mut states = Vec::with_capacity(CHUNK);
        let mut j = from;
        while j < to && (next_wanted < wanted.len() || !pending.is_empty()) {
            let len = CHUNK.min(to - j);
            let start = self.t0 + j as i64 * self.step;
            if !self
                .series
                .window_states(self.th, start, self.step as u32, len - 1, &mut states)
            {
                return None;
            }
            for (i, &state) in states.iter().enumerate() {
                let k = j + i;
                if previous.is_some_and(|p| p != state) {
                    last_change = k;
                }
                previous = Some(state);
                if state.is_failure() {
                    last_fail = Some(k);
                    let at = self.t0 + k as i64 * self.step;
                    let cause = state.failure_index().map_or(u8::MAX, |c| c as u8);
                    while let Some(&e) = pending.front() {
                        let entry = &mut entries[e];
                        if entry.at() >= at {
                            break;
                        }
                        entry.next_fail = at;
                        entry.cause = cause;
                        pending.pop_front();
                    }
                }
                while let Some(w) = wanted.get(next_wanted).filter(|w| w.k == k) {
                    let first = k.saturating_sub(cap);
                    let age = k - last_change.max(first);
                    let since_fail = match last_fail {
                        Some(f) if f >= first => k - f,
                        _ => cap,
                    };
                    let (load, min_free) = self.recent(k, w30.min(k + 1), w60.min(k + 1))?;
                    pending.push_back(entries.len());
                    entries.push(SlotFacts {
                        start: w.start,
                        date: w.date,
                        hour: w.hour,
                        offset: u32::try_from(w.start - (self.t0 + k as i64 * self.step)).ok()?,
                        state,
                        age: age as u32,
                        since_fail: since_fail as u32,
                        load,
                        min_free,
                        next_fail: NONE,
                        cause: u8::MAX,
                    });
                    next_wanted += 1;
                }
            }
            j += len;
        }
        (next_wanted == wanted.len()).then_some(())
    }

    /// The mean rounded load over the `w30` steps to `k` and the least free
    /// memory over the `w60` (the longer) to it, as the grid reads them:
    /// each step's row is the last at or before its time.
    fn recent(&self, k: usize, w30: usize, w60: usize) -> Option<(f64, u32)> {
        let first = k + 1 - w60;
        let time = |j: usize| self.t0 + j as i64 * self.step;
        let mut row = self.series.row_at(time(first))?;
        let mut cpu = Vec::with_capacity(w30);
        let mut min_free = u32::MAX;
        for j in first..=k {
            let t = time(j);
            while self.series.time_at(row + 1).is_some_and(|next| next <= t) {
                row += 1;
            }
            let s = self.series.get(row)?;
            min_free = min_free.min(u32::try_from(s.free_mib).unwrap_or(u32::MAX));
            if j + w30 > k {
                cpu.push(s.cpu.round().clamp(0.0, 100.0) as u8);
            }
        }
        let load = cpu.iter().map(|&c| f64::from(c)).sum::<f64>() / w30 as f64;
        Some((load, min_free))
    }
}

impl SlotTable {
    /// The hours of `series` a grid step holds, in the grid's slot order.
    fn wanted(series: &HostSeries, t0: i64, step: i64, steps: usize) -> Vec<Wanted> {
        let last = series.last_time().unwrap_or(t0);
        hour_slots(series, t0, last)
            .into_iter()
            .filter_map(|(date, hour, start)| {
                let k = usize::try_from((start.checked_sub(t0)?) / step).ok()?;
                (start >= t0 && k < steps).then_some(Wanted {
                    date,
                    hour,
                    start,
                    k,
                })
            })
            .collect()
    }

    /// The table of `series` read with `th`, made from the whole record;
    /// `None` where the grid would be none (an empty or one-step record).
    pub fn build(series: &HostSeries, th: Thresholds) -> Option<SlotTable> {
        let (t0, step, steps) = shape(series)?;
        let wanted = SlotTable::wanted(series, t0, step, steps);
        let mut entries = Vec::with_capacity(wanted.len());
        let mut pending = std::collections::VecDeque::new();
        let walk = Walk {
            series,
            th,
            t0,
            step,
        };
        walk.run((0, steps), &wanted, &mut entries, &mut pending)?;
        Some(SlotTable {
            th,
            rules: rules_of(series, &th),
            t0,
            step,
            steps,
            last: series.last_time()?,
            anchors: anchors_of(series),
            entries,
        })
    }

    /// True when this table was made on `series` as it is now.
    fn is_of(&self, series: &HostSeries) -> bool {
        series.first_time() == Some(self.t0)
            && series.last_time() == Some(self.last)
            && self.same_rows(series)
    }

    /// The rows sampled when the table was made, still where they were
    /// (those the record still holds), counted the same apart.
    fn same_rows(&self, series: &HostSeries) -> bool {
        let Some(t0) = series.first_time() else {
            return false;
        };
        let mut base: Option<(usize, usize)> = None;
        for &(time, hash, index) in self.anchors.iter().filter(|a| a.0 >= t0) {
            let Some(row) = series.row_at(time) else {
                return false;
            };
            if series.time_at(row) != Some(time) || row_hash(series, row) != hash {
                return false;
            }
            match base {
                None => base = Some((row, index)),
                Some((row0, index0)) if row - row0 != index - index0 => return false,
                Some(_) => {}
            }
        }
        base.is_some()
    }

    /// This table brought up to `series`, the same record grown and
    /// perhaps cut at the front; `None` when it is not that record (then
    /// [`SlotTable::build`]).
    pub(super) fn updated(self, series: &HostSeries) -> Option<SlotTable> {
        let (t0, step, steps) = shape(series)?;
        let last = series.last_time()?;
        if rules_of(series, &self.th) != self.rules
            || step != self.step
            || t0 < self.t0
            || (t0 - self.t0) % step != 0
            || last < self.last
            || !self.same_rows(series)
        {
            return None;
        }
        let cap = (LOOKBACK_SECS / step).max(1);
        // What a new front can change: the look-back of a day, the states
        // read back from it (sustain time and a gap each way), and a step.
        let margin = i64::from(self.th.sustain_secs)
            + 2 * i64::try_from(series.max_gap_secs).ok()?
            + 2 * step;
        let keep_from = if t0 == self.t0 {
            t0
        } else {
            t0.checked_add(cap * step + margin)?
        };
        let wanted = SlotTable::wanted(series, t0, step, steps);
        let kept = self.entries.iter().position(|e| e.at() >= keep_from)?;
        let kept_entries = &self.entries[kept..];
        // Where the kept entries sit among the record's hours.
        let first = wanted.iter().position(|w| {
            w.start == kept_entries[0].start
                && w.date == kept_entries[0].date
                && w.hour == kept_entries[0].hour
        })?;
        let after = first + kept_entries.len();
        let same = wanted
            .get(first..after)?
            .iter()
            .zip(kept_entries)
            .all(|(w, e)| {
                w.start == e.start
                    && w.date == e.date
                    && w.hour == e.hour
                    && w.k as i64 * step + t0 == e.at()
            });
        if !same {
            return None;
        }
        let walk = Walk {
            series,
            th: self.th,
            t0,
            step,
        };
        let mut entries = Vec::with_capacity(wanted.len());
        let mut pending = std::collections::VecDeque::new();
        // The front: made again from the record's first step to the first
        // kept entry; their first failures not met by then are the kept
        // entry's own step or its first failure.
        let k_kept = wanted[first].k;
        walk.run((0, k_kept), &wanted[..first], &mut entries, &mut pending)?;
        let anchor = kept_entries[0];
        let (failure, cause) = if anchor.state.is_failure() {
            let cause = anchor.state.failure_index().map_or(u8::MAX, |c| c as u8);
            (anchor.at(), cause)
        } else {
            (anchor.next_fail, anchor.cause)
        };
        for e in pending.drain(..) {
            entries[e].next_fail = failure;
            entries[e].cause = cause;
        }
        // The kept entries; those still waiting for a failure, and the
        // front's that wait with the first of them, look for it in the
        // rows added.
        for (i, e) in entries.iter().enumerate() {
            if e.next_fail == NONE {
                pending.push_back(i);
            }
        }
        for e in kept_entries {
            if e.next_fail == NONE {
                pending.push_back(entries.len());
            }
            entries.push(*e);
        }
        let old_steps = usize::try_from((self.last - t0) / step).ok()? + 1;
        let new = &wanted[after..];
        let from = new.first().map_or(old_steps, |w| {
            w.k.saturating_sub(cap as usize).min(old_steps)
        });
        walk.run((from, steps), new, &mut entries, &mut pending)?;
        Some(SlotTable {
            t0,
            steps,
            last,
            anchors: anchors_of(series),
            entries,
            ..self
        })
    }
}

/// A run of steps `[from, to)` that read S4 for a job's memory.
type Run = (usize, usize);

/// The steps of a record's grid (`t0 + k·step`, `k < steps`) inside the
/// spans of [`HostSeries::lacking_memory_spans`], as runs, adjacent ones
/// joined (two spans with no step between them read as one run).
fn lacking_runs(spans: &[(i64, i64)], t0: i64, step: i64, steps: usize) -> Vec<Run> {
    // The first step at or after `t`.
    let step_at = |t: i64| -> usize {
        let rel = t.saturating_sub(t0).max(0);
        let k = rel / step + i64::from(rel % step != 0);
        usize::try_from(k).unwrap_or(usize::MAX).min(steps)
    };
    let mut runs: Vec<Run> = Vec::with_capacity(spans.len());
    for &(from, to) in spans {
        let (a, b) = (step_at(from), step_at(to));
        if a >= b {
            continue;
        }
        match runs.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => runs.push((a, b)),
        }
    }
    runs
}

impl SlotTable {
    /// The table of `series` read with `th`, from this one, which was made
    /// on `series` as it is now with the same thresholds but no job memory:
    /// a job's memory only turns some steps into S4 (the excursion tracker
    /// and S5 never read memory; [`HostSeries::lacking_memory_spans`]), so
    /// each hour's state, run age, time since a failure and first failure
    /// after it follow from this table's and from where the nearest S4
    /// steps lie, without walking the record's states again (issue 29,
    /// goal 6: a memory never asked made its table from the whole record,
    /// ~21 ms at 6 s steps over 56 days). Equal to [`SlotTable::build`] of
    /// `th` entry for entry (a test checks it on growing and cut records).
    /// `None` when this table is not such a table of `series`.
    pub(super) fn for_memory(&self, series: &HostSeries, th: Thresholds) -> Option<SlotTable> {
        let without = Thresholds {
            job_mem_mib: 0,
            ..th
        };
        if self.th != without || !self.is_of(series) {
            return None;
        }
        let runs = lacking_runs(
            &series.lacking_memory_spans(th.job_mem_mib),
            self.t0,
            self.step,
            self.steps,
        );
        let cap = (LOOKBACK_SECS / self.step).max(1) as usize;
        let s4 = State::S4.failure_index().map_or(u8::MAX, |c| c as u8);
        let mut entries = self.entries.clone();
        for e in &mut entries {
            let k = usize::try_from((e.at() - self.t0) / self.step).ok()?;
            // Runs starting at or before k; the last of them may hold k.
            let i = runs.partition_point(|r| r.0 <= k);
            let holding = i.checked_sub(1).map(|j| runs[j]).filter(|r| k < r.1);
            let first = k.saturating_sub(cap);
            // The last S4 step at or before k, and the first after it.
            let (last_s4, next_s4) = match holding {
                Some((from, to)) => {
                    e.state = State::S4;
                    e.age = (k - from.max(first)) as u32;
                    let next = if k + 1 < to {
                        Some(k + 1)
                    } else {
                        runs.get(i).map(|r| r.0)
                    };
                    (Some(k), next)
                }
                None => {
                    let last = i.checked_sub(1).map(|j| runs[j].1 - 1);
                    if let Some(p) = last {
                        // The state's run began after the last S4 step at most.
                        e.age = e.age.min((k - p - 1) as u32);
                    }
                    (last, runs.get(i).map(|r| r.0))
                }
            };
            if let Some(p) = last_s4.filter(|&p| p >= first) {
                e.since_fail = e.since_fail.min((k - p) as u32);
            }
            if let Some(n) = next_s4 {
                let at = self.t0 + n as i64 * self.step;
                // At a step where the record reads S3 without the memory, S4.
                if at <= e.next_fail {
                    e.next_fail = at;
                    e.cause = s4;
                }
            }
        }
        Some(SlotTable {
            th,
            rules: rules_of(series, &th),
            anchors: self.anchors.clone(),
            entries,
            ..*self
        })
    }
}

/// The tables of the last few thresholds asked about, each brought up to
/// the record it is asked of, and the table without a job memory that a
/// new memory's is read off. Clones of a method share one.
#[derive(Default)]
pub struct SlotCache {
    tables: Mutex<Vec<Arc<SlotTable>>>,
}

impl SlotCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<SlotTable>>> {
        // A poisoned lock only means another thread panicked mid-insert; the list stays usable.
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every table.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The table of `series` read with `th`: the kept one when made on
    /// this record, brought up to it when made on an earlier form of it,
    /// else made anew.
    pub(super) fn table_for(&self, series: &HostSeries, th: Thresholds) -> Option<Arc<SlotTable>> {
        let rules = rules_of(series, &th);
        let old = {
            let mut tables = self.lock();
            let i = tables.iter().position(|t| t.rules == rules);
            match i {
                Some(i) if tables[i].is_of(series) => return Some(tables[i].clone()),
                Some(i) => Some(tables.remove(i)),
                None => None,
            }
        };
        let table = old
            .and_then(|t| Arc::unwrap_or_clone(t).updated(series))
            .or_else(|| self.made(series, th))?;
        let table = Arc::new(table);
        let mut tables = self.lock();
        tables.retain(|t| t.rules != rules);
        if tables.len() >= MAX_TABLES {
            // The oldest, but never the table without a memory while
            // others are kept: every new memory's table is read off it.
            let oldest = tables.iter().position(|t| t.th.job_mem_mib != 0);
            tables.remove(oldest.unwrap_or(0));
        }
        tables.push(table.clone());
        Some(table)
    }

    /// A new table of `series` read with `th`: for a job's memory, read
    /// off the table without one (kept, brought up or made: one walk of
    /// the record for every memory asked, not one each); else made from
    /// the whole record.
    fn made(&self, series: &HostSeries, th: Thresholds) -> Option<SlotTable> {
        if th.job_mem_mib == 0 {
            return SlotTable::build(series, th);
        }
        let without = Thresholds {
            job_mem_mib: 0,
            ..th
        };
        self.table_for(series, without)
            .and_then(|base| base.for_memory(series, th))
            .or_else(|| SlotTable::build(series, th))
    }
}
