//! Scores for probability forecasts of a binary outcome ("the job survives
//! the window"), as pure functions of predictions `p` and outcomes `y`.
//!
//! This module owns the arithmetic of the evaluation: the seed papers'
//! relative accuracy per group, the Brier score and its skill score, log loss,
//! reliability tables, expected calibration error and a seeded cluster
//! bootstrap. It knows nothing about traces, methods or files.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Log loss clips p to [LOG_LOSS_EPS, 1 − LOG_LOSS_EPS], so one confident miss
/// costs at most −ln(1e-4) ≈ 9.2 instead of infinity.
pub const LOG_LOSS_EPS: f64 = 1e-4;

/// Bins of the reliability table.
pub const RELIABILITY_BINS: usize = 10;

/// Mean of (p − y)²; `None` for no cases.
pub fn brier(p: &[f64], y: &[bool]) -> Option<f64> {
    mean(
        p.iter()
            .zip(y)
            .map(|(&p, &y)| (p - f64::from(u8::from(y))).powi(2)),
    )
}

/// Mean of −ln p(y) with p clipped to [1e-4, 1 − 1e-4]; `None` for no cases.
pub fn log_loss(p: &[f64], y: &[bool]) -> Option<f64> {
    mean(p.iter().zip(y).map(|(&p, &y)| {
        let p = p.clamp(LOG_LOSS_EPS, 1.0 - LOG_LOSS_EPS);
        -(if y { p } else { 1.0 - p }).ln()
    }))
}

/// Brier skill score 1 − BS / BS_ref; `None` when the reference is perfect
/// (BS_ref = 0), since any skill is then undefined.
pub fn brier_skill(bs: f64, bs_ref: f64) -> Option<f64> {
    (bs_ref > 0.0).then(|| 1.0 - bs / bs_ref)
}

/// The mean of an iterator, `None` when it is empty.
pub fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// One group of forecasts judged together (the papers group by start hour
/// and window length): its mean prediction against its empirical TR.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupAccuracy {
    pub n: usize,
    pub mean_prediction: f64,
    pub empirical_tr: f64,
    /// 1 − |mean prediction − empirical TR| / empirical TR; `None` when the
    /// empirical TR is 0 and the relative error is undefined.
    pub accuracy: Option<f64>,
}

/// The papers' accuracy of one group; `None` for an empty group.
pub fn group_accuracy(p: &[f64], y: &[bool]) -> Option<GroupAccuracy> {
    let mean_prediction = mean(p.iter().copied())?;
    let empirical_tr = mean(y.iter().map(|&y| f64::from(u8::from(y))))?;
    let accuracy =
        (empirical_tr > 0.0).then(|| 1.0 - (mean_prediction - empirical_tr).abs() / empirical_tr);
    Some(GroupAccuracy {
        n: p.len(),
        mean_prediction,
        empirical_tr,
        accuracy,
    })
}

/// Accuracy over groups: mean and worst, and how many groups were left out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AccuracySummary {
    /// Groups with an accuracy (empirical TR > 0).
    pub groups: usize,
    /// Groups left out because their empirical TR is 0.
    pub groups_excluded: usize,
    pub mean: Option<f64>,
    pub worst: Option<f64>,
}

/// Summarises group accuracies; groups without one count as excluded.
pub fn summarise_accuracy(groups: &[GroupAccuracy]) -> AccuracySummary {
    let values: Vec<f64> = groups.iter().filter_map(|g| g.accuracy).collect();
    AccuracySummary {
        groups: values.len(),
        groups_excluded: groups.len() - values.len(),
        mean: mean(values.iter().copied()),
        worst: values.iter().copied().reduce(f64::min),
    }
}

/// One bin of a reliability table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReliabilityBin {
    /// Predictions in [lo, hi) (the last bin includes 1).
    pub lo: f64,
    pub hi: f64,
    pub n: usize,
    pub mean_prediction: Option<f64>,
    /// Share of cases in the bin that survived.
    pub observed: Option<f64>,
}

