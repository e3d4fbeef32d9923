//! Calibrating the estimate's band against the pool's own past (the
//! simulator's back-tests).
//!
//! The Monte Carlo estimate is only as wide as its model of the hosts: a
//! week of each host's spells, drawn independently. Real pools surprise it
//! in ways that model does not carry (a host's one long outage in a month,
//! outages that cluster), and on the shared traces its [p10, p90] held
//! the realised makespan for 62 of 100 seeds with checkpoints, not the
//! nominal 80 (docs/scheduling.md). So before answering, the simulator
//! replays the same batch submitted at earlier times on the same hosts
//! (each host that much earlier in its trace, predictions from its past
//! then), compares each back-test's realised makespan with the estimate
//! made at its submission, and widens today's band by how far those
//! misses ran beyond their bands. This is calibration from the pool's own
//! history, as a forecaster checks its model on past days before trusting
//! its spread. It reads nothing after the submission: each back-test is
//! simulated only up to the submission, and one not done by then counts
//! with the submission as its makespan (a lower bound: dropping it would
//! drop the largest misses). Back-tests start a gap apart, and may overlap.
//!
//! The back-tests replay the rule the estimate models (`proactive`, or
//! `proactive+checkpoint` for an estimate with checkpoints), whatever
//! policy is being simulated.
//!
//! Each back-test's miss is its realised makespan's distance from its
//! estimate's p50 on a log scale, in units of σ of a normal whose p10 and
//! p90 are the band's (p90 lies 1.2816 σ above p50), each side of p50
//! with its own σ (makespan bands are skewed). A calibrated band gives
//! misses of mean square 1; the band is widened by the root mean square of
//! the misses, with one pseudo back-test of miss 1 (the model's own band)
//! so that a few back-tests move it only part way, and never narrowed:
//! few back-tests can look calibrated by luck, and a band too narrow
//! misleads a user more than one too wide. Pure code.

use super::estimate::{Estimate, EstimateError, EstimateInput, Quantiles};
pub use super::sim::{earlier, MIN_HISTORY_SECS};
use super::sim::{simulate, submission_estimate, Forecaster, Policy, SimConfig, SimHost};
use super::timeline::Timeline;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Most back-tests one calibration makes (`--backtests`).
pub const MAX_BACKTESTS: usize = 50;
/// Back-test `b` is submitted `b` gaps before now, a gap being this many
/// times the present estimate's p90: most back-tests' batches are over
/// before the next one is submitted.
pub const GAP_IN_P90S: f64 = 1.25;
/// The standard normal's 90th percentile: p90 is this many σ above p50.
const Z90: f64 = 1.281_551_565_544_600_4;

/// What the back-tests found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Each back-test's miss, in σ of the side of p50 it fell on (see
    /// [`miss`]).
    pub misses: Vec<f64>,
    /// The factor the band's half-widths were multiplied by (1: unchanged).
    pub widening: f64,
}

/// How far `realised` lies from `q`'s p50 on a log scale, in σ of the
/// side it lies on (see the module: ±1.2816 at p10 and p90); a side of no
/// width takes the band's mean half-width. `None` for a band of no width
/// or values that are not positive.
pub fn miss(realised: f64, q: &Quantiles) -> Option<f64> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(positive(realised) && positive(q.p10) && positive(q.p50) && positive(q.p90)) {
        return None;
    }
    let x = (realised / q.p50).ln();
    let side = if x >= 0.0 {
        (q.p90 / q.p50).ln()
    } else {
        (q.p50 / q.p10).ln()
    };
    let width = if side > 0.0 {
        side
    } else {
        (q.p90 / q.p10).ln() / 2.0
    };
    (width > 0.0).then(|| x / width * Z90)
}

/// The factor the band is widened by after these misses: the root mean
/// square of them and one miss of 1, at least 1.
pub fn widening(misses: &[f64]) -> f64 {
    let finite = misses.iter().filter(|m| m.is_finite());
    let (sum, n) = finite.fold((1.0, 1.0), |(s, n), m| (s + m * m, n + 1.0));
    (sum / n).sqrt().max(1.0)
}

/// `q` with p10 and p90 moved away from p50 by `factor` on a log scale,
/// a side of no width taking the other's (the mean is left as it is: it
/// is not a quantile of the band).
pub fn widen(q: &Quantiles, factor: f64) -> Quantiles {
    if factor == 1.0
        || !(factor.is_finite() && factor > 0.0 && q.p50 > 0.0 && q.p10 > 0.0 && q.p90 > 0.0)
    {
        return *q;
    }
    let up = (q.p90 / q.p50).ln();
    let down = (q.p50 / q.p10).ln();
    let up_w = if up > 0.0 { up } else { down.max(0.0) };
    let down_w = if down > 0.0 { down } else { up.max(0.0) };
    Quantiles {
        p10: q.p50 * (-down_w * factor).exp(),
        p90: q.p50 * (up_w * factor).exp(),
        ..*q
    }
}

