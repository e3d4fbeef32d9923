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
//! (`gleaner_model::sources`), and so is each peer id the node never met
//! (`gleaner_model::newcomers`) that a source brings past its allowance of
//! newcomers ([`SOURCE_NEW_PEERS`] at once, then [`NEW_PEERS_PER_SEC`]):
//! an honest node keeps its identity, so its reconnections cost nothing,
//! and a pool of hundreds of nodes behind one address stays within it,
//! while a stranger within every per-peer budget that takes a fresh id per
//! connection does not. Past a tolerance the source is suspect for
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

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{AsyncRead, AsyncReadExt, FutureExt};
use libp2p::core::ConnectedPoint;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};

use crate::model::newcomers::MetPeers;
use crate::model::sources::{source_block, Gate, Newcomer, SourceBudgets, SourceLimits};

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
/// Peer ids the node never met that one source may bring at once before
/// each further one is a strike (`[net] source_new_peers`, 0: no count).
/// An honest node keeps its identity: examples/many-nodes.sh starts 300
/// nodes on 127.0.0.1 that all dial one node within minutes, and a LAN
/// pool behind one address is as many as its machines.
pub const SOURCE_NEW_PEERS: u32 = 512;
/// Newcomers a source may bring per second past [`SOURCE_NEW_PEERS`].
const NEW_PEERS_PER_SEC: f64 = 1.0;
/// Newcomers all sources together may bring per second past
/// [`SOURCE_NEW_PEERS`] (the same allowance at once, shared): past it a
/// newcomer is a strike against its own source even within that source's
/// allowance, so a botnet's address blocks share one allowance instead of
/// each bringing its own (`model::sources`). Eight a second is some 29,000
/// peer ids never met an hour, more than a large pool's members meeting a
/// node afresh, one or a few behind each address, who never spend their
/// source's tolerance of strikes.
const ALL_NEW_PEERS_PER_SEC: f64 = 8.0;
/// How long a peer id counts as met after the node last saw it connect (at
/// least half of it), and how many fresh ids are remembered per half
/// (`newcomers::MetPeers`: twice that at most).
const MET_FOR: Duration = Duration::from_secs(3_600);
const MET_MAX: usize = 4_096;

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
    /// `new_peers`: the newcomers a source may bring at once
    /// (`NetConfig::source_new_peers`, [`SOURCE_NEW_PEERS`]; 0: no count).
    pub(crate) fn new(rationing: bool, new_peers: u32) -> Self {
        Quarantine {
            inner: Arc::new(Mutex::new(Inner {
                blocked: HashSet::new(),
                held: 0,
                sockets_held: 0,
                sources: SourceBudgets::new(SourceLimits {
                    strikes: STRIKES,
                    connections: STRANGER_CONNECTIONS,
                    newcomers: (new_peers > 0).then_some((new_peers, NEW_PEERS_PER_SEC)),
                    all_newcomers: (new_peers > 0).then_some((new_peers, ALL_NEW_PEERS_PER_SEC)),
                    suspect_for_ms: millis(SUSPECT_FOR),
                    max_sources: SOURCES_MAX,
                }),
                seen_from: Recent::new(SOURCES_MAX),
                probation: Recent::new(PROBATION_MAX),
                struck: Recent::new(SOURCES_MAX),
                met: MetPeers::new(millis(MET_FOR), MET_MAX),
                fingerprints: RandomState::new(),
                counting_newcomers: rationing && new_peers > 0,
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
    /// Peer ids met lately, by fingerprint (8 bytes where a peer id takes
    /// 80; keyed per node, so no dialer can aim at a collision).
    met: MetPeers<u64>,
    fingerprints: RandomState,
    /// Whether newcomers are counted (the ration on, `new_peers` not 0).
    counting_newcomers: bool,
    /// False when the node's config says so (`NetConfig::source_ration`:
    /// behind a proxy every dialer has the proxy's address, and to measure
    /// what the ration saves): no strike counts, so no source is ever
    /// suspect; blocked peers are still held.
    rationing: bool,
}

impl Inner {
    /// A strike against `source` (`why`, for the log); says so when it
    /// makes the source suspect.
    fn strike(&mut self, source: IpAddr, now_ms: u64, why: &'static str) {
        if !self.rationing {
            return;
        }
        let was = self.sources.is_suspect(&source, now_ms);
        if self.sources.strike(&source, now_ms) && !was {
            Self::suspect(source, why);
        }
    }

    fn suspect(source: IpAddr, why: &'static str) {
        tracing::warn!(%source, why, "a source of flooders: its new connections are rationed for {}s", SUSPECT_FOR.as_secs());
    }

    /// `peer` connected from `source` (either way, `inbound` or not): one
    /// newcomer against the source when it is inbound and the node has not
    /// met it lately, past the source's allowance a strike.
    fn arrived(&mut self, peer: &PeerId, source: Option<IpAddr>, inbound: bool, now_ms: u64) {
        if !self.counting_newcomers {
            return;
        }
        let met = self.met.saw(self.fingerprints.hash_one(peer), now_ms);
        let Some(source) = source.filter(|_| inbound && !met) else {
            return;
        };
        let was = self.sources.is_suspect(&source, now_ms);
        if let Newcomer::Strike { suspect } = self.sources.newcomer(&source, now_ms) {
            self.struck.insert(*peer, ());
            if suspect && !was {
                Self::suspect(source, "fresh peer ids past its allowance");
            }
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
            inner.strike(source, now_ms, "a peer past its budget");
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
                inner.strike(source, now_ms, "a blocked peer's connections");
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
        let now_ms = self.now_ms();
        let mut inner = self.lock();
        inner.arrived(peer, source, inbound, now_ms);
        let source = source?;
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

    /// An inbound connection of `peer` through a relay, handshaken already
    /// (the relay transport has no hook before): `relay_addr` is our
    /// listening address on the relay, which names the relay's IP address.
    /// The connection counts against the relay's address block as a direct
    /// one counts against its dialer's (its newcomers, its peers' strikes,
    /// probation while the block is suspect): fresh peer ids through one
    /// relay are bounded as fresh peer ids from one address are. False when
    /// the block is suspect and past its ration (or `peer` is blocked): the
    /// caller closes the connection.
    pub(crate) fn relayed(&self, peer: &PeerId, relay_addr: &Multiaddr) -> bool {
        self.connected(peer, relay_addr, true, false).is_none()
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
#[path = "quarantine_tests.rs"]
mod tests;
