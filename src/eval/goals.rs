//! The prediction goals of issue 29, computed from the tested windows of a
//! run for the default method: no harm against the host's base rate, skill
//! over `freq`, discrimination, and calibration (bias, Cox slope, ECE
//! against its simulated floor). The maths lives in `model::forecast_stats`; this
//! module picks the windows, the clusters and the base rate.
//!
//! **One run, one host kind.** The goals are per host kind and never pooled
//! across kinds, so a run's traces are taken as one kind: run desktops, VMs
//! and cluster nodes separately.
//!
//! **Clusters.** Bootstrap bounds resample weekly blocks, (trace, ISO week
//! of the local test day), with one seeded set of resamples for every
//! length; the Cox interval and the ECE floor cluster by test day (trace,
//! date).
//!
//! **Base rate.** The host's past survival rate for a window of length T on
//! day D is the share of that trace's tested windows of length T on test
//! days before D that survived; it is computed from the same per-window
//! rows (`--windows`), so anyone can redo it. Windows on a trace's first
//! test day have no base rate and are left out of the no-harm comparison
//! only (`no_harm.n` counts the rest).
//!
//! It knows nothing about files or the command line.

use crate::eval::protocol::DayResult;
use crate::eval::summary::SKILL_REFERENCE;
use crate::model::baselines::DEFAULT_METHOD;
use crate::model::forecast_stats::{
    auc_with_bounds, block_counts, cox_calibration, ece, ece_floor, mean_bias, paired_brier,
    Bounds, CoxFit, EceFloor, PairedBrier,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// Simulations behind each ECE floor.
pub const ECE_SIMS: usize = 500;
/// No harm: the upper bound of Brier(default) − Brier(base rate) at most this.
pub const NO_HARM_MARGIN: f64 = 0.002;
/// Calibration: |mean(p − y)| at most this.
pub const MAX_BIAS: f64 = 0.03;
/// Calibration: the Cox slope's lower bound at least this.
pub const MIN_SLOPE_LO: f64 = 0.8;
/// Discrimination (desktops and VMs): the AUC's lower bound above this.
pub const MIN_AUC_LO: f64 = 0.55;

/// The goals at one window length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoalCell {
    pub length_s: u64,
    pub n: usize,
    /// Default minus the host's base rate (A = default, B = base rate).
    pub no_harm: Option<PairedBrier>,
    /// Default against `freq` (A = default, B = freq), when `freq` ran.
    pub over_freq: Option<PairedBrier>,
    pub auc: Option<f64>,
    pub auc_ci: Option<Bounds>,
    pub mean_bias: Option<f64>,
    pub cox: Option<CoxFit>,
    pub ece: Option<f64>,
    pub ece_floor: Option<EceFloor>,
    /// Kind-independent verdicts: no harm, discrimination (as for desktops
    /// and VMs), calibration (bias, slope, ECE). `None` when not computable.
    pub met_no_harm: Option<bool>,
    pub met_auc: Option<bool>,
    pub met_bias: Option<bool>,
    pub met_slope: Option<bool>,
    pub met_ece: Option<bool>,
}

/// The goals of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goals {
    pub method: String,
    pub skill_reference: Option<String>,
    /// Weekly blocks resampled and test days clustered.
    pub weeks: usize,
    pub days: usize,
    pub resamples: usize,
    pub ece_sims: usize,
    pub cells: Vec<GoalCell>,
}

fn week_of(date: jiff::civil::Date) -> i64 {
    // Days since Monday 1970-01-05, in whole weeks.
    date.since(jiff::civil::date(1970, 1, 5))
        .map_or(0, |s| i64::from(s.get_days()).div_euclid(7))
}

