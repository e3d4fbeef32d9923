//! The prediction report: one answer to "how reliable is this host for this
//! window?", built the same way for `gleaner predict --trace`, the node's
//! `status` and `/v1/predict`, and its answers to the pool, so the answer
//! reads the same whichever way it was computed. Any method of the registry
//! (`model::baselines::method_by_name`) can answer; unless told otherwise it
//! is the registry's default ([`MethodId::default`]). Not in `model/` because it times the forecast.

use crate::model::baselines::pool_prior::{prior_tr, PoolPrior, PriorSource};
use crate::model::baselines::MethodId;
use crate::model::kernel::Method;
use crate::model::predict::{
    estimate_window, history_days, predict, InitialState, PredictError, PredictRequest, Prediction,
};
use crate::model::series::HostSeries;
use crate::model::state::State;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// Seed of the methods that simulate (the `-prob` time-series methods):
/// fixed, so the same history and request always give the same answer.
pub const PREDICT_SEED: u64 = 1;

/// What [`predict_report`] answers: a window and the method that forecasts it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportRequest {
    /// The window, history days, step and thresholds. Its `method` and
    /// `age` fields are not read: [`ReportRequest::method`] says which
    /// method answers.
    pub window: PredictRequest,
    pub method: MethodId,
}

impl ReportRequest {
    /// `window` answered by the default method.
    pub fn new(window: PredictRequest) -> Self {
        ReportRequest {
            window,
            method: MethodId::default(),
        }
    }

    /// `window` answered by `method`, or by [`DEFAULT_METHOD`] when `None`.
    pub fn with_method(window: PredictRequest, method: Option<MethodId>) -> Self {
        ReportRequest {
            window,
            method: method.unwrap_or_default(),
        }
    }
}

/// Why [`predict_report`] gave no report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    #[error("unknown method {name:?}; known methods: {known}")]
    UnknownMethod { name: String, known: String },
    #[error(transparent)]
    Predict(#[from] PredictError),
}

/// The JSON answer of `gleaner predict --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictReport {
    /// Probability that no failure hits a job in the window.
    pub tr: f64,
    /// State at the window start, or `unknown` when the record does not reach it.
    pub init_state: String,
    /// When `init_state` is unknown: the share of each state at the start of the history windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_distribution: Option<BTreeMap<String, f64>>,
    /// Same-kind history days in the record for this window: what the
    /// kernel methods, `freq`, `markov`, `rippp` and the blends learn from
    /// (the time-series methods fit the T seconds before W instead).
    pub days_used: usize,
    /// Local dates of the history days, most recent first.
    pub history_days: Vec<String>,
    /// The method that answered (a registry name, e.g. `km`, `blend+age`).
    pub method: String,
    pub window_s: u64,
    pub step_s: u32,
    pub steps: usize,
    /// Failure probability by cause (S3, S4, S5), as the method gives it:
    /// the kernel's solution for `paper`/`km`, the history windows' first
    /// failures for `freq`, the chain's for `markov`, the weighted mean of
    /// the parts' for the blends and `stack`, the simulated paths' (S5
    /// always 0) for the time-series methods. Empty for a method that does
    /// not split failures by cause (`rippp`): then only `tr` is known.
    pub fail_by_cause: BTreeMap<String, f64>,
    /// Time the method took to forecast, excluding loading the file.
    pub elapsed_us: u64,
    /// Window start, Unix seconds, and in the host's time zone.
    pub at: i64,
    pub at_local: String,
    pub host: Option<String>,
    pub mem_mib: u64,
    /// Runs of S1 and S2 in the history windows, as the kernel counts them.
    pub runs: BTreeMap<String, usize>,
    /// Age in steps of the sojourn in progress at W (`km+age`, `paper+age` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_steps: Option<u32>,
    pub age_fallback: bool,
}