/// What to back-test: `config`'s batch on `hosts`, the present estimate
/// being `now`, at most `backtests` times.
#[derive(Debug, Clone, Copy)]
pub struct Backtests<'a> {
    pub config: &'a SimConfig,
    pub hosts: &'a [SimHost],
    pub timelines: &'a [Timeline],
    pub now: &'a Quantiles,
    pub backtests: usize,
}

/// The back-tests `what` asks for (see the module): back-test `b` moves
/// every host `b` gaps earlier in its trace, makes the estimate there with
/// `estimate` (as [`submission_estimate`] does) and simulates the batch
/// up to now with the rule the estimate models, drawing from `rng_for(b)`.
/// Stops at the first back-test a host lacks [`MIN_HISTORY_SECS`] of
/// history for; skips one whose simulation or estimate fails.
pub fn calibrate<R: Rng>(
    what: Backtests<'_>,
    forecaster: &mut dyn Forecaster,
    mut rng_for: impl FnMut(usize) -> R,
    mut estimate: impl FnMut(&EstimateInput<'_>, &mut R) -> Result<(Estimate, Vec<f64>), EstimateError>,
) -> Calibration {
    let Backtests {
        config,
        hosts,
        timelines,
        now,
        backtests,
    } = what;
    let mut misses = Vec::new();
    let gap = GAP_IN_P90S * now.p90;
    if gap.is_finite() && gap >= 1.0 && config.estimate_runs > 0 {
        let rule = if config.policy == Policy::ProactiveCheckpoint {
            Policy::ProactiveCheckpoint
        } else {
            Policy::Proactive
        };
        let config = &SimConfig {
            policy: rule,
            ..config.clone()
        };
        // Each back-test is simulated up to now and no further (its
        // horizon is set below): a batch not done by then took at least
        // that long, and what came after is not read.
        let mut until_now = SimConfig {
            estimate_runs: 0,
            ..config.clone()
        };
        for b in 1..=backtests.min(MAX_BACKTESTS) {
            let back = (b as f64 * gap).min(i64::MAX as f64 / 2.0) as i64;
            let Some(earlier) = earlier(hosts, timelines, back) else {
                break;
            };
            let mut rng = rng_for(b);
            let Some((then, _)) =
                submission_estimate(config, &earlier, timelines, forecaster, |input| {
                    estimate(input, &mut rng)
                })
            else {
                continue;
            };
            until_now.horizon_secs = config.horizon_secs.min(back as f64);
            let Ok(run) = simulate(
                &until_now,
                &earlier,
                timelines,
                forecaster,
                &mut rng,
                &mut |_| {},
            ) else {
                continue;
            };
            let makespan = run.makespan_secs.unwrap_or(back as f64);
            misses.extend(miss(makespan, &then));
        }
    }
    let widening = widening(&misses);
    Calibration { misses, widening }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::curve::TrCurve;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn band(p10: f64, p50: f64, p90: f64) -> Quantiles {
        Quantiles {
            p10,
            p50,
            p90,
            mean: p50,
        }
    }

    #[test]
    fn a_miss_is_measured_in_sigmas_of_its_side_on_a_log_scale() {
        // ln(p90/p50) = ln(p50/p10) = ln 1.1: p90 and p10 are ±1.2816 σ.
        let q = band(100.0 / 1.1, 100.0, 110.0);
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
        assert!(near(miss(100.0, &q), 0.0));
        assert!(near(miss(110.0, &q), Z90));
        assert!(near(miss(100.0 / 1.1, &q), -Z90));
        assert!(near(miss(121.0, &q), 2.0 * Z90));
        // A skewed band: above p50 in σ of the upper side (inside: under
        // 1.2816); below a collapsed p10 in the band's mean half-width.
        let skewed = band(100.0, 100.0, 200.0);
        assert!(near(miss(150.0, &skewed), 1.5f64.ln() / 2f64.ln() * Z90));
        assert!(near(
            miss(90.0, &skewed),
            0.9f64.ln() / (2f64.ln() / 2.0) * Z90
        ));
        assert_eq!(miss(100.0, &band(100.0, 100.0, 100.0)), None, "no width");
        assert_eq!(miss(0.0, &q), None);
        assert_eq!(miss(f64::NAN, &q), None);
        assert_eq!(miss(100.0, &band(-1.0, 100.0, 110.0)), None);
    }

    #[test]
    fn the_widening_is_the_rms_miss_with_one_calibrated_pseudo_backtest() {
        assert_eq!(widening(&[]), 1.0, "no back-test: the model's band");
        // Misses of ±2 three times: sqrt((1 + 3 * 4) / 4).
        assert!((widening(&[2.0, -2.0, 2.0]) - (13.0f64 / 4.0).sqrt()).abs() < 1e-12);
        // Misses inside the band never narrow it.
        assert_eq!(widening(&[0.1, -0.2, 0.0]), 1.0);
        // A miss that is not a number is left out, not spread.
        assert!((widening(&[3.0, f64::NAN]) - 5.0f64.sqrt()).abs() < 1e-12);
    }

    /// Forecasts one fixed curve for every host.
    struct Fixed(TrCurve);

    impl Forecaster for Fixed {
        fn curve(&mut self, _trace: usize, _at: i64) -> TrCurve {
            self.0.clone()
        }
    }

    /// Twenty days of one-minute cells at full speed, revoked (S5) from
    /// 12:00 to 13:00, 14:00 to 16:00 or 10:00 to 10:10 by turns (days
    /// unlike each other, so the estimate's replayed days give it a band);
    /// from 01:00 on day 10 on, the same (`same_after`) or revoked for good.
    fn timeline(same_after: bool) -> Timeline {
        let n = 20 * 1440;
        let fail = (0..n)
            .map(|k| {
                let outage = [720..780, 840..960, 600..610][(k / 1440) % 3].clone();
                let out = outage.contains(&(k % 1440));
                if out || (k >= 10 * 1440 + 60 && !same_after) {
                    5
                } else {
                    0
                }
            })
            .collect();
        Timeline::from_cells(0, 60, fail, vec![1.0; n])
    }

    fn config(policy: Policy) -> SimConfig {
        SimConfig {
            policy,
            runtimes: vec![3.0 * 3600.0; 12],
            checkpoint_cost_secs: 60.0,
            horizon_secs: 30.0 * 86_400.0,
            estimate_runs: 200,
            recheck_secs: 600.0,
            windows: crate::sched::window::WindowRule::default(),
            duel: Default::default(),
            knowledge: crate::sched::sim::Knowledge::Full,
            tail_copies: false,
            hold_gives_way: false,
            tail: Default::default(),
            claims: Default::default(),
        }
    }

    fn calibrate_at(timelines: &[Timeline], offset: i64) -> Calibration {
        calibrate_with(timelines, offset, Policy::Proactive)
    }

    fn calibrate_with(timelines: &[Timeline], offset: i64, policy: Policy) -> Calibration {
        let hosts: Vec<SimHost> = (0..4)
            .map(|h| SimHost {
                timeline: 0,
                offset: offset + h * 600,
                power: [1.0, 0.5, 0.3, 0.8][h as usize],
            })
            .collect();
        let config = config(policy);
        let mut forecaster = Fixed(TrCurve::exponential(86_400.0));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (now, _) = submission_estimate(&config, &hosts, timelines, &mut forecaster, |input| {
            super::super::estimate::estimate(input, &mut rng)
        })
        .unwrap();
        let what = Backtests {
            config: &config,
            hosts: &hosts,
            timelines,
            now: &now,
            backtests: 8,
        };
        calibrate(
            what,
            &mut forecaster,
            |b| ChaCha8Rng::seed_from_u64(100 + b as u64),
            super::super::estimate::estimate,
        )
    }

    #[test]
    fn the_backtests_read_nothing_after_the_submission() {
        // Two pools alike up to an hour after now (day 10; the last host
        // is submitted to 30 minutes in) and unlike after it: a back-test
        // that looked past now would tell them apart.
        let now = 10 * 86_400;
        let same = calibrate_at(&[timeline(true)], now);
        let revoked = calibrate_at(&[timeline(false)], now);
        assert!(same.misses.len() >= 4, "{same:?}");
        assert_eq!(same, revoked);
    }

    #[test]
    fn the_backtests_replay_the_rule_the_estimate_models_whatever_is_simulated() {
        let now = 10 * 86_400;
        let tl = [timeline(true)];
        let proactive = calibrate_with(&tl, now, Policy::Proactive);
        for policy in [Policy::Random, Policy::Oracle, Policy::Tr] {
            assert_eq!(calibrate_with(&tl, now, policy), proactive, "{policy:?}");
        }
    }

    #[test]
    fn without_history_before_them_there_are_no_backtests() {
        let c = calibrate_at(&[timeline(true)], MIN_HISTORY_SECS + 3_600);
        assert!(c.misses.is_empty(), "{c:?}");
        assert_eq!(c.widening, 1.0);
    }

    #[test]
    fn widening_moves_p10_and_p90_on_a_log_scale_around_p50() {
        let q = band(80.0, 100.0, 125.0);
        let w = widen(&q, 2.0);
        assert!(
            (w.p10 - 64.0).abs() < 1e-9 && (w.p90 - 156.25).abs() < 1e-9,
            "{w:?}"
        );
        assert_eq!((w.p50, w.mean), (q.p50, q.mean));
        assert_eq!(widen(&q, 1.0), q);
        // A collapsed side opens as wide as the other.
        let w = widen(&band(100.0, 100.0, 200.0), 2.0);
        assert!(
            (w.p10 - 25.0).abs() < 1e-9 && (w.p90 - 400.0).abs() < 1e-9,
            "{w:?}"
        );
        assert_eq!(widen(&q, f64::NAN), q);
    }
}
