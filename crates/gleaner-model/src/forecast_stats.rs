//! Forecast verification statistics for the prediction goals (issue 29):
//! discrimination (AUC), bias, the Cox calibration slope with a
//! day-clustered interval, the expected calibration error (ECE) against a
//! simulated noise floor, and block-bootstrap bounds on paired Brier scores.
//!
//! Everything here is pure maths over slices of forecasts `p` (probability
//! that a window survives), outcomes `y` and integer cluster labels; it
//! knows nothing about traces, methods, files or the command line. Random
//! draws come from a seeded ChaCha8, so a seed gives the same numbers.
//!
//! **Clusters.** Windows of one host and one day overlap, so their outcomes
//! are correlated; intervals resample or sum over clusters, never single
//! windows. The caller chooses the clusters: days (`day`) for the Cox
//! slope and the ECE floor, weeks (`block`) for the bootstrap.
//!
//! **Cox calibration slope.** The logistic regression
//! `logit P(y = 1) = a + b · logit(p)` (p clipped to [1e-4, 1 − 1e-4]) fitted
//! by Newton's method. A calibrated forecaster has a = 0, b = 1; b < 1 means
//! the forecasts are too extreme, b ≈ 0 that they do not discriminate. Its
//! interval is b ± 1.96 · SE with the cluster-robust (sandwich) variance
//! summed over days, times G / (G − 1) for G days.
//!
//! **ECE noise floor.** ECE (10 equal-width bins, case-weighted
//! |mean p − observed|) is positive even for a perfect forecaster, and more
//! so when outcomes are correlated. The floor is the 95th percentile of the
//! ECE of a forecaster that is perfectly calibrated by construction, given
//! the same forecasts and the same day clusters: outcomes are drawn as
//! `y*_i = 1[√ρ · D_c + √(1 − ρ) · E_i < Φ⁻¹(p_i)]` with D_c one standard
//! normal per day and E_i one per window (a Gaussian copula), so
//! P(y*_i = 1) = p_i exactly and windows of one day move together. ρ is
//! chosen so the simulation has the data's overlap: the data's variance
//! inflation `R = Σ_c (Σ_{i∈c} r_i)² / Σ_i r_i²`, with r_i = y_i − p_i
//! minus its mean (about 1 for independent windows, larger with positive
//! correlation within days), is matched by the mean R of simulations over
//! ρ ∈ {0, 0.05, …, 0.95}; then `sims` draws at that ρ give the ECE
//! distribution. A single day factor makes every pair of windows of a day
//! equally correlated, which adjacent windows are not; it matches the
//! day-level variance, which is what the bins' noise depends on.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Bins of the reliability table behind the ECE.
pub const ECE_BINS: usize = 10;
/// Forecasts are clipped to [CLIP, 1 − CLIP] before the logit.
pub const LOGIT_CLIP: f64 = 1e-4;
/// z for a two-sided 95 % normal interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// A two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bounds {
    pub lo: f64,
    pub hi: f64,
}

impl Bounds {
    pub fn contains(&self, v: f64) -> bool {
        self.lo <= v && v <= self.hi
    }
}

/// mean(p − y): positive when the forecaster is too optimistic.
pub fn mean_bias(p: &[f64], y: &[bool]) -> Option<f64> {
    let n = p.len().min(y.len());
    (n > 0).then(|| {
        p.iter()
            .zip(y)
            .map(|(&p, &y)| p - f64::from(u8::from(y)))
            .sum::<f64>()
            / n as f64
    })
}

/// Forecasts sorted once, so the AUC can be recomputed under many sets of
/// case weights (bootstrap resamples) in linear time.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// Case indices in ascending order of forecast.
    order: Vec<usize>,
    p: Vec<f64>,
    y: Vec<bool>,
}

impl Ranked {
    pub fn new(p: &[f64], y: &[bool]) -> Self {
        let n = p.len().min(y.len());
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
        Ranked {
            order,
            p: p[..n].to_vec(),
            y: y[..n].to_vec(),
        }
    }

    /// The weighted AUC: the chance that a surviving window got a higher
    /// forecast than a failed one (ties count one half). `weight(i)` is how
    /// often case i counts. `None` without both outcomes.
    pub fn auc_weighted(&self, weight: impl Fn(usize) -> f64) -> Option<f64> {
        let (mut neg_below, mut concordant, mut pos_total, mut neg_total) = (0.0, 0.0, 0.0, 0.0);
        let mut k = 0;
        while k < self.order.len() {
            // One group of tied forecasts.
            let value = self.p[self.order[k]];
            let (mut pos, mut neg) = (0.0, 0.0);
            while k < self.order.len() && self.p[self.order[k]] == value {
                let i = self.order[k];
                if self.y[i] {
                    pos += weight(i);
                } else {
                    neg += weight(i);
                }
                k += 1;
            }
            concordant += pos * (neg_below + 0.5 * neg);
            neg_below += neg;
            pos_total += pos;
            neg_total += neg;
        }
        (pos_total > 0.0 && neg_total > 0.0).then(|| concordant / (pos_total * neg_total))
    }

