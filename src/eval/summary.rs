//! Turns the protocol's scored cases into per-method, per-length and
//! per-hour scores with bootstrap intervals over test days.
//!
//! Accuracy groups are (trace, day kind, start hour) for each length T, as
//! the papers judge each machine's weekdays and weekends per start hour.
//! Intervals resample test days ((trace, date) pairs) with one seeded set of
//! resamples shared by all methods, so differences between methods are
//! paired. Everything here is a pure function of its inputs: the same cases
//! and seed give the same numbers. It knows nothing about files or timing.

use crate::eval::metrics::{
    self, bootstrap_resamples, brier, brier_skill, expected_calibration_error, group_accuracy,
    log_loss, paired_difference, percentile_interval, reliability_table, summarise_accuracy,
    GroupAccuracy, Interval, PairedDifference, ReliabilityBin, LOG_LOSS_EPS,
};
use crate::eval::protocol::{DayKind, DayResult};
use crate::model::baselines::DEFAULT_METHOD;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The method Brier skill is measured against when it was run.
pub const SKILL_REFERENCE: &str = "freq";
/// What skill is measured against otherwise.
pub const CLIMATOLOGY: &str = "climatology (survival rate of the test windows of each length)";

/// Scores of one method at one window length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LengthSummary {
    /// Tested windows.
    pub n: usize,
    pub mean_prediction: Option<f64>,
    pub empirical_tr: Option<f64>,
    pub brier: Option<f64>,
    pub brier_ci: Option<Interval>,
    /// 1 − Brier / Brier of the reference (see `skill_reference`).
    pub brier_skill: Option<f64>,
    pub brier_skill_ci: Option<Interval>,
    pub log_loss: Option<f64>,
    pub log_loss_ci: Option<Interval>,
    /// The papers' accuracy, averaged over (trace, kind, hour) groups.
    pub accuracy_mean: Option<f64>,
    pub accuracy_mean_ci: Option<Interval>,
    pub accuracy_worst: Option<f64>,
    pub groups: usize,
    /// Groups without an accuracy because nothing in them survived.
    pub groups_excluded: usize,
    pub ece: Option<f64>,
    pub reliability: Vec<ReliabilityBin>,
    /// Brier of this method minus Brier of the default method (see
    /// `Scores::paired_with`) on the same windows, with a paired bootstrap
    /// interval over test days; negative means this method did better.
    /// `None` when the default was not run (and zero for the default itself).
    pub brier_minus_default: Option<PairedDifference>,
    pub by_hour: BTreeMap<u8, HourSummary>,
}

/// Scores of one method at one length and start hour, pooled over traces and kinds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HourSummary {
    pub n: usize,
    pub mean_prediction: Option<f64>,
    pub empirical_tr: Option<f64>,
    pub brier: Option<f64>,
    pub accuracy_mean: Option<f64>,
    pub accuracy_worst: Option<f64>,
    pub groups_excluded: usize,
}

/// Scores of one method over all lengths together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverallSummary {
    pub n: usize,
    pub brier: Option<f64>,
    pub log_loss: Option<f64>,
    pub ece: Option<f64>,
    pub reliability: Vec<ReliabilityBin>,
}

/// Everything about one method.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodSummary {
    /// Keyed by window length in seconds.
    pub by_length: BTreeMap<u64, LengthSummary>,
    pub overall: OverallSummary,
    /// Forecasts the method refused, by reason (those windows were left out for every method).
    pub refused: BTreeMap<String, usize>,
}

/// All methods' scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scores {
    pub methods: BTreeMap<String, MethodSummary>,
    /// Method names in the order they were asked for.
    pub method_order: Vec<String>,
    pub skill_reference: String,
    /// The method every other one is paired with (`brier_minus_default`),
    /// when it was run.
    pub paired_with: Option<String>,
    /// Tested windows left out because some method refused them.
    pub dropped_cases: usize,
    /// Test days (trace, date) with at least one tested window: the bootstrap's units.
    pub test_days: usize,
    pub bootstrap_resamples: usize,
    pub log_loss_clip: f64,
}

/// One case flattened for scoring.
struct Row<'a> {
    cluster: usize,
    group: (usize, DayKind, u8),
    tr: &'a [f64],
    y: bool,
}

