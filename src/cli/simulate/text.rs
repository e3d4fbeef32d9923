//! The text report of `gleaner simulate`: one line per policy, then the
//! verification, tail-copy, claim (issue 29), back-test, summary and
//! run-time lines. It formats a finished [`SimulateReport`] and knows
//! nothing of how it was made.

use super::SimulateReport;

fn hours(secs: f64) -> String {
    format!("{:.1} h", secs / 3600.0)
}

/// The text report: one line per policy.
pub(super) fn table(r: &SimulateReport) -> String {
    let w = r
        .policies
        .iter()
        .map(|p| p.label.chars().count())
        .max()
        .unwrap_or(0)
        .max(21);
    let mut out = format!(
        "{} hosts, {} tasks, seed {}, method {}\n{:<w$} {:>9} {:>9} {:>9} {:>17} {:>9} {:>7} {:>26}\n",
        r.hosts,
        r.tasks,
        r.seed,
        r.method,
        "policy",
        "makespan",
        "mean turn",
        "p90 turn",
        "kills/task S3/S4/S5",
        "wasted",
        "goodput",
        "estimate p10/p50/p90"
    );
    for p in &r.policies {
        let res = &p.result;
        let makespan = res
            .makespan_secs
            .map_or_else(|| format!("{} left", res.unfinished), hours);
        let estimate = res.estimate.map_or_else(
            || "-".to_string(),
            |e| {
                format!(
                    "{:.1}/{:.1}/{:.1} h",
                    e.p10 / 3600.0,
                    e.p50 / 3600.0,
                    e.p90 / 3600.0
                )
            },
        );
        out.push_str(&format!(
            "{:<w$} {:>9} {:>9} {:>9} {:>17} {:>9} {:>7.3} {:>26}\n",
            p.label,
            makespan,
            hours(res.mean_turnaround_secs),
            hours(res.p90_turnaround_secs),
            format!(
                "{:.2}/{:.2}/{:.2}",
                p.kills_per_task[0], p.kills_per_task[1], p.kills_per_task[2]
            ),
            hours(res.wasted_cpu_secs),
            res.goodput,
            estimate
        ));
    }
    if r.policies.iter().any(|p| p.verification.is_some()) {
        out.push_str(&format!(
            "verification {}: extra copies per accepted result, warm-up = first {} completions{}\n",
            r.verify,
            r.verify_warmup,
            if r.liars > 0 {
                format!("; {} liar(s)", r.liars)
            } else {
                String::new()
            }
        ));
        for p in &r.policies {
            let Some(v) = &p.verification else { continue };
            out.push_str(&format!(
                "{:<w$} warm-up {:>6.1} %  after {:>6.1} %  accepted {}  no quorum {}  wrong accepted {}  liars caught {}\n",
                p.label,
                v.warmup_overhead() * 100.0,
                v.after_overhead() * 100.0,
                v.accepted,
                v.no_quorum,
                v.wrong_accepted,
                v.liars_caught
            ));
        }
    }
    for p in r.policies.iter().filter(|p| p.result.tail_copies > 0) {
        let res = &p.result;
        out.push_str(&format!(
            "{:<w$} tail copies {}, {} finished first; extra CPU {:.1} h = {:.1} % of useful\n",
            p.label,
            res.tail_copies,
            res.tail_wins,
            res.tail_cpu_secs / 3600.0,
            100.0 * res.tail_cpu_secs / res.useful_cpu_secs.max(f64::MIN_POSITIVE)
        ));
    }
    for p in &r.policies {
        let Some(c) = &p.result.claims else { continue };
        let pct = |x: f64| format!("{:.1} %", 100.0 * x);
        let discount = |d: Option<f64>| d.map_or_else(|| "-".to_string(), |d| format!("{d:.2}"));
        out.push_str(&format!(
            "{:<w$} over-claimers {} of {}: CPU {}, tasks {}, attempts {}; kills on them {} of {} ({}); attempts killed {} (honest {}); discount {} (honest {}); excluded by record {} (honest {})\n",
            p.label,
            c.overclaimers,
            c.hosts,
            pct(c.cpu_share()),
            pct(c.task_share()),
            pct(c.attempt_share()),
            c.kills_over,
            c.kills,
            pct(c.kill_share()),
            pct(c.over_kill_rate()),
            pct(c.honest_kill_rate()),
            discount(c.discount_over),
            discount(c.discount_honest),
            c.excluded_over,
            c.excluded_honest
        ));
    }
    let widened: Vec<String> = r
        .policies
        .iter()
        .filter_map(|p| {
            let c = p.estimate_calibration.as_ref()?;
            Some(format!(
                "{} ×{:.2} ({} back-tests)",
                p.label,
                c.widening,
                c.misses.len()
            ))
        })
        .collect();
    if !widened.is_empty() {
        out.push_str(&format!(
            "estimate bands widened by back-tests on the pool's past: {}\n",
            widened.join(", ")
        ));
    }
    for p in &r.policies {
        let Some(probe) = &p.result.probe else {
            continue;
        };
        out.push_str(&format!(
            "{}: heartbeat {} s, {} of {} hosts cached; {} rounds asked {} hosts ({:.2} per task, at most {} a round); {} summaries published, {:.0} s old on average when ranked\n",
            p.label,
            r.summary_heartbeat_secs,
            probe.cached,
            r.hosts,
            probe.rounds,
            probe.asks,
            probe.asks as f64 / r.tasks.max(1) as f64,
            probe.max_round_asks,
            probe.publications,
            probe.mean_summary_age_secs
        ));
        if p.label.ends_with("[sample]") {
            out.push_str(&format!(
                "{}: at most {} hosts sampled at once, {} samples drawn, {} leaf digests fetched\n",
                p.label, probe.cached, probe.samples, probe.digests
            ));
        }
    }
    let times: Vec<String> = r
        .policies
        .iter()
        .map(|p| format!("{} {:.1} s", p.label, p.wall_secs))
        .collect();
    out.push_str(&format!("run time: {}\n", times.join(", ")));
    out.push_str(&format!(
        "wasted: reference CPU time lost to kills and checkpoints; {} TR curves computed, {} forecasts lacked history; setup {:.1} s",
        r.curves_computed, r.forecasts_failed, r.setup_secs
    ));
    out
}
