//! The control API server: an axum router on a Unix socket that forwards
//! each request to the node loop as a [`ControlRequest`] and waits for the
//! reply, plus the `run-local` stream (job events and output as JSON Lines).
//!
//! This module owns the socket (created mode 0600, removed on drop), the
//! routes and the mapping of errors to HTTP statuses. It must not know how
//! the node answers: it holds only a channel to the loop and a broadcast
//! receiver of guest events.

use super::api::{
    shell_code, ApiError, HostsQuery, HostsReport, PauseRequest, PredictQuery, RunLocalRequest,
    RunStarted, StreamLine, SubmitLine, SubmitRequest, PREFIX,
};
use super::ControlRequest;
use crate::guest::{GuestEvent, GuestEventKind};
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What every handler needs: the way to the node loop.
#[derive(Debug, Clone)]
pub struct NodeHandle {
    /// Requests to the node loop.
    pub requests: mpsc::Sender<ControlRequest>,
    /// Guest events as the node records them, for `run-local` streams.
    pub events: broadcast::Sender<GuestEvent>,
    /// Owner of the stream tasks, so shutdown waits for them.
    pub tracker: TaskTracker,
    /// Cancelled when the node shuts down.
    pub shutdown: CancellationToken,
    /// The pool, when networking is on (`hosts` and `submit` need it).
    pub net: Option<crate::net::NetHandle>,
    /// Where hosts' job events reach the submit tasks.
    pub inbox: crate::consumer::Inbox,
    pub consumer: ConsumerSettings,
}

/// What `submit` takes from the node's config.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub max_retries: u32,
    /// Largest output brought back, bytes.
    pub max_output_bytes: u64,
    pub pool: String,
}

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
pub async fn serve(mut socket: ControlSocket, handle: NodeHandle) -> std::io::Result<()> {
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

/// The largest trace `history import` takes through the socket (axum's
/// default of 2 MB is a few weeks of samples); bigger files can be imported
/// while the node is stopped.
const MAX_IMPORT_BYTES: usize = 256 << 20;

/// The largest `submit` body: the inputs travel inline (base64) and must fit
/// the job protocol's frame once decoded.
const MAX_SUBMIT_BYTES: usize =
    (crate::net::protocol::JOB_REQUEST_CAP as usize) * 4 / 3 + 64 * 1024;

/// The routes, separate from the socket so tests can call them directly.
pub fn router(handle: NodeHandle) -> Router {
    Router::new()
        .route(&format!("{PREFIX}/status"), get(status))
        .route(&format!("{PREFIX}/pause"), post(pause))
        .route(&format!("{PREFIX}/resume"), post(resume))
        .route(&format!("{PREFIX}/predict"), post(predict))
        .route(&format!("{PREFIX}/run"), post(run_local))
        .route(&format!("{PREFIX}/hosts"), post(hosts))
        .route(
            &format!("{PREFIX}/submit"),
            post(submit).layer(DefaultBodyLimit::max(MAX_SUBMIT_BYTES)),
        )
        .route(&format!("{PREFIX}/history/export"), get(export))
        .route(
            &format!("{PREFIX}/history/import"),
            post(import).layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES)),
        )
        .with_state(handle)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self)).into_response()
    }
}

/// Sends a request to the node loop and waits for its answer.
async fn ask<T>(
    h: &NodeHandle,
    make: impl FnOnce(oneshot::Sender<T>) -> ControlRequest,
) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    h.requests
        .send(make(tx))
        .await
        .map_err(|_| ApiError::unavailable())?;
    rx.await.map_err(|_| ApiError::unavailable())
}

