//! The model's splittable computations run on a few threads: the Monte
//! Carlo runs of a turnaround estimate, and any list of independent jobs
//! (the simulator's policies). The model itself starts no threads; it makes
//! its work splittable so that the answer does not depend on the split
//! ([`EstimatePlan`]: run r draws from its own stream), and this module
//! does the splitting, with scoped threads joined before it returns.

use crate::model::sched::estimate::{Estimate, EstimateError, EstimateInput, EstimatePlan};
use rand::Rng;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Most threads one computation uses.
pub const MAX_THREADS: usize = 16;

/// The threads to use: the machine's parallelism, at most [`MAX_THREADS`].
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS)
}

/// [`crate::model::sched::estimate::estimate`] with its runs split over
/// `threads` threads (1: on this one). The same input and RNG state give
/// the same estimate whatever `threads` is.
pub fn estimate<R: Rng + ?Sized>(
    input: &EstimateInput<'_>,
    rng: &mut R,
    threads: usize,
) -> Result<(Estimate, Vec<f64>), EstimateError> {
    let plan = EstimatePlan::new(input, rng)?;
    let runs = plan.run_count();
    let threads = threads.clamp(1, MAX_THREADS).min(runs);
    if threads <= 1 {
        let part = plan.runs(0..runs);
        return Ok(plan.finish(vec![part]));
    }
    let chunk = runs.div_ceil(threads);
    let parts = std::thread::scope(|scope| {
        let plan = &plan;
        let handles: Vec<_> = (1..threads)
            .map(|t| scope.spawn(move || plan.runs(t * chunk..(t + 1) * chunk)))
            .collect();
        let mut parts = vec![plan.runs(0..chunk)];
        for h in handles {
            match h.join() {
                Ok(part) => parts.push(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        parts
    });
    Ok(plan.finish(parts))
}

/// Runs `job(i)` for every i in `0..jobs` on up to `threads` threads, each
/// thread taking the next job not yet taken, and returns the results in job
/// order. What a job computes must depend only on i, not on the thread or
/// on the other jobs' timing, for the answer to be the same on any number
/// of threads.
pub fn run_jobs<T: Send>(jobs: usize, threads: usize, job: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = threads.clamp(1, MAX_THREADS).min(jobs.max(1));
    if threads <= 1 {
        return (0..jobs).map(job).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..jobs).map(|_| None).collect());
    std::thread::scope(|scope| {
        let work = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= jobs {
                break;
            }
            let out = job(i);
            if let Ok(mut r) = results.lock() {
                r[i] = Some(out);
            }
        };
        let handles: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        work();
        for h in handles {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sched::curve::TrCurve;
    use crate::model::sched::estimate::{EstimateHost, PastDay, PastDays, PastFailures};
    use crate::model::sched::HostView;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn the_estimate_is_the_same_on_any_number_of_threads() {
        let hosts: Vec<EstimateHost> = (0..7)
            .map(|i| EstimateHost {
                view: HostView {
                    power: 0.4 + 0.08 * i as f64,
                    availability: 0.9,
                    curve: TrCurve::exponential(3_600.0 * (1 + i) as f64),
                },
                busy_secs: 0.0,
                recovery_secs: 600.0,
                down_secs: 0.0,
                // Both ways of drawing the failure after a return: from
                // the curve, and at a rate drawn from a past's posterior.
                past: (i % 3 == 0).then_some(PastFailures {
                    up_secs: 86_400.0,
                    failures: i as u32,
                }),
                checkpoint_secs: if i % 2 == 1 { 900.0 } else { 0.0 },
                checkpoint_cost_secs: 30.0,
                spells: None,
                // And from past days replayed, picked per run.
                days: (i % 2 == 0).then(|| PastDays {
                    to_midnight_secs: 3_600.0 * (1 + i) as f64,
                    weekday: i as u8 % 7,
                    days: vec![
                        PastDay {
                            weekend: false,
                            outages: vec![(9.0 * 3_600.0, 17.0 * 3_600.0)],
                        },
                        PastDay {
                            weekend: false,
                            outages: vec![(20.0 * 3_600.0, 86_400.0)],
                        },
                        PastDay {
                            weekend: true,
                            outages: vec![(0.0, 86_400.0)],
                        },
                    ],
                }),
            })
            .collect();
        let waiting: Vec<f64> = (0..40).map(|i| 600.0 + 97.0 * i as f64).collect();
        let input = EstimateInput {
            hosts: &hosts,
            waiting: &waiting,
            runs: 37,
            runtime_sigma_log: Some(0.3),
            ..EstimateInput::default()
        };
        let one = estimate(&input, &mut ChaCha8Rng::seed_from_u64(5), 1).unwrap();
        for threads in [2, 3, 8] {
            let many = estimate(&input, &mut ChaCha8Rng::seed_from_u64(5), threads).unwrap();
            assert_eq!(one, many, "{threads} threads");
        }
        // The model's own single-threaded call gives the same again.
        let model =
            crate::model::sched::estimate(&input, &mut ChaCha8Rng::seed_from_u64(5)).unwrap();
        assert_eq!(one, model);
        // And a different seed gives a different spread of failures.
        let other = estimate(&input, &mut ChaCha8Rng::seed_from_u64(6), 2).unwrap();
        assert_ne!(one.1, other.1);
    }

    #[test]
    fn jobs_come_back_in_job_order() {
        let out = run_jobs(23, 3, |i| i * i);
        assert_eq!(out, (0..23).map(|i| i * i).collect::<Vec<_>>());
        assert!(run_jobs(0, 4, |i| i).is_empty());
    }
}
