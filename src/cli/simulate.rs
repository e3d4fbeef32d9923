//! `gleaner simulate`: a trace-driven discrete-event simulation of a pool
//! running one batch, once per scheduling policy (issue 11, scope 5).
//!
//! This file reads the traces (the same bounded reader as `eval`), builds
//! the pool — host i replays trace i mod the number of traces from its own
//! start offset, with a relative power drawn from the seed — draws the
//! tasks' runtimes, and prints or writes the results. The simulator, the
//! policies and the estimate live in `model::sched`.

use crate::cli::args::parse_duration;
use crate::cli::output::{print_json, print_text};
use crate::consumer::batch::queue::TAIL_COPIES_DEFAULT;
use crate::eval::load::read_traces;
use crate::model::baselines::{method_by_name, DEFAULT_METHOD};
use crate::model::sched::backtest::{calibrate, widen, Backtests, Calibration, MAX_BACKTESTS};
use crate::model::sched::estimate::Quantiles;
use crate::model::sched::sim::verify::{replay, VerifyOutcome, VerifyPlan};
use crate::model::sched::sim::{
    simulate, submission_estimate, summaries_apply, ClaimPlan, Knowledge, Policy, Scoring,
    SeriesForecaster, SimConfig, SimHost, SimResult,
};
use crate::model::sched::timeline::Timeline;
use crate::model::series::HostSeries;
use crate::model::state::Thresholds;
use crate::model::trust::AdaptiveRule;
use crate::parallel;
use anyhow::{bail, Context};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Most simulated hosts.
pub const MAX_HOSTS: usize = 100_000;
/// Most simulated tasks.
pub const MAX_TASKS: usize = 1_000_000;
/// Time-bucket of the cached TR curves.
pub const CURVE_BUCKET_SECS: i64 = 3_600;

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Host trace files (format v1); host i replays trace i mod their number.
    #[arg(long, value_name = "FILE", num_args = 1.., required = true)]
    pub trace: Vec<PathBuf>,

    /// Number of hosts [default: one per trace].
    #[arg(long, value_name = "N")]
    pub hosts: Option<usize>,

    /// Number of tasks in the batch.
    #[arg(long, value_name = "N")]
    pub tasks: usize,

    /// Each task's runtime on a dedicated reference host: a duration (`2h`)
    /// or `lognormal:MEDIAN,SIGMA` (e.g. `lognormal:1h,0.5`).
    #[arg(long, value_name = "DUR|lognormal:MEDIAN,SIGMA", value_parser = parse_runtime)]
    pub runtime: RuntimeSpec,

    /// Comma-separated policies: random, power, tr-freq, tr, proactive,
    /// proactive+checkpoint, oracle, windows (proactive holding long tasks
    /// for later windows; issue 28), proactive-auto (proactive, or windows
    /// with bounded holds, whichever ended the batch sooner replayed on the
    /// pool's past; docs/scheduling.md).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "random,power,tr-freq,tr,proactive,proactive+checkpoint,oracle"
    )]
    pub policy: Vec<Policy>,

    /// Tail copies under the proactive policies (issue 28): once free hosts
    /// outnumber waiting tasks, one extra copy of each running task most at
    /// risk (up to three of one its hosts' owners killed five times); the
    /// first to finish wins, the others are cancelled. On by
    /// default, as in the node's queue (`[batch] tail_copies`).
    #[arg(long, value_name = "on|off", default_value = on_off(TAIL_COPIES_DEFAULT), action = clap::ArgAction::Set, value_parser = parse_on_off)]
    pub tail_copies: bool,

    /// Seed of every random choice (offsets, powers, runtimes, draws).
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// Wall time one checkpoint costs (for proactive+checkpoint).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub checkpoint_cost: u64,

    /// How far into each trace the batch is submitted, for the trace's
    /// first host (the history before it), at most half the trace's rows
    /// (a warning counts the traces too short, whose hosts are submitted
    /// earlier in their week than the others).
    /// 14 days keeps a trace's weekday and time of day and is as far as a
    /// `trace synth --days 28` trace (begun on a Monday at 00:00) allows;
    /// `320h` submits on the Sunday before at 08:00 (`trace synth --end`
    /// moves the weekday).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "14d")]
    pub submit_after: u64,

    /// The simulation stops after this long; tasks not done are counted as unfinished.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "90d")]
    pub horizon: u64,

    /// Monte Carlo runs of the estimate made at submission.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub estimate_runs: usize,

    /// Back-tests that calibrate the estimate's band: the same batch
    /// submitted earlier on the same hosts, simulated and compared with
    /// the estimate made then; the band is widened by how far they missed
    /// (docs/scheduling.md). Each costs one simulation and one estimate;
    /// 0 turns calibration off.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub backtests: usize,

    /// Reliability method behind `tr`, `proactive` and the estimate.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_METHOD)]
    pub method: String,

    /// Write three SVG bar charts into DIR: makespan.svg, kills.svg (kills
    /// per task by cause) and wasted.svg (wasted CPU hours), one bar per policy.
    #[arg(long, value_name = "DIR")]
    pub svg: Option<PathBuf>,

    /// Threads to run the policies on [default: the machine's cores, at
    /// most 16]. The results are the same on any number.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=16))]
    pub threads: Option<u16>,

    /// Check results by replication — none, replicate (`--replicas K`,
    /// quorum a majority) or adaptive (the node's rule) — and report the
    /// extra copies run per accepted result, during the warm-up (the first
    /// 10 × hosts completions) and after (docs/trust.md).
    #[arg(long, value_name = "MODE", default_value = "none", value_parser = ["none", "replicate", "adaptive"])]
    pub verify: String,

    /// Copies per task under `--verify replicate`.
    #[arg(long, value_name = "K", default_value_t = 2)]
    pub replicas: u32,

    /// Hosts (the first N) that always return a wrong result, for `--verify`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub liars: usize,

    /// Write the results as JSON to FILE (`-`: stdout).
    #[arg(long = "json", value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,

    #[command(flatten)]
    pub knowledge: KnowledgeArgs,

    #[command(flatten)]
    pub claims: ClaimArgs,
}