    pub fn auc(&self) -> Option<f64> {
        self.auc_weighted(|_| 1.0)
    }
}

/// The AUC of forecasts `p` against outcomes `y` (see `Ranked::auc_weighted`).
pub fn auc(p: &[f64], y: &[bool]) -> Option<f64> {
    Ranked::new(p, y).auc()
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(LOGIT_CLIP, 1.0 - LOGIT_CLIP);
    (p / (1.0 - p)).ln()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The Cox calibration fit and its day-clustered interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CoxFit {
    pub intercept: f64,
    pub slope: f64,
    /// Cluster-robust standard error of the slope.
    pub slope_se: f64,
    pub slope_ci: Bounds,
    pub clusters: usize,
}

/// Fits `logit P(y) = a + b · logit(p)` and the sandwich variance summed
/// over `cluster` labels. `None` with fewer than two clusters, without
/// both outcomes, or when the fit does not converge (separable data).
pub fn cox_calibration(p: &[f64], y: &[bool], cluster: &[usize]) -> Option<CoxFit> {
    let n = p.len().min(y.len()).min(cluster.len());
    let x: Vec<f64> = p[..n].iter().map(|&p| logit(p)).collect();
    let yv: Vec<f64> = y[..n].iter().map(|&y| f64::from(u8::from(y))).collect();
    let positives = yv.iter().sum::<f64>();
    if n == 0 || positives == 0.0 || positives == n as f64 {
        return None;
    }
    let (mut a, mut b) = (0.0f64, 1.0f64);
    let mut converged = false;
    let mut info = [[0.0; 2]; 2];
    for _ in 0..100 {
        let (mut g0, mut g1) = (0.0, 0.0);
        info = [[0.0; 2]; 2];
        for i in 0..n {
            let mu = sigmoid(a + b * x[i]);
            let w = mu * (1.0 - mu);
            g0 += yv[i] - mu;
            g1 += (yv[i] - mu) * x[i];
            info[0][0] += w;
            info[0][1] += w * x[i];
            info[1][1] += w * x[i] * x[i];
        }
        info[1][0] = info[0][1];
        let det = info[0][0] * info[1][1] - info[0][1] * info[1][0];
        if !det.is_finite() || det <= 0.0 {
            return None;
        }
        let da = (info[1][1] * g0 - info[0][1] * g1) / det;
        let db = (info[0][0] * g1 - info[1][0] * g0) / det;
        // Damped steps keep Newton stable when p carries little signal.
        let scale = (1.0f64).min(5.0 / da.abs().max(db.abs()).max(1e-300));
        a += scale * da;
        b += scale * db;
        if da.abs().max(db.abs()) < 1e-10 {
            converged = true;
            break;
        }
    }
    if !converged || !a.is_finite() || !b.is_finite() {
        return None;
    }
    // Bread: the inverse information at the fit.
    let det = info[0][0] * info[1][1] - info[0][1] * info[1][0];
    let inv = [
        [info[1][1] / det, -info[0][1] / det],
        [-info[1][0] / det, info[0][0] / det],
    ];
    // Meat: outer products of the per-cluster score sums.
    let mut sums: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
    for i in 0..n {
        let r = yv[i] - sigmoid(a + b * x[i]);
        let e = sums.entry(cluster[i]).or_default();
        e.0 += r;
        e.1 += r * x[i];
    }
    let g = sums.len();
    if g < 2 {
        return None;
    }
    let mut meat = [[0.0; 2]; 2];
    for (s0, s1) in sums.values() {
        meat[0][0] += s0 * s0;
        meat[0][1] += s0 * s1;
        meat[1][1] += s1 * s1;
    }
    meat[1][0] = meat[0][1];
    // Var(b) = (inv · meat · inv)[1][1].
    let row = [inv[1][0], inv[1][1]];
    let var_b = (row[0] * (meat[0][0] * row[0] + meat[0][1] * row[1])
        + row[1] * (meat[1][0] * row[0] + meat[1][1] * row[1]))
        * g as f64
        / (g - 1) as f64;
    let se = var_b.max(0.0).sqrt();
    Some(CoxFit {
        intercept: a,
        slope: b,
        slope_se: se,
        slope_ci: Bounds {
            lo: b - Z95 * se,
            hi: b + Z95 * se,
        },
        clusters: g,
    })
}

/// ECE over `ECE_BINS` equal-width bins (the last includes 1).
pub fn ece(p: &[f64], y: &[bool]) -> Option<f64> {
    let mut bins = [(0usize, 0.0f64, 0.0f64); ECE_BINS];
    let n = p.len().min(y.len());
    for (&p, &y) in p.iter().zip(y) {
        let clamped = if p.is_finite() {
            p.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let b = ((clamped * ECE_BINS as f64) as usize).min(ECE_BINS - 1);
        bins[b].0 += 1;
        bins[b].1 += p;
        bins[b].2 += f64::from(u8::from(y));
    }
    (n > 0).then(|| bins.iter().map(|&(_, sp, sy)| (sp - sy).abs()).sum::<f64>() / n as f64)
}

/// Φ⁻¹(q), Acklam's rational approximation (relative error < 1.2e-9).
pub fn normal_quantile(q: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    if q <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if q >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        let t = (-2.0 * q.ln()).sqrt();
        (((((C[0] * t + C[1]) * t + C[2]) * t + C[3]) * t + C[4]) * t + C[5])
            / ((((D[0] * t + D[1]) * t + D[2]) * t + D[3]) * t + 1.0)
    };
    if q < 0.02425 {
        tail(q)
    } else if q > 1.0 - 0.02425 {
        -tail(1.0 - q)
    } else {
        let u = q - 0.5;
        let r = u * u;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * u
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    // Box–Muller; 1 − u keeps the logarithm finite.
    let u: f64 = 1.0 - rng.random::<f64>();
    let v: f64 = rng.random::<f64>();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// Σ_c (Σ_{i∈c} r_i)² / Σ_i r_i² with r = y − p centred: the within-cluster
/// variance inflation (about 1 for independent windows).
pub fn variance_inflation(p: &[f64], y: &[bool], cluster: &[usize]) -> Option<f64> {
    let n = p.len().min(y.len()).min(cluster.len());
    let bias = mean_bias(&p[..n], &y[..n])?;
    let mut sums: std::collections::BTreeMap<usize, f64> = Default::default();
    let mut sq = 0.0;
    for i in 0..n {
        let r = f64::from(u8::from(y[i])) - p[i] + bias;
        *sums.entry(cluster[i]).or_default() += r;
        sq += r * r;
    }
    (sq > 0.0).then(|| sums.values().map(|s| s * s).sum::<f64>() / sq)
}

/// The ECE a perfectly calibrated forecaster would show on these windows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EceFloor {
    /// The data's within-day variance inflation.
    pub inflation: f64,
    /// The day factor's share chosen to match it.
    pub rho: f64,
    /// Median and 95th percentile of the simulated ECE.
    pub median: f64,
    pub p95: f64,
    pub sims: usize,
}

fn simulate(
    z: &[f64],
    cluster: &[usize],
    clusters: usize,
    rho: f64,
    rng: &mut ChaCha8Rng,
    out: &mut Vec<bool>,
) {
    let day: Vec<f64> = (0..clusters).map(|_| standard_normal(rng)).collect();
    let (sd, se) = (rho.sqrt(), (1.0 - rho).sqrt());
    out.clear();
    out.extend(
        z.iter()
            .zip(cluster)
            .map(|(&z, &c)| sd * day[c] + se * standard_normal(rng) < z),
    );
}

/// The simulated ECE floor (see the module doc). `cluster` labels must be
/// dense, 0..clusters. `None` without windows or with `sims` = 0.
pub fn ece_floor(
    p: &[f64],
    y: &[bool],
    cluster: &[usize],
    sims: usize,
    seed: u64,
) -> Option<EceFloor> {
    let n = p.len().min(y.len()).min(cluster.len());
    if n == 0 || sims == 0 {
        return None;
    }
    let clusters = cluster[..n].iter().max()? + 1;
    let inflation = variance_inflation(p, y, cluster)?;
    let z: Vec<f64> = p[..n]
        .iter()
        .map(|&p| normal_quantile(p.clamp(0.0, 1.0)))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut sim = Vec::with_capacity(n);
    let probes = 40;
    let mut best = (f64::INFINITY, 0.0);
    for k in 0..20 {
        let rho = f64::from(k) * 0.05;
        let mean = (0..probes)
            .filter_map(|_| {
                simulate(&z, &cluster[..n], clusters, rho, &mut rng, &mut sim);
                variance_inflation(&p[..n], &sim, &cluster[..n])
            })
            .sum::<f64>()
            / f64::from(probes);
        if (mean - inflation).abs() < best.0 {
            best = ((mean - inflation).abs(), rho);
        }
    }
    let rho = best.1;
    let mut eces: Vec<f64> = (0..sims)
        .filter_map(|_| {
            simulate(&z, &cluster[..n], clusters, rho, &mut rng, &mut sim);
            ece(&p[..n], &sim)
        })
        .collect();
    eces.sort_by(f64::total_cmp);
    Some(EceFloor {
        inflation,
        rho,
        median: quantile(&eces, 0.5),
        p95: quantile(&eces, 0.95),
        sims: eces.len(),
    })
}

/// Linear-interpolated quantile of sorted values; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (i, frac) = (pos.floor() as usize, pos - pos.floor());
    match sorted.get(i + 1) {
        Some(&next) => sorted[i] + frac * (next - sorted[i]),
        None => sorted[i],
    }
}

/// Bootstrap resamples of `blocks` units: for each resample, how often each
/// block was drawn. Seeded.
pub fn block_counts(blocks: usize, resamples: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..resamples)
        .map(|_| {
            let mut counts = vec![0u32; blocks];
            for _ in 0..blocks {
                counts[rng.random_range(0..blocks.max(1))] += 1;
            }
            counts
        })
        .collect()
}

