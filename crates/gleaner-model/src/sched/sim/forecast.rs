//! Where the simulated consumer gets its TR curves: the [`Forecaster`]
//! trait and [`SeriesForecaster`], which asks a registry method over each
//! host's series, from what was known at the time asked only, and caches
//! the curves so that simulations on several threads share them. It knows
//! nothing of the simulation's events.

use super::CURVE_WINDOWS;
use crate::predict::PredictRequest;
use crate::predictor::ReliabilityPredictor;
use crate::sched::curve::TrCurve;
use crate::series::HostSeries;
use crate::state::Thresholds;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

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
