//! Tests of `net::quarantine`: who is held, which sources are suspect,
//! and what their newcomers cost.

use super::*;

#[test]
fn only_a_blocked_peer_is_held_and_only_while_blocked() {
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
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
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
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
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
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
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
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

/// Whether the source of `remote` is suspect now (its new connections
/// rationed).
fn suspect(q: &Quarantine, remote: &str) -> bool {
    let source = source_of(&remote.parse().unwrap()).unwrap();
    let now_ms = q.now_ms();
    q.lock().sources.is_suspect(&source, now_ms)
}

#[tokio::test(start_paused = true)]
async fn an_honest_pool_on_one_address_is_never_rationed() {
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
    let local = "/ip4/127.0.0.1/tcp/4001";
    // 300 nodes on 127.0.0.1 that meet this node within six minutes
    // (examples/many-nodes.sh), then come back again and again (each
    // reconnection of a peer id met before costs nothing).
    let pool: Vec<PeerId> = (0..300).map(|_| PeerId::random()).collect();
    for peer in &pool {
        tokio::time::advance(Duration::from_millis(1_200)).await;
        assert!(matches!(
            q.admit_socket(&local.parse().unwrap()),
            SocketGate::Pass
        ));
        assert!(connects(&q, peer, local).is_none());
        assert!(!q.on_probation(peer));
    }
    for round in 0..40 {
        tokio::time::advance(Duration::from_secs(60)).await;
        for peer in &pool {
            assert!(!suspect(&q, local), "round {round}");
            assert!(matches!(
                q.admit_socket(&local.parse().unwrap()),
                SocketGate::Pass
            ));
            assert!(connects(&q, peer, local).is_none());
            assert!(!q.on_probation(peer));
        }
    }
    // And all 300 at once, on a node that met none of them.
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
    for _ in 0..300 {
        let peer = PeerId::random();
        assert!(connects(&q, &peer, local).is_none());
        assert!(!q.on_probation(&peer));
    }
    assert!(!suspect(&q, local));
}

#[tokio::test(start_paused = true)]
async fn a_source_bringing_fresh_peer_ids_is_suspect_after_517_and_rationed_before_the_handshake() {
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
    let known = PeerId::random();
    assert!(connects(&q, &known, FLOODER).is_none());
    // Fresh ids within every budget, none ever struck by the event loop:
    // 512 newcomers, then four strikes forgiven; a peer met before comes
    // back as often as it likes meanwhile.
    for k in 1..SOURCE_NEW_PEERS + 4 {
        assert!(connects(&q, &PeerId::random(), FLOODER).is_none());
        assert!(connects(&q, &known, FLOODER).is_none());
        assert!(!suspect(&q, FLOODER), "{k}");
    }
    // Our own dials of fresh ids there do not count.
    for _ in 0..1_000 {
        assert!(q
            .connected(&PeerId::random(), &FLOODER.parse().unwrap(), false, true)
            .is_none());
    }
    let addr: Multiaddr = FLOODER.parse().unwrap();
    assert!(matches!(q.admit_socket(&addr), SocketGate::Pass));
    // The 517th newcomer: the source is suspect, it is on probation, and
    // the source's next sockets get the ration of 8 (one taken above).
    let last = PeerId::random();
    assert!(connects(&q, &last, FLOODER).is_none());
    assert!(q.on_probation(&last));
    let passed = (0..100)
        .filter(|_| matches!(q.admit_socket(&addr), SocketGate::Pass))
        .count();
    assert_eq!(passed, 8, "the ration, before the handshake");
    // The peer met before is no stranger; another source is untouched.
    assert!(connects(&q, &known, FLOODER).is_none());
    assert!(!q.on_probation(&known));
    let elsewhere = "/ip4/198.51.100.1/tcp/1";
    assert!(!suspect(&q, elsewhere));
    // Newcomers past the allowance (which refills one a second) keep it
    // suspect: 400 five minutes on, and it is suspect ten minutes after
    // those, not after the first strikes.
    tokio::time::advance(Duration::from_secs(300)).await;
    for _ in 0..400 {
        let _ = connects(&q, &PeerId::random(), FLOODER);
    }
    tokio::time::advance(Duration::from_secs(500)).await;
    assert!(suspect(&q, FLOODER));
}

#[test]
fn without_an_allowance_of_newcomers_or_the_ration_fresh_peer_ids_are_not_counted() {
    for q in [
        Quarantine::new(true, 0),
        Quarantine::new(false, SOURCE_NEW_PEERS),
    ] {
        for _ in 0..10_000 {
            let peer = PeerId::random();
            assert!(connects(&q, &peer, FLOODER).is_none());
            assert!(!q.on_probation(&peer));
        }
        assert!(!suspect(&q, FLOODER));
    }
}

#[test]
fn with_the_ration_off_no_source_is_ever_suspect_and_a_blocked_peer_is_still_held() {
    let q = Quarantine::new(false, SOURCE_NEW_PEERS);
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
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
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
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
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
    let q = Quarantine::new(true, SOURCE_NEW_PEERS);
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

/// Issue 30: a stranger that comes through a relay, a fresh peer id each
/// time. Its connections name no address of its own (a relayed dialer is
/// `/p2p/<id>`), so they were never counted: no newcomer, no strike, no
/// probation, no ration. Now each counts against the relay's address block
/// (our listening address on the relay names it): past the newcomers'
/// allowance and the tolerance the block is suspect, the next stranger
/// through it is on probation, and past the ration its connections are to
/// be closed; a peer through another relay is untouched.
#[test]
fn fresh_peer_ids_through_a_relay_count_against_the_relays_block() {
    let q = Quarantine::new(true, 4);
    let relay = "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit";
    let relay: Multiaddr = relay.parse().unwrap();
    let known = PeerId::random();
    assert!(q.relayed(&known, &relay));
    // Four newcomers allowed, then four strikes forgiven.
    for k in 1..4 + 4 {
        assert!(q.relayed(&PeerId::random(), &relay), "{k}");
        assert!(!suspect(&q, FLOODER), "{k}");
    }
    let last = PeerId::random();
    assert!(q.relayed(&last, &relay), "within the ration");
    assert!(suspect(&q, FLOODER), "the relay's block is suspect");
    assert!(q.on_probation(&last));
    // The ration: 8 at once (one taken), then closed.
    let let_in = (0..100)
        .filter(|_| q.relayed(&PeerId::random(), &relay))
        .count();
    assert_eq!(let_in, 7);
    // A peer met before is let in; another relay's block is untouched.
    assert!(q.relayed(&known, &relay));
    assert!(!q.on_probation(&known));
    let other: Multiaddr = "/ip4/198.51.100.1/tcp/4001/p2p-circuit".parse().unwrap();
    assert!(q.relayed(&PeerId::random(), &other));
    assert!(!suspect(&q, "/ip4/198.51.100.1/tcp/1"));
}
