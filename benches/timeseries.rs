//! Benchmarks of the linear time-series baselines: fitting the papers' suite
//! on one window, and simulating 200 future paths of 6000 steps (10 hours at
//! the monitor's 6 s period), the size a probabilistic reliability needs.

use criterion::{criterion_group, criterion_main, Criterion};
use gleaner::model::timeseries::{fit, simulate_paths, TimeSeriesModel};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;

/// A bursty, load-like window: an AR(1) level in percent with occasional spikes.
fn load_window(n: usize) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut level: f64 = 20.0;
    (0..n)
        .map(|_| {
            level = 20.0 + 0.9 * (level - 20.0) + rng.random_range(-5.0..5.0);
            let spike = if rng.random::<f64>() < 0.02 {
                50.0
            } else {
                0.0
            };
            (level + spike).clamp(0.0, 100.0)
        })
        .collect()
}

fn bench_fit(c: &mut Criterion) {
    let window = load_window(600);
    for model in TimeSeriesModel::PAPER_SUITE {
        c.bench_function(&format!("fit {model} on 600 samples"), |b| {
            b.iter(|| fit(black_box(model), black_box(&window)))
        });
    }
}

fn bench_simulate(c: &mut Criterion) {
    let window = load_window(6000);
    let mut group = c.benchmark_group("simulate 200 paths x 6000 steps");
    group.sample_size(10);
    for model in TimeSeriesModel::PAPER_SUITE {
        let Ok(fitted) = fit(model, &window) else {
            continue;
        };
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut out = Vec::new();
        group.bench_function(model.to_string(), |b| {
            b.iter(|| simulate_paths(&fitted, &window, 6000, 200, &mut rng, &mut out))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_fit, bench_simulate);
criterion_main!(benches);
