//! Who waits at the door: inbound connections of peers cut off for a
//! flood, and of sources whose peers flood, held before the Swarm sees
//! them (issue 30, scope 3).
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
//! A stranger that takes a fresh peer id for each connection is never a
//! blocked peer: it takes each id's burst of requests and leaves. Its
//! source is what it cannot change at will: each peer that goes past a
//! budget (its first request dropped, or cut off), and each blocked peer's
//! connection handshaken only to be refused (past [`HELD_MAX`]), is a
//! strike against the address block it came from
//! (`gleaner_model::sources`); past a tolerance the source is suspect for
//! a while. A suspect source's new TCP connections are
//! rationed before any handshake ([`gate_socket`]: past the ration a
//! socket is held unanswered, read and discarded, until its dialer gives
//! up or [`HOLD_FOR`] ends, at most [`SOCKETS_HELD_MAX`] at once, past
//! that closed at once), and a peer new to the node that comes through is
//! a stranger on probation (`event_loop::requests` gives it a smaller
//! budget). QUIC runs its handshake before the node sees the connection,
//! so there the ration is applied after it. Peers the node met before the
//! source became suspect keep their connections and budgets. An honest
//! pool never spends the tolerance, so every node of a test pool on
//! 127.0.0.1 (one source) is let in as before; a blocked peer is still
//! held by peer id.
//!
//! It owns the set of blocked peers the transport reads, the counts of
//! held connections, the sources' budgets and where peers connected from;
//! the event loop (`event_loop::requests`) blocks, unblocks and strikes.
//! It must not know why a peer was blocked.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{AsyncRead, AsyncReadExt, FutureExt};
use libp2p::core::ConnectedPoint;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};

use crate::model::sources::{source_block, Gate, SourceBudgets, SourceLimits};

/// How long a blocked peer's connection is held before the block list
/// refuses it: longer than a dialer's request timeout (10 s), so that its
/// requests fail by time, not by a closed connection it would redial at
/// once. A suspect source's socket past its ration is held as long.
pub(crate) const HOLD_FOR: Duration = Duration::from_secs(60);

/// Connections held at once, in all. The Swarm counts each as pending
/// (`swarm::connection_limits`: 128): a quarter of that is left to the
/// flooders, the rest to everyone else.
pub(crate) const HELD_MAX: usize = 32;

/// Sockets of suspect sources held at once before their handshake: another
/// quarter of the Swarm's pending connections.
pub(crate) const SOCKETS_HELD_MAX: usize = 32;

/// Bytes read (and discarded) from a held socket: its dialer's first
/// handshake message; past that it is left unread (TCP's flow control
/// stops the dialer), so a held socket costs no reads at the dialer's pace.
const HELD_SOCKET_READ_MAX: usize = 4_096;

/// Peers of one source past a budget (or blocked peers' connections
/// handshaken to be refused) before the source is suspect: four at once,
/// then one a minute. The flood tests cut off a few rogues from 127.0.0.1
/// in a row; an honest pool sends no peer past its budget.
const STRIKES: (u32, f64) = (4, 1.0 / 60.0);
/// New connections a suspect source gets: eight at once, then one a second.
const STRANGER_CONNECTIONS: (u32, f64) = (8, 1.0);
/// How long a source stays suspect after its last strike, as long as a
/// flooder stays blocked (`event_loop::requests`).
const SUSPECT_FOR: Duration = Duration::from_secs(600);
/// Sources, and peers' last source, remembered at once.
const SOURCES_MAX: usize = 4_096;
/// How long a peer new to the node through a suspect source is a stranger
/// on probation, and how many are remembered (the oldest forgotten first).
const PROBATION_FOR: Duration = Duration::from_secs(600);
const PROBATION_MAX: usize = 4_096;

/// The peers whose inbound connections are held, and the sources whose
/// new connections are rationed, shared by the event loop (which blocks,
/// unblocks and strikes) and the transports (which ask).
#[derive(Debug, Clone)]
pub(crate) struct Quarantine {
    inner: Arc<Mutex<Inner>>,
    /// The origin of the sources' clock (tokio's, so paused time works).
    origin: tokio::time::Instant,
}

