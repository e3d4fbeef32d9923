//! `gleaner node`: the daemon. It wires the resource monitor, the history
//! store, the guest policy and supervisor, and the local control API into one
//! loop (see [`main_loop`]) and owns start-up and shutdown.
//!
//! Start-up: resolve and create the data dir, take the data-dir lock (one
//! node per data dir), write a commented config on first run, open the
//! history (which records S5 for the time the node was off), kill an orphaned
//! guest, bind the control socket (mode 0600), start the monitor, report
//! "ready". This module must not know how states are defined or predicted
//! (`model`), how the host is measured (`monitor`) or how a guest is
//! sandboxed (`guest`); it only connects them.

pub mod config;
pub mod main_loop;
pub mod paths;
pub mod pool;

use crate::clock::{Clock, SystemClock};
use crate::control::server::{serve, ControlSocket, NodeHandle};
use crate::guest::{GuestConfig, GuestEvent, Supervisor, SupervisorError};
use crate::history::store::{HistoryStore, StoreError, StoreOptions};
use crate::monitor::script::{ScriptedLoadSource, LOAD_SCRIPT_ENV};
use crate::monitor::{LoadSource, Monitor, ProcLoadSource, RawSample, SampleError};
use config::Config;
use paths::{DataDirLock, LockError, Paths, PathsError};
use rand::SeedableRng;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Why the node could not start (or stopped with an error).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Paths(#[from] PathsError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
    #[error("cannot measure the host: {0}")]
    Monitor(#[from] SampleError),
    #[error("cannot bind the control socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("network identity: {0}")]
    Identity(#[from] crate::net::identity::IdentityError),
    #[error("cannot join the pool: {0}")]
    Net(#[from] crate::net::BuildError),
}

/// What the node prints once it is ready.
#[derive(Debug, Clone, Serialize)]
pub struct Ready {
    pub pid: u32,
    pub data_dir: PathBuf,
    pub config_file: PathBuf,
    /// True when this start wrote the commented default config.
    pub config_created: bool,
    pub socket: PathBuf,
    pub host: String,
    pub tz: String,
    /// Seconds the node was off before this start (recorded as S5), if any.
    pub down_secs: Option<i64>,
    /// The pool, when networking is on.
    pub pool: Option<String>,
    /// Our peer id, when networking is on.
    pub peer_id: Option<String>,
    /// Where peers can dial us, each ending in `/p2p/<peer id>` (usable as a
    /// bootstrap address of another node).
    pub listen: Vec<String>,
    /// True when this node hosts guests for the pool.
    pub hosts_guests: bool,
}

/// The history store options the node's config implies.
pub fn store_options(config: &Config) -> StoreOptions {
    StoreOptions {
        host: Some(host_name(config)),
        tz_name: Some(tz_name(config)),
        step_secs: Some(u32::try_from(config.monitor.max_period.as_secs()).unwrap_or(u32::MAX)),
        max_gap_secs: Some(config.monitor.max_gap.as_secs()),
        ..StoreOptions::default()
    }
}

fn host_name(config: &Config) -> String {
    if let Some(host) = &config.history.host {
        return host.clone();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn tz_name(config: &Config) -> String {
    if let Some(tz) = &config.history.tz {
        return tz.clone();
    }
    jiff::tz::TimeZone::system()
        .iana_name()
        .unwrap_or("UTC")
        .to_string()
}

/// Where the node's load samples come from: `/proc`, or a script (tests).
#[derive(Debug)]
enum HostLoad {
    Proc(ProcLoadSource),
    Script(ScriptedLoadSource),
}

impl HostLoad {
    fn new() -> Result<HostLoad, SampleError> {
        match std::env::var_os(LOAD_SCRIPT_ENV).filter(|v| !v.is_empty()) {
            Some(path) => {
                tracing::warn!(script = ?path, "test hook: host load is scripted, not measured");
                Ok(HostLoad::Script(ScriptedLoadSource::from_file(
                    std::path::Path::new(&path),
                )?))
            }
            None => Ok(HostLoad::Proc(ProcLoadSource::new()?)),
        }
    }
}

impl LoadSource for HostLoad {
    fn sample(&mut self, guest_pids: &[i32]) -> Result<RawSample, SampleError> {
        match self {
            HostLoad::Proc(s) => s.sample(guest_pids),
            HostLoad::Script(s) => s.sample(guest_pids),
        }
    }
    fn guest_tree(&mut self, roots: &[i32]) -> Vec<i32> {
        match self {
            HostLoad::Proc(s) => s.guest_tree(roots),
            HostLoad::Script(s) => s.guest_tree(roots),
        }
    }
}

/// Runs the node until SIGINT or SIGTERM. `on_ready` is called once
/// everything is up (to print the paths and the "ready" line).
pub fn run(paths: &Paths, config: &Config, on_ready: impl FnOnce(&Ready)) -> Result<(), NodeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(NodeError::Runtime)?;
    runtime.block_on(run_async(paths, config, on_ready))
}

async fn run_async(
    paths: &Paths,
    config: &Config,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), NodeError> {
    // Signals are caught from the start: a SIGTERM that arrives while the node
    // is still starting (its socket already visible) must shut it down cleanly,
    // not kill it with the default action.
    let signals = ShutdownSignals::register();
    paths.create_data_dir()?;
    // The lock is taken before anything in the data dir is touched, and
    // dropped last (end of this function), after the store is closed.
    let lock = DataDirLock::acquire(paths)?;
    let config_created = config::write_default_file(&paths.config_file)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let options = store_options(config);
    let store = HistoryStore::open(&paths.history_dir(), &options, clock.unix_secs())?;
    let down_secs = store.gap_on_open().map(|g| g.until - g.from);
    if let Some(gap) = store.gap_on_open() {
        tracing::info!(
            from = gap.from,
            until = gap.until,
            "the node was off; recorded as S5"
        );
    }

    // Guest events go from the supervisor (and its capture threads) into the loop.
    let (guest_tx, guest_rx) = mpsc::unbounded_channel::<GuestEvent>();
    let sink = move |event: GuestEvent| {
        let _ = guest_tx.send(event);
    };
    let mut guest_config = GuestConfig::new(&paths.data_dir);
    guest_config.user = config.guest.user.clone();
    let supervisor = Supervisor::new(guest_config, clock.clone(), Arc::new(sink))?;

    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let socket_path = paths.socket();
    let socket = ControlSocket::bind(&socket_path).map_err(|source| NodeError::Socket {
        path: socket_path.clone(),
        source,
    })?;
    let inbox = crate::consumer::Inbox::default();
    let (net, net_rx) = if config.net.enabled {
        let (h, rx) = start_net(paths, config, &shutdown, &tracker)?;
        (Some(h), rx)
    } else {
        // A receiver whose sender is gone: the loop's net branch never fires.
        (None, mpsc::channel(1).1)
    };
    let listen = match &net {
        Some(h) => dialable_addrs(h).await,
        None => Vec::new(),
    };
    let (control_tx, control_rx) = mpsc::channel(32);
    let (events_tx, _) = broadcast::channel(256);
    let handle = NodeHandle {
        requests: control_tx,
        events: events_tx.clone(),
        tracker: tracker.clone(),
        shutdown: shutdown.clone(),
        net: net.clone(),
        inbox: inbox.clone(),
        consumer: crate::control::server::ConsumerSettings {
            max_retries: config.net.max_retries,
            max_output_bytes: config.guest.max_output_mib.saturating_mul(1 << 20),
            pool: config.net.pool.clone(),
        },
    };
    tracker.spawn(async move {
        if let Err(e) = serve(socket, handle).await {
            tracing::error!(error = %e, "the control API stopped");
        }
    });

    let (roots_tx, roots_rx) = watch::channel(Vec::new());
    let (readings_tx, readings_rx) = mpsc::channel(16);
    let monitor = Monitor::new(
        config.monitor_config(),
        HostLoad::new()?,
        SystemClock,
        rand::rngs::StdRng::from_os_rng(),
    );
    tracker.spawn(crate::monitor::run(
        monitor,
        roots_rx,
        shutdown.clone(),
        readings_tx,
    ));
    tracker.spawn(cancel_on_signal(signals, shutdown.clone()));

    on_ready(&Ready {
        pid: std::process::id(),
        data_dir: paths.data_dir.clone(),
        config_file: paths.config_file.clone(),
        config_created,
        socket: socket_path,
        host: store.meta().host.clone().unwrap_or_default(),
        tz: store.meta().tz_name.clone(),
        down_secs,
        pool: net.as_ref().map(|_| config.net.pool.clone()),
        peer_id: net.as_ref().map(|h| h.peer_id().to_base58()),
        listen,
        hosts_guests: config.guest.enabled,
    });

    let node = main_loop::Node::new(main_loop::NodeParts {
        config: config.clone(),
        data_dir: paths.data_dir.clone(),
        store,
        supervisor,
        clock,
        guest_roots: roots_tx,
        events: events_tx,
        tracker: tracker.clone(),
        net,
        inbox,
        hardware: hardware(),
    });
    node.run(main_loop::Inputs {
        readings: readings_rx,
        guest_events: guest_rx,
        control: control_rx,
        net: net_rx,
        shutdown: shutdown.clone(),
    })
    .await;

    // Shutdown, continued (the loop has killed the guest and flushed the
    // store): make sure every task sees the token, then wait for them —
    // the control server (which waits for open requests and streams), the
    // monitor and the signal listener.
    shutdown.cancel();
    tracker.close();
    if tokio::time::timeout(std::time::Duration::from_secs(5), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("some tasks did not stop within 5 s; leaving them");
    }
    tracing::info!("stopped");
    drop(lock);
    Ok(())
}

/// Starts the network task: identity from the data dir, settings from `[net]`.
fn start_net(
    paths: &Paths,
    config: &Config,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<(crate::net::NetHandle, mpsc::Receiver<crate::net::NetEvent>), NodeError> {
    let key = crate::net::identity::load_or_create(&paths.data_dir)?;
    let net_config = pool::net_config(&config.net)?;
    if net_config.mdns {
        tracing::info!("mDNS on: LAN members find this node (turn off with --no-mdns)");
    }
    let (handle, events, event_loop) = crate::net::start(key, net_config, shutdown.clone())?;
    tracker.spawn(event_loop.run());
    tracing::info!(peer = %handle.peer_id(), pool = %config.net.pool, "joined the pool");
    Ok((handle, events))
}

/// The addresses we listen on with our peer id appended, waiting briefly for
/// the listeners to come up (port 0 is resolved only then).
async fn dialable_addrs(net: &crate::net::NetHandle) -> Vec<String> {
    for _ in 0..40 {
        if let Ok(addrs) = net.listen_addrs().await {
            if !addrs.is_empty() {
                let p2p = libp2p::multiaddr::Protocol::P2p(net.peer_id());
                return addrs
                    .into_iter()
                    .map(|a| a.with(p2p.clone()).to_string())
                    .collect();
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Vec::new()
}

/// Logical CPUs, total memory and the benchmark score (a few tens of ms).
fn hardware() -> main_loop::Hardware {
    let memory_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024);
    main_loop::Hardware {
        logical_cpus: std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
        memory_mib,
        benchmark_score: crate::monitor::bench::cpu_score(),
    }
}

/// SIGINT and SIGTERM streams, registered before the node does anything else.
struct ShutdownSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn register() -> Option<ShutdownSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => Some(ShutdownSignals { int, term }),
            _ => None,
        }
    }
}

/// Cancels `shutdown` on SIGINT or SIGTERM (or when it is cancelled otherwise).
async fn cancel_on_signal(signals: Option<ShutdownSignals>, shutdown: CancellationToken) {
    let Some(ShutdownSignals { mut int, mut term }) = signals else {
        tracing::error!("cannot listen for SIGINT/SIGTERM; stop the node with SIGKILL");
        return;
    };
    tokio::select! {
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = shutdown.cancelled() => return,
    }
    shutdown.cancel();
}
