//! Builds the libp2p Swarm of a pool member: transports, the composed behaviour and the
//! settings that let pools of a few and of thousands of members work (idle timeout,
//! Kademlia mode and record lifetimes, gossipsub mesh sizes and gossip, ping cadence,
//! connection limits).
//!
//! This module owns `NetConfig` and `build_swarm`; it does not run the Swarm (see
//! `event_loop`) and knows nothing of the node's state or its config files.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use libp2p::core::upgrade::Version;
use libp2p::core::Transport;
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::pnet::{PnetConfig, PreSharedKey};
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::swarm::NetworkBehaviour;
use libp2p::{
    allow_block_list, autonat, connection_limits, dcutr, gossipsub, identify, kad, mdns, noise,
    ping, quic, relay, tcp, yamux, Multiaddr, PeerId, StreamProtocol, Swarm, SwarmBuilder,
};

use crate::model::ids::PoolName;
use crate::net::codec::{
    DigestCodec, JobCodec, ReliabilityCodec, DIGEST_CAPS, JOB_CAPS, RELIABILITY_CAPS,
};
use crate::net::protocol::{
    ANNOUNCE_MAX_BYTES, DIGEST_PROTOCOL, IDENTIFY_PROTOCOL_VERSION, JOB_PROTOCOL, KAD_PROTOCOL,
    RELIABILITY_PROTOCOL,
};
use crate::net::quarantine::{gate_socket, hold_inbound, Quarantine};
use crate::net::reachability::AddressScope;
use crate::net::traffic::TrafficMeter;

/// Largest swarm key file we read (the text form is about 90 bytes).
const SWARM_KEY_FILE_MAX: u64 = 4096;

/// Everything the network layer needs to start; the node fills it from its config.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Pool name; part of the announce topic and the DHT key.
    pub pool: PoolName,
    /// Addresses to listen on (TCP and, unless a swarm key is set, QUIC).
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start, with `/p2p/<id>`; the first Kademlia contacts.
    pub bootstrap: Vec<Multiaddr>,
    /// Discover LAN peers by mDNS. Off in tests and public pools.
    pub mdns: bool,
    /// Kademlia server mode from the start. Needed in LAN and private pools, where no
    /// external address is ever confirmed and Kademlia would otherwise stay a client.
    pub kad_server: bool,
    /// Pre-shared key of a private pool: TCP only, QUIC is then off (pnet wraps TCP only).
    pub swarm_key: Option<PreSharedKey>,
    /// Consumers allowed to submit jobs and fetch outputs; `None` allows everyone.
    pub allowlist: Option<HashSet<PeerId>>,
    /// Serve as a relay (with raised circuit limits) and AutoNAT server for a public pool.
    pub relay_server: bool,
    /// Probe our own addresses with AutoNAT v2 (public pools behind NAT).
    pub autonat: bool,
    /// How long an outbound request may take before it fails with a timeout.
    pub request_timeout: Duration,
    /// How long an idle connection is kept. The libp2p default (10 s) would close
    /// Kademlia and request/response connections between queries.
    pub idle_timeout: Duration,
    /// How often we re-publish our announcement.
    pub announce_interval: Duration,
    /// A member not heard from for this long is dropped.
    pub member_ttl: Duration,
    /// How long the node may take to answer an inbound request before we drop it.
    pub serve_timeout: Duration,
    /// Providers at which a member places its DHT record one level down the
    /// pool's sharded keys (`pool_shards::SHARD_FULL`; lower in tests, so a
    /// few nodes exercise the shards).
    pub shard_full: usize,
    /// Members heard at once from which the pool counts as large and a host
    /// nobody asks about stops listening to summaries
    /// (`listening::LARGE_POOL`; lower in tests).
    pub large_pool: usize,
    /// Where the members we meet are remembered across restarts (`[net]
    /// peer_book`); `None` remembers nothing.
    pub peer_book: Option<crate::net::peer_book::BookStore>,
    /// Ration the new connections of a source whose peers go past their
    /// budgets, and put its strangers on probation (`net::quarantine`).
    /// Off where every inbound connection comes from one address that is
    /// not its dialer's (a TCP proxy in front of the node): there one
    /// flooder would ration everybody. Also off to measure what it saves.
    pub source_ration: bool,
    /// Peer ids never met that one source may bring at once before each
    /// further one (past one a second) is a strike against it
    /// (`net::quarantine`, [`crate::net::SOURCE_NEW_PEERS`]); 0: not
    /// counted. Raise it for more nodes than that behind one address.
    pub source_new_peers: u32,
    /// The share of a core, in percent, each peer's requests, data streams
    /// and summaries together may cost the node after a burst
    /// (`net::cpu_ledger`); past it they are refused and a peer that goes
    /// on is cut off. 0: no CPU budget.
    pub peer_cpu_percent: u32,
}

