//! The resource monitor's adaptive sampling period (seed paper 000, section
//! V.B): start at a short period, double it while no state change is seen,
//! and take random extra samples between the regular ones so that a change
//! hidden inside a long period shrinks it again.
//!
//! This module owns the policy only. It knows nothing about clocks, sleeping,
//! `/proc` or what a "state" is: the caller says whether the sample it just
//! took saw a change, and gets back how long to wait before the next one.
//! Randomness is passed in, so tests can script it.

use rand::Rng;
use std::time::Duration;

/// The knobs of the adaptive period. Defaults follow the paper (start at 1 s)
/// and the issue (cap at 8 s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeriodPolicy {
    /// The shortest period, used at start and after every change: it bounds
    /// both the detection delay and the monitor's overhead.
    pub min: Duration,
    /// The longest period: a stable host is still looked at this often.
    pub max: Duration,
    /// How many regular samples in a row must see no change before the period
    /// doubles (the paper's "threshold amount of time", counted in periods).
    pub stable_periods: u32,
    /// Chance, after each regular sample, of taking one extra sample at a random
    /// point before the next regular one.
    pub extra_sample_chance: f64,
}

impl Default for PeriodPolicy {
    fn default() -> Self {
        PeriodPolicy {
            min: Duration::from_secs(1),
            max: Duration::from_secs(8),
            stable_periods: 5,
            extra_sample_chance: 0.25,
        }
    }
}

/// Why a period policy cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PeriodPolicyError {
    #[error("the minimum sampling period must be longer than zero")]
    ZeroMin,
    #[error("the maximum sampling period ({max:?}) is shorter than the minimum ({min:?})")]
    MaxBelowMin { min: Duration, max: Duration },
    #[error("stable_periods must be at least 1")]
    ZeroStablePeriods,
    #[error("extra_sample_chance must be a probability between 0 and 1, got {0}")]
    ChanceOutOfRange(f64),
}

impl PeriodPolicy {
    /// Checks that the policy describes a usable period.
    pub fn validate(&self) -> Result<(), PeriodPolicyError> {
        if self.min.is_zero() {
            return Err(PeriodPolicyError::ZeroMin);
        }
        if self.max < self.min {
            return Err(PeriodPolicyError::MaxBelowMin {
                min: self.min,
                max: self.max,
            });
        }
        if self.stable_periods == 0 {
            return Err(PeriodPolicyError::ZeroStablePeriods);
        }
        if !(0.0..=1.0).contains(&self.extra_sample_chance) {
            return Err(PeriodPolicyError::ChanceOutOfRange(
                self.extra_sample_chance,
            ));
        }
        Ok(())
    }
}

/// Whether a sample is one of the regular, periodic ones or a random extra.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleKind {
    /// On the period's grid; only these count towards doubling the period.
    Regular,
    /// Drawn at random between two regular samples to catch hidden changes.
    Extra,
}

/// When to take the next sample and what kind it will be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextSample {
    /// How long to wait from the sample just taken.
    pub delay: Duration,
    /// What the next sample will be; pass it back to [`AdaptivePeriod::observe`].
    pub kind: SampleKind,
}

/// The adaptive period as a state machine fed one observation per sample.
///
/// Invariant: every delay it returns lies in `[min, max]`, so the monitor never
/// samples faster than `min` (its overhead ceiling) nor slower than `max`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptivePeriod {
    policy: PeriodPolicy,
    /// The current regular period.
    period: Duration,
    /// Regular samples in a row at the current period that saw no change.
    stable: u32,
    /// When an extra sample is pending: the time left from it to the regular one.
    after_extra: Option<Duration>,
}

impl AdaptivePeriod {
    /// Starts at the minimum period. An invalid policy is repaired rather than
    /// rejected (zero min becomes 1 ms, max is raised to min, the chance is
    /// clamped) so that a bad config cannot make the monitor spin; call
    /// [`PeriodPolicy::validate`] first to report it.
    pub fn new(policy: PeriodPolicy) -> Self {
        let min = policy.min.max(Duration::from_millis(1));
        let chance = if policy.extra_sample_chance.is_nan() {
            0.0
        } else {
            policy.extra_sample_chance.clamp(0.0, 1.0)
        };
        let policy = PeriodPolicy {
            min,
            max: policy.max.max(min),
            stable_periods: policy.stable_periods.max(1),
            extra_sample_chance: chance,
        };
        AdaptivePeriod {
            policy,
            period: min,
            stable: 0,
            after_extra: None,
        }
    }

