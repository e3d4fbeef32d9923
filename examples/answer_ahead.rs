//! Issue 29, goal 6: every answer ≤ 1 ms as the node answers, with the next
//! answers prepared ahead (`node::ready`) against main's way (every fit and
//! the week's spells made by the first answer that needs them), in the
//! same run, on the same record and questions.
//!
//! A node is played for `HOURS` hours from a trace (the record held: its
//! last 56 days, the store's default retention, at the trace's own step):
//! a reading appends the trace's next row; a retention pass every hour (at
//! the node's `compact_every`, offset from the hour as a node started at
//! any time would be) cuts the rows older than 56 days; a question every
//! `EVERY` seconds (jittered, seeded) asks the next of the shapes given
//! (window length × job memory; default the pool host's summary: 1 h and
//! 8 h at 256, 2,048 and 8,192 MiB), at its time, through the node's answer
//! path (`AnswerCache::answer`, the default method, the forecasters' grids
//! let go after each as the reader does), its thread CPU timed. Two arms,
//! one after the other, the method's caches emptied before each:
//!
//! - `main`: as main's node: after a retention pass the answers read the
//!   cut record and the answer cache is emptied (spells too: the reader's
//!   `invalidate`); fits and spells are made by the answer that needs them;
//! - `ahead`: as this node: after a retention pass the cut record is made
//!   aside and prepared (`ready::prepare`, the questions of the last day
//!   answered again on it), then put in place with the answers of the
//!   minute dropped and the spells kept; at each reading in a new UTC hour
//!   or local date the same preparation on the record as it is. The
//!   preparations' thread CPU is the background's, counted apart.
//!
//! Each arm's answers are checked against the other's: forecast, curve and
//! availability equal to the bit (both read the same record at the same
//! time), the spells counted where equal (main reads them at an hour's
//! first answer, `ahead` at the hour's first reading). Prints per arm the
//! answers' CPU median, 99th percentile and largest, the first answer
//! after each retention pass and after each local midnight, the share
//! over 1 ms, the CPU an hour of the answers and of the background, and
//! the ratios `ahead / main`. The node's first answer after a start (every
//! cache empty) is left out of both and printed apart. Not counted in
//! either: decoding the store (main's node decodes the whole history on
//! the first answer after each retention pass, `ahead` cuts the record
//! held off the answer path) and bringing the series up to the store each
//! minute, which both do alike.
//!
//! `cargo run --release --example answer_ahead -- FILE [--hours 48] [--every 20] [--asks 1h,8h] [--mems 256,2048,8192] [--seed 1]`
use anyhow::{bail, Context};
use gleaner::cpu_time::thread_cpu;
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::{release_shared_grids, HourBias, Logistic};
use gleaner::model::series::HostSeries;
use gleaner::node::answer::{AnswerCache, HostAnswer};
use gleaner::node::config::Config;
use gleaner::node::ready::{self, Ahead};
use gleaner::report::ReportRequest;
use std::path::PathBuf;

/// The history the node keeps (`history::store::DEFAULT_RETENTION_DAYS`).
const RECORD_DAYS: i64 = 56;
/// The retention pass's period (`history.compact_every_secs`'s default)
/// and its offset from the hour.
const COMPACT_EVERY: i64 = 3_600;
const COMPACT_OFFSET: i64 = 1_234;

#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Main,
    Ahead,
}

/// One arm's figures.
#[derive(Default)]
struct Figures {
    answers: Vec<f64>,
    after_cut: Vec<f64>,
    after_midnight: Vec<f64>,
    first: f64,
    background: f64,
    preparations: usize,
    given: Vec<HostAnswer>,
    /// Answers over 1 ms: seconds into the run, shape, CPU ms.
    over: Vec<(i64, u64, u64, f64)>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn ms_since(from: std::time::Duration) -> f64 {
    thread_cpu().saturating_sub(from).as_secs_f64() * 1e3
}

/// `series`' rows from `cutoff` on.
fn cut(series: &HostSeries, cutoff: i64) -> anyhow::Result<HostSeries> {
    let mut out = HostSeries::new(series.step_secs, series.max_gap_secs, series.tz.clone());
    for s in series.samples().filter(|s| s.time >= cutoff) {
        out.push(s)?;
    }
    Ok(out)
}

/// The questions: (time, window seconds, memory), every `every` seconds
/// jittered by up to half of it, the shapes in turn.
fn questions(
    from: i64,
    to: i64,
    every: i64,
    shapes: &[(u64, u64)],
    seed: u64,
) -> Vec<(i64, u64, u64)> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut out = Vec::new();
    let mut t = from + every;
    let mut k = 0;
    while t < to {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let jitter = ((x >> 33) % (every as u64 / 2 + 1)) as i64;
        let (w, m) = shapes[k % shapes.len()];
        out.push((t + jitter, w, m));
        t += every;
        k += 1;
    }
    out
}

