//! The peer book driven: members recorded as they announce (with the bytes
//! of their last summary) and as dials to them succeed, the book written at
//! most every [`WRITE_EVERY`] (and whole at a clean stop), remembered
//! members redialed (at start and while the node has few connections, with
//! the `Redialer`'s back-off), and the `Contact` report of whether any member
//! is reachable, since when not, and what the node is trying.
//!
//! The decisions are `peer_book`'s (pure); this file performs them. It must
//! not know about the request protocols or the pool's announcements beyond
//! the peer and addresses they name (a summary is opaque bytes here;
//! `membership` reads the remembered ones back at start).

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::{Multiaddr, PeerId};

use super::EventLoop;
use crate::net::peer_book::{BookStore, HeardSummary, PeerBook, Redialer, BOOK_MAX};
use crate::net::reachability::AddressScope;
use crate::net::routing_table;

/// How often the redialer looks at the connections.
pub(super) const REDIAL_TICK: Duration = Duration::from_secs(2);
/// Shortest time between two writes of the book.
const WRITE_EVERY: Duration = Duration::from_secs(5);

/// The book, where it is kept, and the redialer's state.
pub(super) struct Remembered {
    book: PeerBook,
    store: BookStore,
    redialer: Redialer,
    /// When the book was last written.
    written_at: Option<Instant>,
}

impl Remembered {
    /// Reads the book from `store`, keeping the addresses `scope` allows; a
    /// store that cannot be read leaves an empty book (the node still joins
    /// through its bootstrap peers).
    pub(super) fn open(store: BookStore, scope: AddressScope) -> Remembered {
        let book = match store.load(BOOK_MAX, |a| scope.usable(a)) {
            Ok(loaded) => {
                if loaded.unreadable > 0 {
                    tracing::warn!(
                        dropped = loaded.unreadable,
                        "peer book: dropped entries that did not read"
                    );
                }
                tracing::info!(remembered = loaded.book.len(), "peer book read");
                loaded.book
            }
            Err(e) => {
                tracing::warn!("peer book unreadable, starting empty: {e}");
                PeerBook::new(BOOK_MAX)
            }
        };
        Remembered {
            book,
            store,
            redialer: Redialer::default(),
            written_at: None,
        }
    }
}

impl Remembered {
    /// The addresses the book holds for `peer` (the one that last worked
    /// first); none for a peer it does not know.
    pub(super) fn addresses_of(&self, peer: &PeerId) -> Vec<Multiaddr> {
        self.book
            .get(peer)
            .map(|e| e.addresses.clone())
            .unwrap_or_default()
    }

    /// Every remembered member's last summary, as stored.
    pub(super) fn summaries(&self) -> impl Iterator<Item = (PeerId, &HeardSummary)> {
        self.book
            .most_recent()
            .filter_map(|(peer, entry)| Some((*peer, entry.summary.as_ref()?)))
    }
}