/// How task runtimes are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum RuntimeSpec {
    Fixed(f64),
    LogNormal { median: f64, sigma: f64 },
}

/// Parses `DUR` or `lognormal:MEDIAN,SIGMA`.
pub fn parse_runtime(text: &str) -> Result<RuntimeSpec, String> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("lognormal:") {
        let (median, sigma) = rest
            .split_once(',')
            .ok_or_else(|| format!("`{t}`: use lognormal:MEDIAN,SIGMA, e.g. lognormal:1h,0.5"))?;
        let median = parse_duration(median)? as f64;
        let sigma: f64 = sigma
            .trim()
            .parse()
            .map_err(|_| format!("`{sigma}` in `{t}` is not a number"))?;
        if !(0.0..=5.0).contains(&sigma) {
            return Err(format!("sigma {sigma} in `{t}` must be between 0 and 5"));
        }
        return Ok(RuntimeSpec::LogNormal { median, sigma });
    }
    Ok(RuntimeSpec::Fixed(parse_duration(t)? as f64))
}

impl RuntimeSpec {
    fn draw(self, rng: &mut ChaCha8Rng) -> f64 {
        match self {
            RuntimeSpec::Fixed(r) => r,
            RuntimeSpec::LogNormal { median, sigma } => {
                // Box-Muller: one standard normal from two uniforms.
                let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
                let u2: f64 = rng.random::<f64>();
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                (median * (sigma * z).exp()).clamp(1.0, 366.0 * 86_400.0)
            }
        }
    }
}

/// What the estimate at submission depends on: (tr-freq's predictions,
/// checkpointing).
type EstimateKind = (bool, bool);

