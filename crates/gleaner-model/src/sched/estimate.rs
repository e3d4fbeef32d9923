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

use super::curve::{FailureSampler, PreparedCurve, TrCurve};
use super::place::{by_slowdown, HostView, Rule, Turnarounds};
use super::spells::{PastSpells, SpellLengths};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::f64::consts::PI;

mod held;
pub use held::HeldWindow;
use held::Hold;

/// Most Monte Carlo runs one estimate makes.
pub const MAX_RUNS: usize = 100_000;
/// Most tasks (running and waiting) one estimate takes.
pub const MAX_TASKS: usize = 1_000_000;
/// Most hosts one estimate takes.
pub const MAX_HOSTS: usize = 100_000;
/// Attempts per task after which a run gives up on it (a task no host can
/// finish would otherwise be retried forever); the run then counts as unfinished.
pub const MAX_ATTEMPTS: u32 = 1_000;
/// Most (task, host) expected turnarounds kept between runs.
const MEMO_LIMIT: usize = 4_000_000;

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
    /// [`rest_of_outage`]): a host found down is more likely in a long
    /// outage than a fresh failure is, the longer it has been down the
    /// longer it is likely to stay, and how long is what the past leaves
    /// unknown; without them it is away for `busy_secs`. Either way its
    /// first failure after the return is drawn as after any return (from
    /// its up-spells or its rate), not from the curve.
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
    /// them (see [`SpellBootstrap`]) instead of drawn as an exponential
    /// at the past's rate and a fixed recovery. `None`: those.
    #[serde(default)]
    pub spells: Option<SpellLengths>,
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
    #[error("hold {hold} is refused: {why}")]
    BadHold { hold: usize, why: &'static str },
}

/// What happens at an event. Indices are u32 (within [`MAX_TASKS`] and
/// [`MAX_HOSTS`]) and a failure's saved share sits in `Run::saved`, so an
/// event is 32 bytes, not 48: the heap moves events on every pop and push,
/// hundreds of millions of them in an estimate at 1,000 hosts.
#[derive(Debug, Clone, Copy)]
enum EventKind {
    /// Task ended on host.
    Finish { task: u32, host: u32 },
    /// Task's attempt was hit on host, keeping `Run::saved[task]` of its work.
    Fail { task: u32, host: u32 },
    /// Host is free again (its own work or its recovery ended); stale
    /// unless its epoch still matches (a held window took the host first).
    HostFree { host: u32, epoch: u32 },
    /// An idle host's failure time came (stale unless its epoch still matches).
    HostDown { host: u32, epoch: u32 },
    /// A held task's window opened (an index into the plan's holds).
    Window { hold: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed, so the max-heap pops the earliest event first. At one
    /// instant a held window comes first: a host free at that instant is
    /// its window's, not the rule's to hand to another task.
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        let window = |e: &Event| matches!(e.kind, EventKind::Window { .. });
        other
            .time
            .total_cmp(&self.time)
            .then(window(self).cmp(&window(other)))
            .then(other.seq.cmp(&self.seq))
    }
}

/// What a run needs of each host, computed once per estimate.
struct HostFacts {
    /// SP = 1/Γ (infinite when the host cannot run anything).
    slowdown: f64,
    /// Runs this long or longer can never succeed here (TR below 1e-12).
    horizon: f64,
    sampler: FailureSampler,
    /// The host's curve, laid out for the rule's expected turnarounds.
    curve: PreparedCurve,
    recovery: f64,
    past: Option<PastFailures>,
    /// The curve's last window and its TR there: beyond it, a host with a
    /// known failure rate fails at that rate (see [`Run::first_failure`]).
    curve_end: (f64, f64),
    checkpoint: f64,
    checkpoint_cost: f64,
    bootstrap: Option<SpellBootstrap>,
}

/// A host's past spells made ready for resampling after each return: a
/// Bayesian bootstrap (Rubin, 1981). Each run has weights for the seen
/// spells from a Dirichlet with one unit per spell and half a unit for a
/// spell unlike any seen, drawn from the fallback (for an up-spell, the
/// exponential at the run's posterior rate; for an outage, the mean
/// recovery). The half unit is the Jeffreys prior's half failure that
/// [`PastFailures`] already adds: a host with no whole spell always falls
/// back, one with two does a fifth of the time, one with thirty rarely.
/// Per-run weights carry what the past leaves unknown, as the per-run
/// rate does: a week of few spells widens the band, a long one does not.
/// Spells are drawn independently (a renewal process): their order is
/// not kept, only their lengths.
///
/// The weights are never drawn: picks made with Dirichlet(α) weights
/// drawn once per run are, in law, a Pólya urn with initial masses α
/// (each pick is one of α's by mass with chance A / (A + m), A = Σα,
/// else a copy of one of the run's m earlier picks, uniformly), so a run
/// pays one uniform per pick ([`SpellUrn`]) rather than a gamma draw per
/// spell per host (27 % of the estimate with 32 + 32 spells per host).
#[derive(Debug, Clone, PartialEq)]
struct SpellBootstrap {
    /// (length, spells it stands for, cut by the span's edge: lasted at
    /// least this long, and then at the run's rate).
    up: Vec<(f64, f64, bool)>,
    /// (length, outages it stands for).
    outages: Vec<(f64, f64)>,
    /// The urn's initial masses, cumulative: the fallback's first (index
    /// 0), then each up-spell's.
    up_mass: Vec<f64>,
    /// The same over the outages.
    outage_mass: Vec<f64>,
}

/// Pseudo-spells the fallback counts for in a [`SpellBootstrap`].
const FALLBACK_WEIGHT: f64 = 0.5;

/// Longest rest of an outage a run draws (a year): the Lindy draw's tail
/// is unbounded, and a host away that long takes no part in any batch.
const MAX_REST_SECS: f64 = 365.0 * 86_400.0;

/// The rest of an outage already `elapsed` seconds long: one of the past
/// outages longer than that (by their counts), less `elapsed`; or, with
/// the fallback's half unit (and always when every past outage was
/// shorter), a Lindy draw: P(rest > r) = elapsed / (elapsed + r), an
/// outage that has lasted `elapsed` lasting as long again in the median.
/// The past outages are weighed as seen, not by length: the elapsed time
/// already conditions on the outage being in progress.
fn rest_of_outage<R: Rng + ?Sized>(b: &SpellBootstrap, elapsed: f64, rng: &mut R) -> f64 {
    let longer = || b.outages.iter().filter(move |o| o.0 > elapsed);
    let mass: f64 = longer().map(|o| o.1).sum();
    let mut x = rng.random::<f64>() * (mass + FALLBACK_WEIGHT);
    for &(len, count) in longer() {
        if x < count {
            return len - elapsed;
        }
        x -= count;
    }
    let u = rng.random::<f64>();
    (elapsed * u / (1.0 - u)).min(MAX_REST_SECS)
}

impl SpellBootstrap {
    /// From checked spells: lengths finite and positive, counts shared
    /// among the points that stand for them. `None` with nothing to draw.
    fn new(spells: &SpellLengths) -> Option<SpellBootstrap> {
        let ok = |x: &f64| x.is_finite() && *x > 0.0;
        let share = |seen: u32, kept: usize| {
            if kept == 0 {
                0.0
            } else {
                (f64::from(seen) / kept as f64).max(1.0)
            }
        };
        let up_each = share(spells.up_seen, spells.up.len());
        let mut up: Vec<(f64, f64, bool)> = spells
            .up
            .iter()
            .filter(|x| ok(x))
            .map(|&x| (x, up_each, false))
            .collect();
        up.extend(
            spells
                .up_cut
                .iter()
                .filter(|x| ok(x))
                .map(|&x| (x, 1.0, true)),
        );
        let out_each = share(spells.outages_seen, spells.outages.len());
        let outages: Vec<(f64, f64)> = spells
            .outages
            .iter()
            .filter(|x| ok(x))
            .map(|&x| (x, out_each))
            .collect();
        if up.is_empty() && outages.is_empty() {
            return None;
        }
        let cumulative = |counts: &mut dyn Iterator<Item = f64>| {
            let mut total = FALLBACK_WEIGHT;
            let mut cum = vec![total];
            for c in counts {
                total += c;
                cum.push(total);
            }
            cum
        };
        let up_mass = cumulative(&mut up.iter().map(|s| s.1));
        let outage_mass = cumulative(&mut outages.iter().map(|s| s.1));
        Some(SpellBootstrap {
            up,
            outages,
            up_mass,
            outage_mass,
        })
    }
}

/// One run's picks so far from a host's [`SpellBootstrap`] (indices into
/// its masses, 0: the fallback): the Pólya urn that stands for the run's
/// Dirichlet weights. Emptied at the start of every run.
#[derive(Debug, Clone, Default)]
struct SpellUrn {
    up: Vec<u32>,
    outages: Vec<u32>,
}

impl SpellUrn {
    fn clear(&mut self) {
        self.up.clear();
        self.outages.clear();
    }

