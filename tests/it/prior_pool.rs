//! Issue 29's prior for new hosts, end to end with real `gleaner node`
//! processes on 127.0.0.1 (mDNS off). Five members with a record (an
//! imported trace each) publish format 3 summaries that stand on their
//! record. A fresh node that joins them answers from the pool's typical
//! curve within its first minutes, marked as the pool's prior, in its own
//! `status` and in its summary (format 3's `basis`), so a consumer's
//! `hosts` shows it as "0 (pool prior)" while the members show their days.
//! Once a record of its own is in its history (imported here, as days
//! arriving would), its answers and its summary move to its own data.

use crate::node_support;

use std::time::{Duration, Instant};

use gleaner::model::baselines::prior::population_survival;
use node_support::{addr, history, peer, pool_node, pool_of, started, NodeFixture};
use serde_json::Value;

/// The consumer's `hosts` entry for `peer` once `ok` holds of it (panics
/// after `limit`).
fn hosts_entry(
    consumer: &NodeFixture,
    peer: &str,
    limit: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let report: Value =
            serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
        let entry = report["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["peer"] == peer)
            .cloned();
        if let Some(entry) = entry.filter(|e| ok(e)) {
            return entry;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer never listed {peer} as expected: {report:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_fresh_node_in_a_pool_answers_with_the_pools_prior_then_from_its_own_record() {
    // Five members whose records never fail (the owner never busy): their
    // typical curve lies well above the built-in desktop population's.
    const MEMBERS: usize = 5;
    let (members, consumer) = pool_of(MEMBERS);
    let fresh = started(pool_node(None, &["--bootstrap", &addr(&members[0])]));
    let me = peer(&fresh);

    // Its first minutes: every window from the pool's prior, and it says so.
    // (The pool prior is made 15 s after the start, then every 2 minutes.)
    let s = fresh.wait_status(
        Duration::from_secs(200),
        "a TR from the pool's prior",
        |s| {
            s["predictions"].as_array().is_some_and(|ps| {
                !ps.is_empty() && ps.iter().all(|p| p["prior_source"] == "pool prior")
            })
        },
    );
    let mut from_pool = Vec::new();
    for p in s["predictions"].as_array().unwrap() {
        assert_eq!(p["prior"], true, "{p}");
        let window = p["window_secs"].as_u64().unwrap();
        let tr = p["tr"].as_f64().unwrap();
        // Not the built-in prior: the members' curve moved it up.
        assert!(
            tr > population_survival(window) + 0.02,
            "{window} s: {tr} against the built-in {}: {s}",
            population_survival(window)
        );
        from_pool.push((window, tr));
    }
    let text = fresh.run_ok(&["status"]);
    assert!(text.contains("yet), pool prior"), "{text}");

    // What it publishes says so too: a consumer lists it as a host with no
    // day of record on the pool's prior, the members with their days.
    let entry = hosts_entry(&consumer, &me, Duration::from_secs(60), |e| {
        e["method"] == "pool-prior"
    });
    assert_eq!(entry["days_used"], 0, "{entry:#}");
    for m in &members {
        let e = hosts_entry(&consumer, &peer(m), Duration::from_secs(10), |_| true);
        assert!(e["days_used"].as_u64().is_some_and(|d| d >= 1), "{e:#}");
    }
    let table = consumer.run_ok(&["hosts", "--window", "1h"]);
    assert!(table.contains("0 (pool prior)"), "{table}");

    // Days of its own arrive: an owner busy the first half of every hour,
    // whom an hour's window never survives. Its answers leave the prior.
    let path = fresh.dir.join("history.csv");
    std::fs::write(&path, history(30)).unwrap();
    fresh.run_ok(&["history", "import", path.to_str().unwrap()]);
    let s = fresh.wait_status(Duration::from_secs(120), "TRs from its record", |s| {
        s["predictions"].as_array().is_some_and(|ps| {
            ps.iter()
                .all(|p| p["tr"].is_number() && p["prior"] == false)
        })
    });
    let (window, pooled) = from_pool[0];
    let own = &s["predictions"][0];
    assert_eq!(own["window_secs"].as_u64(), Some(window), "{s}");
    assert!(own["prior_source"].is_null(), "{own}");
    assert!(
        own["tr"].as_f64().unwrap() < pooled - 0.3,
        "its own busy record, not the pool's quiet one ({pooled}): {s}"
    );
    let entry = hosts_entry(&consumer, &me, Duration::from_secs(60), |e| {
        e["days_used"].as_u64().is_some_and(|d| d >= 1)
    });
    assert_ne!(entry["method"], "pool-prior", "{entry:#}");
}
