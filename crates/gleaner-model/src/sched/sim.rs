//! The trace-driven pool simulator behind `gleaner simulate` (issue 11,
//! scope 5): a discrete-event simulation of one batch on a pool whose hosts
//! replay trace files, each from its own offset.
//!
//! A guest progresses at the share of the CPU its host's load leaves it, is
//! suspended and killed by the five-state rules ([`Timeline`]), and loses
//! the work done since its last checkpoint when killed. The consumer's side
//! runs the scheduling code of this module's siblings: the same
//! [`HostView`]s, [`pick_task_by`] rule and Young/Daly interval a node would
//! use, with predictions from a [`Forecaster`] that sees each host's past
//! only. Policies: `random`, `power` (Γ from the last reading), `tr-freq`
//! and `tr` (the highest TR for the task's expected window), `proactive`
//! (longest first, the expected-makespan rule), `proactive+checkpoint` (and
//! Young/Daly checkpoints) and `oracle` (knows every trace's future: puts a
//! task only where it will finish unhit, soonest). Pure code.
//!
//! Files: `policy.rs` (the policies), `forecast.rs` (TR curves),
//! `config.rs` and `result.rs` (what goes in and comes out), `view.rs`
//! (what the consumer knows of a host), `submission.rs` (the estimate at
//! submission), `events.rs` (the event loop), `dispatch.rs` (placement),
//! `windows.rs` (`windows`' holds), `duel.rs` (`proactive-auto`: which of
//! `proactive` and bounded holds places the batch), `knowledge.rs` (placing from the
//! members' summaries and a few asks), `sample.rs` (the sample of leaves
//! a consumer of a large pool places from), `tail.rs` (tail copies),
//! `verify.rs` (`--verify`), `claims.rs` (over-claiming hosts and the
//! record that discounts their claims). This file
//! holds the simulation's state and its entry point.

mod avoid;
mod claims;
mod config;
mod dispatch;
pub mod duel;
mod events;
mod forecast;
pub mod knowledge;
mod policy;
mod result;
mod sample;
mod submission;
mod tail;
#[cfg(test)]
mod tests;
pub mod verify;
mod view;
mod windows;

pub use claims::{least_reliable_hosts, overclaimed_curve, ClaimPlan, ClaimStats, Scoring};
pub use config::{earlier, SimConfig, SimError, SimHost, MIN_HISTORY_SECS};
pub use forecast::{Forecaster, SeriesForecaster};
pub use knowledge::{summaries_apply, Knowledge, ProbeStats, SummaryPlan};
pub use policy::{Policy, UnknownPolicy};
pub use result::{HoldNote, Kills, SimResult};
pub use sample::{SamplePlan, LEAF_HOSTS};
pub use submission::submission_estimate;

use super::curve::TrCurve;
use super::estimate::Quantiles;
use super::place::HostView;
use super::timeline::Timeline;
use crate::state::State;
use knowledge::Summaries;
use rand::Rng;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// Window lengths a forecaster asks TR for to build a host's curve (seconds).
pub const CURVE_WINDOWS: [u64; 5] = [1_800, 3_600, 4 * 3_600, 12 * 3_600, 24 * 3_600];
/// How long before "now" the simulator looks to predict a host's availability
/// and outage length.
pub const PAST_LOOKBACK_SECS: f64 = super::spells::LOOKBACK_SECS as f64;
/// Outage length assumed for a host whose past shows none.
pub const DEFAULT_OUTAGE_SECS: f64 = 1_800.0;

#[derive(Debug, Clone, Copy)]
enum Ev {
    Finish {
        host: usize,
        attempt: u64,
    },
    Fail {
        host: usize,
        attempt: u64,
        cause: State,
    },
    HostUp {
        host: usize,
    },
    /// An idle host's trace fails (stale unless its epoch still matches).
    IdleDown {
        host: usize,
        epoch: u32,
    },
    /// The periodic look while tasks wait and hosts stand free (one chain
    /// at a time: `recheck_pending`).
    Recheck,
    /// A look of its own, when something known to change at a time comes
    /// (a held task's reweigh, an avoidance's lapse); it leaves the
    /// periodic chain alone, which a second `Recheck` would fork.
    Look,
    /// A placement round from the summaries (`knowledge.rs`).
    Round,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    seq: u64,
    ev: Ev,
}
impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> Ordering {
        o.time.total_cmp(&self.time).then(o.seq.cmp(&self.seq))
    }
}

/// A running attempt.
#[derive(Debug, Clone)]
struct Attempt {
    id: u64,
    task: usize,
    start: f64,
    /// Useful work this attempt must do (the task's remaining work).
    work: f64,
    /// Checkpoint interval and cost in reference work; interval 0 = none.
    interval: f64,
    cost: f64,
    /// Wall seconds the consumer expected it to take (for the rule's waits).
    expected_end: f64,
    /// Started as a tail copy of a task that was running already.
    copy: bool,
    /// The TR the host claimed for this attempt's expected run (before any
    /// discount: the claim it is held to, as in the node).
    claimed_tr: Option<f64>,
}

