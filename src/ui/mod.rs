//! The owner's web dashboard: a few server-rendered pages on a loopback
//! TCP address, behind a random token (Syncthing, kubo and Jupyter do the
//! same), over the same actor handles the control API uses.
//!
//! This module owns the dashboard's listener, its token file
//! (`dashboard-token` in the data dir, mode 0600, created once), the
//! routes, and the rendering: [`guard`] decides who may do what, [`pages`]
//! writes HTML, [`svg`] draws, [`week`] reads the week of availability off
//! the history. It must not know how the node answers: it asks the host
//! loop and the consumer through their handles, like `control::server`,
//! and nothing of HTML travels past it. Anything that takes more than a
//! moment (the 24-hour reliability curves, the week) runs as tracked tasks
//! or on the blocking pool, never on an actor's loop.

pub mod guard;
pub mod pages;
pub mod svg;
pub mod week;

use crate::consumer::ConsumerHandle;
use crate::node::host_loop::{HostHandle, PredictQuery};
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use guard::{Access, Guard, Refusal, RequestFacts};
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The token file's name in the data dir.
pub const TOKEN_FILE: &str = "dashboard-token";

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("dashboard token file {path}: {source}")]
    Token {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("dashboard token file {path} does not hold a token (64 hex digits); delete it to make a new one")]
    BadToken { path: PathBuf },
    #[error("cannot listen for the dashboard on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Reads the token in `data_dir`, or makes one (32 random bytes as hex)
/// in a new file of mode 0600. An existing file open to others is narrowed
/// to 0600 with a warning.
pub fn load_or_create_token(data_dir: &Path) -> Result<String, UiError> {
    let path = data_dir.join(TOKEN_FILE);
    let err = |source| UiError::Token {
        path: path.clone(),
        source,
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut file) => {
            let mut bytes = [0u8; 32];
            rand::Rng::fill(&mut rand::rng(), &mut bytes[..]);
            let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            file.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(err)?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::metadata(&path).map_err(err)?;
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(file = %path.display(), "the dashboard token file was readable by others; narrowing it to 0600");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(err)?;
            }
            let text =
                crate::fsutil::read_to_string_bounded(&path, 1024).map_err(|e| UiError::Token {
                    path: path.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
            let token = text.trim();
            if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(UiError::BadToken { path });
            }
            Ok(token.to_ascii_lowercase())
        }
        Err(e) => Err(err(e)),
    }
}

/// The bound dashboard: its listener, address and token.
#[derive(Debug)]
pub struct UiListener {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    token: String,
}

impl UiListener {
    /// Binds `addr` (loopback; the config checked it) with the token of
    /// `data_dir`. A busy port falls back to a free one on the same address,
    /// with a warning: the printed URL is the one to use. Call within the
    /// runtime.
    pub fn bind(addr: SocketAddr, data_dir: &Path) -> Result<UiListener, UiError> {
        let token = load_or_create_token(data_dir)?;
        let std_listener = match std::net::TcpListener::bind(addr) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && addr.port() != 0 => {
                tracing::warn!(%addr, "the dashboard's port is taken; using a free one");
                std::net::TcpListener::bind(SocketAddr::new(addr.ip(), 0))
            }
            other => other,
        }
        .map_err(|source| UiError::Bind { addr, source })?;
        let bound = std_listener
            .local_addr()
            .and_then(|a| std_listener.set_nonblocking(true).map(|()| a))
            .and_then(|a| tokio::net::TcpListener::from_std(std_listener).map(|l| (l, a)));
        let (listener, addr) = bound.map_err(|source| UiError::Bind { addr, source })?;
        Ok(UiListener {
            listener,
            addr,
            token,
        })
    }

    /// The address the dashboard listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to open: the address with the token.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.token)
    }
}

/// What the dashboard reads and acts on: the same handles as the control API.
#[derive(Debug, Clone)]
pub struct UiHandles {
    pub host: HostHandle,
    /// The consumer, when the node is in a pool (the pool and batch pages).
    pub consumer: Option<ConsumerHandle>,
    /// The host's name, shown in the title.
    pub node_name: String,
    /// Owner of the dashboard's background work.
    pub tracker: TaskTracker,
    pub shutdown: CancellationToken,
}

