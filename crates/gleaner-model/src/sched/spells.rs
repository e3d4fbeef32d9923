//! A host's failure spells over its recent past: how long it stays usable
//! between failures and how long a failure keeps it away. The turnaround
//! estimate draws a host's next failure after a return from its mean
//! up-spell, and its time away from its mean outage (a TR curve describes
//! only the first failure from the state the host is in now). The
//! simulator reads the same figures off its traces
//! ([`super::timeline::Timeline::past_spells`]); a node reads them off its
//! own record with [`PastSpells::of_series`] and tells consumers in its
//! reliability answer.

use crate::series::HostSeries;
use crate::state::{State, Thresholds};
use serde::{Deserialize, Serialize};

/// How far back a host's spells are counted, seconds: a week holds every
/// weekday's pattern once, and is what the simulator looks back over.
pub const LOOKBACK_SECS: i64 = 7 * 86_400;

/// Usable time and failure episodes over a past span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PastSpells {
    /// Seconds the host could run a guest (S1 or S2).
    pub usable_secs: f64,
    /// Seconds it could not (S3, S4 or S5).
    pub failing_secs: f64,
    /// Failure episodes begun in the span: a run of failing states entered
    /// from a usable one (a span that opens failing does not count its
    /// first run, whose start is unseen).
    pub episodes: u32,
}

impl PastSpells {
    /// Counts spells in states sampled every `step_secs`.
    pub fn of_states(states: &[State], step_secs: u32) -> PastSpells {
        let step = f64::from(step_secs);
        let (mut usable, mut failing, mut episodes) = (0u64, 0u64, 0u32);
        let mut was_usable = false;
        for state in states {
            if state.is_failure() {
                failing += 1;
                if was_usable {
                    episodes = episodes.saturating_add(1);
                }
                was_usable = false;
            } else {
                usable += 1;
                was_usable = true;
            }
        }
        PastSpells {
            usable_secs: usable as f64 * step,
            failing_secs: failing as f64 * step,
            episodes,
        }
    }

    /// The spells in `[at − lookback, at]` of `series` read with `th`,
    /// the lookback cut at the record's start; `None` when the record does
    /// not reach `at` or holds less than one step before it.
    pub fn of_series(
        series: &HostSeries,
        th: Thresholds,
        at: i64,
        lookback_secs: i64,
    ) -> Option<PastSpells> {
        let (states, step) = past_states(series, th, at, lookback_secs)?;
        Some(PastSpells::of_states(&states, step))
    }

    /// Mean usable seconds between failures; `None` without a failure.
    pub fn mean_uptime_secs(&self) -> Option<f64> {
        (self.episodes > 0).then(|| self.usable_secs / f64::from(self.episodes))
    }

    /// Mean seconds a failure keeps the host away; `None` without one.
    pub fn mean_outage_secs(&self) -> Option<f64> {
        (self.episodes > 0).then(|| self.failing_secs / f64::from(self.episodes))
    }
}

/// Most lengths of each kind a [`SpellLengths`] keeps (and a reliability
/// answer carries): past it, evenly spaced order statistics stand for the
/// rest, so a host failing every few minutes sends no more than one that
/// fails once a week. 32 quantiles pin a distribution's shape to about
/// 1/32 of its mass, finer than a week of spells tells it anyway.
pub const MAX_SPELL_LENGTHS: usize = 32;
/// Most up-spells cut by a span's edges: the one running at its start and
/// the one running at its end.
pub const MAX_CUT_SPELLS: usize = 2;

/// The lengths of a host's spells over a past span, not only their sums:
/// real up-spells are bursty (many short, some very long), which a mean
/// and an exponential draw do not show. The turnaround estimate resamples
/// them after every return (a Bayesian bootstrap, see
/// `estimate::SpellBootstrap`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SpellLengths {
    /// Whole up-spells (begun at the end of a failure, ended by the next),
    /// seconds, ascending; at most [`MAX_SPELL_LENGTHS`].
    pub up: Vec<f64>,
    /// How many whole up-spells `up` stands for (more than its length when
    /// quantiles stand for them).
    pub up_seen: u32,
    /// Up-spells cut by the span's edges, seconds: each lasted at least
    /// this long (at most [`MAX_CUT_SPELLS`]).
    pub up_cut: Vec<f64>,
    /// Whole outages (begun and ended inside the span), seconds,
    /// ascending; at most [`MAX_SPELL_LENGTHS`].
    pub outages: Vec<f64>,
    /// How many whole outages `outages` stands for.
    pub outages_seen: u32,
}

