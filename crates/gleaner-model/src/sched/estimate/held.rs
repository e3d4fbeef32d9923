//! Holds in the estimate (issue 28, scope 1): a waiting task the batch
//! queue holds for a host's later window (`sched::window`) is not placed by
//! the proactive rule in the estimate's runs either. It waits for its
//! window, starts there, and finishes with the window's P(finish), the
//! host's TR for that window; otherwise it falls back as the queue would.
//!
//! Owns the hold's input type and its checks; what a run does when a held
//! window comes is `Run::window` (in `run.rs`, so the run does not reach
//! back here for its own behaviour). Knows nothing of peers, clocks or the queue's rounds: the
//! caller passes the window's start as seconds from now and the host as an
//! index into the estimate's hosts.
//!
//! The rule, one run at a time:
//! - Before its window the task is in no queue: the queue keeps it back,
//!   and the held host takes other work meanwhile like any host (a start
//!   now is always offered, `WindowRule::kept`).
//! - When the window comes and one of the batch's own attempts runs on the
//!   host, the hold lapses (the queue's "busy when its window came") and
//!   the task joins the head of the waiting queue, weighed like any other.
//! - Otherwise the task starts there, wherever the run had the host
//!   (idle, away after a failure, or busy with its owner's work): the
//!   window's P is the host's own forecast for it, which already weighs
//!   whether the host is there then, so the run's guesses about the host
//!   now give way to it. With chance P the attempt ends unhit and the host's
//!   next failure is drawn afresh from after it, as after a return; else
//!   it is hit at a uniform point of its run (the forecast says whether,
//!   not when) and goes back to the queue as a killed task does.

use serde::{Deserialize, Serialize};

use super::EstimateError;

/// A waiting task held for a later window on one host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeldWindow {
    /// Index into [`super::EstimateInput::waiting`].
    pub waiting: usize,
    /// Index into [`super::EstimateInput::hosts`].
    pub host: usize,
    /// Wall seconds from now until the window opens (0: it is open).
    pub start_secs: f64,
    /// The chance the task finishes in that window: the host's TR for a
    /// window of the task's run starting then, as the hold was made with.
    pub p: f64,
}

/// A hold checked against the input: the task's index among all tasks
/// (the running ones first), its host, when and how likely.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Hold {
    pub(super) task: usize,
    pub(super) host: usize,
    pub(super) start: f64,
    pub(super) p: f64,
}

/// The holds of an input, each naming a waiting task at most once and a
/// known host, with a finite start and a chance in [0, 1].
pub(super) fn checked(
    held: &[HeldWindow],
    n_running: usize,
    n_waiting: usize,
    n_hosts: usize,
) -> Result<Vec<Hold>, EstimateError> {
    let mut seen = vec![false; n_waiting];
    let mut holds = Vec::with_capacity(held.len());
    for (i, h) in held.iter().enumerate() {
        let bad = |why: &'static str| EstimateError::BadHold { hold: i, why };
        if h.waiting >= n_waiting {
            return Err(bad("it names no waiting task"));
        }
        if std::mem::replace(&mut seen[h.waiting], true) {
            return Err(bad("its task is held twice"));
        }
        if h.host >= n_hosts {
            return Err(bad("it names no host"));
        }
        if !(h.start_secs.is_finite() && h.start_secs >= 0.0) {
            return Err(bad("its start is not a finite time from now"));
        }
        if !(0.0..=1.0).contains(&h.p) {
            return Err(bad("its chance is not between 0 and 1"));
        }
        holds.push(Hold {
            task: n_running + h.waiting,
            host: h.host,
            start: h.start_secs,
            p: h.p,
        });
    }
    Ok(holds)
}

#[cfg(test)]
mod tests {
    use super::super::{estimate, EstimateHost, EstimateInput, Quantiles};
    use super::*;
    use crate::sched::curve::TrCurve;
    use crate::sched::place::HostView;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const HOUR: f64 = 3600.0;

    fn host(curve: TrCurve, busy_secs: f64) -> EstimateHost {
        EstimateHost {
            view: HostView {
                power: 1.0,
                availability: 1.0,
                curve,
            },
            busy_secs,
            recovery_secs: 600.0,
            down_secs: 0.0,
            past: None,
            checkpoint_secs: 0.0,
            checkpoint_cost_secs: 0.0,
            spells: None,
            days: None,
        }
    }

    /// A host whose present makes a run of hours hopeless: TR(1 s) ≈ 0.
    fn hopeless(busy_secs: f64) -> EstimateHost {
        host(TrCurve::new([(1.0, 1e-300)]), busy_secs)
    }

