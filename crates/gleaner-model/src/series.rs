//! A host's recorded samples as plain data, and the cursor that reads the
//! five states off them at arbitrary times.
//!
//! `HostSeries` is what a trace file or the sled history turns into; it is
//! kept column-wise because the predictor scans millions of rows. The rules
//! for turning rows into states are those of `shared/trace-format.md`; this
//! module must not know where the rows came from.

use crate::state::{ExcursionTracker, State, Thresholds};
use jiff::tz::TimeZone;

/// One recorded sample: the row of a trace file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Unix seconds.
    pub time: i64,
    /// Host CPU load L_H in percent of the whole machine, guest excluded.
    pub cpu: f64,
    /// Memory available to a guest, MiB.
    pub free_mib: u64,
    /// False marks the start of a revocation (off, stopped, paused).
    pub up: bool,
}

/// Default nominal sampling period, seconds (trace format v1).
pub const DEFAULT_STEP_SECS: u32 = 6;
/// Default longest silence that still counts as up, seconds (trace format v1).
pub const DEFAULT_MAX_GAP_SECS: u64 = 120;

mod columns;
mod memory;

use columns::{Loads, Times};

/// A host's samples in time order, with the facts needed to read states off them.
#[derive(Debug, Clone)]
pub struct HostSeries {
    /// Unix seconds, strictly increasing (`columns` says how they are kept).
    time: Times,
    cpu: Loads,
    /// MiB, saturated at `u32::MAX` (4 PiB, more than any job asks): half
    /// the bytes of a `u64` over the months of rows a node holds.
    free_mib: Vec<u32>,
    up: Vec<bool>,
    /// Nominal sampling period: a long gap counts as down from `step` after the earlier row.
    pub step_secs: u32,
    /// Longest silence between rows that still counts as up.
    pub max_gap_secs: u64,
    /// The owner's time zone: days and times of day are local to it.
    pub tz: TimeZone,
}

/// Why rows cannot form a series.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SeriesError {
    #[error("row time {time} is not after the previous row's {previous}")]
    NotIncreasing { previous: i64, time: i64 },
    #[error("cpu load {0} is not a percentage between 0 and 100")]
    BadCpu(f64),
    #[error("row time {time} is more than 136 years after the first row's {first}")]
    TooLong { first: i64, time: i64 },
}

/// [`HostSeries::with_gap_rules`] one row at a time, so that a trace
/// streamed from a file (an import) is re-expressed without holding it:
/// each row is emitted once the next row's time is known. The emitter may
/// stop early (`ControlFlow::Break`), e.g. when the output grows past a cap;
/// a few rows can multiply into many copies when the new `max_gap` is much
/// shorter than the silences between rows.
#[derive(Debug, Clone)]
pub struct GapRules {
    /// The source's nominal period and longest up silence.
    own_step: i64,
    own_max_gap: u64,
    /// Copies are spaced at the new gap (at least one second) so they never look like a gap.
    spacing: i64,
    pending: Option<Sample>,
}

impl GapRules {
    /// Rules for rows read with `step_secs`/`max_gap_secs`, re-expressed
    /// under a longest up silence of `new_max_gap_secs`.
    pub fn new(step_secs: u32, max_gap_secs: u64, new_max_gap_secs: u64) -> GapRules {
        GapRules {
            own_step: i64::from(step_secs.max(1)),
            own_max_gap: max_gap_secs,
            spacing: i64::try_from(new_max_gap_secs).unwrap_or(i64::MAX).max(1),
            pending: None,
        }
    }

    /// Takes the next source row (strictly after the previous one) and
    /// emits the previous row with the copies and down row its silence needs.
    pub fn push<B>(
        &mut self,
        row: Sample,
        emit: &mut impl FnMut(Sample) -> std::ops::ControlFlow<B>,
    ) -> std::ops::ControlFlow<B> {
        let Some(previous) = self.pending.replace(row) else {
            return std::ops::ControlFlow::Continue(());
        };
        emit(previous)?;
        let next = row.time;
        if !previous.up {
            return std::ops::ControlFlow::Continue(());
        }
        let continues = (next.saturating_sub(previous.time) as u64) <= self.own_max_gap;
        let down_from = if continues {
            next
        } else {
            previous.time.saturating_add(self.own_step).min(next)
        };
        let mut t = previous.time.saturating_add(self.spacing);
        while t < down_from {
            emit(Sample {
                time: t,
                ..previous
            })?;
            t = t.saturating_add(self.spacing);
        }
        if down_from < next {
            emit(Sample {
                time: down_from,
                cpu: 0.0,
                free_mib: 0,
                up: false,
            })?;
        }
        std::ops::ControlFlow::Continue(())
    }

