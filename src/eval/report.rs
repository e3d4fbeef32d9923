//! The evaluation's result as one serializable value, and its markdown form.
//!
//! Everything outside `timing` is a pure function of the inputs and the
//! seed, so two runs give identical JSON and markdown apart from the
//! `timing` key and the "Timing" section. This module formats; it neither
//! runs methods nor reads files.

use crate::eval::experiments::{CostPoint, NoiseConfig, NoiseResult, TrainingSizeResult};
use crate::eval::goals::{to_compare_table, to_table, Goals};
use crate::eval::metrics::Interval;
use crate::eval::protocol::ProtocolConfig;
use crate::eval::summary::Scores;
pub use crate::human::length_label;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One input trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceInfo {
    pub path: String,
    pub host: Option<String>,
    pub tz: String,
    pub step_s: u32,
    pub rows: usize,
    /// Local dates the record touches.
    pub days: usize,
    pub test_days: usize,
    /// Tested windows (each counted once per length).
    pub cases: usize,
    /// Rows that repeated the previous row's time; the later one was kept.
    pub replaced_rows: usize,
}

/// Time spent per method in the main protocol.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodTiming {
    pub calls: usize,
    pub total_ms: f64,
    pub mean_us: f64,
}

/// Everything that changes from run to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    pub note: String,
    pub wall_s: f64,
    /// Seconds spent in each phase: loading, protocol, scoring, experiments.
    pub phases_s: BTreeMap<String, f64>,
    pub threads: usize,
    pub per_method: BTreeMap<String, MethodTiming>,
    /// The cost experiment (Fig. 4), when run.
    pub cost: Option<Vec<CostPoint>>,
}

/// The whole evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    pub default_method: String,
    /// The command line that produced this report.
    pub command: String,
    pub seed: u64,
    pub config: ProtocolConfig,
    pub traces: Vec<TraceInfo>,
    #[serde(flatten)]
    pub scores: Scores,
    /// Issue 29's goals for the default method, when it ran.
    pub goals: Option<Goals>,
    /// The same goals for the methods of `--goals-for`, each as if it were
    /// the default (empty when not asked).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub goals_for: Vec<Goals>,
    /// N → method → length (s) → scores (Fig. 6), when run.
    pub training_size: Option<TrainingSizeResult>,
    pub noise_config: Option<NoiseConfig>,
    /// k failures → method → length (s) → discrepancy (Fig. 8), when run.
    pub noise: Option<NoiseResult>,
    /// Not reproducible: wall-clock times.
    pub timing: Timing,
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{:.1} %", v * 100.0))
}

fn ci(v: Option<Interval>, digits: usize) -> String {
    v.map_or_else(String::new, |i| {
        format!(" [{:.digits$}, {:.digits$}]", i.lo, i.hi)
    })
}

fn pct_ci(v: Option<Interval>) -> String {
    v.map_or_else(String::new, |i| {
        format!(" [{:.1}, {:.1}]", i.lo * 100.0, i.hi * 100.0)
    })
}

