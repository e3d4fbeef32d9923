//! Issue 29, goal 6: what the node's answer to a reliability query costs on
//! long host records, at many answer times rather than the `answer`
//! bench's one (lab-1 at one Monday 08:00), answered as the node answers.
//!
//! For each trace file given, at 09:00 and 15:00 (the trace's zone) of each
//! of its last `DAYS` days, on the record as the node holds it (the last
//! 56 days before the answer, the store's default retention: rows added at
//! the end and the oldest cut off, the series as the trace has it, step
//! and all; copies of the last row only where the trace has no row up to
//! the answer's minute, an interval trace), the node's answer
//! (`AnswerCache::answer`, the default method, a 10 h window, 256 MiB), as
//! `node::host_loop::reader` makes it: one `AnswerCache` kept across the
//! day's answers, the forecasters' grids let go after each answer
//! (`release_shared_grids`, the reader's `blocking_costed`), and
//! `logistic`'s table of the record's hours kept, as the node keeps it:
//!
//! - `first of day`: the method's fits emptied before it (the first answer
//!   of a day per window length and memory: the day's fits are made from
//!   the kept table, brought up to the record, and the week's spells read,
//!   which the node does once an hour);
//! - `cold`: the same answer with every cache emptied, the table too (the
//!   first answer after the node starts: the table made from the whole
//!   record), checked equal to `first of day`'s answer;
//! - `next minutes`: the answers of the [`NEXT`] minutes after it, each on
//!   the record grown by that minute's rows and at that minute, so no
//!   answer is reused: what every other answer of the day costs.
//!
//! Prints per trace the median, 90th percentile and largest of each in
//! wall milliseconds, the thread CPU of each (what the reader charges the
//! asking peer; the first of day's and cold's on the line after), the share of `next minutes` answers within
//! 1 ms by each, the median of the week's spells alone, the answers
//! compared, and the median of the availability alone on the same records
//! as the node reads it (a row walk) and as it did before (a state cursor
//! stepped point by point), checked equal to the bit, with their ratio.
//! Wall times on whatever else the machine runs: say what ran beside it.
//!
//! `cargo run --release --example answer_cost -- FILE... [--days N] [--window 10h]`
use anyhow::{bail, Context};
use gleaner::cpu_time::thread_cpu;
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::{release_shared_grids, truncated, HourBias, Logistic};
use gleaner::model::predict::history_days;
use gleaner::model::predict::PredictRequest;
use gleaner::model::sched::spells::{spells_of_series, LOOKBACK_SECS};
use gleaner::model::series::{HostSeries, Sample};
use gleaner::model::state::State;
use gleaner::model::state::Thresholds;
use gleaner::node::answer::{predicted_availability, AnswerCache};
use gleaner::report::ReportRequest;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

/// The history the node keeps (`history::store::DEFAULT_RETENTION_DAYS`).
const RECORD_DAYS: i64 = 56;
/// Answer hours, local time.
const HOURS: [i64; 2] = [9, 15];

/// Answers timed after the day's first, a minute apart.
const NEXT: i64 = 10;