#[derive(Debug, Clone)]
enum Slot {
    Free,
    /// Failing since `since`; expected back at `expected_up` (its usual
    /// outage, `Sim::outage_guess`), or later once that has passed
    /// ([`back_in`]).
    Down {
        since: f64,
        expected_up: f64,
    },
    Busy(Attempt),
}

impl Slot {
    /// Seconds from `now` until the host is expected free, as the consumer
    /// sees it: 0 for a free host, a busy host's attempt's expected end, a
    /// down host's expected return ([`back_in`]); never negative. The one
    /// wait the placement rule, the windows weighed and the count of hosts
    /// about to be free read.
    fn free_in(&self, now: f64) -> f64 {
        match self {
            Slot::Free => 0.0,
            Slot::Down { since, expected_up } => back_in(*since, *expected_up, now),
            Slot::Busy(a) => (a.expected_end - now).max(0.0),
        }
    }
}

/// Seconds from `now` until a host the consumer saw go down at `since`,
/// first expected back at `expected_up`, is expected back: its usual
/// outage's end while that lies ahead; past it, as long again as it has
/// lasted (an outage longer than the host's usual is one of its long ones,
/// a weekend away or a holiday; "as long again" is the median of the Lindy
/// law the estimate falls back on when no past outage was longer,
/// `estimate::bootstrap::rest_of_outage`). An overdue host used to look
/// about to be free for as long as it stayed away, and the proactive rule
/// kept tasks waiting for it: on weekends-away submitted on a Friday the
/// batch's last tasks waited for the hosts off since Friday evening until
/// Monday while twelve hosts stood free (docs/scheduling.md, "A host away
/// longer than usual"). A host found down at the submission counts from
/// then (what the consumer saw), not from its outage's start in the trace;
/// a host only heard failing in a summary (`--knowledge sample`) keeps its
/// own guess, one usual outage after the last summary that said so
/// (`knowledge.rs`).
fn back_in(since: f64, expected_up: f64, now: f64) -> f64 {
    if expected_up > now {
        expected_up - now
    } else {
        (now - since).max(0.0)
    }
}

/// Runs one simulation. `progress` is called with the share of tasks done.
pub fn simulate<R: Rng + ?Sized>(
    config: &SimConfig,
    hosts: &[SimHost],
    timelines: &[Timeline],
    forecaster: &mut dyn Forecaster,
    rng: &mut R,
    progress: &mut dyn FnMut(f64),
) -> Result<SimResult, SimError> {
    if hosts.is_empty() {
        return Err(SimError::NoHosts);
    }
    for (host, h) in hosts.iter().enumerate() {
        if h.timeline >= timelines.len() || timelines[h.timeline].cells() == 0 {
            return Err(SimError::BadTimeline {
                host,
                timeline: h.timeline,
                timelines: timelines.len(),
            });
        }
        if !(h.power > 0.0 && h.power <= 1.0) {
            return Err(SimError::BadPower {
                host,
                power: h.power,
            });
        }
    }
    if let Some((task, &runtime)) = config
        .runtimes
        .iter()
        .enumerate()
        .find(|(_, r)| !(r.is_finite() && **r > 0.0))
    {
        return Err(SimError::BadRuntime { task, runtime });
    }
    if config.policy == Policy::ProactiveAuto {
        return duel::simulate_auto(config, hosts, timelines, forecaster, rng, progress);
    }
    let mut sim = Sim::new(config, hosts, timelines);
    if let Knowledge::Summaries(plan) = config.knowledge {
        if summaries_apply(config.policy) {
            sim.summaries = Some(Box::new(Summaries::new(
                plan,
                hosts.len(),
                &config.runtimes,
                rng,
            )));
        }
    }
    sim.estimate = if config.estimate_runs > 0 {
        sim.estimate_now(forecaster, rng)
    } else {
        None
    };
    sim.run(forecaster, rng, progress);
    Ok(sim.result())
}

