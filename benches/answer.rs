//! The default method's cost as the node answers a reliability query: one
//! `predict_report` (the forecast plus the window's context) for a 10-hour
//! window at 6 s steps (m = 6000) with N = 10 from `lab-1.csv`, beside `km`
//! in the same run, for the default and for `logistic+cal` (the round-three
//! candidate: one more fit, of the record two weeks earlier, when cold).
//! The target is at most 1 ms.
//!
//! - `cold`: the default's cache is emptied before every answer, so each one
//!   builds the state grid of the whole record and fits the day's model.
//! - `cached`: the day's fit is in the cache (what every query after the
//!   first of a day finds, even when new samples arrived since).
//! - `new sample`: the record grows by one row between answers (as the
//!   node's cached series does each minute); the fit, keyed by the record
//!   before W's date, is still found.
//!
//! - `host answer`: what a node now sends a consumer (`node::answer::
//!   host_answer`: the window, a TR curve at ¼, ½, 2 and 4 times its
//!   length, and the predicted CPU share), cold and cached, beside `km`.
//!
//! - `hazard` (round four): cold and cached, as one forecast and as the
//!   node's whole answer (its curve in one pass); and the answer's
//!   predicted CPU share alone (`availability`), the part no method changes.
//!
//! - `nws`, `nws+mix` (round six): the node's answer with fits and scores
//!   cached (`node answer new sample`), and the first answer's time, cold
//!   for the tournament's scores, printed once.
//!
//! - `logistic+hourbias` (round seven): the same two figures; its first
//!   answer pays `logistic`'s forecasts of every past window at five
//!   lengths, once.
//!
//! Each is run on the whole 35-day trace and on the 14 days before W (ten
//! weekdays: the smallest record that answers with N = 10).
//! `cargo bench --bench answer`.

use criterion::{criterion_group, criterion_main, Criterion};
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::{truncated, Hazard, HourBias, Logistic, DEFAULT_METHOD};
use gleaner::model::predict::PredictRequest;
use gleaner::model::series::{HostSeries, Sample};
use gleaner::model::state::Thresholds;
use gleaner::node::answer::{host_answer, predicted_availability, AnswerCache};
use gleaner::report::{predict_report, ReportRequest};
use std::hint::black_box;
use std::path::Path;

const LAB_1: &str = "../shared/traces/synthetic/lab-1.csv";
/// Monday 2025-09-29 08:00 EDT: inside the trace, with ten weekdays before it.
const AT: i64 = 1_759_147_200;

fn request(method: &str) -> ReportRequest {
    let mut req = PredictRequest::new(
        AT,
        10 * 3600,
        Thresholds {
            job_mem_mib: 256,
            ..Thresholds::default()
        },
    );
    req.step_secs = Some(6);
    req.days = 10;
    ReportRequest::with_method(req, Some(method.parse().expect("a registry method")))
}

/// The rows from `from` to `at`.
fn window_of(series: &HostSeries, from: i64, at: i64) -> HostSeries {
    let mut out = HostSeries::new(series.step_secs, series.max_gap_secs, series.tz.clone());
    for s in series.samples().filter(|s| s.time >= from && s.time <= at) {
        out.push(s).expect("rows of a valid series");
    }
    out
}

