//! The cost of `--verify adaptive` on an honest pool: extra copies run per
//! accepted result, during warm-up and after it, for the default rule and
//! a few others (how docs/trust.md chose N and the spot-check floor); and
//! how soon a host that lies on a fraction of its results is caught.
//!
//! Runs the rule's own arithmetic (`gleaner_model::trust`) over a simulated
//! pool: each task goes to a host drawn at random; a task that the rule
//! checks also runs on a second, distinct host; both copies are compared
//! and both hosts' tracks updated (honest copies always agree, a liar's
//! wrong copy never does). Seeded: the figures repeat.
//!
//! `cargo run --release --example trust_overhead`

use gleaner::model::trust::{AdaptiveRule, HostTrack};
use rand::{Rng, SeedableRng};

struct Run {
    warm_extra: u64,
    warm_tasks: u64,
    after_extra: u64,
    after_tasks: u64,
}

/// `tasks` tasks over `hosts` honest hosts; the first `warm` tasks count
/// as warm-up.
fn honest(rule: AdaptiveRule, hosts: usize, tasks: u64, warm: u64, seed: u64) -> Run {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut track = vec![HostTrack::default(); hosts];
    let mut run = Run {
        warm_extra: 0,
        warm_tasks: 0,
        after_extra: 0,
        after_tasks: 0,
    };
    for task in 0..tasks {
        let first = rng.random_range(0..hosts);
        let copies = rule.copies(track[first].streak, rng.random());
        if copies == 2 {
            let mut second = rng.random_range(0..hosts - 1);
            if second >= first {
                second += 1;
            }
            track[first].record(true);
            track[second].record(true);
        }
        let extra = u64::from(copies - 1);
        if task < warm {
            run.warm_extra += extra;
            run.warm_tasks += 1;
        } else {
            run.after_extra += extra;
            run.after_tasks += 1;
        }
    }
    run
}

/// Tasks until a host that returns a wrong result with probability
/// `error_rate` is caught (its first checked wrong result), when it starts
/// trusted with `streak`; averaged over `trials`.
fn tasks_to_catch(rule: AdaptiveRule, streak: u32, error_rate: f64, trials: u32) -> f64 {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut total = 0u64;
    for _ in 0..trials {
        let mut t = HostTrack {
            streak,
            ..Default::default()
        };
        let mut n = 0u64;
        loop {
            n += 1;
            let wrong = rng.random::<f64>() < error_rate;
            let checked = rule.copies(t.streak, rng.random()) == 2;
            if checked {
                if wrong {
                    break;
                }
                t.record(true);
            }
            if n > 1_000_000 {
                break;
            }
        }
        total += n;
    }
    total as f64 / f64::from(trials)
}

fn main() {
    let hosts = 20;
    let tasks = 200_000;
    let warm = 10_000;
    println!(
        "honest pool: {hosts} hosts, {tasks} tasks, warm-up = first {warm} tasks; overhead = extra copies per accepted result"
    );
    println!(
        "{:>4} {:>8} {:>8} {:>12} {:>12}",
        "N", "p(N)", "floor", "warm-up", "after"
    );
    let rules = [
        AdaptiveRule::default(),
        AdaptiveRule {
            trust_after: 5,
            ..AdaptiveRule::default()
        },
        AdaptiveRule {
            trust_after: 20,
            ..AdaptiveRule::default()
        },
        AdaptiveRule {
            check_floor: 0.02,
            ..AdaptiveRule::default()
        },
        AdaptiveRule {
            check_floor: 0.10,
            ..AdaptiveRule::default()
        },
    ];
    for (i, rule) in rules.iter().enumerate() {
        let r = honest(*rule, hosts, tasks, warm, 1);
        println!(
            "{:>4} {:>8.2} {:>8.2} {:>11.1}% {:>11.1}%{}",
            rule.trust_after,
            rule.check_at_trust,
            rule.check_floor,
            100.0 * r.warm_extra as f64 / r.warm_tasks as f64,
            100.0 * r.after_extra as f64 / r.after_tasks as f64,
            if i == 0 { "   <- default" } else { "" }
        );
    }
    let rule = AdaptiveRule::default();
    println!("\na liar that was trusted (streak 1000, default rule): tasks until caught");
    for error_rate in [1.0, 0.5, 0.1] {
        println!(
            "  wrong on {:>4.0}% of results: {:>8.1} tasks",
            100.0 * error_rate,
            tasks_to_catch(rule, 1000, error_rate, 2000)
        );
    }
}