struct Sim<'a> {
    config: &'a SimConfig,
    hosts: &'a [SimHost],
    timelines: &'a [Timeline],
    heap: BinaryHeap<Event>,
    seq: u64,
    now: f64,
    queue: VecDeque<usize>,
    slots: Vec<Slot>,
    /// The view each host was last seen with (for the rule's comparisons),
    /// as the consumer weighs it.
    views: Vec<HostView>,
    /// The same views as each host claimed them (before any discount).
    claimed_views: Vec<HostView>,
    /// Each host's record of claims and what it ran (`claims.rs`).
    claim_book: claims::ClaimBook,
    view_bucket: Vec<i64>,
    left: Vec<f64>,
    end: Vec<Option<f64>>,
    /// The host that completed each task first.
    end_host: Vec<Option<usize>>,
    completions: Vec<u32>,
    next_attempt: u64,
    recheck_pending: bool,
    /// Free hosts (slot `Free`), in no particular order.
    free: Vec<usize>,
    /// Hosts that became free since the last dispatch.
    fresh: Vec<usize>,
    /// Hosts that became free since the last dispatch, to be given an
    /// `IdleDown` event if they stay idle.
    armed: Vec<usize>,
    /// Per host: bumped when it takes a task (stale `IdleDown` events).
    epoch: Vec<u32>,
    /// Something beyond hosts becoming free changed what the rules see
    /// (the queue's head, a host's wait, the views): weigh every free
    /// host again, not only the fresh ones.
    recheck_all: bool,
    /// Hosts by the slowdown of their last view (the rule's scan order).
    order: Vec<usize>,
    order_stale: bool,
    /// The oracle: tasks already offered to every idle host.
    offered: Vec<bool>,
    /// The oracle: a task was requeued since the last dispatch (every
    /// task is offered to every idle host again).
    oracle_requeued: bool,
    kills: Kills,
    attempts: u64,
    wasted: f64,
    checkpoints: u64,
    done: usize,
    estimate: Option<(Quantiles, f64)>,
    /// Kills each task took (S3, S4, S5).
    task_kills: Vec<u32>,
    /// Per task: the hosts whose owners killed an attempt of it, and until
    /// when it keeps off each (`avoid.rs`).
    avoid: Vec<Vec<(usize, f64)>>,
    /// Per task: held for a later window until this time (`windows`).
    held_until: Vec<f64>,
    /// Per host: the windows held tasks keep on it, (task, start, end).
    reserved: Vec<Vec<(usize, f64, f64)>>,
    /// Per task: the window it is held for.
    plans: Vec<Option<super::window::Plan>>,
    holds: u64,
    /// Every hold, and what the last weighing saw (best chance now,
    /// median chance) for the hold that may follow it.
    hold_log: Vec<result::HoldNote>,
    last_weigh: (f64, f64),
    /// Per task: its last hold's note, until the task starts, then until
    /// that attempt ends (to note a kill).
    hold_note: Vec<Option<usize>>,
    /// When each task was first held since it last started (`windows`).
    held_since: Vec<Option<f64>>,
    /// The summaries the consumer places from, when it does not know all.
    summaries: Option<Box<Summaries>>,
    /// Per task: its attempts running now (2 while it has a tail copy).
    running: Vec<u8>,
    /// Tail copies started, and those that finished first.
    tail_copies: u64,
    tail_wins: u64,
    /// Reference CPU-seconds spent by tail copies beyond one attempt per
    /// task: attempts cancelled because the other copy finished first, and
    /// the work tail copies lost to kills.
    tail_cpu: f64,
}

impl<'a> Sim<'a> {
    pub(super) fn new(
        config: &'a SimConfig,
        hosts: &'a [SimHost],
        timelines: &'a [Timeline],
    ) -> Sim<'a> {
        let n = config.runtimes.len();
        let mut order: Vec<usize> = (0..n).collect();
        if config.policy.longest_first() {
            order.sort_by(|&a, &b| {
                config.runtimes[b]
                    .total_cmp(&config.runtimes[a])
                    .then(a.cmp(&b))
            });
        }
        let blank = HostView {
            power: 1.0,
            availability: 1.0,
            curve: TrCurve::never_fails(),
        };
        Sim {
            config,
            hosts,
            timelines,
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0.0,
            queue: order.into(),
            slots: vec![
                Slot::Down {
                    since: 0.0,
                    expected_up: 0.0
                };
                hosts.len()
            ],
            views: vec![blank.clone(); hosts.len()],
            claimed_views: vec![blank; hosts.len()],
            claim_book: claims::ClaimBook::new(hosts.len()),
            view_bucket: vec![i64::MIN; hosts.len()],
            left: config.runtimes.clone(),
            end: vec![None; n],
            end_host: vec![None; n],
            completions: vec![0; n],
            next_attempt: 0,
            recheck_pending: false,
            free: Vec::with_capacity(hosts.len()),
            fresh: Vec::with_capacity(hosts.len()),
            armed: Vec::with_capacity(hosts.len()),
            epoch: vec![0; hosts.len()],
            recheck_all: true,
            order: (0..hosts.len()).collect(),
            order_stale: true,
            offered: vec![false; n],
            oracle_requeued: true,
            kills: [0; 3],
            attempts: 0,
            wasted: 0.0,
            checkpoints: 0,
            done: 0,
            estimate: None,
            task_kills: vec![0; n],
            avoid: vec![Vec::new(); n],
            held_until: vec![f64::NEG_INFINITY; n],
            reserved: vec![Vec::new(); hosts.len()],
            plans: vec![None; n],
            holds: 0,
            hold_log: Vec::new(),
            last_weigh: (0.0, 0.0),
            hold_note: vec![None; n],
            held_since: vec![None; n],
            summaries: None,
            running: vec![0; n],
            tail_copies: 0,
            tail_wins: 0,
            tail_cpu: 0.0,
        }
    }

    pub(super) fn push(&mut self, time: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Event {
            time,
            seq: self.seq,
            ev,
        });
    }
}

/// Checkpoints written while doing `work` at `interval` (none after the last block).
fn checkpoints_in(work: f64, interval: f64) -> u64 {
    if interval > 0.0 && work > 0.0 {
        ((work / interval).ceil() as u64).saturating_sub(1)
    } else {
        0
    }
}
