//! The history as a series for predictions, built off the loop: the first
//! blocking task that needs a fresh one decodes the store (others wait for
//! it and share the result), and the loop only bumps a generation to drop
//! it, never waiting for the lock. Decoding half a million rows takes a
//! good part of a second; on the loop it stalled every request. `status`'s
//! predictions are kept beside it the same way, and the pool's prior the
//! pool host last set (what a host with no day of record answers).
//!
//! After a retention pass the record with its front cut is made aside (from
//! the one held, its rows before the cut dropped) and prepared
//! ([`SeriesCache::cut_ahead`]: `node::ready`) while answers go on reading
//! the one held, at most one retention pass old; it is put in its place
//! once ready, so no answer decodes the store nor refits after the cut.
//!
//! This module must not know the loop, its commands nor who asks: it is
//! shared by the loop (`status`, invalidation) and the [`super::HostReader`].

use super::{HostError, STATUS_WINDOWS_SECS};
use crate::history::store::{BulkHistory, StoreError};
use crate::model::baselines::pool_prior::PoolPrior;
use crate::model::baselines::release_shared_grids;
use crate::model::series::HostSeries;
use crate::report::{forecast_or_pool_prior, ReportRequest};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// How stale the cached history may be when predicting: a prediction learns
/// from whole past days, so a minute of missing samples changes nothing.
const SERIES_CACHE_SECS: i64 = 60;
/// How stale the held series may be while the cut one is made aside
/// ([`SeriesCache::cut_ahead`]): it is not brought up to date then (the
/// store no longer holds its first rows, so it would be decoded whole).
const CUT_SERVE_SECS: i64 = 2 * SERIES_CACHE_SECS;

/// TR for each of [`STATUS_WINDOWS_SECS`] and what it stands on, or why
/// there is none.
pub(super) type StatusPredictions = Vec<(u64, super::messages::StatusTr)>;

pub(super) struct SeriesCache {
    bulk: BulkHistory,
    /// Bumped when the history changes in bulk (import, retention).
    generation: AtomicU64,
    /// The generation and time a series was built at, and the series.
    slot: Mutex<Option<(u64, i64, Arc<HostSeries>)>>,
    /// `status`'s predictions, with the generation and time they were made
    /// at; the loop only copies them out (the lock is never held long).
    status_slot: Mutex<Option<(u64, i64, StatusPredictions)>>,
    /// A background refresh of `status_slot` is under way.
    refreshing: AtomicBool,
    /// The record after a retention cut is being made aside: the held one
    /// is served as it is meanwhile ([`Self::cut_ahead`]).
    cutting: AtomicBool,
    /// The pool's typical curve, when the node has heard enough members.
    pool_prior: Mutex<Option<Arc<PoolPrior>>>,
}

/// Whether something made at `made` (Unix seconds) from history generation
/// `made_gen` may still be used at `now`: same history, under a minute old
/// (and not from the future, should the clock step back).
fn fresh(made_gen: u64, made: i64, generation: u64, now: i64) -> bool {
    made_gen == generation && (0..SERIES_CACHE_SECS).contains(&now.saturating_sub(made))
}

impl SeriesCache {
    pub(super) fn new(bulk: BulkHistory) -> SeriesCache {
        SeriesCache {
            bulk,
            generation: AtomicU64::new(0),
            slot: Mutex::new(None),
            status_slot: Mutex::new(None),
            refreshing: AtomicBool::new(false),
            cutting: AtomicBool::new(false),
            pool_prior: Mutex::new(None),
        }
    }