/// A forecast as the node hands it to the wire: typed, no JSON shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Forecast {
    /// Probability that no failure hits a job in the window.
    pub tr: f64,
    /// Failure probability by cause (S3, S4, S5), for methods that split it.
    pub fail_by_cause: Option<[f64; crate::model::solver::CAUSES]>,
    /// The state at W, or the history's mix when the record stops before W;
    /// `None` when neither is known.
    pub initial: Option<InitialState>,
    /// Same-kind history days the forecast learned from.
    pub days_used: usize,
    pub method: MethodId,
    /// What the TR stands on: the host's record, or the prior of a host
    /// with no day of record yet.
    pub basis: Basis,
}

/// What a [`Forecast`] stands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The host's own record, read by the request's method.
    Record,
    /// No day of the host's record covers the window yet (a new volunteer's
    /// first day): a prior, the pool's typical curve or the built-in
    /// population's ([`crate::model::baselines::pool_prior::prior_tr`]).
    /// `days_used` is 0.
    Prior(PriorSource),
}

/// [`forecast`], or the prior when the host has no history day for the
/// window yet: what a host answers its pool and `status` with, so a new
/// volunteer is not "unknown" for its first day and a half. Every other
/// error stays an error.
pub fn forecast_or_prior(
    series: &HostSeries,
    request: &ReportRequest,
) -> Result<Forecast, ReportError> {
    forecast_or_pool_prior(series, request, None)
}

/// [`forecast_or_prior`] with the pool's prior when the node has one (it
/// heard enough members), else the built-in one.
pub fn forecast_or_pool_prior(
    series: &HostSeries,
    request: &ReportRequest,
    pool: Option<&PoolPrior>,
) -> Result<Forecast, ReportError> {
    match forecast_in_pool(series, request, pool) {
        Err(ReportError::Predict(PredictError::NoHistory { .. })) => {
            Ok(prior_forecast(series, request, pool))
        }
        other => other,
    }
}

/// The prior's forecast of the request's window: the start state when the
/// record covers it.
fn prior_forecast(
    series: &HostSeries,
    request: &ReportRequest,
    pool: Option<&PoolPrior>,
) -> Forecast {
    let window = &request.window;
    let start = observed_start(series, window);
    let (tr, source) = prior_tr(pool, window.window_secs, start);
    Forecast {
        tr,
        fail_by_cause: None,
        initial: start.map(InitialState::Observed),
        days_used: 0,
        method: request.method,
        basis: Basis::Prior(source),
    }
}

/// Forecasts the request's window: the typed answer the node gives peers and
/// `status`, and the core of [`predict_report`].
pub fn forecast(series: &HostSeries, request: &ReportRequest) -> Result<Forecast, ReportError> {
    forecast_in_pool(series, request, None)
}

/// [`forecast`] by a host that answers with `pool`'s prior while it has no
/// day of record: its first days lean on the same prior
/// ([`MethodId::predictor_in_pool`]), so its answer does not jump when the
/// first day arrives.
pub fn forecast_in_pool(
    series: &HostSeries,
    request: &ReportRequest,
    pool: Option<&PoolPrior>,
) -> Result<Forecast, ReportError> {
    if request.method.kernel().is_some() {
        let (answer, _) = answer(series, request)?;
        return Ok(Forecast {
            tr: answer.tr,
            fail_by_cause: answer.fail_by_cause,
            initial: answer.init,
            days_used: answer.history_days.len(),
            method: request.method,
            basis: Basis::Record,
        });
    }
    let predictor = registry_predictor(request.method, pool)?;
    let forecast = predictor.forecast(series, &request.window)?;
    let (initial, days_used) = forecast_context(series, &request.window)?;
    Ok(Forecast {
        tr: forecast.tr,
        fail_by_cause: forecast.fail_by_cause,
        initial,
        days_used,
        method: request.method,
        basis: Basis::Record,
    })
}

/// The state at the window's start when the record covers it; `None`
/// when it does not.
fn observed_start(series: &HostSeries, window: &PredictRequest) -> Option<State> {
    series
        .covers(window.at, window.at)
        .then(|| series.state_at(window.thresholds, window.at))
        .flatten()
}

