//! Verified results on a pool of real `gleaner node` processes on
//! 127.0.0.1, one of whose three hosts lies: its guests write a wrong answer
//! (the job script sees that its working directory lies under that host's
//! data dir). With `--replicas 2 --quorum 2` every task lands with the right
//! answer and the liar's copies never land; under `--verify adaptive` the
//! liar is caught and given no more of the batch; its bad reputation
//! survives a restart of the consumer's node. Then: copies that all differ
//! end "no quorum" within the copy bound (or when no host is left to run
//! another), every copy kept aside; a
//! `--validator` accepts copies that differ bit for bit; a restart of the
//! consumer between two copies of a quorum judges the task from the landed
//! copy on disk and the one that lands after.

use crate::node_support;

use std::path::Path;
use std::time::{Duration, Instant};

use node_support::{batch_until, peer, pool, pool_of, NodeFixture};
use serde_json::Value;

const TASKS: u32 = 6;

/// `task * 7` into result.txt, or "wrong" on the liar. The liar is also
/// slower (1.8 s a copy against 0.3 s): the adaptive test bounds the
/// copies it runs before its first one is judged, and on a loaded machine
/// (the suite's binaries run side by side on two cores) an equally fast
/// liar could finish two more while an honest host ran the comparison.
fn script(liar: &Path) -> String {
    let liar = liar.canonicalize().unwrap();
    format!(
        "sleep 0.3; case \"$(pwd -P)\" in {}/*) sleep 1.5; echo wrong ;; *) echo $(( {{}} * 7 )) ;; esac > result.txt; echo task {{}}",
        liar.display()
    )
}

fn submit(consumer: &NodeFixture, verify: &[&str], liar: &Path, out: &Path) -> String {
    submit_script(consumer, verify, &script(liar), TASKS, out)
}

/// Submits `sh -c SCRIPT` over `0..tasks` with `result.txt` as its output.
fn submit_script(
    consumer: &NodeFixture,
    verify: &[&str],
    script: &str,
    tasks: u32,
    out: &Path,
) -> String {
    let range = format!("0..{tasks}");
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
    args.extend_from_slice(&["--", "sh", "-c", script]);
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

fn finished(s: &Value) -> bool {
    s["counts"]["queued"] == 0 && s["counts"]["running"] == 0
}

/// The copies of a task kept aside: host name → its `result.txt`.
fn copies_aside(results: &Path, task: u32) -> Vec<(String, String)> {
    let dir = results
        .parent()
        .unwrap()
        .join("copies")
        .join(task.to_string());
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| {
            let text = std::fs::read_to_string(e.path().join("result.txt")).unwrap_or_default();
            (e.file_name().into_string().unwrap(), text)
        })
        .collect();
    out.sort();
    out
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

/// A floating-point answer whose last digits depend on where the copy ran:
/// every copy differs bit for bit, all are equal to 1e-4.
const FLOAT_SCRIPT: &str =
    "sleep 0.3; printf '0.3333%s\\n' \"$(pwd -P | cksum | cut -d' ' -f1)\" > result.txt";

/// Equivalent when both copies exited alike and their answers are within
/// 1e-3 of each other.
const VALIDATOR: &str = r#"cmp -s "$1/exit_status" "$2/exit_status" || exit 1
a=$(cat "$1/result.txt") && b=$(cat "$2/result.txt") || exit 1
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.001) }'
"#;

