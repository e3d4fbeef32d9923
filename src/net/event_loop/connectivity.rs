//! Keeping the node reachable: the bootstrap peers dialed and, when lost,
//! dialed again after a wait that doubles; a slot reserved on each relay
//! among them (for a member of a public pool that may sit behind NAT);
//! the results of AutoNAT and hole punching; relayed connections closed
//! once a direct one exists; and the reachability snapshot `status` reads.
//!
//! It must not know about the pool's members or the request protocols.

use std::collections::HashMap;
use std::time::Duration;

use futures::FutureExt;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::ConnectionId;
use libp2p::{autonat, dcutr, relay, PeerId};

use super::{peer_of, Conn, EventLoop};
use crate::net::reachability::PeerLink;
use crate::net::routing_table;

/// First wait before re-dialing a lost bootstrap peer or re-reserving a lost relay
/// slot; doubled after each failure up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest wait between two attempts at a lost bootstrap peer or relay.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a relayed connection stays open beside a new direct one to the same peer.
pub(super) const RELAYED_GRACE: Duration = Duration::from_secs(3);

/// What a finished wait means.
pub(super) enum Timer {
    /// Try a lost bootstrap peer or relay slot again.
    Retry(PeerId),
    /// Close relayed connections to this peer if a direct one exists.
    DropRelayed(PeerId),
    /// Re-check where our provider record sits among the pool's keys.
    Recheck,
    /// A listing of the pool answers with what it found so far.
    WalkDeadline(u64),
    /// A peer cut off for flooding may connect again.
    Unblock(PeerId),
    /// The surveys waiting for the pool's sample get what it names now.
    SampleDeadline,
}

impl EventLoop {
    /// A member of a public pool (AutoNAT on) that may sit behind NAT listens through
    /// each bootstrap peer that offers a relay: peers then reach it over a circuit and
    /// DCUtR upgrades the connection to a direct one where the NATs allow.
    pub(super) fn reserve_relay(&mut self, relay: PeerId) {
        if !self.cfg.autonat || self.cfg.relay_server || self.relays_reserved.contains(&relay) {
            return;
        }
        let Some(addr) = self.bootstrap_peers.get(&relay).cloned() else {
            return;
        };
        let circuit = addr.with(libp2p::multiaddr::Protocol::P2pCircuit);
        match self.swarm.listen_on(circuit.clone()) {
            Ok(id) => {
                tracing::info!(%circuit, "listening through a relay");
                self.relays_reserved.insert(relay);
                self.relay_listeners.insert(id, relay);
                let key = relay.to_base58();
                self.reach.send_modify(|r| {
                    r.relay_mut(&key);
                });
            }
            Err(e) => {
                tracing::warn!(%circuit, "cannot listen through the relay: {e}");
                self.schedule_retry(relay);
            }
        }
    }

    /// Schedules one more attempt at a lost bootstrap peer or relay slot, after a wait
    /// that doubles with each failure: a relay that restarts is back within seconds,
    /// one that is gone costs one dial every `RETRY_MAX`.
    pub(super) fn schedule_retry(&mut self, peer: PeerId) {
        if !self.bootstrap_peers.contains_key(&peer) || !self.retrying.insert(peer) {
            return;
        }
        let wait = self.backoff.get(&peer).copied().unwrap_or(RETRY_FIRST);
        self.backoff.insert(peer, (wait * 2).min(RETRY_MAX));
        tracing::debug!(%peer, ?wait, "will try the bootstrap peer again");
        self.start_timer(wait, Timer::Retry(peer));
    }

    pub(super) fn start_timer(&mut self, wait: Duration, timer: Timer) {
        self.timers.push(
            async move {
                tokio::time::sleep(wait).await;
                timer
            }
            .boxed(),
        );
    }

    /// Closes our relayed connections to `peer` once a direct one exists (hole
    /// punched, or dialed): request-response spreads requests over every connection,
    /// and job data must not squeeze through the relay's circuit limits.
    pub(super) fn drop_relayed(&mut self, peer: PeerId) {
        let Some(conns) = self.links.get(&peer) else {
            return;
        };
        if !conns.values().any(|c| !c.relayed) {
            return;
        }
        let relayed: Vec<ConnectionId> = conns
            .iter()
            .filter(|(_, c)| c.relayed)
            .map(|(id, _)| *id)
            .collect();
        for id in relayed {
            tracing::debug!(%peer, "closing the relayed connection: a direct one exists");
            self.swarm.close_connection(id);
        }
    }

    /// The wait for `peer` is over: dial it if we lost it, or reserve a slot again if
    /// we are connected to a relay we no longer listen through.
    pub(super) fn retry(&mut self, peer: PeerId) {
        self.retrying.remove(&peer);
        if self.swarm.is_connected(&peer) {
            if self.relay_capable.contains(&peer) {
                self.reserve_relay(peer);
            }
            return;
        }
        let Some(addr) = self.bootstrap_peers.get(&peer).cloned() else {
            return;
        };
        let opts = DialOpts::peer_id(peer)
            .addresses(vec![addr.clone()])
            .condition(PeerCondition::DisconnectedAndNotDialing)
            .build();
        if let Err(e) = self.swarm.dial(opts) {
            tracing::debug!(%addr, "bootstrap re-dial not started: {e}");
            self.schedule_retry(peer);
        }
    }