/// Unix seconds now.
pub(super) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl EventLoop {
    /// A member announced itself from `told` addresses (those we could use),
    /// in a summary of these `bytes` (checked) when it sent one.
    pub(super) fn remember_member(
        &mut self,
        peer: PeerId,
        told: &[Multiaddr],
        summary: Option<&[u8]>,
    ) {
        if let Some(r) = &mut self.remembered {
            let now = unix_now();
            r.book.seen(peer, told, None, now);
            if let Some(bytes) = summary {
                r.book.heard_summary(
                    peer,
                    HeardSummary {
                        heard_unix: now,
                        bytes: bytes.into(),
                    },
                );
            }
        }
    }

    /// A connection to `peer` opened; `dialed` is the address we reached it
    /// at when we dialed. A member's address that worked goes first in its
    /// entry; peers that are not members are not recorded.
    pub(super) fn remember_connection(&mut self, peer: PeerId, dialed: Option<&Multiaddr>) {
        let member = self.members.contains_key(&peer);
        let Some(r) = &mut self.remembered else {
            return;
        };
        r.redialer.connected(&peer);
        if member || r.book.contains(&peer) {
            let worked = dialed.filter(|a| self.scope.usable(a));
            r.book.seen(peer, &[], worked, unix_now());
        }
    }

    /// The last connection to `peer` closed: a member was seen until now.
    pub(super) fn remember_closed(&mut self, peer: PeerId) {
        if let Some(r) = &mut self.remembered {
            if r.book.contains(&peer) {
                r.book.seen(peer, &[], None, unix_now());
            }
        }
    }

    /// A dial of `peer` failed: a redial of it waits longer next time.
    pub(super) fn remember_dial_failed(&mut self, peer: PeerId) {
        if let Some(r) = &mut self.remembered {
            r.redialer.failed(&peer, Instant::now());
        }
    }

    /// The redial tick: dials the remembered members the redialer picks,
    /// writes the book if it changed and the last write is old enough, and
    /// refreshes the contact report.
    pub(super) fn on_redial_tick(&mut self) {
        let connected: HashSet<PeerId> = self.swarm.connected_peers().copied().collect();
        let now = Instant::now();
        let dials = match &mut self.remembered {
            Some(r) => r.redialer.plan(&r.book, &connected, now),
            None => Vec::new(),
        };
        for dial in dials {
            tracing::debug!(peer = %dial.peer, addresses = ?dial.addresses, "redialing a remembered member");
            for addr in &dial.addresses {
                let _ = routing_table::learn(
                    &mut self.swarm.behaviour_mut().kad,
                    &dial.peer,
                    addr.clone(),
                );
            }
            let opts = DialOpts::peer_id(dial.peer)
                .addresses(dial.addresses)
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build();
            if let Err(e) = self.swarm.dial(opts) {
                tracing::debug!(peer = %dial.peer, "redial not started: {e}");
                self.remember_dial_failed(dial.peer);
            }
        }
        self.write_book(false);
        self.refresh_reach();
    }

    /// Writes what changed in the book: at most every [`WRITE_EVERY`], or now
    /// when `last` (the loop is stopping).
    pub(super) fn write_book(&mut self, last: bool) {
        let Some(r) = &mut self.remembered else {
            return;
        };
        let due = last || r.written_at.is_none_or(|at| at.elapsed() >= WRITE_EVERY);
        let changed = if last {
            r.book.has_final_changes()
        } else {
            r.book.has_changes()
        };
        if !due || !changed {
            return;
        }
        let changes = if last {
            r.book.take_final_changes()
        } else {
            r.book.take_changes()
        };
        r.written_at = Some(Instant::now());
        if let Err(e) = r.store.write(&changes) {
            tracing::warn!("peer book not written: {e}");
            return;
        }
        // On disk now rather than at sled's next background flush (a
        // backstop every `FLUSH_MS`); an fsync must not hold up the loop,
        // except for the last write, which the node waits for as it stops.
        let store = r.store.clone();
        let flush = move || {
            if let Err(e) = store.flush() {
                tracing::warn!("peer book not flushed: {e}");
            }
        };
        if last {
            flush();
        } else {
            drop(tokio::task::spawn_blocking(flush));
        }
    }

    /// Recomputes the contact report: members connected, since when none
    /// is, and what is being redialed.
    pub(super) fn refresh_contact(&mut self) {
        let connected: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
        let is_member = |p: &PeerId| {
            self.members.contains_key(p)
                || self.bootstrap_peers.contains_key(p)
                || self.remembered.as_ref().is_some_and(|r| r.book.contains(p))
        };
        let members = connected.iter().filter(|p| is_member(p)).count();
        let redialing_bootstrap = self
            .bootstrap_peers
            .keys()
            .filter(|p| !connected.contains(p))
            .count();
        let (peer_book, remembered, redialing_remembered) = match &self.remembered {
            Some(r) => (true, r.book.len(), r.redialer.trying()),
            None => (false, 0, 0),
        };
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let was_alone = self.reach.borrow().contact.alone_since.is_some();
        if members == 0 && !was_alone {
            tracing::info!(
                remembered,
                redialing_remembered,
                redialing_bootstrap,
                "no pool member reachable; redialing remembered members and bootstrap peers"
            );
        } else if members > 0 && was_alone {
            tracing::info!(members, "in touch with the pool again");
        }
        self.reach.send_if_modified(|reach| {
            let before = reach.contact.clone();
            let c = &mut reach.contact;
            c.members_connected = count(members);
            c.alone_since = match (members, c.alone_since) {
                (0, None) => Some(unix_now()),
                (0, since) => since,
                _ => None,
            };
            c.peer_book = peer_book;
            c.remembered = count(remembered);
            c.redialing_remembered = count(redialing_remembered);
            c.redialing_bootstrap = count(redialing_bootstrap);
            reach.contact != before
        });
    }
}