impl Quarantine {
    /// Nobody blocked, no source suspect. With `rationing` false no strike
    /// counts, so no source is ever suspect (`NetConfig::source_ration`).
    pub(crate) fn new(rationing: bool) -> Self {
        Quarantine {
            inner: Arc::new(Mutex::new(Inner {
                blocked: HashSet::new(),
                held: 0,
                sockets_held: 0,
                sources: SourceBudgets::new(SourceLimits {
                    strikes: STRIKES,
                    connections: STRANGER_CONNECTIONS,
                    suspect_for_ms: millis(SUSPECT_FOR),
                    max_sources: SOURCES_MAX,
                }),
                seen_from: Recent::new(SOURCES_MAX),
                probation: Recent::new(PROBATION_MAX),
                struck: Recent::new(SOURCES_MAX),
                rationing,
            })),
            origin: tokio::time::Instant::now(),
        }
    }
}

#[derive(Debug)]
struct Inner {
    blocked: HashSet<PeerId>,
    held: usize,
    sockets_held: usize,
    sources: SourceBudgets<IpAddr>,
    /// The source each peer last connected from (either way), so that a
    /// peer cut off is a strike against it.
    seen_from: Recent<PeerId, IpAddr>,
    /// Strangers on probation, and when they were put on it (ms).
    probation: Recent<PeerId, u64>,
    /// Peers that struck their source already.
    struck: Recent<PeerId, ()>,
    /// False when the node's config says so (`NetConfig::source_ration`:
    /// behind a proxy every dialer has the proxy's address, and to measure
    /// what the ration saves): no strike counts, so no source is ever
    /// suspect; blocked peers are still held.
    rationing: bool,
}