impl NetConfig {
    /// A LAN pool: listen on every interface, mDNS on, Kademlia server, no relay.
    pub fn lan(pool: &PoolName) -> Self {
        Self {
            pool: pool.clone(),
            listen: vec![
                tcp_addr(Ipv4Addr::UNSPECIFIED, 0),
                quic_addr(Ipv4Addr::UNSPECIFIED, 0),
            ],
            bootstrap: Vec::new(),
            mdns: true,
            kad_server: true,
            swarm_key: None,
            allowlist: None,
            relay_server: false,
            autonat: false,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            announce_interval: Duration::from_secs(30),
            member_ttl: Duration::from_secs(95),
            serve_timeout: Duration::from_secs(15),
            shard_full: crate::net::pool_shards::SHARD_FULL,
            large_pool: crate::net::listening::LARGE_POOL,
            peer_book: None,
            source_ration: true,
            source_new_peers: crate::net::SOURCE_NEW_PEERS,
            peer_cpu_percent: crate::net::PEER_CPU_PERCENT,
        }
    }

    /// A member of a public pool: no mDNS, Kademlia client until AutoNAT v2 confirms an
    /// external address, joins through `bootstrap` (relays started with `--relay`).
    pub fn public(pool: &PoolName, bootstrap: Vec<Multiaddr>) -> Self {
        Self {
            bootstrap,
            mdns: false,
            kad_server: false,
            autonat: true,
            ..Self::lan(pool)
        }
    }

    /// `gleaner node --relay`: a relay, AutoNAT server and DHT bootstrap for a public
    /// pool, on a fixed port so others can put it in their bootstrap list.
    pub fn relay(pool: &PoolName, port: u16) -> Self {
        Self {
            listen: vec![
                tcp_addr(Ipv4Addr::UNSPECIFIED, port),
                quic_addr(Ipv4Addr::UNSPECIFIED, port),
            ],
            mdns: false,
            kad_server: true,
            relay_server: true,
            ..Self::lan(pool)
        }
    }

    /// A pool on the loopback interface only, for tests: 127.0.0.1 TCP, no mDNS, no QUIC.
    pub fn loopback(pool: &PoolName) -> Self {
        Self {
            listen: vec![tcp_addr(Ipv4Addr::LOCALHOST, 0)],
            mdns: false,
            ..Self::lan(pool)
        }
    }
}

/// `/ip4/<ip>/tcp/<port>`.
pub fn tcp_addr(ip: Ipv4Addr, port: u16) -> Multiaddr {
    Multiaddr::empty()
        .with(Protocol::Ip4(ip))
        .with(Protocol::Tcp(port))
}

/// `/ip4/<ip>/udp/<port>/quic-v1`.
pub fn quic_addr(ip: Ipv4Addr, port: u16) -> Multiaddr {
    Multiaddr::empty()
        .with(Protocol::Ip4(ip))
        .with(Protocol::Udp(port))
        .with(Protocol::QuicV1)
}

