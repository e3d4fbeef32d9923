//! The node's side of the network layer: a cloneable `NetHandle` that sends `Command`s to
//! the task owning the Swarm and awaits each reply on a oneshot (the pattern of
//! rust-libp2p's `examples/file-sharing`), and the `NetEvent`s that task sends back.
//!
//! This module knows the commands and events; it does not touch the Swarm.

use std::time::Instant;

use libp2p::{Multiaddr, PeerId};
use tokio::sync::{mpsc, oneshot, watch};

use crate::model::budget::Overrun;
use crate::model::state::State;
use crate::net::protocol::{
    JobRequest, JobResponse, ReliabilityQuery, ReliabilityResponse, WireLadder, WireSpellLengths,
    WireSpells,
};
use crate::net::reachability::Reachability;
use crate::net::summary::Summary;
use crate::net::traffic::{Traffic, TrafficMeter};

/// Why a network operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// The peer did not answer within the request timeout.
    #[error("the peer did not answer in time")]
    Timeout,
    /// The peer does not speak this protocol (or this version of it).
    #[error("the peer does not support the protocol")]
    UnsupportedProtocol,
    /// We could not connect to the peer.
    #[error("dial failed: {0}")]
    Dial(String),
    /// The connection closed before the answer came.
    #[error("connection closed before the answer")]
    ConnectionClosed,
    /// The stream failed (including a frame the peer sent that we refused).
    #[error("stream error: {0}")]
    Io(String),
    /// Listening on an address failed.
    #[error("listen failed: {0}")]
    Listen(String),
    /// The task owning the Swarm has stopped.
    #[error("the network task has stopped")]
    Stopped,
}

/// The node's view of itself, published in announcements. The network layer adds the
/// peer id, the addresses and the version.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalStatus {
    /// Logical CPUs.
    pub logical_cpus: u32,
    /// Total memory, MiB.
    pub memory_mib: u64,
    /// Raw score of the built-in CPU benchmark.
    pub benchmark_score: u64,
    /// Γ = P·A in thousandths.
    pub relative_power_milli: u32,
    /// Current state.
    pub state: State,
    /// True when the guest slot is free.
    pub slot_free: bool,
}

/// The reliability part of this node's summary and the images it holds,
/// computed by the node; the network task adds the announcement's part and
/// publishes them as one `SummaryWithBasis` (and, while it hears older
/// nodes, as the `SummaryWithImages` or `HostSummary` they read too).
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryBody {
    /// When it was computed, Unix seconds; the ladders' windows start then.
    pub computed_at_unix: i64,
    /// Relative speed P in thousandths.
    pub speed_milli: u32,
    /// Predicted CPU share for a guest over the next hour, thousandths.
    pub availability_milli: Option<u32>,
    /// History days behind it.
    pub days_used: u32,
    /// TR ladders, one per memory level.
    pub ladders: Vec<WireLadder>,
    /// The week's spells at the lowest memory level, and their lengths.
    pub spells: Option<WireSpells>,
    pub spell_lengths: Option<WireSpellLengths>,
    /// The ids of the images the image cache holds, the most recently used
    /// first, at most `IMAGES_HELD_MAX`.
    pub images: Vec<[u8; 32]>,
    /// What the ladders stand on: the record, or which prior a host with no
    /// day of record answers with.
    pub basis: crate::net::summary::LadderBasis,
}

/// A pool member as last announced.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Who.
    pub peer: PeerId,
    /// Where it says it can be reached.
    pub addresses: Vec<Multiaddr>,
    /// What it said about itself.
    pub status: LocalStatus,
    /// Its Gleaner version.
    pub version: String,
    /// When we last heard its announcement.
    pub last_seen: Instant,
    /// What its last summary said (checked); `None` from a node of protocol
    /// version 1, which announces without one.
    pub summary: Option<std::sync::Arc<Summary>>,
}

/// The way back for an inbound request: answer it once, or drop it to refuse (the
/// requester then sees the stream close).
#[derive(Debug)]
pub struct Responder<T>(pub(crate) oneshot::Sender<T>);

impl<T> Responder<T> {
    /// Sends the answer. Returns it back if the request is gone (timed out, peer left).
    pub fn send(self, answer: T) -> Result<(), T> {
        self.0.send(answer)
    }
}

