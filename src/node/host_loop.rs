//! The host loop: the actor that owns this machine's side of the node — the
//! history store, the guest supervisor, the monitor's readings and the
//! five-state policy. Every input (readings, guest events, [`HostCommand`]s
//! from the control API and the pool host, timers, shutdown) is selected into
//! one closed [`Event`] and handled in one `match` (rust-analyzer's
//! `main_loop`), so the store and the supervisor have a single owner.
//!
//! A reading flows: record the sample (and a transition when the state
//! changed) → judge the guest's state (S4 against its declared memory) →
//! policy `decide` → supervisor `apply`. Guest events flow into the job log,
//! out to `run-local` streams (a broadcast) and to the pool host (an
//! unbounded channel, so no remote job's event is ever dropped).
//!
//! This module must not know HTTP or JSON (that is `control`), the Swarm
//! (`net`), peers' jobs (`pool_host`) nor how states are defined (`model`).
//! Its answers are domain values and its errors a [`HostError`].

use crate::clock::Clock;
use crate::guest::{
    GuestAction, GuestEvent, GuestEventKind, GuestHandle, GuestPhase, GuestRunState, GuestSpec,
    GuestStatus, KillCause, StartError, Supervisor,
};
use crate::history::store::{BulkHistory, HistoryStore, JobEvent, StoreError};
use crate::model::admit::{admit, slot_free, GuestAsk, HostFacts, Refusal};
use crate::model::baselines::MethodId;
use crate::model::ids::JobId;
use crate::model::owner::{
    check_pause, why_idle, IdleFacts, IdleReason, OnBattery, PauseOutOfRange, S5Cause, Schedule,
    MAX_PAUSE_SECS,
};
use crate::model::policy::decide;
use crate::model::predict::PredictRequest;
use crate::model::series::{HostSeries, Sample};
use crate::model::state::State;
use crate::monitor::MonitorReading;
use crate::node::answer::{AnswerCache, HostAnswer};
use crate::node::config::Config;
use crate::node::OwnerLoad;
use crate::report::{forecast, predict_report, PredictReport, ReportRequest};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often a running guest is checked for its end (and its wall limit).
const GUEST_POLL: Duration = Duration::from_millis(50);
/// How long shutdown waits for the killed guest to be reaped.
const GUEST_KILL_WAIT: Duration = Duration::from_secs(2);
/// The windows `status` predicts for.
pub const STATUS_WINDOWS_SECS: [u64; 3] = [3600, 3 * 3600, 10 * 3600];
/// How stale the cached history may be when predicting: a prediction learns
/// from whole past days, so a minute of missing samples changes nothing.
const SERIES_CACHE_SECS: i64 = 60;
/// How often the owner's rules (schedule, battery) are judged between readings.
const OWNER_CHECK: Duration = Duration::from_secs(15);
/// Where an import's bytes wait (in the data dir, not a tmpfs that would
/// hold them in memory) until the blocking task reads them twice.
const IMPORT_SPOOL: &str = "import.partial";
/// Largest import through the node: the trace format's own cap.
pub const MAX_IMPORT_BYTES: u64 = crate::history::trace::MAX_TRACE_BYTES;
/// Bytes per chunk of a streamed export.
const EXPORT_CHUNK: usize = 64 * 1024;

/// An import's bytes as they arrive from the client, chunk by chunk, or why
/// the upload broke off. The host loop spools them to a file off the loop.
pub type ImportBody = mpsc::Receiver<Result<Vec<u8>, String>>;
/// An export's bytes, written off the loop as the client reads them; an
/// `Err` chunk means the export broke off.
pub type ExportBody = mpsc::Receiver<Result<Vec<u8>, String>>;

/// Why the host loop refused or could not do what it was asked. The control
/// API maps these to HTTP statuses; this type knows no HTTP. Its refusals
/// are the admission rule's ([`Refusal`], the same messages).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostError {
    #[error("this node hosts no guests (consumer-only)")]
    NoGuests,
    #[error("the owner has paused this node; `gleaner resume` first")]
    Paused,
    #[error("this node withholds itself now ({0}) and takes no guest")]
    Withheld(S5Cause),
    #[error("the node pauses once its running guest has finished (`pause --after-job`)")]
    Finishing,
    #[error("a guest is already running here (job {job_id})")]
    Busy { job_id: JobId },
    #[error("the host is in {0} now and takes no guest")]
    HostState(State),
    #[error(
        "the job declares {asked} MiB; this node accepts at most {limit} MiB ([guest] max_mem_mib)"
    )]
    TooMuchMemory { asked: u64, limit: u64 },
    /// A timed pause outside the one bound (`model::owner::check_pause`).
    #[error(transparent)]
    PauseLength(#[from] PauseOutOfRange),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Internal(String),
    #[error("the node is shutting down")]
    Unavailable,
}

impl From<Refusal> for HostError {
    /// The one place the admission rule's refusal becomes the host's error.
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NoGuests => HostError::NoGuests,
            Refusal::Paused => HostError::Paused,
            Refusal::Withheld(cause) => HostError::Withheld(cause),
            Refusal::Finishing => HostError::Finishing,
            Refusal::TooMuchMemory { asked, limit } => HostError::TooMuchMemory { asked, limit },
            Refusal::Busy { job_id } => HostError::Busy { job_id },
            Refusal::HostState(state) => HostError::HostState(state),
        }
    }
}

/// A request to the host loop, with the channel its answer goes back on.
#[derive(Debug)]
pub enum HostCommand {
    Status {
        reply: oneshot::Sender<HostStatus>,
    },
    Pause {
        for_secs: Option<u64>,
        /// Let the running guest finish first (`pause --after-job`).
        after_job: bool,
        reply: oneshot::Sender<Result<PauseOutcome, HostError>>,
    },
    Resume {
        reply: oneshot::Sender<Result<PauseOutcome, HostError>>,
    },
    /// The full prediction report for `gleaner predict` through the node.
    Predict {
        query: PredictQuery,
        reply: oneshot::Sender<Result<PredictReport, HostError>>,
    },
    /// A typed forecast for a peer's reliability query, with the TR curve
    /// and the predicted availability (`node::answer`).
    Forecast {
        at: i64,
        window_secs: u64,
        mem_mib: u64,
        reply: oneshot::Sender<Result<HostAnswer, HostError>>,
    },
    /// Start a guest (the owner's `run-local`, or a peer's job via the pool host).
    StartGuest {
        start: GuestStart,
        reply: oneshot::Sender<Result<GuestHandle, HostError>>,
    },
    /// Kill the guest if it is running job `job_id`.
    Cancel {
        job_id: JobId,
    },
    /// Stream the history as a trace (written off the loop).
    Export {
        reply: oneshot::Sender<Result<ExportBody, HostError>>,
    },
    /// The newest job-log events, newest first (the dashboard's job log).
    JobLog {
        limit: usize,
        reply: oneshot::Sender<Result<Vec<JobEvent>, HostError>>,
    },
    /// The history as the predictors see it (the cached series, built off
    /// the loop), for the dashboard's week of availability.
    History {
        reply: oneshot::Sender<Result<HistoryView, HostError>>,
    },
    /// Import a trace: spooled and imported in batches off the loop, one
    /// import at a time; the reply comes when it has finished.
    Import {
        body: ImportBody,
        /// The file the owner named, for errors.
        source_name: String,
        reply: oneshot::Sender<Result<ImportOutcome, HostError>>,
    },
}

