//! `gleaner node`, the daemon: three actors around the history store, the
//! guest supervisor and the network (see ARCHITECTURE.md for the picture).
//!
//! - the *host loop* ([`host_loop`]): store, monitor readings, supervisor, policy;
//! - the *pool host* ([`pool_host`]): peers' jobs, their event queues, output
//!   fetches, reliability answers and announcements;
//! - the *consumer* ([`crate::consumer`]): surveys, ranking, submissions.
//!
//! [`run`] takes its resources — control listener, owner-load source, clock,
//! store, network, shutdown token — so tests run whole nodes in-process under
//! paused time (mini-redis `server::run(listener, shutdown)`); [`start`] is
//! the binary's start-up that makes them from paths and config: resolve and
//! create the data dir, take the data-dir lock (one node per data dir), write
//! a commented config on first run, open the history (which records S5 for
//! the time the node was off), bind the control socket (mode 0600), join the
//! pool, then [`run`]. This module only connects the parts: it must not know
//! how states are defined (`model`), how the host is measured (`monitor`) or
//! how a guest is sandboxed (`guest`).

pub mod answer;
pub mod config;
pub mod host_loop;
pub mod paths;
pub mod pool;
pub mod pool_host;

use crate::clock::{Clock, SystemClock};
use crate::consumer::{Consumer, ConsumerHandle, ConsumerSettings};
use crate::control::server::{serve, ControlHandles, ControlSocket};
use crate::guest::{GuestConfig, GuestEvent, Supervisor, SupervisorError};
use crate::history::store::{HistoryStore, StoreError, StoreOptions};
use crate::model::ids::PoolName;
use crate::monitor::{LoadSource, Monitor, OwnerLoadReplay, ProcLoadSource, SampleError};
use config::Config;
use host_loop::{HostHandle, HostInputs, HostLoop, HostParts};
use paths::{DataDirLock, LockError, Paths, PathsError};
use pool_host::{PoolHost, PoolHostHandle, PoolHostInputs, PoolHostParts};
use rand::SeedableRng;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
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
    #[error("cannot open the batch queue: {0}")]
    Consumer(#[from] crate::consumer::ConsumerError),
    #[error(transparent)]
    Ui(#[from] crate::ui::UiError),
    #[error("cannot open the cache of peers' inputs {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
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

/// Where the owner's load comes from, as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerLoad {
    /// Measured from `/proc` (the normal case).
    Measured,
    /// Replayed from a script or trace file (`--owner-load FILE`).
    Replayed(PathBuf),
    /// Supplied by the program that embeds the node (tests).
    Supplied(String),
}

impl std::fmt::Display for OwnerLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnerLoad::Measured => f.write_str("measured on this host"),
            OwnerLoad::Replayed(path) => write!(f, "replayed from {}", path.display()),
            OwnerLoad::Supplied(what) => write!(f, "supplied: {what}"),
        }
    }
}

/// The owner's load source with what `status` says of it.
pub struct OwnerLoadSource {
    pub source: Box<dyn LoadSource + Send>,
    pub description: OwnerLoad,
}

impl OwnerLoadSource {
    /// `/proc`, or a replay of `file` when one is given.
    pub fn new(file: Option<&Path>) -> Result<OwnerLoadSource, SampleError> {
        match file {
            Some(path) => {
                tracing::warn!(file = %path.display(), "owner load is replayed from a file, not measured");
                Ok(OwnerLoadSource {
                    source: Box::new(OwnerLoadReplay::from_file(path)?),
                    description: OwnerLoad::Replayed(path.to_path_buf()),
                })
            }
            None => Ok(OwnerLoadSource {
                source: Box::new(ProcLoadSource::new()?),
                description: OwnerLoad::Measured,
            }),
        }
    }
}

/// What this host announces about its hardware.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hardware {
    pub logical_cpus: u32,
    pub memory_mib: u64,
    /// Score of the built-in CPU benchmark.
    pub benchmark_score: u64,
}

