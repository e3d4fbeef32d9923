//! What `gleaner batch` prints for people: a batch's status (counts,
//! estimate, verification, the task and copy tables), the list of batches,
//! the estimate with each task's expected end, and short peer ids.
//!
//! It only formats reports the node sent; it must not talk to the node or
//! decide an exit status.

use crate::cli::output::table;
use crate::control::api::{BatchReport, EstimateReport, TaskCounts};
use crate::human;

pub(super) fn counts_text(c: &TaskCounts) -> String {
    format!(
        "{} done, {} running, {} queued, {} failed, {} cancelled",
        c.done, c.running, c.queued, c.failed, c.cancelled
    )
}

/// What the text says where the estimate has no number: that share of its
/// runs never ended (a task killed on host after host).
const NOT_FORESEEN: &str = "not foreseen";

/// A duration of the estimate's, or [`NOT_FORESEEN`].
fn d(secs: Option<f64>) -> String {
    secs.map_or_else(
        || NOT_FORESEEN.to_string(),
        |s| human::duration(s.max(0.0).round() as u64),
    )
}

/// "in 3h 10m", or [`NOT_FORESEEN`].
pub(super) fn in_d(secs: Option<f64>) -> String {
    match secs {
        Some(_) => format!("in {}", d(secs)),
        None => d(secs),
    }
}

/// "by 3h 10m", or [`NOT_FORESEEN`].
fn by_d(secs: Option<f64>) -> String {
    match secs {
        Some(_) => format!("by {}", d(secs)),
        None => d(secs),
    }
}

/// The estimate as `batch estimate` and `batch status` print it.
pub(super) fn estimate_text(e: &EstimateReport) -> String {
    let mut text = format!(
        "estimated end: {} (10 % chance {}, 90 % {}), over {} host(s), {} runs\n",
        in_d(e.makespan_p50_secs),
        by_d(e.makespan_p10_secs),
        by_d(e.makespan_p90_secs),
        e.hosts,
        e.runs
    );
    if e.unfinished_runs > 0 {
        text.push_str(&format!(
            "{} of {} runs never ended: a task was killed on host after host (no host is likely to finish it as things stand now, nor in a window it is held for)\n",
            e.unfinished_runs, e.runs
        ));
    }
    if let (Some(p), Some(at)) = (e.p_deadline, e.deadline_unix) {
        text.push_str(&format!(
            "chance of ending by the deadline ({}): {:.0} %\n",
            unix_text(at),
            p * 100.0
        ));
    }
    text
}

/// Most tasks `batch estimate` lists one by one; past it, a summary line.
pub(super) const ETA_ROWS_MAX: usize = 20;

/// Each task's expected end, for `batch estimate` (`batch status` puts it
/// in its task table instead).
pub(super) fn task_etas_text(e: &EstimateReport) -> String {
    if e.tasks.len() > ETA_ROWS_MAX {
        // A median of none (never) is later than every number.
        let medians = e
            .tasks
            .iter()
            .map(|t| t.end_p50_secs.unwrap_or(f64::INFINITY));
        let first = medians.clone().fold(f64::INFINITY, f64::min);
        let last = medians.fold(0.0, f64::max);
        let finite = |x: f64| x.is_finite().then_some(x);
        return format!(
            "{} tasks end from {} to {} (medians); --json lists each task\n",
            e.tasks.len(),
            in_d(finite(first)),
            in_d(finite(last))
        );
    }
    let rows = e.tasks.iter().map(|t| {
        vec![
            t.task.to_string(),
            d(t.end_p50_secs),
            format!("{} .. {}", d(t.end_p10_secs), d(t.end_p90_secs)),
        ]
    });
    table(&["task", "ends in", "10 % .. 90 %"], rows, false)
}

