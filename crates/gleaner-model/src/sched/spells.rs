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
            .then(|| PastSpells::of_states(&states, step))
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
