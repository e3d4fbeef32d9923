//! A large pool's leaf topics and digests with real swarms on 127.0.0.1 TCP,
//! in one process (issue 27: a consumer's cost per submission must not grow
//! with the pool). "Large" is 4 members heard here (64 in a real pool) and a
//! DHT key is full at 4 providers (16), so two dozen hosts spread over a
//! trie of several leaves. A consumer that went quiet (it heard the pool
//! large and nobody asked it about the pool) places a batch from the digests
//! of a sample of leaves: it never joins the pool-wide summary topic again,
//! and its sample names hosts that started after it went quiet, which it
//! never heard.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net_pool::{dialable_addr, wait_for};
use gleaner::consumer::survey::{survey, SurveyQuery};
use gleaner::model::ids::PoolName;
use gleaner::model::state::State;
use gleaner::net::protocol::*;
use gleaner::net::{start, LocalStatus, NetConfig, NetEvent, NetHandle};
use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use tokio_util::sync::CancellationToken;

/// A running node that answers every reliability query and accepts every
/// submission; cancels its loop when dropped.
struct Node {
    handle: NetHandle,
    addr: Multiaddr,
    submits: Arc<AtomicUsize>,
    cancel: CancellationToken,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn config() -> NetConfig {
    let mut cfg = NetConfig::loopback(&PoolName::new("leaf-pool").unwrap());
    cfg.announce_interval = Duration::from_millis(300);
    cfg.request_timeout = Duration::from_secs(5);
    cfg.large_pool = 4;
    cfg.shard_full = 4;
    cfg
}

fn answer() -> ReliabilityResponse {
    ReliabilityResponse::Answer(ReliabilityAnswer {
        tr: 0.9,
        failure: FailureByCause {
            s3: 0.1,
            s4: 0.0,
            s5: 0.0,
        },
        initial_state: WireState::S1,
        days_used: 3,
        method: "km".into(),
        relative_power_milli: 500,
        slot_free: true,
        curve: vec![(60, 0.99), (3600, 0.9)],
        availability_milli: Some(800),
        speed_milli: 900,
        spells: None,
        spell_lengths: None,
    })
}

async fn spawn_node(cfg: NetConfig) -> Node {
    let cancel = CancellationToken::new();
    let (handle, mut events, event_loop) =
        start(Keypair::generate_ed25519(), cfg, cancel.clone()).unwrap();
    tokio::spawn(event_loop.run());
    let submits = Arc::new(AtomicUsize::new(0));
    let s = submits.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                NetEvent::ReliabilityQuery { reply, .. } => {
                    let _ = reply.send(answer());
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
        submits,
        cancel,
    }
}

fn status() -> LocalStatus {
    LocalStatus {
        logical_cpus: 2,
        memory_mib: 2048,
        benchmark_score: 1000,
        relative_power_milli: 500,
        state: State::S1,
        slot_free: true,
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

/// Starts `n` hosts bootstrapping from `consumer`, each announcing.
async fn hosts(consumer: &Node, n: usize) -> Vec<Node> {
    let mut cfg = config();
    cfg.bootstrap = vec![consumer.addr.clone()];
    let mut out = Vec::new();
    for _ in 0..n {
        let h = spawn_node(cfg.clone()).await;
        h.handle.announce(status()).await.unwrap();
        out.push(h);
    }
    out
}

/// A consumer and `n` hosts bootstrapping from it, once the consumer has
/// seen the pool large and stopped listening.
async fn quiet_pool(n: usize) -> (Node, Vec<Node>) {
    let consumer = spawn_node(config()).await;
    let hosts = hosts(&consumer, n).await;
    let quiet = wait_for(Duration::from_secs(30), || {
        let s = consumer.handle.reachability().summaries;
        async move { (s.large_pool && !s.listening).then_some(()) }
    })
    .await;
    assert!(
        quiet.is_some(),
        "the consumer saw the pool large and stopped listening: {:?}",
        consumer.handle.reachability().summaries
    );
    (consumer, hosts)
}

/// Waits until every host is on a leaf topic, announcing again each second
/// meanwhile (a real host publishes on its heartbeat; these only when told,
/// and a member's summaries past 4 a second would be dropped as a flood).
async fn on_leaves(hosts: &[Node], limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if hosts
            .iter()
            .all(|h| h.handle.reachability().summaries.leaf_depth.is_some())
        {
            return true;
        }
        for h in hosts {
            let _ = h.handle.announce(status()).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_consumer_of_a_large_pool_places_a_batch_from_leaf_digests() {
    let (consumer, early) = quiet_pool(12).await;
    assert!(
        on_leaves(&early, Duration::from_secs(90)).await,
        "every early host joined its leaf's topic: {:?}",
        early
            .iter()
            .map(|h| h.handle.reachability().summaries.leaf_depth)
            .collect::<Vec<_>>()
    );
    // Hosts that start now publish while the consumer is off the summary
    // topic: it never hears them.
    let late = hosts(&consumer, 12).await;
    assert!(
        on_leaves(&late, Duration::from_secs(90)).await,
        "every late host joined its leaf's topic"
    );
    let all: Vec<&Node> = early.iter().chain(&late).collect();
    let depths: HashSet<u8> = all
        .iter()
        .filter_map(|h| h.handle.reachability().summaries.leaf_depth)
        .collect();
    eprintln!("leaf depths: {depths:?}");
    let known: HashSet<PeerId> = consumer
        .handle
        .known_members()
        .await
        .unwrap()
        .iter()
        .map(|m| m.peer)
        .collect();
    let unheard: HashSet<PeerId> = late
        .iter()
        .map(|h| h.handle.peer_id())
        .filter(|p| !known.contains(p))
        .collect();
    assert!(
        !unheard.is_empty(),
        "the quiet consumer heard every late host: the test shows nothing"
    );

    // A batch of 8 tasks wants a sample of twice as many hosts. First the
    // sample alone (no host asked), to see what it costs the consumer
    // beside its background over as long a window.
    let idle_from = (consumer.handle.traffic(), Instant::now());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = (consumer.handle.traffic(), idle_from.1.elapsed());
    let query = |asks: u32| SurveyQuery {
        window_start_unix: 1_700_000_000,
        window_secs: 3600,
        mem_mib: 256,
        rounds: 1,
        ask_at_most: Some(asks),
        images: vec![],
        sample_hosts: Some(16),
    };
    let ids: HashSet<PeerId> = all.iter().map(|h| h.handle.peer_id()).collect();
    let from = (consumer.handle.traffic(), Instant::now());
    let mut surveys = 0;
    let sampled = wait_for(Duration::from_secs(60), || {
        surveys += 1;
        let (net, query, ids, unheard) = (
            consumer.handle.clone(),
            query(0),
            ids.clone(),
            unheard.clone(),
        );
        async move {
            let hosts = survey(&net, query, &[]).await.ok()?;
            assert!(
                hosts.iter().all(|h| !h.answered),
                "a survey of 0 asks asks nobody"
            );
            let from_digests: Vec<_> = hosts
                .iter()
                .filter(|h| h.by_gossip && h.summarised && ids.contains(&h.peer))
                .collect();
            let named_unheard = from_digests.iter().any(|h| unheard.contains(&h.peer));
            (from_digests.len() >= 16 && named_unheard).then_some(from_digests.len())
        }
    })
    .await;
    let to = (consumer.handle.traffic(), from.1.elapsed());
    let summaries = consumer.handle.reachability().summaries;
    let named = sampled.unwrap_or_else(|| {
        panic!("the sample never named 16 hosts, a late one among them: {summaries:?}")
    });
    eprintln!(
        "sample: {named} hosts named by {} digests in {surveys} surveys, {:.1} s: consumer {} B in / {} B out (idle beside it: {} / {} B in {:.1} s)",
        summaries.digests,
        to.1.as_secs_f64(),
        to.0.bytes_in - from.0.bytes_in,
        to.0.bytes_out - from.0.bytes_out,
        idle.0.bytes_in - idle_from.0.bytes_in,
        idle.0.bytes_out - idle_from.0.bytes_out,
        idle.1.as_secs_f64(),
    );
    assert!(
        !summaries.listening,
        "sampling never joins the summary topic: {summaries:?}"
    );
    assert!(summaries.digests > 0 && summaries.sampled as usize >= 16);
    assert!(
        (summaries.sampled as usize) > summaries.digests as usize,
        "digests carried leaf mates' summaries, not only their answerers': {summaries:?}"
    );
    let leaf_heard: Vec<u32> = all
        .iter()
        .map(|h| h.handle.reachability().summaries.leaf_heard)
        .collect();
    eprintln!("leaf mates' summaries kept per host: {leaf_heard:?}");

    // Then the placing survey: 2 asks a task, from the sample.
    let hosts = survey(&consumer.handle, query(16), &[]).await.unwrap();
    // Place the batch on hosts that answered, one task each.
    let answered: Vec<PeerId> = hosts
        .iter()
        .filter(|h| h.answered && h.tr.is_some())
        .map(|h| h.peer)
        .take(8)
        .collect();
    assert!(answered.len() >= 4, "hosts asked answered: {answered:?}");
    for (i, peer) in answered.iter().enumerate() {
        let r = consumer
            .handle
            .job_request(*peer, submit(&format!("task-{i}")))
            .await;
        assert_eq!(r, Ok(JobResponse::Accepted), "task {i} on {peer}");
    }
    let placed: usize = all.iter().map(|h| h.submits.load(Ordering::SeqCst)).sum();
    assert_eq!(placed, answered.len(), "every task landed on its host");
    assert!(
        !consumer.handle.reachability().summaries.listening,
        "still off the summary topic after placing"
    );
}

/// Summaries heard on their leaves by `hosts`, in all.
fn heard_on_leaves(hosts: &[Node]) -> u64 {
    hosts
        .iter()
        .map(|h| h.handle.reachability().chatter.heard_leaf)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_starts_watching_a_large_pool_is_told_on_the_pool_topic_not_on_every_leaf()
{
    let (consumer, hosts) = quiet_pool(8).await;
    assert!(
        on_leaves(&hosts, Duration::from_secs(90)).await,
        "every host joined its leaf's topic"
    );
    // Nothing asked of the pool for a while: the leaves are still.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = heard_on_leaves(&hosts);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(heard_on_leaves(&hosts), before, "no heartbeat in this test");
    let heard_pool = consumer.handle.reachability().chatter.heard_pool;

    // The consumer asks for the pool's members: it joins the pool-wide
    // summary topic, and each host connected to it republishes there.
    consumer.handle.members().await.unwrap();
    let told = wait_for(Duration::from_secs(10), || {
        let c = consumer.handle.reachability().chatter;
        async move { (c.heard_pool >= heard_pool + 4).then_some(()) }
    })
    .await;
    let chatter: Vec<_> = hosts
        .iter()
        .map(|h| h.handle.reachability().chatter)
        .collect();
    assert!(
        told.is_some(),
        "the watching consumer heard the hosts again: {:?}, hosts {chatter:?}",
        consumer.handle.reachability().chatter
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leaves: u64 = heard_on_leaves(&hosts) - before;
    assert!(
        chatter.iter().any(|c| c.asked_pool_subscriber > 0),
        "a host was asked to republish for the consumer: {chatter:?}"
    );
    assert_eq!(
        leaves, 0,
        "the hosts' leaf mates heard nothing again for a consumer's watch: {chatter:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_stops_listening_the_moment_it_has_heard_the_pool_large() {
    let (consumer, hosts) = quiet_pool(12).await;
    // The newcomer's own tick comes every 10 s (a real node's): only
    // hearing the pool large can stop it sooner.
    let mut cfg = config();
    cfg.bootstrap = vec![consumer.addr.clone()];
    cfg.announce_interval = Duration::from_secs(60);
    let newcomer = spawn_node(cfg).await;
    let consumer_id = consumer.handle.peer_id();
    let linked = wait_for(Duration::from_secs(10), || {
        let h = newcomer.handle.clone();
        async move {
            h.connected_peers()
                .await
                .ok()?
                .contains(&consumer_id)
                .then_some(())
        }
    })
    .await;
    assert!(linked.is_some(), "the newcomer reached its bootstrap peer");
    // The consumer watches: every host republishes for it, and it passes
    // them on to the newcomer, which listens.
    consumer.handle.members().await.unwrap();
    let large = wait_for(Duration::from_secs(15), || {
        let s = newcomer.handle.reachability().summaries;
        async move { s.large_pool.then_some(()) }
    })
    .await;
    assert!(large.is_some(), "the newcomer heard the pool large");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = newcomer.handle.known_members().await.unwrap().len();
    let told = consumer.handle.known_members().await.unwrap().len();
    eprintln!("the newcomer holds {held} members; the consumer heard {told}");
    assert!(
        told >= 10,
        "the hosts republished for the watching consumer: {told} heard"
    );
    assert!(
        held <= 8,
        "the newcomer left the pool's topic at its 4th member, not at its next tick: it holds {held} of {}",
        hosts.len()
    );
}