/// Scores the protocol's results on up to `threads` threads. `names` are
/// the methods in result order.
pub fn score(
    days: &[DayResult],
    names: &[String],
    lengths: &[u64],
    resamples: usize,
    seed: u64,
    threads: usize,
) -> Scores {
    // The bootstrap's units: days with at least one case, in result order.
    let clusters: Vec<&DayResult> = days.iter().filter(|d| !d.cases.is_empty()).collect();
    let draws = bootstrap_resamples(clusters.len(), resamples, seed);
    let reference = names.iter().position(|n| n == SKILL_REFERENCE);
    let default = names.iter().position(|n| n == DEFAULT_METHOD);
    let one = |m: usize| -> MethodSummary {
        let mut by_length = BTreeMap::new();
        for &len in lengths {
            let rows: Vec<Row> = clusters
                .iter()
                .enumerate()
                .flat_map(|(c, d)| {
                    d.cases
                        .iter()
                        .filter(move |s| s.case.window_secs == len)
                        .map(move |s| Row {
                            cluster: c,
                            group: (s.case.trace, s.case.kind, s.case.hour),
                            tr: &s.tr,
                            y: s.case.survived,
                        })
                })
                .collect();
            by_length.insert(
                len,
                length_summary(&rows, m, reference, default, clusters.len(), &draws),
            );
        }
        let all: Vec<(f64, bool)> = clusters
            .iter()
            .flat_map(|d| d.cases.iter().map(move |s| (s.tr[m], s.case.survived)))
            .collect();
        let (p, y): (Vec<f64>, Vec<bool>) = all.into_iter().unzip();
        let reliability = reliability_table(&p, &y);
        let overall = OverallSummary {
            n: p.len(),
            brier: brier(&p, &y),
            log_loss: log_loss(&p, &y),
            ece: expected_calibration_error(&reliability),
            reliability,
        };
        let mut refused = BTreeMap::new();
        for d in days {
            if let Some(r) = d.refused.get(m) {
                for (reason, count) in r {
                    *refused.entry(reason.to_string()).or_default() += count;
                }
            }
        }
        MethodSummary {
            by_length,
            overall,
            refused,
        }
    };
    // Methods are scored independently, so threads only change the speed.
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, MethodSummary)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, names.len().max(1)) {
            scope.spawn(|| loop {
                let m = next.fetch_add(1, Ordering::Relaxed);
                if m >= names.len() {
                    break;
                }
                let summary = one(m);
                done.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((m, summary));
            });
        }
    });
    let methods: BTreeMap<String, MethodSummary> = done
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .filter_map(|(m, summary)| Some((names.get(m)?.clone(), summary)))
        .collect();
    Scores {
        methods,
        method_order: names.to_vec(),
        skill_reference: if reference.is_some() {
            SKILL_REFERENCE.to_string()
        } else {
            CLIMATOLOGY.to_string()
        },
        paired_with: default.map(|_| DEFAULT_METHOD.to_string()),
        dropped_cases: days.iter().map(|d| d.dropped).sum(),
        test_days: clusters.len(),
        bootstrap_resamples: resamples,
        log_loss_clip: LOG_LOSS_EPS,
    }
}

/// Per-cluster sums of one method at one length, for fast resampling.
#[derive(Default, Clone)]
struct ClusterSums {
    n: usize,
    survived: usize,
    sq: f64,
    sq_ref: f64,
    ll: f64,
    /// (dense group id, Σp, Σy, n) in first-seen order.
    groups: Vec<(usize, f64, usize, usize)>,
}

