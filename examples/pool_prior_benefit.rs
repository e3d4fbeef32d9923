//! What the pool's prior is worth to a young host (issue 29): each host of
//! a run is held out in turn and joins a pool made of the others; on each
//! test day it has only its last K days of record (`gleaner eval
//! --record-days K`; K = 0: its first day, no day of record) and answers as
//! the node does — `logistic` when it has a past day of the window's kind,
//! else the prior — three ways:
//!
//! - `built-in`: the built-in prior (p0(T) of `model::baselines::prior`),
//!   and `logistic`'s first days shrink towards it;
//! - `pool-0`: the pool's prior when it has no day of the kind, but
//!   `logistic`'s first days still shrink towards the built-in p0 (the node
//!   before the first-day fix);
//! - `pool`: the pool's prior, and `logistic`'s first days shrink towards
//!   it (`Logistic::towards_pool`, the node now).
//!
//! The pool's prior is the node's rule (`PoolPrior::from_heard`: the median
//! over members, at the summaries' ladder) applied to each other host's
//! claimed curve, taken here as its own survival share at each ladder
//! length over the days before its test split (every local hour, windows
//! starting in S1/S2): what a member with a long, calibrated record claims
//! on average. The held-out host is never in its own pool, and no test day
//! of any host feeds a prior.
//!
//! Prints, per group of hosts (the file name before its last `-` or digit
//! run) and per K and T: cases, Brier of each way, and the paired
//! differences pool − built-in and pool − pool-0 with a 95 % interval
//! from resampling test days (1000 resamples).
//!
//! cargo run --example pool_prior_benefit -- --record-days 0,1,2,7 --lengths 1,3,5,10 TRACE...

use gleaner::eval::load::read_traces;
use gleaner::eval::metrics::{bootstrap_resamples, paired_difference};
use gleaner::eval::protocol::{
    self, record_dates, test_days, window_outcome, window_start, ProtocolConfig,
};
use gleaner::model::baselines::pool_prior::{prior_tr, HeardCurve, PoolPrior};
use gleaner::model::baselines::Logistic;
use gleaner::model::predict::{PredictError, PredictRequest};
use gleaner::model::predictor::{ReliabilityForecast, ReliabilityPredictor};
use gleaner::model::sched::curve::TrCurve;
use gleaner::model::series::HostSeries;
use gleaner::model::state::Thresholds;
use gleaner::net::protocol::LADDER_SECS;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A host as the node answers: `logistic` (towards the pool prior or not), else the
/// prior (`pool` or the built-in one) when no past day of the kind exists.
struct AsNode {
    name: &'static str,
    logistic: Logistic,
    pool: Option<PoolPrior>,
}

impl ReliabilityPredictor for AsNode {
    fn name(&self) -> String {
        self.name.to_string()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        match self.logistic.forecast(series, req) {
            // Tested windows start in S1/S2: the prior from a usable start.
            Err(PredictError::NoHistory { .. }) => Ok(ReliabilityForecast {
                tr: prior_tr(self.pool.as_ref(), req.window_secs, None).0,
                fail_by_cause: None,
            }),
            other => other,
        }
    }
}

/// A host's survival share at each ladder length over its days before the
/// test split: the curve a member with that record claims on average.
fn claimed_curve(series: &HostSeries, cfg: &ProtocolConfig) -> TrCurve {
    let tested = test_days(series, cfg);
    let history: Vec<_> = record_dates(series)
        .into_iter()
        .filter(|d| !tested.contains(d))
        .collect();
    let step = cfg.step_secs.unwrap_or(series.step_secs).max(1);
    let mut scratch = Vec::new();
    let mut points = Vec::new();
    for secs in LADDER_SECS.map(u64::from) {
        let (mut survived, mut n) = (0usize, 0usize);
        for &date in &history {
            for hour in 0..24 {
                let Some(at) = window_start(series, date, hour) else {
                    continue;
                };
                let outcome = window_outcome(series, cfg.thresholds, at, secs, step, &mut scratch);
                if let Some((_, ok)) = outcome.filter(|(s, _)| s.is_transient()) {
                    n += 1;
                    survived += usize::from(ok);
                }
            }
        }
        if n < 24 {
            break;
        }
        points.push((secs as f64, survived as f64 / n as f64));
    }
    TrCurve::new(points)
}

fn group_of(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    stem.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-')
        .to_string()
}

