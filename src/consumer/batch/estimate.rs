//! "When will my batch be done?": the consumer's side of the turnaround
//! estimate. Builds `model::sched::estimate`'s input (CISNE's Algorithm 1
//! as a Monte Carlo with SDPN slowdowns and each host's TR curve) from a
//! survey's hosts and a batch's tasks, for `gleaner batch estimate` before
//! anything is sent and for `batch status` while the batch runs. Pure: the
//! caller passes the RNG and runs it off the actor's loop.

use libp2p::PeerId;
use rand::Rng;

use crate::consumer::batch::policy::host_view;
use crate::consumer::rank;
use crate::consumer::survey::SurveyedHost;
use crate::model::sched::curve::{young_daly_interval, TrCurve};
use crate::model::sched::estimate::{
    checkpoint_mttf, EstimateHost, EstimateInput, HeldWindow, PastFailures, Quantiles, RunningTask,
};
use crate::model::sched::place::HostView;

/// Monte Carlo runs per estimate (the issue asks for at least 200).
pub const ESTIMATE_RUNS: usize = 200;
/// Seconds a host whose answer carries no outage is taken to be away after
/// a failure before it takes work again: the 60 s an S3 must last, and the
/// owner's burst after it.
pub const RECOVERY_SECS: f64 = 600.0;

/// An estimate of a batch's end, seconds from `at_unix`.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchEstimate {
    pub at_unix: i64,
    /// Wall seconds until the last task ends: p10, p50, p90, mean.
    pub makespan: Quantiles,
    /// The chance of ending by the batch's deadline, when it has one.
    pub p_deadline: Option<f64>,
    /// Hosts the estimate spread the tasks over.
    pub hosts: usize,
    pub runs: usize,
    /// Runs that gave up on a task (killed on host after host): their
    /// makespan, and that task's end, are infinite.
    pub unfinished_runs: usize,
    /// Each task's end, seconds from `at_unix`, by task number: the running
    /// tasks and the waiting ones (tasks that have ended are not in it).
    pub tasks: Vec<TaskEta>,
}

/// When one task is expected to end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskEta {
    pub task: u32,
    /// Seconds from the estimate's `at_unix`: p10, p50, p90, mean.
    pub end: Quantiles,
}

/// A task of the batch that is running.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningShape {
    pub task: u32,
    pub host: PeerId,
    /// Seconds since it started there.
    pub elapsed_secs: f64,
}

/// What the estimate needs of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchShape {
    /// Reference run time of one task, seconds.
    pub runtime_secs: f64,
    /// The survey's window, seconds (what a host's one TR answer covers).
    pub window_secs: u64,
    /// Running tasks.
    pub running: Vec<RunningShape>,
    /// Tasks waiting for a host, by number, in the order they will be placed.
    pub waiting: Vec<u32>,
    /// Seconds from now to the deadline.
    pub deadline_in: Option<f64>,
    /// The declared cost of one checkpoint, seconds (checkpointing batches).
    pub checkpoint_cost_secs: Option<f64>,
    /// The runtime's spread (log scale), once tasks of the batch have
    /// landed; `None` takes the runtime as exact.
    pub runtime_sigma_log: Option<f64>,
    /// Waiting tasks the queue holds for a host's later window.
    pub holds: Vec<HeldShape>,
}

/// A waiting task held for a host's later window (issue 28): the estimate
/// has it wait for the window, start there and finish with the window's
/// chance, else fall back to the queue (`model::sched::estimate`'s holds).
#[derive(Debug, Clone, PartialEq)]
pub struct HeldShape {
    pub task: u32,
    pub host: PeerId,
    /// Seconds from the estimate's time until the window opens (0: open).
    pub start_in_secs: f64,
    /// The host's TR for the window, as the hold was made with.
    pub p: f64,
}

/// Why there is no estimate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BatchEstimateError {
    #[error("no host of the pool answered; nothing to estimate with (`gleaner hosts`)")]
    NoHosts,
    #[error(transparent)]
    Estimate(#[from] crate::model::sched::estimate::EstimateError),
}

