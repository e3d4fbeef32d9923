//! Temporal reliability of a host for a future window, from its own history.
//!
//! For a window [W, W + T] read at step d (m = T / d steps), the kernel is
//! estimated from the same local time-of-day window on the N most recent
//! days of the same kind (Mon–Fri or Sat–Sun, in the host's time zone)
//! strictly before W's local date, counting only days whose whole window lies
//! inside the record. The solver then gives the failure probability by cause
//! from the state at W, or — when the record does not reach W — from the
//! distribution of states at the start of the history windows.
//! Pure code: the caller passes W ("now") and the series.

use crate::kernel::{transient_index, HoldingTimeKernel, Method, RunObservations};
use crate::series::HostSeries;
use crate::solver::{failure_by_cause, reliability, Start, CAUSES};
use crate::state::{State, Thresholds};
use jiff::civil::{Date, Weekday};
use jiff::Timestamp;

/// Largest number of steps m a window may have: bounds the solver's memory.
pub const MAX_STEPS: u64 = 1_000_000;
/// Largest number of history days a prediction may use.
pub const MAX_DAYS: usize = 366;
/// Default number of history days (the papers' N).
pub const DEFAULT_DAYS: usize = 10;

/// What to predict.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictRequest {
    /// Window start W, Unix seconds.
    pub at: i64,
    /// Window length T, seconds.
    pub window_secs: u64,
    /// Discretisation step d, seconds; `None` uses the series' own step.
    pub step_secs: Option<u32>,
    /// Number of same-kind history days N.
    pub days: usize,
    pub method: Method,
    /// Condition the first sojourn on its age at W.
    pub age: bool,
    pub thresholds: Thresholds,
}

impl PredictRequest {
    /// A request with the defaults: N = 10, the `km` estimator, no age conditioning.
    pub fn new(at: i64, window_secs: u64, thresholds: Thresholds) -> Self {
        PredictRequest {
            at,
            window_secs,
            step_secs: None,
            days: DEFAULT_DAYS,
            method: Method::Km,
            age: false,
            thresholds,
        }
    }
}

/// How the state at W was known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InitialState {
    /// The record covers W and says this.
    Observed(State),
    /// W lies beyond the record: the share of each state (S1..S5) at the
    /// start of the history windows.
    FromHistory([f64; 5]),
}

impl InitialState {
    /// The observed state, if the record covers W.
    pub fn observed(&self) -> Option<State> {
        match self {
            InitialState::Observed(s) => Some(*s),
            InitialState::FromHistory(_) => None,
        }
    }
}

/// A temporal-reliability answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// Probability that no failure (S3, S4, S5) hits a job in the window.
    pub tr: f64,
    /// Failure probability by cause: S3, S4, S5.
    pub fail_by_cause: [f64; CAUSES],
    pub init: InitialState,
    /// Local dates of the history days used, most recent first.
    pub history_days: Vec<Date>,
    pub method: Method,
    pub window_secs: u64,
    pub step_secs: u32,
    /// Steps in the window, m = T / d.
    pub steps: usize,
    /// Runs observed for S1 and S2.
    pub runs: [usize; 2],
    /// Age in steps of the sojourn in progress at W, when age conditioning was used.
    pub age_steps: Option<u32>,
    /// True when age conditioning was asked for but the history had no sojourn
    /// that old (S_i(a) = 0), so the unconditioned kernel was used.
    pub age_fallback: bool,
}

/// Why no prediction could be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictError {
    #[error("the step must be at least one second")]
    ZeroStep,
    #[error("the window ({window_secs} s) is shorter than one step ({step_secs} s)")]
    WindowShorterThanStep { window_secs: u64, step_secs: u32 },
    #[error("the window has {steps} steps; at most {MAX_STEPS} are allowed (use a longer step)")]
    TooManySteps { steps: u64 },
    #[error("the number of history days must be between 1 and {MAX_DAYS}, got {0}")]
    BadDays(usize),
    #[error("time {0} is outside the range of dates")]
    BadTime(i64),
    #[error("no {kind} before {date} has its whole window in the record: not enough history")]
    NoHistory { kind: &'static str, date: Date },
    #[error("no usable sample in the window before {at}: a time-series model has nothing to fit")]
    NoRecentSamples { at: i64 },
}

