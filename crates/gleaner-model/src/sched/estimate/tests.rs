//! The estimate's tests: its runs against list schedules and known
//! failure laws, the past's rate and spells, checkpoints, refused input,
//! and the memo's ranked rows against the rule's scan.

use super::bootstrap::{rest_of_outage, SpellUrn, MAX_REST_SECS};
use super::facts::{self, HostFacts};
use super::memo::{Memo, QueueTurnarounds, SPARE_ASKS_BEFORE_RANKING, SPARE_CELL_LIMIT};
use super::run::Run;
use super::*;
use crate::sched::curve::TrCurve;
use crate::sched::place::{by_slowdown, Rule};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

fn host(power: f64, curve: TrCurve) -> EstimateHost {
    EstimateHost {
        view: HostView {
            power,
            availability: 1.0,
            curve,
        },
        busy_secs: 0.0,
        recovery_secs: 0.0,
        down_secs: 0.0,
        past: None,
        checkpoint_secs: 0.0,
        checkpoint_cost_secs: 0.0,
        spells: None,
        days: None,
    }
}

/// The rule through the memo's ranked rows answers as the rule's scan
/// of every host does, on random pools: hosts that never fail, fail
/// at a rate, or cannot finish long tasks at all; tasks fresh and
/// resumed (spare rows, ranked only after repeated asks); free, busy
/// and long-busy hosts; queues in the bulk, where the estimate answers
/// whether a host can run the head from its horizon and the scan from
/// the turnaround; hosts with a past (a curve of their own for after a
/// return), some of them back from a failure, each up for a while (its
/// curve read as of that age). The simulator's
/// byte-identical reports are the other check; this one names the pool
/// when it fails.
#[test]
fn the_ranked_rows_answer_as_the_scan_does() {
    use crate::sched::place::Scan;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for pool in 0..300 {
        let n = rng.random_range(2..40);
        let hosts: Vec<EstimateHost> = (0..n)
            .map(|_| {
                let curve = match rng.random_range(0..3) {
                    0 => TrCurve::never_fails(),
                    1 => TrCurve::exponential(rng.random_range(600.0..200_000.0)),
                    _ => TrCurve::new([(1_000.0, 0.5), (5_000.0, 1e-15)]),
                };
                let mut h = host(rng.random_range(0.2..1.0), curve);
                h.view.availability = rng.random_range(0.3..1.0);
                if pool % 2 == 1 && rng.random_range(0..2) == 0 {
                    h.past = Some(PastFailures {
                        up_secs: rng.random_range(3_600.0..600_000.0),
                        failures: rng.random_range(0..40),
                    });
                }
                h
            })
            .collect();
        let facts: Vec<HostFacts> = hosts.iter().map(HostFacts::new).collect();
        let back: Vec<bool> = (0..n).map(|_| rng.random_range(0..2) == 0).collect();
        let up: Vec<f64> = (0..n)
            .map(|_| match rng.random_range(0..3) {
                0 => 0.0,
                _ => rng.random_range(0.0..100_000.0),
            })
            .collect();
        let block_of = |g: usize| facts::block(back[g], up[g]);
        let order = by_slowdown(&facts.iter().map(|f| f.slowdown).collect::<Vec<_>>());
        let mut rank = vec![0u32; n];
        for (i, &h) in order.iter().enumerate() {
            rank[h] = i as u32;
        }
        let m = rng.random_range(1..30);
        let runtimes: Vec<f64> = (0..m).map(|_| rng.random_range(100.0..20_000.0)).collect();
        // Work left: a third resumed from a checkpoint.
        let left: Vec<f64> = runtimes
            .iter()
            .map(|&r| {
                if rng.random_range(0..3) == 0 {
                    r * rng.random_range(0.1..0.9)
                } else {
                    r
                }
            })
            .collect();
        let queue: VecDeque<usize> = (0..m).filter(|_| rng.random_range(0..4) > 0).collect();
        let wait: Vec<f64> = (0..n)
            .map(|_| match rng.random_range(0..3) {
                0 => 0.0,
                1 => rng.random_range(1.0..5_000.0),
                _ => rng.random_range(5_000.0..500_000.0),
            })
            .collect();
        let mut free: Vec<usize> = (0..n).filter(|&g| wait[g] == 0.0).collect();
        free.sort_by_key(|&g| rank[g]);
        let rule = Rule {
            order: &order,
            free_sorted: Some(&free),
            lower: |j: usize, g: usize| match queue.get(j) {
                Some(&task) => left[task] * facts[g].slowdown,
                None => f64::INFINITY,
            },
            free_in: |g: usize| wait[g],
            queue_len: queue.len(),
        };
        let mut scan = Scan(|j: usize, g: usize| match queue.get(j) {
            Some(&task) => facts[g].turnaround_in(left[task], block_of(g)),
            None => f64::INFINITY,
        });
        let mut memo = Memo::new(&facts, &runtimes, SPARE_CELL_LIMIT);
        // Asked again and again, as after every failure: spare rows
        // are ranked after SPARE_ASKS_BEFORE_RANKING asks.
        for ask in 0..2 * SPARE_ASKS_BEFORE_RANKING {
            let mut ranked = QueueTurnarounds {
                memo: &mut memo,
                queue: &queue,
                runtimes: &left,
                place: &rank,
                facts: &facts,
                block_of: &block_of,
            };
            assert_eq!(
                rule.pick_pair(&mut ranked),
                rule.pick_pair(&mut scan),
                "pool {pool}, ask {ask}"
            );
            for &g in &free {
                assert_eq!(
                    rule.pick_for_host(g, &mut ranked),
                    rule.pick_for_host(g, &mut scan),
                    "pool {pool}, ask {ask}, host {g}"
                );
            }
        }
    }
}

