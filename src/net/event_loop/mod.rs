//! The one task that owns the Swarm. It selects its inputs (Swarm events, commands from
//! `NetHandle`s, answers the node gives to inbound requests, timers) into one closed
//! `LoopEvent` and handles each in a single `match`.
//!
//! Here live the rules that make the protocols safe for the node: every gossipsub message
//! gets a validation verdict, announcements must come from the peer they describe, job
//! requests from peers outside the allowlist are refused without reaching the node, the
//! node is never waited on (full queue ⇒ the request is dropped) and an unanswered
//! inbound request is dropped after `serve_timeout`. This module does not know how
//! reliability is computed or how jobs run.
//!
//! This file holds the loop itself (start, the select, the commands, the
//! Swarm's and the behaviours' events dispatched); its children hold the
//! handling by concern: `connectivity` (bootstrap, relays, NAT), `discovery`
//! (our place among the pool's DHT keys, listings of the pool), `digests`
//! (a large pool's leaf topics, digests and a consumer's sample of
//! leaves), `membership` (announcements, members), `remembered` (the peer book:
//! members recorded, written and redialed) and `requests` (the request
//! protocols and the allowlist).

mod connectivity;
mod deaf;
mod digests;
mod discovery;
mod membership;
mod remembered;
mod requests;
mod trimming;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use libp2p::core::transport::ListenerId;
use libp2p::core::ConnectedPoint;
use libp2p::gossipsub::{self, IdentTopic};
use libp2p::identity::Keypair;
use libp2p::request_response::OutboundRequestId;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::swarm::{ConnectionId, SwarmEvent};
use libp2p::{identify, mdns, Multiaddr, PeerId, StreamProtocol, Swarm};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::model::budget::PeerBudgets;
use crate::net::cpu_ledger::CpuLedger;
use crate::net::handle::{Command, LocalStatus, NetError, NetEvent, NetHandle, SummaryBody};
use crate::net::listening::{Listening, Republish, Topics};
use crate::net::members::{MemberCache, MEMBERS_MAX};
use crate::net::protocol::{
    announce_topic, summary_topic, summary_topic_1, JobResponse, ReliabilityResponse, JOB_PROTOCOL,
    KAD_PROTOCOL,
};
use crate::net::quarantine::Quarantine;
use crate::net::reachability::{AddressScope, Reachability};
use crate::net::routing_table;
use crate::net::summary::min_gap;
use crate::net::swarm::{
    build_swarm, is_quic, Behaviour, BehaviourEvent, BuildError, NetConfig, EVENT_QUEUE,
};

use connectivity::{Timer, RELAYED_GRACE};
use deaf::DeafLinks;
use digests::Leaves;
use discovery::Discovery;
use remembered::{Remembered, REDIAL_TICK};
use requests::{Served, ServingFuture};

/// The circuit relay v2 protocol a relay offers (identify lists it).
const RELAY_HOP_PROTOCOL: &str = "/libp2p/circuit/relay/0.2.0/hop";

/// Commands waiting in the channel before `NetHandle` calls wait.
const COMMAND_QUEUE: usize = 64;