/// One policy's line of the report.
#[derive(Debug, Serialize)]
pub struct PolicyReport {
    /// The policy's name, with " [summaries]" or " [sample]" when it placed
    /// from them.
    pub label: String,
    #[serde(flatten)]
    pub result: SimResult,
    /// Kills per task by cause (S3, S4, S5).
    pub kills_per_task: [f64; 3],
    /// Whether the realised makespan fell within the estimate's [p10, p90].
    pub within_estimate: Option<bool>,
    /// The back-tests that widened the estimate's band (`--backtests`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate_calibration: Option<Calibration>,
    /// What `--verify` cost and caught on this policy's completions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerifyOutcome>,
    pub wall_secs: f64,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct SimulateReport {
    pub traces: Vec<String>,
    pub hosts: usize,
    pub tasks: usize,
    pub runtime: RuntimeSpec,
    pub seed: u64,
    pub method: String,
    pub checkpoint_cost_secs: u64,
    /// `--verify` mode, and the completions counted as its warm-up.
    pub verify: String,
    pub verify_warmup: u64,
    pub liars: usize,
    /// `--overclaim`: the share of hosts that claim TR 1 at every window.
    pub overclaim: f64,
    /// `--overclaim-pick`: `random` or `least-reliable`.
    pub overclaim_pick: String,
    pub policies: Vec<PolicyReport>,
    /// TR curves computed (cache misses) and forecasts that had too little history.
    pub curves_computed: usize,
    pub forecasts_failed: usize,
    pub setup_secs: f64,
    /// Threads the policies and estimates ran on (the results do not depend on it).
    pub threads: usize,
    /// `--summary-heartbeat`, for the runs that placed from summaries.
    pub summary_heartbeat_secs: u64,
    /// `--submit-after` as asked (each trace's host was submitted at most
    /// half its rows in).
    pub submit_after_secs: u64,
    /// Traces shorter than twice `--submit-after`, whose hosts were
    /// submitted half-way in (0 when every trace is long enough).
    pub traces_short: usize,
}

/// The pool: hosts with offsets and powers, and one timeline per trace.
pub fn build_pool(
    series: &[HostSeries],
    n_hosts: usize,
    th: Thresholds,
    submit_after: i64,
    rng: &mut ChaCha8Rng,
) -> anyhow::Result<(Vec<SimHost>, Vec<Timeline>)> {
    let mut timelines = Vec::with_capacity(series.len());
    for (i, s) in series.iter().enumerate() {
        let (Some(first), Some(last)) = (s.first_time(), s.last_time()) else {
            bail!("trace {} has no rows", i + 1);
        };
        timelines.push(
            Timeline::from_series(s, th, first, last + i64::from(s.step_secs))
                .with_context(|| format!("trace {}", i + 1))?,
        );
    }
    let mut hosts = Vec::with_capacity(n_hosts);
    for i in 0..n_hosts {
        let t = i % series.len();
        let tl = &timelines[t];
        // Hosts sharing a trace start up to a week apart.
        let warmup = warmup(tl, submit_after);
        let shift = if i < series.len() {
            0
        } else {
            rng.random_range(0..7 * 1440) * 60
        };
        let power = if i < series.len() {
            1.0
        } else {
            rng.random_range(0.4..=1.0)
        };
        hosts.push(SimHost {
            timeline: t,
            offset: tl.start() + warmup + shift,
            power,
        });
    }
    Ok((hosts, timelines))
}

/// How far into its trace a host is submitted: `submit_after` of history
/// (two weeks unless told) where the trace allows, at most half of it (the
/// predictors need its history, the batch its future).
fn warmup(tl: &Timeline, submit_after: i64) -> i64 {
    submit_after.clamp(0, tl.span_secs() / 2)
}

/// Traces too short for `submit_after`, whose hosts were submitted half-way
/// in, earlier in their week than the others of the pool.
fn traces_short(timelines: &[Timeline], submit_after: i64) -> usize {
    timelines
        .iter()
        .filter(|tl| warmup(tl, submit_after) < submit_after)
        .count()
}

pub fn run(args: &SimulateArgs, global_json: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let json_stdout = global_json || args.json.as_deref() == Some(Path::new("-"));
    let n_hosts = args.hosts.unwrap_or(args.trace.len());
    if n_hosts == 0 || n_hosts > MAX_HOSTS {
        bail!("--hosts must be between 1 and {MAX_HOSTS}, got {n_hosts}");
    }
    if args.tasks == 0 || args.tasks > MAX_TASKS {
        bail!(
            "--tasks must be between 1 and {MAX_TASKS}, got {}",
            args.tasks
        );
    }
    if args.backtests > MAX_BACKTESTS {
        bail!(
            "--backtests must be at most {MAX_BACKTESTS}, got {}",
            args.backtests
        );
    }
    if args.estimate_runs > crate::model::sched::estimate::MAX_RUNS {
        bail!(
            "--estimate-runs must be at most {}",
            crate::model::sched::estimate::MAX_RUNS
        );
    }
    let verify_plan = match args.verify.as_str() {
        "replicate" => {
            if !(2..=crate::model::trust::MAX_COPIES).contains(&args.replicas) {
                bail!(
                    "--replicas must be between 2 and {}",
                    crate::model::trust::MAX_COPIES
                );
            }
            Some(VerifyPlan::Replicate {
                replicas: args.replicas,
                quorum: args.replicas / 2 + 1,
            })
        }
        "adaptive" => Some(VerifyPlan::Adaptive(AdaptiveRule::default())),
        _ => None,
    };
    if args.liars > n_hosts {
        bail!("--liars {} is more than the {n_hosts} hosts", args.liars);
    }
    let verify_warmup = u64::from(AdaptiveRule::default().trust_after) * n_hosts as u64;
    if method_by_name(&args.method, args.seed).is_none() {
        bail!("unknown --method {:?}", args.method);
    }
    let traces = read_traces(&args.trace)?;
    let series: Vec<HostSeries> = traces.into_iter().map(|t| t.series).collect();
    let th = Thresholds::default();
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let submit_after = i64::try_from(args.submit_after).unwrap_or(i64::MAX);
    let (hosts, timelines) = build_pool(&series, n_hosts, th, submit_after, &mut rng)?;
    let traces_short = traces_short(&timelines, submit_after);
    if traces_short > 0 {
        eprintln!(
            "warning: {traces_short} of {} traces are shorter than twice --submit-after \
             ({}); their hosts were submitted half-way in, earlier than the others",
            timelines.len(),
            crate::human::duration(args.submit_after),
        );
    }
    let runtimes: Vec<f64> = (0..args.tasks)
        .map(|_| args.runtime.draw(&mut rng))
        .collect();
    let overclaims = args.claims.overclaimers(
        &hosts,
        &timelines,
        claims::median_runtime(&runtimes),
        args.seed,
    )?;
    let setup_secs = started.elapsed().as_secs_f64();

    let method = |name: &str| method_by_name(name, args.seed).context("unknown method");
    let default_fc = SeriesForecaster::new(&series, method(&args.method)?, th, CURVE_BUCKET_SECS);
    let freq_fc = SeriesForecaster::new(&series, method("freq")?, th, CURVE_BUCKET_SECS);
    let forecaster = |policy: Policy| {
        if policy == Policy::TrFreq {
            &freq_fc
        } else {
            &default_fc
        }
    };
    // The estimate at submission depends on the predictions (tr-freq has
    // its own) and on checkpointing, not on the policy: made once per kind,
    // by the first policy of that kind, from a generator of its own.
    let kind_of = |policy: Policy| -> EstimateKind {
        (
            policy == Policy::TrFreq,
            policy == Policy::ProactiveCheckpoint,
        )
    };
    let mut kinds: Vec<(EstimateKind, Policy)> = Vec::new();
    if args.estimate_runs > 0 {
        for &policy in &args.policy {
            if !kinds.iter().any(|k| k.0 == kind_of(policy)) {
                kinds.push((kind_of(policy), policy));
            }
        }
    }
    // Each policy once per kind of knowledge (the oracle and `windows`
    // only with full knowledge) and per claim scoring.
    let kinds_of_knowledge = args.knowledge.kinds(n_hosts)?;
    let scorings = args.claims.scorings();
    let mut runs: Vec<(usize, Knowledge, Scoring)> = Vec::new();
    for (i, &policy) in args.policy.iter().enumerate() {
        for &k in &kinds_of_knowledge {
            let k = match k {
                Knowledge::Summaries(_) if !summaries_apply(policy) => Knowledge::Full,
                k => k,
            };
            for &scoring in &scorings {
                if !runs.contains(&(i, k, scoring)) {
                    runs.push((i, k, scoring));
                }
            }
        }
    }
    let labels: Vec<String> = runs
        .iter()
        .map(|&(i, k, scoring)| run_label(args.policy[i], k, scoring))
        .collect();
    let claims = |scoring: Scoring| ClaimPlan {
        overclaims: overclaims.clone(),
        scoring,
    };
    let config =
        |policy: Policy, estimate_runs: usize, knowledge: Knowledge, scoring: Scoring| SimConfig {
            knowledge,
            policy,
            runtimes: runtimes.clone(),
            checkpoint_cost_secs: args.checkpoint_cost as f64,
            horizon_secs: args.horizon as f64,
            estimate_runs,
            recheck_secs: 600.0,
            windows: knobs::window_rule_from_env(),
            duel: knobs::duel_rule_from_env(),
            hold_gives_way: knobs::gives_way_from_env(),
            tail_copies: args.tail_copies,
            tail: knobs::tail_rule_from_env(),
            claims: claims(scoring),
        };
    let bars = ProgressBars::new(&labels, json_stdout);
    // Jobs: the estimates, then the simulations, the costliest first so
    // the threads end together; each job's result depends only on the job.
    let mut jobs: Vec<Job> = (0..kinds.len()).map(Job::Estimate).collect();
    let mut sims: Vec<usize> = (0..runs.len()).collect();
    sims.sort_by_key(|&r| std::cmp::Reverse(expected_cost(args.policy[runs[r].0])));
    jobs.extend(sims.into_iter().map(Job::Simulate));
    let threads = args
        .threads
        .map_or_else(parallel::default_threads, usize::from);
    let outputs = parallel::run_jobs(jobs.len(), threads, |j| match jobs[j] {
        Job::Estimate(k) => {
            let ((freq, checkpoint), policy) = kinds[k];
            let tag = 1 + u64::from(freq) + 2 * u64::from(checkpoint);
            let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ (tag << 48));
            // Made before any attempt: no record to score yet.
            let estimate = submission_estimate(
                &config(policy, args.estimate_runs, Knowledge::Full, Scoring::Off),
                &hosts,
                &timelines,
                &mut forecaster(policy),
                |input| parallel::estimate(input, &mut rng, 1),
            );
            // Calibrated against the pool's own past: back-test b draws
            // from a generator of its own, so the results depend on the job only.
            let calibration = estimate.filter(|_| args.backtests > 0).map(|(now, _)| {
                let config = config(policy, args.estimate_runs, Knowledge::Full, Scoring::Off);
                let what = Backtests {
                    config: &config,
                    hosts: &hosts,
                    timelines: &timelines,
                    now: &now,
                    backtests: args.backtests,
                };
                calibrate(
                    what,
                    &mut forecaster(policy),
                    |b| ChaCha8Rng::seed_from_u64(args.seed ^ (tag << 48) ^ ((b as u64) << 40)),
                    |input, rng| parallel::estimate(input, rng, 1),
                )
            });
            let estimate = estimate.map(|(now, kills)| {
                let factor = calibration.as_ref().map_or(1.0, |c| c.widening);
                (widen(&now, factor), kills)
            });
            JobOutput::Estimate(estimate, calibration)
        }
        Job::Simulate(r) => {
            let (i, knowledge, scoring) = runs[r];
            let policy = args.policy[i];
            let bar = bars.start(r);
            let mut policy_rng = ChaCha8Rng::seed_from_u64(args.seed ^ ((i as u64 + 1) << 32));
            let t0 = Instant::now();
            let result = simulate(
                &config(policy, 0, knowledge, scoring),
                &hosts,
                &timelines,
                &mut forecaster(policy),
                &mut policy_rng,
                &mut |share| bar.set_position((share * 1000.0) as u64),
            );
            bar.finish_and_clear();
            JobOutput::Simulate(Box::new(result), t0.elapsed().as_secs_f64())
        }
    });
    bars.clear();
    let mut estimates = vec![None; kinds.len()];
    let mut calibrations: Vec<Option<Calibration>> = vec![None; kinds.len()];
    let mut results: Vec<Option<(SimResult, f64)>> = (0..runs.len()).map(|_| None).collect();
    for (job, output) in jobs.iter().zip(outputs) {
        match (job, output) {
            (Job::Estimate(k), JobOutput::Estimate(e, c)) => {
                estimates[*k] = e;
                calibrations[*k] = c;
            }
            (Job::Simulate(i), JobOutput::Simulate(result, wall)) => {
                results[*i] = Some(((*result)?, wall))
            }
            _ => bail!("a simulation job returned another job's output"),
        }
    }
    let mut policies = Vec::with_capacity(runs.len());
    for (r, &(i, _, _)) in runs.iter().enumerate() {
        let policy = args.policy[i];
        let Some((mut result, wall_secs)) = results[r].take() else {
            bail!("policy {} was not simulated", labels[r]);
        };
        let mut estimate_calibration = None;
        if let Some(k) = kinds.iter().position(|k| k.0 == kind_of(policy)) {
            result.estimate = estimates[k].map(|e| e.0);
            result.estimate_kills = estimates[k].map(|e| e.1);
            estimate_calibration = calibrations[k].clone();
        }
        let per_task = |k: u64| k as f64 / args.tasks as f64;
        let within = match (result.estimate, result.makespan_secs) {
            (Some(e), Some(m)) => Some(e.p10 <= m && m <= e.p90),
            _ => None,
        };
        let verification = verify_plan.map(|plan| {
            let mut verify_rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x7275_7374);
            replay(
                &result.task_end,
                &result.task_host,
                n_hosts,
                args.liars,
                plan,
                verify_warmup,
                &mut verify_rng,
            )
        });
        policies.push(PolicyReport {
            label: labels[r].clone(),
            verification,
            kills_per_task: [
                per_task(result.kills[0]),
                per_task(result.kills[1]),
                per_task(result.kills[2]),
            ],
            within_estimate: within,
            estimate_calibration,
            wall_secs,
            result,
        });
    }
    let report = SimulateReport {
        traces: args.trace.iter().map(|p| p.display().to_string()).collect(),
        hosts: n_hosts,
        tasks: args.tasks,
        runtime: args.runtime,
        seed: args.seed,
        method: args.method.clone(),
        checkpoint_cost_secs: args.checkpoint_cost,
        verify: args.verify.clone(),
        verify_warmup,
        liars: args.liars,
        overclaim: args.claims.overclaim,
        overclaim_pick: args.claims.pick_name().to_string(),
        policies,
        curves_computed: default_fc.computed() + freq_fc.computed(),
        forecasts_failed: default_fc.failed() + freq_fc.failed(),
        threads,
        setup_secs,
        summary_heartbeat_secs: args.knowledge.summary_heartbeat,
        submit_after_secs: args.submit_after,
        traces_short,
    };
    if let Some(dir) = &args.svg {
        write_svgs(dir, &report)?;
    }
    if json_stdout {
        return print_json(&report);
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    print_text(&table(&report))
}

