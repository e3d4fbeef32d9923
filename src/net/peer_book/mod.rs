//! The peer book: the pool members this node has met (peer id, addresses that
//! worked or that the member told, when it was last seen, its last summary as
//! it came over the wire and when it was heard), kept across restarts so a
//! node whose bootstrap peers are gone finds its pool again (Bitcoin's
//! `peers.dat`, Syncthing's and kubo's peerstores), and a restarted consumer
//! lists the pool at once instead of waiting a heartbeat for each summary.
//!
//! Three parts. [`PeerBook`] is the book itself, a pure value: bounded
//! ([`BOOK_MAX`] entries, the least recently seen out first), it records what
//! the network task saw and collects the changes worth writing (a new peer,
//! new addresses, or a `last_seen` that moved by [`SEEN_GRAIN_SECS`]: not
//! every announcement; a newer summary alone waits for one of those, or for
//! the last write at a clean stop). [`Redialer`] decides, from the book and the open
//! connections, which remembered peers to dial now, with a back-off per
//! peer. `codec` is the one place the book's bytes on disk are laid out, and
//! `store` the sled tree that holds them.
//!
//! This module knows peer ids and multiaddrs, and keeps a summary as opaque
//! bytes (what they say is `net::summary`'s to check, at load as on the
//! wire); it does not touch the Swarm, and it takes the time as a parameter
//! (no clock).

pub mod codec;
pub mod store;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::{Multiaddr, PeerId};

pub use store::{BookStore, BookStoreError};

/// Most peers a book keeps; past it the least recently seen goes.
pub const BOOK_MAX: usize = 10_000;
/// Most addresses kept per peer (a member announces at most 8).
pub const ADDRESSES_MAX: usize = 8;
/// A `last_seen` that moved less than this since it was last written is not
/// worth a write by itself: members announce every 30 s.
pub const SEEN_GRAIN_SECS: i64 = 60;

/// What the book knows of one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookEntry {
    /// Where it was reached or said it could be, the address that last
    /// worked first. At most [`ADDRESSES_MAX`].
    pub addresses: Vec<Multiaddr>,
    /// Unix seconds when we last heard from it or connected to it.
    pub last_seen: i64,
    /// Its last summary, when it sent one (a version 1 member never does).
    pub summary: Option<HeardSummary>,
}

/// A member's summary as it came over the wire, and when we heard it: what a
/// restarted node lists it by until it hears a newer one, its age told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeardSummary {
    /// Unix seconds when we heard it (not when the member says it computed it).
    pub heard_unix: i64,
    /// The gossipsub message's bytes, at most the protocol's summary bound.
    pub bytes: Arc<[u8]>,
}

/// What changed since the last [`PeerBook::take_changes`]: for the store.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BookChanges {
    /// Peers to write (new or changed), with what to write.
    pub upserts: Vec<(PeerId, BookEntry)>,
    /// Peers that left the book (evicted).
    pub removals: Vec<PeerId>,
}

impl BookChanges {
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.removals.is_empty()
    }
}

/// The remembered members, bounded, ordered by when each was last seen.
#[derive(Debug)]
pub struct PeerBook {
    entries: HashMap<PeerId, BookEntry>,
    /// `(last_seen, peer)` of every entry: the oldest is evicted first and
    /// the newest are redialed first.
    by_seen: BTreeSet<(i64, PeerId)>,
    /// The `last_seen` each entry had when it was last written (or loaded).
    written_seen: HashMap<PeerId, i64>,
    /// Entries to write at the next [`take_changes`](Self::take_changes).
    dirty: HashSet<PeerId>,
    /// Entries whose only change is a newer summary: written with their next
    /// change, or at the last write ([`take_changes`](Self::take_changes)
    /// with `last`), never by themselves (a summary comes every heartbeat).
    newer_summary: HashSet<PeerId>,
    /// Entries evicted since the last write.
    removed: HashSet<PeerId>,
    max: usize,
}

impl PeerBook {
    /// An empty book of at most `max` peers (at least one).
    pub fn new(max: usize) -> PeerBook {
        PeerBook {
            entries: HashMap::new(),
            by_seen: BTreeSet::new(),
            written_seen: HashMap::new(),
            dirty: HashSet::new(),
            newer_summary: HashSet::new(),
            removed: HashSet::new(),
            max: max.max(1),
        }
    }