    /// Emits the last row.
    pub fn finish<B>(
        mut self,
        emit: &mut impl FnMut(Sample) -> std::ops::ControlFlow<B>,
    ) -> std::ops::ControlFlow<B> {
        match self.pending.take() {
            Some(last) => emit(last),
            None => std::ops::ControlFlow::Continue(()),
        }
    }
}

/// A row's free memory as the series keeps it.
fn stored_mib(mib: u64) -> u32 {
    u32::try_from(mib).unwrap_or(u32::MAX)
}

impl HostSeries {
    /// An empty series with the given sampling facts.
    pub fn new(step_secs: u32, max_gap_secs: u64, tz: TimeZone) -> Self {
        HostSeries {
            time: Times::default(),
            cpu: Loads::default(),
            free_mib: Vec::new(),
            up: Vec::new(),
            step_secs: step_secs.max(1),
            max_gap_secs,
            tz,
        }
    }

    /// Appends a row, checking time order and the load range.
    pub fn push(&mut self, s: Sample) -> Result<(), SeriesError> {
        if let Some(previous) = self.time.last() {
            if s.time <= previous {
                return Err(SeriesError::NotIncreasing {
                    previous,
                    time: s.time,
                });
            }
        }
        if !(s.cpu.is_finite() && (0.0..=100.0).contains(&s.cpu)) {
            return Err(SeriesError::BadCpu(s.cpu));
        }
        self.time.push(s.time)?;
        self.cpu.push(s.cpu);
        self.free_mib.push(stored_mib(s.free_mib));
        self.up.push(s.up);
        Ok(())
    }

    /// Replaces the last row with `s` when both have the same time; the later
    /// of two rows with one timestamp is the most recent. Returns false (and
    /// changes nothing) when the times differ or the series is empty.
    pub fn replace_last_if_same_time(&mut self, s: Sample) -> Result<bool, SeriesError> {
        let Some(last) = self.time.len().checked_sub(1) else {
            return Ok(false);
        };
        if self.time.at(last) != s.time {
            return Ok(false);
        }
        if !(s.cpu.is_finite() && (0.0..=100.0).contains(&s.cpu)) {
            return Err(SeriesError::BadCpu(s.cpu));
        }
        self.cpu.set(last, s.cpu);
        self.free_mib[last] = stored_mib(s.free_mib);
        self.up[last] = s.up;
        Ok(true)
    }

    /// Reserves room for `n` more rows.
    pub fn reserve(&mut self, n: usize) {
        self.time.reserve(n);
        self.cpu.reserve(n);
        self.free_mib.reserve(n);
        self.up.reserve(n);
    }

    /// Reserves room for exactly `n` more rows: for a series that grows a
    /// few rows at a time and is held for long, where doubling the columns
    /// for one row would cost as much as the rows held.
    pub fn reserve_exact(&mut self, n: usize) {
        self.time.reserve_exact(n);
        self.cpu.reserve_exact(n);
        self.free_mib.reserve_exact(n);
        self.up.reserve_exact(n);
    }

    /// Gives back the room reserved beyond the rows held: a node keeps its
    /// series for as long as it runs, and a reservation that was short by a
    /// row (a sample recorded while the store was read) doubled every column.
    pub fn shrink_to_fit(&mut self) {
        self.time.shrink_to_fit();
        self.cpu.shrink_to_fit();
        self.free_mib.shrink_to_fit();
        self.up.shrink_to_fit();
    }

    /// Bytes the rows' columns hold (reserved room included).
    pub fn heap_bytes(&self) -> usize {
        self.time.heap_bytes()
            + self.cpu.heap_bytes()
            + self.free_mib.capacity() * std::mem::size_of::<u32>()
            + self.up.capacity()
    }

    pub fn len(&self) -> usize {
        self.time.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time.len() == 0
    }

    /// Row `i`.
    pub fn get(&self, i: usize) -> Option<Sample> {
        Some(Sample {
            time: self.time.get(i)?,
            cpu: self.cpu.at(i),
            free_mib: u64::from(self.free_mib[i]),
            up: self.up[i],
        })
    }

