//! A host's temporal reliability as a curve over window lengths, TR(T) for
//! windows starting now, and what follows from it: the chance a run of a
//! given length succeeds, a failure time drawn from it, the mean time to
//! failure M, the expected turnaround with restarts, and the Young/Daly
//! checkpoint interval τ = sqrt(2·C·M).
//!
//! One reliability query that answers a few window lengths serves every
//! runtime: between the points the curve keeps a constant hazard
//! (log-linear survival), beyond the last point it keeps the last segment's
//! hazard. TR(0) = 1 is implied. Pure code.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Most points a curve keeps (bounds what a peer's answer can make us store).
pub const MAX_CURVE_POINTS: usize = 64;

/// Survival below this is treated as zero when taking logarithms.
const TINY: f64 = 1e-12;

/// TR over window lengths: `points[i] = (T_i seconds, TR(T_i))`, T strictly
/// increasing and TR non-increasing in [0, 1] (the constructor enforces both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrCurve {
    points: Vec<(f64, f64)>,
}

impl TrCurve {
    /// A curve from `(window seconds, TR)` pairs in any order. Pairs with a
    /// non-positive or non-finite length or a NaN TR are dropped, TR is
    /// clamped to [0, 1] and made non-increasing (a longer window cannot be
    /// safer than a shorter one it contains), at most [`MAX_CURVE_POINTS`]
    /// are kept. No usable pair gives the never-failing curve.
    pub fn new(pairs: impl IntoIterator<Item = (f64, f64)>) -> TrCurve {
        let mut points: Vec<(f64, f64)> = pairs
            .into_iter()
            .filter(|(t, tr)| t.is_finite() && *t > 0.0 && !tr.is_nan())
            .map(|(t, tr)| (t, tr.clamp(0.0, 1.0)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points.dedup_by(|later, earlier| later.0 == earlier.0);
        points.truncate(MAX_CURVE_POINTS);
        let mut floor = 1.0f64;
        for p in &mut points {
            floor = floor.min(p.1);
            p.1 = floor;
        }
        TrCurve { points }
    }

    /// A host that never fails.
    pub fn never_fails() -> TrCurve {
        TrCurve { points: Vec::new() }
    }

    /// A constant hazard: TR(T) = exp(−T / mttf).
    pub fn exponential(mttf_secs: f64) -> TrCurve {
        if !is_positive(mttf_secs) || mttf_secs.is_infinite() {
            return TrCurve::never_fails();
        }
        TrCurve::new([(mttf_secs, (-1.0f64).exp())])
    }

    /// The points, `(T seconds, TR)`.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// This curve with the TR of every point multiplied by `factor`: a
    /// host's claims as its record discounts them
    /// ([`crate::trust::HostTrack::claim_discount`]), the one way the
    /// node's placement and the simulator's both apply it. TR(0) = 1 stays
    /// implied, so a curve without points is returned as it is.
    pub fn scaled(&self, factor: f64) -> TrCurve {
        TrCurve::new(self.points.iter().map(|&(secs, tr)| (secs, tr * factor)))
    }

    /// Segments `(t0, s0, t1, hazard)` with the implied start (0, 1).
    fn segments(&self) -> impl Iterator<Item = (f64, f64, f64, f64)> + '_ {
        let mut prev = (0.0f64, 1.0f64);
        self.points.iter().map(move |&(t, s)| {
            let seg = (prev.0, prev.1, t, hazard(prev.1, s, t - prev.0));
            prev = (t, s);
            seg
        })
    }

    /// The hazard beyond the last point: the last segment's.
    fn tail_hazard(&self) -> f64 {
        self.segments().last().map_or(0.0, |(_, _, _, h)| h)
    }

    /// TR(T): the probability that no failure hits a window of `secs`.
    pub fn tr_at(&self, secs: f64) -> f64 {
        if !is_positive(secs) {
            return 1.0;
        }
        let mut last = (0.0, 1.0);
        for (t0, s0, t1, h) in self.segments() {
            if secs <= t1 {
                return s0 * (-h * (secs - t0)).exp();
            }
            last = (t1, s0 * (-h * (t1 - t0)).exp());
        }
        if secs.is_infinite() {
            return if self.tail_hazard() > 0.0 {
                0.0
            } else {
                last.1
            };
        }
        last.1 * (-self.tail_hazard() * (secs - last.0)).exp()
    }

    /// ∫₀^secs TR(t) dt: the expected time a run of `secs` is up before it
    /// ends or fails.
    pub fn integral(&self, secs: f64) -> f64 {
        if !is_positive(secs) {
            return 0.0;
        }
        let mut total = 0.0;
        let mut last = (0.0, 1.0);
        for (t0, s0, t1, h) in self.segments() {
            let end = secs.min(t1);
            total += segment_integral(s0, h, end - t0);
            if secs <= t1 {
                return total;
            }
            last = (t1, s0 * (-h * (t1 - t0)).exp());
        }
        total + segment_integral(last.1, self.tail_hazard(), secs - last.0)
    }

    /// The mean time to failure M = ∫₀^∞ TR(t) dt; infinite for a curve
    /// whose tail never fails.
    pub fn mttf(&self) -> f64 {
        self.integral(f64::INFINITY)
    }

    /// A failure time drawn from the curve (inverse transform), seconds from
    /// the window's start; `None` when the draw falls where the host never fails.
    pub fn sample_failure<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<f64> {
        let u: f64 = rng.random::<f64>();
        self.failure_time_at(u)
    }

    /// The time at which TR falls to `u` (the inverse of [`Self::tr_at`]).
    pub fn failure_time_at(&self, u: f64) -> Option<f64> {
        if !is_positive(u) {
            // u = 0 only in the limit; treat as "at the curve's end".
            return self.points.last().map(|p| p.0);
        }
        let mut last = (0.0, 1.0);
        for (t0, s0, t1, h) in self.segments() {
            let s1 = s0 * (-h * (t1 - t0)).exp();
            if u >= s1 && u <= s0 {
                return Some(if h > 0.0 { t0 + (s0 / u).ln() / h } else { t0 });
            }
            last = (t1, s1);
        }
        let h = self.tail_hazard();
        if h > 0.0 && u < last.1 {
            Some(last.0 + (last.1 / u).ln() / h)
        } else {
            None
        }
    }

    /// Expected wall time until a run of `run_secs` succeeds when every
    /// failure restarts it from zero on an equally reliable host at once:
    /// ∫₀^r TR / TR(r) (for a constant hazard λ: (e^{λr} − 1)/λ). Infinite
    /// when the run can never succeed.
    pub fn expected_time_with_restarts(&self, run_secs: f64) -> f64 {
        if !is_positive(run_secs) {
            return 0.0;
        }
        let s = self.tr_at(run_secs);
        if s <= TINY {
            return f64::INFINITY;
        }
        self.integral(run_secs) / s
    }
}

/// A curve laid out for many questions of the same kind: each segment's
/// hazard, survival at its end and the integral before it precomputed, so
/// that [`Self::expected_time_with_restarts`] costs a short scan and two
/// exponentials instead of a logarithm per segment, three times over. The
/// answers are bit for bit [`TrCurve`]'s: the same operations on the same
/// numbers, in the same order (a test checks).
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedCurve {
    /// `(t0, s0, t1, hazard, survival at t1, ∫₀^t0 TR)` per segment.
    segments: Vec<(f64, f64, f64, f64, f64, f64)>,
    /// The hazard beyond the last point.
    tail_hazard: f64,
    /// ∫₀^T TR over every segment, T the last point.
    total: f64,
    /// (T, TR at T as the segments reach it): where the tail starts.
    last: (f64, f64),
}

impl PreparedCurve {
    pub fn new(curve: &TrCurve) -> PreparedCurve {
        let mut segments = Vec::with_capacity(curve.points.len());
        let mut total = 0.0;
        let mut last = (0.0, 1.0);
        for (t0, s0, t1, h) in curve.segments() {
            let end = s0 * (-h * (t1 - t0)).exp();
            segments.push((t0, s0, t1, h, end, total));
            total += segment_integral(s0, h, t1 - t0);
            last = (t1, end);
        }
        PreparedCurve {
            segments,
            tail_hazard: curve.tail_hazard(),
            total,
            last,
        }
    }

