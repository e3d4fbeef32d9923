//! `gleaner eval`: scores every reliability method on host traces with the
//! rolling-origin protocol, and optionally runs the papers' training-size,
//! cost and noise experiments.
//!
//! This command reads the traces, shows progress, times the run and writes
//! the JSON, markdown and SVG outputs; the protocol, scores and experiments
//! live in `eval`.

use crate::cli::args::parse_duration;
use crate::cli::args::ThresholdArgs;
use crate::cli::output::{print_json, print_text};
use crate::eval::experiments::{self, NoiseConfig};
use crate::eval::goals;
use crate::eval::plots::write_plots;
use crate::eval::protocol::{self, KindFilter, ProtocolConfig};
use crate::eval::registry::{methods_from_list, DEFAULT_METHOD};
use crate::eval::report::{length_label, to_markdown, EvalReport, MethodTiming, Timing, TraceInfo};
use crate::eval::summary::score;
use crate::model::predict::DEFAULT_DAYS;
use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Fewest bootstrap resamples we accept for a 95 % interval.
pub const MIN_RESAMPLES: usize = 500;

#[derive(Debug, Args)]
#[command(
    after_help = "Experiments besides the main protocol (they share its options):\n  \
  --training-sizes 1-15   rerun the protocol for each number of history days N (papers' Fig. 6)\n  \
  --cost                  time km predictions against T at --cost-step seconds (Fig. 4; timing only)\n  \
  --noise                 inject 1..10 down periods of 60-1800 s after 08:00 into one history\n                          \
  weekday and report |TR_noisy - TR_clean| per method and T (Fig. 8)"
)]
pub struct EvalArgs {
    /// Host trace files (format v1): at most 256 MiB each and 1 GiB together.
    #[arg(long, value_name = "FILE", num_args = 1.., required = true)]
    pub trace: Vec<PathBuf>,

    /// Comma-separated methods, or `all`.
    #[arg(long, value_name = "LIST", default_value = "all")]
    pub methods: String,

    /// History days N given to every method.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DAYS)]
    pub days: usize,

    /// Window lengths, comma-separated (seconds or 90m, 3h…).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_duration,
          default_value = "1h,2h,3h,5h,10h")]
    pub lengths: Vec<u64>,

    /// Forecast each window this long before it starts (`3h`, `90m`; 0: at
    /// its start), from the record cut there, as a node answers for a
    /// window that starts later; every window is then tested whatever its
    /// start state (one starting in S3/S4/S5 failed).
    #[arg(long, value_name = "DURATION", value_parser = parse_lead, default_value = "0")]
    pub start_in: u64,

    /// Ask as a young host: each test day's methods see only the record's
    /// last K local days before it (a host that joined K days earlier).
    /// The tested windows stay the same, so runs with different K compare.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub record_days: Option<u32>,

    /// Local start hours: ranges and lists such as `0-23` or `8,12-14`.
    #[arg(long, value_name = "LIST", value_parser = parse_hours, default_value = "0-23")]
    pub hours: HourList,

    /// Which days are tested.
    #[arg(long, value_enum, default_value_t = KindFilter::Both)]
    pub kind: KindFilter,

    /// Job working set in MiB; less free memory than this is a failure (S4).
    #[arg(long, value_name = "MIB", default_value_t = 0)]
    pub mem: u64,

    /// Step of the state grid in seconds [default: each trace's step].
    #[arg(long, value_name = "SECS")]
    pub step: Option<u32>,

    /// Share of each kind's days (earliest first) used only as history.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.5)]
    pub test_from: f64,

    /// Write the full result as JSON to FILE and print the summary table;
    /// `--json` alone (or `--json -`) prints the JSON to stdout instead.
    #[arg(long = "json", value_name = "FILE", num_args = 0..=1,
          default_missing_value = "-", visible_alias = "json-out")]
    pub json: Option<PathBuf>,

    /// Write every tested window's forecast and outcome for every method to
    /// FILE as CSV (host,start,date,hour,length_s,method,forecast,outcome),
    /// so every figure can be recomputed. Bounded: a run that would write
    /// more than 8 000 000 rows (windows × methods, ~0.5 GB) is refused
    /// before the file is created.
    #[arg(long, value_name = "FILE")]
    pub windows: Option<PathBuf>,

    /// Write a markdown report to FILE.
    #[arg(long, value_name = "FILE.md")]
    pub report: Option<PathBuf>,

    /// Write SVG charts into DIR.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,

    /// Seed for the bootstrap, the noise experiment and seeded methods.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Bootstrap resamples over test days (at least 500).
    #[arg(long, value_name = "B", default_value_t = 1000)]
    pub resamples: usize,

    /// Also rerun the protocol for these numbers of history days (e.g. `1-15`).
    #[arg(long, value_name = "LIST", value_parser = parse_hours_or_days)]
    pub training_sizes: Option<HourList>,

    /// Also time km predictions against T (timing section only).
    #[arg(long)]
    pub cost: bool,

    /// Grid step for the cost experiment, seconds (the papers sampled every 6 s).
    #[arg(long, value_name = "SECS", default_value_t = 6)]
    pub cost_step: u32,

    /// Also run the noise-robustness experiment.
    #[arg(long)]
    pub noise: bool,

    /// Trials per number of injected failures.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub noise_trials: usize,

    /// The round's challenger (issue 29, goal 5): a method of --methods,
    /// named before the run, whose paired Brier difference against the
    /// default the goals show beside the rivals' test.
    #[arg(long, value_name = "METHOD")]
    pub challenger: Option<String>,

    /// Also judge these methods of --methods by the same goals as if each
    /// were the default (`all`: every method run), side by side: does any
    /// method meet a goal the default does not?
    #[arg(long, value_name = "LIST")]
    pub goals_for: Option<String>,

    /// Worker threads [default: up to 2].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    #[command(flatten)]
    pub thresholds: ThresholdArgs,
}

