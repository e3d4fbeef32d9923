//! Cost of one forecast of every method on the shared lab trace: a 10-hour
//! window at 6 s steps (m = 6000) with N = 10 weekdays of `lab-1.csv`, at a
//! busy time (Monday 08:00) and a quiet one (Monday 02:00). `gleaner eval`
//! calls each method thousands of times, so each should cost a few ms.
//!
//! `cargo bench --bench baselines`. The trace is looked for at
//! `$GLEANER_LAB_TRACE`, then `../shared/traces/synthetic/lab-1.csv` and
//! `../../shared/traces/synthetic/lab-1.csv` (main checkout or worktree).

use criterion::{criterion_group, criterion_main, Criterion};
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::{method_by_name, method_names};
use gleaner::model::predict::PredictRequest;
use gleaner::model::state::Thresholds;
use std::hint::black_box;
use std::path::PathBuf;

/// Monday 2025-09-29 08:00 EDT: inside the trace, with ten weekdays before it.
const AT: i64 = 1_759_147_200;

fn lab_trace() -> PathBuf {
    let candidates = [
        std::env::var("GLEANER_LAB_TRACE").unwrap_or_default(),
        "../shared/traces/synthetic/lab-1.csv".to_string(),
        "../../shared/traces/synthetic/lab-1.csv".to_string(),
    ];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("lab-1.csv found (set GLEANER_LAB_TRACE)")
}

fn bench(c: &mut Criterion) {
    let trace = read_trace(&lab_trace()).expect("the shared lab-1 trace is readable");
    let series = &trace.series;
    let mut group = c.benchmark_group("forecast 10h m=6000 N=10");
    group.sample_size(20);
    for (label, at) in [("08:00", AT), ("02:00", AT - 6 * 3600)] {
        let mut req = PredictRequest::new(at, 10 * 3600, Thresholds::default());
        req.step_secs = Some(6);
        for name in method_names() {
            let method = method_by_name(name, 1).expect("registered");
            let f = method
                .forecast(series, &req)
                .expect("lab-1 is forecastable");
            eprintln!("{name} at {label}: TR = {:.3}", f.tr);
            group.bench_function(format!("{name} {label}"), |b| {
                b.iter(|| method.forecast(black_box(series), black_box(&req)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
