//! The control API server: a thin adapter from HTTP/JSON on a Unix socket to
//! typed calls on the node's actor handles (the host loop, the consumer),
//! plus the `run-local` stream (job events and output as JSON Lines).
//!
//! This module owns the socket (created mode 0600, removed on drop), the
//! routes, and the conversion between wire bodies (`api`) and domain values;
//! what the handlers share (the handles, the extractors, the mapping of
//! domain errors to HTTP statuses) is in `state`. It must not know how the
//! node answers: HTTP and JSON stop here.

use super::api::{
    shell_code, ApiError, ClaimBinReport, GuestReport, HostReport, HostsQuery, HostsReport,
    ImportSummary, PauseReport, PauseRequest, PoolSample, PredictQuery, RunLocalRequest,
    RunStarted, StatusReport, StreamLine, TrReport, PREFIX,
};
pub use super::state::ControlHandles;
use super::state::{consumer_of, json_result, ApiJson, ApiQuery};
use crate::guest::{GuestEvent, GuestEventKind, GuestImage, GuestPhase, IMAGE_WORK_DIR};
use crate::model::baselines::MethodId;
use crate::node::host_loop::{GuestJob, GuestOrigin, GuestStart, HostStatus, PauseOutcome};
use crate::report::Basis;
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::StreamExt;

/// The bound socket; the file is removed when this is dropped.
#[derive(Debug)]
pub struct ControlSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
}

impl ControlSocket {
    /// Binds `path` (replacing a stale socket file left by a crash; the
    /// caller holds the data-dir lock, so no live node owns it) and limits
    /// it to the owner.
    pub fn bind(path: &Path) -> std::io::Result<ControlSocket> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(ControlSocket {
            listener: Some(listener),
            path: path.to_path_buf(),
        })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves the API on `socket` until `handle.shutdown` is cancelled; then
/// stops accepting and waits for open requests to finish.
pub async fn serve(mut socket: ControlSocket, handle: ControlHandles) -> std::io::Result<()> {
    let Some(listener) = socket.listener.take() else {
        return Ok(());
    };
    let shutdown = handle.shutdown.clone();
    let app = router(handle);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    drop(socket);
    Ok(())
}

/// The largest trace `history import` takes through the socket: the trace
/// format's cap. The body is streamed to the node's spool, never held.
const MAX_IMPORT_BYTES: u64 = crate::node::host_loop::MAX_IMPORT_BYTES;

/// The routes, separate from the socket so tests can call them directly.
pub fn router(handle: ControlHandles) -> Router {
    Router::new()
        .route(&format!("{PREFIX}/status"), get(status))
        .route(&format!("{PREFIX}/pause"), post(pause))
        .route(&format!("{PREFIX}/resume"), post(resume))
        .route(&format!("{PREFIX}/predict"), post(predict))
        .route(&format!("{PREFIX}/run"), post(run_local))
        .route(&format!("{PREFIX}/hosts"), post(hosts))
        .route(&format!("{PREFIX}/history/export"), get(export))
        .route(&format!("{PREFIX}/history/import"), post(import))
        .merge(crate::control::batches::routes())
        .merge(crate::control::images::routes())
        .fallback(no_such_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(handle)
}

/// Every refusal is JSON (an [`ApiError`]), even for a path we do not serve.
async fn no_such_route(uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: 404,
        message: format!("no such route: {}", uri.path()),
    }
}

async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: 405,
        message: format!("{} does not take {method}", uri.path()),
    }
}