/// A sorted list of small numbers, from `0-23` or `8,12-14`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourList(pub Vec<u8>);

fn parse_list(text: &str, max: u8, what: &str) -> Result<HourList, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let parse = |s: &str| -> Result<u8, String> {
            s.trim()
                .parse::<u8>()
                .ok()
                .filter(|v| *v <= max)
                .ok_or_else(|| format!("`{part}` is not a {what} from 0 to {max}"))
        };
        let (a, b) = (parse(a)?, parse(b)?);
        if a > b {
            return Err(format!("range `{part}` runs backwards"));
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err(format!("no {what}s given"));
    }
    Ok(HourList(out))
}

/// Parses local hours: `0-23`, `8,12-14`.
pub fn parse_hours(text: &str) -> Result<HourList, String> {
    parse_list(text, 23, "hour")
}

fn parse_hours_or_days(text: &str) -> Result<HourList, String> {
    let list = parse_list(text, u8::MAX, "day count")?;
    if list.0.contains(&0) {
        return Err("training sizes must be at least 1".to_string());
    }
    Ok(list)
}

/// The resolved options: checked values, ready for the library.
fn protocol_config(args: &EvalArgs) -> anyhow::Result<ProtocolConfig> {
    let thresholds = args.thresholds.resolve(args.mem)?;
    if !(0.0..1.0).contains(&args.test_from) {
        bail!(
            "--test-from must be at least 0 and below 1, got {}",
            args.test_from
        );
    }
    if args.step == Some(0) || args.cost_step == 0 {
        bail!("steps must be at least one second");
    }
    if args.start_in > 0 && (args.noise || args.cost) {
        bail!("--start-in applies to the protocol only; run --noise and --cost without it");
    }
    if args.resamples < MIN_RESAMPLES {
        bail!("--resamples must be at least {MIN_RESAMPLES}");
    }
    if args.days == 0 || args.days > crate::model::predict::MAX_DAYS {
        bail!(
            "--days must be between 1 and {}",
            crate::model::predict::MAX_DAYS
        );
    }
    let mut lengths = args.lengths.clone();
    lengths.sort_unstable();
    lengths.dedup();
    Ok(ProtocolConfig {
        lengths,
        hours: args.hours.0.clone(),
        kind: args.kind,
        days: args.days,
        thresholds,
        step_secs: args.step,
        test_from: args.test_from,
        lead_secs: args.start_in,
        record_days: args.record_days,
    })
}

/// Longest `--start-in`: a week (the node weighs windows up to 36 h ahead).
const MAX_LEAD_SECS: u64 = 7 * 86_400;

/// `--start-in`: a duration (`0`, `0h` allowed) up to [`MAX_LEAD_SECS`].
fn parse_lead(text: &str) -> Result<u64, String> {
    let number = text
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let secs = if number.trim().parse::<f64>() == Ok(0.0) {
        0
    } else {
        parse_duration(text)?
    };
    if secs > MAX_LEAD_SECS {
        return Err(format!(
            "--start-in {text}: at most {} days",
            MAX_LEAD_SECS / 86_400
        ));
    }
    Ok(secs)
}

/// The command line as typed, with the program called `gleaner`.
fn command_line() -> String {
    let mut parts = vec!["gleaner".to_string()];
    for arg in std::env::args().skip(1) {
        let plain = arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,=+:".contains(c));
        parts.push(if plain {
            arg
        } else {
            format!("'{}'", arg.replace('\'', r"'\''"))
        });
    }
    parts.join(" ")
}

