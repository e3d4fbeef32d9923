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

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use libp2p::core::ConnectedPoint;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance};
use libp2p::identity::Keypair;
use libp2p::kad::{self, GetProvidersOk, QueryId, QueryResult, RecordKey};
use libp2p::request_response::{self, OutboundFailure, OutboundRequestId, ResponseChannel};
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::swarm::{ConnectionId, SwarmEvent};
use libp2p::{identify, mdns, Multiaddr, PeerId, StreamProtocol, Swarm};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::net::codec::{decode_body, encode_body};
use crate::net::handle::{Command, LocalStatus, Member, NetError, NetEvent, NetHandle, Responder};
use crate::net::protocol::{
    announce_topic, pool_dht_key, Announcement, JobRequest, JobResponse, RejectReason,
    ReliabilityResponse, ANNOUNCE_MAX_BYTES, KAD_PROTOCOL,
};
use crate::net::swarm::{
    build_swarm, is_quic, Behaviour, BehaviourEvent, BuildError, NetConfig,
    ANNOUNCED_ADDRESSES_MAX, EVENT_QUEUE,
};

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
    let mut swarm = build_swarm(key, &cfg)?;
    let topic = IdentTopic::new(announce_topic(&cfg.pool));
    swarm
        .behaviour_mut()
        .gossipsub
        .subscribe(&topic)
        .map_err(|e| BuildError::Swarm(e.to_string()))?;
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
    let mut event_loop = EventLoop {
        swarm,
        cfg,
        topic,
        commands,
        events,
        cancel,
        pending_dial: HashMap::new(),
        pending_reliability: HashMap::new(),
        pending_job: HashMap::new(),
        pending_hosts: HashMap::new(),
        serving: FuturesUnordered::new(),
        members: HashMap::new(),
        status: None,
        relays_reserved: HashSet::new(),
    };
    event_loop.dial_bootstrap();
    Ok((
        NetHandle {
            commands: commands_tx,
            peer_id,
        },
        events_rx,
        event_loop,
    ))
}

type Reply<T> = oneshot::Sender<Result<T, NetError>>;

/// An answer from the node to an inbound request, or its absence.
enum Served {
    Reliability(
        ResponseChannel<ReliabilityResponse>,
        Option<ReliabilityResponse>,
    ),
    Job(ResponseChannel<JobResponse>, Option<JobResponse>),
}

type ServingFuture = futures::future::BoxFuture<'static, Served>;

/// Everything the loop reacts to. It lives for one iteration on the stack, so the size
/// of the Swarm event variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum LoopEvent {
    Swarm(SwarmEvent<BehaviourEvent>),
    Command(Command),
    Served(Served),
    AnnounceTick,
    ExpireTick,
    Stop,
}

/// The task that owns the Swarm.
pub struct EventLoop {
    swarm: Swarm<Behaviour>,
    cfg: NetConfig,
    topic: IdentTopic,
    commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<NetEvent>,
    cancel: CancellationToken,
    pending_dial: HashMap<ConnectionId, Reply<PeerId>>,
    pending_reliability: HashMap<OutboundRequestId, Reply<ReliabilityResponse>>,
    pending_job: HashMap<OutboundRequestId, Reply<JobResponse>>,
    pending_hosts: HashMap<QueryId, (HashSet<PeerId>, Reply<Vec<PeerId>>)>,
    serving: FuturesUnordered<ServingFuture>,
    members: HashMap<PeerId, Member>,
    status: Option<LocalStatus>,
    /// Relays we listen through.
    relays_reserved: HashSet<PeerId>,
}

impl EventLoop {
    /// Runs until cancelled or until every `NetHandle` is dropped.
    pub async fn run(mut self) {
        let mut announce = tokio::time::interval(self.cfg.announce_interval);
        let mut expire = tokio::time::interval(self.cfg.member_ttl / 4);
        loop {
            let event = tokio::select! {
                () = self.cancel.cancelled() => LoopEvent::Stop,
                event = self.swarm.select_next_some() => LoopEvent::Swarm(event),
                command = self.commands.recv() => match command {
                    Some(c) => LoopEvent::Command(c),
                    None => LoopEvent::Stop,
                },
                Some(served) = self.serving.next(), if !self.serving.is_empty() => LoopEvent::Served(served),
                _ = announce.tick() => LoopEvent::AnnounceTick,
                _ = expire.tick() => LoopEvent::ExpireTick,
            };
            match event {
                LoopEvent::Stop => break,
                LoopEvent::Swarm(e) => self.on_swarm_event(e),
                LoopEvent::Command(c) => self.on_command(c),
                LoopEvent::Served(s) => self.on_served(s),
                LoopEvent::AnnounceTick => self.publish_announcement(),
                LoopEvent::ExpireTick => self.expire_members(),
            }
        }
        tracing::debug!("network loop stopped");
    }