/// The 10-bin reliability table of forecasts `p` against outcomes `y`.
pub fn reliability_table(p: &[f64], y: &[bool]) -> Vec<ReliabilityBin> {
    let bins = RELIABILITY_BINS;
    let mut sums = vec![(0usize, 0.0f64, 0usize); bins];
    for (&p, &y) in p.iter().zip(y) {
        let b = bin_of(p, bins);
        sums[b].0 += 1;
        sums[b].1 += p;
        sums[b].2 += usize::from(y);
    }
    sums.iter()
        .enumerate()
        .map(|(b, &(n, sum_p, survived))| ReliabilityBin {
            lo: b as f64 / bins as f64,
            hi: (b + 1) as f64 / bins as f64,
            n,
            mean_prediction: (n > 0).then(|| sum_p / n as f64),
            observed: (n > 0).then(|| survived as f64 / n as f64),
        })
        .collect()
}

fn bin_of(p: f64, bins: usize) -> usize {
    let clamped = if p.is_finite() {
        p.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((clamped * bins as f64) as usize).min(bins - 1)
}

/// Expected calibration error: the case-weighted mean of |mean p − observed|
/// over the bins of a reliability table; `None` for no cases.
pub fn expected_calibration_error(table: &[ReliabilityBin]) -> Option<f64> {
    let total: usize = table.iter().map(|b| b.n).sum();
    if total == 0 {
        return None;
    }
    let weighted: f64 = table
        .iter()
        .filter_map(|b| Some(b.n as f64 * (b.mean_prediction? - b.observed?).abs()))
        .sum();
    Some(weighted / total as f64)
}

/// A two-sided percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

/// Draws `resamples` bootstrap resamples of `clusters` units (indices with
/// repetition), the same for a given seed. Reusing one set of resamples for
/// every method makes the intervals paired.
pub fn bootstrap_resamples(clusters: usize, resamples: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..resamples)
        .map(|_| {
            (0..clusters)
                .map(|_| rng.random_range(0..clusters.max(1)))
                .collect()
        })
        .collect()
}

/// The central 95 % percentile interval of `statistic` over the resamples.
/// Resamples where the statistic is undefined are skipped; `None` when none
/// is defined.
pub fn bootstrap_interval(
    resamples: &[Vec<usize>],
    mut statistic: impl FnMut(&[usize]) -> Option<f64>,
) -> Option<Interval> {
    percentile_interval(resamples.iter().filter_map(|r| statistic(r)).collect())
}

/// A paired difference of mean scores between two methods over the same
/// cases, with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairedDifference {
    /// Mean of (score of A − score of B) over all cases.
    pub mean: f64,
    /// 95 % percentile interval over resamples of the clusters.
    pub ci: Option<Interval>,
}

/// The mean per-case difference of two methods' scores and its cluster
/// bootstrap interval. `clusters[c]` is (Σ of the differences, number of
/// cases) of cluster c (a test day); each resample in `resamples` lists
/// cluster indices. Both methods are judged on the same cases and the same
/// resamples, so the interval is of the paired difference, which is much
/// narrower than the two methods' own intervals when their errors move
/// together. `None` when there are no cases.
pub fn paired_difference(
    clusters: &[(f64, usize)],
    resamples: &[Vec<usize>],
) -> Option<PairedDifference> {
    let (sum, n) = clusters
        .iter()
        .fold((0.0, 0usize), |(s, n), &(d, k)| (s + d, n + k));
    if n == 0 {
        return None;
    }
    let ci = bootstrap_interval(resamples, |draw| {
        let (s, k) = draw
            .iter()
            .filter_map(|&c| clusters.get(c))
            .fold((0.0, 0usize), |(s, n), &(d, k)| (s + d, n + k));
        (k > 0).then(|| s / k as f64)
    });
    Some(PairedDifference {
        mean: sum / n as f64,
        ci,
    })
}