/// The node's history as its predictors read it.
#[derive(Debug, Clone)]
pub struct HistoryView {
    pub series: Arc<HostSeries>,
    /// The node's thresholds with no declared working set.
    pub thresholds: crate::model::state::Thresholds,
    /// Unix seconds when it was asked.
    pub now: i64,
}

/// Most job-log events one `JobLog` command returns.
pub const MAX_JOB_LOG: usize = 1000;

/// What `predict` through the node asks.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictQuery {
    pub window_secs: u64,
    /// Window start, Unix seconds; now when absent.
    pub at: Option<i64>,
    pub mem_mib: u64,
    /// The node's default when absent.
    pub method: Option<MethodId>,
    /// History days; the node's `[history] days` when absent.
    pub days: Option<usize>,
    /// Discretisation step; the series' own when absent.
    pub step_secs: Option<u32>,
}

/// Who asks for a guest: which admission checks apply, and whether the
/// host loop names its job.
pub use crate::model::admit::GuestOrigin;

/// A guest to start.
#[derive(Debug, Clone)]
pub struct GuestStart {
    pub origin: GuestOrigin,
    /// The local job id (the pool host names remote jobs itself); `None`
    /// lets the host loop name a local one.
    pub job_id: Option<JobId>,
    pub job: GuestJob,
}

/// What the job itself asks for; the host loop adds the node's limits
/// ([`guest_spec`], the one place a [`GuestSpec`] is built).
#[derive(Debug, Clone, PartialEq)]
pub struct GuestJob {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Declared working set, MiB.
    pub mem_mib: u64,
    /// Wall-clock limit; the node's `[guest] max_runtime_secs` when absent
    /// and never above it.
    pub runtime_secs: Option<u64>,
    /// Files moved into the work directory before launch: (path there, a
    /// verified file prepared for this job on this machine).
    pub inputs: Vec<(String, PathBuf)>,
    /// The job's checkpoint order (a peer's `--checkpoint`); the host's cap
    /// on its size is added by [`guest_spec`].
    pub checkpoint: Option<crate::net::protocol::CheckpointOrder>,
}

/// The answer to `pause` and `resume`.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseOutcome {
    pub paused: bool,
    /// False when the node already was in the asked-for state.
    pub changed: bool,
    /// When a timed pause ends, Unix seconds.
    pub until: Option<i64>,
    /// The job the pause killed, if one ran.
    pub killed_job: Option<JobId>,
    /// `pause --after-job` with a guest running: the node pauses when it ends.
    pub after_job: Option<JobId>,
}

/// The answer to an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOutcome {
    pub added: u64,
    pub already_present: u64,
}

/// The node as `status` shows it.
#[derive(Debug, Clone)]
pub struct HostStatus {
    pub data_dir: PathBuf,
    pub started_at: i64,
    pub now: i64,
    pub paused: bool,
    pub paused_until: Option<i64>,
    /// The state a guest sees (S4 below its declared memory); S5 while paused.
    pub state: Option<State>,
    pub last: Option<MonitorReading>,
    pub samples: u64,
    pub guest: Option<(GuestStatus, u64)>,
    /// TR for each of [`STATUS_WINDOWS_SECS`], or why there is none.
    pub predictions: Vec<(u64, Result<f64, String>)>,
    pub method: MethodId,
    pub owner_load: OwnerLoad,
    /// The containment layers a guest gets on this machine.
    pub containment: String,
    /// Sample rows found missing at the end of the store at start (a torn
    /// write sled dropped when recovering); 0 when none.
    pub samples_lost_at_start: u64,
    /// `[owner] hours`.
    pub schedule: Schedule,
    /// The schedule or the battery withholds the machine now.
    pub withheld: Option<S5Cause>,
    /// A `pause --after-job` waits for the running guest.
    pub pause_after_job: bool,
    /// Why no guest runs now; `None` while one runs.
    pub why_idle: Option<IdleReason>,
    /// How `[guest] cpu_limit_percent` is enforced.
    pub throttle: crate::guest::ThrottleMode,
}

/// What the host loop publishes on every change, for the pool host's
/// announcements, answers and admission (a `watch`: readers see the latest,
/// never block it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostSnapshot {
    /// The state peers see: the last reading's, S5 while paused, `None` before the first.
    pub state: Option<State>,
    pub paused: bool,
    /// A guest could start here now.
    pub slot_free: bool,
    /// The owner's CPU load at the last reading, percent.
    pub cpu: Option<f64>,
    /// Memory free for a guest at the last reading, MiB.
    pub free_mib: Option<u64>,
    /// The schedule or the battery withholds the machine (the state is S5).
    pub withheld: Option<S5Cause>,
    /// A `pause --after-job` waits for the running guest.
    pub pause_after_job: bool,
    /// Why no guest runs now; `None` while one runs.
    pub why_idle: Option<IdleReason>,
    /// How `[guest] cpu_limit_percent` is enforced.
    pub throttle: crate::guest::ThrottleMode,
    /// The guest running here, if one runs.
    pub running: Option<JobId>,
}

impl HostSnapshot {
    /// The admission rule's facts as of this snapshot, for a node whose
    /// `[guest] enabled` is `guests_enabled`. Its state is S5 while paused
    /// or withheld, which the rule refuses first anyway.
    pub fn admission_facts(&self, guests_enabled: bool) -> HostFacts {
        HostFacts {
            guests_enabled,
            paused: self.paused,
            withheld: self.withheld,
            finishing: self.pause_after_job,
            running: self.running.clone(),
            state: self.state,
            free_mib: self.free_mib,
        }
    }
}

/// The cloneable way to the host loop.
#[derive(Debug, Clone)]
pub struct HostHandle {
    commands: mpsc::Sender<HostCommand>,
    snapshot: watch::Receiver<HostSnapshot>,
    events: broadcast::Sender<GuestEvent>,
}

