//! The members this node has heard of, bounded: the table the network task
//! keeps of each member's addresses, status and checked summary, with the
//! least recently heard dropped first and the silent expired. It must not know
//! how a summary is checked (`summary`) nor the Swarm.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libp2p::PeerId;

use crate::net::handle::Member;

/// Most members a node keeps in its table; past it the least recently
/// heard goes first.
pub const MEMBERS_MAX: usize = 10_000;

/// The members heard, bounded: at most `max`, the least recently heard
/// dropped first when a new one arrives, and any not heard for a TTL
/// dropped by [`expire`](Self::expire).
#[derive(Debug)]
pub struct MemberCache {
    members: HashMap<PeerId, Member>,
    max: usize,
}

impl MemberCache {
    /// An empty table of at most `max` members (at least one).
    pub fn new(max: usize) -> MemberCache {
        MemberCache {
            members: HashMap::new(),
            max: max.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn contains_key(&self, peer: &PeerId) -> bool {
        self.members.contains_key(peer)
    }

    pub fn get(&self, peer: &PeerId) -> Option<&Member> {
        self.members.get(peer)
    }

    /// Records what `member` said. A member heard again keeps the summary
    /// it sent before when this message (an old node's announcement) has
    /// none. Returns the member evicted to make room, if any.
    pub fn insert(&mut self, mut member: Member) -> Option<PeerId> {
        if member.summary.is_none() {
            if let Some(old) = self.members.get(&member.peer) {
                member.summary.clone_from(&old.summary);
            }
        }
        let mut evicted = None;
        if !self.members.contains_key(&member.peer) && self.members.len() >= self.max {
            // A scan only when full and a stranger arrives: rare, and at most
            // `max` entries.
            evicted = self
                .members
                .values()
                .min_by_key(|m| (m.last_seen, m.peer))
                .map(|m| m.peer);
            if let Some(old) = evicted {
                self.members.remove(&old);
            }
        }
        self.members.insert(member.peer, member);
        evicted
    }

    /// Drops the members not heard within `ttl` of `now`; returns them.
    pub fn expire(&mut self, now: Instant, ttl: Duration) -> Vec<PeerId> {
        let expired: Vec<PeerId> = self
            .members
            .values()
            .filter(|m| now.saturating_duration_since(m.last_seen) > ttl)
            .map(|m| m.peer)
            .collect();
        for peer in &expired {
            self.members.remove(peer);
        }
        expired
    }

    pub fn values(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }
}
