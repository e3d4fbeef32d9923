//! Times the solver alone on the lab-1 benchmark window (a quick check
//! between criterion runs; `cargo bench --bench predict` is the reference).
use gleaner::history::trace::read_trace;
use gleaner::model::predict::{estimate_window, PredictRequest};
use gleaner::model::solver::{failure_by_cause, Start};
use gleaner::model::state::Thresholds;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let trace = read_trace(std::path::Path::new("../shared/traces/synthetic/lab-1.csv"))?;
    let req = PredictRequest::new(1_759_147_200, 36_000, Thresholds::default());
    let model = estimate_window(&trace.series, &req)?;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..200 {
            std::hint::black_box(failure_by_cause(&model.kernel, 6000, Start::in_row(0)));
        }
        best = best.min(t.elapsed().as_secs_f64() / 200.0);
        let t = Instant::now();
        for _ in 0..200 {
            std::hint::black_box(estimate_window(&trace.series, &req)?);
        }
        println!("estimate {:.0} µs", t.elapsed().as_secs_f64() / 200.0 * 1e6);
    }
    println!("solve best of 5: {:.0} µs", best * 1e6);
    Ok(())
}