fn run(hosts: &[EstimateHost], waiting: &[f64], runs: usize) -> Estimate {
    let input = EstimateInput {
        hosts,
        running: &[],
        waiting,
        longest_first: true,
        runs,
        runtime_sigma_log: None,
        held: &[],
    };
    estimate(&input, &mut ChaCha8Rng::seed_from_u64(1))
        .unwrap()
        .0
}

#[test]
fn reliable_hosts_give_the_list_schedule_exactly() {
    // Two never-failing hosts, P = 1 and 0.5; tasks 4000, 3000, 2000, 1000 s.
    // LPT with the rule: 4000 → h0 (ends 4000), 3000 → h1 (6000);
    // at 4000 h0 takes 2000 (6000); at 6000 h0 and h1 are free: the
    // 1000 s task goes to h0 (ends 7000). Every run the same.
    let hosts = [
        host(1.0, TrCurve::never_fails()),
        host(0.5, TrCurve::never_fails()),
    ];
    let e = run(&hosts, &[1000.0, 2000.0, 3000.0, 4000.0], 200);
    assert_eq!(e.makespan.p10, 7000.0);
    assert_eq!(e.makespan.p90, 7000.0);
    assert_eq!(e.task_eta[3].p50, 4000.0);
    assert_eq!(e.task_eta[2].p50, 6000.0);
    assert_eq!(e.unfinished_runs, 0);
}

#[test]
fn failures_spread_the_makespan_around_the_expected_turnaround() {
    // One host, M = 1 h, one task of 1 h: the mean wall time with restarts
    // is 3600·(e − 1) ≈ 6186 s; the Monte Carlo mean must come near it.
    let hosts = [host(1.0, TrCurve::exponential(3600.0))];
    let e = run(&hosts, &[3600.0], 4000);
    let expected = 3600.0 * (1f64.exp() - 1.0);
    assert!(
        (e.makespan.mean - expected).abs() < 0.06 * expected,
        "{} vs {expected}",
        e.makespan.mean
    );
    assert!(e.makespan.p10 <= 3600.0 && e.makespan.p90 > 3600.0);
}

/// A constant hazard 1/`mttf` described out to a day, as the
/// simulator's curves are.
fn exponential_to_a_day(mttf: f64) -> TrCurve {
    TrCurve::new([1_800.0, 3_600.0, 14_400.0, 43_200.0, 86_400.0].map(|t| (t, (-t / mttf).exp())))
}

#[test]
fn after_a_failure_the_host_fails_at_its_past_rate_not_the_curves() {
    // One host, M = 1 h, one task of 3 h. Redrawn from the curve after
    // every return it is hit e^3 − 1 ≈ 19 times on average; a host whose
    // past shows a thousand failures in 10^12 s of up time is hit at most once (the first
    // failure still comes from the curve).
    let mut h = host(1.0, exponential_to_a_day(3600.0));
    let curve_only = run(std::slice::from_ref(&h), &[3.0 * 3600.0], 400);
    assert!(curve_only.mean_failures > 15.0, "{curve_only:?}");
    h.past = Some(PastFailures {
        up_secs: 1e12,
        failures: 1_000,
    });
    let with_past = run(&[h], &[3.0 * 3600.0], 400);
    assert!(with_past.mean_failures <= 1.0, "{with_past:?}");
    assert!(with_past.mean_failures > 0.8, "{with_past:?}");
}

#[test]
fn each_checkpoint_adds_its_cost_and_intervals_count_work() {
    // A never-failing host at half speed, a task of 500 reference
    // seconds: 1000 s of work at this speed, a checkpoint after every
    // 100 s of it (9, none after the last block), 10 s each: 1090 s.
    let mut h = host(0.5, TrCurve::never_fails());
    h.checkpoint_secs = 100.0;
    h.checkpoint_cost_secs = 10.0;
    let e = run(&[h], &[500.0], 5);
    assert_eq!(e.makespan.p10, 1090.0);
    assert_eq!(e.makespan.p90, 1090.0);
}