    /// Row `i`'s time alone (what a walk in step with another needs).
    pub fn time_at(&self, i: usize) -> Option<i64> {
        self.time.get(i)
    }

    /// All rows in order.
    pub fn samples(&self) -> impl Iterator<Item = Sample> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Time of the first row.
    pub fn first_time(&self) -> Option<i64> {
        self.time.first()
    }

    /// Time of the last row.
    pub fn last_time(&self) -> Option<i64> {
        self.time.last()
    }

    /// True when `[start, end]` lies between the first and the last row.
    pub fn covers(&self, start: i64, end: i64) -> bool {
        match (self.first_time(), self.last_time()) {
            (Some(first), Some(last)) => first <= start && end <= last,
            _ => false,
        }
    }

    /// Index of the most recent row at or before `t`.
    pub fn row_at(&self, t: i64) -> Option<usize> {
        self.time.count_at_or_before(t).checked_sub(1)
    }

    /// True when the link from row `i` to row `i + 1` is unbroken: row `i`
    /// is up and the silence after it is not longer than `max_gap`.
    fn continues(&self, i: usize) -> bool {
        match self.time.get(i + 1) {
            Some(_) => self.up[i] && (self.time.gap_after(i) as u64) <= self.max_gap_secs,
            None => self.up[i],
        }
    }

    /// The same host under other gap rules: rows that, read with
    /// `step_secs` and `max_gap_secs`, give the same state at every covered
    /// time as this series read with its own rules. Long up intervals get
    /// copies of their row so no silence exceeds the new `max_gap`; a
    /// silence this series counts as down gets an explicit `up = 0` row
    /// where its down period begins. Used when a trace seeds a store that
    /// keeps one step and gap for all rows. Exact for series whose `max_gap`
    /// is at least their step, as the trace format intends; with a shorter
    /// `max_gap` a silence can break an excursion without any down time,
    /// which no other rules can express.
    pub fn with_gap_rules(&self, step_secs: u32, max_gap_secs: u64) -> HostSeries {
        let mut out = HostSeries::new(step_secs, max_gap_secs, self.tz.clone());
        let mut rules = GapRules::new(self.step_secs, self.max_gap_secs, max_gap_secs);
        let mut emit = |row: Sample| {
            out.push_unchecked(row);
            std::ops::ControlFlow::<()>::Continue(())
        };
        for row in self.samples() {
            let _ = rules.push(row, &mut emit);
        }
        let _ = rules.finish(&mut emit);
        out
    }

    /// Appends a row already known to be in order and in range.
    fn push_unchecked(&mut self, s: Sample) {
        // Rows re-expressed from a series lie within its span, so the time
        // fits; were it not to, the row is left out rather than misread.
        if self.time.push(s.time).is_err() {
            return;
        }
        self.cpu.push(s.cpu);
        self.free_mib.push(stored_mib(s.free_mib));
        self.up.push(s.up);
    }