/// The node's request with the default config.
fn request(at: i64, window_secs: u64, mem_mib: u64) -> ReportRequest {
    ReportRequest::new(Config::default().predict_request(at, window_secs, mem_mib))
}

/// Plays the node for one arm.
fn play(
    arm: Arm,
    trace: &HostSeries,
    start: i64,
    end: i64,
    asked: &[(i64, u64, u64)],
) -> anyhow::Result<Figures> {
    Logistic::shared().clear_cache();
    HourBias::shared().clear_cache();
    let mut fig = Figures::default();
    let mut record = cut(
        &gleaner::model::baselines::truncated(trace, start),
        start - RECORD_DAYS * 86_400,
    )?;
    let mut next_row = trace.row_at(start).map_or(0, |r| r + 1);
    let answers = AnswerCache::default();
    let ahead = Ahead::default();
    let mut next_compact = start + COMPACT_OFFSET;
    let mut cut_since = false;
    let mut midnight_since = false;
    let day_of = |t: i64| {
        jiff::Timestamp::from_second(t)
            .map(|ts| ts.to_zoned(trace.tz.clone()).date())
            .ok()
    };
    let mut last_day = day_of(start);
    let mut first = true;
    let prepare = |record: &HostSeries, at: i64, fig: &mut Figures, ahead: &Ahead| {
        let cpu = thread_cpu();
        ready::prepare(record, &ahead.recent(at), at, &answers, None, request);
        release_shared_grids();
        fig.background += ms_since(cpu);
        fig.preparations += 1;
    };
    for &(at, window_secs, mem_mib) in asked {
        // The readings and retention passes up to the question, in order.
        loop {
            let reading = trace.get(next_row).map(|s| s.time).filter(|&t| t <= at);
            let compact = (next_compact <= at).then_some(next_compact);
            match (reading, compact) {
                (Some(t), c) if c.is_none_or(|c| t < c) => {
                    record.push(trace.get(next_row).context("a row")?)?;
                    next_row += 1;
                    if last_day != day_of(t) {
                        last_day = day_of(t);
                        midnight_since = true;
                    }
                    if arm == Arm::Ahead && ahead.due(t) && ahead.claim() {
                        prepare(&record, t, &mut fig, &ahead);
                        ahead.done(Some(ready::stale_at(&record, t)));
                    }
                }
                (_, Some(c)) => {
                    next_compact += COMPACT_EVERY;
                    let cutoff = c - RECORD_DAYS * 86_400;
                    if record.first_time().is_none_or(|f| f >= cutoff) {
                        continue;
                    }
                    cut_since = true;
                    match arm {
                        Arm::Main => {
                            record = cut(&record, cutoff)?;
                            answers.clear();
                        }
                        Arm::Ahead => {
                            let cpu = thread_cpu();
                            let made = cut(&record, cutoff)?;
                            fig.background += ms_since(cpu);
                            prepare(&made, c, &mut fig, &ahead);
                            record = made;
                            answers.forget_answers();
                        }
                    }
                }
                _ => break,
            }
        }
        if arm == Arm::Ahead {
            ahead.note(
                ready::Shape {
                    window_secs,
                    mem_mib,
                    later: false,
                },
                at,
            );
        }
        let cpu = thread_cpu();
        let key = AnswerCache::key(at, window_secs, mem_mib);
        let answer = match answers.get(key) {
            Some(a) => a,
            None => {
                let a = answers.answer(&record, &request(at, window_secs, mem_mib))?;
                answers.put(key, a.clone());
                a
            }
        };
        release_shared_grids();
        let ms = ms_since(cpu);
        fig.given.push(answer);
        if first {
            fig.first = ms;
            first = false;
            continue;
        }
        fig.answers.push(ms);
        if ms > 1.0 {
            fig.over.push((at - start, window_secs, mem_mib, ms));
        }
        if cut_since {
            fig.after_cut.push(ms);
        }
        if midnight_since {
            fig.after_midnight.push(ms);
        }
        (cut_since, midnight_since) = (false, false);
    }
    if record.last_time().is_none_or(|l| l < end - 3_600) {
        bail!("the trace ends before the run");
    }
    Ok(fig)
}