/// The central 95 % interval of bootstrap values (non-finite ones dropped).
pub fn percentile_bounds(mut values: Vec<f64>) -> Option<Bounds> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    (!values.is_empty()).then(|| Bounds {
        lo: quantile(&values, 0.025),
        hi: quantile(&values, 0.975),
    })
}

/// Two forecasters on the same windows: Brier(A) − Brier(B) and the skill
/// 1 − Brier(A) / Brier(B), with block-bootstrap bounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairedBrier {
    pub n: usize,
    pub brier_a: f64,
    pub brier_b: f64,
    pub difference: f64,
    pub difference_ci: Option<Bounds>,
    pub skill: Option<f64>,
    pub skill_ci: Option<Bounds>,
}

/// Paired Brier statistics of forecasts `a` and `b` against `y`, resampling
/// the `block` labels (dense, 0..counts[r].len()) with `counts`.
pub fn paired_brier(
    a: &[f64],
    b: &[f64],
    y: &[bool],
    block: &[usize],
    counts: &[Vec<u32>],
) -> Option<PairedBrier> {
    let n = a.len().min(b.len()).min(y.len()).min(block.len());
    if n == 0 {
        return None;
    }
    let blocks = block[..n].iter().max()? + 1;
    let mut sums = vec![(0.0f64, 0.0f64, 0usize); blocks];
    for i in 0..n {
        let yv = f64::from(u8::from(y[i]));
        let s = &mut sums[block[i]];
        s.0 += (a[i] - yv).powi(2);
        s.1 += (b[i] - yv).powi(2);
        s.2 += 1;
    }
    let stat = |w: &dyn Fn(usize) -> f64| -> Option<(f64, f64, f64)> {
        let (mut sa, mut sb, mut k) = (0.0, 0.0, 0.0);
        for (j, s) in sums.iter().enumerate() {
            let w = w(j);
            sa += w * s.0;
            sb += w * s.1;
            k += w * s.2 as f64;
        }
        (k > 0.0).then(|| (sa / k, sb / k, (sa - sb) / k))
    };
    let (ba, bb, diff) = stat(&|_| 1.0)?;
    let mut diffs = Vec::with_capacity(counts.len());
    let mut skills = Vec::with_capacity(counts.len());
    for c in counts {
        if let Some((ra, rb, d)) = stat(&|j| f64::from(c.get(j).copied().unwrap_or(0))) {
            diffs.push(d);
            if rb > 0.0 {
                skills.push(1.0 - ra / rb);
            }
        }
    }
    Some(PairedBrier {
        n,
        brier_a: ba,
        brier_b: bb,
        difference: diff,
        difference_ci: percentile_bounds(diffs),
        skill: (bb > 0.0).then(|| 1.0 - ba / bb),
        skill_ci: percentile_bounds(skills),
    })
}