    /// [`TrCurve::tr_at`].
    pub fn tr_at(&self, secs: f64) -> f64 {
        if !is_positive(secs) {
            return 1.0;
        }
        for &(t0, s0, t1, h, _, _) in &self.segments {
            if secs <= t1 {
                return s0 * (-h * (secs - t0)).exp();
            }
        }
        if secs.is_infinite() {
            return if self.tail_hazard > 0.0 {
                0.0
            } else {
                self.last.1
            };
        }
        self.last.1 * (-self.tail_hazard * (secs - self.last.0)).exp()
    }

    /// [`TrCurve::integral`].
    pub fn integral(&self, secs: f64) -> f64 {
        if !is_positive(secs) {
            return 0.0;
        }
        for &(t0, s0, t1, h, _, before) in &self.segments {
            if secs <= t1 {
                return before + segment_integral(s0, h, secs - t0);
            }
        }
        self.total + segment_integral(self.last.1, self.tail_hazard, secs - self.last.0)
    }

    /// [`TrCurve::expected_time_with_restarts`].
    pub fn expected_time_with_restarts(&self, run_secs: f64) -> f64 {
        if !is_positive(run_secs) {
            return 0.0;
        }
        let s = self.tr_at(run_secs);
        if s <= TINY {
            return f64::INFINITY;
        }
        self.integral(run_secs) / s
    }
}

/// A curve's inverse CDF laid out for many draws: each segment's survival
/// at both ends precomputed, so that a draw costs one comparison per
/// segment and one logarithm (instead of an exponential per segment).
#[derive(Debug, Clone, PartialEq)]
pub struct FailureSampler {
    /// `(t0, s0, s1, hazard)` per segment, the last one open-ended.
    segments: Vec<(f64, f64, f64, f64)>,
}

impl FailureSampler {
    pub fn new(curve: &TrCurve) -> FailureSampler {
        let mut segments: Vec<(f64, f64, f64, f64)> = curve
            .segments()
            .map(|(t0, s0, t1, h)| (t0, s0, s0 * (-h * (t1 - t0)).exp(), h))
            .collect();
        if let Some(&(t0, _, s1, h)) = segments.last() {
            let t1 = curve.points.last().map_or(t0, |p| p.0);
            segments.push((t1, s1, 0.0, h));
        }
        FailureSampler { segments }
    }