impl SpellLengths {
    /// The spells of a run of cells, `failing(k)` telling whether cell `k`
    /// of `cells` (each `step_secs` long) could not run a guest.
    pub fn of_cells(cells: usize, step_secs: f64, failing: impl Fn(usize) -> bool) -> SpellLengths {
        let mut up = Vec::new();
        let mut up_cut = Vec::new();
        let mut outages = Vec::new();
        let mut k = 0;
        while k < cells {
            let fails = failing(k);
            let start = k;
            while k < cells && failing(k) == fails {
                k += 1;
            }
            let len = (k - start) as f64 * step_secs;
            // Whole: bounded on both sides by the other kind of spell.
            let whole = start > 0 && k < cells;
            match (fails, whole) {
                (false, true) => up.push(len),
                (false, false) => up_cut.push(len),
                (true, true) => outages.push(len),
                // An outage cut by the span's edge: its length is unseen.
                (true, false) => {}
            }
        }
        let mut lengths = SpellLengths {
            up_seen: u32::try_from(up.len()).unwrap_or(u32::MAX),
            up,
            up_cut,
            outages_seen: u32::try_from(outages.len()).unwrap_or(u32::MAX),
            outages,
        };
        lengths.up = quantile_points(std::mem::take(&mut lengths.up));
        lengths.outages = quantile_points(std::mem::take(&mut lengths.outages));
        lengths
    }

    /// The spells of states sampled every `step_secs`.
    pub fn of_states(states: &[State], step_secs: u32) -> SpellLengths {
        SpellLengths::of_cells(states.len(), f64::from(step_secs), |k| {
            states[k].is_failure()
        })
    }

    /// The spells in `[at − lookback, at]` of `series` read with `th`, as
    /// [`PastSpells::of_series`] counts them.
    pub fn of_series(
        series: &HostSeries,
        th: Thresholds,
        at: i64,
        lookback_secs: i64,
    ) -> Option<SpellLengths> {
        let (states, step) = past_states(series, th, at, lookback_secs)?;
        Some(SpellLengths::of_states(&states, step))
    }
}

/// Both figures of the spells in `[at − lookback, at]` of `series` read
/// with `th`, from one reading of its states (a node's answer sends both;
/// a week at 6 s steps is 100 800 states).
pub fn spells_of_series(
    series: &HostSeries,
    th: Thresholds,
    at: i64,
    lookback_secs: i64,
) -> Option<(PastSpells, SpellLengths)> {
    let (states, step) = past_states(series, th, at, lookback_secs)?;
    Some((
        PastSpells::of_states(&states, step),
        SpellLengths::of_states(&states, step),
    ))
}

/// The states of `series` read with `th` over `[at − lookback, at]`, the
/// lookback cut at the record's start, and their step; `None` when the
/// record does not reach `at` or holds less than one step before it. Both
/// kinds of spell figure count from this one reading.
fn past_states(
    series: &HostSeries,
    th: Thresholds,
    at: i64,
    lookback_secs: i64,
) -> Option<(Vec<State>, u32)> {
    let step = series.step_secs.max(1);
    let first = series.first_time()?;
    let start = at.saturating_sub(lookback_secs.max(0)).max(first);
    let steps = usize::try_from((at - start) / i64::from(step)).ok()?;
    if steps == 0 {
        return None;
    }
    let mut states = Vec::new();
    series
        .window_states(th, start, step, steps, &mut states)
        .then_some((states, step))
}