#[test]
fn copies_that_all_differ_end_no_quorum_within_the_bound_and_a_validator_accepts_them() {
    let (hosts, consumer) = pool_of(4);
    let peers: Vec<String> = hosts.iter().map(peer).collect();
    // Without a validator no two copies agree: --replicas 2 --quorum 2 grows
    // to its bound, max(K + 2, 2Q - 1) = 4 copies, then fails.
    let bare_out = consumer.dir.join("bare");
    let bare = submit_script(
        &consumer,
        &["--replicas", "2", "--quorum", "2"],
        FLOAT_SCRIPT,
        1,
        &bare_out,
    );
    // A bound the pool cannot reach: --replicas 3 --quorum 3 may grow to
    // max(K + 2, 2Q - 1) = 5 copies, but there are 4 hosts: it fails once
    // every host has run one instead of waiting for a fifth.
    let wide_out = consumer.dir.join("wide");
    let wide = submit_script(
        &consumer,
        &["--replicas", "3", "--quorum", "3"],
        FLOAT_SCRIPT,
        1,
        &wide_out,
    );
    // The same job with a validator comparing the numbers: agreed.
    let validator = consumer.dir.join("validate.sh");
    std::fs::write(&validator, VALIDATOR).unwrap();
    let validator_cmd = format!("sh {}", validator.display());
    let checked_out = consumer.dir.join("checked");
    let checked = submit_script(
        &consumer,
        &[
            "--replicas",
            "2",
            "--quorum",
            "2",
            "--validator",
            &validator_cmd,
        ],
        FLOAT_SCRIPT,
        2,
        &checked_out,
    );

    let status = batch_until(&consumer, &bare, Duration::from_secs(120), finished);
    let t = &status["tasks"][0];
    assert_eq!(t["state"], "failed", "{t:#}");
    let reason = t["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("no quorum"), "{reason}");
    let results = Path::new(status["results_dir"].as_str().unwrap());
    assert!(
        !results.join("0").exists(),
        "a task without a quorum has nothing in the results"
    );
    assert!(!bare_out.join("0").exists(), "nor in the output directory");
    let aside = copies_aside(results, 0);
    assert_eq!(
        aside.len(),
        4,
        "every copy kept aside, no more than the bound: {aside:#?}"
    );
    // `batch status` shows the verification and the four copies, each in an
    // agreement group of its own.
    assert_eq!(status["verification"]["mode"], "replicate", "{status:#}");
    assert_eq!(status["verification"]["quorum"], 2);
    let copies = t["copies"].as_array().expect("the copies are shown");
    assert_eq!(copies.len(), 4, "{t:#}");
    let groups: std::collections::HashSet<u64> = copies
        .iter()
        .map(|c| c["group"].as_u64().unwrap())
        .collect();
    assert_eq!(groups.len(), 4, "{t:#}");
    let answers: std::collections::HashSet<&String> = aside.iter().map(|(_, a)| a).collect();
    assert_eq!(answers.len(), 4, "four different answers: {aside:#?}");
    for (host, answer) in &aside {
        assert!(peers.contains(host), "{host} is no host of the pool");
        assert!(answer.starts_with("0.3333"), "{answer}");
    }

    let status = batch_until(&consumer, &wide, Duration::from_secs(120), finished);
    let t = &status["tasks"][0];
    assert_eq!(t["state"], "failed", "{t:#}");
    let reason = t["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("no quorum") && reason.contains("no other host"),
        "{reason}"
    );
    let results = Path::new(status["results_dir"].as_str().unwrap());
    assert!(!results.join("0").exists() && !wide_out.join("0").exists());
    assert_eq!(
        copies_aside(results, 0).len(),
        4,
        "one copy per host, all kept aside"
    );

    let status = batch_until(&consumer, &checked, Duration::from_secs(120), finished);
    let results = Path::new(status["results_dir"].as_str().unwrap());
    assert_eq!(
        status["verification"]["validator"].as_str(),
        Some(validator_cmd.as_str())
    );
    let text = consumer.run_ok(&["batch", "status", &checked]);
    assert!(
        text.contains("verification: replicate, 2 copies, quorum 2, validator"),
        "{text}"
    );
    assert!(
        text.contains("copies:") && text.contains("accepted"),
        "{text}"
    );
    for task in 0..2 {
        let t = &status["tasks"][task as usize];
        assert_eq!(t["state"], "done", "task {task}: {t:#}");
        let p = provenance(&checked_out, task);
        assert_eq!(p["verification"], "replicate");
        // Status reads the decided copies back from the provenance.
        let shown: Vec<(&str, bool)> = t["copies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["state"].as_str().unwrap(), c["agrees"] == true))
            .collect();
        assert_eq!(shown.len(), 2, "{t:#}");
        assert!(shown.contains(&("accepted", true)), "{t:#}");
        assert!(shown.contains(&("agreed", true)), "{t:#}");
        let agreed = p["agreed"].as_array().unwrap();
        assert_eq!(agreed.len(), 2, "{p:#}");
        assert!(agreed.contains(&p["host"]), "{p:#}");
        let digests: Vec<&Value> = p["copies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["digest"])
            .collect();
        assert_ne!(digests[0], digests[1], "the copies differ bit for bit");
        // The accepted copy is in the results; the other agreeing one stays
        // aside.
        let accepted =
            std::fs::read_to_string(results.join(task.to_string()).join("result.txt")).unwrap();
        let other = agreed.iter().find(|h| **h != p["host"]).unwrap();
        let aside = copies_aside(results, task);
        let kept = aside
            .iter()
            .find(|(h, _)| h == other.as_str().unwrap())
            .map(|(_, a)| a)
            .unwrap_or_else(|| panic!("{other} kept aside: {aside:#?}"));
        assert_ne!(&accepted, kept);
    }
}

#[test]
fn a_consumer_restart_between_two_copies_judges_the_landed_one_from_disk() {
    let (hosts, mut consumer) = pool();
    let dirs: Vec<_> = hosts
        .iter()
        .map(|h| h.dir.canonicalize().unwrap())
        .collect();
    // Each host takes its own time, so two copies land at least 7 s apart;
    // the answer is the same everywhere.
    let script = format!(
        "case \"$(pwd -P)\" in {}/*) sleep 1 ;; {}/*) sleep 8 ;; {}/*) sleep 15 ;; esac; echo $(( {{}} * 7 )) > result.txt",
        dirs[0].display(),
        dirs[1].display(),
        dirs[2].display()
    );
    let out = consumer.dir.join("out");
    let id = submit_script(
        &consumer,
        &["--replicas", "2", "--quorum", "2"],
        &script,
        1,
        &out,
    );
    let status = batch_until(&consumer, &id, Duration::from_secs(60), |s| {
        s["tasks"][0]["state"] == "running"
    });
    let results = std::path::PathBuf::from(status["results_dir"].as_str().unwrap());
    let copies = results.parent().unwrap().join("copies").join("0");
    // Wait for the first copy to land, then stop the consumer at once.
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let landed: Vec<String> = std::fs::read_dir(&copies)
            .map(|d| {
                d.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .filter(|e| e.path().join("exit_status").exists())
                    .map(|e| e.file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(first) = landed.first() {
            assert_eq!(landed.len(), 1, "both copies landed before the restart");
            break first.clone();
        }
        assert!(Instant::now() < deadline, "no copy landed");
        std::thread::sleep(Duration::from_millis(100));
    };
    consumer.stop();
    let still_one = std::fs::read_dir(&copies)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("exit_status").exists())
        .count();
    assert_eq!(still_one, 1, "the second copy must land after the restart");
    assert!(!results.join("0").exists(), "no result yet");
    consumer.start();

    let status = batch_until(&consumer, &id, Duration::from_secs(60), finished);
    let t = &status["tasks"][0];
    assert_eq!(t["state"], "done", "{t:#}\n{}", consumer.log());
    assert_eq!(
        std::fs::read_to_string(results.join("0").join("result.txt"))
            .unwrap()
            .trim(),
        "0"
    );
    let p = provenance(&out, 0);
    let agreed = p["agreed"].as_array().unwrap();
    assert_eq!(agreed.len(), 2, "{p:#}");
    assert!(
        agreed.iter().any(|h| h == first.as_str()),
        "the copy landed before the restart counts: {p:#}"
    );
    assert!(p["disagreed"].as_array().unwrap().is_empty(), "{p:#}");
}