/// Builds the Swarm, starts listening and dials the bootstrap peers. Returns the handle,
/// the stream of events for the node, and the loop, which the caller spawns:
/// `tokio::spawn(event_loop.run())`. The loop ends when `cancel` fires or the last
/// handle is dropped.
pub fn start(
    key: Keypair,
    cfg: NetConfig,
    cancel: CancellationToken,
) -> Result<(NetHandle, mpsc::Receiver<NetEvent>, EventLoop), BuildError> {
    let peer_id = key.public().to_peer_id();
    let scope = AddressScope::of(&cfg.listen, cfg.autonat || cfg.relay_server);
    let quarantine = Quarantine::new(cfg.source_ration, cfg.source_new_peers);
    let (mut swarm, traffic) = build_swarm(key, &cfg, scope, &quarantine)?;
    // Version 1 nodes announce on the old topic: still heard (never
    // published on), so a mixed pool lists them.
    let topic = IdentTopic::new(announce_topic(&cfg.pool));
    let summaries = IdentTopic::new(summary_topic(&cfg.pool));
    // Nodes built before summaries of format 2 publish format 1 there:
    // heard too, so a mixed pool lists them.
    let summaries_1 = IdentTopic::new(summary_topic_1(&cfg.pool));
    for t in [&topic, &summaries, &summaries_1] {
        swarm
            .behaviour_mut()
            .gossipsub
            .subscribe(t)
            .map_err(|e| BuildError::Swarm(e.to_string()))?;
    }
    for addr in &cfg.listen {
        if cfg.swarm_key.is_some() && is_quic(addr) {
            tracing::info!(%addr, "private pool: not listening on QUIC (pnet wraps TCP only)");
            continue;
        }
        swarm
            .listen_on(addr.clone())
            .map_err(|e| BuildError::Swarm(format!("listen on {addr}: {e}")))?;
    }
    let (commands_tx, commands) = mpsc::channel(COMMAND_QUEUE);
    let (events, events_rx) = mpsc::channel(EVENT_QUEUE.get());
    let mut initial = Reachability::default();
    initial.settle_nat(cfg.relay_server);
    let (reach, reach_rx) = watch::channel(initial);
    let streams = swarm.behaviour().stream.new_control();
    let bootstrap_peers = cfg
        .bootstrap
        .iter()
        .filter_map(|a| Some((peer_of(a)?, a.clone())))
        .collect();
    let remembered = cfg
        .peer_book
        .clone()
        .map(|store| Remembered::open(store, scope));
    let cfg_shard_full = cfg.shard_full;
    let cfg_peer_cpu_percent = cfg.peer_cpu_percent;
    let listening = Listening::new(cfg.large_pool);
    let leaves = Leaves::new(cfg.shard_full, cfg.announce_interval);
    let mut event_loop = EventLoop {
        swarm,
        cfg,
        topic,
        summary_topic: summaries,
        summary_topic_1: summaries_1,
        commands,
        events,
        cancel,
        pending_dial: HashMap::new(),
        pending_reliability: HashMap::new(),
        pending_job: HashMap::new(),
        discovery: Discovery::new(peer_id, cfg_shard_full),
        serving: FuturesUnordered::new(),
        members: MemberCache::new(MEMBERS_MAX),
        status: None,
        body: None,
        last_published: None,
        republish_pending: Topics::NONE,
        relays_reserved: HashSet::new(),
        scope,
        reach,
        relay_listeners: HashMap::new(),
        relay_capable: HashSet::new(),
        bootstrap_peers,
        backoff: HashMap::new(),
        retrying: HashSet::new(),
        timers: FuturesUnordered::new(),
        links: HashMap::new(),
        used: HashMap::new(),
        remembered,
        inbound: requests::inbound_budgets(),
        probation: requests::probation_budgets(),
        summaries: membership::summary_budgets(),
        inbound_origin: tokio::time::Instant::now(),
        held: HashMap::new(),
        listening,
        leaves,
        on_summary_topics: true,
        deaf: DeafLinks::default(),
        quarantine,
        cpu: CpuLedger::new(cfg_peer_cpu_percent),
    };
    event_loop.seed_members();
    event_loop.deaf_listening(true);
    event_loop.update_listening();
    event_loop.dial_bootstrap();
    Ok((
        NetHandle {
            commands: commands_tx,
            peer_id,
            reachability: reach_rx,
            streams,
            traffic,
            quarantine: event_loop.quarantine.clone(),
            cpu: event_loop.cpu.clone(),
        },
        events_rx,
        event_loop,
    ))
}

type Reply<T> = oneshot::Sender<Result<T, NetError>>;

/// Everything the loop reacts to. It lives for one iteration on the stack, so the size
/// of the Swarm event variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum LoopEvent {
    Swarm(SwarmEvent<BehaviourEvent>),
    Command(Command),
    Served(Served),
    AnnounceTick,
    ExpireTick,
    /// Time to look at the connections and redial remembered members.
    RedialTick,
    /// A wait is over: another attempt at a lost peer, or dropping relayed connections.
    Timer(Timer),
    Stop,
}

