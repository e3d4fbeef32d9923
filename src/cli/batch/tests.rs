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
