//! The papers' linear time-series baselines (seed 000, section VI.B):
//! AR(8), BM(8), MA(8), ARMA(8,8) and LAST fitted to host load and free
//! memory over the previous window of the same length (the T seconds up to
//! and including W, resampled on the step grid), in two versions:
//!
//! - point (`ar8`, …): the papers' way. The fitted model's point forecast is
//!   iterated m steps and read through the five-state rules, sustain rule
//!   included; TR is 1 when no S3/S4 is entered, else 0.
//! - probabilistic (`ar8-prob`, …): [`PATHS`] futures are simulated with
//!   bootstrapped fitted innovations; TR is the share of paths entering no
//!   S3/S4. The paths run in lockstep, column-wise, and a path stops at its
//!   first failure.
//!
//! Resampling: the value at a grid time is that of the row in force then;
//! where the record reads S5 (down, or a long silence) or has no row, the
//! value is missing (NaN), and the fit uses only the last unbroken run of
//! values (see `model::timeseries`). An excursion above Th2 going on at W
//! is carried into the forecast, so the sustain rule counts from its true
//! start. Free memory is modelled only when the job has a working set
//! (`job_mem_mib > 0`); otherwise S4 cannot occur.
//!
//! S5 (revocation) cannot be forecast from load or memory: these methods
//! never predict it, which the evaluation should keep in mind. A host
//! already failed at W gets TR = 0.
//!
//! Pure code: randomness comes from a ChaCha8 generator seeded from the
//! predictor's seed and the request, so answers are reproducible.

use super::{certain_failure, observed_state};
use crate::predict::{geometry, PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use crate::solver::CAUSES;
use crate::state::{ExcursionTracker, State, Thresholds};
use crate::timeseries::{
    first_failure_in_forecast, fit, forecast, FittedModel, ForecastGrid, PathBatch, TimeSeriesModel,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Simulated paths per probabilistic forecast.
pub const PATHS: usize = 200;

/// A linear time-series baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearBaseline {
    pub model: TimeSeriesModel,
    /// Simulated paths (true) or the iterated point forecast (false).
    pub probabilistic: bool,
    /// Seeds the path simulation, mixed with the request.
    pub seed: u64,
}

impl LinearBaseline {
    pub fn new(model: TimeSeriesModel, probabilistic: bool, seed: u64) -> Self {
        LinearBaseline {
            model,
            probabilistic,
            seed,
        }
    }

    /// The generator for one request: the same (seed, request) gives the same paths.
    fn rng(&self, req: &PredictRequest) -> ChaCha8Rng {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&self.seed.to_le_bytes());
        key[8..16].copy_from_slice(&req.at.to_le_bytes());
        key[16..24].copy_from_slice(&req.window_secs.to_le_bytes());
        key[24..].copy_from_slice(&model_tag(self.model).to_le_bytes());
        ChaCha8Rng::from_seed(key)
    }
}

/// A distinct number per model, so the five models draw different paths.
fn model_tag(model: TimeSeriesModel) -> u64 {
    match model {
        TimeSeriesModel::Ar(p) => 1 << 32 | p as u64,
        TimeSeriesModel::Bm(p) => 2 << 32 | p as u64,
        TimeSeriesModel::Ma(q) => 3 << 32 | q as u64,
        TimeSeriesModel::Arma(p, q) => 4 << 32 | (p as u64) << 16 | q as u64,
        TimeSeriesModel::Last => 5 << 32,
    }
}

impl ReliabilityPredictor for LinearBaseline {
    fn name(&self) -> String {
        let base = match self.model {
            TimeSeriesModel::Ar(p) => format!("ar{p}"),
            TimeSeriesModel::Bm(p) => format!("bm{p}"),
            TimeSeriesModel::Ma(q) => format!("ma{q}"),
            TimeSeriesModel::Arma(p, _) => format!("arma{p}"),
            TimeSeriesModel::Last => "last".to_string(),
        };
        if self.probabilistic {
            format!("{base}-prob")
        } else {
            base
        }
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let (step, m) = geometry(series, req)?;
        let th = req.thresholds;
        if let Some(state) = observed_state(series, req).filter(|s| s.is_failure()) {
            return Ok(certain_failure(state));
        }
        let past = previous_window(series, th, req.at, step, m);
        let no_samples = PredictError::NoRecentSamples { at: req.at };
        let cpu_fit = fit(self.model, &past.cpu).map_err(|_| no_samples.clone())?;
        // Free memory matters only for a job with a working set; a window
        // without a memory reading leaves S4 unforecast.
        let mem_fit = if th.job_mem_mib > 0 {
            fit(self.model, &past.free_mib).ok()
        } else {
            None
        };
        let tracker = tracker_at(series, th, req.at);
        let grid = ForecastGrid {
            start_time: req.at.saturating_add(i64::from(step)),
            step_secs: step,
        };
        let mem = mem_fit.as_ref().map(|f| (f, past.free_mib.as_slice()));
        let fail = if self.probabilistic {
            let mut rng = self.rng(req);
            simulated_failures(&th, grid, tracker, (&cpu_fit, &past.cpu), mem, m, &mut rng)
        } else {
            point_failure(&th, grid, tracker, (&cpu_fit, &past.cpu), mem, m)
        };
        Ok(ReliabilityForecast {
            tr: survival(&fail),
            fail_by_cause: Some(fail),
        })
    }
}