/// A unit of the run: the estimate of one kind, or one policy's simulation.
#[derive(Debug, Clone, Copy)]
enum Job {
    Estimate(usize),
    Simulate(usize),
}

enum JobOutput {
    Estimate(Option<(Quantiles, f64)>, Option<Calibration>),
    Simulate(
        Box<Result<SimResult, crate::model::sched::sim::SimError>>,
        f64,
    ),
}

/// A run's name in the report: the policy's, how it knew the pool when
/// not fully, and what it did with claims when it scored them.
fn run_label(policy: Policy, knowledge: Knowledge, scoring: Scoring) -> String {
    let mut label = policy.name().to_string();
    match knowledge {
        Knowledge::Summaries(plan) if plan.sample.is_some() => label.push_str(" [sample]"),
        Knowledge::Summaries(_) => label.push_str(" [summaries]"),
        Knowledge::Full => {}
    }
    if scoring != Scoring::Off {
        label.push_str(&format!(" [{scoring}]"));
    }
    label
}

/// A rough rank of a policy's simulation cost (which jobs to start first).
fn expected_cost(policy: Policy) -> u8 {
    match policy {
        Policy::Oracle => 7,
        Policy::Windows | Policy::ProactiveAuto => 6,
        Policy::Proactive => 5,
        Policy::ProactiveCheckpoint => 4,
        Policy::Tr => 3,
        Policy::TrFreq => 2,
        Policy::Random => 1,
        Policy::Power => 0,
    }
}

