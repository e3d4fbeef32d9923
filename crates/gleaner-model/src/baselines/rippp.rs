//! `rippp`: the Remaining Idle Period Probability Predictor of Wyckoff,
//! Johnson and Jeong (seed 003), with its time-of-day partition.
//!
//! An idle period is a maximal run of S1 ∪ S2 (a guest survives) on the step
//! grid; S3, S4 and S5 end it. Its length is its number of grid points. From
//! the idle periods that *start* on the history days (the same N same-kind
//! days the semi-Markov predictor uses, read over the whole local day, not
//! only the window) we estimate, per time-of-day zone of the start (night
//! 22–7, morning 7–12, noon 12–17, afternoon 17–22, local time), the
//! survival S(l) = P(L ≥ l). A host idle at W for `a` grid points (W
//! included, measured backwards on the record) survives the window of m
//! steps with P = S_k(a + m) / S_k(a), k the zone where its current idle
//! period started.
//!
//! Censoring, kept simple: a period going on when the day's scan starts
//! (it began the day before, or before the record) is not counted for that
//! day; a period going at the day's end is followed into the next days
//! until it ends. When it is still going at the start of W's local day
//! (nothing later may be read), at the record's end, or after
//! [`MAX_IDLE_SECS`], it is right-censored there, and S is the
//! Kaplan–Meier estimate, which reduces to the plain empirical share when
//! nothing is censored. The age at W stops at the record's start or at
//! [`MAX_IDLE_SECS`]; such an age is a lower bound and its zone unknown, so
//! the pooled distribution of all zones is used.
//!
//! Fallbacks: a zone without idle periods uses the pooled distribution;
//! when S(a) = 0 (the host has been idle longer than any period on record)
//! the pooled S(a) is tried, and when that is 0 too the age is dropped
//! (P = S(1 + m), a fresh period), as the semi-Markov age conditioning does.
//! No idle period at all in the history gives TR = 0. W's state unknown
//! (beyond the record): the share of history days idle at W's time of day
//! times S_zone(W)(1 + m). W's state a failure: TR = 0.
//!
//! Pure code; it must not know how the evaluation scores it.

use super::{certain_failure, no_history, observed_state};
use crate::predict::{geometry, history_days, PredictError, PredictRequest};
use crate::predictor::{ReliabilityForecast, ReliabilityPredictor};
use crate::series::HostSeries;
use crate::state::{State, Thresholds};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// Longest idle period (and idle age at W) followed, seconds: a week.
pub const MAX_IDLE_SECS: i64 = 7 * 86_400;
/// Grid points read per call while following a period across days.
const CHUNK_POINTS: usize = 600;

/// The RIPPP baseline; it has no parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rippp;

/// The paper's four time-of-day zones (section 8.3), by local hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// 22:00 to 07:00.
    Night,
    /// 07:00 to 12:00.
    Morning,
    /// 12:00 to 17:00.
    Noon,
    /// 17:00 to 22:00.
    Afternoon,
}

impl Zone {
    pub const ALL: [Zone; 4] = [Zone::Night, Zone::Morning, Zone::Noon, Zone::Afternoon];

    /// The zone of a local hour 0..=23.
    pub fn of_hour(hour: i8) -> Zone {
        match hour {
            7..=11 => Zone::Morning,
            12..=16 => Zone::Noon,
            17..=21 => Zone::Afternoon,
            _ => Zone::Night,
        }
    }

    /// The zone of an instant in time zone `tz`.
    pub fn of_time(t: i64, tz: &TimeZone) -> Zone {
        match Timestamp::from_second(t) {
            Ok(ts) => Zone::of_hour(ts.to_zoned(tz.clone()).hour()),
            Err(_) => Zone::Night,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One idle period: its length in grid points, and whether it was still
/// going when observation stopped (right-censored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct IdlePeriod {
    pub points: u32,
    pub censored: bool,
}

/// Idle periods by the zone they started in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdlePeriods {
    pub by_zone: [Vec<IdlePeriod>; 4],
}

impl IdlePeriods {
    pub fn add(&mut self, zone: Zone, period: IdlePeriod) {
        self.by_zone[zone.index()].push(period);
    }

    /// All zones together, sorted.
    pub fn pooled(&self) -> Vec<IdlePeriod> {
        let mut all: Vec<IdlePeriod> = self.by_zone.iter().flatten().copied().collect();
        all.sort_unstable();
        all
    }