    /// The current regular period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The (repaired) policy in force.
    pub fn policy(&self) -> &PeriodPolicy {
        &self.policy
    }

    /// Records the sample just taken — of kind `kind`, which `changed` the
    /// observed state or not — and says when to take the next one.
    pub fn observe(&mut self, kind: SampleKind, changed: bool, rng: &mut impl Rng) -> NextSample {
        if changed {
            // Any change, seen by a regular or an extra sample, means the host
            // is moving: look closely again.
            self.period = self.policy.min;
            self.stable = 0;
            self.after_extra = None;
            return self.schedule(rng);
        }
        match (kind, self.after_extra.take()) {
            (SampleKind::Extra, Some(rest)) => NextSample {
                delay: rest,
                kind: SampleKind::Regular,
            },
            // An extra sample nobody scheduled is treated as a fresh start of the period.
            (SampleKind::Extra, None) => self.schedule(rng),
            (SampleKind::Regular, _) => {
                self.stable = self.stable.saturating_add(1);
                if self.stable >= self.policy.stable_periods && self.period < self.policy.max {
                    self.period = self.period.saturating_mul(2).min(self.policy.max);
                    self.stable = 0;
                }
                self.schedule(rng)
            }
        }
    }

    /// Plans the next period from now: either one regular sample after
    /// `period`, or an extra sample inside it followed by the regular one.
    fn schedule(&mut self, rng: &mut impl Rng) -> NextSample {
        let min = self.policy.min;
        // An extra sample must leave at least `min` on both sides, so it only
        // fits once the period is twice the minimum; at the minimum period the
        // regular samples are already as dense as the overhead allows.
        let room = self.period.saturating_sub(min.saturating_mul(2));
        let fits = self.period >= min.saturating_mul(2);
        if fits && rng.random_bool(self.policy.extra_sample_chance) {
            let offset = min + room.mul_f64(rng.random::<f64>());
            self.after_extra = Some(self.period.saturating_sub(offset));
            NextSample {
                delay: offset,
                kind: SampleKind::Extra,
            }
        } else {
            NextSample {
                delay: self.period,
                kind: SampleKind::Regular,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn policy(chance: f64) -> PeriodPolicy {
        PeriodPolicy {
            extra_sample_chance: chance,
            ..PeriodPolicy::default()
        }
    }

    /// Feeds `n` unchanged samples, following the kinds the machine asks for,
    /// and returns the delays it produced.
    fn run_stable(p: &mut AdaptivePeriod, rng: &mut ChaCha8Rng, n: usize) -> Vec<NextSample> {
        let mut kind = SampleKind::Regular;
        (0..n)
            .map(|_| {
                let next = p.observe(kind, false, rng);
                kind = next.kind;
                next
            })
            .collect()
    }

    #[test]
    fn stable_host_doubles_the_period_up_to_the_cap() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut p = AdaptivePeriod::new(policy(0.0));
        assert_eq!(p.period(), secs(1));
        let delays: Vec<u64> = run_stable(&mut p, &mut rng, 25)
            .iter()
            .map(|n| n.delay.as_secs())
            .collect();
        // Five stable periods at each level before doubling: 1,1,1,1 then 2 ...
        assert_eq!(
            delays,
            [1, 1, 1, 1, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8]
        );
        assert_eq!(p.period(), secs(8));
    }

    #[test]
    fn cap_that_is_not_a_power_of_two_is_reached_exactly() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut p = AdaptivePeriod::new(PeriodPolicy {
            max: secs(6),
            stable_periods: 1,
            extra_sample_chance: 0.0,
            ..PeriodPolicy::default()
        });
        let delays: Vec<u64> = run_stable(&mut p, &mut rng, 5)
            .iter()
            .map(|n| n.delay.as_secs())
            .collect();
        assert_eq!(delays, [2, 4, 6, 6, 6]);
    }

    #[test]
    fn a_change_on_a_regular_sample_resets_to_min() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut p = AdaptivePeriod::new(policy(0.0));
        run_stable(&mut p, &mut rng, 30);
        assert_eq!(p.period(), secs(8));
        let next = p.observe(SampleKind::Regular, true, &mut rng);
        assert_eq!(next.delay, secs(1));
        assert_eq!(p.period(), secs(1));
        // And growth starts over from scratch.
        let again = run_stable(&mut p, &mut rng, 4);
        assert!(again.iter().all(|n| n.delay == secs(1)));
    }

