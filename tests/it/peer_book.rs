//! The peer book on a pool of real `gleaner node` processes on 127.0.0.1
//! (issue 27): three hosts and a consumer-only node, all bootstrapped from
//! the first host; a batch runs; the first host (every node's only bootstrap
//! peer) dies with SIGKILL, then the consumer's node, which restarts on its
//! data dir with nothing but a dead bootstrap address. It finds the two live
//! hosts from its peer book and the batch lands every result once. Without
//! the book (`[net] peer_book = false`) the same restart comes back with no
//! peer and the batch never ends, as issue 27 measured.

use crate::node_support;

use std::time::{Duration, Instant};

use node_support::{batch_status, batch_until, pool};
use serde_json::Value;

const TASKS: usize = 24;

fn contact(status: &Value) -> &Value {
    &status["network"]["contact"]
}

#[test]
fn a_consumer_restarted_after_its_only_bootstrap_peer_died_finds_the_pool_from_its_book() {
    let (mut hosts, mut consumer) = pool();
    // The book holds every host before anything dies, and is on disk: it is
    // written (and flushed) at most every 5 s.
    consumer.wait_status(Duration::from_secs(60), "three hosts remembered", |s| {
        contact(s)["remembered"].as_u64().unwrap_or(0) >= 3
    });
    std::thread::sleep(Duration::from_secs(7));

    let work = consumer.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut csv = String::from("alpha,label\n");
    for i in 0..TASKS {
        csv.push_str(&format!("{},t{i}\n", i * 5));
    }
    let params = work.join("sweep.csv");
    std::fs::write(&params, csv).unwrap();
    let results = work.join("results");
    let created: Value = serde_json::from_str(&consumer.run_ok(&[
        "--json",
        "batch",
        "submit",
        "--name",
        "remembered",
        "--runtime",
        "1m",
        "--params",
        params.to_str().unwrap(),
        "--output",
        "result.txt",
        "--output-dir",
        results.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "sleep 1; echo {label} $(( {alpha} * 2 )) > result.txt",
    ]))
    .unwrap();
    let id = created["id"].as_str().unwrap().to_string();

    // The first host, every node's only bootstrap peer, dies mid-batch...
    batch_until(&consumer, &id, Duration::from_secs(120), |s| {
        s["counts"]["done"].as_u64().unwrap() >= 3
    });
    hosts[0].kill9();
    // ...then the consumer's node, which comes back with only that dead
    // bootstrap address in its config.
    batch_until(&consumer, &id, Duration::from_secs(120), |s| {
        s["counts"]["done"].as_u64().unwrap() >= 6
    });
    consumer.kill9();
    std::thread::sleep(Duration::from_millis(500));
    consumer.start();
    let restarted = Instant::now();
    let found = consumer.wait_status(Duration::from_secs(60), "a live host found again", |s| {
        contact(s)["members_connected"].as_u64().unwrap_or(0) >= 1
    });
    let took = restarted.elapsed();
    eprintln!(
        "restart to the first host found: {:.2} s; contact {}",
        took.as_secs_f64(),
        contact(&found)
    );

    let waited = consumer
        .gleaner()
        .args(["--json", "batch", "wait", &id])
        .output()
        .unwrap();
    assert_eq!(
        waited.status.code(),
        Some(0),
        "batch wait: {}\n{}",
        String::from_utf8_lossy(&waited.stderr),
        consumer.log()
    );
    let status = batch_status(&consumer, &id);
    assert_eq!(status["counts"]["done"], TASKS, "{status:#}");
    assert!(
        status.get("contact").is_none(),
        "a pool in touch says nothing about contact: {status:#}"
    );

    // Every task's result, once, correct, and only from live or earlier hosts
    // of the pool.
    let mut names: Vec<String> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_by_key(|n| n.parse::<usize>().unwrap_or(usize::MAX));
    let expected: Vec<String> = (0..TASKS).map(|i| i.to_string()).collect();
    assert_eq!(names, expected, "one directory per task and nothing else");
    let peers: Vec<String> = hosts.iter().map(node_support::peer).collect();
    for i in 0..TASKS {
        let dir = results.join(i.to_string());
        let text = std::fs::read_to_string(dir.join("result.txt")).unwrap();
        assert_eq!(text.trim(), format!("t{i} {}", i * 10), "task {i}");
        let host = status["tasks"][i]["host"].as_str().unwrap_or_default();
        assert!(peers.iter().any(|p| p == host), "task {i} ran on {host}");
    }
    // The restarted node says where it is: in touch, the book kept.
    let s = consumer.status();
    assert!(contact(&s)["alone_since"].is_null(), "{s:#}");
    assert!(contact(&s)["remembered"].as_u64().unwrap() >= 3, "{s:#}");
}

