//! Where the node's whole answer (`node::answer::host_answer`) spends its
//! time on the `answer` bench's query (lab-1 up to 2025-09-29 08:00, 10 h
//! window, 6 s steps, N = 10, 256 MiB, the default method): each part
//! timed alone with the fits cached, beside the whole answer cold, cached
//! on the same record, and cached on a record that changed since the last
//! answer (grown by one sample: the honest "new query"). A quick profile between criterion runs; `cargo
//! bench --bench answer` is the reference.
//! `cargo run --release --example answer_parts`.
use gleaner::history::trace::read_trace;
use gleaner::model::baselines::{truncated, HourBias, Logistic, DEFAULT_METHOD};
use gleaner::model::kernel::Method;
use gleaner::model::predict::{estimate_window, PredictRequest};
use gleaner::model::predictor::ReliabilityPredictor;
use gleaner::model::sched::spells::{PastSpells, LOOKBACK_SECS};
use gleaner::model::series::{HostSeries, Sample};
use gleaner::model::state::Thresholds;
use gleaner::node::answer::{host_answer, predicted_availability, AnswerCache};
use gleaner::report::{curve, forecast, ReportRequest};
use std::hint::black_box;
use std::time::Instant;

const AT: i64 = 1_759_147_200;

/// Median microseconds of `f` over `n` runs.
fn time(n: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[n / 2]
}

fn grown(series: &HostSeries) -> HostSeries {
    let mut g = series.clone();
    let last = g.get(g.len() - 1).expect("not empty");
    g.push(Sample {
        time: last.time + 6,
        ..last
    })
    .expect("a later row");
    g
}

fn main() -> anyhow::Result<()> {
    let trace = read_trace(std::path::Path::new("../shared/traces/synthetic/lab-1.csv"))?;
    let series = truncated(&trace.series, AT);
    let mut window = PredictRequest::new(
        AT,
        10 * 3600,
        Thresholds {
            job_mem_mib: 256,
            ..Thresholds::default()
        },
    );
    window.step_secs = Some(6);
    window.days = 10;
    let request = ReportRequest::with_method(window.clone(), Some(DEFAULT_METHOD.parse()?));
    let shared = Logistic::shared();
    let hour_bias = HourBias::shared();
    let n = 40;
    let cold = time(5, || {
        shared.clear_cache();
        hour_bias.clear_cache();
        black_box(host_answer(&series, &request).ok());
    });
    let _ = host_answer(&series, &request)?;
    let cached_same = time(n, || {
        black_box(host_answer(&series, &request).ok());
    });
    // Each answer on a record other than the last one's (the two copies
    // alternate), as when a sample arrived since: only the fits are cached.
    let next = grown(&series);
    let mut flip = false;
    let cached_next = time(n, || {
        flip = !flip;
        let record = if flip { &next } else { &series };
        black_box(host_answer(record, &request).ok());
    });
    let node = AnswerCache::default();
    let _ = node.answer(&series, &request)?;
    let node_next = time(n, || {
        flip = !flip;
        let record = if flip { &next } else { &series };
        black_box(node.answer(record, &request).ok());
    });
    let main_forecast = time(n, || {
        black_box(forecast(&series, &request).ok());
    });
    let method_alone = time(n, || {
        black_box(shared.forecast(&series, &window).ok());
    });
    let km = PredictRequest {
        method: Method::Km,
        ..window.clone()
    };
    let context_km = time(n, || {
        black_box(estimate_window(&series, &km).ok());
    });
    let others = [9_000u64, 18_000, 72_000, 144_000];
    let the_curve = time(n, || {
        black_box(curve(&series, &request, &others));
    });
    let availability = time(n, || {
        black_box(predicted_availability(&series, &window));
    });
    let spells = time(n, || {
        black_box(PastSpells::of_series(
            &series,
            window.thresholds,
            AT,
            LOOKBACK_SECS,
        ));
    });
    println!("host answer cold                       {cold:>9.0} µs");
    println!("host answer cached, same record        {cached_same:>9.0} µs");
    println!("host answer cached, one sample later   {cached_next:>9.0} µs");
    println!("node answer (spells hourly), one sample later {node_next:>9.0} µs");
    println!("  forecast (asked window + context)    {main_forecast:>9.0} µs");
    println!("    logistic forecast alone            {method_alone:>9.0} µs");
    println!("    context: km estimate_window        {context_km:>9.0} µs");
    println!("  curve, 4 other lengths               {the_curve:>9.0} µs");
    println!("  predicted availability               {availability:>9.0} µs");
    println!("  the week's failure spells            {spells:>9.0} µs");
    Ok(())
}
