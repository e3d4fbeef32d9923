//! Inbound connections of peers cut off for a flood, held before the Swarm
//! sees them (issue 30, scope 3).
//!
//! A peer the node cut off is on the block list (`swarm.rs`) for 10
//! minutes, but libp2p learns who dials only once the TCP, Noise and yamux
//! handshakes are done, and the block list then closes the connection at
//! once: a flooder that dials again as soon as its connection fails made
//! the node pay a handshake every few milliseconds (a quarter of a core,
//! `it::rogue_pool::flood_cost`). So the transport asks [`Quarantine`] about
//! each inbound connection whose handshake is done: a blocked peer's is
//! held, unread and unanswered, for [`HOLD_FOR`] before the Swarm gets it
//! (and the block list refuses it). Holding costs no CPU, and a dialer
//! waits for a connection it thinks is open instead of dialing again: one
//! handshake per dial the flooder keeps open per [`HOLD_FOR`]. At most
//! [`HELD_MAX`] are held at once (each is a pending connection, of which
//! the Swarm takes a bounded number): past that a blocked peer's
//! connection goes to the block list at once, as before.
//!
//! Only blocked peers are held, by peer id, never by address: everyone on
//! loopback or behind one NAT shares an address (docs/trust.md tells why a
//! gate by address was not kept). The block list stays the one that
//! refuses: a peer unblocked while held is then let in.
//!
//! It owns the set of blocked peers the transport reads and the count of
//! held connections; the event loop (`event_loop::requests`) blocks and
//! unblocks. It must not know why a peer was blocked.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use libp2p::core::ConnectedPoint;
use libp2p::PeerId;

/// How long a blocked peer's connection is held before the block list
/// refuses it: longer than a dialer's request timeout (10 s), so that its
/// requests fail by time, not by a closed connection it would redial at
/// once.
pub(crate) const HOLD_FOR: Duration = Duration::from_secs(60);

/// Connections held at once, in all. The Swarm counts each as pending
/// (`swarm::connection_limits`: 128): a quarter of that is left to the
/// flooders, the rest to everyone else.
pub(crate) const HELD_MAX: usize = 32;

/// The peers whose inbound connections are held, shared by the event loop
/// (which blocks and unblocks) and the transport (which asks).
#[derive(Debug, Clone, Default)]
pub(crate) struct Quarantine {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    blocked: HashSet<PeerId>,
    held: usize,
}

impl Quarantine {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while locked leaves a set and a count that are
        // still whole: go on with them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `peer`'s inbound connections are held from now on.
    pub(crate) fn block(&self, peer: PeerId) {
        self.lock().blocked.insert(peer);
    }

    /// `peer`'s block is lifted: its connections are no longer held.
    pub(crate) fn unblock(&self, peer: &PeerId) {
        self.lock().blocked.remove(peer);
    }

    /// A hold for an inbound connection from `peer`, if `peer` is blocked
    /// and fewer than [`HELD_MAX`] are held; released when dropped.
    pub(crate) fn hold(&self, peer: &PeerId) -> Option<Held> {
        let mut inner = self.lock();
        if !inner.blocked.contains(peer) || inner.held >= HELD_MAX {
            return None;
        }
        inner.held += 1;
        Some(Held {
            quarantine: self.clone(),
        })
    }

    /// Connections held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().held
    }
}

/// One held connection's place in the count.
#[derive(Debug)]
pub(crate) struct Held {
    quarantine: Quarantine,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut inner = self.quarantine.lock();
        inner.held = inner.held.saturating_sub(1);
    }
}

/// What the transport runs on each connection whose handshake is done: an
/// inbound one from a blocked peer waits [`HOLD_FOR`] (see the module doc),
/// everything else passes at once. Never fails: the block list decides.
pub(crate) fn hold_inbound<M: Send + 'static>(
    quarantine: Quarantine,
) -> impl FnOnce((PeerId, M), ConnectedPoint) -> BoxFuture<'static, std::io::Result<(PeerId, M)>>
       + Clone
       + Send
       + Unpin
       + 'static {
    move |(peer, muxer), endpoint| {
        let held = if endpoint.is_listener() {
            quarantine.hold(&peer)
        } else {
            None
        };
        async move {
            if let Some(held) = held {
                tracing::debug!(%peer, "holding a blocked peer's connection for {}s", HOLD_FOR.as_secs());
                tokio::time::sleep(HOLD_FOR).await;
                drop(held);
            }
            Ok((peer, muxer))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_blocked_peer_is_held_and_only_while_blocked() {
        let q = Quarantine::default();
        let (flooder, other) = (PeerId::random(), PeerId::random());
        assert!(q.hold(&flooder).is_none(), "nobody is blocked yet");
        q.block(flooder);
        let held = q.hold(&flooder);
        assert!(held.is_some());
        assert!(q.hold(&other).is_none(), "another peer is let through");
        assert_eq!(q.held(), 1);
        drop(held);
        assert_eq!(q.held(), 0, "a hold released gives its place back");
        q.unblock(&flooder);
        assert!(
            q.hold(&flooder).is_none(),
            "an unblocked peer is let through"
        );
    }

    #[test]
    fn at_most_held_max_connections_are_held_at_once() {
        let q = Quarantine::default();
        let flooder = PeerId::random();
        q.block(flooder);
        let held: Vec<Held> = (0..HELD_MAX).filter_map(|_| q.hold(&flooder)).collect();
        assert_eq!(held.len(), HELD_MAX);
        assert!(
            q.hold(&flooder).is_none(),
            "past the bound: to the block list at once"
        );
        drop(held);
        assert!(q.hold(&flooder).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_blocked_peers_inbound_connection_waits_and_an_outbound_one_does_not() {
        let q = Quarantine::default();
        let flooder = PeerId::random();
        q.block(flooder);
        let addr: libp2p::Multiaddr = "/ip4/127.0.0.1/tcp/1".parse().unwrap();
        let inbound = ConnectedPoint::Listener {
            local_addr: addr.clone(),
            send_back_addr: addr.clone(),
        };
        let outbound = ConnectedPoint::Dialer {
            address: addr,
            role_override: libp2p::core::Endpoint::Dialer,
            port_use: libp2p::core::transport::PortUse::Reuse,
        };
        let start = tokio::time::Instant::now();
        let passed = hold_inbound(q.clone())((flooder, ()), outbound).await;
        assert!(passed.is_ok());
        assert_eq!(start.elapsed(), Duration::ZERO);
        let pending = tokio::spawn(hold_inbound(q.clone())((flooder, ()), inbound.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(q.held(), 1);
        assert!(!pending.is_finished());
        assert!(pending.await.unwrap().is_ok());
        assert!(start.elapsed() >= HOLD_FOR);
        assert_eq!(q.held(), 0);
        let other = hold_inbound(q)((PeerId::random(), ()), inbound).await;
        assert!(other.is_ok());
    }
}
