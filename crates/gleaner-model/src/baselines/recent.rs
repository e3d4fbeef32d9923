//! The present at W read straight off a record (no grid of it), as
//! `logistic` and `hazard` both describe it: the last day of states (how
//! long the state at W has lasted, how long ago the last failure was) and
//! the samples at the last steps up to W.

use crate::series::{HostSeries, Sample};
use crate::state::{State, Thresholds};

/// The states at the record's steps over the lookback before W.
pub(super) struct RecentStates {
    /// The record's step, seconds.
    pub step: i64,
    /// States read, W's included (at least 1).
    pub len: usize,
    /// Steps the state at W has lasted, W's included (at least 1).
    pub run: usize,
    /// Steps since the last failure, at most the lookback's steps.
    pub since_fail: usize,
}

/// The states of the `lookback_secs` before `at` (cut at the record's
/// start); a record that cannot give them reads as `state` at W alone.
/// `None` for an empty record.
pub(super) fn recent_states(
    series: &HostSeries,
    th: Thresholds,
    at: i64,
    state: State,
    lookback_secs: i64,
) -> Option<RecentStates> {
    let step = i64::from(series.step_secs.max(1));
    let first = series.first_time()?;
    let back = ((at - first).min(lookback_secs) / step).max(0) as usize;
    let mut states = Vec::new();
    if back == 0
        || !series.window_states(th, at - back as i64 * step, step as u32, back, &mut states)
    {
        states.clear();
        states.push(state);
    }
    let k = states.len() - 1;
    let cap = (lookback_secs / step).max(1) as usize;
    let run = states.iter().rev().take_while(|s| **s == states[k]).count();
    let since_fail = states
        .iter()
        .rev()
        .position(|s| s.is_failure())
        .unwrap_or(cap)
        .min(cap);
    Some(RecentStates {
        step,
        len: k + 1,
        run,
        since_fail,
    })
}

/// Calls `each(j, sample)` for the record's row at each of the `span`
/// steps ending at `at`, oldest first (j = 0..span); `None` when the
/// record does not reach back that far.
pub(super) fn each_recent_sample(
    series: &HostSeries,
    at: i64,
    step: i64,
    span: usize,
    mut each: impl FnMut(usize, Sample),
) -> Option<()> {
    let mut row = series.row_at(at - (span as i64 - 1) * step)?;
    for j in 0..span {
        let t = at - (span - 1 - j) as i64 * step;
        while series.get(row + 1).is_some_and(|s| s.time <= t) {
            row += 1;
        }
        each(j, series.get(row)?);
    }
    Some(())
}