impl HostHandle {
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> HostCommand,
    ) -> Result<T, HostError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| HostError::Unavailable)?;
        rx.await.map_err(|_| HostError::Unavailable)
    }

    pub async fn status(&self) -> Result<HostStatus, HostError> {
        self.ask(|reply| HostCommand::Status { reply }).await
    }

    pub async fn pause(&self, for_secs: Option<u64>) -> Result<PauseOutcome, HostError> {
        self.ask(|reply| HostCommand::Pause {
            for_secs,
            after_job: false,
            reply,
        })
        .await?
    }

    /// `pause --after-job`: the running guest finishes, then the node pauses
    /// (at once when none runs); no guest starts meanwhile.
    pub async fn pause_after_job(&self, for_secs: Option<u64>) -> Result<PauseOutcome, HostError> {
        self.ask(|reply| HostCommand::Pause {
            for_secs,
            after_job: true,
            reply,
        })
        .await?
    }

    pub async fn resume(&self) -> Result<PauseOutcome, HostError> {
        self.ask(|reply| HostCommand::Resume { reply }).await?
    }

    pub async fn predict(&self, query: PredictQuery) -> Result<PredictReport, HostError> {
        self.ask(|reply| HostCommand::Predict { query, reply })
            .await?
    }

    pub async fn forecast(
        &self,
        at: i64,
        window_secs: u64,
        mem_mib: u64,
    ) -> Result<HostAnswer, HostError> {
        self.ask(|reply| HostCommand::Forecast {
            at,
            window_secs,
            mem_mib,
            reply,
        })
        .await?
    }

    pub async fn start_guest(&self, start: GuestStart) -> Result<GuestHandle, HostError> {
        self.ask(|reply| HostCommand::StartGuest { start, reply })
            .await?
    }

    /// Kills the guest if it runs `job_id` (a `run-local` client went away).
    pub async fn cancel(&self, job_id: JobId) {
        let _ = self.commands.send(HostCommand::Cancel { job_id }).await;
    }

    /// The history as a trace, streamed in chunks.
    pub async fn export(&self) -> Result<ExportBody, HostError> {
        self.ask(|reply| HostCommand::Export { reply }).await?
    }

    /// The whole export as text (tests and small histories).
    pub async fn export_text(&self) -> Result<String, HostError> {
        let mut body = self.export().await?;
        let mut out = Vec::new();
        while let Some(chunk) = body.recv().await {
            out.extend(chunk.map_err(HostError::Internal)?);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The newest `limit` (at most [`MAX_JOB_LOG`]) job-log events, newest first.
    pub async fn job_log(&self, limit: usize) -> Result<Vec<JobEvent>, HostError> {
        self.ask(|reply| HostCommand::JobLog { limit, reply })
            .await?
    }

    /// The history series the predictors use, with the node's thresholds.
    pub async fn history(&self) -> Result<HistoryView, HostError> {
        self.ask(|reply| HostCommand::History { reply }).await?
    }

    /// Imports the trace whose bytes arrive on `body`; errors name `source_name`.
    pub async fn import(
        &self,
        body: ImportBody,
        source_name: String,
    ) -> Result<ImportOutcome, HostError> {
        self.ask(|reply| HostCommand::Import {
            body,
            source_name,
            reply,
        })
        .await?
    }

    /// Imports a trace held in memory (tests and small traces).
    pub async fn import_text(
        &self,
        text: String,
        source_name: String,
    ) -> Result<ImportOutcome, HostError> {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.send(Ok(text.into_bytes())).await;
        drop(tx);
        self.import(rx, source_name).await
    }

    /// The latest snapshot, without asking the loop.
    pub fn snapshot(&self) -> watch::Receiver<HostSnapshot> {
        self.snapshot.clone()
    }

    /// Guest events from now on, for `run-local` streams (subscribe before
    /// starting the job so no event of it is missed).
    pub fn subscribe_events(&self) -> broadcast::Receiver<GuestEvent> {
        self.events.subscribe()
    }
}

/// Everything the loop reacts to.
#[derive(Debug)]
enum Event {
    /// The monitor classified a sample of the host.
    Reading(MonitorReading),
    /// The supervisor reported something about the guest.
    Guest(GuestEvent),
    /// A command from a handle.
    Command(HostCommand),
    /// Time to check whether the running guest has ended.
    GuestTick,
    /// Time to delete history older than the retention.
    Compact,
    /// A `pause --for` has run out.
    PauseOver,
    /// Time to judge the schedule and the battery again.
    OwnerCheck,
    /// An import finished (off the loop).
    ImportDone(ImportDone),
    /// SIGINT/SIGTERM (or the caller's token): stop.
    Shutdown,
}

/// An import's end, handed back to the loop.
#[derive(Debug)]
struct ImportDone {
    outcome: Result<ImportOutcome, HostError>,
    reply: oneshot::Sender<Result<ImportOutcome, HostError>>,
}

/// The history as a series for predictions, built off the loop: the first
/// blocking task that needs a fresh one decodes the store (others wait for
/// it and share the result), and the loop only bumps a generation to drop
/// it, never waiting for the lock. Decoding half a million rows takes a
/// good part of a second; on the loop it stalled every request.
struct SeriesCache {
    bulk: BulkHistory,
    /// Bumped when the history changes in bulk (import, retention).
    generation: AtomicU64,
    /// The generation and time a series was built at, and the series.
    slot: Mutex<Option<(u64, i64, Arc<HostSeries>)>>,
    /// `status`'s predictions, with the generation and time they were made
    /// at; the loop only copies them out (the lock is never held long).
    status_slot: Mutex<Option<(u64, i64, StatusPredictions)>>,
    /// A background refresh of `status_slot` is under way.
    refreshing: std::sync::atomic::AtomicBool,
}

/// TR for each of [`STATUS_WINDOWS_SECS`], or why there is none.
type StatusPredictions = Vec<(u64, Result<f64, String>)>;

impl SeriesCache {
    fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// The last predictions for `status`, and whether they are fresh
    /// (same history, less than `SERIES_CACHE_SECS` old). Never waits long.
    fn status_predictions(&self, now: i64) -> (Option<StatusPredictions>, bool) {
        let slot = self
            .status_slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_ref() {
            Some((generation, made, predictions)) => {
                let fresh = *generation == self.generation.load(Ordering::Relaxed)
                    && (0..SERIES_CACHE_SECS).contains(&(now - made));
                (Some(predictions.clone()), fresh)
            }
            None => (None, false),
        }
    }

    /// Computes `status`'s predictions at `now` and keeps them. Blocking.
    fn refresh_status_predictions(
        &self,
        now: i64,
        requests: &[ReportRequest],
    ) -> StatusPredictions {
        let generation = self.generation.load(Ordering::Relaxed);
        let predictions: StatusPredictions = match self.get(now) {
            Ok(series) => requests
                .iter()
                .map(|r| {
                    let tr = forecast(&series, r)
                        .map(|f| f.tr)
                        .map_err(|e| e.to_string());
                    (r.window.window_secs, tr)
                })
                .collect(),
            Err(e) => STATUS_WINDOWS_SECS
                .iter()
                .map(|&w| (w, Err(e.to_string())))
                .collect(),
        };
        *self
            .status_slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((generation, now, predictions.clone()));
        predictions
    }

    /// The series, rebuilt when older than `SERIES_CACHE_SECS` at `now` or
    /// dropped since. Blocking: call from the blocking pool only.
    fn get(&self, now: i64) -> Result<Arc<HostSeries>, HostError> {
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let generation = self.generation.load(Ordering::Relaxed);
        if let Some((built_gen, built, series)) = slot.as_ref() {
            if *built_gen == generation && (0..SERIES_CACHE_SECS).contains(&(now - built)) {
                return Ok(series.clone());
            }
        }
        let series = Arc::new(
            self.bulk
                .series()
                .map_err(|e| HostError::Internal(e.to_string()))?,
        );
        *slot = Some((generation, now, series.clone()));
        Ok(series)
    }
}

/// What the host loop is made of.
pub struct HostParts {
    pub config: Config,
    pub data_dir: PathBuf,
    pub store: HistoryStore,
    pub supervisor: Supervisor,
    pub clock: Arc<dyn Clock>,
    /// The guest's processes, for the monitor to leave out of L_H.
    pub guest_roots: watch::Sender<crate::procfs::ProcessScope>,
    pub tracker: TaskTracker,
    /// Guest events for the pool host (remote jobs' events go back to their consumers).
    pub to_pool: Option<mpsc::UnboundedSender<GuestEvent>>,
    pub owner_load: OwnerLoad,
    /// The power supply class (`/sys/class/power_supply`; a fake one in tests).
    pub power_supply_dir: PathBuf,
}

/// The loop's inputs.
pub struct HostInputs {
    pub readings: mpsc::Receiver<MonitorReading>,
    pub guest_events: mpsc::UnboundedReceiver<GuestEvent>,
    pub shutdown: CancellationToken,
}

/// The host loop's state between events.
pub struct HostLoop {
    parts: HostParts,
    commands: mpsc::Receiver<HostCommand>,
    snapshot: watch::Sender<HostSnapshot>,
    events: broadcast::Sender<GuestEvent>,
    started_at: i64,
    /// The last reading, for status and to judge a guest started between readings.
    last: Option<MonitorReading>,
    /// The state of the last recorded transition (`None` after a pause, so
    /// the first sample after `resume` records one).
    recorded_state: Option<State>,
    /// The running guest's declared working set, MiB (S4 below it).
    guest_mem_mib: u64,
    /// The job of the guest started and whose end was not yet seen (it may
    /// be killed but not reaped, when the policy no longer acts on it).
    guest_live: Option<JobId>,
    /// When a `pause --for` ends: Unix seconds and the timer deadline.
    pause_until: Option<(i64, Instant)>,
    local_jobs_started: u64,
    /// The history as a series, built off the loop.
    series_cache: Arc<SeriesCache>,
    /// Peers' reliability answers, reused for a minute.
    answers: AnswerCache,
    /// An import is running (one at a time).
    import_running: bool,
    /// Imports report their end here.
    import_done_tx: mpsc::UnboundedSender<ImportDone>,
    import_done: mpsc::UnboundedReceiver<ImportDone>,
    /// The node's shutdown token (set by `run`), so an import stops with it.
    shutdown: CancellationToken,
    /// `[owner] hours`, judged in `time_zone`.
    schedule: Schedule,
    time_zone: jiff::tz::TimeZone,
    /// `pause --after-job` waits for the running guest: `Some(for_secs)`.
    pause_after_job: Option<Option<u64>>,
}

impl HostLoop {
    /// The loop and its handle; nothing runs until [`HostLoop::run`].
    pub fn new(parts: HostParts) -> (HostLoop, HostHandle) {
        let (commands_tx, commands) = mpsc::channel(64);
        let (snapshot, snapshot_rx) = watch::channel(HostSnapshot::default());
        let (events, _) = broadcast::channel(256);
        let started_at = parts.clock.unix_secs();
        let series_cache = Arc::new(SeriesCache {
            bulk: parts.store.bulk(),
            generation: AtomicU64::new(0),
            slot: Mutex::new(None),
            status_slot: Mutex::new(None),
            refreshing: std::sync::atomic::AtomicBool::new(false),
        });
        let (import_done_tx, import_done) = mpsc::unbounded_channel();
        let handle = HostHandle {
            commands: commands_tx,
            snapshot: snapshot_rx,
            events: events.clone(),
        };
        let mut host = HostLoop {
            parts,
            commands,
            snapshot,
            events,
            started_at,
            last: None,
            recorded_state: None,
            guest_mem_mib: 0,
            guest_live: None,
            pause_until: None,
            local_jobs_started: 0,
            series_cache,
            answers: AnswerCache::default(),
            import_running: false,
            import_done_tx,
            import_done,
            shutdown: CancellationToken::new(),
            schedule: Schedule::always(),
            time_zone: jiff::tz::TimeZone::UTC,
            pause_after_job: None,
        };
        host.schedule = host.parts.config.schedule();
        host.time_zone = host.parts.config.time_zone();
        host.restore_pause();
        host.check_owner_rules();
        host.publish();
        (host, handle)
    }

    /// Runs until shutdown; then kills the guest (S5) and flushes the store.
    pub async fn run(mut self, mut inputs: HostInputs) {
        self.shutdown = inputs.shutdown.clone();
        let mut guest_tick = tokio::time::interval(GUEST_POLL);
        guest_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first retention pass runs before any request is served, so a
        // client never races it (an import older than the retention would
        // otherwise survive or vanish depending on which event came first).
        self.compact();
        // At most a week (validated with the config); checked all the same.
        let every = self
            .parts
            .config
            .history
            .compact_every
            .max(Duration::from_secs(1));
        let first = Instant::now()
            .checked_add(every)
            .unwrap_or_else(Instant::now);
        let mut compact = tokio::time::interval_at(first, every);
        compact.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut owner_check = tokio::time::interval(OWNER_CHECK);
        owner_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let guest_running = self.guest_live.is_some();
            let pause_deadline = self.pause_until.map(|(_, at)| at);
            let event = tokio::select! {
                biased;
                _ = inputs.shutdown.cancelled() => Event::Shutdown,
                Some(e) = inputs.guest_events.recv() => Event::Guest(e),
                Some(r) = inputs.readings.recv() => Event::Reading(r),
                Some(c) = self.commands.recv() => Event::Command(c),
                Some(d) = self.import_done.recv() => Event::ImportDone(d),
                _ = guest_tick.tick(), if guest_running => Event::GuestTick,
                _ = compact.tick() => Event::Compact,
                _ = owner_check.tick() => Event::OwnerCheck,
                _ = sleep_until(pause_deadline), if pause_deadline.is_some() => Event::PauseOver,
            };
            match event {
                Event::Reading(r) => self.on_reading(r),
                Event::Guest(e) => self.on_guest_event(e),
                Event::Command(c) => self.on_command(c),
                Event::GuestTick => self.poll_guest(),
                Event::Compact => self.compact(),
                Event::OwnerCheck => self.check_owner_rules(),
                Event::PauseOver => {
                    if let Err(e) = self.resume() {
                        tracing::error!(error = %e, "cannot end the pause");
                    }
                }
                Event::ImportDone(d) => {
                    self.import_running = false;
                    self.series_cache.invalidate();
                    self.answers.clear();
                    if let Ok(o) = &d.outcome {
                        tracing::info!(
                            added = o.added,
                            already_present = o.already_present,
                            "imported history"
                        );
                    }
                    let _ = d.reply.send(d.outcome);
                }
                Event::Shutdown => break,
            }
            self.publish();
        }
        self.shut_down(&mut inputs.guest_events);
    }

    /// Shutdown order, part 1 (the rest is in `daemon::run`):
    /// 1. the token was cancelled, so the monitor stops sampling and the
    ///    control server stops accepting;
    /// 2. the guest is killed with cause S5 (revocation) and reaped, so it
    ///    never outlives the node;
    /// 3. the guest events still queued (kill, exit) go to the job log and to
    ///    open `run-local` streams, and the store is flushed.
    fn shut_down(&mut self, guest_events: &mut mpsc::UnboundedReceiver<GuestEvent>) {
        if self.parts.supervisor.run_state() != GuestRunState::Idle {
            self.kill_guest(KillCause::Revocation);
        }
        if self.guest_live.is_some() {
            self.parts.supervisor.wait_exit(GUEST_KILL_WAIT);
            self.guest_ended();
        }
        while let Ok(e) = guest_events.try_recv() {
            self.on_guest_event(e);
        }
        if let Err(e) = self.parts.store.flush() {
            tracing::error!(error = %e, "cannot flush the history on shutdown");
        }
    }

    fn now(&self) -> i64 {
        self.parts.clock.unix_secs()
    }

    /// Why no guest runs now (`None` while one runs).
    fn why_idle(&self) -> Option<IdleReason> {
        why_idle(IdleFacts {
            guests_enabled: self.parts.config.guest.enabled,
            paused: self.parts.store.is_paused(),
            withheld: self.parts.store.withheld(),
            state: self.guest_state().map(|(s, _)| s),
            guest_running: self.guest_live.is_some(),
        })
    }

    /// What the schedule and the battery say now: the cause to withhold
    /// the machine for, or `None` to lend it.
    fn owner_rules_withhold(&self) -> Option<S5Cause> {
        let now = self.parts.clock.now();
        if !schedule_allows(&self.schedule, &self.time_zone, now) {
            return Some(S5Cause::Schedule);
        }
        if self.parts.config.owner.on_battery == OnBattery::Pause
            && crate::monitor::power::on_battery(&self.parts.power_supply_dir)
        {
            return Some(S5Cause::Battery);
        }
        None
    }

    /// Withholds or lends the machine as the schedule and the battery say:
    /// an S5 with the cause is recorded when the node withholds itself, the
    /// running guest is killed (revocation), and the first sample after the
    /// end records the state again.
    fn check_owner_rules(&mut self) {
        let wanted = self.owner_rules_withhold();
        let current = self.parts.store.withheld();
        if wanted == current {
            return;
        }
        let now = self.now();
        if current.is_some() {
            if let Err(e) = self.parts.store.release() {
                tracing::error!(error = %e, "cannot end the withholding");
            }
            self.recorded_state = None;
            tracing::info!(cause = ?current, "the owner's rules lend the machine again");
        }
        if let Some(cause) = wanted {
            match self.parts.store.withhold(now, cause) {
                Ok(_) => {
                    self.recorded_state = None;
                    tracing::info!(%cause, "the owner's rules withhold the machine (S5)");
                }
                Err(e) => tracing::error!(error = %e, %cause, "cannot record the withholding"),
            }
            if self.parts.supervisor.run_state() != GuestRunState::Idle {
                self.kill_guest(KillCause::Revocation);
            }
        }
    }

    /// What the admission rule judges: the owner's will, the slot and the
    /// last reading.
    fn admission_facts(&self) -> HostFacts {
        HostFacts {
            guests_enabled: self.parts.config.guest.enabled,
            paused: self.parts.store.is_paused(),
            withheld: self.parts.store.withheld(),
            finishing: self.pause_after_job.is_some(),
            running: self.guest_live.clone(),
            state: self.last.map(|r| r.state),
            free_mib: self.last.map(|r| r.free_mib),
        }
    }

    /// Publishes the snapshot when it changed.
    fn publish(&self) {
        let facts = self.admission_facts();
        let paused = facts.paused;
        let withheld = facts.withheld;
        let snapshot = HostSnapshot {
            state: if paused || withheld.is_some() {
                Some(State::S5)
            } else {
                self.last.map(|r| r.state)
            },
            paused,
            slot_free: slot_free(&facts),
            cpu: self.last.map(|r| r.cpu),
            free_mib: facts.free_mib,
            withheld,
            pause_after_job: facts.finishing,
            why_idle: self.why_idle(),
            throttle: self.parts.supervisor.throttle_mode(),
            running: facts.running,
        };
        self.snapshot.send_if_modified(|s| {
            let changed = *s != snapshot;
            *s = snapshot;
            changed
        });
    }

    fn on_reading(&mut self, r: MonitorReading) {
        self.check_owner_rules();
        let store = &mut self.parts.store;
        if !store.is_paused() && store.withheld().is_none() && self.recorded_state != Some(r.state)
        {
            match store.record_transition(r.time, r.state) {
                Ok(()) => self.recorded_state = Some(r.state),
                Err(e) => tracing::error!(error = %e, "cannot record a state transition"),
            }
            tracing::info!(state = %r.state, cpu = r.cpu, free_mib = r.free_mib, "host state");
        }
        let sample = Sample {
            time: r.time,
            cpu: r.cpu,
            free_mib: r.free_mib,
            up: true,
        };
        if let Err(e) = store.record_sample(&sample) {
            tracing::error!(error = %e, "cannot record a sample");
        }
        self.last = Some(r);
        self.apply_policy();
        self.refresh_guest_roots();
    }

    /// The host's state as the running guest sees it: S4 when free memory is
    /// below the guest's declared working set, else the monitor's state.
    fn guest_state(&self) -> Option<(State, bool)> {
        let r = self.last?;
        let th = self.parts.config.thresholds(self.guest_mem_mib);
        let state = if th.lacks_memory(r.free_mib) {
            State::S4
        } else {
            r.state
        };
        Some((state, r.suspending))
    }

    /// Applies policy actions until the policy is satisfied (at most two are
    /// needed: a resume and then a priority change).
    fn apply_policy(&mut self) {
        if self.parts.store.is_paused() || self.parts.store.withheld().is_some() {
            if self.parts.supervisor.run_state() != GuestRunState::Idle {
                self.kill_guest(KillCause::Revocation);
            }
            return;
        }
        let Some((state, suspending)) = self.guest_state() else {
            return;
        };
        for _ in 0..3 {
            let current = self.parts.supervisor.run_state();
            let Some(action) = decide(state, suspending, current) else {
                break;
            };
            tracing::debug!(?action, %state, suspending, "guest policy");
            if let Err(e) = self.parts.supervisor.apply(action) {
                tracing::warn!(error = %e, ?action, "cannot apply the guest policy");
                break;
            }
        }
    }

    fn kill_guest(&mut self, cause: KillCause) {
        if let Err(e) = self.parts.supervisor.apply(GuestAction::Kill(cause)) {
            tracing::warn!(error = %e, %cause, "cannot kill the guest");
        }
    }

    /// Tells the monitor which processes are the guest's, so their CPU is
    /// not counted as the owner's. Session and group members are included,
    /// so a guest that daemonizes is still left out.
    fn refresh_guest_roots(&mut self) {
        let tree = self.parts.supervisor.process_scope();
        self.parts.guest_roots.send_if_modified(|roots| {
            if *roots == tree {
                false
            } else {
                *roots = tree;
                true
            }
        });
    }

    fn poll_guest(&mut self) {
        if self.parts.supervisor.poll_exit().is_some() {
            self.guest_ended();
        }
    }

    fn guest_ended(&mut self) {
        self.guest_mem_mib = 0;
        self.guest_live = None;
        self.refresh_guest_roots();
        if let Some(for_secs) = self.pause_after_job.take() {
            match self.pause(for_secs) {
                Ok(_) => tracing::info!("the guest finished; paused as asked (--after-job)"),
                Err(e) => tracing::error!(error = %e, "cannot pause after the job"),
            }
        }
    }

    fn on_guest_event(&mut self, e: GuestEvent) {
        let detail = serde_json::to_string(&e.kind).unwrap_or_default();
        let entry = JobEvent {
            time: e.at.as_second(),
            job: e.job_id.clone(),
            kind: event_name(&e.kind).to_string(),
            detail,
        };
        if let Err(err) = self.parts.store.record_job_event(&entry) {
            tracing::error!(error = %err, "cannot write the job log");
        }
        tracing::info!(job = %e.job_id, kind = entry.kind, "guest event");
        if let Some(pool) = &self.parts.to_pool {
            let _ = pool.send(e.clone());
        }
        // Nobody listening is fine.
        let _ = self.events.send(e);
    }

    fn compact(&mut self) {
        self.series_cache.invalidate();
        self.answers.clear();
        let now = self.now();
        match self
            .parts
            .store
            .compact(now, self.parts.config.history.retention_days)
        {
            Ok(r) if r.samples_removed + r.transitions_removed + r.job_events_removed > 0 => {
                tracing::info!(?r, "deleted history past the retention");
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot delete old history"),
        }
    }

    fn on_command(&mut self, command: HostCommand) {
        match command {
            HostCommand::Status { reply } => self.status(reply),
            HostCommand::Pause {
                for_secs,
                after_job: false,
                reply,
            } => {
                let _ = reply.send(self.pause(for_secs));
            }
            HostCommand::Pause {
                for_secs,
                after_job: true,
                reply,
            } => {
                let _ = reply.send(self.pause_when_the_guest_ends(for_secs));
            }
            HostCommand::Resume { reply } => {
                let _ = reply.send(self.resume());
            }
            HostCommand::Predict { query, reply } => self.predict(query, reply),
            HostCommand::Forecast {
                at,
                window_secs,
                mem_mib,
                reply,
            } => self.forecast(at, window_secs, mem_mib, reply),
            HostCommand::StartGuest { start, reply } => {
                let _ = reply.send(self.start_guest(start));
            }
            HostCommand::Cancel { job_id } => {
                let running = self
                    .parts
                    .supervisor
                    .status()
                    .filter(|s| s.phase != GuestPhase::Exited);
                if running.is_some_and(|s| s.job_id == job_id) {
                    self.kill_guest(KillCause::Cancelled);
                }
            }
            HostCommand::Export { reply } => {
                let _ = reply.send(Ok(self.export()));
            }
            HostCommand::Import {
                body,
                source_name,
                reply,
            } => self.import(body, source_name, reply),
            HostCommand::JobLog { limit, reply } => {
                let events = self
                    .parts
                    .store
                    .recent_job_events(limit.min(MAX_JOB_LOG))
                    .map_err(|e| HostError::Internal(e.to_string()));
                let _ = reply.send(events);
            }
            HostCommand::History { reply } => self.history(reply),
        }
    }

    /// A timed pause survives a restart: the store keeps its end. One that
    /// ran out while the node was off ends now; one still running gets its
    /// timer back.
    fn restore_pause(&mut self) {
        if !self.parts.store.is_paused() {
            return;
        }
        let Some(until) = self.parts.store.pause_until() else {
            return;
        };
        let left = until.saturating_sub(self.now());
        if left <= 0 {
            if let Err(e) = self.resume() {
                tracing::error!(error = %e, "cannot end a pause that ran out while the node was off");
            }
            return;
        }
        let left = u64::try_from(left)
            .unwrap_or(MAX_PAUSE_SECS)
            .min(MAX_PAUSE_SECS);
        let deadline = Instant::now().checked_add(Duration::from_secs(left));
        self.pause_until = deadline.map(|d| (until, d));
        tracing::info!(until, "still paused by the owner (S5) until the saved end");
    }

    /// Pauses now (a plain `pause` also drops a waiting `--after-job`).
    fn pause(&mut self, for_secs: Option<u64>) -> Result<PauseOutcome, HostError> {
        check_pause(for_secs)?;
        self.pause_after_job = None;
        let now = self.now();
        // Both ends are computed (and bounded) before anything is saved, so a
        // refused pause leaves no trace.
        let until = for_secs.and_then(|secs| {
            let at = Instant::now().checked_add(Duration::from_secs(secs))?;
            Some((now.saturating_add(i64::try_from(secs).ok()?), at))
        });
        if for_secs.is_some() && until.is_none() {
            return Err(HostError::Invalid("the pause's end is out of range".into()));
        }
        let changed = self
            .parts
            .store
            .pause(now, until.map(|u| u.0))
            .map_err(|e| HostError::Internal(e.to_string()))?;
        self.recorded_state = None;
        let killed_job = match self.parts.supervisor.status() {
            Some(s) if s.phase != GuestPhase::Exited => {
                self.kill_guest(KillCause::Revocation);
                Some(s.job_id)
            }
            _ => None,
        };
        self.pause_until = until;
        tracing::info!(until = ?self.pause_until.map(|p| p.0), "paused by the owner (S5)");
        Ok(PauseOutcome {
            paused: true,
            changed,
            until: self.pause_until.map(|p| p.0),
            killed_job,
            after_job: None,
        })
    }

    /// `pause --after-job`: with a guest running, remember to pause when it
    /// ends (and start no other meanwhile); with none, pause now.
    fn pause_when_the_guest_ends(
        &mut self,
        for_secs: Option<u64>,
    ) -> Result<PauseOutcome, HostError> {
        check_pause(for_secs)?;
        let running = self
            .parts
            .supervisor
            .status()
            .filter(|s| s.phase != GuestPhase::Exited && self.guest_live.is_some());
        match running {
            Some(guest) if !self.parts.store.is_paused() => {
                self.pause_after_job = Some(for_secs);
                tracing::info!(job = %guest.job_id, "pausing once the running guest finishes");
                Ok(PauseOutcome {
                    paused: false,
                    changed: true,
                    until: None,
                    killed_job: None,
                    after_job: Some(guest.job_id),
                })
            }
            _ => self.pause(for_secs),
        }
    }

    fn resume(&mut self) -> Result<PauseOutcome, HostError> {
        let changed = self
            .parts
            .store
            .resume(self.now())
            .map_err(|e| HostError::Internal(e.to_string()))?;
        self.pause_until = None;
        self.recorded_state = None;
        let changed = changed || self.pause_after_job.take().is_some();
        if changed {
            tracing::info!("resumed by the owner");
        }
        Ok(PauseOutcome {
            paused: false,
            changed,
            until: None,
            killed_job: None,
            after_job: None,
        })
    }

    fn predict_request(&self, at: i64, window_secs: u64, mem_mib: u64) -> PredictRequest {
        let mut request =
            PredictRequest::new(at, window_secs, self.parts.config.thresholds(mem_mib));
        request.days = self.parts.config.history.days;
        request
    }

    /// Streams the history as a trace from a blocking task; the loop only
    /// starts it. The client's reading paces the writer (a bounded channel).
    fn export(&mut self) -> ExportBody {
        let (tx, rx) = mpsc::channel(4);
        let bulk = self.parts.store.bulk();
        self.parts.tracker.spawn_blocking(move || {
            let mut out = ChannelWriter {
                tx,
                buf: Vec::with_capacity(EXPORT_CHUNK),
            };
            let result = bulk.export(&mut out);
            match result {
                Ok(_) => {
                    let _ = std::io::Write::flush(&mut out);
                }
                Err(e) => {
                    let _ = out.tx.blocking_send(Err(e.to_string()));
                }
            }
        });
        rx
    }

    /// Starts an import: the body is spooled to a file in the data dir (at
    /// most [`MAX_IMPORT_BYTES`]) and imported from it in batches on the
    /// blocking pool; the loop keeps sampling and answering meanwhile and
    /// hears of the end as an [`Event::ImportDone`].
    fn import(
        &mut self,
        body: ImportBody,
        source_name: String,
        reply: oneshot::Sender<Result<ImportOutcome, HostError>>,
    ) {
        if self.import_running {
            let _ = reply.send(Err(HostError::Invalid(
                "another import is running; try again when it has finished".into(),
            )));
            return;
        }
        self.import_running = true;
        let bulk = self.parts.store.bulk();
        let spool = self.parts.data_dir.join(IMPORT_SPOOL);
        let shutdown = self.shutdown.clone();
        let done = self.import_done_tx.clone();
        self.parts.tracker.spawn(async move {
            let outcome = import_streamed(bulk, body, spool, source_name, shutdown).await;
            let _ = done.send(ImportDone { outcome, reply });
        });
    }

    /// Solving runs off the loop (on the blocking pool): it can take tens
    /// of milliseconds for long windows, and samples must keep flowing.
    fn predict(
        &mut self,
        query: PredictQuery,
        reply: oneshot::Sender<Result<PredictReport, HostError>>,
    ) {
        let now = self.now();
        let cache = self.series_cache.clone();
        let at = query.at.unwrap_or(now);
        let mut window = self.predict_request(at, query.window_secs, query.mem_mib);
        if let Some(days) = query.days {
            window.days = days;
        }
        window.step_secs = query.step_secs.or(window.step_secs);
        let request = ReportRequest::with_method(window, query.method);
        let host = self.parts.store.meta().host.clone();
        self.parts.tracker.spawn_blocking(move || {
            let answer = cache.get(now).and_then(|series| {
                predict_report(&series, host, &request)
                    .map_err(|e| HostError::Invalid(format!("cannot predict: {e}")))
            });
            let _ = reply.send(answer);
        });
    }

    /// The cached series, (re)built on the blocking pool like a prediction's.
    fn history(&mut self, reply: oneshot::Sender<Result<HistoryView, HostError>>) {
        let now = self.now();
        let cache = self.series_cache.clone();
        let thresholds = self.parts.config.thresholds(0);
        self.parts.tracker.spawn_blocking(move || {
            let answer = cache.get(now).map(|series| HistoryView {
                series,
                thresholds,
                now,
            });
            let _ = reply.send(answer);
        });
    }

    /// A peer's question, answered with a typed forecast off the loop.
    fn forecast(
        &mut self,
        at: i64,
        window_secs: u64,
        mem_mib: u64,
        reply: oneshot::Sender<Result<HostAnswer, HostError>>,
    ) {
        let key = AnswerCache::key(at, window_secs, mem_mib);
        if let Some(answer) = self.answers.get(key) {
            let _ = reply.send(Ok(answer));
            return;
        }
        let now = self.now();
        let cache = self.series_cache.clone();
        let answers = self.answers.clone();
        let request = ReportRequest::new(self.predict_request(at, window_secs, mem_mib));
        self.parts.tracker.spawn_blocking(move || {
            let answer = cache.get(now).and_then(|series| {
                answers
                    .answer(&series, &request)
                    .map_err(|e| HostError::Invalid(e.to_string()))
            });
            if let Ok(a) = &answer {
                answers.put(key, a.clone());
            }
            let _ = reply.send(answer);
        });
    }

    fn status(&mut self, reply: oneshot::Sender<HostStatus>) {
        let now = self.now();
        let paused = self.parts.store.is_paused();
        let guest = self
            .parts
            .supervisor
            .status()
            .map(|s| (s, self.guest_mem_mib));
        let mut status = HostStatus {
            data_dir: self.parts.data_dir.clone(),
            started_at: self.started_at,
            now,
            paused,
            paused_until: self.pause_until.map(|p| p.0),
            state: if paused || self.parts.store.withheld().is_some() {
                Some(State::S5)
            } else {
                self.guest_state().map(|(s, _)| s)
            },
            last: self.last,
            samples: self.parts.store.sample_count(),
            guest,
            predictions: Vec::new(),
            method: MethodId::default(),
            owner_load: self.parts.owner_load.clone(),
            containment: self.parts.supervisor.containment().to_string(),
            samples_lost_at_start: self.parts.store.torn_tail().map_or(0, |t| t.lost),
            schedule: self.schedule.clone(),
            withheld: self.parts.store.withheld(),
            pause_after_job: self.pause_after_job.is_some(),
            why_idle: self.why_idle(),
            throttle: self.parts.supervisor.throttle_mode(),
        };
        // `status` never waits for the history: it shows the predictions
        // of the last refresh (at most a minute old, or from before an
        // import) and asks for a new one in the background. Only the very
        // first `status` computes them while the caller waits.
        let requests: Vec<ReportRequest> = STATUS_WINDOWS_SECS
            .iter()
            .map(|&w| ReportRequest::new(self.predict_request(now, w, 0)))
            .collect();
        let cache = self.series_cache.clone();
        let (cached, fresh) = cache.status_predictions(now);
        match cached {
            Some(predictions) => {
                status.predictions = predictions;
                let _ = reply.send(status);
                if !fresh && !cache.refreshing.swap(true, Ordering::AcqRel) {
                    self.parts.tracker.spawn_blocking(move || {
                        cache.refresh_status_predictions(now, &requests);
                        cache.refreshing.store(false, Ordering::Release);
                    });
                }
            }
            None => {
                self.parts.tracker.spawn_blocking(move || {
                    status.predictions = cache.refresh_status_predictions(now, &requests);
                    let _ = reply.send(status);
                });
            }
        }
    }

    /// Starts a guest if the admission rule lets it start now.
    fn start_guest(&mut self, start: GuestStart) -> Result<GuestHandle, HostError> {
        let ask = GuestAsk {
            origin: start.origin,
            mem_mib: start.job.mem_mib,
            max_mem_mib: self.parts.config.guest.max_mem_mib,
        };
        admit(&self.admission_facts(), &ask)?;
        let job_id = match start.job_id {
            Some(id) => id,
            None => {
                self.local_jobs_started += 1;
                JobId::new(format!("local-{}-{}", self.now(), self.local_jobs_started))
                    .map_err(|e| HostError::Internal(e.to_string()))?
            }
        };
        let mem_mib = start.job.mem_mib;
        let spec = guest_spec(&self.parts.config, start.job);
        let handle = self
            .parts
            .supervisor
            .start(&job_id, spec)
            .map_err(|e| match e {
                StartError::Busy { job_id } => HostError::Busy { job_id },
                // A command that does not exist or may not run is the
                // request's fault, not the node's.
                StartError::Spawn(ref io)
                    if matches!(
                        io.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                    ) =>
                {
                    HostError::Invalid(format!("argv[0]: {e}"))
                }
                StartError::Spawn(_) | StartError::JobDir { .. } => {
                    HostError::Internal(e.to_string())
                }
                _ => HostError::Invalid(e.to_string()),
            })?;
        self.guest_mem_mib = mem_mib;
        self.guest_live = Some(job_id);
        self.refresh_guest_roots();
        // Judge the new guest by the last reading at once, not at the next sample.
        self.apply_policy();
        Ok(handle)
    }
}

/// Spools an import's body to `spool` (bounded, stopping with the node),
/// then imports it in batches on the blocking pool. Errors name the user's file.
async fn import_streamed(
    bulk: BulkHistory,
    mut body: ImportBody,
    spool: PathBuf,
    source_name: String,
    shutdown: CancellationToken,
) -> Result<ImportOutcome, HostError> {
    use tokio::io::AsyncWriteExt;
    let invalid = |what: String| HostError::Invalid(format!("{source_name}: {what}"));
    let mut file = tokio::fs::File::create(&spool).await.map_err(|e| {
        HostError::Internal(format!(
            "cannot spool the import to {}: {e}",
            spool.display()
        ))
    })?;
    let mut written = 0u64;
    loop {
        let chunk = tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = tokio::fs::remove_file(&spool).await;
                return Err(HostError::Unavailable);
            }
            chunk = body.recv() => chunk,
        };
        let Some(chunk) = chunk else { break };
        let chunk = match chunk {
            Ok(c) => c,
            Err(why) => {
                let _ = tokio::fs::remove_file(&spool).await;
                return Err(invalid(why));
            }
        };
        written = written.saturating_add(chunk.len() as u64);
        if written > MAX_IMPORT_BYTES {
            let _ = tokio::fs::remove_file(&spool).await;
            return Err(invalid(format!(
                "larger than the {MAX_IMPORT_BYTES}-byte limit of a trace"
            )));
        }
        if let Err(e) = file.write_all(&chunk).await {
            let _ = tokio::fs::remove_file(&spool).await;
            return Err(HostError::Internal(format!("cannot spool the import: {e}")));
        }
    }
    let synced = file.sync_all().await;
    drop(file);
    if let Err(e) = synced {
        let _ = tokio::fs::remove_file(&spool).await;
        return Err(HostError::Internal(format!("cannot spool the import: {e}")));
    }
    let spool_for_task = spool.clone();
    let result = tokio::task::spawn_blocking(move || {
        let cancelled = || shutdown.is_cancelled();
        bulk.import_file(&spool_for_task, Path::new(&source_name), &cancelled)
    })
    .await;
    let _ = tokio::fs::remove_file(&spool).await;
    let report = result
        .map_err(|e| HostError::Internal(format!("the import task failed: {e}")))?
        .map_err(|e| match e {
            StoreError::ImportCancelled => HostError::Unavailable,
            StoreError::Trace(_)
            | StoreError::ImportOverlap { .. }
            | StoreError::ImportTooManyRows { .. }
            | StoreError::BadSample { .. } => HostError::Invalid(e.to_string()),
            other => HostError::Internal(other.to_string()),
        })?;
    Ok(ImportOutcome {
        added: report.added,
        already_present: report.already_present,
    })
}