/// Hansen's test for superior predictive ability (SPA) of many rivals
/// against one default, on the Brier score, in one cell: is some rival
/// better than the default by more than `margin`? (Issue 29, goal 5.)
///
/// For rival k the loss difference is d_k = Brier(default) − Brier(k) −
/// margin, so the null "no rival better by more than the margin" is
/// max_k E[d_k] ≤ 0. The statistic is T = max(0, max_k d̄_k / ω_k), with
/// ω_k the block-bootstrap standard deviation of d̄_k; its null
/// distribution comes from the same resamples, each rival recentred as
/// Hansen's consistent SPA does: a rival far below the null (d̄_k / ω_k ≤
/// −√(2 ln ln n)) keeps its own mean, so a poor rival cannot inflate the
/// maximum, while every other is put at the null's boundary (mean 0). The
/// p-value is the share of resamples whose statistic reaches T. Taking the
/// maximum over the rivals is what makes the test survive their number:
/// twenty rivals no better than the default reject in about 5 % of runs,
/// not in the two-thirds twenty separate tests would.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RivalTest {
    pub n: usize,
    /// Rivals tested (those equal to the default on every window left out:
    /// they cannot be better).
    pub rivals: usize,
    pub margin: f64,
    pub brier_default: f64,
    /// The rival with the lowest Brier (index into the rivals given), and
    /// Brier(default) − Brier(it): positive when it beats the default.
    pub best: Option<usize>,
    pub best_advantage: f64,
    /// The rival with the largest studentised advantage, which sets T.
    pub leader: Option<usize>,
    pub statistic: f64,
    pub p_value: f64,
    pub resamples: usize,
}