fn length_summary(
    rows: &[Row],
    m: usize,
    reference: Option<usize>,
    default: Option<usize>,
    clusters: usize,
    draws: &[Vec<usize>],
) -> LengthSummary {
    let p: Vec<f64> = rows.iter().map(|r| r.tr[m]).collect();
    let y: Vec<bool> = rows.iter().map(|r| r.y).collect();
    let bs = brier(&p, &y);
    let bs_ref = match reference {
        Some(f) => brier(&rows.iter().map(|r| r.tr[f]).collect::<Vec<_>>(), &y),
        None => metrics::mean(y.iter().map(|&y| f64::from(u8::from(y)))).map(|r| r * (1.0 - r)),
    };
    let groups = accuracy_groups(rows.iter().map(|r| (r.group, r.tr[m], r.y)));
    let accuracy = summarise_accuracy(&groups.values().copied().collect::<Vec<_>>());
    let reliability = reliability_table(&p, &y);

    // Cluster sums for the bootstrap, with groups numbered in key order.
    let ids: BTreeMap<(usize, DayKind, u8), usize> =
        groups.keys().enumerate().map(|(i, &k)| (k, i)).collect();
    let mut sums = vec![ClusterSums::default(); clusters];
    for r in rows {
        let (p, y) = (r.tr[m], r.y);
        let s = &mut sums[r.cluster];
        let yf = f64::from(u8::from(y));
        s.n += 1;
        s.survived += usize::from(y);
        s.sq += (p - yf).powi(2);
        s.sq_ref += reference.map_or(0.0, |f| (r.tr[f] - yf).powi(2));
        s.ll += log_loss(&[p], &[y]).unwrap_or(0.0);
        let id = ids.get(&r.group).copied().unwrap_or_default();
        match s.groups.iter_mut().find(|g| g.0 == id) {
            Some(g) => {
                g.1 += p;
                g.2 += usize::from(y);
                g.3 += 1;
            }
            None => s.groups.push((id, p, usize::from(y), 1)),
        }
    }
    let intervals = bootstrap_all(&sums, ids.len(), reference.is_some(), draws);
    // Paired with the default: per test day, Σ (p − y)² − (p_default − y)².
    let brier_minus_default = default.and_then(|d| {
        let mut diff = vec![(0.0, 0usize); clusters];
        for r in rows {
            let yf = f64::from(u8::from(r.y));
            let e = &mut diff[r.cluster];
            e.0 += (r.tr[m] - yf).powi(2) - (r.tr[d] - yf).powi(2);
            e.1 += 1;
        }
        paired_difference(&diff, draws)
    });
    let mut by_hour = BTreeMap::new();
    let hours: std::collections::BTreeSet<u8> = rows.iter().map(|r| r.group.2).collect();
    for hour in hours {
        let of_hour: Vec<&Row> = rows.iter().filter(|r| r.group.2 == hour).collect();
        let hp: Vec<f64> = of_hour.iter().map(|r| r.tr[m]).collect();
        let hy: Vec<bool> = of_hour.iter().map(|r| r.y).collect();
        let g = accuracy_groups(of_hour.iter().map(|r| (r.group, r.tr[m], r.y)));
        let acc = summarise_accuracy(&g.values().copied().collect::<Vec<_>>());
        by_hour.insert(
            hour,
            HourSummary {
                n: hp.len(),
                mean_prediction: metrics::mean(hp.iter().copied()),
                empirical_tr: metrics::mean(hy.iter().map(|&y| f64::from(u8::from(y)))),
                brier: brier(&hp, &hy),
                accuracy_mean: acc.mean,
                accuracy_worst: acc.worst,
                groups_excluded: acc.groups_excluded,
            },
        );
    }

    LengthSummary {
        n: rows.len(),
        mean_prediction: metrics::mean(p.iter().copied()),
        empirical_tr: metrics::mean(y.iter().map(|&y| f64::from(u8::from(y)))),
        brier: bs,
        brier_ci: intervals.brier,
        brier_skill: bs.zip(bs_ref).and_then(|(a, b)| brier_skill(a, b)),
        brier_skill_ci: intervals.skill,
        log_loss: log_loss(&p, &y),
        log_loss_ci: intervals.log_loss,
        accuracy_mean: accuracy.mean,
        accuracy_mean_ci: intervals.accuracy,
        accuracy_worst: accuracy.worst,
        groups: accuracy.groups,
        groups_excluded: accuracy.groups_excluded,
        ece: expected_calibration_error(&reliability),
        reliability,
        brier_minus_default,
        by_hour,
    }
}

/// Bootstrap intervals of one method at one length.
struct Intervals {
    brier: Option<Interval>,
    skill: Option<Interval>,
    log_loss: Option<Interval>,
    accuracy: Option<Interval>,
}

/// All four statistics of each resample in one pass over its days: the
/// bootstrap is the scoring's hot loop.
fn bootstrap_all(
    sums: &[ClusterSums],
    groups: usize,
    has_reference: bool,
    draws: &[Vec<usize>],
) -> Intervals {
    let mut values: [Vec<f64>; 4] = Default::default();
    let mut merged = vec![(0.0f64, 0usize, 0usize); groups];
    for draw in draws {
        let (mut n, mut survived, mut sq, mut sq_ref, mut ll) = (0usize, 0usize, 0.0, 0.0, 0.0);
        merged.fill((0.0, 0, 0));
        for &c in draw {
            let s = &sums[c];
            n += s.n;
            survived += s.survived;
            sq += s.sq;
            sq_ref += s.sq_ref;
            ll += s.ll;
            for &(g, sp, sy, gn) in &s.groups {
                let e = &mut merged[g];
                e.0 += sp;
                e.1 += sy;
                e.2 += gn;
            }
        }
        if n == 0 {
            continue;
        }
        let nf = n as f64;
        let bs = sq / nf;
        let bs_ref = if has_reference {
            sq_ref / nf
        } else {
            let rate = survived as f64 / nf;
            rate * (1.0 - rate)
        };
        values[0].push(bs);
        values[2].push(ll / nf);
        if let Some(skill) = brier_skill(bs, bs_ref) {
            values[1].push(skill);
        }
        let accuracies = merged.iter().filter(|e| e.1 > 0).map(|&(sp, sy, gn)| {
            let (mp, tr) = (sp / gn as f64, sy as f64 / gn as f64);
            1.0 - (mp - tr).abs() / tr
        });
        if let Some(a) = metrics::mean(accuracies) {
            values[3].push(a);
        }
    }
    let [brier, skill, log_loss, accuracy] = values.map(percentile_interval);
    Intervals {
        brier,
        skill,
        log_loss,
        accuracy,
    }
}

