//! The phase-1 estimate (commit 1892341), frozen here so that the example
//! can time it against the current one in the same run. Not used elsewhere.
#![allow(dead_code)]

use gleaner::model::sched::{EstimateHost, RunningTask};
use rand::Rng;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

const LOOKAHEAD: usize = 8;

/// What the phase-1 estimate took (the current input has more fields).
pub struct EstimateInput<'a> {
    pub hosts: &'a [EstimateHost],
    pub running: &'a [RunningTask],
    pub waiting: &'a [f64],
    pub longest_first: bool,
    pub runs: usize,
}

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

/// p10, p50, p90 and the mean of a quantity over the runs, seconds from now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantiles {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub mean: f64,
}

/// The estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Wall seconds until the last task ends.
    pub makespan: Quantiles,
    /// Each task's end: the running tasks first (in input order), then the waiting ones.
    pub task_eta: Vec<Quantiles>,
    pub runs: usize,
    /// Runs that gave up on a task (see [`MAX_ATTEMPTS`]); their makespan is infinite.
    pub unfinished_runs: usize,
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
#[derive(Debug, Clone, PartialEq)]
pub enum EstimateError {
    TooMany {
        what: &'static str,
        got: usize,
        max: usize,
    },
    NoRuns,
    NoHosts,
    BadHost {
        task: usize,
        host: usize,
        hosts: usize,
    },
    BadRuntime {
        task: usize,
        runtime: f64,
    },
}

#[derive(Debug, Clone, Copy)]
enum EventKind {
    /// Task ended on host.
    Finish { task: usize, host: usize },
    /// Task's attempt was hit on host, keeping this share of its work.
    Fail {
        task: usize,
        host: usize,
        saved: f64,
    },
    /// Host is free again (its own work or its recovery ended).
    HostFree { host: usize },
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
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed, so the max-heap pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.seq.cmp(&self.seq))
    }
}

/// Expected turnarounds of (task, host), computed once and shared by runs.
struct Memo<'a> {
    hosts: &'a [EstimateHost],
    runtimes: Vec<f64>,
    cells: Option<Vec<f64>>,
}

impl Memo<'_> {
    fn get(&mut self, task: usize, host: usize) -> f64 {
        let n = self.hosts.len();
        match &mut self.cells {
            Some(cells) => {
                let cell = &mut cells[task * n + host];
                if cell.is_nan() {
                    *cell = self.hosts[host]
                        .view
                        .expected_turnaround(self.runtimes[task]);
                }
                *cell
            }
            None => self.hosts[host]
                .view
                .expected_turnaround(self.runtimes[task]),
        }
    }
}

/// Runs the estimate. Deterministic for a given RNG state.
pub fn estimate<R: Rng + ?Sized>(
    input: &EstimateInput<'_>,
    rng: &mut R,
) -> Result<(Estimate, Vec<f64>), EstimateError> {
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
    let mut queue_order: Vec<usize> = (input.running.len()..n_tasks).collect();
    if input.longest_first {
        queue_order.sort_by(|&a, &b| runtimes[b].total_cmp(&runtimes[a]).then(a.cmp(&b)));
    }
    let cells =
        (n_tasks.saturating_mul(n_hosts) <= MEMO_LIMIT).then(|| vec![f64::NAN; n_tasks * n_hosts]);
    let mut memo = Memo {
        hosts,
        runtimes,
        cells,
    };

    let mut ends = vec![Vec::with_capacity(input.runs); n_tasks];
    let mut makespans = Vec::with_capacity(input.runs);
    let mut unfinished_runs = 0;
    let mut run = Run::new(n_hosts, n_tasks);
    for _ in 0..input.runs {
        let finished = run.simulate(input, &queue_order, &mut memo, rng);
        if finished {
            let makespan = run.end.iter().copied().fold(0.0, f64::max);
            makespans.push(makespan);
        } else {
            unfinished_runs += 1;
            makespans.push(f64::INFINITY);
        }
        for (task, end) in run.end.iter().enumerate() {
            ends[task].push(*end);
        }
    }
    let task_eta = ends.iter_mut().map(|v| quantiles(v)).collect();
    let makespan = quantiles(&mut makespans.clone());
    Ok((
        Estimate {
            makespan,
            task_eta,
            runs: input.runs,
            unfinished_runs,
        },
        makespans,
    ))
}

