//! The binary's start-up: resolve and create the data dir, take the data-dir
//! lock (one node per data dir), write a commented config on first run, open
//! the history (which records S5 for the time the node was off), bind the
//! control socket (mode 0600), join the pool, catch SIGINT and SIGTERM, then
//! [`run`](super::run) until one arrives.

use super::{memory, run, NetResources, NodeError, NodeResources, POWER_SUPPLY_DIR};
use crate::clock::{Clock, SystemClock};
use crate::control::server::ControlSocket;
use crate::history::store::{HistoryStore, StoreOptions};
use crate::model::ids::PoolName;
use crate::node::config::{self, Config};
use crate::node::paths::{DataDirLock, Paths};
use crate::node::{hardware, OwnerLoadSource};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

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
    pub pool: Option<PoolName>,
    /// Our peer id, when networking is on.
    pub peer_id: Option<String>,
    /// Where peers can dial us, each ending in `/p2p/<peer id>` (usable as a
    /// bootstrap address of another node).
    pub listen: Vec<String>,
    /// True when this node hosts guests for the pool.
    pub hosts_guests: bool,
    /// The dashboard's URL with its access token, when it is on.
    pub dashboard: Option<String>,
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

pub(super) fn host_name(config: &Config) -> String {
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

/// Runs the node from its paths and config until SIGINT or SIGTERM.
/// `on_ready` is called once everything is up (to print the paths and the
/// "ready" line).
pub fn start(
    paths: &Paths,
    config: &Config,
    owner_load_file: Option<&Path>,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), NodeError> {
    memory::one_malloc_arena();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(NodeError::Runtime)?;
    runtime.block_on(start_async(paths, config, owner_load_file, on_ready))
}

async fn start_async(
    paths: &Paths,
    config: &Config,
    owner_load_file: Option<&Path>,
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
    let host = store.meta().host.clone().unwrap_or_default();
    let tz = store.meta().tz_name.clone();
    let shutdown = CancellationToken::new();
    let socket_path = paths.socket();
    let control = ControlSocket::bind(&socket_path).map_err(|source| NodeError::Socket {
        path: socket_path.clone(),
        source,
    })?;
    let net = if config.net.enabled {
        Some(start_net(paths, config, &shutdown)?)
    } else {
        None
    };
    let owner_load = OwnerLoadSource::new(owner_load_file)?;
    let ui = match config.ui.listen_addr()? {
        Some(addr) => Some(crate::ui::UiListener::bind(addr, &paths.data_dir)?),
        None => None,
    };
    let signal_task = tokio::spawn(cancel_on_signal(signals, shutdown.clone()));
    let give_back_task = tokio::spawn(memory::give_back_memory());
    let resources = NodeResources {
        config: config.clone(),
        data_dir: paths.data_dir.clone(),
        store,
        control,
        owner_load,
        clock: clock.clone(),
        net,
        shutdown: shutdown.clone(),
        hardware: hardware(),
        monitor_seed: u64::try_from(clock.now().as_nanosecond() & i128::from(u64::MAX))
            .unwrap_or(0),
        power_supply_dir: PathBuf::from(POWER_SUPPLY_DIR),
        ui,
    };
    let pool = config.net.pool.clone();
    let result = run(resources, |running| {
        on_ready(&Ready {
            pid: std::process::id(),
            data_dir: paths.data_dir.clone(),
            config_file: paths.config_file.clone(),
            config_created,
            socket: socket_path,
            host,
            tz,
            down_secs,
            pool: running.peer_id.as_ref().map(|_| pool),
            peer_id: running.peer_id.clone(),
            listen: running.listen.clone(),
            hosts_guests: config.guest.enabled,
            dashboard: running.dashboard.clone(),
        })
    })
    .await;
    signal_task.abort();
    give_back_task.abort();
    drop(lock);
    result
}

/// Starts the network task: identity from the data dir, settings from `[net]`.
fn start_net(
    paths: &Paths,
    config: &Config,
    shutdown: &CancellationToken,
) -> Result<NetResources, NodeError> {
    let key = crate::net::identity::load_or_create(&paths.data_dir)?;
    let mut net_config = super::net_settings::net_config(&config.net)?;
    if config.net.peer_book {
        let dir = paths.data_dir.join("peers");
        net_config.peer_book = Some(crate::net::peer_book::BookStore::open(
            &dir,
            &config.net.pool,
        )?);
    }
    if net_config.mdns {
        tracing::info!("mDNS on: LAN members find this node (turn off with --no-mdns)");
    }
    let (handle, events, event_loop) = crate::net::start(key, net_config, shutdown.clone())?;
    tracing::info!(peer = %handle.peer_id(), pool = %config.net.pool, "joined the pool");
    Ok(NetResources {
        handle,
        events,
        event_loop,
    })
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
