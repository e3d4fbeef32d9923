//! How a peer enters Kademlia's routing table: only where its bucket has
//! room, so that learning an address never makes the node dial anyone.
//!
//! rust-libp2p's Kademlia (0.49, `Behaviour::add_address` and its automatic
//! insert on every new connection) answers a new peer that falls into a
//! full bucket by dialing the bucket's least recently seen peer that is not
//! connected, to find out whether it is still alive. In a pool where
//! members close the connections they do not need (`net::trim`), nearly
//! every entry of a full bucket is disconnected, so every new contact made
//! a dial, that dial was a new contact at the other end, which dialed in
//! turn: in a pool of 300, 25 minutes after the start, one member took or
//! opened 132 connections in 30 s and members held 138 peers at the median
//! instead of about 15 (docs/scale.md). The original Kademlia keeps old
//! contacts and drops newcomers when a bucket is full; here the newcomer is
//! simply not added (no liveness check), and a dead entry leaves the table
//! when a query's dial to it fails, which Kademlia already does.
//!
//! The decision ([`may_learn`]) is pure; [`learn`] applies it to the
//! behaviour. This module must not know the event loop.

use libp2p::kad::{self, store::MemoryStore, KBucketKey};
use libp2p::{Multiaddr, PeerId};

/// Whether an address of a peer may go to the routing table: always for a
/// peer already in it (its addresses are updated in place), else only while
/// its bucket has room. `bucket` is the bucket's (entries, capacity), `None`
/// for our own key (which has no bucket).
#[must_use]
pub fn may_learn(in_table: bool, bucket: Option<(usize, usize)>) -> bool {
    match bucket {
        None => false,
        Some((entries, capacity)) => in_table || entries < capacity,
    }
}

/// Gives Kademlia `addr` for `peer` when [`may_learn`] allows it. Returns
/// whether it was given.
pub fn learn(kad: &mut kad::Behaviour<MemoryStore>, peer: &PeerId, addr: Multiaddr) -> bool {
    let key = KBucketKey::from(*peer);
    let bucket = kad.kbucket(*peer).map(|b| {
        let in_table = b.iter().any(|e| *e.node.key == key);
        (in_table, b.num_entries())
    });
    let allowed = may_learn(
        bucket.is_some_and(|(in_table, _)| in_table),
        bucket.map(|(_, entries)| (entries, kad::K_VALUE.get())),
    );
    if allowed {
        kad.add_address(peer, addr);
    }
    allowed
}

#[cfg(test)]
mod tests {
    use super::*;
    use libp2p::core::ConnectedPoint;
    use libp2p::swarm::behaviour::ConnectionEstablished;
    use libp2p::swarm::{ConnectionId, FromSwarm, NetworkBehaviour, ToSwarm};
    use std::task::{Context, Poll};

    #[test]
    fn a_known_peer_is_updated_and_a_newcomer_enters_only_where_there_is_room() {
        assert!(may_learn(false, Some((0, 20))));
        assert!(may_learn(false, Some((19, 20))));
        assert!(!may_learn(false, Some((20, 20))), "a full bucket");
        assert!(may_learn(true, Some((20, 20))), "already in it");
        assert!(!may_learn(false, None), "our own key");
    }

    /// Peers whose keys fall into the farthest bucket from `me` (half of
    /// all keys do).
    fn far_peers(me: PeerId, n: usize) -> Vec<PeerId> {
        let mine = KBucketKey::from(me);
        std::iter::repeat_with(PeerId::random)
            .filter(|p| mine.distance(&KBucketKey::from(*p)).ilog2() == Some(255))
            .take(n)
            .collect()
    }

    fn dials(kad: &mut kad::Behaviour<MemoryStore>) -> usize {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut n = 0;
        while let Poll::Ready(event) = kad.poll(&mut cx) {
            if matches!(event, ToSwarm::Dial { .. }) {
                n += 1;
            }
        }
        n
    }

    /// Tells `kad` that `peer` connected to us (an inbound connection).
    fn connected(kad: &mut kad::Behaviour<MemoryStore>, peer: PeerId) {
        let endpoint = ConnectedPoint::Listener {
            local_addr: "/ip4/127.0.0.1/tcp/4000".parse().unwrap(),
            send_back_addr: "/ip4/127.0.0.1/tcp/5000".parse().unwrap(),
        };
        kad.on_swarm_event(FromSwarm::ConnectionEstablished(ConnectionEstablished {
            peer_id: peer,
            connection_id: ConnectionId::new_unchecked(1),
            endpoint: &endpoint,
            failed_addresses: &[],
            other_established: 0,
        }));
    }

    #[test]
    fn a_newcomer_to_a_full_bucket_makes_no_dial() {
        let me = PeerId::random();
        let new = || kad::Behaviour::new(me, MemoryStore::new(me));
        let addr: Multiaddr = "/ip4/127.0.0.1/tcp/4001".parse().unwrap();
        let peers = far_peers(me, kad::K_VALUE.get() + 1);
        let (bucket, newcomer) = (&peers[..kad::K_VALUE.get()], peers[kad::K_VALUE.get()]);

        // What Kademlia does by itself: a connected newcomer to a full bucket
        // of disconnected peers makes it dial the oldest.
        let mut plain = new();
        for p in bucket {
            plain.add_address(p, addr.clone());
        }
        connected(&mut plain, newcomer);
        let _ = dials(&mut plain);
        plain.add_address(&newcomer, addr.clone());
        assert_eq!(dials(&mut plain), 1, "the behaviour this module avoids");

        let mut kad = new();
        for p in bucket {
            assert!(learn(&mut kad, p, addr.clone()), "room in the bucket");
        }
        connected(&mut kad, newcomer);
        assert_eq!(dials(&mut kad), 0);
        assert!(!learn(&mut kad, &newcomer, addr.clone()));
        assert_eq!(
            dials(&mut kad),
            0,
            "a full bucket: the newcomer is left out"
        );
        assert!(
            learn(
                &mut kad,
                &bucket[0],
                "/ip4/127.0.0.1/tcp/4002".parse().unwrap()
            ),
            "a peer in the table still gets its addresses updated"
        );
        assert_eq!(dials(&mut kad), 0);
    }
}
