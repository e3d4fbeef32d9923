//! "When will my batch be done?": CISNE's Algorithm 1 (seed 002) run as a
//! Monte Carlo over the pool's hosts, with SDPN slowdowns (seed 004) and
//! failures drawn from each host's predicted failure distribution.
//!
//! One run duplicates the state (Alg. 1:1): the hosts with what they are
//! doing, the running tasks, the waiting queue. Then, while anything runs
//! (Alg. 1:3), the next job to end is taken (Alg. 1:4-6; a heap keyed by
//! end time stands for the paper's "compute every RemainTime and take the
//! least": with a constant SP per attempt Eq. 6 changes no order, so it is
//! applied lazily), and free hosts take waiting tasks by the proactive rule
//! (Alg. 1:8-13, [`super::place`]). An attempt on host h lasts runtime · SP_h.
//!
//! Failures belong to hosts, not to attempts: TR(T) is the chance that the
//! host survives [now, now + T] whatever runs there, so each run draws one
//! failure time per host from its curve and a task is hit when that time
//! falls inside its attempt (or the idle host goes down when it passes).
//! After a failure the host is away for its recovery time and its next
//! failure is drawn afresh from its return. (Drawing a fresh failure per
//! attempt instead would restart the curve's early, high hazard at every
//! task and overcount failures on hosts whose hazard falls with time.)
//! A hit task goes back to the head of the queue, restarting from zero or
//! from its last checkpoint. With a runtime spread each run also draws each
//! task's true runtime around its estimate; the rule still plans with the
//! estimates. The quantiles over runs are the estimate. Pure code: the
//! caller passes the RNG.
//!
//! Here: the input and output types and [`estimate`]. The plan that checks
//! the input and makes the runs in any split is in `plan`, one run in
//! `run` (its hosts' failures drawn in `run/failures`), what it needs of
//! each host in `facts`, the past spells it resamples in `bootstrap`, the
//! past days it replays in `replay`, the rule's memo of turnarounds in
//! `memo`, held windows in `held`.

use super::curve::TrCurve;
use super::place::HostView;
use super::spells::{PastSpells, SpellLengths};
use draw::gamma;
use rand::Rng;
use serde::{Deserialize, Serialize};

mod bootstrap;
mod draw;
mod facts;
mod held;
mod memo;
mod plan;
mod replay;
mod run;
#[cfg(test)]
mod tests;

pub use held::HeldWindow;
pub use plan::{EstimatePart, EstimatePlan};
pub use replay::{PastDay, PastDays, DAY_SECS, MAX_DAY_OUTAGES, MAX_PAST_DAYS, REPLAY_DAYS};

/// Most Monte Carlo runs one estimate makes.
pub const MAX_RUNS: usize = 100_000;
/// Most tasks (running and waiting) one estimate takes.
pub const MAX_TASKS: usize = 1_000_000;
/// Most hosts one estimate takes.
pub const MAX_HOSTS: usize = 100_000;
/// Attempts per task after which a run gives up on it (a task no host can
/// finish would otherwise be retried forever); the run then counts as unfinished.
pub const MAX_ATTEMPTS: u32 = 1_000;