/// The markdown report: per-length tables, per-hour tables, reliability
/// tables, the experiments, then the timing section.
pub fn to_markdown(r: &EvalReport) -> String {
    let mut md = String::new();
    let s = &r.scores;
    let _ = writeln!(md, "# Gleaner evaluation\n");
    let _ = writeln!(md, "Produced by:\n\n```\n{}\n```\n", r.command);
    let c = &r.config;
    let lengths: Vec<String> = c.lengths.iter().map(|&l| length_label(l)).collect();
    let _ = writeln!(
        md,
        "Protocol: rolling origin. Each test day D (the later {:.0} % of the days of each kind), start hour h \
         (local) and length T give a window W = D h:00; it is tested when [W, W+T] is in the record and \
         the state at W is S1 or S2. Every method predicts from the {} most recent same-kind days before D; \
         the outcome is 1 when no S3/S4/S5 is entered in (W, W+T] on the step grid.\n",
        (1.0 - c.test_from) * 100.0,
        c.days
    );
    if let Some(k) = c.record_days {
        let _ = writeln!(
            md,
            "**Young host:** on each test day the methods see only the record's last {k} local day(s) \
             before it, as a host that joined then; the tested windows and outcomes are those of the whole record.\n"
        );
    }
    if c.lead_secs > 0 {
        let _ = writeln!(
            md,
            "**Windows that start later:** each window is forecast {} before W, from the record cut there \
             (the methods see nothing after W − {}); every window in the record is tested whatever its start \
             state, and one starting in S3/S4/S5 counts as failed.\n",
            length_label(c.lead_secs),
            length_label(c.lead_secs)
        );
    }
    let _ = writeln!(
        md,
        "- lengths: {}; hours: {}; kinds: {:?}; step: {}; job memory: {} MiB; th1 {} %, th2 {} %, sustain {} s\n\
         - seed {}; {} bootstrap resamples over {} test days (95 % percentile intervals in brackets); \
         log loss clips p to [{}, 1 − {}]\n\
         - Brier skill is against {}; accuracy is the papers' 1 − |mean p − empirical TR| / empirical TR per \
         (trace, day kind, hour) group, averaged over groups (worst = lowest group); groups whose empirical TR \
         is 0 are left out and counted\n\
         - windows left out because some method refused them: {}\n",
        lengths.join(", "),
        hours_label(&c.hours),
        c.kind,
        c.step_secs.map_or_else(|| "each trace's own".to_string(), |d| format!("{d} s")),
        c.thresholds.job_mem_mib,
        c.thresholds.th1,
        c.thresholds.th2,
        c.thresholds.sustain_secs,
        r.seed,
        s.bootstrap_resamples,
        s.test_days,
        s.log_loss_clip,
        s.log_loss_clip,
        s.skill_reference,
        s.dropped_cases,
    );
    traces_table(&mut md, r);
    if let Some(goals) = &r.goals {
        let _ = writeln!(md, "## Goals\n\n{}", to_table(goals));
    }
    if !r.goals_for.is_empty() {
        let _ = writeln!(
            md,
            "## The same goals for other methods\n\n{}",
            to_compare_table(&r.goals_for)
        );
    }
    let _ = writeln!(md, "## Scores by window length\n");
    for &len in &c.lengths {
        length_table(&mut md, r, len);
    }
    let _ = writeln!(md, "## Accuracy and Brier score by start hour\n");
    for &len in &c.lengths {
        hour_table(&mut md, r, len);
    }
    let _ = writeln!(md, "## Reliability (all lengths pooled)\n");
    for name in &s.method_order {
        reliability_table(&mut md, r, name);
    }
    if let Some(sizes) = &r.training_size {
        training_size_tables(&mut md, r, sizes);
    }
    if let (Some(noise), Some(nc)) = (&r.noise, &r.noise_config) {
        noise_tables(&mut md, r, noise, nc);
    }
    timing_section(&mut md, &r.timing);
    md
}

fn hours_label(hours: &[u8]) -> String {
    let contiguous = hours.windows(2).all(|w| w[1] == w[0] + 1);
    match (hours.first(), hours.last()) {
        (Some(a), Some(b)) if contiguous && hours.len() > 2 => format!("{a}-{b}"),
        _ => hours
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>()
            .join(","),
    }
}

fn traces_table(md: &mut String, r: &EvalReport) {
    let _ = writeln!(md, "## Traces\n");
    let _ = writeln!(md, "| trace | host | time zone | step | rows | days | test days | windows | repeated-time rows |");
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|---:|");
    for t in &r.traces {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} s | {} | {} | {} | {} | {} |",
            t.path,
            t.host.as_deref().unwrap_or("–"),
            t.tz,
            t.step_s,
            t.rows,
            t.days,
            t.test_days,
            t.cases,
            t.replaced_rows
        );
    }
    let _ = writeln!(md);
}