    /// The same as [`TrCurve::failure_time_at`] for `u` in (0, 1].
    pub fn failure_time_at(&self, u: f64) -> Option<f64> {
        if !is_positive(u) {
            let n = self.segments.len();
            return (n >= 2).then(|| self.segments[n - 1].0);
        }
        let last = self.segments.len().saturating_sub(1);
        for (i, &(t0, s0, s1, h)) in self.segments.iter().enumerate() {
            if i == last {
                // The open tail: TR keeps falling at the last hazard.
                return (h > 0.0 && u < s0).then(|| t0 + (s0 / u).ln() / h);
            }
            if u >= s1 && u <= s0 {
                return Some(if h > 0.0 { t0 + (s0 / u).ln() / h } else { t0 });
            }
        }
        None
    }

    /// A failure time drawn from the curve; `None` where the host never fails.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<f64> {
        self.failure_time_at(rng.random::<f64>())
    }
}

/// The constant hazard that takes survival from `s0` to `s1` over `dt`.
fn hazard(s0: f64, s1: f64, dt: f64) -> f64 {
    if dt <= 0.0 || s0 <= TINY {
        return 0.0;
    }
    let h = (s0.max(TINY) / s1.max(TINY)).ln() / dt;
    if h.is_finite() {
        h.max(0.0)
    } else {
        0.0
    }
}

