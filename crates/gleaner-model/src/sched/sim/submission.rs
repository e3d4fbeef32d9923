//! The Monte Carlo estimate at submission: the pool as the estimate sees
//! it at time 0 (views, outages, checkpoint intervals) and the estimate of
//! every task waiting, longest first, made inside [`simulate`](super::simulate)
//! or apart from it ([`submission_estimate`]).

use super::{Forecaster, Policy, Sim, SimConfig, SimHost, PAST_LOOKBACK_SECS};
use crate::sched::curve::young_daly_interval;
use crate::sched::estimate::{
    checkpoint_mttf, estimate, Estimate, EstimateError, EstimateHost, EstimateInput, PastDay,
    PastDays, Quantiles, DAY_SECS, MAX_DAY_OUTAGES,
};
use crate::sched::timeline::Timeline;
use crate::sched::window::{HISTORY_DAYS, MAX_LOOKBACK_DAYS};
use rand::Rng;

/// How far back the spells of a host down at submission are read: two
/// weeks, not one. The rest of its outage is drawn from the whole past
/// outages longer than it has lasted (`estimate::rest_of_outage`), and a
/// weekly one in progress (a machine off for the weekend, found on Monday)
/// has no whole predecessor in the week before, only in the two: with
/// none, the draw fell back on "as long again", 54 h more for a host off
/// since Friday evening that its owner turns on on Monday morning.
pub const DOWN_LOOKBACK_SECS: f64 = 2.0 * PAST_LOOKBACK_SECS;

/// The estimate at submission that [`simulate`] makes when
/// `config.estimate_runs` > 0, made apart from the simulation so a caller
/// can run it elsewhere (on other threads, once for several policies that
/// share it): `run` makes the estimate of the input it is given (e.g.
/// [`estimate`] with a generator). Returns the makespan's quantiles and the
/// kills the estimate expects; `None` when there is nothing to estimate or
/// `run` fails.
pub fn submission_estimate(
    config: &SimConfig,
    hosts: &[SimHost],
    timelines: &[Timeline],
    forecaster: &mut dyn Forecaster,
    run: impl FnOnce(&EstimateInput<'_>) -> Result<(Estimate, Vec<f64>), EstimateError>,
) -> Option<(Quantiles, f64)> {
    if config.estimate_runs == 0 || hosts.is_empty() {
        return None;
    }
    if hosts
        .iter()
        .any(|h| h.timeline >= timelines.len() || timelines[h.timeline].cells() == 0)
    {
        return None;
    }
    let est_hosts = Sim::new(config, hosts, timelines).estimate_hosts(forecaster);
    run(&submission_input(config, &est_hosts))
        .ok()
        .map(|(e, _)| (e.makespan, e.mean_failures))
}

/// The estimate's input at submission: every task waiting, longest first.
pub(super) fn submission_input<'a>(
    config: &'a SimConfig,
    hosts: &'a [EstimateHost],
) -> EstimateInput<'a> {
    EstimateInput {
        hosts,
        running: &[],
        waiting: &config.runtimes,
        longest_first: true,
        runs: config.estimate_runs,
        runtime_sigma_log: None,
        held: &[],
    }
}

