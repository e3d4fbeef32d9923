//! Deadlines: the chance that a task finishes by a point in time, for a
//! copy already running and for a fresh copy on another host, so the
//! consumer can start a second copy of a task whose chance has fallen
//! (the first result wins).
//!
//! A task's wall time on a host is log-normal around its expected run time
//! (the runtime estimate × SP), with the estimate's spread `sigma_log`; a
//! running copy is conditioned on having run `elapsed` seconds without
//! ending (a copy past its expected time grows less and less likely to end
//! soon). It must also not be killed on the way: TR of the host over the
//! wall time left. Pure code.

/// The chance that a copy that has run `elapsed` seconds without ending
/// ends within `time_left` more, and is not hit by a failure meanwhile.
///
/// `expected_secs` is the copy's expected wall time on its host (median of
/// the log-normal), `sigma_log` its spread, `tr_over` the host's TR for a
/// window of the given seconds.
pub fn p_running_copy_in_time(
    expected_secs: f64,
    sigma_log: f64,
    elapsed: f64,
    time_left: f64,
    tr_over: impl Fn(f64) -> f64,
) -> f64 {
    // NaN fails every comparison, so it lands here too.
    let usable = |x: f64| x.is_finite() && x > 0.0;
    if !usable(time_left) || !usable(expected_secs) {
        return 0.0;
    }
    let elapsed = if elapsed.is_finite() {
        elapsed.max(0.0)
    } else {
        0.0
    };
    let sigma = if sigma_log.is_finite() {
        sigma_log.max(MIN_SIGMA)
    } else {
        MIN_SIGMA
    };
    let survived = lognormal_sf(elapsed, expected_secs, sigma);
    let by_deadline = lognormal_cdf(elapsed + time_left, expected_secs, sigma);
    let before = 1.0 - survived;
    let p_end = if survived <= 1e-300 {
        // Far past every plausible end: the model has nothing to say but
        // that it may end any moment or never; count it as unlikely.
        0.0
    } else {
        ((by_deadline - before) / survived).clamp(0.0, 1.0)
    };
    // The wall time it still needs, as the model expects it (its median
    // given it has not ended), bounded by the time left.
    let remaining =
        (conditional_median(elapsed, expected_secs, sigma) - elapsed).clamp(0.0, time_left);
    (p_end * tr_over(remaining).clamp(0.0, 1.0)).clamp(0.0, 1.0)
}

/// The chance that a fresh copy, expected to take `expected_secs` on its
/// host, ends within `time_left` and is not hit by a failure meanwhile.
pub fn p_fresh_copy_in_time(
    expected_secs: f64,
    sigma_log: f64,
    time_left: f64,
    tr_over: impl Fn(f64) -> f64,
) -> f64 {
    p_running_copy_in_time(expected_secs, sigma_log, 0.0, time_left, tr_over)
}

/// Least spread used: a declared runtime is never exact.
pub const MIN_SIGMA: f64 = 0.05;

/// The median of a log-normal(median `m`, `sigma`) given it exceeds `t`.
fn conditional_median(t: f64, m: f64, sigma: f64) -> f64 {
    if t <= 0.0 {
        return m;
    }
    // Solve SF(x) = SF(t) / 2 for x: z_x = Φ⁻¹(1 − SF(t)/2).
    let target = lognormal_sf(t, m, sigma) / 2.0;
    if target <= 0.0 {
        return t;
    }
    m * (sigma * inverse_normal_sf(target)).exp()
}

fn lognormal_cdf(x: f64, median: f64, sigma: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    normal_cdf((x / median).ln() / sigma)
}

fn lognormal_sf(x: f64, median: f64, sigma: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    normal_sf((x / median).ln() / sigma)
}

/// Φ(z).
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// 1 − Φ(z), accurate in the upper tail.
pub fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// z with 1 − Φ(z) = p, by bisection on `normal_sf` (monotone; 100 steps
/// reach f64 resolution on [−40, 40]).
fn inverse_normal_sf(p: f64) -> f64 {
    let (mut lo, mut hi) = (-40.0f64, 40.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if normal_sf(mid) > p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The complementary error function, with fractional error below 1.2e-7
/// everywhere (Numerical Recipes' Chebyshev fit, `erfcc`).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let ans = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        ans
    } else {
        2.0 - ans
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_tabulated_values() {
        // Abramowitz & Stegun, table 7.1.
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122),
            (1.0, 0.157_299_207),
            (2.0, 0.004_677_735),
        ] {
            assert!((erfc(x) - want).abs() < 2e-7 * want.max(1e-3), "erfc({x})");
            assert!((erfc(-x) - (2.0 - want)).abs() < 2e-7, "erfc(-{x})");
        }
        assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
    }

    #[test]
    fn a_fresh_copy_with_time_to_spare_is_likely_and_a_tight_one_is_not() {
        let never = |_: f64| 1.0;
        // Median 100 s, sigma 0.5: P(T <= 100) = 1/2, P(T <= 100 e) = Φ(2).
        assert!((p_fresh_copy_in_time(100.0, 0.5, 100.0, never) - 0.5).abs() < 1e-6);
        let e = std::f64::consts::E;
        assert!(
            (p_fresh_copy_in_time(100.0, 0.5, 100.0 * e, never) - normal_cdf(2.0)).abs() < 1e-6
        );
        // Failures multiply in: TR over the wall time it needs (its median).
        let half = |_: f64| 0.5;
        assert!((p_fresh_copy_in_time(100.0, 0.5, 1e9, half) - 0.5).abs() < 1e-6);
        assert_eq!(p_fresh_copy_in_time(100.0, 0.5, 0.0, never), 0.0);
    }

    #[test]
    fn a_copy_past_its_expected_time_loses_its_chance_as_it_runs_on() {
        let never = |_: f64| 1.0;
        // Conditioned: P(T <= 200 | T > 100) for median 100, sigma 1
        // = (Φ(ln 2) − 1/2) / (1/2).
        let want = (normal_cdf(2f64.ln()) - 0.5) / 0.5;
        let got = p_running_copy_in_time(100.0, 1.0, 100.0, 100.0, never);
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        // Past its expected time, the same time left means less and less
        // as it overruns (before it, the log-normal's hazard still rises).
        let chances: Vec<f64> = [100.0, 300.0, 1000.0, 3000.0]
            .iter()
            .map(|&e| p_running_copy_in_time(100.0, 1.0, e, 60.0, never))
            .collect();
        assert!(chances.windows(2).all(|w| w[0] > w[1]), "{chances:?}");
        // Hostile numbers give a probability, never NaN.
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let p = p_running_copy_in_time(bad, bad, bad, bad, |_| f64::NAN);
            assert!((0.0..=1.0).contains(&p), "{p}");
        }
    }
}
