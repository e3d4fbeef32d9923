//! A hostile libp2p client for tests: sends arbitrary bytes on the
//! reliability protocol to a node (in-process or a real `gleaner node`).

use std::time::Duration;

use futures::prelude::*;
use gleaner::net::protocol::RELIABILITY_PROTOCOL;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::{noise, tcp, yamux, Multiaddr, PeerId, StreamProtocol};

/// A codec that writes whatever bytes it is given: the hostile client.
#[derive(Clone, Default)]
struct RawCodec;

/// The whole stream, at most 1 MiB.
async fn read_all<T: AsyncRead + Unpin + Send>(io: &mut T) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    io.take(1 << 20).read_to_end(&mut v).await?;
    Ok(v)
}

impl request_response::Codec for RawCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> std::io::Result<Vec<u8>> {
        read_all(io).await
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> std::io::Result<Vec<u8>> {
        let v = read_all(io).await?;
        if v.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(v)
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> std::io::Result<()> {
        io.write_all(&req).await?;
        io.close().await
    }

    async fn write_response<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> std::io::Result<()> {
        io.write_all(&res).await
    }
}

/// How a raw exchange ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RawOutcome {
    /// The peer answered (with anything).
    Answered,
    /// The peer does not speak the protocol (negotiation failed).
    Unsupported,
    /// The request failed otherwise (stream reset, timeout, ...).
    Failed,
}

/// Sends `bytes` on the reliability protocol to `target` and returns whether a response came.
pub async fn send_raw(target: &Multiaddr, peer: PeerId, bytes: Vec<u8>) -> bool {
    send_raw_on(RELIABILITY_PROTOCOL, target, peer, bytes).await == RawOutcome::Answered
}

/// Sends `bytes` as one request on `protocol` to `target`.
pub async fn send_raw_on(
    protocol: &'static str,
    target: &Multiaddr,
    peer: PeerId,
    bytes: Vec<u8>,
) -> RawOutcome {
    let mut swarm = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .unwrap()
        .with_behaviour(|_| {
            request_response::Behaviour::with_codec(
                RawCodec,
                [(StreamProtocol::new(protocol), ProtocolSupport::Outbound)],
                request_response::Config::default().with_request_timeout(Duration::from_secs(5)),
            )
        })
        .unwrap()
        .build();
    swarm.dial(target.clone()).unwrap();
    let deadline = tokio::time::sleep(Duration::from_secs(10));
    tokio::pin!(deadline);
    let mut sent = false;
    loop {
        tokio::select! {
            _ = &mut deadline => panic!("the hostile exchange neither failed nor finished"),
            event = swarm.select_next_some() => match event {
                SwarmEvent::ConnectionEstablished { .. } if !sent => {
                    swarm.behaviour_mut().send_request(&peer, bytes.clone());
                    sent = true;
                }
                SwarmEvent::Behaviour(request_response::Event::Message { .. }) => {
                    return RawOutcome::Answered
                }
                SwarmEvent::Behaviour(request_response::Event::OutboundFailure { error, .. }) => {
                    return match error {
                        request_response::OutboundFailure::UnsupportedProtocols => {
                            RawOutcome::Unsupported
                        }
                        _ => RawOutcome::Failed,
                    }
                }
                _ => {}
            }
        }
    }
}
