//! Issue 30, scope 3: a peer within its request budget that asks only what
//! costs the node most. The rogue (its own swarm in this test process) asks
//! one real `gleaner node` (with three weeks of history) for its TR over a
//! window nobody asked before, 50 times a second: within the node's budget
//! of requests (64 a second), each answer a forecast of its own. The
//! costliest is a window of a length never asked (its fits made anew, some
//! 75 ms of CPU): without a budget of CPU per peer such a flood takes both
//! cores; with it, the rogue gets its account's share and is then cut off,
//! the flood recorded against it. (A new start of a length asked before
//! reuses its fits since issue 29, and stays near the share: docs/trust.md.)
//!
//! `what_a_forecast_flood_costs` is a measurement, `#[ignore]`d: `cargo
//! test --test it rogue_pool::cpu -- --ignored --nocapture`
//! (`GLEANER_FLOOD_SECS` sets each spell's length, default 60).

use super::consumer::{hostile_target_with, status_time, RogueConsumer};
use crate::node_support::{cpu_ticks, ticks_per_sec, NodeFixture};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gleaner::net::protocol::{JobRequest, JobResponse, ReliabilityQuery, ReliabilityResponse};

/// Queries the rogue sends a second, and keeps in flight at most.
const RATE: u64 = 50;
const IN_FLIGHT: usize = 64;

/// What the node logs when it counts a flood in a peer's record.
const RECORDED: &str = "a peer went past its budget: a flood in its record";

/// What a paced flood did.
#[derive(Debug, Default)]
struct Counts {
    sent: AtomicU64,
    answered: AtomicU64,
}

/// The longest window a host forecasts (its curve then covers 1.75 to 7
/// days). A new start of it cost some 6 ms of the node's CPU before the
/// node kept its fits (issue 29); a new length near it, some 75 ms now
/// (docs/trust.md).
const WEEK: u64 = 7 * 86_400;

/// The `i`-th query for a window of `length_secs`: starting `i` minutes
/// past the next hour, so that no two fall in one minute (the node reuses
/// an answer for a minute of starts) and each is a forecast of its own;
/// with `new_lengths`, also `i` minutes shorter (six days' minutes before
/// a length comes again; never under a minute), so that the node has no
/// fit made for its length nor its curve's shorter ones (it keeps the fits
/// of lengths asked before: a new start alone reuses them).
fn fresh_query(i: u64, length_secs: u64, new_lengths: bool) -> ReliabilityQuery {
    let now = jiff::Timestamp::now().as_second();
    let minutes = (i % (6 * 24 * 60)) as i64;
    let shorter = if new_lengths { (i % 8_640) * 60 } else { 0 };
    ReliabilityQuery {
        window_start_unix: now - now % 3_600 + 3_600 + minutes * 60,
        length_secs: length_secs.saturating_sub(shorter).max(60),
        memory_mib: 256,
    }
}

