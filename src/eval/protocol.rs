//! The rolling-origin evaluation protocol: which windows are tested, what
//! happened in them, and what every method predicted for them.
//!
//! For each trace, each test day D, each local start hour h and each length
//! T, the window starts at W = D at h:00 local. It is tested when [W, W + T]
//! lies in the record and the state at W is S1 or S2. Every method is asked
//! with the series and W; the predictor contract (`model::predictor`) says
//! it may only use rows up to W, and the tests check that by truncation. The
//! outcome is 1 when no S3/S4/S5 is entered in (W, W + T], read on the step
//! grid W + k·d.
//!
//! Windows that start later (`lead_secs` > 0, `gleaner eval --start-in`):
//! the same windows W, each forecast at the origin W − lead from the record
//! cut there (what a node that asks at its last sample about a window that
//! starts later knows: `known_at`, which marks the host down at the origin
//! when its last row is a switch-off or lies more than the trace's gap
//! limit before it, as the node's own monitor would know). Such a window
//! is tested whatever its start state,
//! since the forecaster cannot see it: a job placed at W on a host already
//! in S3/S4/S5 does not run, so a window starting in a failure counts as
//! failed (outcome 0).
//!
//! Work is split by (trace, test day) over scoped threads; results are put
//! back in work order, so they do not depend on scheduling. This module
//! knows nothing about files, the command line or how results are scored.

use crate::model::baselines::truncated;
use crate::model::predict::{is_weekend, PredictError, PredictRequest};
use crate::model::predictor::ReliabilityPredictor;
use crate::model::series::{HostSeries, Sample};
use crate::model::state::{State, Thresholds};
use jiff::civil::{Date, Time};
use jiff::Timestamp;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Mon–Fri or Sat–Sun.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DayKind {
    Weekday,
    Weekend,
}

impl DayKind {
    pub fn of(date: Date) -> Self {
        if is_weekend(date.weekday()) {
            DayKind::Weekend
        } else {
            DayKind::Weekday
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DayKind::Weekday => "weekday",
            DayKind::Weekend => "weekend",
        }
    }
}

/// Which kinds of days are tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KindFilter {
    Weekday,
    Weekend,
    Both,
}

impl KindFilter {
    pub fn admits(self, kind: DayKind) -> bool {
        match self {
            KindFilter::Both => true,
            KindFilter::Weekday => kind == DayKind::Weekday,
            KindFilter::Weekend => kind == DayKind::Weekend,
        }
    }
}

/// What is tested and how methods are asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProtocolConfig {
    /// Window lengths T, seconds.
    pub lengths: Vec<u64>,
    /// Local start hours h, 0..=23.
    pub hours: Vec<u8>,
    pub kind: KindFilter,
    /// History days N given to every method.
    pub days: usize,
    pub thresholds: Thresholds,
    /// Step d of the grid; `None` uses each trace's own step.
    pub step_secs: Option<u32>,
    /// Share of each kind's days (earliest first) kept out of the test.
    pub test_from: f64,
    /// How long before W the forecast is made, seconds: 0 asks at W with
    /// the whole record (a window that starts now); more cuts the record
    /// at W − lead and tests every window whatever its start state.
    pub lead_secs: u64,
    /// A young host (`gleaner eval --record-days K`): each test day's
    /// methods see only the record from local midnight K days before it, as
    /// a host that joined then would have; `None` gives the whole record.
    /// The tested windows and their outcomes do not change with it.
    pub record_days: Option<u32>,
}

impl ProtocolConfig {
    /// The defaults of the issue: T = 1, 2, 3, 5, 10 h; every hour; N = 10; both kinds.
    pub fn new(thresholds: Thresholds) -> Self {
        ProtocolConfig {
            lengths: [1, 2, 3, 5, 10].iter().map(|h| h * 3600).collect(),
            hours: (0..24).collect(),
            kind: KindFilter::Both,
            days: crate::model::predict::DEFAULT_DAYS,
            thresholds,
            step_secs: None,
            test_from: 0.5,
            lead_secs: 0,
            record_days: None,
        }
    }