/// The papers' accuracy per group, groups in key order.
fn accuracy_groups<K: Ord>(
    cases: impl Iterator<Item = (K, f64, bool)>,
) -> BTreeMap<K, GroupAccuracy> {
    let mut split: BTreeMap<K, (Vec<f64>, Vec<bool>)> = BTreeMap::new();
    for (k, p, y) in cases {
        let e = split.entry(k).or_default();
        e.0.push(p);
        e.1.push(y);
    }
    split
        .into_iter()
        .filter_map(|(k, (p, y))| Some((k, group_accuracy(&p, &y)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::protocol::{ScoredCase, TestCase};
    use crate::model::state::State;
    use jiff::civil::date;

    fn case(day: i8, hour: u8, len: u64, y: bool, tr: &[f64]) -> ScoredCase {
        ScoredCase {
            case: TestCase {
                trace: 0,
                date: date(2025, 9, day),
                kind: DayKind::Weekday,
                hour,
                window_secs: len,
                at: 0,
                start: State::S1,
                survived: y,
            },
            tr: tr.to_vec(),
        }
    }

    fn day(d: i8, cases: Vec<ScoredCase>) -> DayResult {
        DayResult {
            trace: 0,
            date: Some(date(2025, 9, d)),
            cases,
            refused: vec![BTreeMap::new(); 2],
            ..DayResult::default()
        }
    }

    #[test]
    fn scores_match_the_metrics_by_hand() {
        let names = vec!["a".to_string(), "freq".to_string()];
        let days = vec![
            day(
                1,
                vec![
                    case(1, 8, 3600, true, &[0.9, 0.5]),
                    case(1, 9, 3600, false, &[0.2, 0.5]),
                ],
            ),
            day(
                2,
                vec![
                    case(2, 8, 3600, true, &[0.7, 0.5]),
                    case(2, 9, 3600, false, &[0.4, 0.5]),
                ],
            ),
            day(3, vec![]),
        ];
        let s = score(&days, &names, &[3600, 7200], 500, 1, 2);
        assert_eq!(s.skill_reference, "freq");
        assert_eq!(s.test_days, 2);
        let a = &s.methods["a"].by_length[&3600];
        assert_eq!(a.n, 4);
        // Brier: (0.01 + 0.04 + 0.09 + 0.16) / 4 = 0.075; freq: 0.25.
        assert!((a.brier.unwrap() - 0.075).abs() < 1e-12);
        assert!((a.brier_skill.unwrap() - 0.7).abs() < 1e-12);
        // Hour 8: mean p 0.8 vs empirical 1 → 0.8. Hour 9: empirical 0 → excluded.
        assert_eq!((a.groups, a.groups_excluded), (1, 1));
        assert!((a.accuracy_mean.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(a.by_hour[&8].n, 2);
        assert_eq!(a.by_hour[&9].accuracy_mean, None);
        let ci = a.brier_ci.unwrap();
        assert!(ci.lo <= 0.075 && 0.075 <= ci.hi);
        let empty = &s.methods["a"].by_length[&7200];
        assert_eq!((empty.n, empty.brier, empty.brier_ci), (0, None, None));
        // Without freq, skill is against climatology: base rate 0.5, Brier 0.25.
        let alone = score(&days, &names[..1], &[3600], 500, 1, 1);
        assert_eq!(alone.skill_reference, CLIMATOLOGY);
        let a = &alone.methods["a"].by_length[&3600];
        assert!((a.brier_skill.unwrap() - 0.7).abs() < 1e-12);
        // The default was not among the methods: nothing is paired.
        assert_eq!(s.paired_with, None);
        assert_eq!(a.brier_minus_default, None);
        // With the default: "a" minus default on the same four windows.
        let paired_names = vec!["a".to_string(), DEFAULT_METHOD.to_string()];
        let p = score(&days, &paired_names, &[3600], 500, 1, 1);
        assert_eq!(p.paired_with.as_deref(), Some(DEFAULT_METHOD));
        let d = p.methods["a"].by_length[&3600].brier_minus_default.unwrap();
        // 0.075 − 0.25 = −0.175; day 1: (0.01 + 0.04 − 0.5) / 2, day 2: (0.09 + 0.16 − 0.5) / 2.
        assert!((d.mean + 0.175).abs() < 1e-12);
        let ci = d.ci.unwrap();
        assert!((ci.lo + 0.225).abs() < 1e-9 && (ci.hi + 0.125).abs() < 1e-9);
        let own = p.methods[DEFAULT_METHOD].by_length[&3600]
            .brier_minus_default
            .unwrap();
        assert_eq!(own.mean, 0.0);
        // Same inputs and seed, same numbers.
        assert_eq!(s, score(&days, &names, &[3600, 7200], 500, 1, 2));
    }
}