/// [`RivalTest`] of forecasts `default` against each of `rivals` on
/// outcomes `y`, resampling the `block` labels (dense,
/// 0..counts[r].len()) with `counts`. `None` without windows or resamples.
pub fn spa_rivals(
    default: &[f64],
    rivals: &[&[f64]],
    y: &[bool],
    block: &[usize],
    counts: &[Vec<u32>],
    margin: f64,
) -> Option<RivalTest> {
    let n = rivals
        .iter()
        .fold(default.len().min(y.len()).min(block.len()), |n, r| {
            n.min(r.len())
        });
    if n == 0 || counts.is_empty() {
        return None;
    }
    let blocks = block[..n].iter().max()? + 1;
    // Per block: windows, the default's squared errors, and each rival's
    // squared-error saving over the default.
    let mut windows = vec![0.0f64; blocks];
    let mut loss = vec![0.0f64; blocks];
    let mut saving = vec![vec![0.0f64; blocks]; rivals.len()];
    let mut differs = vec![false; rivals.len()];
    for i in 0..n {
        let yv = f64::from(u8::from(y[i]));
        let b = block[i];
        let own = (default[i] - yv).powi(2);
        windows[b] += 1.0;
        loss[b] += own;
        for (k, r) in rivals.iter().enumerate() {
            saving[k][b] += own - (r[i] - yv).powi(2);
            differs[k] |= r[i] != default[i];
        }
    }
    let mean = |sums: &[f64], w: &dyn Fn(usize) -> f64| -> Option<f64> {
        let (mut s, mut k) = (0.0, 0.0);
        for (j, (&v, &m)) in sums.iter().zip(&windows).enumerate() {
            s += w(j) * v;
            k += w(j) * m;
        }
        (k > 0.0).then(|| s / k)
    };
    let ones = |_: usize| 1.0;
    let brier_default = mean(&loss, &ones)?;
    let point: Vec<f64> = saving
        .iter()
        .map(|s| mean(s, &ones).map_or(f64::NEG_INFINITY, |v| v - margin))
        .collect();
    // d̄*_k for every resample (rows) and rival (columns).
    let draws: Vec<Vec<f64>> = counts
        .iter()
        .map(|c| {
            let w = |j: usize| f64::from(c.get(j).copied().unwrap_or(0));
            saving
                .iter()
                .map(|s| mean(s, &w).map_or(f64::NAN, |v| v - margin))
                .collect()
        })
        .collect();
    let tested: Vec<usize> = (0..rivals.len()).filter(|&k| differs[k]).collect();
    let sd: Vec<f64> = (0..rivals.len())
        .map(|k| {
            let v: Vec<f64> = draws
                .iter()
                .map(|d| d[k])
                .filter(|x| x.is_finite())
                .collect();
            if v.len() < 2 {
                return 0.0;
            }
            let m = v.iter().sum::<f64>() / v.len() as f64;
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
        })
        .collect();
    let student = |k: usize, d: f64| -> f64 {
        if sd[k] > 0.0 {
            d / sd[k]
        } else if d > 0.0 {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        }
    };
    let t: Vec<f64> = (0..rivals.len()).map(|k| student(k, point[k])).collect();
    let leader = tested
        .iter()
        .copied()
        .max_by(|&a, &b| t[a].total_cmp(&t[b]));
    let best = tested
        .iter()
        .copied()
        .max_by(|&a, &b| point[a].total_cmp(&point[b]));
    let statistic = leader.map_or(0.0, |k| t[k].max(0.0));
    let threshold = (2.0 * (n.max(3) as f64).ln().ln()).max(0.0).sqrt();
    let centre: Vec<f64> = (0..rivals.len())
        .map(|k| if t[k] <= -threshold { point[k] } else { 0.0 })
        .collect();
    let mut reached = 0usize;
    let mut used = 0usize;
    for d in &draws {
        let mut max = 0.0f64;
        for &k in &tested {
            if sd[k] > 0.0 && d[k].is_finite() {
                max = max.max((d[k] - point[k] + centre[k]) / sd[k]);
            }
        }
        used += 1;
        if max >= statistic {
            reached += 1;
        }
    }
    Some(RivalTest {
        n,
        rivals: tested.len(),
        margin,
        brier_default,
        best,
        best_advantage: best.map_or(f64::NAN, |k| point[k] + margin),
        leader,
        statistic,
        p_value: reached as f64 / used.max(1) as f64,
        resamples: used,
    })
}

