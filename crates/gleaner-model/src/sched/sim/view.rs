//! What the simulated consumer knows of a host: trace time, the view the
//! rules weigh (from the host's past only, refreshed every 15 minutes; what
//! the host claims, weighed by its record of claims when they are scored),
//! its usual outage and its past week's failures. Nothing here reads a
//! trace's future.

use super::{Forecaster, Sim, DEFAULT_OUTAGE_SECS, PAST_LOOKBACK_SECS};
use crate::sched::estimate::PastFailures;
use crate::sched::place::HostView;

/// The consumer's views are worked out once per 15 minutes of simulated
/// time: the bucket of time `t`.
pub(super) fn view_bucket(t: f64) -> i64 {
    (t / 900.0).floor() as i64
}

impl Sim<'_> {
    pub(super) fn trace_time(&self, host: usize, t: f64) -> f64 {
        self.hosts[host].offset as f64 + t
    }

    /// Trace time folded into the trace's first lap (what the forecaster reads).
    pub(super) fn lap_time(&self, host: usize, t: f64) -> i64 {
        let tl = &self.timelines[self.hosts[host].timeline];
        let span = tl.span_secs().max(1);
        let tt = self.trace_time(host, t) as i64;
        tl.start() + (tt - tl.start()).rem_euclid(span)
    }

    /// The consumer's view of `host` now, from its past only (refreshed once
    /// per 15 minutes of simulated time).
    pub(super) fn view(&mut self, host: usize, forecaster: &mut dyn Forecaster) -> &HostView {
        let bucket = view_bucket(self.now);
        if self.view_bucket[host] != bucket {
            let claimed = self.claimed_view_at(host, self.now, forecaster);
            self.views[host] = self.weighed(host, &claimed);
            self.claimed_views[host] = claimed;
            self.view_bucket[host] = bucket;
            self.order_stale = true;
        }
        &self.views[host]
    }

    /// `host` at time `t` as the consumer weighs it: what it says of
    /// itself, discounted by its record when claims are scored
    /// (`claims.rs`).
    pub(super) fn view_at(&self, host: usize, t: f64, forecaster: &mut dyn Forecaster) -> HostView {
        let claimed = self.claimed_view_at(host, t, forecaster);
        self.weighed(host, &claimed)
    }

    /// What `host` would say of itself at time `t`, from its past only (an
    /// over-claimer's curve is TR 1 at every window, `claims.rs`).
    pub(super) fn claimed_view_at(
        &self,
        host: usize,
        t: f64,
        forecaster: &mut dyn Forecaster,
    ) -> HostView {
        let h = self.hosts[host];
        let tl = &self.timelines[h.timeline];
        let tt = self.trace_time(host, t);
        let (share, _) = tl.past(tt, PAST_LOOKBACK_SECS);
        let availability = share.unwrap_or_else(|| tl.rate_at(tt));
        let curve = forecaster.curve(h.timeline, self.lap_time(host, t));
        self.claimed(
            host,
            HostView {
                power: h.power,
                availability,
                curve,
            },
        )
    }

    pub(super) fn outage_guess(&self, host: usize) -> f64 {
        self.outage_guess_at(host, self.now)
    }

    /// The outage `host`'s past at time `t` makes likely.
    pub(super) fn outage_guess_at(&self, host: usize, t: f64) -> f64 {
        let h = self.hosts[host];
        let tt = self.trace_time(host, t);
        self.timelines[h.timeline]
            .past(tt, PAST_LOOKBACK_SECS)
            .1
            .unwrap_or(DEFAULT_OUTAGE_SECS)
    }

    /// What host `host`'s week before `now` shows of its failures.
    pub(super) fn past_failures(&self, host: usize, now: f64) -> Option<PastFailures> {
        let tl = &self.timelines[self.hosts[host].timeline];
        let (up, episodes) = tl.past_spells(self.trace_time(host, now), PAST_LOOKBACK_SECS);
        (up > 0.0).then(|| PastFailures {
            up_secs: up,
            failures: episodes.round() as u32,
        })
    }
}
