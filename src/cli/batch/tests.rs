//! Unit tests of `gleaner batch`'s argument parsing.

use super::*;

#[test]
fn ranges_parse_and_refuse_nonsense() {
    assert_eq!(parse_range("0..100"), Ok((0, 100)));
    assert_eq!(parse_range("-5..5"), Ok((-5, 5)));
    for bad in ["5..5", "3..1", "a..b", "10", "1..x"] {
        assert!(parse_range(bad).is_err(), "{bad}");
    }
}

#[test]
fn batch_status_says_what_placement_ranks_from_while_tasks_wait() {
    use crate::control::api::{BatchReport, TaskCounts, VerificationReport};
    let mut report = BatchReport {
        id: crate::model::ids::BatchId::new(7),
        name: None,
        created_unix: 0,
        counts: TaskCounts {
            queued: 3,
            running: 0,
            done: 0,
            failed: 0,
            cancelled: 0,
        },
        tasks: Vec::new(),
        eta_unix: None,
        results_dir: "/r".into(),
        output_dir: None,
        cancelled: false,
        policy: "tr".into(),
        deadline_unix: None,
        verification: VerificationReport::default(),
        estimate: None,
        contact: None,
        summary_cache: Some(Box::new(crate::net::SummaryCache {
            members: 40,
            summarised: 38,
            newest_secs: Some(2.0),
            median_secs: Some(95.0),
            oldest_secs: Some(310.0),
        })),
    };
    let text = show::status_text(&report);
    assert!(
        text.contains(
            "pool: 38 members known from summaries, 2 from an announcement only, heard 2s to 5m 10s ago (median 1m 35s)"
        ),
        "{text}"
    );
    // Nothing waits: the pool is not what the batch is waiting for.
    report.counts.queued = 0;
    report.counts.running = 3;
    assert!(!show::status_text(&report).contains("known from summaries"));
}

#[test]
fn batch_status_of_a_held_task_says_what_it_waits_for_and_no_end_foreseen() {
    use crate::control::api::{
        BatchReport, EstimateReport, HoldReport, TaskCounts, TaskEtaReport, TaskReport,
        VerificationReport,
    };
    let hold = HoldReport {
        host: "12D3KooWHeldHostB".into(),
        start_unix: 1_700_007_200,
        p: 0.75,
    };
    let report = BatchReport {
        id: crate::model::ids::BatchId::new(3),
        name: None,
        created_unix: 0,
        counts: TaskCounts {
            queued: 1,
            running: 0,
            done: 0,
            failed: 0,
            cancelled: 0,
        },
        tasks: vec![TaskReport {
            task: 0,
            state: "queued".into(),
            host: None,
            attempts: 0,
            exit_status: None,
            started_unix: None,
            ended_unix: None,
            reason: None,
            event: None,
            cpu_secs: None,
            checkpoint_bytes: None,
            copies: Vec::new(),
            owner_kills: 0,
            host_failures: 0,
            waiting_for: Some(hold.clone()),
        }],
        eta_unix: None,
        results_dir: "/r".into(),
        output_dir: None,
        cancelled: false,
        policy: "proactive".into(),
        deadline_unix: None,
        verification: VerificationReport::default(),
        estimate: Some(EstimateReport {
            at_unix: 0,
            makespan_p10_secs: Some(40_000.0),
            makespan_p50_secs: None,
            makespan_p90_secs: None,
            makespan_mean_secs: None,
            p_deadline: None,
            deadline_unix: None,
            hosts: 2,
            runs: 200,
            unfinished_runs: 150,
            tasks: vec![TaskEtaReport {
                task: 0,
                end_p10_secs: Some(40_000.0),
                end_p50_secs: None,
                end_p90_secs: None,
            }],
        }),
        contact: None,
        summary_cache: None,
    };
    let text = show::status_text(&report);
    let waits = format!(
        "waiting for host {}'s window at {} (P 0.75)",
        show::short(&hold.host),
        crate::cli::control::clock_time(hold.start_unix)
    );
    assert!(text.contains(&waits), "{text}");
    assert!(
        text.contains("estimated end: not foreseen (10 % chance by 11h 6m 40s, 90 % not foreseen)"),
        "{text}"
    );
    assert!(text.contains("150 of 200 runs never ended"), "{text}");
    // No duration of an infinity cast to seconds.
    assert!(!text.contains(&crate::human::duration(u64::MAX)), "{text}");
}

