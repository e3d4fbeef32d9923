//! `gleaner predict`: temporal reliability of a host, from a trace file
//! (`--trace`), from the running node, or from a stopped node's database.
//!
//! This module owns the prediction report and its sentence; the node builds
//! the same report through [`predict_report`], so the answer reads the same
//! whichever way it was computed. Any method of the registry
//! (`model::baselines::method_by_name`) can answer; unless told otherwise it
//! is [`DEFAULT_METHOD`].

use crate::cli::args::ThresholdArgs;
use crate::cli::args::{parse_duration, parse_time};
use crate::cli::output::{print_json, print_text};
use crate::history::trace::read_trace;
use crate::model::baselines::{method_by_name, method_names, DEFAULT_METHOD};
use crate::model::kernel::Method;
use crate::model::predict::{
    estimate_window, predict, InitialState, PredictError, PredictRequest, Prediction, DEFAULT_DAYS,
};
use crate::model::series::HostSeries;
use crate::model::state::State;
use anyhow::Context;
use clap::Args;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Seed of the methods that simulate (the `-prob` time-series methods):
/// fixed, so the same history and request always give the same answer.
pub const PREDICT_SEED: u64 = 1;

#[derive(Debug, Args)]
pub struct PredictArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
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

    #[arg(long, value_name = "METHOD", value_parser = parse_method, help = method_help())]
    pub method: Option<String>,

    /// Condition the semi-Markov kernel's first sojourn on how long the
    /// current state has lasted: `km` becomes `km+age` (also without
    /// `--method`), `paper` becomes `paper+age`.
    #[arg(long)]
    pub age: bool,

    #[command(flatten)]
    pub thresholds: ThresholdArgs,
}

fn method_help() -> String {
    format!(
        "Reliability method, any that `gleaner eval` scores ({}) [default: {DEFAULT_METHOD}]",
        method_names().join(", ")
    )
}

/// The semi-Markov kernel methods `predict` answers with its full working
/// (runs, sojourn age): the registry's `paper`, `km`, `km+age`, and
/// `paper+age`, which only `--age` reaches.
fn kernel_method(name: &str) -> Option<(Method, bool)> {
    match name {
        "paper" => Some((Method::Paper, false)),
        "km" => Some((Method::Km, false)),
        "paper+age" => Some((Method::Paper, true)),
        "km+age" => Some((Method::Km, true)),
        _ => None,
    }
}

/// True when `name` is a method [`predict_report`] can answer with.
pub fn is_known_method(name: &str) -> bool {
    kernel_method(name).is_some() || method_names().contains(&name)
}

/// Parses `--method`: a registry name, case-folded.
fn parse_method(text: &str) -> Result<String, String> {
    let name = text.trim().to_ascii_lowercase();
    if is_known_method(&name) {
        Ok(name)
    } else {
        Err(format!(
            "unknown method `{text}`; known methods: {}",
            method_names().join(", ")
        ))
    }
}

impl PredictArgs {
    /// The method asked for, with `--age` applied; `None` means the default.
    pub fn method_name(&self) -> anyhow::Result<Option<String>> {
        if !self.age {
            return Ok(self.method.clone());
        }
        match self.method.as_deref() {
            None | Some("km") => Ok(Some("km+age".to_string())),
            Some("paper") => Ok(Some("paper+age".to_string())),
            Some(name) if name.ends_with("+age") => Ok(Some(name.to_string())),
            Some(name) => anyhow::bail!(
                "--age conditions the semi-Markov kernel and applies to `km` and `paper`, not `{name}`"
            ),
        }
    }
}

/// What [`predict_report`] answers: a window and the method that forecasts it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportRequest {
    /// The window, history days, step and thresholds. Its `method` and
    /// `age` fields are not read: [`ReportRequest::method`] says which
    /// method answers.
    pub window: PredictRequest,
    /// A method name of the registry (see `model::baselines::method_names`)
    /// or `paper+age`.
    pub method: String,
}

impl ReportRequest {
    /// `window` answered by [`DEFAULT_METHOD`].
    pub fn new(window: PredictRequest) -> Self {
        ReportRequest {
            window,
            method: DEFAULT_METHOD.to_string(),
        }
    }