/// Sends `signal` to the node's process.
fn signal(node: &node_support::NodeFixture, signal: i32) {
    let pid = node.child.as_ref().expect("the node runs").id() as i32;
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

#[test]
fn a_restarted_consumer_lists_its_pool_at_once_from_the_summaries_its_book_kept() {
    let (hosts, mut consumer) = pool();
    let peers: Vec<String> = hosts.iter().map(node_support::peer).collect();
    // A clean stop writes the book whole, each member's newest summary in.
    consumer.stop();
    // The hosts fall silent (stopped, not gone): whatever the restarted
    // consumer lists comes from its book, not from a fresh summary.
    for h in &hosts {
        signal(h, libc::SIGSTOP);
    }
    let stopped = Instant::now();
    consumer.start();
    let since_stop = stopped.elapsed().as_secs_f64();
    let report: Value =
        serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
    for h in &hosts {
        signal(h, libc::SIGCONT);
    }
    let listed = report["hosts"].as_array().unwrap();
    for p in &peers {
        let h = listed
            .iter()
            .find(|h| h["peer"] == p.as_str())
            .unwrap_or_else(|| panic!("{p} is not listed after the restart: {report:#}"));
        assert_eq!(h["summarised"], true, "{h:#}");
        assert!(h["tr"].is_number(), "its summary's TR: {h:#}");
        // Its age is told honestly: heard before the stop (whole seconds).
        let age = h["heard_secs_ago"].as_f64().unwrap();
        assert!(
            age + 1.0 >= since_stop,
            "age {age} s, stopped {since_stop} s ago"
        );
    }
}

#[test]
fn a_node_that_reaches_no_member_says_so_in_status_hosts_and_batch_status() {
    // Its only bootstrap peer does not exist: nothing listens on port 9.
    let dead = format!("/ip4/127.0.0.1/tcp/9/p2p/{}", libp2p::PeerId::random());
    let node = node_support::started(node_support::pool_node(
        None,
        &["--bootstrap", &dead, "--no-guest"],
    ));
    let s = node.wait_status(Duration::from_secs(30), "the contact report", |s| {
        contact(s)["alone_since"].is_i64()
    });
    assert_eq!(contact(&s)["redialing_bootstrap"], 1, "{s:#}");
    let alone = "no member reachable since ";
    let trying = "; redialing 1 bootstrap address";
    let status = node.run_ok(&["status"]);
    assert!(
        status.contains(alone) && status.contains(trying),
        "{status}"
    );
    let hosts = node.run_ok(&["hosts"]);
    assert!(
        hosts.contains("no host found: no member reachable since") && hosts.contains(trying),
        "{hosts}"
    );
    // Its output directory in the node's temp dir: the default is under
    // the working directory, which for a test is the checkout.
    let results = node.dir.join("results");
    let created: Value = serde_json::from_str(&node.run_ok(&[
        "--json",
        "batch",
        "submit",
        "--runtime",
        "1m",
        "--output-dir",
        results.to_str().unwrap(),
        "--",
        "true",
    ]))
    .unwrap();
    let id = created["id"].as_str().unwrap();
    let text = node.run_ok(&["batch", "status", id]);
    eprintln!("status:\n{status}\nhosts:\n{hosts}\nbatch status:\n{text}");
    assert!(
        text.contains("no host reachable: no member reachable since") && text.contains(trying),
        "{text}"
    );
}