fn list(arg: &str) -> Vec<u64> {
    arg.split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut ks, mut hours, mut paths) = (vec![0, 1, 2, 7], vec![1, 3, 5, 10], Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--record-days" => ks = list(&args.next().unwrap_or_default()),
            "--lengths" => hours = list(&args.next().unwrap_or_default()),
            _ => paths.push(PathBuf::from(a)),
        }
    }
    if paths.len() < 6 {
        eprintln!("usage: pool_prior_benefit [--record-days 0,1,2,7] [--lengths 1,3,5,10] TRACE... (at least 6: a pool needs 5 others)");
        std::process::exit(2);
    }
    let traces = match read_traces(&paths) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let th = Thresholds {
        job_mem_mib: 256,
        ..Thresholds::default()
    };
    let mut cfg = ProtocolConfig::new(th);
    cfg.lengths = hours.iter().map(|h| h * 3600).collect();
    cfg.step_secs = None;
    let claims: Vec<TrCurve> = traces
        .iter()
        .map(|t| claimed_curve(&t.series, &cfg))
        .collect();
    let lengths: Vec<f64> = LADDER_SECS.iter().map(|&s| f64::from(s)).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // (group, K, T) → per test day (Σ sq. error per way, cases).
    type Days = Vec<([f64; 3], usize)>;
    let mut cells: BTreeMap<(String, u64, u64), Days> = BTreeMap::new();
    let mut briers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, trace) in traces.iter().enumerate() {
        let others = claims
            .iter()
            .enumerate()
            .filter(|(j, c)| *j != i && !c.points().is_empty())
            .map(|(_, curve)| HeardCurve {
                days_used: 30,
                usable: true,
                computed_at_unix: 0,
                curve,
            });
        let Some(pool) = PoolPrior::from_heard(others, 0, &lengths) else {
            eprintln!("{}: fewer than 5 others with a curve", paths[i].display());
            continue;
        };
        briers.entry(group_of(&paths[i])).or_default().push(format!(
            "{}: pool prior at 1/3/5/10 h {:.3}/{:.3}/{:.3}/{:.3}, its own {}",
            paths[i].display(),
            pool.tr(3600, None),
            pool.tr(3 * 3600, None),
            pool.tr(5 * 3600, None),
            pool.tr(10 * 3600, None),
            [1u64, 3, 5, 10]
                .map(|h| format!("{:.3}", claims[i].tr_at((h * 3600) as f64)))
                .join("/"),
        ));
        let methods: Vec<Box<dyn ReliabilityPredictor>> = vec![
            Box::new(AsNode {
                name: "built-in",
                logistic: Logistic::shared(),
                pool: None,
            }),
            Box::new(AsNode {
                name: "pool-0",
                logistic: Logistic::shared(),
                pool: Some(pool.clone()),
            }),
            Box::new(AsNode {
                name: "pool",
                logistic: Logistic::shared().towards_pool(Some(Arc::new(pool.clone()))),
                pool: Some(pool),
            }),
        ];
        for &k in &ks {
            let cfg = ProtocolConfig {
                record_days: Some(u32::try_from(k).unwrap_or(u32::MAX)),
                ..cfg.clone()
            };
            let days = protocol::run(&[&trace.series], &methods, &cfg, threads, &|| {});
            for day in days {
                let mut by_length: BTreeMap<u64, ([f64; 3], usize)> = BTreeMap::new();
                for c in &day.cases {
                    let y = f64::from(u8::from(c.case.survived));
                    let e = by_length.entry(c.case.window_secs).or_default();
                    for (w, tr) in c.tr.iter().enumerate() {
                        e.0[w] += (tr - y).powi(2);
                    }
                    e.1 += 1;
                }
                for (secs, sums) in by_length {
                    cells
                        .entry((group_of(&paths[i]), k, secs))
                        .or_default()
                        .push(sums);
                }
            }
        }
    }
    for (group, lines) in &briers {
        println!("## {group}");
        for l in lines {
            println!("- {l}");
        }
    }
    println!();
    println!("| hosts | record | T | cases (days) | built-in | pool-0 | pool | pool − built-in [95 %] | pool − pool-0 [95 %] |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for ((group, k, secs), days) in &cells {
        let n: usize = days.iter().map(|d| d.1).sum();
        if n == 0 {
            continue;
        }
        let brier = |w: usize| days.iter().map(|d| d.0[w]).sum::<f64>() / n as f64;
        let resamples = bootstrap_resamples(days.len(), 1000, 1);
        let diff = |a: usize, b: usize| {
            let clusters: Vec<(f64, usize)> = days.iter().map(|d| (d.0[a] - d.0[b], d.1)).collect();
            match paired_difference(&clusters, &resamples) {
                Some(p) => match p.ci {
                    Some(ci) => format!("{:+.4} [{:+.4}, {:+.4}]", p.mean, ci.lo, ci.hi),
                    None => format!("{:+.4}", p.mean),
                },
                None => "-".into(),
            }
        };
        println!(
            "| {group} | {} | {}h | {n} ({}) | {:.4} | {:.4} | {:.4} | {} | {} |",
            if *k == 0 {
                "first day".to_string()
            } else {
                format!("{k} d")
            },
            secs / 3600,
            days.len(),
            brier(0),
            brier(1),
            brier(2),
            diff(2, 0),
            diff(2, 1),
        );
    }
}
