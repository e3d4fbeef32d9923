//! `gleaner predict`: temporal reliability of a host, from a trace file
//! (`--trace`), from the running node, or from a stopped node's database.
//!
//! This module owns the prediction report and its sentence; the node builds
//! the same report through [`predict_report`], so the answer reads the same
//! whichever way it was computed.

use crate::cli::args::ThresholdArgs;
use crate::cli::args::{parse_duration, parse_time};
use crate::cli::output::{print_json, print_text};
use crate::history::trace::read_trace;
use crate::model::kernel::Method;
use crate::model::predict::{predict, InitialState, PredictRequest, Prediction, DEFAULT_DAYS};
use crate::model::state::State;
use anyhow::Context;
use clap::Args;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Host trace file (format v1) to learn from [default: this node's own history].
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// Window start: RFC 3339 or Unix seconds [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<i64>,

    /// Window length: seconds or with a unit (90m, 3h, 10h).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub window: u64,

    /// Job working set in MiB; less free memory than this is a failure (S4).
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub mem: u64,

    /// Number of past same-kind days (weekdays or weekend days) to learn from.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DAYS)]
    pub days: usize,

    /// Discretisation step in seconds [default: the trace's step].
    #[arg(long, value_name = "SECS")]
    pub step: Option<u32>,

    /// Kernel estimator: `km` (censoring-aware) or `paper` (the seed papers').
    #[arg(long, value_name = "METHOD", default_value = "km")]
    pub method: Method,

    /// Condition the first sojourn on how long the current state has lasted.
    #[arg(long)]
    pub age: bool,

    #[command(flatten)]
    pub thresholds: ThresholdArgs,
}

/// The JSON answer of `gleaner predict --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictReport {
    /// Probability that no failure hits a job in the window.
    pub tr: f64,
    /// State at the window start, or `unknown` when the record does not reach it.
    pub init_state: String,
    /// When `init_state` is unknown: the share of each state at the start of the history windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_distribution: Option<BTreeMap<String, f64>>,
    pub days_used: usize,
    /// Local dates of the history days, most recent first.
    pub history_days: Vec<String>,
    pub method: Method,
    pub window_s: u64,
    pub step_s: u32,
    pub steps: usize,
    /// Failure probability by cause.
    pub fail_by_cause: BTreeMap<String, f64>,
    /// Estimation plus solve, excluding loading the file.
    pub elapsed_us: u64,
    /// Window start, Unix seconds, and in the host's time zone.
    pub at: i64,
    pub at_local: String,
    pub host: Option<String>,
    pub mem_mib: u64,
    /// Runs of S1 and S2 the kernel was estimated from.
    pub runs: BTreeMap<String, usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_steps: Option<u32>,
    pub age_fallback: bool,
}

/// Runs `predict --trace FILE`; without `--trace` the caller asks the node.
pub fn run_on_trace(
    args: &PredictArgs,
    trace_path: &std::path::Path,
    json: bool,
) -> anyhow::Result<()> {
    let thresholds = args.thresholds.resolve(args.mem)?;
    let trace = read_trace(trace_path)?;
    if trace.replaced_rows > 0 {
        tracing::warn!(
            "{}: {} rows repeated the previous row's time; the later row was kept",
            trace_path.display(),
            trace.replaced_rows
        );
    }
    let at = match args.at {
        Some(at) => at,
        None => Timestamp::now().as_second(),
    };
    let request = PredictRequest {
        at,
        window_secs: args.window,
        step_secs: args.step,
        days: args.days,
        method: args.method,
        age: args.age,
        thresholds,
    };
    let report = predict_report(&trace.series, trace.header.host.clone(), &request)
        .with_context(|| format!("cannot predict from {}", trace_path.display()))?;
    print_report(&report, json)
}

/// Prints a report as JSON or as a sentence.
pub fn print_report(report: &PredictReport, json: bool) -> anyhow::Result<()> {
    if json {
        print_json(report)
    } else {
        print_text(&sentence(report))
    }
}

