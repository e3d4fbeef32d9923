//! The built-in CPU benchmark behind a member's relative computing power P
//! (seed 004: Γ = P·A, with A the share of the CPU the owner leaves idle).
//!
//! A fixed amount of integer work (xorshift mixing and a small table walk,
//! the shape of compile and simulation inner loops) is timed on one thread a
//! few times; the best round counts, so a momentary owner burst does not
//! make a fast machine look slow. The score is rounds of work per second
//! scaled to an integer; only ratios between members mean anything.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Work units in one round (about 5–15 ms on a current desktop core).
const ROUND_UNITS: u32 = 1 << 20;
/// Rounds timed; the fastest counts.
const ROUNDS: u32 = 5;

/// One round of work; returns a value so the optimiser keeps it.
fn round(seed: u64) -> u64 {
    let mut table = [0u64; 256];
    let mut x = seed | 1;
    for i in 0..ROUND_UNITS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let slot = (x as usize ^ i as usize) & 255;
        table[slot] = table[slot].wrapping_add(x);
    }
    table.iter().fold(x, |a, &b| a.rotate_left(5) ^ b)
}

/// Runs the benchmark (tens of milliseconds on one core) and returns its score:
/// millions of work units per second, times 1000.
pub fn cpu_score() -> u64 {
    let mut best = Duration::MAX;
    for r in 0..ROUNDS {
        let start = Instant::now();
        black_box(round(black_box(u64::from(r) + 0x9E37_79B9)));
        best = best.min(start.elapsed());
    }
    score_for(best)
}

/// The score of a round that took `best`.
fn score_for(best: Duration) -> u64 {
    let nanos = best.as_nanos().max(1);
    // units per ns × 1e6 = million units per second × 1000.
    let score = u128::from(ROUND_UNITS) * 1_000_000 / nanos;
    u64::try_from(score).unwrap_or(u64::MAX).max(1)
}

/// Γ = P·A in thousandths: P = `own` / the pool's `reference` score
/// ([`crate::model::sched::power::reference_score`]; 1 at or above it),
/// A = 1 − owner load / 100.
pub fn effective_power_milli(own: u64, reference: u64, owner_load_percent: f64) -> u32 {
    let p = crate::model::sched::power::relative_power(own, reference);
    let a = (1.0 - owner_load_percent / 100.0).clamp(0.0, 1.0);
    (p * a * 1000.0).round().clamp(0.0, 1000.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faster_rounds_score_higher() {
        assert!(score_for(Duration::from_millis(5)) > score_for(Duration::from_millis(10)));
        assert_eq!(
            score_for(Duration::ZERO),
            u64::from(ROUND_UNITS) * 1_000_000
        );
        assert!(cpu_score() > 0);
    }

    #[test]
    fn effective_power_is_relative_power_times_idleness() {
        assert_eq!(effective_power_milli(500, 1000, 0.0), 500);
        assert_eq!(effective_power_milli(1000, 1000, 50.0), 500);
        assert_eq!(effective_power_milli(2000, 1000, 0.0), 1000);
        assert_eq!(effective_power_milli(1000, 1000, 100.0), 0);
        assert_eq!(effective_power_milli(0, 0, f64::NAN), 0);
    }
}
