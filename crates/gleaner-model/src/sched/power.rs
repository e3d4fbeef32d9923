//! SDPN's processing slowdown (seed 004, section 2.1 and Eq. 5, 6): a
//! host's relative power P, its availability A, the effective power
//! Γ = P·A, the slowdown SP = 1/Γ, a job's SP as the largest over its
//! tasks, and the remaining-time updates of the simulation engine.
//!
//! Gleaner's jobs do not communicate, so SDPN's communication term
//! (T^c · SC) is left out: every formula here is the processing half.
//! Pure arithmetic; no clock, no I/O.

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
}
