//! `proactive-auto`'s side of the simulator (issue 28): the two expected
//! makespans [`crate::sched::duel`] chooses a batch's rule by, gathered at
//! submission from what the consumer knows then (the hosts' pasts, never
//! their futures), and the batch then simulated under the rule chosen.
//!
//! The expectation is back-tests: the batch replayed under both rules on
//! the pool's own past, submitted earlier on the same hosts (as the
//! estimate's calibration does, `sched::backtest`), each replay simulated
//! only up to the submission, from the same draws for both rules; the
//! mean realised makespans are compared. The back-tests are submitted a
//! few hours apart over the past days, so the pool's habits (owners who
//! all come back each morning, or who switch off at night), not one
//! submission's luck, decide. The Monte Carlo estimate cannot tell the
//! rules apart: the bounded rule holds no task at submission on the
//! desktop pools measured (its first holds come hours later, when owners
//! arrive), and the estimate's hosts fail by spells that know no time of
//! day (docs/scheduling.md, "Tried: choosing the rule per batch").

use super::config::earlier;
use super::submission::submission_input;
use super::{simulate, Forecaster, Policy, Sim, SimConfig, SimError, SimHost, SimResult};
use crate::sched::duel::{bounded_holds, Duel, Placement};
use crate::sched::estimate::estimate;
use crate::sched::timeline::Timeline;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Monte Carlo runs of the estimate that places the first back-test.
pub const DUEL_RUNS: usize = 200;
/// The config that places by `placement`: `proactive`, or `windows` with
/// the bounded rule.
pub fn placed_by(config: &SimConfig, placement: Placement) -> SimConfig {
    match placement {
        Placement::Plain => SimConfig {
            policy: Policy::Proactive,
            ..config.clone()
        },
        Placement::Holds => SimConfig {
            policy: Policy::Windows,
            windows: bounded_holds(),
            ..config.clone()
        },
    }
}

/// Simulates `config` (a `proactive-auto` policy): the duel at
/// submission, then the batch under the rule chosen (plain when the duel
/// could not be made). The duel draws from a generator of its own, so
/// the simulation after it is the chosen rule's own run.
pub(super) fn simulate_auto<R: rand::Rng + ?Sized>(
    config: &SimConfig,
    hosts: &[SimHost],
    timelines: &[Timeline],
    forecaster: &mut dyn Forecaster,
    rng: &mut R,
    progress: &mut dyn FnMut(f64),
) -> Result<SimResult, SimError> {
    let seed = 0x6475_656c ^ config.runtimes.len() as u64;
    let duel = by_backtests(config, hosts, timelines, forecaster, seed);
    let chosen = placed_by(config, duel.map_or(Placement::Plain, |d| d.chosen));
    let mut result = simulate(&chosen, hosts, timelines, forecaster, rng, progress)?;
    result.policy = config.policy;
    result.duel = duel;
    Ok(result)
}

/// The duel by back-tests (see the module), placed as `config.duel`
/// says; each rule's replay is simulated up to now, and one not done by
/// then counts with its submission's distance as its makespan.
pub fn by_backtests(
    config: &SimConfig,
    hosts: &[SimHost],
    timelines: &[Timeline],
    forecaster: &mut dyn Forecaster,
    seed: u64,
) -> Option<Duel> {
    let runs = SimConfig {
        policy: Policy::Proactive,
        estimate_runs: DUEL_RUNS,
        ..config.clone()
    };
    let est_hosts = Sim::new(&runs, hosts, timelines).estimate_hosts(forecaster);
    let (now, _) = estimate(
        &submission_input(&runs, &est_hosts),
        &mut ChaCha8Rng::seed_from_u64(seed),
    )
    .ok()?;
    let rule = config.duel;
    let first = rule.back_secs(now.makespan.p50, 0);
    if !first.is_finite() || first < 1.0 {
        return None;
    }
    let (mut plain, mut holds, mut n) = (0.0, 0.0, 0usize);
    for b in 0..rule.backtests {
        let back = rule
            .back_secs(now.makespan.p50, b)
            .min(i64::MAX as f64 / 2.0) as i64;
        let Some(then) = earlier(hosts, timelines, back) else {
            break;
        };
        let mut replay = |placement: Placement| {
            let c = SimConfig {
                horizon_secs: config.horizon_secs.min(back as f64),
                estimate_runs: 0,
                ..placed_by(config, placement)
            };
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ b as u64);
            simulate(&c, &then, timelines, forecaster, &mut rng, &mut |_| {})
                .ok()
                .map(|r| r.makespan_secs.unwrap_or(back as f64))
        };
        if let (Some(p), Some(h)) = (replay(Placement::Plain), replay(Placement::Holds)) {
            plain += p;
            holds += h;
            n += 1;
        }
    }
    (n > 0).then(|| Duel::decide(plain / n as f64, holds / n as f64))
}
