//! Issue 28: what a consumer's ask for later windows costs each host it
//! asks, against the answer for a window that starts now, in the same run.
//!
//! With holds on (the batch queue's default), a consumer with a task no
//! free host is likely to finish asks at most `LATER_HOSTS_MAX` hosts, once
//! per run length and at most every 15 min while a task could use the
//! answers, their TR for windows of that length starting at each of the
//! queue's `LATER_STARTS` units (hours) from now: one reliability query per
//! start. This plays a host answering them as the node answers
//! (`AnswerCache::answer`, the default method, the record as the node
//! holds it: 56 days, cut at hourly retention passes), once an hour for
//! `HOURS` hours, at the hour (a retention pass 20 min before): at each
//! hour the answer for a window starting now (a placement's question), then
//! the later starts' answers in turn (one consumer's ask), then the same
//! ask again a quarter of an hour on (a second consumer, or the answers
//! asked again). Two arms, the method's caches emptied before each: on
//! demand (each ask makes the later model's fits it needs), and prepared
//! (after each retention pass the later shape is answered on the cut
//! record, as `node::ready` replays the shapes asked: the node). Prints
//! each one's thread CPU (median, 90th percentile, largest).
//!
//! `cargo run --release --example answer_later -- FILE [--hours 24] [--length 9h] [--mem 256]`
use anyhow::{bail, Context};
use gleaner::consumer::batch::queue::{LATER_HOSTS_MAX, LATER_STARTS, LATER_UNIT_SECS};
use gleaner::cpu_time::thread_cpu;
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::{release_shared_grids, Logistic};
use gleaner::model::series::HostSeries;
use gleaner::node::answer::AnswerCache;
use gleaner::node::config::Config;
use gleaner::node::ready;
use gleaner::report::ReportRequest;
use std::path::PathBuf;

/// The history the node keeps (`history::store::DEFAULT_RETENTION_DAYS`).
const RECORD_DAYS: i64 = 56;

/// The node's request with the default config.
fn request(start: i64, window_secs: u64, mem_mib: u64) -> ReportRequest {
    ReportRequest::new(Config::default().predict_request(start, window_secs, mem_mib))
}

/// The retention pass's period (`history.compact_every_secs`'s default)
/// and its offset from the hour (as `answer_ahead`'s).
const COMPACT_EVERY: i64 = 3_600;
const COMPACT_OFFSET: i64 = 1_234;

/// The record as the node holds it at `at`: the rows up to `at`, less
/// those older than 56 days at the last retention pass (the front moves
/// once an hour, not with every row).
fn record_at(trace: &HostSeries, at: i64) -> anyhow::Result<HostSeries> {
    let pass = (at - COMPACT_OFFSET).div_euclid(COMPACT_EVERY) * COMPACT_EVERY + COMPACT_OFFSET;
    let cutoff = pass - RECORD_DAYS * 86_400;
    let mut out = HostSeries::new(trace.step_secs, trace.max_gap_secs, trace.tz.clone());
    for s in trace.samples().filter(|s| s.time >= cutoff && s.time <= at) {
        out.push(s)?;
    }
    Ok(out)
}

fn ms_of(f: impl FnOnce()) -> f64 {
    let t = thread_cpu();
    f();
    (thread_cpu() - t).as_secs_f64() * 1e3
}

fn summary(name: &str, v: &mut [f64]) {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!(
        "{name:40} n {:3}  median {:8.3}  p90 {:8.3}  max {:8.3} ms",
        v.len(),
        q(0.5),
        q(0.9),
        q(1.0)
    );
}

/// One arm's figures: the answers for now, the first asks of each hour,
/// the asks 15 min on, the preparations (ms of thread CPU each).
struct Arm {
    figures: (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>),
    failed: usize,
}

