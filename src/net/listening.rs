//! Whether this node listens to the pool's summaries (issue 27, scope 3:
//! "hosts that have nothing to say stay quiet"): decisions only, no Swarm.
//!
//! On one pool-wide topic every listener hears every member's summary, so
//! a listener's traffic and CPU grow with the pool (the harness measured
//! 1.7 KB/s in per host at 300 members). A host needs none of it: it is
//! heard, it does not place. So in a large pool a node listens only while
//! it wants to know the pool: while something asks for its members (a
//! survey, `hosts`, the dashboard) and for [`WATCH_FOR`] after. A host that
//! does not listen still publishes: gossipsub sends a publication on a
//! topic we are not in to the connected peers that are (its fanout), and a
//! consumer that joins the topic makes every connected member republish
//! within the minimum gap (`membership`), so it lists them at once.
//!
//! A small pool (fewer than [`LARGE_POOL`] members heard) is one mesh as
//! before: every node listens, so its members know each other. A node learns
//! that its pool is large by hearing that many members at once (or finding
//! that many in its peer book at start), and then stays a quiet host for the
//! rest of its run. A node that stops listening keeps its member table as it
//! was (`membership` does not expire members while not listening): its
//! relative power is measured against the claims it last heard, not
//! against its own alone.
//!
//! It must not know the Swarm, topics or the wire format.

use std::time::{Duration, Instant};

/// Members heard at once from which a pool counts as large: past it a host
/// that is not asked about the pool stops listening. Far above the pools of
/// a few nodes the tests and a household run, far below the size where
/// listening costs (about 4 B/s per member heard at the 300 s heartbeat).
pub const LARGE_POOL: usize = 64;

/// How long a node listens after the last request for its members: longer
/// than the longest a waiting batch goes between two surveys, so a consumer
/// with work keeps listening.
pub const WATCH_FOR: Duration = Duration::from_secs(5 * 60);

/// Listening or not, and why.
#[derive(Debug, Clone)]
pub struct Listening {
    /// Members heard at once from which the pool is large.
    large_at: usize,
    /// The pool was seen large: listen only while watching.
    large: bool,
    /// Something asked for the members; listen until then.
    watch_until: Option<Instant>,
}

impl Listening {
    /// A node that has not yet seen its pool large: it listens.
    pub fn new(large_at: usize) -> Listening {
        Listening {
            large_at: large_at.max(1),
            large: false,
            watch_until: None,
        }
    }

    /// The member table holds `members` now.
    pub fn heard(&mut self, members: usize) {
        if members >= self.large_at {
            self.large = true;
        }
    }

    /// A table of `members` would make a pool not yet seen large large: the
    /// node should stop listening at once, not at its next tick. A newcomer
    /// that listens while a consumer makes every member republish hears
    /// the whole pool within the second; at the tick, 10 s later, the
    /// harness's last-started hosts held up to 267 members of 300 where the
    /// first held 64 (and 4-5 MiB more heap: they were its largest).
    pub fn turns_large(&self, members: usize) -> bool {
        !self.large && members >= self.large_at
    }

    /// Someone asked for the pool's members at `now`.
    pub fn watch(&mut self, now: Instant) {
        self.watch_until = Some(now + WATCH_FOR);
    }

    /// True when the node should be on the summary topic at `now`.
    pub fn wants(&self, now: Instant) -> bool {
        !self.large || self.watching(now)
    }

    /// True while a request for the members is recent.
    pub fn watching(&self, now: Instant) -> bool {
        self.watch_until.is_some_and(|t| now < t)
    }

    /// True once the pool was seen large.
    pub fn large(&self) -> bool {
        self.large
    }
}

/// Hosts a `gleaner hosts` of a large pool lists by default: a sample of
/// the pool's DHT leaves naming about this many (`leaf_digest`), as many as
/// a batch of 32 tasks wants, a few digests whatever the pool's size.
pub const HOSTS_SAMPLE: usize = 64;