/// ∫₀^len s0·e^{−h t} dt.
fn segment_integral(s0: f64, h: f64, len: f64) -> f64 {
    if len <= 0.0 {
        return 0.0;
    }
    if h > 0.0 {
        if len.is_infinite() {
            s0 / h
        } else {
            s0 * (1.0 - (-h * len).exp()) / h
        }
    } else if s0 > 0.0 {
        s0 * len
    } else {
        0.0
    }
}

/// Young/Daly's checkpoint interval τ = sqrt(2·C·M) for a checkpoint cost C
/// and a mean time to failure M (both seconds). With M infinite (a host that
/// never fails) there is nothing to checkpoint against: `None`.
pub fn young_daly_interval(checkpoint_cost_secs: f64, mttf_secs: f64) -> Option<f64> {
    if !is_positive(checkpoint_cost_secs) || !is_positive(mttf_secs) || !mttf_secs.is_finite() {
        return None;
    }
    Some((2.0 * checkpoint_cost_secs * mttf_secs).sqrt())
}

/// Expected wall time of `run_secs` of work checkpointed every `interval`
/// seconds at `cost` seconds each, restarting from the last checkpoint after
/// a failure, under a constant hazard 1/M (the first-order model behind
/// Young/Daly): (run/τ)·M·(e^{(τ+C)/M} − 1).
pub fn expected_time_checkpointed(run_secs: f64, interval: f64, cost: f64, mttf_secs: f64) -> f64 {
    if !is_positive(run_secs) {
        return 0.0;
    }
    if !is_positive(interval) || !mttf_secs.is_finite() {
        return run_secs;
    }
    let blocks = run_secs / interval;
    blocks * mttf_secs * (((interval + cost) / mttf_secs).exp() - 1.0)
}

