//! The prediction goals of issue 29, computed from the tested windows of a
//! run for the default method: no harm against the host's base rate, skill
//! over `freq`, discrimination, calibration (bias, Cox slope, ECE against
//! its simulated floor) and rivals (no other method of the run better by
//! more than a margin, by Hansen's SPA per length and Holm across lengths).
//! The maths lives in `model::forecast_stats`; this module picks the
//! windows, the clusters, the base rate and the rivals.
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
//! **Rivals.** Every other method of the run is a rival (run `--methods
//! all`, or a list, to choose the field; the report names them). In each
//! cell, the margin is max([`RIVAL_MARGIN_MIN`], [`RIVAL_MARGIN_SHARE`] ×
//! the default's Brier); the SPA p-values of the cells are adjusted by
//! Holm's method over the run's lengths, and the goal is met in a cell
//! whose adjusted p-value is at least [`RIVAL_ALPHA`]. A challenger named
//! with the run (`--challenger`) gets its paired Brier difference beside.
//!
//! It knows nothing about files or the command line.

use crate::eval::protocol::DayResult;
use crate::eval::summary::SKILL_REFERENCE;
use crate::model::baselines::DEFAULT_METHOD;
use crate::model::forecast_stats::{
    auc_with_bounds, block_counts, cox_calibration, ece, ece_floor, holm, mean_bias, paired_brier,
    spa_rivals, Bounds, CoxFit, EceFloor, PairedBrier, RivalTest,
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
/// Rivals: a rival counts as better only by more than the larger of this
/// and [`RIVAL_MARGIN_SHARE`] of the default's Brier.
pub const RIVAL_MARGIN_MIN: f64 = 0.002;
pub const RIVAL_MARGIN_SHARE: f64 = 0.02;
/// Rivals: a Holm-adjusted SPA p-value below this finds a better rival.
pub const RIVAL_ALPHA: f64 = 0.05;

/// The rivals' margin in a cell whose default scores `brier`.
pub fn rival_margin(brier: f64) -> f64 {
    RIVAL_MARGIN_MIN.max(RIVAL_MARGIN_SHARE * brier)
}

/// The rivals goal in one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RivalsCell {
    pub test: RivalTest,
    /// The rival with the lowest Brier, and the one that sets the statistic.
    pub best: Option<String>,
    pub leader: Option<String>,
    /// The SPA p-value adjusted by Holm's method over the run's lengths.
    pub holm_p: f64,
}

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
    /// Every other method of the run against the default, when there is one.
    pub rivals: Option<RivalsCell>,
    /// The default against the named challenger (A = default, B = challenger).
    pub challenger: Option<PairedBrier>,
    /// Kind-independent verdicts: no harm, discrimination (as for desktops
    /// and VMs), calibration (bias, slope, ECE). `None` when not computable.
    pub met_no_harm: Option<bool>,
    pub met_auc: Option<bool>,
    pub met_bias: Option<bool>,
    pub met_slope: Option<bool>,
    pub met_ece: Option<bool>,
    pub met_rivals: Option<bool>,
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
    /// The methods the default was tested against (goal 5), in run order.
    pub rivals: Vec<String>,
    /// The round's challenger, named before the run.
    pub challenger: Option<String>,
    pub cells: Vec<GoalCell>,
}

fn week_of(date: jiff::civil::Date) -> i64 {
    // Days since Monday 1970-01-05, in whole weeks.
    date.since(jiff::civil::date(1970, 1, 5))
        .map_or(0, |s| i64::from(s.get_days()).div_euclid(7))
}

/// The goals for the default method, or `None` when it did not run.
/// `challenger`, when given, must be one of `names`.
pub fn goals(
    days: &[DayResult],
    names: &[String],
    lengths: &[u64],
    resamples: usize,
    seed: u64,
    challenger: Option<&str>,
) -> Option<Goals> {
    goals_of(
        DEFAULT_METHOD,
        days,
        names,
        lengths,
        resamples,
        seed,
        challenger,
    )
}