    /// One zone's periods, sorted.
    pub fn zone(&self, zone: Zone) -> Vec<IdlePeriod> {
        let mut v = self.by_zone[zone.index()].clone();
        v.sort_unstable();
        v
    }
}

/// Kaplan–Meier P(L ≥ l) from periods sorted by length (censored ones sort
/// after events of the same length, and stay at risk at their length).
pub fn survival(sorted: &[IdlePeriod], l: u32) -> f64 {
    let mut at_risk = sorted.len();
    let mut s = 1.0;
    let mut i = 0;
    while i < sorted.len() && sorted[i].points < l {
        let t = sorted[i].points;
        let (mut events, mut leaving) = (0usize, 0usize);
        while i < sorted.len() && sorted[i].points == t {
            events += usize::from(!sorted[i].censored);
            leaving += 1;
            i += 1;
        }
        if at_risk > 0 {
            s *= 1.0 - events as f64 / at_risk as f64;
        }
        at_risk -= leaving;
    }
    s
}

/// How the answer was reached, for tests and reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Basis {
    /// The zone's (or, for an empty zone, the pooled) conditional survival.
    Conditional { zone: Option<Zone> },
    /// S(a) = 0 in the zone: the pooled conditional survival.
    PooledConditional,
    /// S(a) = 0 everywhere: the age was dropped.
    FreshPeriod,
    /// No idle period in the history.
    NeverIdle,
    /// The state at W settled it (a failure) or was unknown.
    InitialState,
}

/// A RIPPP answer with its working.
#[derive(Debug, Clone, PartialEq)]
pub struct RipppAnswer {
    pub tr: f64,
    /// Idle grid points up to and including W (the age a), when W is idle.
    pub age_points: Option<u32>,
    /// Zone where the current idle period started, when known.
    pub zone: Option<Zone>,
    pub basis: Basis,
    pub periods: IdlePeriods,
}

impl ReliabilityPredictor for Rippp {
    fn name(&self) -> String {
        "rippp".to_string()
    }

    fn forecast(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let answer = explain(series, req)?;
        Ok(ReliabilityForecast {
            tr: answer.tr,
            fail_by_cause: None,
        })
    }
}

/// The RIPPP forecast for `req` with its working.
pub fn explain(series: &HostSeries, req: &PredictRequest) -> Result<RipppAnswer, PredictError> {
    let (step, m) = geometry(series, req)?;
    let span = i64::from(step) * m as i64;
    let days = history_days(series, req.at, span, req.days)?;
    if days.is_empty() {
        return Err(no_history(series, req.at));
    }
    let th = req.thresholds;
    let init = observed_state(series, req);
    if let Some(state) = init.filter(|s| s.is_failure()) {
        return Ok(RipppAnswer {
            tr: certain_failure(state).tr,
            age_points: None,
            zone: None,
            basis: Basis::InitialState,
            periods: IdlePeriods::default(),
        });
    }
    let w_midnight = local_midnight(req.at, &series.tz).ok_or(PredictError::BadTime(req.at))?;
    let dates: Vec<Date> = days.iter().map(|d| d.date).collect();
    let periods = collect_idle_periods(series, th, step, &dates, w_midnight);
    let pooled = periods.pooled();
    let m_points = u32::try_from(m).unwrap_or(u32::MAX);
    if pooled.is_empty() {
        return Ok(RipppAnswer {
            tr: 0.0,
            age_points: None,
            zone: None,
            basis: Basis::NeverIdle,
            periods,
        });
    }
    let Some(_) = init else {
        // W beyond the record: a fresh period at W, weighted by how often
        // the host was idle at this time of day.
        let idle_days = days
            .iter()
            .filter(|d| {
                series
                    .state_at(th, d.start)
                    .is_some_and(State::is_transient)
            })
            .count();
        let zone = Zone::of_time(req.at, &series.tz);
        let dist = non_empty_or(periods.zone(zone), &pooled);
        let tr = idle_days as f64 / days.len() as f64 * survival(&dist, m_points.saturating_add(1));
        return Ok(RipppAnswer {
            tr,
            age_points: None,
            zone: Some(zone),
            basis: Basis::InitialState,
            periods,
        });
    };
    let age = idle_age(series, th, req.at, step);
    let zone = (!age.left_censored).then(|| Zone::of_time(age.start, &series.tz));
    let dist = match zone {
        Some(z) => non_empty_or(periods.zone(z), &pooled),
        None => pooled.clone(),
    };
    let a = age.points;
    let conditional = |d: &[IdlePeriod]| {
        let s_a = survival(d, a);
        (s_a > 0.0).then(|| survival(d, a.saturating_add(m_points)) / s_a)
    };
    let (tr, basis) = if let Some(p) = conditional(&dist) {
        (p, Basis::Conditional { zone })
    } else if let Some(p) = conditional(&pooled) {
        (p, Basis::PooledConditional)
    } else {
        (
            survival(&pooled, m_points.saturating_add(1)),
            Basis::FreshPeriod,
        )
    };
    Ok(RipppAnswer {
        tr: tr.clamp(0.0, 1.0),
        age_points: Some(a),
        zone,
        basis,
        periods,
    })
}

fn non_empty_or(v: Vec<IdlePeriod>, fallback: &[IdlePeriod]) -> Vec<IdlePeriod> {
    if v.is_empty() {
        fallback.to_vec()
    } else {
        v
    }
}

/// Unix time of the local midnight that starts `t`'s day.
fn local_midnight(t: i64, tz: &TimeZone) -> Option<i64> {
    let zoned = Timestamp::from_second(t).ok()?.to_zoned(tz.clone());
    Some(zoned.start_of_day().ok()?.timestamp().as_second())
}

