//! The node's one loop (rust-analyzer `main_loop` style): every input —
//! monitor readings, guest events, control requests, timers, shutdown — is
//! selected into one closed [`Event`] and handled in one `match`, so the
//! store and the supervisor have a single owner and need no locks.
//!
//! A reading flows: record the sample (and a transition when the state
//! changed) → judge the guest's state (S4 against its declared memory) →
//! policy `decide` → supervisor `apply`. Guest events flow into the job log
//! and out to `run-local` streams. This module must not know HTTP (that is
//! `control::server`) nor how states are defined (`model`).

use crate::clock::Clock;
use crate::control::api::{
    ApiError, GuestReport, ImportSummary, PauseReport, PredictQuery, RunLocalRequest, RunStarted,
    StatusReport, TrReport,
};
use crate::control::ControlRequest;
use crate::guest::{
    GuestAction, GuestEvent, GuestEventKind, GuestPhase, GuestRunState, GuestSpec, KillCause,
    StartError, Supervisor,
};
use crate::history::store::{HistoryStore, JobEvent};
use crate::history::trace::parse_trace;
use crate::model::policy::decide;
use crate::model::predict::PredictRequest;
use crate::model::series::{HostSeries, Sample};
use crate::model::state::State;
use crate::monitor::MonitorReading;
use crate::net::protocol::{
    FailureByCause, JobRequest, JobResponse, JobSubmit, OutputName, RejectReason,
    ReliabilityAnswer, ReliabilityQuery, ReliabilityResponse, WireState,
};
use crate::net::{LocalStatus, NetEvent, NetHandle, Responder};
use crate::node::config::Config;
use crate::node::pool::{self, RemoteJob, RemoteJobs};
use crate::report::{is_known_method, predict_report, PredictReport, ReportRequest};
use libp2p::PeerId;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often a running guest is checked for its end (and its wall limit).
const GUEST_POLL: Duration = Duration::from_millis(50);
/// How long shutdown waits for the killed guest to be reaped.
const GUEST_KILL_WAIT: Duration = Duration::from_secs(2);
/// Γ is re-announced when it moves to another step of this many thousandths.
const POWER_ANNOUNCE_STEP_MILLI: u32 = 50;
/// The windows `status` predicts for.
const STATUS_WINDOWS_SECS: [u64; 3] = [3600, 3 * 3600, 10 * 3600];

/// Everything the loop reacts to.
#[derive(Debug)]
pub enum Event {
    /// The monitor classified a sample of the host.
    Reading(MonitorReading),
    /// The supervisor reported something about the guest.
    Guest(GuestEvent),
    /// A client asked something through the control API.
    Control(ControlRequest),
    /// Time to check whether the running guest has ended.
    GuestTick,
    /// Time to delete history older than the retention.
    Compact,
    /// A `pause --for` has run out.
    PauseOver,
    /// A peer asked something, or the pool changed.
    Net(NetEvent),
    /// SIGINT/SIGTERM: stop.
    Shutdown,
}

/// The parts the loop owns.
pub struct NodeParts {
    pub config: Config,
    pub data_dir: PathBuf,
    pub store: HistoryStore,
    pub supervisor: Supervisor,
    pub clock: Arc<dyn Clock>,
    /// The guest's processes, for the monitor to leave out of L_H.
    pub guest_roots: watch::Sender<Vec<i32>>,
    /// Guest events, for `run-local` streams.
    pub events: broadcast::Sender<GuestEvent>,
    pub tracker: TaskTracker,
    /// The pool, when networking is on.
    pub net: Option<NetHandle>,
    /// Where job events from hosts go to the submit tasks waiting for them.
    pub inbox: crate::consumer::Inbox,
    /// This host as announced: CPUs, memory, benchmark score.
    pub hardware: Hardware,
}

/// What this host announces about its hardware.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hardware {
    pub logical_cpus: u32,
    pub memory_mib: u64,
    /// Score of the built-in CPU benchmark.
    pub benchmark_score: u64,
}

/// The loop's inputs.
pub struct Inputs {
    pub readings: mpsc::Receiver<MonitorReading>,
    pub guest_events: mpsc::UnboundedReceiver<GuestEvent>,
    pub control: mpsc::Receiver<ControlRequest>,
    /// Requests from peers (never yields when networking is off).
    pub net: mpsc::Receiver<NetEvent>,
    pub shutdown: CancellationToken,
}

