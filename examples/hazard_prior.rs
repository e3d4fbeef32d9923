//! Fits `hazard`'s prior: the model pooled over the given traces (ridge 1
//! towards the neutral prior), printed as the `PRIOR` constant. The traces
//! must be ones the evaluation never scores; round four used three
//! synthetic 140-day desktop hosts of seeds 61, 62, 63:
//!
//! for s in 61 62 63; do gleaner trace synth --seed $s --days 140 --out prior-$s.csv; done
//! cargo run --release --example hazard_prior -- prior-61.csv prior-62.csv prior-63.csv

use gleaner::history::trace::read_trace;
use gleaner::model::baselines::hazard::pooled_prior;
use gleaner::model::state::Thresholds;
use std::path::Path;

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        eprintln!("usage: hazard_prior TRACE.csv...");
        std::process::exit(2);
    }
    let hosts: Vec<_> = paths
        .iter()
        .map(|p| match read_trace(Path::new(p)) {
            Ok(t) => t.series,
            Err(e) => {
                eprintln!("{p}: {e}");
                std::process::exit(1);
            }
        })
        .collect();
    let th = Thresholds {
        job_mem_mib: 256,
        ..Thresholds::default()
    };
    match pooled_prior(&hosts, th) {
        Some(beta) => println!("pub const PRIOR: [f64; FEATURES] = {beta:?};"),
        None => {
            eprintln!("a trace too short to index");
            std::process::exit(1);
        }
    }
}