/// TR from failure shares that are whole multiples of 1 / [`PATHS`] (or
/// one-hot): rounded to that grid so 1 − ΣF carries no float noise.
fn survival(fail: &[f64; CAUSES]) -> f64 {
    let failed = fail.iter().sum::<f64>();
    ((1.0 - failed) * PATHS as f64)
        .round()
        .clamp(0.0, PATHS as f64)
        / PATHS as f64
}

/// Host load and free memory on the grid W − m·step, …, W (oldest first).
#[derive(Debug, Clone, PartialEq)]
pub struct PreviousWindow {
    pub cpu: Vec<f64>,
    pub free_mib: Vec<f64>,
}

/// Resamples the previous window of `m` steps ending at `at` (see the module
/// docs). Reads nothing after `at`.
pub fn previous_window(
    series: &HostSeries,
    th: Thresholds,
    at: i64,
    step: u32,
    m: usize,
) -> PreviousWindow {
    let mut cpu = vec![f64::NAN; m + 1];
    let mut free_mib = vec![f64::NAN; m + 1];
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        return PreviousWindow { cpu, free_mib };
    };
    let step_i = i64::from(step.max(1));
    let start = at - m as i64 * step_i;
    // The grid points inside the record: k0..=k1.
    let k0 = if start >= first {
        0
    } else {
        (first - start + step_i - 1) / step_i
    };
    let k1 = if at <= last {
        m as i64
    } else {
        (last - start).div_euclid(step_i)
    };
    if k0 > k1 || k1 < 0 {
        return PreviousWindow { cpu, free_mib };
    }
    let (k0, k1) = (k0 as usize, k1 as usize);
    let mut states = Vec::with_capacity(k1 - k0 + 1);
    let t0 = start + k0 as i64 * step_i;
    if !series.window_states(th, t0, step, k1 - k0, &mut states) {
        return PreviousWindow { cpu, free_mib };
    }
    let Some(mut row) = series.row_at(t0) else {
        return PreviousWindow { cpu, free_mib };
    };
    for (i, state) in states.iter().enumerate() {
        let t = t0 + i as i64 * step_i;
        while series.get(row + 1).is_some_and(|s| s.time <= t) {
            row += 1;
        }
        if *state == State::S5 {
            continue;
        }
        if let Some(sample) = series.get(row) {
            cpu[k0 + i] = sample.cpu;
            free_mib[k0 + i] = sample.free_mib as f64;
        }
    }
    PreviousWindow { cpu, free_mib }
}

/// The excursion tracker as it stands at W, so an excursion above Th2 going
/// on at W keeps its true start. Walks back over the rows of the excursion
/// for at most the sustain time (longer means S3 at W, handled before).
fn tracker_at(series: &HostSeries, th: Thresholds, at: i64) -> ExcursionTracker {
    let mut tracker = ExcursionTracker::default();
    let Some(row) = series.row_at(at) else {
        return tracker;
    };
    let Some(now) = series.get(row) else {
        return tracker;
    };
    if !now.up {
        return tracker;
    }
    if th.is_hot(now.cpu) {
        let sustain = i64::from(th.sustain_secs);
        let mut first = now;
        let mut before = State::S2;
        let mut i = row;
        while i > 0 && now.time - first.time < sustain {
            let Some(prev) = series.get(i - 1) else { break };
            let linked = prev.up && (first.time - prev.time) as u64 <= series.max_gap_secs;
            if !linked {
                break;
            }
            if !th.is_hot(prev.cpu) {
                before = th.light_or_heavy(prev.cpu);
                break;
            }
            first = prev;
            i -= 1;
        }
        tracker.resume_excursion(first.time, before);
    }
    tracker.observe(&th, now.time, now.cpu);
    tracker
}