/// Why the Swarm could not be built or a key not read.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A transport or behaviour failed to initialise.
    #[error("building the swarm: {0}")]
    Swarm(String),
    /// The swarm key file could not be read or parsed.
    #[error("swarm key {path}: {reason}")]
    SwarmKey {
        /// The key file.
        path: String,
        /// What went wrong.
        reason: String,
    },
}

/// Reads a pnet swarm key file (`/key/swarm/psk/1.0.0/`, `/base16/`, 64 hex digits).
/// Make one with:
/// `printf '/key/swarm/psk/1.0.0/\n/base16/\n%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" > swarm.key`
pub fn read_swarm_key(path: &Path) -> Result<PreSharedKey, BuildError> {
    let fail = |reason: String| BuildError::SwarmKey {
        path: path.display().to_string(),
        reason,
    };
    // Counted while reading, regular files only: `/dev/zero` or a FIFO as
    // the key file is refused instead of read forever.
    let text = crate::fsutil::read_to_string_bounded(path, SWARM_KEY_FILE_MAX).map_err(|e| {
        let why = match e {
            crate::fsutil::FileReadError::Io { source, .. } => source.to_string(),
            crate::fsutil::FileReadError::NotRegular { kind, .. } => {
                format!("is a {kind}, not a regular file")
            }
            crate::fsutil::FileReadError::TooLarge { .. } => {
                format!("longer than {SWARM_KEY_FILE_MAX} bytes, too long for a key")
            }
        };
        fail(why)
    })?;
    text.parse().map_err(|e| fail(format!("{e}")))
}