/// Predicts from `series` and builds the report, timing the estimation and solve.
pub fn predict_report(
    series: &crate::model::series::HostSeries,
    host: Option<String>,
    request: &PredictRequest,
) -> Result<PredictReport, crate::model::predict::PredictError> {
    let started = Instant::now();
    let prediction = predict(series, request)?;
    let elapsed_us = started.elapsed().as_micros() as u64;
    let at = request.at;
    let at_local = Timestamp::from_second(at)
        .map(|ts| {
            ts.to_zoned(series.tz.clone())
                .strftime("%Y-%m-%d %H:%M %Z")
                .to_string()
        })
        .unwrap_or_default();
    Ok(report(
        &prediction,
        at,
        at_local,
        host,
        request.thresholds.job_mem_mib,
        elapsed_us,
    ))
}

fn report(
    p: &Prediction,
    at: i64,
    at_local: String,
    host: Option<String>,
    mem_mib: u64,
    elapsed_us: u64,
) -> PredictReport {
    let fail_by_cause = State::FAILURES
        .iter()
        .zip(p.fail_by_cause)
        .map(|(s, v)| (s.label().to_string(), v))
        .collect();
    let (init_state, init_distribution) = match p.init {
        InitialState::Observed(s) => (s.label().to_string(), None),
        InitialState::FromHistory(shares) => (
            "unknown".to_string(),
            Some(
                State::ALL
                    .iter()
                    .map(|s| (s.label().to_string(), shares[s.index()]))
                    .collect(),
            ),
        ),
    };
    PredictReport {
        tr: p.tr,
        init_state,
        init_distribution,
        days_used: p.history_days.len(),
        history_days: p.history_days.iter().map(|d| d.to_string()).collect(),
        method: p.method,
        window_s: p.window_secs,
        step_s: p.step_secs,
        steps: p.steps,
        fail_by_cause,
        elapsed_us,
        at,
        at_local,
        host,
        mem_mib,
        runs: [("S1", p.runs[0]), ("S2", p.runs[1])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        age_steps: p.age_steps,
        age_fallback: p.age_fallback,
    }
}

/// "3h", "90m", "1h 30m", "45s".
pub fn human_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut parts = Vec::new();
    if h > 0 {
        parts.push(format!("{h}h"));
    }
    if m > 0 {
        parts.push(format!("{m}m"));
    }
    if s > 0 || parts.is_empty() {
        parts.push(format!("{s}s"));
    }
    parts.join(" ")
}

fn cause_phrase(cause: State) -> &'static str {
    match cause {
        State::S3 => "its owner's heavy CPU use",
        State::S4 => "its owner's memory use",
        _ => "being switched off or withheld",
    }
}

fn sentence(r: &PredictReport) -> String {
    let host = r.host.as_deref().unwrap_or("This host");
    let start = match r.init_state.parse::<State>() {
        Ok(s) => format!("it is {} at the start", s.describe()),
        Err(_) => "its state at the start is not yet known".to_string(),
    };
    let kind = if r
        .history_days
        .first()
        .and_then(|d| d.parse::<jiff::civil::Date>().ok())
        .is_some_and(|d| crate::model::predict::is_weekend(d.weekday()))
    {
        "weekend days"
    } else {
        "weekdays"
    };
    let mut text = format!(
        "{host}: {:.1} % chance that a guest job running {} from {} is not interrupted ({start}; learned from {} past {kind}).",
        r.tr * 100.0,
        human_duration(r.window_s),
        r.at_local,
        r.days_used,
    );
    let worst = State::FAILURES
        .iter()
        .filter_map(|s| r.fail_by_cause.get(s.label()).map(|v| (*s, *v)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((cause, risk)) = worst.filter(|(_, risk)| *risk > 0.0005) {
        text.push_str(&format!(
            " Biggest risk: {} ({:.1} %).",
            cause_phrase(cause),
            risk * 100.0
        ));
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(10_800), "3h");
        assert_eq!(human_duration(5400), "1h 30m");
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(0), "0s");
    }
}