    /// A book holding what the store read. Past `max` entries the oldest are
    /// dropped (and their removal is a change to write).
    pub fn loaded(max: usize, stored: impl IntoIterator<Item = (PeerId, BookEntry)>) -> PeerBook {
        let mut book = PeerBook::new(max);
        for (peer, mut entry) in stored {
            entry.addresses.truncate(ADDRESSES_MAX);
            book.written_seen.insert(peer, entry.last_seen);
            book.insert(peer, entry);
        }
        book.evict_past_max(None);
        book
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, peer: &PeerId) -> bool {
        self.entries.contains_key(peer)
    }

    pub fn get(&self, peer: &PeerId) -> Option<&BookEntry> {
        self.entries.get(peer)
    }

    /// Records that `peer` was seen at `now`: it announced itself with
    /// `told` addresses, or a connection to it opened (`worked` is the
    /// address we dialed it at, which goes first). The caller passes only
    /// addresses the pool's `AddressScope` allows.
    pub fn seen(&mut self, peer: PeerId, told: &[Multiaddr], worked: Option<&Multiaddr>, now: i64) {
        let mut entry = self.remove_entry(&peer).unwrap_or(BookEntry {
            addresses: Vec::new(),
            last_seen: now,
            summary: None,
        });
        let before = entry.addresses.clone();
        if let Some(addr) = worked {
            entry.addresses.retain(|a| a != addr);
            entry.addresses.insert(0, addr.clone());
        }
        for addr in told {
            if !entry.addresses.contains(addr) {
                entry.addresses.push(addr.clone());
            }
        }
        entry.addresses.truncate(ADDRESSES_MAX);
        entry.last_seen = entry.last_seen.max(now);
        let written = self.written_seen.get(&peer).copied();
        let stale = written.is_none_or(|w| entry.last_seen - w >= SEEN_GRAIN_SECS);
        if stale || entry.addresses != before {
            self.dirty.insert(peer);
        }
        self.removed.remove(&peer);
        self.insert(peer, entry);
        self.evict_past_max(Some(peer));
    }

    /// Keeps `summary` as `peer`'s last (it must be in the book: call
    /// [`seen`](Self::seen) first). An older one than the entry holds is
    /// ignored.
    pub fn heard_summary(&mut self, peer: PeerId, summary: HeardSummary) {
        let Some(entry) = self.entries.get_mut(&peer) else {
            return;
        };
        if entry
            .summary
            .as_ref()
            .is_some_and(|s| s.heard_unix > summary.heard_unix)
        {
            return;
        }
        entry.summary = Some(summary);
        if !self.dirty.contains(&peer) {
            self.newer_summary.insert(peer);
        }
    }

    /// Peers by when they were last seen, most recent first.
    pub fn most_recent(&self) -> impl Iterator<Item = (&PeerId, &BookEntry)> {
        self.by_seen
            .iter()
            .rev()
            .filter_map(|(_, peer)| self.entries.get_key_value(peer))
    }

    /// Hands over what must be written and forgets it (the caller writes it
    /// or, on a failed write, calls [`seen`](Self::seen) again later).
    pub fn take_changes(&mut self) -> BookChanges {
        self.take(false)
    }

    /// The last write's changes (a clean stop): also the entries whose only
    /// change is a newer summary, so a restart lists the freshest ones.
    pub fn take_final_changes(&mut self) -> BookChanges {
        self.take(true)
    }

    fn take(&mut self, last: bool) -> BookChanges {
        if last {
            self.dirty.extend(self.newer_summary.drain());
        }
        let dirty: Vec<PeerId> = self.dirty.drain().collect();
        for peer in &dirty {
            self.newer_summary.remove(peer);
        }
        let mut upserts: Vec<(PeerId, BookEntry)> = dirty
            .into_iter()
            .filter_map(|peer| Some((peer, self.entries.get(&peer)?.clone())))
            .collect();
        upserts.sort_by_key(|(peer, _)| *peer);
        for (peer, entry) in &upserts {
            self.written_seen.insert(*peer, entry.last_seen);
        }
        let mut removals: Vec<PeerId> = self.removed.drain().collect();
        removals.sort();
        BookChanges { upserts, removals }
    }

    /// True when [`take_changes`](Self::take_changes) has something to hand over.
    pub fn has_changes(&self) -> bool {
        !self.dirty.is_empty() || !self.removed.is_empty()
    }

    /// True when [`take_final_changes`](Self::take_final_changes) has
    /// something to hand over.
    pub fn has_final_changes(&self) -> bool {
        self.has_changes() || !self.newer_summary.is_empty()
    }