    /// Publishes the confirmed external addresses and the connections to `status`.
    pub(super) fn refresh_reach(&mut self) {
        let reachable: Vec<String> = self
            .swarm
            .external_addresses()
            .map(ToString::to_string)
            .collect();
        let mut peers: Vec<PeerLink> = self
            .links
            .iter()
            .filter_map(|(peer, conns)| peer_link(*peer, conns))
            .collect();
        peers.sort_by(|a, b| a.peer.cmp(&b.peer));
        let relay_server = self.cfg.relay_server;
        self.reach.send_modify(|r| {
            r.reachable_at = reachable;
            r.peers = peers;
            r.settle_nat(relay_server);
        });
        self.refresh_contact();
    }

    /// [`Self::refresh_reach`] for one peer whose connection opened or
    /// closed: its entry in the snapshot's sorted peer list replaced, added
    /// or removed, so a connection event costs one peer id's base58 and not
    /// every link's. (A bootstrap peer of a 300-member pool holds ~300
    /// links; rebuilding the whole list on each of the pool's connection
    /// events was the largest single item of the pool's CPU while it
    /// settled: `bs58` encoding, 4 % of the machine.)
    pub(super) fn refresh_link(&mut self, peer: PeerId) {
        let link = self
            .links
            .get(&peer)
            .and_then(|conns| peer_link(peer, conns));
        let name = peer.to_base58();
        self.reach.send_modify(|r| {
            match (
                r.peers.binary_search_by(|l| l.peer.as_str().cmp(&name)),
                link,
            ) {
                (Ok(i), Some(link)) => r.peers[i] = link,
                (Ok(i), None) => {
                    r.peers.remove(i);
                }
                (Err(i), Some(link)) => r.peers.insert(i, link),
                (Err(_), None) => {}
            }
        });
        self.refresh_contact();
    }

    pub(super) fn dial_bootstrap(&mut self) {
        for addr in self.cfg.bootstrap.clone() {
            if let Some(peer) = peer_of(&addr) {
                let _ =
                    routing_table::learn(&mut self.swarm.behaviour_mut().kad, &peer, addr.clone());
            }
            if let Err(e) = self.swarm.dial(addr.clone()) {
                tracing::warn!(%addr, "bootstrap dial failed: {e}");
                if let Some(peer) = peer_of(&addr) {
                    self.schedule_retry(peer);
                }
            }
        }
    }

    pub(super) fn on_relay_client_event(&mut self, event: relay::client::Event) {
        if let relay::client::Event::ReservationReqAccepted {
            relay_peer_id,
            renewal,
            ..
        } = event
        {
            tracing::info!(relay = %relay_peer_id, renewal, "relay reservation accepted");
            self.backoff.remove(&relay_peer_id);
            let key = relay_peer_id.to_base58();
            self.reach.send_modify(|r| {
                let entry = r.relay_mut(&key);
                entry.reserved = true;
                if !renewal {
                    entry.reservations = entry.reservations.saturating_add(1);
                }
            });
        }
    }

    pub(super) fn on_autonat_event(&mut self, event: autonat::v2::client::Event) {
        let addr = event.tested_addr;
        match event.result {
            Ok(()) => {
                tracing::info!(%addr, server = %event.server, "AutoNAT: reachable");
                self.reach
                    .send_modify(|r| r.autonat_ok = r.autonat_ok.saturating_add(1));
            }
            Err(e) => {
                tracing::info!(%addr, server = %event.server, "AutoNAT: not reachable: {e}");
                let why = format!("{addr}: {e}");
                self.reach.send_modify(|r| {
                    r.autonat_failed = r.autonat_failed.saturating_add(1);
                    r.autonat_last_error = Some(why);
                });
            }
        }
        self.refresh_reach();
    }

    pub(super) fn on_dcutr_event(&mut self, event: dcutr::Event) {
        let peer = event.remote_peer_id;
        match event.result {
            Ok(_) => {
                tracing::info!(%peer, "hole punched: direct connection");
                self.reach
                    .send_modify(|r| r.dcutr_upgraded = r.dcutr_upgraded.saturating_add(1));
            }
            Err(e) => {
                tracing::info!(%peer, "hole punching failed: {e}");
                let why = format!("{peer}: {e}");
                self.reach.send_modify(|r| {
                    r.dcutr_failed = r.dcutr_failed.saturating_add(1);
                    r.dcutr_last_error = Some(why);
                });
            }
        }
    }
}

/// `peer`'s connections as the snapshot lists them; `None` when it has none.
fn peer_link(peer: PeerId, conns: &HashMap<ConnectionId, Conn>) -> Option<PeerLink> {
    if conns.is_empty() {
        return None;
    }
    let relayed = conns.values().filter(|c| c.relayed).count();
    Some(PeerLink {
        peer: peer.to_base58(),
        direct: u32::try_from(conns.len() - relayed).unwrap_or(u32::MAX),
        relayed: u32::try_from(relayed).unwrap_or(u32::MAX),
    })
}
