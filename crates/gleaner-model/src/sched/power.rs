//! SDPN's processing slowdown (seed 004, section 2.1 and Eq. 5, 6): a
//! host's relative power P, its availability A, the effective power
//! Γ = P·A, the slowdown SP = 1/Γ, a job's SP as the largest over its
//! tasks, and the remaining-time updates of the simulation engine.
//!
//! Gleaner's jobs do not communicate, so SDPN's communication term
//! (T^c · SC) is left out: every formula here is the processing half.
//! Pure arithmetic; no clock, no I/O.
//!
//! P itself is a member's benchmark score over a *reference* score read off
//! the pool's claims ([`reference_score`]): an upper quantile that is never
//! the largest claim, so no single member, honest or lying, sets the scale
//! for the others (issue 30: one announced `u64::MAX` took every other
//! host's P to 0 when the reference was the maximum).

/// The availability of a host whose owner load is `load_pct` percent of its
/// CPU capacity (SDPN: "the percentage of CPU idleness"), in [0, 1].
/// A load outside [0, 100] (or NaN) is clamped: the trace reader already
/// refuses such rows, and this must not turn a bad number into a negative
/// speed.
pub fn availability_from_load(load_pct: f64) -> f64 {
    if load_pct.is_nan() {
        return 0.0;
    }
    (1.0 - load_pct / 100.0).clamp(0.0, 1.0)
}

/// Effective power Γ = P·A (SDPN Eq. 2), clamped to [0, 1].
pub fn effective_power(relative_power: f64, availability: f64) -> f64 {
    let g = relative_power * availability;
    if g.is_nan() {
        0.0
    } else {
        g.clamp(0.0, 1.0)
    }
}

/// The processing slowdown SP = 1/Γ of one host. A host with Γ = 0 cannot
/// run anything: its slowdown is infinite.
pub fn slowdown(gamma: f64) -> f64 {
    if gamma > 0.0 {
        1.0 / gamma
    } else {
        f64::INFINITY
    }
}

/// A job's slowdown (SDPN Eq. 3): the largest SP over the hosts its tasks
/// run on, since the job ends with its slowest task. An empty job has SP 1.
pub fn job_slowdown(gammas: &[f64]) -> f64 {
    gammas
        .iter()
        .map(|&g| slowdown(g))
        .fold(None, |acc: Option<f64>, sp| {
            Some(acc.map_or(sp, |a| a.max(sp)))
        })
        .unwrap_or(1.0)
}

/// SDPN Eq. 5 without communication: the elapsed time still needed by a job
/// with `remaining_dedicated_secs` of processing measured on a dedicated
/// reference host, at slowdown `sp`.
pub fn remaining_elapsed(remaining_dedicated_secs: f64, sp: f64) -> f64 {
    remaining_dedicated_secs * sp
}

/// SDPN Eq. 6: the dedicated processing time left after `elapsed_secs` of
/// wall time at slowdown `sp_before` (T^p_rem = T'^p_rem − T^p_Δt / SP'),
/// never below zero.
pub fn remaining_after(remaining_dedicated_secs: f64, elapsed_secs: f64, sp_before: f64) -> f64 {
    if !is_positive(sp_before) || sp_before.is_infinite() {
        return remaining_dedicated_secs.max(0.0);
    }
    (remaining_dedicated_secs - elapsed_secs / sp_before).max(0.0)
}

/// True for a positive number; false for zero, negatives and NaN.
fn is_positive(x: f64) -> bool {
    x > 0.0
}

/// The largest benchmark score a claim counts for. The built-in benchmark
/// scores a current desktop core at about 10^5 (millions of work units per
/// second × 1000); this leaves six orders of magnitude of headroom and keeps
/// every sum of claims far from overflow.
pub const MAX_SCORE_CLAIM: u64 = 100_000_000_000;

/// The quantile of the pool's claims that counts as "the best": a host at
/// or above it has P = 1.
pub const REFERENCE_QUANTILE: f64 = 0.75;

/// A claimed benchmark score clamped to the plausible range `1..=`
/// [`MAX_SCORE_CLAIM`].
pub fn clamp_score_claim(claim: u64) -> u64 {
    claim.clamp(1, MAX_SCORE_CLAIM)
}