/// What a [`Forecast`] carries of [`window_context`]: the start state and
/// the number of history days, with no kernel estimate: the history days
/// alone (the list [`estimate_window`] would find) and, when the record
/// stops before W, the share of each state at those days' starts (the
/// history windows' first states, what [`window_context`] counts). The
/// node's answer is asked a sampling period past its last reading, so the
/// record mostly stops before W: walking every history day's whole window
/// for a `km` kernel it throws away cost it about 1 ms at 12 h and more
/// beyond on a 6 s record (issue 29, goal 6). The same start state and day
/// count as [`window_context`], to the bit
/// (`tests::the_typed_forecast_equals_the_one_from_the_full_context`).
fn forecast_context(
    series: &HostSeries,
    window: &PredictRequest,
) -> Result<(Option<InitialState>, usize), PredictError> {
    let (step, steps) = crate::model::predict::geometry(series, window)?;
    let span = i64::from(step) * steps as i64;
    let days = history_days(series, window.at, span, window.days)?;
    if let Some(state) = observed_start(series, window) {
        return Ok((Some(InitialState::Observed(state)), days.len()));
    }
    if days.is_empty() {
        return Ok((None, 0));
    }
    // A history day is covered through its window (`history_days`), so its
    // first state is read where the kernel's walk would read it.
    let mut start_counts = [0usize; 5];
    for day in &days {
        if let Some(state) = series.state_at(window.thresholds, day.start) {
            start_counts[state.index()] += 1;
        }
    }
    let total = start_counts.iter().sum::<usize>().max(1) as f64;
    Ok((
        Some(InitialState::FromHistory(
            start_counts.map(|c| c as f64 / total),
        )),
        days.len(),
    ))
}