/// How stale the cached history may be when answering peers: a prediction
/// learns from whole past days, so a minute of missing samples changes nothing.
const SERIES_CACHE_SECS: i64 = 60;

/// The node's state between events.
pub struct Node {
    parts: NodeParts,
    started_at: i64,
    /// The last reading, for status and to judge a guest started between readings.
    last: Option<MonitorReading>,
    /// The state of the last recorded transition (`None` after a pause, so
    /// the first sample after `resume` records one).
    recorded_state: Option<State>,
    /// The running guest's declared working set, MiB (S4 below it).
    guest_mem_mib: u64,
    /// A guest was started and its end not yet seen (it may be killed but
    /// not reaped, when the policy no longer acts on it).
    guest_live: bool,
    /// When a `pause --for` ends: Unix seconds and the timer deadline.
    pause_until: Option<(i64, Instant)>,
    jobs_started: u64,
    /// Jobs peers submitted here.
    remote: RemoteJobs,
    /// The history as a series and the time it was built at; dropped when the
    /// history changes in bulk (import, retention).
    series_cache: Option<(i64, Arc<HostSeries>)>,
    /// The best benchmark score heard in the pool (ours included).
    best_score: u64,
    /// State, slot and power step last announced, to announce only changes.
    announced: Option<(State, bool, u32)>,
}

impl Node {
    pub fn new(parts: NodeParts) -> Node {
        let started_at = parts.clock.unix_secs();
        Node {
            parts,
            started_at,
            last: None,
            recorded_state: None,
            guest_mem_mib: 0,
            guest_live: false,
            pause_until: None,
            jobs_started: 0,
            remote: RemoteJobs::default(),
            series_cache: None,
            best_score: 0,
            announced: None,
        }
    }

