//! A batch's run time as its landed tasks show it (issue 11's runtime
//! updates). The declared `--runtime` is the prior of
//! `model::sched::runtime`'s log-normal update; every task that lands done
//! adds its reference run time (seconds on an unloaded host of P = 1).
//! [`landed_work`] says what to record when a task lands, and
//! [`planned_runtime`] what the queue plans with: placement and deadlines
//! take the median, estimates the mean and the spread. Pure.

use crate::consumer::batch::record::{TaskRecord, TaskState};
use crate::model::sched::runtime::{Completion, RuntimeEstimate, DEFAULT_PRIOR_WEIGHT};
use crate::net::protocol::GuestUsage;

/// Spread (log scale) of a task's wall time around its expected value:
/// a declared runtime is a guess, and a task may well take e (2.7) times
/// or a third of it. Log-normal tails are light: with less spread a task
/// far past its runtime would still look about to end.
pub const RUNTIME_SIGMA_PRIOR: f64 = 1.0;

/// What a batch's tasks are expected to take, read off one scan of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedRuntime {
    /// The median, seconds: what a policy and a deadline plan a task with
    /// (the declared runtime until tasks land).
    pub median: f64,
    /// The mean, seconds: what the estimate draws runtimes around.
    pub mean: f64,
    /// The spread on a log scale, for deadlines and estimates.
    pub spread: f64,
}

/// The runtime model of a batch declared to take `declared_secs` per task,
/// whose tasks are `tasks` (none: the prior alone).
pub fn planned_runtime(declared_secs: u64, tasks: &[TaskRecord]) -> PlannedRuntime {
    let declared = declared_secs.max(1) as f64;
    match runtime_model(declared, tasks) {
        Some(m) => PlannedRuntime {
            median: m.median_secs(),
            mean: m.mean_secs(),
            spread: m.sigma_log(),
        },
        None => PlannedRuntime {
            median: declared,
            mean: declared,
            spread: RUNTIME_SIGMA_PRIOR,
        },
    }
}

/// The declared runtime as the prior, spread [`RUNTIME_SIGMA_PRIOR`] and
/// weighing as a few tasks, updated by every task that landed done: its
/// reference run time wall · Γ as [`landed_work`] recorded it.
fn runtime_model(declared: f64, tasks: &[TaskRecord]) -> Option<RuntimeEstimate> {
    let mut model =
        RuntimeEstimate::with_prior(declared, DEFAULT_PRIOR_WEIGHT, RUNTIME_SIGMA_PRIOR).ok()?;
    for t in tasks {
        if t.state != TaskState::Done {
            continue;
        }
        let (Some(wall_secs), Some(gamma)) = (t.wall_secs, t.host_gamma) else {
            continue;
        };
        // A bad record is skipped (`observe` refuses it by value).
        let _ = model.observe(Completion {
            cpu_secs: 0.0,
            wall_secs,
            gamma: gamma.clamp(1e-3, 1.0),
        });
    }
    Some(model)
}