/// The pool, when the node joins one: the handle and events of a started
/// network task and the task itself, for [`run`] to own.
pub struct NetResources {
    pub handle: crate::net::NetHandle,
    pub events: mpsc::Receiver<crate::net::NetEvent>,
    pub event_loop: crate::net::EventLoop,
}

/// Everything a node runs on. The caller makes these, so a test can hand in
/// a temp-dir store, a replayed load, a clock that follows paused time and a
/// socket in a temp dir.
pub struct NodeResources {
    pub config: Config,
    pub data_dir: PathBuf,
    pub store: HistoryStore,
    pub control: ControlSocket,
    pub owner_load: OwnerLoadSource,
    pub clock: Arc<dyn Clock>,
    pub net: Option<NetResources>,
    /// Cancelled to stop the node; [`run`] returns once it has stopped.
    pub shutdown: CancellationToken,
    pub hardware: Hardware,
    /// Seed of the monitor's random extra samples.
    pub monitor_seed: u64,
    /// The Linux power supply class, for `[owner] on_battery`
    /// ([`POWER_SUPPLY_DIR`]; tests lay out a fake one).
    pub power_supply_dir: PathBuf,
    /// The web dashboard's listener, when it is on.
    pub ui: Option<crate::ui::UiListener>,
}

/// Where Linux describes the machine's power supplies.
pub const POWER_SUPPLY_DIR: &str = "/sys/class/power_supply";

/// The running node's handles, given to `on_ready` (tests drive the actors
/// through them; the binary prints its "ready" line).
#[derive(Debug, Clone)]
pub struct Running {
    pub host: HostHandle,
    pub pool_host: Option<PoolHostHandle>,
    pub consumer: Option<ConsumerHandle>,
    /// Where peers can dial us, each ending in `/p2p/<peer id>`.
    pub listen: Vec<String>,
    pub peer_id: Option<String>,
    /// The dashboard's URL with its token, when it is on.
    pub dashboard: Option<String>,
}

