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
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use libp2p::core::transport::ListenerId;
use libp2p::core::ConnectedPoint;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance};
use libp2p::identity::Keypair;
use libp2p::kad::{self, GetProvidersOk, QueryId, QueryResult, RecordKey};
use libp2p::request_response::{self, OutboundFailure, OutboundRequestId, ResponseChannel};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, SwarmEvent};
use libp2p::{autonat, dcutr, identify, mdns, relay, Multiaddr, PeerId, StreamProtocol, Swarm};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::net::codec::{decode_body, encode_body};
use crate::net::handle::{Command, LocalStatus, Member, NetError, NetEvent, NetHandle, Responder};
use crate::net::protocol::{
    announce_topic, pool_dht_key, Announcement, JobRequest, JobResponse, RejectReason,
    ReliabilityResponse, ANNOUNCE_MAX_BYTES, KAD_PROTOCOL,
};
use crate::net::reachability::{AddressScope, PeerLink, Reachability};
use crate::net::swarm::{
    build_swarm, is_quic, Behaviour, BehaviourEvent, BuildError, NetConfig,
    ANNOUNCED_ADDRESSES_MAX, EVENT_QUEUE,
};

/// The circuit relay v2 protocol a relay offers (identify lists it).
const RELAY_HOP_PROTOCOL: &str = "/libp2p/circuit/relay/0.2.0/hop";

/// Commands waiting in the channel before `NetHandle` calls wait.
const COMMAND_QUEUE: usize = 64;

/// First wait before re-dialing a lost bootstrap peer or re-reserving a lost relay
/// slot; doubled after each failure up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest wait between two attempts at a lost bootstrap peer or relay.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a relayed connection stays open beside a new direct one to the same peer.
const RELAYED_GRACE: Duration = Duration::from_secs(3);

