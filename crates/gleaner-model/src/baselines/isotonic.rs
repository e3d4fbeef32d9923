//! Per-host isotonic calibration (`logistic+iso`): the monotone map from a
//! forecast TR to the survival share of the host's own past windows that
//! got about that forecast, fitted by pool-adjacent-violators (PAV) and
//! blended towards the identity by the number of windows it learned from.
//!
//! Why: `logistic`'s expected calibration error stays above 0.02 at 3–10 h
//! on server VMs and desktop hosts (`docs/accuracy.md`, rounds three and
//! four), and `logistic+cal`'s parametric recalibration (three
//! coefficients) cannot bend a map that is wrong in one range only. PAV
//! assumes only that a higher forecast should not mean a lower survival.
//!
//! The pairs come from windows the forecast being calibrated never saw and
//! that ended before W's date (`logistic.rs` builds them: the fit the record
//! had [`super::logistic::HOLDOUT_DAYS`] days earlier forecasts the hourly
//! windows of the days since), so nothing after W is read. With fewer than
//! [`MIN_WINDOWS`] pairs the map is the identity; otherwise the calibrated
//! forecast is `(n p_iso + K p) / (n + K)` with `K` = [`PSEUDO_WINDOWS`]: a
//! host's windows overlap (hourly starts, windows up to 10 h) and are few,
//! so the map earns its weight slowly. Between two PAV blocks the map is
//! linear in the forecast (from one block's mean forecast to the next's),
//! flat beyond the first and last.
//! Pure code: no I/O, no clock.

/// Fewer held-out windows than this: the identity.
pub const MIN_WINDOWS: usize = 48;
/// Pseudo-windows of the identity in the blend (see the module's doc).
pub const PSEUDO_WINDOWS: f64 = 100.0;

/// A fitted monotone map, blended towards the identity.
#[derive(Debug, Clone, PartialEq)]
pub struct Isotonic {
    /// (mean forecast, survival share) of each PAV block, forecasts
    /// increasing and shares non-decreasing; empty for the identity.
    knots: Vec<(f64, f64)>,
    /// Windows it was fitted on (0: the identity).
    pub windows: usize,
}

impl Isotonic {
    /// The identity (no held-out windows, or too few).
    pub const IDENTITY: Isotonic = Isotonic {
        knots: Vec::new(),
        windows: 0,
    };

    /// Fits the map to `(forecast, outcome, weight)` triples (outcome 1:
    /// survived, 0: failed). Non-finite forecasts and weights ≤ 0 are
    /// skipped; fewer than [`MIN_WINDOWS`] usable triples give the identity.
    pub fn fit(pairs: &[(f64, f64, f64)]) -> Isotonic {
        let mut usable: Vec<(f64, f64, f64)> = pairs
            .iter()
            .copied()
            .filter(|(p, y, w)| p.is_finite() && y.is_finite() && w.is_finite() && *w > 0.0)
            .collect();
        if usable.len() < MIN_WINDOWS {
            return Isotonic::IDENTITY;
        }
        usable.sort_by(|a, b| a.0.total_cmp(&b.0));
        Isotonic {
            knots: pav(&usable),
            windows: usable.len(),
        }
    }

    /// The PAV map alone, before the blend (for tests and reports).
    pub fn raw(&self, p: f64) -> f64 {
        let Some(&(x0, y0)) = self.knots.first() else {
            return p;
        };
        if p <= x0 {
            return y0;
        }
        let i = self.knots.partition_point(|k| k.0 < p);
        let Some(&(x1, y1)) = self.knots.get(i) else {
            return self.knots.last().map_or(p, |k| k.1);
        };
        let (xa, ya) = self.knots[i - 1];
        if x1 > xa {
            ya + (y1 - ya) * (p - xa) / (x1 - xa)
        } else {
            y1
        }
    }

    /// The calibrated forecast of `p`: the PAV map blended towards `p`.
    pub fn apply(&self, p: f64) -> f64 {
        if self.knots.is_empty() {
            return p;
        }
        let n = self.windows as f64;
        (n * self.raw(p) + PSEUDO_WINDOWS * p) / (n + PSEUDO_WINDOWS)
    }
}