/// The goals for the default method, or `None` when it did not run.
pub fn goals(
    days: &[DayResult],
    names: &[String],
    lengths: &[u64],
    resamples: usize,
    seed: u64,
) -> Option<Goals> {
    let m = names.iter().position(|n| n == DEFAULT_METHOD)?;
    let reference = names.iter().position(|n| n == SKILL_REFERENCE);
    let mut week_ids: BTreeMap<(usize, i64), usize> = BTreeMap::new();
    let mut day_ids: BTreeMap<(usize, jiff::civil::Date), usize> = BTreeMap::new();
    for d in days.iter().filter(|d| !d.cases.is_empty()) {
        for c in &d.cases {
            let next = week_ids.len();
            week_ids
                .entry((c.case.trace, week_of(c.case.date)))
                .or_insert(next);
            let next = day_ids.len();
            day_ids.entry((c.case.trace, c.case.date)).or_insert(next);
        }
    }
    let counts = block_counts(week_ids.len(), resamples, seed);
    let mut cells = Vec::new();
    for &len in lengths {
        let mut p = Vec::new();
        let mut y = Vec::new();
        let mut week = Vec::new();
        let mut day = Vec::new();
        let mut freq = Vec::new();
        // (p, base rate, y, week) where a base rate exists.
        let mut with_rate = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Per trace: (survived, tested) on earlier test days.
        let mut past: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for d in days {
            let today: Vec<_> = d
                .cases
                .iter()
                .filter(|s| s.case.window_secs == len)
                .collect();
            for s in &today {
                let c = &s.case;
                let w = week_ids.get(&(c.trace, week_of(c.date))).copied()?;
                p.push(s.tr[m]);
                y.push(c.survived);
                week.push(w);
                day.push(day_ids.get(&(c.trace, c.date)).copied()?);
                if let Some(r) = reference {
                    freq.push(s.tr[r]);
                }
                if let Some(&(survived, tested)) = past.get(&c.trace).filter(|t| t.1 > 0) {
                    with_rate.0.push(s.tr[m]);
                    with_rate.1.push(survived as f64 / tested as f64);
                    with_rate.2.push(c.survived);
                    with_rate.3.push(w);
                }
            }
            // Today's outcomes join the base rate only after today.
            let entry = past.entry(d.trace).or_default();
            entry.0 += today.iter().filter(|s| s.case.survived).count();
            entry.1 += today.len();
        }
        let no_harm = paired_brier(
            &with_rate.0,
            &with_rate.1,
            &with_rate.2,
            &with_rate.3,
            &counts,
        );
        let over_freq = reference.and_then(|_| paired_brier(&p, &freq, &y, &week, &counts));
        let (auc, auc_ci) =
            auc_with_bounds(&p, &y, &week, &counts).map_or((None, None), |(a, ci)| (Some(a), ci));
        let bias = mean_bias(&p, &y);
        let cox = cox_calibration(&p, &y, &day);
        let e = ece(&p, &y);
        let floor = ece_floor(&p, &y, &day, ECE_SIMS, seed.wrapping_add(len));
        cells.push(GoalCell {
            length_s: len,
            n: p.len(),
            met_no_harm: no_harm
                .and_then(|h| h.difference_ci)
                .map(|ci| ci.hi <= NO_HARM_MARGIN),
            met_auc: auc_ci.map(|ci| ci.lo > MIN_AUC_LO),
            met_bias: bias.map(|b| b.abs() <= MAX_BIAS),
            met_slope: cox.map(|c| c.slope_ci.contains(1.0) && c.slope_ci.lo >= MIN_SLOPE_LO),
            met_ece: e.zip(floor).map(|(e, f)| e <= f.p95),
            no_harm,
            over_freq,
            auc,
            auc_ci,
            mean_bias: bias,
            cox,
            ece: e,
            ece_floor: floor,
        });
    }
    Some(Goals {
        method: DEFAULT_METHOD.to_string(),
        skill_reference: reference.map(|_| SKILL_REFERENCE.to_string()),
        weeks: week_ids.len(),
        days: day_ids.len(),
        resamples,
        ece_sims: ECE_SIMS,
        cells,
    })
}

fn mark(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => " ✓",
        Some(false) => " ✗",
        None => "",
    }
}

fn bounds(b: Option<Bounds>, scale: f64, digits: usize) -> String {
    b.map_or_else(String::new, |b| {
        format!(" [{:.digits$}, {:.digits$}]", b.lo * scale, b.hi * scale)
    })
}