/// The composed behaviour of a pool member.
#[derive(NetworkBehaviour)]
pub(crate) struct Behaviour {
    pub(crate) limits: connection_limits::Behaviour,
    /// Peers cut off for flooding us with requests (`event_loop::requests`):
    /// their connections are refused both ways until the block is lifted.
    pub(crate) blocked: allow_block_list::Behaviour<allow_block_list::BlockedPeers>,
    pub(crate) relay_client: relay::client::Behaviour,
    pub(crate) relay_server: Toggle<relay::Behaviour>,
    pub(crate) dcutr: dcutr::Behaviour,
    pub(crate) autonat_client: Toggle<autonat::v2::client::Behaviour>,
    pub(crate) autonat_server: Toggle<autonat::v2::server::Behaviour>,
    pub(crate) identify: identify::Behaviour,
    pub(crate) ping: ping::Behaviour,
    pub(crate) kad: kad::Behaviour<kad::store::MemoryStore>,
    pub(crate) gossipsub: gossipsub::Behaviour,
    pub(crate) mdns: Toggle<mdns::tokio::Behaviour>,
    pub(crate) reliability: request_response::Behaviour<ReliabilityCodec>,
    pub(crate) job: request_response::Behaviour<JobCodec>,
    /// A large pool's leaf digests (`event_loop::digests`).
    pub(crate) digest: request_response::Behaviour<DigestCodec>,
    /// Raw streams for `/gleaner/data/1`: the data layer opens and accepts them
    /// through a `libp2p_stream::Control`, outside this loop, so a file's bytes
    /// never pass through the task that owns the Swarm.
    pub(crate) stream: libp2p_stream::Behaviour,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Gossipsub settings for pools of any size. The mesh aims at 4 peers (the
/// libp2p default of 6 sends each message to a node about six times; 4 keeps
/// two spare paths) and accepts 3 to 8, so a pool of 2–6 is one mesh and a
/// pool of thousands a sparse one. The heartbeat (mesh upkeep and gossip)
/// runs every 5 s instead of every second: messages are forwarded as they
/// arrive, and the heartbeat only repairs. Gossip about recent messages goes
/// to 3 peers, never to a quarter of all peers (the default's
/// `gossip_factor`, which at a node that every member is connected to, a
/// bootstrap peer, means hundreds of IHAVEs per heartbeat), and covers two
/// heartbeats. Our own messages go to our mesh only, not to every peer on the
/// topic (`flood_publish` off).
fn gossipsub_config() -> Result<gossipsub::Config, BoxError> {
    Ok(gossipsub::ConfigBuilder::default()
        .validation_mode(gossipsub::ValidationMode::Strict)
        .validate_messages()
        .mesh_n(4)
        .mesh_n_low(3)
        .mesh_n_high(8)
        .mesh_outbound_min(1)
        .gossip_lazy(3)
        .gossip_factor(0.0)
        .history_gossip(2)
        .flood_publish(false)
        .heartbeat_interval(GOSSIP_HEARTBEAT)
        .max_transmit_size(ANNOUNCE_MAX_BYTES + 512)
        .build()?)
}

/// Gossipsub's heartbeat.
const GOSSIP_HEARTBEAT: Duration = Duration::from_secs(5);

/// How long a provider record lives in other nodes' stores: three of our
/// longest re-checks (`event_loop::discovery`), so a member that left is
/// gone from the pool's keys within the hour instead of the 48 h default.
pub(crate) const PROVIDER_RECORD_TTL: Duration = Duration::from_secs(60 * 60);

/// How often Kademlia refreshes its routing table (default 5 min). A refresh
/// is a lookup of our own id and one in every bucket farther out, each
/// dialing peers it is not connected to, and every new connection costs
/// both ends a handshake, identify and the lookup's answers: in the
/// 300-node harness the members whose 30-minute refresh fell into the idle
/// window received 2.4-2.8 KB/s there against 0.3-0.7 KB/s for those whose
/// refresh came after it (docs/scale.md), so at 30 min the refresh alone
/// was about half of a member's idle traffic. The table does not need it
/// to stay useful: peers that contact us enter it where there is room
/// (`net::routing_table`), a dead entry leaves when a lookup fails to
/// reach it, and Kademlia refreshes by itself while the table holds fewer
/// than 20 peers.
const KAD_BOOTSTRAP_EVERY: Duration = Duration::from_secs(4 * 60 * 60);

/// Kademlia's replication factor (default 20): how many of the peers closest
/// to a key hold its provider records, and how many closest peers a lookup
/// waits for before it ends, so about how many connections each lookup opens.
/// A member's re-check of its place in the pool's keys is three lookups
/// (its parent key, its own, and providing it), so at 20 each re-check
/// dialed some 60 peers, and every member's re-checks landed on the few
/// dozen peers closest to the upper keys of the trie: in a pool of 300 such
/// a peer took a new connection every few seconds, and each new connection
/// costs a handshake, identify and the per-connection state for minutes
/// (docs/scale.md). Ten holders are still far more than a key needs: every
/// holder is refreshed by each provider's re-check every 10 to 20 minutes,
/// and a record lives an hour ([`PROVIDER_RECORD_TTL`]).
const KAD_REPLICATION: NonZeroUsize = match NonZeroUsize::new(10) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// How often each connection is pinged (default 15 s): the cost of a ping
/// is per connection, and a node every member bootstraps from has hundreds.
const PING_EVERY: Duration = Duration::from_secs(60);

/// Connection limits: bounds on what a stranger (or a pool) can make us hold.
/// Generous, as a bootstrap peer is connected to every member that named it.
fn connection_limits() -> connection_limits::ConnectionLimits {
    connection_limits::ConnectionLimits::default()
        .with_max_pending_incoming(Some(128))
        .with_max_pending_outgoing(Some(128))
        .with_max_established_incoming(Some(2048))
        .with_max_established(Some(2560))
        // A direct and a relayed connection, and a dial race.
        .with_max_established_per_peer(Some(4))
}

fn build_behaviour(
    key: &Keypair,
    relay_client: relay::client::Behaviour,
    cfg: &NetConfig,
    scope: AddressScope,
) -> Result<Behaviour, BoxError> {
    let peer_id = key.public().to_peer_id();

    let mut kad_cfg = kad::Config::new(StreamProtocol::new(KAD_PROTOCOL));
    kad_cfg.set_query_timeout(Duration::from_secs(30));
    kad_cfg.set_replication_factor(KAD_REPLICATION);
    // Peers enter the routing table through `net::routing_table` only, which
    // never fills a full bucket (the automatic insert dials for it).
    kad_cfg.set_kbucket_inserts(kad::BucketInserts::Manual);
    // Our records are refreshed by the discovery's re-checks, not by
    // Kademlia's 12-hourly republication.
    kad_cfg.set_provider_record_ttl(Some(PROVIDER_RECORD_TTL));
    kad_cfg.set_provider_publication_interval(None);
    kad_cfg.set_periodic_bootstrap_interval(Some(KAD_BOOTSTRAP_EVERY));
    let mut kad =
        kad::Behaviour::with_config(peer_id, kad::store::MemoryStore::new(peer_id), kad_cfg);
    if cfg.kad_server {
        kad.set_mode(Some(kad::Mode::Server));
    }

    let gossipsub = gossipsub::Behaviour::new(
        gossipsub::MessageAuthenticity::Signed(key.clone()),
        gossipsub_config()?,
    )?;

    let mdns = if cfg.mdns {
        Some(mdns::tokio::Behaviour::new(
            mdns::Config::default(),
            peer_id,
        )?)
    } else {
        None
    };

    let relay_server = cfg.relay_server.then(|| {
        // Our relays carry reliability queries and small jobs for volunteers behind NAT;
        // the libp2p defaults (2 min, 128 KiB per circuit) are too tight for that.
        let relay_cfg = relay::Config {
            max_circuit_duration: Duration::from_secs(15 * 60),
            max_circuit_bytes: 64 * 1024 * 1024,
            ..Default::default()
        };
        relay::Behaviour::new(peer_id, relay_cfg)
    });

    let rr_cfg = request_response::Config::default().with_request_timeout(cfg.request_timeout);
    let reliability = request_response::Behaviour::with_codec(
        ReliabilityCodec::new(RELIABILITY_CAPS),
        [(
            StreamProtocol::new(RELIABILITY_PROTOCOL),
            ProtocolSupport::Full,
        )],
        rr_cfg.clone(),
    );
    let job = request_response::Behaviour::with_codec(
        JobCodec::new(JOB_CAPS),
        [(StreamProtocol::new(JOB_PROTOCOL), ProtocolSupport::Full)],
        rr_cfg.clone(),
    );
    let digest = request_response::Behaviour::with_codec(
        DigestCodec::new(DIGEST_CAPS),
        [(StreamProtocol::new(DIGEST_PROTOCOL), ProtocolSupport::Full)],
        rr_cfg,
    );

    Ok(Behaviour {
        blocked: allow_block_list::Behaviour::default(),
        relay_client,
        relay_server: relay_server.into(),
        dcutr: dcutr::Behaviour::new(peer_id),
        autonat_client: cfg
            .autonat
            .then(autonat::v2::client::Behaviour::default)
            .into(),
        autonat_server: cfg
            .relay_server
            .then(autonat::v2::server::Behaviour::default)
            .into(),
        // In a public pool identify tells only confirmed external addresses (the relayed
        // one among them): our listen addresses are loopback and LAN addresses no other
        // home can reach. No identify cache either: the addresses we dial come from
        // Kademlia, which is fed only addresses `AddressScope` keeps.
        identify: identify::Behaviour::new(
            identify::Config::new(IDENTIFY_PROTOCOL_VERSION.to_string(), key.public())
                .with_hide_listen_addrs(scope == AddressScope::Public)
                .with_cache_size(0),
        ),
        ping: ping::Behaviour::new(ping::Config::new().with_interval(PING_EVERY)),
        limits: connection_limits::Behaviour::new(connection_limits()),
        kad,
        gossipsub,
        mdns: mdns.into(),
        reliability,
        job,
        digest,
        stream: libp2p_stream::Behaviour::new(),
    })
}

/// Builds the Swarm: TCP+Noise+Yamux, QUIC, DNS and the relay client; with a swarm key,
/// TCP wrapped in pnet and no QUIC. Every transport counts its bytes into the
/// returned meter (libp2p's bandwidth metrics), and holds the inbound
/// connections of the peers `quarantine` names and rations those of the
/// sources it suspects, TCP's before the handshake (relayed ones excepted:
/// the relay pays for those).
pub(crate) fn build_swarm(
    key: Keypair,
    cfg: &NetConfig,
    scope: AddressScope,
    quarantine: &Quarantine,
) -> Result<(Swarm<Behaviour>, TrafficMeter), BuildError> {
    let err = |e: &dyn std::fmt::Display| BuildError::Swarm(e.to_string());
    let idle = cfg.idle_timeout;
    let mut registry = libp2p::metrics::Registry::default();
    let swarm = match cfg.swarm_key {
        // TCP and QUIC built here rather than by the builder's `with_tcp`
        // and `with_quic`, the same way, each with a blocked peer's inbound
        // connections held after the handshake (`quarantine`).
        None => SwarmBuilder::with_existing_identity(key)
            .with_tokio()
            .with_other_transport(|key| {
                let noise = noise::Config::new(key)?;
                Ok::<_, BoxError>(
                    tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
                        .and_then(gate_socket(quarantine.clone()))
                        .upgrade(Version::V1Lazy)
                        .authenticate(noise)
                        .multiplex(yamux::Config::default())
                        .and_then(hold_inbound(quarantine.clone(), true)),
                )
            })
            .map_err(|e| err(&e))?
            .with_other_transport(|key| {
                quic::tokio::Transport::new(quic::Config::new(key))
                    .and_then(hold_inbound(quarantine.clone(), false))
            })
            .map_err(|e| err(&e))?
            .with_dns()
            .map_err(|e| err(&e))?
            .with_relay_client(noise::Config::new, yamux::Config::default)
            .map_err(|e| err(&e))?
            .with_bandwidth_metrics(&mut registry)
            .with_behaviour(|key, relay| build_behaviour(key, relay, cfg, scope))
            .map_err(|e| err(&e))?
            .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
            .build(),
        Some(psk) => SwarmBuilder::with_existing_identity(key)
            .with_tokio()
            .with_other_transport(|key| {
                let noise = noise::Config::new(key)?;
                Ok::<_, BoxError>(
                    tcp::tokio::Transport::new(tcp::Config::default().nodelay(true))
                        .and_then(gate_socket(quarantine.clone()))
                        .and_then(move |socket, _| PnetConfig::new(psk).handshake(socket))
                        .upgrade(Version::V1Lazy)
                        .authenticate(noise)
                        .multiplex(yamux::Config::default())
                        .timeout(Duration::from_secs(20))
                        .and_then(hold_inbound(quarantine.clone(), true)),
                )
            })
            .map_err(|e| err(&e))?
            .with_dns()
            .map_err(|e| err(&e))?
            .with_relay_client(noise::Config::new, yamux::Config::default)
            .map_err(|e| err(&e))?
            .with_bandwidth_metrics(&mut registry)
            .with_behaviour(|key, relay| build_behaviour(key, relay, cfg, scope))
            .map_err(|e| err(&e))?
            .with_swarm_config(|c| c.with_idle_connection_timeout(idle))
            .build(),
    };
    Ok((swarm, TrafficMeter::new(registry)))
}

/// True when `addr` uses QUIC (skipped when a swarm key is set).
pub(crate) fn is_quic(addr: &Multiaddr) -> bool {
    addr.iter().any(|p| matches!(p, Protocol::QuicV1))
}

/// Limit on addresses we accept in one announcement.
pub(crate) const ANNOUNCED_ADDRESSES_MAX: usize = 16;

/// Bound for the inbound-request queue towards the node.
pub(crate) const EVENT_QUEUE: NonZeroUsize = match NonZeroUsize::new(256) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};
