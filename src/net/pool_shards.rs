//! The pool's provider keys in the DHT, sharded so that every member can be
//! found however large the pool: decisions only, no Swarm.
//!
//! A Kademlia node keeps at most 20 providers per key (rust-libp2p's
//! `MemoryStore`, which ignores newcomers once a key is full), so one key
//! for the whole pool lists 20 members at most. The keys here form a binary
//! trie: the root is the pool's original key (`/gleaner/pool/<pool>`, what
//! version 1 nodes provide and read), and the shard at depth `d` with prefix
//! `p` holds the members whose peer id hashes (BLAKE3) start with the `d`
//! bits of `p`. A member provides exactly one key: the shallowest one on its
//! own path that is not full ([`Placement`]); a lister walks the trie from
//! the root and goes down under every key that holds at least half of
//! [`SHARD_FULL`] providers ([`Walk`]). A small pool is therefore one key and
//! one query, as before; a pool of N members is about N / 8 keys, each
//! holding at most [`SHARD_FULL`] members, and listing it costs about N / 4
//! queries. Finding *some* members (a sample) costs one walk down a random
//! path.
//!
//! Members move up as well as down: a member whose parent key holds fewer
//! than half of [`SHARD_FULL`] providers moves up to it, so a lister that
//! stops at a half-empty key misses no one for longer than one re-check.
//!
//! This module knows peer ids and key bytes; it must not know the Swarm,
//! the clock or how queries are sent.

use std::collections::HashSet;

use libp2p::PeerId;

use crate::model::ids::PoolName;
use crate::net::protocol::pool_dht_key;

/// Providers at which a member stops adding itself to a key and goes one
/// level down: below the 20 a `MemoryStore` keeps, so the members of a
/// shard fit in every node's store with room for the races of members that
/// place themselves at the same time.
pub const SHARD_FULL: usize = 16;

/// Deepest shard: 2^16 leaves of [`SHARD_FULL`] members, a million members.
pub const SHARD_DEPTH_MAX: u8 = 16;

/// Most keys one listing asks for: bounds what a `hosts` costs in a pool
/// larger than any a lister should enumerate (about 8,000 members).
pub const WALK_KEYS_MAX: usize = 2048;

/// One key of the trie: the first `depth` bits of `bits` (high bits first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard {
    bits: u32,
    depth: u8,
}

impl Shard {
    /// The root: the pool's original key.
    pub const ROOT: Shard = Shard { bits: 0, depth: 0 };

    /// How deep this key is (0 for the root).
    pub fn depth(self) -> u8 {
        self.depth
    }

    /// Its bits, high bits first, the rest zero (as on the wire).
    pub fn bits(self) -> u32 {
        self.bits
    }

    /// The key a peer names on the wire, or `None` when it cannot be one:
    /// deeper than [`SHARD_DEPTH_MAX`] or with bits set past its depth.
    pub fn from_wire(depth: u8, bits: u32) -> Option<Shard> {
        (depth <= SHARD_DEPTH_MAX && prefix(bits, depth) == bits).then_some(Shard { bits, depth })
    }

    /// Its bits as 0 and 1 (`root` for the root): the leaf's topic name.
    pub fn label(self) -> String {
        if self.depth == 0 {
            return "root".into();
        }
        (0..self.depth)
            .map(|i| {
                if (self.bits >> (31 - u32::from(i))) & 1 == 1 {
                    '1'
                } else {
                    '0'
                }
            })
            .collect()
    }

    /// The shard of `member`'s path at `depth` (at most [`SHARD_DEPTH_MAX`]).
    pub fn of(member: &PeerId, depth: u8) -> Shard {
        let depth = depth.min(SHARD_DEPTH_MAX);
        let hash = blake3::hash(&member.to_bytes());
        let b = hash.as_bytes();
        let all = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        Shard {
            bits: prefix(all, depth),
            depth,
        }
    }

    /// True when `member`'s path goes through this key.
    pub fn holds(self, member: &PeerId) -> bool {
        Shard::of(member, self.depth) == self
    }

    /// The key one level up; the root is its own parent.
    pub fn parent(self) -> Shard {
        let depth = self.depth.saturating_sub(1);
        Shard {
            bits: prefix(self.bits, depth),
            depth,
        }
    }

    /// Both keys one level down, or none at [`SHARD_DEPTH_MAX`].
    pub fn children(self) -> Option<[Shard; 2]> {
        if self.depth >= SHARD_DEPTH_MAX {
            return None;
        }
        let depth = self.depth + 1;
        let one = 1u32 << (32 - u32::from(depth));
        Some([
            Shard {
                bits: self.bits,
                depth,
            },
            Shard {
                bits: self.bits | one,
                depth,
            },
        ])
    }