fn main() -> anyhow::Result<()> {
    let mut file = None;
    let (mut hours, mut every, mut seed) = (48i64, 20i64, 1u64);
    let mut asks: Vec<u64> = vec![3_600, 28_800];
    let mut mems: Vec<u64> = vec![256, 2_048, 8_192];
    let mut args = std::env::args().skip(1);
    let durations = |v: String| -> anyhow::Result<Vec<u64>> {
        v.split(',')
            .map(|d| gleaner::cli::args::parse_duration(d).map_err(anyhow::Error::msg))
            .collect()
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--hours" => hours = args.next().context("--hours N")?.parse()?,
            "--every" => every = args.next().context("--every SECS")?.parse()?,
            "--seed" => seed = args.next().context("--seed N")?.parse()?,
            "--asks" => asks = durations(args.next().context("--asks 1h,8h")?)?,
            "--mems" => {
                mems = args
                    .next()
                    .context("--mems 256,2048")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            _ => file = Some(PathBuf::from(a)),
        }
    }
    let file = file.context("usage: answer_ahead FILE [--hours 48] [--every 20] ...")?;
    let trace = read_trace(&file).with_context(|| format!("{}", file.display()))?;
    let series = &trace.series;
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        bail!("{}: no rows", file.display());
    };
    let start = first + RECORD_DAYS * 86_400 + 3_600;
    let end = start + hours * 3_600;
    if end > last {
        bail!(
            "{}: the trace must hold {} days and {hours} h",
            file.display(),
            RECORD_DAYS
        );
    }
    let shapes: Vec<(u64, u64)> = mems
        .iter()
        .flat_map(|&m| asks.iter().map(move |&w| (w, m)))
        .collect();
    let asked = questions(start, end, every, &shapes, seed);
    let main = play(Arm::Main, series, start, end, &asked)?;
    let ahead = play(Arm::Ahead, series, start, end, &asked)?;
    let mut same = 0;
    let mut same_spells = 0;
    for (i, (a, b)) in main.given.iter().zip(&ahead.given).enumerate() {
        let bits = |h: &HostAnswer| {
            let mut v = vec![
                h.forecast.tr.to_bits(),
                h.availability.map_or(0, f64::to_bits),
            ];
            v.extend(h.curve.iter().flat_map(|&(s, tr)| [s, tr.to_bits()]));
            v
        };
        if bits(a) != bits(b) || a.forecast != b.forecast {
            bail!("answer {i} at {:?} differs: {a:?} != {b:?}", asked.get(i));
        }
        same += 1;
        same_spells += usize::from(a.spells == b.spells && a.spell_lengths == b.spell_lengths);
    }
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    println!(
        "{name}: {} rows held, {hours} h, {} questions every ~{every} s ({} shapes); \
         {same} answers equal in both arms (forecast, curve, availability to the bit), spells equal in {same_spells}",
        series.row_at(start).map_or(0, |r| r + 1) - series.row_at(start - RECORD_DAYS * 86_400).map_or(0, |r| r + 1),
        asked.len(),
        shapes.len()
    );
    println!(
        "{:<6} | {:>28} | {:>24} | {:>24} | {:>8} | {:>10} | {:>26} | {:>9}",
        "arm",
        "answers CPU ms p50/p99/max",
        "after a cut p50/max (n)",
        "after midnight p50/max",
        "> 1 ms",
        "first ms",
        "CPU ms/h answers / backgr.",
        "bg/answ."
    );
    let mut rows = Vec::new();
    for (label, f) in [("main", &main), ("ahead", &ahead)] {
        let mut a = f.answers.clone();
        let mut c = f.after_cut.clone();
        let mut m = f.after_midnight.clone();
        for v in [&mut a, &mut c, &mut m] {
            v.sort_by(f64::total_cmp);
        }
        let over = a.iter().filter(|&&ms| ms > 1.0).count();
        let per_hour = a.iter().sum::<f64>() / hours as f64;
        let bg = f.background / hours as f64;
        println!(
            "{label:<6} | {:>8.3} {:>8.3} {:>9.3} | {:>7.3} {:>7.3} ({:>4}) | {:>7.3} {:>7.3} ({:>3}) | {:>8} | {:>10.2} | {:>12.1} / {:>11.1} | {:>9.2}",
            quantile(&a, 0.5),
            quantile(&a, 0.99),
            quantile(&a, 1.0),
            quantile(&c, 0.5),
            quantile(&c, 1.0),
            c.len(),
            quantile(&m, 0.5),
            quantile(&m, 1.0),
            m.len(),
            over,
            f.first,
            per_hour,
            bg,
            bg / per_hour,
        );
        let shown: Vec<String> = f
            .over
            .iter()
            .take(40)
            .map(|(t, w, m, ms)| format!("{t} s {w} s/{m} MiB {ms:.2}"))
            .collect();
        eprintln!("{label}: over 1 ms: {}", shown.join("; "));
        rows.push((
            quantile(&a, 0.5),
            quantile(&a, 0.99),
            quantile(&a, 1.0),
            quantile(&c, 0.5),
            quantile(&c, 1.0),
            per_hour,
            bg,
            f.preparations,
        ));
    }
    let (m, a) = (rows[0], rows[1]);
    println!(
        "ahead / main: answers p50 {:.3}, p99 {:.3}, max {:.3}; after a cut p50 {:.3}, max {:.3}; \
         answers' CPU an hour {:.3}; answers + background an hour {:.3} ({} preparations)",
        a.0 / m.0,
        a.1 / m.1,
        a.2 / m.2,
        a.3 / m.3,
        a.4 / m.4,
        a.5 / m.5,
        (a.5 + a.6) / (m.5 + m.6),
        a.7
    );
    Ok(())
}
