//! `gleaner predict`: temporal reliability of a host, from a trace file
//! (`--trace`), from the running node, or from a stopped node's database.
//!
//! The report itself is `crate::report` (the node builds the same one); this
//! module parses the command line and turns a report into a sentence.

use crate::cli::args::ThresholdArgs;
use crate::cli::args::{parse_duration, parse_time};
use crate::cli::output::{print_json, print_text};
use crate::history::trace::read_trace;
use crate::model::baselines::{method_names, MethodId, DEFAULT_METHOD};
use crate::model::predict::{PredictRequest, DEFAULT_DAYS};
use crate::model::state::State;
use crate::report::{predict_report, PredictReport, ReportRequest};
use anyhow::Context;
use clap::Args;
use jiff::Timestamp;
use std::path::PathBuf;

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

    #[arg(long, value_name = "N", help = format!(
        "Number of past same-kind days (weekdays or weekend days) to learn from; with --trace only (the node uses [history] days) [default: {DEFAULT_DAYS}]"
    ))]
    pub days: Option<usize>,

    /// Discretisation step in seconds; with --trace only [default: the trace's step].
    #[arg(long, value_name = "SECS")]
    pub step: Option<u32>,

    #[arg(long, value_name = "METHOD", value_parser = parse_method, help = method_help())]
    pub method: Option<MethodId>,

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

/// Parses `--method`: a registry name, case-folded.
fn parse_method(text: &str) -> Result<MethodId, String> {
    text.trim()
        .to_ascii_lowercase()
        .parse::<MethodId>()
        .map_err(|e| e.to_string())
}

impl PredictArgs {
    /// Refuses the flags that only make sense with `--trace`: the node
    /// predicts from a history it classified with its own `[policy]`
    /// thresholds and learns from `[history] days`, so silently ignoring
    /// `--days 3` would answer a question the user did not ask.
    pub fn refuse_trace_only_flags(&self) -> anyhow::Result<()> {
        let mut given = self.thresholds.given();
        if self.days.is_some() {
            given.push("--days");
        }
        if self.step.is_some() {
            given.push("--step");
        }
        if given.is_empty() {
            return Ok(());
        }
        anyhow::bail!(
            "{} appl{} to `predict --trace FILE` only; the node predicts with its config's \
             [policy] thresholds, [history] days and [monitor] step (change them there, \
             or export the history and use --trace)",
            given.join(", "),
            if given.len() == 1 { "ies" } else { "y" }
        )
    }

    /// The method asked for, with `--age` applied; `None` means the default.
    pub fn method_name(&self) -> anyhow::Result<Option<MethodId>> {
        if !self.age {
            return Ok(self.method);
        }
        let aged = |name: &str| name.parse::<MethodId>().map(Some).map_err(Into::into);
        match self.method.map(MethodId::as_str) {
            None | Some("km") => aged("km+age"),
            Some("paper") => aged("paper+age"),
            Some(name) if name.ends_with("+age") => Ok(self.method),
            Some(name) => anyhow::bail!(
                "--age conditions the semi-Markov kernel and applies to `km` and `paper`, not `{name}`"
            ),
        }
    }
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
        days: args.days.unwrap_or(DEFAULT_DAYS),
        ..PredictRequest::new(at, args.window, thresholds)
    };
    let request = ReportRequest::with_method(window, method);
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
        crate::human::duration(r.window_s),
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