/// The wall seconds and Γ to record for a task that landed, chosen so that
/// wall · Γ is its reference run time.
///
/// With the host's measure of the guest (`usage`) and the host's P: the
/// guest's own wall time, and when the guest was CPU-bound (it used at
/// least [`CPU_BOUND_SHARE`](crate::model::sched::runtime::CPU_BOUND_SHARE)
/// of what the Γ predicted at placement gave it) the Γ it really got,
/// P · CPU / wall, so that wall · Γ = CPU · P: CISNE's CPU time, which the
/// owner's load does not inflate. A guest that used less (it sleeps, waits
/// on I/O, or the owner took more than predicted: CPU times alone cannot
/// tell these apart) keeps the predicted Γ: wall · Γ, SDPN's
/// normalisation. Without usage: the consumer's wall time, transfers
/// included, and the predicted Γ.
///
/// A host's figures are its word: its wall time counts for at least half
/// the consumer's and at most all of it (the consumer's includes the
/// transfers), and Γ stays in (0, 1], so one host cannot make the batch's
/// runtime look tiny or huge.
pub fn landed_work(
    consumer_wall: f64,
    usage: Option<GuestUsage>,
    power: Option<f64>,
    placed_gamma: Option<f64>,
) -> (f64, Option<f64>) {
    let Some(u) = usage.filter(|u| u.wall_millis > 0) else {
        return (consumer_wall, placed_gamma);
    };
    let wall = (u.wall_millis as f64 / 1000.0).clamp(consumer_wall / 2.0, consumer_wall.max(1e-3));
    let power = power.filter(|p| p.is_finite() && *p > 0.0);
    let (Some(power), Some(placed)) = (power, placed_gamma) else {
        return (wall, placed_gamma);
    };
    let ran = Completion {
        cpu_secs: u.cpu_millis as f64 / 1000.0 * power,
        wall_secs: wall,
        gamma: placed.clamp(1e-3, 1.0),
    };
    let gamma = (ran.reference_secs() / wall).clamp(1e-3, 1.0);
    (wall, Some(gamma))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cpu_secs: f64, wall_secs: f64) -> Option<GuestUsage> {
        Some(GuestUsage {
            cpu_millis: (cpu_secs * 1000.0) as u64,
            wall_millis: (wall_secs * 1000.0) as u64,
        })
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_cpu_bound_guest_counts_its_cpu_times_p() {
        // Placed expecting Γ = 0.5 on a P = 0.8 host; the owner was quieter
        // than predicted: 100 s of wall gave 90 s of CPU. Reference work:
        // 90 · 0.8 = 72 s (at least 0.8 of the 50 s Γ promised), so Γ = 0.72.
        let (wall, gamma) = landed_work(103.0, usage(90.0, 100.0), Some(0.8), Some(0.5));
        assert!(close(wall, 100.0));
        assert!(close(wall * gamma.unwrap(), 72.0), "{gamma:?}");
    }

    #[test]
    fn a_guest_that_got_less_than_predicted_keeps_the_prediction() {
        // Γ = 0.8 predicted, but 100 s of wall gave 50 s of CPU on P = 0.8:
        // 40 s is under 0.8 of the 80 s promised, which a guest that waits
        // would also show, so the wall time at the predicted Γ stays (the
        // record before CPU times were used).
        let (wall, gamma) = landed_work(103.0, usage(50.0, 100.0), Some(0.8), Some(0.8));
        assert!(close(wall, 100.0));
        assert_eq!(gamma, Some(0.8));
    }

    #[test]
    fn a_sleeping_guest_keeps_the_predicted_gamma() {
        // 1 s of CPU in 60 s: not CPU-bound, so wall · Γ_placed = 30 s.
        let (wall, gamma) = landed_work(61.0, usage(1.0, 60.0), Some(1.0), Some(0.5));
        assert!(close(wall, 60.0));
        assert_eq!(gamma, Some(0.5));
    }

    #[test]
    fn without_usage_or_p_the_consumer_view_or_the_prediction_stays() {
        assert_eq!(
            landed_work(42.0, None, Some(1.0), Some(0.7)),
            (42.0, Some(0.7))
        );
        let (wall, gamma) = landed_work(42.0, usage(40.0, 40.0), None, Some(0.7));
        assert!(close(wall, 40.0));
        assert_eq!(gamma, Some(0.7));
        assert_eq!(
            landed_work(42.0, usage(40.0, 0.0), Some(1.0), Some(0.7)),
            (42.0, Some(0.7))
        );
    }

    #[test]
    fn a_host_cannot_shrink_or_inflate_the_runtime_past_bounds() {
        // It claims 1 ms of wall for a 100 s attempt: half the consumer's counts.
        let (wall, _) = landed_work(100.0, usage(0.0, 0.001), Some(1.0), Some(1.0));
        assert!(close(wall, 50.0));
        // It claims a week: the consumer's wall is the most.
        let (wall, _) = landed_work(100.0, usage(1.0, 604_800.0), Some(1.0), Some(1.0));
        assert!(close(wall, 100.0));
        // Huge CPU (many threads, or a lie): Γ at most 1.
        let (wall, gamma) = landed_work(100.0, usage(1e9, 100.0), Some(4.0), Some(1.0));
        assert!(close(wall * gamma.unwrap(), 100.0));
    }

    #[test]
    fn landed_tasks_move_the_plan_from_the_declared_runtime() {
        let declared = planned_runtime(600, &[]);
        assert!(declared.median > 0.0 && declared.mean >= declared.median);
        assert!(declared.spread >= RUNTIME_SIGMA_PRIOR, "{declared:?}");
        let mut task = TaskRecord::queued(Vec::new(), Vec::new(), Vec::new());
        task.state = TaskState::Done;
        // Every task did 120 reference seconds of work: CPU-bound on P = 1,
        // placed at Γ = 0.5 and given it.
        let (wall, gamma) = landed_work(240.0, usage(120.0, 240.0), Some(1.0), Some(0.5));
        task.wall_secs = Some(wall);
        task.host_gamma = gamma;
        let tasks = vec![task; 20];
        let learned = planned_runtime(600, &tasks);
        assert!(
            learned.median < 200.0 && learned.median > 100.0,
            "20 tasks of 120 s outweigh a prior of 600 s: {learned:?}"
        );
        // Counted by wall time on hosts predicted at Γ = 1 they would say 240 s.
        let mut by_wall = tasks.clone();
        for t in &mut by_wall {
            t.wall_secs = Some(240.0);
            t.host_gamma = Some(1.0);
        }
        assert!(planned_runtime(600, &by_wall).median > 200.0);
    }
}
