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
//! holds it: the last 56 days), once an hour for `HOURS` hours: at each
//! hour the answer for a window starting now (a placement's question), then
//! the later starts' answers in turn (one consumer's ask), then the same
//! ask again a quarter of an hour on (a second consumer, or the answers
//! asked again). Prints each one's thread CPU (median, 90th percentile,
//! largest) and the ask's ratio to the answer for now.
//!
//! `cargo run --release --example answer_later -- FILE [--hours 24] [--length 9h] [--mem 256]`
use anyhow::{bail, Context};
use gleaner::consumer::batch::queue::{LATER_HOSTS_MAX, LATER_STARTS, LATER_UNIT_SECS};
use gleaner::cpu_time::thread_cpu;
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::release_shared_grids;
use gleaner::model::predict::PredictRequest;
use gleaner::model::series::HostSeries;
use gleaner::model::state::Thresholds;
use gleaner::node::answer::AnswerCache;
use gleaner::report::ReportRequest;
use std::path::PathBuf;

/// The history the node keeps (`history::store::DEFAULT_RETENTION_DAYS`).
const RECORD_DAYS: i64 = 56;

fn request(at: i64, start: i64, window_secs: u64, mem_mib: u64) -> ReportRequest {
    let mut w = PredictRequest::new(
        start,
        window_secs,
        Thresholds {
            job_mem_mib: mem_mib,
            ..Thresholds::default()
        },
    );
    w.days = gleaner::node::config::Config::default().history.days;
    let _ = at;
    ReportRequest::new(w)
}

/// The record as the node holds it at `at`: the 56 days before it.
fn record_at(trace: &HostSeries, at: i64) -> anyhow::Result<HostSeries> {
    let mut out = HostSeries::new(trace.step_secs, trace.max_gap_secs, trace.tz.clone());
    for s in trace
        .samples()
        .filter(|s| s.time >= at - RECORD_DAYS * 86_400 && s.time <= at)
    {
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
        "{name:34} n {:3}  median {:8.3}  p90 {:8.3}  max {:8.3} ms",
        v.len(),
        q(0.5),
        q(0.9),
        q(1.0)
    );
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
    let answers = AnswerCache::default();
    let unit = LATER_UNIT_SECS as i64;
    let (mut now_ms, mut ask_ms, mut again_ms, mut ratio) = (vec![], vec![], vec![], vec![]);
    let mut failed = 0;
    for h in 0..hours {
        let at = begin + h * 3_600;
        for (when, out) in [(at, true), (at + 900, false)] {
            let record = record_at(series, when)?;
            let mut now_cost = 0.0;
            if out {
                now_cost = ms_of(|| {
                    failed += usize::from(
                        answers
                            .answer(&record, &request(when, when, length, mem))
                            .is_err(),
                    );
                });
                release_shared_grids();
                now_ms.push(now_cost);
            }
            let ask = ms_of(|| {
                for k in LATER_STARTS {
                    let start = when + k * unit;
                    failed += usize::from(
                        answers
                            .answer(&record, &request(when, start, length, mem))
                            .is_err(),
                    );
                    release_shared_grids();
                }
            });
            if out {
                ask_ms.push(ask);
                ratio.push(ask / now_cost.max(1e-6));
            } else {
                again_ms.push(ask);
            }
        }
    }
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    println!(
        "{name}: {hours} h, a {} h window at {mem} MiB; an ask = {} later starts ({:?} h); at most {LATER_HOSTS_MAX} hosts asked per run length; {failed} answers failed",
        length / 3600,
        LATER_STARTS.len(),
        LATER_STARTS
    );
    summary("answer for a window starting now", &mut now_ms);
    summary("an ask for later windows", &mut ask_ms);
    summary("the same ask 15 min on", &mut again_ms);
    summary("ask / answer for now", &mut ratio);
    Ok(())
}
