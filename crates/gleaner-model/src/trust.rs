//! Adaptive replication, the BOINC way: a host earns trust by a run of
//! results that other hosts confirmed, and a trusted host's results are
//! checked only now and then.
//!
//! Pure arithmetic, shared by the consumer's queue and the overhead
//! measurement (`examples/trust_overhead.rs`). docs/trust.md says why the
//! numbers are what they are.

/// Most copies of one task `--replicas K` may grow to when copies
/// disagree, whatever K.
pub const MAX_COPIES: u32 = 9;

/// Most copies a task with `replicas` copies and quorum `quorum` may run
/// before it fails with "no quorum": `max(K + 2, 2Q − 1)`, at most
/// [`MAX_COPIES`], never fewer than K. The node (`batch::verify`) and the
/// simulator (`sched::sim::verify`) both use it.
pub fn max_copies(replicas: u32, quorum: u32) -> u32 {
    (replicas + 2)
        .max(2 * quorum.saturating_sub(1) + 1)
        .min(MAX_COPIES)
        .max(replicas)
}

/// What a consumer remembers of one host: results checked against other
/// hosts' and found valid or invalid, and the current run of valid ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostTrack {
    pub valid: u64,
    pub invalid: u64,
    /// Consecutive valid results since the last invalid one.
    pub streak: u32,
}

impl HostTrack {
    /// Counts one checked result: an invalid one resets the streak.
    pub fn record(&mut self, valid: bool) {
        if valid {
            self.valid += 1;
            self.streak = self.streak.saturating_add(1);
        } else {
            self.invalid += 1;
            self.streak = 0;
        }
    }
}

/// The adaptive rule: untrusted hosts' tasks run on two hosts (quorum 2);
/// a host with at least `trust_after` consecutive valid results runs its
/// tasks alone, each spot-checked (a second copy elsewhere) with a
/// probability that falls with the square of its streak down to a floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveRule {
    /// N: consecutive valid results before a host runs single copies.
    pub trust_after: u32,
    /// Spot-check probability at a streak of exactly N.
    pub check_at_trust: f64,
    /// Spot checks never get rarer than this.
    pub check_floor: f64,
}

impl Default for AdaptiveRule {
    fn default() -> Self {
        AdaptiveRule {
            trust_after: 10,
            check_at_trust: 0.5,
            check_floor: 0.05,
        }
    }
}

impl AdaptiveRule {
    /// Whether a host with this streak runs single copies.
    pub fn trusted(&self, streak: u32) -> bool {
        streak >= self.trust_after.max(1)
    }

    /// The chance that a task given to a host with this streak also runs
    /// on a second host: 1 until it is trusted, then
    /// `check_at_trust · (N / streak)²`, never below the floor. The square
    /// brings a newly trusted host to the floor in a few dozen checked
    /// results rather than hundreds: the floor is what bounds how long a
    /// host that turns bad goes unseen, and the climb to it is paid by
    /// honest hosts (docs/trust.md).
    pub fn check_probability(&self, streak: u32) -> f64 {
        if !self.trusted(streak) {
            return 1.0;
        }
        let ratio = f64::from(self.trust_after.max(1)) / f64::from(streak);
        (self.check_at_trust * ratio * ratio).clamp(self.check_floor, 1.0)
    }

    /// Copies (1 or 2) of a task whose first copy goes to a host with this
    /// streak, for a uniform draw in [0, 1).
    pub fn copies(&self, streak: u32, draw: f64) -> u32 {
        if draw < self.check_probability(streak) {
            2
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_result_resets_the_streak_but_not_the_counts() {
        let mut t = HostTrack::default();
        for _ in 0..5 {
            t.record(true);
        }
        t.record(false);
        assert_eq!((t.valid, t.invalid, t.streak), (5, 1, 0));
        t.record(true);
        assert_eq!(t.streak, 1);
    }

    #[test]
    fn the_copy_bound_grows_with_k_and_q_up_to_nine() {
        assert_eq!(max_copies(2, 2), 4);
        assert_eq!(max_copies(3, 2), 5);
        assert_eq!(max_copies(5, 5), 9);
        assert_eq!(max_copies(9, 1), 9);
    }

    #[test]
    fn untrusted_hosts_always_get_two_copies() {
        let rule = AdaptiveRule::default();
        for streak in 0..rule.trust_after {
            assert_eq!(rule.check_probability(streak), 1.0);
            assert_eq!(rule.copies(streak, 0.999), 2);
        }
    }

    #[test]
    fn spot_checks_fall_with_the_streak_to_the_floor() {
        let rule = AdaptiveRule::default();
        let mut last = 1.0;
        for streak in rule.trust_after..1000 {
            let p = rule.check_probability(streak);
            assert!(p <= last && p >= rule.check_floor, "streak {streak}: {p}");
            last = p;
        }
        assert_eq!(rule.check_probability(rule.trust_after), 0.5);
        // Hand-computed: 0.5 · (10 / 20)² = 0.125; the floor from
        // 10 · √10 ≈ 31.6 on.
        assert!((rule.check_probability(20) - 0.125).abs() < 1e-12);
        assert!(rule.check_probability(31) > rule.check_floor);
        assert_eq!(rule.check_probability(32), rule.check_floor);
        assert_eq!(rule.check_probability(10_000), rule.check_floor);
        assert_eq!(rule.copies(10_000, 0.04), 2);
        assert_eq!(rule.copies(10_000, 0.06), 1);
    }
}