/// How `gleaner hosts` finds the hosts it lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct HostsPlan {
    /// Join the pool-wide summary topic for [`WATCH_FOR`] (every connected
    /// member republishes to us) and list the member table.
    pub listen: bool,
    /// List the members a leaf-digest sample of about this many hosts
    /// names (no pool-wide topic), with what the member table holds.
    pub sample: Option<usize>,
    /// With `--probe`: walk the whole DHT trie for its providers and ask
    /// each (about N / 4 DHT queries and N reliability queries).
    pub walk: bool,
}

/// What a user of `hosts` gets. In a small pool, every member: the node
/// hears them all anyway (it listens), and `--probe` asks every member and
/// DHT provider. In a large pool (`large`), listing every host costs the
/// node the pool-wide topic (every member's summary, ~4 B/s each while it
/// listens) and, with `--probe`, a walk of the whole trie and a query per
/// member: O(N). So by default it lists the hosts it knows and a bounded
/// sample of the leaves ([`HOSTS_SAMPLE`]), and `--probe` asks only those;
/// `all` (`hosts --all`) is the explicit O(N) listing, as before.
pub fn hosts_plan(large: bool, all: bool, probe: bool) -> HostsPlan {
    if large && !all {
        HostsPlan {
            listen: false,
            sample: Some(HOSTS_SAMPLE),
            walk: false,
        }
    } else {
        HostsPlan {
            listen: true,
            sample: None,
            walk: probe,
        }
    }
}

/// A connection younger than this is taken as just opened: a subscription
/// heard on it is the peer's hello (gossipsub tells a new connection every
/// topic the peer is on), not the peer joining a topic.
pub const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// What a subscriber to the summary topic is, as far as republishing for it
/// goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscriber {
    /// We are on the summary topic ourselves (a small pool's mesh, or
    /// watching a large one).
    pub we_listen: bool,
    /// It is in our member table, heard within the member TTL.
    pub known_member: bool,
    /// Its newest connection to us opened within [`HELLO_WITHIN`].
    pub just_connected: bool,
}

/// Whether a peer that subscribed to the summary topic should get our
/// summary again now (`membership::republish`, at most once per gap).
///
/// A peer that joins the topic has not heard our last summary: yes. But a
/// member we hear on a mesh we are on, reconnecting (a DHT re-check dials
/// some 40 peers, and gossipsub's hello on each new connection reads as a
/// subscription), has been hearing us all along; republishing for each made
/// every member of a small pool republish at every pool-wide re-check, so
/// each heard the whole pool again (measured at N = 40–60: ~0.3–0.6 MB per
/// host per re-check). A quiet host (not listening) always republishes: its
/// subscribers are the few consumers watching the pool, and one that
/// reconnects may have missed what went out while it was away.
///
/// The same holds for our leaf's topic (we are always on it): a leaf mate
/// whose summary we keep has been on the leaf's mesh with us.
#[must_use]
pub fn republish_for(s: Subscriber) -> bool {
    !(s.we_listen && s.known_member && s.just_connected)
}

/// Why our summary goes out again before its heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Republish {
    /// Our addresses changed: everyone who hears us should know.
    Address,
    /// A peer joined the pool-wide summary topic.
    PoolSubscriber,
    /// A leaf mate joined our leaf's topic.
    LeafMate,
    /// We joined a leaf's topic (or moved to another).
    LeafJoined,
}

impl Republish {
    /// Where the republication goes: only to the topic whose newcomer has
    /// not heard us. A consumer that starts watching the pool used to make
    /// every member republish on its leaf's topic too, so each leaf heard
    /// all its members again for nothing.
    #[must_use]
    pub fn topics(self) -> Topics {
        match self {
            Republish::Address => Topics::ALL,
            Republish::PoolSubscriber => Topics {
                pool: true,
                leaf: false,
            },
            Republish::LeafMate | Republish::LeafJoined => Topics {
                pool: false,
                leaf: true,
            },
        }
    }
}

/// The topics a publication of our summary goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Topics {
    /// The pool-wide summary topics (every format that goes out).
    pub pool: bool,
    /// Our leaf's topic, when we are on one.
    pub leaf: bool,
}

impl Topics {
    pub const ALL: Topics = Topics {
        pool: true,
        leaf: true,
    };
    pub const NONE: Topics = Topics {
        pool: false,
        leaf: false,
    };