/// What a finished wait means.
enum Timer {
    /// Try a lost bootstrap peer or relay slot again.
    Retry(PeerId),
    /// Close relayed connections to this peer if a direct one exists.
    DropRelayed(PeerId),
}

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
    let mut swarm = build_swarm(key, &cfg, scope)?;
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
    let mut initial = Reachability::default();
    initial.settle_nat(cfg.relay_server);
    let (reach, reach_rx) = watch::channel(initial);
    let streams = swarm.behaviour().stream.new_control();
    let bootstrap_peers = cfg
        .bootstrap
        .iter()
        .filter_map(|a| Some((peer_of(a)?, a.clone())))
        .collect();
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
        scope,
        reach,
        relay_listeners: HashMap::new(),
        relay_capable: HashSet::new(),
        bootstrap_peers,
        backoff: HashMap::new(),
        retrying: HashSet::new(),
        timers: FuturesUnordered::new(),
        links: HashMap::new(),
    };
    event_loop.dial_bootstrap();
    Ok((
        NetHandle {
            commands: commands_tx,
            peer_id,
            reachability: reach_rx,
            streams,
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
    /// A wait is over: another attempt at a lost peer, or dropping relayed connections.
    Timer(Timer),
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
    /// Open connections per peer, and whether each goes through a relay.
    links: HashMap<PeerId, HashMap<ConnectionId, bool>>,
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
                Some(timer) = self.timers.next(), if !self.timers.is_empty() => LoopEvent::Timer(timer),
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
                LoopEvent::Timer(Timer::Retry(peer)) => self.retry(peer),
                LoopEvent::Timer(Timer::DropRelayed(peer)) => self.drop_relayed(peer),
            }
        }
        tracing::debug!("network loop stopped");
    }

    /// A member of a public pool (AutoNAT on) that may sit behind NAT listens through
    /// each bootstrap peer that offers a relay: peers then reach it over a circuit and
    /// DCUtR upgrades the connection to a direct one where the NATs allow.
    fn reserve_relay(&mut self, relay: PeerId) {
        if !self.cfg.autonat || self.cfg.relay_server || self.relays_reserved.contains(&relay) {
            return;
        }
        let Some(addr) = self.bootstrap_peers.get(&relay).cloned() else {
            return;
        };
        let circuit = addr.with(libp2p::multiaddr::Protocol::P2pCircuit);
        match self.swarm.listen_on(circuit.clone()) {
            Ok(id) => {
                tracing::info!(%circuit, "listening through a relay");
                self.relays_reserved.insert(relay);
                self.relay_listeners.insert(id, relay);
                let key = relay.to_base58();
                self.reach.send_modify(|r| {
                    r.relay_mut(&key);
                });
            }
            Err(e) => {
                tracing::warn!(%circuit, "cannot listen through the relay: {e}");
                self.schedule_retry(relay);
            }
        }
    }

    /// Schedules one more attempt at a lost bootstrap peer or relay slot, after a wait
    /// that doubles with each failure: a relay that restarts is back within seconds,
    /// one that is gone costs one dial every `RETRY_MAX`.
    fn schedule_retry(&mut self, peer: PeerId) {
        if !self.bootstrap_peers.contains_key(&peer) || !self.retrying.insert(peer) {
            return;
        }
        let wait = self.backoff.get(&peer).copied().unwrap_or(RETRY_FIRST);
        self.backoff.insert(peer, (wait * 2).min(RETRY_MAX));
        tracing::debug!(%peer, ?wait, "will try the bootstrap peer again");
        self.start_timer(wait, Timer::Retry(peer));
    }

    fn start_timer(&mut self, wait: Duration, timer: Timer) {
        self.timers.push(
            async move {
                tokio::time::sleep(wait).await;
                timer
            }
            .boxed(),
        );
    }

    /// Closes our relayed connections to `peer` once a direct one exists (hole
    /// punched, or dialed): request-response spreads requests over every connection,
    /// and job data must not squeeze through the relay's circuit limits.
    fn drop_relayed(&mut self, peer: PeerId) {
        let Some(conns) = self.links.get(&peer) else {
            return;
        };
        if !conns.values().any(|relayed| !relayed) {
            return;
        }
        let relayed: Vec<ConnectionId> = conns
            .iter()
            .filter(|(_, relayed)| **relayed)
            .map(|(id, _)| *id)
            .collect();
        for id in relayed {
            tracing::debug!(%peer, "closing the relayed connection: a direct one exists");
            self.swarm.close_connection(id);
        }
    }

    /// The wait for `peer` is over: dial it if we lost it, or reserve a slot again if
    /// we are connected to a relay we no longer listen through.
    fn retry(&mut self, peer: PeerId) {
        self.retrying.remove(&peer);
        if self.swarm.is_connected(&peer) {
            if self.relay_capable.contains(&peer) {
                self.reserve_relay(peer);
            }
            return;
        }
        let Some(addr) = self.bootstrap_peers.get(&peer).cloned() else {
            return;
        };
        let opts = DialOpts::peer_id(peer)
            .addresses(vec![addr.clone()])
            .condition(PeerCondition::DisconnectedAndNotDialing)
            .build();
        if let Err(e) = self.swarm.dial(opts) {
            tracing::debug!(%addr, "bootstrap re-dial not started: {e}");
            self.schedule_retry(peer);
        }
    }

    /// Publishes the confirmed external addresses and the connections to `status`.
    fn refresh_reach(&mut self) {
        let reachable: Vec<String> = self
            .swarm
            .external_addresses()
            .map(ToString::to_string)
            .collect();
        let mut peers: Vec<PeerLink> = self
            .links
            .iter()
            .map(|(peer, conns)| {
                let relayed = conns.values().filter(|r| **r).count();
                PeerLink {
                    peer: peer.to_base58(),
                    direct: u32::try_from(conns.len() - relayed).unwrap_or(u32::MAX),
                    relayed: u32::try_from(relayed).unwrap_or(u32::MAX),
                }
            })
            .collect();
        peers.sort_by(|a, b| a.peer.cmp(&b.peer));
        let relay_server = self.cfg.relay_server;
        self.reach.send_modify(|r| {
            r.reachable_at = reachable;
            r.peers = peers;
            r.settle_nat(relay_server);
        });
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
                if let Some(peer) = peer_of(&addr) {
                    self.schedule_retry(peer);
                }
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
                // Only addresses a peer could use: a relay listening on 0.0.0.0 also
                // gets 127.0.0.1, which would send every home to itself.
                if self.cfg.relay_server && self.scope.usable(&address) {
                    self.swarm.add_external_address(address);
                }
                self.publish_announcement();
            }
            SwarmEvent::ExpiredListenAddr { .. }
            | SwarmEvent::ExternalAddrConfirmed { .. }
            | SwarmEvent::ExternalAddrExpired { .. } => {
                self.refresh_reach();
                self.publish_announcement();
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
                let conns = self.links.entry(peer_id).or_default();
                conns.insert(connection_id, relayed);
                if conns.values().any(|r| *r) && conns.values().any(|r| !r) {
                    // A grace period lets requests already on the relayed connection end.
                    self.start_timer(RELAYED_GRACE, Timer::DropRelayed(peer_id));
                }
                if self.bootstrap_peers.contains_key(&peer_id) {
                    self.backoff.remove(&peer_id);
                }
                if let ConnectedPoint::Dialer { address, .. } = endpoint {
                    if self.scope.usable(&address) {
                        self.swarm
                            .behaviour_mut()
                            .kad
                            .add_address(&peer_id, address);
                    }
                }
                self.refresh_reach();
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
                    self.schedule_retry(peer_id);
                }
                self.refresh_reach();
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
                if protocols.contains(&StreamProtocol::new(RELAY_HOP_PROTOCOL)) {
                    self.relay_capable.insert(peer_id);
                    self.reserve_relay(peer_id);
                }
                if protocols.contains(&StreamProtocol::new(KAD_PROTOCOL)) {
                    for addr in info.listen_addrs {
                        if self.scope.usable(&addr) {
                            self.swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                        }
                    }
                }
            }
            BehaviourEvent::RelayClient(event) => self.on_relay_client_event(event),
            BehaviourEvent::AutonatClient(event) => self.on_autonat_event(event),
            BehaviourEvent::Dcutr(event) => self.on_dcutr_event(event),
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

    fn on_relay_client_event(&mut self, event: relay::client::Event) {
        if let relay::client::Event::ReservationReqAccepted {
            relay_peer_id,
            renewal,
            ..
        } = event
        {
            tracing::info!(relay = %relay_peer_id, renewal, "relay reservation accepted");
            self.backoff.remove(&relay_peer_id);
            let key = relay_peer_id.to_base58();
            self.reach.send_modify(|r| {
                let entry = r.relay_mut(&key);
                entry.reserved = true;
                if !renewal {
                    entry.reservations = entry.reservations.saturating_add(1);
                }
            });
        }
    }

    fn on_autonat_event(&mut self, event: autonat::v2::client::Event) {
        let addr = event.tested_addr;
        match event.result {
            Ok(()) => {
                tracing::info!(%addr, server = %event.server, "AutoNAT: reachable");
                self.reach
                    .send_modify(|r| r.autonat_ok = r.autonat_ok.saturating_add(1));
            }
            Err(e) => {
                tracing::info!(%addr, server = %event.server, "AutoNAT: not reachable: {e}");
                let why = format!("{addr}: {e}");
                self.reach.send_modify(|r| {
                    r.autonat_failed = r.autonat_failed.saturating_add(1);
                    r.autonat_last_error = Some(why);
                });
            }
        }
        self.refresh_reach();
    }

    fn on_dcutr_event(&mut self, event: dcutr::Event) {
        let peer = event.remote_peer_id;
        match event.result {
            Ok(_) => {
                tracing::info!(%peer, "hole punched: direct connection");
                self.reach
                    .send_modify(|r| r.dcutr_upgraded = r.dcutr_upgraded.saturating_add(1));
            }
            Err(e) => {
                tracing::info!(%peer, "hole punching failed: {e}");
                let why = format!("{peer}: {e}");
                self.reach.send_modify(|r| {
                    r.dcutr_failed = r.dcutr_failed.saturating_add(1);
                    r.dcutr_last_error = Some(why);
                });
            }
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
        // Only addresses we could reach: another home's loopback or LAN address
        // would send the dial to ourselves or nowhere.
        for addr in member.addresses.iter().filter(|a| self.scope.usable(a)) {
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
        // Confirmed external addresses first (the relayed one once a reservation
        // holds), then listen addresses a peer could use: never loopback outside a
        // loopback pool, never LAN addresses in a public one.
        let mut told: Vec<Multiaddr> = Vec::new();
        for a in self
            .swarm
            .external_addresses()
            .chain(self.swarm.listeners())
            .filter(|a| self.scope.usable(a))
        {
            if told.len() < ANNOUNCED_ADDRESSES_MAX && !told.contains(a) {
                told.push(a.clone());
            }
        }
        let announced: Vec<String> = told.iter().map(ToString::to_string).collect();
        self.reach.send_if_modified(|r| {
            let changed = r.announced != announced;
            r.announced = announced;
            changed
        });
        let addresses = told.iter().map(Multiaddr::to_vec).collect();
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