    /// The next pick from the urn of initial masses `mass` (cumulative)
    /// and earlier picks `picked`, which it joins.
    fn pick<R: Rng + ?Sized>(mass: &[f64], picked: &mut Vec<u32>, rng: &mut R) -> usize {
        let Some(&initial) = mass.last() else {
            return 0;
        };
        let x = rng.random::<f64>() * (initial + picked.len() as f64);
        let i = if x < initial {
            mass.partition_point(|&c| c <= x).min(mass.len() - 1)
        } else {
            let k = ((x - initial) as usize).min(picked.len() - 1);
            picked[k] as usize
        };
        picked.push(i as u32);
        i
    }
}

impl HostFacts {
    fn new(host: &EstimateHost) -> HostFacts {
        HostFacts {
            slowdown: host.view.expected_run_secs(1.0),
            horizon: host
                .view
                .curve
                .failure_time_at(1e-12)
                .unwrap_or(f64::INFINITY),
            sampler: FailureSampler::new(&host.view.curve),
            curve: PreparedCurve::new(&host.view.curve),
            recovery: host.recovery_secs.max(0.0),
            past: host
                .past
                .filter(|p| p.up_secs.is_finite() && p.up_secs > 0.0),
            curve_end: host
                .view
                .curve
                .points()
                .last()
                .copied()
                .unwrap_or((0.0, 1.0)),
            checkpoint: host.checkpoint_secs.max(0.0),
            checkpoint_cost: if host.checkpoint_cost_secs.is_finite() {
                host.checkpoint_cost_secs.max(0.0)
            } else {
                0.0
            },
            bootstrap: host.spells.as_ref().and_then(SpellBootstrap::new),
        }
    }

    /// This run's failure rate after a return, drawn from the past's
    /// posterior; `None`: redraw from the curve.
    fn draw_rate<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<f64> {
        self.past.and_then(|p| p.draw_rate(rng))
    }

    /// [`HostView::expected_turnaround`] of a task of `runtime` reference
    /// seconds, bit for bit (`slowdown` is `expected_run_secs(1.0)`).
    fn expected_turnaround(&self, runtime: f64) -> f64 {
        let run = runtime * self.slowdown;
        if run.is_finite() {
            self.curve.expected_time_with_restarts(run)
        } else {
            f64::INFINITY
        }
    }

    /// Whether a task of `runtime` reference seconds can succeed here at
    /// all (its expected turnaround is finite).
    fn can_run(&self, runtime: f64) -> bool {
        fits(runtime, self.slowdown, self.horizon)
    }
}

/// Whether a task of `runtime` reference seconds can succeed on a host of
/// this slowdown and horizon: [`HostFacts::can_run`], and what the
/// rule's bulk asks of each free host (`QueueTurnarounds::can_run`).
fn fits(runtime: f64, slowdown: f64, horizon: f64) -> bool {
    let run = runtime * slowdown;
    run.is_finite() && run < horizon
}

/// Expected turnarounds of (task, host), computed when first asked and
/// shared by the runs; rows are made only for the tasks the rule weighs
/// (those near the batch's tail), up to [`MEMO_LIMIT`] cells. A row the
/// rule looks for the best free host in is also ranked once: its hosts by
/// turnaround, so that the search walks the ranking to the first free
/// host instead of asking every free one (most of the estimate's time at
/// 1,000 hosts, where each failure makes the rule look again).
///
/// A task resumed from a checkpoint (or one with no room left for a row)
/// has its row in one of [`SPARE_ROWS`] spare rows, keyed by the task and
/// the work it has left: that work is particular to a run, but the rule
/// asks about the same few tasks at the queue's head after every failure
/// while they wait, and with checkpoints at this scale most of the tail's
/// tasks are resumed ones.
struct Memo<'a> {
    hosts: &'a [HostFacts],
    runtimes: Vec<f64>,
    row_of: Vec<u32>,
    cells: Vec<f64>,
    /// Per row: whether it is ranked yet (`Unranked`), and whether it can be.
    ranking: Vec<Ranking>,
    /// Per ranked row, its hosts by turnaround (as `cells`, one per host).
    ranked: Vec<u32>,
    /// The spare rows, a task's at `task % SPARE_ROWS`.
    spare: Vec<SpareRow>,
}

/// Spare memo rows (see [`Memo`]): a few more than the tasks the rule
/// weighs at once ([`super::place::LOOKAHEAD`] and one further down).
const SPARE_ROWS: usize = 64;

/// A memo row for (task, work left) outside the main rows.
struct SpareRow {
    /// The task (`u32::MAX`: none yet) and the work left it is for.
    task: u32,
    left: f64,
    cells: Vec<f64>,
    /// Rankings asked for since the row was taken over.
    asks: u32,
    ranking: Ranking,
    ranked: Vec<u32>,
}

/// Rankings a spare row is asked for before it is ranked: a resumed task
/// often leaves the queue's head after a few looks (it is placed, or hit
/// again with new work left), and ranking a row (a sort of every host)
/// costs as much as a few dozen scans of the free hosts.
const SPARE_ASKS_BEFORE_RANKING: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ranking {
    Unranked,
    Ranked,
    /// Some host's turnaround lies below the rule's lower bound (rounding
    /// on a curve that never fails, say): the rule's scan stops early
    /// there, so only the scan gives its answer.
    Unrankable,
}

/// Where a (task, work left)'s memo row is.
#[derive(Clone, Copy)]
enum Loc {
    Main(usize),
    Spare(usize),
}

