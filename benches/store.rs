//! Benchmarks of the sled history store: the per-sample write path (with the
//! flush that makes `kill -9` lose at most one sample, and without it) and
//! exporting 100k samples as trace format v1.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use gleaner::history::store::{HistoryStore, StoreOptions};
use gleaner::model::series::Sample;
use std::hint::black_box;
use std::io;

const T0: i64 = 1_700_000_000;

fn sample(i: i64) -> Sample {
    Sample {
        time: T0 + 6 * i,
        cpu: (i % 97) as f64 * 0.75,
        free_mib: 4_000 + (i % 13) as u64,
        up: true,
    }
}

fn record_sample(c: &mut Criterion) {
    let mut group = c.benchmark_group("store/record_sample");
    for (name, flush) in [("flush_every_record", true), ("background_flush", false)] {
        let dir = tempfile::tempdir().expect("temp dir");
        let opts = StoreOptions {
            flush_every_record: flush,
            ..StoreOptions::default()
        };
        let store = HistoryStore::open(dir.path(), &opts, T0).expect("open");
        let mut i = 0i64;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                store.record_sample(black_box(&sample(i))).expect("record");
            })
        });
    }
    group.finish();
}

fn export(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let opts = StoreOptions {
        flush_every_record: false,
        ..StoreOptions::default()
    };
    let store = HistoryStore::open(dir.path(), &opts, T0).expect("open");
    let n = 100_000;
    for i in 0..n {
        store.record_sample(&sample(i)).expect("record");
    }
    store.flush().expect("flush");
    let mut group = c.benchmark_group("store/export");
    group.sample_size(10);
    group.bench_function("100k_samples_to_sink", |b| {
        b.iter_batched(
            io::sink,
            |mut out| store.export(&mut out).expect("export"),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("100k_samples_to_series", |b| {
        b.iter(|| {
            let m = store.meta();
            store
                .to_series(m.tz.clone(), m.step_secs, m.max_gap_secs)
                .expect("series")
        })
    });
    group.finish();
}

criterion_group!(benches, record_sample, export);
criterion_main!(benches);
