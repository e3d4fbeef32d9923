//! The driver of `net::deaf_links`: which connected peers speak Gleaner
//! (identify says), since when we listen to the pool's topics, the check
//! every `CHECK_EVERY`, and the close-then-dial of a deaf peer (dialed again
//! once its last connection has closed, so the new connection is the one
//! gossipsub uses).
//!
//! The rule is `deaf_links`' (pure); this file performs it. It must not know
//! what summaries say.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::PeerId;

use super::EventLoop;
use crate::net::deaf_links::{deaf_links, Link, CHECK_EVERY, RECYCLE_AGAIN_AFTER};

/// The deaf-link check's state in the network task.
#[derive(Debug, Default)]
pub(super) struct DeafLinks {
    /// Connected peers that said they serve Gleaner's job protocol.
    gleaner: HashSet<PeerId>,
    /// When we began listening to the pool's topics; `None` while we do not.
    listening_since: Option<Instant>,
    /// Peers recycled, and when (forgotten after `RECYCLE_AGAIN_AFTER`).
    recycled: HashMap<PeerId, Instant>,
    /// Recycled peers whose connections are closing.
    closing: HashSet<PeerId>,
    last_check: Option<Instant>,
}

impl EventLoop {
    /// Identify told what `peer` serves.
    pub(super) fn deaf_identified(&mut self, peer: PeerId, speaks_gleaner: bool) {
        if speaks_gleaner {
            self.deaf.gleaner.insert(peer);
        } else {
            self.deaf.gleaner.remove(&peer);
        }
    }

    /// We joined (`true`) or left the pool's topics.
    pub(super) fn deaf_listening(&mut self, listening: bool) {
        self.deaf.listening_since = listening.then(Instant::now);
    }

    /// `peer`'s last connection closed: a recycled peer is dialed again.
    pub(super) fn deaf_closed(&mut self, peer: PeerId) {
        self.deaf.gleaner.remove(&peer);
        if self.deaf.closing.remove(&peer) {
            let opts = DialOpts::peer_id(peer)
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build();
            if let Err(e) = self.swarm.dial(opts) {
                tracing::debug!(%peer, "no redial after a deaf connection: {e}");
            }
        }
    }

    /// Recycles the connections `deaf_links` finds deaf; runs at most every
    /// `CHECK_EVERY` (called on the redial tick).
    pub(super) fn check_deaf_links(&mut self) {
        let now = Instant::now();
        if self
            .deaf
            .last_check
            .is_some_and(|at| now.saturating_duration_since(at) < CHECK_EVERY)
        {
            return;
        }
        self.deaf.last_check = Some(now);
        self.deaf
            .recycled
            .retain(|_, at| now.saturating_duration_since(*at) < RECYCLE_AGAIN_AFTER);
        let since = self.deaf.listening_since;
        let links: Vec<Link<PeerId>> = self
            .links
            .iter()
            .filter_map(|(peer, conns)| {
                let oldest = conns.values().map(|c| c.link.opened_at).min()?;
                let heard = match (since, self.members.get(peer)) {
                    (Some(since), Some(member)) => member.last_seen >= since,
                    _ => false,
                };
                Some(Link {
                    peer: *peer,
                    connected_for: now.saturating_duration_since(oldest),
                    speaks_gleaner: self.deaf.gleaner.contains(peer),
                    heard,
                    recycled_ago: self
                        .deaf
                        .recycled
                        .get(peer)
                        .map(|at| now.saturating_duration_since(*at)),
                })
            })
            .collect();
        let listening_for = since.map(|s| now.saturating_duration_since(s));
        for peer in deaf_links(listening_for, &links) {
            tracing::info!(%peer, "connected but never heard on the pool's topics: reconnecting");
            self.deaf.recycled.insert(peer, now);
            self.deaf.closing.insert(peer);
            if self.swarm.disconnect_peer_id(peer).is_err() {
                self.deaf.closing.remove(&peer);
            }
        }
    }
}
