//! Which connections a member closes so that what it holds does not grow
//! with the pool: the rule, pure (no Swarm, no clock: the driver in
//! `event_loop::trimming` hands in the links and `now`).
//!
//! Why it is needed: gossipsub keeps a stream open on every connection to a
//! peer on its topics, and libp2p keeps a connection alive while any stream
//! is open, so the idle timeout never fires between members. Every
//! connection a Kademlia query, a listing or a peer's dial ever opened
//! stayed, and each member ended up connected to every other (measured: 20
//! peers at N = 20, 50 at N = 50), each connection costing memory (buffers
//! and per-protocol state) and wake-ups (pings, gossip) — a per-node cost
//! O(N).
//!
//! The rule (go-libp2p's connection manager, reduced): above
//! [`TrimLimits::high`] connected peers, close the connections we dialed to
//! peers we do not need, the longest unused first, down to
//! [`TrimLimits::low`]. Needed are: peers in our gossip mesh (they carry the
//! summaries), our bootstrap peers, peers we exchanged a job or reliability
//! request with recently (a consumer and the hosts it placed on; the data
//! streams of a job follow its requests), and connections younger than the
//! grace (a Kademlia query or a listing still using them). Only the dialer
//! closes: the side that was dialed may be the bootstrap peer of the
//! dialer, which would dial it again at once; a dialer that wants the
//! connection keeps it. Per connection: of a peer that dialed us too, only
//! our connection closes.
//!
//! This module must not know libp2p's behaviours or the node.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The bounds of the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrimLimits {
    /// Connected peers above which we close some.
    pub high: usize,
    /// Connected peers we close down to.
    pub low: usize,
    /// A connection younger than this is left alone (a query or listing
    /// may still use it).
    pub grace: Duration,
    /// A peer we exchanged a job or reliability request with this recently
    /// is kept.
    pub used_within: Duration,
}

impl Default for TrimLimits {
    /// Room for a full gossip mesh (8), a bootstrap peer, the consumers or
    /// hosts of running jobs and a few Kademlia contacts; a connection gets
    /// a minute, twice Kademlia's query timeout and far more than a listing
    /// waits (2.5 s); a peer used in the last hour is kept.
    fn default() -> Self {
        TrimLimits {
            high: 16,
            low: 12,
            grace: Duration::from_secs(60),
            used_within: Duration::from_secs(3600),
        }
    }
}

/// One open connection, as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// When it opened.
    pub opened_at: Instant,
    /// We dialed it (only the dialer closes).
    pub dialer: bool,
}

/// What the rule knows of one connected peer beyond its links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerUse {
    /// In our gossip mesh, a bootstrap peer, or with a request in flight.
    pub protected: bool,
    /// When we last exchanged a job or reliability request with it.
    pub last_used: Option<Instant>,
}

