//! Issue 30, scope 3: what one item of each kind of work a peer sends at
//! its will costs a node, for the fixed charges of its account of CPU
//! (`net::cpu_ledger`: `REQUEST_COST`, `STREAM_COST`, `SUMMARY_COST`). One
//! real `gleaner node` without a CPU budget (`[net] peer_cpu_percent = 0`,
//! so nothing is refused), measured quiet (one peer connected, silent),
//! then sent each kind by a fresh rogue at a steady rate within its count
//! budget, a spell each: job queries about a job it never submitted (the
//! request path alone, the baseline), data streams asking for a file
//! nobody offered, and its own summaries. Each kind's cost per item is the
//! node's CPU over its spell less the quiet spell's, over the items sent,
//! and is printed with its ratio to the job query's in the same run.
//!
//! A measurement, not a test: `cargo test --test it
//! rogue_pool::item_cost -- --ignored --nocapture` (`GLEANER_FLOOD_SECS`
//! sets each spell's length, default 60).

use super::consumer::{ask_unoffered, flood_status, hostile_target_with, RogueConsumer};
use crate::node_support::{cpu_ticks, ticks_per_sec, NodeFixture};

use std::future::Future;
use std::time::{Duration, Instant};

use gleaner::net::protocol::JobRequest;
use gleaner::net::NetHandle;
use libp2p::PeerId;

/// Sends `one(net, host, i)` `rate` times a second for `length` from a
/// fresh rogue; returns the items sent, those answered and the node's CPU
/// ticks over the spell.
async fn paced<F, Fut>(host: &NodeFixture, rate: f64, length: Duration, one: F) -> (u64, u64, u64)
where
    F: Fn(NetHandle, PeerId, u64) -> Fut,
    Fut: Future<Output = bool> + Send + 'static,
{
    let rogue = RogueConsumer::start(host).await;
    // Time for gossipsub to learn the host's subscription (a heartbeat).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let from = cpu_ticks(host.pid()).unwrap();
    let until = Instant::now() + length;
    let mut items = Vec::new();
    let mut i = 0u64;
    while Instant::now() < until {
        tick.tick().await;
        items.push(tokio::spawn(one(rogue.handle.clone(), rogue.host, i)));
        i += 1;
    }
    let mut answered = 0;
    for item in items {
        answered += u64::from(item.await.unwrap_or(false));
    }
    let ticks = cpu_ticks(host.pid()).unwrap() - from;
    drop(rogue);
    tokio::time::sleep(Duration::from_secs(3)).await;
    (i, answered, ticks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of several minutes; prints figures for the note"]
async fn what_one_item_of_each_kind_costs_a_node() {
    let length = super::flood_length();
    let host = tokio::task::block_in_place(|| hostile_target_with("peer_cpu_percent = 0\n"));
    let idle = RogueConsumer::start(&host).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let from = cpu_ticks(host.pid()).unwrap();
    tokio::time::sleep(length).await;
    let quiet = cpu_ticks(host.pid()).unwrap() - from;
    drop(idle);
    let ms_per_tick = 1_000.0 / ticks_per_sec() as f64;

    let job = |net: NetHandle, host: PeerId, _: u64| async move {
        let query = JobRequest::Query {
            job_id: "never".into(),
        };
        net.job_request(host, query).await.is_ok()
    };
    let stream = |net: NetHandle, host: PeerId, i: u64| async move {
        ask_unoffered(&net, host, i, Duration::from_secs(10)).await
    };
    let summary = |net: NetHandle, _: PeerId, i: u64| async move {
        net.announce(flood_status(i)).await.is_ok()
    };
    // Rates within each count budget: 64 requests, 16 data streams and 4
    // summaries a second.
    let spells = [
        ("job queries", 50.0, paced(&host, 50.0, length, job).await),
        (
            "data streams",
            15.0,
            paced(&host, 15.0, length, stream).await,
        ),
        ("summaries", 3.0, paced(&host, 3.0, length, summary).await),
    ];
    eprintln!(
        "quiet: {:.3} % of a core over {} s",
        100.0 * quiet as f64 * ms_per_tick / length.as_millis() as f64,
        length.as_secs()
    );
    eprintln!("kind | per second | sent | answered | node CPU % of a core | ms an item above quiet | x a job query");
    let per_item = |(sent, _, ticks): (u64, u64, u64)| {
        (ticks as f64 - quiet as f64) * ms_per_tick / sent.max(1) as f64
    };
    let baseline = per_item(spells[0].2);
    for (kind, rate, (sent, answered, ticks)) in spells {
        let item = per_item((sent, answered, ticks));
        eprintln!(
            "{kind} | {rate} | {sent} | {answered} | {:.3} | {item:.3} | {:.2}",
            100.0 * ticks as f64 * ms_per_tick / length.as_millis() as f64,
            item / baseline
        );
    }
}