impl Inner {
    /// A strike against `source`; says so when it makes the source suspect.
    fn strike(&mut self, source: IpAddr, now_ms: u64) {
        if !self.rationing {
            return;
        }
        let was = self.sources.is_suspect(&source, now_ms);
        if self.sources.strike(&source, now_ms) && !was {
            tracing::warn!(%source, "a source of flooders: its new connections are rationed for {}s", SUSPECT_FOR.as_secs());
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The address block a connection's remote address counts in, if it is an
/// IP address.
fn source_of(addr: &Multiaddr) -> Option<IpAddr> {
    addr.iter().find_map(|p| match p {
        Protocol::Ip4(ip) => Some(source_block(IpAddr::V4(ip))),
        Protocol::Ip6(ip) => Some(source_block(IpAddr::V6(ip))),
        _ => None,
    })
}

/// A map of at most `cap` entries that forgets the oldest inserted first.
#[derive(Debug)]
struct Recent<K, V> {
    cap: usize,
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: std::hash::Hash + Eq + Clone, V> Recent<K, V> {
    fn new(cap: usize) -> Self {
        Recent {
            cap: cap.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
            if self.order.len() > self.cap {
                if let Some(oldest) = self.order.pop_front() {
                    self.map.remove(&oldest);
                }
            }
        }
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }
}

/// What the TCP transport does with a new inbound socket, before any
/// handshake.
#[derive(Debug)]
pub(crate) enum SocketGate {
    /// On to the handshake.
    Pass,
    /// A suspect source past its ration: held (see [`gate_socket`]).
    Hold(HeldSocket),
    /// A suspect source past its ration with [`SOCKETS_HELD_MAX`] held:
    /// closed at once.
    Refuse,
}

impl Quarantine {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while locked leaves sets and counts that are
        // still whole: go on with them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        millis(self.origin.elapsed())
    }

    /// `peer`'s inbound connections are held from now on.
    pub(crate) fn block(&self, peer: PeerId) {
        self.lock().blocked.insert(peer);
    }

    /// `peer`'s block is lifted: its connections are no longer held.
    pub(crate) fn unblock(&self, peer: &PeerId) {
        self.lock().blocked.remove(peer);
    }

    /// `peer` went past a budget (its first request dropped, or cut off
    /// for a flood): a strike against the source it last connected from
    /// (none when it came through a relay only). Once per peer: a flooder
    /// that takes its burst and leaves for a fresh peer id strikes as much
    /// as one that stays until it is cut off.
    pub(crate) fn strike(&self, peer: &PeerId) {
        let now_ms = self.now_ms();
        let mut inner = self.lock();
        if inner.struck.get(peer).is_some() {
            return;
        }
        if let Some(source) = inner.seen_from.get(peer).copied() {
            inner.struck.insert(*peer, ());
            inner.strike(source, now_ms);
        }
    }

    /// Whether `peer` is a stranger on probation: new to the node when it
    /// came from a suspect source, less than [`PROBATION_FOR`] ago.
    pub(crate) fn on_probation(&self, peer: &PeerId) -> bool {
        let now_ms = self.now_ms();
        let inner = self.lock();
        inner
            .probation
            .get(peer)
            .is_some_and(|&since| now_ms.saturating_sub(since) < millis(PROBATION_FOR))
    }

    /// A hold for an inbound connection from `peer`, if `peer` is blocked
    /// and fewer than [`HELD_MAX`] are held; released when dropped. (The
    /// transports go through [`Quarantine::connected`], which also knows
    /// the source.)
    #[cfg(test)]
    fn hold(&self, peer: &PeerId) -> Option<Held> {
        self.hold_from(peer, None)
    }

    /// A hold for an inbound connection from `peer` at `source`, if `peer`
    /// is blocked and fewer than [`HELD_MAX`] are held; released when
    /// dropped. A blocked peer's connection past [`HELD_MAX`] (handshaken,
    /// to be refused) is a strike against its source.
    fn hold_from(&self, peer: &PeerId, source: Option<IpAddr>) -> Option<Held> {
        let now_ms = self.now_ms();
        let mut inner = self.lock();
        if !inner.blocked.contains(peer) {
            return None;
        }
        if inner.held >= HELD_MAX {
            if let Some(source) = source {
                inner.strike(source, now_ms);
            }
            return None;
        }
        inner.held += 1;
        Some(Held {
            quarantine: self.clone(),
            what: "a blocked peer's connection",
        })
    }

    /// A connection with `peer` whose handshake is done, `remote` its
    /// address: remembers where `peer` came from, and for an inbound one
    /// decides whether it is held. A blocked peer's is (see
    /// `hold_from`); a peer new to the node from a suspect source
    /// is put on probation, and, unless `rationed` (the socket already
    /// passed [`gate_socket`]), is held like a blocked peer's when the
    /// source is past its ration.
    fn connected(
        &self,
        peer: &PeerId,
        remote: &Multiaddr,
        inbound: bool,
        rationed: bool,
    ) -> Option<Held> {
        let source = source_of(remote);
        if inbound {
            if let Some(held) = self.hold_from(peer, source) {
                return Some(held);
            }
        }
        let source = source?;
        let now_ms = self.now_ms();
        let mut inner = self.lock();
        let known = inner.seen_from.get(peer).is_some();
        inner.seen_from.insert(*peer, source);
        if !inbound || known || !inner.sources.is_suspect(&source, now_ms) {
            return None;
        }
        inner.probation.insert(*peer, now_ms);
        if rationed || inner.sources.admit(&source, now_ms) != Gate::Shut || inner.held >= HELD_MAX
        {
            return None;
        }
        inner.held += 1;
        Some(Held {
            quarantine: self.clone(),
            what: "a stranger's connection from a suspect source",
        })
    }

    /// A new inbound socket from `remote`, before any handshake.
    pub(crate) fn admit_socket(&self, remote: &Multiaddr) -> SocketGate {
        let Some(source) = source_of(remote) else {
            return SocketGate::Pass;
        };
        let now_ms = self.now_ms();
        let mut inner = self.lock();
        match inner.sources.admit(&source, now_ms) {
            Gate::Open | Gate::Stranger => SocketGate::Pass,
            Gate::Shut if inner.sockets_held < SOCKETS_HELD_MAX => {
                inner.sockets_held += 1;
                SocketGate::Hold(HeldSocket {
                    quarantine: self.clone(),
                })
            }
            Gate::Shut => SocketGate::Refuse,
        }
    }

    /// Connections held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().held
    }

    /// Sockets held now, before their handshake.
    #[cfg(test)]
    fn sockets_held(&self) -> usize {
        self.lock().sockets_held
    }
}

/// One held connection's place in the count.
#[derive(Debug)]
pub(crate) struct Held {
    quarantine: Quarantine,
    /// What is held, for the log.
    what: &'static str,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut inner = self.quarantine.lock();
        inner.held = inner.held.saturating_sub(1);
    }
}

/// One held socket's place in the count.
#[derive(Debug)]
pub(crate) struct HeldSocket {
    quarantine: Quarantine,
}

impl Drop for HeldSocket {
    fn drop(&mut self) {
        let mut inner = self.quarantine.lock();
        inner.sockets_held = inner.sockets_held.saturating_sub(1);
    }
}

/// What the TCP transport runs on each new socket before its handshake: an
/// inbound one from a suspect source past its ration is held (its first
/// bytes read and discarded, so a dialer that gives up frees its place at
/// once) until its dialer closes it or [`HOLD_FOR`] ends, then closed, or
/// closed at once when [`SOCKETS_HELD_MAX`] are held; everything else goes
/// on to the handshake.
pub(crate) fn gate_socket<S: AsyncRead + Unpin + Send + 'static>(
    quarantine: Quarantine,
) -> impl FnOnce(S, ConnectedPoint) -> BoxFuture<'static, std::io::Result<S>>
       + Clone
       + Send
       + Unpin
       + 'static {
    move |mut socket, endpoint| {
        let gate = match &endpoint {
            ConnectedPoint::Listener { send_back_addr, .. } => {
                quarantine.admit_socket(send_back_addr)
            }
            ConnectedPoint::Dialer { .. } => SocketGate::Pass,
        };
        async move {
            let refused = || {
                std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "a suspect source past its ration of new connections",
                )
            };
            match gate {
                SocketGate::Pass => Ok(socket),
                SocketGate::Refuse => Err(refused()),
                SocketGate::Hold(held) => {
                    let drain = async {
                        let mut buf = [0u8; 512];
                        let mut read = 0;
                        while read < HELD_SOCKET_READ_MAX {
                            match socket.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => read += n,
                            }
                        }
                        std::future::pending::<()>().await
                    };
                    let _ = tokio::time::timeout(HOLD_FOR, drain).await;
                    drop(held);
                    Err(refused())
                }
            }
        }
        .boxed()
    }
}