/// What the network layer tells the node.
#[derive(Debug)]
pub enum NetEvent {
    /// A peer asks for our reliability over a window.
    ReliabilityQuery {
        /// Who asks.
        peer: PeerId,
        /// The window.
        query: ReliabilityQuery,
        /// Where the answer goes.
        reply: Responder<ReliabilityResponse>,
    },
    /// A job request (submit, event, fetch) from a peer allowed to make it.
    JobRequest {
        /// Who asks.
        peer: PeerId,
        /// The request.
        request: JobRequest,
        /// Where the answer goes.
        reply: Responder<JobResponse>,
    },
    /// A member announced itself (first time or again).
    MemberAnnounced(Member),
    /// A member has not announced for longer than the member TTL.
    MemberExpired(PeerId),
    /// A peer went past one of its budgets (cut off, or a read past its
    /// allowance): a flood for its record.
    Overrun {
        /// Who.
        peer: PeerId,
        /// Which budget.
        what: Overrun,
    },
}

type Reply<T> = oneshot::Sender<Result<T, NetError>>;

/// A request to the task owning the Swarm.
#[derive(Debug)]
pub(crate) enum Command {
    Listen {
        addr: Multiaddr,
        reply: Reply<()>,
    },
    ListenAddrs {
        reply: oneshot::Sender<Vec<Multiaddr>>,
    },
    Dial {
        addr: Multiaddr,
        reply: Reply<PeerId>,
    },
    Announce {
        status: LocalStatus,
        body: Option<SummaryBody>,
    },
    QueryReliability {
        peer: PeerId,
        query: ReliabilityQuery,
        reply: Reply<ReliabilityResponse>,
    },
    SendJobRequest {
        peer: PeerId,
        request: JobRequest,
        reply: Reply<JobResponse>,
    },
    Members {
        reply: oneshot::Sender<Vec<Member>>,
        /// The caller wants the pool known (a survey, `hosts`): a node of
        /// a large pool listens to summaries for a while (`listening`).
        watch: bool,
    },
    /// A survey wants about `hosts` hosts named: in a large pool the
    /// sample of its DHT leaves (`leaf_digest`), else the member table.
    Sample {
        hosts: usize,
        reply: oneshot::Sender<Vec<Member>>,
    },
    FindHosts {
        reply: Reply<Vec<PeerId>>,
    },
    ConnectedPeers {
        reply: oneshot::Sender<Vec<PeerId>>,
    },
    Connections {
        peer: PeerId,
        reply: oneshot::Sender<Vec<libp2p::swarm::ConnectionId>>,
    },
    /// A part of the node outside the loop (the data server) saw `peer` go
    /// past a budget: told to the node as [`NetEvent::Overrun`], and with
    /// `cut_off` the peer is disconnected and blocked for a while.
    Overrun {
        peer: PeerId,
        what: Overrun,
        cut_off: bool,
    },
}

/// The cloneable handle to the network task. The task ends when the last handle is dropped.
#[derive(Clone)]
pub struct NetHandle {
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) peer_id: PeerId,
    /// The network task's current view of how others reach us.
    pub(crate) reachability: watch::Receiver<Reachability>,
    /// Opens and accepts raw streams (`/gleaner/data/1`) without going through
    /// the network task: file bytes flow between the stream and its user only.
    pub(crate) streams: libp2p_stream::Control,
    /// libp2p's bandwidth counters, read without asking the network task.
    pub(crate) traffic: TrafficMeter,
    /// Who is a stranger on probation, and where strikes go
    /// (`net::quarantine`): asked by the servers of raw streams, which
    /// count their peers' streams against budgets of their own.
    pub(crate) quarantine: crate::net::quarantine::Quarantine,
    /// What each peer's requests cost our CPU (`net::cpu_ledger`): the
    /// node's handlers charge what their answers took.
    pub(crate) cpu: crate::net::cpu_ledger::CpuLedger,
}

impl std::fmt::Debug for NetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetHandle")
            .field("peer_id", &self.peer_id)
            .finish_non_exhaustive()
    }
}

