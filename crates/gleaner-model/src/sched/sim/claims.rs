//! Hosts that over-claim, and the consumer's record of claims, in the
//! simulator (issue 29: "the simulator runs pools with over-claiming hosts
//! and shows they lose their work to honest ones").
//!
//! An over-claiming host answers TR 1 at every window the consumer asks
//! ([`CURVE_WINDOWS`]) whatever its trace does; its trace still suspends
//! and kills its guests. The consumer keeps a [`HostTrack`] per host as
//! the node's queue does (each attempt's end with the TR the host claimed
//! for it: landed, or killed; a tail copy cancelled because the other copy
//! won says nothing of the host). What it does with the record is the
//! run's [`Scoring`]: nothing; the discount (every host's claimed curve
//! times [`HostTrack::claim_discount`], through [`TrCurve::scaled`]); or
//! the discount and the record's standing ([`HostTrack::standing`]: hosts
//! with offences placed behind clean ones, excluded ones given no work),
//! the node's functions, called, not copied. This file owns the plan, the
//! records and what they add up to; it knows nothing of the event loop
//! beyond the attempt ends it is told of, and the policies ask it
//! [`Sim::standing`].

use super::{Sim, SimHost, CURVE_WINDOWS};
use crate::sched::curve::TrCurve;
use crate::sched::place::HostView;
use crate::sched::timeline::Timeline;
use crate::trust::{HostTrack, Outcome, Standing};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the consumer does with its records of hosts' claims.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scoring {
    /// Claims are taken as they come (the simulator before issue 29).
    #[default]
    Off,
    /// Each host's claimed curve is weighed times its record's
    /// [`HostTrack::claim_discount`].
    Discount,
    /// The discount, and the record's standing as the node's placement
    /// uses it: hosts with offences (here: failures beyond what their
    /// claims allow, [`HostTrack::tr_overclaims`]) behind clean ones,
    /// excluded ones given no work. Under full knowledge only; the
    /// oracle ignores claims.
    Record,
}

impl Scoring {
    pub const ALL: [Scoring; 3] = [Scoring::Off, Scoring::Discount, Scoring::Record];

    pub fn name(self) -> &'static str {
        match self {
            Scoring::Off => "off",
            Scoring::Discount => "discount",
            Scoring::Record => "record",
        }
    }
}

impl fmt::Display for Scoring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scoring {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Scoring::ALL
            .into_iter()
            .find(|k| k.name() == lower)
            .ok_or_else(|| format!("{s:?}: say off, discount or record"))
    }
}

/// Who over-claims, and what the consumer does with its records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimPlan {
    /// Per host (by index): it claims TR 1 at every window. Shorter than
    /// the pool (empty: nobody) means the hosts past its end are honest.
    pub overclaims: Vec<bool>,
    pub scoring: Scoring,
}

impl ClaimPlan {
    /// Whether host `host` over-claims.
    pub fn overclaims(&self, host: usize) -> bool {
        self.overclaims.get(host).copied().unwrap_or(false)
    }

    /// Whether the run has anything to measure of claims.
    pub fn active(&self) -> bool {
        self.scoring != Scoring::Off || self.overclaims.iter().any(|&o| o)
    }
}

/// What a run measured of the over-claiming hosts against the pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClaimStats {
    /// What the consumer did with its records in this run.
    pub scoring: Scoring,
    /// Over-claiming hosts, and hosts in the pool.
    pub overclaimers: usize,
    pub hosts: usize,
    /// Attempts started on over-claimers, and on every host.
    pub attempts_over: u64,
    pub attempts: u64,
    /// Reference CPU-seconds run on over-claimers (landed, lost to kills,
    /// spent on cancelled copies), and on every host.
    pub cpu_over_secs: f64,
    pub cpu_secs: f64,
    /// Tasks whose first completion was on an over-claimer, and tasks
    /// completed.
    pub tasks_over: usize,
    pub tasks_done: usize,
    /// Kills (S3, S4, S5) of attempts on over-claimers, and of all attempts.
    pub kills_over: u64,
    pub kills: u64,
    /// Mean claim discount at the end of the run over the over-claimers
    /// and over the honest hosts (the records are kept with scoring off
    /// too; they are only not used).
    pub discount_over: Option<f64>,
    pub discount_honest: Option<f64>,
    /// Hosts whose record excluded them by the end of the run (offences
    /// not outweighed by landed results), over-claimers and honest ones;
    /// counted whatever the scoring (used only under `record`).
    pub excluded_over: usize,
    pub excluded_honest: usize,
}

