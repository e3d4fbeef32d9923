//! The network settings a node's `[net]` config section implies: the one
//! place the daemon turns checked config into the swarm's [`NetConfig`]. It
//! must not know how the swarm uses them (that is `net`).

use std::collections::HashSet;

use crate::net::{read_swarm_key, BuildError, NetConfig};
use crate::node::config::NetSection;

/// The network settings `[net]` implies. Addresses and peer ids were checked
/// when the config was loaded; the swarm key file is read here.
pub fn net_config(net: &NetSection) -> Result<NetConfig, BuildError> {
    let mut cfg = NetConfig::lan(&net.pool);
    cfg.listen = net.listen.clone();
    cfg.bootstrap = net.bootstrap.clone();
    cfg.mdns = net.mdns;
    cfg.kad_server = net.kad_server || net.relay;
    cfg.autonat = net.autonat;
    cfg.relay_server = net.relay;
    cfg.swarm_key = match &net.swarm_key_file {
        Some(path) => Some(read_swarm_key(path)?),
        None => None,
    };
    cfg.allowlist = if net.allowlist.is_empty() {
        None
    } else {
        Some(net.allowlist.iter().copied().collect::<HashSet<_>>())
    };
    cfg.request_timeout = net.request_timeout;
    cfg.announce_interval = net.announce_interval;
    cfg.member_ttl = crate::net::summary::member_ttl(net.announce_interval);
    cfg.source_ration = net.source_ration;
    cfg.source_new_peers = net.source_new_peers;
    cfg.peer_cpu_percent = net.peer_cpu_percent;
    Ok(cfg)
}
