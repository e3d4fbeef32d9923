//! The request protocols (reliability queries and job requests): an
//! inbound request from a peer outside the allowlist is refused here; the
//! rest are handed to the node without waiting (a full queue drops the
//! request) and answered when the node answers, or dropped after
//! `serve_timeout`; outbound answers and failures reach the caller that
//! asked.
//!
//! It must not know how reliability is computed or how jobs run.

use futures::FutureExt;
use libp2p::request_response::{self, OutboundFailure, ResponseChannel};
use libp2p::PeerId;
use tokio::sync::oneshot;

use super::EventLoop;
use crate::net::handle::{NetError, NetEvent, Responder};
use crate::net::protocol::{JobRequest, JobResponse, RejectReason, ReliabilityResponse};

/// An answer from the node to an inbound request, or its absence.
pub(super) enum Served {
    Reliability(
        ResponseChannel<ReliabilityResponse>,
        Option<ReliabilityResponse>,
    ),
    Job(ResponseChannel<JobResponse>, Option<JobResponse>),
}

pub(super) type ServingFuture = futures::future::BoxFuture<'static, Served>;

impl EventLoop {
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
