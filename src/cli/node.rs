//! `gleaner node` (the daemon) and `gleaner config` (its configuration).
//!
//! This module resolves paths and the config with the documented
//! precedence (flags > environment > file > defaults) and prints what the
//! node reports when it is ready. The daemon itself is `crate::node`.

use crate::cli::output::{print_json, print_text};
use crate::cli::{Global, Resolved};
use crate::daemon::Ready;
use crate::model::ids::PoolName;
use crate::node::config::{defaults_toml, Config};
use clap::Args;
use libp2p::{Multiaddr, PeerId};
use std::path::PathBuf;

/// Flags of `gleaner node`; each overrides its key in the config file, and
/// each may also come from the environment variable named in its help
/// (flags > environment > file > defaults). This is the low layer: values
/// are typed and checked as clap parses them, nothing is read from disk.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Pool to join ([net] pool).
    #[arg(long, value_name = "NAME", env = "GLEANER_POOL")]
    pub pool: Option<PoolName>,
    /// Listen on this multiaddr instead of [net] listen (repeatable), e.g. /ip4/127.0.0.1/tcp/0.
    #[arg(
        long,
        value_name = "MULTIADDR",
        env = "GLEANER_LISTEN",
        value_delimiter = ','
    )]
    pub listen: Vec<Multiaddr>,
    /// Dial this peer at start (repeatable), e.g. /ip4/192.0.2.7/tcp/4001/p2p/12D3Koo...
    #[arg(
        long,
        value_name = "MULTIADDR",
        env = "GLEANER_BOOTSTRAP",
        value_delimiter = ','
    )]
    pub bootstrap: Vec<Multiaddr>,
    /// Do not look for LAN members by mDNS.
    #[arg(long)]
    pub no_mdns: bool,
    /// Private pool: the pre-shared key file (`gleaner swarm-key new` makes one).
    #[arg(long, value_name = "FILE", env = "GLEANER_SWARM_KEY")]
    pub swarm_key: Option<PathBuf>,
    /// Accept jobs only from this peer id (repeatable; adds to [net] allowlist).
    #[arg(
        long,
        value_name = "PEER_ID",
        env = "GLEANER_ALLOW",
        value_delimiter = ','
    )]
    pub allow: Vec<PeerId>,
    /// Serve as a relay, AutoNAT server and bootstrap peer for a public pool.
    #[arg(long)]
    pub relay: bool,
    /// Consumer only: submit jobs and answer queries, host no guests.
    #[arg(long)]
    pub no_guest: bool,
    /// No pool at all: measure, remember and run local jobs only.
    #[arg(long)]
    pub no_net: bool,
    /// Replay the owner's load from FILE instead of measuring this host: a
    /// script (`secs cpu free_mib` per line) or a trace in format v1. For
    /// demos and tests; `gleaner status` says the load is replayed.
    #[arg(long, value_name = "FILE")]
    pub owner_load: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
}

impl NodeArgs {
    /// Applies the flags over the file's values.
    pub fn apply(&self, config: &mut Config) {
        let net = &mut config.net;
        if let Some(p) = &self.pool {
            net.pool = p.clone();
        }
        if !self.listen.is_empty() {
            net.listen = self.listen.clone();
        }
        net.bootstrap.extend(self.bootstrap.iter().cloned());
        if self.no_mdns {
            net.mdns = false;
        }
        if let Some(k) = &self.swarm_key {
            net.swarm_key_file = Some(k.clone());
        }
        net.allowlist.extend(self.allow.iter().copied());
        if self.relay {
            net.relay = true;
            net.mdns = false;
        }
        if self.no_net {
            net.enabled = false;
        }
        if self.no_guest {
            config.guest.enabled = false;
        }
    }
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub out: crate::cli::JsonFlag,
    /// Print every key with its default and meaning (a valid config file).
    #[arg(long)]
    pub defaults: bool,
    /// With --defaults: the keys commented out too (the file a package ships,
    /// so defaults can change with upgrades).
    #[arg(long, requires = "defaults")]
    pub commented: bool,
}

/// Runs the node until SIGINT/SIGTERM.
pub fn run(args: &NodeArgs, global: &Global) -> anyhow::Result<()> {
    let Resolved { paths, config } = global.resolve(Some(args))?;
    let json = global.json;
    crate::daemon::start(&paths, &config, args.owner_load.as_deref(), |ready| {
        // Tests and scripts wait for this; stdout is flushed by print_text.
        let _ = if json {
            print_json(ready)
        } else {
            print_text(&ready_text(ready))
        };
    })?;
    Ok(())
}

fn ready_text(r: &Ready) -> String {
    let created = if r.config_created { " (created)" } else { "" };
    let mut text = format!(
        "data dir:       {}\nconfig:         {}{created}\ncontrol socket: {}\nhost:           {} ({})\n",
        r.data_dir.display(),
        r.config_file.display(),
        r.socket.display(),
        r.host,
        r.tz,
    );
    if let Some(down) = r.down_secs {
        text.push_str(&format!(
            "was off for:    {} (recorded as S5)\n",
            crate::human::duration(u64::try_from(down).unwrap_or(0))
        ));
    }
    if let (Some(pool), Some(peer)) = (&r.pool, &r.peer_id) {
        let role = if r.hosts_guests {
            "hosts guests"
        } else {
            "consumer only"
        };
        text.push_str(&format!(
            "pool:           {pool} ({role})\npeer id:        {peer}\n"
        ));
        for addr in &r.listen {
            text.push_str(&format!("listening:      {addr}\n"));
        }
    }
    if let Some(url) = &r.dashboard {
        text.push_str(&format!("dashboard:      {url}\n"));
    }
    text.push_str(&format!("ready (pid {})\n", r.pid));
    text
}

/// `gleaner config`: the defaults, or the effective configuration.
pub fn config(args: &ConfigArgs, global: &Global) -> anyhow::Result<()> {
    if args.defaults {
        return print_text(&defaults_toml(args.commented));
    }
    let Resolved { paths, config } = global.resolve(None)?;
    if global.json {
        print_json(&config)
    } else {
        let text = toml::to_string(&config)?;
        print_text(&format!("# {}\n{text}", paths.config_file.display()))
    }
}
