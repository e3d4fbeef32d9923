//! The composition root: builds the node's actors (`crate::node`) and the
//! adapters around them (the control API, the dashboard) and wires them
//! together. Nothing below imports this module, so the arrows only point down.
//!
//! [`run`] takes its resources — control listener, owner-load source, clock,
//! store, network, shutdown token — so tests run whole nodes in-process under
//! paused time (mini-redis `server::run(listener, shutdown)`); [`start()`] is
//! the binary's start-up that makes them from paths and config (see
//! [`start`](mod@start)). This module only connects the parts: it must not know
//! how states are defined (`model`), how the host is measured (`monitor`) or
//! how a guest is sandboxed (`guest`).

mod memory;
mod net_settings;
mod start;

pub use start::{start, store_options, Ready};

use crate::clock::Clock;
use crate::consumer::{Consumer, ConsumerHandle, ConsumerSettings};
use crate::control::server::{serve, ControlHandles, ControlSocket};
use crate::guest::{GuestConfig, GuestEvent, Supervisor, SupervisorError};
use crate::history::store::{HistoryStore, StoreError};
use crate::monitor::{Monitor, SampleError};
use crate::node::config::{self, Config};
use crate::node::host_loop::{HostHandle, HostInputs, HostLoop, HostParts};
use crate::node::paths::{LockError, PathsError};
use crate::node::pool_host::{PoolHost, PoolHostHandle, PoolHostInputs, PoolHostParts};
use crate::node::{Hardware, OwnerLoadSource};
use rand::SeedableRng;
use std::path::PathBuf;
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
    #[error(transparent)]
    PeerBook(#[from] crate::net::peer_book::BookStoreError),
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
    let stale =
        crate::node::pool_host::remote_jobs::remove_stale_remote_dirs(&supervisor.jobs_dir());
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
    // One image cache for `run-local` and peers' jobs alike.
    let images = match config.guest.images {
        crate::node::config::ImagesRule::Allow => open_image_cache(&data_dir, &config.guest),
        crate::node::config::ImagesRule::Deny => None,
    };
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
                tail_copies: config.batch.tail_copies,
                later_windows: config.batch.later_windows,
                later_unit_secs: config.batch.later_unit_secs,
            },
            tracker.clone(),
            shutdown.clone(),
        )?;
        let job_events = consumer.job_events();
        let member_news = consumer.member_news();
        let overruns = consumer.overruns();
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
            job_events,
            member_news,
            overruns,
            clock: clock.clone(),
            tracker: tracker.clone(),
            hardware,
            cache,
            jobs_dir: data_dir.join("jobs"),
            images: images.clone(),
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
            node_name: start::host_name(&config),
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
        images,
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

/// The image cache in the data dir, trimmed to its cap (which the owner
/// may have lowered since the last start; nothing runs in an image yet);
/// a node whose cache cannot be opened runs on, refusing jobs with an image.
fn open_image_cache(
    data_dir: &std::path::Path,
    guest: &crate::node::config::GuestSection,
) -> Option<std::sync::Arc<crate::image::ImageCache>> {
    let dir = crate::node::paths::images_dir(data_dir);
    match crate::image::ImageCache::open(&dir, guest.image_limits()) {
        Ok(c) => {
            match c.prune(c.cap_bytes()) {
                Ok(gone) if !gone.is_empty() => {
                    tracing::info!(
                        images = gone.len(),
                        "evicted images over [guest] image_cache_mib"
                    )
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cannot trim the image cache to its cap"),
            }
            Some(std::sync::Arc::new(c))
        }
        Err(e) => {
            tracing::warn!(error = %e, "no image cache: jobs with an image are refused");
            None
        }
    }
}
