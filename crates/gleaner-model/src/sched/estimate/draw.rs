//! The few random draws the estimate makes itself: exponential, gamma
//! and standard normal, from the caller's generator.

use rand::Rng;
use std::f64::consts::PI;

/// One exponential draw of rate `rate` (infinite for rate 0).
pub(super) fn exponential<R: Rng + ?Sized>(rate: f64, rng: &mut R) -> f64 {
    let e = -(1.0 - rng.random::<f64>()).ln();
    if rate > 0.0 {
        e / rate
    } else {
        f64::INFINITY
    }
}

/// One draw from Gamma(`shape`, rate 1) (Marsaglia and Tsang, 2000; for
/// shape < 1 boosted by U^{1/shape}).
pub(super) fn gamma<R: Rng + ?Sized>(shape: f64, rng: &mut R) -> f64 {
    if !(shape > 0.0 && shape.is_finite()) {
        return 0.0;
    }
    if shape < 1.0 {
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        return gamma(shape + 1.0, rng) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = standard_normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// One standard normal draw (Box-Muller).
pub(super) fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
}
