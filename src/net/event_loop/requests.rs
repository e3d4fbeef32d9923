//! The request protocols (reliability queries and job requests): each
//! inbound request is first counted against its peer's budget (a burst,
//! then a steady rate), then against its account of CPU (what its requests
//! cost so far: a fixed cost each, charged here, and what each answer took,
//! charged by the node; `net::cpu_ledger`), so that a peer asking only what
//! costs most (a forecast of a window nobody asked) within its request
//! budget is bounded too. Past either the request is held unanswered for a while
//! (up to a few per peer; more are dropped): a flooder that waits for its
//! answers, as request-response peers do, then sends almost nothing, where
//! an answer or a closed stream would have it send the next at once. A
//! peer that keeps flooding is disconnected and blocked for a while (a
//! stranger on probation, `net::quarantine`, has a smaller budget), and
//! the node is told ([`NetEvent::Overrun`]: a flood in the peer's record;
//! `cut_off` does the same for the summaries' and the data server's
//! budgets). So a flood costs a bounded share of a core whatever it
//! carries. A request from a peer outside the allowlist is refused here;
//! the rest are handed to the node without waiting (a full queue drops the
//! request) and answered when the node answers, or dropped after
//! `serve_timeout`; outbound answers and failures reach the caller that
//! asked.
//!
//! It must not know how reliability is computed or how jobs run.

use futures::FutureExt;
use libp2p::request_response::{self, OutboundFailure, ResponseChannel};
use libp2p::PeerId;
use tokio::sync::oneshot;

use super::connectivity::Timer;
use super::EventLoop;
use crate::model::budget::{Admit, Overrun, PeerBudgets};
use crate::net::cpu_ledger::REQUEST_COST;
use crate::net::handle::{NetError, NetEvent, Responder};
use crate::net::protocol::{JobRequest, JobResponse, RejectReason, ReliabilityResponse};

/// An answer from the node to an inbound request, or its absence.
pub(super) enum Served {
    Reliability(
        ResponseChannel<ReliabilityResponse>,
        Option<ReliabilityResponse>,
    ),
    Job(ResponseChannel<JobResponse>, Option<JobResponse>),
    /// A request held past its peer's budget was let go (unanswered).
    Released(PeerId),
}

pub(super) type ServingFuture = futures::future::BoxFuture<'static, Served>;

/// Inbound requests (reliability queries and job requests together) a
/// peer may send in a burst, and per second after it. An honest consumer
/// asks once per survey and fetches a few outputs per task; an honest host
/// sends a handful of events per job. A batch landing hundreds of small
/// outputs at once fits the burst.
pub(super) const INBOUND_BURST: u32 = 512;
pub(super) const INBOUND_PER_SEC: f64 = 64.0;
/// Requests past the budget forgiven before the peer is cut off: a burst,
/// and one a second.
pub(super) const INBOUND_DROPS_FORGIVEN: u32 = 1_024;
/// How long a request past its peer's budget is held unanswered, and how
/// many are held per peer and in all (past either, they are dropped). Few
/// per peer: libp2p serves at most 100 streams of a protocol per connection
/// at once, so a flooder with more held than that would be throttled by its
/// own held streams without ever spending its tolerance for drops, and
/// never be cut off; with a few held, the rest of its flood is dropped and
/// counted, and it is cut off within a second or two.
const HELD_FOR: std::time::Duration = std::time::Duration::from_secs(30);
const HELD_PER_PEER: usize = 16;
const HELD_MAX: usize = 8_192;
/// How long a peer that flooded stays blocked.
pub(super) const FLOODER_BLOCKED_FOR: std::time::Duration = std::time::Duration::from_secs(600);
/// Peers with a budget at once (the one heard from longest ago makes room).
const INBOUND_PEERS_MAX: usize = 4_096;
/// Peers blocked at once: past this a flooder is only dropped, not blocked,
/// so fresh peer ids cannot grow the block list.
const BLOCKED_MAX: usize = 1_024;

pub(super) fn inbound_budgets() -> PeerBudgets<PeerId> {
    PeerBudgets::new(
        (INBOUND_BURST, INBOUND_PER_SEC),
        (INBOUND_DROPS_FORGIVEN, 1.0),
        INBOUND_PEERS_MAX,
    )
}

/// The budget of a stranger on probation (new to the node through a source
/// whose peers flooded, `net::quarantine`): a burst of 32 requests, then 8
/// a second, and 32 drops forgiven. Enough for a consumer's survey and its
/// first fetches; a flooder with a fresh peer id per connection is cut off
/// after a few dozen requests instead of some 1,500.
const PROBATION_BURST: u32 = 32;
const PROBATION_PER_SEC: f64 = 8.0;
const PROBATION_DROPS_FORGIVEN: u32 = 32;