/// Holm's step-down adjustment of p-values for the family they make (in
/// the order given): the k-th smallest is multiplied by (m − k + 1), never
/// below the one before it, at most 1. NaN counts as 1.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let clean = |v: f64| if v.is_nan() { 1.0 } else { v.clamp(0.0, 1.0) };
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| clean(p[a]).total_cmp(&clean(p[b])));
    let mut out = vec![1.0; m];
    let mut running = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * clean(p[i])).min(1.0));
        out[i] = running;
    }
    out
}

/// The AUC and its block-bootstrap bounds.
pub fn auc_with_bounds(
    p: &[f64],
    y: &[bool],
    block: &[usize],
    counts: &[Vec<u32>],
) -> Option<(f64, Option<Bounds>)> {
    let ranked = Ranked::new(p, y);
    let point = ranked.auc()?;
    let values = counts
        .iter()
        .filter_map(|c| {
            ranked.auc_weighted(|i| {
                f64::from(block.get(i).and_then(|&b| c.get(b)).copied().unwrap_or(0))
            })
        })
        .collect();
    Some((point, percentile_bounds(values)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forecasts uniform in (0.05, 0.95) in days of 24 windows, outcomes
    /// drawn from `truth(p)` with a shared day effect of strength `rho`.
    fn synthetic(
        days: usize,
        rho: f64,
        seed: u64,
        truth: impl Fn(f64) -> f64,
    ) -> (Vec<f64>, Vec<bool>, Vec<usize>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut p, mut y, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for d in 0..days {
            let day = standard_normal(&mut rng);
            for _ in 0..24 {
                let f = 0.05 + 0.9 * rng.random::<f64>();
                let z = rho.sqrt() * day + (1.0 - rho).sqrt() * standard_normal(&mut rng);
                p.push(f);
                y.push(z < normal_quantile(truth(f)));
                c.push(d);
            }
        }
        (p, y, c)
    }

    #[test]
    fn auc_of_a_constructed_example() {
        // Pairs (pos, neg): (0.35, 0.1) yes, (0.35, 0.4) no, (0.8, ·) yes twice: 3 of 4.
        let p = [0.1, 0.4, 0.35, 0.8];
        let y = [false, false, true, true];
        assert!((auc(&p, &y).unwrap() - 0.75).abs() < 1e-12);
        // A tie between a survivor and a failure counts one half.
        assert!((auc(&[0.5, 0.5], &[true, false]).unwrap() - 0.5).abs() < 1e-12);
        // Perfect ranking, reversed ranking, one class only.
        assert_eq!(auc(&[0.1, 0.9], &[false, true]), Some(1.0));
        assert_eq!(auc(&[0.9, 0.1], &[false, true]), Some(0.0));
        assert_eq!(auc(&[0.1, 0.9], &[true, true]), None);
        // Weights act like repeated cases.
        let r = Ranked::new(&p, &y);
        let doubled = r.auc_weighted(|i| if i == 1 { 2.0 } else { 1.0 }).unwrap();
        let repeated = auc(
            &[0.1, 0.4, 0.4, 0.35, 0.8],
            &[false, false, false, true, true],
        )
        .unwrap();
        assert!((doubled - repeated).abs() < 1e-12);
    }

    #[test]
    fn normal_quantiles() {
        assert!((normal_quantile(0.975) - Z95).abs() < 1e-8);
        assert!(normal_quantile(0.5).abs() < 1e-12);
        assert!((normal_quantile(0.001) + 3.090_232_306).abs() < 1e-7);
    }

    #[test]
    fn cox_slope_separates_calibrated_from_overconfident() {
        let (p, y, c) = synthetic(200, 0.2, 7, |p| p);
        let fit = cox_calibration(&p, &y, &c).unwrap();
        assert!(fit.slope_ci.contains(1.0), "{fit:?}");
        assert!(fit.slope_ci.lo >= 0.8, "{fit:?}");
        assert!(fit.intercept.abs() < 0.2, "{fit:?}");
        // Too extreme: the truth is a third of the forecast's log-odds.
        let (p, y, c) = synthetic(200, 0.2, 7, |p| sigmoid(logit(p) / 3.0));
        let fit = cox_calibration(&p, &y, &c).unwrap();
        assert!(!fit.slope_ci.contains(1.0), "{fit:?}");
        assert!((fit.slope - 1.0 / 3.0).abs() < 0.1, "{fit:?}");
    }

    #[test]
    fn clustered_interval_widens_with_overlap() {
        let (p, y, c) = synthetic(200, 0.5, 3, |p| p);
        let days = cox_calibration(&p, &y, &c).unwrap();
        let single: Vec<usize> = (0..p.len()).collect();
        let windows = cox_calibration(&p, &y, &single).unwrap();
        assert!(
            days.slope_se > 1.3 * windows.slope_se,
            "{days:?} {windows:?}"
        );
        assert!(variance_inflation(&p, &y, &c).unwrap() > 2.0);
        let (p, y, c) = synthetic(200, 0.0, 3, |p| p);
        let r = variance_inflation(&p, &y, &c).unwrap();
        assert!((0.7..1.3).contains(&r), "{r}");
    }

    #[test]
    fn ece_floor_passes_calibrated_and_fails_miscalibrated() {
        let (p, y, c) = synthetic(150, 0.3, 11, |p| p);
        let floor = ece_floor(&p, &y, &c, 300, 1).unwrap();
        let e = ece(&p, &y).unwrap();
        assert!(e <= floor.p95, "{e} {floor:?}");
        assert!(floor.rho > 0.1 && floor.rho < 0.6, "{floor:?}");
        // The truth is 0.1 lower than the forecast everywhere.
        let (p, y, c) = synthetic(150, 0.3, 11, |p| p - 0.1);
        let floor = ece_floor(&p, &y, &c, 300, 1).unwrap();
        let e = ece(&p, &y).unwrap();
        assert!(e > floor.p95, "{e} {floor:?}");
        assert!((mean_bias(&p, &y).unwrap() - 0.1).abs() < 0.03);
    }

    #[test]
    fn ece_by_hand() {
        // Bin 1: 0.1, 0.1 against 1, 0 → |0.2 − 1| = 0.8; bin 9: 0.9 against 1 → 0.1.
        let e = ece(&[0.1, 0.1, 0.9], &[true, false, true]).unwrap();
        assert!((e - 0.9 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn paired_brier_bounds() {
        let (p, y, c) = synthetic(140, 0.2, 5, |p| p);
        let weeks: Vec<usize> = c.iter().map(|d| d / 7).collect();
        let counts = block_counts(20, 500, 2);
        // The same forecaster: difference exactly zero.
        let same = paired_brier(&p, &p, &y, &weeks, &counts).unwrap();
        assert_eq!(same.difference, 0.0);
        assert_eq!(same.difference_ci, Some(Bounds { lo: 0.0, hi: 0.0 }));
        // Against the constant base rate, the informative forecaster wins.
        let rate = y.iter().filter(|&&y| y).count() as f64 / y.len() as f64;
        let constant = vec![rate; p.len()];
        let vs = paired_brier(&p, &constant, &y, &weeks, &counts).unwrap();
        assert!(vs.difference_ci.unwrap().hi < 0.0, "{vs:?}");
        assert!(vs.skill_ci.unwrap().lo > 0.0, "{vs:?}");
        let (a, bounds) = auc_with_bounds(&p, &y, &weeks, &counts).unwrap();
        assert!(
            bounds.unwrap().lo > 0.55 && a < bounds.unwrap().hi,
            "{a} {bounds:?}"
        );
        let (a, bounds) = auc_with_bounds(&constant, &y, &weeks, &counts).unwrap();
        assert_eq!(a, 0.5);
        assert!(bounds.unwrap().contains(0.5));
    }

    /// Forecast `p` pulled towards `to` by `keep` (1: unchanged).
    fn shrunk(p: &[f64], to: f64, keep: f64) -> Vec<f64> {
        p.iter().map(|&p| keep * p + (1.0 - keep) * to).collect()
    }

    /// Forecast `p` with independent noise of sd `sd`, kept inside (0, 1).
    fn noisy(p: &[f64], sd: f64, seed: u64) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        p.iter()
            .map(|&p| (p + sd * standard_normal(&mut rng)).clamp(0.01, 0.99))
            .collect()
    }

    #[test]
    fn spa_finds_a_rival_truly_better_by_more_than_the_margin() {
        let (p, y, c) = synthetic(140, 0.2, 21, |p| p);
        let weeks: Vec<usize> = c.iter().map(|d| d / 7).collect();
        let counts = block_counts(20, 500, 3);
        let rate = y.iter().filter(|&&y| y).count() as f64 / y.len() as f64;
        // The default knows half of what the truth knows: Brier about 0.017 worse.
        let default = shrunk(&p, rate, 0.5);
        let constant = vec![rate; p.len()];
        let worse = noisy(&p, 0.3, 9);
        let rivals: Vec<&[f64]> = vec![&constant, &worse, &p, &default];
        let test = spa_rivals(&default, &rivals, &y, &weeks, &counts, 0.004).unwrap();
        assert_eq!(test.best, Some(2), "{test:?}");
        assert_eq!(test.leader, Some(2), "{test:?}");
        assert!(test.best_advantage > 0.01, "{test:?}");
        assert!(test.p_value < 0.01, "{test:?}");
        // The rival equal to the default on every window is not tested.
        assert_eq!(test.rivals, 3);
        // Without the better rival nothing is found.
        let rivals: Vec<&[f64]> = vec![&constant, &worse, &default];
        let test = spa_rivals(&default, &rivals, &y, &weeks, &counts, 0.004).unwrap();
        assert!(test.best_advantage < 0.0, "{test:?}");
        assert!(test.p_value > 0.5, "{test:?}");
    }

    #[test]
    fn spa_respects_the_margin() {
        let (p, y, c) = synthetic(280, 0.1, 22, |p| p);
        let weeks: Vec<usize> = c.iter().map(|d| d / 7).collect();
        let counts = block_counts(40, 500, 4);
        let rate = y.iter().filter(|&&y| y).count() as f64 / y.len() as f64;
        // Truly better by about 0.09 · 0.0675 ≈ 0.006.
        let default = shrunk(&p, rate, 0.7);
        let rivals: Vec<&[f64]> = vec![&p];
        let found = spa_rivals(&default, &rivals, &y, &weeks, &counts, 0.0).unwrap();
        assert!(found.p_value < 0.01, "{found:?}");
        assert!((0.003..0.01).contains(&found.best_advantage), "{found:?}");
        // Better, but by less than a margin of 0.02: not found.
        let within = spa_rivals(&default, &rivals, &y, &weeks, &counts, 0.02).unwrap();
        assert!(within.p_value > 0.5, "{within:?}");
        assert!((within.best_advantage - found.best_advantage).abs() < 1e-12);
    }

    #[test]
    fn spa_does_not_find_one_of_many_rivals_as_good_as_the_default() {
        // Twenty rivals exactly as good as the default (the truth with
        // noise of the same size, drawn apart), margin 0: twenty separate
        // tests would find one in about two runs of three.
        let mut rejected = 0;
        let runs = 30;
        for run in 0..runs {
            let (p, y, c) = synthetic(280, 0.2, 100 + run, |p| p);
            let weeks: Vec<usize> = c.iter().map(|d| d / 7).collect();
            let counts = block_counts(40, 500, run);
            let default = noisy(&p, 0.08, 1000 + run);
            let rivals: Vec<Vec<f64>> = (0..20)
                .map(|k| noisy(&p, 0.08, 2000 + 50 * run + k))
                .collect();
            let refs: Vec<&[f64]> = rivals.iter().map(Vec::as_slice).collect();
            let test = spa_rivals(&default, &refs, &y, &weeks, &counts, 0.0).unwrap();
            assert_eq!(test.rivals, 20);
            if test.p_value < 0.05 {
                rejected += 1;
            }
        }
        assert!(rejected <= 4, "{rejected} of {runs} runs found a rival");
    }

    #[test]
    fn holm_by_hand() {
        // Sorted 0.01, 0.02, 0.04 of three: 0.03, 0.04, 0.04 (kept monotone).
        let adjusted = holm(&[0.04, 0.01, 0.02]);
        let want = [0.04, 0.03, 0.04];
        for (a, w) in adjusted.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adjusted:?}");
        }
        assert_eq!(holm(&[0.6, f64::NAN]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }
}