    fn step_for(&self, series: &HostSeries) -> u32 {
        self.step_secs.unwrap_or(series.step_secs).max(1)
    }
}

/// The local dates a record touches, first to last.
pub fn record_dates(series: &HostSeries) -> Vec<Date> {
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        return Vec::new();
    };
    let local = |t: i64| {
        Timestamp::from_second(t)
            .ok()
            .map(|ts| ts.to_zoned(series.tz.clone()).date())
    };
    let (Some(mut day), Some(end)) = (local(first), local(last)) else {
        return Vec::new();
    };
    let mut dates = Vec::new();
    while day <= end {
        dates.push(day);
        match day.tomorrow() {
            Ok(next) => day = next,
            Err(_) => break,
        }
    }
    dates
}

/// The test days: per kind, the days from the `test_from` share on (the
/// earlier ones are only ever history), restricted to the kinds asked for.
pub fn test_days(series: &HostSeries, cfg: &ProtocolConfig) -> Vec<Date> {
    let dates = record_dates(series);
    let mut chosen = Vec::new();
    for kind in [DayKind::Weekday, DayKind::Weekend] {
        if !cfg.kind.admits(kind) {
            continue;
        }
        let of_kind: Vec<Date> = dates
            .iter()
            .copied()
            .filter(|&d| DayKind::of(d) == kind)
            .collect();
        let skip = (of_kind.len() as f64 * cfg.test_from.clamp(0.0, 1.0)).ceil() as usize;
        chosen.extend(of_kind.into_iter().skip(skip));
    }
    chosen.sort();
    chosen
}

/// W for a date and hour: h:00 local. A time skipped by a DST change maps
/// to the instant after the gap.
pub fn window_start(series: &HostSeries, date: Date, hour: u8) -> Option<i64> {
    let time = Time::new(i8::try_from(hour).ok()?, 0, 0, 0).ok()?;
    let zoned = date.to_datetime(time).to_zoned(series.tz.clone()).ok()?;
    Some(zoned.timestamp().as_second())
}

/// What a window held: its start state and whether a job would survive it.
/// `None` when the window is not inside the record.
pub fn window_outcome(
    series: &HostSeries,
    th: Thresholds,
    at: i64,
    window_secs: u64,
    step_secs: u32,
    scratch: &mut Vec<State>,
) -> Option<(State, bool)> {
    let steps = usize::try_from(window_secs / u64::from(step_secs.max(1))).ok()?;
    if steps == 0 || !series.window_states(th, at, step_secs, steps, scratch) {
        return None;
    }
    let start = *scratch.first()?;
    let survived = scratch[1..].iter().all(|s| s.is_transient());
    Some((start, survived))
}

/// One tested window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestCase {
    /// Index of the trace in the run.
    pub trace: usize,
    pub date: Date,
    pub kind: DayKind,
    pub hour: u8,
    pub window_secs: u64,
    /// W, Unix seconds.
    pub at: i64,
    pub start: State,
    /// True when no failure state was entered in (W, W + T].
    pub survived: bool,
}

/// The tested windows of one day, in (hour, length) order.
pub fn day_cases(
    series: &HostSeries,
    trace: usize,
    date: Date,
    cfg: &ProtocolConfig,
) -> Vec<TestCase> {
    let step = cfg.step_for(series);
    let mut scratch = Vec::new();
    let mut cases = Vec::new();
    for &hour in &cfg.hours {
        let Some(at) = window_start(series, date, hour) else {
            continue;
        };
        for &window_secs in &cfg.lengths {
            let outcome =
                window_outcome(series, cfg.thresholds, at, window_secs, step, &mut scratch);
            // Now: only windows starting in S1/S2 (TR is 0 otherwise, and
            // known). Later: every window, one starting in a failure failed.
            let outcome = if cfg.lead_secs == 0 {
                outcome.filter(|(s, _)| s.is_transient())
            } else {
                outcome.map(|(s, survived)| (s, survived && s.is_transient()))
            };
            if let Some((start, survived)) = outcome {
                cases.push(TestCase {
                    trace,
                    date,
                    kind: DayKind::of(date),
                    hour,
                    window_secs,
                    at,
                    start,
                    survived,
                });
            }
        }
    }
    cases
}

