//! Batches on pools of real `gleaner node` processes on 127.0.0.1: a sweep of
//! tasks with params and a shared input on three hosts, a host and then the
//! consumer's node killed with SIGKILL mid-batch, every result landing
//! exactly once; bad batches refused before anything is sent; the
//! estimate of each task's end before and during a batch; cancel; a
//! task whose deadline is at risk getting a second copy that wins. Every
//! landed result, unverified too, carries `provenance.json` naming its host.

use crate::node_support;

use std::process::Output;
use std::time::{Duration, Instant};

use node_support::{batch_status, batch_until, pool, pool_node, NodeFixture};
use serde_json::Value;

fn gleaner(node: &NodeFixture, args: &[&str]) -> Output {
    node.gleaner().args(args).output().unwrap()
}

const TASKS: usize = 50;
/// The input every task of the sweep shares.
const SHARED_BYTES: usize = 64 << 20;

#[test]
fn a_sweep_completes_once_through_a_host_and_the_consumer_killed_mid_batch() {
    let (mut hosts, mut consumer) = pool();
    let work = consumer.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Every task reads the shared 64 MiB input and its own row.
    let shared = work.join("shared.bin");
    std::fs::write(&shared, vec![7u8; SHARED_BYTES]).unwrap();
    let mut csv = String::from("alpha,label\n");
    for i in 0..TASKS {
        csv.push_str(&format!("{},t{i}\n", i * 3));
    }
    let params = work.join("sweep.csv");
    std::fs::write(&params, csv).unwrap();
    let results = work.join("results");
    let mut stream = consumer.json_stream(
        "batch",
        &[
            "submit",
            "--wait",
            "--name",
            "sweep",
            "--runtime",
            "1m",
            "--params",
            params.to_str().unwrap(),
            "--input",
            &format!("{}=data/shared.bin", shared.display()),
            "--output",
            "result.txt",
            "--output-dir",
            results.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "sleep 0.5; echo {label} $(( {alpha} * 2 )) $(wc -c < data/shared.bin) > result.txt",
        ],
    );
    let first = stream.wait_until("a task line", Duration::from_secs(120), |l| {
        l["type"] == "task"
    });
    let id = first["batch"].as_str().unwrap().to_string();
    assert_eq!(
        batch_status(&consumer, &id)["tasks"]
            .as_array()
            .unwrap()
            .len(),
        TASKS
    );

    // A host dies with some tasks done: its running task goes elsewhere.
    batch_until(&consumer, &id, Duration::from_secs(120), |s| {
        s["counts"]["done"].as_u64().unwrap() >= 5
    });
    hosts[2].kill9();
    // Then the consumer's own node, mid-batch, and back.
    batch_until(&consumer, &id, Duration::from_secs(120), |s| {
        s["counts"]["done"].as_u64().unwrap() >= 15
    });
    consumer.kill9();
    let (_, before_kill) = stream.finish(Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    consumer.start();
    let waited = gleaner(&consumer, &["--json", "batch", "wait", &id]);
    assert_eq!(
        waited.status.code(),
        Some(0),
        "batch wait: {}\n{}",
        String::from_utf8_lossy(&waited.stderr),
        consumer.log()
    );
    let last: Value = serde_json::from_str(
        String::from_utf8_lossy(&waited.stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["type"], "batch");
    assert_eq!(last["counts"]["done"], TASKS, "{last:#}");

    // The shared input crossed to each host at most once: every later task
    // there read it from the host's cache (the hosts say so in their
    // "inputs ready" events, which `batch wait --json` relays).
    let after_restart: Vec<Value> = String::from_utf8_lossy(&waited.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let mut fetches: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
    for l in before_kill.iter().chain(&after_restart) {
        let Some(event) = l["event"].as_str() else {
            continue;
        };
        let host = l["host"].as_str().unwrap_or_default().to_string();
        let entry = fetches.entry(host).or_default();
        if event
            == format!("inputs ready: {SHARED_BYTES} bytes fetched, 0 bytes from the host's cache")
        {
            entry.0 += 1;
        } else if event
            == format!("inputs ready: 0 bytes fetched, {SHARED_BYTES} bytes from the host's cache")
        {
            entry.1 += 1;
        } else {
            assert!(!event.starts_with("inputs ready"), "{event}");
        }
    }
    eprintln!("shared input per host (fetched, from cache): {fetches:?}");
    assert!(
        fetches.values().all(|(fetched, _)| *fetched <= 1),
        "the shared input crossed to a host more than once: {fetches:?}"
    );
    let (fetched, cached): (u32, u32) = fetches
        .values()
        .fold((0, 0), |(f, c), (a, b)| (f + a, c + b));
    assert!(
        fetched >= 1 && cached >= 10,
        "seen {fetched} fetches and {cached} cache hits: {fetches:?}"
    );

    // Every task's result, once, and nothing half-written beside them.
    let mut names: Vec<String> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_by_key(|n| n.parse::<usize>().unwrap_or(usize::MAX));
    let expected: Vec<String> = (0..TASKS).map(|i| i.to_string()).collect();
    assert_eq!(names, expected, "one directory per task and nothing else");
    for i in 0..TASKS {
        let dir = results.join(i.to_string());
        let text = std::fs::read_to_string(dir.join("result.txt")).unwrap();
        assert_eq!(
            text.trim(),
            format!("t{i} {} {}", i * 6, SHARED_BYTES),
            "task {i}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("exit_status")).unwrap(),
            "0\n"
        );
        assert!(dir.join("stdout").exists() && dir.join("stderr").exists());
    }
    // An unverified result carries provenance too: the host that produced
    // it (the one the batch's record names), its digest, nobody agreeing.
    let status = batch_status(&consumer, &id);
    let peers: Vec<String> = hosts.iter().map(node_support::peer).collect();
    for i in 0..TASKS {
        let text = std::fs::read_to_string(results.join(i.to_string()).join("provenance.json"))
            .unwrap_or_else(|e| panic!("task {i}: no provenance.json: {e}"));
        let p: Value = serde_json::from_str(&text).unwrap();
        let host = &status["tasks"][i]["host"];
        assert_eq!(p["verification"], "none", "{p:#}");
        assert_eq!(p["task"], i, "{p:#}");
        assert_eq!(&p["host"], host, "task {i}: {p:#}");
        assert!(
            peers.iter().any(|h| h == host),
            "{host} is a host of the pool"
        );
        assert_eq!(p["agreed"], serde_json::json!([]), "{p:#}");
        let copies = p["copies"].as_array().unwrap();
        assert_eq!(copies.len(), 1, "{p:#}");
        assert_eq!(&copies[0]["host"], host);
        assert_eq!(copies[0]["exit_status"], 0);
        assert_eq!(copies[0]["digest"].as_str().unwrap().len(), 64);
    }
    // `batch results` copies what landed again, idempotently.
    let again = work.join("again");
    for _ in 0..2 {
        consumer.run_ok(&["batch", "results", &id, "--out", again.to_str().unwrap()]);
    }
    assert_eq!(std::fs::read_dir(&again).unwrap().count(), TASKS);

    // What the hosts claimed against what landed, as `hosts` shows it from
    // the consumer's record (kept through its kill -9): each claimed TR in
    // its bin of the reliability curve, the bin's mean claim inside it.
    let report: Value =
        serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
    let mut claims = 0;
    for host in report["hosts"].as_array().unwrap() {
        for bin in host["reliability"].as_array().unwrap() {
            let n = bin["claims"].as_u64().unwrap();
            let (from, to) = (bin["from"].as_f64().unwrap(), bin["to"].as_f64().unwrap());
            let mean = bin["mean_claim"].as_f64().unwrap();
            let finished = bin["finished"].as_f64().unwrap();
            assert!(n >= 1 && (0.0..=1.0).contains(&finished), "{bin}");
            assert!(from <= mean && mean <= to, "{bin}");
            claims += n;
        }
    }
    assert!(claims >= 1, "no claim in any host's curve: {report:#}");
}

#[test]
fn bad_batches_are_refused_with_the_input_named_before_anything_is_sent() {
    let mut consumer = pool_node(None, &["--no-guest"]);
    consumer.start();
    let dir = consumer.dir.clone();
    let csv = dir.join("p.csv");
    std::fs::write(&csv, "a,b\n1,2\n3\n").unwrap();
    let good_csv = dir.join("good.csv");
    std::fs::write(&good_csv, "a\n1\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--input".into(),
                dir.join("missing.bin").display().to_string(),
            ],
            "missing.bin",
        ),
        (vec!["--params".into(), csv.display().to_string()], "line 3"),
        (
            vec![
                "--params".into(),
                good_csv.display().to_string(),
                "--".into(),
                "echo".into(),
                "{nope}".into(),
            ],
            "{nope} is not a column",
        ),
        (vec!["--output".into(), "../escape".into()], "../escape"),
        (vec!["--range".into(), "0..1000001".into()], "at most"),
    ];
    for (mut args, needle) in cases {
        if !args.contains(&"--".to_string()) {
            args.extend(["--".into(), "true".into()]);
        }
        let mut full = vec!["batch".to_string(), "submit".into()];
        full.extend(args.clone());
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let out = gleaner(&consumer, &refs);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = gleaner(&consumer, &["batch", "status", "b123"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no batch b123"));
    let out = gleaner(&consumer, &["batch", "status", "nonsense"]);
    assert!(!out.status.success());
    let list: Value = serde_json::from_str(&consumer.run_ok(&["batch", "list", "--json"])).unwrap();
    assert_eq!(list, Value::Array(vec![]), "nothing was queued");
}

#[test]
fn cancel_kills_running_copies_and_marks_the_rest_then_remove_forgets_it() {
    let (hosts, consumer) = pool();
    // Before anything is sent: the estimate gives every task its end, the
    // first three (one per host) a round before the other five.
    let work = ["--range", "0..8", "--runtime", "1m", "--", "sleep", "60"];
    let estimate: Value = serde_json::from_str(
        &consumer.run_ok(&[&["--json", "batch", "estimate"][..], &work].concat()),
    )
    .unwrap();
    let ends: Vec<(u64, f64)> = estimate["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no task ends: {estimate:#}"))
        .iter()
        .map(|t| {
            (
                t["task"].as_u64().unwrap(),
                t["end_p50_secs"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends.iter().map(|e| e.0).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>(),
        "{estimate:#}"
    );
    let last = estimate["makespan_p50_secs"].as_f64().unwrap();
    assert!(ends[0].1 > 0.0 && ends[0].1 < ends[7].1, "{estimate:#}");
    assert!(ends.iter().all(|e| e.1 <= last + 1e-6), "{estimate:#}");
    let text = consumer.run_ok(&[&["batch", "estimate"][..], &work].concat());
    assert!(text.contains("ends in"), "{text}");
    // Its output directory in the node's temp dir: the default is under
    // the working directory, which for a test is the checkout.
    let results = consumer.dir.join("results");
    let submit = [
        "--json",
        "batch",
        "submit",
        "--output-dir",
        results.to_str().unwrap(),
    ];
    let out = consumer.run_ok(&[&submit[..], &work].concat());
    let id = serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let s = batch_until(&consumer, &id, Duration::from_secs(60), |s| {
        s["counts"]["running"] == 3 && s["estimate"].is_object()
    });
    // Live in `batch status`: the end of each task not ended, the running
    // ones before any waiting one.
    let etas = s["estimate"]["tasks"].as_array().unwrap();
    assert_eq!(etas.len(), 8, "{s:#}");
    let end_of = |state: &str| -> Vec<f64> {
        etas.iter()
            .filter(|e| s["tasks"][e["task"].as_u64().unwrap() as usize]["state"] == state)
            .map(|e| e["end_p50_secs"].as_f64().unwrap())
            .collect()
    };
    let (running, queued) = (end_of("running"), end_of("queued"));
    assert_eq!((running.len(), queued.len()), (3, 5), "{s:#}");
    let latest_running = running.iter().copied().fold(0.0, f64::max);
    assert!(
        queued.iter().all(|q| *q > latest_running),
        "a waiting task ends before a running one: {s:#}"
    );
    // Wait until every host runs its guest.
    let running_guests = || {
        hosts
            .iter()
            .filter(|h| !h.status()["guest"].is_null())
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while running_guests() < 3 {
        assert!(Instant::now() < deadline, "the hosts never ran the tasks");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A batch with running tasks cannot be forgotten.
    let refused = gleaner(&consumer, &["batch", "remove", &id]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("batch cancel"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    consumer.run_ok(&["batch", "cancel", &id]);
    let s = batch_until(&consumer, &id, Duration::from_secs(30), |s| {
        s["counts"]["cancelled"] == 8
    });
    assert_eq!(s["cancelled"], true);
    let guest_gone = |h: &NodeFixture| {
        let g = &h.status()["guest"];
        g.is_null() || g["phase"] == "exited"
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !hosts.iter().all(guest_gone) {
        assert!(Instant::now() < deadline, "a cancelled copy still runs");
        std::thread::sleep(Duration::from_millis(200));
    }
    let waited = gleaner(&consumer, &["batch", "wait", &id]);
    assert_eq!(
        waited.status.code(),
        Some(75),
        "cancelled tasks did not run"
    );
    // Ended, it is forgotten with its node-side results, across a restart.
    let node_copy = consumer.data_dir().join("batches").join(&id);
    assert!(node_copy.exists());
    consumer.run_ok(&["batch", "remove", &id]);
    let list = consumer.run_ok(&["--json", "batch", "list"]);
    assert!(!list.contains(&id), "{list}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while node_copy.exists() {
        assert!(Instant::now() < deadline, "{} stayed", node_copy.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut consumer = consumer;
    consumer.stop();
    consumer.start();
    let list = consumer.run_ok(&["--json", "batch", "list"]);
    assert!(!list.contains(&id), "back after a restart: {list}");
    let again = gleaner(&consumer, &["batch", "status", &id]);
    assert!(!again.status.success());
}

#[test]
fn a_task_whose_deadline_is_at_risk_gets_a_second_copy_and_the_first_result_wins() {
    let (hosts, consumer) = pool();
    let work = consumer.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // Declared 2 s; a copy that starts in the first 15 s hangs, a later
    // one takes a second and writes when it started.
    let slow_until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 15;
    let out = consumer.run_ok(&[
        "--json",
        "batch",
        "submit",
        "--runtime",
        "2s",
        "--limit",
        "5m",
        "--deadline",
        "60s",
        "--env",
        &format!("SLOW_UNTIL={slow_until}"),
        "--output",
        "started.txt",
        "--output-dir",
        work.join("results").to_str().unwrap(),
        "--",
        "sh",
        "-c",
        r#"now=$(date +%s); if [ "$now" -lt "$SLOW_UNTIL" ]; then sleep 300; else sleep 1; fi; echo "$now" > started.txt"#,
    ]);
    let id = serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let started = Instant::now();
    let s = batch_until(&consumer, &id, Duration::from_secs(90), |s| {
        s["counts"]["done"] == 1 || s["counts"]["failed"] == 1
    });
    let took = started.elapsed();
    let task = &s["tasks"][0];
    assert_eq!(task["state"], "done", "{s:#}\n{}", consumer.log());
    assert_eq!(task["attempts"], 2, "one second copy: {s:#}");
    let landed: u64 = std::fs::read_to_string(work.join("results/0/started.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        landed >= slow_until,
        "the second copy's result landed, not the hanging one's: it started at {landed}"
    );
    eprintln!("deadline 60 s: done after {took:?} by the second copy");
    assert!(
        took < Duration::from_secs(75),
        "done after {took:?}, past the deadline"
    );
    // The losing copy is killed on its host.
    let guest_gone = |h: &NodeFixture| {
        let g = &h.status()["guest"];
        g.is_null() || g["phase"] == "exited"
    };
    let until = Instant::now() + Duration::from_secs(30);
    while !hosts.iter().all(guest_gone) {
        assert!(Instant::now() < until, "the losing copy still runs");
        std::thread::sleep(Duration::from_millis(200));
    }
}