    /// The pool's prior as last set.
    pub(super) fn pool_prior(&self) -> Option<Arc<PoolPrior>> {
        self.pool_prior
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the pool's prior (`None`: the built-in one stands).
    pub(super) fn set_pool_prior(&self, prior: Option<PoolPrior>) {
        *self
            .pool_prior
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = prior.map(Arc::new);
    }

    /// The host's name in the store, for reports.
    pub(super) fn host_name(&self) -> Option<String> {
        self.bulk.meta().host.clone()
    }

    /// Drops what was built from the history before a bulk change.
    pub(super) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// The last predictions for `status`, and whether they are fresh
    /// (same history, less than `SERIES_CACHE_SECS` old). Never waits long.
    pub(super) fn status_predictions(&self, now: i64) -> (Option<StatusPredictions>, bool) {
        let slot = self
            .status_slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match slot.as_ref() {
            Some((generation, made, predictions)) => {
                let fresh = fresh(
                    *generation,
                    *made,
                    self.generation.load(Ordering::Relaxed),
                    now,
                );
                (Some(predictions.clone()), fresh)
            }
            None => (None, false),
        }
    }

    /// Claims the one background refresh of `status`'s predictions: true
    /// when the caller should run it (and then call [`Self::refreshed`]).
    pub(super) fn start_refresh(&self) -> bool {
        !self.refreshing.swap(true, Ordering::AcqRel)
    }

    /// The background refresh has finished.
    pub(super) fn refreshed(&self) {
        self.refreshing.store(false, Ordering::Release);
    }

    /// Computes `status`'s predictions at `now` and keeps them. Blocking.
    pub(super) fn refresh_status_predictions(
        &self,
        now: i64,
        requests: &[ReportRequest],
    ) -> StatusPredictions {
        let generation = self.generation.load(Ordering::Relaxed);
        let pool = self.pool_prior();
        let predictions: StatusPredictions = match self.get(now) {
            Ok(series) => requests
                .iter()
                .map(|r| {
                    let tr = forecast_or_pool_prior(&series, r, pool.as_deref())
                        .map(|f| (f.tr, f.basis))
                        .map_err(|e| e.to_string());
                    (r.window.window_secs, tr)
                })
                .collect(),
            Err(e) => STATUS_WINDOWS_SECS
                .iter()
                .map(|&w| (w, Err(e.to_string())))
                .collect(),
        };
        // The grids these forecasts built serve no later answer (it reads a
        // newer record): let them go (`release_shared_grids`).
        release_shared_grids();
        *self
            .status_slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((generation, now, predictions.clone()));
        predictions
    }

    /// The series, rebuilt when older than `SERIES_CACHE_SECS` at `now` or
    /// dropped since; while a cut record is made aside, the held one as it
    /// is for up to `CUT_SERVE_SECS`. Blocking: call from the blocking pool
    /// only.
    pub(super) fn get(&self, now: i64) -> Result<Arc<HostSeries>, HostError> {
        self.get_through(now, i64::MIN)
    }

    /// [`Self::get`], brought up to date also when its last row is before
    /// `time` (a reading the loop has just recorded).
    pub(super) fn get_through(&self, now: i64, time: i64) -> Result<Arc<HostSeries>, HostError> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = self.generation.load(Ordering::Relaxed);
        if let Some((built_gen, built, series)) = slot.as_ref() {
            let reaches = series.last_time().is_some_and(|last| last >= time);
            if fresh(*built_gen, *built, generation, now) && reaches {
                return Ok(series.clone());
            }
            let age = now.saturating_sub(*built);
            if *built_gen == generation
                && self.cutting.load(Ordering::Acquire)
                && (0..CUT_SERVE_SECS).contains(&age)
            {
                return Ok(series.clone());
            }
        }
        let internal = |e: StoreError| HostError::Internal(e.to_string());
        let series = match slot.take() {
            // Same history, only older: the rows recorded since are added to
            // it (copied first if a reader still holds it), not the whole
            // history decoded again every minute.
            Some((built_gen, _, series)) if built_gen == generation => {
                let mut series = Arc::unwrap_or_clone(series);
                self.bulk.extend_series(&mut series).map_err(internal)?;
                Arc::new(series)
            }
            _ => Arc::new(self.bulk.series().map_err(internal)?),
        };
        *slot = Some((generation, now, series.clone()));
        Ok(series)
    }

    /// After a retention pass deleted the rows before `cutoff` at `now`:
    /// makes the record without them aside (the held series' rows from
    /// `cutoff` on, brought up to the store, which reads it whole should
    /// their count disagree), lets `prepare` prepare it (`node::ready`),
    /// and puts it in the held one's place. Answers read the held series
    /// meanwhile. Nothing held (or a cut already being made): the held
    /// series is dropped, as after an import. Returns whether a cut record
    /// was put in place. Blocking: call from the blocking pool only.
    pub(super) fn cut_ahead(
        &self,
        now: i64,
        cutoff: i64,
        prepare: impl FnOnce(&HostSeries),
    ) -> Result<bool, HostError> {
        let held = {
            let slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            let generation = self.generation.load(Ordering::Relaxed);
            slot.as_ref()
                .filter(|(built_gen, _, _)| *built_gen == generation)
                .map(|(_, _, series)| (generation, series.clone()))
        };
        let Some((generation, held)) = held.filter(|_| !self.cutting.swap(true, Ordering::AcqRel))
        else {
            self.invalidate();
            return Ok(false);
        };
        let made = self.cut(&held, cutoff);
        drop(held);
        let placed = made.map(|series| {
            prepare(&series);
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            // An import since: the cut record is of an older history.
            let placed = self
                .generation
                .compare_exchange(
                    generation,
                    generation + 1,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok();
            if placed {
                *slot = Some((generation + 1, now, Arc::new(series)));
            }
            placed
        });
        self.cutting.store(false, Ordering::Release);
        if !matches!(placed, Ok(true)) {
            self.invalidate();
        }
        placed
    }

    /// `held`'s rows from `cutoff` on, brought up to the store.
    fn cut(&self, held: &HostSeries, cutoff: i64) -> Result<HostSeries, HostError> {
        let mut series = HostSeries::new(held.step_secs, held.max_gap_secs, held.tz.clone());
        let from = held.row_at(cutoff.saturating_sub(1)).map_or(0, |r| r + 1);
        series.reserve_exact(held.len().saturating_sub(from));
        for sample in (from..held.len()).filter_map(|i| held.get(i)) {
            // Rows a held series holds were pushed once already.
            let _ = series.push(sample);
        }
        self.bulk
            .extend_series(&mut series)
            .map_err(|e| HostError::Internal(e.to_string()))?;
        Ok(series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_series_lasts_a_minute_of_the_same_history() {
        assert!(fresh(3, 1000, 3, 1000));
        assert!(fresh(3, 1000, 3, 1000 + SERIES_CACHE_SECS - 1));
        assert!(!fresh(3, 1000, 3, 1000 + SERIES_CACHE_SECS), "a minute old");
        assert!(!fresh(3, 1000, 4, 1001), "the history changed in bulk");
        assert!(!fresh(3, 1000, 3, 999), "the clock stepped back");
        assert!(!fresh(0, i64::MAX, 0, i64::MIN), "no overflow");
    }
}
