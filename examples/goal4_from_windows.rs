//! Goal 4 of issue 29 (calibration) recomputed from a per-window file
//! (`gleaner eval --windows FILE`'s columns) with the very functions and
//! seeds `gleaner eval` uses (`model::forecast_stats`: bias, the Cox slope
//! clustered by (host, date), ECE and its simulated floor, seed
//! `SEED + length`), so a recalibration prototyped offline
//! (`examples/goal4-recal.py`, which writes its forecasts in the same
//! columns) is judged by the goal's own code, not a re-implementation.
//! Day clusters are numbered in order of first appearance over the whole
//! file (every method and length), as `eval::goals` numbers them over its
//! days, so `logistic`'s rows of an `eval` run give that run's figures to
//! the digit (the floor's draws follow the numbering).
//! `cargo run --release --example goal4_from_windows -- FILE [SEED=1] [METHOD,...]`
use gleaner::eval::goals::{ECE_SIMS, MAX_BIAS, MIN_SLOPE_LO};
use gleaner::model::forecast_stats::{cox_calibration, ece, ece_floor, mean_bias};
use std::collections::BTreeMap;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: goal4_from_windows FILE [SEED] [METHOD,...]");
        std::process::exit(2);
    };
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let only: Option<Vec<&str>> = args.get(2).map(|m| m.split(',').collect());
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    });
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| {
        header.iter().position(|h| *h == name).unwrap_or_else(|| {
            eprintln!("{path}: no column {name}");
            std::process::exit(1);
        })
    };
    let (host, date, length, method, forecast, outcome) = (
        col("host"),
        col("date"),
        col("length_s"),
        col("method"),
        col("forecast"),
        col("outcome"),
    );
    let mut day_ids: BTreeMap<(String, String), usize> = BTreeMap::new();
    // (method, length) -> (p, y, day)
    type Cell = (Vec<f64>, Vec<bool>, Vec<usize>);
    let mut cells: BTreeMap<(String, u64), Cell> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < header.len() || f[outcome].is_empty() {
            continue;
        }
        let next = day_ids.len();
        let day = *day_ids
            .entry((f[host].to_string(), f[date].to_string()))
            .or_insert(next);
        if only.as_ref().is_some_and(|o| !o.contains(&f[method])) {
            continue;
        }
        let (Ok(len), Ok(p)) = (f[length].parse::<u64>(), f[forecast].parse::<f64>()) else {
            continue;
        };
        if !order.iter().any(|m| m == f[method]) {
            order.push(f[method].to_string());
        }
        let cell = cells.entry((f[method].to_string(), len)).or_default();
        cell.0.push(p);
        cell.1.push(f[outcome] == "1");
        cell.2.push(day);
    }
    println!("| method | T | n | mean(p − y) | Cox slope [95 %] | ECE / floor | goal 4 |");
    println!("|---|---|---|---|---|---|---|");
    for m in &order {
        for ((name, len), (p, y, day)) in cells.iter().filter(|((n, _), _)| n == m) {
            let bias = mean_bias(p, y);
            let cox = cox_calibration(p, y, day);
            let e = ece(p, y);
            let floor = ece_floor(p, y, day, ECE_SIMS, seed.wrapping_add(*len));
            let met = bias.is_some_and(|b| b.abs() <= MAX_BIAS)
                && cox.is_some_and(|c| c.slope_ci.contains(1.0) && c.slope_ci.lo >= MIN_SLOPE_LO)
                && e.zip(floor).is_some_and(|(e, f)| e <= f.p95);
            let slope = cox.map_or("–".to_string(), |c| {
                format!(
                    "{:.2} [{:.2}, {:.2}]",
                    c.slope, c.slope_ci.lo, c.slope_ci.hi
                )
            });
            let ece_text = e
                .zip(floor)
                .map_or("–".to_string(), |(e, f)| format!("{e:.4} / {:.4}", f.p95));
            println!(
                "| {name} | {}h | {} | {:+.3} | {slope} | {ece_text} | {} |",
                len / 3600,
                p.len(),
                bias.unwrap_or(f64::NAN),
                if met { "met" } else { "not met" }
            );
        }
    }
}