impl ClaimStats {
    /// Share of the CPU-seconds run on over-claimers.
    pub fn cpu_share(&self) -> f64 {
        share(self.cpu_over_secs, self.cpu_secs)
    }
    /// Share of the completed tasks that completed on over-claimers.
    pub fn task_share(&self) -> f64 {
        share(self.tasks_over as f64, self.tasks_done as f64)
    }
    /// Share of the attempts started on over-claimers.
    pub fn attempt_share(&self) -> f64 {
        share(self.attempts_over as f64, self.attempts as f64)
    }
    /// Share of all kills that hit over-claimers.
    pub fn kill_share(&self) -> f64 {
        share(self.kills_over as f64, self.kills as f64)
    }
    /// Share of over-claimers' attempts that were killed.
    pub fn over_kill_rate(&self) -> f64 {
        share(self.kills_over as f64, self.attempts_over as f64)
    }
    /// Share of honest hosts' attempts that were killed.
    pub fn honest_kill_rate(&self) -> f64 {
        share(
            self.kills.saturating_sub(self.kills_over) as f64,
            self.attempts.saturating_sub(self.attempts_over) as f64,
        )
    }
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole
    } else {
        0.0
    }
}

/// The curve an over-claiming host answers: TR 1 at every window asked.
/// Points, not an empty curve, as a host answering the node's query sends
/// them: the discount scales points.
pub fn overclaimed_curve() -> TrCurve {
    TrCurve::new(CURVE_WINDOWS.iter().map(|&secs| (secs as f64, 1.0)))
}

/// Per host: what the consumer remembers of its claims, and what the run
/// gave it (for [`ClaimStats`]).
#[derive(Debug, Clone, Default)]
pub(super) struct ClaimBook {
    pub(super) records: Vec<HostTrack>,
    pub(super) attempts: Vec<u64>,
    pub(super) kills: Vec<u64>,
    pub(super) cpu_secs: Vec<f64>,
}

impl ClaimBook {
    pub(super) fn new(hosts: usize) -> ClaimBook {
        ClaimBook {
            records: vec![HostTrack::default(); hosts],
            attempts: vec![0; hosts],
            kills: vec![0; hosts],
            cpu_secs: vec![0.0; hosts],
        }
    }
}

