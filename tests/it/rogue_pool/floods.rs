//! Issue 30, scope 3: a flood of data streams or of requests is cut to the
//! peer's budget, the peer is cut off, and the flood lands in its record on
//! the node it flooded. Each flood comes from a fresh rogue (its own swarm
//! in this test process) against one real `gleaner node` on 127.0.0.1; the
//! node answers `status` throughout. (Summaries have a budget too, but a
//! rogue publishing through its own swarm does not get past gossipsub's send
//! path fast enough to reach it: `flood_cost` measured it.)

use super::consumer::{hostile_target, status_time, RogueConsumer};
use crate::node_support::NodeFixture;

use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gleaner::net::protocol::{JobRequest, DATA_PROTOCOL};

/// What the node logs when it counts a flood in a peer's record.
const RECORDED: &str = "a peer went past its budget: a flood in its record";

/// The node's log line that records `peer`'s flood of `what`, if any.
fn recorded(host: &NodeFixture, peer: &str, what: &str) -> bool {
    host.log()
        .lines()
        .any(|l| l.contains(RECORDED) && l.contains(peer) && l.contains(what))
}

/// Runs `one(i)`, `in_flight` at a time, until the node records the
/// rogue's flood of `what` or a minute passes; returns how many were sent
/// and whether it was recorded. `status` must answer within 5 s meanwhile.
async fn flood_until_recorded<F, Fut>(
    host: &NodeFixture,
    rogue: &RogueConsumer,
    what: &str,
    in_flight: usize,
    one: F,
) -> (u64, bool)
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let peer = rogue.handle.peer_id().to_base58();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 0u64;
    let mut requests = futures::stream::iter(0u64..)
        .map(&one)
        .buffer_unordered(in_flight);
    let mut look = Instant::now();
    while Instant::now() < deadline {
        tokio::select! {
            _ = requests.next() => sent += 1,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        if look.elapsed() > Duration::from_millis(500) {
            look = Instant::now();
            if tokio::task::block_in_place(|| recorded(host, &peer, what)) {
                return (sent, true);
            }
            let took = tokio::task::block_in_place(|| status_time(host));
            assert!(
                took < Duration::from_secs(5),
                "{what}: status took {took:?}"
            );
        }
    }
    (
        sent,
        tokio::task::block_in_place(|| recorded(host, &peer, what)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_streams_or_requests_is_cut_off_and_recorded_against_the_flooder() {
    let host = tokio::task::block_in_place(hostile_target);

    // Data streams, opened and dropped.
    let rogue = RogueConsumer::start(&host).await;
    let (net, target) = (rogue.handle.clone(), rogue.host);
    let (sent, cut) = flood_until_recorded(&host, &rogue, "data streams", 64, |_| {
        let net = net.clone();
        async move {
            let _ = net.open_stream(target, DATA_PROTOCOL).await;
        }
    })
    .await;
    assert!(cut, "a flood of {sent} data streams was not recorded");
    drop(rogue);

    // Requests: queries about a job it never submitted.
    let rogue = RogueConsumer::start(&host).await;
    let (net, target) = (rogue.handle.clone(), rogue.host);
    let (sent, cut) = flood_until_recorded(&host, &rogue, "requests", 256, |_| {
        let net = net.clone();
        async move {
            let query = JobRequest::Query {
                job_id: "never".into(),
            };
            let _ = net.job_request(target, query).await;
        }
    })
    .await;
    assert!(cut, "a flood of {sent} requests was not recorded");
    drop(rogue);

    // An honest peer is still served.
    let other = RogueConsumer::start(&host).await;
    let query = JobRequest::Query {
        job_id: "never".into(),
    };
    assert_eq!(
        other.ask(query).await,
        gleaner::net::protocol::JobResponse::NotFound
    );
}

/// What the node logs when it holds a blocked peer's new connection.
const HELD: &str = "holding a blocked peer's connection";

/// Issue 30, scope 3: a flooder cut off and dialing again as fast as its
/// requests fail is not handshaken with at its pace. Its new connections are
/// held (unanswered, for a minute) before the block list refuses them, so
/// over 10 s of its redialing flood the node sees one or two of them, where
/// it used to accept and close one every few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_flooders_redials_are_held_not_handshaken_at_its_pace() {
    let host = tokio::task::block_in_place(hostile_target);
    let rogue = RogueConsumer::start(&host).await;
    let peer = rogue.handle.peer_id().to_base58();
    let (net, target) = (rogue.handle.clone(), rogue.host);
    let one = |_| {
        let net = net.clone();
        async move {
            let query = JobRequest::Query {
                job_id: "never".into(),
            };
            let _ = net.job_request(target, query).await;
        }
    };
    let (sent, cut) = flood_until_recorded(&host, &rogue, "requests", 256, one).await;
    assert!(cut, "a flood of {sent} requests was not recorded");

    // It goes on, blocked: every request it sends dials again when the
    // last connection failed.
    let until = Instant::now() + Duration::from_secs(10);
    let after = futures::stream::iter(0u64..)
        .take_while(|_| futures::future::ready(Instant::now() < until))
        .map(one)
        .buffer_unordered(256)
        .count();
    // Requests held past the 10 s end by their own timeout.
    let _ = tokio::time::timeout(Duration::from_secs(15), after).await;
    let held = tokio::task::block_in_place(|| {
        host.log()
            .lines()
            .filter(|l| l.contains(HELD) && l.contains(&peer))
            .count()
    });
    assert!(
        (1..=3).contains(&held),
        "{held} connections of the blocked flooder held in 10 s of redialing"
    );
    let took = tokio::task::block_in_place(|| status_time(&host));
    assert!(took < Duration::from_secs(5), "status took {took:?}");
}