#[test]
fn a_failure_keeps_only_the_blocks_whose_checkpoint_was_written() {
    // One host failing at rate 1/h, a task of 2 h checkpointed every
    // 10 min of work at 60 s each. Against the same failures, a free
    // checkpoint would end it sooner on average: the cost is charged
    // both in the run and in what a failure catches half-written.
    let mut h = host(1.0, exponential_to_a_day(3600.0));
    h.past = Some(PastFailures {
        up_secs: 3_600_000.0,
        failures: 1_000,
    });
    h.checkpoint_secs = 600.0;
    let free = run(std::slice::from_ref(&h), &[7200.0], 2000);
    h.checkpoint_cost_secs = 60.0;
    let costly = run(&[h], &[7200.0], 2000);
    assert!(
        costly.makespan.mean > free.makespan.mean + 11.0 * 60.0,
        "{costly:?} vs {free:?}"
    );
}

#[test]
fn a_flat_curve_takes_its_checkpoint_mttf_from_the_past() {
    let past = PastFailures {
        up_secs: 10.0 * 3600.0,
        failures: 4,
    };
    // A curve that fails: its own MTTF, whatever the past says.
    let failing = TrCurve::exponential(7_200.0);
    assert_eq!(checkpoint_mttf(&failing, Some(&past)), failing.mttf());
    // One that never fails: 10 h of up time over 4.5 failures.
    let flat = TrCurve::never_fails();
    assert!((checkpoint_mttf(&flat, Some(&past)) - 8_000.0).abs() < 1e-9);
    // No past, or a past with no up time: no failure to plan for.
    assert!(checkpoint_mttf(&flat, None).is_infinite());
    let blank = PastFailures {
        up_secs: 0.0,
        failures: 0,
    };
    assert!(checkpoint_mttf(&flat, Some(&blank)).is_infinite());
    // A week without a failure still implies one every two weeks.
    let quiet = PastFailures {
        up_secs: 7.0 * 86_400.0,
        failures: 0,
    };
    assert_eq!(checkpoint_mttf(&flat, Some(&quiet)), 14.0 * 86_400.0);
}

#[test]
fn the_posterior_rate_narrows_as_the_past_grows() {
    // The same mean up-spell (1 h) seen over 2 and over 200 failures:
    // λ ~ Gamma(n + ½, n h), mean (n + ½)/n per hour, relative spread
    // 1/sqrt(n + ½).
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for (n, spread) in [(2u32, 1.0 / 2.5f64.sqrt()), (200, 1.0 / 200.5f64.sqrt())] {
        let past = PastFailures {
            up_secs: f64::from(n) * 3600.0,
            failures: n,
        };
        let draws: Vec<f64> = (0..20_000)
            .map(|_| past.draw_rate(&mut rng).unwrap() * 3600.0)
            .collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let sd =
            (draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64).sqrt();
        let want = (f64::from(n) + 0.5) / f64::from(n);
        assert!((mean - want).abs() < 0.03 * want, "n {n}: mean {mean}");
        assert!((sd / mean - spread).abs() < 0.1 * spread, "n {n}: {sd}");
    }
    // No failure seen in a week still leaves a rate to fear.
    let quiet = PastFailures {
        up_secs: 7.0 * 86_400.0,
        failures: 0,
    };
    assert!(quiet.draw_rate(&mut rng).unwrap() > 0.0);
    let none = PastFailures {
        up_secs: 0.0,
        failures: 3,
    };
    assert_eq!(none.draw_rate(&mut rng), None);
}

#[test]
fn a_short_past_widens_the_band_and_a_long_one_does_not() {
    // Four hosts, mean up-spell 4 h, 40 tasks of 1 h: with the rate
    // known from 1 failure the band is wider than from 400.
    let band = |n: u32| {
        let mut h = host(1.0, exponential_to_a_day(4.0 * 3600.0));
        h.recovery_secs = 600.0;
        h.past = Some(PastFailures {
            up_secs: f64::from(n) * 4.0 * 3600.0,
            failures: n,
        });
        let e = run(&vec![h; 4], &[3600.0; 40], 1000);
        e.makespan.p90 - e.makespan.p10
    };
    let (short, long) = (band(1), band(400));
    assert!(short > 1.3 * long, "{short} vs {long}");
}

#[test]
fn past_the_curves_last_window_the_past_decides() {
    // The curve saw no failure within an hour (and so extrapolates
    // none ever); the past shows one every 2 h. A 20 h task is hit.
    let mut h = host(1.0, TrCurve::new([(3600.0, 1.0)]));
    let curve_only = run(std::slice::from_ref(&h), &[20.0 * 3600.0], 200);
    assert_eq!(curve_only.mean_failures, 0.0);
    h.past = Some(PastFailures {
        up_secs: 100.0 * 7200.0,
        failures: 100,
    });
    let with_past = run(&[h], &[20.0 * 3600.0], 200);
    assert!(with_past.mean_failures > 5.0, "{with_past:?}");
}

/// `draws` up-spells and outages of `h` after a return, the run's
/// urn emptied every 100 (as every run does).
fn spell_draws(h: &EstimateHost, rate: f64, draws: usize) -> (Vec<f64>, Vec<f64>) {
    let facts = [HostFacts::new(h)];
    let mut run = Run::new(1, &[1.0]);
    run.rate[0] = rate;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (mut up, mut out) = (Vec::new(), Vec::new());
    for k in 0..draws {
        if k % 100 == 0 {
            run.urns[0].clear();
        }
        // From a return at 0, the run time is the length.
        up.push(run.next_failure_after(&facts, 0, 0.0, &mut rng));
        out.push(run.back_at(&facts, 0, 0.0, &mut rng));
    }
    (up, out)
}