impl Sim<'_> {
    /// What `host` claims of itself: the forecaster's view, or TR 1 at
    /// every window for an over-claimer.
    pub(super) fn claimed(&self, host: usize, honest: HostView) -> HostView {
        if self.config.claims.overclaims(host) {
            HostView {
                curve: overclaimed_curve(),
                ..honest
            }
        } else {
            honest
        }
    }

    /// `claimed` as the consumer weighs it: discounted by the host's record
    /// when claims are scored (the node's `discounted`: the same factor,
    /// the same scaling; unchanged at a factor of 1).
    pub(super) fn weighed(&self, host: usize, claimed: &HostView) -> HostView {
        let factor = if self.config.claims.scoring != Scoring::Off {
            self.claim_book.records[host].claim_discount()
        } else {
            1.0
        };
        if factor < 1.0 {
            HostView {
                curve: claimed.curve.scaled(factor),
                ..claimed.clone()
            }
        } else {
            claimed.clone()
        }
    }

    /// An attempt on `host` that ran `cpu_secs` of reference work ended as
    /// `end`; the host had claimed `claimed_tr` for it. Scored, the host's
    /// view is weighed again at once (its record moved), and every rule
    /// looks again.
    pub(super) fn attempt_ended(
        &mut self,
        host: usize,
        cpu_secs: f64,
        end: AttemptEnd,
        claimed_tr: Option<f64>,
    ) {
        let book = &mut self.claim_book;
        book.cpu_secs[host] += cpu_secs;
        let outcome = match end {
            AttemptEnd::Landed => Outcome::Landed { claimed_tr },
            AttemptEnd::Killed => {
                book.kills[host] += 1;
                Outcome::Failed { claimed_tr }
            }
            AttemptEnd::Ended => Outcome::Failed { claimed_tr },
            AttemptEnd::Cancelled => return,
        };
        book.records[host].apply(outcome);
        if self.config.claims.scoring != Scoring::Off {
            let weighed = self.weighed(host, &self.claimed_views[host]);
            self.views[host] = weighed;
            self.order_stale = true;
            self.recheck_all = true;
        }
    }

    /// `host`'s place in placement by its record: under [`Scoring::Record`]
    /// its [`HostTrack::standing`], else clean.
    pub(super) fn standing(&self, host: usize) -> Standing {
        if self.config.claims.scoring == Scoring::Record {
            self.claim_book.records[host].standing()
        } else {
            Standing::Clean
        }
    }

    /// Whether free host `host` is passed over for placement now: excluded
    /// by its record, or demoted while a clean host is free (the node's
    /// `trust.order`: demoted hosts after every clean one). Never outside
    /// [`Scoring::Record`].
    pub(super) fn passed_over(&self, host: usize) -> bool {
        match self.standing(host) {
            Standing::Clean => false,
            Standing::Excluded => true,
            Standing::Demoted => self.a_clean_host_is_free(),
        }
    }

    fn a_clean_host_is_free(&self) -> bool {
        self.free
            .iter()
            .any(|&g| self.standing(g) == Standing::Clean)
    }

    /// Per host, [`Self::passed_over`]; empty outside [`Scoring::Record`]
    /// (nobody is).
    pub(super) fn passed_over_all(&self) -> Vec<bool> {
        if self.config.claims.scoring != Scoring::Record {
            return Vec::new();
        }
        let clean_free = self.a_clean_host_is_free();
        (0..self.hosts.len())
            .map(|g| match self.standing(g) {
                Standing::Clean => false,
                Standing::Excluded => true,
                Standing::Demoted => clean_free,
            })
            .collect()
    }

    /// The free hosts placement may use now (all of them outside
    /// [`Scoring::Record`]), in the free list's order.
    pub(super) fn placeable(&self) -> Vec<usize> {
        let passed = self.passed_over_all();
        if passed.is_empty() {
            return self.free.clone();
        }
        self.free.iter().copied().filter(|&g| !passed[g]).collect()
    }

    /// What the run measured of claims, if it had any to measure.
    pub(super) fn claim_stats(&self) -> Option<ClaimStats> {
        let plan = &self.config.claims;
        if !plan.active() {
            return None;
        }
        let book = &self.claim_book;
        let n = self.hosts.len();
        let over = |h: &usize| plan.overclaims(*h);
        let sum_u = |v: &[u64], f: &dyn Fn(&usize) -> bool| -> u64 {
            (0..n).filter(|h| f(h)).map(|h| v[h]).sum()
        };
        let all = |_: &usize| true;
        let excluded = |h: usize| book.records[h].standing() == Standing::Excluded;
        let mean_discount = |f: &dyn Fn(&usize) -> bool| -> Option<f64> {
            let d: Vec<f64> = (0..n)
                .filter(|h| f(h))
                .map(|h| book.records[h].claim_discount())
                .collect();
            (!d.is_empty()).then(|| d.iter().sum::<f64>() / d.len() as f64)
        };
        Some(ClaimStats {
            scoring: plan.scoring,
            overclaimers: (0..n).filter(over).count(),
            hosts: n,
            attempts_over: sum_u(&book.attempts, &over),
            attempts: sum_u(&book.attempts, &all),
            cpu_over_secs: (0..n).filter(over).map(|h| book.cpu_secs[h]).sum(),
            cpu_secs: book.cpu_secs.iter().sum(),
            tasks_over: self
                .end_host
                .iter()
                .flatten()
                .filter(|h| plan.overclaims(**h))
                .count(),
            tasks_done: self.end_host.iter().flatten().count(),
            kills_over: sum_u(&book.kills, &over),
            kills: sum_u(&book.kills, &all),
            discount_over: mean_discount(&over),
            discount_honest: mean_discount(&|h: &usize| !plan.overclaims(*h)),
            excluded_over: (0..n)
                .filter(|&h| plan.overclaims(h) && excluded(h))
                .count(),
            excluded_honest: (0..n)
                .filter(|&h| !plan.overclaims(h) && excluded(h))
                .count(),
        })
    }
}

