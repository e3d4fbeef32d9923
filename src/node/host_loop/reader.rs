//! [`HostReader`]: the host's read-only queries — `predict` through the node,
//! a peer's reliability question, the history for the dashboard — answered
//! on the blocking pool from the caches the loop shares (the series, the
//! peers' answers), never through the loop's command channel: a solve of
//! tens of milliseconds must not queue behind the loop, nor the loop behind it.
//!
//! The loop owns the series cache and keeps it honest (it drops what was
//! built when the history changes in bulk, through
//! [`HostReader::invalidate`]); a reader only borrows it, so a handle kept
//! after the node stopped holds no store open. The loop also tells it when
//! what the answers read goes stale (a retention pass, a reading in a new
//! hour or local date), and it prepares the next answers then, on the
//! blocking pool (`node::ready`). This module must not know
//! the loop's state, its commands, HTTP (`control`) nor the wire (`net`).

use super::messages::{HistoryView, PredictQuery};
use super::series::SeriesCache;
use super::HostError;
use crate::clock::Clock;
use crate::cpu_time::thread_cpu;
use crate::model::baselines::later::starts_later;
use crate::model::baselines::pool_prior::PoolPrior;
use crate::model::baselines::release_shared_grids;
use crate::model::predict::PredictRequest;
use crate::model::sched::spells::LOOKBACK_SECS;
use crate::model::series::HostSeries;
use crate::node::answer::{AnswerCache, HostAnswer};
use crate::node::config::Config;
use crate::node::ready::{self, Ahead};
use crate::report::{predict_report, PredictReport, ReportRequest};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The cloneable way to the host's read-only queries.
#[derive(Clone)]
pub struct HostReader {
    /// The loop's series cache (and through it the store): gone once the
    /// loop has ended.
    series: Weak<SeriesCache>,
    /// Peers' reliability answers, reused for a minute.
    answers: AnswerCache,
    /// The questions asked, to prepare the next answers ahead.
    ahead: Arc<Ahead>,
    /// The node's thresholds and history days, as the loop has them.
    config: Arc<Config>,
    clock: Arc<dyn Clock>,
    /// Owns the blocking solves, so shutdown waits for them.
    tracker: TaskTracker,
    /// Cancelled when the loop stops: queries are then refused as they were
    /// through the loop's channel, with [`HostError::Unavailable`].
    closed: CancellationToken,
}

impl std::fmt::Debug for HostReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostReader")
            .field("open", &self.open().is_ok())
            .finish_non_exhaustive()
    }
}

impl HostReader {
    pub(super) fn new(
        series: Weak<SeriesCache>,
        config: Arc<Config>,
        clock: Arc<dyn Clock>,
        tracker: TaskTracker,
        closed: CancellationToken,
    ) -> HostReader {
        HostReader {
            series,
            answers: AnswerCache::default(),
            ahead: Arc::new(Ahead::default()),
            config,
            clock,
            tracker,
            closed,
        }
    }

    /// The full prediction report for `gleaner predict` through the node.
    pub async fn predict(&self, query: PredictQuery) -> Result<PredictReport, HostError> {
        let cache = self.open()?;
        let now = self.clock.unix_secs();
        let at = query.at.unwrap_or(now);
        let mut window = self.predict_request(at, query.window_secs, query.mem_mib);
        if let Some(days) = query.days {
            window.days = days;
        }
        window.step_secs = query.step_secs.or(window.step_secs);
        let request = ReportRequest::with_method(window, query.method);
        self.blocking(move || {
            let series = cache.get(now)?;
            predict_report(&series, cache.host_name(), &request)
                .map_err(|e| HostError::Invalid(format!("cannot predict: {e}")))
        })
        .await
    }

    /// A peer's reliability question: the TR of a job of `mem_mib` over
    /// `window_secs` from `at`, with the TR curve, the predicted
    /// availability and the past week's spells (`node::answer`). Reused for
    /// a minute per window, length and memory.
    pub async fn reliability(
        &self,
        at: i64,
        window_secs: u64,
        mem_mib: u64,
    ) -> Result<HostAnswer, HostError> {
        self.reliability_costed(at, window_secs, mem_mib).await.0
    }

    /// [`Self::reliability`], with the CPU time its computation took on the
    /// blocking pool (zero for an answer reused): what a peer's question
    /// cost the host, charged to the peer (issue 30, scope 3).
    pub async fn reliability_costed(
        &self,
        at: i64,
        window_secs: u64,
        mem_mib: u64,
    ) -> (Result<HostAnswer, HostError>, Duration) {
        let cache = match self.open() {
            Ok(cache) => cache,
            Err(e) => return (Err(e), Duration::ZERO),
        };
        let key = AnswerCache::key(at, window_secs, mem_mib);
        if let Some(answer) = self.answers.get(key) {
            return (Ok(answer), Duration::ZERO);
        }
        let now = self.clock.unix_secs();
        let (answers, ahead) = (self.answers.clone(), self.ahead.clone());
        let request = ReportRequest::new(self.predict_request(at, window_secs, mem_mib));
        self.blocking_costed(move || {
            let series = cache.get(now)?;
            let shape = ready::Shape {
                window_secs,
                mem_mib,
                // The later model's window (its own fits to prepare), as
                // the method decides it: by the record's last sample.
                later: series
                    .last_time()
                    .is_some_and(|last| starts_later(last, at)),
            };
            ahead.note(shape, now);
            let pool = cache.pool_prior();
            let answer = answers
                .answer_with_prior(&series, &request, pool.as_deref())
                .map_err(|e| HostError::Invalid(e.to_string()))?;
            answers.put(key, answer.clone());
            Ok(answer)
        })
        .await
    }