/// The estimate of `shape` on `hosts` (the ones that answered and are not
/// failing; a host busy with someone else's job is taken to be free after
/// one task's run time). A host that answered and holds a task's window is
/// weighed even while failing: its owner's load now is what the hold waits
/// out, and it is taken to be away until its first window.
pub fn estimate_batch<R: Rng + ?Sized>(
    hosts: &[SurveyedHost],
    shape: &BatchShape,
    at_unix: i64,
    rng: &mut R,
) -> Result<BatchEstimate, BatchEstimateError> {
    let window_of = |peer: &PeerId| {
        shape
            .holds
            .iter()
            .filter(|w| w.host == *peer)
            .map(|w| w.start_in_secs.max(0.0))
            .min_by(f64::total_cmp)
    };
    let usable: Vec<&SurveyedHost> = hosts
        .iter()
        .filter(|h| rank::healthy(h) || (h.answered && window_of(&h.peer).is_some()))
        .collect();
    if usable.is_empty() {
        return Err(BatchEstimateError::NoHosts);
    }
    let runtime = shape.runtime_secs.max(1.0);
    let ours: std::collections::HashSet<PeerId> = shape.running.iter().map(|r| r.host).collect();
    let est_hosts: Vec<EstimateHost> = usable
        .iter()
        .map(|h| {
            let view = view_or_guess(h, shape.window_secs);
            let checkpoint_secs = shape
                .checkpoint_cost_secs
                .and_then(|c| {
                    let past = h.spells.map(PastFailures::from);
                    young_daly_interval(c, checkpoint_mttf(&view.curve, past.as_ref()))
                })
                .unwrap_or(0.0);
            let busy_with_others = h.slot_free == Some(false) && !ours.contains(&h.peer);
            EstimateHost {
                busy_secs: if !rank::healthy(h) {
                    // Failing now, weighed for its held window only.
                    window_of(&h.peer).unwrap_or(0.0)
                } else if busy_with_others {
                    view.expected_run_secs(runtime).min(runtime * 100.0)
                } else {
                    0.0
                },
                // After its first failure (the curve's), a host is away for
                // its mean outage, as its past week says (a host that has
                // not failed in it: a guess at the time away), and fails
                // again at a rate drawn from what that week shows (`past`).
                recovery_secs: h
                    .spells
                    .and_then(|s| s.mean_outage_secs())
                    .unwrap_or(RECOVERY_SECS),
                // The same past as evidence: each run draws the rate from
                // its posterior, as the simulator's estimate does.
                // Only hosts that answer are weighed: none is down.
                down_secs: 0.0,
                past: h.spells.map(PastFailures::from),
                checkpoint_secs,
                // The guest writes a checkpoint every interval of work and
                // each takes its measured cost.
                checkpoint_cost_secs: if checkpoint_secs > 0.0 {
                    shape.checkpoint_cost_secs.unwrap_or(0.0)
                } else {
                    0.0
                },
                // Their lengths, resampled after each return.
                spells: h.spell_lengths.clone(),
                // Hosts' summaries carry their past week's spell lengths,
                // not when each fell: no days to replay (docs/scheduling.md).
                days: None,
                view,
            }
        })
        .collect();
    let mut running = Vec::new();
    // Task numbers in the estimate's order: the running ones, then the waiting.
    let mut order = Vec::with_capacity(shape.running.len() + shape.waiting.len());
    let mut waiting = Vec::new();
    for task in &shape.running {
        match usable.iter().position(|h| h.peer == task.host) {
            Some(host) => {
                let gamma = est_hosts[host].view.gamma().max(1e-3);
                running.push(RunningTask {
                    host,
                    // SDPN Eq. 5: the work done is elapsed · Γ; at least a
                    // twentieth is left while it has not ended.
                    remaining_secs: (runtime - task.elapsed_secs * gamma).max(runtime / 20.0),
                });
                order.push(task.task);
            }
            // Its host did not answer: it waits again, first in line.
            None => waiting.push(task.task),
        }
    }
    waiting.extend_from_slice(&shape.waiting);
    order.extend_from_slice(&waiting);
    let waiting_runtimes = vec![runtime; waiting.len()];
    // A hold whose host is not weighed, or whose task is not waiting,
    // leaves its task to the rule.
    let held: Vec<HeldWindow> = shape
        .holds
        .iter()
        .filter(|w| w.p.is_finite())
        .filter_map(|w| {
            Some(HeldWindow {
                waiting: waiting.iter().position(|&t| t == w.task)?,
                host: usable.iter().position(|h| h.peer == w.host)?,
                start_secs: w.start_in_secs.max(0.0),
                p: w.p.clamp(0.0, 1.0),
            })
        })
        .collect();
    let input = EstimateInput {
        hosts: &est_hosts,
        running: &running,
        waiting: &waiting_runtimes,
        longest_first: true,
        runs: ESTIMATE_RUNS,
        runtime_sigma_log: shape.runtime_sigma_log,
        held: &held,
    };
    // The runs split over the machine's cores; the answer is the same.
    let (result, makespans) =
        crate::parallel::estimate(&input, rng, crate::parallel::default_threads())?;
    let p_deadline = shape
        .deadline_in
        .map(|secs| result.p_within(&makespans, secs));
    let mut tasks: Vec<TaskEta> = order
        .iter()
        .zip(&result.task_eta)
        .map(|(&task, &end)| TaskEta { task, end })
        .collect();
    tasks.sort_by_key(|t| t.task);
    Ok(BatchEstimate {
        at_unix,
        makespan: result.makespan,
        p_deadline,
        hosts: est_hosts.len(),
        runs: ESTIMATE_RUNS,
        unfinished_runs: result.unfinished_runs,
        tasks,
    })
}

