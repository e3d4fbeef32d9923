//! The host's past days as methods that learn from their own past forecasts
//! read them (`nws`, `logistic+hourbias`), and the cache that makes it
//! cheap.
//!
//! Such a method looks at one window per local hour of each past day, of
//! the asked length and step, begun in a transient state and ended by W's
//! local midnight, so what it learns is a function of the record before
//! W's date (no peeking). It sums what it needs of each day (a
//! [`PastDayLearner::Day`]) and learns one answer per date from all of them
//! (a [`PastDayLearner::Learned`]).
//!
//! Cost: a past day's summary is cached once every window starting on it
//! has ended (keyed by the record up to then, the length, the step, the
//! request's N and the learner's identity), and a date's answer once per
//! record before its midnight, so the node pays the past once and then a
//! day per day.
//! Pure code: no I/O, no clock.

use super::grid::{day_start, local_date, prefix_fingerprint};
use crate::predict::{geometry, PredictError, PredictRequest};
use crate::series::HostSeries;
use jiff::civil::{Date, Time};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Entries kept per map before it is emptied (a node asks about one record;
/// the evaluation walks a few traces).
const MAX_CACHED: usize = 65_536;

/// What a method learns from the host's past days.
pub(super) trait PastDayLearner {
    /// What one past day gives (sums over its windows, or the windows).
    type Day: Clone + Default;
    /// What all past days give for one date.
    type Learned: Clone;

    /// Tells this learner's days and dates apart from another's in a
    /// shared cache (its methods' names).
    fn identity(&self) -> Vec<String>;

    /// The day's summary over the windows [`each_past_window`] gives.
    fn day(
        &self,
        series: &HostSeries,
        req: &PredictRequest,
        step: u32,
        m: usize,
        day: Date,
        cut: i64,
    ) -> Self::Day;

    /// The answer for a date from `days`, each `(age, summary)`, age 0 for
    /// yesterday.
    fn learn(&self, days: &[(i64, Self::Day)]) -> Self::Learned;
}

/// Calls `f(start, hour, survived)` for each window of `m` steps starting
/// at a whole local hour of `day`, begun in a transient state and ended by
/// `cut`; `survived` says whether it stayed transient to its end.
pub(super) fn each_past_window(
    series: &HostSeries,
    req: &PredictRequest,
    step: u32,
    m: usize,
    day: Date,
    cut: i64,
    mut f: impl FnMut(i64, i8, bool),
) {
    let span = i64::from(step).saturating_mul(m as i64);
    let mut states = Vec::with_capacity(m + 1);
    for hour in 0..24i8 {
        let Some(start) = Time::new(hour, 0, 0, 0)
            .ok()
            .and_then(|t| day.to_datetime(t).to_zoned(series.tz.clone()).ok())
            .map(|z| z.timestamp().as_second())
        else {
            continue;
        };
        if start.saturating_add(span) > cut
            || !series.window_states(req.thresholds, start, step, m, &mut states)
        {
            continue;
        }
        if !states.first().is_some_and(|s| s.is_transient()) {
            continue;
        }
        let survived = states[1..].iter().all(|s| s.is_transient());
        f(start, hour, survived);
    }
}

/// A learner's settled days and learned dates.
pub(super) struct PastDayCache<D, L> {
    inner: Mutex<CacheInner<D, L>>,
}

struct CacheInner<D, L> {
    days: HashMap<u64, D>,
    dates: HashMap<u64, L>,
}

impl<D, L> Default for PastDayCache<D, L> {
    fn default() -> Self {
        PastDayCache {
            inner: Mutex::new(CacheInner {
                days: HashMap::new(),
                dates: HashMap::new(),
            }),
        }
    }
}

impl<D: Clone + Default, L: Clone> PastDayCache<D, L> {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner<D, L>> {
        // A poisoned lock only means another thread panicked mid-insert; the maps stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every cached day and date.
    pub(super) fn clear(&self) {
        let mut inner = self.lock();
        inner.days.clear();
        inner.dates.clear();
    }

    /// What `learner` learns for `req`'s length on W's date from up to
    /// `max_days` past days, the windows that ended by W's local midnight.
    pub(super) fn learned<P>(
        &self,
        learner: &P,
        series: &HostSeries,
        req: &PredictRequest,
        max_days: i64,
    ) -> Result<L, PredictError>
    where
        P: PastDayLearner<Day = D, Learned = L>,
    {
        let (step, m) = geometry(series, req)?;
        let date = local_date(series, req.at)?;
        let midnight = day_start(series, date).ok_or(PredictError::BadTime(req.at))?;
        let key = key(learner, series, req, step, m, date, midnight);
        if let Some(learned) = self.lock().dates.get(&key) {
            return Ok(learned.clone());
        }
        let span = i64::from(step).saturating_mul(m as i64);
        // Days after which every window starting on a day has ended.
        let settle = 1 + span.div_euclid(86_400) + i64::from(span.rem_euclid(86_400) != 0);
        let first_date = series
            .first_time()
            .and_then(|t| local_date(series, t).ok())
            .unwrap_or(date);
        let mut days = Vec::new();
        for back in 1..=max_days {
            let Ok(day) = date.checked_sub(jiff::Span::new().days(back)) else {
                break;
            };
            if day < first_date {
                break;
            }
            let summary = if back >= settle {
                self.settled_day(learner, series, req, step, m, day, settle)
            } else {
                learner.day(series, req, step, m, day, midnight)
            };
            days.push((back - 1, summary));
        }
        let learned = learner.learn(&days);
        let mut inner = self.lock();
        if inner.dates.len() >= MAX_CACHED {
            inner.dates.clear();
        }
        inner.dates.insert(key, learned.clone());
        Ok(learned)
    }

    /// A past day all of whose windows have ended `settle` days on: cached.
    #[allow(clippy::too_many_arguments)]
    fn settled_day<P>(
        &self,
        learner: &P,
        series: &HostSeries,
        req: &PredictRequest,
        step: u32,
        m: usize,
        day: Date,
        settle: i64,
    ) -> D
    where
        P: PastDayLearner<Day = D, Learned = L>,
    {
        let Some(end) = day
            .checked_add(jiff::Span::new().days(settle))
            .ok()
            .and_then(|d| day_start(series, d))
        else {
            return D::default();
        };
        let key = key(learner, series, req, step, m, day, end);
        if let Some(summary) = self.lock().days.get(&key) {
            return summary.clone();
        }
        let summary = learner.day(series, req, step, m, day, end);
        let mut inner = self.lock();
        if inner.days.len() >= MAX_CACHED {
            inner.days.clear();
        }
        inner.days.insert(key, summary.clone());
        summary
    }
}

/// The cache key of `date`'s answer (or a day's summary) read from the
/// record up to `end`.
fn key<P: PastDayLearner>(
    learner: &P,
    series: &HostSeries,
    req: &PredictRequest,
    step: u32,
    m: usize,
    date: Date,
    end: i64,
) -> u64 {
    let mut h = DefaultHasher::new();
    prefix_fingerprint(series, end, &req.thresholds).hash(&mut h);
    (step, m, req.days, date, learner.identity()).hash(&mut h);
    h.finish()
}
