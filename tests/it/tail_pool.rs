//! Tail copies on a pool of real `gleaner node` processes on 127.0.0.1
//! (mDNS off) with real guests (issue 28, scope 3): a consumer with
//! `[batch] tail_copies = true` runs a long task on the only host there, a
//! risky one (its history busy half of every hour); when a steady host
//! joins and is free while no task waits, the queue starts a copy there;
//! the copy's result lands first, is recorded once, and the attempt on the
//! risky host is cancelled on that host.

use crate::node_support;

use std::time::{Duration, Instant};

use node_support::{
    addr, batch_status, history, peer, pool_node, started, test_config, NodeFixture, QUIET_HOST,
};
use serde_json::Value;

/// A consumer-only node with tail copies on.
fn consumer(boot: &str) -> NodeFixture {
    let config = format!("{}\n[batch]\ntail_copies = true\n", test_config(60, ""));
    let mut node = NodeFixture::new(&config, Some(QUIET_HOST));
    node.node_args = ["--bootstrap", boot, "--no-guest"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    node
}

fn hosts(node: &NodeFixture) -> Value {
    serde_json::from_str(&node.run_ok(&["hosts", "--json", "--window", "2h"])).unwrap()
}

/// Polls `hosts` until every peer has a TR (panics after `limit`).
fn wait_hosts(consumer: &NodeFixture, peers: &[&str], limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let report = hosts(consumer);
        let seen = |p: &&str| {
            report["hosts"]
                .as_array()
                .is_some_and(|hs| hs.iter().any(|h| h["peer"] == *p && h["tr"].is_number()))
        };
        if peers.iter().all(seen) {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer never saw {peers:?}: {report:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The guest: an attempt started before `$SWITCH` (Unix seconds) runs ten
/// minutes, one started after it ends at once. So the first attempt (on the
/// risky host) is still running when the copy (on the steady host, started
/// later) lands. No braces: a task's command is a template.
const GUEST: &str = "if [ $(date +%s) -lt $SWITCH ]; then sleep 600; echo slow; else echo fast; fi";

#[test]
fn a_tail_copy_on_a_free_host_lands_first_once_and_the_other_copy_is_cancelled_on_its_host() {
    // The risky host first (the pool's bootstrap), then the consumer.
    let risky = started(pool_node(Some(&history(30)), &[]));
    let boot = addr(&risky);
    let risky_id = peer(&risky);
    let consumer = started(consumer(&boot));
    wait_hosts(&consumer, &[&risky_id], Duration::from_secs(60));

    // A 3 h task by its declared runtime: on a host busy half of every hour
    // it is unlikely to finish, which is what makes it a tail copy's case.
    let switch = unix_now() + 20;
    let switch_env = format!("SWITCH={switch}");
    let mut job = consumer.json_stream(
        "submit",
        &[
            "--runtime",
            "3h",
            "--limit",
            "20m",
            "--env",
            &switch_env,
            "--",
            "sh",
            "-c",
            GUEST,
        ],
    );
    let first = job.wait_until("the task running", Duration::from_secs(60), |l| {
        l["type"] == "task" && l["state"] == "running"
    });
    assert_eq!(first["host"], risky_id.as_str(), "{first:#}");
    let id = first["batch"].as_str().unwrap().to_string();
    // The risky host runs it (the slow branch: started before the switch).
    let deadline = Instant::now() + Duration::from_secs(30);
    while risky.status()["guest"]["phase"] != "running" {
        assert!(
            Instant::now() < deadline,
            "the risky host never ran the task: {}",
            risky.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    while unix_now() <= switch {
        std::thread::sleep(Duration::from_millis(200));
    }

    // A steady host joins, free, while no task waits: a tail copy goes there.
    let steady = started(pool_node(Some(&history(0)), &["--bootstrap", &boot]));
    let steady_id = peer(&steady);
    let log = || {
        format!(
            "risky:\n{}\nsteady:\n{}\nconsumer:\n{}",
            risky.log(),
            steady.log(),
            consumer.log()
        )
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    while job.child.try_wait().unwrap().is_none() {
        if let Ok(v) = job.lines.recv_timeout(Duration::from_millis(200)) {
            job.seen.push(v);
        }
        assert!(
            Instant::now() < deadline,
            "the task did not end by a tail copy: {:#?}\n{}",
            job.seen,
            log()
        );
    }
    let (code, lines) = job.finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{lines:#?}\n{}", log());

    // The copy won: the steady host's result (the fast branch), recorded
    // once: one "done" for the task, after two attempts.
    let done: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "task" && l["state"] == "done")
        .collect();
    assert_eq!(done.len(), 1, "{lines:#?}");
    let result = lines
        .iter()
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line: {lines:#?}"));
    assert_eq!(result["host"], steady_id.as_str(), "{result:#}");
    assert_eq!(result["attempts"], 2, "{result:#}");
    assert_eq!(result["stdout"], "fast\n", "{result:#}");

    // The other copy is cancelled on the risky host, not left running.
    let deadline = Instant::now() + Duration::from_secs(30);
    let guest = loop {
        let g = risky.status()["guest"].clone();
        if g["phase"] == "exited" {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "the risky host still runs the losing copy: {g:#}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(guest["kill_cause"], "Cancelled", "{guest:#}");
    // And the steady host ran one attempt, which ended by itself.
    let g = steady.status()["guest"].clone();
    assert!(g["kill_cause"].is_null(), "{g:#}");
    // The task's record stays as it landed after the cancel came back.
    std::thread::sleep(Duration::from_secs(2));
    let after = batch_status(&consumer, &id);
    let t = &after["tasks"][0];
    assert_eq!(t["state"], "done", "{after:#}");
    assert_eq!(t["host"], steady_id.as_str(), "{after:#}");
    assert_eq!(t["attempts"], 2, "{after:#}");
    assert_eq!(after["counts"]["done"], 1, "{after:#}");
}
