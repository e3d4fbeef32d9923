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

use super::curve::{young_daly_interval, TrCurve};
use super::estimate::{
    checkpoint_mttf, estimate, Estimate, EstimateError, EstimateHost, EstimateInput, PastFailures,
    Quantiles,
};
use super::place::{by_slowdown, HostView, Rule, Scan, LOOKAHEAD};
use super::timeline::Timeline;
use super::window::{Choice, WindowRule};
use crate::predict::PredictRequest;
use crate::predictor::ReliabilityPredictor;
use crate::series::HostSeries;
use crate::state::{State, Thresholds};
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, MutexGuard};

/// Window lengths a forecaster asks TR for to build a host's curve (seconds).
pub const CURVE_WINDOWS: [u64; 5] = [1_800, 3_600, 4 * 3_600, 12 * 3_600, 24 * 3_600];
/// How long before "now" the simulator looks to predict a host's availability
/// and outage length.
pub const PAST_LOOKBACK_SECS: f64 = super::spells::LOOKBACK_SECS as f64;
/// Outage length assumed for a host whose past shows none.
pub const DEFAULT_OUTAGE_SECS: f64 = 1_800.0;

/// A scheduling policy of the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Policy {
    #[serde(rename = "random")]
    Random,
    #[serde(rename = "power")]
    Power,
    #[serde(rename = "tr-freq")]
    TrFreq,
    #[serde(rename = "tr")]
    Tr,
    #[serde(rename = "proactive")]
    Proactive,
    #[serde(rename = "proactive+checkpoint")]
    ProactiveCheckpoint,
    #[serde(rename = "oracle")]
    Oracle,
    /// `proactive`, and a task no free host is likely to finish now is
    /// held for the best (host, start) window over the coming hours, with
    /// exclusion and bounded kills (issue 28; `sim/windows.rs`).
    #[serde(rename = "windows")]
    Windows,
}

impl Policy {
    pub const ALL: [Policy; 8] = [
        Policy::Random,
        Policy::Power,
        Policy::TrFreq,
        Policy::Tr,
        Policy::Proactive,
        Policy::ProactiveCheckpoint,
        Policy::Oracle,
        Policy::Windows,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Random => "random",
            Policy::Power => "power",
            Policy::TrFreq => "tr-freq",
            Policy::Tr => "tr",
            Policy::Proactive => "proactive",
            Policy::ProactiveCheckpoint => "proactive+checkpoint",
            Policy::Oracle => "oracle",
            Policy::Windows => "windows",
        }
    }

    /// Places the longest task first (the policies that use runtimes).
    fn longest_first(self) -> bool {
        matches!(
            self,
            Policy::Proactive | Policy::ProactiveCheckpoint | Policy::Oracle | Policy::Windows
        )
    }

    /// Places by the proactive rule (every free host weighed against the
    /// busy ones).
    fn proactive_rule(self) -> bool {
        matches!(
            self,
            Policy::Proactive | Policy::ProactiveCheckpoint | Policy::Windows
        )
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}; known: random, power, tr-freq, tr, proactive, proactive+checkpoint, oracle, windows")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == lower)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// The source of TR curves: trace `trace`'s curve at trace time `at`,
/// from what was known at `at`.
pub trait Forecaster {
    fn curve(&mut self, trace: usize, at: i64) -> TrCurve;
}

/// The forecaster's cache: per (trace, time bucket, state at W), the curve
/// and how many of its forecasts failed.
type CurveCache = HashMap<(usize, i64, u8), (TrCurve, u32)>;

/// A [`Forecaster`] over host series with any registry method, caching one
/// curve per (trace, time bucket, state at W). The cache sits behind a lock
/// so that simulations on several threads share it (`&SeriesForecaster` is
/// a forecaster too): a curve is a function of its key alone, so which
/// thread computes it first changes nothing, and the counts below are of
/// keys, the same whatever the threads' timing.
pub struct SeriesForecaster<'a> {
    series: &'a [HostSeries],
    method: Box<dyn ReliabilityPredictor>,
    thresholds: Thresholds,
    bucket_secs: i64,
    cache: Mutex<CurveCache>,
}