/// The central 95 % percentile interval of bootstrap values (non-finite
/// ones are dropped); `None` when there are none.
pub fn percentile_interval(mut values: Vec<f64>) -> Option<Interval> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(Interval {
        lo: percentile(&values, 0.025),
        hi: percentile(&values, 0.975),
    })
}

/// Linear-interpolated percentile of sorted values, q in [0, 1]: the
/// model's one quantile rule.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    crate::model::forecast_stats::quantile(sorted, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn brier_by_hand() {
        // (0.9−1)² + (0.2−0)² + (0.5−1)² = 0.01 + 0.04 + 0.25 = 0.30 → mean 0.1.
        let b = brier(&[0.9, 0.2, 0.5], &[true, false, true]).unwrap();
        assert!(close(b, 0.1), "{b}");
        assert_eq!(brier(&[], &[]), None);
        assert!(close(brier(&[1.0, 0.0], &[true, false]).unwrap(), 0.0));
        assert!(close(brier(&[0.0], &[true]).unwrap(), 1.0));
    }

    #[test]
    fn log_loss_by_hand_and_clipped() {
        let l = log_loss(&[0.8, 0.25], &[true, false]).unwrap();
        assert!(close(l, (-(0.8f64).ln() - (0.75f64).ln()) / 2.0), "{l}");
        // A certain miss costs −ln(1e-4), not infinity.
        let miss = log_loss(&[0.0], &[true]).unwrap();
        assert!(close(miss, -(1e-4f64).ln()), "{miss}");
        let miss = log_loss(&[1.0], &[false]).unwrap();
        assert!(close(miss, -(1e-4f64).ln()), "{miss}");
        // A certain hit costs −ln(1 − 1e-4), slightly more than 0.
        let hit = log_loss(&[1.0], &[true]).unwrap();
        assert!(hit > 0.0 && close(hit, -(1.0 - 1e-4f64).ln()));
    }

    #[test]
    fn skill_against_a_reference() {
        assert!(close(brier_skill(0.05, 0.1).unwrap(), 0.5));
        assert!(close(brier_skill(0.2, 0.1).unwrap(), -1.0));
        assert_eq!(brier_skill(0.0, 0.0), None);
    }

    #[test]
    fn accuracy_with_an_excluded_group() {
        // Group A: mean p 0.6, empirical 0.5 → 1 − 0.1/0.5 = 0.8.
        let a = group_accuracy(&[0.5, 0.7], &[true, false]).unwrap();
        assert!(close(a.accuracy.unwrap(), 0.8));
        // Group B: predicted 0.9, all survived → 1 − 0.1 = 0.9.
        let b = group_accuracy(&[0.9, 0.9, 0.9], &[true, true, true]).unwrap();
        assert!(close(b.accuracy.unwrap(), 0.9));
        // Group C: nothing survived, so it has no accuracy.
        let c = group_accuracy(&[0.3], &[false]).unwrap();
        assert_eq!(c.accuracy, None);
        assert!(close(c.mean_prediction, 0.3));
        let s = summarise_accuracy(&[a, b, c]);
        assert_eq!((s.groups, s.groups_excluded), (2, 1));
        assert!(close(s.mean.unwrap(), 0.85));
        assert!(close(s.worst.unwrap(), 0.8));
        assert_eq!(group_accuracy(&[], &[]), None);
        // Over-prediction can drive accuracy below zero: 1 − 0.9/0.1.
        let d = group_accuracy(
            &[1.0; 10],
            &[
                true, false, false, false, false, false, false, false, false, false,
            ],
        )
        .unwrap();
        assert!(close(d.accuracy.unwrap(), -8.0));
    }

    #[test]
    fn reliability_table_and_ece_by_hand() {
        let p = [0.05, 0.05, 0.95, 0.95, 0.95, 0.95, 1.0, 0.55];
        let y = [false, false, true, true, true, false, true, true];
        let t = reliability_table(&p, &y);
        assert_eq!(t.len(), 10);
        assert_eq!(t.iter().map(|b| b.n).sum::<usize>(), 8);
        assert_eq!(t[0].n, 2);
        assert_eq!(t[0].observed, Some(0.0));
        assert_eq!(t[5].n, 1);
        // p = 1 lands in the last bin with the 0.95s.
        assert_eq!(t[9].n, 5);
        assert!(close(t[9].mean_prediction.unwrap(), 0.96));
        assert!(close(t[9].observed.unwrap(), 0.8));
        assert_eq!(t[3].mean_prediction, None);
        // ECE = (2·0.05 + 1·0.45 + 5·0.16) / 8.
        let ece = expected_calibration_error(&t).unwrap();
        assert!(close(ece, (2.0 * 0.05 + 0.45 + 5.0 * 0.16) / 8.0), "{ece}");
        assert_eq!(
            expected_calibration_error(&reliability_table(&[], &[])),
            None
        );
        // A perfectly calibrated table has no error.
        let t = reliability_table(&[0.5, 0.5], &[true, false]);
        assert!(close(expected_calibration_error(&t).unwrap(), 0.0));
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_estimate() {
        let values: Vec<f64> = (0..40).map(|i| f64::from(i % 7)).collect();
        let stat = |r: &[usize]| mean(r.iter().map(|&i| values[i]));
        let a = bootstrap_resamples(values.len(), 500, 7);
        let b = bootstrap_resamples(values.len(), 500, 7);
        let c = bootstrap_resamples(values.len(), 500, 8);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let ia = bootstrap_interval(&a, stat).unwrap();
        assert_eq!(Some(ia), bootstrap_interval(&b, stat));
        let full = mean(values.iter().copied()).unwrap();
        assert!(ia.lo < full && full < ia.hi, "{ia:?} vs {full}");
        assert!(ia.hi - ia.lo < 2.0);
        assert_eq!(bootstrap_interval(&a, |_| None), None);
    }

    #[test]
    fn paired_difference_by_hand() {
        // Three days; A beats B by 0.02 per case on every day: every resample
        // gives 0.02, so the interval is that point.
        let same = [(0.04, 2), (0.02, 1), (0.06, 3)];
        let draws = bootstrap_resamples(same.len(), 500, 3);
        let d = paired_difference(&same, &draws).unwrap();
        assert!((d.mean - 0.02).abs() < 1e-12);
        let ci = d.ci.unwrap();
        assert!((ci.lo - 0.02).abs() < 1e-12 && (ci.hi - 0.02).abs() < 1e-12);
        // Per-case differences 0.1 on day 0 (1 case) and −0.1 on days 1 and 2
        // (1 case each): mean −1/30; a resample of only day 0 gives +0.1 and
        // one without it −0.1, so the interval spans zero and the mean.
        let mixed = [(0.1, 1), (-0.1, 1), (-0.1, 1)];
        let draws = bootstrap_resamples(mixed.len(), 1000, 5);
        let d = paired_difference(&mixed, &draws).unwrap();
        assert!((d.mean + 0.1 / 3.0).abs() < 1e-12);
        let ci = d.ci.unwrap();
        assert!(ci.lo < d.mean && d.mean < ci.hi && ci.lo < 0.0 && ci.hi > 0.0);
        assert!(ci.lo >= -0.1 - 1e-12 && ci.hi <= 0.1 + 1e-12);
        // No cases: nothing to say.
        assert_eq!(paired_difference(&[(0.0, 0)], &draws), None);
    }

    #[test]
    fn percentiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!(close(percentile(&v, 0.5), 3.0));
        assert!(close(percentile(&v, 0.0), 1.0));
        assert!(close(percentile(&v, 1.0), 5.0));
        assert!(close(percentile(&v, 0.125), 1.5));
    }
}
