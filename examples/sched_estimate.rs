//! Times the submission-time turnaround estimate (issue 11's target: under
//! 50 ms for 1,000 tasks on 100 hosts, 200 Monte Carlo runs) and prints the
//! figures. Hosts get powers from 0.4 to 1, availabilities from 0.5 to 1 and
//! TR curves with mean times to failure from 2 h to 2 days; tasks are 10 min
//! to 2 h. Run: `cargo run --release --example sched_estimate`.
use gleaner::model::sched::{estimate, EstimateHost, EstimateInput, HostView, TrCurve};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (n_hosts, n_tasks) in [(100usize, 1_000usize), (1_000, 10_000)] {
        let hosts: Vec<EstimateHost> = (0..n_hosts)
            .map(|_| {
                let mttf = rng.random_range(7_200.0..172_800.0);
                // A five-point curve, as a host's reliability answer carries.
                let exp = TrCurve::exponential(mttf);
                let curve = TrCurve::new(
                    [1_800.0, 3_600.0, 14_400.0, 43_200.0, 86_400.0].map(|t| (t, exp.tr_at(t))),
                );
                EstimateHost {
                    view: HostView {
                        power: rng.random_range(0.4..=1.0),
                        availability: rng.random_range(0.5..=1.0),
                        curve,
                    },
                    busy_secs: 0.0,
                    recovery_secs: 1_800.0,
                    checkpoint_secs: 0.0,
                }
            })
            .collect();
        let waiting: Vec<f64> = (0..n_tasks)
            .map(|_| rng.random_range(600.0..7_200.0))
            .collect();
        let input = EstimateInput {
            hosts: &hosts,
            running: &[],
            waiting: &waiting,
            longest_first: true,
            runs: 200,
        };
        let mut times = Vec::new();
        let mut last = None;
        for round in 0..5 {
            let mut run_rng = ChaCha8Rng::seed_from_u64(round);
            let t = Instant::now();
            let (e, _) = estimate(&input, &mut run_rng)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            last = Some(e);
        }
        times.sort_by(f64::total_cmp);
        let e = last.expect("five rounds ran");
        println!(
            "estimate, {n_tasks} tasks on {n_hosts} hosts, 200 runs: median {:.1} ms (min {:.1}, max {:.1}); makespan p10/p50/p90 {:.2}/{:.2}/{:.2} h",
            times[2],
            times[0],
            times[4],
            e.makespan.p10 / 3600.0,
            e.makespan.p50 / 3600.0,
            e.makespan.p90 / 3600.0
        );
    }
    Ok(())
}