    fn run(hosts: &[EstimateHost], held: &[HeldWindow], runs: usize) -> (Quantiles, usize) {
        let input = EstimateInput {
            hosts,
            waiting: &[9.0 * HOUR],
            held,
            runs,
            ..EstimateInput::default()
        };
        let (e, _) = estimate(&input, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
        (e.task_eta[0], e.unfinished_runs)
    }

    /// The case `batch status` met: a 9 h task no host can finish now,
    /// held for host B's window two hours on with P 0.75. Without the hold
    /// every run gives up on it ("not foreseen"); with it, three runs in
    /// four end it at the window's start plus its run, and the rest fall
    /// back to the queue, where (these hosts' present being hopeless) the
    /// run never ends.
    #[test]
    fn a_held_task_ends_in_its_window_with_the_windows_chance() {
        let hosts = [hopeless(0.0), hopeless(5.0 * HOUR)];
        let (none, unfinished) = run(&hosts, &[], 400);
        assert_eq!(unfinished, 400);
        assert!(none.p10.is_infinite(), "{none:?}");
        let held = [HeldWindow {
            waiting: 0,
            host: 1,
            start_secs: 2.0 * HOUR,
            p: 0.75,
        }];
        let (eta, unfinished) = run(&hosts, &held, 400);
        let end = 11.0 * HOUR;
        assert!((eta.p10 - end).abs() < 1.0, "{eta:?}");
        assert!((eta.p50 - end).abs() < 1.0, "{eta:?}");
        // The 90th percentile lies among the runs the window failed.
        assert!(eta.p90.is_infinite(), "{eta:?}");
        let share = 1.0 - unfinished as f64 / 400.0;
        assert!((share - 0.75).abs() < 0.06, "{share} ended, {unfinished}");
    }

    /// When the window fails, the task goes back to the queue and the
    /// pool finishes it: here a safe host free from ten hours on.
    #[test]
    fn a_failed_window_falls_back_to_the_queue() {
        let hosts = [host(TrCurve::never_fails(), 10.0 * HOUR), hopeless(0.0)];
        let held = [HeldWindow {
            waiting: 0,
            host: 1,
            start_secs: HOUR,
            p: 0.0,
        }];
        let (eta, unfinished) = run(&hosts, &held, 50);
        assert_eq!(unfinished, 0);
        // Hit somewhere in the window's run (ends by 10 h), then the safe
        // host takes it when it is free at 10 h: 19 h, every run.
        assert!((eta.p10 - 19.0 * HOUR).abs() < 1.0, "{eta:?}");
        assert!((eta.p90 - 19.0 * HOUR).abs() < 1.0, "{eta:?}");
        // A sure window beats waiting for the safe host: 1 h + 9 h.
        let sure = [HeldWindow { p: 1.0, ..held[0] }];
        let (eta, _) = run(&hosts, &sure, 50);
        assert!((eta.p90 - 10.0 * HOUR).abs() < 1.0, "{eta:?}");
    }

    /// A window that comes while one of the batch's own tasks runs on its
    /// host lapses: the held task is placed by the rule as usual.
    #[test]
    fn a_window_on_a_host_our_task_holds_lapses() {
        let hosts = [host(TrCurve::never_fails(), 0.0)];
        let input = EstimateInput {
            hosts: &hosts,
            waiting: &[4.0 * HOUR, 2.0 * HOUR],
            held: &[HeldWindow {
                waiting: 1,
                host: 0,
                start_secs: HOUR,
                p: 1.0,
            }],
            runs: 5,
            ..EstimateInput::default()
        };
        let (e, _) = estimate(&input, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
        // The 4 h task runs from 0; the held one's window at 1 h finds
        // the host ours, so it waits in the queue and runs from 4 h.
        assert!((e.task_eta[0].p50 - 4.0 * HOUR).abs() < 1.0, "{e:?}");
        assert!((e.task_eta[1].p50 - 6.0 * HOUR).abs() < 1.0, "{e:?}");
    }

    #[test]
    fn bad_holds_are_refused_by_name() {
        let hosts = [hopeless(0.0)];
        let good = HeldWindow {
            waiting: 0,
            host: 0,
            start_secs: HOUR,
            p: 0.5,
        };
        for (held, why) in [
            (vec![HeldWindow { waiting: 1, ..good }], "no waiting task"),
            (vec![good, good], "held twice"),
            (vec![HeldWindow { host: 1, ..good }], "no host"),
            (
                vec![HeldWindow {
                    start_secs: f64::NAN,
                    ..good
                }],
                "finite",
            ),
            (vec![HeldWindow { p: 1.5, ..good }], "between 0 and 1"),
        ] {
            let input = EstimateInput {
                hosts: &hosts,
                waiting: &[HOUR],
                held: &held,
                runs: 1,
                ..EstimateInput::default()
            };
            let err = estimate(&input, &mut ChaCha8Rng::seed_from_u64(1)).unwrap_err();
            assert!(err.to_string().contains(why), "{err} for {held:?}");
        }
    }
}