/// Mon–Fri or Sat–Sun: daily rhythms differ between the two.
pub fn is_weekend(d: Weekday) -> bool {
    matches!(d, Weekday::Saturday | Weekday::Sunday)
}

/// "weekday" or "weekend day", for messages.
pub fn kind_name(weekend: bool) -> &'static str {
    if weekend {
        "weekend day"
    } else {
        "weekday"
    }
}

/// One history day's window: its local date and start time (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryDay {
    pub date: Date,
    pub start: i64,
}

/// The N most recent same-kind days strictly before W's local date whose
/// window of `span_secs` at W's local time of day lies inside the record.
pub fn history_days(
    series: &HostSeries,
    at: i64,
    span_secs: i64,
    n: usize,
) -> Result<Vec<HistoryDay>, PredictError> {
    let ts = Timestamp::from_second(at).map_err(|_| PredictError::BadTime(at))?;
    let local = ts.to_zoned(series.tz.clone());
    let (date, time) = (local.date(), local.time());
    let weekend = is_weekend(date.weekday());
    let Some(first) = series.first_time() else {
        return Ok(Vec::new());
    };
    let mut days = Vec::with_capacity(n);
    let mut day = date;
    while days.len() < n {
        let Ok(previous) = day.yesterday() else {
            break;
        };
        day = previous;
        // A civil time skipped by a DST change maps to the instant after the gap.
        let Ok(zoned) = day.to_datetime(time).to_zoned(series.tz.clone()) else {
            break;
        };
        let start = zoned.timestamp().as_second();
        if start.saturating_add(span_secs) < first {
            break;
        }
        if is_weekend(day.weekday()) == weekend
            && series.covers(start, start.saturating_add(span_secs))
        {
            days.push(HistoryDay { date: day, start });
        }
    }
    Ok(days)
}

/// The checked geometry of a request: step d and steps m.
pub fn geometry(series: &HostSeries, req: &PredictRequest) -> Result<(u32, usize), PredictError> {
    let step = req.step_secs.unwrap_or(series.step_secs);
    if step == 0 {
        return Err(PredictError::ZeroStep);
    }
    if req.window_secs < u64::from(step) {
        return Err(PredictError::WindowShorterThanStep {
            window_secs: req.window_secs,
            step_secs: step,
        });
    }
    let steps = req.window_secs / u64::from(step);
    if steps > MAX_STEPS {
        return Err(PredictError::TooManySteps { steps });
    }
    if req.days == 0 || req.days > MAX_DAYS {
        return Err(PredictError::BadDays(req.days));
    }
    Ok((step, steps as usize))
}

/// The estimated model for one request, before the initial state is applied.
#[derive(Debug, Clone)]
pub struct WindowModel {
    pub kernel: HoldingTimeKernel,
    pub history_days: Vec<HistoryDay>,
    /// Count of each state (S1..S5) at the start of the history windows.
    pub start_counts: [usize; 5],
    pub step_secs: u32,
    pub steps: usize,
}