async fn status(State(h): State<NodeHandle>) -> Response {
    match ask(&h, |reply| ControlRequest::Status { reply }).await {
        Ok(mut report) => {
            // Read from the network task's snapshot, not the node loop.
            report.network = h.net.as_ref().map(crate::net::NetHandle::reachability);
            Json(report).into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn pause(State(h): State<NodeHandle>, Json(req): Json<PauseRequest>) -> Response {
    let answer = ask(&h, |reply| ControlRequest::Pause {
        for_secs: req.for_secs,
        reply,
    })
    .await;
    json_result(answer.and_then(|r| r))
}

async fn resume(State(h): State<NodeHandle>) -> Response {
    let answer = ask(&h, |reply| ControlRequest::Resume { reply }).await;
    json_result(answer.and_then(|r| r))
}

async fn predict(State(h): State<NodeHandle>, Json(query): Json<PredictQuery>) -> Response {
    let answer = ask(&h, |reply| ControlRequest::Predict { query, reply }).await;
    json_result(answer.and_then(|r| r))
}

async fn export(State(h): State<NodeHandle>) -> Response {
    match ask(&h, |reply| ControlRequest::Export { reply })
        .await
        .and_then(|r| r)
    {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn import(State(h): State<NodeHandle>, text: String) -> Response {
    let answer = ask(&h, |reply| ControlRequest::Import { text, reply }).await;
    json_result(answer.and_then(|r| r))
}

fn json_result<T: serde::Serialize>(r: Result<T, ApiError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn run_local(State(h): State<NodeHandle>, Json(request): Json<RunLocalRequest>) -> Response {
    // Subscribe before the job starts so that no event of it is missed.
    let events = h.events.subscribe();
    let started = match ask(&h, |reply| ControlRequest::RunLocal { request, reply })
        .await
        .and_then(|r| r)
    {
        Ok(s) => s,
        Err(e) => return e.into_response(),
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
    h: NodeHandle,
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
                    let _ = h.requests.send(ControlRequest::Cancel { job_id }).await;
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
                Ok(e) if e.job_id == job_id => {
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

fn pool_of(h: &NodeHandle) -> Result<crate::net::NetHandle, ApiError> {
    h.net.clone().ok_or_else(|| {
        ApiError::conflict("this node is not in a pool ([net] enabled = false or --no-net)")
    })
}

async fn hosts(State(h): State<NodeHandle>, Json(query): Json<HostsQuery>) -> Response {
    let net = match pool_of(&h) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    let survey = crate::consumer::survey::SurveyQuery {
        window_start_unix: query
            .at
            .unwrap_or_else(|| jiff::Timestamp::now().as_second()),
        window_secs: query.window_secs.max(1),
        mem_mib: query.mem_mib,
        rounds: query.rounds.clamp(1, 100_000),
    };
    match crate::consumer::survey::survey(&net, survey).await {
        Ok(mut hosts) => {
            let exclude = std::collections::HashSet::new();
            let order: Vec<String> = crate::consumer::rank::rank(&hosts, &exclude)
                .iter()
                .map(|r| r.peer.clone())
                .collect();
            // Ranked hosts first in rank order, then the rest by peer id.
            hosts.sort_by_key(|r| {
                (
                    order
                        .iter()
                        .position(|p| *p == r.peer)
                        .unwrap_or(usize::MAX),
                    r.peer.clone(),
                )
            });
            Json(HostsReport {
                pool: h.consumer.pool.clone(),
                peer_id: net.peer_id().to_base58(),
                window_start_unix: survey.window_start_unix,
                window_secs: survey.window_secs,
                mem_mib: survey.mem_mib,
                hosts,
            })
            .into_response()
        }
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

async fn submit(State(h): State<NodeHandle>, Json(request): Json<SubmitRequest>) -> Response {
    let net = match pool_of(&h) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    if request.argv.is_empty() {
        return ApiError::bad_request("the command line is empty").into_response();
    }
    let (lines_tx, mut lines_rx) = mpsc::channel::<SubmitLine>(64);
    let (tx, rx) = mpsc::channel::<Result<String, Infallible>>(64);
    let settings = crate::consumer::job::JobSettings {
        max_retries: h.consumer.max_retries,
        max_output_bytes: h.consumer.max_output_bytes,
        ..crate::consumer::job::JobSettings::default()
    };
    let base_id = format!(
        "{}-{}",
        jiff::Timestamp::now().as_second(),
        rand::random::<u32>()
    );
    let inbox = h.inbox.clone();
    let shutdown = h.shutdown.clone();
    h.tracker.spawn(async move {
        let job = crate::consumer::job::run_job(
            &net,
            &inbox,
            &base_id,
            &request,
            settings,
            || jiff::Timestamp::now().as_second(),
            lines_tx,
        );
        tokio::select! {
            _ = job => {}
            _ = shutdown.cancelled() => {}
        }
    });
    h.tracker.spawn(async move {
        while let Some(line) = lines_rx.recv().await {
            let Ok(mut text) = serde_json::to_string(&line) else {
                continue;
            };
            text.push('\n');
            if tx.send(Ok(text)).await.is_err() {
                return;
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "application/jsonl")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}