/// A `Write` that sends full chunks down a bounded channel from a blocking
/// task; a dropped receiver (the client went away) ends the writer.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Vec<u8>, String>>,
    buf: Vec<u8>,
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= EXPORT_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(EXPORT_CHUNK));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

/// The job-log kind of a guest event.
fn event_name(kind: &GuestEventKind) -> &'static str {
    match kind {
        GuestEventKind::Started { .. } => "started",
        GuestEventKind::Reniced { .. } => "reniced",
        GuestEventKind::NiceNotLowered { .. } => "nice_not_lowered",
        GuestEventKind::Suspended => "suspended",
        GuestEventKind::Resumed => "resumed",
        GuestEventKind::KillSent { .. } => "killed",
        GuestEventKind::TermSent { .. } => "term_sent",
        GuestEventKind::Usage { .. } => "usage",
        GuestEventKind::Checkpointed { .. } => "checkpointed",
        GuestEventKind::CheckpointRefused { .. } => "checkpoint_refused",
        GuestEventKind::Exited { .. } => "exited",
        GuestEventKind::OutputTruncated { .. } => "output_truncated",
        GuestEventKind::OrphanKilled { .. } => "orphan_killed",
        GuestEventKind::LeftoverGroupKilled { .. } => "leftover_group_killed",
    }
}