/// One progress bar per policy, shown while its simulation runs (several
/// at once on several threads); hidden for JSON on stdout or when stderr
/// is not a terminal.
struct ProgressBars {
    multi: MultiProgress,
    bars: Vec<ProgressBar>,
}

impl ProgressBars {
    fn new(labels: &[String], quiet: bool) -> ProgressBars {
        let multi = if quiet || !std::io::stderr().is_terminal() {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        } else {
            MultiProgress::with_draw_target(ProgressDrawTarget::stderr())
        };
        let bars = labels
            .iter()
            .map(|label| {
                let bar = ProgressBar::hidden();
                bar.set_length(1000);
                if let Ok(style) = ProgressStyle::with_template(
                    "{msg:>22} [{bar:40}] {percent}% tasks done, {elapsed}",
                ) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar.set_message(label.clone());
                bar
            })
            .collect();
        ProgressBars { multi, bars }
    }

    /// Shows policy `i`'s bar (its simulation starts) and returns it.
    fn start(&self, i: usize) -> ProgressBar {
        let bar = self.multi.add(self.bars[i].clone());
        bar.reset_elapsed();
        bar
    }

    fn clear(&self) {
        let _ = self.multi.clear();
    }
}

/// `on` or `off`.
/// How [`parse_on_off`] spells `on`: a default given as a bool.
const fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?}: say on or off")),
    }
}

mod claims;
mod knobs;
mod knowledge;
mod svg;
pub use claims::ClaimArgs;
pub use knowledge::KnowledgeArgs;
use svg::write_svgs;

mod text;
use text::table;

#[cfg(test)]
mod tests;