impl<'a> Memo<'a> {
    fn new(hosts: &'a [HostFacts], runtimes: &[f64]) -> Memo<'a> {
        Memo {
            hosts,
            runtimes: runtimes.to_vec(),
            row_of: vec![u32::MAX; runtimes.len()],
            cells: Vec::new(),
            ranking: Vec::new(),
            ranked: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// The row of `task` with `left` reference seconds of it to do: its
    /// main row when it has not begun (made if there is room), else its
    /// spare row, taken over (emptied) if it held another.
    fn locate(&mut self, task: usize, left: f64) -> Loc {
        let n = self.hosts.len();
        if left == self.runtimes[task] {
            let mut row = self.row_of[task];
            if row == u32::MAX && self.cells.len() + n <= MEMO_LIMIT {
                row = (self.cells.len() / n) as u32;
                self.row_of[task] = row;
                self.cells.resize(self.cells.len() + n, f64::NAN);
                self.ranking.push(Ranking::Unranked);
            }
            if row != u32::MAX {
                return Loc::Main(row as usize);
            }
        }
        if self.spare.is_empty() {
            self.spare = (0..SPARE_ROWS)
                .map(|_| SpareRow {
                    task: u32::MAX,
                    left: f64::NAN,
                    cells: vec![f64::NAN; n],
                    asks: 0,
                    ranking: Ranking::Unranked,
                    ranked: Vec::new(),
                })
                .collect();
        }
        let slot = task % SPARE_ROWS;
        let spare = &mut self.spare[slot];
        if spare.task != task as u32 || spare.left.to_bits() != left.to_bits() {
            spare.task = task as u32;
            spare.left = left;
            spare.cells.iter_mut().for_each(|c| *c = f64::NAN);
            spare.asks = 0;
            spare.ranking = Ranking::Unranked;
        }
        Loc::Spare(slot)
    }

    /// The expected turnaround of `task`, with `left` reference seconds
    /// of it to do, on `host`.
    fn get(&mut self, task: usize, left: f64, host: usize) -> f64 {
        let n = self.hosts.len();
        let cell = match self.locate(task, left) {
            Loc::Main(row) => &mut self.cells[row * n + host],
            Loc::Spare(slot) => &mut self.spare[slot].cells[host],
        };
        if cell.is_nan() {
            *cell = self.hosts[host].expected_turnaround(left);
        }
        *cell
    }

    /// `task`'s hosts by expected turnaround with `left` reference seconds
    /// of it to do, least first (ties in the rule's order, infinite ones
    /// last), and its turnarounds by host: see
    /// [`super::place::Turnarounds::ranked`]; `place` is each host's place
    /// in the rule's order, the same in every run. `None` when some host's
    /// turnaround falls below the rule's bound, or for a spare row not yet
    /// asked for often enough.
    fn ranked(&mut self, task: usize, left: f64, place: &[u32]) -> Option<(&[u32], &[f64])> {
        let n = self.hosts.len();
        let loc = self.locate(task, left);
        let (cells, ranking, ranked) = match loc {
            Loc::Main(row) => {
                let span = row * n..(row + 1) * n;
                if self.ranked.len() < span.end && self.ranking[row] == Ranking::Unranked {
                    self.ranked.resize(span.end, 0);
                }
                let ranked = self.ranked.get_mut(span.clone()).unwrap_or_default();
                (&mut self.cells[span], &mut self.ranking[row], ranked)
            }
            Loc::Spare(slot) => {
                let spare = &mut self.spare[slot];
                spare.asks = spare.asks.saturating_add(1);
                if spare.asks < SPARE_ASKS_BEFORE_RANKING {
                    return None;
                }
                if spare.ranked.len() < n {
                    spare.ranked.resize(n, 0);
                }
                (
                    &mut spare.cells[..],
                    &mut spare.ranking,
                    &mut spare.ranked[..],
                )
            }
        };
        if *ranking == Ranking::Unranked {
            *ranking = rank(self.hosts, place, left, cells, ranked);
        }
        (*ranking == Ranking::Ranked).then_some((&*ranked, &*cells))
    }
}

/// Fills a memo row's missing `cells` for a task with `left` reference
/// seconds to do and ranks its hosts into `ranked` (by turnaround, ties by
/// `place`, infinite ones last), when every finite turnaround is at least
/// the rule's lower bound (left × SP, see `Run::dispatch`).
fn rank(
    hosts: &[HostFacts],
    place: &[u32],
    left: f64,
    cells: &mut [f64],
    ranked: &mut [u32],
) -> Ranking {
    let mut rankable = ranked.len() == cells.len();
    for (fact, cell) in hosts.iter().zip(cells.iter_mut()) {
        if cell.is_nan() {
            *cell = fact.expected_turnaround(left);
        }
        rankable &= !cell.is_finite() || *cell >= left * fact.slowdown;
    }
    if !rankable {
        return Ranking::Unrankable;
    }
    let key = |h: u32| {
        let t = cells[h as usize];
        if t.is_finite() {
            t
        } else {
            f64::INFINITY
        }
    };
    ranked
        .iter_mut()
        .zip(0u32..)
        .for_each(|(slot, h)| *slot = h);
    ranked.sort_unstable_by(|&a, &b| {
        key(a)
            .total_cmp(&key(b))
            .then(place[a as usize].cmp(&place[b as usize]))
    });
    Ranking::Ranked
}

/// The rule's view of the queue's turnarounds, through the memo.
struct QueueTurnarounds<'r, 'm> {
    memo: &'r mut Memo<'m>,
    queue: &'r VecDeque<usize>,
    /// The estimated work left per task (what the rule plans with).
    runtimes: &'r [f64],
    /// Per host: its place in the rule's order (`Run::rank`), which breaks
    /// ties in a ranking.
    place: &'r [u32],
    /// Per host: (slowdown, horizon), `Run::reach`: whether a task can
    /// run there at all without a memo row or a curve's integral.
    reach: &'r [(f64, f64)],
}

impl Turnarounds for QueueTurnarounds<'_, '_> {
    fn turnaround(&mut self, j: usize, g: usize) -> f64 {
        match self.queue.get(j) {
            Some(&task) => self.memo.get(task, self.runtimes[task], g),
            None => f64::INFINITY,
        }
    }

    /// [`HostFacts::can_run`] off `reach`: in the bulk the rule asks it of
    /// every free host the head passes, at every event, and a memo row
    /// for each head would be made for nothing else.
    fn can_run(&mut self, j: usize, g: usize) -> bool {
        match (self.queue.get(j), self.reach.get(g)) {
            (Some(&task), Some(&(slowdown, horizon))) => {
                fits(self.runtimes[task], slowdown, horizon)
            }
            _ => false,
        }
    }

    fn ranked(&mut self, j: usize) -> Option<(&[u32], &[f64])> {
        let &task = self.queue.get(j)?;
        self.memo.ranked(task, self.runtimes[task], self.place)
    }
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

/// An estimate checked and prepared, whose Monte Carlo runs can be made
/// in any split (`runs(0..k)` and `runs(k..n)` on two threads give what
/// `runs(0..n)` gives): run r draws from its own generator, the plan's
/// seed on stream r, so no run depends on another or on which thread made
/// it. [`Self::finish`] puts the parts together in run order.
pub struct EstimatePlan<'i> {
    input: EstimateInput<'i>,
    runtimes: Vec<f64>,
    queue_order: Vec<usize>,
    facts: Vec<HostFacts>,
    order: Vec<usize>,
    /// The held tasks, which wait for their windows outside the queue.
    holds: Vec<Hold>,
    seed: u64,
}

/// The runs `first..first + makespans.len()` of an [`EstimatePlan`].
pub struct EstimatePart {
    first: usize,
    /// `ends[run * tasks + task]`, runs from `first`.
    ends: Vec<f64>,
    makespans: Vec<f64>,
    unfinished_runs: usize,
    failures: u64,
}

impl<'i> EstimatePlan<'i> {
    /// Checks `input` and takes one seed from `rng`.
    pub fn new<R: Rng + ?Sized>(
        input: &EstimateInput<'i>,
        rng: &mut R,
    ) -> Result<EstimatePlan<'i>, EstimateError> {
        let hosts = input.hosts;
        let n_hosts = hosts.len();
        let n_tasks = input.running.len() + input.waiting.len();
        if input.runs == 0 {
            return Err(EstimateError::NoRuns);
        }
        for (what, got, max) in [
            ("the number of runs", input.runs, MAX_RUNS),
            ("the number of tasks", n_tasks, MAX_TASKS),
            ("the number of hosts", n_hosts, MAX_HOSTS),
        ] {
            if got > max {
                return Err(EstimateError::TooMany { what, got, max });
            }
        }
        if n_hosts == 0 {
            return Err(EstimateError::NoHosts);
        }
        let sigma = input.runtime_sigma_log.unwrap_or(0.0);
        if !(0.0..=5.0).contains(&sigma) {
            return Err(EstimateError::BadSpread(sigma));
        }
        let mut runtimes = Vec::with_capacity(n_tasks);
        for (task, r) in input.running.iter().enumerate() {
            if r.host >= n_hosts {
                return Err(EstimateError::BadHost {
                    task,
                    host: r.host,
                    hosts: n_hosts,
                });
            }
            runtimes.push(r.remaining_secs);
        }
        runtimes.extend_from_slice(input.waiting);
        if let Some((task, &runtime)) = runtimes
            .iter()
            .enumerate()
            .find(|(_, r)| !r.is_finite() || **r < 0.0)
        {
            return Err(EstimateError::BadRuntime { task, runtime });
        }
        let holds = held::checked(
            input.held,
            input.running.len(),
            input.waiting.len(),
            n_hosts,
        )?;
        let mut queue_order: Vec<usize> = (input.running.len()..n_tasks)
            .filter(|&t| !holds.iter().any(|h| h.task == t))
            .collect();
        if input.longest_first {
            queue_order.sort_by(|&a, &b| runtimes[b].total_cmp(&runtimes[a]).then(a.cmp(&b)));
        }
        let facts: Vec<HostFacts> = hosts.iter().map(HostFacts::new).collect();
        let order = by_slowdown(&facts.iter().map(|f| f.slowdown).collect::<Vec<_>>());
        Ok(EstimatePlan {
            input: input.clone(),
            runtimes,
            queue_order,
            facts,
            order,
            holds,
            seed: rng.random(),
        })
    }

    /// The number of Monte Carlo runs.
    pub fn run_count(&self) -> usize {
        self.input.runs
    }

    /// Makes runs `range` (clamped to the plan's runs).
    pub fn runs(&self, range: std::ops::Range<usize>) -> EstimatePart {
        let range = range.start.min(self.input.runs)..range.end.min(self.input.runs);
        let n_tasks = self.runtimes.len();
        let mut memo = Memo::new(&self.facts, &self.runtimes);
        let mut part = EstimatePart {
            first: range.start,
            ends: Vec::with_capacity(range.len() * n_tasks),
            makespans: Vec::with_capacity(range.len()),
            unfinished_runs: 0,
            failures: 0,
        };
        let mut run = Run::new(self.input.hosts.len(), &memo.runtimes);
        run.sigma = self.input.runtime_sigma_log.unwrap_or(0.0);
        run.holds = self.holds.clone();
        for r in range {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
            rng.set_stream(r as u64);
            let finished = run.simulate(
                &self.input,
                &self.facts,
                &self.order,
                &self.queue_order,
                &mut memo,
                &mut rng,
            );
            if finished {
                let makespan = run.end.iter().copied().fold(0.0, f64::max);
                part.makespans.push(makespan);
            } else {
                part.unfinished_runs += 1;
                part.makespans.push(f64::INFINITY);
            }
            part.ends.extend_from_slice(&run.end);
            part.failures += run.failures;
        }
        part
    }

    /// The estimate from parts that together make every run once (in any
    /// order), and the makespan of every run in run order.
    pub fn finish(&self, mut parts: Vec<EstimatePart>) -> (Estimate, Vec<f64>) {
        parts.sort_by_key(|p| p.first);
        let runs = self.input.runs;
        let n_tasks = self.runtimes.len();
        let mut makespans = Vec::with_capacity(runs);
        let mut unfinished_runs = 0;
        let mut failures = 0u64;
        for p in &parts {
            makespans.extend_from_slice(&p.makespans);
            unfinished_runs += p.unfinished_runs;
            failures += p.failures;
        }
        // Per task, its end in every run.
        let mut column = Vec::with_capacity(makespans.len());
        let task_eta = (0..n_tasks)
            .map(|task| {
                column.clear();
                for p in &parts {
                    column.extend(p.ends.iter().skip(task).step_by(n_tasks.max(1)));
                }
                quantiles(&mut column)
            })
            .collect();
        let makespan = quantiles(&mut makespans.clone());
        (
            Estimate {
                makespan,
                task_eta,
                runs,
                unfinished_runs,
                mean_failures: failures as f64 / runs as f64,
            },
            makespans,
        )
    }
}

/// Nearest-rank quantiles of `values` (reordered in place).
fn quantiles(values: &mut [f64]) -> Quantiles {
    if values.is_empty() {
        return Quantiles {
            p10: 0.0,
            p50: 0.0,
            p90: 0.0,
            mean: 0.0,
        };
    }
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n as f64;
    let mut at = |q: f64| {
        let idx = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        *values.select_nth_unstable_by(idx, f64::total_cmp).1
    };
    Quantiles {
        p10: at(0.1),
        p50: at(0.5),
        p90: at(0.9),
        mean,
    }
}

/// The mutable state of one run, reused between runs to spare allocations.
struct Run {
    /// σ of ln(true runtime / estimate) (0: exact).
    sigma: f64,
    /// The estimated work left per task (what the rule plans with: the
    /// estimated runtime, less what checkpoints saved, as the simulator's
    /// and the node's rule weigh a resumed task by its remaining work).
    runtimes: Vec<f64>,
    heap: BinaryHeap<Event>,
    seq: u64,
    queue: VecDeque<usize>,
    /// Reference work left per task, in this run's true runtimes.
    left: Vec<f64>,
    /// This run's true runtime over the estimate, per task.
    factor: Vec<f64>,
    attempts: Vec<u32>,
    /// Per task: the share of its work its pending `Fail` keeps.
    saved: Vec<f64>,
    end: Vec<f64>,
    /// Per host: when it is expected to be free (≤ now: free).
    free_at: Vec<f64>,
    is_free: Vec<bool>,
    /// Per host: its next failure time (infinite: none).
    next_fail: Vec<f64>,
    /// Per host: this run's failure rate after a return and past the
    /// curve's last window (NaN: none known; the curve decides).
    rate: Vec<f64>,
    /// Per host: this run's picks from its past spells (used only for
    /// hosts with a [`SpellBootstrap`]).
    urns: Vec<SpellUrn>,
    /// Per host: bumped when it takes a task, so a pending `HostDown` of
    /// an earlier idle spell is recognised as stale.
    epoch: Vec<u32>,
    /// Free hosts, fastest first (by their place in the rule's order).
    free_list: Vec<usize>,
    /// Per host: its place in the rule's scan order.
    rank: Vec<u32>,
    /// Per host: (slowdown, horizon), [`HostFacts::can_run`]'s inputs laid
    /// side by side: in bulk the free hosts too slow or too unreliable for
    /// the head (hundreds at 1,000 hosts with tasks of half a day) are
    /// passed over at every event.
    reach: Vec<(f64, f64)>,
    /// Hosts that became free since the last dispatch.
    fresh: Vec<usize>,
    /// Hosts that became free since the last dispatch, to be given a
    /// `HostDown` event if they stay idle (not before: most take work at once).
    armed: Vec<usize>,
    /// Something other than a host becoming free changed what the rule
    /// sees (the queue's head, a host's expected wait grew): every free
    /// host must be weighed again, not only the fresh ones.
    recheck_all: bool,
    running: usize,
    /// Per host: one of our attempts runs there.
    ours: Vec<bool>,
    /// The plan's held tasks, which wait for their windows outside the queue.
    holds: Vec<Hold>,
    /// Held tasks whose window has not come yet.
    holds_pending: usize,
    /// Attempts hit in this run.
    failures: u64,
    /// A task ran out of attempts in this run.
    gave_up: bool,
}

impl Run {
    fn new(n_hosts: usize, runtimes: &[f64]) -> Run {
        let n_tasks = runtimes.len();
        Run {
            sigma: 0.0,
            runtimes: runtimes.to_vec(),
            heap: BinaryHeap::with_capacity(2 * n_hosts),
            seq: 0,
            queue: VecDeque::with_capacity(n_tasks),
            left: vec![0.0; n_tasks],
            factor: vec![1.0; n_tasks],
            attempts: vec![0; n_tasks],
            saved: vec![0.0; n_tasks],
            end: vec![0.0; n_tasks],
            free_at: vec![0.0; n_hosts],
            is_free: vec![false; n_hosts],
            next_fail: vec![f64::INFINITY; n_hosts],
            rate: vec![f64::NAN; n_hosts],
            urns: vec![SpellUrn::default(); n_hosts],
            epoch: vec![0; n_hosts],
            free_list: Vec::with_capacity(n_hosts),
            rank: Vec::new(),
            reach: Vec::new(),
            fresh: Vec::with_capacity(n_hosts),
            armed: Vec::with_capacity(n_hosts),
            recheck_all: true,
            running: 0,
            ours: vec![false; n_hosts],
            holds: Vec::new(),
            holds_pending: 0,
            failures: 0,
            gave_up: false,
        }
    }

    fn push(&mut self, time: f64, kind: EventKind) {
        self.seq += 1;
        self.heap.push(Event {
            time,
            seq: self.seq,
            kind,
        });
    }

    /// Host `host` is free from `now`: it can take work, and if it is
    /// still idle after the dispatch and its next failure comes before it
    /// takes any, it goes down then.
    fn host_free(&mut self, host: usize, now: f64) {
        self.is_free[host] = true;
        self.free_at[host] = now;
        let rank = &self.rank;
        let at = self.free_list.partition_point(|&g| rank[g] < rank[host]);
        self.free_list.insert(at, host);
        self.fresh.push(host);
        self.armed.push(host);
    }

    fn remove_free(&mut self, host: usize) {
        let rank = &self.rank;
        let at = self.free_list.partition_point(|&g| rank[g] < rank[host]);
        if self.free_list.get(at) == Some(&host) {
            self.free_list.remove(at);
        }
    }

    /// Host `host` failed at `now`: it is away for its recovery, and its
    /// next failure is drawn from its return: from its past up-spells when
    /// known (the curve describes a host that has been up in its present
    /// state, not one just back from a failure; restarting the curve after
    /// every return repeats its early hazard and overcounted failures 1.85×
    /// on the shared traces), else from the curve.
    fn host_failed<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        host: usize,
        now: f64,
        rng: &mut R,
    ) {
        let back = now + self.outage(facts, host, rng);
        self.free_at[host] = back;
        self.next_fail[host] = back + self.up_spell(facts, host, rng);
        let epoch = self.epoch[host];
        self.push(
            back,
            EventKind::HostFree {
                host: host as u32,
                epoch,
            },
        );
        self.recheck_all = true;
    }

    /// How long a failure keeps `host` away: one of its past outages
    /// drawn by this run's weights, or its mean recovery.
    fn outage<R: Rng + ?Sized>(&mut self, facts: &[HostFacts], host: usize, rng: &mut R) -> f64 {
        let fact = &facts[host];
        if let Some(b) = &fact.bootstrap {
            let i = SpellUrn::pick(&b.outage_mass, &mut self.urns[host].outages, rng);
            if i > 0 {
                return b.outages[i - 1].0;
            }
        }
        fact.recovery
    }

    /// How long `host` stays up after a return: one of its past
    /// up-spells drawn by this run's weights (a cut one lasts at least its
    /// length, then at the run's rate), or an exponential at the run's
    /// rate, or without a past a draw from the curve.
    fn up_spell<R: Rng + ?Sized>(&mut self, facts: &[HostFacts], host: usize, rng: &mut R) -> f64 {
        let fact = &facts[host];
        let rate = self.rate[host];
        let tail = |rng: &mut R| {
            if rate.is_nan() {
                fact.sampler.sample(rng).unwrap_or(f64::INFINITY)
            } else {
                exponential(rate, rng)
            }
        };
        if let Some(b) = &fact.bootstrap {
            let i = SpellUrn::pick(&b.up_mass, &mut self.urns[host].up, rng);
            if i > 0 {
                let (len, _, cut) = b.up[i - 1];
                return if cut { len + tail(rng) } else { len };
            }
        }
        tail(rng)
    }

    /// The host's first failure, seconds from when its clock starts: from
    /// its curve up to the curve's last window; a draw beyond it (where the
    /// curve only extrapolates its last segment, flat for a host that
    /// looked safe then) comes at the run's rate from the host's past,
    /// when known.
    fn first_failure<R: Rng + ?Sized>(&self, fact: &HostFacts, host: usize, rng: &mut R) -> f64 {
        let u = rng.random::<f64>();
        let (last, tr_last) = fact.curve_end;
        let rate = self.rate[host];
        if !rate.is_nan() && u < tr_last {
            last + exponential(rate, rng)
        } else {
            fact.sampler.failure_time_at(u).unwrap_or(f64::INFINITY)
        }
    }

    /// Starts an attempt of `task` on `host` at `now`: its end, or its
    /// failure when the host's next failure comes first. With checkpoints
    /// the task writes one after every `checkpoint` seconds of work (wall
    /// seconds at the host's expected speed) and each adds its cost to the
    /// run, as the simulator and the guest contract have it.
    fn start(&mut self, facts: &[HostFacts], task: usize, host: usize, now: f64) {
        let fact = &facts[host];
        let work = self.left[task] * fact.slowdown;
        let (tau, cost) = (fact.checkpoint, fact.checkpoint_cost);
        let checkpoints = checkpoints_in(work, tau);
        let run = work + checkpoints as f64 * cost;
        self.ours[host] = true;
        self.attempts[task] += 1;
        self.gave_up |= self.attempts[task] > MAX_ATTEMPTS;
        self.is_free[host] = false;
        self.epoch[host] = self.epoch[host].wrapping_add(1);
        self.running += 1;
        // The rule plans with the estimate, not with this run's truth.
        let planned = self.left[task] / self.factor[task].max(f64::MIN_POSITIVE);
        self.free_at[host] = now + planned * fact.slowdown;
        let f = self.next_fail[host] - now;
        if f < run {
            // Blocks of work and checkpoint written before the failure.
            let blocks = if checkpoints > 0 {
                ((f / (tau + cost)).floor() as u64).min(checkpoints)
            } else {
                0
            };
            let saved = if blocks > 0 {
                (blocks as f64 * tau / work).clamp(0.0, 1.0)
            } else {
                0.0
            };
            self.saved[task] = saved;
            let (task, host) = (task as u32, host as u32);
            self.push(now + f, EventKind::Fail { task, host });
        } else {
            let (task, host) = (task as u32, host as u32);
            self.push(now + run, EventKind::Finish { task, host });
        }
    }

    /// Wall seconds an attempt of `task` on a host with `fact` would take
    /// in this run ([`Self::start`]'s: its work and its checkpoints).
    fn attempt_secs(&self, fact: &HostFacts, task: usize) -> f64 {
        let work = self.left[task] * fact.slowdown;
        work + checkpoints_in(work, fact.checkpoint) as f64 * fact.checkpoint_cost
    }

    /// One Monte Carlo run; false when a task ran out of attempts.
    fn simulate<R: Rng + ?Sized>(
        &mut self,
        input: &EstimateInput<'_>,
        facts: &[HostFacts],
        order: &[usize],
        queue_order: &[usize],
        memo: &mut Memo<'_>,
        rng: &mut R,
    ) -> bool {
        // Alg. 1:1-2: duplicate the state; t0 = 0.
        self.heap.clear();
        self.seq = 0;
        self.gave_up = false;
        self.running = 0;
        self.failures = 0;
        self.recheck_all = true;
        self.queue.clear();
        self.queue.extend(queue_order.iter().copied());
        let sigma = self.sigma;
        if sigma > 0.0 {
            for task in 0..self.left.len() {
                let factor = (sigma * standard_normal(rng) - sigma * sigma / 2.0).exp();
                self.factor[task] = factor;
                self.left[task] = memo.runtimes[task] * factor;
            }
        } else {
            self.factor.iter_mut().for_each(|f| *f = 1.0);
            self.left.copy_from_slice(&memo.runtimes);
        }
        self.runtimes.copy_from_slice(&memo.runtimes);
        self.attempts.iter_mut().for_each(|a| *a = 0);
        // A task the run never ends (it gave up) ends never, not at 0.
        self.end.iter_mut().for_each(|e| *e = f64::INFINITY);
        self.ours.iter_mut().for_each(|o| *o = false);
        self.free_list.clear();
        self.fresh.clear();
        self.armed.clear();
        if self.rank.len() != order.len() {
            self.rank = vec![0; order.len()];
            for (i, &h) in order.iter().enumerate() {
                self.rank[h] = i as u32;
            }
        }
        if self.reach.len() != facts.len() {
            self.reach = facts.iter().map(|f| (f.slowdown, f.horizon)).collect();
        }
        for (h, host) in input.hosts.iter().enumerate() {
            self.rate[h] = facts[h].draw_rate(rng).unwrap_or(f64::NAN);
            self.urns[h].clear();
            // Each host's failure clock starts when it is first free.
            let down = host.down_secs.is_finite() && host.down_secs > 0.0;
            let from = match facts[h].bootstrap.as_ref() {
                Some(b) if down => rest_of_outage(b, host.down_secs, rng),
                _ => host.busy_secs.max(0.0),
            };
            self.next_fail[h] = if down {
                from + self.up_spell(facts, h, rng)
            } else {
                from + self.first_failure(&facts[h], h, rng)
            };
            if from <= 0.0 {
                self.host_free(h, 0.0);
            } else {
                self.is_free[h] = false;
                self.free_at[h] = from;
                let epoch = self.epoch[h];
                self.push(
                    from,
                    EventKind::HostFree {
                        host: h as u32,
                        epoch,
                    },
                );
            }
        }
        for (task, r) in input.running.iter().enumerate() {
            if self.is_free[r.host] {
                self.remove_free(r.host);
                self.start(facts, task, r.host, 0.0);
            } else {
                // Two of our tasks on one host cannot be: queue the extra one.
                self.queue.push_front(task);
            }
        }
        self.arm_holds();
        let mut now = 0.0;
        loop {
            // Alg. 1:8-13: free hosts take waiting tasks by the proactive rule.
            self.dispatch(facts, order, memo, now);
            if self.gave_up {
                return false;
            }
            if self.queue.is_empty() && self.running == 0 && self.holds_pending == 0 {
                return true;
            }
            // Alg. 1:3-6: the next event; nothing left to happen ends the run.
            let Some(event) = self.heap.pop() else {
                return self.queue.is_empty();
            };
            now = event.time;
            match event.kind {
                EventKind::Finish { task, host } => {
                    let (task, host) = (task as usize, host as usize);
                    self.running -= 1;
                    self.ours[host] = false;
                    self.end[task] = now;
                    self.left[task] = 0.0;
                    self.host_free(host, now);
                }
                EventKind::Fail { task, host } => {
                    let (task, host) = (task as usize, host as usize);
                    let saved = self.saved[task];
                    self.running -= 1;
                    self.ours[host] = false;
                    self.failures += 1;
                    self.left[task] *= 1.0 - saved;
                    self.runtimes[task] *= 1.0 - saved;
                    self.queue.push_front(task);
                    self.host_failed(facts, host, now, rng);
                }
                EventKind::HostFree { host, epoch } => {
                    let host = host as usize;
                    if self.epoch[host] == epoch {
                        self.host_free(host, now);
                    }
                }
                EventKind::Window { hold } => {
                    if let Some(&hold) = self.holds.get(hold as usize) {
                        self.window(facts, &hold, now, rng);
                    }
                }
                EventKind::HostDown { host, epoch } => {
                    let host = host as usize;
                    if self.is_free[host] && self.epoch[host] == epoch {
                        self.is_free[host] = false;
                        self.remove_free(host);
                        self.host_failed(facts, host, now, rng);
                    }
                }
            }
        }
    }

    fn dispatch(&mut self, facts: &[HostFacts], order: &[usize], memo: &mut Memo<'_>, now: f64) {
        while !self.queue.is_empty() && !self.free_list.is_empty() {
            let (free_at, is_free, queue) = (&self.free_at, &self.is_free, &self.queue);
            let runtimes = &self.runtimes;
            let rule = Rule {
                order,
                free_sorted: Some(&self.free_list),
                lower: |j: usize, g: usize| match queue.get(j) {
                    Some(&task) => runtimes[task] * facts[g].slowdown,
                    None => f64::INFINITY,
                },
                free_in: |g: usize| {
                    if is_free[g] {
                        0.0
                    } else {
                        (free_at[g] - now).max(f64::MIN_POSITIVE)
                    }
                },
                queue_len: queue.len(),
            };
            let mut turnarounds = QueueTurnarounds {
                memo,
                queue,
                runtimes,
                place: &self.rank,
                reach: &self.reach,
            };
            let placed = if rule.in_bulk() {
                // The rule's bulk: the head to the first free host that
                // can run it. Entering the tail, everyone idle is weighed.
                self.recheck_all = true;
                rule.pick_pair(&mut turnarounds)
            } else if self.recheck_all {
                let pair = rule.pick_pair(&mut turnarounds);
                if pair.is_none() {
                    self.recheck_all = false;
                    self.fresh.clear();
                }
                pair
            } else {
                // Only the hosts freed since the last look can have
                // changed their answer: time passing only shortens the
                // busy hosts' waits, which makes an idle host's answer no
                // better, and a host taking a task shifts the later tasks
                // forward as it leaves their counts (see `Rule::pick_pair`).
                let mut placed = None;
                while let Some(host) = self.fresh.pop() {
                    if !is_free[host] {
                        continue;
                    }
                    let pick = rule.pick_for_host(host, &mut turnarounds);
                    if let Some(j) = pick {
                        placed = Some((j, host));
                        break;
                    }
                }
                placed
            };
            let Some((j, host)) = placed else {
                break;
            };
            self.remove_free(host);
            let Some(task) = self.queue.remove(j) else {
                break;
            };
            self.start(facts, task, host, now);
        }
        // Hosts still idle go down when their failure time comes.
        while let Some(host) = self.armed.pop() {
            let f = self.next_fail[host];
            if self.is_free[host] && f.is_finite() {
                let epoch = self.epoch[host];
                let host = host as u32;
                self.push(f.max(now), EventKind::HostDown { host, epoch });
            }
        }
        if self.running > 0 || self.queue.is_empty() {
            return;
        }
        let task = self.queue[0];
        if !facts.iter().any(|f| f.can_run(self.runtimes[task])) {
            // No host can ever finish it: the run would go on forever.
            self.gave_up = true;
            return;
        }
        // Every host is free, nothing of ours runs, and still the rule
        // keeps them idle (no finite turnaround anywhere it would take):
        // rather than stall, the best free host takes the head.
        if self.free_list.len() == facts.len() {
            let best = (0..self.free_list.len()).min_by(|&a, &b| {
                let (ha, hb) = (self.free_list[a], self.free_list[b]);
                let left = self.runtimes[task];
                memo.get(task, left, ha)
                    .total_cmp(&memo.get(task, left, hb))
            });
            if let Some(i) = best {
                let host = self.free_list.remove(i);
                self.queue.pop_front();
                self.start(facts, task, host, now);
            }
        }
    }
}

/// Checkpoints written in `work` wall seconds at one every `tau` (0: none):
/// one after each full interval but the last.
fn checkpoints_in(work: f64, tau: f64) -> u64 {
    if tau > 0.0 && work.is_finite() && work > 0.0 {
        ((work / tau).ceil() as u64).saturating_sub(1)
    } else {
        0
    }
}

/// One exponential draw of rate `rate` (infinite for rate 0).
fn exponential<R: Rng + ?Sized>(rate: f64, rng: &mut R) -> f64 {
    let e = -(1.0 - rng.random::<f64>()).ln();
    if rate > 0.0 {
        e / rate
    } else {
        f64::INFINITY
    }
}

/// One draw from Gamma(`shape`, rate 1) (Marsaglia and Tsang, 2000; for
/// shape < 1 boosted by U^{1/shape}).
fn gamma<R: Rng + ?Sized>(shape: f64, rng: &mut R) -> f64 {
    if !(shape > 0.0 && shape.is_finite()) {
        return 0.0;
    }
    if shape < 1.0 {
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        return gamma(shape + 1.0, rng) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = standard_normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// One standard normal draw (Box-Muller).
fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::curve::TrCurve;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn host(power: f64, curve: TrCurve) -> EstimateHost {
        EstimateHost {
            view: HostView {
                power,
                availability: 1.0,
                curve,
            },
            busy_secs: 0.0,
            recovery_secs: 0.0,
            down_secs: 0.0,
            past: None,
            checkpoint_secs: 0.0,
            checkpoint_cost_secs: 0.0,
            spells: None,
        }
    }

    /// The rule through the memo's ranked rows answers as the rule's scan
    /// of every host does, on random pools: hosts that never fail, fail
    /// at a rate, or cannot finish long tasks at all; tasks fresh and
    /// resumed (spare rows, ranked only after repeated asks); free, busy
    /// and long-busy hosts; queues in the bulk, where the estimate answers
    /// whether a host can run the head from its horizon and the scan from
    /// the turnaround. The simulator's byte-identical reports are the
    /// other check; this one names the pool when it fails.
    #[test]
    fn the_ranked_rows_answer_as_the_scan_does() {
        use crate::sched::place::Scan;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for pool in 0..300 {
            let n = rng.random_range(2..40);
            let hosts: Vec<EstimateHost> = (0..n)
                .map(|_| {
                    let curve = match rng.random_range(0..3) {
                        0 => TrCurve::never_fails(),
                        1 => TrCurve::exponential(rng.random_range(600.0..200_000.0)),
                        _ => TrCurve::new([(1_000.0, 0.5), (5_000.0, 1e-15)]),
                    };
                    let mut h = host(rng.random_range(0.2..1.0), curve);
                    h.view.availability = rng.random_range(0.3..1.0);
                    h
                })
                .collect();
            let facts: Vec<HostFacts> = hosts.iter().map(HostFacts::new).collect();
            let order = by_slowdown(&facts.iter().map(|f| f.slowdown).collect::<Vec<_>>());
            let mut rank = vec![0u32; n];
            for (i, &h) in order.iter().enumerate() {
                rank[h] = i as u32;
            }
            let m = rng.random_range(1..30);
            let runtimes: Vec<f64> = (0..m).map(|_| rng.random_range(100.0..20_000.0)).collect();
            // Work left: a third resumed from a checkpoint.
            let left: Vec<f64> = runtimes
                .iter()
                .map(|&r| {
                    if rng.random_range(0..3) == 0 {
                        r * rng.random_range(0.1..0.9)
                    } else {
                        r
                    }
                })
                .collect();
            let queue: VecDeque<usize> = (0..m).filter(|_| rng.random_range(0..4) > 0).collect();
            let wait: Vec<f64> = (0..n)
                .map(|_| match rng.random_range(0..3) {
                    0 => 0.0,
                    1 => rng.random_range(1.0..5_000.0),
                    _ => rng.random_range(5_000.0..500_000.0),
                })
                .collect();
            let mut free: Vec<usize> = (0..n).filter(|&g| wait[g] == 0.0).collect();
            free.sort_by_key(|&g| rank[g]);
            let rule = Rule {
                order: &order,
                free_sorted: Some(&free),
                lower: |j: usize, g: usize| match queue.get(j) {
                    Some(&task) => left[task] * facts[g].slowdown,
                    None => f64::INFINITY,
                },
                free_in: |g: usize| wait[g],
                queue_len: queue.len(),
            };
            let mut scan = Scan(|j: usize, g: usize| match queue.get(j) {
                Some(&task) => facts[g].expected_turnaround(left[task]),
                None => f64::INFINITY,
            });
            let reach: Vec<(f64, f64)> = facts.iter().map(|f| (f.slowdown, f.horizon)).collect();
            let mut memo = Memo::new(&facts, &runtimes);
            // Asked again and again, as after every failure: spare rows
            // are ranked after SPARE_ASKS_BEFORE_RANKING asks.
            for ask in 0..2 * SPARE_ASKS_BEFORE_RANKING {
                let mut ranked = QueueTurnarounds {
                    memo: &mut memo,
                    queue: &queue,
                    runtimes: &left,
                    place: &rank,
                    reach: &reach,
                };
                assert_eq!(
                    rule.pick_pair(&mut ranked),
                    rule.pick_pair(&mut scan),
                    "pool {pool}, ask {ask}"
                );
                for &g in &free {
                    assert_eq!(
                        rule.pick_for_host(g, &mut ranked),
                        rule.pick_for_host(g, &mut scan),
                        "pool {pool}, ask {ask}, host {g}"
                    );
                }
            }
        }
    }

    fn run(hosts: &[EstimateHost], waiting: &[f64], runs: usize) -> Estimate {
        let input = EstimateInput {
            hosts,
            running: &[],
            waiting,
            longest_first: true,
            runs,
            runtime_sigma_log: None,
            held: &[],
        };
        estimate(&input, &mut ChaCha8Rng::seed_from_u64(1))
            .unwrap()
            .0
    }

    #[test]
    fn reliable_hosts_give_the_list_schedule_exactly() {
        // Two never-failing hosts, P = 1 and 0.5; tasks 4000, 3000, 2000, 1000 s.
        // LPT with the rule: 4000 → h0 (ends 4000), 3000 → h1 (6000);
        // at 4000 h0 takes 2000 (6000); at 6000 h0 and h1 are free: the
        // 1000 s task goes to h0 (ends 7000). Every run the same.
        let hosts = [
            host(1.0, TrCurve::never_fails()),
            host(0.5, TrCurve::never_fails()),
        ];
        let e = run(&hosts, &[1000.0, 2000.0, 3000.0, 4000.0], 200);
        assert_eq!(e.makespan.p10, 7000.0);
        assert_eq!(e.makespan.p90, 7000.0);
        assert_eq!(e.task_eta[3].p50, 4000.0);
        assert_eq!(e.task_eta[2].p50, 6000.0);
        assert_eq!(e.unfinished_runs, 0);
    }

    #[test]
    fn failures_spread_the_makespan_around_the_expected_turnaround() {
        // One host, M = 1 h, one task of 1 h: the mean wall time with restarts
        // is 3600·(e − 1) ≈ 6186 s; the Monte Carlo mean must come near it.
        let hosts = [host(1.0, TrCurve::exponential(3600.0))];
        let e = run(&hosts, &[3600.0], 4000);
        let expected = 3600.0 * (1f64.exp() - 1.0);
        assert!(
            (e.makespan.mean - expected).abs() < 0.06 * expected,
            "{} vs {expected}",
            e.makespan.mean
        );
        assert!(e.makespan.p10 <= 3600.0 && e.makespan.p90 > 3600.0);
    }

    /// A constant hazard 1/`mttf` described out to a day, as the
    /// simulator's curves are.
    fn exponential_to_a_day(mttf: f64) -> TrCurve {
        TrCurve::new(
            [1_800.0, 3_600.0, 14_400.0, 43_200.0, 86_400.0].map(|t| (t, (-t / mttf).exp())),
        )
    }

    #[test]
    fn after_a_failure_the_host_fails_at_its_past_rate_not_the_curves() {
        // One host, M = 1 h, one task of 3 h. Redrawn from the curve after
        // every return it is hit e^3 − 1 ≈ 19 times on average; a host whose
        // past shows a thousand failures in 10^12 s of up time is hit at most once (the first
        // failure still comes from the curve).
        let mut h = host(1.0, exponential_to_a_day(3600.0));
        let curve_only = run(std::slice::from_ref(&h), &[3.0 * 3600.0], 400);
        assert!(curve_only.mean_failures > 15.0, "{curve_only:?}");
        h.past = Some(PastFailures {
            up_secs: 1e12,
            failures: 1_000,
        });
        let with_past = run(&[h], &[3.0 * 3600.0], 400);
        assert!(with_past.mean_failures <= 1.0, "{with_past:?}");
        assert!(with_past.mean_failures > 0.8, "{with_past:?}");
    }

    #[test]
    fn each_checkpoint_adds_its_cost_and_intervals_count_work() {
        // A never-failing host at half speed, a task of 500 reference
        // seconds: 1000 s of work at this speed, a checkpoint after every
        // 100 s of it (9, none after the last block), 10 s each: 1090 s.
        let mut h = host(0.5, TrCurve::never_fails());
        h.checkpoint_secs = 100.0;
        h.checkpoint_cost_secs = 10.0;
        let e = run(&[h], &[500.0], 5);
        assert_eq!(e.makespan.p10, 1090.0);
        assert_eq!(e.makespan.p90, 1090.0);
    }

    #[test]
    fn a_failure_keeps_only_the_blocks_whose_checkpoint_was_written() {
        // One host failing at rate 1/h, a task of 2 h checkpointed every
        // 10 min of work at 60 s each. Against the same failures, a free
        // checkpoint would end it sooner on average: the cost is charged
        // both in the run and in what a failure catches half-written.
        let mut h = host(1.0, exponential_to_a_day(3600.0));
        h.past = Some(PastFailures {
            up_secs: 3_600_000.0,
            failures: 1_000,
        });
        h.checkpoint_secs = 600.0;
        let free = run(std::slice::from_ref(&h), &[7200.0], 2000);
        h.checkpoint_cost_secs = 60.0;
        let costly = run(&[h], &[7200.0], 2000);
        assert!(
            costly.makespan.mean > free.makespan.mean + 11.0 * 60.0,
            "{costly:?} vs {free:?}"
        );
    }

    #[test]
    fn a_flat_curve_takes_its_checkpoint_mttf_from_the_past() {
        let past = PastFailures {
            up_secs: 10.0 * 3600.0,
            failures: 4,
        };
        // A curve that fails: its own MTTF, whatever the past says.
        let failing = TrCurve::exponential(7_200.0);
        assert_eq!(checkpoint_mttf(&failing, Some(&past)), failing.mttf());
        // One that never fails: 10 h of up time over 4.5 failures.
        let flat = TrCurve::never_fails();
        assert!((checkpoint_mttf(&flat, Some(&past)) - 8_000.0).abs() < 1e-9);
        // No past, or a past with no up time: no failure to plan for.
        assert!(checkpoint_mttf(&flat, None).is_infinite());
        let blank = PastFailures {
            up_secs: 0.0,
            failures: 0,
        };
        assert!(checkpoint_mttf(&flat, Some(&blank)).is_infinite());
        // A week without a failure still implies one every two weeks.
        let quiet = PastFailures {
            up_secs: 7.0 * 86_400.0,
            failures: 0,
        };
        assert_eq!(checkpoint_mttf(&flat, Some(&quiet)), 14.0 * 86_400.0);
    }

    #[test]
    fn the_posterior_rate_narrows_as_the_past_grows() {
        // The same mean up-spell (1 h) seen over 2 and over 200 failures:
        // λ ~ Gamma(n + ½, n h), mean (n + ½)/n per hour, relative spread
        // 1/sqrt(n + ½).
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (n, spread) in [(2u32, 1.0 / 2.5f64.sqrt()), (200, 1.0 / 200.5f64.sqrt())] {
            let past = PastFailures {
                up_secs: f64::from(n) * 3600.0,
                failures: n,
            };
            let draws: Vec<f64> = (0..20_000)
                .map(|_| past.draw_rate(&mut rng).unwrap() * 3600.0)
                .collect();
            let mean = draws.iter().sum::<f64>() / draws.len() as f64;
            let sd =
                (draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64).sqrt();
            let want = (f64::from(n) + 0.5) / f64::from(n);
            assert!((mean - want).abs() < 0.03 * want, "n {n}: mean {mean}");
            assert!((sd / mean - spread).abs() < 0.1 * spread, "n {n}: {sd}");
        }
        // No failure seen in a week still leaves a rate to fear.
        let quiet = PastFailures {
            up_secs: 7.0 * 86_400.0,
            failures: 0,
        };
        assert!(quiet.draw_rate(&mut rng).unwrap() > 0.0);
        let none = PastFailures {
            up_secs: 0.0,
            failures: 3,
        };
        assert_eq!(none.draw_rate(&mut rng), None);
    }

    #[test]
    fn a_short_past_widens_the_band_and_a_long_one_does_not() {
        // Four hosts, mean up-spell 4 h, 40 tasks of 1 h: with the rate
        // known from 1 failure the band is wider than from 400.
        let band = |n: u32| {
            let mut h = host(1.0, exponential_to_a_day(4.0 * 3600.0));
            h.recovery_secs = 600.0;
            h.past = Some(PastFailures {
                up_secs: f64::from(n) * 4.0 * 3600.0,
                failures: n,
            });
            let e = run(&vec![h; 4], &[3600.0; 40], 1000);
            e.makespan.p90 - e.makespan.p10
        };
        let (short, long) = (band(1), band(400));
        assert!(short > 1.3 * long, "{short} vs {long}");
    }

    #[test]
    fn past_the_curves_last_window_the_past_decides() {
        // The curve saw no failure within an hour (and so extrapolates
        // none ever); the past shows one every 2 h. A 20 h task is hit.
        let mut h = host(1.0, TrCurve::new([(3600.0, 1.0)]));
        let curve_only = run(std::slice::from_ref(&h), &[20.0 * 3600.0], 200);
        assert_eq!(curve_only.mean_failures, 0.0);
        h.past = Some(PastFailures {
            up_secs: 100.0 * 7200.0,
            failures: 100,
        });
        let with_past = run(&[h], &[20.0 * 3600.0], 200);
        assert!(with_past.mean_failures > 5.0, "{with_past:?}");
    }

    /// `draws` up-spells and outages of `h` after a return, the run's
    /// urn emptied every 100 (as every run does).
    fn spell_draws(h: &EstimateHost, rate: f64, draws: usize) -> (Vec<f64>, Vec<f64>) {
        let facts = [HostFacts::new(h)];
        let mut run = Run::new(1, &[1.0]);
        run.rate[0] = rate;
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (mut up, mut out) = (Vec::new(), Vec::new());
        for k in 0..draws {
            if k % 100 == 0 {
                run.urns[0].clear();
            }
            up.push(run.up_spell(&facts, 0, &mut rng));
            out.push(run.outage(&facts, 0, &mut rng));
        }
        (up, out)
    }

    fn with_spells(up: Vec<f64>, up_cut: Vec<f64>, outages: Vec<f64>) -> EstimateHost {
        let mut h = host(1.0, exponential_to_a_day(3600.0));
        h.recovery_secs = 777.0;
        h.spells = Some(SpellLengths {
            up_seen: up.len() as u32,
            up,
            up_cut,
            outages_seen: outages.len() as u32,
            outages,
        });
        h
    }

    #[test]
    fn the_bootstrap_draws_only_past_spells_or_its_fallback() {
        // 30 whole up-spells of 1000..=30000 s, 3 outages; the fallback's
        // exponential is so slow (mean 10^12 s) that its draws stand out.
        let past: Vec<f64> = (1..=30).map(|k| f64::from(k) * 1000.0).collect();
        let h = with_spells(past.clone(), vec![], vec![100.0, 200.0, 300.0]);
        let (up, out) = spell_draws(&h, 1e-12, 20_000);
        let fallback = up.iter().filter(|x| !past.contains(x)).count();
        assert!(up.iter().all(|x| past.contains(x) || *x > 1e6));
        // Half a spell's weight against 30: about 1.6 % fall back.
        let share = fallback as f64 / up.len() as f64;
        assert!((0.005..0.04).contains(&share), "{share}");
        // Every seen spell comes up, none more than chance allows.
        for p in &past {
            let n = up.iter().filter(|x| *x == p).count();
            assert!((300..1_000).contains(&n), "{p}: {n}");
        }
        // Outages: the three seen, or the mean recovery (1/7 of the time).
        assert!(out.iter().all(|o| [100.0, 200.0, 300.0, 777.0].contains(o)));
        let recovery = out.iter().filter(|o| **o == 777.0).count() as f64 / 20_000.0;
        assert!((0.08..0.22).contains(&recovery), "{recovery}");
    }

    #[test]
    fn an_outage_in_progress_lasts_as_a_longer_past_one_or_as_long_again() {
        // Outages of 100, 200 and 3000 s seen; the host has been down 150 s.
        let h = with_spells(vec![1000.0], vec![], vec![100.0, 200.0, 3000.0]);
        let b = HostFacts::new(&h).bootstrap.unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let draws: Vec<f64> = (0..30_000)
            .map(|_| rest_of_outage(&b, 150.0, &mut rng))
            .collect();
        // Never the 100 s outage (it would be over); the 200 s and 3000 s
        // ones by their counts (1 each), the Lindy fallback half as often.
        let share = |x: f64| draws.iter().filter(|d| **d == x).count() as f64 / 30_000.0;
        for (rest, want) in [(50.0, 0.4), (2850.0, 0.4)] {
            assert!((share(rest) - want).abs() < 0.02, "{rest}: {}", share(rest));
        }
        let lindy: Vec<f64> = draws
            .iter()
            .copied()
            .filter(|d| *d != 50.0 && *d != 2850.0)
            .collect();
        assert!((lindy.len() as f64 / 30_000.0 - 0.2).abs() < 0.02);
        // P(rest > r) = 150 / (150 + r): the median as long again (150 s),
        // one in ten past nine times as long.
        let above = |r: f64| lindy.iter().filter(|d| **d > r).count() as f64 / lindy.len() as f64;
        assert!((above(150.0) - 0.5).abs() < 0.03, "{}", above(150.0));
        assert!((above(1350.0) - 0.1).abs() < 0.02, "{}", above(1350.0));
        // Down longer than every past outage: only the Lindy draw is left.
        let long: Vec<f64> = (0..2_000)
            .map(|_| rest_of_outage(&b, 10_000.0, &mut rng))
            .collect();
        assert!(long
            .iter()
            .all(|d| d.is_finite() && *d >= 0.0 && *d <= MAX_REST_SECS));
        let median_ish = long.iter().filter(|d| **d > 10_000.0).count() as f64 / 2_000.0;
        assert!((median_ish - 0.5).abs() < 0.05, "{median_ish}");
    }

    #[test]
    fn a_host_down_at_the_start_is_away_for_a_drawn_rest_not_a_fixed_one() {
        // One host, down 2 h already; its past outages were 3 h and 30 h.
        // Without `down_secs` it is back after `busy_secs` in every run;
        // with it, after 1 h or 28 h (or a Lindy draw), so the makespan of
        // a one-hour task spreads accordingly.
        let mut h = with_spells(
            vec![86_400.0 * 30.0],
            vec![],
            vec![3.0 * 3600.0, 30.0 * 3600.0],
        );
        h.view.curve = TrCurve::never_fails();
        h.busy_secs = 600.0;
        let run = |h: &EstimateHost| {
            let hosts = [h.clone()];
            let input = EstimateInput {
                hosts: &hosts,
                running: &[],
                waiting: &[3600.0],
                longest_first: true,
                runs: 2_000,
                runtime_sigma_log: None,
                held: &[],
            };
            estimate(&input, &mut ChaCha8Rng::seed_from_u64(9))
                .unwrap()
                .0
                .makespan
        };
        let fixed = run(&h);
        assert!(
            (fixed.p10 - 4200.0).abs() < 1.0 && (fixed.p90 - 4200.0).abs() < 1.0,
            "{fixed:?}"
        );
        h.down_secs = 2.0 * 3600.0;
        let drawn = run(&h);
        assert!((drawn.p10 - 2.0 * 3600.0).abs() < 1.0, "{drawn:?}");
        assert!(drawn.p90 >= 29.0 * 3600.0, "{drawn:?}");
    }

    #[test]
    fn the_urn_draws_as_dirichlet_weights_drawn_per_run() {
        // Two spells and the fallback: masses 1, 1 and 1/2 (A = 2.5). With
        // weights W ~ Dirichlet per run, two picks agree with chance
        // E[sum W_i^2] = sum a_i (a_i + 1) / (A (A + 1)) = 4.75 / 8.75;
        // with fixed weights a / A (no per-run uncertainty) only 0.36.
        let h = with_spells(vec![1000.0, 2000.0], vec![], vec![]);
        let b = HostFacts::new(&h).bootstrap.unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (trials, mut same, mut fallback) = (40_000, 0, 0);
        let mut picked = Vec::new();
        for _ in 0..trials {
            picked.clear();
            let first = SpellUrn::pick(&b.up_mass, &mut picked, &mut rng);
            let second = SpellUrn::pick(&b.up_mass, &mut picked, &mut rng);
            same += usize::from(first == second);
            fallback += usize::from(first == 0);
        }
        let same = same as f64 / trials as f64;
        assert!((same - 4.75 / 8.75).abs() < 0.015, "{same}");
        // The first pick is by the initial masses: the fallback 1/5.
        let fallback = fallback as f64 / trials as f64;
        assert!((fallback - 0.2).abs() < 0.015, "{fallback}");
    }

    #[test]
    fn with_few_spells_the_bootstrap_falls_back() {
        // No whole spell at all: always the exponential at the run's rate
        // and the mean recovery.
        let h = with_spells(vec![], vec![], vec![]);
        assert!(HostFacts::new(&h).bootstrap.is_none());
        let (up, out) = spell_draws(&h, 1.0 / 5000.0, 20_000);
        let mean = up.iter().sum::<f64>() / up.len() as f64;
        assert!((mean - 5000.0).abs() < 200.0, "{mean}");
        assert!(out.iter().all(|o| *o == 777.0));
        // One spell: the fallback holds half a weight against one, a
        // third of the draws on average.
        let h = with_spells(vec![4000.0], vec![], vec![]);
        let (up, _) = spell_draws(&h, 1e-12, 20_000);
        let fallback = up.iter().filter(|x| **x != 4000.0).count() as f64 / 20_000.0;
        assert!((0.25..0.42).contains(&fallback), "{fallback}");
        // A cut spell lasted at least its length, then at the run's rate.
        let h = with_spells(vec![], vec![9000.0], vec![]);
        let (up, _) = spell_draws(&h, 1.0 / 100.0, 5_000);
        let cut: Vec<f64> = up.iter().copied().filter(|x| *x >= 9000.0).collect();
        assert!(cut.len() > 2_500, "{}", cut.len());
        let over = cut.iter().map(|x| x - 9000.0).sum::<f64>() / cut.len() as f64;
        assert!((over - 100.0).abs() < 15.0, "{over}");
    }

    #[test]
    fn bursty_spells_lose_less_of_a_long_task_than_their_mean_says() {
        // A host whose up-spells are 40 of 10 min and 10 of two days
        // (mean 10.1 h), a task of 12 h. Drawn as an exponential at that
        // mean, a spell outlasts the task 30 % of the time and one that
        // does not has run about 5 h of it: some 2.3 kills, 24 h on
        // average. Resampled, a fifth of the spells outlast it and the
        // rest end within 10 min: more kills (4), each losing little (13
        // h on average). The curve is the same for both, so only the
        // draws after a return differ.
        let spells: Vec<f64> = std::iter::repeat_n(600.0, 40)
            .chain(std::iter::repeat_n(172_800.0, 10))
            .collect();
        let up_secs: f64 = spells.iter().sum();
        let mut h = host(1.0, exponential_to_a_day(up_secs / 50.0));
        h.recovery_secs = 600.0;
        h.past = Some(PastFailures {
            up_secs,
            failures: 50,
        });
        let exponential = run(std::slice::from_ref(&h), &[12.0 * 3600.0], 2000);
        h.spells = Some(SpellLengths {
            up_seen: 50,
            up: spells,
            up_cut: vec![],
            outages: vec![600.0; 50],
            outages_seen: 50,
        });
        let bootstrap = run(&[h], &[12.0 * 3600.0], 2000);
        // Kills: more with the bursty spells (most end in 10 min), but
        // each costs little, so the makespan's mean is shorter.
        assert!(
            bootstrap.makespan.mean < exponential.makespan.mean,
            "{bootstrap:?} vs {exponential:?}"
        );
    }

    #[test]
    fn bad_input_is_refused_by_name() {
        let hosts = [host(1.0, TrCurve::never_fails())];
        let input = EstimateInput {
            hosts: &hosts,
            running: &[RunningTask {
                host: 3,
                remaining_secs: 1.0,
            }],
            waiting: &[],
            longest_first: false,
            runs: 1,
            runtime_sigma_log: None,
            held: &[],
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!(matches!(
            estimate(&input, &mut rng),
            Err(EstimateError::BadHost { host: 3, .. })
        ));
        let input = EstimateInput {
            running: &[],
            waiting: &[f64::NAN],
            ..input
        };
        assert!(matches!(
            estimate(&input, &mut rng),
            Err(EstimateError::BadRuntime { task: 0, .. })
        ));
        let input = EstimateInput { runs: 0, ..input };
        assert_eq!(estimate(&input, &mut rng), Err(EstimateError::NoRuns));
    }

    #[test]
    fn a_task_no_host_can_finish_leaves_the_run_unfinished() {
        // TR(1 s) ≈ 0: every attempt fails.
        let hosts = [host(1.0, TrCurve::new([(1.0, 1e-300)]))];
        let e = run(&hosts, &[3600.0], 3);
        assert_eq!(e.unfinished_runs, 3);
        assert!(e.makespan.p50.is_infinite());
    }
}
