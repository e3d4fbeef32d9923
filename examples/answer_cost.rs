//! Issue 29, goal 6: what the node's answer to a reliability query costs on
//! long host records, at many answer times rather than the `answer`
//! bench's one (lab-1 at one Monday 08:00).
//!
//! For each trace file given, at 09:00 and 15:00 (the trace's zone) of each
//! of its last `DAYS` days, on the record as the node holds it (the last
//! 56 days before the answer, the store's default retention; the series
//! as the trace has it, step and all): the node's answer
//! (`AnswerCache::answer`, the default method, a 10 h window, 256 MiB)
//!
//! - `first of day`: the method's caches emptied before it (the first
//!   answer of a day per window length and memory: the day's fit is made);
//! - `new sample`: the next answer on the record grown by one sample, the
//!   day's fit cached (what every other answer of the day costs).
//!
//! Prints per trace the median, 90th percentile and largest of each, and
//! the share of `new sample` answers within 1 ms. Wall times on whatever
//! else the machine runs: say what ran beside it.
//!
//! `cargo run --release --example answer_cost -- FILE... [--days N] [--window 10h]`
use anyhow::{bail, Context};
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::{truncated, HourBias, Logistic};
use gleaner::model::predict::PredictRequest;
use gleaner::model::series::{HostSeries, Sample};
use gleaner::model::state::Thresholds;
use gleaner::node::answer::AnswerCache;
use gleaner::report::ReportRequest;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

/// The history the node keeps (`history::store::DEFAULT_RETENTION_DAYS`).
const RECORD_DAYS: i64 = 56;
/// Answer hours, local time.
const HOURS: [i64; 2] = [9, 15];

fn grown(series: &HostSeries) -> anyhow::Result<HostSeries> {
    let mut g = series.clone();
    let last = g.get(g.len() - 1).context("an empty record")?;
    g.push(Sample {
        time: last.time + i64::from(series.step_secs),
        ..last
    })?;
    Ok(g)
}

/// The rows from `from` to `at`.
fn since(series: &HostSeries, from: i64) -> anyhow::Result<HostSeries> {
    let mut out = HostSeries::new(series.step_secs, series.max_gap_secs, series.tz.clone());
    for s in series.samples().filter(|s| s.time >= from) {
        out.push(s)?;
    }
    Ok(out)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn main() -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut days: i64 = 30;
    let mut window_secs: u64 = 10 * 3600;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--days" => days = args.next().context("--days N")?.parse()?,
            "--window" => {
                let v = args.next().context("--window DUR")?;
                window_secs = gleaner::cli::args::parse_duration(&v).map_err(anyhow::Error::msg)?;
            }
            _ => files.push(PathBuf::from(a)),
        }
    }
    if files.is_empty() {
        bail!("usage: answer_cost FILE... [--days N] [--window 10h]");
    }
    let shared = Logistic::shared();
    let hour_bias = HourBias::shared();
    println!(
        "{:<28} {:>5} {:>7} | {:>26} | {:>26} | {:>8}",
        "trace", "n", "rows", "first of day p50/p90/max ms", "new sample p50/p90/max ms", "<= 1 ms"
    );
    for file in &files {
        let trace = read_trace(file).with_context(|| format!("{}", file.display()))?;
        let series = &trace.series;
        let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
            bail!("{}: no rows", file.display());
        };
        let offset = jiff::Timestamp::from_second(last)
            .map_or(0, |ts| i64::from(series.tz.to_offset(ts).seconds()));
        let last_day = (last + offset).div_euclid(86_400);
        let first_day = (first + offset).div_euclid(86_400) + RECORD_DAYS.min(21);
        let mut cold = Vec::new();
        let mut next = Vec::new();
        let mut rows = 0;
        for day in (last_day - days).max(first_day)..last_day {
            for h in HOURS {
                let at = day * 86_400 + h * 3600 - offset;
                let record = since(&truncated(series, at), at - RECORD_DAYS * 86_400)?;
                rows = record.len();
                let later = grown(&record)?;
                let request = ReportRequest::new(PredictRequest::new(
                    at,
                    window_secs,
                    Thresholds {
                        job_mem_mib: 256,
                        ..Thresholds::default()
                    },
                ));
                shared.clear_cache();
                hour_bias.clear_cache();
                let cache = AnswerCache::default();
                let t = Instant::now();
                black_box(cache.answer(&record, &request).ok());
                cold.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                black_box(cache.answer(&later, &request).ok());
                next.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        cold.sort_by(f64::total_cmp);
        next.sort_by(f64::total_cmp);
        let within = next.iter().filter(|&&ms| ms <= 1.0).count();
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        println!(
            "{:<28} {:>5} {:>7} | {:>8.2} {:>8.2} {:>8.2} | {:>8.3} {:>8.3} {:>8.3} | {:>7.1} %",
            name,
            next.len(),
            rows,
            quantile(&cold, 0.5),
            quantile(&cold, 0.9),
            quantile(&cold, 1.0),
            quantile(&next, 0.5),
            quantile(&next, 0.9),
            quantile(&next, 1.0),
            100.0 * within as f64 / next.len().max(1) as f64
        );
    }
    Ok(())
}