/// `record` grown to `until` with the trace's rows after its last, and
/// where the trace has none up to `until` (an interval trace), the last
/// row copied at each step after it until one reaches `until`.
fn grown(record: &HostSeries, trace: &HostSeries, until: i64) -> anyhow::Result<HostSeries> {
    let mut g = record.clone();
    let mut last = g.get(g.len() - 1).context("an empty record")?;
    let from = trace.row_at(last.time).map_or(0, |r| r + 1);
    for s in (from..trace.len()).filter_map(|i| trace.get(i)) {
        if s.time > until {
            break;
        }
        g.push(s)?;
        last = s;
    }
    let step = i64::from(record.step_secs.max(1));
    let mut time = last.time;
    while time < until {
        time += step;
        g.push(Sample { time, ..last })?;
    }
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

/// The availability as the node computed it before (main at 40300b8): a
/// state cursor stepped point by point. Timed beside the row walk that
/// replaced it, on the same records, and checked equal to the bit.
fn availability_by_cursor(series: &HostSeries, window: &PredictRequest) -> Option<f64> {
    let span = i64::try_from(window.window_secs).ok()?;
    let days = history_days(series, window.at, span, window.days).ok()?;
    let stride = (span / 2_000).max(i64::from(series.step_secs.max(1)));
    let (mut sum, mut n) = (0.0f64, 0u64);
    for day in days {
        let Some(mut cursor) = series.cursor(window.thresholds, day.start) else {
            continue;
        };
        let mut t = day.start;
        while t < day.start.saturating_add(span) {
            let share = match cursor.state_at(t) {
                State::S1 | State::S2 => series
                    .get(cursor.row())
                    .map_or(0.0, |s| (1.0 - s.cpu / 100.0).clamp(0.0, 1.0)),
                State::S3 | State::S4 | State::S5 => 0.0,
            };
            sum += share;
            n += 1;
            t = t.saturating_add(stride);
        }
    }
    (n > 0).then(|| sum / n as f64)
}

/// Wall milliseconds of `f`, and its value.
fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let v = black_box(f());
    (t.elapsed().as_secs_f64() * 1e3, v)
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
        "{:<22} {:>4} {:>7} | {:>22} | {:>22} | {:>10} | {:>28} | {:>22} | {:>15} | {:>22}",
        "trace",
        "n",
        "rows",
        "first of day ms p50/90/max",
        "cold ms p50/90/max",
        "spells p50",
        "next minutes ms p50/90/99/max",
        "their CPU ms p50/90/max",
        "<= 1 ms wall/CPU",
        "availability ms: cursor / rows (x)"
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
        let mut first_ms = Vec::new();
        let mut first_cpu = Vec::new();
        let mut cold_cpu = Vec::new();
        let mut cold = Vec::new();
        let mut spells_ms = Vec::new();
        let mut compared = 0usize;
        let mut next = Vec::new();
        let mut next_cpu = Vec::new();
        let (mut walk_new, mut walk_old) = (Vec::new(), Vec::new());
        let mut rows = 0;
        let request_at = |at: i64| {
            ReportRequest::new(PredictRequest::new(
                at,
                window_secs,
                Thresholds {
                    job_mem_mib: 256,
                    ..Thresholds::default()
                },
            ))
        };
        for day in (last_day - days).max(first_day)..last_day {
            for h in HOURS {
                let at = day * 86_400 + h * 3600 - offset;
                // The record up to the answer, as the node's own is (its
                // rows reach its clock): the week's spells are then read for
                // this hour by the first answer, as the node reads them once
                // an hour, and not again by the next minutes'.
                let record = grown(
                    &since(&truncated(series, at), at - RECORD_DAYS * 86_400)?,
                    series,
                    at,
                )?;
                rows = record.len();
                // The records of the next minutes, made before any is timed.
                let later = (1..=NEXT)
                    .map(|k| Ok((at + 60 * k, grown(&record, series, at + 60 * k)?)))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                // The day's first answer: the fits emptied, the table of
                // the record's hours kept from the last answer.
                shared.clear_fits();
                hour_bias.clear_cache();
                // One cache for the day's answers, as the reader keeps one.
                let cache = AnswerCache::default();
                let (t, cpu) = (Instant::now(), thread_cpu());
                let first = black_box(cache.answer(&record, &request_at(at)).ok());
                release_shared_grids();
                first_ms.push(t.elapsed().as_secs_f64() * 1e3);
                first_cpu.push(thread_cpu().saturating_sub(cpu).as_secs_f64() * 1e3);
                // The same answer with nothing kept (the table made anew).
                shared.clear_cache();
                hour_bias.clear_cache();
                let (t, cpu) = (Instant::now(), thread_cpu());
                let again = black_box(AnswerCache::default().answer(&record, &request_at(at)).ok());
                release_shared_grids();
                cold.push(t.elapsed().as_secs_f64() * 1e3);
                cold_cpu.push(thread_cpu().saturating_sub(cpu).as_secs_f64() * 1e3);
                if first != again {
                    bail!("{}: the answer at {at} differs with the table kept: {first:?} != {again:?}", file.display());
                }
                compared += 1;
                let (ms, _) = timed(|| {
                    spells_of_series(&record, request_at(at).window.thresholds, at, LOOKBACK_SECS)
                });
                spells_ms.push(ms);
                for (when, record) in &later {
                    let request = request_at(*when);
                    let (t, cpu) = (Instant::now(), thread_cpu());
                    black_box(cache.answer(record, &request).ok());
                    release_shared_grids();
                    next.push(t.elapsed().as_secs_f64() * 1e3);
                    next_cpu.push(thread_cpu().saturating_sub(cpu).as_secs_f64() * 1e3);
                    let (new_ms, new) = timed(|| predicted_availability(record, &request.window));
                    let (old_ms, old) = timed(|| availability_by_cursor(record, &request.window));
                    if new.map(f64::to_bits) != old.map(f64::to_bits) {
                        bail!(
                            "{}: availability {new:?} != {old:?} at {when}",
                            file.display()
                        );
                    }
                    walk_new.push(new_ms);
                    walk_old.push(old_ms);
                }
            }
        }
        for v in [
            &mut first_ms,
            &mut first_cpu,
            &mut cold_cpu,
            &mut spells_ms,
            &mut cold,
            &mut next,
            &mut next_cpu,
            &mut walk_new,
            &mut walk_old,
        ] {
            v.sort_by(f64::total_cmp);
        }
        let within = |v: &[f64]| {
            100.0 * v.iter().filter(|&&ms| ms <= 1.0).count() as f64 / v.len().max(1) as f64
        };
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        println!(
            "{:<22} {:>4} {:>7} | {:>6.2} {:>6.2} {:>7.2} | {:>6.1} {:>6.1} {:>7.1} | {:>10.3} | {:>6.3} {:>6.3} {:>6.3} {:>6.2} | {:>6.3} {:>6.3} {:>7.2} | {:>6.1} / {:>5.1} % | {:>6.3} / {:>6.3} ({:.2}x)",
            name,
            next.len(),
            rows,
            quantile(&first_ms, 0.5),
            quantile(&first_ms, 0.9),
            quantile(&first_ms, 1.0),
            quantile(&cold, 0.5),
            quantile(&cold, 0.9),
            quantile(&cold, 1.0),
            quantile(&spells_ms, 0.5),
            quantile(&next, 0.5),
            quantile(&next, 0.9),
            quantile(&next, 0.99),
            quantile(&next, 1.0),
            quantile(&next_cpu, 0.5),
            quantile(&next_cpu, 0.9),
            quantile(&next_cpu, 1.0),
            within(&next),
            within(&next_cpu),
            quantile(&walk_old, 0.5),
            quantile(&walk_new, 0.5),
            quantile(&walk_new, 0.5) / quantile(&walk_old, 0.5),
        );
        eprintln!(
            "{name}: {compared} first answers equal with the table kept and made anew; \
             their thread CPU ms p50/90/max: first of day {:.3} {:.3} {:.3}, cold {:.1} {:.1} {:.1}",
            quantile(&first_cpu, 0.5),
            quantile(&first_cpu, 0.9),
            quantile(&first_cpu, 1.0),
            quantile(&cold_cpu, 0.5),
            quantile(&cold_cpu, 0.9),
            quantile(&cold_cpu, 1.0),
        );
    }
    Ok(())
}