pub(super) fn status_text(r: &BatchReport) -> String {
    let mut text = format!(
        "batch {}{}: {}\n",
        r.id,
        r.name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default(),
        counts_text(&r.counts)
    );
    if let Some(why) = r
        .contact
        .as_ref()
        .and_then(|c| c.alone_text(crate::cli::control::clock_time))
    {
        text.push_str(&format!("no host reachable: {why}\n"));
    }
    // What placement ranks from, while tasks wait for a host.
    if let Some(c) = r.summary_cache.as_ref().filter(|_| r.counts.queued > 0) {
        text.push_str(&format!("pool: {}\n", c.text(crate::human::duration)));
    }
    if let Some(eta) = r.eta_unix {
        text.push_str(&format!("expected end at this pace: {}\n", unix_text(eta)));
    }
    if let Some(e) = &r.estimate {
        text.push_str(&estimate_text(e));
    }
    if let Some(dir) = &r.output_dir {
        text.push_str(&format!("results: {}\n", dir.display()));
    }
    text.push_str(&verification_text(&r.verification));
    if !r.tasks.is_empty() {
        // Each task's expected end, from the estimate, for tasks not ended.
        let etas: std::collections::HashMap<u32, Option<f64>> = r
            .estimate
            .iter()
            .flat_map(|e| e.tasks.iter().map(|t| (t.task, t.end_p50_secs)))
            .collect();
        let rows = r.tasks.iter().map(|t| {
            vec![
                t.task.to_string(),
                t.state.clone(),
                t.host.as_deref().map(short).unwrap_or("-").to_string(),
                t.attempts.to_string(),
                format!("{}/{}", t.owner_kills, t.host_failures),
                t.exit_status.map_or("-".into(), |s| s.to_string()),
                etas.get(&t.task).map_or("-".into(), |secs| in_d(*secs)),
                match &t.waiting_for {
                    Some(w) => hold_text(w),
                    None => t.reason.clone().unwrap_or_default(),
                },
            ]
        });
        text.push_str(&table(
            &[
                "task",
                "state",
                "host",
                "attempts",
                "owner kills/failures",
                "exit",
                "ends",
                "note",
            ],
            rows,
            false,
        ));
        let copies: Vec<Vec<String>> = r
            .tasks
            .iter()
            .flat_map(|t| t.copies.iter().map(move |c| copy_row(t.task, c)))
            .collect();
        if !copies.is_empty() {
            text.push_str("copies:\n");
            text.push_str(&table(
                &["task", "host", "copy", "agreement", "digest"],
                copies,
                false,
            ));
        }
    }
    text
}

/// The batch's verification line: the mode and, when it verifies, K, Q
/// and the validator.
pub(super) fn verification_text(v: &crate::control::api::VerificationReport) -> String {
    match v.mode.as_str() {
        "none" => "verification: none (results taken as they come)\n".into(),
        "adaptive" => format!(
            "verification: adaptive (2 copies until a host is trusted, then spot checks){}\n",
            v.validator
                .as_deref()
                .map(|c| format!(", validator {c}"))
                .unwrap_or_default()
        ),
        mode => format!(
            "verification: {mode}, {} copies, quorum {}{}\n",
            v.replicas,
            v.quorum,
            v.validator
                .as_deref()
                .map(|c| format!(", validator {c}"))
                .unwrap_or_default()
        ),
    }
}

pub(super) fn copy_row(task: u32, c: &crate::control::api::CopyReport) -> Vec<String> {
    let agreement = match (c.agrees, c.group) {
        (Some(true), _) => "agrees".to_string(),
        (Some(false), _) => "differs".to_string(),
        (None, Some(g)) => format!("group {g}"),
        (None, None) => "-".to_string(),
    };
    vec![
        task.to_string(),
        short(&c.host).to_string(),
        c.state.clone(),
        agreement,
        c.digest
            .as_deref()
            .map(|d| d.get(..12).unwrap_or(d).to_string())
            .unwrap_or_else(|| "-".into()),
    ]
}

pub(super) fn list_table(list: &[BatchReport]) -> String {
    if list.is_empty() {
        return "no batches on this node\n".into();
    }
    let rows = list.iter().map(|b| {
        vec![
            b.id.to_string(),
            b.name.clone().unwrap_or_default(),
            unix_text(b.created_unix),
            b.counts.done.to_string(),
            b.counts.running.to_string(),
            b.counts.queued.to_string(),
            b.counts.failed.to_string(),
            b.counts.cancelled.to_string(),
        ]
    });
    table(
        &[
            "batch",
            "name",
            "created",
            "done",
            "running",
            "queued",
            "failed",
            "cancelled",
        ],
        rows,
        false,
    )
}

pub(super) fn unix_text(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| secs.to_string())
}

/// The last characters of a peer id: enough to tell hosts apart.
/// A held task's note: "waiting for host X's window at 19:00:00 (P 0.83)".
pub(super) fn hold_text(w: &crate::control::api::HoldReport) -> String {
    format!(
        "waiting for host {}'s window at {} (P {:.2})",
        short(&w.host),
        crate::cli::control::clock_time(w.start_unix),
        w.p
    )
}

pub fn short(peer: &str) -> &str {
    let start = peer.len().saturating_sub(8);
    peer.get(start..).unwrap_or(peer)
}