/// The goals as a markdown table, one row per length.
pub fn to_table(g: &Goals) -> String {
    let mut out = format!(
        "Goals (issue 29) for `{}`; the run's traces are one host kind. 95 % bounds: bootstrap over {} \
         weekly blocks ({} resamples); Cox slope clustered by {} test days; ECE floor: 95th percentile of \
         {} simulated calibrated forecasters with the data's overlap. ✓/✗: no harm ≤ +{}, AUC lower bound \
         > {} (desktops, VMs), |bias| ≤ {}, slope interval ∋ 1 with lower bound ≥ {}, ECE ≤ floor.\n\n",
        g.method, g.weeks, g.resamples, g.days, g.ece_sims, NO_HARM_MARGIN, MIN_AUC_LO, MAX_BIAS, MIN_SLOPE_LO
    );
    out.push_str(&format!(
        "| T | n | Brier − base rate | skill over {} | AUC | mean(p − y) | Cox slope | ECE / floor |\n|---|---|---|---|---|---|---|---|\n",
        g.skill_reference.as_deref().unwrap_or("(not run)")
    ));
    for c in &g.cells {
        let no_harm = c.no_harm.map_or("–".to_string(), |h| {
            format!(
                "{:+.4}{}{}",
                h.difference,
                bounds(h.difference_ci, 1.0, 4),
                mark(c.met_no_harm)
            )
        });
        let skill = c
            .over_freq
            .and_then(|f| Some((f.skill?, f.skill_ci)))
            .map_or("–".to_string(), |(s, ci)| {
                format!("{:+.1} %{}", s * 100.0, bounds(ci, 100.0, 1))
            });
        let auc = c.auc.map_or("–".to_string(), |a| {
            format!("{a:.3}{}{}", bounds(c.auc_ci, 1.0, 3), mark(c.met_auc))
        });
        let bias = c.mean_bias.map_or("–".to_string(), |b| {
            format!("{b:+.3}{}", mark(c.met_bias))
        });
        let cox = c.cox.map_or("–".to_string(), |x| {
            format!(
                "{:.2}{}{}",
                x.slope,
                bounds(Some(x.slope_ci), 1.0, 2),
                mark(c.met_slope)
            )
        });
        let ece = c.ece.map_or("–".to_string(), |e| {
            format!(
                "{e:.3} / {}{}",
                c.ece_floor
                    .map_or("–".to_string(), |f| format!("{:.3}", f.p95)),
                mark(c.met_ece)
            )
        });
        out.push_str(&format!(
            "| {} | {} | {no_harm} | {skill} | {auc} | {bias} | {cox} | {ece} |\n",
            crate::human::length_label(c.length_s),
            c.n
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::protocol::{DayKind, ScoredCase, TestCase};
    use crate::model::state::State;

    /// Two traces, `n` days each from Monday 2025-09-01, 24 hourly windows of 1 h;
    /// the outcome is a fixed pattern and the methods are (default, freq).
    fn run(n: i64, forecast: impl Fn(bool, u8) -> (f64, f64)) -> Vec<DayResult> {
        let mut days = Vec::new();
        for trace in 0..2 {
            for k in 0..n {
                let date = jiff::civil::date(2025, 9, 1)
                    .checked_add(jiff::Span::new().days(k))
                    .unwrap();
                let cases = (0..24u8)
                    .map(|hour| {
                        // Survives at night, fails on most afternoons.
                        let y = hour < 12 || (k + i64::from(hour) + trace as i64) % 5 == 0;
                        let (a, b) = forecast(y, hour);
                        ScoredCase {
                            case: TestCase {
                                trace,
                                date,
                                kind: DayKind::of(date),
                                hour,
                                window_secs: 3600,
                                at: 1_756_684_800 + k * 86_400 + i64::from(hour) * 3600,
                                start: State::S1,
                                survived: y,
                            },
                            tr: vec![a, b],
                        }
                    })
                    .collect();
                days.push(DayResult {
                    trace,
                    date: Some(date),
                    cases,
                    ..DayResult::default()
                });
            }
        }
        days
    }

    fn names() -> Vec<String> {
        vec![DEFAULT_METHOD.to_string(), SKILL_REFERENCE.to_string()]
    }

    #[test]
    fn an_hour_aware_forecaster_meets_the_goals_a_constant_does_not() {
        // The hour-aware forecast is the pattern's true rate (1 before noon, 0.2 after).
        let days = run(60, |_, h| (if h < 12 { 0.98 } else { 0.2 }, 0.6));
        let g = goals(&days, &names(), &[3600], 500, 1).unwrap();
        let c = &g.cells[0];
        assert_eq!(c.n, 2 * 60 * 24);
        assert_eq!(g.days, 120);
        assert!(g.weeks >= 18, "{}", g.weeks);
        // The base rate is missing on each trace's first day only.
        assert_eq!(c.no_harm.unwrap().n, 2 * 59 * 24);
        assert_eq!(c.met_no_harm, Some(true), "{c:?}");
        assert_eq!(c.met_auc, Some(true));
        assert!(c.over_freq.unwrap().skill_ci.unwrap().lo > 0.5);
        assert_eq!(c.met_bias, Some(true), "{c:?}");
        // The constant (no information): AUC 0.5, not met; it is the base rate, so no harm holds.
        let days = run(60, |_, _| (0.6, 0.6));
        let c = goals(&days, &names(), &[3600], 500, 1).unwrap().cells[0].clone();
        assert_eq!(c.auc, Some(0.5));
        assert_eq!(c.met_auc, Some(false));
        assert_eq!(c.over_freq.unwrap().difference, 0.0);
        // Too optimistic by 0.3 in the afternoon: harm, bias and ECE fail.
        let days = run(60, |_, h| (if h < 12 { 0.98 } else { 0.5 }, 0.6));
        let c = goals(&days, &names(), &[3600], 500, 1).unwrap().cells[0].clone();
        assert_eq!(c.met_bias, Some(false), "{c:?}");
        assert_eq!(c.met_ece, Some(false), "{c:?}");
        assert!(
            to_table(&goals(&days, &names(), &[3600], 500, 1).unwrap()).contains("| 1h | 2880 |")
        );
    }

    #[test]
    fn no_goals_without_the_default() {
        let days = run(10, |_, _| (0.5, 0.5));
        assert!(goals(
            &days,
            &["freq".to_string(), "km".to_string()],
            &[3600],
            500,
            1
        )
        .is_none());
    }
}
