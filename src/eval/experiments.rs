//! The seed papers' other experiments, built on the protocol: training size
//! (their Fig. 6), cost of a semi-Markov prediction against window length
//! (Fig. 4) and robustness to failures injected into one training day
//! (Fig. 8).
//!
//! It owns how these experiments pick windows and perturb series; it knows
//! nothing about files or the command line. Only `cost` reads the clock, and
//! its results are timings, which callers keep apart from the reproducible
//! results.

use crate::eval::protocol::{self, day_cases, request_for, test_days, DayKind, ProtocolConfig};
use crate::eval::summary::score;
use crate::model::kernel::Method;
use crate::model::predict::{estimate_window, history_days, predict, PredictRequest};
use crate::model::predictor::ReliabilityPredictor;
use crate::model::series::{HostSeries, Sample};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// Scores of one method at one length for one training size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeScore {
    pub n: usize,
    pub brier: Option<f64>,
    pub accuracy_mean: Option<f64>,
    pub accuracy_worst: Option<f64>,
    pub groups_excluded: usize,
}

/// Training size N → method → length (s) → scores.
pub type TrainingSizeResult = BTreeMap<usize, BTreeMap<String, BTreeMap<u64, SizeScore>>>;

/// Runs the protocol once per training size N (no bootstrap).
pub fn training_size(
    traces: &[&HostSeries],
    methods: &[Box<dyn ReliabilityPredictor>],
    cfg: &ProtocolConfig,
    sizes: &[usize],
    threads: usize,
    tick: &(dyn Fn() + Sync),
) -> TrainingSizeResult {
    let names: Vec<String> = methods.iter().map(|m| m.name()).collect();
    let mut out = BTreeMap::new();
    for &days in sizes {
        let cfg = ProtocolConfig {
            days,
            ..cfg.clone()
        };
        let results = protocol::run(traces, methods, &cfg, threads, tick);
        let scores = score(&results, &names, &cfg.lengths, 0, 0, threads);
        let per_method = scores
            .methods
            .into_iter()
            .map(|(name, m)| {
                let by_length = m
                    .by_length
                    .into_iter()
                    .map(|(len, s)| {
                        (
                            len,
                            SizeScore {
                                n: s.n,
                                brier: s.brier,
                                accuracy_mean: s.accuracy_mean,
                                accuracy_worst: s.accuracy_worst,
                                groups_excluded: s.groups_excluded,
                            },
                        )
                    })
                    .collect();
                (name, by_length)
            })
            .collect();
        out.insert(days, per_method);
    }
    out
}

/// Cost of the semi-Markov prediction at one window length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostPoint {
    pub window_secs: u64,
    pub step_secs: u32,
    /// Steps m = T / d.
    pub steps: usize,
    /// Predictions timed.
    pub samples: usize,
    /// Estimating the kernel (Q and H) from the history days.
    pub estimate_ms_median: f64,
    /// The whole prediction: estimation plus the solve for TR.
    pub total_ms_median: f64,
    pub total_ms_max: f64,
}

/// Times `km` predictions at step `step_secs` for every length, on up to
/// `per_length` test windows per trace (hours spread over the day).
pub fn cost(
    traces: &[&HostSeries],
    cfg: &ProtocolConfig,
    step_secs: u32,
    per_length: usize,
) -> Vec<CostPoint> {
    let cfg = ProtocolConfig {
        step_secs: Some(step_secs),
        hours: vec![3, 8, 13, 18, 22],
        ..cfg.clone()
    };
    let mut points = Vec::new();
    for &len in &cfg.lengths {
        let one = ProtocolConfig {
            lengths: vec![len],
            ..cfg.clone()
        };
        let (mut estimate, mut total) = (Vec::new(), Vec::new());
        for series in traces {
            let cases = test_days(series, &one)
                .into_iter()
                .flat_map(|d| day_cases(series, 0, d, &one))
                .take(per_length);
            for case in cases {
                let req = PredictRequest {
                    method: Method::Km,
                    ..request_for(&case, &one)
                };
                let started = Instant::now();
                let model = estimate_window(series, &req);
                let est = started.elapsed();
                let started = Instant::now();
                let prediction = predict(series, &req);
                let whole = started.elapsed();
                if model.is_ok() && prediction.is_ok() {
                    estimate.push(est.as_secs_f64() * 1e3);
                    total.push(whole.as_secs_f64() * 1e3);
                }
            }
        }
        estimate.sort_by(f64::total_cmp);
        total.sort_by(f64::total_cmp);
        points.push(CostPoint {
            window_secs: len,
            step_secs,
            steps: (len / u64::from(step_secs.max(1))) as usize,
            samples: total.len(),
            estimate_ms_median: crate::eval::metrics::percentile(&estimate, 0.5),
            total_ms_median: crate::eval::metrics::percentile(&total, 0.5),
            total_ms_max: total.last().copied().unwrap_or(f64::NAN),
        });
    }
    points
}

