//! Times the submission-time turnaround estimate (issue 11's target: under
//! 50 ms for 1,000 tasks on 100 hosts, 200 Monte Carlo runs) against the
//! phase-1 code (`old.rs`, frozen) in the same process, and prints the
//! figures. Hosts get powers from 0.4 to 1, availabilities from 0.5 to 1
//! and five-point TR curves with a falling hazard (Weibull, shape 0.7) and
//! mean times to failure from 2 h to 2 days; tasks are 10 min to 2 h.
//! Each estimate is timed on one thread and split over two
//! (`gleaner::parallel::estimate`; the answer is the same), wall and CPU.
//! Run: `cargo run --release --example sched_estimate [-- --old]`
//! (`--old` also times the phase-1 code at the larger size, which takes minutes).
mod old;

use gleaner::model::sched::spells::SpellLengths;
use gleaner::model::sched::{EstimateHost, EstimateInput, HostView, PastFailures, TrCurve};
use gleaner::parallel;
use nix::sys::resource::{getrusage, UsageWho};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

const ROUNDS: usize = 7;

/// This process's CPU time so far (user + system), milliseconds.
fn cpu_ms() -> f64 {
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| {
        let ms = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e3 + t.tv_usec() as f64 / 1e3;
        ms(u.user_time()) + ms(u.system_time())
    })
}

/// Wall median, min and max of `f` over [`ROUNDS`] calls, and its mean CPU
/// time per call, milliseconds.
fn time(mut f: impl FnMut(u64)) -> (f64, f64, f64, f64) {
    let cpu0 = cpu_ms();
    let mut times: Vec<f64> = (0..ROUNDS as u64)
        .map(|round| {
            let t = Instant::now();
            f(round);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let cpu = (cpu_ms() - cpu0) / ROUNDS as f64;
    times.sort_by(f64::total_cmp);
    (times[ROUNDS / 2], times[0], times[ROUNDS - 1], cpu)
}

/// `println!` that ends the example quietly when stdout is closed
/// (`sched_estimate | head`) instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
    }};
}