fn bench(c: &mut Criterion) {
    let trace = read_trace(Path::new(LAB_1)).expect("the shared lab-1 trace is readable");
    let full = truncated(&trace.series, AT);
    let short = window_of(&full, AT - 14 * 86_400, AT);
    let shared = Logistic::shared();
    let mut group = c.benchmark_group("answer 10h m=6000 N=10");
    let mut methods = vec![DEFAULT_METHOD, "logistic+cal"];
    methods.dedup();
    for (label, series) in [("35 days", &full), ("14 days", &short)] {
        let km = request("km");
        group.bench_function(format!("km, {label}"), |b| {
            b.iter(|| predict_report(black_box(series), None, black_box(&km)))
        });
        for name in &methods {
            answers(&mut group, &shared, name, label, series);
        }
        let default = request(DEFAULT_METHOD);
        group.bench_function(format!("km host answer, {label}"), |b| {
            b.iter(|| host_answer(black_box(series), black_box(&km)))
        });
        group.bench_function(format!("{DEFAULT_METHOD} host answer cold, {label}"), |b| {
            b.iter(|| {
                clear_all(&shared);
                host_answer(black_box(series), black_box(&default))
            })
        });
        group.bench_function(
            format!("{DEFAULT_METHOD} host answer cached, {label}"),
            |b| b.iter(|| host_answer(black_box(series), black_box(&default))),
        );
        // The honest cached figure: every answer on a record other than the
        // last one's (the record and a copy one sample longer alternate, as
        // when a sample arrives between queries), so only the fits are
        // cached, not the present at W or any part of the answer.
        let grown = grown_by_one(series);
        // The default first, then the others once each (the default is one of them).
        let mut names: Vec<&str> = vec![DEFAULT_METHOD];
        for name in [
            "logistic",
            "logistic+iso",
            "nws",
            "nws+mix",
            "logistic+hourbias",
        ] {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        for name in names {
            let asked = request(name);
            // The first answer pays every cold part once (for `nws`, the
            // candidates' forecasts of every past window at five lengths;
            // for `logistic+hourbias`, `logistic`'s).
            let started = std::time::Instant::now();
            let _ = host_answer(series, &asked);
            eprintln!("{name} first host answer, {label}: {:?}", started.elapsed());
            let _ = host_answer(&grown, &asked);
            let mut flip = false;
            group.bench_function(format!("{name} host answer new sample, {label}"), |b| {
                b.iter(|| {
                    flip = !flip;
                    let record = if flip { &grown } else { series };
                    host_answer(black_box(record), black_box(&asked))
                })
            });
            // As the node answers (`AnswerCache::answer`): the same, with the
            // week's spells read once an hour instead of every answer.
            let node = AnswerCache::default();
            let _ = node.answer(series, &asked);
            group.bench_function(format!("{name} node answer new sample, {label}"), |b| {
                b.iter(|| {
                    flip = !flip;
                    let record = if flip { &grown } else { series };
                    node.answer(black_box(record), black_box(&asked))
                })
            });
        }
        let iso = request("logistic+iso");
        group.bench_function(format!("logistic+iso host answer cold, {label}"), |b| {
            b.iter(|| {
                clear_all(&shared);
                host_answer(black_box(series), black_box(&iso))
            })
        });
        // The answer's predicted CPU share alone (same window, no forecast).
        group.bench_function(format!("availability, {label}"), |b| {
            b.iter(|| predicted_availability(black_box(series), black_box(&default.window)))
        });
        // `hazard` (round four): one fit per day serves every length, and
        // the host answer's curve is one pass of its survival.
        let hazard = Hazard::shared();
        let asked = request("hazard");
        group.bench_function(format!("hazard cold, {label}"), |b| {
            b.iter(|| {
                hazard.clear_cache();
                predict_report(black_box(series), None, black_box(&asked))
            })
        });
        let _ = predict_report(series, None, &asked);
        group.bench_function(format!("hazard cached, {label}"), |b| {
            b.iter(|| predict_report(black_box(series), None, black_box(&asked)))
        });
        group.bench_function(format!("hazard host answer cold, {label}"), |b| {
            b.iter(|| {
                hazard.clear_cache();
                host_answer(black_box(series), black_box(&asked))
            })
        });
        let _ = host_answer(series, &asked);
        group.bench_function(format!("hazard host answer cached, {label}"), |b| {
            b.iter(|| host_answer(black_box(series), black_box(&asked)))
        });
    }
    group.finish();
}

/// Empties `logistic`'s process-wide fits and `logistic+hourbias`'s
/// corrections (the default's cold answer pays both).
fn clear_all(shared: &Logistic) {
    shared.clear_cache();
    HourBias::shared().clear_cache();
}

/// Cold, cached and new-sample answers of the logistic method `name`.
fn answers(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    shared: &Logistic,
    name: &str,
    label: &str,
    series: &HostSeries,
) {
    let asked = request(name);
    let r = predict_report(series, None, &asked).expect("the method answers");
    assert_eq!((r.steps, r.days_used), (6000, 10));
    group.bench_function(format!("{name} cold, {label}"), |b| {
        b.iter(|| {
            clear_all(shared);
            predict_report(black_box(series), None, black_box(&asked))
        })
    });
    group.bench_function(format!("{name} cached, {label}"), |b| {
        b.iter(|| predict_report(black_box(series), None, black_box(&asked)))
    });
    // One more row after W: a new record, the same fit.
    let grown = grown_by_one(series);
    let _ = predict_report(series, None, &asked);
    group.bench_function(format!("{name} new sample, {label}"), |b| {
        b.iter(|| predict_report(black_box(&grown), None, black_box(&asked)))
    });
}

/// `series` with one more row, a step after its last.
fn grown_by_one(series: &HostSeries) -> HostSeries {
    let mut grown = series.clone();
    let last = grown.get(grown.len() - 1).expect("not empty");
    grown
        .push(Sample {
            time: last.time + 6,
            ..last
        })
        .expect("a later row");
    grown
}

criterion_group!(benches, bench);
criterion_main!(benches);