impl<'a> SeriesForecaster<'a> {
    pub fn new(
        series: &'a [HostSeries],
        method: Box<dyn ReliabilityPredictor>,
        thresholds: Thresholds,
        bucket_secs: i64,
    ) -> Self {
        SeriesForecaster {
            series,
            method,
            thresholds,
            bucket_secs: bucket_secs.max(1),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Curves computed (distinct keys asked).
    pub fn computed(&self) -> usize {
        self.lock().len()
    }

    /// Forecasts that failed (not enough history); their point was left out.
    pub fn failed(&self) -> usize {
        self.lock().values().map(|(_, f)| *f as usize).sum()
    }

    fn lock(&self) -> MutexGuard<'_, CurveCache> {
        // A panic elsewhere cannot leave a half-made entry: entries are
        // inserted whole.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The curve of the key (trace, bucket, state) from the bucket's start.
    fn compute(&self, series: &HostSeries, bucket: i64) -> (TrCurve, u32) {
        // The bucket's start stands for every time in it; it is not after
        // the time asked, so nothing past it is read.
        let w = bucket * self.bucket_secs;
        // A coarser step than the trace's keeps a day-long window cheap.
        let step = series.step_secs.max(60);
        let mut points = Vec::with_capacity(CURVE_WINDOWS.len());
        let mut failed = 0;
        for &len in &CURVE_WINDOWS {
            let mut req = PredictRequest::new(w, len, self.thresholds);
            req.step_secs = Some(step);
            match self.method.forecast(series, &req) {
                Ok(f) => points.push((len as f64, f.tr)),
                Err(_) => failed += 1,
            }
        }
        let curve = if points.is_empty() {
            // No history yet: assume one failure a day.
            TrCurve::exponential(86_400.0)
        } else {
            TrCurve::new(points)
        };
        (curve, failed)
    }
}

impl Forecaster for &SeriesForecaster<'_> {
    fn curve(&mut self, trace: usize, at: i64) -> TrCurve {
        let Some(series) = self.series.get(trace) else {
            return TrCurve::never_fails();
        };
        let state = series
            .state_at(self.thresholds, at)
            .map_or(0u8, |s| s.index() as u8 + 1);
        let bucket = at.div_euclid(self.bucket_secs);
        let key = (trace, bucket, state);
        if let Some((c, _)) = self.lock().get(&key) {
            return c.clone();
        }
        // Computed without the lock, so other threads go on meanwhile.
        let made = self.compute(series, bucket);
        let curve = made.0.clone();
        self.lock().entry(key).or_insert(made);
        curve
    }
}

impl Forecaster for SeriesForecaster<'_> {
    fn curve(&mut self, trace: usize, at: i64) -> TrCurve {
        let mut shared: &SeriesForecaster<'_> = self;
        shared.curve(trace, at)
    }
}

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
}

/// Kills by cause: S3, S4, S5.
pub type Kills = [u64; 3];

/// What one simulation measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    pub policy: Policy,
    pub tasks: usize,
    pub finished: usize,
    /// Tasks not done by the horizon.
    pub unfinished: usize,
    /// Tasks that completed more than once (must be 0).
    pub duplicate_completions: usize,
    /// When the last task ended (seconds), if all did.
    pub makespan_secs: Option<f64>,
    pub mean_turnaround_secs: f64,
    pub p90_turnaround_secs: f64,
    pub kills: Kills,
    pub attempts: u64,
    /// Reference CPU-seconds of work that did not survive (killed work and
    /// checkpoint overhead).
    pub wasted_cpu_secs: f64,
    /// Reference CPU-seconds of the tasks that finished.
    pub useful_cpu_secs: f64,
    /// useful / (useful + wasted).
    pub goodput: f64,
    pub checkpoints: u64,
    /// The Monte Carlo estimate made at submission (proactive rule).
    pub estimate: Option<Quantiles>,
    /// The kills that estimate expected (mean over its runs).
    pub estimate_kills: Option<f64>,
    /// Each task's end (seconds), `None` if unfinished.
    #[serde(skip)]
    pub task_end: Vec<Option<f64>>,
    /// The host whose attempt completed each task first (`verify`).
    #[serde(skip)]
    pub task_host: Vec<Option<usize>>,
    /// Times a task was held for a later window (`windows`).
    pub holds: u64,
    /// The most kills any one task took.
    pub max_task_kills: u32,
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
    Recheck,
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
}