/// The registry's predictor for a method that is not a kernel method.
fn registry_predictor(
    method: MethodId,
    pool: Option<&PoolPrior>,
) -> Result<Box<dyn crate::model::predictor::ReliabilityPredictor>, ReportError> {
    method
        .predictor_in_pool(PREDICT_SEED, pool)
        .ok_or_else(|| ReportError::UnknownMethod {
            name: method.to_string(),
            known: MethodId::all()
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// TR of the request's window with each of `windows` (seconds) as its
/// length, from the same start, `None` where the method cannot answer: the
/// node's curve. Registry methods answer all lengths in one call
/// ([`ReliabilityPredictor::forecast_curve`]: one pass for `hazard`), and
/// without the window's context, which a curve point does not carry.
///
/// [`ReliabilityPredictor::forecast_curve`]: crate::model::predictor::ReliabilityPredictor::forecast_curve
pub fn curve(series: &HostSeries, request: &ReportRequest, windows: &[u64]) -> Vec<Option<f64>> {
    curve_in_pool(series, request, None, windows)
}

/// [`curve`] by a host that answers with `pool`'s prior while it has no day
/// of record (as [`forecast_in_pool`]).
pub fn curve_in_pool(
    series: &HostSeries,
    request: &ReportRequest,
    pool: Option<&PoolPrior>,
    windows: &[u64],
) -> Vec<Option<f64>> {
    let predictor = match request.method.kernel() {
        Some(_) => None,
        None => request.method.predictor_in_pool(PREDICT_SEED, pool),
    };
    match predictor {
        Some(p) => p
            .forecast_curve(series, &request.window, windows)
            .into_iter()
            .map(|f| f.ok().map(|f| f.tr))
            .collect(),
        None => windows
            .iter()
            .map(|&window_secs| {
                let mut other = request.clone();
                other.window.window_secs = window_secs;
                forecast(series, &other).ok().map(|f| f.tr)
            })
            .collect(),
    }
}

/// Predicts from `series` with the request's method and builds the report,
/// timing the method's forecast.
pub fn predict_report(
    series: &HostSeries,
    host: Option<String>,
    request: &ReportRequest,
) -> Result<PredictReport, ReportError> {
    let window = &request.window;
    let (answer, elapsed_us) = answer(series, request)?;
    let at = window.at;
    let at_local = Timestamp::from_second(at)
        .map(|ts| {
            ts.to_zoned(series.tz.clone())
                .strftime("%Y-%m-%d %H:%M %Z")
                .to_string()
        })
        .unwrap_or_default();
    Ok(PredictReport {
        at,
        at_local,
        host,
        mem_mib: window.thresholds.job_mem_mib,
        elapsed_us,
        ..report(&answer, request.method.as_str())
    })
}

/// The method's answer with the window's context, and the microseconds the
/// method's forecast took.
fn answer(series: &HostSeries, request: &ReportRequest) -> Result<(Answer, u64), ReportError> {
    let window = &request.window;
    Ok(match request.method.kernel() {
        Some((method, age)) => {
            let req = PredictRequest {
                method,
                age,
                ..window.clone()
            };
            let started = Instant::now();
            let prediction = predict(series, &req)?;
            let elapsed_us = started.elapsed().as_micros() as u64;
            (Answer::from(prediction), elapsed_us)
        }
        None => {
            let predictor = registry_predictor(request.method, None)?;
            let started = Instant::now();
            let forecast = predictor.forecast(series, window)?;
            let elapsed_us = started.elapsed().as_micros() as u64;
            let context = window_context(series, window)?;
            let answer = Answer {
                tr: forecast.tr,
                fail_by_cause: forecast.fail_by_cause,
                ..context
            };
            (answer, elapsed_us)
        }
    })
}

/// A method's answer with what the record says about the window: history
/// days, start state, runs (a kernel method's [`Prediction`], or another
/// method's forecast with [`window_context`]).
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    tr: f64,
    fail_by_cause: Option<[f64; crate::model::solver::CAUSES]>,
    init: Option<InitialState>,
    history_days: Vec<jiff::civil::Date>,
    window_secs: u64,
    step_secs: u32,
    steps: usize,
    runs: [usize; 2],
    age_steps: Option<u32>,
    age_fallback: bool,
}

impl From<Prediction> for Answer {
    fn from(p: Prediction) -> Self {
        Answer {
            tr: p.tr,
            fail_by_cause: Some(p.fail_by_cause),
            init: Some(p.init),
            history_days: p.history_days,
            window_secs: p.window_secs,
            step_secs: p.step_secs,
            steps: p.steps,
            runs: p.runs,
            age_steps: p.age_steps,
            age_fallback: p.age_fallback,
        }
    }
}

/// The window's context as the kernel methods see it, without solving:
/// the history days and runs of the `km` estimate and the state at W (or
/// the start states of the history windows when the record stops before
/// W). A method that needs no history day (the time-series methods) may
/// answer where there is none: then the context has no days and no
/// distribution.
fn window_context(series: &HostSeries, window: &PredictRequest) -> Result<Answer, PredictError> {
    let req = PredictRequest {
        method: Method::Km,
        age: false,
        ..window.clone()
    };
    let (step, steps) = crate::model::predict::geometry(series, &req)?;
    let model = match estimate_window(series, &req) {
        Ok(model) => Some(model),
        Err(PredictError::NoHistory { .. }) => None,
        Err(e) => return Err(e),
    };
    let observed = series
        .covers(req.at, req.at)
        .then(|| series.state_at(req.thresholds, req.at))
        .flatten();
    let init = match (observed, &model) {
        (Some(state), _) => Some(InitialState::Observed(state)),
        (None, Some(model)) => {
            let total = model.start_counts.iter().sum::<usize>().max(1) as f64;
            Some(InitialState::FromHistory(
                model.start_counts.map(|c| c as f64 / total),
            ))
        }
        (None, None) => None,
    };
    Ok(Answer {
        tr: 0.0,
        fail_by_cause: None,
        init,
        history_days: model
            .as_ref()
            .map(|m| m.history_days.iter().map(|d| d.date).collect())
            .unwrap_or_default(),
        window_secs: req.window_secs,
        step_secs: step,
        steps,
        runs: model
            .as_ref()
            .map_or([0, 0], |m| [m.kernel.rows[0].runs, m.kernel.rows[1].runs]),
        age_steps: None,
        age_fallback: false,
    })
}

/// The report's fields that come from the answer (time and host are the caller's).
fn report(p: &Answer, method: &str) -> PredictReport {
    let fail_by_cause = p
        .fail_by_cause
        .map(|fail| {
            State::FAILURES
                .iter()
                .zip(fail)
                .map(|(s, v)| (s.label().to_string(), v))
                .collect()
        })
        .unwrap_or_default();
    let (init_state, init_distribution) = match p.init {
        Some(InitialState::Observed(s)) => (s.label().to_string(), None),
        Some(InitialState::FromHistory(shares)) => (
            "unknown".to_string(),
            Some(
                State::ALL
                    .iter()
                    .map(|s| (s.label().to_string(), shares[s.index()]))
                    .collect(),
            ),
        ),
        None => ("unknown".to_string(), None),
    };
    PredictReport {
        tr: p.tr,
        init_state,
        init_distribution,
        days_used: p.history_days.len(),
        history_days: p.history_days.iter().map(|d| d.to_string()).collect(),
        method: method.to_string(),
        window_s: p.window_secs,
        step_s: p.step_secs,
        steps: p.steps,
        fail_by_cause,
        elapsed_us: 0,
        at: 0,
        at_local: String::new(),
        host: None,
        mem_mib: 0,
        runs: [("S1", p.runs[0]), ("S2", p.runs[1])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        age_steps: p.age_steps,
        age_fallback: p.age_fallback,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::synth::{generate, SynthConfig};
    use crate::model::state::Thresholds;

    /// [`forecast`] reads its context without the `km` estimate: the typed
    /// answer must be the one built from the full context ([`answer`]) in
    /// every case — W on a row, between rows, a reading past the record's
    /// end (as the node asks) and hours past it (history mix), too early
    /// for any history day, and refused requests — for kernel and registry
    /// methods.
    #[test]
    fn the_typed_forecast_equals_the_one_from_the_full_context() {
        let trace = generate(&SynthConfig::new(11, 17, "UTC").unwrap());
        let series = &trace.series;
        let (first, last) = (series.first_time().unwrap(), series.last_time().unwrap());
        let th = Thresholds {
            job_mem_mib: 256,
            ..Thresholds::default()
        };
        let mut compared = 0;
        for at in [
            first + 3600,
            first + 9 * 86_400 + 8 * 3600 + 7,
            first + 15 * 86_400 + 13 * 3600,
            last - 600,
            last + 7,
            last + 2 * 3600,
        ] {
            for (window_secs, step) in [(3600, None), (36_000, Some(6)), (1, None)] {
                for name in ["km", "freq", "logistic", "logistic+iso", "hazard", "markov"] {
                    let mut window = PredictRequest::new(at, window_secs, th);
                    window.step_secs = step;
                    let request = ReportRequest::with_method(window, Some(name.parse().unwrap()));
                    let old = answer(series, &request).map(|(a, _)| Forecast {
                        tr: a.tr,
                        fail_by_cause: a.fail_by_cause,
                        initial: a.init,
                        days_used: a.history_days.len(),
                        method: request.method,
                        basis: Basis::Record,
                    });
                    let new = forecast(series, &request);
                    assert_eq!(new, old, "{name} at {at}, {window_secs} s");
                    compared += usize::from(new.is_ok());
                }
            }
        }
        assert!(compared >= 40, "only {compared} answers compared");
    }

    #[test]
    fn a_host_with_no_record_answers_the_pool_prior_when_it_has_one() {
        use crate::model::baselines::pool_prior::HeardCurve;
        use crate::model::sched::curve::TrCurve;
        let trace = generate(&SynthConfig::new(11, 17, "UTC").unwrap());
        let series = &trace.series;
        let first = series.first_time().unwrap();
        // Five members of a server pool, all at TR 0.95 over 3 h.
        let curve = TrCurve::new([(3600.0, 0.99), (3.0 * 3600.0, 0.95), (8.0 * 3600.0, 0.9)]);
        let heard = (0..5).map(|_| HeardCurve {
            days_used: 30,
            usable: true,
            computed_at_unix: first,
            curve: &curve,
        });
        let pool = PoolPrior::from_heard(heard, first, &[3600.0, 3.0 * 3600.0, 8.0 * 3600.0]);
        // Every hour of the first day: no past day, so a prior.
        let mut usable = 0;
        for hour in 1..23 {
            let at = first + hour * 3600;
            let request =
                ReportRequest::new(PredictRequest::new(at, 3 * 3600, Thresholds::default()));
            let built_in = forecast_or_prior(series, &request).unwrap();
            assert_eq!(built_in.basis, Basis::Prior(PriorSource::BuiltIn));
            let pooled = forecast_or_pool_prior(series, &request, pool.as_ref()).unwrap();
            assert_eq!(pooled.basis, Basis::Prior(PriorSource::Pool { members: 5 }));
            assert_eq!(pooled.days_used, 0);
            match pooled.initial {
                Some(InitialState::Observed(s)) if s.is_failure() => assert_eq!(pooled.tr, 0.0),
                _ => {
                    assert!((pooled.tr - 0.95).abs() < 1e-12, "{pooled:?}");
                    assert!(pooled.tr > built_in.tr + 0.1, "{pooled:?} {built_in:?}");
                    usable += 1;
                }
            }
        }
        assert!(usable > 0);
        // A host with a record answers from it, pool or not.
        let later = ReportRequest::new(PredictRequest::new(
            series.last_time().unwrap() - 4 * 3600,
            3 * 3600,
            Thresholds::default(),
        ));
        let own = forecast_or_pool_prior(series, &later, pool.as_ref()).unwrap();
        assert_eq!(own.basis, Basis::Record);
    }

    /// A server joins a pool of servers: on its first day it answers their
    /// prior; when that day (never failing) is its record, its answer goes
    /// on from the pool's prior, not from the built-in desktop one.
    #[test]
    fn a_young_host_goes_on_from_the_pool_prior_when_its_first_day_arrives() {
        use crate::model::baselines::pool_prior::HeardCurve;
        use crate::model::sched::curve::TrCurve;
        use crate::model::series::Sample;
        let monday = 1_756_684_800; // 2025-09-01 00:00 UTC
        let mut series = HostSeries::new(60, 120, jiff::tz::TimeZone::UTC);
        for t in (monday..monday + 2 * 86_400).step_by(60) {
            let sample = Sample {
                time: t,
                cpu: 5.0,
                free_mib: 4096,
                up: true,
            };
            series.push(sample).unwrap();
        }
        let curve = TrCurve::new([(3600.0, 0.99), (3.0 * 3600.0, 0.97), (8.0 * 3600.0, 0.95)]);
        let heard = (0..5).map(|_| HeardCurve {
            days_used: 30,
            usable: true,
            computed_at_unix: monday,
            curve: &curve,
        });
        let pool = PoolPrior::from_heard(heard, monday, &[3600.0, 3.0 * 3600.0, 8.0 * 3600.0]);
        let ask = |at: i64, pool: Option<&PoolPrior>| {
            let window = PredictRequest::new(at, 3 * 3600, Thresholds::default());
            forecast_or_pool_prior(&series, &ReportRequest::new(window), pool).unwrap()
        };
        // Monday 10:00, no day of record: the pool's prior.
        let first = ask(monday + 10 * 3600, pool.as_ref());
        assert_eq!(first.basis, Basis::Prior(PriorSource::Pool { members: 5 }));
        assert!((first.tr - 0.97).abs() < 1e-12, "{first:?}");
        // Tuesday 10:00, Monday is its record: at or above the prior it
        // answered (its day never failed), never dragged below it.
        let next = ask(monday + 86_400 + 10 * 3600, pool.as_ref());
        assert_eq!((next.basis, next.days_used), (Basis::Record, 1));
        assert!(
            next.tr >= first.tr && next.tr < 1.0,
            "{} after {}",
            next.tr,
            first.tr
        );
        // Without a pool it leans on the built-in desktop population.
        let alone = ask(monday + 86_400 + 10 * 3600, None);
        assert!(alone.tr < first.tr - 0.01, "{}", alone.tr);
    }
}