/// Estimates the kernel for the request's window.
pub fn estimate_window(
    series: &HostSeries,
    req: &PredictRequest,
) -> Result<WindowModel, PredictError> {
    let (step, m) = geometry(series, req)?;
    let span = i64::from(step) * m as i64;
    let days = history_days(series, req.at, span, req.days)?;
    if days.is_empty() {
        let date = Timestamp::from_second(req.at)
            .map_err(|_| PredictError::BadTime(req.at))?
            .to_zoned(series.tz.clone())
            .date();
        return Err(PredictError::NoHistory {
            kind: kind_name(is_weekend(date.weekday())),
            date,
        });
    }
    let mut obs = RunObservations::new();
    let mut start_counts = [0usize; 5];
    let mut states = Vec::with_capacity(m + 1);
    for day in &days {
        if series.window_states(req.thresholds, day.start, step, m, &mut states) {
            start_counts[states[0].index()] += 1;
            obs.add_window(&states);
        }
    }
    let kernel = obs.estimate(req.method);
    Ok(WindowModel {
        kernel,
        history_days: days,
        start_counts,
        step_secs: step,
        steps: m,
    })
}

/// Predicts the temporal reliability for a request.
pub fn predict(series: &HostSeries, req: &PredictRequest) -> Result<Prediction, PredictError> {
    let model = estimate_window(series, req)?;
    let m = model.steps;
    let init = if series.covers(req.at, req.at) {
        series
            .state_at(req.thresholds, req.at)
            .map_or_else(|| history_distribution(&model), InitialState::Observed)
    } else {
        history_distribution(&model)
    };
    let mut age_steps = None;
    let mut age_fallback = false;
    let kernel = &model.kernel;
    let fail = match init {
        InitialState::Observed(state) => match transient_index(state) {
            Some(i) if req.age => {
                let age = sojourn_age(series, req, &model, state);
                age_steps = Some(age);
                match kernel.rows[i].aged(age) {
                    Some(first) => failure_by_cause(
                        kernel,
                        m,
                        Start::FirstSojourn {
                            from: i,
                            first: &first,
                        },
                    ),
                    None => {
                        age_fallback = true;
                        failure_by_cause(kernel, m, Start::in_row(i))
                    }
                }
            }
            Some(i) => failure_by_cause(kernel, m, Start::in_row(i)),
            None => certain_failure(state),
        },
        InitialState::FromHistory(shares) => {
            // Windows that began failed count as failed, by their cause.
            let mut acc = failure_by_cause(kernel, m, Start::Fresh([shares[0], shares[1]]));
            for state in State::FAILURES {
                let f = certain_failure(state);
                for c in 0..CAUSES {
                    acc[c] += shares[state.index()] * f[c];
                }
            }
            acc
        }
    };
    let fail = fail.map(|v| v.clamp(0.0, 1.0));
    let tr = reliability(fail);
    Ok(Prediction {
        tr,
        fail_by_cause: fail,
        init,
        history_days: model.history_days.iter().map(|d| d.date).collect(),
        method: req.method,
        window_secs: req.window_secs,
        step_secs: model.step_secs,
        steps: m,
        runs: [model.kernel.rows[0].runs, model.kernel.rows[1].runs],
        age_steps,
        age_fallback,
    })
}

fn certain_failure(state: State) -> [f64; CAUSES] {
    let mut f = [0.0; CAUSES];
    if let Some(c) = state.failure_index() {
        f[c] = 1.0;
    }
    f
}

fn history_distribution(model: &WindowModel) -> InitialState {
    let total: usize = model.start_counts.iter().sum();
    let shares = model.start_counts.map(|c| {
        if total == 0 {
            0.0
        } else {
            c as f64 / total as f64
        }
    });
    InitialState::FromHistory(shares)
}