fn with_spells(up: Vec<f64>, up_cut: Vec<f64>, outages: Vec<f64>) -> EstimateHost {
    let mut h = host(1.0, exponential_to_a_day(3600.0));
    h.recovery_secs = 777.0;
    h.spells = Some(SpellLengths {
        up_seen: up.len() as u32,
        up,
        up_cut,
        outages_seen: outages.len() as u32,
        outages,
    });
    h
}

#[test]
fn the_bootstrap_draws_only_past_spells_or_its_fallback() {
    // 30 whole up-spells of 1000..=30000 s, 3 outages; the fallback's
    // exponential is so slow (mean 10^12 s) that its draws stand out.
    let past: Vec<f64> = (1..=30).map(|k| f64::from(k) * 1000.0).collect();
    let h = with_spells(past.clone(), vec![], vec![100.0, 200.0, 300.0]);
    let (up, out) = spell_draws(&h, 1e-12, 20_000);
    let fallback = up.iter().filter(|x| !past.contains(x)).count();
    assert!(up.iter().all(|x| past.contains(x) || *x > 1e6));
    // Half a spell's weight against 30: about 1.6 % fall back.
    let share = fallback as f64 / up.len() as f64;
    assert!((0.005..0.04).contains(&share), "{share}");
    // Every seen spell comes up, none more than chance allows.
    for p in &past {
        let n = up.iter().filter(|x| *x == p).count();
        assert!((300..1_000).contains(&n), "{p}: {n}");
    }
    // Outages: the three seen, or the mean recovery (1/7 of the time).
    assert!(out.iter().all(|o| [100.0, 200.0, 300.0, 777.0].contains(o)));
    let recovery = out.iter().filter(|o| **o == 777.0).count() as f64 / 20_000.0;
    assert!((0.08..0.22).contains(&recovery), "{recovery}");
}

#[test]
fn an_outage_in_progress_lasts_as_a_longer_past_one_or_as_long_again() {
    // Outages of 100, 200 and 3000 s seen; the host has been down 150 s.
    let h = with_spells(vec![1000.0], vec![], vec![100.0, 200.0, 3000.0]);
    let b = HostFacts::new(&h).bootstrap.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let draws: Vec<f64> = (0..30_000)
        .map(|_| rest_of_outage(&b, 150.0, &mut rng))
        .collect();
    // Never the 100 s outage (it would be over); the 200 s and 3000 s
    // ones by their counts (1 each), the Lindy fallback half as often.
    let share = |x: f64| draws.iter().filter(|d| **d == x).count() as f64 / 30_000.0;
    for (rest, want) in [(50.0, 0.4), (2850.0, 0.4)] {
        assert!((share(rest) - want).abs() < 0.02, "{rest}: {}", share(rest));
    }
    let lindy: Vec<f64> = draws
        .iter()
        .copied()
        .filter(|d| *d != 50.0 && *d != 2850.0)
        .collect();
    assert!((lindy.len() as f64 / 30_000.0 - 0.2).abs() < 0.02);
    // P(rest > r) = 150 / (150 + r): the median as long again (150 s),
    // one in ten past nine times as long.
    let above = |r: f64| lindy.iter().filter(|d| **d > r).count() as f64 / lindy.len() as f64;
    assert!((above(150.0) - 0.5).abs() < 0.03, "{}", above(150.0));
    assert!((above(1350.0) - 0.1).abs() < 0.02, "{}", above(1350.0));
    // Down longer than every past outage: only the Lindy draw is left.
    let long: Vec<f64> = (0..2_000)
        .map(|_| rest_of_outage(&b, 10_000.0, &mut rng))
        .collect();
    assert!(long
        .iter()
        .all(|d| d.is_finite() && *d >= 0.0 && *d <= MAX_REST_SECS));
    let median_ish = long.iter().filter(|d| **d > 10_000.0).count() as f64 / 2_000.0;
    assert!((median_ish - 0.5).abs() < 0.05, "{median_ish}");
}

#[test]
fn a_host_down_at_the_start_is_away_for_a_drawn_rest_not_a_fixed_one() {
    // One host, down 2 h already; its past outages were 3 h and 30 h.
    // Without `down_secs` it is back after `busy_secs` in every run;
    // with it, after 1 h or 28 h (or a Lindy draw), so the makespan of
    // a one-hour task spreads accordingly.
    let mut h = with_spells(
        vec![86_400.0 * 30.0],
        vec![],
        vec![3.0 * 3600.0, 30.0 * 3600.0],
    );
    h.view.curve = TrCurve::never_fails();
    h.busy_secs = 600.0;
    let run = |h: &EstimateHost| {
        let hosts = [h.clone()];
        let input = EstimateInput {
            hosts: &hosts,
            running: &[],
            waiting: &[3600.0],
            longest_first: true,
            runs: 2_000,
            runtime_sigma_log: None,
            held: &[],
        };
        estimate(&input, &mut ChaCha8Rng::seed_from_u64(9))
            .unwrap()
            .0
            .makespan
    };
    let fixed = run(&h);
    assert!(
        (fixed.p10 - 4200.0).abs() < 1.0 && (fixed.p90 - 4200.0).abs() < 1.0,
        "{fixed:?}"
    );
    h.down_secs = 2.0 * 3600.0;
    let drawn = run(&h);
    assert!((drawn.p10 - 2.0 * 3600.0).abs() < 1.0, "{drawn:?}");
    assert!(drawn.p90 >= 29.0 * 3600.0, "{drawn:?}");
}

