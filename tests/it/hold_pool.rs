//! Holds for later windows on a pool of real `gleaner node` processes on
//! 127.0.0.1 (mDNS off) with real guests (issue 28, scope 1): a task longer
//! than one host's coming free time waits for another host's later window
//! and finishes there, instead of being started where it will be killed.
//!
//! Two hosts, their records seeded by a trace import and their owners'
//! loads scripted:
//! - host A is free now, but its record has its owner back for the first
//!   half of every hour, so an hour's run there is unlikely to pass;
//! - host B's owner hogs it now (S3 once the load has lasted the sustain),
//!   but its record has never seen it busy, so its forecast for a window
//!   that starts after its present stops deciding (ten minutes past its
//!   last reading) is its quiet habit. Its owner leaves a few minutes in.
//!
//! The consumer asks about later starts on a one-minute grid
//! (`[batch] later_unit_secs = 60`; an hour by default, which no test can
//! wait for). With `later_windows` on, the hour-long task is held for B's
//! window minutes on, never started on A, and runs and finishes on B; off,
//! the same task starts on A at once. Only the owners' loads and the
//! records' past are scripted: the nodes, their sled stores, the forecasts
//! and the guests are real, and time is the wall clock.
//!
//! An overloaded B answers every window within ten minutes of its last
//! reading from its present (S3: 0; `baselines::later::NOW_SECS`), so that
//! test takes about a quarter of an hour. A quicker one has B busy with its
//! owner's own job in its guest slot instead (present S1): held for B's
//! window a minute or two on, in about three minutes.

use crate::node_support;

use std::time::{Duration, Instant};

use node_support::{addr, history, peer, pool_node, started, test_config, NodeFixture};
use serde_json::Value;

/// How long B's owner hogs it after B starts, seconds: past the sustain
/// (S3 from 60 s on) and the submission, so the task is weighed while B is
/// overloaded; well before its window, which is ten minutes or more on.
const B_BUSY_SECS: u64 = 300;

/// The task's declared runtime (what hosts forecast), and its command: a
/// short run, so the test ends soon once the task has started.
const RUNTIME: &str = "1h";
const GUEST: &str = "sleep 2; echo done";