/// The same goals for `method` as if it were the default (every other
/// method of the run its rival): is there any method of the run that meets
/// them where the default does not (`gleaner eval --goals-for`)? `None`
/// when `method` did not run.
pub fn goals_of(
    method: &str,
    days: &[DayResult],
    names: &[String],
    lengths: &[u64],
    resamples: usize,
    seed: u64,
    challenger: Option<&str>,
) -> Option<Goals> {
    let m = names.iter().position(|n| n == method)?;
    let reference = names.iter().position(|n| n == SKILL_REFERENCE);
    let challenger = challenger.and_then(|c| names.iter().position(|n| n == c));
    let rivals: Vec<usize> = (0..names.len()).filter(|&j| j != m).collect();
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
        // Every method's forecasts, in run order.
        let mut all: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
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
                for (j, forecasts) in all.iter_mut().enumerate() {
                    forecasts.push(s.tr.get(j).copied()?);
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
        let over_freq = reference.and_then(|r| paired_brier(&p, &all[r], &y, &week, &counts));
        let challenged = challenger.and_then(|c| paired_brier(&p, &all[c], &y, &week, &counts));
        let rival_test = if rivals.is_empty() || p.is_empty() {
            None
        } else {
            let brier = p
                .iter()
                .zip(&y)
                .map(|(&p, &y)| (p - f64::from(u8::from(y))).powi(2))
                .sum::<f64>()
                / p.len() as f64;
            let forecasts: Vec<&[f64]> = rivals.iter().map(|&j| all[j].as_slice()).collect();
            spa_rivals(&p, &forecasts, &y, &week, &counts, rival_margin(brier))
        }
        .map(|test| RivalsCell {
            best: test.best.map(|k| names[rivals[k]].clone()),
            leader: test.leader.map(|k| names[rivals[k]].clone()),
            holm_p: test.p_value,
            test,
        });
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
            met_rivals: None,
            rivals: rival_test,
            challenger: challenged,
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
    // Holm across the run's lengths.
    let tested: Vec<usize> = (0..cells.len())
        .filter(|&i| cells[i].rivals.is_some())
        .collect();
    let raw: Vec<f64> = tested
        .iter()
        .filter_map(|&i| cells[i].rivals.as_ref().map(|r| r.test.p_value))
        .collect();
    for (&i, adjusted) in tested.iter().zip(holm(&raw)) {
        if let Some(r) = cells[i].rivals.as_mut() {
            r.holm_p = adjusted;
        }
        cells[i].met_rivals = Some(adjusted >= RIVAL_ALPHA);
    }
    Some(Goals {
        method: method.to_string(),
        skill_reference: reference.map(|_| SKILL_REFERENCE.to_string()),
        weeks: week_ids.len(),
        days: day_ids.len(),
        resamples,
        ece_sims: ECE_SIMS,
        rivals: rivals.iter().map(|&j| names[j].clone()).collect(),
        challenger: challenger.map(|c| names[c].clone()),
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
         > {} (desktops, VMs), |bias| ≤ {}, slope interval ∋ 1 with lower bound ≥ {}, ECE ≤ floor, \
         no rival better by more than max({}, {} % of the Brier) at Holm-adjusted SPA p < {} ({} rivals: {}).\n\n",
        g.method, g.weeks, g.resamples, g.days, g.ece_sims, NO_HARM_MARGIN, MIN_AUC_LO, MAX_BIAS, MIN_SLOPE_LO,
        RIVAL_MARGIN_MIN, RIVAL_MARGIN_SHARE * 100.0, RIVAL_ALPHA, g.rivals.len(),
        if g.rivals.is_empty() { "none run".to_string() } else { g.rivals.join(", ") }
    );
    out.push_str(&format!(
        "| T | n | Brier − base rate | skill over {} | AUC | mean(p − y) | Cox slope | ECE / floor | best rival: Brier(default) − Brier(it), SPA p / Holm p |\n|---|---|---|---|---|---|---|---|---|\n",
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
        let rivals = c.rivals.as_ref().map_or("–".to_string(), |r| {
            format!(
                "{} {:+.4}, {:.3} / {:.3}{}",
                r.best.as_deref().unwrap_or("–"),
                r.test.best_advantage,
                r.test.p_value,
                r.holm_p,
                mark(c.met_rivals)
            )
        });
        out.push_str(&format!(
            "| {} | {} | {no_harm} | {skill} | {auc} | {bias} | {cox} | {ece} | {rivals} |\n",
            crate::human::length_label(c.length_s),
            c.n
        ));
    }
    if let Some(name) = &g.challenger {
        out.push_str(&format!(
            "\nChallenger `{name}`, Brier({}) − Brier({name}) [95 % bounds]:",
            g.method
        ));
        for c in &g.cells {
            let d = c.challenger.map_or("–".to_string(), |d| {
                format!("{:+.4}{}", d.difference, bounds(d.difference_ci, 1.0, 4))
            });
            out.push_str(&format!(" {} {d};", crate::human::length_label(c.length_s)));
        }
        out.push('\n');
    }
    out
}

/// Several methods' goals 1, 3 and 4 side by side, one row per method and
/// length (`--goals-for`): the Brier difference to the base rate, the AUC
/// and the Cox slope with their bounds, the bias, the ECE against its
/// floor, and which of those goals the row meets.
pub fn to_compare_table(all: &[Goals]) -> String {
    let mut out = String::from(
        "| method | T | Brier − base rate | AUC | mean(p − y) | Cox slope | ECE / floor | met (1 / 3 / 4) |\n|---|---|---|---|---|---|---|---|\n",
    );
    let yes = |v: Option<bool>| match v {
        Some(true) => "✓",
        Some(false) => "✗",
        None => "–",
    };
    for g in all {
        for c in &g.cells {
            let no_harm = c.no_harm.map_or("–".to_string(), |h| {
                format!("{:+.4}{}", h.difference, bounds(h.difference_ci, 1.0, 4))
            });
            let auc = c.auc.map_or("–".to_string(), |a| {
                format!("{a:.3}{}", bounds(c.auc_ci, 1.0, 3))
            });
            let bias = c.mean_bias.map_or("–".to_string(), |b| format!("{b:+.3}"));
            let cox = c.cox.map_or("–".to_string(), |x| {
                format!("{:.2}{}", x.slope, bounds(Some(x.slope_ci), 1.0, 2))
            });
            let ece = c.ece.map_or("–".to_string(), |e| {
                format!(
                    "{e:.3} / {}",
                    c.ece_floor
                        .map_or("–".to_string(), |f| format!("{:.3}", f.p95))
                )
            });
            let calibrated = [c.met_bias, c.met_slope, c.met_ece]
                .into_iter()
                .try_fold(true, |all, v| v.map(|v| all && v));
            out.push_str(&format!(
                "| {} | {} | {no_harm} | {auc} | {bias} | {cox} | {ece} | {} / {} / {} |\n",
                g.method,
                crate::human::length_label(c.length_s),
                yes(c.met_no_harm),
                yes(c.met_auc),
                yes(calibrated),
            ));
        }
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
        run_methods(n, |y, hour| {
            let (a, b) = forecast(y, hour);
            vec![a, b]
        })
    }

    /// [`run`] with any number of methods.
    fn run_methods(n: i64, forecast: impl Fn(bool, u8) -> Vec<f64>) -> Vec<DayResult> {
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
                        let tr = forecast(y, hour);
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
                            tr,
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
        let g = goals(&days, &names(), &[3600], 500, 1, None).unwrap();
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
        let c = goals(&days, &names(), &[3600], 500, 1, None).unwrap().cells[0].clone();
        assert_eq!(c.auc, Some(0.5));
        assert_eq!(c.met_auc, Some(false));
        assert_eq!(c.over_freq.unwrap().difference, 0.0);
        // Too optimistic by 0.3 in the afternoon: harm, bias and ECE fail.
        let days = run(60, |_, h| (if h < 12 { 0.98 } else { 0.5 }, 0.6));
        let c = goals(&days, &names(), &[3600], 500, 1, None).unwrap().cells[0].clone();
        assert_eq!(c.met_bias, Some(false), "{c:?}");
        assert_eq!(c.met_ece, Some(false), "{c:?}");
        assert!(
            to_table(&goals(&days, &names(), &[3600], 500, 1, None).unwrap())
                .contains("| 1h | 2880 |")
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
            1,
            None
        )
        .is_none());
    }

    /// The default, the skill reference and `rival`, in the run's order.
    fn with_rival(rival: &str) -> Vec<String> {
        vec![
            DEFAULT_METHOD.to_string(),
            SKILL_REFERENCE.to_string(),
            rival.to_string(),
        ]
    }

    /// A forecast that knows the hour: sure in the morning, doubtful after.
    fn knows(h: u8) -> f64 {
        if h < 12 {
            0.98
        } else {
            0.2
        }
    }

    #[test]
    fn a_rival_better_by_more_than_the_margin_is_found_and_equal_ones_are_not() {
        let names = with_rival("logistic+cal");
        // A constant default against a rival that knows the hour.
        let days = run_methods(60, |_, h| vec![0.6, 0.6, knows(h)]);
        let g = goals(&days, &names, &[3600], 500, 1, Some("logistic+cal")).unwrap();
        assert_eq!(g.rivals, vec!["freq", "logistic+cal"]);
        let c = &g.cells[0];
        let r = c.rivals.as_ref().unwrap();
        assert_eq!(r.best.as_deref(), Some("logistic+cal"), "{r:?}");
        // freq forecasts what the default does on every window: not tested.
        assert_eq!(r.test.rivals, 1);
        assert!(r.test.best_advantage > 0.05, "{r:?}");
        assert!(r.holm_p < RIVAL_ALPHA, "{r:?}");
        assert_eq!(c.met_rivals, Some(false));
        assert!(c.challenger.unwrap().difference_ci.unwrap().lo > 0.0);
        let table = to_table(&g);
        assert!(table.contains("logistic+cal +0."), "{table}");
        assert!(table.contains("Challenger `logistic+cal`"), "{table}");
        // The default that knows the hour, a rival equal to it and a
        // worse constant: nothing better is found.
        let days = run_methods(60, |_, h| vec![knows(h), 0.6, knows(h)]);
        let g = goals(&days, &names, &[3600], 500, 1, None).unwrap();
        let c = &g.cells[0];
        let r = c.rivals.as_ref().unwrap();
        assert_eq!(r.test.rivals, 1);
        assert!(r.test.best_advantage < 0.0, "{r:?}");
        assert_eq!(c.met_rivals, Some(true), "{r:?}");
        assert!(c.challenger.is_none() && g.challenger.is_none());
    }

    #[test]
    fn another_methods_goals_are_its_own_forecasts_judged_as_the_defaults() {
        let names = with_rival("logistic+cal");
        // A constant default, a rival that knows the hour.
        let days = run_methods(60, |_, h| vec![0.6, 0.6, knows(h)]);
        let default = goals(&days, &names, &[3600], 500, 1, None).unwrap();
        let rival = goals_of("logistic+cal", &days, &names, &[3600], 500, 1, None).unwrap();
        assert_eq!(default.cells[0].met_auc, Some(false));
        assert_eq!(rival.method, "logistic+cal");
        assert_eq!(rival.rivals, vec![DEFAULT_METHOD, SKILL_REFERENCE]);
        let c = &rival.cells[0];
        assert_eq!(c.met_auc, Some(true), "{c:?}");
        assert_eq!(c.met_no_harm, Some(true), "{c:?}");
        assert!(c.over_freq.unwrap().skill.unwrap() > 0.5, "{c:?}");
        // Its rivals are worse: none is better.
        assert_eq!(c.met_rivals, Some(true), "{c:?}");
        let table = to_compare_table(&[default, rival]);
        assert!(
            table.contains(&format!("| {DEFAULT_METHOD} | 1h |")),
            "{table}"
        );
        assert!(table.contains("| logistic+cal | 1h |"), "{table}");
        assert!(table.contains("| ✓ / ✓ / "), "{table}");
        assert!(goals_of("km", &days, &names, &[3600], 500, 1, None).is_none());
    }
}
