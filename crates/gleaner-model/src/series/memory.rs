//! Where a record reads S4 for a job's memory, as spans of time: the only
//! thing a job's memory changes in the states read off a record (the
//! excursion tracker and S5 never look at memory), so the table of a
//! record's hours for one memory can be read off the table made without
//! one (`baselines::slots`) instead of walking every state again.

use super::HostSeries;
use crate::state::Thresholds;

impl HostSeries {
    /// The spans of time `[from, to)` in which the record reads S4 for a
    /// job of `job_mem_mib`, in order, adjacent ones joined: each up row
    /// with less free memory, from its time to the next row's, or, where
    /// the silence after it is past the gap limit, to a step after it (the
    /// record reads S5 from there, as [`HostSeries::window_states`] does).
    /// The last row's span is open: it ends at `i64::MAX`.
    pub fn lacking_memory_spans(&self, job_mem_mib: u64) -> Vec<(i64, i64)> {
        let th = Thresholds {
            job_mem_mib,
            ..Thresholds::default()
        };
        let mut spans: Vec<(i64, i64)> = Vec::new();
        let max_gap = i64::try_from(self.max_gap_secs).unwrap_or(i64::MAX);
        let n = self.len();
        let mut open: Option<i64> = None;
        for (i, (&free, &up)) in self.free_mib.iter().zip(&self.up).enumerate() {
            if !(up && th.lacks_memory(u64::from(free))) {
                if let Some(from) = open.take() {
                    spans.push((from, self.time.at(i)));
                }
                continue;
            }
            let from = *open.get_or_insert_with(|| self.time.at(i));
            if i + 1 < n && self.time.gap_after(i) > max_gap {
                let down_from = self.time.at(i).saturating_add(i64::from(self.step_secs));
                spans.push((from, down_from.min(self.time.at(i + 1))));
                open = None;
            }
        }
        if let Some(from) = open {
            spans.push((from, i64::MAX));
        }
        spans
    }
}

#[cfg(test)]
mod tests {
    use super::super::Sample;
    use super::*;
    use crate::state::State;
    use jiff::tz::TimeZone;

    /// Every state the record reads at each second, for a job of `mem`,
    /// against the spans: S4 exactly inside them.
    fn assert_spans_read_as_the_states(s: &HostSeries, mem: u64) {
        let spans = s.lacking_memory_spans(mem);
        let th = Thresholds {
            job_mem_mib: mem,
            ..Thresholds::default()
        };
        let (first, last) = (s.first_time().unwrap(), s.last_time().unwrap());
        let mut states = Vec::new();
        assert!(s.window_states(th, first, 1, (last - first) as usize, &mut states));
        for (k, state) in states.iter().enumerate() {
            let t = first + k as i64;
            let inside = spans.iter().any(|&(a, b)| a <= t && t < b);
            assert_eq!(*state == State::S4, inside, "{mem} MiB at {t}: {state:?}");
        }
        assert!(
            spans.windows(2).all(|w| w[0].1 < w[1].0),
            "joined, in order"
        );
    }

    proptest::proptest! {
        #[test]
        fn the_spans_hold_exactly_the_steps_that_read_s4(
            rows in proptest::collection::vec((1i64..40, 0.0f64..100.0, 0u64..4, 0u8..6), 1..60),
            mem in 0u64..5,
        ) {
            let mut s = HostSeries::new(6, 20, TimeZone::UTC);
            let mut t = 0;
            for (dt, cpu, free_mib, up) in rows {
                t += dt;
                s.push(Sample { time: t, cpu, free_mib, up: up != 0 }).unwrap();
            }
            assert_spans_read_as_the_states(&s, mem);
        }
    }
}
