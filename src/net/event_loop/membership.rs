//! The pool's membership: summaries (format 2 on the summary topic, with
//! the images a host holds; format 1 from nodes built before it on the old
//! topic, where ours goes too only while such a node is heard; and version
//! 1 nodes' announcements) over gossipsub, each counted against its
//! source's budget before anything else (a burst, then a few a second; past
//! it the message is ignored, not decoded nor forwarded, and a source that
//! goes on is cut off), then checked (it must come from the peer it
//! describes, within its size and bounds) before its sender is recorded in
//! the bounded member table, ours published with the addresses a peer could
//! use (when the node says so; republished only when our addresses change
//! or a peer joins, at most once per minimum gap), members expired after
//! `member_ttl` (the pool's provider records in the DHT are `discovery`'s);
//! at start, the members whose last summary the peer book kept and that are
//! younger than `member_ttl` are listed again at their true age.
//!
//! It must not know about the request protocols or how the node is reached.

use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::gossipsub::{self, MessageAcceptance};
use libp2p::{Multiaddr, PeerId};

use super::EventLoop;
use crate::model::budget::{Admit, Overrun, PeerBudgets};
use crate::net::codec::{decode_body, encode_body};
use crate::net::cpu_ledger::SUMMARY_COST;
use crate::net::handle::{LocalStatus, Member, NetEvent, SummaryBody};
use crate::net::listening::{republish_for, Republish, Subscriber, Topics, HELLO_WITHIN};
use crate::net::members::MEMBERS_MAX;
use crate::net::protocol::{
    Announcement, HostSummary, SummaryWithBasis, SummaryWithImages, ANNOUNCE_MAX_BYTES,
    IMAGES_HELD_MAX, SUMMARY_FORMAT, SUMMARY_FORMAT_1, SUMMARY_FORMAT_3, SUMMARY_MAX_BYTES,
};
use crate::net::reachability::Chatter;
use crate::net::routing_table;
use crate::net::summary::{decode_summary, min_gap, LadderBasis, Summary};
use crate::net::swarm::ANNOUNCED_ADDRESSES_MAX;

/// Summaries (and announcements) one source may publish in a burst, and
/// per second after it. An honest member publishes at most one per minimum
/// gap, min(10 s, half its heartbeat), and the heartbeat is at least 1 s: at
/// most 2 a second, and far fewer at the default heartbeat.
pub(super) const SUMMARY_BURST: u32 = 32;
pub(super) const SUMMARY_PER_SEC: f64 = 4.0;
/// Messages past the budget forgiven before the source is cut off: a burst,
/// and one a second.
pub(super) const SUMMARY_DROPS_FORGIVEN: u32 = 128;
/// Sources with a budget at once (the one heard from longest ago makes
/// room), as many as the member table holds.
const SUMMARY_SOURCES_MAX: usize = MEMBERS_MAX;

pub(super) fn summary_budgets() -> PeerBudgets<PeerId> {
    PeerBudgets::new(
        (SUMMARY_BURST, SUMMARY_PER_SEC),
        (SUMMARY_DROPS_FORGIVEN, 1.0),
        SUMMARY_SOURCES_MAX,
    )
}

impl EventLoop {
    /// Lists again the members whose last summary the peer book kept, as
    /// heard when they were (their age is honest, and they expire as if we
    /// had never stopped): a restarted node lists its pool at once instead
    /// of waiting up to a heartbeat for each member. Each is checked as it
    /// was on the wire (the book is outside input too); one older than the
    /// member TTL, dated in the future or no longer readable is left out.
    /// Nothing is announced to the node: these are not news.
    pub(super) fn seed_members(&mut self) {
        let Some(r) = &self.remembered else {
            return;
        };
        let (now_unix, now) = (super::remembered::unix_now(), Instant::now());
        let seeded: Vec<Member> = r
            .summaries()
            .filter_map(|(peer, heard)| {
                let age = Duration::from_secs(u64::try_from(now_unix - heard.heard_unix).ok()?);
                if age > self.cfg.member_ttl {
                    return None;
                }
                // Either format, as it came over the wire.
                let h = decode_summary(&heard.bytes, heard.heard_unix).ok()?;
                let mut member = member_from(peer, h.member, Some(Arc::new(h.summary)))?;
                member.last_seen = now.checked_sub(age)?;
                Some(member)
            })
            .collect();
        if seeded.is_empty() {
            return;
        }
        tracing::info!(
            members = seeded.len(),
            "listing the members whose summaries the peer book kept"
        );
        for member in seeded {
            // More than the table holds: the least recently heard go.
            let _ = self.members.insert(member);
        }
    }