    /// `window` answered by `method`, or by [`DEFAULT_METHOD`] when `None`.
    pub fn with_method(window: PredictRequest, method: Option<&str>) -> Self {
        ReportRequest {
            window,
            method: method.unwrap_or(DEFAULT_METHOD).to_string(),
        }
    }
}

/// Why [`predict_report`] gave no report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    #[error("unknown method {name:?}; known methods: {known}")]
    UnknownMethod { name: String, known: String },
    #[error(transparent)]
    Predict(#[from] PredictError),
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
    /// Same-kind history days in the record for this window: what the
    /// kernel methods, `freq`, `markov`, `rippp` and the blends learn from
    /// (the time-series methods fit the T seconds before W instead).
    pub days_used: usize,
    /// Local dates of the history days, most recent first.
    pub history_days: Vec<String>,
    /// The method that answered (a registry name, e.g. `km`, `blend+age`).
    pub method: String,
    pub window_s: u64,
    pub step_s: u32,
    pub steps: usize,
    /// Failure probability by cause (S3, S4, S5), as the method gives it:
    /// the kernel's solution for `paper`/`km`, the history windows' first
    /// failures for `freq`, the chain's for `markov`, the weighted mean of
    /// the parts' for the blends and `stack`, the simulated paths' (S5
    /// always 0) for the time-series methods. Empty for a method that does
    /// not split failures by cause (`rippp`): then only `tr` is known.
    pub fail_by_cause: BTreeMap<String, f64>,
    /// Time the method took to forecast, excluding loading the file.
    pub elapsed_us: u64,
    /// Window start, Unix seconds, and in the host's time zone.
    pub at: i64,
    pub at_local: String,
    pub host: Option<String>,
    pub mem_mib: u64,
    /// Runs of S1 and S2 in the history windows, as the kernel counts them.
    pub runs: BTreeMap<String, usize>,
    /// Age in steps of the sojourn in progress at W (`km+age`, `paper+age` only).
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
    let method = args.method_name()?;
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
    let window = PredictRequest {
        step_secs: args.step,
        days: args.days,
        ..PredictRequest::new(at, args.window, thresholds)
    };
    let request = ReportRequest::with_method(window, method.as_deref());
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

/// Predicts from `series` with the request's method and builds the report,
/// timing the method's forecast.
pub fn predict_report(
    series: &HostSeries,
    host: Option<String>,
    request: &ReportRequest,
) -> Result<PredictReport, ReportError> {
    let window = &request.window;
    let (answer, elapsed_us) = match kernel_method(&request.method) {
        Some((method, age)) => {
            let req = PredictRequest {
                method,
                age,
                ..window.clone()
            };
            let started = Instant::now();
            let prediction = predict(series, &req)?;
            let elapsed_us = started.elapsed().as_micros() as u64;
            (Answer::from(prediction), elapsed_us)
        }
        None => {
            let predictor = method_by_name(&request.method, PREDICT_SEED).ok_or_else(|| {
                ReportError::UnknownMethod {
                    name: request.method.clone(),
                    known: method_names().join(", "),
                }
            })?;
            let started = Instant::now();
            let forecast = predictor.forecast(series, window)?;
            let elapsed_us = started.elapsed().as_micros() as u64;
            let context = window_context(series, window)?;
            let answer = Answer {
                tr: forecast.tr,
                fail_by_cause: forecast.fail_by_cause,
                ..context
            };
            (answer, elapsed_us)
        }
    };
    let at = window.at;
    let at_local = Timestamp::from_second(at)
        .map(|ts| {
            ts.to_zoned(series.tz.clone())
                .strftime("%Y-%m-%d %H:%M %Z")
                .to_string()
        })
        .unwrap_or_default();
    Ok(PredictReport {
        at,
        at_local,
        host,
        mem_mib: window.thresholds.job_mem_mib,
        elapsed_us,
        ..report(&answer, &request.method)
    })
}

/// A method's answer with what the record says about the window: history
/// days, start state, runs (a kernel method's [`Prediction`], or another
/// method's forecast with [`window_context`]).
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    tr: f64,
    fail_by_cause: Option<[f64; crate::model::solver::CAUSES]>,
    init: Option<InitialState>,
    history_days: Vec<jiff::civil::Date>,
    window_secs: u64,
    step_secs: u32,
    steps: usize,
    runs: [usize; 2],
    age_steps: Option<u32>,
    age_fallback: bool,
}