/// The request every method gets for a case.
pub fn request_for(case: &TestCase, cfg: &ProtocolConfig) -> PredictRequest {
    PredictRequest {
        step_secs: cfg.step_secs,
        days: cfg.days,
        ..PredictRequest::new(case.at, case.window_secs, cfg.thresholds)
    }
}

/// A case every method answered, with the answers in method order.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredCase {
    pub case: TestCase,
    /// Predicted TR per method, in the run's method order.
    pub tr: Vec<f64>,
}

/// Everything learned from one (trace, day) work item.
#[derive(Debug, Clone, Default)]
pub struct DayResult {
    pub trace: usize,
    pub date: Option<Date>,
    /// Cases every method answered.
    pub cases: Vec<ScoredCase>,
    /// Per method: forecasts refused, by reason. A case with any refusal is left out.
    pub refused: Vec<BTreeMap<&'static str, usize>>,
    /// Cases left out because some method refused them.
    pub dropped: usize,
    /// Per method: time spent forecasting, and calls.
    pub time: Vec<(Duration, usize)>,
}

/// A stable short name for why a forecast was refused.
pub fn refusal_reason(e: &PredictError) -> &'static str {
    match e {
        PredictError::ZeroStep => "zero_step",
        PredictError::WindowShorterThanStep { .. } => "window_shorter_than_step",
        PredictError::TooManySteps { .. } => "too_many_steps",
        PredictError::BadDays(_) => "bad_days",
        PredictError::BadTime(_) => "bad_time",
        PredictError::NoHistory { .. } => "no_history",
        PredictError::NoRecentSamples { .. } => "no_recent_samples",
    }
}

/// When the forecast of `case` is made: W, or W − lead for a window that
/// starts later.
pub fn origin_of(case: &TestCase, cfg: &ProtocolConfig) -> i64 {
    case.at
        .saturating_sub(i64::try_from(cfg.lead_secs).unwrap_or(i64::MAX))
}

/// Runs every method on one day's cases.
pub fn run_day(
    series: &HostSeries,
    trace: usize,
    date: Date,
    methods: &[Box<dyn ReliabilityPredictor>],
    cfg: &ProtocolConfig,
) -> DayResult {
    let mut result = DayResult {
        trace,
        date: Some(date),
        refused: vec![BTreeMap::new(); methods.len()],
        time: vec![(Duration::ZERO, 0); methods.len()],
        ..DayResult::default()
    };
    // A young host: the record it would have on this day. Outcomes are
    // still read off the whole record.
    let young = cfg.record_days.and_then(|k| young_record(series, date, k));
    let record = young.as_ref().unwrap_or(series);
    // For a later window, the record cut at the origin (cases come in hour
    // order, so one cut serves an hour's lengths).
    let mut cut: Option<(i64, HostSeries)> = None;
    for case in day_cases(series, trace, date, cfg) {
        let req = request_for(&case, cfg);
        let known = if cfg.lead_secs == 0 {
            record
        } else {
            let origin = origin_of(&case, cfg);
            if cut.as_ref().is_none_or(|(o, _)| *o != origin) {
                cut = Some((origin, known_at(record, origin)));
            }
            match &cut {
                Some((_, s)) => s,
                None => record,
            }
        };
        let mut tr = Vec::with_capacity(methods.len());
        for (i, method) in methods.iter().enumerate() {
            let started = Instant::now();
            let answer = method.forecast(known, &req);
            result.time[i].0 += started.elapsed();
            result.time[i].1 += 1;
            match answer {
                // A method must answer a probability; clamp rounding noise.
                Ok(f) if f.tr.is_finite() => tr.push(f.tr.clamp(0.0, 1.0)),
                Ok(_) => *result.refused[i].entry("not_finite").or_default() += 1,
                Err(e) => *result.refused[i].entry(refusal_reason(&e)).or_default() += 1,
            }
        }
        if tr.len() == methods.len() {
            result.cases.push(ScoredCase { case, tr });
        } else {
            result.dropped += 1;
        }
    }
    result
}