#[test]
fn the_urn_draws_as_dirichlet_weights_drawn_per_run() {
    // Two spells and the fallback: masses 1, 1 and 1/2 (A = 2.5). With
    // weights W ~ Dirichlet per run, two picks agree with chance
    // E[sum W_i^2] = sum a_i (a_i + 1) / (A (A + 1)) = 4.75 / 8.75;
    // with fixed weights a / A (no per-run uncertainty) only 0.36.
    let h = with_spells(vec![1000.0, 2000.0], vec![], vec![]);
    let b = HostFacts::new(&h).bootstrap.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (trials, mut same, mut fallback) = (40_000, 0, 0);
    let mut picked = Vec::new();
    for _ in 0..trials {
        picked.clear();
        let first = SpellUrn::pick(&b.up_mass, &mut picked, &mut rng);
        let second = SpellUrn::pick(&b.up_mass, &mut picked, &mut rng);
        same += usize::from(first == second);
        fallback += usize::from(first == 0);
    }
    let same = same as f64 / trials as f64;
    assert!((same - 4.75 / 8.75).abs() < 0.015, "{same}");
    // The first pick is by the initial masses: the fallback 1/5.
    let fallback = fallback as f64 / trials as f64;
    assert!((fallback - 0.2).abs() < 0.015, "{fallback}");
}

#[test]
fn with_few_spells_the_bootstrap_falls_back() {
    // No whole spell at all: always the exponential at the run's rate
    // and the mean recovery.
    let h = with_spells(vec![], vec![], vec![]);
    assert!(HostFacts::new(&h).bootstrap.is_none());
    let (up, out) = spell_draws(&h, 1.0 / 5000.0, 20_000);
    let mean = up.iter().sum::<f64>() / up.len() as f64;
    assert!((mean - 5000.0).abs() < 200.0, "{mean}");
    assert!(out.iter().all(|o| *o == 777.0));
    // One spell: the fallback holds half a weight against one, a
    // third of the draws on average.
    let h = with_spells(vec![4000.0], vec![], vec![]);
    let (up, _) = spell_draws(&h, 1e-12, 20_000);
    let fallback = up.iter().filter(|x| **x != 4000.0).count() as f64 / 20_000.0;
    assert!((0.25..0.42).contains(&fallback), "{fallback}");
    // A cut spell lasted at least its length, then at the run's rate.
    let h = with_spells(vec![], vec![9000.0], vec![]);
    let (up, _) = spell_draws(&h, 1.0 / 100.0, 5_000);
    let cut: Vec<f64> = up.iter().copied().filter(|x| *x >= 9000.0).collect();
    assert!(cut.len() > 2_500, "{}", cut.len());
    let over = cut.iter().map(|x| x - 9000.0).sum::<f64>() / cut.len() as f64;
    assert!((over - 100.0).abs() < 15.0, "{over}");
}

#[test]
fn bursty_spells_lose_less_of_a_long_task_than_their_mean_says() {
    // A host whose up-spells are 40 of 10 min and 10 of two days
    // (mean 10.1 h), a task of 12 h. Drawn as an exponential at that
    // mean, a spell outlasts the task 30 % of the time and one that
    // does not has run about 5 h of it: some 2.3 kills, 24 h on
    // average. Resampled, a fifth of the spells outlast it and the
    // rest end within 10 min: more kills (4), each losing little (13
    // h on average). The curve is the same for both, so only the
    // draws after a return differ.
    let spells: Vec<f64> = std::iter::repeat_n(600.0, 40)
        .chain(std::iter::repeat_n(172_800.0, 10))
        .collect();
    let up_secs: f64 = spells.iter().sum();
    let mut h = host(1.0, exponential_to_a_day(up_secs / 50.0));
    h.recovery_secs = 600.0;
    h.past = Some(PastFailures {
        up_secs,
        failures: 50,
    });
    let exponential = run(std::slice::from_ref(&h), &[12.0 * 3600.0], 2000);
    h.spells = Some(SpellLengths {
        up_seen: 50,
        up: spells,
        up_cut: vec![],
        outages: vec![600.0; 50],
        outages_seen: 50,
    });
    let bootstrap = run(&[h], &[12.0 * 3600.0], 2000);
    // Kills: more with the bursty spells (most end in 10 min), but
    // each costs little, so the makespan's mean is shorter.
    assert!(
        bootstrap.makespan.mean < exponential.makespan.mean,
        "{bootstrap:?} vs {exponential:?}"
    );
}

