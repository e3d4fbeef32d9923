//! A whole node run inside the test's own tokio runtime: `daemon::run` with
//! the resources a test chooses (its config, a replayed owner load, a clock
//! that may follow paused tokio time, a network or none, a power-supply
//! folder), a real sled store and a real control socket in the test's
//! directory. Shared by the in-process tests so each says only what differs.

use gleaner::clock::Clock;
use gleaner::control::server::ControlSocket;
use gleaner::daemon::{run, NetResources, NodeResources};
use gleaner::history::store::HistoryStore;
use gleaner::monitor::OwnerLoadReplay;
use gleaner::node::config::Config;
use gleaner::node::host_loop::HostHandle;
use gleaner::node::{Hardware, OwnerLoad, OwnerLoadSource};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a test node starts with. [`NodeSetup::new`] gives a light owner,
/// no network and an empty power-supply folder; set the rest by field.
pub struct NodeSetup {
    pub dir: PathBuf,
    pub config: Config,
    pub clock: Arc<dyn Clock>,
    /// The owner's load, `secs cpu free_mib` lines.
    pub owner_script: String,
    pub net: Option<NetResources>,
    pub power_supply_dir: PathBuf,
    /// Cancels the node (and a network started with it).
    pub shutdown: CancellationToken,
}

impl NodeSetup {
    pub fn new(dir: &Path, config: Config, clock: Arc<dyn Clock>) -> NodeSetup {
        NodeSetup {
            dir: dir.to_path_buf(),
            config,
            clock,
            owner_script: "0 5 8000\n".into(),
            net: None,
            power_supply_dir: dir.join("no-power-supply"),
            shutdown: CancellationToken::new(),
        }
    }

    /// Starts the node on this runtime and waits until it is ready.
    pub async fn start(self) -> Node {
        let store = HistoryStore::open(
            &self.dir.join("history"),
            &gleaner::daemon::store_options(&self.config),
            self.clock.unix_secs(),
        )
        .expect("store");
        let control = ControlSocket::bind(&self.dir.join("control.sock")).expect("socket");
        let replay =
            OwnerLoadReplay::parse(&self.owner_script, Path::new("script")).expect("script");
        let shutdown = self.shutdown;
        let resources = NodeResources {
            config: self.config,
            data_dir: self.dir,
            store,
            control,
            owner_load: OwnerLoadSource {
                source: Box::new(replay),
                description: OwnerLoad::Supplied("the test's script".into()),
            },
            clock: self.clock,
            net: self.net,
            shutdown: shutdown.clone(),
            hardware: Hardware::default(),
            monitor_seed: 7,
            power_supply_dir: self.power_supply_dir,
            ui: None,
        };
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            run(resources, move |running| {
                if let Some(tx) = ready_tx.take() {
                    let _ = tx.send(running.host.clone());
                }
            })
            .await
            .expect("node runs");
        });
        let host = ready_rx.await.expect("node ready");
        Node {
            host,
            shutdown,
            task,
        }
    }
}

/// A node running in this runtime; [`Node::stop`] stops it and waits.
pub struct Node {
    pub host: HostHandle,
    pub shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("node task");
    }
}