/// The task that owns the Swarm.
pub struct EventLoop {
    swarm: Swarm<Behaviour>,
    cfg: NetConfig,
    /// Version 1 nodes' announce topic (heard, never published on).
    topic: IdentTopic,
    /// The topic our summaries go to (format 2).
    summary_topic: IdentTopic,
    /// Format 1 summaries' topic: heard; ours go there too only while a
    /// member heard in format 1 is in the table.
    summary_topic_1: IdentTopic,
    commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<NetEvent>,
    cancel: CancellationToken,
    pending_dial: HashMap<ConnectionId, Reply<PeerId>>,
    pending_reliability: HashMap<OutboundRequestId, Reply<ReliabilityResponse>>,
    pending_job: HashMap<OutboundRequestId, Reply<JobResponse>>,
    /// Our provider record among the pool's DHT keys, and listings under way.
    discovery: Discovery,
    serving: FuturesUnordered<ServingFuture>,
    members: MemberCache,
    status: Option<LocalStatus>,
    /// The reliability part of our summary, as the node last computed it.
    body: Option<SummaryBody>,
    /// When we last published, so republications keep the minimum gap.
    last_published: Option<std::time::Instant>,
    /// Topics a republication waits for the gap to go to.
    republish_pending: Topics,
    /// Relays we listen through (or are trying to).
    relays_reserved: HashSet<PeerId>,
    /// Which addresses we keep and tell.
    scope: AddressScope,
    /// The snapshot `status` reads.
    reach: watch::Sender<Reachability>,
    /// Our listeners through relays, so a closed one can be re-opened.
    relay_listeners: HashMap<ListenerId, PeerId>,
    /// Peers that said (identify) they serve as relays.
    relay_capable: HashSet<PeerId>,
    /// Bootstrap peers and the address we dial them at; kept connected.
    bootstrap_peers: HashMap<PeerId, Multiaddr>,
    /// Wait before the next attempt at each lost bootstrap peer or relay.
    backoff: HashMap<PeerId, Duration>,
    /// Peers with an attempt scheduled (at most one each).
    retrying: HashSet<PeerId>,
    /// Scheduled attempts and clean-ups.
    timers: FuturesUnordered<futures::future::BoxFuture<'static, Timer>>,
    /// Open connections per peer: whether each goes through a relay, who
    /// dialed it and when it opened.
    links: HashMap<PeerId, HashMap<ConnectionId, Conn>>,
    /// When we last exchanged a job or reliability request with a peer
    /// (`trimming` keeps those peers connected).
    used: HashMap<PeerId, std::time::Instant>,
    /// The peer book and its redialer; `None` when `[net] peer_book` is off.
    remembered: Option<Remembered>,
    /// Each peer's budget of inbound requests (`requests::INBOUND_*`).
    inbound: PeerBudgets<PeerId>,
    /// The same for strangers on probation (`requests::PROBATION_*`).
    probation: PeerBudgets<PeerId>,
    /// Each member's budget of summaries (`membership::SUMMARY_*`), by the
    /// message's source.
    summaries: PeerBudgets<PeerId>,
    /// The origin of the budgets' clock (tokio's, so paused time works).
    inbound_origin: tokio::time::Instant,
    /// Requests held unanswered per peer (past its budget).
    held: HashMap<PeerId, usize>,
    /// Whether we should hear the pool's summaries (`listening`).
    listening: Listening,
    /// Our leaf's topic and digest, and a consumer's sample (`digests`).
    leaves: Leaves,
    /// Whether we are subscribed to the summary and announce topics.
    on_summary_topics: bool,
    /// Connections on which the pool's topics went deaf (`deaf`).
    deaf: DeafLinks,
    /// The blocked peers whose inbound connections the transport holds
    /// (kept in step with the block list by `requests`), and the sources
    /// whose new connections it rations.
    quarantine: Quarantine,
    /// What each peer's requests cost our CPU, charged here per request
    /// and by the node per answer (`net::cpu_ledger`).
    cpu: CpuLedger,
}

