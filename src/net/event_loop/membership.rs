//! The pool's membership: announcements over gossipsub, each checked (it
//! must come from the peer it describes, within its size and bounds) before
//! its sender is recorded as a member, ours published with the addresses a
//! peer could use, members expired after `member_ttl`, and the pool's
//! provider record in the DHT with the lookups of its hosts.
//!
//! It must not know about the request protocols or how the node is reached.

use std::time::Instant;

use libp2p::gossipsub::{self, MessageAcceptance};
use libp2p::kad::{self, GetProvidersOk, QueryResult, RecordKey};
use libp2p::{Multiaddr, PeerId};

use super::EventLoop;
use crate::net::codec::{decode_body, encode_body};
use crate::net::handle::{LocalStatus, Member, NetEvent};
use crate::net::protocol::{pool_dht_key, Announcement, ANNOUNCE_MAX_BYTES};
use crate::net::swarm::ANNOUNCED_ADDRESSES_MAX;

impl EventLoop {
    pub(super) fn on_kad_event(&mut self, event: kad::Event) {
        match event {
            kad::Event::RoutingUpdated {
                is_new_peer: true, ..
            } => {
                // A new contact can store our provider record: provide again (cheap in
                // pools of a few peers, and a new pool would otherwise wait for the
                // 12 h republication).
                self.provide();
            }
            kad::Event::OutboundQueryProgressed {
                id,
                result: QueryResult::GetProviders(result),
                step,
                ..
            } => {
                let me = *self.swarm.local_peer_id();
                if let (Some((found, _)), Ok(GetProvidersOk::FoundProviders { providers, .. })) =
                    (self.pending_hosts.get_mut(&id), result)
                {
                    found.extend(providers.into_iter().filter(|p| *p != me));
                }
                if step.last {
                    if let Some((found, reply)) = self.pending_hosts.remove(&id) {
                        let _ = reply.send(Ok(found.into_iter().collect()));
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn provide(&mut self) {
        let key = RecordKey::new(&pool_dht_key(&self.cfg.pool));
        if let Err(e) = self.swarm.behaviour_mut().kad.start_providing(key) {
            tracing::warn!("cannot provide the pool key: {e}");
        }
    }

    /// Checks one gossipsub message and, if it is a good announcement, records the member.
    pub(super) fn on_announcement(&mut self, message: &gossipsub::Message) -> MessageAcceptance {
        if message.topic != self.topic.hash() || message.data.len() > ANNOUNCE_MAX_BYTES {
            return MessageAcceptance::Reject;
        }
        let Some(source) = message.source else {
            return MessageAcceptance::Reject;
        };
        let Ok(announcement) = decode_body::<Announcement>(&message.data) else {
            return MessageAcceptance::Reject;
        };
        let Some(member) = member_from(source, announcement) else {
            return MessageAcceptance::Reject;
        };
        // Only addresses we could reach: another home's loopback or LAN address
        // would send the dial to ourselves or nowhere.
        for addr in member.addresses.iter().filter(|a| self.scope.usable(a)) {
            self.swarm
                .behaviour_mut()
                .kad
                .add_address(&source, addr.clone());
        }
        let usable: Vec<Multiaddr> = member
            .addresses
            .iter()
            .filter(|a| self.scope.usable(a))
            .cloned()
            .collect();
        self.remember_member(source, &usable);
        self.members.insert(source, member.clone());
        self.notify(NetEvent::MemberAnnounced(member));
        MessageAcceptance::Accept
    }

    pub(super) fn publish_announcement(&mut self) {
        let Some(status) = self.status.clone() else {
            return;
        };
        // Confirmed external addresses first (the relayed one once a reservation
        // holds), then listen addresses a peer could use: never loopback outside a
        // loopback pool, never LAN addresses in a public one.
        let mut told: Vec<Multiaddr> = Vec::new();
        for a in self
            .swarm
            .external_addresses()
            .chain(self.swarm.listeners())
            .filter(|a| self.scope.usable(a))
        {
            if told.len() < ANNOUNCED_ADDRESSES_MAX && !told.contains(a) {
                told.push(a.clone());
            }
        }
        let announced: Vec<String> = told.iter().map(ToString::to_string).collect();
        self.reach.send_if_modified(|r| {
            let changed = r.announced != announced;
            r.announced = announced;
            changed
        });
        let addresses = told.iter().map(Multiaddr::to_vec).collect();
        let announcement = Announcement {
            peer_id: self.swarm.local_peer_id().to_bytes(),
            addresses,
            logical_cpus: status.logical_cpus,
            memory_mib: status.memory_mib,
            benchmark_score: status.benchmark_score,
            relative_power_milli: status.relative_power_milli,
            state: status.state.into(),
            slot_free: status.slot_free,
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let data = match encode_body(&announcement) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("announcement does not encode: {e}");
                return;
            }
        };
        let topic = self.topic.clone();
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.publish(topic, data) {
            // No subscribed peer yet is normal for the first member of a pool.
            tracing::debug!("announcement not published: {e}");
        }
        self.provide();
    }

    pub(super) fn expire_members(&mut self) {
        let ttl = self.cfg.member_ttl;
        let now = Instant::now();
        let expired: Vec<PeerId> = self
            .members
            .iter()
            .filter(|(_, m)| now.duration_since(m.last_seen) > ttl)
            .map(|(p, _)| *p)
            .collect();
        for peer in expired {
            self.members.remove(&peer);
            self.notify(NetEvent::MemberExpired(peer));
        }
    }
}

/// Turns a decoded announcement into a member, or `None` if it lies about its sender or
/// carries addresses that do not parse.
fn member_from(source: PeerId, a: Announcement) -> Option<Member> {
    if PeerId::from_bytes(&a.peer_id).ok()? != source
        || a.addresses.len() > ANNOUNCED_ADDRESSES_MAX
        || a.version.is_empty()
        || a.version.len() > 64
        || a.relative_power_milli > 1000
    {
        return None;
    }
    let addresses = a
        .addresses
        .into_iter()
        .map(Multiaddr::try_from)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(Member {
        peer: source,
        addresses,
        status: LocalStatus {
            logical_cpus: a.logical_cpus,
            memory_mib: a.memory_mib,
            benchmark_score: a.benchmark_score,
            relative_power_milli: a.relative_power_milli,
            state: a.state.into(),
            slot_free: a.slot_free,
        },
        version: a.version,
        last_seen: Instant::now(),
    })
}
