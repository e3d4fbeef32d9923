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
/// hosts' and found valid or invalid, the current run of valid ones, and
/// how its attempts ended (in every verify mode): landed, failed on the
/// host, lost by the host, and the failures its TR claims led us to expect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostTrack {
    pub valid: u64,
    pub invalid: u64,
    /// Consecutive valid results since the last invalid one.
    pub streak: u32,
    /// Attempts whose results landed here.
    pub landed: u64,
    /// Attempts the host ended without a result (killed, gone, not started).
    pub failed: u64,
    /// Jobs it accepted and then said it never knew, or never reported an
    /// end of: a host must keep what it took.
    pub forgotten: u64,
    /// Of `failed`, those whose TR it had claimed: the count its claims are
    /// held to.
    pub failed_with_claim: u64,
    /// Floods: attempts during which it sent more job events than an
    /// honest host would (the consumer dropped the excess), and times it went
    /// past one of the node's budgets per peer in any role (requests,
    /// summaries, data streams: cut off; reads of offered files).
    pub floods: u64,
    /// Σ (1 − TR) over the attempts whose TR it claimed, in millionths: the
    /// failures its claims said to expect.
    pub expected_failures_micro: u64,
    /// Σ TR·(1 − TR) over the same attempts, millionths: the variance of
    /// that count.
    pub variance_micro: u64,
    /// Attempts whose TR it claimed (landed or failed): the forecasts its
    /// scores below are over.
    pub claims: u64,
    /// Σ (y − TR)² over those attempts, millionths, y = 1 when the attempt
    /// landed: its forecasts' Brier score times `claims`.
    pub brier_micro: u64,
    /// Σ −ln(TR if it landed, else 1 − TR) over the same attempts,
    /// millionths, each forecast held inside [[`LOG_FLOOR`], 1 −
    /// [`LOG_FLOOR`]] first: its log score times `claims`.
    pub log_loss_micro: u64,
    /// Its reliability curve: the same claims in [`CLAIM_BINS`] bins of
    /// claimed TR ([0, 0.2), [0.2, 0.4), … [0.8, 1]), each with how many
    /// landed, so a host's 0.95s can be read against the share of them
    /// that finished.
    pub curve: [ClaimBin; CLAIM_BINS],
}

/// Bins of the reliability curve: claimed TR in steps of 1 / `CLAIM_BINS`.
pub const CLAIM_BINS: usize = 5;

/// One bin of a host's reliability curve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimBin {
    /// Claims that fell in the bin.
    pub claims: u64,
    /// Of those, the attempts that landed.
    pub landed: u64,
    /// Σ claimed TR over them, millionths (for the bin's mean claim).
    pub claimed_micro: u64,
}

impl ClaimBin {
    /// The bin a claimed TR (already held inside [0, 1]) falls in; 1.0 is
    /// in the last.
    pub fn index(tr: f64) -> usize {
        ((tr * CLAIM_BINS as f64).floor().max(0.0) as usize).min(CLAIM_BINS - 1)
    }

    /// The claimed TRs bin `i` holds: [from, to).
    pub fn bounds(i: usize) -> (f64, f64) {
        let n = CLAIM_BINS as f64;
        (i as f64 / n, (i + 1) as f64 / n)
    }

    /// Mean claimed TR in the bin; `None` when empty.
    pub fn mean_claim(&self) -> Option<f64> {
        (self.claims > 0).then(|| self.claimed_micro as f64 / 1e6 / self.claims as f64)
    }

    /// Share of the bin's attempts that landed; `None` when empty.
    pub fn landed_share(&self) -> Option<f64> {
        (self.claims > 0).then(|| self.landed as f64 / self.claims as f64)
    }
}

/// The log score holds a claimed TR this far from 0 and 1, so one
/// confident miss costs at most ln(1000) ≈ 6.9 rather than infinity.
pub const LOG_FLOOR: f64 = 1e-3;

/// Attempts the placement discount assumes at the claimed rate before any
/// are seen: a host's first failures move its discount little, twenty
/// attempts at half its claim bring it most of the way down.
pub const DISCOUNT_PSEUDO_ATTEMPTS: f64 = 5.0;

/// How one attempt on a host ended, as its record counts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Its results landed; `claimed_tr` is the TR the host answered for the
    /// attempt's window, when known.
    Landed { claimed_tr: Option<f64> },
    /// The host ended it without a result (killed, gone, not started).
    Failed { claimed_tr: Option<f64> },
    /// The host broke its word.
    Offence(Offence),
}