#[test]
fn bad_input_is_refused_by_name() {
    let hosts = [host(1.0, TrCurve::never_fails())];
    let input = EstimateInput {
        hosts: &hosts,
        running: &[RunningTask {
            host: 3,
            remaining_secs: 1.0,
        }],
        waiting: &[],
        longest_first: false,
        runs: 1,
        runtime_sigma_log: None,
        held: &[],
    };
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    assert!(matches!(
        estimate(&input, &mut rng),
        Err(EstimateError::BadHost { host: 3, .. })
    ));
    let input = EstimateInput {
        running: &[],
        waiting: &[f64::NAN],
        ..input
    };
    assert!(matches!(
        estimate(&input, &mut rng),
        Err(EstimateError::BadRuntime { task: 0, .. })
    ));
    let input = EstimateInput { runs: 0, ..input };
    assert_eq!(estimate(&input, &mut rng), Err(EstimateError::NoRuns));
}

#[test]
fn a_task_no_host_can_finish_leaves_the_run_unfinished() {
    // TR(1 s) ≈ 0: every attempt fails.
    let hosts = [host(1.0, TrCurve::new([(1.0, 1e-300)]))];
    let e = run(&hosts, &[3600.0], 3);
    assert_eq!(e.unfinished_runs, 3);
    assert!(e.makespan.p50.is_infinite());
}

/// A slow host that never fails and a fast one whose curve at
/// submission says it is off (TR falls to nothing within two hours) but
/// whose past says it is reliable once up; four tasks of 1 h.
fn off_now_reliable_after() -> [EstimateHost; 2] {
    let slow = host(0.25, TrCurve::never_fails());
    let mut fast = host(
        1.0,
        TrCurve::new([(600.0, 0.1), (7_200.0, 1e-6), (86_400.0, 1e-13)]),
    );
    fast.recovery_secs = 600.0;
    fast.past = Some(PastFailures {
        up_secs: 30.0 * 86_400.0,
        failures: 0,
    });
    [slow, fast]
}

#[test]
fn a_host_back_from_its_outage_is_weighed_as_back_not_as_at_submission() {
    // Weighed by its curve at submission (a turnaround of days) the fast
    // host only takes the queue's second task, which the slow one would
    // reach later, and the slow one runs two, one after the other: 8 h in
    // every run (main before this rule). Once back (after the hour it is
    // still down at submission, or after the failure its curve draws
    // within two hours and its 10 min outage), the run draws its
    // failures from its past, and the rule weighs it so: it takes the
    // head too, and the batch ends within about 5 h.
    let waiting = [3_600.0; 4];
    let mut down = off_now_reliable_after();
    down[1].down_secs = 3_600.0;
    down[1].busy_secs = 3_600.0;
    let failing = off_now_reliable_after();
    for (case, hosts) in [("down at submission", down), ("failing first", failing)] {
        let e = run(&hosts, &waiting, 200);
        assert!(e.makespan.p90 < 6.0 * 3_600.0, "{case}: {:?}", e.makespan);
        assert!(e.makespan.p10 >= 3.0 * 3_600.0, "{case}: {:?}", e.makespan);
    }
}

#[test]
fn a_host_up_for_hours_is_weighed_by_what_is_left_of_its_spell() {
    // Up-spells of 2 h (30 of them) and of two days (10): a host just
    // back outlasts a 4 h task a quarter of the time (and loses 2 h of it
    // otherwise), one up for 5 h already (in a long spell, then) nearly
    // always.
    let mut up = vec![7_200.0; 30];
    up.extend([2.0 * 86_400.0; 10]);
    let mut h = with_spells(up, vec![], vec![300.0]);
    h.past = Some(PastFailures {
        up_secs: 30.0 * 7_200.0 + 10.0 * 2.0 * 86_400.0,
        failures: 40,
    });
    let f = HostFacts::new(&h);
    let task = 4.0 * 3_600.0;
    let fresh = f.turnaround_in(task, facts::block(true, 0.0));
    let aged = f.turnaround_in(task, facts::block(true, 5.0 * 3_600.0));
    assert!(fresh > 2.0 * task, "{fresh}");
    assert!(aged < 1.1 * task && aged >= task, "{aged}");
    // As at submission and up for no time: the curve's turnaround, bit for bit.
    assert_eq!(
        f.turnaround_in(task, facts::block(false, 0.0)),
        f.expected_turnaround(task)
    );
    // Read an hour on, a curve with a horizon has about an hour less of it.
    let g = HostFacts::new(&host(1.0, TrCurve::new([(3_600.0, 0.5), (7_200.0, 1e-13)])));
    let (b0, b1) = (facts::block(false, 0.0), facts::block(false, 3_600.0));
    let (h0, h1) = (g.horizon_in(b0), g.horizon_in(b1));
    assert!(h1 > 3_000.0 && h1 < h0 - 3_000.0, "{h0} {h1}");
    assert!(g.turnaround_in(3_000.0, b1).is_finite());
    assert!(g.turnaround_in(g.horizon_in(b1) + 1.0, b1).is_infinite());
}