    fn insert(&mut self, peer: PeerId, entry: BookEntry) {
        if let Some(old) = self.entries.insert(peer, entry.clone()) {
            self.by_seen.remove(&(old.last_seen, peer));
        }
        self.by_seen.insert((entry.last_seen, peer));
    }

    fn remove_entry(&mut self, peer: &PeerId) -> Option<BookEntry> {
        let entry = self.entries.remove(peer)?;
        self.by_seen.remove(&(entry.last_seen, *peer));
        Some(entry)
    }

    /// Drops the least recently seen entries past `max`, never `keep` (the
    /// peer just seen, even if the clock gave it an old time).
    fn evict_past_max(&mut self, keep: Option<PeerId>) {
        while self.entries.len() > self.max {
            let Some(&(_, oldest)) = self.by_seen.iter().find(|(_, peer)| Some(*peer) != keep)
            else {
                return;
            };
            self.remove_entry(&oldest);
            self.dirty.remove(&oldest);
            self.newer_summary.remove(&oldest);
            self.written_seen.remove(&oldest);
            self.removed.insert(oldest);
        }
    }
}

/// Fewer open connections than this and the node redials remembered peers.
pub const WANTED_CONNECTIONS: usize = 4;
/// Remembered peers dialed at once.
pub const REDIAL_AT_ONCE: usize = 3;
/// First wait before a remembered peer that failed is dialed again; doubled
/// after each failure up to [`REDIAL_WAIT_MAX`].
pub const REDIAL_WAIT_FIRST: Duration = Duration::from_secs(2);
/// Longest wait between two attempts at one remembered peer.
pub const REDIAL_WAIT_MAX: Duration = Duration::from_secs(300);

/// One dial the network task should start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redial {
    pub peer: PeerId,
    pub addresses: Vec<Multiaddr>,
}

/// Which remembered peers to dial, when: while the node has fewer than
/// [`WANTED_CONNECTIONS`] connections, up to [`REDIAL_AT_ONCE`] of the most
/// recently seen peers it is not connected to are dialed, each failure
/// doubling that peer's wait.
#[derive(Debug, Default)]
pub struct Redialer {
    /// Dials started and not yet answered.
    in_flight: HashSet<PeerId>,
    /// Per peer: the wait after its next failure and when it may be dialed again.
    backoff: HashMap<PeerId, (Duration, Instant)>,
}

impl Redialer {
    /// The dials to start now, given the book, the peers we are connected to
    /// and the time.
    #[must_use]
    pub fn plan(
        &mut self,
        book: &PeerBook,
        connected: &HashSet<PeerId>,
        now: Instant,
    ) -> Vec<Redial> {
        if connected.len() >= WANTED_CONNECTIONS {
            return Vec::new();
        }
        let room = REDIAL_AT_ONCE.saturating_sub(self.in_flight.len());
        let dials: Vec<Redial> = book
            .most_recent()
            .filter(|(peer, entry)| {
                !entry.addresses.is_empty()
                    && !connected.contains(*peer)
                    && !self.in_flight.contains(*peer)
                    && self.backoff.get(*peer).is_none_or(|(_, at)| *at <= now)
            })
            .take(room)
            .map(|(peer, entry)| Redial {
                peer: *peer,
                addresses: entry.addresses.clone(),
            })
            .collect();
        self.in_flight.extend(dials.iter().map(|d| d.peer));
        dials
    }

    /// A connection to `peer` opened: its back-off starts over.
    pub fn connected(&mut self, peer: &PeerId) {
        self.in_flight.remove(peer);
        self.backoff.remove(peer);
    }

    /// A dial of `peer` failed (or could not start) at `now`.
    pub fn failed(&mut self, peer: &PeerId, now: Instant) {
        if !self.in_flight.remove(peer) {
            return;
        }
        let wait = self
            .backoff
            .get(peer)
            .map_or(REDIAL_WAIT_FIRST, |(w, _)| *w);
        self.backoff
            .insert(*peer, ((wait * 2).min(REDIAL_WAIT_MAX), now + wait));
    }

    /// Remembered peers being tried: dialed now or waiting for their next
    /// attempt.
    pub fn trying(&self) -> usize {
        self.in_flight.len()
            + self
                .backoff
                .keys()
                .filter(|p| !self.in_flight.contains(*p))
                .count()
    }

    /// Remembered peers dialed now.
    pub fn dialing(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests;