    /// The key's bytes in the DHT: the pool's key for the root, else
    /// `/gleaner/pool/<pool>/shard/<d bits as 0 and 1>`.
    pub fn key(self, pool: &PoolName) -> Vec<u8> {
        let mut key = pool_dht_key(pool);
        if self.depth > 0 {
            key.extend_from_slice(b"/shard/");
            for i in 0..self.depth {
                let bit = (self.bits >> (31 - u32::from(i))) & 1;
                key.push(if bit == 1 { b'1' } else { b'0' });
            }
        }
        key
    }
}

/// The first `depth` bits of `bits`, the rest zero.
fn prefix(bits: u32, depth: u8) -> u32 {
    match depth {
        0 => 0,
        d if d >= 32 => bits,
        d => bits & !(u32::MAX >> d),
    }
}

/// What the node should do next to keep its own provider record in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum PlaceStep {
    /// Ask the DHT for this key's providers and report them with
    /// [`Placement::probed`].
    Probe(Shard),
    /// Provide this key (again: a refresh keeps the record alive); stop
    /// providing `leave` if set, the key we provided before.
    Provide {
        /// The key to provide.
        at: Shard,
        /// The key we leave.
        leave: Option<Shard>,
    },
    /// Stay where we provide without sending our record again: the probe
    /// found us listed there and the check before refreshed it, so the
    /// record is at most two re-checks old (under an hour,
    /// `swarm::PROVIDER_RECORD_TTL`). Providing is a lookup and a put to
    /// every holder, a third of a re-check's connections.
    Stay(Shard),
}

/// Where this member provides, and the re-check under way: a pure state
/// machine the network task drives (a check starts with [`Placement::check`]
/// on a timer, each probe's providers come back through
/// [`Placement::probed`]).
#[derive(Debug, Clone)]
pub struct Placement {
    me: PeerId,
    full: usize,
    /// The key we provide, once placed.
    at: Option<Shard>,
    /// The probe we wait for, and whether it looks at our parent (to move
    /// up) or at a key on the way down.
    probing: Option<(Shard, Looking)>,
    /// The last check that ended where we provide sent our record.
    sent_last: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Looking {
    Up,
    Down,
}

impl Placement {
    /// A member not placed yet; `full` is [`SHARD_FULL`] but for tests.
    pub fn new(me: PeerId, full: usize) -> Placement {
        Placement {
            me,
            full: full.max(2),
            at: None,
            probing: None,
            sent_last: false,
        }
    }

    /// The key we provide now.
    pub fn at(&self) -> Option<Shard> {
        self.at
    }

    /// True while a probe is out.
    pub fn checking(&self) -> bool {
        self.probing.is_some()
    }

    /// Starts a re-check: from the root when not placed yet, else by looking
    /// at our parent (to move up when it emptied). A check already under
    /// way is started again (its probe's answer will be ignored).
    pub fn check(&mut self) -> PlaceStep {
        let (shard, looking) = match self.at {
            Some(at) if at.depth() > 0 => (at.parent(), Looking::Up),
            _ => (Shard::ROOT, Looking::Down),
        };
        self.probing = Some((shard, looking));
        PlaceStep::Probe(shard)
    }

    /// The providers a probe of `shard` found (ourselves included if listed).
    /// Returns the next step, or `None` for an answer we were not waiting for.
    pub fn probed(&mut self, shard: Shard, providers: &HashSet<PeerId>) -> Option<PlaceStep> {
        let (want, looking) = self.probing?;
        if want != shard {
            return None;
        }
        let listed = providers.contains(&self.me);
        let others = providers.len() - usize::from(listed);
        let step = match looking {
            Looking::Up if others < self.full / 2 => self.provide(shard, listed),
            Looking::Up => {
                // The parent is well filled: stay, and look at our own key.
                let own = self.at.unwrap_or(Shard::ROOT);
                self.probing = Some((own, Looking::Down));
                PlaceStep::Probe(own)
            }
            Looking::Down => match shard.children() {
                Some(children)
                    if (!listed && others >= self.full)
                        || (listed && self.crowded_out(providers)) =>
                {
                    let next = children[usize::from(!children[0].holds(&self.me))];
                    self.probing = Some((next, Looking::Down));
                    PlaceStep::Probe(next)
                }
                _ => self.provide(shard, listed),
            },
        };
        Some(step)
    }