/// What a transport runs on each connection whose handshake is done: an
/// inbound one from a blocked peer, or (unless `rationed`, see
/// [`gate_socket`]) from a suspect source past its ration, waits
/// [`HOLD_FOR`] (see the module doc); everything else passes at once.
/// Never fails: the block list decides.
pub(crate) fn hold_inbound<M: Send + 'static>(
    quarantine: Quarantine,
    rationed: bool,
) -> impl FnOnce((PeerId, M), ConnectedPoint) -> BoxFuture<'static, std::io::Result<(PeerId, M)>>
       + Clone
       + Send
       + Unpin
       + 'static {
    move |(peer, muxer), endpoint| {
        let held = match &endpoint {
            ConnectedPoint::Listener { send_back_addr, .. } => {
                quarantine.connected(&peer, send_back_addr, true, rationed)
            }
            ConnectedPoint::Dialer { address, .. } => {
                quarantine.connected(&peer, address, false, rationed)
            }
        };
        async move {
            if let Some(held) = held {
                tracing::debug!(%peer, "holding {} for {}s", held.what, HOLD_FOR.as_secs());
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
        let q = Quarantine::new(true);
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
        let q = Quarantine::new(true);
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
        let q = Quarantine::new(true);
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
        let passed = hold_inbound(q.clone(), true)((flooder, ()), outbound).await;
        assert!(passed.is_ok());
        assert_eq!(start.elapsed(), Duration::ZERO);
        let pending = tokio::spawn(hold_inbound(q.clone(), true)(
            (flooder, ()),
            inbound.clone(),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(q.held(), 1);
        assert!(!pending.is_finished());
        assert!(pending.await.unwrap().is_ok());
        assert!(start.elapsed() >= HOLD_FOR);
        assert_eq!(q.held(), 0);
        let other = hold_inbound(q, true)((PeerId::random(), ()), inbound).await;
        assert!(other.is_ok());
    }

    fn listener(remote: &str) -> ConnectedPoint {
        let addr: Multiaddr = remote.parse().unwrap();
        ConnectedPoint::Listener {
            local_addr: "/ip4/127.0.0.1/tcp/1".parse().unwrap(),
            send_back_addr: addr,
        }
    }

    /// `peer` connects (inbound, through the TCP gate) from `remote`.
    fn connects(q: &Quarantine, peer: &PeerId, remote: &str) -> Option<Held> {
        q.connected(peer, &remote.parse().unwrap(), true, true)
    }

    const FLOODER: &str = "/ip4/203.0.113.7/tcp/4001";

    #[test]
    fn fresh_peer_ids_cut_off_make_their_source_suspect_and_rationed_before_the_handshake() {
        let q = Quarantine::new(true);
        // Met before anyone flooded: known.
        let known = PeerId::random();
        assert!(connects(&q, &known, "/ip4/203.0.113.99/tcp/5").is_none());
        // Four strangers from the block cut off: forgiven.
        for _ in 0..4 {
            let stranger = PeerId::random();
            assert!(connects(&q, &stranger, FLOODER).is_none());
            assert!(!q.on_probation(&stranger));
            q.strike(&stranger);
        }
        let addr: Multiaddr = FLOODER.parse().unwrap();
        assert!(matches!(q.admit_socket(&addr), SocketGate::Pass));
        // The fifth: the block is suspect.
        let fifth = PeerId::random();
        assert!(connects(&q, &fifth, FLOODER).is_none());
        q.strike(&fifth);
        let gates: Vec<SocketGate> = (0..(8 + SOCKETS_HELD_MAX + 3))
            .map(|_| q.admit_socket(&addr))
            .collect();
        let passed = gates
            .iter()
            .filter(|g| matches!(g, SocketGate::Pass))
            .count();
        assert_eq!(passed, 8, "its ration of new connections");
        assert!(gates[8..8 + SOCKETS_HELD_MAX]
            .iter()
            .all(|g| matches!(g, SocketGate::Hold(_))));
        assert_eq!(q.sockets_held(), SOCKETS_HELD_MAX);
        assert!(gates[8 + SOCKETS_HELD_MAX..]
            .iter()
            .all(|g| matches!(g, SocketGate::Refuse)));
        drop(gates);
        assert_eq!(q.sockets_held(), 0, "a held socket gives its place back");
        // A new peer through it is a stranger on probation; the one met
        // before is not, and another block is not touched.
        let next = PeerId::random();
        assert!(connects(&q, &next, FLOODER).is_none());
        assert!(q.on_probation(&next));
        assert!(connects(&q, &known, FLOODER).is_none());
        assert!(!q.on_probation(&known));
        let elsewhere: Multiaddr = "/ip4/198.51.100.1/tcp/1".parse().unwrap();
        assert!(matches!(q.admit_socket(&elsewhere), SocketGate::Pass));
        let other = PeerId::random();
        assert!(connects(&q, &other, "/ip4/198.51.100.1/tcp/1").is_none());
        assert!(!q.on_probation(&other));
    }

    #[test]
    fn an_honest_pool_on_one_address_is_never_rationed() {
        let q = Quarantine::new(true);
        let addr: Multiaddr = "/ip4/127.0.0.1/tcp/4001".parse().unwrap();
        for _ in 0..10_000 {
            assert!(matches!(q.admit_socket(&addr), SocketGate::Pass));
            let peer = PeerId::random();
            assert!(connects(&q, &peer, "/ip4/127.0.0.1/tcp/4001").is_none());
            assert!(!q.on_probation(&peer));
        }
    }

    #[test]
    fn with_the_ration_off_no_source_is_ever_suspect_and_a_blocked_peer_is_still_held() {
        let q = Quarantine::new(false);
        for _ in 0..100 {
            let stranger = PeerId::random();
            assert!(connects(&q, &stranger, FLOODER).is_none());
            q.strike(&stranger);
            assert!(!q.on_probation(&stranger));
        }
        let addr: Multiaddr = FLOODER.parse().unwrap();
        assert!((0..100).all(|_| matches!(q.admit_socket(&addr), SocketGate::Pass)));
        let flooder = PeerId::random();
        q.block(flooder);
        assert!(connects(&q, &flooder, FLOODER).is_some());
    }

    #[test]
    fn a_blocked_flooders_connections_past_the_held_ones_make_its_source_suspect() {
        let q = Quarantine::new(true);
        let flooder = PeerId::random();
        assert!(connects(&q, &flooder, FLOODER).is_none());
        q.block(flooder);
        let held: Vec<Held> = (0..HELD_MAX)
            .filter_map(|_| connects(&q, &flooder, FLOODER))
            .collect();
        assert_eq!(held.len(), HELD_MAX);
        let addr: Multiaddr = FLOODER.parse().unwrap();
        // Handshaken to be refused: four forgiven, the fifth makes the
        // block suspect.
        for _ in 0..4 {
            assert!(connects(&q, &flooder, FLOODER).is_none());
        }
        assert!(matches!(q.admit_socket(&addr), SocketGate::Pass));
        assert!(connects(&q, &flooder, FLOODER).is_none());
        let passed = (0..100)
            .filter(|_| matches!(q.admit_socket(&addr), SocketGate::Pass))
            .count();
        assert_eq!(passed, 8, "then one a second, before the handshake");
    }

    #[tokio::test(start_paused = true)]
    async fn over_quic_a_suspect_sources_stranger_past_its_ration_is_held_after_the_handshake() {
        let q = Quarantine::new(true);
        for _ in 0..5 {
            let stranger = PeerId::random();
            let _ = connects(&q, &stranger, FLOODER);
            q.strike(&stranger);
        }
        let quic = "/ip4/203.0.113.7/udp/4001/quic-v1";
        let start = tokio::time::Instant::now();
        for _ in 0..8 {
            let passed = hold_inbound(q.clone(), false)((PeerId::random(), ()), listener(quic));
            assert!(passed.await.is_ok());
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "its ration");
        let stranger = PeerId::random();
        let pending = tokio::spawn(hold_inbound(q.clone(), false)(
            (stranger, ()),
            listener(quic),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(q.held(), 1);
        assert!(pending.await.unwrap().is_ok());
        assert!(start.elapsed() >= HOLD_FOR);
        assert!(q.on_probation(&stranger));
    }

    /// A socket that sends `first` bytes and then nothing, never closing.
    struct Silent {
        first: usize,
    }

    impl AsyncRead for Silent {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            if self.first == 0 {
                return std::task::Poll::Pending;
            }
            let n = buf.len().min(self.first);
            self.first -= n;
            std::task::Poll::Ready(Ok(n))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_socket_is_closed_when_its_dialer_leaves_or_at_the_end_of_the_hold() {
        let q = Quarantine::new(true);
        for _ in 0..5 {
            let stranger = PeerId::random();
            let _ = connects(&q, &stranger, FLOODER);
            q.strike(&stranger);
        }
        let start = tokio::time::Instant::now();
        for _ in 0..8 {
            let socket = futures::io::Cursor::new(Vec::<u8>::new());
            assert!(gate_socket(q.clone())(socket, listener(FLOODER))
                .await
                .is_ok());
        }
        // Past the ration: a dialer that sends its hello and leaves is let
        // go at once.
        let socket = futures::io::Cursor::new(b"/multistream/1.0.0\n".to_vec());
        let left = gate_socket(q.clone())(socket, listener(FLOODER)).await;
        assert_eq!(
            left.unwrap_err().kind(),
            std::io::ErrorKind::ConnectionRefused
        );
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(q.sockets_held(), 0);
        // One that stays, however much it sends, is held to the end.
        let socket = Silent { first: 1 << 20 };
        let pending = tokio::spawn(gate_socket(q.clone())(socket, listener(FLOODER)));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(q.sockets_held(), 1);
        assert!(pending.await.unwrap().is_err());
        assert!(start.elapsed() >= HOLD_FOR);
        assert_eq!(q.sockets_held(), 0);
        // Our own dials are never gated.
        let dialer = ConnectedPoint::Dialer {
            address: FLOODER.parse().unwrap(),
            role_override: libp2p::core::Endpoint::Dialer,
            port_use: libp2p::core::transport::PortUse::Reuse,
        };
        let ours = gate_socket(q)(Silent { first: 0 }, dialer).await;
        assert!(ours.is_ok());
    }
}