pub(super) fn probation_budgets() -> PeerBudgets<PeerId> {
    PeerBudgets::new(
        (PROBATION_BURST, PROBATION_PER_SEC),
        (PROBATION_DROPS_FORGIVEN, 1.0),
        INBOUND_PEERS_MAX,
    )
}

impl EventLoop {
    /// Counts an inbound request against `peer`'s budget: `Some(channel)`
    /// to serve it; past the budget the channel is held for [`HELD_FOR`]
    /// (or dropped when too many are held). A peer that empties its budget
    /// and its tolerance is disconnected and blocked for
    /// [`FLOODER_BLOCKED_FOR`].
    pub(super) fn admit_inbound<T: Send + 'static>(
        &mut self,
        peer: PeerId,
        channel: T,
    ) -> Option<T> {
        let now_ms = self.budget_ms();
        let budgets = if self.quarantine.on_probation(&peer) {
            &mut self.probation
        } else {
            &mut self.inbound
        };
        // Within its budget of requests, then of CPU: what its requests
        // cost us so far, charged here per request and by the node per
        // answer (`net::cpu_ledger`).
        let (admitted, what) = match budgets.admit(&peer, now_ms) {
            Admit::Serve => (self.cpu.admit_charged(&peer, REQUEST_COST), Overrun::Cpu),
            past => (past, Overrun::Requests),
        };
        match admitted {
            Admit::Serve => Some(channel),
            Admit::Drop => {
                // Past its budget: a strike against its source (once per
                // peer), so that fresh peer ids that each take a burst and
                // leave make the source suspect (`net::quarantine`).
                self.quarantine.strike(&peer);
                let held = self.held.entry(peer).or_insert(0);
                if *held < HELD_PER_PEER && self.serving.len() < HELD_MAX {
                    *held += 1;
                    self.serving.push(
                        async move {
                            tokio::time::sleep(HELD_FOR).await;
                            drop(channel);
                            Served::Released(peer)
                        }
                        .boxed(),
                    );
                }
                None
            }
            Admit::CutOff => {
                self.cut_off(peer, what);
                None
            }
        }
    }

    /// The budgets' clock: milliseconds since the loop started.
    pub(super) fn budget_ms(&self) -> u64 {
        u64::try_from(self.inbound_origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// `peer` went past a budget: the node is told (its record counts a
    /// flood), and it is disconnected and blocked for
    /// [`FLOODER_BLOCKED_FOR`] (unless [`BLOCKED_MAX`] peers already are:
    /// then fresh peer ids cannot grow the list, and the budgets alone
    /// bound what it costs). Either way it is a strike against the source
    /// it came from (`net::quarantine`): a flooder with a fresh peer id per
    /// connection has its source's new connections rationed.
    pub(super) fn cut_off(&mut self, peer: PeerId, what: Overrun) {
        self.quarantine.strike(&peer);
        let blocked = self.swarm.behaviour().blocked.blocked_peers().len();
        if blocked < BLOCKED_MAX && self.swarm.behaviour_mut().blocked.block_peer(peer) {
            // Its redials are held before the block list refuses them
            // (`net::quarantine`): a refusal at once is redialed at once.
            self.quarantine.block(peer);
            tracing::warn!(%peer, what = what.label(), "a peer flooded us; blocked for {}s", FLOODER_BLOCKED_FOR.as_secs());
            self.start_timer(FLOODER_BLOCKED_FOR, Timer::Unblock(peer));
        }
        self.notify(NetEvent::Overrun { peer, what });
    }

    /// Lifts a flooder's block.
    pub(super) fn unblock(&mut self, peer: PeerId) {
        self.swarm.behaviour_mut().blocked.unblock_peer(peer);
        self.quarantine.unblock(&peer);
    }

    /// Hands an event to the node without waiting: a node that does not keep up loses
    /// requests (their peers see the stream close) instead of stalling the Swarm.
    pub(super) fn notify(&self, event: NetEvent) -> bool {
        match self.events.try_send(event) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("node is not reading network events: {e}");
                false
            }
        }
    }

    pub(super) fn on_reliability_event(
        &mut self,
        event: request_response::Event<crate::net::protocol::ReliabilityQuery, ReliabilityResponse>,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let Some(channel) = self.admit_inbound(peer, channel) else {
                        return;
                    };
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

    pub(super) fn on_job_event(&mut self, event: request_response::Event<JobRequest, JobResponse>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let Some(channel) = self.admit_inbound(peer, channel) else {
                        return;
                    };
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

    pub(super) fn on_served(&mut self, served: Served) {
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
            Served::Released(peer) => {
                if let Some(held) = self.held.get_mut(&peer) {
                    *held = held.saturating_sub(1);
                    if *held == 0 {
                        self.held.remove(&peer);
                    }
                }
            }
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