/// How failures are injected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoiseConfig {
    /// k = 1..=max_failures failures per trial.
    pub max_failures: usize,
    /// Independent trials per k (each draws the day, starts and holding times anew).
    pub trials: usize,
    /// Local hour the windows start at; failures start within the hour after it.
    pub hour: u8,
    /// Holding time of a failure, drawn uniformly from this range, seconds.
    pub hold_secs: (i64, i64),
    pub seed: u64,
}

impl NoiseConfig {
    /// The papers' setting: up to 10 failures of 60–1800 s around 08:00.
    pub fn new(seed: u64) -> Self {
        NoiseConfig {
            max_failures: 10,
            trials: 10,
            hour: 8,
            hold_secs: (60, 1800),
            seed,
        }
    }
}

/// Prediction discrepancy for one method and length, over traces and trials.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Discrepancy {
    pub n: usize,
    /// Mean of |TR_noisy − TR_clean|.
    pub mean_abs: f64,
    pub max_abs: f64,
    /// Mean of |TR_noisy − TR_clean| / TR_clean over predictions with TR_clean > 0.
    pub mean_rel: Option<f64>,
}

/// Failures k → method → length (s) → discrepancy.
pub type NoiseResult = BTreeMap<usize, BTreeMap<String, BTreeMap<u64, Discrepancy>>>;

/// The Fig. 8 experiment: per trace, the window starts at `hour`:00 on the
/// first test weekday; k failures (down periods) are injected into one of its
/// history days, starting in the hour after `hour`:00; every method predicts
/// again and the change is recorded.
pub fn noise(
    traces: &[&HostSeries],
    methods: &[Box<dyn ReliabilityPredictor>],
    cfg: &ProtocolConfig,
    noise: &NoiseConfig,
) -> NoiseResult {
    let longest = cfg.lengths.iter().copied().max().unwrap_or(3600);
    // (k, method, length) → list of (clean, noisy).
    let mut pairs: BTreeMap<(usize, usize, u64), Vec<(f64, f64)>> = BTreeMap::new();
    for (t, series) in traces.iter().enumerate() {
        let weekday_cfg = ProtocolConfig {
            kind: protocol::KindFilter::Weekday,
            ..cfg.clone()
        };
        let Some(at) = test_days(series, &weekday_cfg)
            .into_iter()
            .filter(|d| DayKind::of(*d) == DayKind::Weekday)
            .find_map(|d| protocol::window_start(series, d, noise.hour))
        else {
            continue;
        };
        let Ok(days) = history_days(series, at, longest as i64, cfg.days) else {
            continue;
        };
        if days.is_empty() {
            continue;
        }
        let request = |len: u64| PredictRequest {
            step_secs: cfg.step_secs,
            days: cfg.days,
            ..PredictRequest::new(at, len, cfg.thresholds)
        };
        let clean: Vec<Vec<Option<f64>>> = methods
            .iter()
            .map(|m| {
                cfg.lengths
                    .iter()
                    .map(|&len| m.forecast(series, &request(len)).ok().map(|f| f.tr))
                    .collect()
            })
            .collect();
        for k in 1..=noise.max_failures {
            for trial in 0..noise.trials {
                let mut rng = ChaCha8Rng::seed_from_u64(
                    noise
                        .seed
                        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        .wrapping_add((t as u64) << 32 | (k as u64) << 16 | trial as u64),
                );
                let day = days[rng.random_range(0..days.len())];
                let intervals: Vec<(i64, i64)> = (0..k)
                    .map(|_| {
                        let start = day.start + rng.random_range(0..3600);
                        let hold = rng.random_range(
                            noise.hold_secs.0..=noise.hold_secs.1.max(noise.hold_secs.0),
                        );
                        (start, start + hold)
                    })
                    .collect();
                let noisy = inject_down(series, &intervals);
                for (m, method) in methods.iter().enumerate() {
                    for (l, &len) in cfg.lengths.iter().enumerate() {
                        let Some(before) = clean[m][l] else { continue };
                        if let Ok(f) = method.forecast(&noisy, &request(len)) {
                            pairs.entry((k, m, len)).or_default().push((before, f.tr));
                        }
                    }
                }
            }
        }
    }
    let mut out: NoiseResult = BTreeMap::new();
    for ((k, m, len), list) in pairs {
        let abs: Vec<f64> = list.iter().map(|(c, n)| (n - c).abs()).collect();
        let rel = list
            .iter()
            .filter(|(c, _)| *c > 0.0)
            .map(|(c, n)| (n - c).abs() / c);
        out.entry(k)
            .or_default()
            .entry(methods[m].name())
            .or_default()
            .insert(
                len,
                Discrepancy {
                    n: abs.len(),
                    mean_abs: crate::eval::metrics::mean(abs.iter().copied()).unwrap_or(0.0),
                    max_abs: abs.iter().copied().fold(0.0, f64::max),
                    mean_rel: crate::eval::metrics::mean(rel),
                },
            );
    }
    out
}