/// Plays the host for `hours`: each hour a retention pass (20 min 34 s
/// before the hour; with `prepared`, the later shape answered on the cut
/// record as `node::ready` replays it), then at the hour an answer for now
/// and a consumer's ask, and the same ask 15 min on.
fn play(
    series: &HostSeries,
    begin: i64,
    hours: i64,
    length: u64,
    mem: u64,
    prepared: bool,
) -> anyhow::Result<Arm> {
    Logistic::shared().clear_cache();
    let answers = AnswerCache::default();
    let unit = LATER_UNIT_SECS as i64;
    let mut figures = (vec![], vec![], vec![], vec![]);
    let mut failed = 0;
    let shape = ready::Shape {
        window_secs: length,
        mem_mib: mem,
        later: true,
    };
    for h in 0..hours {
        let at = begin + h * 3_600;
        if prepared {
            let pass =
                (at - COMPACT_OFFSET).div_euclid(COMPACT_EVERY) * COMPACT_EVERY + COMPACT_OFFSET;
            let record = record_at(series, pass)?;
            figures.3.push(ms_of(|| {
                ready::prepare(&record, &[shape], pass, &answers, None, |at, w, m| {
                    request(at, w, m)
                });
            }));
            release_shared_grids();
        }
        for (when, first) in [(at, true), (at + 900, false)] {
            let record = record_at(series, when)?;
            if first {
                let cost = ms_of(|| {
                    failed += usize::from(
                        answers
                            .answer(&record, &request(when, length, mem))
                            .is_err(),
                    );
                });
                release_shared_grids();
                figures.0.push(cost);
            }
            let ask = ms_of(|| {
                for k in LATER_STARTS {
                    let start = when + k * unit;
                    failed += usize::from(
                        answers
                            .answer(&record, &request(start, length, mem))
                            .is_err(),
                    );
                    release_shared_grids();
                }
            });
            if first {
                figures.1.push(ask);
            } else {
                figures.2.push(ask);
            }
        }
    }
    Ok(Arm { figures, failed })
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut file, mut hours, mut length, mut mem) = (None, 24i64, 9 * 3600u64, 256u64);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--hours" => hours = args.next().context("--hours N")?.parse()?,
            "--length" => {
                let v = args.next().context("--length 9h")?;
                length = v.trim_end_matches('h').parse::<u64>()? * 3600;
            }
            "--mem" => mem = args.next().context("--mem MIB")?.parse()?,
            _ => file = Some(PathBuf::from(a)),
        }
    }
    let file = file.context("usage: answer_later FILE [--hours 24] [--length 9h] [--mem 256]")?;
    let trace = read_trace(&file).with_context(|| format!("{}", file.display()))?;
    let series = &trace.series;
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        bail!("{}: no rows", file.display());
    };
    let begin = first + RECORD_DAYS * 86_400 + 3_600;
    if begin + hours * 3_600 > last {
        bail!(
            "{}: the trace must hold {RECORD_DAYS} days and {hours} h",
            file.display()
        );
    }
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    println!(
        "{name}: {hours} h, a {} h window at {mem} MiB; an ask = {} later starts ({:?} h); at most {LATER_HOSTS_MAX} hosts asked per run length",
        length / 3600,
        LATER_STARTS.len(),
        LATER_STARTS
    );
    for prepared in [false, true] {
        let arm = play(series, begin, hours, length, mem, prepared)?;
        println!(
            "{}: {} answers failed",
            if prepared {
                "prepared (the node: the later shape replayed after each retention pass)"
            } else {
                "on demand (each ask makes what it needs)"
            },
            arm.failed
        );
        let (mut now_ms, mut ask_ms, mut again_ms, mut bg) = arm.figures;
        summary("answer for a window starting now", &mut now_ms);
        summary("first ask for later windows in the hour", &mut ask_ms);
        summary("the same ask 15 min on", &mut again_ms);
        if prepared {
            summary("preparation after a retention pass", &mut bg);
        }
    }
    Ok(())
}