impl EventLoop {
    /// Runs until cancelled or until every `NetHandle` is dropped.
    pub async fn run(mut self) {
        // Not a heartbeat (the node decides when to publish): the moment a
        // republication that had to wait for the gap goes out.
        let mut announce = tokio::time::interval(min_gap(self.cfg.announce_interval));
        let mut expire = tokio::time::interval(self.cfg.member_ttl / 4);
        let mut redial = tokio::time::interval(REDIAL_TICK);
        redial.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                () = self.cancel.cancelled() => LoopEvent::Stop,
                event = self.swarm.select_next_some() => LoopEvent::Swarm(event),
                command = self.commands.recv() => match command {
                    Some(c) => LoopEvent::Command(c),
                    None => LoopEvent::Stop,
                },
                Some(served) = self.serving.next(), if !self.serving.is_empty() => LoopEvent::Served(served),
                Some(timer) = self.timers.next(), if !self.timers.is_empty() => LoopEvent::Timer(timer),
                _ = announce.tick() => LoopEvent::AnnounceTick,
                _ = expire.tick() => LoopEvent::ExpireTick,
                _ = redial.tick() => LoopEvent::RedialTick,
            };
            match event {
                LoopEvent::Stop => break,
                LoopEvent::Swarm(e) => self.on_swarm_event(e),
                LoopEvent::Command(c) => self.on_command(c),
                LoopEvent::Served(s) => self.on_served(s),
                LoopEvent::AnnounceTick => {
                    self.republish_if_pending();
                    self.update_listening();
                    self.sample_tick();
                }
                LoopEvent::ExpireTick => self.expire_members(),
                LoopEvent::RedialTick => {
                    self.on_redial_tick();
                    self.trim_connections();
                    self.check_deaf_links();
                }
                LoopEvent::Timer(Timer::Retry(peer)) => self.retry(peer),
                LoopEvent::Timer(Timer::DropRelayed(peer)) => self.drop_relayed(peer),
                LoopEvent::Timer(Timer::Recheck) => self.check_placement(),
                LoopEvent::Timer(Timer::WalkDeadline(walk)) => self.end_walk(walk),
                LoopEvent::Timer(Timer::Unblock(peer)) => self.unblock(peer),
                LoopEvent::Timer(Timer::SampleDeadline) => self.answer_sample_waiters(),
            }
        }
        // What the book learnt since its last write is not lost to a clean stop.
        self.write_book(true);
        tracing::debug!("network loop stopped");
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Listen { addr, reply } => {
                let result = self
                    .swarm
                    .listen_on(addr)
                    .map(|_| ())
                    .map_err(|e| NetError::Listen(e.to_string()));
                let _ = reply.send(result);
            }
            Command::ListenAddrs { reply } => {
                let _ = reply.send(self.swarm.listeners().cloned().collect());
            }
            Command::Dial { addr, reply } => {
                let Some(peer) = peer_of(&addr) else {
                    let _ = reply.send(Err(NetError::Dial(format!("{addr} has no /p2p/ part"))));
                    return;
                };
                let _ =
                    routing_table::learn(&mut self.swarm.behaviour_mut().kad, &peer, addr.clone());
                let opts = DialOpts::from(addr);
                let id = opts.connection_id();
                match self.swarm.dial(opts) {
                    Ok(()) => {
                        self.pending_dial.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(NetError::Dial(e.to_string())));
                    }
                }
            }
            Command::Announce { status, body } => {
                self.status = Some(status);
                if body.is_some() {
                    self.body = body;
                }
                self.count(|c| c.published += 1);
                self.publish_announcement(Topics::ALL);
            }
            Command::QueryReliability { peer, query, reply } => {
                self.use_peer(peer);
                let id = self
                    .swarm
                    .behaviour_mut()
                    .reliability
                    .send_request(&peer, query);
                self.pending_reliability.insert(id, reply);
            }
            Command::SendJobRequest {
                peer,
                request,
                reply,
            } => {
                self.use_peer(peer);
                let id = self.swarm.behaviour_mut().job.send_request(&peer, request);
                self.pending_job.insert(id, reply);
            }
            Command::Members { reply, watch } => {
                // Whoever asks to place or list wants the pool known:
                // listen for a while.
                if watch {
                    self.listening.watch(std::time::Instant::now());
                    self.update_listening();
                }
                let _ = reply.send(self.members.values().cloned().collect());
            }
            Command::FindHosts { reply } => self.start_walk(reply),
            Command::Sample { hosts, reply } => self.want_sample(hosts, reply),
            Command::ConnectedPeers { reply } => {
                let _ = reply.send(self.swarm.connected_peers().copied().collect());
            }
            Command::Overrun {
                peer,
                what,
                cut_off,
            } => {
                if cut_off {
                    self.cut_off(peer, what);
                } else {
                    self.notify(NetEvent::Overrun { peer, what });
                }
            }
            Command::Connections { peer, reply } => {
                let ids = self
                    .links
                    .get(&peer)
                    .map(|conns| conns.keys().copied().collect())
                    .unwrap_or_default();
                let _ = reply.send(ids);
            }
        }
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                tracing::info!(%address, "listening");
                // A relay runs on a reachable machine by definition, and libp2p's relay
                // serves reservations only with a confirmed external address: confirm
                // our listen addresses (a relay behind NAT would need its public one in
                // `listen`).
                // Only addresses a peer could use: a relay listening on 0.0.0.0 also
                // gets 127.0.0.1, which would send every home to itself.
                if self.cfg.relay_server && self.scope.usable(&address) {
                    self.swarm.add_external_address(address);
                }
                self.republish(Republish::Address);
            }
            SwarmEvent::ExpiredListenAddr { .. }
            | SwarmEvent::ExternalAddrConfirmed { .. }
            | SwarmEvent::ExternalAddrExpired { .. } => {
                self.refresh_reach();
                self.republish(Republish::Address);
            }
            SwarmEvent::ListenerClosed {
                listener_id,
                reason,
                ..
            } => {
                if let Some(relay) = self.relay_listeners.remove(&listener_id) {
                    let why = match reason {
                        Ok(()) => "the relay connection closed".to_string(),
                        Err(e) => e.to_string(),
                    };
                    tracing::info!(%relay, "no longer listening through the relay: {why}");
                    self.relays_reserved.remove(&relay);
                    let key = relay.to_base58();
                    self.reach.send_modify(|r| {
                        let entry = r.relay_mut(&key);
                        entry.reserved = false;
                        entry.last_error = Some(why);
                    });
                    self.schedule_retry(relay);
                }
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                ..
            } => {
                if let Some(reply) = self.pending_dial.remove(&connection_id) {
                    let _ = reply.send(Ok(peer_id));
                }
                let relayed = endpoint.is_relayed();
                if let ConnectedPoint::Listener { local_addr, .. } = &endpoint {
                    // Through a relay: its source is the relay's address
                    // block (`net::quarantine`), rationed as any source.
                    if relayed && !self.quarantine.relayed(&peer_id, local_addr) {
                        tracing::debug!(%peer_id, "a relayed stranger from a suspect relay past its ration: closed");
                        let _ = self.swarm.close_connection(connection_id);
                    }
                }
                if endpoint.is_dialer() {
                    self.count(|c| c.connections_out += 1);
                } else {
                    self.count(|c| c.connections_in += 1);
                }
                let conns = self.links.entry(peer_id).or_default();
                conns.insert(
                    connection_id,
                    Conn {
                        relayed,
                        link: crate::net::trim::Link {
                            opened_at: std::time::Instant::now(),
                            dialer: endpoint.is_dialer(),
                        },
                    },
                );
                if conns.values().any(|c| c.relayed) && conns.values().any(|c| !c.relayed) {
                    // A grace period lets requests already on the relayed connection end.
                    self.start_timer(RELAYED_GRACE, Timer::DropRelayed(peer_id));
                }
                if self.bootstrap_peers.contains_key(&peer_id) {
                    self.backoff.remove(&peer_id);
                }
                if let ConnectedPoint::Dialer { address, .. } = endpoint {
                    self.remember_connection(peer_id, Some(&address));
                    if self.scope.usable(&address) {
                        let _ = routing_table::learn(
                            &mut self.swarm.behaviour_mut().kad,
                            &peer_id,
                            address,
                        );
                    }
                } else {
                    self.remember_connection(peer_id, None);
                }
                self.refresh_link(peer_id);
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                if let Some(conns) = self.links.get_mut(&peer_id) {
                    conns.remove(&connection_id);
                    if conns.is_empty() {
                        self.links.remove(&peer_id);
                    }
                }
                if num_established == 0 {
                    self.remember_closed(peer_id);
                    self.schedule_retry(peer_id);
                    self.deaf_closed(peer_id);
                }
                self.refresh_link(peer_id);
            }
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                peer_id,
                error,
                ..
            } => {
                if let Some(reply) = self.pending_dial.remove(&connection_id) {
                    let _ = reply.send(Err(NetError::Dial(error.to_string())));
                }
                if let Some(peer) = peer_id.filter(|p| !self.swarm.is_connected(p)) {
                    self.remember_dial_failed(peer);
                    self.schedule_retry(peer);
                }
            }
            SwarmEvent::Behaviour(event) => self.on_behaviour_event(event),
            _ => {}
        }
    }

    fn on_behaviour_event(&mut self, event: BehaviourEvent) {
        match event {
            // Identify does not feed Kademlia by itself: add the peer's listen addresses
            // when it speaks our DHT protocol.
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                let protocols = &info.protocols;
                self.deaf_identified(
                    peer_id,
                    protocols.contains(&StreamProtocol::new(JOB_PROTOCOL)),
                );
                if protocols.contains(&StreamProtocol::new(RELAY_HOP_PROTOCOL)) {
                    self.relay_capable.insert(peer_id);
                    self.reserve_relay(peer_id);
                }
                if protocols.contains(&StreamProtocol::new(KAD_PROTOCOL)) {
                    for addr in info.listen_addrs {
                        if self.scope.usable(&addr) {
                            let _ = routing_table::learn(
                                &mut self.swarm.behaviour_mut().kad,
                                &peer_id,
                                addr,
                            );
                        }
                    }
                }
            }
            BehaviourEvent::RelayClient(event) => self.on_relay_client_event(event),
            BehaviourEvent::AutonatClient(event) => self.on_autonat_event(event),
            BehaviourEvent::Dcutr(event) => self.on_dcutr_event(event),
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                for (peer, addr) in found {
                    let _ = routing_table::learn(
                        &mut self.swarm.behaviour_mut().kad,
                        &peer,
                        addr.clone(),
                    );
                    if !self.swarm.is_connected(&peer) {
                        let _ = self.swarm.dial(addr);
                    }
                }
            }
            BehaviourEvent::Kad(event) => self.on_kad_event(event),
            BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            }) => {
                let verdict = self.on_announcement(&message);
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .gossipsub
                    .report_message_validation_result(&message_id, &propagation_source, verdict);
            }
            BehaviourEvent::Gossipsub(gossipsub::Event::Subscribed { peer_id, topic })
                if topic == self.summary_topic.hash() || topic == self.summary_topic_1.hash() =>
            {
                self.on_subscribed(peer_id, Republish::PoolSubscriber);
            }
            BehaviourEvent::Gossipsub(gossipsub::Event::Subscribed { peer_id, topic })
                if self.leaves.topic().is_some_and(|t| topic == t.hash()) =>
            {
                self.on_subscribed(peer_id, Republish::LeafMate);
            }
            BehaviourEvent::Reliability(event) => {
                self.mark_used(&event);
                self.on_reliability_event(event);
            }
            BehaviourEvent::Job(event) => {
                self.mark_used(&event);
                self.on_job_event(event);
            }
            BehaviourEvent::Digest(event) => self.on_digest_event(event),
            _ => {}
        }
    }
}

/// One open connection: through a relay or not, and what trimming needs.
#[derive(Debug, Clone, Copy)]
struct Conn {
    relayed: bool,
    link: crate::net::trim::Link,
}

/// The peer id at the end of a multiaddr (`.../p2p/<id>`).
fn peer_of(addr: &Multiaddr) -> Option<PeerId> {
    match addr.iter().last() {
        Some(libp2p::multiaddr::Protocol::P2p(peer)) => Some(peer),
        _ => None,
    }
}