    /// A cursor placed at time `t`; `None` when `t` is before the first row.
    pub fn cursor(&self, th: Thresholds, t: i64) -> Option<StateCursor<'_>> {
        let row = self.row_at(t)?;
        let mut tracker = ExcursionTracker::default();
        if self.up[row] && th.is_hot(self.cpu.at(row)) {
            let (start, before) = self.excursion_before(&th, row);
            tracker.resume_excursion(start, before);
        }
        if self.up[row] {
            // Later rows continue the excursion from this row's load.
            tracker.observe(&th, self.time.at(row), self.cpu.at(row));
        }
        Some(StateCursor {
            series: self,
            th,
            row,
            tracker,
        })
    }

    /// Walks back from a hot row to find when its excursion began and what
    /// state preceded it. The walk stops once the excursion is known to have
    /// lasted the sustain time, so it reads at most that many seconds of rows.
    fn excursion_before(&self, th: &Thresholds, row: usize) -> (i64, State) {
        let sustain = i64::from(th.sustain_secs);
        let mut first = row;
        loop {
            if self.time.at(row) - self.time.at(first) >= sustain {
                return (self.time.at(first), State::S2);
            }
            if first == 0 || !self.continues(first - 1) {
                return (self.time.at(first), State::S2);
            }
            let prev = first - 1;
            if !th.is_hot(self.cpu.at(prev)) {
                return (self.time.at(first), th.light_or_heavy(self.cpu.at(prev)));
            }
            first = prev;
        }
    }

    /// The state at time `t` (one-off lookup; use a cursor for many).
    pub fn state_at(&self, th: Thresholds, t: i64) -> Option<State> {
        self.cursor(th, t).map(|mut c| c.state_at(t))
    }

    /// Writes the `m + 1` states at `start + k·step`, k = 0..=m, into `out`.
    /// Returns false (and leaves `out` empty) when the window is not covered.
    ///
    /// This is the predictor's hot loop, so it walks rows rather than steps:
    /// each row's facts are worked out once and its steps filled from them.
    /// It gives the same states as a [`StateCursor`] (a property test checks).
    pub fn window_states(
        &self,
        th: Thresholds,
        start: i64,
        step: u32,
        m: usize,
        out: &mut Vec<State>,
    ) -> bool {
        out.clear();
        let step = i64::from(step.max(1));
        let end = start.saturating_add(step.saturating_mul(m as i64));
        if !self.covers(start, end) {
            return false;
        }
        let Some(cursor) = self.cursor(th, start) else {
            return false;
        };
        let (first_row, mut tracker) = (cursor.row, cursor.tracker);
        let last_row = self.row_at(end).unwrap_or(first_row);
        // Pass 1, branch-free over the window's rows: what each row says.
        let codes = self.row_codes(&th, first_row, last_row);
        // Pass 2: fill the steps, tracking excursions only where load is hot.
        out.reserve(m + 1);
        let sustain = i64::from(th.sustain_secs);
        let mut row = first_row;
        let mut t = start;
        loop {
            let code = codes[row - first_row];
            if code & (CODE_HOT | CODE_GAP_AFTER) == 0 {
                // A run of rows with this same cool code reads as one state,
                // whatever step lands in it: fill all its steps at once.
                let offset = row - first_row;
                let run_end = row + 1 + run_length(&codes[offset + 1..], code);
                let next = self.time.get(run_end).unwrap_or(i64::MAX);
                let remaining = m + 1 - out.len();
                let steps = if next == i64::MAX {
                    remaining
                } else {
                    // t < next here, so at least one step falls in the run.
                    (((next - t) + step - 1) / step).min(remaining as i64) as usize
                };
                out.extend(std::iter::repeat_n(cool_state(code), steps));
                if out.len() > m {
                    return true;
                }
                t += steps as i64 * step;
                row = run_end - 1;
                if code & CODE_DOWN != 0 {
                    tracker.interrupt();
                } else {
                    tracker.observe_cool(light_state(code));
                }
                self.advance_codes(&th, &codes, first_row, last_row, &mut row, &mut tracker, t);
                continue;
            }
            let next = self.time.get(row + 1).unwrap_or(i64::MAX);
            let down_from = if code & CODE_DOWN != 0 {
                i64::MIN
            } else if code & CODE_GAP_AFTER != 0 {
                self.time.at(row).saturating_add(i64::from(self.step_secs))
            } else {
                i64::MAX
            };
            // Until `s3_from` the row reads as `early`; from then on as S3.
            let (early, s3_from) = if code & CODE_LACKS_MEMORY != 0 {
                (State::S4, i64::MAX)
            } else if code & CODE_HOT != 0 {
                match tracker.excursion_start() {
                    Some(begun) => (
                        tracker.state_at(
                            &th,
                            begun,
                            self.cpu.at(row),
                            u64::from(self.free_mib[row]),
                        ),
                        begun.saturating_add(sustain),
                    ),
                    None => (State::S2, i64::MAX),
                }
            } else if code & CODE_HEAVY != 0 {
                (State::S2, i64::MAX)
            } else {
                (State::S1, i64::MAX)
            };
            while t < next {
                let state = if t >= down_from {
                    State::S5
                } else if t >= s3_from {
                    State::S3
                } else {
                    early
                };
                out.push(state);
                if out.len() > m {
                    return true;
                }
                t += step;
            }
            self.advance_codes(&th, &codes, first_row, last_row, &mut row, &mut tracker, t);
        }
    }

    /// Advances `row` to the row that holds at `t`, feeding the tracker as
    /// the cursor does.
    #[allow(clippy::too_many_arguments)]
    fn advance_codes(
        &self,
        th: &Thresholds,
        codes: &[u8],
        first_row: usize,
        last_row: usize,
        row: &mut usize,
        tracker: &mut ExcursionTracker,
        t: i64,
    ) {
        while *row < last_row && self.time.at(*row + 1) <= t {
            if codes[*row - first_row] & (CODE_DOWN | CODE_GAP_AFTER) != 0 {
                tracker.interrupt();
            }
            *row += 1;
            let code = codes[*row - first_row];
            if code & CODE_DOWN != 0 {
                tracker.interrupt();
            } else if code & CODE_HOT != 0 || tracker.excursion_start().is_some() {
                tracker.observe(th, self.time.at(*row), self.cpu.at(*row));
            } else {
                // The common cool row: only its light/heavy state matters.
                tracker.observe_cool(light_state(code));
            }
        }
    }

    /// One byte per row in `first..=last` saying which rules it triggers.
    fn row_codes(&self, th: &Thresholds, first: usize, last: usize) -> Vec<u8> {
        let range = first..last + 1;
        let mut codes: Vec<u8> = self
            .cpu
            .range(range.clone())
            .zip(&self.free_mib[range.clone()])
            .zip(&self.up[range])
            .map(|((cpu, &free), &up)| {
                (u8::from(cpu >= th.th1) * CODE_HEAVY)
                    | (u8::from(cpu > th.th2) * CODE_HOT)
                    | (u8::from(u64::from(free) < th.job_mem_mib) * CODE_LACKS_MEMORY)
                    | (u8::from(!up) * CODE_DOWN)
            })
            .collect();
        // Times are strictly increasing and kept as `u32` offsets, so a gap
        // is positive and cannot overflow. The row after `last` may not
        // exist; a missing next row has no gap.
        let max_gap = i64::try_from(self.max_gap_secs).unwrap_or(i64::MAX);
        let with_next = (last + 1).min(self.len().saturating_sub(1));
        for (code, i) in codes.iter_mut().zip(first..with_next) {
            *code |= u8::from(self.time.gap_after(i) > max_gap) * CODE_GAP_AFTER;
        }
        codes
    }
}

