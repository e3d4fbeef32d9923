//! What the pool's prior is worth to a young host (issue 29): each host of
//! a run is held out in turn and joins a pool made of the others; on each
//! test day it has only its last K days of record (`gleaner eval
//! --record-days K`; K = 0: its first day, no day of record) and answers as
//! the node does — `logistic` when it has a past day of the window's kind,
//! else the prior, and `logistic`'s first days shrink towards that prior
//! (`Logistic::towards_pool`) — with the built-in prior (`built-in`: p0(T)
//! of `model::baselines::prior`) and with the pool prior by each rule asked
//! for (`--rules`: `median`, the members' median however they disagree;
//! `default`, the node's rule; `A:B`, the median in full while the
//! members' interquartile range is at most A, not at all from B
//! (`PoolRule::Agreement`); `qA`, the built-in prior moved into the
//! members' claims' [A, 1 − A] quantiles (`PoolRule::Nearest`)). A rule that gives no pool prior leaves the built-in one.
//!
//! The pool's prior is the model's rule (`PoolPrior::from_heard_by`, at the
//! summaries' ladder) applied to each other host's
//! claimed curve, taken here as its own survival share at each ladder
//! length over the days before its test split (every local hour, windows
//! starting in S1/S2): what a member with a long, calibrated record claims
//! on average. The held-out host is never in its own pool, and no test day
//! of any host feeds a prior.
//!
//! Prints, per group of hosts (the file name before its last `-` or digit
//! run) and per K and T: cases, Brier of `built-in` and, per rule, the
//! paired difference rule − built-in with a 95 % interval from resampling
//! test days (1000 resamples); then per rule the mean of those differences
//! over the cells and the largest.
//!
//! cargo run --example pool_prior_benefit -- --record-days 0,1 --lengths 1,3,5,10 --rules median,default TRACE...

use gleaner::eval::load::read_traces;
use gleaner::eval::metrics::{bootstrap_resamples, paired_difference};
use gleaner::eval::protocol::{
    self, record_dates, test_days, window_outcome, window_start, ProtocolConfig,
};
use gleaner::model::baselines::pool_prior::{prior_tr, HeardCurve, PoolPrior, PoolRule};
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
    name: String,
    logistic: Logistic,
    pool: Option<PoolPrior>,
}