/// A host as the estimate sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateHost {
    pub view: HostView,
    /// Wall seconds until the host is free of work that is not ours (0: free now).
    pub busy_secs: f64,
    /// Wall seconds a host is away after a failure before it takes work again.
    pub recovery_secs: f64,
    /// Seconds the host has already been down for when it is down now (0:
    /// it is up). With past outages (`spells`) each run then draws the rest
    /// of this outage instead of taking `busy_secs` (see
    /// [`bootstrap::rest_of_outage`]): a host found down is more likely in a long
    /// outage than a fresh failure is, the longer it has been down the
    /// longer it is likely to stay, and how long is what the past leaves
    /// unknown; without them it is away for `busy_secs`. With past days
    /// (`days`) it comes back only once they have it back too. Either way
    /// its first failure after the return is drawn as after any return
    /// (from its past days, its up-spells or its rate), not from the curve.
    #[serde(default)]
    pub down_secs: f64,
    /// What the host's past says of its failures, when known: the up time
    /// looked at and the failures in it. After the host comes back from a
    /// failure its next one comes at a rate drawn for each run from their
    /// posterior (see [`PastFailures`]), not from the curve, which holds
    /// for windows starting in the state the host was in when the curve
    /// was made, not just after a failure; a host with little history
    /// widens the band and one with much does not. `None`: redraw from the
    /// curve.
    #[serde(default)]
    pub past: Option<PastFailures>,
    /// Wall seconds between a task's checkpoints on this host (0: none);
    /// a failure then loses only the work since the last one.
    pub checkpoint_secs: f64,
    /// Wall seconds each checkpoint takes. As in the guest contract (and
    /// the simulator), a task writes one after every `checkpoint_secs` of
    /// work, not of wall time, and the writing adds to its run.
    #[serde(default)]
    pub checkpoint_cost_secs: f64,
    /// The lengths of the host's past up-spells and outages, when known:
    /// after a return its next up-spell and outage are resampled from
    /// them (see [`bootstrap::SpellBootstrap`]) instead of drawn as an exponential
    /// at the past's rate and a fixed recovery. `None`: those.
    #[serde(default)]
    pub spells: Option<SpellLengths>,
    /// The host's recent days, when known: a run reads its failures and
    /// returns from them, day by day, its first failure included, rather
    /// than from the curve and `spells` (see [`replay`]; the rule still
    /// weighs the host by its curve). `None`: the curve and the renewal
    /// draws.
    #[serde(default)]
    pub days: Option<PastDays>,
}

/// A host's failure history: `failures` failure episodes began in
/// `up_secs` seconds of up time. Read as a Poisson process of unknown rate
/// λ observed for `up_secs`, with Jeffreys' prior (∝ λ^−½, the reference
/// prior for a Poisson rate: no constant to choose), λ's posterior is
/// Gamma(failures + ½, rate `up_secs`). Each Monte Carlo run draws the
/// host's λ from it; the run's failures after a return, and beyond the
/// last window the curve answers for, come at that rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PastFailures {
    pub up_secs: f64,
    pub failures: u32,
}

impl From<PastSpells> for PastFailures {
    fn from(spells: PastSpells) -> PastFailures {
        PastFailures {
            up_secs: spells.usable_secs,
            failures: spells.episodes,
        }
    }
}

impl PastFailures {
    /// The mean time between failures this past implies: up time over the
    /// failures plus one half (the inverse of the posterior's mean rate,
    /// as [`Self::draw_rate`] draws it); `None` without up time.
    pub fn mttf(&self) -> Option<f64> {
        (self.up_secs.is_finite() && self.up_secs > 0.0)
            .then(|| self.up_secs / (f64::from(self.failures) + 0.5))
    }

    /// One draw of the failure rate (per second) from its posterior;
    /// `None` when there is no up time to judge from.
    pub fn draw_rate<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<f64> {
        if !(self.up_secs.is_finite() && self.up_secs > 0.0) {
            return None;
        }
        Some(gamma(f64::from(self.failures) + 0.5, rng) / self.up_secs)
    }
}

/// The MTTF a host's checkpoint interval is chosen with (Young/Daly's M):
/// its curve's, or where the curve never fails (a flat tail: M infinite,
/// so no checkpoint at all), what its past implies. A curve's tail says
/// only that no failure was seen in the windows it learnt from; a host
/// whose past holds failures will fail again, and a task of days placed
/// there would otherwise restart from zero.
pub fn checkpoint_mttf(curve: &TrCurve, past: Option<&PastFailures>) -> f64 {
    let m = curve.mttf();
    if m.is_finite() {
        return m;
    }
    past.and_then(PastFailures::mttf).unwrap_or(m)
}