struct UiState {
    guard: Guard,
    handles: UiHandles,
    /// The last reliability curves and when they were made: a reload within
    /// [`CURVES_FRESH`] does not ask for 39 more predictions.
    curves: Mutex<Option<(Instant, Curves)>>,
}

type Shared = Arc<UiState>;

/// The reliability curves, or why there are none.
type Curves = Result<Vec<svg::Curve>, String>;

/// Serves the dashboard until `handles.shutdown` is cancelled.
pub async fn serve(listener: UiListener, handles: UiHandles) -> std::io::Result<()> {
    let shutdown = handles.shutdown.clone();
    let app = router(Guard::new(&listener.token, listener.addr), handles);
    axum::serve(listener.listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// The routes, behind the guard.
pub fn router(guard: Guard, handles: UiHandles) -> Router {
    let state: Shared = Arc::new(UiState {
        guard,
        handles,
        curves: Mutex::new(None),
    });
    Router::new()
        .route("/", get(now))
        .route("/live", get(live))
        .route("/reliability", get(reliability))
        .route("/week", get(week_page))
        .route("/jobs", get(jobs))
        .route("/hosts", get(hosts))
        .route("/batches", get(batches))
        .route("/action/pause", post(pause))
        .route("/action/resume", post(resume))
        .route("/action/finish", post(finish))
        .layer(axum::middleware::from_fn_with_state(state.clone(), check))
        // The script holds no secret; it is checked for Host only.
        .route("/app.js", get(app_js))
        .layer(axum::middleware::from_fn_with_state(state.clone(), headers))
        .with_state(state)
}

/// The guard over every page and action.
async fn check(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let query_token = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")));
    let facts = RequestFacts {
        action: req.method() == axum::http::Method::POST,
        host: text(header::HOST),
        origin: text(header::ORIGIN),
        cookie: text(header::COOKIE),
        query_token,
    };
    match s.guard.check(&facts) {
        Ok(Access::Cookie) => next.run(req).await,
        Ok(Access::Url) => {
            // Into a cookie, and out of the address bar.
            let path = req.uri().path().to_string();
            let mut r = Redirect::to(&path).into_response();
            if let Ok(v) = HeaderValue::from_str(&s.guard.set_cookie()) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(refusal) => refuse(refusal),
    }
}

fn refuse(refusal: Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        pages::refused(&refusal.to_string()),
    )
        .into_response()
}

/// Headers every answer carries: no framing, no caching, scripts only from
/// here, no referrer to other origins. (Not `no-referrer`: under it Chromium
/// sends `Origin: null` with our own forms, which the guard must refuse.)
async fn headers(State(s): State<Shared>, req: Request, next: Next) -> Response {
    // The Host check applies to the script too (and to unknown paths).
    let host_ok = s
        .guard
        .check(&RequestFacts {
            host: req
                .headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok()),
            ..RequestFacts::default()
        })
        .map_or_else(|e| e != Refusal::Host, |_| true);
    let mut r = if host_ok {
        next.run(req).await
    } else {
        refuse(Refusal::Host)
    };
    let h = r.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

/// The dashboard's one script: refreshes the live part of the "now" page.
const APP_JS: &str = r#"// Gleaner dashboard: refresh the live part of the page every 2 s.
(function () {
  var live = document.getElementById('live');
  if (!live || !live.dataset.refresh) return;
  function tick() {
    fetch(live.dataset.refresh, { credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) {
        if (!r.ok) throw new Error('the node answered ' + r.status);
        return r.text();
      })
      .then(function (html) { live.innerHTML = html; live.dataset.error = ''; })
      .catch(function (e) { live.dataset.error = String(e); });
  }
  setInterval(tick, 2000);
})();
"#;

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

fn html(s: &UiState, here: &str, body: &str) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        pages::layout(here, &s.handles.node_name, body),
    )
        .into_response()
}

async fn now(State(s): State<Shared>) -> Response {
    let body = match s.handles.host.status().await {
        Ok(status) => pages::now_page(&status, s.guard.csrf()),
        Err(e) => pages::error_block("cannot read the node's status", &e.to_string()),
    };
    html(&s, "/", &body)
}