/// Runs the protocol over every trace and test day on `threads` threads.
/// `tick` is called once per finished day (for a progress bar). The result
/// is in (trace, date) order whatever the scheduling.
pub fn run(
    traces: &[&HostSeries],
    methods: &[Box<dyn ReliabilityPredictor>],
    cfg: &ProtocolConfig,
    threads: usize,
    tick: &(dyn Fn() + Sync),
) -> Vec<DayResult> {
    let work = work_items(traces, cfg);
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, DayResult)>> = Mutex::new(Vec::with_capacity(work.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(trace, date)) = work.get(i) else {
                    break;
                };
                let day = run_day(traces[trace], trace, date, methods, cfg);
                // A poisoned lock only means another worker panicked; keep its data.
                done.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((i, day));
                tick();
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, d)| d).collect()
}

/// The (trace, test day) pairs of a run, in order.
pub fn work_items(traces: &[&HostSeries], cfg: &ProtocolConfig) -> Vec<(usize, Date)> {
    traces
        .iter()
        .enumerate()
        .flat_map(|(i, s)| test_days(s, cfg).into_iter().map(move |d| (i, d)))
        .collect()
}

/// What a node knows at `origin` of its own record: the rows at or before
/// it, and, when the host was down then (its last row a switch-off, or
/// silent for longer than the trace's gap limit), a down row at `origin`,
/// so the record ends at the origin in the state a live monitor reads.
pub fn known_at(series: &HostSeries, origin: i64) -> HostSeries {
    let mut cut = truncated(series, origin);
    let last = cut.row_at(origin).and_then(|r| cut.get(r));
    let silent =
        last.is_some_and(|s| !s.up || origin.saturating_sub(s.time) as u64 > cut.max_gap_secs);
    if silent && cut.last_time().is_some_and(|t| t < origin) {
        // After the last row, so it keeps the record valid.
        let _ = cut.push(Sample {
            time: origin,
            cpu: 0.0,
            free_mib: 0,
            up: false,
        });
    }
    cut
}

/// The record a host that joined at local midnight `days` days before
/// `date` has: the rows from then on. `None` when the record begins later
/// anyway (the whole record is that young) or the date has no midnight.
pub fn young_record(series: &HostSeries, date: Date, days: u32) -> Option<HostSeries> {
    let joined = date
        .checked_sub(jiff::Span::new().days(i64::from(days)))
        .ok()?
        .to_zoned(series.tz.clone())
        .ok()?
        .timestamp()
        .as_second();
    if series.first_time()? >= joined {
        return None;
    }
    let mut young = HostSeries::new(series.step_secs, series.max_gap_secs, series.tz.clone());
    for sample in series.samples().skip_while(|s| s.time < joined) {
        // Rows come from a valid series, so they are in order and in range.
        let _ = young.push(sample);
    }
    Some(young)
}

