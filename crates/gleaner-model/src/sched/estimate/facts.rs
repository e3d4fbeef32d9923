//! What every run of an estimate needs of each host, computed once per
//! estimate: its slowdown, its horizon, its curve laid out for sampling and
//! for the rule's expected turnarounds, its past.

use super::super::curve::{FailureSampler, PreparedCurve};
use super::bootstrap::SpellBootstrap;
use super::{EstimateHost, PastFailures};
use rand::Rng;

/// What a run needs of each host, computed once per estimate.
pub(super) struct HostFacts {
    /// SP = 1/Γ (infinite when the host cannot run anything).
    pub(super) slowdown: f64,
    /// Runs this long or longer can never succeed here (TR below 1e-12).
    pub(super) horizon: f64,
    pub(super) sampler: FailureSampler,
    /// The host's curve, laid out for the rule's expected turnarounds.
    pub(super) curve: PreparedCurve,
    pub(super) recovery: f64,
    pub(super) past: Option<PastFailures>,
    /// The curve's last window and its TR there: beyond it, a host with a
    /// known failure rate fails at that rate (see [`super::run::Run::first_failure`]).
    pub(super) curve_end: (f64, f64),
    pub(super) checkpoint: f64,
    pub(super) checkpoint_cost: f64,
    pub(super) bootstrap: Option<SpellBootstrap>,
}

impl HostFacts {
    pub(super) fn new(host: &EstimateHost) -> HostFacts {
        HostFacts {
            slowdown: host.view.expected_run_secs(1.0),
            horizon: host
                .view
                .curve
                .failure_time_at(1e-12)
                .unwrap_or(f64::INFINITY),
            sampler: FailureSampler::new(&host.view.curve),
            curve: PreparedCurve::new(&host.view.curve),
            recovery: host.recovery_secs.max(0.0),
            past: host
                .past
                .filter(|p| p.up_secs.is_finite() && p.up_secs > 0.0),
            curve_end: host
                .view
                .curve
                .points()
                .last()
                .copied()
                .unwrap_or((0.0, 1.0)),
            checkpoint: host.checkpoint_secs.max(0.0),
            checkpoint_cost: if host.checkpoint_cost_secs.is_finite() {
                host.checkpoint_cost_secs.max(0.0)
            } else {
                0.0
            },
            bootstrap: host.spells.as_ref().and_then(SpellBootstrap::new),
        }
    }

    /// This run's failure rate after a return, drawn from the past's
    /// posterior; `None`: redraw from the curve.
    pub(super) fn draw_rate<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<f64> {
        self.past.and_then(|p| p.draw_rate(rng))
    }

    /// [`super::super::place::HostView::expected_turnaround`] of a task of `runtime` reference
    /// seconds, bit for bit (`slowdown` is `expected_run_secs(1.0)`).
    pub(super) fn expected_turnaround(&self, runtime: f64) -> f64 {
        let run = runtime * self.slowdown;
        if run.is_finite() {
            self.curve.expected_time_with_restarts(run)
        } else {
            f64::INFINITY
        }
    }

    /// Whether a task of `runtime` reference seconds can succeed here at
    /// all (its expected turnaround is finite).
    pub(super) fn can_run(&self, runtime: f64) -> bool {
        fits(runtime, self.slowdown, self.horizon)
    }
}

/// Whether a task of `runtime` reference seconds can succeed on a host of
/// this slowdown and horizon: [`HostFacts::can_run`], and what the
/// rule's bulk asks of each free host (`QueueTurnarounds::can_run`).
pub(super) fn fits(runtime: f64, slowdown: f64, horizon: f64) -> bool {
    let run = runtime * slowdown;
    run.is_finite() && run < horizon
}