impl ReliabilityPredictor for AsNode {
    fn name(&self) -> String {
        self.name.clone()
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

fn rule_of(name: &str) -> Option<PoolRule> {
    match name {
        "median" => Some(PoolRule::MEDIAN),
        "default" => Some(PoolRule::DEFAULT),
        _ => match name.strip_prefix('q') {
            Some(q) => Some(PoolRule::Nearest {
                quantile: q.parse().ok()?,
            }),
            None => {
                let (a, b) = name.split_once(':')?;
                Some(PoolRule::Agreement {
                    full_below: a.parse().ok()?,
                    none_above: b.parse().ok()?,
                })
            }
        },
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut ks, mut hours, mut paths) = (vec![0, 1], vec![1, 3, 5, 10], Vec::new());
    let mut rules = vec!["median".to_string(), "default".to_string()];
    while let Some(a) = args.next() {
        match a.as_str() {
            "--record-days" => ks = list(&args.next().unwrap_or_default()),
            "--lengths" => hours = list(&args.next().unwrap_or_default()),
            "--rules" => {
                rules = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::to_string)
                    .collect()
            }
            _ => paths.push(PathBuf::from(a)),
        }
    }
    let parsed: Vec<(String, PoolRule)> = rules
        .iter()
        .filter_map(|r| match rule_of(r) {
            Some(rule) => Some((r.clone(), rule)),
            None => {
                eprintln!("--rules: {r:?} is not median, default, A:B or qA");
                None
            }
        })
        .collect();
    if paths.len() < 6 || parsed.len() != rules.len() {
        eprintln!("usage: pool_prior_benefit [--record-days 0,1] [--lengths 1,3,5,10] [--rules median,default,A:B,qA] TRACE... (at least 6: a pool needs 5 others)");
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
    let ways = 1 + parsed.len();
    // (group, K, T) → per test day (Σ sq. error per way, cases).
    type Days = Vec<(Vec<f64>, usize)>;
    let mut cells: BTreeMap<(String, u64, u64), Days> = BTreeMap::new();
    let mut priors: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let show = |p: Option<&PoolPrior>| match p {
        Some(p) => [1u64, 3, 5, 10]
            .map(|h| format!("{:.3}", p.tr(h * 3600, None)))
            .join("/"),
        None => "none".to_string(),
    };
    for (i, trace) in traces.iter().enumerate() {
        let others = || {
            claims
                .iter()
                .enumerate()
                .filter(|(j, c)| *j != i && !c.points().is_empty())
                .map(|(_, curve)| HeardCurve {
                    days_used: 30,
                    usable: true,
                    computed_at_unix: 0,
                    curve,
                })
        };
        if PoolPrior::from_heard_by(PoolRule::MEDIAN, others(), 0, &lengths).is_none() {
            eprintln!("{}: fewer than 5 others with a curve", paths[i].display());
            continue;
        }
        let pools: Vec<Option<PoolPrior>> = parsed
            .iter()
            .map(|(_, rule)| PoolPrior::from_heard_by(*rule, others(), 0, &lengths))
            .collect();
        priors.entry(group_of(&paths[i])).or_default().push(format!(
            "{}: at 1/3/5/10 h its own {}; {}",
            paths[i].display(),
            [1u64, 3, 5, 10]
                .map(|h| format!("{:.3}", claims[i].tr_at((h * 3600) as f64)))
                .join("/"),
            parsed
                .iter()
                .zip(&pools)
                .map(|((name, _), p)| format!("{name} {}", show(p.as_ref())))
                .collect::<Vec<_>>()
                .join("; "),
        ));
        let mut methods: Vec<Box<dyn ReliabilityPredictor>> = vec![Box::new(AsNode {
            name: "built-in".into(),
            logistic: Logistic::shared(),
            pool: None,
        })];
        for ((name, _), pool) in parsed.iter().zip(pools) {
            methods.push(Box::new(AsNode {
                name: name.clone(),
                logistic: Logistic::shared().towards_pool(pool.clone().map(Arc::new)),
                pool,
            }));
        }
        for &k in &ks {
            let cfg = ProtocolConfig {
                record_days: Some(u32::try_from(k).unwrap_or(u32::MAX)),
                ..cfg.clone()
            };
            let days = protocol::run(&[&trace.series], &methods, &cfg, threads, &|| {});
            for day in days {
                let mut by_length: BTreeMap<u64, (Vec<f64>, usize)> = BTreeMap::new();
                for c in &day.cases {
                    let y = f64::from(u8::from(c.case.survived));
                    let e = by_length
                        .entry(c.case.window_secs)
                        .or_insert_with(|| (vec![0.0; ways], 0));
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
    for (group, lines) in &priors {
        println!("## {group}");
        for l in lines {
            println!("- {l}");
        }
    }
    println!();
    let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
    println!(
        "| hosts | record | T | cases (days) | built-in | {} |",
        names
            .iter()
            .map(|n| format!("{n} − built-in [95 %]"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|---|---|---|---|{}", "---|".repeat(names.len()));
    // Per rule: Σ of the cells' mean differences, cells, the largest.
    let mut totals = vec![(0.0f64, 0usize, f64::NEG_INFINITY); names.len()];
    for ((group, k, secs), days) in &cells {
        let n: usize = days.iter().map(|d| d.1).sum();
        if n == 0 {
            continue;
        }
        let brier = |w: usize| days.iter().map(|d| d.0[w]).sum::<f64>() / n as f64;
        let resamples = bootstrap_resamples(days.len(), 1000, 1);
        let mut row = Vec::new();
        for (r, total) in totals.iter_mut().enumerate() {
            let clusters: Vec<(f64, usize)> =
                days.iter().map(|d| (d.0[r + 1] - d.0[0], d.1)).collect();
            let mean = brier(r + 1) - brier(0);
            *total = (total.0 + mean, total.1 + 1, total.2.max(mean));
            row.push(match paired_difference(&clusters, &resamples) {
                Some(p) => match p.ci {
                    Some(ci) => format!("{:+.4} [{:+.4}, {:+.4}]", p.mean, ci.lo, ci.hi),
                    None => format!("{:+.4}", p.mean),
                },
                None => "-".into(),
            });
        }
        println!(
            "| {group} | {} | {}h | {n} ({}) | {:.4} | {} |",
            if *k == 0 {
                "first day".to_string()
            } else {
                format!("{k} d")
            },
            secs / 3600,
            days.len(),
            brier(0),
            row.join(" | "),
        );
    }
    println!();
    for (name, (sum, cells, worst)) in names.iter().zip(totals) {
        if cells > 0 {
            println!(
                "{name}: mean over {cells} cells {:+.4}, largest {worst:+.4}",
                sum / cells as f64
            );
        }
    }
}