    /// We provide a key that holds more than `full` providers (members that
    /// placed themselves at once all saw it not full) and `full` of them
    /// rank before us: we go one level down. Peer id order is one every
    /// member sees alike, so the first `full` stay and the rest go at their
    /// next re-check; without it a crowded key stayed crowded for good (in
    /// the 300-member harness some leaf topics carried 40 to 85 members,
    /// each hearing all of them, while a lister saw at most 20).
    fn crowded_out(&self, providers: &HashSet<PeerId>) -> bool {
        providers.len() > self.full
            && providers.iter().filter(|p| **p < self.me).count() >= self.full
    }

    /// Ends a check at `at`, where the probe found us `listed` or not: our
    /// record is sent unless we stay listed where the last check sent it
    /// (every second re-check refreshes it).
    fn provide(&mut self, at: Shard, listed: bool) -> PlaceStep {
        self.probing = None;
        let leave = self.at.filter(|old| *old != at);
        let kept = listed && self.at == Some(at) && self.sent_last;
        self.at = Some(at);
        self.sent_last = !kept;
        if kept {
            PlaceStep::Stay(at)
        } else {
            PlaceStep::Provide { at, leave }
        }
    }
}

/// The pool's size as a member's place in the trie says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// Members, about.
    pub members: u64,
    /// Only a floor: our own key is full, so members may sit below it that
    /// we cannot count (the first members, placed at the root, keep it).
    pub at_least: bool,
}

/// The pool's size as a member placed at `at` sees it, with `mates` other
/// providers of its key (`full` is [`SHARD_FULL`] but for tests): every key
/// above it on its path was full when it was placed (else it would provide
/// one of them), so about `full` members sit at each of the 2^d keys of
/// every depth d above it, and its own depth's 2^D keys hold about as many
/// as its own (hashes spread members evenly: the trie's depth differs by a
/// level or so between paths, so within about a factor of two). A member
/// whose own key is full sees no deeper: its figure is a floor. What
/// `hosts` says of a pool it samples; it costs no query (the placement's
/// probes found the mates).
pub fn pool_size_estimate(at: Shard, mates: usize, full: usize) -> PoolSize {
    let keys_here = 1u64 << at.depth().min(SHARD_DEPTH_MAX);
    let above = (keys_here - 1).saturating_mul(full as u64);
    PoolSize {
        members: above.saturating_add(keys_here.saturating_mul(mates as u64 + 1)),
        at_least: mates + 1 >= full,
    }
}

/// One listing of the pool through the trie: which keys to ask, what was
/// found. The network task asks the keys [`Walk::start`] and
/// [`Walk::answered`] return and ends the walk when [`Walk::done`] (or at a
/// deadline, with what it found so far).
#[derive(Debug, Clone)]
pub struct Walk {
    descend_at: usize,
    found: HashSet<PeerId>,
    asked: usize,
    outstanding: usize,
}

impl Walk {
    /// A walk that goes down under keys with at least `full / 2` providers.
    pub fn new(full: usize) -> Walk {
        Walk {
            descend_at: (full / 2).max(1),
            found: HashSet::new(),
            asked: 0,
            outstanding: 0,
        }
    }

    /// The first key to ask: the root.
    #[must_use]
    pub fn start(&mut self) -> Vec<Shard> {
        self.ask(vec![Shard::ROOT])
    }

    /// The providers of `shard`; returns the keys to ask next.
    #[must_use]
    pub fn answered(&mut self, shard: Shard, providers: &HashSet<PeerId>) -> Vec<Shard> {
        self.outstanding = self.outstanding.saturating_sub(1);
        self.found.extend(providers.iter().copied());
        let next = match shard.children() {
            Some(children) if providers.len() >= self.descend_at => children.to_vec(),
            _ => Vec::new(),
        };
        self.ask(next)
    }

    fn ask(&mut self, keys: Vec<Shard>) -> Vec<Shard> {
        let room = WALK_KEYS_MAX.saturating_sub(self.asked);
        let keys: Vec<Shard> = keys.into_iter().take(room).collect();
        self.asked += keys.len();
        self.outstanding += keys.len();
        keys
    }

    /// Every key asked has answered.
    pub fn done(&self) -> bool {
        self.outstanding == 0
    }

    /// Keys asked so far.
    pub fn asked(&self) -> usize {
        self.asked
    }

    /// The members found, for the reply.
    pub fn into_found(self) -> Vec<PeerId> {
        self.found.into_iter().collect()
    }
}

#[cfg(test)]
#[path = "pool_shards_tests.rs"]
mod tests;