impl NetHandle {
    /// Our peer id.
    pub fn peer_id(&self) -> PeerId {
        self.peer_id
    }

    /// How others reach us now (AutoNAT verdict, relay slots, hole punching,
    /// connections); never waits for the network task.
    pub fn reachability(&self) -> Reachability {
        self.reachability.borrow().clone()
    }

    /// Bytes sent and received over libp2p since the node started.
    pub fn traffic(&self) -> Traffic {
        self.traffic.read()
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, NetError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| NetError::Stopped)?;
        rx.await.map_err(|_| NetError::Stopped)
    }

    /// Starts listening on `addr`.
    pub async fn listen(&self, addr: Multiaddr) -> Result<(), NetError> {
        self.call(|reply| Command::Listen { addr, reply }).await?
    }

    /// Addresses we listen on now.
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, NetError> {
        self.call(|reply| Command::ListenAddrs { reply }).await
    }

    /// Dials `addr` (which must end in `/p2p/<peer id>`) and waits until connected.
    pub async fn dial(&self, addr: Multiaddr) -> Result<PeerId, NetError> {
        self.call(|reply| Command::Dial { addr, reply }).await?
    }

    /// Publishes our status (in a summary without reliability) once, now.
    /// The network task republishes it only when our addresses change or a
    /// peer joins the pool's topic, at most once per minimum gap: when to
    /// publish again is the caller's decision.
    pub async fn announce(&self, status: LocalStatus) -> Result<(), NetError> {
        self.commands
            .send(Command::Announce { status, body: None })
            .await
            .map_err(|_| NetError::Stopped)
    }

    /// Publishes our summary (status and reliability) once, now, without
    /// waiting: for the pool host, which must not block on the network. A
    /// full queue drops it (the next change or heartbeat carries a newer one).
    pub fn try_publish(&self, status: LocalStatus, body: SummaryBody) -> Result<(), NetError> {
        self.commands
            .try_send(Command::Announce {
                status,
                body: Some(body),
            })
            .map_err(|_| NetError::Stopped)
    }

    /// Tells the network task that `peer` went past a budget `what` (its
    /// record counts a flood); with `cut_off` the peer is also disconnected
    /// and blocked for a while. Never waits: a full queue drops the report
    /// (the peer's next overrun is reported again).
    pub fn overrun(&self, peer: PeerId, what: Overrun, cut_off: bool) {
        let _ = self.commands.try_send(Command::Overrun {
            peer,
            what,
            cut_off,
        });
    }

    /// Whether `peer` is a stranger on probation: new to the node through a
    /// source whose peers went past their budgets (`net::quarantine`). What
    /// it sends at its will gets the smaller budgets then.
    pub fn on_probation(&self, peer: &PeerId) -> bool {
        self.quarantine.on_probation(peer)
    }

    /// `peer` went past a budget (something it sent was dropped): a strike
    /// against the source it connected from, once per peer, so that fresh
    /// peer ids that each take a burst and leave make their source suspect
    /// (`net::quarantine`). Never waits.
    pub fn past_budget(&self, peer: &PeerId) {
        self.quarantine.strike(peer);
    }

    /// Charges `cost`, CPU time spent answering `peer` (measured on the
    /// thread that computed the answer), to its account: a peer whose
    /// requests cost past its share of a core has its next ones refused,
    /// and is cut off if it goes on (`net::cpu_ledger`). Never waits.
    pub fn charge_cpu(&self, peer: &PeerId, cost: std::time::Duration) {
        self.cpu.charge(peer, cost);
    }

    /// Admits one data stream `peer` opened against its account of CPU,
    /// the one its requests and summaries are charged to, and charges what
    /// the network spends on one (`net::cpu_ledger`): served while the
    /// account is in credit; past it dropped, and past the tolerance cut
    /// off. Never waits.
    pub fn admit_stream(&self, peer: &PeerId) -> crate::model::budget::Admit {
        self.cpu
            .admit_charged(peer, crate::net::cpu_ledger::STREAM_COST)
    }

    /// True when we hold a direct (not relayed) connection to `peer` now.
    pub fn is_direct(&self, peer: &PeerId) -> bool {
        let key = peer.to_base58();
        self.reachability
            .borrow()
            .peers
            .iter()
            .any(|l| l.peer == key && l.direct > 0)
    }

    /// Waits until we hold a direct connection to `peer` (dialed, or a relayed
    /// one upgraded by hole punching), at most `limit`; true when we do.
    pub async fn wait_direct(&self, peer: &PeerId, limit: std::time::Duration) -> bool {
        let mut watch = self.reachability.clone();
        let key = peer.to_base58();
        let direct = |r: &Reachability| r.peers.iter().any(|l| l.peer == key && l.direct > 0);
        tokio::time::timeout(limit, watch.wait_for(direct))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Opens a raw stream of `protocol` to `peer` (dialing it if needed).
    pub async fn open_stream(
        &self,
        peer: PeerId,
        protocol: &'static str,
    ) -> Result<libp2p::Stream, NetError> {
        let mut control = self.streams.clone();
        control
            .open_stream(peer, libp2p::StreamProtocol::new(protocol))
            .await
            .map_err(|e| match e {
                libp2p_stream::OpenStreamError::UnsupportedProtocol(_) => {
                    NetError::UnsupportedProtocol
                }
                other => NetError::Io(other.to_string()),
            })
    }

    /// Starts accepting raw streams of `protocol`; `None` when something
    /// already accepts them (one acceptor per protocol and node).
    pub fn accept_streams(&self, protocol: &'static str) -> Option<libp2p_stream::IncomingStreams> {
        let mut control = self.streams.clone();
        control.accept(libp2p::StreamProtocol::new(protocol)).ok()
    }

    /// Asks `peer` for its reliability over a window; fails with `Timeout` after the
    /// configured request timeout.
    pub async fn query_reliability(
        &self,
        peer: PeerId,
        query: ReliabilityQuery,
    ) -> Result<ReliabilityResponse, NetError> {
        self.call(|reply| Command::QueryReliability { peer, query, reply })
            .await?
    }

    /// Sends a job request (submit, event, fetch) to `peer`.
    pub async fn job_request(
        &self,
        peer: PeerId,
        request: JobRequest,
    ) -> Result<JobResponse, NetError> {
        self.call(|reply| Command::SendJobRequest {
            peer,
            request,
            reply,
        })
        .await?
    }

    /// Pool members heard on gossip and not yet expired.
    pub async fn members(&self) -> Result<Vec<Member>, NetError> {
        self.call(|reply| Command::Members { reply, watch: true })
            .await
    }

    /// The member table as it is, without asking to hear the pool: what
    /// `status` counts (a status call must not make a quiet host listen).
    pub async fn known_members(&self) -> Result<Vec<Member>, NetError> {
        self.call(|reply| Command::Members {
            reply,
            watch: false,
        })
        .await
    }

    /// Members to place about `hosts` hosts' worth of work on: in a large
    /// pool, the members named by the digests of a sample of the pool's DHT
    /// leaves sized to `hosts` (fetched now if need be, waiting a few
    /// seconds at most; kept fresh while asked for, forgotten a few minutes
    /// after the last ask), without hearing the whole pool; in a small
    /// pool, the member table as [`NetHandle::members`] gives it.
    pub async fn sample(&self, hosts: usize) -> Result<Vec<Member>, NetError> {
        self.call(|reply| Command::Sample { hosts, reply }).await
    }

    /// Peers that provide the pool's DHT key (asks the DHT; excludes ourselves).
    pub async fn find_hosts(&self) -> Result<Vec<PeerId>, NetError> {
        self.call(|reply| Command::FindHosts { reply }).await?
    }

    /// Peers we have a connection to.
    pub async fn connected_peers(&self) -> Result<Vec<PeerId>, NetError> {
        self.call(|reply| Command::ConnectedPeers { reply }).await
    }

    /// The connections we hold to `peer` now, by id. Ids are never reused
    /// while the node runs, so two looks share no id exactly when every
    /// connection of the first closed in between: what a consumer asks to
    /// tell a host that restarted from one that kept running (issue 30).
    pub async fn connections(
        &self,
        peer: PeerId,
    ) -> Result<Vec<libp2p::swarm::ConnectionId>, NetError> {
        self.call(|reply| Command::Connections { peer, reply })
            .await
    }
}