#[derive(Debug, Clone)]
enum Slot {
    Free,
    Down { expected_up: f64 },
    Busy(Attempt),
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
    let mut sim = Sim::new(config, hosts, timelines);
    sim.estimate = if config.estimate_runs > 0 {
        sim.estimate_now(forecaster, rng)
    } else {
        None
    };
    sim.run(forecaster, rng, progress);
    Ok(sim.result())
}

/// The estimate at submission that [`simulate`] makes when
/// `config.estimate_runs` > 0, made apart from the simulation so a caller
/// can run it elsewhere (on other threads, once for several policies that
/// share it): `run` makes the estimate of the input it is given (e.g.
/// [`estimate`] with a generator). Returns the makespan's quantiles and the
/// kills the estimate expects; `None` when there is nothing to estimate or
/// `run` fails.
pub fn submission_estimate(
    config: &SimConfig,
    hosts: &[SimHost],
    timelines: &[Timeline],
    forecaster: &mut dyn Forecaster,
    run: impl FnOnce(&EstimateInput<'_>) -> Result<(Estimate, Vec<f64>), EstimateError>,
) -> Option<(Quantiles, f64)> {
    if config.estimate_runs == 0 || hosts.is_empty() {
        return None;
    }
    if hosts
        .iter()
        .any(|h| h.timeline >= timelines.len() || timelines[h.timeline].cells() == 0)
    {
        return None;
    }
    let est_hosts = Sim::new(config, hosts, timelines).estimate_hosts(forecaster);
    run(&submission_input(config, &est_hosts))
        .ok()
        .map(|(e, _)| (e.makespan, e.mean_failures))
}

/// The estimate's input at submission: every task waiting, longest first.
fn submission_input<'a>(config: &'a SimConfig, hosts: &'a [EstimateHost]) -> EstimateInput<'a> {
    EstimateInput {
        hosts,
        running: &[],
        waiting: &config.runtimes,
        longest_first: true,
        runs: config.estimate_runs,
        runtime_sigma_log: None,
    }
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
    /// The view each host was last seen with (for the rule's comparisons).
    views: Vec<HostView>,
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
    /// Per task: held for a later window until this time (`windows`).
    held_until: Vec<f64>,
    /// Per host: the windows held tasks keep on it, (task, start, end).
    reserved: Vec<Vec<(usize, f64, f64)>>,
    /// Per task: the window it is held for.
    plans: Vec<Option<super::window::Plan>>,
    holds: u64,
}

impl<'a> Sim<'a> {
    fn new(config: &'a SimConfig, hosts: &'a [SimHost], timelines: &'a [Timeline]) -> Sim<'a> {
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
            slots: vec![Slot::Down { expected_up: 0.0 }; hosts.len()],
            views: vec![blank; hosts.len()],
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
            held_until: vec![f64::NEG_INFINITY; n],
            reserved: vec![Vec::new(); hosts.len()],
            plans: vec![None; n],
            holds: 0,
        }
    }

    fn push(&mut self, time: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Event {
            time,
            seq: self.seq,
            ev,
        });
    }

    fn trace_time(&self, host: usize, t: f64) -> f64 {
        self.hosts[host].offset as f64 + t
    }

    /// Trace time folded into the trace's first lap (what the forecaster reads).
    fn lap_time(&self, host: usize, t: f64) -> i64 {
        let tl = &self.timelines[self.hosts[host].timeline];
        let span = tl.span_secs().max(1);
        let tt = self.trace_time(host, t) as i64;
        tl.start() + (tt - tl.start()).rem_euclid(span)
    }

    /// The consumer's view of `host` now, from its past only (refreshed once
    /// per 15 minutes of simulated time).
    fn view(&mut self, host: usize, forecaster: &mut dyn Forecaster) -> &HostView {
        let bucket = (self.now / 900.0).floor() as i64;
        if self.view_bucket[host] != bucket {
            let h = self.hosts[host];
            let tl = &self.timelines[h.timeline];
            let tt = self.trace_time(host, self.now);
            let (share, _) = tl.past(tt, PAST_LOOKBACK_SECS);
            let availability = share.unwrap_or_else(|| tl.rate_at(tt));
            let curve = forecaster.curve(h.timeline, self.lap_time(host, self.now));
            self.views[host] = HostView {
                power: h.power,
                availability,
                curve,
            };
            self.view_bucket[host] = bucket;
            self.order_stale = true;
        }
        &self.views[host]
    }

    fn outage_guess(&self, host: usize) -> f64 {
        let h = self.hosts[host];
        let tt = self.trace_time(host, self.now);
        self.timelines[h.timeline]
            .past(tt, PAST_LOOKBACK_SECS)
            .1
            .unwrap_or(DEFAULT_OUTAGE_SECS)
    }

    /// The Monte Carlo estimate at submission, under the proactive rule.
    fn estimate_now<R: Rng + ?Sized>(
        &mut self,
        forecaster: &mut dyn Forecaster,
        rng: &mut R,
    ) -> Option<(Quantiles, f64)> {
        let est_hosts = self.estimate_hosts(forecaster);
        let input = submission_input(self.config, &est_hosts);
        estimate(&input, rng)
            .ok()
            .map(|(e, _)| (e.makespan, e.mean_failures))
    }

    /// What host `host`'s week before `now` shows of its failures.
    fn past_failures(&self, host: usize, now: f64) -> Option<PastFailures> {
        let tl = &self.timelines[self.hosts[host].timeline];
        let (up, episodes) = tl.past_spells(self.trace_time(host, now), PAST_LOOKBACK_SECS);
        (up > 0.0).then(|| PastFailures {
            up_secs: up,
            failures: episodes.round() as u32,
        })
    }

    /// The pool as the estimate at submission sees it: each host's view
    /// at time 0, its usual outage, and (with checkpoints) its interval.
    fn estimate_hosts(&mut self, forecaster: &mut dyn Forecaster) -> Vec<EstimateHost> {
        let mut est_hosts = Vec::with_capacity(self.hosts.len());
        let checkpointing = self.config.policy == Policy::ProactiveCheckpoint;
        for host in 0..self.hosts.len() {
            let view = self.view(host, forecaster).clone();
            let outage = self.outage_guess(host);
            let tl = &self.timelines[self.hosts[host].timeline];
            let down = tl.failure_at(self.trace_time(host, 0.0)).is_some();
            // The rate is known only as well as a week of the host's past
            // tells it: drawn per run from its posterior.
            let past = self.past_failures(host, 0.0);
            let checkpoint_secs = if checkpointing {
                young_daly_interval(
                    self.config.checkpoint_cost_secs,
                    checkpoint_mttf(&view.curve, past.as_ref()),
                )
                .unwrap_or(0.0)
            } else {
                0.0
            };
            est_hosts.push(EstimateHost {
                view,
                busy_secs: if down { outage } else { 0.0 },
                recovery_secs: outage,
                down_secs: if down {
                    tl.failing_for(self.trace_time(host, 0.0))
                } else {
                    0.0
                },
                past,
                checkpoint_secs,
                checkpoint_cost_secs: if checkpoint_secs > 0.0 {
                    self.config.checkpoint_cost_secs
                } else {
                    0.0
                },
                spells: Some(tl.past_spell_lengths(self.trace_time(host, 0.0), PAST_LOOKBACK_SECS)),
            });
        }
        est_hosts
    }

    fn run<R: Rng + ?Sized>(
        &mut self,
        forecaster: &mut dyn Forecaster,
        rng: &mut R,
        progress: &mut dyn FnMut(f64),
    ) {
        let total = self.config.runtimes.len().max(1);
        let mut last_report = 0usize;
        for host in 0..self.hosts.len() {
            self.host_up(host);
        }
        if self.config.policy.proactive_rule() {
            // The rule weighs busy and down hosts too (what they would do
            // once back): each needs its view from the start, or a host
            // down at submission would look like the ideal host (full
            // speed, never failing) until it first came back.
            for host in 0..self.hosts.len() {
                self.view(host, forecaster);
            }
        }
        loop {
            self.dispatch(forecaster, rng);
            if self.done >= self.config.runtimes.len() {
                break;
            }
            let Some(event) = self.heap.pop() else {
                break;
            };
            if event.time > self.config.horizon_secs {
                break;
            }
            self.now = event.time;
            match event.ev {
                Ev::Recheck => {
                    self.recheck_pending = false;
                    self.recheck_all = true;
                }
                Ev::HostUp { host } => {
                    if matches!(self.slots[host], Slot::Down { .. }) {
                        self.host_up(host);
                    }
                }
                Ev::IdleDown { host, epoch } => {
                    if matches!(self.slots[host], Slot::Free) && self.epoch[host] == epoch {
                        self.go_down(host);
                    }
                }
                Ev::Finish { host, attempt } => self.finish(host, attempt),
                Ev::Fail {
                    host,
                    attempt,
                    cause,
                } => self.fail(host, attempt, cause),
            }
            if self.done * 100 / total != last_report {
                last_report = self.done * 100 / total;
                progress(self.done as f64 / total as f64);
            }
        }
        progress(self.done as f64 / total as f64);
    }

    fn finish(&mut self, host: usize, attempt: u64) {
        let Slot::Busy(a) = &self.slots[host] else {
            return;
        };
        if a.id != attempt {
            return;
        }
        let a = a.clone();
        self.host_up(host);
        let overhead = a.cost * checkpoints_in(a.work, a.interval) as f64;
        self.wasted += overhead;
        self.checkpoints += checkpoints_in(a.work, a.interval);
        self.left[a.task] = 0.0;
        self.completions[a.task] += 1;
        if self.end[a.task].is_none() {
            self.end[a.task] = Some(self.now);
            self.end_host[a.task] = Some(host);
            self.done += 1;
        }
    }

    fn fail(&mut self, host: usize, attempt: u64, cause: State) {
        let Slot::Busy(a) = &self.slots[host] else {
            return;
        };
        if a.id != attempt {
            return;
        }
        let a = a.clone();
        let h = self.hosts[host];
        let tl = &self.timelines[h.timeline];
        let done_units = tl.work_between(
            self.trace_time(host, a.start),
            self.trace_time(host, self.now),
        ) * h.power;
        let saved = if a.interval > 0.0 {
            let blocks = ((done_units / (a.interval + a.cost)).floor() as u64)
                .min(checkpoints_in(a.work, a.interval));
            self.checkpoints += blocks;
            blocks as f64 * a.interval
        } else {
            0.0
        };
        let saved = saved.min(a.work);
        self.wasted += (done_units - saved).max(0.0);
        self.left[a.task] = (a.work - saved).max(0.0);
        if let Some(i) = cause.failure_index() {
            self.kills[i] += 1;
            self.task_kills[a.task] += 1;
        }
        self.queue.push_front(a.task);
        self.oracle_requeued = true;
        self.go_down(host);
    }

    /// Host `host` may take work again, unless its trace is failing right now.
    fn host_up(&mut self, host: usize) {
        let h = self.hosts[host];
        if self.timelines[h.timeline]
            .failure_at(self.trace_time(host, self.now))
            .is_some()
        {
            self.go_down(host);
        } else {
            self.set_free(host);
        }
    }

    fn set_free(&mut self, host: usize) {
        self.slots[host] = Slot::Free;
        self.free.push(host);
        self.fresh.push(host);
        self.armed.push(host);
    }

    /// Host `host` is failing now: away until its trace is usable again
    /// (the consumer expects it back after its usual outage). Whatever the
    /// rules compared against it changed.
    fn go_down(&mut self, host: usize) {
        if matches!(self.slots[host], Slot::Free) {
            if let Some(i) = self.free.iter().position(|&g| g == host) {
                self.free.swap_remove(i);
            }
        }
        let h = self.hosts[host];
        let tt = self.trace_time(host, self.now);
        let expected_up = self.now + self.outage_guess(host);
        self.slots[host] = Slot::Down { expected_up };
        if let Some(up) = self.timelines[h.timeline].next_usable(tt) {
            self.push((up - h.offset as f64).max(self.now), Ev::HostUp { host });
        }
        self.recheck_all = true;
    }

    /// Takes `host` out of the free list for a start.
    fn take(&mut self, host: usize) {
        if let Some(i) = self.free.iter().position(|&g| g == host) {
            self.free.swap_remove(i);
        }
        self.epoch[host] = self.epoch[host].wrapping_add(1);
    }

    fn dispatch<R: Rng + ?Sized>(&mut self, forecaster: &mut dyn Forecaster, rng: &mut R) {
        if !self.queue.is_empty() && !self.free.is_empty() {
            match self.config.policy {
                Policy::Random | Policy::Power | Policy::TrFreq | Policy::Tr => {
                    while !self.free.is_empty() {
                        let Some(&task) = self.queue.front() else {
                            break;
                        };
                        let free = std::mem::take(&mut self.free);
                        let i = self.choose_fifo(task, &free, forecaster, rng);
                        self.free = free;
                        let host = self.free[i];
                        self.take(host);
                        self.queue.pop_front();
                        self.start(task, host, forecaster);
                    }
                }
                Policy::Proactive | Policy::ProactiveCheckpoint | Policy::Windows => {
                    self.dispatch_proactive(forecaster)
                }
                Policy::Oracle => self.dispatch_oracle(forecaster),
            }
            if !self.queue.is_empty() && !self.free.is_empty() && !self.recheck_pending {
                self.recheck_pending = true;
                self.push(self.now + self.config.recheck_secs.max(1.0), Ev::Recheck);
            }
        }
        self.fresh.clear();
        self.recheck_all = false;
        // Hosts still idle go down when their trace next fails.
        while let Some(host) = self.armed.pop() {
            if !matches!(self.slots[host], Slot::Free) {
                continue;
            }
            let h = self.hosts[host];
            let tt = self.trace_time(host, self.now);
            if let Some((f, _)) = self.timelines[h.timeline].next_failure(tt) {
                let epoch = self.epoch[host];
                self.push(
                    (f - h.offset as f64).max(self.now),
                    Ev::IdleDown { host, epoch },
                );
            }
        }
    }

    /// The proactive rule over the free hosts: everyone on a full recheck,
    /// else only the hosts freed since the last look (see `Rule::pick_pair`
    /// for why the others' answers cannot have improved).
    fn dispatch_proactive(&mut self, forecaster: &mut dyn Forecaster) {
        let asked: Vec<usize> = if self.recheck_all {
            self.free.clone()
        } else {
            self.fresh.clone()
        };
        for &host in &asked {
            self.view(host, forecaster);
        }
        if self.order_stale {
            let slowdowns: Vec<f64> = self
                .views
                .iter()
                .map(|v| v.expected_run_secs(1.0))
                .collect();
            self.order = by_slowdown(&slowdowns);
            self.order_stale = false;
        }
        let mut fresh = asked;
        let windows = self.config.policy == Policy::Windows;
        loop {
            if self.queue.is_empty() || self.free.is_empty() {
                return;
            }
            let now = self.now;
            // The queue as the rule sees it: without the tasks held for a
            // later window (all of it under the other policies).
            let eligible: Vec<usize> = (0..self.queue.len())
                .filter(|&i| !windows || self.held_until[self.queue[i]] <= now)
                .collect();
            if eligible.is_empty() {
                return;
            }
            let (slots, views, left) = (&self.slots, &self.views, &self.left);
            let queue: Vec<usize> = eligible.iter().map(|&i| self.queue[i]).collect();
            let queue = &queue;
            let rule = Rule {
                order: &self.order,
                free_sorted: None,
                lower: |j: usize, g: usize| match queue.get(j) {
                    Some(&task) => views[g].expected_run_secs(left[task]),
                    None => f64::INFINITY,
                },
                free_in: |g: usize| match &slots[g] {
                    Slot::Free => 0.0,
                    Slot::Down { expected_up } => (expected_up - now).max(f64::MIN_POSITIVE),
                    Slot::Busy(a) => (a.expected_end - now).max(f64::MIN_POSITIVE),
                },
                queue_len: queue.len(),
            };
            let turnaround = |j: usize, g: usize| match queue.get(j) {
                Some(&task) => views[g].expected_turnaround(left[task]),
                None => f64::INFINITY,
            };
            let placed = if self.recheck_all {
                rule.pick_pair(&mut Scan(turnaround))
            } else {
                let mut placed = None;
                while let Some(host) = fresh.pop() {
                    if !matches!(slots[host], Slot::Free) {
                        continue;
                    }
                    if let Some(j) = rule.pick_for_host(host, &mut Scan(turnaround)) {
                        placed = Some((j, host));
                        break;
                    }
                }
                placed
            };
            let Some((j, host)) = placed else {
                return;
            };
            let Some(&at) = eligible.get(j) else {
                return;
            };
            let host = if windows {
                match self.window_choice(self.queue[at], host, forecaster) {
                    Some(Choice::Hold(w)) => {
                        self.hold(self.queue[at], w);
                        // The host that picked it may take another task.
                        fresh.push(host);
                        continue;
                    }
                    Some(Choice::Start { host: best, .. }) => {
                        if best != host {
                            fresh.push(host);
                        }
                        best
                    }
                    None => host,
                }
            } else {
                host
            };
            let Some(task) = self.queue.remove(at) else {
                return;
            };
            if windows {
                self.release(task);
            }
            self.take(host);
            self.start(task, host, forecaster);
        }
    }

    /// The oracle: each of the first [`LOOKAHEAD`] tasks goes to the free
    /// host where it ends soonest without being hit, if there is one. An
    /// idle host that fits none of them cannot come to fit one while it
    /// stays up (its next failure stays where it is, the finish only moves
    /// later), so a task already offered to every idle host is offered only
    /// to the fresh ones. Nothing else the rule weighs changes: a task's
    /// work changes only when it is killed and requeued, and only a requeue
    /// can push an offered task out of the window while hosts are freed, so
    /// only a requeue makes every task new again (not every full recheck:
    /// hosts going down, which is most events, change no idle host's answer).
    fn dispatch_oracle(&mut self, forecaster: &mut dyn Forecaster) {
        let fresh = if self.oracle_requeued {
            self.oracle_requeued = false;
            self.offered.iter_mut().for_each(|o| *o = false);
            self.free.clone()
        } else {
            self.fresh.clone()
        };
        'place: while !self.free.is_empty() && !self.queue.is_empty() {
            for j in 0..self.queue.len().min(LOOKAHEAD) {
                let task = self.queue[j];
                let candidates = if self.offered[task] {
                    &fresh
                } else {
                    &self.free
                };
                let best = candidates
                    .iter()
                    .filter(|&&h| matches!(self.slots[h], Slot::Free))
                    .filter_map(|&h| self.unhit_finish(task, h).map(|t| (h, t)))
                    .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                self.offered[task] = true;
                if let Some((host, _)) = best {
                    self.queue.remove(j);
                    self.take(host);
                    self.start(task, host, forecaster);
                    continue 'place;
                }
            }
            break;
        }
    }

    /// When `task` would end on `host` started now, if nothing hits it (the oracle's look).
    fn unhit_finish(&self, task: usize, host: usize) -> Option<f64> {
        let h = self.hosts[host];
        let tl = &self.timelines[h.timeline];
        let tt = self.trace_time(host, self.now);
        let end = tl.finish_time(tt, self.left[task] / h.power)?;
        match tl.next_failure(tt) {
            Some((f, _)) if f < end => None,
            _ => Some(end),
        }
    }

    /// Index into `free` of the host a FIFO policy gives `task`.
    fn choose_fifo<R: Rng + ?Sized>(
        &mut self,
        task: usize,
        free: &[usize],
        forecaster: &mut dyn Forecaster,
        rng: &mut R,
    ) -> usize {
        match self.config.policy {
            Policy::Random => rng.random_range(0..free.len()),
            Policy::Power => {
                let mut best = (0, f64::NEG_INFINITY);
                for (i, &h) in free.iter().enumerate() {
                    let tl = &self.timelines[self.hosts[h].timeline];
                    let g = self.hosts[h].power * tl.rate_at(self.trace_time(h, self.now));
                    if g > best.1 {
                        best = (i, g);
                    }
                }
                best.0
            }
            _ => {
                let runtime = self.left[task];
                let mut best = (0, f64::NEG_INFINITY, f64::NEG_INFINITY);
                for (i, &h) in free.iter().enumerate() {
                    let v = self.view(h, forecaster);
                    let (tr, g) = (v.p_success(runtime), v.gamma());
                    if tr > best.1 || (tr == best.1 && g > best.2) {
                        best = (i, tr, g);
                    }
                }
                best.0
            }
        }
    }

    fn start(&mut self, task: usize, host: usize, forecaster: &mut dyn Forecaster) {
        let view = self.view(host, forecaster).clone();
        let h = self.hosts[host];
        let work = self.left[task];
        let (interval, cost) = if self.config.policy == Policy::ProactiveCheckpoint {
            let gamma = view.gamma().max(1e-6);
            let past = self.past_failures(host, self.now);
            let mttf = checkpoint_mttf(&view.curve, past.as_ref());
            match young_daly_interval(self.config.checkpoint_cost_secs, mttf) {
                // τ and C are wall seconds at the predicted speed; in work, × Γ.
                Some(tau) => (tau * gamma, self.config.checkpoint_cost_secs * gamma),
                None => (0.0, 0.0),
            }
        } else {
            (0.0, 0.0)
        };
        let units = work + cost * checkpoints_in(work, interval) as f64;
        self.next_attempt += 1;
        self.attempts += 1;
        let id = self.next_attempt;
        let tl = &self.timelines[h.timeline];
        let tt = self.trace_time(host, self.now);
        let end = tl.finish_time(tt, units / h.power);
        let fail = tl.next_failure(tt);
        let expected_end = self.now + view.expected_run_secs(work);
        match (end, fail) {
            (Some(e), Some((f, _))) if e <= f => {
                self.push(e - h.offset as f64, Ev::Finish { host, attempt: id })
            }
            (Some(e), None) => self.push(e - h.offset as f64, Ev::Finish { host, attempt: id }),
            (_, Some((f, cause))) => self.push(
                f - h.offset as f64,
                Ev::Fail {
                    host,
                    attempt: id,
                    cause,
                },
            ),
            // Never finishes and never fails: it runs until the horizon.
            (None, None) => {}
        }
        self.slots[host] = Slot::Busy(Attempt {
            id,
            task,
            start: self.now,
            work,
            interval,
            cost,
            expected_end,
        });
    }

    fn result(self) -> SimResult {
        let n = self.config.runtimes.len();
        let mut ends: Vec<f64> = self.end.iter().flatten().copied().collect();
        ends.sort_by(f64::total_cmp);
        let finished = ends.len();
        let useful: f64 = self
            .end
            .iter()
            .zip(&self.config.runtimes)
            .filter(|(e, _)| e.is_some())
            .map(|(_, r)| r)
            .sum();
        let p90 = if ends.is_empty() {
            0.0
        } else {
            ends[((0.9 * ends.len() as f64).ceil() as usize).clamp(1, ends.len()) - 1]
        };
        SimResult {
            policy: self.config.policy,
            tasks: n,
            finished,
            unfinished: n - finished,
            duplicate_completions: self.completions.iter().filter(|c| **c > 1).count(),
            makespan_secs: (finished == n).then(|| ends.last().copied().unwrap_or(0.0)),
            mean_turnaround_secs: if finished > 0 {
                ends.iter().sum::<f64>() / finished as f64
            } else {
                0.0
            },
            p90_turnaround_secs: p90,
            kills: self.kills,
            attempts: self.attempts,
            wasted_cpu_secs: self.wasted,
            useful_cpu_secs: useful,
            goodput: if useful + self.wasted > 0.0 {
                useful / (useful + self.wasted)
            } else {
                0.0
            },
            checkpoints: self.checkpoints,
            estimate: self.estimate.map(|e| e.0),
            estimate_kills: self.estimate.map(|e| e.1),
            task_end: self.end,
            task_host: self.end_host,
            holds: self.holds,
            max_task_kills: self.task_kills.iter().copied().max().unwrap_or(0),
        }
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

#[cfg(test)]
mod tests;
pub mod verify;
mod windows;
