//! What a simulation is given (the hosts, the config) and why it may refuse
//! to run. Plain data: the checks are in [`simulate`](super::simulate).

use super::Policy;
use crate::sched::tail::TailRule;
use crate::sched::timeline::Timeline;
use crate::sched::window::WindowRule;
use serde::{Deserialize, Serialize};

/// One simulated host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SimHost {
    /// Index of its timeline (and of its series in the forecaster).
    pub timeline: usize,
    /// Trace time at simulation time 0.
    pub offset: i64,
    /// Relative power P in (0, 1].
    pub power: f64,
}

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub policy: Policy,
    /// Reference runtimes of the tasks (seconds on a dedicated host with P = 1).
    pub runtimes: Vec<f64>,
    /// Wall seconds one checkpoint costs (used by `proactive+checkpoint`).
    pub checkpoint_cost_secs: f64,
    /// The simulation stops here; tasks not done count as unfinished.
    pub horizon_secs: f64,
    /// Monte Carlo runs of the estimate made at submission (0: none).
    pub estimate_runs: usize,
    /// A host left idle while tasks wait looks again after this long.
    pub recheck_secs: f64,
    /// How `windows` weighs later windows.
    pub windows: WindowRule,
    /// How `proactive-auto` back-tests its two rules (`sim/duel.rs`).
    pub duel: crate::sched::duel::DuelRule,
    /// Under `windows`, a held task is weighed again whenever a host frees
    /// (as the batch queue weighs its held tasks every round), not only
    /// when its window opens or its hour is up: its hold gives way to a
    /// free host about as good.
    pub hold_gives_way: bool,
    /// What the consumer knows when it places (`knowledge.rs`).
    pub knowledge: super::Knowledge,
    /// Tail copies (issue 28; `sim/tail.rs`): under the proactive
    /// policies, free hosts left over after every waiting task has had one
    /// run extra copies of the running tasks most at risk
    /// ([`crate::sched::tail`]: one each, up to three for a task killed
    /// often); the first to finish wins, the others are cancelled. The
    /// baselines and the oracle never copy.
    pub tail_copies: bool,
    /// How tail copies are chosen.
    pub tail: TailRule,
    /// Hosts that over-claim their TR, and whether the consumer scores
    /// claims (issue 29; `sim/claims.rs`). The default: every host honest,
    /// no scoring.
    pub claims: super::ClaimPlan,
}

/// Why a simulation could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("host {host} names timeline {timeline}; there are {timelines}")]
    BadTimeline {
        host: usize,
        timeline: usize,
        timelines: usize,
    },
    #[error("host {host} has relative power {power}; it must be in (0, 1]")]
    BadPower { host: usize, power: f64 },
    #[error("task {task} has runtime {runtime}: runtimes must be finite and positive")]
    BadRuntime { task: usize, runtime: f64 },
    #[error("the pool has no host")]
    NoHosts,
}

/// History a host must have before a back-test's submission: the back-tests
/// stop where the earliest would start with less (its predictions would
/// stand on nothing).
pub const MIN_HISTORY_SECS: i64 = 86_400;

/// The pool `back` seconds earlier: every host that much earlier in its
/// trace; `None` when a host would have less than [`MIN_HISTORY_SECS`]
/// of history there.
pub fn earlier(hosts: &[SimHost], timelines: &[Timeline], back: i64) -> Option<Vec<SimHost>> {
    hosts
        .iter()
        .map(|h| {
            let offset = h.offset.checked_sub(back)?;
            let tl = timelines.get(h.timeline)?;
            (offset >= tl.start().saturating_add(MIN_HISTORY_SECS))
                .then_some(SimHost { offset, ..*h })
        })
        .collect()
}