    #[test]
    fn extra_sample_splits_the_period_and_a_change_there_shrinks_it() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut p = AdaptivePeriod::new(policy(1.0));
        // At the minimum period there is no room for an extra sample.
        let first = p.observe(SampleKind::Regular, false, &mut rng);
        assert_eq!(first.kind, SampleKind::Regular);
        let mut next = first;
        while p.period() < secs(8) {
            next = p.observe(next.kind, false, &mut rng);
        }
        // Now every regular sample is followed by an extra one inside the period.
        if next.kind == SampleKind::Extra {
            let rest = p.observe(SampleKind::Extra, false, &mut rng);
            assert_eq!(rest.kind, SampleKind::Regular);
        }
        let extra = p.observe(SampleKind::Regular, false, &mut rng);
        assert_eq!(extra.kind, SampleKind::Extra);
        assert!(extra.delay >= secs(1) && extra.delay <= secs(7));
        let rest = p.observe(SampleKind::Extra, false, &mut rng);
        assert_eq!(rest.kind, SampleKind::Regular);
        assert_eq!(extra.delay + rest.delay, secs(8));
        // An extra sample that sees a change brings the period back to the minimum.
        let extra = p.observe(SampleKind::Regular, false, &mut rng);
        assert_eq!(extra.kind, SampleKind::Extra);
        let after = p.observe(SampleKind::Extra, true, &mut rng);
        assert_eq!(after.delay, secs(1));
        assert_eq!(p.period(), secs(1));
    }

    #[test]
    fn extra_samples_come_at_about_the_configured_rate() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut p = AdaptivePeriod::new(policy(0.25));
        let plan = run_stable(&mut p, &mut rng, 4000);
        let regular = plan
            .iter()
            .filter(|n| n.kind == SampleKind::Regular)
            .count();
        let extra = plan.len() - regular;
        let rate = extra as f64 / regular as f64;
        assert!((0.2..0.3).contains(&rate), "extra/regular = {rate}");
    }

    #[test]
    fn invalid_policies_are_reported_and_repaired() {
        let zero = PeriodPolicy {
            min: Duration::ZERO,
            ..PeriodPolicy::default()
        };
        assert_eq!(zero.validate(), Err(PeriodPolicyError::ZeroMin));
        assert!(AdaptivePeriod::new(zero).period() > Duration::ZERO);
        let inverted = PeriodPolicy {
            max: Duration::from_millis(500),
            ..PeriodPolicy::default()
        };
        assert!(inverted.validate().is_err());
        assert_eq!(AdaptivePeriod::new(inverted).policy().max, secs(1));
        let nan = policy(f64::NAN);
        assert!(nan.validate().is_err());
        assert_eq!(AdaptivePeriod::new(nan).policy().extra_sample_chance, 0.0);
        assert!(PeriodPolicy::default().validate().is_ok());
    }

    proptest! {
        #[test]
        fn delays_stay_within_bounds_and_changes_reset(
            min_ms in 1u64..3_000,
            max_factor in 1u64..20,
            stable_periods in 1u32..6,
            chance in 0.0f64..=1.0,
            seed: u64,
            changes in proptest::collection::vec(proptest::bool::weighted(0.1), 1..300),
        ) {
            let min = Duration::from_millis(min_ms);
            let max = Duration::from_millis(min_ms * max_factor + min_ms / 3);
            let mut p = AdaptivePeriod::new(PeriodPolicy { min, max, stable_periods, extra_sample_chance: chance });
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut kind = SampleKind::Regular;
            for changed in changes {
                let before = p.period();
                let next = p.observe(kind, changed, &mut rng);
                prop_assert!(next.delay >= min && next.delay <= max, "{:?} outside [{:?}, {:?}]", next.delay, min, max);
                prop_assert!(p.period() >= min && p.period() <= max);
                if changed {
                    prop_assert_eq!(p.period(), min);
                    prop_assert_eq!(next.delay, min);
                } else {
                    // Without a change the period never shrinks.
                    prop_assert!(p.period() >= before);
                }
                kind = next.kind;
            }
        }
    }
}