/// A consumer-only node with holds for later windows `on` or off, on a
/// one-minute grid of later starts either way.
fn consumer(boot: &str, on: bool) -> NodeFixture {
    let config = format!(
        "{}\n[batch]\nlater_windows = {on}\nlater_unit_secs = 60\n",
        test_config(60, "")
    );
    let mut node = NodeFixture::new(&config, Some(node_support::QUIET_HOST));
    node.node_args = ["--bootstrap", boot, "--no-guest"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    node
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A host's own TR for an hour's run starting at `at` (its `predict`).
fn tr_at(host: &NodeFixture, at: i64) -> f64 {
    let at = at.to_string();
    let out = host.run_ok(&["predict", "--json", "--window", RUNTIME, "--at", &at]);
    let report: Value = serde_json::from_str(&out).unwrap();
    report["tr"]
        .as_f64()
        .unwrap_or_else(|| panic!("no TR: {report:#}"))
}

/// B (the bootstrap) with its owner's load `b_script`, A, and the consumer,
/// once the consumer sees both hosts with a TR.
fn hosts_seen(on: bool, b_script: &str) -> (NodeFixture, NodeFixture, NodeFixture) {
    let mut b = pool_node(Some(&history(0)), &[]);
    b.script = Some(b_script.to_string());
    let b = started(b);
    let boot = addr(&b);
    let a = started(pool_node(Some(&history(30)), &["--bootstrap", &boot]));
    let consumer = started(consumer(&boot, on));
    let peers = [peer(&a), peer(&b)];
    consumer_sees(&consumer, Duration::from_secs(60), "both hosts", |hosts| {
        peers
            .iter()
            .all(|p| hosts.iter().any(|h| h["peer"] == *p && h["tr"].is_number()))
    });
    (a, b, consumer)
}

/// Polls the consumer's `hosts` until `ok` holds of its list (panics after
/// `limit`, `what` naming the wait).
fn consumer_sees(
    consumer: &NodeFixture,
    limit: Duration,
    what: &str,
    ok: impl Fn(&[Value]) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let report: Value =
            serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
        if ok(report["hosts"].as_array().map_or(&[], Vec::as_slice)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer never saw {what}: {report:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The pool: B (the bootstrap), A, and the consumer, once the consumer
/// sees both hosts and B's owner has it in S3. Checks the forecasts the
/// test stands on, through each host's own `predict`.
fn pool(on: bool) -> (NodeFixture, NodeFixture, NodeFixture) {
    let (a, b, consumer) = hosts_seen(on, &format!("0 95 8000\n{B_BUSY_SECS} 5 8000\n"));
    b.wait_status(Duration::from_secs(120), "B overloaded (S3)", |s| {
        s["state"] == "S3"
    });
    // A host forecasts from its history as read up to a minute ago: wait
    // until B's own forecast for a start now sees the overload.
    let deadline = Instant::now() + Duration::from_secs(90);
    while tr_at(&b, unix_now()) >= 0.05 {
        assert!(
            Instant::now() < deadline,
            "B's forecast never saw its overload:\n{}",
            b.log()
        );
        std::thread::sleep(Duration::from_secs(2));
    }

    // The premise: an hour on A now is unlikely to pass; B's habit says an
    // hour from twelve minutes on will.
    let now = unix_now();
    let (a_now, b_later) = (tr_at(&a, now), tr_at(&b, now + 12 * 60));
    eprintln!("premise: A now {a_now:.3}, B in 12 min {b_later:.3}");
    assert!(a_now < 0.3, "A is likely to finish an hour now: {a_now}");
    assert!(
        b_later > a_now + 0.4,
        "B's later window is not clearly better than A now: {b_later} vs {a_now}"
    );
    (a, b, consumer)
}

fn submit(consumer: &NodeFixture) -> node_support::JsonStream {
    consumer.json_stream(
        "submit",
        &[
            "--runtime",
            RUNTIME,
            "--limit",
            "10m",
            // `submit`'s default queue limit (30 s): the hold is minutes
            // long, and a held task is not one no host takes.
            "--",
            "sh",
            "-c",
            GUEST,
        ],
    )
}

#[test]
#[ignore = "green, but about 12 minutes: an overloaded B's window cannot open sooner than ten minutes after its last reading (baselines::later::NOW_SECS); the quick test below makes the same decision in about 80 s"]
fn a_task_no_free_host_can_finish_waits_for_a_later_window_on_another_host_and_finishes_there() {
    let (a, b, consumer) = pool(true);
    let (a_id, b_id) = (peer(&a), peer(&b));
    let log = || {
        format!(
            "A:\n{}\nB:\n{}\nconsumer:\n{}",
            a.log(),
            b.log(),
            consumer.log()
        )
    };
    let submitted = unix_now();
    let mut job = submit(&consumer);

    // Held for B's later window, minutes on (the one-minute grid).
    let held = job.wait_until("the hold", Duration::from_secs(60), |l| {
        l["type"] == "task"
            && l["event"]
                .as_str()
                .is_some_and(|e| e.starts_with(&format!("waiting for host {b_id}")))
    });
    // "waiting for host B's window in 0hMM (P …)": minutes on, on the
    // one-minute grid (an hour's grid would say 1h00 at the soonest).
    let text = held["event"].as_str().unwrap().to_string();
    let minutes: i64 = text
        .split("window in 0h")
        .nth(1)
        .and_then(|rest| rest.get(..2))
        .and_then(|mm| mm.parse().ok())
        .unwrap_or_else(|| panic!("no window minutes in {text:?}"));
    assert!((5..=25).contains(&minutes), "{text:?}");
    assert_eq!(held["state"], "queued", "{held:#}");
    assert_eq!(held["waiting_for"]["host"], b_id.as_str(), "{held:#}");

    // `batch status`, as JSON and as text, while the task is held: it
    // reads back (its estimate, made from the hosts as they are now, may
    // have no end) and says what the task waits for.
    let id = held["batch"].as_str().unwrap().to_string();
    let status = node_support::batch_status(&consumer, &id);
    let waiting = &status["tasks"][0]["waiting_for"];
    assert_eq!(waiting["host"], b_id.as_str(), "{status:#}");
    let start = waiting["start_unix"].as_i64().unwrap();
    assert!(start > unix_now(), "{status:#}");
    assert!(waiting["p"].as_f64().unwrap() > 0.5, "{status:#}");
    let text_status = consumer.run_ok(&["batch", "status", &id]);
    let short_b = &b_id[b_id.len() - 8..];
    assert!(
        text_status.contains(&format!("waiting for host {short_b}'s window at")),
        "{text_status}"
    );

    // It waits (past `submit`'s 30 s queue limit), and finishes on B:
    // never started on A.
    let deadline = Instant::now() + Duration::from_secs(20 * 60);
    while job.child.try_wait().unwrap().is_none() {
        if let Ok(v) = job.lines.recv_timeout(Duration::from_millis(200)) {
            job.seen.push(v);
        }
        assert!(
            Instant::now() < deadline,
            "the held task never finished: {:#?}\n{}",
            job.seen,
            log()
        );
    }
    let ended = unix_now();
    let (code, lines) = job.finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{lines:#?}\n{}", log());
    let running = ran_on_b_alone(&lines, &a_id, &b_id);
    // B ran it, and it ended by itself.
    let g = b.status()["guest"].clone();
    assert!(g["kill_cause"].is_null(), "{g:#}");
    let started = running.first().and_then(|l| l["started_unix"].as_i64());
    eprintln!("submitted {submitted}, held: {text}, started {started:?}, ended {ended}");
}

#[test]
fn with_later_windows_off_the_same_task_starts_on_the_host_that_will_be_taken_back() {
    let (a, b, consumer) = pool(false);
    let a_id = peer(&a);
    let mut job = submit(&consumer);
    let first = job.wait_until("the task running", Duration::from_secs(60), |l| {
        l["type"] == "task" && l["state"] == "running"
    });
    assert_eq!(
        first["host"],
        a_id.as_str(),
        "{first:#}\nB:\n{}\nconsumer:\n{}",
        b.log(),
        consumer.log()
    );
    assert!(
        !job.seen.iter().any(|l| l["event"]
            .as_str()
            .is_some_and(|e| e.starts_with("waiting for"))),
        "held with later windows off: {:#?}",
        job.seen
    );
}

/// How long the job B's owner runs in B's guest slot lasts in the quick
/// test, seconds: past the first start of the one-minute grid and past
/// `submit`'s 30 s queue limit, so the task is held and its hold outlasts
/// the limit.
const B_OWN_JOB_SECS: u64 = 75;

/// The same decision in about three minutes, with B busy for another
/// reason: its owner runs a job of their own in B's guest slot (`run-local`)
/// rather than loading the machine. B's present is S1 then, so B answers a
/// window a minute on from it (likely), where an overloaded B answers every
/// window within ten minutes of its last reading from S3 (0): the test
/// above cannot take less than about a quarter of an hour. What this one
/// does not show is a later window forecast from the owner's habit.
#[test]
fn a_task_no_free_host_can_finish_waits_for_a_busy_hosts_window_and_finishes_there() {
    let (a, b, consumer) = hosts_seen(true, node_support::QUIET_HOST);
    let (a_id, b_id) = (peer(&a), peer(&b));
    let log = || {
        format!(
            "A:\n{}\nB:\n{}\nconsumer:\n{}",
            a.log(),
            b.log(),
            consumer.log()
        )
    };
    let secs = B_OWN_JOB_SECS.to_string();
    let mut own = b.run_local(&["--runtime", "5m", "--", "sleep", &secs]);
    own.wait_for("started", Duration::from_secs(30));
    consumer_sees(&consumer, Duration::from_secs(30), "B busy", |hosts| {
        hosts
            .iter()
            .any(|h| h["peer"] == b_id.as_str() && h["slot_free"] == false)
    });
    // The premise: an hour on A now is unlikely to pass; on B from a
    // minute on (its present S1, its record quiet), likely.
    let now = unix_now();
    let (a_now, b_soon) = (tr_at(&a, now), tr_at(&b, now + 60));
    eprintln!("premise: A now {a_now:.3}, B in a minute {b_soon:.3}");
    assert!(a_now < 0.3, "A is likely to finish an hour now: {a_now}");
    assert!(
        b_soon > a_now + 0.4,
        "B's window a minute on is not clearly better than A now: {b_soon} vs {a_now}"
    );

    let mut job = submit(&consumer);
    let held = job.wait_until("the hold", Duration::from_secs(60), |l| {
        l["type"] == "task" && l["waiting_for"]["host"] == b_id.as_str()
    });
    let held_at = Instant::now();
    assert_eq!(held["state"], "queued", "{held:#}");
    let id = held["batch"].as_str().unwrap().to_string();
    // `batch status` reads back while the task is held.
    let status = node_support::batch_status(&consumer, &id);
    assert_eq!(status["tasks"][0]["state"], "queued", "{status:#}");

    // It waits (past `submit`'s 30 s queue limit) and runs on B once B's
    // owner's job has ended: never on A.
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut running_at = None;
    while job.child.try_wait().unwrap().is_none() {
        if let Ok(v) = job.lines.recv_timeout(Duration::from_millis(200)) {
            if v["type"] == "task" && v["state"] == "running" && running_at.is_none() {
                running_at = Some(Instant::now());
            }
            job.seen.push(v);
        }
        assert!(
            Instant::now() < deadline,
            "the held task never finished: {:#?}\n{}",
            job.seen,
            log()
        );
    }
    let (code, lines) = job.finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{lines:#?}\n{}", log());
    ran_on_b_alone(&lines, &a_id, &b_id);
    let (own_code, _) = own.finish(Duration::from_secs(10));
    assert_eq!(own_code, 0, "B's owner's job was cut short");
    let waited = running_at.map(|t| t - held_at);
    eprintln!("held for {waited:?} before it ran on B");
    assert!(
        waited.is_some_and(|w| w > Duration::from_secs(30)),
        "the hold did not outlast submit's queue limit: {waited:?}"
    );
}

/// Asserts that the batch's one task started only on B, that A took no part,
/// and that its result came from B in one attempt with the expected stdout;
/// returns the task's `running` lines.
fn ran_on_b_alone<'a>(lines: &'a [Value], a_id: &str, b_id: &str) -> Vec<&'a Value> {
    let running: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "task" && l["state"] == "running")
        .collect();
    assert!(
        running.iter().all(|l| l["host"] == b_id),
        "started elsewhere than B: {lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l["host"] == a_id),
        "A took part: {lines:#?}"
    );
    let result = lines
        .iter()
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line: {lines:#?}"));
    assert_eq!(result["host"], b_id, "{result:#}");
    assert_eq!(result["attempts"], 1, "{result:#}");
    assert_eq!(result["stdout"], "done\n", "{result:#}");
    running
}