/// `batch status` of a task held for a host's later window gives its end
/// from the window: host A is free but hopeless for the task, host B is
/// taken by its owner now (S3) and holds the task's window two hours on
/// with P 0.75. The estimate is the consumer's (`estimate_batch`) and the
/// report the control API's, as `batch status` gets them. Before, the
/// estimate ignored the hold (B, failing now, was not even weighed), every
/// run gave up on the task, and the text said "not foreseen".
#[test]
fn batch_status_of_a_held_task_gives_its_end_from_the_window() {
    use crate::consumer::batch::estimate::{estimate_batch, BatchShape, HeldShape};
    use crate::consumer::survey::SurveyedHost;
    use crate::control::api::{BatchReport, TaskCounts, VerificationReport};
    use crate::control::batches::estimate_report;
    use crate::model::sched::TrCurve;
    use crate::model::state::State;
    use libp2p::PeerId;
    use rand::SeedableRng;
    let answered = |curve: TrCurve, state: State| SurveyedHost {
        answered: true,
        curve: Some(curve),
        power: Some(1.0),
        speed: Some(1.0),
        availability: Some(1.0),
        slot_free: Some(true),
        state: Some(state),
        ..SurveyedHost::new(PeerId::random())
    };
    // A: its owner is back within the second; B: quiet once its owner leaves.
    let a = answered(TrCurve::new([(1.0, 1e-300)]), State::S1);
    let b = answered(TrCurve::never_fails(), State::S3);
    let hold = HeldShape {
        task: 0,
        host: b.peer,
        start_in_secs: 7_200.0,
        p: 0.75,
    };
    let shape = BatchShape {
        runtime_secs: 9.0 * 3600.0,
        window_secs: 9 * 3600,
        running: Vec::new(),
        waiting: vec![0],
        deadline_in: None,
        checkpoint_cost_secs: None,
        runtime_sigma_log: None,
        holds: vec![hold],
    };
    let report_of = |shape: &BatchShape| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let e = estimate_batch(&[a.clone(), b.clone()], shape, 0, &mut rng).expect("an estimate");
        BatchReport {
            id: crate::model::ids::BatchId::new(3),
            name: None,
            created_unix: 0,
            counts: TaskCounts {
                queued: 1,
                running: 0,
                done: 0,
                failed: 0,
                cancelled: 0,
            },
            tasks: Vec::new(),
            eta_unix: None,
            results_dir: "/r".into(),
            output_dir: None,
            cancelled: false,
            policy: "proactive".into(),
            deadline_unix: None,
            verification: VerificationReport::default(),
            estimate: Some(estimate_report(&e, None)),
            contact: None,
            summary_cache: None,
        }
    };
    let held = report_of(&shape);
    let e = held.estimate.as_ref().expect("an estimate");
    // The window's start plus the 9 h run, in three runs of four.
    let end = 11.0 * 3600.0;
    assert!(
        e.makespan_p50_secs.is_some_and(|s| (s - end).abs() < 1.0),
        "{e:?}"
    );
    assert!(e.tasks[0]
        .end_p10_secs
        .is_some_and(|s| (s - end).abs() < 1.0));
    // The runs whose window failed fall back to the queue: B, back from
    // its owner's return, runs the task again (A never ends it).
    assert_eq!(e.unfinished_runs, 0, "{e:?}");
    assert!(
        e.makespan_p90_secs
            .is_some_and(|s| s > end + 600.0 && s <= 20.0 * 3600.0 + 600.0),
        "{e:?}"
    );
    let json = serde_json::to_string(&held).expect("serialises");
    assert!(json.contains("\"makespan_p50_secs\":39600.0"), "{json}");
    let text = show::status_text(&held);
    assert!(
        text.contains("estimated end: in 11h (10 % chance by 11h, 90 % by "),
        "{text}"
    );
    assert!(!text.contains("not foreseen"), "{text}");
    // Without the hold: what `batch status` said before.
    let unheld = report_of(&BatchShape {
        holds: Vec::new(),
        ..shape.clone()
    });
    let text = show::status_text(&unheld);
    assert!(text.contains("estimated end: not foreseen"), "{text}");
}
