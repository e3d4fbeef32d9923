//! Issue 30, scope 3: what a flood costs a node, path by path. A real
//! `gleaner node` (with a history, so its reliability answers are real
//! forecasts) is flooded by rogue peers of their own (each a fresh swarm in
//! this test process, so that one cut off does not spoil the next) on every
//! path a peer reaches at its will: reliability queries, job queries, fetches
//! of a large output at offset 0 (each asks for the output's hash), data
//! streams, and summaries on the pool's gossipsub topic. The node's CPU
//! (utime + stime from /proc) over each flood is printed as a share of a core
//! and as a ratio to a quiet spell of the same length measured first, in the
//! same run: the machine is shared, so only the ratio means much.
//!
//! A measurement, not a test: `#[ignore]`d, minutes long. Run it with
//! `cargo test --test it rogue_pool::flood_cost -- --ignored --nocapture`
//! (`GLEANER_FLOOD_SECS` sets each spell's length, default 60).

use super::consumer::{
    ask_unoffered, flood_status, hostile_target, job, status_time, RogueConsumer,
};
use crate::node_support::{cpu_ticks, ticks_per_sec, NodeFixture};

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gleaner::net::protocol::{JobRequest, JobResponse, OutputName, ReliabilityQuery};
use gleaner::net::NetHandle;
use libp2p::PeerId;

/// Requests (or streams) a rogue keeps in flight.
const IN_FLIGHT: usize = 64;

/// Bytes of the output whose hash each fetch at offset 0 asks for.
const BIG_OUTPUT: u64 = 16_000_000;

/// What one flood did, and what the node spent meanwhile.
struct Spell {
    path: &'static str,
    sent: u64,
    answered: u64,
    ticks: u64,
    slowest_status: Duration,
}