/// A task of ours already running.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunningTask {
    /// Index into the hosts.
    pub host: usize,
    /// Reference seconds of work left (on a dedicated host with P = 1).
    pub remaining_secs: f64,
}

/// Everything one estimate needs.
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateInput<'a> {
    pub hosts: &'a [EstimateHost],
    pub running: &'a [RunningTask],
    /// Reference runtimes of the waiting tasks, in the order they were queued.
    pub waiting: &'a [f64],
    /// Place the longest waiting task first (LPT) instead of queue order.
    pub longest_first: bool,
    pub runs: usize,
    /// How far a task's true runtime may lie from its estimate: the σ of
    /// ln(true / estimate) (e.g. [`super::runtime::RuntimeEstimate::sigma_log`]).
    /// Each run then draws every task's runtime as estimate · e^{σz − σ²/2}
    /// (mean-preserving); `None` or 0: runtimes are exact.
    pub runtime_sigma_log: Option<f64>,
    /// Waiting tasks held for a later window on one host (the batch
    /// queue's holds, issue 28): each waits for its window rather than
    /// being placed by the rule (see [`held`]).
    pub held: &'a [HeldWindow],
}

impl Default for EstimateInput<'_> {
    /// No hosts, no tasks, longest first, 200 runs, exact runtimes.
    fn default() -> Self {
        EstimateInput {
            hosts: &[],
            running: &[],
            waiting: &[],
            longest_first: true,
            runs: 200,
            runtime_sigma_log: None,
            held: &[],
        }
    }
}

/// p10, p50, p90 and the mean of a quantity over the runs, seconds from now.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub mean: f64,
}

/// The estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Wall seconds until the last task ends.
    pub makespan: Quantiles,
    /// Each task's end: the running tasks first (in input order), then the waiting ones.
    pub task_eta: Vec<Quantiles>,
    pub runs: usize,
    /// Runs that gave up on a task (see [`MAX_ATTEMPTS`]); their makespan is infinite.
    pub unfinished_runs: usize,
    /// Attempts hit by a failure, per run on average (what the estimate
    /// expects the batch to lose; compare with the kills it then suffers).
    #[serde(default)]
    pub mean_failures: f64,
}

impl Estimate {
    /// The probability that the batch ends within `secs` from now.
    pub fn p_within(&self, makespans: &[f64], secs: f64) -> f64 {
        if makespans.is_empty() {
            return 0.0;
        }
        makespans.iter().filter(|m| **m <= secs).count() as f64 / makespans.len() as f64
    }
}

/// Why no estimate was made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EstimateError {
    #[error("{what} is {got}; at most {max} are allowed")]
    TooMany {
        what: &'static str,
        got: usize,
        max: usize,
    },
    #[error("at least one Monte Carlo run is needed")]
    NoRuns,
    #[error("the pool has no host")]
    NoHosts,
    #[error("running task {task} names host {host}, but there are {hosts} hosts")]
    BadHost {
        task: usize,
        host: usize,
        hosts: usize,
    },
    #[error("task {task} has runtime {runtime}: runtimes must be finite and non-negative")]
    BadRuntime { task: usize, runtime: f64 },
    #[error("the runtime spread {0} must be finite and between 0 and 5")]
    BadSpread(f64),
    #[error("host {host}'s past days are refused: {why}")]
    BadPastDays { host: usize, why: &'static str },
    #[error("hold {hold} is refused: {why}")]
    BadHold { hold: usize, why: &'static str },
}

/// Runs the estimate. Deterministic for a given RNG state, which gives the
/// estimate one seed (see [`EstimatePlan`]); the runs are made here, one
/// after the other (a caller with threads splits them with the plan).
pub fn estimate<R: Rng + ?Sized>(
    input: &EstimateInput<'_>,
    rng: &mut R,
) -> Result<(Estimate, Vec<f64>), EstimateError> {
    let plan = EstimatePlan::new(input, rng)?;
    let part = plan.runs(0..plan.run_count());
    Ok(plan.finish(vec![part]))
}