/// What a host did wrong in one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offence {
    /// An output that does not match the hash the host reported, or a fetch
    /// the host answered against the protocol: an invalid result.
    WrongOutput,
    /// The host said it never knew a job it had accepted, or reported no
    /// end within the job's limit.
    Forgot,
    /// The host sent job events past the consumer's budget for one attempt,
    /// or the peer went past one of the node's budgets per peer
    /// (`budget::Overrun`).
    Flood,
}

/// Offences after which a host is excluded from placement, unless it has
/// landed at least [`CLEAN_PER_OFFENCE`] results per offence.
pub const EXCLUDE_AFTER_OFFENCES: u64 = 3;

/// Landed results that outweigh one offence for exclusion (not for
/// demotion: any offence demotes).
pub const CLEAN_PER_OFFENCE: u64 = 10;

/// Where a host's record puts it in placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// No offence: placed by the policy alone.
    Clean,
    /// At least one offence: placed behind every clean host.
    Demoted,
    /// [`EXCLUDE_AFTER_OFFENCES`] offences not outweighed by landed
    /// results: given no work.
    Excluded,
}

impl Standing {
    pub fn label(self) -> &'static str {
        match self {
            Standing::Clean => "clean",
            Standing::Demoted => "demoted",
            Standing::Excluded => "excluded",
        }
    }
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

    /// Counts how one attempt ended.
    pub fn apply(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Landed { claimed_tr } => {
                self.landed = self.landed.saturating_add(1);
                self.expect(claimed_tr, true);
            }
            Outcome::Failed { claimed_tr } => {
                self.failed = self.failed.saturating_add(1);
                if claimed_tr.is_some() {
                    self.failed_with_claim = self.failed_with_claim.saturating_add(1);
                }
                self.expect(claimed_tr, false);
            }
            Outcome::Offence(Offence::WrongOutput) => self.record(false),
            Outcome::Offence(Offence::Forgot) => self.forgotten = self.forgotten.saturating_add(1),
            Outcome::Offence(Offence::Flood) => self.floods = self.floods.saturating_add(1),
        }
    }

    /// Adds one claimed TR to the failures to expect and scores it against
    /// what happened (`landed`). A claim outside [0, 1] or not a number
    /// counts as the boldest one, TR 1: a host that sends nonsense is held
    /// to the strictest reading of it.
    fn expect(&mut self, claimed_tr: Option<f64>, landed: bool) {
        let Some(tr) = claimed_tr else { return };
        let tr = if (0.0..=1.0).contains(&tr) { tr } else { 1.0 };
        let micro = |x: f64| (x * 1e6).round() as u64;
        self.expected_failures_micro = self.expected_failures_micro.saturating_add(micro(1.0 - tr));
        self.variance_micro = self.variance_micro.saturating_add(micro(tr * (1.0 - tr)));
        let y = if landed { 1.0 } else { 0.0 };
        let held = tr.clamp(LOG_FLOOR, 1.0 - LOG_FLOOR);
        let said = if landed { held } else { 1.0 - held };
        self.claims = self.claims.saturating_add(1);
        self.brier_micro = self.brier_micro.saturating_add(micro((y - tr) * (y - tr)));
        self.log_loss_micro = self.log_loss_micro.saturating_add(micro(-said.ln()));
        let bin = &mut self.curve[ClaimBin::index(tr)];
        bin.claims = bin.claims.saturating_add(1);
        bin.landed = bin.landed.saturating_add(u64::from(landed));
        bin.claimed_micro = bin.claimed_micro.saturating_add(micro(tr));
    }

    /// Mean Brier score of its claimed TRs (0 best, 1 worst); `None`
    /// before its first claimed attempt.
    pub fn brier(&self) -> Option<f64> {
        (self.claims > 0).then(|| self.brier_micro as f64 / 1e6 / self.claims as f64)
    }

    /// Mean log score (negative log likelihood, nats) of its claimed TRs.
    pub fn log_score(&self) -> Option<f64> {
        (self.claims > 0).then(|| self.log_loss_micro as f64 / 1e6 / self.claims as f64)
    }

    /// What placement multiplies its claimed TR by: the attempts it landed
    /// over those its claims promised, each side given
    /// [`DISCOUNT_PSEUDO_ATTEMPTS`] at the claimed rate, at most 1. A host
    /// that claims 1.0 and lands half ranks, after a few dozen attempts,
    /// as the 0.5 it is; a host whose claims hold keeps 1; claiming less
    /// than it lands gains nothing (the discount never rises above 1, so a
    /// modest claim is never a trick to climb).
    pub fn claim_discount(&self) -> f64 {
        if self.claims == 0 {
            return 1.0;
        }
        let landed = self.claims.saturating_sub(self.failed_with_claim) as f64;
        let promised = (self.claims as f64 - self.expected_failures_micro as f64 / 1e6).max(0.0);
        ((landed + DISCOUNT_PSEUDO_ATTEMPTS) / (promised + DISCOUNT_PSEUDO_ATTEMPTS)).min(1.0)
    }

    /// Failures of attempts whose TR it claimed beyond what the claims
    /// allow: more than the expected
    /// count plus two standard deviations plus one (so that a single
    /// failure after a claim of TR 1 is bad luck, a second one a lie).
    /// Every further failure counts one more.
    pub fn tr_overclaims(&self) -> u64 {
        let expected = self.expected_failures_micro as f64 / 1e6;
        let sd = (self.variance_micro as f64 / 1e6).sqrt();
        let allowed = (expected + 2.0 * sd + 1.0).floor() as u64;
        self.failed_with_claim.saturating_sub(allowed)
    }

    /// Invalid results, lost jobs, floods and failures its TR claims
    /// contradict.
    pub fn offences(&self) -> u64 {
        self.invalid
            .saturating_add(self.forgotten)
            .saturating_add(self.floods)
            .saturating_add(self.tr_overclaims())
    }

    /// Its place: clean, demoted by any offence, excluded after
    /// [`EXCLUDE_AFTER_OFFENCES`] not outweighed by landed results.
    pub fn standing(&self) -> Standing {
        let offences = self.offences();
        if offences == 0 {
            Standing::Clean
        } else if offences >= EXCLUDE_AFTER_OFFENCES
            && self.landed < offences.saturating_mul(CLEAN_PER_OFFENCE)
        {
            Standing::Excluded
        } else {
            Standing::Demoted
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
    fn a_liar_is_demoted_at_its_first_offence_and_excluded_at_the_third() {
        let mut t = HostTrack::default();
        assert_eq!(t.standing(), Standing::Clean);
        t.apply(Outcome::Offence(Offence::WrongOutput));
        assert_eq!((t.invalid, t.standing()), (1, Standing::Demoted));
        t.apply(Outcome::Offence(Offence::Forgot));
        assert_eq!(t.standing(), Standing::Demoted);
        t.apply(Outcome::Offence(Offence::WrongOutput));
        assert_eq!((t.offences(), t.standing()), (3, Standing::Excluded));
        // A long clean record outweighs the same three offences.
        let mut honest = HostTrack {
            landed: 30,
            ..Default::default()
        };
        for _ in 0..3 {
            honest.apply(Outcome::Offence(Offence::Forgot));
        }
        assert_eq!(honest.standing(), Standing::Demoted);
    }

    #[test]
    fn failures_contradict_a_claimed_tr_of_one_but_not_an_honest_forecast() {
        // Claims TR 1 and fails: the first failure is luck, each further
        // one an offence.
        let mut liar = HostTrack::default();
        liar.apply(Outcome::Failed {
            claimed_tr: Some(1.0),
        });
        assert_eq!(liar.tr_overclaims(), 0);
        for _ in 0..3 {
            liar.apply(Outcome::Failed {
                claimed_tr: Some(1.0),
            });
        }
        assert_eq!(liar.tr_overclaims(), 3);
        assert_eq!(liar.standing(), Standing::Excluded);
        // Nonsense TR is held to TR 1.
        let mut nonsense = HostTrack::default();
        for _ in 0..2 {
            nonsense.apply(Outcome::Failed {
                claimed_tr: Some(f64::NAN),
            });
        }
        assert_eq!(nonsense.tr_overclaims(), 1);
        // An honest host that says TR 0.5 and fails half of 40 attempts.
        let mut honest = HostTrack::default();
        for i in 0..40 {
            let claimed_tr = Some(0.5);
            honest.apply(if i % 2 == 0 {
                Outcome::Failed { claimed_tr }
            } else {
                Outcome::Landed { claimed_tr }
            });
        }
        assert_eq!((honest.failed, honest.tr_overclaims()), (20, 0));
        assert_eq!(honest.standing(), Standing::Clean);
        // Failures without a claim are not held against it.
        let mut unknown = HostTrack::default();
        for _ in 0..5 {
            unknown.apply(Outcome::Failed { claimed_tr: None });
        }
        assert_eq!(unknown.standing(), Standing::Clean);
    }

    /// Brier and log scores worked by hand: claims 0.8 and lands, claims
    /// 0.8 and fails, claims 1.0 and fails (held at 1 − 10⁻³ for the log).
    #[test]
    fn claimed_trs_are_scored_against_what_happened() {
        let mut t = HostTrack::default();
        assert_eq!((t.brier(), t.log_score()), (None, None));
        t.apply(Outcome::Landed {
            claimed_tr: Some(0.8),
        });
        t.apply(Outcome::Failed {
            claimed_tr: Some(0.8),
        });
        t.apply(Outcome::Failed {
            claimed_tr: Some(1.0),
        });
        // Attempts without a claim are not scored.
        t.apply(Outcome::Landed { claimed_tr: None });
        assert_eq!(t.claims, 3);
        let brier = (0.04 + 0.64 + 1.0) / 3.0;
        assert!((t.brier().unwrap() - brier).abs() < 1e-6, "{:?}", t.brier());
        let log = (-(0.8f64.ln()) - (0.2f64.ln()) - (1e-3f64.ln())) / 3.0;
        assert!(
            (t.log_score().unwrap() - log).abs() < 1e-6,
            "{:?}",
            t.log_score()
        );
    }

    /// The reliability curve: a host that claims 0.95 and finishes half its
    /// tasks has its top bin at 0.5 against a mean claim of 0.95; an honest
    /// 0.3 sits in the second bin at what it landed; bin edges fall where
    /// they should, and nonsense counts as a claim of 1.
    #[test]
    fn the_reliability_curve_puts_claims_in_bins_against_what_finished() {
        let mut t = HostTrack::default();
        for i in 0..40 {
            let claimed_tr = Some(0.95);
            t.apply(if i % 2 == 0 {
                Outcome::Landed { claimed_tr }
            } else {
                Outcome::Failed { claimed_tr }
            });
        }
        for i in 0..10 {
            let claimed_tr = Some(0.3);
            t.apply(if i < 3 {
                Outcome::Landed { claimed_tr }
            } else {
                Outcome::Failed { claimed_tr }
            });
        }
        t.apply(Outcome::Landed { claimed_tr: None });
        let top = t.curve[CLAIM_BINS - 1];
        assert_eq!((top.claims, top.landed), (40, 20));
        assert!((top.mean_claim().unwrap() - 0.95).abs() < 1e-9);
        assert!((top.landed_share().unwrap() - 0.5).abs() < 1e-9);
        assert_eq!((t.curve[1].claims, t.curve[1].landed), (10, 3));
        assert!((t.curve[1].landed_share().unwrap() - 0.3).abs() < 1e-9);
        assert_eq!(t.curve[0].mean_claim(), None);
        let total: u64 = t.curve.iter().map(|b| b.claims).sum();
        assert_eq!(total, t.claims);
        assert_eq!(
            [0.0, 0.1999, 0.2, 0.79, 0.8, 1.0].map(ClaimBin::index),
            [0, 0, 1, 3, 4, 4]
        );
        assert_eq!(ClaimBin::bounds(4), (0.8, 1.0));
        let mut nonsense = HostTrack::default();
        nonsense.apply(Outcome::Failed {
            claimed_tr: Some(7.0),
        });
        assert_eq!(nonsense.curve[CLAIM_BINS - 1].mean_claim(), Some(1.0));
    }

    /// The discount of a host that claims 1.0 and lands every other attempt
    /// falls towards 0.5; one whose claims hold, or that claims less than
    /// it lands, keeps 1.
    #[test]
    fn an_overclaiming_host_is_discounted_to_what_it_lands() {
        let attempts = |claim: f64, lands: fn(u32) -> bool, n: u32| {
            let mut t = HostTrack::default();
            for i in 0..n {
                let claimed_tr = Some(claim);
                t.apply(if lands(i) {
                    Outcome::Landed { claimed_tr }
                } else {
                    Outcome::Failed { claimed_tr }
                });
            }
            t
        };
        let half = |i: u32| i % 2 == 0;
        assert_eq!(HostTrack::default().claim_discount(), 1.0);
        let early = attempts(1.0, half, 4).claim_discount();
        let later = attempts(1.0, half, 40).claim_discount();
        let long = attempts(1.0, half, 400).claim_discount();
        assert!(early > later && later > long, "{early} {later} {long}");
        // (20 + 5) / (40 + 5) and (200 + 5) / (400 + 5).
        assert!((later - 25.0 / 45.0).abs() < 1e-9 && (long - 205.0 / 405.0).abs() < 1e-9);
        // Honest at 0.5: lands half, as it said.
        assert_eq!(attempts(0.5, half, 40).claim_discount(), 1.0);
        // Modest: claims 0.5 and lands every time.
        assert_eq!(attempts(0.5, |_| true, 40).claim_discount(), 1.0);
        // The liar's rank: 1.0 × discount falls below an honest 0.6.
        assert!(1.0 * later < 0.6);
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