/// Nearest-rank quantiles of `values` (sorted in place).
fn quantiles(values: &mut [f64]) -> Quantiles {
    if values.is_empty() {
        return Quantiles {
            p10: 0.0,
            p50: 0.0,
            p90: 0.0,
            mean: 0.0,
        };
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let idx = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
        values[idx]
    };
    Quantiles {
        p10: at(0.1),
        p50: at(0.5),
        p90: at(0.9),
        mean: values.iter().sum::<f64>() / values.len() as f64,
    }
}

/// The mutable state of one run, reused between runs to spare allocations.
struct Run {
    heap: BinaryHeap<Event>,
    seq: u64,
    queue: VecDeque<usize>,
    /// Reference work left per task.
    left: Vec<f64>,
    attempts: Vec<u32>,
    end: Vec<f64>,
    /// Per host: when it is expected to be free (≤ now: free).
    free_at: Vec<f64>,
    is_free: Vec<bool>,
    free_list: Vec<usize>,
    /// A task ran out of attempts in this run.
    gave_up: bool,
}

impl Run {
    fn new(n_hosts: usize, n_tasks: usize) -> Run {
        Run {
            heap: BinaryHeap::new(),
            seq: 0,
            queue: VecDeque::with_capacity(n_tasks),
            left: vec![0.0; n_tasks],
            attempts: vec![0; n_tasks],
            end: vec![0.0; n_tasks],
            free_at: vec![0.0; n_hosts],
            is_free: vec![false; n_hosts],
            free_list: Vec::with_capacity(n_hosts),
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

    /// Starts an attempt of `task` on `host` at `now`: its end or its
    /// failure, whichever the draw puts first.
    fn start<R: Rng + ?Sized>(
        &mut self,
        input: &EstimateInput<'_>,
        task: usize,
        host: usize,
        now: f64,
        rng: &mut R,
    ) {
        let view = &input.hosts[host].view;
        let run = view.expected_run_secs(self.left[task]);
        self.attempts[task] += 1;
        self.gave_up |= self.attempts[task] > MAX_ATTEMPTS;
        self.is_free[host] = false;
        let fail = view.curve.sample_failure(rng).filter(|f| *f < run);
        match fail {
            Some(f) => {
                self.free_at[host] = now + run;
                let tau = input.hosts[host].checkpoint_secs;
                let saved = if tau > 0.0 && run > 0.0 {
                    ((f / tau).floor() * tau / run).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                self.push(now + f, EventKind::Fail { task, host, saved });
            }
            None => {
                self.free_at[host] = now + run;
                self.push(now + run, EventKind::Finish { task, host });
            }
        }
    }

    /// One Monte Carlo run; false when a task ran out of attempts.
    fn simulate<R: Rng + ?Sized>(
        &mut self,
        input: &EstimateInput<'_>,
        queue_order: &[usize],
        memo: &mut Memo<'_>,
        rng: &mut R,
    ) -> bool {
        // Alg. 1:1-2: duplicate the state; t0 = 0.
        self.heap.clear();
        self.seq = 0;
        self.gave_up = false;
        self.queue.clear();
        self.queue.extend(queue_order.iter().copied());
        self.left.copy_from_slice(&memo.runtimes);
        self.attempts.iter_mut().for_each(|a| *a = 0);
        self.end.iter_mut().for_each(|e| *e = 0.0);
        self.free_list.clear();
        for (h, host) in input.hosts.iter().enumerate() {
            self.is_free[h] = host.busy_secs <= 0.0;
            self.free_at[h] = host.busy_secs.max(0.0);
            if self.is_free[h] {
                self.free_list.push(h);
            } else {
                self.push(host.busy_secs, EventKind::HostFree { host: h });
            }
        }
        for (task, r) in input.running.iter().enumerate() {
            if self.is_free[r.host] {
                self.start(input, task, r.host, 0.0, rng);
                self.free_list.retain(|&h| h != r.host);
            } else {
                // Two of our tasks on one host cannot be: queue the extra one.
                self.queue.push_front(task);
            }
        }
        let mut now = 0.0;
        loop {
            // Alg. 1:8-13: free hosts take waiting tasks by the proactive rule.
            self.dispatch(input, memo, now, rng);
            if self.gave_up {
                return false;
            }
            // Alg. 1:3-6: the next event; nothing left to happen ends the run.
            let Some(event) = self.heap.pop() else {
                return self.queue.is_empty();
            };
            now = event.time;
            match event.kind {
                EventKind::Finish { task, host } => {
                    self.end[task] = now;
                    self.left[task] = 0.0;
                    self.is_free[host] = true;
                    self.free_at[host] = now;
                    self.free_list.push(host);
                }
                EventKind::Fail { task, host, saved } => {
                    self.left[task] *= 1.0 - saved;
                    self.queue.push_front(task);
                    let back = now + input.hosts[host].recovery_secs.max(0.0);
                    self.free_at[host] = back;
                    self.push(back, EventKind::HostFree { host });
                }
                EventKind::HostFree { host } => {
                    self.is_free[host] = true;
                    self.free_at[host] = now;
                    self.free_list.push(host);
                }
            }
        }
    }

    fn dispatch<R: Rng + ?Sized>(
        &mut self,
        input: &EstimateInput<'_>,
        memo: &mut Memo<'_>,
        now: f64,
        rng: &mut R,
    ) {
        if self.queue.is_empty() || self.free_list.is_empty() {
            return;
        }
        let n_hosts = input.hosts.len();
        let candidates = std::mem::take(&mut self.free_list);
        for (i, &host) in candidates.iter().enumerate() {
            if self.queue.is_empty() {
                self.free_list.extend_from_slice(&candidates[i..]);
                break;
            }
            let queue = &self.queue;
            let free_at = &self.free_at;
            let is_free = &self.is_free;
            let pick = pick_task_by(
                host,
                queue.len(),
                |g| {
                    if is_free[g] {
                        0.0
                    } else {
                        (free_at[g] - now).max(f64::MIN_POSITIVE)
                    }
                },
                n_hosts,
                |j, g| match queue.get(j) {
                    Some(&task) => memo.get(task, g),
                    None => f64::INFINITY,
                },
            );
            if let Some(task) = pick.and_then(|j| self.queue.remove(j)) {
                self.start(input, task, host, now, rng);
            } else {
                self.free_list.push(host);
            }
        }
        // Nothing else will ever happen (no event due) yet tasks wait: rather
        // than stall, the best free host takes the head.
        if self.heap.is_empty() && !self.free_list.is_empty() {
            if let Some(&task) = self.queue.front() {
                let best = self
                    .free_list
                    .iter()
                    .copied()
                    .min_by(|&a, &b| memo.get(task, a).total_cmp(&memo.get(task, b)));
                if let Some(host) = best {
                    self.queue.pop_front();
                    self.free_list.retain(|&h| h != host);
                    self.start(input, task, host, now, rng);
                }
            }
        }
    }
}

fn pick_task_by(
    host: usize,
    queue_len: usize,
    free_in: impl Fn(usize) -> f64,
    n_hosts: usize,
    mut turnaround: impl FnMut(usize, usize) -> f64,
) -> Option<usize> {
    if queue_len > n_hosts + LOOKAHEAD {
        // Not the tail yet: every host will be needed and the head (the
        // longest task) is what list scheduling gives the first free host.
        return turnaround(0, host).is_finite().then_some(0);
    }
    let others = n_hosts.saturating_sub(1);
    for j in 0..queue_len.min(LOOKAHEAD) {
        let mine = turnaround(j, host);
        if !mine.is_finite() {
            continue;
        }
        if j >= others {
            // At most `others` hosts can be better: the count cannot exceed j.
            return Some(j);
        }
        let mut better = 0;
        for g in 0..n_hosts {
            let wait = free_in(g);
            if g != host && wait.is_finite() && wait + turnaround(j, g) < mine {
                better += 1;
                if better > j {
                    break;
                }
            }
        }
        if better <= j {
            return Some(j);
        }
    }
    // Past the lookahead, the task at position `others` always qualifies;
    // take it when the queue reaches it.
    let j = others.max(LOOKAHEAD);
    (j < queue_len && turnaround(j, host).is_finite()).then_some(j)
}