/// Pool-adjacent-violators on triples sorted by forecast: the weighted
/// least-squares non-decreasing fit of outcomes, as (weighted mean
/// forecast, weighted mean outcome) per block. Equal forecasts share a
/// block (a map must give one value to one forecast).
fn pav(sorted: &[(f64, f64, f64)]) -> Vec<(f64, f64)> {
    // (weight, Σ w·forecast, Σ w·outcome, last forecast) per block.
    let mut blocks: Vec<(f64, f64, f64, f64)> = Vec::new();
    for &(p, y, w) in sorted {
        match blocks.last_mut() {
            Some(last) if last.3 == p => {
                last.0 += w;
                last.1 += w * p;
                last.2 += w * y;
            }
            _ => blocks.push((w, w * p, w * y, p)),
        }
        // Merge while the last block's share is below the one before.
        while blocks.len() >= 2 {
            let n = blocks.len();
            let (a, b) = (blocks[n - 2], blocks[n - 1]);
            if a.2 / a.0 <= b.2 / b.0 {
                break;
            }
            blocks[n - 2] = (a.0 + b.0, a.1 + b.1, a.2 + b.2, b.3);
            blocks.pop();
        }
    }
    blocks
        .into_iter()
        .map(|(w, wp, wy, _)| (wp / w, wy / w))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(pairs: &[(f64, f64)]) -> Vec<(f64, f64, f64)> {
        pairs.iter().map(|&(p, y)| (p, y, 1.0)).collect()
    }

    #[test]
    fn pav_by_hand() {
        // Outcomes 1, 0, 1, 1 at forecasts .1 .2 .3 .4: the first two
        // violate and pool to 0.5 at mean forecast 0.15.
        let k = pav(&unit(&[(0.1, 1.0), (0.2, 0.0), (0.3, 1.0), (0.4, 1.0)]));
        assert_eq!(k.len(), 3, "{k:?}");
        assert!((k[0].0 - 0.15).abs() < 1e-15 && (k[0].1 - 0.5).abs() < 1e-15);
        assert_eq!((k[1], k[2]), ((0.3, 1.0), (0.4, 1.0)));
        // 1, 1, 0 at .1 .2 .3: the 0 pools with the .2 (share 0.5), which
        // then violates the .1 and pools with it: one block of share 2/3.
        let k = pav(&unit(&[(0.1, 1.0), (0.2, 1.0), (0.3, 0.0)]));
        assert_eq!(k.len(), 1, "{k:?}");
        assert!((k[0].0 - 0.2).abs() < 1e-15 && (k[0].1 - 2.0 / 3.0).abs() < 1e-15);
        // Weights count: a heavy 0 at .2 drags the first block further.
        let k = pav(&[(0.1, 1.0, 1.0), (0.2, 0.0, 3.0), (0.5, 1.0, 1.0)]);
        assert!(
            (k[0].1 - 0.25).abs() < 1e-15 && (k[0].0 - 0.175).abs() < 1e-15,
            "{k:?}"
        );
        // Equal forecasts share a block even when in order.
        let k = pav(&unit(&[(0.3, 0.0), (0.3, 1.0), (0.6, 1.0)]));
        assert_eq!(k, vec![(0.3, 0.5), (0.6, 1.0)]);
    }

    #[test]
    fn the_map_is_monotone_interpolates_and_is_flat_at_the_ends() {
        // 200 windows whose survival is p² (an over-confident forecast),
        // outcomes drawn by a fixed rule.
        let pairs: Vec<(f64, f64, f64)> = (0..200)
            .map(|i| {
                let p = (f64::from(i) + 0.5) / 200.0;
                let y = if (f64::from(i * 37 % 200) + 0.5) / 200.0 < p * p {
                    1.0
                } else {
                    0.0
                };
                (p, y, 1.0)
            })
            .collect();
        let iso = Isotonic::fit(&pairs);
        assert_eq!(iso.windows, 200);
        let grid: Vec<f64> = (0..=100).map(|i| f64::from(i) / 100.0).collect();
        for w in grid.windows(2) {
            assert!(iso.raw(w[0]) <= iso.raw(w[1]) + 1e-15, "raw at {w:?}");
            assert!(iso.apply(w[0]) <= iso.apply(w[1]) + 1e-15, "blend at {w:?}");
        }
        // It learns the bias: at 0.5 the raw map is well below 0.5.
        assert!(iso.raw(0.5) < 0.4, "{}", iso.raw(0.5));
        // The blend lies between the identity and the raw map.
        let (raw, blended) = (iso.raw(0.5), iso.apply(0.5));
        assert!(raw < blended && blended < 0.5);
        let want = (200.0 * raw + PSEUDO_WINDOWS * 0.5) / (200.0 + PSEUDO_WINDOWS);
        assert!((blended - want).abs() < 1e-15);
        // Flat beyond the ends; linear between two knots.
        assert_eq!(iso.raw(-1.0), iso.raw(0.0));
        assert_eq!(iso.raw(2.0), iso.knots.last().unwrap().1);
        let (a, b) = (iso.knots[0], iso.knots[1]);
        let mid = 0.5 * (a.0 + b.0);
        assert!((iso.raw(mid) - 0.5 * (a.1 + b.1)).abs() < 1e-12);
    }

    #[test]
    fn few_windows_give_the_identity() {
        let pairs: Vec<(f64, f64, f64)> = (0..MIN_WINDOWS - 1)
            .map(|i| (0.9, if i % 2 == 0 { 0.0 } else { 1.0 }, 1.0))
            .collect();
        let iso = Isotonic::fit(&pairs);
        assert_eq!(iso, Isotonic::IDENTITY);
        assert_eq!(iso.apply(0.9), 0.9);
        // Unusable triples do not count towards the minimum.
        let mut more = pairs.clone();
        more.push((f64::NAN, 1.0, 1.0));
        more.push((0.5, 1.0, 0.0));
        assert_eq!(Isotonic::fit(&more), Isotonic::IDENTITY);
        // One more usable window: a map.
        more.push((0.5, 1.0, 1.0));
        assert_eq!(Isotonic::fit(&more).windows, MIN_WINDOWS);
    }
}
