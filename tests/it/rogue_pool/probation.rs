//! Issue 30, scope 3: a stranger on probation gets the probation budget for
//! the data streams it opens, not a member's. One real `gleaner node` on
//! 127.0.0.1 that lets a source bring 4 peer ids it never met (`[net]
//! source_new_peers = 4`, where the default is 512): the identities of this
//! test process that connect to it one after another make 127.0.0.1
//! suspect (4 newcomers, then 4 strikes forgiven), so the next one is a
//! stranger on probation. That stranger (its own swarm, the node's network
//! stack) opens data streams for nothing, as many at once as it can, and is
//! cut off after the probation budget (32 at once, 8 a second, 32 drops
//! forgiven) where a member is allowed 300, 16 a second and 256 more.

use super::consumer::{hostile_target_with, status_time, RogueConsumer};
use crate::node_support::NodeFixture;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gleaner::net::protocol::{JobRequest, JobResponse, DATA_PROTOCOL};

/// What the node logs when a source becomes suspect, and when it counts a
/// flood in a peer's record.
const SUSPECT: &str = "a source of flooders";
const RECORDED: &str = "a peer went past its budget: a flood in its record";

/// Data streams a stranger on probation may open before it is cut off, with
/// room for the time the flood takes: 32 at once and 32 drops forgiven,
/// and 8 a second more for a few seconds. A member's budget is 556 and
/// more.
const PROBATION_STREAMS_MAX: u64 = 200;

fn recorded(host: &NodeFixture, peer: &str) -> bool {
    host.log()
        .lines()
        .any(|l| l.contains(RECORDED) && l.contains(peer) && l.contains("data streams"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_on_probation_is_cut_off_after_the_probation_budget_of_data_streams() {
    let host = tokio::task::block_in_place(|| hostile_target_with("source_new_peers = 4\n"));
    // A peer met before the source is suspect: still served after.
    let honest = RogueConsumer::start(&host).await;
    // Newcomers, one after another, until 127.0.0.1 is suspect.
    let mut newcomers = Vec::new();
    while !tokio::task::block_in_place(|| host.log().contains(SUSPECT)) {
        assert!(newcomers.len() < 16, "127.0.0.1 never suspect");
        newcomers.push(RogueConsumer::start(&host).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(newcomers);

    let stranger = RogueConsumer::start(&host).await;
    let peer = stranger.handle.peer_id().to_base58();
    let (net, target) = (stranger.handle.clone(), stranger.host);
    let opened = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut streams = futures::stream::iter(0u64..)
        .map(|_| {
            let net = net.clone();
            let opened = &opened;
            async move {
                if net.open_stream(target, DATA_PROTOCOL).await.is_ok() {
                    opened.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .buffer_unordered(64);
    let mut look = Instant::now();
    let mut cut = false;
    while Instant::now() < deadline && !cut {
        tokio::select! {
            _ = streams.next() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        if look.elapsed() > Duration::from_millis(200) {
            look = Instant::now();
            cut = tokio::task::block_in_place(|| recorded(&host, &peer));
        }
    }
    drop(streams);
    let opened = opened.load(Ordering::Relaxed);
    eprintln!("the stranger on probation: {opened} data streams opened, cut off: {cut}");
    assert!(
        cut,
        "{opened} data streams opened in 60 s, no flood recorded"
    );
    assert!(
        opened <= PROBATION_STREAMS_MAX,
        "cut off after {opened} data streams: a member's budget, not a stranger's"
    );
    let never = JobRequest::Query {
        job_id: "never".into(),
    };
    assert_eq!(honest.ask(never).await, JobResponse::NotFound);
    let took = tokio::task::block_in_place(|| status_time(&host));
    assert!(took < Duration::from_secs(5), "status took {took:?}");
}