    /// The history as the predictors see it (the cached series), with the
    /// node's thresholds, for the dashboard's week of availability.
    pub async fn history(&self) -> Result<HistoryView, HostError> {
        let cache = self.open()?;
        let now = self.clock.unix_secs();
        let thresholds = self.config.thresholds(0);
        self.blocking(move || {
            Ok(HistoryView {
                series: cache.get(now)?,
                thresholds,
                now,
            })
        })
        .await
    }

    /// A prediction of a window for a job of `mem_mib`, with the node's
    /// thresholds and history days.
    pub(super) fn predict_request(
        &self,
        at: i64,
        window_secs: u64,
        mem_mib: u64,
    ) -> PredictRequest {
        self.config.predict_request(at, window_secs, mem_mib)
    }

    /// Sets the pool's prior (`None`: the built-in one): what the host
    /// answers, in `status` and to peers, while it has no day of record.
    /// The pool host keeps it fresh from the members it heard.
    pub fn set_pool_prior(&self, prior: Option<PoolPrior>) {
        if let Some(series) = self.series.upgrade() {
            series.set_pool_prior(prior);
        }
    }

    /// A retention pass at `now` deleted rows: the record without them is
    /// made and prepared on the blocking pool while answers read the one
    /// held ([`SeriesCache::cut_ahead`]); the minute's answers from the held
    /// record are dropped once it is in place. The week's spells are kept
    /// when the retention keeps more than their week and a day (the cut
    /// cannot reach them), else dropped too.
    pub(super) fn retained(&self, now: i64) {
        let Ok(cache) = self.open() else {
            return;
        };
        let retention = i64::from(self.config.history.retention_days).saturating_mul(86_400);
        let cutoff = now.saturating_sub(retention);
        let keeps_spells = retention > LOOKBACK_SECS + 86_400;
        let (reader, answers) = (self.clone(), self.answers.clone());
        self.tracker.spawn_blocking(move || {
            let placed = cache.cut_ahead(now, cutoff, |series| {
                reader.prepare(series, now, &cache);
            });
            if keeps_spells {
                answers.forget_answers();
            } else {
                answers.clear();
            }
            if let Err(e) = placed {
                tracing::error!(error = %e, "cannot read the history after retention");
            }
            release_shared_grids();
        });
    }

    /// The loop recorded a reading at `time`: when what the answers read
    /// went stale since the last preparation (a new hour, a new local
    /// date: [`ready::stale_at`]), the recent questions are answered again
    /// on the blocking pool, on the record with that reading, so the next
    /// answers find their fits and spells made.
    pub(super) fn reading_at(&self, time: i64) {
        if !self.ahead.due(time) || !self.ahead.claim() {
            return;
        }
        let Ok(cache) = self.open() else {
            self.ahead.done(None);
            return;
        };
        let reader = self.clone();
        let now = self.clock.unix_secs();
        self.tracker.spawn_blocking(move || {
            let through = cache.get_through(now, time).ok();
            // The held record while a cut one is made aside may end before
            // the reading: tried again at the next reading.
            let through = through.filter(|s| s.last_time().is_some_and(|last| last >= time));
            let stale = through.map(|series| {
                reader.prepare(&series, time, &cache);
                ready::stale_at(&series, time)
            });
            release_shared_grids();
            reader.ahead.done(stale);
        });
    }

    /// Answers the questions asked recently at `at` on `series`
    /// ([`ready::prepare`]). Blocking.
    fn prepare(&self, series: &HostSeries, at: i64, cache: &SeriesCache) -> usize {
        let pool = cache.pool_prior();
        ready::prepare(
            series,
            &self.ahead.recent(at),
            at,
            &self.answers,
            pool.as_deref(),
            |at, window_secs, mem_mib| {
                ReportRequest::new(self.predict_request(at, window_secs, mem_mib))
            },
        )
    }

    /// The answers kept (tests read them as the reader does).
    #[cfg(test)]
    pub(super) fn answers(&self) -> &AnswerCache {
        &self.answers
    }

    /// Drops what was computed from the history: it changed in bulk.
    pub(super) fn invalidate(&self) {
        if let Some(series) = self.series.upgrade() {
            series.invalidate();
        }
        self.answers.clear();
    }

    /// The series cache while the loop runs.
    fn open(&self) -> Result<Arc<SeriesCache>, HostError> {
        if self.closed.is_cancelled() {
            return Err(HostError::Unavailable);
        }
        self.series.upgrade().ok_or(HostError::Unavailable)
    }

    /// Runs `work` on the blocking pool (a solve can take tens of
    /// milliseconds for long windows; decoding the history, most of a
    /// second), then lets the forecasters' grids go: the next answer reads
    /// a newer record, which no kept grid serves (`release_shared_grids`).
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, HostError> + Send + 'static,
    ) -> Result<T, HostError> {
        self.blocking_costed(work).await.0
    }

    /// [`Self::blocking`], with the CPU time the work took on its thread.
    async fn blocking_costed<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, HostError> + Send + 'static,
    ) -> (Result<T, HostError>, Duration) {
        let done = self
            .tracker
            .spawn_blocking(move || {
                let from = thread_cpu();
                let answer = work();
                release_shared_grids();
                (answer, thread_cpu().saturating_sub(from))
            })
            .await;
        match done {
            Ok(done) => done,
            Err(e) => (
                Err(HostError::Internal(format!("the query task failed: {e}"))),
                Duration::ZERO,
            ),
        }
    }
}