impl Sim<'_> {
    /// The Monte Carlo estimate at submission, under the proactive rule.
    pub(super) fn estimate_now<R: Rng + ?Sized>(
        &mut self,
        forecaster: &mut dyn Forecaster,
        rng: &mut R,
    ) -> Option<(Quantiles, f64)> {
        let est_hosts = self.estimate_hosts(forecaster);
        let input = submission_input(self.config, &est_hosts);
        estimate(&input, rng)
            .ok()
            .map(|(e, _)| (e.makespan, e.mean_failures))
    }

    /// The pool as the estimate at submission sees it: each host's view
    /// at time 0, its usual outage, and (with checkpoints) its interval.
    pub(super) fn estimate_hosts(&mut self, forecaster: &mut dyn Forecaster) -> Vec<EstimateHost> {
        let mut est_hosts = Vec::with_capacity(self.hosts.len());
        let checkpointing = self.config.policy == Policy::ProactiveCheckpoint;
        for host in 0..self.hosts.len() {
            let view = self.view(host, forecaster).clone();
            let outage = self.outage_guess(host);
            let tl = &self.timelines[self.hosts[host].timeline];
            let down = tl.failure_at(self.trace_time(host, 0.0)).is_some();
            // The rate is known only as well as a week of the host's past
            // tells it: drawn per run from its posterior.
            let past = self.past_failures(host, 0.0);
            let checkpoint_secs = if checkpointing {
                young_daly_interval(
                    self.config.checkpoint_cost_secs,
                    checkpoint_mttf(&view.curve, past.as_ref()),
                )
                .unwrap_or(0.0)
            } else {
                0.0
            };
            est_hosts.push(EstimateHost {
                view,
                busy_secs: if down { outage } else { 0.0 },
                recovery_secs: outage,
                down_secs: if down {
                    tl.failing_for(self.trace_time(host, 0.0))
                } else {
                    0.0
                },
                past,
                checkpoint_secs,
                checkpoint_cost_secs: if checkpoint_secs > 0.0 {
                    self.config.checkpoint_cost_secs
                } else {
                    0.0
                },
                days: past_days(tl, self.trace_time(host, 0.0)),
                spells: Some(tl.past_spell_lengths(
                    self.trace_time(host, 0.0),
                    if down {
                        DOWN_LOOKBACK_SECS
                    } else {
                        PAST_LOOKBACK_SECS
                    },
                )),
            });
        }
        est_hosts
    }
}

/// The whole days before trace time `t` the estimate replays: up to
/// [`HISTORY_DAYS`] of each kind (weekday, weekend) within
/// [`MAX_LOOKBACK_DAYS`] (as `window::counted_tr` looks back), the owner's midnight
/// to midnight, none before the trace's start; `None` without any.
pub(super) fn past_days(tl: &Timeline, t: f64) -> Option<PastDays> {
    let midnight = tl.day_start(t);
    let mut days = Vec::new();
    let (mut weekdays, mut weekends) = (0, 0);
    for d in 1..=MAX_LOOKBACK_DAYS {
        let start = midnight - d as f64 * DAY_SECS;
        if start < tl.start() as f64 {
            break;
        }
        // At noon, which no change of clock moves to another day.
        let weekend = tl.is_weekend(start + DAY_SECS / 2.0);
        let count = if weekend {
            &mut weekends
        } else {
            &mut weekdays
        };
        if *count >= HISTORY_DAYS {
            continue;
        }
        *count += 1;
        let outages = tl
            .outages_in(start, start + DAY_SECS)
            .into_iter()
            .map(|(a, b)| (a - start, b - start))
            .collect();
        days.push(PastDay {
            weekend,
            outages: at_most(outages, MAX_DAY_OUTAGES),
        });
        if weekdays >= HISTORY_DAYS && weekends >= HISTORY_DAYS {
            break;
        }
    }
    (!days.is_empty()).then(|| PastDays {
        to_midnight_secs: (midnight + DAY_SECS - t).clamp(f64::MIN_POSITIVE, DAY_SECS),
        weekday: tl.weekday(t),
        days,
    })
}

/// `outages` (ascending, apart) with the shortest gaps closed until at
/// most `max` are left: a host that flickers all day is down all day.
fn at_most(mut outages: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    let mut gap = 60.0;
    while outages.len() > max {
        let mut merged: Vec<(f64, f64)> = Vec::with_capacity(outages.len());
        for (a, b) in outages {
            match merged.last_mut() {
                Some(last) if a - last.1 <= gap => last.1 = b,
                _ => merged.push((a, b)),
            }
        }
        outages = merged;
        gap *= 2.0;
    }
    outages
}

#[cfg(test)]
mod tests {
    use super::at_most;

    #[test]
    fn a_day_of_too_many_outages_has_its_shortest_gaps_closed() {
        let flicker: Vec<(f64, f64)> = (0..10)
            .map(|k| (k as f64 * 100.0, k as f64 * 100.0 + 50.0))
            .collect();
        assert_eq!(at_most(flicker.clone(), 10), flicker);
        assert_eq!(at_most(flicker, 9), vec![(0.0, 950.0)]);
        let apart = vec![(0.0, 10.0), (20.0, 30.0), (1_000.0, 1_010.0)];
        assert_eq!(at_most(apart, 2), vec![(0.0, 30.0), (1_000.0, 1_010.0)]);
    }
}