/// `values` sorted, or when more than [`MAX_SPELL_LENGTHS`], that many
/// evenly spaced order statistics of them (the midpoints of equal shares).
pub fn quantile_points(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n <= MAX_SPELL_LENGTHS {
        return values;
    }
    let k = MAX_SPELL_LENGTHS;
    (0..k)
        .map(|i| values[(((2 * i + 1) * n) / (2 * k)).min(n - 1)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::Sample;
    use jiff::tz::TimeZone;

    #[test]
    fn spells_count_episodes_entered_from_a_usable_state() {
        use State::*;
        // Opens failing (unseen start: not an episode), then two episodes
        // of 2 and 1 steps between usable runs.
        let states = [S5, S5, S1, S1, S2, S3, S3, S1, S4, S1];
        let s = PastSpells::of_states(&states, 10);
        assert_eq!(s.episodes, 2);
        assert_eq!(s.usable_secs, 50.0);
        assert_eq!(s.failing_secs, 50.0);
        assert_eq!(s.mean_uptime_secs(), Some(25.0));
        assert_eq!(s.mean_outage_secs(), Some(25.0));
        let calm = PastSpells::of_states(&[S1, S2, S1], 10);
        assert_eq!(calm.mean_uptime_secs(), None);
        assert_eq!(calm.mean_outage_secs(), None);
    }

    /// A host that is off (a gap in its record) for an hour each day.
    fn daily_hour_off(days: i64) -> HostSeries {
        let mut s = HostSeries::new(60, 180, TimeZone::UTC);
        for t in (0..days * 86_400).step_by(60) {
            if t % 86_400 >= 3_600 {
                s.push(Sample {
                    time: t,
                    cpu: 5.0,
                    free_mib: 4_096,
                    up: true,
                })
                .unwrap();
            }
        }
        s
    }

    #[test]
    fn a_record_gives_its_own_up_spell_and_outage() {
        let s = daily_hour_off(10);
        let at = 10 * 86_400 - 60;
        let spells = PastSpells::of_series(&s, Thresholds::default(), at, LOOKBACK_SECS).unwrap();
        // Seven days back from late on day 9: the hours off at the starts
        // of days 3..=9, each entered from a usable day.
        assert_eq!(spells.episodes, 7);
        let outage = spells.mean_outage_secs().unwrap();
        // The record's gap reads as off from one step after its last row.
        assert!((3_500.0..=3_700.0).contains(&outage), "outage {outage}");
        let uptime = spells.mean_uptime_secs().unwrap();
        assert!((81_000.0..=83_500.0).contains(&uptime), "uptime {uptime}");
        // Nothing is read after `at`: a record cut there says the same.
        let mut cut = HostSeries::new(60, 180, TimeZone::UTC);
        for sample in s.samples().take_while(|x| x.time <= at) {
            cut.push(sample).unwrap();
        }
        assert_eq!(
            PastSpells::of_series(&cut, Thresholds::default(), at, LOOKBACK_SECS),
            Some(spells)
        );
    }

    #[test]
    fn lengths_keep_whole_spells_apart_from_those_the_edges_cut() {
        use State::*;
        // Opens failing (cut outage: dropped), up 2 (whole), down 1
        // (whole), up 3 (whole), down 2 (whole), up 1 (cut at the end).
        let states = [S5, S1, S2, S3, S1, S1, S1, S4, S5, S1];
        let l = SpellLengths::of_states(&states, 10);
        assert_eq!(l.up, vec![20.0, 30.0]);
        assert_eq!(l.up_seen, 2);
        assert_eq!(l.up_cut, vec![10.0]);
        assert_eq!(l.outages, vec![10.0, 20.0]);
        assert_eq!(l.outages_seen, 2);
        // A span that never fails is one cut up-spell and nothing whole.
        let calm = SpellLengths::of_states(&[S1, S2, S1], 10);
        assert_eq!(calm.up_cut, vec![30.0]);
        assert!(calm.up.is_empty() && calm.outages.is_empty());
        assert_eq!(SpellLengths::of_states(&[], 10), SpellLengths::default());
    }

    #[test]
    fn many_spells_are_kept_as_evenly_spaced_quantiles() {
        // 1000 spells of 1..=1000 s: 32 points, ascending, spanning them,
        // each standing for 1000/32 spells; the mean barely moves.
        let points = quantile_points((1..=1000).rev().map(f64::from).collect());
        assert_eq!(points.len(), MAX_SPELL_LENGTHS);
        assert!(points.windows(2).all(|w| w[0] <= w[1]));
        assert!(points[0] <= 20.0 && points[31] >= 980.0, "{points:?}");
        let mean = points.iter().sum::<f64>() / 32.0;
        assert!((mean - 500.5).abs() < 5.0, "{mean}");
        // Few are kept as they are, sorted.
        assert_eq!(quantile_points(vec![3.0, 1.0, 2.0]), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn a_records_lengths_add_up_to_its_spells() {
        let s = daily_hour_off(10);
        let at = 10 * 86_400 - 60;
        let th = Thresholds::default();
        let sums = PastSpells::of_series(&s, th, at, LOOKBACK_SECS).unwrap();
        let l = SpellLengths::of_series(&s, th, at, LOOKBACK_SECS).unwrap();
        // One reading of the states gives both, as the two readings do.
        assert_eq!(
            spells_of_series(&s, th, at, LOOKBACK_SECS),
            Some((sums, l.clone()))
        );
        let up: f64 = l.up.iter().chain(&l.up_cut).sum();
        assert_eq!(up, sums.usable_secs);
        // Seven episodes: six whole up-spells between them, and the
        // span's first and last up-spells cut by its edges.
        assert_eq!(l.up_seen, 6);
        assert_eq!(l.up_cut.len(), 2);
        assert_eq!(l.outages_seen, 7);
        assert!(l.outages.iter().all(|o| (3_500.0..=3_700.0).contains(o)));
        assert_eq!(SpellLengths::of_series(&s, th, 0, LOOKBACK_SECS), None);
    }

    #[test]
    fn a_short_or_missing_record_gives_nothing() {
        let s = daily_hour_off(1);
        let th = Thresholds::default();
        // Before the record, at its first row, and past its end.
        assert_eq!(PastSpells::of_series(&s, th, 0, LOOKBACK_SECS), None);
        assert_eq!(PastSpells::of_series(&s, th, 3_600, LOOKBACK_SECS), None);
        assert_eq!(
            PastSpells::of_series(&s, th, 10 * 86_400, LOOKBACK_SECS),
            None
        );
        let empty = HostSeries::new(60, 180, TimeZone::UTC);
        assert_eq!(PastSpells::of_series(&empty, th, 100, LOOKBACK_SECS), None);
        // A negative or absurd lookback is bounded, not a panic.
        assert_eq!(PastSpells::of_series(&s, th, 7_200, -5), None);
        assert!(PastSpells::of_series(&s, th, 80_000, i64::MAX).is_some());
    }
}