    /// Checks one gossipsub message and, if it is a good summary (or a
    /// version 1 node's announcement), records the member.
    pub(super) fn on_announcement(&mut self, message: &gossipsub::Message) -> MessageAcceptance {
        let Some(source) = message.source else {
            return MessageAcceptance::Reject;
        };
        // Before any decoding: what a flooding source costs is this count,
        // and then its account of CPU, the one its requests and data
        // streams are charged to (`net::cpu_ledger`).
        let (admitted, what) = match self.summaries.admit(&source, self.budget_ms()) {
            Admit::Serve => (self.cpu.admit_charged(&source, SUMMARY_COST), Overrun::Cpu),
            past => (past, Overrun::Summaries),
        };
        match admitted {
            Admit::Serve => {}
            Admit::Drop => {
                // Past its budget: a strike against its source, as for
                // requests (`net::quarantine`; none when it is not a peer
                // we are connected to).
                self.quarantine.strike(&source);
                return MessageAcceptance::Ignore;
            }
            Admit::CutOff => {
                self.cut_off(source, what);
                return MessageAcceptance::Ignore;
            }
        }
        if self
            .leaves
            .topic()
            .is_some_and(|t| message.topic == t.hash())
        {
            return self.on_leaf_summary(source, &message.data);
        }
        let mut summary_bytes = None;
        // Each summary topic carries its own formats and no other: the
        // summary topic 3 and the copies of 2, the format 1 topic 1.
        let formats: Option<&[u8]> = if message.topic == self.summary_topic.hash() {
            Some(&[SUMMARY_FORMAT_3, SUMMARY_FORMAT])
        } else if message.topic == self.summary_topic_1.hash() {
            Some(&[SUMMARY_FORMAT_1])
        } else {
            None
        };
        let member = if let Some(formats) = formats {
            if message.data.len() > SUMMARY_MAX_BYTES {
                return MessageAcceptance::Reject;
            }
            let heard = jiff::Timestamp::now().as_second();
            let Ok(h) = decode_summary(&message.data, heard) else {
                return MessageAcceptance::Reject;
            };
            if !formats.contains(&h.format) {
                return MessageAcceptance::Reject;
            }
            summary_bytes = Some(message.data.as_slice());
            member_from(source, h.member, Some(Arc::new(h.summary)))
        } else if message.topic == self.topic.hash() {
            if message.data.len() > ANNOUNCE_MAX_BYTES {
                return MessageAcceptance::Reject;
            }
            let Ok(announcement) = decode_body::<Announcement>(&message.data) else {
                return MessageAcceptance::Reject;
            };
            member_from(source, announcement, None)
        } else {
            return MessageAcceptance::Reject;
        };
        let Some(member) = member else {
            return MessageAcceptance::Reject;
        };
        // Only addresses we could reach: another home's loopback or LAN address
        // would send the dial to ourselves or nowhere.
        for addr in member.addresses.iter().filter(|a| self.scope.usable(a)) {
            let _ =
                routing_table::learn(&mut self.swarm.behaviour_mut().kad, &source, addr.clone());
        }
        let usable: Vec<Multiaddr> = member
            .addresses
            .iter()
            .filter(|a| self.scope.usable(a))
            .cloned()
            .collect();
        self.remember_member(source, &usable, summary_bytes);
        if let Some(evicted) = self.members.insert(member.clone()) {
            self.notify(NetEvent::MemberExpired(evicted));
        }
        self.notify(NetEvent::MemberAnnounced(member));
        self.count(|c| c.heard_pool += 1);
        if self.listening.turns_large(self.members.len()) {
            self.update_listening();
        }
        MessageAcceptance::Accept
    }

    /// A peer subscribed to a summary topic: the pool-wide one
    /// (`Republish::PoolSubscriber`) or our leaf's (`Republish::LeafMate`).
    /// One that joins the topic has not heard our last summary (it went out
    /// before it was there): it is told soon, on that topic only, not at the
    /// next heartbeat, and many joining at once share one publication. Not a
    /// member we hear saying hello on a new connection
    /// (`listening::republish_for`).
    pub(super) fn on_subscribed(&mut self, peer: PeerId, why: Republish) {
        let now = Instant::now();
        let just_connected = self.links.get(&peer).is_some_and(|conns| {
            conns
                .values()
                .any(|c| now.saturating_duration_since(c.link.opened_at) < HELLO_WITHIN)
        });
        let (we_listen, known_member) = match why {
            // We are on our leaf's topic whenever we hear on it.
            Republish::LeafMate => (true, self.leaves.knows(&peer)),
            _ => (self.on_summary_topics, self.members.contains_key(&peer)),
        };
        let subscriber = Subscriber {
            we_listen,
            known_member,
            just_connected,
        };
        tracing::debug!(%peer, ?subscriber, ?why, "a peer subscribed to a summary topic");
        if republish_for(subscriber) {
            self.republish(why);
        } else {
            self.count(|c| c.hellos_skipped += 1);
        }
    }