async fn status(State(h): State<ControlHandles>) -> Response {
    match h.host.status().await {
        Ok(status) => {
            let mut report = status_report(status);
            // Read from the network task's snapshot, not the host loop.
            report.network = h.net.as_ref().map(crate::net::NetHandle::reachability);
            report.traffic = h.net.as_ref().map(crate::net::NetHandle::traffic);
            report.summary_cache = match &h.net {
                Some(net) => super::state::summary_cache(net).await,
                None => None,
            };
            Json(report).into_response()
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The wire form of the host's status.
fn status_report(s: HostStatus) -> StatusReport {
    let guest = s.guest.map(|(g, mem_mib)| GuestReport {
        job_id: g.job_id,
        pid: g.pid,
        phase: match g.phase {
            GuestPhase::Running => "running",
            GuestPhase::Stopped => "stopped",
            GuestPhase::Exited => "exited",
        }
        .to_string(),
        nice: g.nice,
        run_state: format!("{:?}", g.run_state),
        mem_mib,
        started_at: g.started_at.as_second(),
        exit: g.exit,
        kill_cause: g.kill_cause,
    });
    StatusReport {
        pid: std::process::id(),
        data_dir: s.data_dir,
        started_at: s.started_at,
        now: s.now,
        paused: s.paused,
        paused_until: s.paused_until,
        state: s.state.map(|st| st.label().to_string()),
        cpu: s.last.map(|r| r.cpu),
        free_mib: s.last.map(|r| r.free_mib),
        suspending: !s.paused && s.last.is_some_and(|r| r.suspending),
        period_secs: s.last.map(|r| r.period.as_secs_f64()),
        last_sample: s.last.map(|r| r.time),
        samples: usize::try_from(s.samples).unwrap_or(usize::MAX),
        samples_lost_at_start: s.samples_lost_at_start,
        guest,
        predictions: s
            .predictions
            .into_iter()
            .map(|(window_secs, tr)| match tr {
                Ok((tr, basis)) => TrReport {
                    window_secs,
                    tr: Some(tr),
                    prior: matches!(basis, Basis::Prior(_)),
                    prior_source: match basis {
                        Basis::Prior(source) => Some(source.label().to_string()),
                        Basis::Record => None,
                    },
                    error: None,
                },
                Err(e) => TrReport {
                    window_secs,
                    tr: None,
                    prior: false,
                    prior_source: None,
                    error: Some(e),
                },
            })
            .collect(),
        prediction_method: s.method.to_string(),
        owner_load: s.owner_load.to_string(),
        containment: s.containment,
        network: None,
        traffic: None,
        summary_cache: None,
        why_idle: s.why_idle,
        withheld: s.withheld,
        schedule: s.schedule.to_string(),
        pause_after_job: s.pause_after_job,
        throttle: s.throttle,
    }
}

fn pause_report(p: PauseOutcome) -> PauseReport {
    PauseReport {
        paused: p.paused,
        changed: p.changed,
        until: p.until,
        killed_job: p.killed_job,
        after_job: p.after_job,
    }
}

/// `POST /v1/pause`: the host loop checks the pause's length.
async fn pause(State(h): State<ControlHandles>, ApiJson(req): ApiJson<PauseRequest>) -> Response {
    let outcome = if req.after_job {
        h.host.pause_after_job(req.for_secs).await
    } else {
        h.host.pause(req.for_secs).await
    };
    json_result(outcome.map(pause_report))
}

async fn resume(State(h): State<ControlHandles>) -> Response {
    json_result(h.host.resume().await.map(pause_report))
}

async fn predict(
    State(h): State<ControlHandles>,
    ApiJson(query): ApiJson<PredictQuery>,
) -> Response {
    let method = match query.method.as_deref().map(str::parse::<MethodId>) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(e)) => {
            return ApiError::bad_request(format!("cannot predict: {e}")).into_response();
        }
    };
    let query = crate::node::host_loop::PredictQuery {
        window_secs: query.window_secs,
        at: query.at,
        mem_mib: query.mem_mib,
        method,
        days: query.days,
        step_secs: query.step_secs,
    };
    json_result(h.host.reader().predict(query).await)
}

/// `GET /v1/history/export`: the history as a trace, streamed as the node
/// writes it (an error part-way aborts the body, so a cut export is never
/// taken for a whole one).
async fn export(State(h): State<ControlHandles>) -> Response {
    match h.host.export().await {
        Ok(chunks) => {
            let stream = tokio_stream::wrappers::ReceiverStream::new(chunks)
                .map(|chunk| chunk.map_err(std::io::Error::other));
            (
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                Body::from_stream(stream),
            )
                .into_response()
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /v1/history/import?name=FILE`: the body is handed to the host loop
/// chunk by chunk (it spools and imports off its loop), so neither the
/// server nor the loop ever holds the trace.
async fn import(
    State(h): State<ControlHandles>,
    ApiQuery(q): ApiQuery<ImportQuery>,
    body: Body,
) -> Response {
    let name = q.name.unwrap_or_else(|| "the imported trace".to_string());
    if name.len() > MAX_IMPORT_NAME_BYTES {
        return ApiError::bad_request(format!("name: longer than {MAX_IMPORT_NAME_BYTES} bytes"))
            .into_response();
    }
    let (tx, rx) = mpsc::channel::<Result<Vec<u8>, String>>(16);
    let pump = async move {
        let mut stream = body.into_data_stream();
        let mut total = 0u64;
        while let Some(chunk) = stream.next().await {
            let message = match chunk {
                Ok(bytes) => {
                    total = total.saturating_add(bytes.len() as u64);
                    if total <= MAX_IMPORT_BYTES {
                        if tx.send(Ok(bytes.to_vec())).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    format!("larger than the {MAX_IMPORT_BYTES}-byte limit of a trace")
                }
                Err(e) => format!("the upload broke off: {e}"),
            };
            let _ = tx.send(Err(message)).await;
            return;
        }
    };
    let (_, answer) = tokio::join!(pump, h.host.import(rx, name));
    json_result(answer.map(|o| ImportSummary {
        added: o.added,
        already_present: o.already_present,
    }))
}

/// Longest `name` an import may carry (it is quoted in errors).
const MAX_IMPORT_NAME_BYTES: usize = 4096;

/// `POST /v1/history/import?name=FILE`: the file the owner named, for errors.
#[derive(Debug, serde::Deserialize)]
struct ImportQuery {
    name: Option<String>,
}

async fn run_local(
    State(h): State<ControlHandles>,
    ApiJson(request): ApiJson<RunLocalRequest>,
) -> Response {
    let (argv, env, image) = match request.image {
        None => (request.argv, Vec::new(), None),
        Some(path) => match super::images::unpack_image(&h, path).await {
            Ok(img) => {
                let work = img.config.working_dir.as_deref().unwrap_or(IMAGE_WORK_DIR);
                let image = GuestImage {
                    rootfs: img.rootfs.clone(),
                    work_dir: PathBuf::from(work),
                    lease: img.lease.clone(),
                };
                (
                    img.config.argv(&request.argv),
                    img.config.env.clone(),
                    Some(image),
                )
            }
            Err(e) => return e.into_response(),
        },
    };
    if argv.first().is_none_or(|a| a.is_empty()) {
        return ApiError::bad_request("the command line is empty").into_response();
    }
    // Subscribe before the job starts so that no event of it is missed.
    let events = h.host.subscribe_events();
    let job = GuestJob {
        argv,
        env,
        mem_mib: request.mem_mib,
        runtime_secs: request.runtime_secs,
        inputs: Vec::new(),
        checkpoint: None,
        image,
    };
    let started = match h
        .host
        .start_guest(GuestStart {
            origin: GuestOrigin::Local,
            job_id: None,
            job,
        })
        .await
    {
        Ok(g) => RunStarted {
            job_id: g.job_id,
            pid: g.pid,
            dir: g.dir,
            sandbox: g.sandbox,
        },
        Err(e) => return ApiError::from(e).into_response(),
    };
    let (tx, rx) = mpsc::channel::<Result<String, Infallible>>(64);
    h.tracker.spawn(stream_job(started, events, tx, h.clone()));
    (
        [(header::CONTENT_TYPE, "application/jsonl")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

/// How often the job's output files are read for new bytes.
const TAIL_EVERY: Duration = Duration::from_millis(100);
/// After the job's end, the stream waits this many quiet reads for the
/// capture threads to write the last output.
const QUIET_READS_AFTER_EXIT: u32 = 3;
/// How long a stream outlives the node's shutdown signal, to report the
/// guest's end (the node kills it first).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Forwards one job's events and output to a `run-local` client until the
/// job has ended and its output is drained. A client that goes away cancels
/// the job: nobody would see its output.
async fn stream_job(
    started: RunStarted,
    mut events: broadcast::Receiver<GuestEvent>,
    tx: mpsc::Sender<Result<String, Infallible>>,
    h: ControlHandles,
) {
    let job_id = started.job_id.clone();
    let mut stdout = Tail::new(started.dir.join("stdout"));
    let mut stderr = Tail::new(started.dir.join("stderr"));
    let mut ended: Option<StreamLine> = None;
    let mut quiet_reads = 0u32;
    let mut tick = tokio::time::interval(TAIL_EVERY);
    let grace = async {
        h.shutdown.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::pin!(grace);
    let mut lines = vec![StreamLine::Started(started)];
    loop {
        for line in lines.drain(..) {
            let Ok(mut text) = serde_json::to_string(&line) else {
                continue;
            };
            text.push('\n');
            if tx.send(Ok(text)).await.is_err() {
                if ended.is_none() {
                    h.host.cancel(job_id).await;
                }
                return;
            }
        }
        if quiet_reads >= QUIET_READS_AFTER_EXIT {
            if let Some(end) = ended.take() {
                lines.push(end);
                continue;
            }
            return;
        }
        tokio::select! {
            event = events.recv() => match event {
                Ok(e) if e.job_id == job_id.as_str() => {
                    if let GuestEventKind::Exited { exit, cause } = e.kind {
                        ended = Some(StreamLine::Exit { code: shell_code(Some(exit)), exit: Some(exit), cause });
                    }
                    lines.push(StreamLine::Event { event: e });
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => {
                    lines.push(StreamLine::Error { message: "the node stopped".into() });
                    quiet_reads = QUIET_READS_AFTER_EXIT;
                }
            },
            _ = tick.tick() => {
                let out = stdout.read_new();
                let err = stderr.read_new();
                let got = !out.is_empty() || !err.is_empty();
                if !out.is_empty() {
                    lines.push(StreamLine::Stdout { data: String::from_utf8_lossy(&out).into_owned() });
                }
                if !err.is_empty() {
                    lines.push(StreamLine::Stderr { data: String::from_utf8_lossy(&err).into_owned() });
                }
                if ended.is_some() {
                    quiet_reads = if got { 0 } else { quiet_reads + 1 };
                }
            }
            _ = &mut grace => {
                lines.push(ended.take().unwrap_or(StreamLine::Error { message: "the node shut down before the job ended".into() }));
                quiet_reads = QUIET_READS_AFTER_EXIT;
            }
        }
    }
}

/// Reads what was appended to a file since the last read.
struct Tail {
    path: PathBuf,
    file: Option<std::fs::File>,
    offset: u64,
}

/// At most this much output goes into one stream line.
const MAX_CHUNK: u64 = 64 * 1024;

impl Tail {
    fn new(path: PathBuf) -> Tail {
        Tail {
            path,
            file: None,
            offset: 0,
        }
    }

    fn read_new(&mut self) -> Vec<u8> {
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        let Some(file) = self.file.as_mut() else {
            return Vec::new();
        };
        let mut buf = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_ok() {
            let _ = file.take(MAX_CHUNK).read_to_end(&mut buf);
        }
        self.offset += buf.len() as u64;
        buf
    }
}

async fn hosts(State(h): State<ControlHandles>, ApiJson(query): ApiJson<HostsQuery>) -> Response {
    let consumer = match consumer_of(&h) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let query = crate::consumer::HostsQuery {
        at: query.at,
        window_secs: query.window_secs,
        mem_mib: query.mem_mib,
        rounds: query.rounds,
        probe: query.probe,
        all: query.all,
    };
    match consumer.hosts(query).await {
        Ok(view) => Json(HostsReport {
            pool: h.pool.as_ref().map(ToString::to_string).unwrap_or_default(),
            peer_id: view.our_peer_id.to_base58(),
            window_start_unix: view.query.window_start_unix,
            window_secs: view.query.window_secs,
            mem_mib: view.query.mem_mib,
            hosts: view
                .hosts
                .iter()
                .map(|host| {
                    let track = view.reputation.get(&host.peer).copied().unwrap_or_default();
                    HostReport {
                        valid: track.valid,
                        invalid: track.invalid,
                        streak: track.streak,
                        landed: track.landed,
                        failed: track.failed,
                        forgotten: track.forgotten,
                        floods: track.floods,
                        offences: track.offences(),
                        standing: track.standing().label().to_string(),
                        claims: track.claims,
                        brier: track.brier(),
                        log_score: track.log_score(),
                        claim_discount: track.claim_discount(),
                        reliability: ClaimBinReport::curve(&track),
                        ..HostReport::from(host)
                    }
                })
                .collect(),
            contact: h.net.as_ref().map(|n| n.reachability().contact),
            summary_cache: view.summary_cache,
            sample: view.sampled.then(|| PoolSample {
                listed: u32::try_from(view.hosts.len()).unwrap_or(u32::MAX),
                pool_estimate: view.pool_estimate.map(|(n, _)| n),
                at_least: view.pool_estimate.is_some_and(|(_, floor)| floor),
            }),
        })
        .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