fn progress(total: u64, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if quiet || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} days, {elapsed} (eta {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Where `--json` sends the report: stdout for `-` (or `gleaner --json eval`).
fn json_file(args: &EvalArgs) -> Option<&Path> {
    args.json.as_deref().filter(|p| *p != Path::new("-"))
}

/// `global_json` is the top-level `gleaner --json eval …`.
pub fn run(args: &EvalArgs, global_json: bool) -> anyhow::Result<()> {
    let json = global_json || args.json.as_deref() == Some(Path::new("-"));
    let started = Instant::now();
    let cfg = protocol_config(args)?;
    let methods = methods_from_list(&args.methods, args.seed)?;
    let names: Vec<String> = methods.iter().map(|m| m.name()).collect();
    let challenger = args
        .challenger
        .as_deref()
        .map(|c| c.trim().to_ascii_lowercase());
    if let Some(c) = &challenger {
        if !names.contains(c) || c == DEFAULT_METHOD {
            bail!("--challenger {c:?} must be one of --methods other than the default {DEFAULT_METHOD:?}");
        }
    }
    let goals_for: Vec<String> = match args.goals_for.as_deref().map(str::trim) {
        None => Vec::new(),
        Some("all") => names.clone(),
        Some(list) => list
            .split(',')
            .map(|m| m.trim().to_ascii_lowercase())
            .collect(),
    };
    if let Some(m) = goals_for.iter().find(|m| !names.contains(m)) {
        bail!("--goals-for {m:?} is not one of --methods");
    }
    let mut phases = BTreeMap::new();
    let mut phase = Instant::now();
    let mut lap = |name: &str, phases: &mut BTreeMap<String, f64>| {
        phases.insert(name.to_string(), phase.elapsed().as_secs_f64());
        phase = Instant::now();
    };
    let traces = crate::eval::load::read_traces(&args.trace)?;
    for (path, trace) in args.trace.iter().zip(&traces) {
        if trace.replaced_rows > 0 {
            tracing::warn!(
                "{}: {} rows repeated the previous row's time; the later row was kept",
                path.display(),
                trace.replaced_rows
            );
        }
    }
    lap("load", &mut phases);
    let series: Vec<&_> = traces.iter().map(|t| &t.series).collect();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(2)));
    let work = protocol::work_items(&series, &cfg).len() as u64;
    let sizes = args
        .training_sizes
        .as_ref()
        .map(|l| l.0.iter().map(|&n| usize::from(n)).collect::<Vec<_>>());
    let total = work * (1 + sizes.as_ref().map_or(0, |s| s.len() as u64));
    let bar = progress(total, json);
    bar.set_message("evaluating");
    let tick = || bar.inc(1);

    let days = protocol::run(&series, &methods, &cfg, threads, &tick);
    lap("protocol", &mut phases);
    let scores = score(
        &days,
        &names,
        &cfg.lengths,
        args.resamples,
        args.seed,
        threads,
    );
    let goals = goals::goals(
        &days,
        &names,
        &cfg.lengths,
        args.resamples,
        args.seed,
        challenger.as_deref(),
    );
    let goals_for: Vec<goals::Goals> = goals_for
        .iter()
        .filter_map(|m| {
            goals::goals_of(
                m,
                &days,
                &names,
                &cfg.lengths,
                args.resamples,
                args.seed,
                None,
            )
        })
        .collect();
    lap("scoring", &mut phases);
    let training_size = sizes.map(|sizes| {
        bar.set_message("training sizes");
        experiments::training_size(&series, &methods, &cfg, &sizes, threads, &tick)
    });
    let noise_config = args.noise.then(|| NoiseConfig {
        trials: args.noise_trials,
        ..NoiseConfig::new(args.seed)
    });
    let noise = noise_config.as_ref().map(|nc| {
        bar.set_message("noise");
        experiments::noise(&series, &methods, &cfg, nc)
    });
    let cost = args.cost.then(|| {
        bar.set_message("cost");
        experiments::cost(&series, &cfg, args.cost_step, 5)
    });
    bar.finish_and_clear();
    lap("experiments", &mut phases);

    let mut per_method = BTreeMap::new();
    for (m, name) in names.iter().enumerate() {
        let (time, calls) = days
            .iter()
            .filter_map(|d| d.time.get(m))
            .fold((Duration::ZERO, 0), |(t, n), &(dt, dn)| (t + dt, n + dn));
        per_method.insert(
            name.clone(),
            MethodTiming {
                calls,
                total_ms: time.as_secs_f64() * 1e3,
                mean_us: if calls == 0 {
                    0.0
                } else {
                    time.as_secs_f64() * 1e6 / calls as f64
                },
            },
        );
    }
    let trace_infos = traces
        .iter()
        .zip(&args.trace)
        .enumerate()
        .map(|(i, (t, path))| TraceInfo {
            path: path.display().to_string(),
            host: t.header.host.clone(),
            tz: t.header.tz_name.clone(),
            step_s: t.series.step_secs,
            rows: t.series.len(),
            days: protocol::record_dates(&t.series).len(),
            test_days: protocol::test_days(&t.series, &cfg).len(),
            cases: days
                .iter()
                .filter(|d| d.trace == i)
                .map(|d| d.cases.len())
                .sum(),
            replaced_rows: t.replaced_rows,
        })
        .collect();
    let report = EvalReport {
        default_method: DEFAULT_METHOD.to_string(),
        command: command_line(),
        seed: args.seed,
        config: cfg.clone(),
        traces: trace_infos,
        scores,
        goals,
        goals_for,
        training_size,
        noise_config,
        noise,
        timing: Timing {
            note: "Wall-clock times of this run; everything else in this report is reproducible from the inputs and the seed.".to_string(),
            wall_s: started.elapsed().as_secs_f64(),
            phases_s: phases,
            threads,
            per_method,
            cost,
        },
    };
    if let Some(path) = &args.windows {
        let labels = crate::eval::windows::host_labels(
            &report
                .traces
                .iter()
                .map(|t| t.host.clone())
                .collect::<Vec<_>>(),
            &report
                .traces
                .iter()
                .map(|t| t.path.clone())
                .collect::<Vec<_>>(),
        );
        crate::eval::windows::write_file(path, &days, &names, &labels)?;
    }
    if let Some(path) = json_file(args) {
        let text = serde_json::to_string_pretty(&report)?;
        write_file(path, text.as_bytes())?;
    }
    if let Some(path) = &args.report {
        write_file(path, to_markdown(&report).as_bytes())?;
    }
    if let Some(dir) = &args.plots {
        write_plots(&report, dir)?;
    }
    if json {
        print_json(&report)
    } else {
        print_text(&summary_text(&report))
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// A short table for people: Brier and accuracy per method and length.
fn summary_text(r: &EvalReport) -> String {
    let s = &r.scores;
    let mut out = format!(
        "{} traces, {} test days, {} methods (Brier / mean accuracy; skill against {}):\n",
        r.traces.len(),
        s.test_days,
        s.method_order.len(),
        s.skill_reference
    );
    if let Some(k) = r.config.record_days {
        out.push_str(&format!(
            "Young host: each test day's methods saw only the record's last {k} day(s) before it.\n"
        ));
    }
    if r.config.lead_secs > 0 {
        out.push_str(&format!(
            "Windows forecast {} before they start, from the record cut there; every window tested, one starting in S3/S4/S5 as failed.\n",
            length_label(r.config.lead_secs)
        ));
    }
    let header: Vec<String> = std::iter::once("method".to_string())
        .chain(
            r.config
                .lengths
                .iter()
                .map(|&len| format!("T = {}", length_label(len))),
        )
        .collect();
    let rows = s.method_order.iter().map(|name| {
        let mut row = vec![name.clone()];
        for len in &r.config.lengths {
            row.push(
                s.methods
                    .get(name)
                    .and_then(|m| m.by_length.get(len))
                    .map_or_else(String::new, |l| {
                        format!(
                            "{} / {}",
                            l.brier.map_or("–".into(), |b| format!("{b:.4}")),
                            l.accuracy_mean
                                .map_or("–".into(), |a| format!("{:.1}%", a * 100.0))
                        )
                    }),
            );
        }
        row
    });
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    out.push_str(&crate::cli::output::table(&header, rows, true));
    if let Some(g) = &r.goals {
        out.push('\n');
        out.push_str(&goals::to_table(g));
    }
    if !r.goals_for.is_empty() {
        out.push_str(
            "\nThe same goals for each method of --goals-for, as if it were the default:\n\n",
        );
        out.push_str(&goals::to_compare_table(&r.goals_for));
    }
    out.push_str(&format!("({:.1} s)\n", r.timing.wall_s));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_lists() {
        assert_eq!(parse_hours("0-23").unwrap().0, (0..24).collect::<Vec<u8>>());
        assert_eq!(parse_hours("14,8, 12-13").unwrap().0, vec![8, 12, 13, 14]);
        for bad in ["24", "5-3", "", "x", "-1"] {
            assert!(parse_hours(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_hours_or_days("1-15").unwrap().0.len(), 15);
        assert!(parse_hours_or_days("0-3").is_err());
    }

    #[test]
    fn start_in_takes_zero_and_durations_up_to_a_week() {
        assert_eq!(parse_lead("0"), Ok(0));
        assert_eq!(parse_lead("0h"), Ok(0));
        assert_eq!(parse_lead("3h"), Ok(3 * 3600));
        assert_eq!(parse_lead("90m"), Ok(5400));
        assert_eq!(parse_lead("7d"), Ok(7 * 86_400));
        for bad in ["8d", "-1h", "", "x"] {
            assert!(parse_lead(bad).is_err(), "{bad}");
        }
    }
}
