//! Keeping what a member holds bounded as the pool grows: the connections
//! that `net::trim`'s rule picks are closed (at every redial tick), and a
//! request to a peer we are no longer connected to dials it first at the
//! addresses its summary or the peer book gave, so closing a connection
//! never makes a member unreachable to a consumer.
//!
//! The rule is `net::trim`'s (pure); this file gathers its inputs from the
//! Swarm and performs its answer. It must not know the request protocols'
//! contents.

use std::collections::HashMap;
use std::time::Instant;

use libp2p::request_response;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::ConnectionId;
use libp2p::{Multiaddr, PeerId};

use super::EventLoop;
use crate::net::trim::{to_close, Link, PeerUse, TrimLimits};

impl EventLoop {
    /// A request is about to go to `peer` (or came from it): it is kept
    /// connected for a while, and dialed at its known addresses if it is
    /// not connected now.
    pub(super) fn use_peer(&mut self, peer: PeerId) {
        self.used.insert(peer, Instant::now());
        // Without an address known here, the request's own dial asks the
        // behaviours (Kademlia).
        self.dial_peer(peer, false);
    }

    /// Dials `peer` unless connected or being dialed, at the addresses its
    /// summary (heard, or from a digest) or the peer book gave, and those
    /// Kademlia knows; with none of ours, only when `or_kademlia`.
    pub(super) fn dial_peer(&mut self, peer: PeerId, or_kademlia: bool) {
        if self.swarm.is_connected(&peer) {
            return;
        }
        let mut addresses: Vec<Multiaddr> = self
            .members
            .get(&peer)
            .map(|m| m.addresses.clone())
            .or_else(|| self.leaves.addresses_of(&peer).map(<[Multiaddr]>::to_vec))
            .unwrap_or_default();
        if let Some(r) = &self.remembered {
            for a in r.addresses_of(&peer) {
                if !addresses.contains(&a) {
                    addresses.push(a);
                }
            }
        }
        addresses.retain(|a| self.scope.usable(a));
        if addresses.is_empty() && !or_kademlia {
            return;
        }
        let opts = DialOpts::peer_id(peer)
            .addresses(addresses)
            .extend_addresses_through_behaviour()
            .condition(PeerCondition::DisconnectedAndNotDialing)
            .build();
        if let Err(e) = self.swarm.dial(opts) {
            tracing::debug!(%peer, "dial not started: {e}");
        }
    }

    /// A request (or a response) came from a peer on one of the request
    /// protocols: it is kept connected for a while, as a peer we send
    /// requests to is ([`EventLoop::use_peer`]).
    pub(super) fn mark_used<Req, Resp>(&mut self, event: &request_response::Event<Req, Resp>) {
        if let request_response::Event::Message { peer, .. } = event {
            self.used.insert(*peer, Instant::now());
        }
    }

    /// Closes the connections `net::trim` picks: above the high mark, the
    /// ones we dialed to peers outside our gossip mesh, not bootstrap
    /// peers, not used for a request lately and past their grace.
    pub(super) fn trim_connections(&mut self) {
        let limits = TrimLimits::default();
        let now = Instant::now();
        // What is no longer recent is forgotten, so the map stays bounded
        // by the peers used within the hour.
        self.used
            .retain(|_, at| now.saturating_duration_since(*at) < limits.used_within);
        if self.links.len() <= limits.high {
            return;
        }
        let links: HashMap<PeerId, Vec<Link>> = self
            .links
            .iter()
            .map(|(peer, conns)| (*peer, conns.values().map(|c| c.link).collect()))
            .collect();
        let mut uses: HashMap<PeerId, PeerUse> = self
            .used
            .iter()
            .map(|(peer, at)| {
                (
                    *peer,
                    PeerUse {
                        protected: false,
                        last_used: Some(*at),
                    },
                )
            })
            .collect();
        let protected: Vec<PeerId> = self
            .swarm
            .behaviour()
            .gossipsub
            .all_mesh_peers()
            .chain(self.bootstrap_peers.keys())
            .chain(self.relays_reserved.iter())
            .copied()
            .collect();
        for peer in protected {
            uses.entry(peer).or_default().protected = true;
        }
        let close = to_close(&links, &uses, now, limits);
        if close.is_empty() {
            return;
        }
        tracing::debug!(
            connected = links.len(),
            closing = close.len(),
            "closing connections to peers we do not need"
        );
        // Only the connections we dialed: one the peer dialed is its own
        // to close (we may be its bootstrap peer, which it would dial again
        // at once).
        for peer in close {
            let ours: Vec<ConnectionId> = self
                .links
                .get(&peer)
                .map(|conns| {
                    conns
                        .iter()
                        .filter(|(_, c)| c.link.dialer)
                        .map(|(id, _)| *id)
                        .collect()
                })
                .unwrap_or_default();
            for id in ours {
                self.swarm.close_connection(id);
            }
        }
    }
}