/// A host's view, or for a host that cannot predict yet (too little
/// history) one that never fails at its current Γ: the estimate then errs
/// on the hopeful side for it, and says so by nothing else.
/// A running task's start and its host's view: the survey's, else a guess
/// for a host the survey did not list. `None` when the record lacks the
/// start or a readable host (the deadline copies and the tail copies both
/// weigh running tasks this way).
pub fn running_view(
    task: &crate::consumer::batch::record::TaskRecord,
    hosts: &[SurveyedHost],
    window_secs: u64,
) -> Option<(i64, HostView)> {
    let started = task.started_unix?;
    let host = task.host.as_deref()?.parse::<PeerId>().ok()?;
    let view = match hosts.iter().find(|h| h.peer == host) {
        Some(h) => view_or_guess(h, window_secs),
        None => view_or_guess(&SurveyedHost::new(host), window_secs),
    };
    Some((started, view))
}

pub fn view_or_guess(host: &SurveyedHost, window_secs: u64) -> HostView {
    host_view(host, window_secs).unwrap_or_else(|| {
        let gamma = host
            .power
            .filter(|p| p.is_finite() && *p > 0.0)
            .unwrap_or(1.0);
        HostView {
            power: gamma,
            availability: 1.0,
            curve: TrCurve::never_fails(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sched::spells::{PastSpells, SpellLengths};
    use crate::model::state::State;
    use rand::SeedableRng;

    fn host(speed: f64, mttf: Option<f64>) -> SurveyedHost {
        SurveyedHost {
            answered: true,
            tr: mttf.map(|m| (-3600.0 / m).exp()),
            curve: mttf.map(TrCurve::exponential),
            speed: Some(speed),
            availability: Some(1.0),
            power: Some(speed),
            slot_free: Some(true),
            state: Some(State::S1),
            ..SurveyedHost::new(PeerId::random())
        }
    }

    fn shape(waiting: u32, deadline_in: Option<f64>) -> BatchShape {
        BatchShape {
            runtime_secs: 3600.0,
            window_secs: 3600,
            running: Vec::new(),
            waiting: (0..waiting).collect(),
            deadline_in,
            checkpoint_cost_secs: None,
            runtime_sigma_log: None,
            holds: Vec::new(),
        }
    }

    #[test]
    fn safe_hosts_give_the_hand_computed_makespan_and_a_sure_deadline() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // Four tasks of 1 h on two safe hosts of speed 1: two rounds, 2 h.
        let hosts = vec![host(1.0, None), host(1.0, Some(1e12))];
        let e = estimate_batch(&hosts, &shape(4, Some(3.0 * 3600.0)), 0, &mut rng).unwrap();
        assert!((e.makespan.p50 - 7200.0).abs() < 1.0, "{e:?}");
        assert_eq!(e.p_deadline, Some(1.0));
        // Two tasks end after the first hour, two after the second.
        let ends: Vec<(u32, f64)> = e.tasks.iter().map(|t| (t.task, t.end.p50)).collect();
        let mut by_end: Vec<f64> = ends.iter().map(|e| e.1.round()).collect();
        by_end.sort_by(f64::total_cmp);
        assert_eq!(by_end, [3600.0, 3600.0, 7200.0, 7200.0], "{ends:?}");
        assert_eq!(
            ends.iter().map(|e| e.0).collect::<Vec<_>>(),
            [0, 1, 2, 3],
            "by task number"
        );
        let tight = estimate_batch(&hosts, &shape(4, Some(3600.0)), 0, &mut rng).unwrap();
        assert_eq!(tight.p_deadline, Some(0.0));
    }

    #[test]
    fn failing_hosts_widen_the_estimate_and_lower_the_chance() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let safe = vec![host(1.0, Some(1e12)); 2];
        let risky = vec![host(1.0, Some(3600.0)), host(1.0, Some(3600.0))];
        let deadline = Some(2.5 * 3600.0);
        let a = estimate_batch(&safe, &shape(4, deadline), 0, &mut rng).unwrap();
        let b = estimate_batch(&risky, &shape(4, deadline), 0, &mut rng).unwrap();
        assert!(b.makespan.p50 > a.makespan.p50, "{a:?} {b:?}");
        assert!(b.makespan.p90 > b.makespan.p10, "{b:?}");
        assert!(b.p_deadline.unwrap() < a.p_deadline.unwrap(), "{a:?} {b:?}");
    }

    #[test]
    fn a_hosts_past_spells_set_its_failures_after_the_first() {
        // Same curves (first failure after an hour on average); one pool's
        // past says a failure comes every ten minutes of use and keeps the
        // host away an hour, the other's that hosts come back at once and
        // then stay up for days.
        let spells = |usable_secs: f64, failing_secs: f64, episodes: u32| {
            let mut h = host(1.0, Some(3600.0));
            h.spells = Some(PastSpells {
                usable_secs,
                failing_secs,
                episodes,
            });
            h
        };
        let flaky = vec![spells(6_000.0, 36_000.0, 10); 2];
        let steady = vec![spells(600_000.0, 600.0, 10); 2];
        let run = |hosts: &[SurveyedHost]| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
            estimate_batch(hosts, &shape(4, None), 0, &mut rng).unwrap()
        };
        let (a, b) = (run(&flaky), run(&steady));
        assert!(a.makespan.p50 > 2.0 * b.makespan.p50, "{a:?} {b:?}");
    }

    #[test]
    fn a_hosts_spell_lengths_are_resampled_after_a_return() {
        // Two pools with the same week in sums (10 failures, 60 000 s up,
        // 36 000 s away: a mean outage of an hour) and the same up-spells
        // (nine of 10 min, one of 15 h); one pool's outages each last an
        // hour, the other's nine a minute and one ten hours. The estimate
        // draws the outages it was told of, not their mean.
        let with_outages = |outages: Vec<f64>| {
            let mut h = host(1.0, Some(3600.0));
            h.spells = Some(PastSpells {
                usable_secs: 60_000.0,
                failing_secs: 36_000.0,
                episodes: 10,
            });
            let mut up = vec![600.0; 9];
            up.push(54_600.0);
            h.spell_lengths = Some(SpellLengths {
                up,
                up_seen: 10,
                up_cut: vec![],
                outages_seen: outages.len() as u32,
                outages,
            });
            vec![h; 2]
        };
        let hourly = with_outages(vec![3_600.0; 10]);
        let mut brief = vec![60.0; 9];
        brief.push(35_460.0);
        let brief = with_outages(brief);
        let run = |hosts: &[SurveyedHost]| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
            estimate_batch(hosts, &shape(8, None), 0, &mut rng).unwrap()
        };
        let (a, b) = (run(&hourly), run(&brief));
        assert!(b.makespan.p50 < 0.8 * a.makespan.p50, "{a:?} {b:?}");
    }

    #[test]
    fn a_running_task_counts_its_work_done_and_no_hosts_is_an_error() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let hosts = vec![host(1.0, Some(1e12))];
        let mut s = shape(0, None);
        s.running = vec![RunningShape {
            task: 5,
            host: hosts[0].peer,
            elapsed_secs: 2700.0,
        }];
        s.waiting = vec![6];
        let e = estimate_batch(&hosts, &s, 0, &mut rng).unwrap();
        // Task 5 ends after the quarter hour it has left, task 6 an hour later.
        assert!((e.makespan.p50 - 4500.0).abs() < 1.0, "{e:?}");
        assert_eq!(e.tasks.len(), 2);
        assert_eq!(e.tasks[0].task, 5);
        assert!((e.tasks[0].end.p50 - 900.0).abs() < 1.0, "{e:?}");
        assert!((e.tasks[1].end.p50 - 4500.0).abs() < 1.0, "{e:?}");
        // A running task whose host did not answer waits again.
        let mut gone = s.clone();
        gone.running[0].host = PeerId::random();
        let e = estimate_batch(&hosts, &gone, 0, &mut rng).unwrap();
        assert!((e.tasks[0].end.p50 - 3600.0).abs() < 1.0, "{e:?}");
        assert!((e.tasks[1].end.p50 - 7200.0).abs() < 1.0, "{e:?}");
        assert_eq!(
            estimate_batch(&[], &s, 0, &mut rng),
            Err(BatchEstimateError::NoHosts)
        );
    }
}