fn main() -> anyhow::Result<()> {
    let old_at_scale = std::env::args().any(|a| a == "--old");
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (n_hosts, n_tasks) in [(100usize, 1_000usize), (1_000, 10_000)] {
        let hosts: Vec<EstimateHost> = (0..n_hosts)
            .map(|_| {
                let mttf = rng.random_range(7_200.0..172_800.0);
                // Weibull survival exp(-(t/λ)^k), k = 0.7, scaled so the mean is `mttf`
                // (Γ(1 + 1/0.7) ≈ 1.2658).
                let scale = mttf / 1.2658;
                let curve = TrCurve::new(
                    [1_800.0, 3_600.0, 14_400.0, 43_200.0, 86_400.0]
                        .map(|t: f64| (t, (-(t / scale).powf(0.7)).exp())),
                );
                EstimateHost {
                    view: HostView {
                        power: rng.random_range(0.4..=1.0),
                        availability: rng.random_range(0.5..=1.0),
                        curve,
                    },
                    busy_secs: 0.0,
                    recovery_secs: 1_800.0,
                    down_secs: 0.0,
                    past: None,
                    checkpoint_secs: 0.0,
                    checkpoint_cost_secs: 0.0,
                    spells: None,
                    days: None,
                }
            })
            .collect();
        let waiting: Vec<f64> = (0..n_tasks)
            .map(|_| rng.random_range(600.0..7_200.0))
            .collect();
        let input = EstimateInput {
            hosts: &hosts,
            waiting: &waiting,
            runs: 200,
            ..EstimateInput::default()
        };
        let mut last = None;
        let mut med = f64::NAN;
        for threads in [1, 2] {
            let (m, min, max, cpu) = time(|round| {
                let (e, _) =
                    parallel::estimate(&input, &mut ChaCha8Rng::seed_from_u64(round), threads)
                        .expect("valid");
                last = Some(e);
            });
            if threads == 1 {
                med = m;
            }
            let e = last.take().expect("rounds ran");
            say!(
                "estimate, {n_tasks} tasks on {n_hosts} hosts, 200 runs, {threads} thread(s): median {m:.1} ms (min {min:.1}, max {max:.1}), CPU {cpu:.1} ms per estimate; makespan p10/p50/p90 {:.2}/{:.2}/{:.2} h",
                e.makespan.p10 / 3600.0,
                e.makespan.p50 / 3600.0,
                e.makespan.p90 / 3600.0
            );
        }
        let spread = EstimateInput {
            runtime_sigma_log: Some(0.3),
            ..input.clone()
        };
        for threads in [1, 2] {
            let (smed, _, _, cpu) = time(|round| {
                let (e, _) =
                    parallel::estimate(&spread, &mut ChaCha8Rng::seed_from_u64(round), threads)
                        .expect("valid");
                last = Some(e);
            });
            let e = last.take().expect("rounds ran");
            say!(
                "  with a runtime spread σ = 0.3, {threads} thread(s): median {smed:.1} ms, CPU {cpu:.1} ms; makespan p10/p50/p90 {:.2}/{:.2}/{:.2} h",
                e.makespan.p10 / 3600.0,
                e.makespan.p50 / 3600.0,
                e.makespan.p90 / 3600.0
            );
        }
        // Each host with a past week: a failure rate and 32 up-spells and
        // 32 outages resampled after each return (what a node answers).
        let up: Vec<f64> = (0..32).map(|k| 600.0 * 1.15f64.powi(k)).collect();
        let outages: Vec<f64> = (0..32).map(|k| 60.0 * 1.12f64.powi(k)).collect();
        let with_past: Vec<EstimateHost> = hosts
            .iter()
            .map(|h| EstimateHost {
                past: Some(PastFailures {
                    up_secs: up.iter().sum(),
                    failures: 33,
                }),
                spells: Some(SpellLengths {
                    up: up.clone(),
                    up_seen: 32,
                    up_cut: vec![3_600.0, 7_200.0],
                    outages: outages.clone(),
                    outages_seen: 32,
                }),
                ..h.clone()
            })
            .collect();
        // The same rate without the lengths: what the resampling costs.
        let rate_only: Vec<EstimateHost> = with_past
            .iter()
            .map(|h| EstimateHost {
                spells: None,
                ..h.clone()
            })
            .collect();
        for (what, hosts) in [
            ("rate and 32 + 32 spells resampled", &with_past),
            ("rate only", &rate_only),
        ] {
            let past_input = EstimateInput {
                hosts,
                ..input.clone()
            };
            let (pmed, _, _, cpu) = time(|round| {
                let (e, _) =
                    parallel::estimate(&past_input, &mut ChaCha8Rng::seed_from_u64(round), 1)
                        .expect("valid");
                last = Some(e);
            });
            let e = last.take().expect("rounds ran");
            say!(
                "  with each host's past week ({what}), 1 thread: median {pmed:.1} ms, CPU {cpu:.1} ms; makespan p10/p50/p90 {:.2}/{:.2}/{:.2} h",
                e.makespan.p10 / 3600.0,
                e.makespan.p50 / 3600.0,
                e.makespan.p90 / 3600.0
            );
        }
        if n_hosts > 100 && !old_at_scale {
            continue;
        }
        let old_input = old::EstimateInput {
            hosts: &hosts,
            running: &[],
            waiting: &waiting,
            longest_first: true,
            runs: 200,
        };
        let mut old_last = None;
        let (omed, omin, omax, _) = time(|round| {
            let (e, _) =
                old::estimate(&old_input, &mut ChaCha8Rng::seed_from_u64(round)).expect("valid");
            old_last = Some(e);
        });
        let o = old_last.expect("rounds ran");
        say!(
            "  phase-1 code, same input: median {omed:.1} ms (min {omin:.1}, max {omax:.1}); makespan p10/p50/p90 {:.2}/{:.2}/{:.2} h; {:.1}× slower than now on one thread",
            o.makespan.p10 / 3600.0,
            o.makespan.p50 / 3600.0,
            o.makespan.p90 / 3600.0,
            omed / med
        );
    }
    Ok(())
}