/// One-hot failure by cause of the papers' iterated point forecast.
fn point_failure(
    th: &Thresholds,
    grid: ForecastGrid,
    tracker: ExcursionTracker,
    cpu: (&FittedModel, &[f64]),
    mem: Option<(&FittedModel, &[f64])>,
    m: usize,
) -> [f64; CAUSES] {
    let cpu_path = forecast(cpu.0, cpu.1, m);
    let mem_path = match mem {
        Some((fitted, history)) => forecast(fitted, history, m),
        None => vec![f64::INFINITY; m],
    };
    let mut fail = [0.0; CAUSES];
    if let Some(f) = first_failure_in_forecast(th, grid, tracker, &cpu_path, &mem_path) {
        if let Some(c) = f.state.failure_index() {
            fail[c] = 1.0;
        }
    }
    fail
}

/// Shares of [`PATHS`] simulated futures failing by S3 and by S4. The
/// paths run in lockstep ([`PathBatch`]): each step draws one innovation
/// per live path for load (and one for free memory), and a path ends at its
/// first failure. Load and memory paths are independent; S4 wins a tie, as
/// in the state rules. When no innovation can vary (every residual equal,
/// as on a host whose load never changed), all paths are the same and one
/// is simulated.
fn simulated_failures(
    th: &Thresholds,
    grid: ForecastGrid,
    tracker: ExcursionTracker,
    cpu: (&FittedModel, &[f64]),
    mem: Option<(&FittedModel, &[f64])>,
    m: usize,
    rng: &mut ChaCha8Rng,
) -> [f64; CAUSES] {
    let step = i64::from(grid.step_secs);
    let sustain = i64::from(th.sustain_secs);
    let job_mem = th.job_mem_mib as f64;
    let cpu_pool = cpu.0.residuals();
    let mem_pool = mem.map(|(fitted, _)| fitted.residuals());
    let paths = if all_equal(cpu_pool) && mem_pool.is_none_or(all_equal) {
        1
    } else {
        PATHS
    };
    let mut cpu_batch = PathBatch::new(cpu.0, cpu.1, paths);
    let mut mem_batch = mem.map(|(fitted, history)| PathBatch::new(fitted, history, paths));
    let mut trackers = vec![tracker; paths];
    let mut bits = vec![0u32; paths];
    let mut cpu_draws = vec![0.0; paths];
    let mut mem_draws = vec![0.0; paths];
    // Per live path, how it ended this step: 0 still running, 3 or 4 for S3/S4.
    let mut ended = vec![0u8; paths];
    let (mut s3, mut s4) = (0usize, 0usize);
    for h in 0..m {
        let live = cpu_batch.live();
        if live == 0 {
            break;
        }
        let t = grid.start_time + h as i64 * step;
        let ended = &mut ended[..live];
        draw_into(cpu_pool, rng, &mut bits[..live], &mut cpu_draws[..live]);
        let loads = cpu_batch.step(&cpu_draws);
        for ((tr, load), end) in trackers.iter_mut().zip(loads).zip(ended.iter_mut()) {
            tr.observe(th, t, load.clamp(0.0, 100.0));
            let contention = tr.excursion_start().is_some_and(|s| t - s >= sustain);
            *end = if contention { 3 } else { 0 };
        }
        if let (Some(batch), Some(pool)) = (mem_batch.as_mut(), mem_pool) {
            draw_into(pool, rng, &mut bits[..live], &mut mem_draws[..live]);
            // A shortage wins over contention at the same step.
            for (free, end) in batch.step(&mem_draws).iter().zip(ended.iter_mut()) {
                if free.max(0.0) < job_mem {
                    *end = 4;
                }
            }
        }
        // Highest column first, so each swap-remove moves a path still running.
        for i in (0..live).rev() {
            match ended[i] {
                3 => s3 += 1,
                4 => s4 += 1,
                _ => continue,
            }
            cpu_batch.drop_path(i);
            if let Some(batch) = mem_batch.as_mut() {
                batch.drop_path(i);
            }
            trackers.swap_remove(i);
        }
    }
    // Each simulated path stands for PATHS / paths of the reported ones.
    let n = paths as f64;
    [s3 as f64 / n, s4 as f64 / n, 0.0]
}

/// True when every value is the same (or there is none): innovations drawn
/// from such a pool cannot make two paths differ.
fn all_equal(pool: &[f64]) -> bool {
    pool.windows(2).all(|w| w[0] == w[1])
}

/// One bootstrapped innovation per slot of `out`, drawn from `pool` (zero
/// for a model without residuals). The index is the high half of
/// `u32 × len` (Lemire's multiply-shift without rejection): its bias is
/// below len / 2³², far under the Monte Carlo error of 200 paths.
fn draw_into(pool: &[f64], rng: &mut ChaCha8Rng, bits: &mut [u32], out: &mut [f64]) {
    if pool.is_empty() {
        out.fill(0.0);
        return;
    }
    rng.fill(bits);
    let len = pool.len() as u64;
    for (o, b) in out.iter_mut().zip(bits.iter()) {
        *o = pool[((u64::from(*b) * len) >> 32) as usize];
    }
}