#[test]
fn a_busy_host_aged_out_of_its_window_lets_an_idle_one_take_the_task() {
    // Host 0 runs our task for 8,500 s more and is sure to stay up for
    // 2.5 h, then goes (its TR falls to nothing by 3 h): a 1 h task
    // still fits once it is free while it is read as of its hour up,
    // no longer from 2 h up (at 7,200 s). Host 1 (4x slower) and host 2
    // (10x) never fail and are away until 7,000 s and 7,500 s. At 7,000 s
    // host 1 leaves the 1 h task to host 0; at 7,500 s host 0, still
    // busy, is read as of 2 h up: host 1 takes it then, and it ends at
    // 7,500 + 14,400 s in every run. Before, only the host just freed
    // (host 2) was weighed then, and host 1 took it at 8,500 s (22,900 s).
    let mut hosts = vec![
        host(
            1.0,
            TrCurve::new([(9_000.0, 1.0), (9_900.0, 1e-3), (10_800.0, 1e-13)]),
        ),
        host(0.25, TrCurve::never_fails()),
        host(0.1, TrCurve::never_fails()),
    ];
    for (h, away) in [(1, 7_000.0), (2, 7_500.0)] {
        hosts[h].down_secs = away;
        hosts[h].busy_secs = away;
    }
    let running = [RunningTask {
        host: 0,
        remaining_secs: 8_500.0,
    }];
    let input = EstimateInput {
        hosts: &hosts,
        running: &running,
        waiting: &[3_600.0],
        longest_first: true,
        runs: 50,
        runtime_sigma_log: None,
        held: &[],
    };
    let e = estimate(&input, &mut ChaCha8Rng::seed_from_u64(1))
        .unwrap()
        .0;
    let end = 7_500.0 + 4.0 * 3_600.0;
    assert_eq!((e.makespan.p10, e.makespan.p90), (end, end), "{e:?}");
}