/// How many leading bytes of `codes` equal `code`, eight at a time.
fn run_length(codes: &[u8], code: u8) -> usize {
    let splat = u64::from_ne_bytes([code; 8]);
    let mut chunks = codes.chunks_exact(8);
    let mut n = 0;
    for chunk in chunks.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let diff = u64::from_ne_bytes(word) ^ splat;
        if diff != 0 {
            // The first differing byte in memory order.
            let bytes = if cfg!(target_endian = "little") {
                diff.trailing_zeros()
            } else {
                diff.leading_zeros()
            };
            return n + (bytes / 8) as usize;
        }
        n += 8;
    }
    n + chunks
        .remainder()
        .iter()
        .take_while(|&&c| c == code)
        .count()
}

/// S1 or S2 by the load bits of a row code.
fn light_state(code: u8) -> State {
    if code & CODE_HEAVY != 0 {
        State::S2
    } else {
        State::S1
    }
}

/// The state of a row that is neither hot nor followed by a gap.
fn cool_state(code: u8) -> State {
    if code & CODE_DOWN != 0 {
        State::S5
    } else if code & CODE_LACKS_MEMORY != 0 {
        State::S4
    } else {
        light_state(code)
    }
}

/// Row code bits for [`HostSeries::window_states`].
const CODE_HEAVY: u8 = 1;
const CODE_HOT: u8 = 2;
const CODE_LACKS_MEMORY: u8 = 4;
const CODE_DOWN: u8 = 8;
const CODE_GAP_AFTER: u8 = 16;

/// Reads states at non-decreasing times, advancing through the rows once.
pub struct StateCursor<'a> {
    series: &'a HostSeries,
    th: Thresholds,
    row: usize,
    tracker: ExcursionTracker,
}

