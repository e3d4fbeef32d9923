//! An estimate's input checked and prepared once, its Monte Carlo runs
//! made in any split (one seed, run r on stream r), and the parts put
//! together into quantiles.

use super::super::place::by_slowdown;
use super::facts::HostFacts;
use super::held::{self, Hold};
use super::memo::{Memo, SPARE_CELL_LIMIT};
use super::run::Run;
use super::{Estimate, EstimateError, EstimateInput, Quantiles, MAX_HOSTS, MAX_RUNS, MAX_TASKS};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
        for (host, h) in hosts.iter().enumerate() {
            if let Some(days) = &h.days {
                days.check()
                    .map_err(|why| EstimateError::BadPastDays { host, why })?;
            }
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
        self.runs_with_spare_cells(range, SPARE_CELL_LIMIT)
    }

    /// [`Self::runs`] with the memo's spare rows holding at most
    /// `spare_cells` cells ([`Memo::new`]): the same runs for any limit,
    /// which the tests check.
    pub(super) fn runs_with_spare_cells(
        &self,
        range: std::ops::Range<usize>,
        spare_cells: usize,
    ) -> EstimatePart {
        let range = range.start.min(self.input.runs)..range.end.min(self.input.runs);
        let n_tasks = self.runtimes.len();
        let mut memo = Memo::new(&self.facts, &self.runtimes, spare_cells);
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