/// The score P is measured against, from the scores the pool claims (the
/// caller's own included): each claim clamped by [`clamp_score_claim`], then
/// the [`REFERENCE_QUANTILE`] of them, but never the largest of two or more
/// claims. So one claim, however absurd, moves the reference by at most one
/// rank among the others: from one honest claim to its neighbour.
/// `None` without claims.
pub fn reference_score(claims: &[u64]) -> Option<u64> {
    let mut sorted: Vec<u64> = claims.iter().map(|&c| clamp_score_claim(c)).collect();
    sorted.sort_unstable();
    let n = sorted.len();
    let top = n.checked_sub(1)?;
    // ceil(q·n) − 1 is the q-quantile's index; n − 2 keeps the largest
    // claim out whenever there are two or more.
    let quantile = ((REFERENCE_QUANTILE * n as f64).ceil() as usize).saturating_sub(1);
    sorted.get(quantile.min(top.saturating_sub(1))).copied()
}

/// A member's relative power P in [0, 1]: its own (clamped) score over the
/// reference, 1 at or above it.
pub fn relative_power(own_score: u64, reference: u64) -> f64 {
    let own = clamp_score_claim(own_score) as f64;
    let reference = clamp_score_claim(reference) as f64;
    (own / reference).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn gamma_and_slowdown_follow_sdpn_eq_2_and_3() {
        // A host at half the best host's power with its owner using 20 %:
        // Γ = 0.5 · 0.8 = 0.4, SP = 2.5.
        let a = availability_from_load(20.0);
        assert!(close(a, 0.8));
        let g = effective_power(0.5, a);
        assert!(close(g, 0.4));
        assert!(close(slowdown(g), 2.5));
        // A job on that host and on a dedicated best host ends with the slower.
        assert!(close(job_slowdown(&[1.0, 0.4]), 2.5));
        assert!(close(job_slowdown(&[]), 1.0));
        assert_eq!(slowdown(0.0), f64::INFINITY);
        assert!(close(availability_from_load(150.0), 0.0));
        assert!(close(availability_from_load(-5.0), 1.0));
    }

    #[test]
    fn remaining_time_updates_follow_sdpn_eq_5_and_6() {
        // 1000 s of dedicated work at SP 2.5 needs 2500 s of wall time.
        assert!(close(remaining_elapsed(1000.0, 2.5), 2500.0));
        // After 500 s of wall time at SP 2.5, 200 s of work are done: 800 left.
        assert!(close(remaining_after(1000.0, 500.0, 2.5), 800.0));
        // Then at SP 4 the 800 s need 3200 s.
        assert!(close(remaining_elapsed(800.0, 4.0), 3200.0));
        // Never below zero; an infinite slowdown makes no progress.
        assert!(close(remaining_after(100.0, 1e6, 1.0), 0.0));
        assert!(close(remaining_after(100.0, 50.0, f64::INFINITY), 100.0));
    }

    #[test]
    fn the_reference_is_an_upper_quantile_never_the_largest_claim() {
        assert_eq!(reference_score(&[]), None);
        assert_eq!(reference_score(&[500]), Some(500));
        // Two claims: the smaller, whichever is absurd.
        assert_eq!(reference_score(&[500, u64::MAX]), Some(500));
        assert_eq!(
            reference_score(&[u64::MAX, u64::MAX]),
            Some(MAX_SCORE_CLAIM)
        );
        assert_eq!(reference_score(&[0, 0]), Some(1));
        // Eight claims: the 75th percentile (the 6th), not the top.
        let claims = [10, 80, 20, 70, 30, 60, 40, 50];
        assert_eq!(reference_score(&claims), Some(60));
        assert!(close(relative_power(30, 60), 0.5));
        assert!(close(relative_power(80, 60), 1.0));
        assert!(close(relative_power(0, 60), 1.0 / 60.0));
        assert!(close(relative_power(u64::MAX, 0), 1.0));
    }

    /// Issue 30, finding 1: an honest pool of hosts within ±10 % of each
    /// other, then one member announcing `u64::MAX` (or 0): no honest
    /// host's P moves by more than the spread between two neighbouring
    /// honest claims.
    #[test]
    fn one_absurd_claim_moves_another_hosts_power_by_at_most_one_rank() {
        for n in 1..=12u64 {
            let honest: Vec<u64> = (0..n).map(|i| 90_000 + i * 20_000 / n.max(2)).collect();
            let before = reference_score(&honest).unwrap();
            for lie in [u64::MAX, 0, 1, MAX_SCORE_CLAIM] {
                let mut with_liar = honest.clone();
                with_liar.push(lie);
                let after = reference_score(&with_liar).unwrap();
                for &own in &honest {
                    let moved = (relative_power(own, after) - relative_power(own, before)).abs();
                    assert!(
                        moved <= 0.12,
                        "n {n}, lie {lie}, own {own}: P moved by {moved}"
                    );
                    assert!(relative_power(own, after) >= 0.8, "n {n}, lie {lie}");
                }
            }
        }
    }
}