/// A host up every weekday and off every weekend, with ten tasks of 6 h
/// for it alone (60 h of work): submitted on a Friday at noon, two tasks
/// end before midnight, the third starts as the weekend begins and is hit
/// at once, and the rest wait for Monday (108 h); submitted on a Monday at
/// noon, 60 h.
/// Drawn from the spells' lengths alone, the two would be one estimate.
#[test]
fn a_batch_submitted_before_the_owners_weekend_off_is_expected_to_wait_it_out() {
    let week = |weekday: u8| {
        let mut h = host(1.0, TrCurve::never_fails());
        h.days = Some(PastDays {
            to_midnight_secs: 12.0 * 3600.0,
            weekday,
            days: vec![
                PastDay {
                    weekend: false,
                    outages: vec![],
                },
                PastDay {
                    weekend: true,
                    outages: vec![(0.0, DAY_SECS)],
                },
            ],
        });
        h
    };
    let p50 = |weekday: u8| {
        let hosts = [week(weekday)];
        let input = EstimateInput {
            hosts: &hosts,
            waiting: &[6.0 * 3600.0; 10],
            runs: 20,
            ..EstimateInput::default()
        };
        let (e, _) = estimate(&input, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
        e.makespan.p50 / 3600.0
    };
    assert!((p50(4) - 108.0).abs() < 1e-6, "Friday: {} h", p50(4));
    assert!((p50(0) - 60.0).abs() < 1e-6, "Monday: {} h", p50(0));
}

#[test]
fn past_days_that_do_not_hold_together_are_refused_with_their_host() {
    let mut h = host(1.0, TrCurve::never_fails());
    h.days = Some(PastDays {
        to_midnight_secs: 3600.0,
        weekday: 1,
        days: vec![PastDay {
            weekend: false,
            outages: vec![(7200.0, 3600.0)],
        }],
    });
    let hosts = [host(1.0, TrCurve::never_fails()), h];
    let input = EstimateInput {
        hosts: &hosts,
        waiting: &[3600.0],
        ..EstimateInput::default()
    };
    let err = estimate(&input, &mut ChaCha8Rng::seed_from_u64(1)).unwrap_err();
    assert!(
        matches!(err, EstimateError::BadPastDays { host: 1, .. }),
        "{err}"
    );
}

/// Past weekdays down 9:00-17:00, for hosts submitted to on a Monday.
fn office_days(to_midnight_secs: f64) -> PastDays {
    PastDays {
        to_midnight_secs,
        weekday: 0,
        days: vec![PastDay {
            weekend: false,
            outages: vec![(9.0 * 3600.0, 17.0 * 3600.0)],
        }],
    }
}

/// The replay draws a host's first failure too, the host taken as up
/// through the outage its picked day holds at the submission's hour: a
/// host found up on a Monday at 12:00, in its past office hours (9:00 to
/// 17:00), whose curve gives a 20 h run no chance, runs a 20 h task to
/// Tuesday 8:00, before Tuesday's office hours, unhit; the 2 h task after
/// it is hit at 9:00 and ends at 19:00 (31 h).
#[test]
fn the_replay_draws_the_first_failure_from_the_hosts_first_replayed_return() {
    let mut h = host(1.0, TrCurve::exponential(3600.0));
    h.days = Some(office_days(12.0 * 3600.0));
    let hosts = [h];
    let input = EstimateInput {
        hosts: &hosts,
        waiting: &[20.0 * 3600.0, 2.0 * 3600.0],
        runs: 20,
        ..EstimateInput::default()
    };
    let (e, _) = estimate(&input, &mut ChaCha8Rng::seed_from_u64(2)).unwrap();
    assert_eq!(e.task_eta[0].p90, 20.0 * 3600.0, "{e:?}");
    assert_eq!(e.makespan.p10, 31.0 * 3600.0, "{e:?}");
    assert_eq!(e.makespan.p90, 31.0 * 3600.0, "{e:?}");
    assert_eq!(e.mean_failures, 1.0);
}

/// A host found down at Monday 12:00, three hours into an outage (its
/// past: outages of 4 h), whose past Mondays have it down until 17:00:
/// it comes back when its past has it back, not at once to fail again.
#[test]
fn a_host_down_at_submission_comes_back_when_its_past_days_have_it_back() {
    let mut h = host(1.0, TrCurve::never_fails());
    h.down_secs = 3.0 * 3600.0;
    h.spells = Some(SpellLengths {
        outages: vec![4.0 * 3600.0; 5],
        outages_seen: 5,
        ..SpellLengths::default()
    });
    h.days = Some(office_days(12.0 * 3600.0));
    let hosts = [h];
    let input = EstimateInput {
        hosts: &hosts,
        waiting: &[3600.0],
        runs: 50,
        ..EstimateInput::default()
    };
    let (e, _) = estimate(&input, &mut ChaCha8Rng::seed_from_u64(4)).unwrap();
    assert_eq!(e.mean_failures, 0.0, "{e:?}");
    assert!(e.makespan.p10 >= 6.0 * 3600.0, "{e:?}");
}

/// A host found down whose past days are all down (its owner away) is
/// away through the replayed days and then drawn as without them: every
/// run ends, none before the replayed days do. (One found up is taken as
/// up to the day's midnight: the outage its day holds then is passed over.)
#[test]
fn a_host_down_through_its_past_days_returns_after_them() {
    let mut h = host(1.0, TrCurve::new([(3600.0, 0.5)]));
    h.recovery_secs = 600.0;
    h.busy_secs = 3600.0;
    h.down_secs = 3600.0;
    h.days = Some(PastDays {
        to_midnight_secs: DAY_SECS,
        weekday: 0,
        days: vec![PastDay {
            weekend: false,
            outages: vec![(0.0, DAY_SECS)],
        }],
    });
    let up = EstimateHost {
        busy_secs: 0.0,
        down_secs: 0.0,
        ..h.clone()
    };
    let makespan = |host: EstimateHost| {
        let hosts = [host];
        let input = EstimateInput {
            hosts: &hosts,
            waiting: &[2.0 * 3600.0],
            runs: 20,
            ..EstimateInput::default()
        };
        estimate(&input, &mut ChaCha8Rng::seed_from_u64(6))
            .unwrap()
            .0
    };
    let e = makespan(h);
    assert_eq!(e.unfinished_runs, 0, "{e:?}");
    assert!(e.makespan.p10 >= REPLAY_DAYS as f64 * DAY_SECS, "{e:?}");
    let e = makespan(up);
    assert_eq!(e.makespan.p90, 2.0 * 3600.0, "{e:?}");
}

/// A return is a run time the replay has the host up at, to the bit: a
/// host down every weekday and up on weekends from 10:00 to 11:00, its
/// midnight not a whole second away, failing at odd times in the first
/// two days, is back on Saturday at 10:00 and fails next at 11:00, never
/// at the instant it returns (a return written as now + (up − now) could
/// round to a hair before 10:00, where the replay still had it down).
#[test]
fn a_host_returns_when_its_replay_has_it_up_to_the_bit() {
    let mut h = host(1.0, TrCurve::never_fails());
    h.days = Some(PastDays {
        to_midnight_secs: 12_345.678,
        weekday: 0,
        days: vec![
            PastDay {
                weekend: false,
                outages: vec![(0.0, DAY_SECS)],
            },
            PastDay {
                weekend: true,
                outages: vec![(0.0, 10.0 * 3600.0), (11.0 * 3600.0, DAY_SECS)],
            },
        ],
    });
    let facts = [HostFacts::new(&h)];
    let mut run = Run::new(1, &[1.0]);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for _ in 0..5_000 {
        let now = rng.random_range(0.0..2.0 * DAY_SECS);
        let back = run.back_at(&facts, 0, now, &mut rng);
        let next = run.next_failure_after(&facts, 0, back, &mut rng);
        assert!(back > now, "{now} -> {back}");
        assert!(
            (next - back - 3600.0).abs() < 1e-6,
            "{now}: back {back}, next {next}"
        );
    }
}