    /// Both sets' topics.
    #[must_use]
    pub fn and(self, other: Topics) -> Topics {
        Topics {
            pool: self.pool || other.pool,
            leaf: self.leaf || other.leaf,
        }
    }

    #[must_use]
    pub fn any(self) -> bool {
        self.pool || self.leaf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_pool_listens_always() {
        let now = Instant::now();
        let mut l = Listening::new(LARGE_POOL);
        l.heard(LARGE_POOL - 1);
        assert!(l.wants(now));
        assert!(l.wants(now + Duration::from_secs(86_400)));
    }

    #[test]
    fn a_large_pool_listens_only_while_watched() {
        let now = Instant::now();
        let mut l = Listening::new(LARGE_POOL);
        l.heard(LARGE_POOL);
        assert!(
            !l.wants(now),
            "a host of a large pool nobody asks about is quiet"
        );
        l.watch(now);
        assert!(l.wants(now + WATCH_FOR - Duration::from_secs(1)));
        assert!(!l.wants(now + WATCH_FOR));
        // Members expire while it does not listen: still large.
        l.heard(3);
        l.watch(now + WATCH_FOR);
        assert!(l.wants(now + WATCH_FOR));
        assert!(!l.wants(now + 2 * WATCH_FOR + Duration::from_secs(1)));
    }

    #[test]
    fn a_pool_turns_large_once_at_its_threshold() {
        let mut l = Listening::new(LARGE_POOL);
        assert!(!l.turns_large(LARGE_POOL - 1));
        assert!(l.turns_large(LARGE_POOL));
        l.heard(LARGE_POOL);
        assert!(
            !l.turns_large(LARGE_POOL + 1),
            "already large: nothing to do"
        );
    }

    #[test]
    fn a_threshold_of_zero_is_one() {
        let mut l = Listening::new(0);
        l.heard(0);
        assert!(l.wants(Instant::now()));
        l.heard(1);
        assert!(!l.wants(Instant::now()));
    }

    #[test]
    fn hosts_in_a_large_pool_samples_without_the_pool_topic_or_a_walk() {
        for probe in [false, true] {
            let plan = hosts_plan(true, false, probe);
            assert!(!plan.listen, "no pool-wide topic (probe {probe})");
            assert!(!plan.walk, "no O(N) walk of the trie (probe {probe})");
            assert_eq!(plan.sample, Some(HOSTS_SAMPLE));
        }
        // Asked for every host, it pays for it: the old listing.
        let all = hosts_plan(true, true, true);
        assert!(all.listen && all.walk && all.sample.is_none());
        assert!(!hosts_plan(true, true, false).walk, "a walk only to probe");
        // A small pool lists every member, as before.
        for all in [false, true] {
            let plan = hosts_plan(false, all, true);
            assert!(plan.listen && plan.walk && plan.sample.is_none());
        }
    }

    #[test]
    fn a_known_member_reconnecting_to_a_listener_gets_no_republication() {
        let on_mesh = Subscriber {
            we_listen: true,
            known_member: true,
            just_connected: true,
        };
        assert!(!republish_for(on_mesh), "a hello from a member we hear");
        assert!(
            republish_for(Subscriber {
                known_member: false,
                ..on_mesh
            }),
            "a newcomer has not heard us"
        );
        assert!(
            republish_for(Subscriber {
                just_connected: false,
                ..on_mesh
            }),
            "a member joining the topic on a standing connection (a consumer that watches again)"
        );
        assert!(
            republish_for(Subscriber {
                we_listen: false,
                ..on_mesh
            }),
            "a quiet host republishes for every subscriber"
        );
    }

    #[test]
    fn a_republication_goes_only_where_its_newcomer_is() {
        let pool = Republish::PoolSubscriber.topics();
        assert!(
            pool.pool && !pool.leaf,
            "a consumer watching: not every leaf again"
        );
        for why in [Republish::LeafMate, Republish::LeafJoined] {
            let leaf = why.topics();
            assert!(leaf.leaf && !leaf.pool, "{why:?}: not the pool-wide topic");
        }
        assert_eq!(Republish::Address.topics(), Topics::ALL);
        assert_eq!(pool.and(Republish::LeafMate.topics()), Topics::ALL);
        assert!(!Topics::NONE.any());
    }
}
