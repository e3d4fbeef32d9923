//! Verified results on a pool of real `gleaner node` processes on
//! 127.0.0.1, one of whose three hosts lies: its guests write a wrong answer
//! (the job script sees that its working directory lies under that host's
//! data dir). With `--replicas 2 --quorum 2` every task lands with the right
//! answer and the liar's copies never land; under `--verify adaptive` the
//! liar is caught and given no more of the batch; its bad reputation
//! survives a restart of the consumer's node.

mod node_support;

use std::path::Path;
use std::time::{Duration, Instant};

use node_support::{batch_until, peer, pool, NodeFixture};
use serde_json::Value;

const TASKS: u32 = 6;

/// `task * 7` into result.txt, or "wrong" on the liar.
fn script(liar: &Path) -> String {
    let liar = liar.canonicalize().unwrap();
    format!(
        "sleep 0.3; case \"$(pwd -P)\" in {}/*) echo wrong ;; *) echo $(( {{}} * 7 )) ;; esac > result.txt; echo task {{}}",
        liar.display()
    )
}

fn submit(consumer: &NodeFixture, verify: &[&str], liar: &Path, out: &Path) -> String {
    let script = script(liar);
    let range = format!("0..{TASKS}");
    let mut args = vec![
        "--json",
        "batch",
        "submit",
        "--range",
        &range,
        "--runtime",
        "1m",
        "--output",
        "result.txt",
        "--output-dir",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(verify);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let answer = consumer.run_ok(&args);
    serde_json::from_str::<Value>(&answer).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn provenance(out: &Path, task: u32) -> Value {
    let text = std::fs::read_to_string(out.join(task.to_string()).join("provenance.json"))
        .unwrap_or_else(|e| panic!("task {task}: no provenance.json: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// Every task done, its result the right answer, from hosts other than
/// the liar; returns the tasks the liar ran a copy of.
fn check_results(out: &Path, status: &Value, liar: &str) -> usize {
    let tasks = status["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), TASKS as usize);
    let mut liar_ran = 0;
    for task in 0..TASKS {
        let t = &tasks[task as usize];
        assert_eq!(t["state"], "done", "task {task}: {t:#}");
        assert_ne!(t["host"], liar, "task {task} landed from the liar");
        let answer =
            std::fs::read_to_string(out.join(task.to_string()).join("result.txt")).unwrap();
        assert_eq!(answer.trim(), (task * 7).to_string(), "task {task}");
        let p = provenance(out, task);
        assert_ne!(p["host"], liar);
        assert!(
            !p["agreed"].as_array().unwrap().iter().any(|h| h == liar),
            "task {task}: {p:#}"
        );
        if p["copies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["host"] == liar)
        {
            liar_ran += 1;
            assert!(
                p["disagreed"].as_array().unwrap().iter().any(|h| h == liar),
                "{p:#}"
            );
        }
    }
    liar_ran
}

fn host_report(consumer: &NodeFixture, peer: &str) -> Option<Value> {
    let report: Value =
        serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
    report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["peer"] == peer)
        .cloned()
}

#[test]
fn with_two_replicas_and_a_quorum_of_two_the_liars_results_never_land() {
    let (hosts, consumer) = pool();
    let liar = peer(&hosts[1]);
    let out = consumer.dir.join("out");
    let id = submit(
        &consumer,
        &["--replicas", "2", "--quorum", "2"],
        &hosts[1].dir,
        &out,
    );
    let status = batch_until(&consumer, &id, Duration::from_secs(180), |s| {
        s["counts"]["queued"] == 0 && s["counts"]["running"] == 0
    });
    let liar_ran = check_results(&out, &status, &liar);
    assert!(
        liar_ran >= 1,
        "the liar never ran a copy: the test proves nothing"
    );
    // The node's own results directory holds only accepted copies; the
    // liar's are kept aside beside it.
    let results = Path::new(status["results_dir"].as_str().unwrap());
    for task in 0..TASKS {
        let answer =
            std::fs::read_to_string(results.join(task.to_string()).join("result.txt")).unwrap();
        assert_eq!(answer.trim(), (task * 7).to_string());
    }
    let aside = results.parent().unwrap().join("copies");
    let kept = (0..TASKS)
        .filter(|t| aside.join(t.to_string()).join(&liar).exists())
        .count();
    assert_eq!(kept, liar_ran, "every copy of the liar is kept aside");
    let report = host_report(&consumer, &liar).expect("the liar is listed");
    assert!(report["invalid"].as_u64().unwrap() >= 1, "{report:#}");
    assert_eq!(report["streak"], 0);
}

#[test]
fn adaptive_replication_catches_the_liar_avoids_it_and_remembers_it_across_a_restart() {
    let (hosts, mut consumer) = pool();
    let liar = peer(&hosts[1]);
    let out = consumer.dir.join("out");
    let id = submit(&consumer, &["--verify", "adaptive"], &hosts[1].dir, &out);
    let status = batch_until(&consumer, &id, Duration::from_secs(180), |s| {
        s["counts"]["queued"] == 0 && s["counts"]["running"] == 0
    });
    let liar_ran = check_results(&out, &status, &liar);
    // Caught at its first compared result; at most the copy it was handed
    // while that one was being judged follows.
    assert!(
        (1..=2).contains(&liar_ran),
        "the liar ran copies of {liar_ran} tasks"
    );
    let before = host_report(&consumer, &liar).expect("the liar is listed");
    assert!(before["invalid"].as_u64().unwrap() >= 1, "{before:#}");

    consumer.stop();
    consumer.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(after) = host_report(&consumer, &liar) {
            assert_eq!(after["invalid"], before["invalid"], "{after:#}");
            assert_eq!(after["valid"], before["valid"]);
            break;
        }
        assert!(Instant::now() < deadline, "the liar was not found again");
        std::thread::sleep(Duration::from_millis(300));
    }
    // An honest host's checked results survived too.
    let honest = host_report(&consumer, &peer(&hosts[0])).expect("listed");
    assert!(honest["valid"].as_u64().unwrap() >= 1, "{honest:#}");
}
