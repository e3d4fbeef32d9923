//! A host's trace as the simulator replays it: on a fixed grid, whether a
//! guest may run (S1, S2) or is killed (S3, S4, S5), and the cumulative
//! share of the CPU a guest gets, so that "when does this much work finish"
//! and "when is the next kill" are a binary search and a table lookup.
//!
//! A guest progresses at the availability its host's load leaves it,
//! A = 1 − L_H/100, in S1 (nice 0 beside a light owner) and S2 (nice 19:
//! what the owner leaves); it makes no progress while suspended (the first
//! `sustain` seconds above Th2) and is killed on S3, S4 or S5 — the
//! five-state rules of `model::state`, read through [`HostSeries::cursor`].
//! Past the grid's end the trace starts again from its beginning, so a
//! simulation longer than a trace still ends. Pure code.

use super::spells::SpellLengths;
use crate::series::HostSeries;
use crate::state::{State, Thresholds};

/// Most grid cells one timeline keeps (a coarser step is used past it).
pub const MAX_CELLS: usize = 4_000_000;

/// One replayable host trace.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Trace time of cell 0, Unix seconds.
    start: i64,
    /// Cell length, seconds.
    step: i64,
    /// 0 where a guest may run, else the failure state's number (3, 4, 5).
    fail: Vec<u8>,
    /// Guest CPU share per cell (0 while suspended or failed).
    rate: Vec<f32>,
    /// Cumulative work (availability-seconds) before each cell; n + 1 entries.
    cum_work: Vec<f64>,
    /// Cumulative usable seconds before each cell; n + 1 entries.
    cum_up: Vec<f64>,
    /// Failure episodes begun before each cell; n + 1 entries.
    cum_episodes: Vec<u32>,
    /// First failed cell at or after each cell (n: none).
    next_fail: Vec<u32>,
    /// First usable cell at or after each cell (n: none).
    next_ok: Vec<u32>,
    /// The owner's offset from UTC at cell 0, seconds east (which local
    /// day a time falls on, for forecasts by kind of day; a DST change
    /// during the trace is not followed: an hour's error at worst).
    utc_offset: i64,
}

/// Why a timeline could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimelineError {
    #[error("the trace has no rows between {from} and {to}")]
    Empty { from: i64, to: i64 },
}

impl Timeline {
    /// The timeline of `series` over [from, to) on the series' own step
    /// (coarser if the span would pass [`MAX_CELLS`]).
    pub fn from_series(
        series: &HostSeries,
        th: Thresholds,
        from: i64,
        to: i64,
    ) -> Result<Timeline, TimelineError> {
        let first = series.first_time().unwrap_or(i64::MAX);
        let from = from.max(first);
        if to <= from {
            return Err(TimelineError::Empty { from, to });
        }
        let span = (to - from) as u64;
        let mut step = u64::from(series.step_secs.max(1));
        if span / step > MAX_CELLS as u64 {
            step = span.div_ceil(MAX_CELLS as u64);
        }
        let n = (span / step).max(1) as usize;
        let step = step as i64;
        let Some(mut cursor) = series.cursor(th, from) else {
            return Err(TimelineError::Empty { from, to });
        };
        let mut row = series.row_at(from).unwrap_or(0);
        let mut fail = Vec::with_capacity(n);
        let mut rate = Vec::with_capacity(n);
        for k in 0..n {
            let t = from + k as i64 * step;
            while row + 1 < series.len() && series.get(row + 1).is_some_and(|s| s.time <= t) {
                row += 1;
            }
            let state = cursor.state_at(t);
            let cpu = series.get(row).map_or(100.0, |s| s.cpu);
            let (f, r) = match state {
                State::S1 | State::S2 if th.is_hot(cpu) => (0, 0.0),
                State::S1 | State::S2 => (0, super::power::availability_from_load(cpu)),
                State::S3 => (3, 0.0),
                State::S4 => (4, 0.0),
                State::S5 => (5, 0.0),
            };
            fail.push(f);
            rate.push(r as f32);
        }
        let offset = jiff::Timestamp::from_second(from)
            .map_or(0, |ts| i64::from(series.tz.to_offset(ts).seconds()));
        Ok(Timeline::from_cells(from, step, fail, rate).with_utc_offset(offset))
    }

    /// The same timeline with the owner's offset from UTC (seconds east).
    pub fn with_utc_offset(mut self, secs: i64) -> Timeline {
        self.utc_offset = secs.clamp(-86_400, 86_400);
        self
    }