/// The peers whose connections to close now, longest unused first; empty
/// while at most `limits.high` peers are connected. `links` holds every
/// connected peer's open connections; a peer missing from `uses` is
/// unprotected and unused.
#[must_use]
pub fn to_close<P: Copy + Eq + Hash + Ord>(
    links: &HashMap<P, Vec<Link>>,
    uses: &HashMap<P, PeerUse>,
    now: Instant,
    limits: TrimLimits,
) -> Vec<P> {
    let connected = links.len();
    if connected <= limits.high {
        return Vec::new();
    }
    let mut closable: Vec<(Option<Instant>, Instant, P)> = links
        .iter()
        .filter_map(|(peer, conns)| {
            let used = uses.get(peer).copied().unwrap_or_default();
            let recently_used = used
                .last_used
                .is_some_and(|at| now.saturating_duration_since(at) < limits.used_within);
            // One of ours to close, and nothing young beside it. A
            // connection the peer dialed does not make ours unclosable:
            // members' DHT queries that dial each other at the same moment
            // leave each side one of its own and one of the other's, and
            // when only peers with nothing but ours could go such pairs
            // were closed by neither and added up (2 and 5 minutes into a
            // pool of 100: 152 of 876 and 142 of 1,348 links held two or
            // more connections). The driver closes ours only.
            let ours_and_old = conns.iter().any(|l| l.dialer)
                && conns
                    .iter()
                    .all(|l| now.saturating_duration_since(l.opened_at) >= limits.grace);
            let newest = conns.iter().map(|l| l.opened_at).max()?;
            (!used.protected && !recently_used && ours_and_old).then_some((
                used.last_used,
                newest,
                *peer,
            ))
        })
        .collect();
    // Never used first (None sorts first), then the longest unused, then
    // the oldest connection; the peer id settles ties so the order is stable.
    closable.sort();
    closable
        .into_iter()
        .take(connected.saturating_sub(limits.low))
        .map(|(_, _, peer)| peer)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn limits() -> TrimLimits {
        TrimLimits {
            high: 4,
            low: 2,
            grace: 2 * MIN,
            used_within: 60 * MIN,
        }
    }

    /// `n` peers, each with one connection we dialed at `opened`.
    fn dialed(n: u32, opened: Instant) -> HashMap<u32, Vec<Link>> {
        (0..n)
            .map(|p| {
                (
                    p,
                    vec![Link {
                        opened_at: opened,
                        dialer: true,
                    }],
                )
            })
            .collect()
    }

    #[test]
    fn at_or_below_the_high_mark_nothing_closes() {
        let t0 = Instant::now();
        let now = t0 + 10 * MIN;
        assert!(to_close(&dialed(4, t0), &HashMap::new(), now, limits()).is_empty());
        assert_eq!(
            to_close(&dialed(5, t0), &HashMap::new(), now, limits()).len(),
            3,
            "above the high mark, down to the low mark"
        );
    }

    #[test]
    fn protected_recent_young_and_inbound_links_stay() {
        let t0 = Instant::now();
        let now = t0 + 10 * MIN;
        let mut links = dialed(8, t0);
        // Peer 0 dialed us; peer 1 has a young connection beside an old one.
        links.insert(
            0,
            vec![Link {
                opened_at: t0,
                dialer: false,
            }],
        );
        links.get_mut(&1).unwrap().push(Link {
            opened_at: now - MIN,
            dialer: true,
        });
        let uses = HashMap::from([
            (
                2,
                PeerUse {
                    protected: true,
                    last_used: None,
                },
            ),
            (
                3,
                PeerUse {
                    protected: false,
                    last_used: Some(now - 30 * MIN),
                },
            ),
            (
                4,
                PeerUse {
                    protected: false,
                    last_used: Some(now - 61 * MIN),
                },
            ),
        ]);
        let closed = to_close(&links, &uses, now, limits());
        for kept in [0, 1, 2, 3] {
            assert!(!closed.contains(&kept), "{kept} closed: {closed:?}");
        }
        // 8 connected, down to 2 wanted, but only 4, 5, 6, 7 may go.
        assert_eq!(closed.len(), 4, "{closed:?}");
        assert!(closed.contains(&4), "used over an hour ago: may go");
    }

    /// Two members that dialed each other each hold one connection of
    /// their own: each closes its own (the driver keeps the other's), so
    /// the pair does not outlive both sides' need of it.
    #[test]
    fn a_peer_we_both_dialed_has_ours_closed() {
        let t0 = Instant::now();
        let now = t0 + 10 * MIN;
        let mut links = dialed(5, t0);
        links.get_mut(&0).unwrap().push(Link {
            opened_at: t0,
            dialer: false,
        });
        let closed = to_close(&links, &HashMap::new(), now, limits());
        assert!(closed.contains(&0), "{closed:?}");
        // A peer that only dialed us is still left to close its own.
        links.insert(
            0,
            vec![Link {
                opened_at: t0,
                dialer: false,
            }],
        );
        assert!(!to_close(&links, &HashMap::new(), now, limits()).contains(&0));
    }

    #[test]
    fn the_never_used_go_before_the_long_unused() {
        let t0 = Instant::now();
        let now = t0 + 120 * MIN;
        let links = dialed(5, t0);
        let uses: HashMap<u32, PeerUse> = (0..3)
            .map(|p| {
                (
                    p,
                    PeerUse {
                        protected: false,
                        last_used: Some(t0 + MIN * p),
                    },
                )
            })
            .collect();
        // 5 connected, 3 to close: the two never used (3, 4), then the
        // longest unused (0).
        assert_eq!(to_close(&links, &uses, now, limits()), vec![3, 4, 0]);
    }
}