    /// Counts in `status`'s chatter. Readers of the snapshot see it at
    /// their next read; nobody is woken for a count.
    pub(super) fn count(&mut self, f: impl FnOnce(&mut Chatter)) {
        self.reach.send_if_modified(|r| {
            f(&mut r.chatter);
            false
        });
    }

    /// Joins or leaves the summary and announce topics as
    /// [`crate::net::listening::Listening`]
    /// says: a host of a large pool that nobody asks about leaves them (it
    /// still publishes: gossipsub sends to the connected peers on the
    /// topic), and joins again when asked for its members; the members
    /// it joins beside republish at once for it.
    pub(super) fn update_listening(&mut self) {
        let now = Instant::now();
        self.listening.heard(self.members.len());
        let wanted = self.listening.wants(now);
        let large_pool = self.listening.large();
        self.reach.send_if_modified(|r| {
            let changed = r.summaries.large_pool != large_pool;
            r.summaries.large_pool = large_pool;
            changed
        });
        // A large pool: our leaf's topic too (a no-op once on it).
        self.join_leaf(false);
        if wanted == self.on_summary_topics {
            return;
        }
        let gossipsub = &mut self.swarm.behaviour_mut().gossipsub;
        for topic in [&self.summary_topic, &self.summary_topic_1, &self.topic] {
            let done = if wanted {
                gossipsub
                    .subscribe(topic)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            } else {
                gossipsub.unsubscribe(topic);
                Ok(())
            };
            if let Err(e) = done {
                tracing::warn!(%topic, "could not join the pool's topic: {e}");
                return;
            }
        }
        self.on_summary_topics = wanted;
        self.deaf_listening(wanted);
        self.reach.send_modify(|r| r.summaries.listening = wanted);
        if wanted {
            tracing::info!(
                members = self.members.len(),
                "listening to the pool's summaries again: asked for its members"
            );
        } else {
            tracing::info!(
                members = self.members.len(),
                "the pool is large and nobody here asks about it: no longer listening to its summaries (still publishing ours)"
            );
        }
    }

    /// Publishes our summary again for a change on our side (addresses) or
    /// a peer that joined the topic: now if the last publication is at
    /// least a minimum gap old, else at the next announce tick.
    pub(super) fn republish(&mut self, why: Republish) {
        self.count(|c| match why {
            Republish::Address => c.asked_address += 1,
            Republish::PoolSubscriber => c.asked_pool_subscriber += 1,
            Republish::LeafMate => c.asked_leaf_mate += 1,
            Republish::LeafJoined => c.asked_leaf_joined += 1,
        });
        let gap = min_gap(self.cfg.announce_interval);
        match self.last_published {
            Some(at) if at.elapsed() < gap => {
                self.republish_pending = self.republish_pending.and(why.topics());
            }
            _ => {
                self.count(|c| c.republished += 1);
                self.publish_announcement(why.topics());
            }
        }
    }

    /// The announce tick: a republication that had to wait for the gap.
    pub(super) fn republish_if_pending(&mut self) {
        if self.republish_pending.any() {
            self.count(|c| c.republished += 1);
            self.publish_announcement(self.republish_pending);
        }
    }