/// Unix time of the local midnight that starts `date`.
fn date_start(date: Date, tz: &TimeZone) -> Option<i64> {
    let zoned = date.to_zoned(tz.clone()).ok()?;
    Some(zoned.start_of_day().ok()?.timestamp().as_second())
}

/// The idle periods starting on each of `dates` (whole local days), read
/// on the grid of `step` seconds from midnight and never at or after `limit`.
pub fn collect_idle_periods(
    series: &HostSeries,
    th: Thresholds,
    step: u32,
    dates: &[Date],
    limit: i64,
) -> IdlePeriods {
    let mut periods = IdlePeriods::default();
    let (Some(first), Some(last)) = (series.first_time(), series.last_time()) else {
        return periods;
    };
    let step_i = i64::from(step.max(1));
    // Last readable instant: before W's day and within the record.
    let end_limit = (limit - 1).min(last);
    let mut buf = Vec::new();
    for &date in dates {
        let (Some(day_start), Some(day_end)) = (
            date_start(date, &series.tz),
            date.tomorrow().ok().and_then(|d| date_start(d, &series.tz)),
        ) else {
            continue;
        };
        // One point before midnight shows whether a run at midnight began the day before.
        let mut from = day_start - step_i;
        if from < first {
            from = day_start + (first - day_start + step_i - 1).div_euclid(step_i) * step_i;
        }
        let day_last = (day_end - 1).min(end_limit);
        if from > day_last {
            continue;
        }
        let steps = ((day_last - from) / step_i) as usize;
        if !series.window_states(th, from, step, steps, &mut buf) {
            continue;
        }
        // Runs are (start index, length); the run holding point 0 is skipped.
        let mut k = 0;
        while k < buf.len() && buf[k].is_transient() {
            k += 1;
        }
        while k < buf.len() {
            if !buf[k].is_transient() {
                k += 1;
                continue;
            }
            let start = k;
            while k < buf.len() && buf[k].is_transient() {
                k += 1;
            }
            let start_time = from + start as i64 * step_i;
            let mut points = (k - start) as u32;
            let mut censored = false;
            if k == buf.len() {
                // Still idle at the scan's end: follow it.
                let next = from + k as i64 * step_i;
                let (more, cut) = follow_idle(series, th, step, next, end_limit, start_time);
                points = points.saturating_add(more);
                censored = cut;
            }
            periods.add(
                Zone::of_time(start_time, &series.tz),
                IdlePeriod { points, censored },
            );
        }
    }
    periods
}

/// Follows an idle period from grid point `t` on. Returns how many more
/// idle points it has and whether it was cut (censored) at `end_limit`,
/// at the record's end, or at [`MAX_IDLE_SECS`] after `began`.
fn follow_idle(
    series: &HostSeries,
    th: Thresholds,
    step: u32,
    mut t: i64,
    end_limit: i64,
    began: i64,
) -> (u32, bool) {
    let step_i = i64::from(step.max(1));
    let cap = began.saturating_add(MAX_IDLE_SECS).min(end_limit);
    let mut more = 0u32;
    let mut buf = Vec::new();
    let mut chunk = CHUNK_POINTS;
    while t <= cap {
        let steps = (((cap - t) / step_i) as usize).min(chunk - 1);
        if !series.window_states(th, t, step, steps, &mut buf) {
            return (more, true);
        }
        match buf.iter().position(|s| !s.is_transient()) {
            Some(p) => return (more.saturating_add(p as u32), false),
            None => more = more.saturating_add(buf.len() as u32),
        }
        t += buf.len() as i64 * step_i;
        chunk = chunk.saturating_mul(2);
    }
    (more, true)
}

/// The idle age at an idle W, on the grid W − j·step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IdleAge {
    /// Idle points up to and including W.
    points: u32,
    /// Time of the first idle point.
    start: i64,
    /// True when the walk hit the record's start or the cap first.
    left_censored: bool,
}

fn idle_age(series: &HostSeries, th: Thresholds, at: i64, step: u32) -> IdleAge {
    let step_i = i64::from(step.max(1));
    let first = series.first_time().unwrap_or(at);
    let cap = (MAX_IDLE_SECS / step_i).max(1);
    let reachable = ((at - first) / step_i).min(cap);
    let mut buf = Vec::new();
    // Points W − j·step for j in lo..=hi are read per call, newest last.
    let mut lo = 1i64;
    let mut chunk = CHUNK_POINTS as i64;
    while lo <= reachable {
        let hi = (lo + chunk - 1).min(reachable);
        if !series.window_states(th, at - hi * step_i, step, (hi - lo) as usize, &mut buf) {
            break;
        }
        if let Some(back) = buf.iter().rev().position(|s| !s.is_transient()) {
            let j = lo + back as i64;
            return IdleAge {
                points: j as u32,
                start: at - (j - 1) * step_i,
                left_censored: false,
            };
        }
        lo = hi + 1;
        chunk = chunk.saturating_mul(2);
    }
    let points = u32::try_from(reachable + 1).unwrap_or(u32::MAX);
    IdleAge {
        points,
        start: at - reachable * step_i,
        left_censored: true,
    }
}