    /// A member of a public pool (AutoNAT on) that may sit behind NAT listens through
    /// each bootstrap peer that offers a relay: peers then reach it over a circuit and
    /// DCUtR upgrades the connection to a direct one where the NATs allow.
    fn reserve_relay(&mut self, relay: PeerId) {
        if !self.cfg.autonat || self.cfg.relay_server || !self.relays_reserved.insert(relay) {
            return;
        }
        let Some(addr) = self
            .cfg
            .bootstrap
            .iter()
            .find(|a| peer_of(a) == Some(relay))
            .cloned()
        else {
            return;
        };
        let circuit = addr.with(libp2p::multiaddr::Protocol::P2pCircuit);
        match self.swarm.listen_on(circuit.clone()) {
            Ok(_) => tracing::info!(%circuit, "listening through a relay"),
            Err(e) => tracing::warn!(%circuit, "cannot listen through the relay: {e}"),
        }
    }

    fn dial_bootstrap(&mut self) {
        for addr in self.cfg.bootstrap.clone() {
            if let Some(peer) = peer_of(&addr) {
                self.swarm
                    .behaviour_mut()
                    .kad
                    .add_address(&peer, addr.clone());
            }
            if let Err(e) = self.swarm.dial(addr.clone()) {
                tracing::warn!(%addr, "bootstrap dial failed: {e}");
            }
        }
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
                self.swarm
                    .behaviour_mut()
                    .kad
                    .add_address(&peer, addr.clone());
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
            Command::Announce { status } => {
                self.status = Some(status);
                self.publish_announcement();
            }
            Command::QueryReliability { peer, query, reply } => {
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
                let id = self.swarm.behaviour_mut().job.send_request(&peer, request);
                self.pending_job.insert(id, reply);
            }
            Command::Members { reply } => {
                let _ = reply.send(self.members.values().cloned().collect());
            }
            Command::FindHosts { reply } => {
                let key = RecordKey::new(&pool_dht_key(&self.cfg.pool));
                let id = self.swarm.behaviour_mut().kad.get_providers(key);
                self.pending_hosts.insert(id, (HashSet::new(), reply));
            }
            Command::ConnectedPeers { reply } => {
                let _ = reply.send(self.swarm.connected_peers().copied().collect());
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
                if self.cfg.relay_server && !is_unspecified(&address) {
                    self.swarm.add_external_address(address);
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
                if let ConnectedPoint::Dialer { address, .. } = endpoint {
                    self.swarm
                        .behaviour_mut()
                        .kad
                        .add_address(&peer_id, address);
                }
            }
            SwarmEvent::OutgoingConnectionError {
                connection_id,
                error,
                ..
            } => {
                if let Some(reply) = self.pending_dial.remove(&connection_id) {
                    let _ = reply.send(Err(NetError::Dial(error.to_string())));
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
                if protocols.contains(&StreamProtocol::new(RELAY_HOP_PROTOCOL)) {
                    self.reserve_relay(peer_id);
                }
                if protocols.contains(&StreamProtocol::new(KAD_PROTOCOL)) {
                    for addr in info.listen_addrs {
                        self.swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                    }
                }
            }
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                for (peer, addr) in found {
                    self.swarm
                        .behaviour_mut()
                        .kad
                        .add_address(&peer, addr.clone());
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
                if topic == self.topic.hash() =>
            {
                // A peer that joins the topic has not heard our last announcement
                // (it went out before it was there): tell it now, not in 30 s.
                tracing::debug!(%peer_id, "a peer subscribed to the pool's topic");
                self.publish_announcement();
            }
            BehaviourEvent::Reliability(event) => self.on_reliability_event(event),
            BehaviourEvent::Job(event) => self.on_job_event(event),
            _ => {}
        }
    }

    fn on_kad_event(&mut self, event: kad::Event) {
        match event {
            kad::Event::RoutingUpdated {
                is_new_peer: true, ..
            } => {
                // A new contact can store our provider record: provide again (cheap in
                // pools of a few peers, and a new pool would otherwise wait for the
                // 12 h republication).
                self.provide();
            }
            kad::Event::OutboundQueryProgressed {
                id,
                result: QueryResult::GetProviders(result),
                step,
                ..
            } => {
                let me = *self.swarm.local_peer_id();
                if let (Some((found, _)), Ok(GetProvidersOk::FoundProviders { providers, .. })) =
                    (self.pending_hosts.get_mut(&id), result)
                {
                    found.extend(providers.into_iter().filter(|p| *p != me));
                }
                if step.last {
                    if let Some((found, reply)) = self.pending_hosts.remove(&id) {
                        let _ = reply.send(Ok(found.into_iter().collect()));
                    }
                }
            }
            _ => {}
        }
    }

    fn provide(&mut self) {
        let key = RecordKey::new(&pool_dht_key(&self.cfg.pool));
        if let Err(e) = self.swarm.behaviour_mut().kad.start_providing(key) {
            tracing::warn!("cannot provide the pool key: {e}");
        }
    }

    /// Checks one gossipsub message and, if it is a good announcement, records the member.
    fn on_announcement(&mut self, message: &gossipsub::Message) -> MessageAcceptance {
        if message.topic != self.topic.hash() || message.data.len() > ANNOUNCE_MAX_BYTES {
            return MessageAcceptance::Reject;
        }
        let Some(source) = message.source else {
            return MessageAcceptance::Reject;
        };
        let Ok(announcement) = decode_body::<Announcement>(&message.data) else {
            return MessageAcceptance::Reject;
        };
        let Some(member) = member_from(source, announcement) else {
            return MessageAcceptance::Reject;
        };
        for addr in &member.addresses {
            self.swarm
                .behaviour_mut()
                .kad
                .add_address(&source, addr.clone());
        }
        self.members.insert(source, member.clone());
        self.notify(NetEvent::MemberAnnounced(member));
        MessageAcceptance::Accept
    }

    fn publish_announcement(&mut self) {
        let Some(status) = self.status.clone() else {
            return;
        };
        let addresses = self
            .swarm
            .external_addresses()
            .chain(self.swarm.listeners())
            .filter(|a| !is_unspecified(a))
            .take(ANNOUNCED_ADDRESSES_MAX)
            .map(|a| a.to_vec())
            .collect();
        let announcement = Announcement {
            peer_id: self.swarm.local_peer_id().to_bytes(),
            addresses,
            logical_cpus: status.logical_cpus,
            memory_mib: status.memory_mib,
            benchmark_score: status.benchmark_score,
            relative_power_milli: status.relative_power_milli,
            state: status.state.into(),
            slot_free: status.slot_free,
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let data = match encode_body(&announcement) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("announcement does not encode: {e}");
                return;
            }
        };
        let topic = self.topic.clone();
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.publish(topic, data) {
            // No subscribed peer yet is normal for the first member of a pool.
            tracing::debug!("announcement not published: {e}");
        }
        self.provide();
    }

    fn expire_members(&mut self) {
        let ttl = self.cfg.member_ttl;
        let now = Instant::now();
        let expired: Vec<PeerId> = self
            .members
            .iter()
            .filter(|(_, m)| now.duration_since(m.last_seen) > ttl)
            .map(|(p, _)| *p)
            .collect();
        for peer in expired {
            self.members.remove(&peer);
            self.notify(NetEvent::MemberExpired(peer));
        }
    }

    /// Hands an event to the node without waiting: a node that does not keep up loses
    /// requests (their peers see the stream close) instead of stalling the Swarm.
    fn notify(&self, event: NetEvent) -> bool {
        match self.events.try_send(event) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("node is not reading network events: {e}");
                false
            }
        }
    }

    fn on_reliability_event(
        &mut self,
        event: request_response::Event<crate::net::protocol::ReliabilityQuery, ReliabilityResponse>,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let (tx, rx) = oneshot::channel();
                    if self.notify(NetEvent::ReliabilityQuery {
                        peer,
                        query: request,
                        reply: Responder(tx),
                    }) {
                        let timeout = self.cfg.serve_timeout;
                        self.serving.push(
                            async move {
                                let answer = tokio::time::timeout(timeout, rx).await;
                                Served::Reliability(channel, answer.ok().and_then(Result::ok))
                            }
                            .boxed(),
                        );
                    }
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(reply) = self.pending_reliability.remove(&request_id) {
                        let _ = reply.send(Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                if let Some(reply) = self.pending_reliability.remove(&request_id) {
                    let _ = reply.send(Err(net_error(error)));
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, "inbound reliability query failed: {error}");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    fn on_job_event(&mut self, event: request_response::Event<JobRequest, JobResponse>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    if !self.may_send_job_request(&peer, &request) {
                        let _ = self.swarm.behaviour_mut().job.send_response(
                            channel,
                            JobResponse::Rejected(RejectReason::NotAllowed),
                        );
                        return;
                    }
                    let (tx, rx) = oneshot::channel();
                    if self.notify(NetEvent::JobRequest {
                        peer,
                        request,
                        reply: Responder(tx),
                    }) {
                        let timeout = self.cfg.serve_timeout;
                        self.serving.push(
                            async move {
                                let answer = tokio::time::timeout(timeout, rx).await;
                                Served::Job(channel, answer.ok().and_then(Result::ok))
                            }
                            .boxed(),
                        );
                    }
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(reply) = self.pending_job.remove(&request_id) {
                        let _ = reply.send(Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                if let Some(reply) = self.pending_job.remove(&request_id) {
                    let _ = reply.send(Err(net_error(error)));
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, "inbound job request failed: {error}");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    /// The allowlist governs consumers: who may submit and fetch. Job events travel from
    /// hosts to the consumers that chose them, so they are not subject to it.
    fn may_send_job_request(&self, peer: &PeerId, request: &JobRequest) -> bool {
        match (&self.cfg.allowlist, request) {
            (None, _) | (_, JobRequest::Event { .. }) => true,
            (Some(allowed), _) => allowed.contains(peer),
        }
    }

    fn on_served(&mut self, served: Served) {
        // A `None` answer drops the channel: the requester sees the stream close.
        match served {
            Served::Reliability(channel, Some(answer)) => {
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .reliability
                    .send_response(channel, answer);
            }
            Served::Job(channel, Some(answer)) => {
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .job
                    .send_response(channel, answer);
            }
            Served::Reliability(_, None) | Served::Job(_, None) => {}
        }
    }
}

fn net_error(e: OutboundFailure) -> NetError {
    match e {
        OutboundFailure::Timeout => NetError::Timeout,
        OutboundFailure::UnsupportedProtocols => NetError::UnsupportedProtocol,
        OutboundFailure::DialFailure => NetError::Dial("no usable address or dial failed".into()),
        OutboundFailure::ConnectionClosed => NetError::ConnectionClosed,
        OutboundFailure::Io(e) => NetError::Io(e.to_string()),
    }
}

/// The peer id at the end of a multiaddr (`.../p2p/<id>`).
fn peer_of(addr: &Multiaddr) -> Option<PeerId> {
    match addr.iter().last() {
        Some(libp2p::multiaddr::Protocol::P2p(peer)) => Some(peer),
        _ => None,
    }
}

fn is_unspecified(addr: &Multiaddr) -> bool {
    addr.iter().any(|p| match p {
        libp2p::multiaddr::Protocol::Ip4(ip) => ip.is_unspecified(),
        libp2p::multiaddr::Protocol::Ip6(ip) => ip.is_unspecified(),
        _ => false,
    })
}

/// Turns a decoded announcement into a member, or `None` if it lies about its sender or
/// carries addresses that do not parse.
fn member_from(source: PeerId, a: Announcement) -> Option<Member> {
    if PeerId::from_bytes(&a.peer_id).ok()? != source
        || a.addresses.len() > ANNOUNCED_ADDRESSES_MAX
        || a.version.is_empty()
        || a.version.len() > 64
        || a.relative_power_milli > 1000
    {
        return None;
    }
    let addresses = a
        .addresses
        .into_iter()
        .map(Multiaddr::try_from)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(Member {
        peer: source,
        addresses,
        status: LocalStatus {
            logical_cpus: a.logical_cpus,
            memory_mib: a.memory_mib,
            benchmark_score: a.benchmark_score,
            relative_power_milli: a.relative_power_milli,
            state: a.state.into(),
            slot_free: a.slot_free,
        },
        version: a.version,
        last_seen: Instant::now(),
    })
}