    /// Publishes our summary on `to`'s topics (a heartbeat: all of them),
    /// and whatever republication was waiting with it.
    pub(super) fn publish_announcement(&mut self, to: Topics) {
        let Some(status) = self.status.clone() else {
            return;
        };
        let to = to.and(std::mem::take(&mut self.republish_pending));
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
        // A format 1 copy only while a node that reads nothing else is in
        // the table, and a format 2 copy on the summary topic only while
        // one that reads nothing newer is: a pool of this version pays
        // for one publication there.
        let with_1 = self.members.any_of_format_1();
        let with_2 = self.members.any_of_format_2();
        let data = match summary_bytes(announcement, self.body.as_ref(), with_1) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("summary does not encode: {e}");
                return;
            }
        };
        self.last_published = Some(Instant::now());
        // In a large pool our leaf mates hear it on our leaf's topic, and
        // our digest carries it: format 2, what leaves and digests carry.
        self.leaves.published(&data.format_2);
        let leaf = self
            .leaves
            .topic()
            .filter(|_| to.leaf)
            .cloned()
            .map(|t| (t, Some(data.format_2.clone())));
        // The copy first, so a member that hears both in order keeps the
        // newer (it keeps it in either order: `MemberCache::insert`).
        let pool = [
            (
                self.summary_topic.clone(),
                with_2.then(|| data.format_2.clone()),
            ),
            (self.summary_topic.clone(), Some(data.format_3)),
            (self.summary_topic_1.clone(), data.format_1),
        ];
        let topics = pool.into_iter().filter(|_| to.pool).chain(leaf);
        for (topic, data) in topics {
            let Some(data) = data else { continue };
            if let Err(e) = self.swarm.behaviour_mut().gossipsub.publish(topic, data) {
                // No subscribed peer yet is normal for the first member of a pool.
                tracing::debug!("summary not published: {e}");
            }
        }
        self.provide();
    }

    pub(super) fn expire_members(&mut self) {
        // Not listening, nothing is heard: the table stays as last heard
        // (its ages say how old), and our power keeps its reference.
        if !self.on_summary_topics {
            return;
        }
        let expired = self.members.expire(Instant::now(), self.cfg.member_ttl);
        for peer in expired {
            self.notify(NetEvent::MemberExpired(peer));
        }
    }
}

/// Our summary's bytes, one per format that goes out.
#[derive(Debug)]
struct SummaryBytes {
    /// Format 3, for the summary topic.
    format_3: Vec<u8>,
    /// Format 2 (the same without the basis): for our leaf's topic and
    /// digest, and for the summary topic while a format 2 node is heard.
    format_2: Vec<u8>,
    /// Format 1 (the same without the images), when asked for.
    format_1: Option<Vec<u8>>,
}

/// Our summary's bytes in format 3 (the announcement, the reliability
/// part, none before the node computed one, the images held, at most
/// [`IMAGES_HELD_MAX`], and what the ladders stand on), in format 2 (the
/// same without the basis) and, with `format_1`, in format 1 (the same
/// without the images). Past [`SUMMARY_MAX_BYTES`] the spell lengths are
/// left out, then the images, then the spells, then the ladders.
fn summary_bytes(
    member: Announcement,
    body: Option<&SummaryBody>,
    format_1: bool,
) -> Result<SummaryBytes, crate::net::codec::CodecError> {
    let mut summary = HostSummary {
        format: SUMMARY_FORMAT_3,
        member,
        computed_at_unix: body.map_or(0, |b| b.computed_at_unix),
        speed_milli: body.map_or(0, |b| b.speed_milli),
        availability_milli: body.and_then(|b| b.availability_milli),
        days_used: body.map_or(0, |b| b.days_used),
        ladders: body.map(|b| b.ladders.clone()).unwrap_or_default(),
        spells: body.and_then(|b| b.spells),
        spell_lengths: body.and_then(|b| b.spell_lengths.clone()),
    };
    if body.is_none() {
        // Nothing computed: said as "now", so no receiver finds it stale.
        summary.computed_at_unix = jiff::Timestamp::now().as_second();
    }
    let mut images: Vec<[u8; 32]> = body
        .map(|b| b.images.iter().take(IMAGES_HELD_MAX).copied().collect())
        .unwrap_or_default();
    // Nothing computed yet is no record: the ladders are empty anyway.
    let basis = body.map_or(LadderBasis::Record, |b| b.basis).to_wire();
    let mut cut = 0;
    let format_3 = loop {
        let data = encode_body(&SummaryWithBasis {
            summary: SummaryWithImages {
                summary: summary.clone(),
                images: images.clone(),
            },
            basis,
        })?;
        if data.len() <= SUMMARY_MAX_BYTES || cut > 3 {
            break data;
        }
        match cut {
            0 => summary.spell_lengths = None,
            1 => images.clear(),
            2 => summary.spells = None,
            _ => summary.ladders.clear(),
        }
        cut += 1;
    };
    // Format 2 is format 3 without the basis, format 1 format 2 without
    // the images: what fit there fits here.
    summary.format = SUMMARY_FORMAT;
    let format_2 = encode_body(&SummaryWithImages {
        summary: summary.clone(),
        images,
    })?;
    let format_1 = if format_1 {
        summary.format = SUMMARY_FORMAT_1;
        Some(encode_body(&summary)?)
    } else {
        None
    };
    Ok(SummaryBytes {
        format_3,
        format_2,
        format_1,
    })
}