    /// Runs until shutdown; then kills the guest (S5) and flushes the store.
    pub async fn run(mut self, mut inputs: Inputs) {
        let mut guest_tick = tokio::time::interval(GUEST_POLL);
        guest_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first retention pass runs before any request is served, so a
        // client never races it (an import older than the retention would
        // otherwise survive or vanish depending on which event came first).
        self.compact();
        let stale = pool::remove_stale_remote_dirs(&self.parts.supervisor.jobs_dir());
        if stale > 0 {
            tracing::info!(
                stale,
                "removed peers' job directories left by an earlier run"
            );
        }
        let every = self.parts.config.history.compact_every;
        // `every` is at most a week (validated); checked all the same.
        let now = tokio::time::Instant::now();
        let mut compact = tokio::time::interval_at(now.checked_add(every).unwrap_or(now), every);
        compact.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let guest_running = self.guest_live;
            let pause_deadline = self.pause_until.map(|(_, at)| at);
            let event = tokio::select! {
                biased;
                _ = inputs.shutdown.cancelled() => Event::Shutdown,
                Some(e) = inputs.guest_events.recv() => Event::Guest(e),
                Some(r) = inputs.readings.recv() => Event::Reading(r),
                Some(c) = inputs.control.recv() => Event::Control(c),
                Some(n) = inputs.net.recv() => Event::Net(n),
                _ = guest_tick.tick(), if guest_running => Event::GuestTick,
                _ = compact.tick() => Event::Compact,
                _ = sleep_until(pause_deadline), if pause_deadline.is_some() => Event::PauseOver,
            };
            match event {
                Event::Reading(r) => self.on_reading(r),
                Event::Guest(e) => self.on_guest_event(e),
                Event::Control(c) => self.on_control(c),
                Event::GuestTick => self.poll_guest(),
                Event::Compact => self.compact(),
                Event::Net(n) => self.on_net(n),
                Event::PauseOver => {
                    if let Err(e) = self.resume() {
                        tracing::error!(error = %e, "cannot end the pause");
                    }
                }
                Event::Shutdown => break,
            }
        }
        self.shut_down(&mut inputs.guest_events);
    }

    /// Shutdown order, part 1 (the rest is in `node::run_async`):
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
        if self.guest_live {
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

    fn on_reading(&mut self, r: MonitorReading) {
        let store = &self.parts.store;
        if !store.is_paused() && self.recorded_state != Some(r.state) {
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
        self.announce_if_changed();
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
        if self.parts.store.is_paused() {
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
        let tree = self.parts.supervisor.process_tree();
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
        self.guest_live = false;
        self.refresh_guest_roots();
        self.announce_if_changed();
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
        self.forward_to_consumer(&e);
        // Nobody listening is fine.
        let _ = self.parts.events.send(e);
    }

    fn compact(&mut self) {
        self.series_cache = None;
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

    fn on_control(&mut self, request: ControlRequest) {
        match request {
            ControlRequest::Status { reply } => self.status(reply),
            ControlRequest::Pause { for_secs, reply } => {
                let _ = reply.send(self.pause(for_secs));
            }
            ControlRequest::Resume { reply } => {
                let _ = reply.send(self.resume());
            }
            ControlRequest::Predict { query, reply } => self.predict(query, reply),
            ControlRequest::RunLocal { request, reply } => {
                let _ = reply.send(self.run_local(request));
            }
            ControlRequest::Cancel { job_id } => {
                let running = self
                    .parts
                    .supervisor
                    .status()
                    .filter(|s| s.phase != GuestPhase::Exited);
                if running.is_some_and(|s| s.job_id == job_id) {
                    self.kill_guest(KillCause::Cancelled);
                }
            }
            ControlRequest::Export { reply } => {
                let mut out = Vec::new();
                let answer = match self.parts.store.export(&mut out) {
                    Ok(_) => Ok(String::from_utf8_lossy(&out).into_owned()),
                    Err(e) => Err(ApiError::internal(e.to_string())),
                };
                let _ = reply.send(answer);
            }
            ControlRequest::Import { text, reply } => {
                self.series_cache = None;
                let _ = reply.send(import(&self.parts.store, &text));
            }
        }
    }

    fn pause(&mut self, for_secs: Option<u64>) -> Result<PauseReport, ApiError> {
        let now = self.now();
        let changed = self
            .parts
            .store
            .pause(now)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.recorded_state = None;
        let killed_job = match self.parts.supervisor.status() {
            Some(s) if s.phase != GuestPhase::Exited => {
                self.kill_guest(KillCause::Revocation);
                Some(s.job_id)
            }
            _ => None,
        };
        self.pause_until = for_secs.map(|secs| {
            let secs_i = i64::try_from(secs).unwrap_or(i64::MAX);
            (
                now.saturating_add(secs_i),
                Instant::now() + Duration::from_secs(secs),
            )
        });
        tracing::info!(until = ?self.pause_until.map(|p| p.0), "paused by the owner (S5)");
        Ok(PauseReport {
            paused: true,
            changed,
            until: self.pause_until.map(|p| p.0),
            killed_job,
        })
    }

    fn resume(&mut self) -> Result<PauseReport, ApiError> {
        let changed = self
            .parts
            .store
            .resume(self.now())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.pause_until = None;
        self.recorded_state = None;
        if changed {
            tracing::info!("resumed by the owner");
        }
        Ok(PauseReport {
            paused: false,
            changed,
            until: None,
            killed_job: None,
        })
    }

    /// The history as a series for predictions, read with the stored facts.
    fn series(&self) -> Result<HostSeries, ApiError> {
        let meta = self.parts.store.meta();
        self.parts
            .store
            .to_series(meta.tz.clone(), meta.step_secs, meta.max_gap_secs)
            .map_err(|e| ApiError::internal(e.to_string()))
    }

    fn predict_request(&self, at: i64, window_secs: u64, mem_mib: u64) -> PredictRequest {
        let mut request =
            PredictRequest::new(at, window_secs, self.parts.config.thresholds(mem_mib));
        request.days = self.parts.config.history.days;
        request
    }

    /// Solving runs off the loop (on the blocking pool): it can take tens
    /// of milliseconds for long windows, and samples must keep flowing.
    fn predict(
        &mut self,
        query: PredictQuery,
        reply: oneshot::Sender<Result<PredictReport, ApiError>>,
    ) {
        let series = match self.series() {
            Ok(s) => s,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let at = query.at.unwrap_or_else(|| self.now());
        if let Some(method) = query.method.as_deref().filter(|m| !is_known_method(m)) {
            let _ = reply.send(Err(ApiError::bad_request(format!(
                "cannot predict: unknown method {method:?}"
            ))));
            return;
        }
        let window = self.predict_request(at, query.window_secs, query.mem_mib);
        let request = ReportRequest::with_method(window, query.method.as_deref());
        let host = self.parts.store.meta().host.clone();
        self.parts.tracker.spawn_blocking(move || {
            let answer = predict_report(&series, host, &request)
                .map_err(|e| ApiError::bad_request(format!("cannot predict: {e}")));
            let _ = reply.send(answer);
        });
    }

    fn status(&mut self, reply: oneshot::Sender<StatusReport>) {
        let now = self.now();
        let guest = self.parts.supervisor.status().map(|s| GuestReport {
            job_id: s.job_id,
            pid: s.pid,
            phase: match s.phase {
                GuestPhase::Running => "running",
                GuestPhase::Stopped => "stopped",
                GuestPhase::Exited => "exited",
            }
            .to_string(),
            nice: s.nice,
            run_state: format!("{:?}", s.run_state),
            mem_mib: self.guest_mem_mib,
            started_at: s.started_at.as_second(),
            exit: s.exit,
            kill_cause: s.kill_cause,
        });
        let paused = self.parts.store.is_paused();
        let guest_state = self.guest_state();
        let mut report = StatusReport {
            pid: std::process::id(),
            data_dir: self.parts.data_dir.clone(),
            started_at: self.started_at,
            now,
            paused,
            paused_until: self.pause_until.map(|p| p.0),
            state: if paused {
                Some(State::S5.label().to_string())
            } else {
                guest_state.map(|(s, _)| s.label().to_string())
            },
            cpu: self.last.map(|r| r.cpu),
            free_mib: self.last.map(|r| r.free_mib),
            suspending: guest_state.is_some_and(|(_, s)| s),
            period_secs: self.last.map(|r| r.period.as_secs_f64()),
            last_sample: self.last.map(|r| r.time),
            samples: self.parts.store.sample_count(),
            guest,
            predictions: Vec::new(),
            prediction_method: crate::model::baselines::DEFAULT_METHOD.to_string(),
        };
        // The cached series (at most a minute old, rebuilt after an import):
        // decoding the whole history on every `status` would stall the loop.
        let series = match self.cached_series() {
            Ok(s) => s,
            Err(e) => {
                report.predictions = STATUS_WINDOWS_SECS
                    .iter()
                    .map(|&w| TrReport {
                        window_secs: w,
                        tr: None,
                        error: Some(e.message.clone()),
                    })
                    .collect();
                let _ = reply.send(report);
                return;
            }
        };
        let requests: Vec<ReportRequest> = STATUS_WINDOWS_SECS
            .iter()
            .map(|&w| ReportRequest::new(self.predict_request(now, w, 0)))
            .collect();
        self.parts.tracker.spawn_blocking(move || {
            report.predictions = requests
                .iter()
                .map(|r| match predict_report(&series, None, r) {
                    Ok(p) => TrReport {
                        window_secs: r.window.window_secs,
                        tr: Some(p.tr),
                        error: None,
                    },
                    Err(e) => TrReport {
                        window_secs: r.window.window_secs,
                        tr: None,
                        error: Some(e.to_string()),
                    },
                })
                .collect();
            let _ = reply.send(report);
        });
    }

    fn run_local(&mut self, request: RunLocalRequest) -> Result<RunStarted, ApiError> {
        let guest_cfg = &self.parts.config.guest;
        if self.parts.store.is_paused() {
            return Err(ApiError::conflict(
                "the owner has paused this node; `gleaner resume` first",
            ));
        }
        if request.mem_mib > guest_cfg.max_mem_mib {
            return Err(ApiError::bad_request(format!(
                "the job declares {} MiB; this node accepts at most {} MiB ([guest] max_mem_mib)",
                request.mem_mib, guest_cfg.max_mem_mib
            )));
        }
        let runtime = request
            .runtime_secs
            .unwrap_or(guest_cfg.max_runtime_secs)
            .min(guest_cfg.max_runtime_secs);
        let now = self.now();
        self.jobs_started += 1;
        let job_id = format!("local-{now}-{}", self.jobs_started);
        let spec = GuestSpec {
            argv: request.argv,
            env: Vec::new(),
            mem_mib: request.mem_mib,
            cpu_time_limit: Duration::from_secs(runtime.max(1)),
            wall_limit: Duration::from_secs(runtime.max(1)),
            max_output_bytes: guest_cfg.max_output_mib.saturating_mul(1 << 20),
            allow_network: guest_cfg.allow_network,
            user: None,
            inputs: Vec::new(),
        };
        let handle = self
            .parts
            .supervisor
            .start(&job_id, spec)
            .map_err(|e| match e {
                StartError::Busy { .. } => ApiError::conflict(e.to_string()),
                StartError::Spawn(_) | StartError::JobDir { .. } => {
                    ApiError::internal(e.to_string())
                }
                _ => ApiError::bad_request(e.to_string()),
            })?;
        self.guest_mem_mib = request.mem_mib;
        self.guest_live = true;
        self.refresh_guest_roots();
        // Judge the new guest by the last reading at once, not at the next sample.
        self.apply_policy();
        Ok(RunStarted {
            job_id: handle.job_id,
            pid: handle.pid,
            dir: handle.dir,
            sandbox: handle.sandbox,
        })
    }
}

fn import(store: &HistoryStore, text: &str) -> Result<ImportSummary, ApiError> {
    let trace = parse_trace(text.as_bytes(), std::path::Path::new("imported trace"))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let report = store
        .import(&trace)
        .map_err(|e| ApiError::conflict(e.to_string()))?;
    Ok(ImportSummary {
        added: report.added,
        already_present: report.already_present,
    })
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
        GuestEventKind::Exited { .. } => "exited",
        GuestEventKind::OutputTruncated { .. } => "output_truncated",
        GuestEventKind::OrphanKilled { .. } => "orphan_killed",
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The pool: what peers ask of this host, and what it tells them.
impl Node {
    fn on_net(&mut self, event: NetEvent) {
        match event {
            NetEvent::ReliabilityQuery { query, reply, .. } => {
                self.answer_reliability(query, reply)
            }
            NetEvent::JobRequest {
                peer,
                request,
                reply,
            } => match request {
                JobRequest::Submit(submit) => {
                    let answer = match self.accept_remote(peer, submit) {
                        Ok(()) => JobResponse::Accepted,
                        Err(reason) => JobResponse::Rejected(reason),
                    };
                    let _ = reply.send(answer);
                }
                JobRequest::Fetch {
                    job_id,
                    name,
                    offset,
                    len,
                } => self.serve_fetch(peer, &job_id, name, offset, len, reply),
                JobRequest::Event {
                    job_id,
                    seq,
                    time_unix,
                    kind,
                } => {
                    let event = crate::consumer::HostJobEvent {
                        seq,
                        time_unix,
                        kind,
                    };
                    let answer = if self.parts.inbox.deliver(peer, &job_id, event) {
                        JobResponse::EventAck
                    } else {
                        JobResponse::NotFound
                    };
                    let _ = reply.send(answer);
                }
            },
            NetEvent::MemberAnnounced(member) => {
                self.best_score = self.best_score.max(member.status.benchmark_score);
            }
            NetEvent::MemberExpired(_) => {}
        }
    }

    /// True when a guest could start here now.
    fn slot_free(&self) -> bool {
        self.parts.config.guest.enabled && !self.guest_live && !self.parts.store.is_paused()
    }

    /// The host's state as peers see it.
    fn pool_state(&self) -> State {
        if self.parts.store.is_paused() {
            State::S5
        } else {
            self.last.map_or(State::S1, |r| r.state)
        }
    }

    /// Γ = P·A in thousandths, with A from the last reading's owner load.
    fn power_milli(&self) -> u32 {
        let own = self.parts.hardware.benchmark_score;
        let load = self.last.map_or(0.0, |r| r.cpu);
        crate::monitor::bench::effective_power_milli(own, self.best_score, load)
    }

    fn local_status(&self) -> LocalStatus {
        let hw = self.parts.hardware;
        LocalStatus {
            logical_cpus: hw.logical_cpus,
            memory_mib: hw.memory_mib,
            benchmark_score: hw.benchmark_score,
            relative_power_milli: self.power_milli(),
            state: self.pool_state(),
            slot_free: self.slot_free(),
        }
    }

    /// Announces on a change of state or slot (the network task re-publishes
    /// the last status every announce interval by itself).
    fn announce_if_changed(&mut self) {
        let Some(net) = &self.parts.net else {
            return;
        };
        // Power in steps of 5 %: a change that a consumer's ranking would
        // notice is republished at once (else peers rank on a stale Γ until
        // the next state change); the owner's load jitter is not.
        let now = (
            self.pool_state(),
            self.slot_free(),
            self.power_milli() / POWER_ANNOUNCE_STEP_MILLI,
        );
        if self.announced == Some(now) {
            return;
        }
        if net.try_announce(self.local_status()).is_ok() {
            self.announced = Some(now);
        }
    }

    /// The history as a series, rebuilt at most once a `SERIES_CACHE_SECS`
    /// (and after an import or a retention pass). Counting samples to detect
    /// changes would cost more than the query: sled counts by walking the tree.
    fn cached_series(&mut self) -> Result<Arc<HostSeries>, ApiError> {
        let now = self.now();
        if let Some((built, series)) = &self.series_cache {
            if (0..SERIES_CACHE_SECS).contains(&(now - built)) {
                return Ok(series.clone());
            }
        }
        let series = Arc::new(self.series()?);
        self.series_cache = Some((now, series.clone()));
        Ok(series)
    }

    /// Answers a peer's reliability query from this host's own history, off the loop.
    fn answer_reliability(&mut self, q: ReliabilityQuery, reply: Responder<ReliabilityResponse>) {
        let power = self.power_milli();
        let slot_free = self.slot_free();
        if self.parts.store.is_paused() {
            let _ = reply.send(ReliabilityResponse::Answer(ReliabilityAnswer {
                tr: 0.0,
                failure: FailureByCause {
                    s3: 0.0,
                    s4: 0.0,
                    s5: 1.0,
                },
                initial_state: WireState::S5,
                days_used: 0,
                method: String::new(),
                relative_power_milli: power,
                slot_free,
            }));
            return;
        }
        let series = match self.cached_series() {
            Ok(s) => s,
            Err(e) => {
                let _ = reply.send(ReliabilityResponse::Unavailable { reason: e.message });
                return;
            }
        };
        let request = ReportRequest::with_method(
            self.predict_request(q.window_start_unix, q.length_secs, q.memory_mib),
            None,
        );
        let fallback_state = WireState::from(self.pool_state());
        self.parts.tracker.spawn_blocking(move || {
            let answer = match predict_report(&series, None, &request) {
                Ok(r) => ReliabilityResponse::Answer(ReliabilityAnswer {
                    tr: r.tr,
                    failure: FailureByCause {
                        s3: r.fail_by_cause.get("S3").copied().unwrap_or(0.0),
                        s4: r.fail_by_cause.get("S4").copied().unwrap_or(0.0),
                        s5: r.fail_by_cause.get("S5").copied().unwrap_or(0.0),
                    },
                    initial_state: r
                        .init_state
                        .parse::<State>()
                        .ok()
                        .map_or(fallback_state, WireState::from),
                    days_used: u32::try_from(r.days_used).unwrap_or(u32::MAX),
                    method: r.method,
                    relative_power_milli: power,
                    slot_free,
                }),
                Err(e) => ReliabilityResponse::Unavailable {
                    reason: e.to_string(),
                },
            };
            let _ = reply.send(answer);
        });
    }

    /// Starts a peer's job if this host can take it.
    fn accept_remote(&mut self, consumer: PeerId, submit: JobSubmit) -> Result<(), RejectReason> {
        let Some(net) = self.parts.net.clone() else {
            return Err(RejectReason::NotAllowed);
        };
        if !self.parts.config.guest.enabled {
            return Err(RejectReason::Invalid(
                "this node hosts no guests (consumer-only)".into(),
            ));
        }
        let state = self.pool_state();
        if matches!(state, State::S3 | State::S4 | State::S5) {
            return Err(RejectReason::HostState(state.into()));
        }
        if self.guest_live {
            return Err(RejectReason::Busy);
        }
        pool::check_submit(&submit, &self.parts.config.guest)?;
        let th = self.parts.config.thresholds(submit.memory_mib);
        if self.last.is_some_and(|r| th.lacks_memory(r.free_mib)) {
            return Err(RejectReason::HostState(WireState::S4));
        }
        self.jobs_started += 1;
        let local_id = format!(
            "{}{}-{}",
            pool::REMOTE_PREFIX,
            self.now(),
            self.jobs_started
        );
        let guest_cfg = &self.parts.config.guest;
        let wall = Duration::from_secs(submit.wall_time_limit_secs.max(1));
        let spec = GuestSpec {
            argv: submit.argv,
            env: submit.env,
            mem_mib: submit.memory_mib,
            cpu_time_limit: wall,
            wall_limit: wall,
            max_output_bytes: guest_cfg.max_output_mib.saturating_mul(1 << 20),
            allow_network: guest_cfg.allow_network,
            user: None,
            inputs: submit
                .inputs
                .into_iter()
                .map(|f| (f.path, f.data))
                .collect(),
        };
        // Register before starting, so the Started event finds the job.
        let events = pool::spawn_event_sender(net, consumer, &self.parts.tracker);
        let evicted = self.remote.add(RemoteJob {
            consumer,
            consumer_job_id: submit.job_id.clone(),
            local_id: local_id.clone(),
            dir: self.parts.supervisor.job_dir(&local_id),
            outputs: submit.outputs,
            seq: 0,
            events,
        });
        let started = self.parts.supervisor.start(&local_id, spec);
        if let Err(e) = started {
            // Not started: the job leaves the list again, the one it pushed
            // out comes back (its outputs stay fetchable), and whatever the
            // start left on disk goes.
            if let Some(failed) = self.remote.undo_add(evicted) {
                self.parts
                    .tracker
                    .spawn_blocking(move || pool::remove_job_dir(&failed.dir));
            }
            return Err(match e {
                StartError::Busy { .. } => RejectReason::Busy,
                e => {
                    tracing::warn!(error = %e, %consumer, "cannot start a remote job");
                    RejectReason::Invalid(format!("cannot start: {e}"))
                }
            });
        }
        if let Some(old) = evicted {
            self.parts
                .tracker
                .spawn_blocking(move || pool::remove_job_dir(&old.dir));
        }
        tracing::info!(job = %local_id, %consumer, consumer_job = %submit.job_id, "remote job started");
        self.guest_mem_mib = submit.memory_mib;
        self.guest_live = true;
        self.refresh_guest_roots();
        self.apply_policy();
        self.announce_if_changed();
        Ok(())
    }

    /// Sends a guest event of a remote job to its consumer, in order.
    fn forward_to_consumer(&mut self, e: &GuestEvent) {
        let Some(kind) = pool::wire_event(&e.kind) else {
            return;
        };
        let Some(job) = self.remote.by_local_id(&e.job_id) else {
            return;
        };
        let request = JobRequest::Event {
            job_id: job.consumer_job_id.clone(),
            seq: job.seq,
            time_unix: e.at.as_second(),
            kind,
        };
        job.seq += 1;
        let _ = job.events.send(request);
    }

    /// Serves a piece of a remote job's output to the consumer that submitted it.
    fn serve_fetch(
        &mut self,
        peer: PeerId,
        job_id: &str,
        name: OutputName,
        offset: u64,
        len: u32,
        reply: Responder<JobResponse>,
    ) {
        let path = self
            .remote
            .by_consumer(peer, job_id)
            .and_then(|job| pool::output_path(job, &name));
        let Some(path) = path else {
            let _ = reply.send(JobResponse::NotFound);
            return;
        };
        let captured = matches!(name, OutputName::Stdout | OutputName::Stderr);
        self.parts.tracker.spawn_blocking(move || {
            let read = if captured {
                pool::read_chunk_or_empty(&path, offset, len)
            } else {
                pool::read_chunk(&path, offset, len)
            };
            let answer = match read {
                Ok((data, total_len)) => JobResponse::Chunk { data, total_len },
                Err(_) => JobResponse::NotFound,
            };
            let _ = reply.send(answer);
        });
    }
}