/// How many steps before W the sojourn in `state` began, read on the step
/// grid W − k·d. The walk stops at the longest holding time the kernel has
/// mass at, since conditioning on any older age gives the same answer.
fn sojourn_age(
    series: &HostSeries,
    req: &PredictRequest,
    model: &WindowModel,
    state: State,
) -> u32 {
    let step = i64::from(model.step_secs);
    let support = model.kernel.row(state).map_or(0, |r| r.support());
    let Some(first) = series.first_time() else {
        return 0;
    };
    let reachable = (req.at - first) / step;
    let back = i64::from(support).min(reachable);
    let Some(mut cursor) = series.cursor(req.thresholds, req.at - back * step) else {
        return 0;
    };
    let mut run = 0u32;
    for k in (1..=back).rev() {
        if cursor.state_at(req.at - k * step) == state {
            run += 1;
        } else {
            run = 0;
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::Sample;
    use jiff::tz::TimeZone;

    /// A UTC series from `start` with one row per step, `cpu(t)` giving the load.
    fn series_from(start: i64, rows: i64, step: i64, cpu: impl Fn(i64) -> f64) -> HostSeries {
        let mut s = HostSeries::new(step as u32, 120, TimeZone::UTC);
        for k in 0..rows {
            let t = start + k * step;
            s.push(Sample {
                time: t,
                cpu: cpu(t),
                free_mib: 1000,
                up: true,
            })
            .unwrap();
        }
        s
    }

    // 2025-09-01 is a Monday.
    const MONDAY: i64 = 1_756_684_800;
    const DAY: i64 = 86_400;

    #[test]
    fn history_days_are_same_kind_and_strictly_before() {
        let s = series_from(MONDAY, 15 * 24 * 60, 60, |_| 5.0);
        // W on Monday of the third week, 10:00.
        let at = MONDAY + 14 * DAY + 10 * 3600;
        let days = history_days(&s, at, 3600, 10).unwrap();
        assert_eq!(days.len(), 10);
        assert!(days.iter().all(|d| !is_weekend(d.date.weekday())));
        assert_eq!(days[0].start, at - 3 * DAY); // the Friday before
        assert!(days.windows(2).all(|w| w[0].start > w[1].start));
        let weekend = history_days(&s, MONDAY + 13 * DAY + 3600, 3600, 10).unwrap();
        assert_eq!(weekend.len(), 3); // two Saturdays and one Sunday before Sunday
    }

    #[test]
    fn a_host_that_fails_every_day_at_noon_is_predicted_to_fail() {
        // Every day: light load, then a 10-minute CPU hog at 12:00 (S3 after 60 s).
        let s = series_from(MONDAY, 20 * 24 * 60, 60, |t| {
            let tod = t.rem_euclid(DAY);
            if (12 * 3600..12 * 3600 + 600).contains(&tod) {
                95.0
            } else {
                5.0
            }
        });
        let th = Thresholds::default();
        let at = MONDAY + 15 * DAY + 11 * 3600; // Tuesday 11:00
        let through_noon = predict(&s, &PredictRequest::new(at, 2 * 3600, th)).unwrap();
        assert!(through_noon.tr < 1e-9, "tr = {}", through_noon.tr);
        assert!((through_noon.fail_by_cause[0] - 1.0).abs() < 1e-9);
        assert_eq!(through_noon.init, InitialState::Observed(State::S1));
        let morning = predict(&s, &PredictRequest::new(at - 3 * 3600, 2 * 3600, th)).unwrap();
        assert!((morning.tr - 1.0).abs() < 1e-12);
    }

    #[test]
    fn beyond_the_record_the_start_distribution_is_used() {
        // Mornings busy (S2) on even days, light on odd days; nothing else.
        let s = series_from(MONDAY, 12 * 24 * 60, 60, |t| {
            if (t - MONDAY).div_euclid(DAY) % 2 == 0 {
                30.0
            } else {
                5.0
            }
        });
        let at = s.last_time().unwrap() + 2 * DAY;
        let p = predict(&s, &PredictRequest::new(at, 3600, Thresholds::default())).unwrap();
        match p.init {
            InitialState::FromHistory(shares) => {
                assert!((shares[0] + shares[1] - 1.0).abs() < 1e-12);
                assert!(shares[0] > 0.0 && shares[1] > 0.0);
            }
            other => panic!("expected a history distribution, got {other:?}"),
        }
        assert!((p.tr - 1.0).abs() < 1e-12);
    }

    #[test]
    fn requests_are_validated() {
        let s = series_from(MONDAY, 100, 60, |_| 5.0);
        let th = Thresholds::default();
        let mut req = PredictRequest::new(MONDAY + 3000, 30, th);
        assert!(matches!(
            predict(&s, &req),
            Err(PredictError::WindowShorterThanStep { .. })
        ));
        req.window_secs = 3600;
        req.days = 0;
        assert_eq!(predict(&s, &req), Err(PredictError::BadDays(0)));
        req.days = 10;
        assert!(matches!(
            predict(&s, &req),
            Err(PredictError::NoHistory { .. })
        ));
        req.step_secs = Some(1);
        req.window_secs = 10 * MAX_STEPS;
        assert!(matches!(
            predict(&s, &req),
            Err(PredictError::TooManySteps { .. })
        ));
        req.at = i64::MAX;
        req.window_secs = 3600;
        assert_eq!(predict(&s, &req), Err(PredictError::BadTime(i64::MAX)));
    }

    #[test]
    fn starting_in_a_failure_state_gives_zero() {
        let s = series_from(MONDAY, 10 * 24 * 60, 60, |t| {
            if t > MONDAY + 9 * DAY {
                99.0
            } else {
                5.0
            }
        });
        let at = MONDAY + 9 * DAY + 3600;
        let p = predict(&s, &PredictRequest::new(at, 600, Thresholds::default())).unwrap();
        assert_eq!(p.init, InitialState::Observed(State::S3));
        assert_eq!(p.tr, 0.0);
        assert_eq!(p.fail_by_cause, [1.0, 0.0, 0.0]);
    }

    /// Light from 08:00; on "hog days" a CPU hog starts at 09:05 (S3 from
    /// 09:06, so an S1 run of 6 one-minute steps from 09:00); heavy otherwise.
    fn hog_series(is_hog_day: impl Fn(i64) -> bool) -> HostSeries {
        series_from(MONDAY, 20 * 24 * 60, 60, |t| {
            let day = (t - MONDAY).div_euclid(DAY);
            let tod = t.rem_euclid(DAY);
            let hog = is_hog_day(day) && (9 * 3600 + 300..11 * 3600).contains(&tod);
            match tod {
                _ if hog => 95.0,
                x if (8 * 3600..18 * 3600).contains(&x) => 5.0,
                _ => 30.0,
            }
        })
    }

    #[test]
    fn age_conditioning_uses_the_sojourn_in_progress() {
        // Half of the ten weekdays before Tuesday (day 15) are hog days: from
        // 09:00 a fresh S1 run dies at step 6 with probability 1/2. Today the
        // host has been light since 08:00, older than any run that died, so
        // conditioned on its age it survives the hour.
        let s = hog_series(|day| day % 2 == 0 && day != 15);
        let at = MONDAY + 15 * DAY + 9 * 3600;
        let mut req = PredictRequest::new(at, 3600, Thresholds::default());
        let plain = predict(&s, &req).unwrap();
        assert!((plain.tr - 0.5).abs() < 1e-12, "tr = {}", plain.tr);
        assert_eq!(plain.age_steps, None);
        req.age = true;
        let aged = predict(&s, &req).unwrap();
        assert_eq!(aged.age_steps, Some(6));
        assert!(!aged.age_fallback);
        assert!((aged.tr - 1.0).abs() < 1e-12, "tr = {}", aged.tr);
    }

    #[test]
    fn age_beyond_every_observed_sojourn_falls_back_to_the_plain_kernel() {
        // Every history day is a hog day: S_1(6) = 0, so the conditional kernel
        // is undefined and the unconditioned one is used.
        let s = hog_series(|day| day != 15);
        let at = MONDAY + 15 * DAY + 9 * 3600;
        let mut req = PredictRequest::new(at, 3600, Thresholds::default());
        req.age = true;
        let p = predict(&s, &req).unwrap();
        assert!(p.age_fallback);
        assert!(p.tr.abs() < 1e-12, "tr = {}", p.tr);
    }
}