/// Whether `schedule` lends the machine at `now`, judged in the owner's
/// civil time in `tz` (so "18:00" stays 18:00 across a DST change).
pub fn schedule_allows(schedule: &Schedule, tz: &jiff::tz::TimeZone, now: jiff::Timestamp) -> bool {
    schedule.allows(now.to_zoned(tz.clone()).datetime())
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A guest's spec, built one way for local and remote jobs: limits from the
/// node's `[guest]` config (the runtime at most `max_runtime_secs`, at least
/// a second), the job's own argv, environment, memory and input files.
pub fn guest_spec(config: &Config, job: GuestJob) -> GuestSpec {
    let guest = &config.guest;
    let max = guest.max_runtime_secs.max(1);
    let limit = Duration::from_secs(job.runtime_secs.unwrap_or(max).clamp(1, max));
    GuestSpec {
        argv: job.argv,
        env: job.env,
        mem_mib: job.mem_mib,
        cpu_time_limit: limit,
        wall_limit: limit,
        max_output_bytes: guest.max_output_mib.saturating_mul(1 << 20),
        allow_network: guest.allow_network,
        user: None,
        inputs: job.inputs,
        checkpoint: job.checkpoint.map(|c| crate::guest::CheckpointPlan {
            path: c.path,
            interval: Duration::from_secs(c.interval_secs),
            grace: Duration::from_secs(c.grace_secs),
            max_bytes: guest.max_checkpoint_mib.saturating_mul(1 << 20),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::tz::TimeZone;

    fn ts(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_schedule_follows_the_owners_civil_time_across_dst_and_zones() {
        let s = Schedule::parse("Mon-Fri 18:00-08:30; Sat,Sun").unwrap();
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        // Friday 2026-03-27 17:30 UTC is 18:30 in Berlin (CET, +1): lent.
        assert!(schedule_allows(&s, &berlin, ts("2026-03-27T17:30:00Z")));
        // The clocks move on Sunday 29 March; Tuesday 31 at 06:45 UTC is
        // 08:45 CEST (+2): past 08:30, withheld, though it would be 07:45 in
        // winter; 06:15 UTC is 08:15, still Monday evening's range.
        assert!(!schedule_allows(&s, &berlin, ts("2026-03-31T06:45:00Z")));
        assert!(schedule_allows(&s, &berlin, ts("2026-03-31T06:15:00Z")));
        assert!(
            schedule_allows(&s, &berlin, ts("2026-01-13T06:45:00Z")),
            "07:45 CET in winter"
        );
        // The same instant in another zone: Monday 16:45 UTC is 18:45 in
        // Berlin (lent) and 11:45 in New York (withheld).
        let new_york = TimeZone::get("America/New_York").unwrap();
        assert!(schedule_allows(&s, &berlin, ts("2026-03-30T16:45:00Z")));
        assert!(!schedule_allows(&s, &new_york, ts("2026-03-30T16:45:00Z")));
    }
}