/// Sends [`RATE`] fresh queries for windows of `window_secs` a second from
/// `rogue` for `length` (or until `stop` says so, looked at every second),
/// at most [`IN_FLIGHT`] unanswered at once.
async fn paced_flood(
    rogue: &RogueConsumer,
    window_secs: u64,
    new_lengths: bool,
    length: Duration,
    mut stop: impl FnMut() -> bool,
) -> Arc<Counts> {
    let counts = Arc::new(Counts::default());
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let until = Instant::now() + length;
    let mut look = Instant::now();
    let mut i = 0u64;
    while Instant::now() < until {
        tick.tick().await;
        if look.elapsed() >= Duration::from_secs(1) {
            look = Instant::now();
            if tokio::task::block_in_place(&mut stop) {
                break;
            }
        }
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            continue;
        };
        let (net, host, counts) = (rogue.handle.clone(), rogue.host, counts.clone());
        counts.sent.fetch_add(1, Ordering::Relaxed);
        let query = fresh_query(i, window_secs, new_lengths);
        i += 1;
        tokio::spawn(async move {
            if let Ok(ReliabilityResponse::Answer(_)) = net.query_reliability(host, query).await {
                counts.answered.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
    }
    counts
}

/// Whether the node recorded `peer`'s flood of CPU.
fn cpu_flood_recorded(host: &NodeFixture, peer: &str) -> bool {
    host.log()
        .lines()
        .any(|l| l.contains(RECORDED) && l.contains(peer) && l.contains("CPU"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_asking_fresh_forecasts_within_its_request_budget_is_cut_off_by_its_cpu_budget() {
    let host = tokio::task::block_in_place(|| hostile_target_with(""));
    // A peer met before the flood, asked again after it.
    let honest = RogueConsumer::start(&host).await;
    let rogue = RogueConsumer::start(&host).await;
    let peer = rogue.handle.peer_id().to_base58();
    let started = Instant::now();
    let counts = paced_flood(&rogue, WEEK, true, Duration::from_secs(90), || {
        cpu_flood_recorded(&host, &peer)
    })
    .await;
    let (sent, answered) = (
        counts.sent.load(Ordering::Relaxed),
        counts.answered.load(Ordering::Relaxed),
    );
    let took = started.elapsed();
    assert!(
        tokio::task::block_in_place(|| cpu_flood_recorded(&host, &peer)),
        "{answered} of {sent} fresh forecasts answered in {took:?}, no flood of CPU recorded"
    );
    assert!(answered < sent, "{answered} of {sent} answered");
    // The node still answers others.
    let query = JobRequest::Query {
        job_id: "never".into(),
    };
    assert_eq!(honest.ask(query).await, JobResponse::NotFound);
    let took = tokio::task::block_in_place(|| status_time(&host));
    assert!(took < Duration::from_secs(5), "status took {took:?}");
}

/// The node's CPU over `length`, as ticks, while `spell` runs.
async fn node_ticks<F: std::future::Future>(host: &NodeFixture, spell: F) -> (u64, F::Output) {
    let from = cpu_ticks(host.pid()).unwrap();
    let out = spell.await;
    (cpu_ticks(host.pid()).unwrap() - from, out)
}

/// Issue 30, scope 3: what a peer asking 50 fresh forecasts a second costs
/// a node, with and without the CPU budget, in one run: two nodes alike
/// but for `[net] peer_cpu_percent` (0: no budget), each measured quiet
/// (one peer connected, silent), then flooded by one rogue asking week-long
/// windows, by another asking hour-long ones and by a third asking windows
/// of a new length each (near a week), a spell each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of several minutes; prints figures for the note"]
async fn what_a_forecast_flood_costs() {
    let length = super::flood_length();
    let core = length.as_secs_f64() * ticks_per_sec() as f64;
    let share = |ticks: u64| 100.0 * ticks as f64 / core;
    let mut lines = Vec::new();
    for (node, net) in [
        ("no CPU budget", "peer_cpu_percent = 0\n"),
        ("CPU budget (default)", ""),
    ] {
        let host = tokio::task::block_in_place(|| hostile_target_with(net));
        let idle = RogueConsumer::start(&host).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (quiet, ()) = node_ticks(&host, tokio::time::sleep(length)).await;
        drop(idle);
        for (window, secs, new_lengths) in [
            ("7 d", WEEK, false),
            ("1 h", 3_600, false),
            ("7 d - i min", WEEK, true),
        ] {
            let rogue = RogueConsumer::start(&host).await;
            let peer = rogue.handle.peer_id().to_base58();
            let flood = paced_flood(&rogue, secs, new_lengths, length, || false);
            let (ticks, counts) = node_ticks(&host, flood).await;
            let cut = tokio::task::block_in_place(|| cpu_flood_recorded(&host, &peer));
            lines.push(format!(
                "{node} | {window} | {} | {} | {cut} | {:.2} | {:.2} ({:.1})",
                counts.sent.load(Ordering::Relaxed),
                counts.answered.load(Ordering::Relaxed),
                share(quiet),
                share(ticks),
                ticks as f64 / quiet.max(1) as f64,
            ));
            drop(rogue);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
    eprintln!(
        "{RATE} fresh forecasts a second for {} s; node CPU in % of a core",
        length.as_secs()
    );
    eprintln!("node | window | sent | answered | cut off | quiet | flood (x quiet)");
    for line in lines {
        eprintln!("{line}");
    }
}