/// Turns a decoded announcement into a member, or `None` if it lies about its sender or
/// carries addresses that do not parse.
pub(super) fn member_from(
    source: PeerId,
    a: Announcement,
    summary: Option<Arc<Summary>>,
) -> Option<Member> {
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
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::protocol::{WireSpellLengths, WireState};

    fn announcement() -> Announcement {
        Announcement {
            peer_id: PeerId::random().to_bytes(),
            addresses: vec![],
            logical_cpus: 2,
            memory_mib: 4_096,
            benchmark_score: 1_000,
            relative_power_milli: 900,
            state: WireState::S1,
            slot_free: true,
            version: "0.1.0".into(),
        }
    }

    fn body(images: Vec<[u8; 32]>) -> SummaryBody {
        SummaryBody {
            computed_at_unix: 1_700_000_000,
            speed_milli: 900,
            availability_milli: Some(800),
            days_used: 3,
            ladders: vec![],
            spells: None,
            spell_lengths: None,
            images,
            basis: LadderBasis::Record,
        }
    }

    #[test]
    fn ours_goes_out_in_format_2_with_at_most_the_bound_of_images_and_in_format_1_on_demand() {
        // Format 2 is what the leaves carry, and the copy for format 2 nodes.
        let held: Vec<[u8; 32]> = (0..40u8).map(|i| [i; 32]).collect();
        let data = summary_bytes(announcement(), Some(&body(held.clone())), false).unwrap();
        assert_eq!(data.format_1, None, "no older node heard: no format 1");
        let heard = decode_summary(&data.format_2, 1_700_000_000).unwrap();
        assert_eq!(heard.format, SUMMARY_FORMAT);
        assert_eq!(
            heard.summary.images.as_deref(),
            Some(&held[..IMAGES_HELD_MAX])
        );
        assert_eq!(heard.summary.basis, None, "format 2 cannot say");
        let data = summary_bytes(announcement(), Some(&body(held)), true).unwrap();
        let old = decode_summary(&data.format_1.unwrap(), 1_700_000_000).unwrap();
        assert_eq!((old.format, old.summary.images), (SUMMARY_FORMAT_1, None));
        assert_eq!(
            old.member,
            decode_summary(&data.format_2, 1).unwrap().member
        );
    }

    #[test]
    fn ours_goes_out_in_format_3_saying_which_prior_its_ladders_are() {
        for basis in [
            LadderBasis::Record,
            LadderBasis::BuiltInPrior,
            LadderBasis::PoolPrior,
        ] {
            let mut b = body(vec![[7; 32]]);
            b.days_used = u32::from(basis == LadderBasis::Record);
            b.basis = basis;
            let data = summary_bytes(announcement(), Some(&b), false).unwrap();
            let heard = decode_summary(&data.format_3, 1_700_000_000).unwrap();
            assert_eq!(heard.format, SUMMARY_FORMAT_3);
            assert_eq!(heard.summary.basis, Some(basis));
            assert_eq!(heard.summary.images, Some(vec![[7; 32]]));
            // The copy is the same summary, one byte shorter, and says nothing.
            let copy = decode_summary(&data.format_2, 1_700_000_000).unwrap();
            assert_eq!(data.format_2.len() + 1, data.format_3.len());
            assert_eq!(
                (copy.member, copy.summary.days_used, copy.summary.basis),
                (heard.member, b.days_used, None)
            );
        }
    }

    #[test]
    fn past_the_message_cap_the_spell_lengths_go_before_the_images() {
        // Spell lengths that alone fill the message.
        let mut big = body((0..16u8).map(|i| [i; 32]).collect());
        big.spell_lengths = Some(WireSpellLengths {
            up_secs: vec![u32::MAX; 1_000],
            up_seen: 1_000,
            up_cut_secs: vec![],
            outage_secs: vec![],
            outages_seen: 0,
        });
        let data = summary_bytes(announcement(), Some(&big), false).unwrap();
        for data in [&data.format_3, &data.format_2] {
            assert!(data.len() <= SUMMARY_MAX_BYTES);
            let heard = decode_summary(data, 1_700_000_000).unwrap();
            assert_eq!(heard.summary.images.map(|i| i.len()), Some(16));
            assert_eq!(heard.summary.spell_lengths, None);
        }
    }
}