/// Runs a node on `resources` until `resources.shutdown` is cancelled, then
/// stops it in order (see the end of this function).
pub async fn run(
    resources: NodeResources,
    on_ready: impl FnOnce(&Running),
) -> Result<(), NodeError> {
    let NodeResources {
        config,
        data_dir,
        store,
        control,
        owner_load,
        clock,
        net,
        shutdown,
        hardware,
        monitor_seed,
        power_supply_dir,
        ui,
    } = resources;
    let tracker = TaskTracker::new();

    // Guest events go from the supervisor (and its capture threads) into the host loop.
    let (guest_tx, guest_rx) = mpsc::unbounded_channel::<GuestEvent>();
    let sink = move |event: GuestEvent| {
        let _ = guest_tx.send(event);
    };
    let mut guest_config = GuestConfig::new(&data_dir);
    guest_config.user = config.guest.user.clone();
    guest_config.disk_mib = config.guest.disk_mib;
    guest_config.job_cgroups = config.guest.job_cgroups;
    guest_config.cpu_limit_percent = config.guest.cpu_limit_percent;
    let supervisor = Supervisor::new(guest_config, clock.clone(), Arc::new(sink))?;
    let stale = pool::remove_stale_remote_dirs(&supervisor.jobs_dir());
    if stale > 0 {
        tracing::info!(
            stale,
            "removed peers' job directories left by an earlier run"
        );
    }

    let (to_pool, pool_guest_events) = match net {
        Some(_) => {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let (roots_tx, roots_rx) = watch::channel(crate::procfs::ProcessScope::Nothing);
    let (host, host_handle) = HostLoop::new(HostParts {
        config: config.clone(),
        data_dir: data_dir.clone(),
        store,
        supervisor,
        clock: clock.clone(),
        guest_roots: roots_tx,
        tracker: tracker.clone(),
        to_pool,
        owner_load: owner_load.description.clone(),
        power_supply_dir,
    });

    let mut running = Running {
        host: host_handle.clone(),
        pool_host: None,
        consumer: None,
        listen: Vec::new(),
        peer_id: None,
        dashboard: ui.as_ref().map(crate::ui::UiListener::url),
    };
    let net_handle = net.as_ref().map(|n| n.handle.clone());
    if let (Some(net), Some(pool_guest_events)) = (net, pool_guest_events) {
        let NetResources {
            handle,
            events,
            event_loop,
        } = net;
        tracker.spawn(event_loop.run());
        let (consumer, consumer_handle) = Consumer::new(
            handle.clone(),
            clock.clone(),
            ConsumerSettings {
                max_retries: config.net.max_retries,
                max_output_bytes: config.guest.max_output_mib.saturating_mul(1 << 20),
                batch_dir: data_dir.join("batches"),
            },
            tracker.clone(),
            shutdown.clone(),
        )?;
        tracker.spawn(consumer.run());
        let cache_dir = data_dir.join("cache");
        let cache =
            crate::data::Cache::open(&cache_dir, config.guest.cache_mib.saturating_mul(1 << 20))
                .map_err(|source| NodeError::Cache {
                    path: cache_dir,
                    source,
                })?;
        let (pool_host, pool_handle) = PoolHost::new(PoolHostParts {
            config: config.clone(),
            net: handle.clone(),
            host: host_handle.clone(),
            consumer: consumer_handle.clone(),
            clock: clock.clone(),
            tracker: tracker.clone(),
            hardware,
            cache,
            jobs_dir: data_dir.join("jobs"),
        });
        tracker.spawn(pool_host.run(PoolHostInputs {
            net: events,
            guest_events: pool_guest_events,
            shutdown: shutdown.clone(),
        }));
        running.listen = dialable_addrs(&handle).await;
        running.peer_id = Some(handle.peer_id().to_base58());
        running.pool_host = Some(pool_handle);
        running.consumer = Some(consumer_handle);
    }

    if let Some(listener) = ui {
        let handles = crate::ui::UiHandles {
            host: host_handle.clone(),
            consumer: running.consumer.clone(),
            node_name: host_name(&config),
            tracker: tracker.clone(),
            shutdown: shutdown.clone(),
        };
        tracing::info!(addr = %listener.addr(), "the dashboard is up");
        tracker.spawn(async move {
            if let Err(e) = crate::ui::serve(listener, handles).await {
                tracing::error!(error = %e, "the dashboard stopped");
            }
        });
    }

    let handles = ControlHandles {
        host: host_handle,
        consumer: running.consumer.clone(),
        pool: running.peer_id.as_ref().map(|_| config.net.pool.clone()),
        peer_id: running.peer_id.clone(),
        net: net_handle,
        tracker: tracker.clone(),
        shutdown: shutdown.clone(),
    };
    tracker.spawn(async move {
        if let Err(e) = serve(control, handles).await {
            tracing::error!(error = %e, "the control API stopped");
        }
    });

    let (readings_tx, readings_rx) = mpsc::channel(16);
    let monitor = Monitor::new(
        config.monitor_config(),
        owner_load.source,
        clock.clone(),
        rand::rngs::StdRng::seed_from_u64(monitor_seed),
    );
    tracker.spawn(crate::monitor::run(
        monitor,
        roots_rx,
        shutdown.clone(),
        readings_tx,
    ));

    on_ready(&running);
    drop(running);

    host.run(HostInputs {
        readings: readings_rx,
        guest_events: guest_rx,
        shutdown: shutdown.clone(),
    })
    .await;

    // Shutdown, continued (the host loop has killed the guest and flushed
    // the store): make sure every task sees the token, then wait for them —
    // the control server (which waits for open requests and streams), the
    // pool host, the consumer, the network task and the monitor.
    shutdown.cancel();
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(5), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("some tasks did not stop within 5 s; leaving them");
    }
    tracing::info!("stopped");
    Ok(())
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
    let net_config = pool::net_config(&config.net)?;
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
pub fn hardware() -> Hardware {
    let memory_mib = crate::procfs::read_meminfo().map_or(0, |m| m.total_kib / 1024);
    Hardware {
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