/// Sends `one(i)` for `length`, [`IN_FLIGHT`] at a time; counts those sent
/// and those `one` says were answered. `status` is asked every 2 s
/// meanwhile; the slowest answer is returned with the counts.
async fn flood<F, Fut>(host: &NodeFixture, path: &'static str, length: Duration, one: F) -> Spell
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = bool>,
{
    let pid = host.pid();
    let sent = AtomicU64::new(0);
    let until = Instant::now() + length;
    let from = cpu_ticks(pid).unwrap();
    let requests = futures::stream::iter(0u64..)
        .take_while(|_| futures::future::ready(Instant::now() < until))
        .map(|i| {
            sent.fetch_add(1, Ordering::Relaxed);
            one(i)
        })
        .buffer_unordered(IN_FLIGHT)
        .filter(|ok| futures::future::ready(*ok))
        .count();
    tokio::pin!(requests);
    let mut slowest_status = Duration::ZERO;
    let mut probe = tokio::time::interval(Duration::from_secs(2));
    let answered = loop {
        tokio::select! {
            n = &mut requests => break n as u64,
            _ = probe.tick() => {
                let took = tokio::task::block_in_place(|| status_time(host));
                slowest_status = slowest_status.max(took);
            }
        }
    };
    // What was in flight at the end is part of the flood's cost.
    let ticks = cpu_ticks(pid).unwrap() - from;
    Spell {
        path,
        sent: sent.load(Ordering::Relaxed),
        answered,
        ticks,
        slowest_status,
    }
}

/// [`flood`] from `rogue` on its own connection: `one(net, target, i)`
/// sends the i-th request with the rogue's handle to the host. The rogue is
/// dropped after it (so one cut off does not spoil the next path), and the
/// host rests for `pause`.
async fn flood_from<F, Fut>(
    host: &NodeFixture,
    rogue: RogueConsumer,
    path: &'static str,
    length: Duration,
    pause: Duration,
    one: F,
) -> Spell
where
    F: Fn(NetHandle, PeerId, u64) -> Fut,
    Fut: Future<Output = bool>,
{
    let (net, target) = (rogue.handle.clone(), rogue.host);
    let spell = flood(host, path, length, |i| one(net.clone(), target, i)).await;
    drop(rogue);
    tokio::time::sleep(pause).await;
    spell
}

fn report(spells: &[Spell], quiet: u64, length: Duration) {
    let core = length.as_secs_f64() * ticks_per_sec() as f64;
    eprintln!(
        "quiet spell ({:.0} s, one rogue connected): node CPU {:.2} % of a core",
        length.as_secs_f64(),
        100.0 * quiet as f64 / core
    );
    eprintln!("path | sent | answered | node CPU % of a core | x quiet | slowest status");
    for s in spells {
        eprintln!(
            "{} | {} | {} | {:.2} | {:.1} | {:?}",
            s.path,
            s.sent,
            s.answered,
            100.0 * s.ticks as f64 / core,
            s.ticks as f64 / quiet.max(1) as f64,
            s.slowest_status,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of several minutes; prints figures for the note"]
async fn what_a_flood_costs_a_node_path_by_path() {
    let length = super::flood_length();
    let host = tokio::task::block_in_place(hostile_target);
    let pause = Duration::from_secs(5);
    let mut spells = Vec::new();

    // The quiet spell: one rogue connected, saying nothing.
    let idle = RogueConsumer::start(&host).await;
    tokio::time::sleep(pause).await;
    let pid = host.pid();
    let from = cpu_ticks(pid).unwrap();
    tokio::time::sleep(length).await;
    let quiet = cpu_ticks(pid).unwrap() - from;
    drop(idle);

    // Reliability queries: each a forecast from the host's history.
    let rogue = RogueConsumer::start(&host).await;
    let path = "reliability queries";
    let one = |net: NetHandle, target: PeerId, i: u64| async move {
        let query = ReliabilityQuery {
            window_start_unix: jiff::Timestamp::now().as_second() + (i % 600) as i64,
            length_secs: 3_600,
            memory_mib: 256,
        };
        net.query_reliability(target, query).await.is_ok()
    };
    spells.push(flood_from(&host, rogue, path, length, pause, one).await);

    // Job queries about a job it never submitted: the request path alone.
    let rogue = RogueConsumer::start(&host).await;
    let one = |net: NetHandle, target: PeerId, _: u64| async move {
        let query = JobRequest::Query {
            job_id: "never".into(),
        };
        net.job_request(target, query).await.is_ok()
    };
    spells.push(flood_from(&host, rogue, "job queries", length, pause, one).await);

    // Fetches at offset 0 of a large output of its own job: each asks for
    // the output's hash.
    let mut rogue = RogueConsumer::start(&host).await;
    rogue
        .submit_accepted(job("big", &format!("head -c {BIG_OUTPUT} /dev/zero")))
        .await;
    rogue.end_of("big").await;
    let path = "fetches at offset 0 (16 MB output)";
    let one = |net: NetHandle, target: PeerId, _: u64| async move {
        let fetch = JobRequest::Fetch {
            job_id: "big".into(),
            name: OutputName::Stdout,
            offset: 0,
            len: 1,
        };
        matches!(
            net.job_request(target, fetch).await,
            Ok(JobResponse::Chunk { .. })
        )
    };
    spells.push(flood_from(&host, rogue, path, length, pause, one).await);

    // Data streams asking for a file nobody offered.
    let rogue = RogueConsumer::start(&host).await;
    let one = |net: NetHandle, target: PeerId, i: u64| async move {
        ask_unoffered(&net, target, i, Duration::from_secs(10)).await
    };
    spells.push(flood_from(&host, rogue, "data streams", length, pause, one).await);

    // Summaries: the rogue publishes its own as fast as its swarm signs them.
    let rogue = RogueConsumer::start(&host).await;
    // Time for gossipsub to learn the host's subscription (a heartbeat).
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The last path: nothing to rest for after it.
    let rest = Duration::ZERO;
    let one = |net: NetHandle, _: PeerId, i: u64| async move {
        net.announce(flood_status(i)).await.is_ok()
    };
    spells.push(flood_from(&host, rogue, "summaries", length, rest, one).await);

    report(&spells, quiet, length);
    let took = tokio::task::block_in_place(|| status_time(&host));
    assert!(took < Duration::from_secs(5), "status took {took:?}");
}