impl From<Prediction> for Answer {
    fn from(p: Prediction) -> Self {
        Answer {
            tr: p.tr,
            fail_by_cause: Some(p.fail_by_cause),
            init: Some(p.init),
            history_days: p.history_days,
            window_secs: p.window_secs,
            step_secs: p.step_secs,
            steps: p.steps,
            runs: p.runs,
            age_steps: p.age_steps,
            age_fallback: p.age_fallback,
        }
    }
}

/// The window's context as the kernel methods see it, without solving:
/// the history days and runs of the `km` estimate and the state at W (or
/// the start states of the history windows when the record stops before
/// W). A method that needs no history day (the time-series methods) may
/// answer where there is none: then the context has no days and no
/// distribution.
fn window_context(series: &HostSeries, window: &PredictRequest) -> Result<Answer, PredictError> {
    let req = PredictRequest {
        method: Method::Km,
        age: false,
        ..window.clone()
    };
    let (step, steps) = crate::model::predict::geometry(series, &req)?;
    let model = match estimate_window(series, &req) {
        Ok(model) => Some(model),
        Err(PredictError::NoHistory { .. }) => None,
        Err(e) => return Err(e),
    };
    let observed = series
        .covers(req.at, req.at)
        .then(|| series.state_at(req.thresholds, req.at))
        .flatten();
    let init = match (observed, &model) {
        (Some(state), _) => Some(InitialState::Observed(state)),
        (None, Some(model)) => {
            let total = model.start_counts.iter().sum::<usize>().max(1) as f64;
            Some(InitialState::FromHistory(
                model.start_counts.map(|c| c as f64 / total),
            ))
        }
        (None, None) => None,
    };
    Ok(Answer {
        tr: 0.0,
        fail_by_cause: None,
        init,
        history_days: model
            .as_ref()
            .map(|m| m.history_days.iter().map(|d| d.date).collect())
            .unwrap_or_default(),
        window_secs: req.window_secs,
        step_secs: step,
        steps,
        runs: model
            .as_ref()
            .map_or([0, 0], |m| [m.kernel.rows[0].runs, m.kernel.rows[1].runs]),
        age_steps: None,
        age_fallback: false,
    })
}

/// The report's fields that come from the answer (time and host are the caller's).
fn report(p: &Answer, method: &str) -> PredictReport {
    let fail_by_cause = p
        .fail_by_cause
        .map(|fail| {
            State::FAILURES
                .iter()
                .zip(fail)
                .map(|(s, v)| (s.label().to_string(), v))
                .collect()
        })
        .unwrap_or_default();
    let (init_state, init_distribution) = match p.init {
        Some(InitialState::Observed(s)) => (s.label().to_string(), None),
        Some(InitialState::FromHistory(shares)) => (
            "unknown".to_string(),
            Some(
                State::ALL
                    .iter()
                    .map(|s| (s.label().to_string(), shares[s.index()]))
                    .collect(),
            ),
        ),
        None => ("unknown".to_string(), None),
    };
    PredictReport {
        tr: p.tr,
        init_state,
        init_distribution,
        days_used: p.history_days.len(),
        history_days: p.history_days.iter().map(|d| d.to_string()).collect(),
        method: method.to_string(),
        window_s: p.window_secs,
        step_s: p.step_secs,
        steps: p.steps,
        fail_by_cause,
        elapsed_us: 0,
        at: 0,
        at_local: String::new(),
        host: None,
        mem_mib: 0,
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
    let learned = if r.days_used == 0 {
        "no history day in the record".to_string()
    } else {
        format!("learned from {} past {kind}", r.days_used)
    };
    let mut text = format!(
        "{host}: {:.1} % chance that a guest job running {} from {} is not interrupted ({start}; {learned}; method {}).",
        r.tr * 100.0,
        human_duration(r.window_s),
        r.at_local,
        r.method,
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