    /// Whether trace time `t` falls on a Saturday or Sunday, owner's time.
    pub fn is_weekend(&self, t: f64) -> bool {
        self.weekday(t) >= 5
    }

    /// The owner's day of the week at trace time `t` (0 Monday .. 6 Sunday).
    pub fn weekday(&self, t: f64) -> u8 {
        // Floored, as `day_start` is: a cast would move a time in the
        // last second before a midnight before 1970 into the next day.
        let day = ((t.floor() as i64).saturating_add(self.utc_offset)).div_euclid(86_400);
        // 1970-01-01 was a Thursday: day 0 is weekday 3 counting Monday as 0.
        (day + 3).rem_euclid(7) as u8
    }

    /// The owner's last midnight at or before trace time `t`.
    pub fn day_start(&self, t: f64) -> f64 {
        let local = t + self.utc_offset as f64;
        (local / 86_400.0).floor() * 86_400.0 - self.utc_offset as f64
    }

    /// The failures in [a, b) as [start, end) trace times, clipped to it,
    /// ascending and apart.
    pub fn outages_in(&self, a: f64, b: f64) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        let mut t = a;
        while t < b {
            let Some((start, _)) = self.next_failure(t) else {
                break;
            };
            if start >= b {
                break;
            }
            let end = self.next_usable(start).unwrap_or(b).min(b);
            if end <= start {
                break;
            }
            out.push((start, end));
            t = end;
        }
        out
    }

    /// A timeline from cells directly (tests, synthetic hosts).
    pub fn from_cells(start: i64, step: i64, fail: Vec<u8>, rate: Vec<f32>) -> Timeline {
        let n = fail.len().min(rate.len());
        let step = step.max(1);
        let mut cum_work = Vec::with_capacity(n + 1);
        let mut cum_up = Vec::with_capacity(n + 1);
        let mut cum_episodes = Vec::with_capacity(n + 1);
        let (mut w, mut u, mut e) = (0.0f64, 0.0f64, 0u32);
        for k in 0..n {
            cum_work.push(w);
            cum_up.push(u);
            cum_episodes.push(e);
            if fail[k] == 0 {
                w += f64::from(rate[k]) * step as f64;
                u += step as f64;
            } else if k == 0 || fail[k - 1] == 0 {
                e += 1;
            }
        }
        cum_work.push(w);
        cum_up.push(u);
        cum_episodes.push(e);
        let mut next_fail = vec![n as u32; n];
        let mut next_ok = vec![n as u32; n];
        let (mut nf, mut no) = (n as u32, n as u32);
        for k in (0..n).rev() {
            if fail[k] != 0 {
                nf = k as u32;
            } else {
                no = k as u32;
            }
            next_fail[k] = nf;
            next_ok[k] = no;
        }
        Timeline {
            start,
            step,
            fail: fail[..n].to_vec(),
            rate: rate[..n].to_vec(),
            cum_work,
            cum_up,
            cum_episodes,
            next_fail,
            next_ok,
            utc_offset: 0,
        }
    }

    /// Cells in one lap.
    pub fn cells(&self) -> usize {
        self.fail.len()
    }

    /// Trace time of cell 0.
    pub fn start(&self) -> i64 {
        self.start
    }

    /// Seconds in one lap.
    pub fn span_secs(&self) -> i64 {
        self.step * self.fail.len() as i64
    }

    /// Grid position (cells, fractional) of trace time `t`, counting laps.
    fn pos(&self, t: f64) -> f64 {
        ((t - self.start as f64) / self.step as f64).max(0.0)
    }

    fn time_of(&self, pos: f64) -> f64 {
        self.start as f64 + pos * self.step as f64
    }

    /// (lap, cell, fraction into the cell) of a position.
    fn split(&self, pos: f64) -> (f64, usize, f64) {
        let n = self.fail.len() as f64;
        let lap = (pos / n).floor();
        let within = pos - lap * n;
        let k = (within.floor() as usize).min(self.fail.len() - 1);
        (lap, k, within - k as f64)
    }

    /// Cumulative work up to trace time `t`, over laps.
    fn work_at(&self, t: f64) -> f64 {
        let (lap, k, frac) = self.split(self.pos(t));
        let lap_work = self.cum_work[self.fail.len()];
        lap * lap_work + self.cum_work[k] + frac * f64::from(self.rate[k]) * self.step as f64
    }

    /// The failure state at trace time `t`, or `None` when a guest may run.
    pub fn failure_at(&self, t: f64) -> Option<State> {
        let (_, k, _) = self.split(self.pos(t));
        match self.fail[k] {
            3 => Some(State::S3),
            4 => Some(State::S4),
            5 => Some(State::S5),
            _ => None,
        }
    }

    /// The guest's CPU share at trace time `t` (what a reading now shows).
    pub fn rate_at(&self, t: f64) -> f64 {
        let (_, k, _) = self.split(self.pos(t));
        f64::from(self.rate[k])
    }

    /// Whether a run of `secs` starting at `t` is hit by no failure (one at
    /// `t` itself counts): the question counted over past windows.
    pub fn keeps_run(&self, t: f64, secs: f64) -> bool {
        self.next_failure(t).is_none_or(|(f, _)| f >= t + secs)
    }

    /// The next failure at or after `t`: (trace time, state); `None` if the
    /// trace never fails.
    pub fn next_failure(&self, t: f64) -> Option<(f64, State)> {
        let (lap, k, _) = self.split(self.pos(t));
        let n = self.fail.len();
        let lap_start = lap * n as f64;
        let cell = if self.fail[k] != 0 {
            return self.failure_at(t).map(|s| (t, s));
        } else if (self.next_fail[k] as usize) < n {
            lap_start + f64::from(self.next_fail[k])
        } else if (self.next_fail[0] as usize) < n {
            lap_start + n as f64 + f64::from(self.next_fail[0])
        } else {
            return None;
        };
        let time = self.time_of(cell);
        self.failure_at(time).map(|s| (time, s))
    }

    /// The first time at or after `t` when a guest may run again; `None` if never.
    pub fn next_usable(&self, t: f64) -> Option<f64> {
        let (lap, k, _) = self.split(self.pos(t));
        let n = self.fail.len();
        let lap_start = lap * n as f64;
        if self.fail[k] == 0 {
            return Some(t);
        }
        let cell = if (self.next_ok[k] as usize) < n {
            lap_start + f64::from(self.next_ok[k])
        } else if (self.next_ok[0] as usize) < n {
            lap_start + n as f64 + f64::from(self.next_ok[0])
        } else {
            return None;
        };
        Some(self.time_of(cell))
    }

    /// When `need` availability-seconds of guest CPU, started at `t`, are
    /// done (ignoring failures; the caller compares with [`Self::next_failure`]).
    /// `None` when the trace never gives a guest any CPU.
    pub fn finish_time(&self, t: f64, need: f64) -> Option<f64> {
        let lap_work = self.cum_work[self.fail.len()];
        if need <= 0.0 {
            return Some(t);
        }
        if lap_work <= 0.0 {
            return None;
        }
        let target = self.work_at(t) + need;
        let n = self.fail.len();
        let mut lap = (target / lap_work).floor();
        let mut rest = target - lap * lap_work;
        if rest <= 0.0 && lap > 0.0 {
            lap -= 1.0;
            rest += lap_work;
        }
        // The cell k with cum_work[k] < rest <= cum_work[k + 1].
        let k = self.cum_work[1..=n]
            .partition_point(|w| *w < rest)
            .min(n - 1);
        let cell_work = f64::from(self.rate[k]) * self.step as f64;
        let frac = if cell_work > 0.0 {
            ((rest - self.cum_work[k]) / cell_work).clamp(0.0, 1.0)
        } else {
            1.0
        };
        Some(self.time_of(lap * n as f64 + k as f64 + frac).max(t))
    }

    /// Work (availability-seconds) a guest gets in [a, b).
    pub fn work_between(&self, a: f64, b: f64) -> f64 {
        (self.work_at(b) - self.work_at(a)).max(0.0)
    }

    /// How long the host has been failing at trace time `t`: seconds since
    /// its present failure began (0 when a guest may run), looking back
    /// no further than the trace's start.
    pub fn failing_for(&self, t: f64) -> f64 {
        let pos = self.pos(t);
        let (_, k, frac) = self.split(pos);
        if self.fail[k] == 0 {
            return 0.0;
        }
        let n = self.fail.len();
        if self.next_ok[0] as usize >= n {
            // Never usable: failing since the trace's start (and the walk
            // below would not end before it).
            return pos * self.step as f64;
        }
        // Whole cells before this one, back to the trace's start (at most
        // a lap: some cell is usable). A failure begun at `t` itself
        // reads 0, as if the host were up.
        let before = pos.floor() as usize;
        let mut cells = 0;
        while cells < before && self.fail[(k + n - 1 - cells % n) % n] != 0 {
            cells += 1;
        }
        (cells as f64 + frac) * self.step as f64
    }

    /// Usable seconds and failure episodes begun in [t − lookback, t]
    /// (clipped to the trace's start): their ratio is the host's mean
    /// up-spell between failures over that past.
    pub fn past_spells(&self, t: f64, lookback: f64) -> (f64, f64) {
        let a = (t - lookback).max(self.start as f64);
        if a >= t {
            return (0.0, 0.0);
        }
        let (lap_a, ka, _) = self.split(self.pos(a));
        let (lap_b, kb, _) = self.split(self.pos(t));
        let n = self.fail.len();
        let laps = lap_b - lap_a;
        let up = laps * self.cum_up[n] + self.cum_up[kb] - self.cum_up[ka];
        let episodes = laps * f64::from(self.cum_episodes[n]) + f64::from(self.cum_episodes[kb])
            - f64::from(self.cum_episodes[ka]);
        (up.max(0.0), episodes.max(0.0))
    }

    /// The lengths of the up-spells and outages in [t − lookback, t]
    /// (clipped to the trace's start), cell by cell over laps: what
    /// [`Self::past_spells`] sums, spell by spell.
    pub fn past_spell_lengths(&self, t: f64, lookback: f64) -> SpellLengths {
        let a = (t - lookback).max(self.start as f64);
        if a >= t {
            return SpellLengths::default();
        }
        let first = self.pos(a).floor() as usize;
        let last = self.pos(t).floor() as usize;
        let n = self.fail.len();
        SpellLengths::of_cells(last.saturating_sub(first), self.step as f64, |k| {
            self.fail[(first + k) % n] != 0
        })
    }

    /// From the past only: the guest's mean CPU share while usable over
    /// the `lookback` seconds before `t`, and the mean length of a failure
    /// episode begun in them (seconds; `None` when none began). A lookback
    /// reaching before the trace's start is cut at the start.
    pub fn past(&self, t: f64, lookback: f64) -> (Option<f64>, Option<f64>) {
        let a = (t - lookback).max(self.start as f64);
        if a >= t {
            return (None, None);
        }
        let (lap_a, ka, _) = self.split(self.pos(a));
        let (lap_b, kb, _) = self.split(self.pos(t));
        let n = self.fail.len();
        let laps = lap_b - lap_a;
        let up = laps * self.cum_up[n] + self.cum_up[kb] - self.cum_up[ka];
        let work = laps * self.cum_work[n] + self.cum_work[kb] - self.cum_work[ka];
        let episodes = laps * f64::from(self.cum_episodes[n]) + f64::from(self.cum_episodes[kb])
            - f64::from(self.cum_episodes[ka]);
        let span = (kb as f64 - ka as f64 + laps * n as f64) * self.step as f64;
        let share = (up > 0.0).then(|| work / up);
        let outage = (episodes > 0.0).then(|| (span - up).max(0.0) / episodes);
        (share, outage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten 100 s cells: usable at half speed, then S3 in cells 5..7.
    fn line() -> Timeline {
        let fail = vec![0, 0, 0, 0, 0, 3, 3, 0, 0, 0];
        let rate = vec![0.5, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 1.0, 1.0, 1.0];
        Timeline::from_cells(1000, 100, fail, rate)
    }

    #[test]
    fn the_kind_of_day_follows_the_owners_offset() {
        let tl = line();
        // 2025-09-06 00:00 UTC was a Saturday, the day before a Friday.
        let saturday = 1_757_116_800.0;
        assert!(tl.is_weekend(saturday));
        assert!(!tl.is_weekend(saturday - 1.0));
        assert!(tl.is_weekend(saturday + 2.0 * 86_400.0 - 1.0));
        assert!(!tl.is_weekend(saturday + 2.0 * 86_400.0));
        // Five hours west of UTC, Saturday begins five hours later.
        let west = line().with_utc_offset(-5 * 3600);
        assert!(!west.is_weekend(saturday + 4.0 * 3600.0));
        assert!(west.is_weekend(saturday + 5.0 * 3600.0));
        // Its midnight and weekday move with it, and agree at the edge.
        assert_eq!(
            west.day_start(saturday + 4.0 * 3600.0),
            saturday - 19.0 * 3600.0
        );
        assert_eq!(
            west.day_start(saturday + 5.0 * 3600.0),
            saturday + 5.0 * 3600.0
        );
        assert_eq!(west.weekday(saturday + 5.0 * 3600.0 - 0.5), 4);
        assert_eq!(west.weekday(saturday + 5.0 * 3600.0), 5);
        assert_eq!(tl.weekday(-0.5), 2, "1969-12-31, a Wednesday");
        assert_eq!(tl.day_start(-0.5), -86_400.0);
    }

    #[test]
    fn outages_in_a_span_are_clipped_to_it() {
        // Cells of 100 s from 1000: failing in [1500, 1700).
        let tl = line();
        assert_eq!(tl.outages_in(1000.0, 2000.0), vec![(1500.0, 1700.0)]);
        assert_eq!(tl.outages_in(1600.0, 1650.0), vec![(1600.0, 1650.0)]);
        assert_eq!(tl.outages_in(1000.0, 1500.0), vec![]);
    }

    #[test]
    fn failing_for_counts_back_to_where_the_failure_began() {
        let tl = line();
        assert_eq!(tl.failing_for(1450.0), 0.0, "usable");
        assert_eq!(tl.failing_for(1500.0), 0.0, "first instant of S3");
        assert_eq!(tl.failing_for(1650.0), 150.0);
        // A lap later the same failure, not the laps before it.
        assert_eq!(tl.failing_for(2650.0), 150.0);
    }

    #[test]
    fn failing_for_stops_at_the_trace_start() {
        let tl = Timeline::from_cells(0, 100, vec![5, 5, 0, 5], vec![0.5; 4]);
        assert_eq!(tl.failing_for(150.0), 150.0, "failing since the start");
        // Past the lap's end the failure runs on into the next lap's start.
        assert_eq!(tl.failing_for(450.0), 150.0);
        // A timeline never usable: since the start, however far in.
        let never = Timeline::from_cells(0, 100, vec![5; 4], vec![0.5; 4]);
        assert_eq!(never.failing_for(1e12), 1e12);
    }

    #[test]
    fn work_finishes_where_the_cumulative_share_says() {
        let tl = line();
        // 100 availability-seconds from t = 1000 at half speed: 200 s.
        assert_eq!(tl.finish_time(1000.0, 100.0), Some(1200.0));
        // 300 from 1000: 250 by 1500, then the failure cells give nothing,
        // then full speed from 1700: 50 more by 1750.
        assert_eq!(tl.finish_time(1000.0, 300.0), Some(1750.0));
        assert_eq!(tl.next_failure(1000.0), Some((1500.0, State::S3)));
        assert_eq!(tl.next_usable(1550.0), Some(1700.0));
        assert!((tl.work_between(1000.0, 2000.0) - 550.0).abs() < 1e-9);
    }

    #[test]
    fn past_the_end_the_trace_starts_again() {
        let tl = line();
        // From 1800: 200 by 2000 (end of lap), then the next lap at half speed.
        assert_eq!(tl.finish_time(1800.0, 250.0), Some(2100.0));
        assert_eq!(tl.next_failure(1800.0), Some((2500.0, State::S3)));
        assert_eq!(tl.failure_at(2550.0), Some(State::S3));
        // The past: over the lap before 2000, 800 s usable with 550 of work,
        // one episode of 200 s.
        let (share, outage) = tl.past(2000.0, 1000.0);
        assert!((share.unwrap() - 550.0 / 800.0).abs() < 1e-9);
        assert!((outage.unwrap() - 200.0).abs() < 1e-9);
        // The same past as up-spells: 800 usable seconds, one episode.
        assert_eq!(tl.past_spells(2000.0, 1000.0), (800.0, 1.0));
        assert_eq!(tl.past_spells(1000.0, 1000.0), (0.0, 0.0));
        // Spell by spell: the lap's first five cells and last three are
        // up-spells cut by the span's edges, the S3 between them whole.
        let l = tl.past_spell_lengths(2000.0, 1000.0);
        assert_eq!(l.up_cut, vec![500.0, 300.0]);
        assert!(l.up.is_empty());
        assert_eq!(l.outages, vec![200.0]);
        // Over a lap's end: the whole up-spell from 1700 to 2500.
        let l = tl.past_spell_lengths(2700.0, 1200.0);
        assert_eq!(l.up, vec![800.0]);
        assert!(l.up_cut.is_empty() && l.outages.is_empty());
    }

    #[test]
    fn a_host_that_never_runs_a_guest_never_finishes() {
        let tl = Timeline::from_cells(0, 10, vec![5; 4], vec![0.0; 4]);
        assert_eq!(tl.finish_time(0.0, 1.0), None);
        assert_eq!(tl.next_usable(0.0), None);
        assert_eq!(tl.next_failure(5.0), Some((5.0, State::S5)));
    }
}