async fn live(State(s): State<Shared>) -> Response {
    match s.handles.host.status().await {
        Ok(status) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            pages::now_live(&status),
        )
            .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// An action's form: only the CSRF token.
#[derive(Debug, serde::Deserialize)]
struct ActionForm {
    csrf: Option<String>,
}

async fn pause(State(s): State<Shared>, form: Result<Form<ActionForm>, FormRejection>) -> Response {
    act(&s, form, |h| async move { h.pause(None).await.map(|_| ()) }).await
}

/// Folding@home's "Finish": the running guest ends on its own, then the
/// node pauses (`gleaner pause --after-job`).
async fn finish(
    State(s): State<Shared>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    act(&s, form, |h| async move {
        h.pause_after_job(None).await.map(|_| ())
    })
    .await
}

async fn resume(
    State(s): State<Shared>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    act(&s, form, |h| async move { h.resume().await.map(|_| ()) }).await
}

/// Checks the CSRF token, acts, and sends the browser back to "now".
async fn act<F, Fut>(
    s: &UiState,
    form: Result<Form<ActionForm>, FormRejection>,
    action: F,
) -> Response
where
    F: FnOnce(HostHandle) -> Fut,
    Fut: std::future::Future<Output = Result<(), crate::node::host_loop::HostError>>,
{
    let csrf = form.as_ref().ok().and_then(|f| f.csrf.as_deref());
    if let Err(refusal) = s.guard.check_csrf(csrf) {
        return refuse(refusal);
    }
    match action(s.handles.host.clone()).await {
        Ok(()) => Redirect::to("/").into_response(),
        Err(e) => (
            StatusCode::CONFLICT,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            pages::layout(
                "/",
                &s.handles.node_name,
                &pages::error_block("the node refused", &e.to_string()),
            ),
        )
            .into_response(),
    }
}

/// The job lengths the reliability page draws, seconds.
pub const CURVE_JOBS_SECS: [u64; 3] = [3600, 4 * 3600, 12 * 3600];
/// Start times every this many hours over the next 24.
const CURVE_STEP_HOURS: u32 = 2;
/// How long a set of curves is reused.
const CURVES_FRESH: Duration = Duration::from_secs(60);
/// Most predictions asked of the host loop at once.
const CURVE_CONCURRENCY: usize = 3;

/// TR for each job length at each start over the next 24 hours, from the
/// same predictions `/v1/predict` gives (solved off the loop by the host).
async fn curves(h: &HostHandle) -> Curves {
    use futures::StreamExt;
    let now = h.status().await.map_err(|e| e.to_string())?.now;
    let asks: Vec<(usize, f64, PredictQuery)> = CURVE_JOBS_SECS
        .iter()
        .enumerate()
        .flat_map(|(i, &window_secs)| {
            (0..=24 / CURVE_STEP_HOURS).map(move |k| {
                let hours = f64::from(k * CURVE_STEP_HOURS);
                let query = PredictQuery {
                    window_secs,
                    at: Some(now + i64::from(k * CURVE_STEP_HOURS) * 3600),
                    mem_mib: 0,
                    method: None,
                    days: None,
                    step_secs: None,
                };
                (i, hours, query)
            })
        })
        .collect();
    let answers: Vec<(usize, f64, Result<f64, String>)> = futures::stream::iter(asks)
        .map(|(i, hours, q)| async move {
            (
                i,
                hours,
                h.reader()
                    .predict(q)
                    .await
                    .map(|r| r.tr)
                    .map_err(|e| e.to_string()),
            )
        })
        .buffered(CURVE_CONCURRENCY)
        .collect()
        .await;
    if answers.iter().all(|(_, _, a)| a.is_err()) {
        let why = answers
            .into_iter()
            .find_map(|(_, _, a)| a.err())
            .unwrap_or_default();
        return Err(why);
    }
    let mut out: Vec<svg::Curve> = CURVE_JOBS_SECS
        .iter()
        .map(|&w| svg::Curve {
            label: format!("{} job", crate::human::duration(w)),
            points: Vec::new(),
        })
        .collect();
    for (i, hours, a) in answers {
        out[i].points.push((hours, a.ok()));
    }
    Ok(out)
}

async fn reliability(State(s): State<Shared>) -> Response {
    let cached = s
        .curves
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .filter(|(at, _)| at.elapsed() < CURVES_FRESH)
        .map(|(_, c)| c.clone());
    let result = match cached {
        Some(c) => c,
        None => {
            let c = curves(&s.handles.host).await;
            *s.curves
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((Instant::now(), c.clone()));
            c
        }
    };
    let mut body = String::from(
        "<h1>Reliability of the next 24 hours</h1><p>The probability that a guest job started at each hour runs to its end without a failure (S3, S4, S5), by job length, as this node predicts it from its own history.</p>",
    );
    match result {
        Ok(c) => body.push_str(&svg::reliability_chart(&c, 24.0)),
        Err(e) => body.push_str(&pages::error_block("no prediction yet", &e)),
    }
    html(&s, "/reliability", &body)
}

async fn week_page(State(s): State<Shared>) -> Response {
    let mut body = format!(
        "<h1>A week of availability</h1><p>Share of the time the host could run a guest (S1 or S2), by weekday and hour, over the last {} weeks of its history.</p>",
        week::WEEKS
    );
    match s.handles.host.reader().history().await {
        Ok(view) => {
            let task = s.handles.tracker.spawn_blocking(move || {
                week::availability(&view.series, view.thresholds, view.now)
            });
            match task.await {
                Ok(grid) => body.push_str(&svg::week_heatmap(&grid)),
                Err(e) => {
                    body.push_str(&pages::error_block("cannot draw the week", &e.to_string()))
                }
            }
        }
        Err(e) => body.push_str(&pages::error_block(
            "cannot read the history",
            &e.to_string(),
        )),
    }
    html(&s, "/week", &body)
}

/// Job-log events the page shows.
const JOB_LOG_ROWS: usize = 200;

async fn jobs(State(s): State<Shared>) -> Response {
    let body = match s.handles.host.job_log(JOB_LOG_ROWS).await {
        Ok(events) => pages::jobs_page(&events),
        Err(e) => pages::error_block("cannot read the job log", &e.to_string()),
    };
    html(&s, "/jobs", &body)
}

/// How long the pool page waits for the consumer's survey.
const SURVEY_WAIT: Duration = Duration::from_secs(15);

async fn hosts(State(s): State<Shared>) -> Response {
    let mut body = String::from("<h1>The pool's hosts</h1>");
    match &s.handles.consumer {
        None => body.push_str("<p>This node is not in a pool (<code>--no-net</code>).</p>"),
        Some(c) => {
            let query = crate::consumer::HostsQuery {
                at: None,
                window_secs: 3600,
                mem_mib: 0,
                rounds: 1,
                probe: false,
                // A large pool's page shows a sample: a page view must not
                // cost the node the whole pool.
                all: false,
            };
            match tokio::time::timeout(SURVEY_WAIT, c.hosts(query)).await {
                Ok(Ok(view)) => {
                    if view.sampled {
                        body.push_str(
                            "<p>A sample of a large pool (<code>gleaner hosts --all</code> lists every host).</p>",
                        );
                    }
                    body.push_str(&pages::hosts_table(&view.hosts));
                }
                Ok(Err(e)) => {
                    body.push_str(&pages::error_block("the survey failed", &e.to_string()))
                }
                Err(_) => body.push_str(&pages::error_block(
                    "the survey failed",
                    "no answer within 15 s",
                )),
            }
        }
    }
    html(&s, "/hosts", &body)
}

async fn batches(State(s): State<Shared>) -> Response {
    let mut body = String::from("<h1>Batches</h1>");
    match &s.handles.consumer {
        None => body.push_str("<p>This node is not in a pool (<code>--no-net</code>).</p>"),
        Some(c) => match c.batches().await {
            Ok(b) => body.push_str(&pages::batches_table(&b)),
            Err(e) => body.push_str(&pages::error_block("cannot list batches", &e.to_string())),
        },
    }
    html(&s, "/batches", &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create_token(dir.path()).unwrap();
        assert_eq!(a.len(), 64);
        let mode = std::fs::metadata(dir.path().join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create_token(dir.path()).unwrap(), a);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(load_or_create_token(other.path()).unwrap(), a);
    }

    #[test]
    fn a_token_file_open_to_others_is_narrowed_and_a_bad_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load_or_create_token(dir.path()).unwrap(), "ab".repeat(32));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(&path, "not a token").unwrap();
        let e = load_or_create_token(dir.path()).unwrap_err().to_string();
        assert!(e.contains(TOKEN_FILE), "{e}");
    }
}