/// True for a positive number; false for zero, negatives and NaN.
fn is_positive(x: f64) -> bool {
    x > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn one_point_is_a_constant_hazard() {
        // TR(1 h) = e^-1: hazard 1/3600 s, so TR(2 h) = e^-2 and M = 3600 s.
        let c = TrCurve::exponential(3600.0);
        assert!(close(c.tr_at(7200.0), (-2.0f64).exp(), 1e-12));
        assert!(close(c.tr_at(1800.0), (-0.5f64).exp(), 1e-12));
        assert!(close(c.mttf(), 3600.0, 1e-12));
        // Restarts from zero: (e^{λr} − 1)/λ = 3600·(e − 1) ≈ 6185.9 s for r = 1 h.
        let e = c.expected_time_with_restarts(3600.0);
        assert!(close(e, 3600.0 * (1f64.exp() - 1.0), 1e-12), "{e}");
    }

    #[test]
    fn curves_are_clamped_sorted_and_monotone() {
        let c = TrCurve::new([(7200.0, 0.9), (3600.0, 0.8), (-1.0, 0.5), (10.0, f64::NAN)]);
        assert_eq!(c.points(), &[(3600.0, 0.8), (7200.0, 0.8)]);
        assert_eq!(c.tr_at(0.0), 1.0);
        // The flat last segment means a zero tail hazard: M is infinite.
        assert!(c.mttf().is_infinite());
        assert!(close(c.tr_at(1e9), 0.8, 1e-12));
        let never = TrCurve::never_fails();
        assert_eq!(never.tr_at(1e9), 1.0);
        assert_eq!(never.failure_time_at(0.3), None);
    }

    #[test]
    fn two_segments_integrate_and_invert() {
        // TR(1000) = 0.5, TR(2000) = 0.25: one hazard ln2/1000 throughout.
        let c = TrCurve::new([(1000.0, 0.5), (2000.0, 0.25)]);
        let h = std::f64::consts::LN_2 / 1000.0;
        assert!(close(c.integral(2000.0), (1.0 - 0.25) / h, 1e-9));
        assert!(close(c.mttf(), 1.0 / h, 1e-9));
        assert!(close(c.failure_time_at(0.5).unwrap(), 1000.0, 1e-9));
        assert!(close(c.failure_time_at(0.125).unwrap(), 3000.0, 1e-9));
        // Draws reproduce the curve: the share failing by 1000 s is near 0.5.
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 20_000;
        let early = (0..n)
            .filter(|_| c.sample_failure(&mut rng).is_some_and(|t| t <= 1000.0))
            .count();
        assert!((early as f64 / n as f64 - 0.5).abs() < 0.02);
    }

    #[test]
    fn a_prepared_curve_answers_bit_for_bit_like_the_curve() {
        let curves = [
            TrCurve::new([
                (1800.0, 0.95),
                (3600.0, 0.9),
                (14_400.0, 0.75),
                (43_200.0, 0.6),
                (86_400.0, 0.5),
            ]),
            TrCurve::new([(1000.0, 0.5), (2000.0, 0.5)]),
            TrCurve::new([(1.0, 1e-300)]),
            TrCurve::exponential(3600.0),
            TrCurve::never_fails(),
        ];
        for c in &curves {
            let p = PreparedCurve::new(c);
            let lengths = (0..=400).map(|k| k as f64 * 500.0).chain([
                -1.0,
                0.0,
                1e-9,
                1800.0,
                86_400.0,
                1e7,
                f64::INFINITY,
                f64::NAN,
            ]);
            for t in lengths {
                let same =
                    |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
                assert!(same(c.tr_at(t), p.tr_at(t)), "tr_at({t})");
                assert!(same(c.integral(t), p.integral(t)), "integral({t})");
                assert!(
                    same(
                        c.expected_time_with_restarts(t),
                        p.expected_time_with_restarts(t)
                    ),
                    "expected_time_with_restarts({t})"
                );
            }
        }
    }

    #[test]
    fn the_sampler_inverts_like_the_curve() {
        let curves = [
            TrCurve::new([
                (1800.0, 0.95),
                (3600.0, 0.9),
                (14_400.0, 0.75),
                (86_400.0, 0.5),
            ]),
            TrCurve::new([(1000.0, 0.5), (2000.0, 0.5)]),
            TrCurve::exponential(3600.0),
            TrCurve::never_fails(),
        ];
        for c in &curves {
            let s = FailureSampler::new(c);
            for k in 0..=1000 {
                let u = k as f64 / 1000.0;
                let (a, b) = (c.failure_time_at(u), s.failure_time_at(u));
                match (a, b) {
                    (Some(a), Some(b)) => assert!(close(a, b, 1e-9), "{u}: {a} vs {b}"),
                    _ => assert_eq!(a, b, "{u}"),
                }
            }
        }
    }

    #[test]
    fn young_daly_matches_hand_computation() {
        // C = 50 s, M = 10 000 s: τ = sqrt(2·50·10 000) = 1000 s.
        assert!(close(
            young_daly_interval(50.0, 10_000.0).unwrap(),
            1000.0,
            1e-12
        ));
        // M from a TR curve: TR(1 h) = e^-1 gives M = 3600, τ for C = 18 s is 360 s.
        let m = TrCurve::exponential(3600.0).mttf();
        assert!(close(young_daly_interval(18.0, m).unwrap(), 360.0, 1e-9));
        assert_eq!(young_daly_interval(10.0, f64::INFINITY), None);
        assert_eq!(young_daly_interval(0.0, 100.0), None);
        // Checkpointing at τ beats restarting from zero for a 4 h run, M = 1 h.
        let with = expected_time_checkpointed(14_400.0, 360.0, 18.0, 3600.0);
        let without = TrCurve::exponential(3600.0).expected_time_with_restarts(14_400.0);
        assert!(with < without / 10.0, "{with} vs {without}");
    }
}