/// A copy of `series` in which each interval [a, b) is a revocation: a down
/// row at a, no rows inside, and at b the row that held at b in the
/// original (so the host comes back as it was). Overlapping intervals merge.
/// Intervals are clipped to the record.
pub fn inject_down(series: &HostSeries, intervals: &[(i64, i64)]) -> HostSeries {
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        return series.clone();
    };
    let mut spans: Vec<(i64, i64)> = intervals
        .iter()
        .map(|&(a, b)| (a.max(first), b.min(last)))
        .filter(|(a, b)| a < b)
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (a, b) in spans {
        match merged.last_mut() {
            Some(prev) if a <= prev.1 => prev.1 = prev.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let mut out = HostSeries::new(series.step_secs, series.max_gap_secs, series.tz.clone());
    out.reserve(series.len() + 2 * merged.len());
    let mut spans = merged.into_iter().peekable();
    let mut rows = series.samples().peekable();
    // Rows come from a valid series and are merged in time order, so pushes succeed.
    while let Some(&(a, b)) = spans.peek() {
        while let Some(row) = rows.next_if(|r| r.time < a) {
            let _ = out.push(row);
        }
        let at_a = series.row_at(a).and_then(|i| series.get(i));
        let free_mib = at_a.map_or(0, |r| r.free_mib);
        let _ = out.push(Sample {
            time: a,
            cpu: 0.0,
            free_mib,
            up: false,
        });
        while rows.next_if(|r| r.time < b).is_some() {}
        if rows.peek().map(|r| r.time) != Some(b) {
            if let Some(back) = series.row_at(b).and_then(|i| series.get(i)) {
                let _ = out.push(Sample { time: b, ..back });
            }
        }
        spans.next();
    }
    for row in rows {
        let _ = out.push(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::registry::methods_from_list;
    use crate::eval::synth::{generate, SynthConfig};
    use crate::model::state::{State, Thresholds};
    use jiff::tz::TimeZone;

    fn flat(rows: i64) -> HostSeries {
        let mut s = HostSeries::new(60, 120, TimeZone::UTC);
        for k in 0..rows {
            s.push(Sample {
                time: k * 60,
                cpu: 5.0,
                free_mib: 500,
                up: true,
            })
            .unwrap();
        }
        s
    }

    #[test]
    fn injected_down_periods_read_as_s5_and_nothing_else_changes() {
        let s = flat(100);
        let th = Thresholds::default();
        // Off-grid start, overlapping spans that merge, and one past the end.
        let noisy = inject_down(&s, &[(610, 900), (850, 1000), (5000, 7000)]);
        for t in 0..5940 {
            let expected = if (610..1000).contains(&t) || (5000..).contains(&t) {
                State::S5
            } else {
                State::S1
            };
            assert_eq!(noisy.state_at(th, t), Some(expected), "t = {t}");
        }
        assert_eq!(noisy.last_time(), s.last_time());
        assert_eq!(
            inject_down(&s, &[]).samples().collect::<Vec<_>>(),
            s.samples().collect::<Vec<_>>()
        );
    }

    #[test]
    fn noise_moves_short_windows_and_is_seeded() {
        let trace = generate(&SynthConfig::new(21, 28, "UTC").unwrap());
        let methods = methods_from_list("km", 1).unwrap();
        let cfg = ProtocolConfig {
            lengths: vec![3600, 10 * 3600],
            ..ProtocolConfig::new(Thresholds::default())
        };
        let nc = NoiseConfig {
            max_failures: 4,
            trials: 3,
            ..NoiseConfig::new(5)
        };
        let a = noise(&[&trace.series], &methods, &cfg, &nc);
        assert_eq!(a, noise(&[&trace.series], &methods, &cfg, &nc));
        let one = &a[&1]["km"][&3600];
        let four = &a[&4]["km"][&3600];
        assert_eq!(one.n, 3);
        assert!(four.mean_abs > 0.0, "four failures changed nothing");
        assert!(four.mean_abs >= one.mean_abs * 0.5);
    }

    #[test]
    fn training_sizes_and_cost_report_every_point() {
        let trace = generate(&SynthConfig::new(4, 21, "UTC").unwrap());
        let methods = methods_from_list("km", 1).unwrap();
        let cfg = ProtocolConfig {
            lengths: vec![3600, 2 * 3600],
            hours: vec![8, 14],
            ..ProtocolConfig::new(Thresholds::default())
        };
        let sizes = training_size(&[&trace.series], &methods, &cfg, &[1, 3], 2, &|| {});
        assert_eq!(sizes.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
        assert!(sizes[&3]["km"][&3600].n > 0);
        let points = cost(&[&trace.series], &cfg, 6, 3);
        assert_eq!(points.len(), 2);
        assert_eq!(points[1].steps, 1200);
        assert_eq!(points[0].samples, 3);
        assert!(points[0].total_ms_median > 0.0);
    }
}
