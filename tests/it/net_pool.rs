//! Pool networking with real swarms on 127.0.0.1 TCP, in one process: discovery by the
//! DHT and by gossip, reliability queries, hostile frames, timeouts, private pools and
//! the consumer allowlist. mDNS is off; nodes bootstrap from each other's listen addresses.

use gleaner::model::ids::PoolName;
use std::collections::HashSet;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::prelude::*;
use gleaner::model::state::State;
use gleaner::net::protocol::*;
use gleaner::net::{start, LocalStatus, NetConfig, NetError, NetEvent, NetHandle, Responder};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId};
use tokio_util::sync::CancellationToken;

use crate::net_support;
use net_support::send_raw;

/// What the test responder does with requests.
#[derive(Clone, Copy, PartialEq)]
enum Serve {
    /// Answer from the query, so the answer depends on what was asked.
    Answer,
    /// Keep the responders and never answer.
    Never,
}

/// A running node; cancels its loop when dropped.
struct Node {
    handle: NetHandle,
    addr: Multiaddr,
    served_queries: Arc<AtomicUsize>,
    served_submits: Arc<AtomicUsize>,
    cancel: CancellationToken,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn config(pool: &str) -> NetConfig {
    let mut cfg = NetConfig::loopback(&PoolName::new(pool).unwrap());
    cfg.announce_interval = Duration::from_millis(300);
    cfg.request_timeout = Duration::from_secs(5);
    cfg
}

fn answer_for(q: &ReliabilityQuery) -> ReliabilityResponse {
    let tr = 1.0 / (1.0 + q.length_secs as f64 / 3600.0);
    ReliabilityResponse::Answer(ReliabilityAnswer {
        tr,
        failure: FailureByCause {
            s3: 1.0 - tr,
            s4: 0.0,
            s5: 0.0,
        },
        initial_state: WireState::S1,
        days_used: (q.memory_mib % 30) as u32,
        method: "km".into(),
        relative_power_milli: 500,
        slot_free: true,
        curve: vec![(60, 0.99), (3600, 0.9)],
        availability_milli: Some(800),
        speed_milli: 900,
        spells: Some(WireSpells {
            usable_secs: 500_000,
            failing_secs: 100_000,
            episodes: 12,
        }),
        spell_lengths: Some(WireSpellLengths {
            up_secs: vec![600, 40_000],
            up_seen: 11,
            up_cut_secs: vec![9_000],
            outage_secs: vec![60, 120, 3_600],
            outages_seen: 12,
        }),
    })
}

async fn spawn_node(cfg: NetConfig, serve: Serve) -> Node {
    let cancel = CancellationToken::new();
    let (handle, mut events, event_loop) =
        start(Keypair::generate_ed25519(), cfg, cancel.clone()).unwrap();
    tokio::spawn(event_loop.run());
    let served_queries = Arc::new(AtomicUsize::new(0));
    let served_submits = Arc::new(AtomicUsize::new(0));
    let (q, s) = (served_queries.clone(), served_submits.clone());
    tokio::spawn(async move {
        let mut held: Vec<Responder<ReliabilityResponse>> = Vec::new();
        while let Some(event) = events.recv().await {
            match event {
                NetEvent::ReliabilityQuery { query, reply, .. } => {
                    q.fetch_add(1, Ordering::SeqCst);
                    match serve {
                        Serve::Answer => {
                            let _ = reply.send(answer_for(&query));
                        }
                        Serve::Never => held.push(reply),
                    }
                }
                NetEvent::JobRequest { request, reply, .. } => {
                    if matches!(request, JobRequest::Submit(_)) {
                        s.fetch_add(1, Ordering::SeqCst);
                    }
                    let _ = reply.send(JobResponse::Accepted);
                }
                _ => {}
            }
        }
    });
    let addr = dialable_addr(&handle).await;
    Node {
        handle,
        addr,
        served_queries,
        served_submits,
        cancel,
    }
}

/// The node's first listen address with its peer id, once it listens
/// (within 5 s): what another node dials.
pub(crate) async fn dialable_addr(handle: &NetHandle) -> Multiaddr {
    let addr = wait_for(Duration::from_secs(5), || {
        let h = handle.clone();
        async move { h.listen_addrs().await.ok()?.into_iter().next() }
    })
    .await
    .expect("node listens");
    addr.with(Protocol::P2p(handle.peer_id()))
}

/// Polls `probe` every 100 ms until it yields a value or `limit` passes.
pub(crate) async fn wait_for<T, F, Fut>(limit: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(v) = probe().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn status(cpus: u32) -> LocalStatus {
    LocalStatus {
        logical_cpus: cpus,
        memory_mib: 1024 * u64::from(cpus),
        benchmark_score: 1000 * u64::from(cpus),
        relative_power_milli: 250 * cpus,
        state: State::S1,
        slot_free: true,
    }
}

fn query(length_secs: u64) -> ReliabilityQuery {
    ReliabilityQuery {
        window_start_unix: 1_700_000_000,
        length_secs,
        memory_mib: 256,
    }
}

fn submit(job_id: &str) -> JobRequest {
    JobRequest::Submit(JobSubmit {
        job_id: job_id.into(),
        argv: vec!["/bin/true".into()],
        env: vec![],
        inputs: vec![],
        outputs: vec![],
        memory_mib: 64,
        expected_runtime_secs: 10,
        wall_time_limit_secs: 60,
        checkpoint: None,
    })
}

async fn three_nodes(pool: &str) -> (Node, Node, Node) {
    let a = spawn_node(config(pool), Serve::Answer).await;
    let mut cfg = config(pool);
    cfg.bootstrap = vec![a.addr.clone()];
    let b = spawn_node(cfg.clone(), Serve::Answer).await;
    let c = spawn_node(cfg, Serve::Answer).await;
    (a, b, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_find_each_other_through_the_dht() {
    let (a, b, c) = three_nodes("dht-pool").await;
    // No announcements: only the DHT can tell B about C, which B never dialled.
    let found = wait_for(Duration::from_secs(20), || {
        let h = b.handle.clone();
        let want: HashSet<PeerId> = [a.handle.peer_id(), c.handle.peer_id()].into();
        async move {
            let hosts: HashSet<PeerId> = h.find_hosts().await.ok()?.into_iter().collect();
            want.is_subset(&hosts).then_some(hosts)
        }
    })
    .await;
    assert!(found.is_some(), "B never found A and C as providers");
    assert!(!found.unwrap().contains(&b.handle.peer_id()));
}

/// A pool larger than one DHT key holds is listed whole: members past a
/// full key provide a shard of the pool's key, and a listing walks down the
/// shards. A key is "full" here at 2 providers (16 in a real pool, where a
/// node keeps 20 per key), so twelve members spread over several levels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_larger_than_a_dht_key_is_listed_whole_through_its_shards() {
    let mut cfg = config("shard-pool");
    cfg.shard_full = 2;
    let first = spawn_node(cfg.clone(), Serve::Answer).await;
    cfg.bootstrap = vec![first.addr.clone()];
    let mut members = vec![first];
    for _ in 0..11 {
        members.push(spawn_node(cfg.clone(), Serve::Answer).await);
    }
    let lister = spawn_node(cfg, Serve::Answer).await;
    let want: HashSet<PeerId> = members.iter().map(|m| m.handle.peer_id()).collect();
    let found = wait_for(Duration::from_secs(90), || {
        let h = lister.handle.clone();
        let want = want.clone();
        async move {
            let hosts: HashSet<PeerId> = h.find_hosts().await.ok()?.into_iter().collect();
            (hosts == want).then_some(hosts)
        }
    })
    .await;
    if found.is_none() {
        let last: HashSet<PeerId> = lister
            .handle
            .find_hosts()
            .await
            .unwrap()
            .into_iter()
            .collect();
        panic!(
            "the lister found {} of the 12 members",
            last.intersection(&want).count()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_find_each_other_through_gossip() {
    let (a, b, c) = three_nodes("gossip-pool").await;
    for (i, n) in [&a, &b, &c].into_iter().enumerate() {
        n.handle.announce(status(i as u32 + 1)).await.unwrap();
    }
    for n in [&a, &b, &c] {
        let others: HashSet<PeerId> = [&a, &b, &c]
            .into_iter()
            .map(|m| m.handle.peer_id())
            .filter(|p| *p != n.handle.peer_id())
            .collect();
        let members = wait_for(Duration::from_secs(20), || {
            let h = n.handle.clone();
            let others = others.clone();
            async move {
                let members = h.members().await.ok()?;
                let seen: HashSet<PeerId> = members.iter().map(|m| m.peer).collect();
                (seen == others).then_some(members)
            }
        })
        .await
        .expect("every node hears the two others");
        for m in members {
            // The announcement carries what the sender said about itself.
            assert_eq!(m.status.memory_mib, 1024 * u64::from(m.status.logical_cpus));
            assert!(m
                .addresses
                .iter()
                .all(|a| a.to_string().starts_with("/ip4/127.")));
        }
    }
}

/// A host of a large pool that nobody asks about stops hearing the pool's
/// summaries (issue 27: its idle cost must not grow with the pool), yet
/// still publishes its own: a consumer that asks for the members hears
/// every host, one that joined late and a quiet host's change of status.
/// Asking a quiet host for its members makes it listen again. "Large" is 3
/// members heard here (64 in a real pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_of_a_large_pool_stop_listening_and_a_consumer_that_asks_still_hears_them() {
    let mut cfg = config("quiet-pool");
    cfg.large_pool = 3;
    let consumer = spawn_node(cfg.clone(), Serve::Answer).await;
    cfg.bootstrap = vec![consumer.addr.clone()];
    let mut hosts = Vec::new();
    for _ in 0..4 {
        let h = spawn_node(cfg.clone(), Serve::Answer).await;
        h.handle.announce(status(1)).await.unwrap();
        hosts.push(h);
    }
    let lists = |want: Vec<PeerId>, cpus: Option<(PeerId, u32)>| {
        let h = consumer.handle.clone();
        async move {
            let members = h.members().await.ok()?;
            let seen: HashSet<PeerId> = members.iter().map(|m| m.peer).collect();
            let status_ok = cpus.is_none_or(|(peer, n)| {
                members
                    .iter()
                    .any(|m| m.peer == peer && m.status.logical_cpus == n)
            });
            (want.iter().all(|p| seen.contains(p)) && status_ok).then_some(())
        }
    };
    let ids: Vec<PeerId> = hosts.iter().map(|h| h.handle.peer_id()).collect();
    wait_for(Duration::from_secs(20), || lists(ids.clone(), None))
        .await
        .expect("the consumer lists the four hosts");
    let quiet = |n: &Node| {
        let s = n.handle.reachability().summaries;
        s.large_pool && !s.listening
    };
    let all_quiet = wait_for(Duration::from_secs(20), || {
        let q = hosts.iter().all(quiet);
        async move { q.then_some(()) }
    })
    .await;
    assert!(
        all_quiet.is_some(),
        "every host saw the pool large and stopped listening: {:?}",
        hosts
            .iter()
            .map(|h| h.handle.reachability().summaries)
            .collect::<Vec<_>>()
    );
    assert!(
        consumer.handle.reachability().summaries.listening,
        "the consumer asked for the members: it listens"
    );

    // A host that joins now is heard by the consumer, even when it saw the
    // pool large (and went quiet) before it first had something to say.
    let late = spawn_node(cfg, Serve::Answer).await;
    for h in &hosts {
        h.handle.dial(late.addr.clone()).await.unwrap();
    }
    let late_quiet = wait_for(Duration::from_secs(20), || {
        let q = quiet(&late);
        async move { q.then_some(()) }
    })
    .await;
    eprintln!(
        "the late host went quiet before announcing: {}",
        late_quiet.is_some()
    );
    late.handle.announce(status(2)).await.unwrap();
    wait_for(Duration::from_secs(20), || {
        lists(vec![late.handle.peer_id()], None)
    })
    .await
    .expect("the consumer lists the host that joined late");

    // A quiet host's news still goes out, to the peers on the topic.
    hosts[0].handle.announce(status(3)).await.unwrap();
    assert!(quiet(&hosts[0]), "announcing does not make a host listen");
    wait_for(Duration::from_secs(20), || {
        lists(vec![ids[0]], Some((ids[0], 3)))
    })
    .await
    .expect("the consumer hears a quiet host's new status");

    // Asking a quiet host about the pool makes it listen.
    hosts[1].handle.members().await.unwrap();
    let listens = wait_for(Duration::from_secs(5), || {
        let s = hosts[1].handle.reachability().summaries;
        async move { s.listening.then_some(()) }
    })
    .await;
    assert!(
        listens.is_some(),
        "a host asked for its members listens again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reliability_query_round_trips() {
    let a = spawn_node(config("rq"), Serve::Answer).await;
    let b = spawn_node(config("rq"), Serve::Answer).await;
    b.handle.dial(a.addr.clone()).await.unwrap();
    for len in [600, 3600, 7200] {
        let got = b
            .handle
            .query_reliability(a.handle.peer_id(), query(len))
            .await
            .unwrap();
        assert_eq!(got, answer_for(&query(len)));
    }
    assert_eq!(a.served_queries.load(Ordering::SeqCst), 3);
}

/// libp2p's bandwidth metrics count what the requests and answers carry:
/// the asker sends at least the queries' bytes and receives at least the
/// answers', and the host the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_counts_the_bytes_of_queries_and_answers() {
    let a = spawn_node(config("traffic"), Serve::Answer).await;
    let b = spawn_node(config("traffic"), Serve::Answer).await;
    b.handle.dial(a.addr.clone()).await.unwrap();
    let (a0, b0) = (a.handle.traffic(), b.handle.traffic());
    let (mut asked, mut answered) = (0u64, 0u64);
    for len in [600, 3600, 7200, 86_400] {
        let got = b
            .handle
            .query_reliability(a.handle.peer_id(), query(len))
            .await
            .unwrap();
        asked += gleaner::net::codec::encode_body(&query(len)).unwrap().len() as u64;
        answered += gleaner::net::codec::encode_body(&got).unwrap().len() as u64;
    }
    let (a1, b1) = (a.handle.traffic(), b.handle.traffic());
    assert!(
        b1.bytes_out - b0.bytes_out >= asked,
        "{b0:?} -> {b1:?}, asked {asked}"
    );
    assert!(
        a1.bytes_in - a0.bytes_in >= asked,
        "{a0:?} -> {a1:?}, asked {asked}"
    );
    assert!(
        a1.bytes_out - a0.bytes_out >= answered,
        "{a0:?} -> {a1:?}, answered {answered}"
    );
    assert!(
        b1.bytes_in - b0.bytes_in >= answered,
        "{b0:?} -> {b1:?}, answered {answered}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_times_out() {
    let a = spawn_node(config("slow"), Serve::Never).await;
    let mut cfg = config("slow");
    cfg.request_timeout = Duration::from_secs(1);
    let b = spawn_node(cfg, Serve::Answer).await;
    b.handle.dial(a.addr.clone()).await.unwrap();
    let started = Instant::now();
    let got = b
        .handle
        .query_reliability(a.handle.peer_id(), query(60))
        .await;
    assert_eq!(got, Err(NetError::Timeout));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // The silent node still works for others.
    assert!(a.handle.members().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_garbage_frames_are_refused_and_the_node_keeps_serving() {
    let a = spawn_node(config("hostile"), Serve::Answer).await;
    let peer = a.handle.peer_id();

    // A length prefix of 4 GiB, then a few bytes.
    assert!(!send_raw(&a.addr, peer, vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await);
    // A plausible length and garbage inside.
    let mut garbage = 20u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0xfd; 20]);
    assert!(!send_raw(&a.addr, peer, garbage).await);
    // A well-formed frame through the same raw client is answered: the refusals above
    // were about the frames, not the client.
    let good = gleaner::net::codec::encode_frame(&query(3600), RELIABILITY_REQUEST_CAP).unwrap();
    assert!(send_raw(&a.addr, peer, good).await);

    // Garbage below libp2p: raw bytes on the TCP port.
    let port = a
        .addr
        .iter()
        .find_map(|p| match p {
            Protocol::Tcp(port) => Some(port),
            _ => None,
        })
        .unwrap();
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = tcp.write_all(&[0xAB; 64 * 1024]);
    drop(tcp);

    // The node still serves a normal client, and the node saw only the good query.
    let b = spawn_node(config("hostile"), Serve::Answer).await;
    b.handle.dial(a.addr.clone()).await.unwrap();
    let got = b.handle.query_reliability(peer, query(600)).await.unwrap();
    assert_eq!(got, answer_for(&query(600)));
    assert_eq!(a.served_queries.load(Ordering::SeqCst), 2);
}

fn psk(byte: u8) -> PreSharedKey {
    PreSharedKey::new([byte; 32])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_pool_refuses_peers_with_another_key() {
    let mut cfg = config("private");
    cfg.swarm_key = Some(psk(1));
    let a = spawn_node(cfg.clone(), Serve::Answer).await;
    let member = spawn_node(cfg, Serve::Answer).await;
    let mut other = config("private");
    other.swarm_key = Some(psk(2));
    let stranger = spawn_node(other, Serve::Answer).await;
    let outsider = spawn_node(config("private"), Serve::Answer).await;

    assert!(stranger.handle.dial(a.addr.clone()).await.is_err());
    assert!(outsider.handle.dial(a.addr.clone()).await.is_err());
    assert_eq!(
        member.handle.dial(a.addr.clone()).await,
        Ok(a.handle.peer_id())
    );
    let got = member
        .handle
        .query_reliability(a.handle.peer_id(), query(900))
        .await
        .unwrap();
    assert_eq!(got, answer_for(&query(900)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowlisted_consumers_may_submit_jobs() {
    let allowed = spawn_node(config("allow"), Serve::Answer).await;
    let stranger = spawn_node(config("allow"), Serve::Answer).await;
    let mut cfg = config("allow");
    cfg.allowlist = Some([allowed.handle.peer_id()].into());
    let host = spawn_node(cfg, Serve::Answer).await;
    let host_id = host.handle.peer_id();
    allowed.handle.dial(host.addr.clone()).await.unwrap();
    stranger.handle.dial(host.addr.clone()).await.unwrap();

    assert_eq!(
        allowed.handle.job_request(host_id, submit("j1")).await,
        Ok(JobResponse::Accepted)
    );
    assert_eq!(
        stranger.handle.job_request(host_id, submit("j2")).await,
        Ok(JobResponse::Rejected(RejectReason::NotAllowed))
    );
    assert_eq!(host.served_submits.load(Ordering::SeqCst), 1);
}

/// Round-trip latency of the reliability query on 127.0.0.1 over TCP.
/// Run: `cargo test --release --test it net_pool::reliability_query_latency -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn reliability_query_latency() {
    let a = spawn_node(config("bench"), Serve::Answer).await;
    let b = spawn_node(config("bench"), Serve::Answer).await;
    b.handle.dial(a.addr.clone()).await.unwrap();
    let peer = a.handle.peer_id();
    for _ in 0..50 {
        b.handle.query_reliability(peer, query(60)).await.unwrap();
    }
    let mut micros = Vec::with_capacity(1000);
    for i in 0..1000 {
        let t = Instant::now();
        b.handle.query_reliability(peer, query(i)).await.unwrap();
        micros.push(t.elapsed().as_micros());
    }
    micros.sort_unstable();
    println!(
        "reliability query round trip over 1000 queries: p50 {} µs, p99 {} µs, max {} µs",
        micros[499], micros[989], micros[999]
    );
}

/// The relay preset (relay server, AutoNAT server) and the public preset (AutoNAT
/// client, Kademlia client mode) build, connect and serve queries, here on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_and_public_presets_run_and_serve() {
    let mut relay_cfg = NetConfig::relay(&public_pool(), 0);
    relay_cfg.listen = NetConfig::loopback(&public_pool()).listen;
    let relay = spawn_node(relay_cfg, Serve::Answer).await;
    let mut public_cfg = NetConfig::public(&public_pool(), vec![relay.addr.clone()]);
    public_cfg.listen = NetConfig::loopback(&public_pool()).listen;
    let member = spawn_node(public_cfg, Serve::Answer).await;
    // Wait until both sides have the connection: the listener finishes its upgrade a
    // moment after the dialer, and the relay has no address of the member otherwise.
    let connected = wait_for(Duration::from_secs(5), || {
        let (m, r) = (member.handle.clone(), relay.handle.clone());
        async move {
            let m_sees = m.connected_peers().await.ok()?.contains(&r.peer_id());
            let r_sees = r.connected_peers().await.ok()?.contains(&m.peer_id());
            (m_sees && r_sees).then_some(())
        }
    })
    .await;
    assert!(connected.is_some(), "the member bootstraps from the relay");
    for (from, to) in [(&member, &relay), (&relay, &member)] {
        let got = from
            .handle
            .query_reliability(to.handle.peer_id(), query(120))
            .await
            .unwrap();
        assert_eq!(got, answer_for(&query(120)));
    }

    // The member listens through the relay: a third peer reaches it over a circuit
    // (on loopback it could dial directly; the circuit address forces the relay path).
    let mut other_cfg = NetConfig::public(&public_pool(), vec![relay.addr.clone()]);
    other_cfg.listen = NetConfig::loopback(&public_pool()).listen;
    other_cfg.autonat = false;
    let other = spawn_node(other_cfg, Serve::Answer).await;
    let circuit = relay
        .addr
        .clone()
        .with(Protocol::P2pCircuit)
        .with(Protocol::P2p(member.handle.peer_id()));
    let reached = wait_for(Duration::from_secs(10), || {
        let (h, addr) = (other.handle.clone(), circuit.clone());
        async move { h.dial(addr).await.ok() }
    })
    .await;
    assert_eq!(
        reached,
        Some(member.handle.peer_id()),
        "dial over {circuit}"
    );
    let got = other
        .handle
        .query_reliability(member.handle.peer_id(), query(60))
        .await
        .unwrap();
    assert_eq!(got, answer_for(&query(60)));
}

fn public_pool() -> PoolName {
    PoolName::new("public-pool").unwrap()
}