impl StateCursor<'_> {
    /// The row the cursor stands on: after [`StateCursor::state_at`]`(t)`,
    /// the most recent row at or before `t` (what [`HostSeries::row_at`]
    /// finds by search).
    pub fn row(&self) -> usize {
        self.row
    }

    /// The state at `t`. Times must not decrease between calls; a time after
    /// the last row reads the last row's values (callers check coverage).
    pub fn state_at(&mut self, t: i64) -> State {
        let s = self.series;
        while self.row + 1 < s.len() && s.time.at(self.row + 1) <= t {
            if !s.continues(self.row) {
                self.tracker.interrupt();
            }
            self.row += 1;
            if s.up[self.row] {
                self.tracker
                    .observe(&self.th, s.time.at(self.row), s.cpu.at(self.row));
            } else {
                self.tracker.interrupt();
            }
        }
        let row = self.row;
        if !s.up[row] {
            return State::S5;
        }
        if s.time.get(row + 1).is_some() {
            let gap = s.time.gap_after(row) as u64;
            if gap > s.max_gap_secs && t >= s.time.at(row).saturating_add(i64::from(s.step_secs)) {
                return State::S5;
            }
        }
        self.tracker
            .state_at(&self.th, t, s.cpu.at(row), u64::from(s.free_mib[row]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(rows: &[(i64, f64, u64, bool)]) -> HostSeries {
        let mut s = HostSeries::new(6, 120, TimeZone::UTC);
        for &(time, cpu, free_mib, up) in rows {
            s.push(Sample {
                time,
                cpu,
                free_mib,
                up,
            })
            .unwrap();
        }
        s
    }

    #[test]
    fn rows_hold_until_the_next_and_gaps_are_down() {
        let s = series(&[
            (0, 5.0, 100, true),
            (6, 30.0, 100, true),
            (500, 5.0, 100, true),
        ]);
        let th = Thresholds::default();
        assert_eq!(s.state_at(th, 0), Some(State::S1));
        assert_eq!(s.state_at(th, 7), Some(State::S2));
        assert_eq!(s.state_at(th, 11), Some(State::S2));
        assert_eq!(s.state_at(th, 12), Some(State::S5));
        assert_eq!(s.state_at(th, 499), Some(State::S5));
        assert_eq!(s.state_at(th, 500), Some(State::S1));
        assert_eq!(s.state_at(th, -1), None);
    }

    #[test]
    fn up_zero_row_is_revocation_until_next_row() {
        let s = series(&[
            (0, 5.0, 100, true),
            (6, 0.0, 0, false),
            (12, 5.0, 100, true),
        ]);
        let th = Thresholds::default();
        assert_eq!(s.state_at(th, 6), Some(State::S5));
        assert_eq!(s.state_at(th, 11), Some(State::S5));
        assert_eq!(s.state_at(th, 12), Some(State::S1));
    }

    #[test]
    fn cursor_placed_mid_excursion_agrees_with_walk_from_start() {
        let mut rows = vec![(0, 30.0, 100, true)];
        for k in 1..30 {
            rows.push((k * 6, 80.0, 100, true));
        }
        rows.push((180, 10.0, 100, true));
        let s = series(&rows);
        let th = Thresholds::default();
        let mut walk = s.cursor(th, 0).unwrap();
        for t in 0..=180 {
            let from_walk = walk.state_at(t);
            assert_eq!(Some(from_walk), s.state_at(th, t), "t = {t}");
        }
        assert_eq!(s.state_at(th, 65), Some(State::S2));
        assert_eq!(s.state_at(th, 66), Some(State::S3));
        assert_eq!(s.state_at(th, 180), Some(State::S1));
    }

    #[test]
    fn window_states_requires_coverage() {
        let s = series(&[
            (0, 5.0, 100, true),
            (6, 5.0, 100, true),
            (12, 5.0, 100, true),
        ]);
        let mut out = Vec::new();
        assert!(s.window_states(Thresholds::default(), 0, 6, 2, &mut out));
        assert_eq!(out, vec![State::S1; 3]);
        assert!(!s.window_states(Thresholds::default(), 0, 6, 3, &mut out));
        assert!(out.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn run_length_counts_leading_equal_bytes(codes in proptest::collection::vec(0u8..3, 0..40), code in 0u8..3) {
            let expected = codes.iter().take_while(|&&c| c == code).count();
            proptest::prop_assert_eq!(run_length(&codes, code), expected);
        }

        #[test]
        fn window_states_agrees_with_the_cursor(
            rows in proptest::collection::vec((1i64..200, 0.0f64..100.0, 0u64..3, 0u8..10), 1..80),
            offset in 0i64..50,
            step in 1u32..40,
            mem in 0u64..2,
            sustain in 0u32..120,
        ) {
            let mut s = HostSeries::new(6, 60, TimeZone::UTC);
            let mut t = 0;
            for (dt, cpu, free_mib, up) in rows {
                t += dt;
                // Loads cluster around the thresholds so every rule fires.
                let cpu = [cpu, 10.0, 30.0, 80.0][(up as usize) % 4];
                s.push(Sample { time: t, cpu, free_mib, up: up != 0 }).unwrap();
            }
            let th = Thresholds { sustain_secs: sustain, job_mem_mib: mem, ..Thresholds::default() };
            let start = s.first_time().unwrap() + offset;
            let last = s.last_time().unwrap();
            if start <= last {
                let m = ((last - start) / i64::from(step)) as usize;
                let mut out = Vec::new();
                proptest::prop_assert!(s.window_states(th, start, step, m, &mut out));
                proptest::prop_assert_eq!(out.len(), m + 1);
                let mut cursor = s.cursor(th, start).unwrap();
                for (k, &state) in out.iter().enumerate() {
                    let at = start + k as i64 * i64::from(step);
                    proptest::prop_assert_eq!(state, cursor.state_at(at), "k = {}", k);
                    proptest::prop_assert_eq!(Some(state), s.state_at(th, at), "fresh cursor, k = {}", k);
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn other_gap_rules_keep_every_state(
            rows in proptest::collection::vec((1i64..700, 0u8..4, 0u8..6), 1..40),
            step in 1u32..400,
            extra_gap in 0u64..400,
            new_step in 1u32..400,
            new_gap in 1u64..400,
            sustain in 0u32..200,
        ) {
            let mut s = HostSeries::new(step, u64::from(step) + extra_gap, TimeZone::UTC);
            let mut t = 0;
            for (dt, load, up) in rows {
                t += dt;
                let cpu = [5.0, 30.0, 80.0, 95.0][load as usize];
                s.push(Sample { time: t, cpu, free_mib: 100, up: up != 0 }).unwrap();
            }
            let th = Thresholds { sustain_secs: sustain, job_mem_mib: 50, ..Thresholds::default() };
            let moved = s.with_gap_rules(new_step, new_gap);
            let (first, last) = (s.first_time().unwrap(), s.last_time().unwrap());
            proptest::prop_assert_eq!(moved.first_time(), Some(first));
            proptest::prop_assert_eq!(moved.last_time(), Some(last));
            for at in first..=last {
                proptest::prop_assert_eq!(moved.state_at(th, at), s.state_at(th, at), "t = {}", at);
            }
        }
    }

    #[test]
    fn a_series_reserved_one_row_short_gives_the_doubled_room_back() {
        let mut s = HostSeries::new(6, 120, TimeZone::UTC);
        s.reserve(1000);
        for i in 0..1001 {
            s.push(Sample {
                time: i * 6,
                cpu: 1.0,
                free_mib: 100,
                up: true,
            })
            .unwrap();
        }
        // A stored row: a u32 time offset, u16 hundredths of load, u32 MiB
        // and the up flag (21 bytes before `columns`).
        let row = 4 + 2 + 4 + 1;
        assert!(s.heap_bytes() >= 1500 * row, "{}", s.heap_bytes());
        s.shrink_to_fit();
        assert_eq!(s.heap_bytes(), 1001 * row);
    }

    #[test]
    fn free_memory_past_four_pib_reads_as_plenty_not_as_short() {
        let s = series(&[(0, 1.0, u64::MAX, true), (6, 1.0, 5, true)]);
        assert_eq!(s.get(0).unwrap().free_mib, u64::from(u32::MAX));
        assert_eq!(s.get(1).unwrap().free_mib, 5);
        let th = Thresholds {
            job_mem_mib: 1 << 20,
            ..Thresholds::default()
        };
        assert_eq!(s.state_at(th, 0), Some(State::S1));
        assert_eq!(s.state_at(th, 6), Some(State::S4));
    }

    #[test]
    fn push_rejects_disorder_and_bad_load() {
        let mut s = series(&[(10, 5.0, 100, true)]);
        let bad = Sample {
            time: 10,
            cpu: 1.0,
            free_mib: 1,
            up: true,
        };
        assert!(s.push(bad).is_err());
        let nan = Sample {
            time: 11,
            cpu: f64::NAN,
            ..bad
        };
        assert!(s.push(nan).is_err());
    }
}