/// A copy of `series` with only the rows at or before `at`: what a method
/// could have known at W.
pub fn truncated_at(series: &HostSeries, at: i64) -> HostSeries {
    let mut copy = HostSeries::new(series.step_secs, series.max_gap_secs, series.tz.clone());
    for sample in series.samples().take_while(|s| s.time <= at) {
        // Rows come from a valid series, so they are in order and in range.
        let _ = copy.push(sample);
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::registry::methods_from_list;
    use crate::eval::synth::{generate, SynthConfig};
    use crate::model::series::Sample;
    use jiff::tz::TimeZone;

    // 2025-09-01 is a Monday.
    const MONDAY: i64 = 1_756_684_800;

    fn hand_series(rows: &[(i64, f64, bool)]) -> HostSeries {
        let mut s = HostSeries::new(60, 120, TimeZone::UTC);
        for &(time, cpu, up) in rows {
            s.push(Sample {
                time: MONDAY + time,
                cpu,
                free_mib: 1000,
                up,
            })
            .unwrap();
        }
        s
    }

    #[test]
    fn outcome_on_a_hand_made_series() {
        // Light until 600 s, hot from 600 s (S3 from 660 s), light from 780 s,
        // switched off at 1200 s, back at 1320 s, rows each minute to 1800 s.
        let rows: Vec<(i64, f64, bool)> = (0..=30)
            .map(|k| {
                let t = k * 60;
                let cpu = if (600..780).contains(&t) { 90.0 } else { 5.0 };
                (t, cpu, !(1200..1320).contains(&t))
            })
            .collect();
        let s = hand_series(&rows);
        let th = Thresholds::default();
        let mut scratch = Vec::new();
        let o = |at: i64, len: u64, scratch: &mut Vec<State>| {
            window_outcome(&s, th, MONDAY + at, len, 60, scratch)
        };
        // [0, 600]: the hot row at 600 is only S2 (not sustained yet).
        assert_eq!(o(0, 600, &mut scratch), Some((State::S1, true)));
        // [0, 660]: S3 at 660.
        assert_eq!(o(0, 660, &mut scratch), Some((State::S1, false)));
        // [780, 1140]: light.
        assert_eq!(o(780, 360, &mut scratch), Some((State::S1, true)));
        // [780, 1200]: the switch-off at 1200 is a failure.
        assert_eq!(o(780, 420, &mut scratch), Some((State::S1, false)));
        // Starting in the switch-off: the start is S5 and the case is not tested.
        assert_eq!(o(1200, 60, &mut scratch).map(|(s, _)| s), Some(State::S5));
        // Beyond the record: no outcome.
        assert_eq!(o(1320, 600, &mut scratch), None);
        // A failure exactly at W does not count against (W, W + T]; only the start state does.
        assert_eq!(o(1260, 60, &mut scratch), Some((State::S5, true)));
    }

    /// The record as known at an origin: up and sampled, the rows up to it;
    /// switched off or silent past the gap limit, a down row at the origin.
    #[test]
    fn known_at_marks_a_host_down_at_the_origin_when_it_was() {
        // Rows each minute to 600 s, a switch-off row at 660 s, back at
        // 1200 s; then silent from 1500 s to 3000 s.
        let mut rows: Vec<(i64, f64, bool)> = (0..=10).map(|k| (k * 60, 5.0, true)).collect();
        rows.push((660, 0.0, false));
        rows.extend((20..=25).map(|k| (k * 60, 5.0, true)));
        rows.push((3000, 5.0, true));
        let s = hand_series(&rows);
        let th = Thresholds::default();
        let at = |t: i64| MONDAY + t;
        // Up and sampled at 300 s: the rows up to it, nothing added.
        let up = known_at(&s, at(330));
        assert_eq!(up.last_time(), Some(at(300)));
        assert_eq!(up.state_at(th, at(300)), Some(State::S1));
        // Switched off at 660 s: down at 900 s.
        let off = known_at(&s, at(900));
        assert_eq!(off.last_time(), Some(at(900)));
        assert_eq!(off.state_at(th, at(900)), Some(State::S5));
        // Silent since 1500 s (gap limit 120 s): down at 2000 s.
        let silent = known_at(&s, at(2000));
        assert_eq!(silent.last_time(), Some(at(2000)));
        assert_eq!(silent.state_at(th, at(2000)), Some(State::S5));
        // Within the gap limit of its last row: up.
        assert_eq!(known_at(&s, at(1560)).last_time(), Some(at(1500)));
    }

    #[test]
    fn test_days_are_the_later_share_of_each_kind() {
        let trace = generate(&SynthConfig::new(3, 28, "UTC").unwrap());
        let cfg = ProtocolConfig::new(Thresholds::default());
        let days = test_days(&trace.series, &cfg);
        let all = record_dates(&trace.series);
        assert!(all.len() >= 25, "{} dates", all.len());
        assert_eq!(all[0], jiff::civil::date(2025, 9, 1));
        for kind in [DayKind::Weekday, DayKind::Weekend] {
            let of_kind: Vec<Date> = all
                .iter()
                .copied()
                .filter(|d| DayKind::of(*d) == kind)
                .collect();
            let tested: Vec<Date> = days
                .iter()
                .copied()
                .filter(|d| DayKind::of(*d) == kind)
                .collect();
            // The later half, the earlier (larger when odd) half kept for history.
            assert_eq!(tested.len(), of_kind.len() / 2, "{kind:?}");
            assert_eq!(tested[..], of_kind[of_kind.len() - tested.len()..]);
        }
        let only_weekends = ProtocolConfig {
            kind: KindFilter::Weekend,
            ..cfg
        };
        assert!(test_days(&trace.series, &only_weekends)
            .iter()
            .all(|d| DayKind::of(*d) == DayKind::Weekend));
    }

    #[test]
    fn no_test_window_uses_data_after_w() {
        let trace = generate(&SynthConfig::new(5, 24, "UTC").unwrap());
        let series = &trace.series;
        let cfg = ProtocolConfig {
            lengths: vec![3600, 5 * 3600],
            hours: vec![1, 8, 13, 19],
            ..ProtocolConfig::new(Thresholds::default())
        };
        let methods = methods_from_list("all", 1).unwrap();
        let mut checked = 0;
        for date in test_days(series, &cfg).into_iter().step_by(3) {
            let day = run_day(series, 0, date, &methods, &cfg);
            for scored in day.cases.iter().step_by(2) {
                let cut = truncated_at(series, scored.case.at);
                assert_eq!(
                    cut.last_time(),
                    Some(scored.case.at),
                    "a row at W is needed"
                );
                let req = request_for(&scored.case, &cfg);
                for (m, method) in methods.iter().enumerate() {
                    let on_cut = method.forecast(&cut, &req).unwrap().tr;
                    assert_eq!(
                        on_cut,
                        scored.tr[m],
                        "{} at {:?}",
                        method.name(),
                        scored.case
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 10, "only {checked} cases checked");
    }

    /// `--start-in`: each window is forecast from the record cut at W − lead
    /// (the forecast equals the one made on that cut), and windows starting
    /// in a failure are tested as failed.
    #[test]
    fn a_later_window_is_forecast_from_the_record_cut_at_its_origin() {
        let trace = generate(&SynthConfig::new(5, 24, "UTC").unwrap());
        let series = &trace.series;
        let lead = 3 * 3600;
        let cfg = ProtocolConfig {
            lengths: vec![3600],
            hours: (0..24).collect(),
            lead_secs: lead,
            ..ProtocolConfig::new(Thresholds::default())
        };
        let methods = methods_from_list("logistic,freq", 1).unwrap();
        let mut checked = 0;
        for date in test_days(series, &cfg).into_iter().step_by(4) {
            let day = run_day(series, 0, date, &methods, &cfg);
            for scored in day.cases.iter().step_by(5) {
                let origin = scored.case.at - lead as i64;
                assert_eq!(origin_of(&scored.case, &cfg), origin);
                let cut = known_at(series, origin);
                let req = request_for(&scored.case, &cfg);
                for (m, method) in methods.iter().enumerate() {
                    let on_cut = method.forecast(&cut, &req).unwrap().tr;
                    assert_eq!(on_cut, scored.tr[m], "{}", method.name());
                }
                checked += 1;
            }
        }
        assert!(checked >= 5, "only {checked} cases checked");
        let cases: Vec<TestCase> = test_days(series, &cfg)
            .into_iter()
            .flat_map(|d| day_cases(series, 0, d, &cfg))
            .collect();
        let failed_at_start: Vec<&TestCase> =
            cases.iter().filter(|c| !c.start.is_transient()).collect();
        assert!(!failed_at_start.is_empty());
        assert!(failed_at_start.iter().all(|c| !c.survived));
        // The same windows asked now leave those out.
        let now = ProtocolConfig {
            lead_secs: 0,
            ..cfg
        };
        let tested_now: usize = test_days(series, &now)
            .into_iter()
            .map(|d| day_cases(series, 0, d, &now).len())
            .sum();
        assert_eq!(tested_now, cases.len() - failed_at_start.len());
    }

    /// `--record-days K`: the tested windows and outcomes are those of the
    /// whole record, each forecast is the one made on the record from
    /// local midnight K days before the test day, and that record starts
    /// there.
    #[test]
    fn a_young_host_is_asked_with_its_last_days_only() {
        let trace = generate(&SynthConfig::new(5, 24, "Europe/Berlin").unwrap());
        let series = &trace.series;
        let whole = ProtocolConfig {
            lengths: vec![3600, 3 * 3600],
            hours: vec![3, 9, 15, 21],
            ..ProtocolConfig::new(Thresholds::default())
        };
        let young = ProtocolConfig {
            record_days: Some(2),
            ..whole.clone()
        };
        let methods = methods_from_list("logistic,freq", 1).unwrap();
        let mut checked = 0;
        for date in test_days(series, &young).into_iter().step_by(3) {
            let old = run_day(series, 0, date, &methods, &whole);
            let new = run_day(series, 0, date, &methods, &young);
            let cases = |d: &DayResult| d.cases.iter().map(|c| c.case.clone()).collect::<Vec<_>>();
            // freq needs a same-kind day in the two: some cases drop.
            assert!(cases(&new).iter().all(|c| cases(&old).contains(c)));
            let record = young_record(series, date, 2).unwrap();
            let midnight = date
                .checked_sub(jiff::Span::new().days(2))
                .unwrap()
                .to_zoned(series.tz.clone())
                .unwrap()
                .timestamp()
                .as_second();
            // Every row from that midnight on, none before it.
            assert!(record.first_time().unwrap() >= midnight);
            let since = series.samples().filter(|r| r.time >= midnight).count();
            assert_eq!(record.len(), since);
            assert!(series.first_time().unwrap() < midnight);
            for scored in &new.cases {
                let req = request_for(&scored.case, &young);
                for (m, method) in methods.iter().enumerate() {
                    let tr = method.forecast(&record, &req).unwrap().tr;
                    assert_eq!(tr, scored.tr[m], "{}", method.name());
                }
                checked += 1;
            }
            // The young host's logistic differs from the old host's somewhere.
            let differs = new.cases.iter().any(|n| {
                old.cases
                    .iter()
                    .find(|o| o.case == n.case)
                    .is_some_and(|o| o.tr[0] != n.tr[0])
            });
            assert!(differs || new.cases.is_empty(), "{date}");
        }
        assert!(checked >= 10, "only {checked} cases checked");
        // A record no older than K days is kept whole.
        let first_date = record_dates(series)[0];
        assert!(young_record(series, first_date, 2).is_none());
    }

    #[test]
    fn runs_are_in_work_order_whatever_the_threads() {
        let a = generate(&SynthConfig::new(11, 21, "UTC").unwrap());
        let b = generate(&SynthConfig::new(12, 21, "Europe/Berlin").unwrap());
        let traces = [&a.series, &b.series];
        let cfg = ProtocolConfig {
            lengths: vec![3600, 3 * 3600],
            hours: vec![2, 9, 15],
            ..ProtocolConfig::new(Thresholds::default())
        };
        let methods = methods_from_list("km,paper", 1).unwrap();
        let one = run(&traces, &methods, &cfg, 1, &|| {});
        let two = run(&traces, &methods, &cfg, 2, &|| {});
        let flat = |r: &[DayResult]| -> Vec<ScoredCase> {
            r.iter().flat_map(|d| d.cases.clone()).collect()
        };
        assert_eq!(flat(&one), flat(&two));
        assert!(flat(&one).len() > 20);
        assert!(one
            .windows(2)
            .all(|w| (w[0].trace, w[0].date) < (w[1].trace, w[1].date)));
        // Every tested window starts in S1 or S2 and lies in a test day.
        for c in flat(&one) {
            assert!(c.case.start.is_transient());
            assert!(test_days(traces[c.case.trace], &cfg).contains(&c.case.date));
        }
    }
}