fn length_table(md: &mut String, r: &EvalReport, len: u64) {
    let s = &r.scores;
    let _ = writeln!(md, "### T = {}\n", length_label(len));
    let _ = writeln!(
        md,
        "| method | n | mean p | empirical TR | accuracy mean | accuracy worst | groups (excluded) | Brier | Brier skill | log loss | ECE | Brier − {} (paired) |",
        s.paired_with.as_deref().unwrap_or("default")
    );
    let _ = writeln!(
        md,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for name in &s.method_order {
        let Some(l) = s.methods.get(name).and_then(|m| m.by_length.get(&len)) else {
            continue;
        };
        let marker = if *name == r.default_method {
            " (default)"
        } else {
            ""
        };
        let _ = writeln!(
            md,
            "| {name}{marker} | {} | {} | {} | {}{} | {} | {} ({}) | {}{} | {}{} | {}{} | {} | {}{} |",
            l.n,
            num(l.mean_prediction, 3),
            num(l.empirical_tr, 3),
            pct(l.accuracy_mean),
            pct_ci(l.accuracy_mean_ci),
            pct(l.accuracy_worst),
            l.groups,
            l.groups_excluded,
            num(l.brier, 4),
            ci(l.brier_ci, 4),
            num(l.brier_skill, 3),
            ci(l.brier_skill_ci, 3),
            num(l.log_loss, 4),
            ci(l.log_loss_ci, 4),
            num(l.ece, 4),
            num(l.brier_minus_default.map(|d| d.mean), 4),
            ci(l.brier_minus_default.and_then(|d| d.ci), 4),
        );
    }
    let _ = writeln!(md);
}

fn hour_table(md: &mut String, r: &EvalReport, len: u64) {
    let s = &r.scores;
    let _ = writeln!(
        md,
        "### T = {} (accuracy mean / Brier per method)\n",
        length_label(len)
    );
    let mut header = "| hour | n | empirical TR |".to_string();
    let mut rule = "|---:|---:|---:|".to_string();
    for name in &s.method_order {
        header.push_str(&format!(" {name} |"));
        rule.push_str("---:|");
    }
    let _ = writeln!(md, "{header}\n{rule}");
    for &hour in &r.config.hours {
        let first = s
            .method_order
            .first()
            .and_then(|n| s.methods.get(n)?.by_length.get(&len)?.by_hour.get(&hour));
        let Some(first) = first else { continue };
        let mut line = format!(
            "| {hour:02}:00 | {} | {} |",
            first.n,
            num(first.empirical_tr, 3)
        );
        for name in &s.method_order {
            let h = s
                .methods
                .get(name)
                .and_then(|m| m.by_length.get(&len)?.by_hour.get(&hour));
            match h {
                Some(h) => line.push_str(&format!(
                    " {} / {} |",
                    pct(h.accuracy_mean),
                    num(h.brier, 4)
                )),
                None => line.push_str(" – |"),
            }
        }
        let _ = writeln!(md, "{line}");
    }
    let _ = writeln!(md);
}

fn reliability_table(md: &mut String, r: &EvalReport, name: &str) {
    let Some(m) = r.scores.methods.get(name) else {
        return;
    };
    let o = &m.overall;
    let _ = writeln!(
        md,
        "### {name}: n = {}, Brier {}, log loss {}, ECE {}\n",
        o.n,
        num(o.brier, 4),
        num(o.log_loss, 4),
        num(o.ece, 4)
    );
    let _ = writeln!(md, "| predicted TR | n | mean p | observed survival |");
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for b in &o.reliability {
        let _ = writeln!(
            md,
            "| {:.1}–{:.1} | {} | {} | {} |",
            b.lo,
            b.hi,
            b.n,
            num(b.mean_prediction, 3),
            num(b.observed, 3)
        );
    }
    if !m.refused.is_empty() {
        let refused: Vec<String> = m.refused.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(md, "\nRefused forecasts: {}", refused.join(", "));
    }
    let _ = writeln!(md);
}

fn training_size_tables(md: &mut String, r: &EvalReport, sizes: &TrainingSizeResult) {
    let _ = writeln!(
        md,
        "## Training size (papers' Fig. 6)\n\nThe protocol rerun with N history days; accuracy mean / worst and Brier per length.\n"
    );
    for name in &r.scores.method_order {
        let _ = writeln!(md, "### {name}\n");
        let mut header = "| N |".to_string();
        let mut rule = "|---:|".to_string();
        for &len in &r.config.lengths {
            header.push_str(&format!(" T = {} |", length_label(len)));
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{header} max-average error |\n{rule}---:|");
        for (n, methods) in sizes {
            let Some(by_len) = methods.get(name) else {
                continue;
            };
            let mut line = format!("| {n} |");
            let mut worst_mean: Option<f64> = None;
            for len in &r.config.lengths {
                match by_len.get(len) {
                    Some(s) => {
                        line.push_str(&format!(
                            " {} / {} / {} |",
                            pct(s.accuracy_mean),
                            pct(s.accuracy_worst),
                            num(s.brier, 4)
                        ));
                        if let Some(a) = s.accuracy_mean {
                            worst_mean = Some(worst_mean.map_or(a, |w| w.min(a)));
                        }
                    }
                    None => line.push_str(" – |"),
                }
            }
            let _ = writeln!(md, "{line} {} |", pct(worst_mean.map(|a| 1.0 - a)));
        }
        let _ = writeln!(md);
    }
}

fn noise_tables(md: &mut String, r: &EvalReport, noise: &NoiseResult, nc: &NoiseConfig) {
    let _ = writeln!(
        md,
        "## Noise robustness (papers' Fig. 8)\n\nPer trace, windows start at {:02}:00 on the first test weekday; k down periods \
         of {}–{} s starting in the hour after {:02}:00 are injected into one randomly drawn history day \
         ({} trials per k). Cells: mean |TR_noisy − TR_clean| (mean relative discrepancy).\n",
        nc.hour, nc.hold_secs.0, nc.hold_secs.1, nc.hour, nc.trials
    );
    for name in &r.scores.method_order {
        let _ = writeln!(md, "### {name}\n");
        let mut header = "| k |".to_string();
        let mut rule = "|---:|".to_string();
        for &len in &r.config.lengths {
            header.push_str(&format!(" T = {} |", length_label(len)));
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{header}\n{rule}");
        for (k, methods) in noise {
            let Some(by_len) = methods.get(name) else {
                continue;
            };
            let mut line = format!("| {k} |");
            for len in &r.config.lengths {
                match by_len.get(len) {
                    Some(d) => {
                        line.push_str(&format!(" {:.4} ({}) |", d.mean_abs, pct(d.mean_rel)))
                    }
                    None => line.push_str(" – |"),
                }
            }
            let _ = writeln!(md, "{line}");
        }
        let _ = writeln!(md);
    }
}

fn timing_section(md: &mut String, t: &Timing) {
    let _ = writeln!(md, "## Timing (varies between runs)\n");
    let _ = writeln!(md, "{}\n", t.note);
    let phases: Vec<String> = t
        .phases_s
        .iter()
        .map(|(k, v)| format!("{k} {v:.1} s"))
        .collect();
    let _ = writeln!(
        md,
        "Wall time {:.1} s on {} threads ({}).\n",
        t.wall_s,
        t.threads,
        phases.join(", ")
    );
    let _ = writeln!(md, "| method | calls | total | mean per call |");
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for (name, m) in &t.per_method {
        let _ = writeln!(
            md,
            "| {name} | {} | {:.0} ms | {:.0} µs |",
            m.calls, m.total_ms, m.mean_us
        );
    }
    let _ = writeln!(md);
    if let Some(cost) = &t.cost {
        let _ = writeln!(md, "### Cost of a `km` prediction (papers' Fig. 4)\n");
        let _ = writeln!(md, "| T | step | steps m | samples | estimate Q, H (median) | total (median) | total (max) |");
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
        for p in cost {
            let _ = writeln!(
                md,
                "| {} | {} s | {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
                length_label(p.window_secs),
                p.step_secs,
                p.steps,
                p.samples,
                p.estimate_ms_median,
                p.total_ms_median,
                p.total_ms_max
            );
        }
        let _ = writeln!(md);
    }
}

/// The report's text with the timing section cut off: what two runs with the
/// same inputs and seed must agree on.
pub fn reproducible_part(markdown: &str) -> &str {
    markdown
        .find("## Timing (varies between runs)")
        .map_or(markdown, |i| &markdown[..i])
}
