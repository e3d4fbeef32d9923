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