/// How an attempt ended, as a host's record of claims counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AttemptEnd {
    /// Its result landed.
    Landed,
    /// The host's trace killed it (S3, S4, S5).
    Killed,
    /// It ended on the host without a result for another reason.
    Ended,
    /// The consumer cancelled it (the other copy won): says nothing of the host.
    Cancelled,
}

/// The `k` hosts (by index) least likely to keep a guest for
/// `window_secs`: the share of hourly starts over the run's first
/// `span_secs` (simulation time, from each host's own offset) at which the
/// host is usable and no failure comes within the window, lowest first
/// (ties by index; a host never usable then counts 0). Which hosts lie is
/// the scenario's choice, made by whoever sets the run up; the consumer
/// never sees it. The threat the record is for is the host that fails
/// often and claims it does not, so a run may put its liars there.
pub fn least_reliable_hosts(
    hosts: &[SimHost],
    timelines: &[Timeline],
    k: usize,
    window_secs: f64,
    span_secs: f64,
) -> Vec<bool> {
    let survival = |h: &SimHost| -> f64 {
        let Some(tl) = timelines.get(h.timeline) else {
            return 0.0;
        };
        let (mut tried, mut kept) = (0u32, 0u32);
        let mut s = 0.0;
        while s < span_secs {
            let t = h.offset as f64 + s;
            if tl.failure_at(t).is_none() {
                tried += 1;
                if tl.keeps_run(t, window_secs) {
                    kept += 1;
                }
            }
            s += 3600.0;
        }
        if tried == 0 {
            0.0
        } else {
            f64::from(kept) / f64::from(tried)
        }
    };
    let mut order: Vec<(f64, usize)> = hosts.iter().map(survival).zip(0..).collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = vec![false; hosts.len()];
    for &(_, h) in order.iter().take(k) {
        out[h] = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::sim::{simulate, Forecaster, Knowledge, Policy, SimConfig, SimHost};
    use crate::sched::timeline::Timeline;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Every honest host here tells the truth: its trace never fails.
    struct NeverFails;

    impl Forecaster for NeverFails {
        fn curve(&mut self, _trace: usize, _at: i64) -> TrCurve {
            TrCurve::never_fails()
        }
    }

    /// Twenty days of one-minute cells; `flaky`: revoked (S5) for the last
    /// 10 minutes of every 100, so a 1 h task lands only when it starts in
    /// the first half hour of an up spell.
    fn timeline(flaky: bool) -> Timeline {
        let n = 20 * 1440;
        let fail = (0..n)
            .map(|k| if flaky && k % 100 >= 90 { 5 } else { 0 })
            .collect();
        Timeline::from_cells(0, 60, fail, vec![1.0; n])
    }

    /// `tasks` 1 h tasks under `policy` over `horizon_secs`, hosts
    /// over-claiming where `overclaims` says, scored by `scoring`.
    fn config(
        policy: Policy,
        tasks: usize,
        horizon_secs: f64,
        overclaims: Vec<bool>,
        scoring: Scoring,
    ) -> SimConfig {
        SimConfig {
            policy,
            runtimes: vec![3600.0; tasks],
            checkpoint_cost_secs: 60.0,
            horizon_secs,
            estimate_runs: 0,
            recheck_secs: 600.0,
            windows: Default::default(),
            duel: Default::default(),
            knowledge: Knowledge::Full,
            tail_copies: false,
            hold_gives_way: false,
            tail: Default::default(),
            claims: ClaimPlan {
                overclaims,
                scoring,
            },
        }
    }

    /// Three steady honest hosts and three flaky ones that claim TR 1;
    /// `tasks` 1 h tasks under `policy`.
    fn pool_run(policy: Policy, tasks: usize, scoring: Scoring) -> ClaimStats {
        let timelines = [timeline(false), timeline(true)];
        let hosts: Vec<SimHost> = (0..6)
            .map(|i| SimHost {
                timeline: usize::from(i >= 3),
                offset: 7 * 86_400,
                power: 1.0,
            })
            .collect();
        let config = config(
            policy,
            tasks,
            12.0 * 86_400.0,
            (0..6).map(|i| i >= 3).collect(),
            scoring,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let r = simulate(
            &config,
            &hosts,
            &timelines,
            &mut NeverFails,
            &mut rng,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(r.finished, tasks, "{policy} scoring {scoring}: {r:?}");
        r.claims.unwrap()
    }

    #[test]
    fn a_scored_record_discounts_the_view_placement_weighs() {
        let timelines = [timeline(false), timeline(true)];
        let hosts = [SimHost {
            timeline: 1,
            offset: 7 * 86_400,
            power: 1.0,
        }];
        for scoring in Scoring::ALL {
            let config = config(Policy::Tr, 1, 86_400.0, vec![true], scoring);
            let mut sim = Sim::new(&config, &hosts, &timelines);
            assert_eq!(sim.view(0, &mut NeverFails).p_success(3600.0), 1.0);
            // Ten attempts it claimed TR 1 for, each killed.
            for _ in 0..10 {
                sim.attempt_ended(0, 600.0, AttemptEnd::Killed, Some(1.0));
            }
            let discount = sim.claim_book.records[0].claim_discount();
            assert!((discount - 5.0 / 15.0).abs() < 1e-12, "{discount}");
            let weighed = sim.views[0].p_success(3600.0);
            let claimed = sim.claimed_views[0].p_success(3600.0);
            assert_eq!(claimed, 1.0, "{scoring}");
            if scoring == Scoring::Off {
                assert_eq!(weighed, 1.0);
            } else {
                assert!((weighed - discount).abs() < 1e-9, "{scoring}: {weighed}");
            }
            // Only a record passes a host over: eight failures beyond what
            // its claims allow exclude it.
            let excluded = scoring == Scoring::Record;
            sim.free = vec![0];
            assert_eq!(sim.passed_over(0), excluded, "{scoring}");
            assert_eq!(sim.placeable().is_empty(), excluded, "{scoring}");
        }
    }

    #[test]
    fn a_record_excludes_hosts_whose_kills_go_beyond_their_claims() {
        for policy in [Policy::Tr, Policy::Proactive] {
            let taken = pool_run(policy, 40, Scoring::Off);
            let ranked = pool_run(policy, 40, Scoring::Record);
            // Claiming TR 1, a second failure is already one more than the
            // claims allow: a few kills each and the three are out.
            assert_eq!(
                (ranked.excluded_over, ranked.excluded_honest),
                (3, 0),
                "{policy}: {ranked:?}"
            );
            assert!(
                ranked.attempts_over < taken.attempts_over
                    && ranked.kills_over < taken.kills_over
                    && ranked.cpu_share() < taken.cpu_share(),
                "{policy}: record {ranked:?}, unscored {taken:?}"
            );
        }
    }

    #[test]
    fn an_honest_pool_unscored_has_no_claims_to_report() {
        let plan = ClaimPlan::default();
        assert!(!plan.active());
        assert!(!plan.overclaims(3));
        let scored = ClaimPlan {
            overclaims: vec![],
            scoring: Scoring::Discount,
        };
        assert!(scored.active());
        assert_eq!("Record".parse::<Scoring>(), Ok(Scoring::Record));
        assert!("on".parse::<Scoring>().is_err());
    }

    #[test]
    fn the_least_reliable_hosts_are_those_whose_windows_fail_most() {
        // Flaky hosts at indices 0, 2 and 4, steady ones between: the pick
        // goes by what the timelines do, not by index.
        let timelines = [timeline(false), timeline(true)];
        let hosts: Vec<SimHost> = (0..6)
            .map(|i| SimHost {
                timeline: usize::from(i % 2 == 0),
                offset: 86_400,
                power: 1.0,
            })
            .collect();
        let day = 86_400.0;
        let pick = least_reliable_hosts(&hosts, &timelines, 3, 3600.0, day);
        assert_eq!(pick, vec![true, false, true, false, true, false]);
        let two = least_reliable_hosts(&hosts, &timelines, 2, 3600.0, day);
        assert_eq!(two, vec![true, false, true, false, false, false]);
        assert!(!least_reliable_hosts(&hosts, &timelines, 0, 3600.0, day).contains(&true));
        // A window shorter than the flaky hosts' up spells still fails
        // sometimes; a host whose timeline is missing counts as never kept.
        let mut lost = hosts.clone();
        lost[5].timeline = 9;
        let pick = least_reliable_hosts(&lost, &timelines, 1, 600.0, day);
        assert_eq!(pick, vec![false, false, false, false, false, true]);
    }
}
