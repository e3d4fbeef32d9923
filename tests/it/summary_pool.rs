//! Summaries instead of surveys, with real `gleaner node` processes on
//! 127.0.0.1 (mDNS off): a consumer lists every host from the summaries it
//! heard, at once and with each one's age, without asking any; a batch is
//! placed while only a few hosts per task are asked directly (counted in
//! the hosts' own logs), a few a round, never the whole pool at once; `hosts`, `status` and
//! `batch status` say how many members are known from summaries and how old
//! they are.

use crate::node_support;

use std::time::Duration;

use gleaner::consumer::rank::{asks_for, ASKS_PER_TASK};
use node_support::{batch_until, peer, pool_of, NodeFixture};
use serde_json::Value;

/// The reliability queries `host` answered for `consumer` (its debug log
/// names each one).
fn queries_from(host: &NodeFixture, consumer: &str) -> usize {
    host.log()
        .lines()
        .filter(|l| l.contains("reliability query") && l.contains(consumer))
        .count()
}

#[test]
fn a_consumer_lists_hosts_from_summaries_and_asks_only_a_few_per_task() {
    const HOSTS: usize = 6;
    const TASKS: usize = 2;
    // pool_of waits until the consumer's `hosts` lists every host with a TR.
    let (hosts, consumer) = pool_of(HOSTS);
    let me = peer(&consumer);
    let report: Value =
        serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
    let listed = report["hosts"].as_array().unwrap();
    assert_eq!(listed.len(), HOSTS, "{report:#}");
    for h in listed {
        assert_eq!(h["summarised"], true, "{h:#}");
        assert_eq!(h["answered"], false, "listing asks no host: {h:#}");
        assert!(
            h["tr"].as_f64().is_some_and(|t| (0.0..=1.0).contains(&t)),
            "{h:#}"
        );
        assert!(
            h["heard_secs_ago"].as_f64().is_some_and(|a| a >= 0.0),
            "{h:#}"
        );
    }
    // What the listing came from: every host's summary, and how old.
    assert_eq!(
        report["summary_cache"]["summarised"], HOSTS as u64,
        "{report:#}"
    );
    let status: Value = serde_json::from_str(&consumer.run_ok(&["--json", "status"])).unwrap();
    let cache = &status["summary_cache"];
    assert_eq!(cache["summarised"], HOSTS as u64, "{status:#}");
    let (newest, oldest) = (
        cache["newest_secs"].as_f64().unwrap(),
        cache["oldest_secs"].as_f64().unwrap(),
    );
    assert!(0.0 <= newest && newest <= oldest, "{cache:#}");
    let text = consumer.run_ok(&["hosts"]);
    assert!(text.contains("age"), "{text}");
    assert!(
        text.contains(&format!("{HOSTS} members known from summaries")),
        "{text}"
    );
    let text = consumer.run_ok(&["status"]);
    assert!(text.contains("known from summaries"), "{text}");
    let asked_before: usize = hosts.iter().map(|h| queries_from(h, &me)).sum();
    assert_eq!(asked_before, 0, "listing from summaries asks nobody");

    let results = consumer.dir.join("results");
    let out = consumer.run_ok(&[
        "--json",
        "batch",
        "submit",
        "--range",
        "0..2",
        "--runtime",
        "1m",
        "--output-dir",
        results.to_str().unwrap(),
        "--",
        "true",
    ]);
    let id = serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    batch_until(&consumer, &id, Duration::from_secs(120), |s| {
        s["counts"]["done"] == TASKS as u64
    });
    let status: Value =
        serde_json::from_str(&consumer.run_ok(&["--json", "batch", "status", &id])).unwrap();
    assert_eq!(
        status["summary_cache"]["summarised"], HOSTS as u64,
        "{status:#}"
    );
    let per_host: Vec<usize> = hosts.iter().map(|h| queries_from(h, &me)).collect();
    let asked_hosts = per_host.iter().filter(|n| **n > 0).count();
    let total: usize = per_host.iter().sum();
    eprintln!("direct queries per host for {TASKS} tasks on {HOSTS} hosts: {per_host:?}");
    // One placement round asks asks_for(2) = 4 of the 6; a round more asks
    // again for what it left waiting (on a loaded machine the rule may
    // wait for a faster host for one of the 1-minute tasks, and the next
    // round asks asks_for(1) = 2 more, which may be the two not yet
    // asked): every round asks a few, never the whole pool, and the
    // batch's asks stay within a few per task.
    assert!(
        total >= 1,
        "the placement confirmed its hosts: {per_host:?}"
    );
    let rounds = rounds_asking(&consumer);
    assert!(!rounds.is_empty(), "no round asked anyone");
    assert!(
        rounds
            .iter()
            .all(|&n| n <= asks_for(TASKS) as usize && n < HOSTS),
        "a round asked too many: {rounds:?}"
    );
    assert!(
        total <= rounds.iter().sum::<usize>(),
        "{total} queries, more than the rounds' asks {rounds:?}: {per_host:?}"
    );
    assert!(
        total <= 2 * TASKS * ASKS_PER_TASK as usize,
        "{total} queries for {TASKS} tasks ({asked_hosts} hosts): {per_host:?}"
    );
}

/// The most hosts each of the consumer's rounds could ask, as its debug log
/// says when the round starts (rounds that look ask none and are left out).
fn rounds_asking(consumer: &NodeFixture) -> Vec<usize> {
    consumer
        .log()
        .lines()
        .filter(|l| l.contains("batch queue: a round starts"))
        .filter_map(|l| {
            let plain = without_colours(l);
            let at = plain.find("ask_at_most=")? + "ask_at_most=".len();
            let digits: String = plain[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .filter(|&n| n > 0)
        .collect()
}

/// `line` without its terminal colour codes (`ESC [ … m`).
fn without_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}
