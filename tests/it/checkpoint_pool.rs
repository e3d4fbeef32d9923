//! Checkpoint-aware migration on pools of real `gleaner node` processes on
//! 127.0.0.1 (mDNS off) with real guests: a CPU-bound task that saves a step
//! counter is killed on its host by scripted owner load (S3), resumes on
//! another host from its checkpoint, and finishes with the right result and
//! a total CPU under 1.5 × its length; a checkpoint over a host's cap is
//! refused with its name while the task goes on; a task without
//! `--checkpoint` gets no checkpoint variable and no checkpoint event.

use crate::node_support;

use std::process::Command;
use std::time::{Duration, Instant};

use node_support::{addr, history, peer, pool_node, started, test_config, JsonStream, NodeFixture};
use serde_json::Value;

/// The checkpointing guest: `STEPS` steps of `WORK` iterations of shell
/// arithmetic (CPU only), accumulating `acc = Σ k² mod 1000003`; after every
/// step it saves `step acc` to `$GLEANER_CHECKPOINT` (temp file, then
/// rename), on start it resumes from it, and on SIGTERM it exits at the next
/// step boundary, its state saved (a flag, so a signal between two
/// assignments cannot tear it). No braces: a task's command is a template.
const GUEST: &str = r#"
i=0; acc=0
if [ -f "$GLEANER_CHECKPOINT" ]; then read i acc < "$GLEANER_CHECKPOINT"; fi
from=$i
echo "resumed from step $from"
stop=
trap 'stop=1' TERM
while [ "$i" -lt "$STEPS" ]; do
  if [ -n "$stop" ]; then exit 143; fi
  j=0; while [ $j -lt "$WORK" ]; do j=$((j+1)); done
  acc=$(( (acc + (i+1)*(i+1)) % 1000003 )); i=$((i+1))
  echo "$i $acc" > "$GLEANER_CHECKPOINT.tmp" && mv "$GLEANER_CHECKPOINT.tmp" "$GLEANER_CHECKPOINT"
done
echo "$acc" > result.txt
echo "done $i steps from step $from"
"#;

/// Runs the guest here for `steps` steps of `work` and returns its CPU seconds
/// (its own and its commands', not other tests' children: see `reap_with_usage`).
fn run_here(steps: u32, work: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new("sh")
        .args(["-c", GUEST])
        .current_dir(dir.path())
        .env("GLEANER_CHECKPOINT", dir.path().join("state"))
        .env("STEPS", steps.to_string())
        .env("WORK", work.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // No bound of its own before: ten minutes is far past the 2 to 4 s it takes.
    let used = crate::reap_with_usage(child, Duration::from_secs(600)).expect("the guest ends");
    assert!(used.status.success());
    used.cpu_secs
}

/// What `submit` says when it refuses before printing a line (the JSON
/// stream drops stderr): the same command's stderr, minus the guest.
fn job_stderr_hint(consumer: &NodeFixture) -> String {
    let out = consumer
        .gleaner()
        .args(["batch", "list", "--json"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn expected_acc(steps: u64) -> u64 {
    (1..=steps).fold(0, |acc, k| (acc + k * k) % 1_000_003)
}

fn hosts(node: &NodeFixture) -> Value {
    serde_json::from_str(&node.run_ok(&["hosts", "--json", "--window", "2h"])).unwrap()
}

fn has_tr(report: &Value, peer: &str) -> bool {
    report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["peer"] == peer && h["tr"].is_number() && h["state"] == "S1")
}

/// Polls `hosts` until every peer has a TR (panics after `limit`).
fn wait_hosts(consumer: &NodeFixture, peers: &[&str], limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let report = hosts(consumer);
        if peers.iter().all(|p| has_tr(&report, p)) {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer never saw {peers:?}: {report:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn result_of(lines: &[Value]) -> &Value {
    lines
        .iter()
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line: {lines:#?}"))
}

fn events(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l["event"].as_str().map(str::to_string))
        .collect()
}

fn batch_of(lines: &[Value]) -> String {
    lines
        .iter()
        .find_map(|l| l["batch"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no batch id: {lines:#?}"))
}

/// A host node, not started: `busy_minutes` of every hour busy in its
/// history, `sustain` seconds to enter S3, `script` as its owner's load.
/// Its jobs get no cgroup: a job cgroup's `cpu.idle` lets a guest run only
/// on an otherwise idle CPU, and this test shares its machine with builds;
/// the guest then competes at nice 0 (in S1) in its own autogroup.
fn host(busy_minutes: u64, sustain: u32, script: &str, flags: &[&str]) -> NodeFixture {
    let config = format!(
        "{}\n[guest]\njob_cgroups = false\n",
        test_config(sustain, "")
    );
    let mut node = NodeFixture::new(&config, Some(script));
    let trace = node.dir.join("history.csv");
    std::fs::write(&trace, history(busy_minutes)).unwrap();
    node.run_ok(&["history", "import", trace.to_str().unwrap()]);
    node.node_args = flags.iter().map(|s| s.to_string()).collect();
    node
}

/// Steps of the task; each is about [`STEP_CPU`] of CPU.
const STEPS: u32 = 48;
const STEP_CPU: f64 = 0.5;
/// Host A's owner: quiet for `QUIET` s, then busy (100 % CPU) for the rest
/// of each `PERIOD` s; with a 3 s sustain, busy means S3. The quiet phase
/// is shorter than the task (L is about 17 s of CPU), so a guest that gets
/// a whole core is still mid-run when the owner comes back.
const PERIOD: u64 = 40;
const QUIET: u64 = 12;

#[test]
fn a_checkpointing_task_killed_by_s3_resumes_on_another_host_under_1_5x_its_cpu() {
    // Calibrate one step to about STEP_CPU seconds of this machine's CPU,
    // then measure the task's length L here (4 steps, scaled).
    let probe = 200_000;
    let cpu = run_here(2, probe) / 2.0;
    let work = ((probe as f64) * STEP_CPU / cpu.max(0.01)) as u64;
    let per_step = run_here(4, work) / 4.0;
    let length = per_step * f64::from(STEPS);
    eprintln!("calibrated: WORK = {work}, {per_step:.3} s of CPU a step, L = {length:.1} s");

    // Host B (less reliable: busy 20 minutes of every hour in its history)
    // and the consumer first; host A (steady history) last, so that its
    // scripted owner load starts from a known instant.
    let b = started(host(20, 60, node_support::QUIET_HOST, &[]));
    let boot = addr(&b);
    let consumer = started(pool_node(None, &["--bootstrap", &boot, "--no-guest"]));
    let b_id = peer(&b);
    wait_hosts(&consumer, &[&b_id], Duration::from_secs(60));

    let mut script = String::new();
    for p in 0..40 {
        script.push_str(&format!(
            "{} 5 8000\n{} 100 8000\n",
            p * PERIOD,
            p * PERIOD + QUIET
        ));
    }
    let mut a = host(0, 3, &script, &["--bootstrap", &boot]);
    let a_started = Instant::now();
    a.start();
    let a_id = peer(&a);
    let report = wait_hosts(&consumer, &[&a_id, &b_id], Duration::from_secs(60));
    assert_eq!(
        report["hosts"][0]["peer"],
        a_id.as_str(),
        "A ranks first: {report:#}"
    );

    // Submit early in one of A's quiet phases, so the owner's load comes
    // back while the task is mid-run.
    loop {
        let phase = a_started.elapsed().as_secs() % PERIOD;
        if (2..5).contains(&phase) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = consumer.dir.join("out");
    let steps = STEPS.to_string();
    let work_env = format!("WORK={work}");
    let steps_env = format!("STEPS={steps}");
    let job: JsonStream = consumer.json_stream(
        "submit",
        &[
            "--runtime",
            "2h",
            "--limit",
            "10m",
            "--checkpoint",
            "state.ckpt",
            "--checkpoint-cost",
            "1s",
            "--env",
            &work_env,
            "--env",
            &steps_env,
            "--output",
            "result.txt",
            "--output-dir",
            out.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            GUEST,
        ],
    );
    let log = || {
        format!(
            "A:\n{}\nB:\n{}\nconsumer:\n{}",
            a.log(),
            b.log(),
            consumer.log()
        )
    };
    let mut job = job;
    let deadline = Instant::now() + Duration::from_secs(300);
    while job.child.try_wait().unwrap().is_none() {
        if let Ok(v) = job.lines.recv_timeout(Duration::from_millis(200)) {
            eprintln!("submit: {v}");
            job.seen.push(v);
        }
        assert!(
            Instant::now() < deadline,
            "the task did not end: {:#?}\n{}",
            job.seen,
            log()
        );
    }
    let (code, lines) = job.finish(Duration::from_secs(5));
    if lines.is_empty() {
        let out = job_stderr_hint(&consumer);
        panic!("submit printed nothing (exit {code}): {out}");
    }
    assert_eq!(code, 0, "{lines:#?}\n{}", log());

    // It ran on A, was killed there for S3, and finished on B.
    let ran_on: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "task" && l["state"] == "running")
        .filter_map(|l| l["host"].as_str())
        .collect();
    assert!(
        ran_on.contains(&a_id.as_str()) && ran_on.contains(&b_id.as_str()),
        "{ran_on:?}"
    );
    let done = result_of(&lines);
    assert_eq!(done["host"], b_id.as_str(), "{done:#}");
    assert_eq!(done["attempts"], 2, "{done:#}");
    let evs = events(&lines);
    assert!(
        evs.iter().any(|e| e.contains("killed by the host (S3")),
        "{evs:#?}"
    );
    let saved: Vec<&String> = evs
        .iter()
        .filter(|e| e.starts_with("checkpoint saved"))
        .collect();
    assert!(
        !saved.is_empty(),
        "no checkpoint reached the consumer: {evs:#?}"
    );

    // The result is right, and B resumed from A's checkpoint, not from zero.
    let result = std::fs::read_to_string(out.join("result.txt")).unwrap();
    assert_eq!(result.trim(), expected_acc(u64::from(STEPS)).to_string());
    let stdout = done["stdout"].as_str().unwrap_or_default();
    let from: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("resumed from step "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no resume line in {stdout:?}"));
    assert!(from > 0 && from < STEPS, "resumed from step {from}");

    // Total CPU over both hosts, as they measured it.
    let id = batch_of(&lines);
    let status: Value =
        serde_json::from_str(&consumer.run_ok(&["batch", "status", &id, "--json"])).unwrap();
    let total = status["tasks"][0]["cpu_secs"]
        .as_f64()
        .unwrap_or_else(|| panic!("no cpu_secs: {status:#}"));
    let ratio = total / length;
    eprintln!(
        "checkpoint migration: resumed from step {from}/{STEPS}; total CPU {total:.1} s over L = {length:.1} s = {ratio:.2} L; {}",
        saved.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("; ")
    );
    assert!(
        total > 0.5 * length,
        "CPU not measured: {total} s of {length} s"
    );
    assert!(ratio < 1.5, "total CPU {total:.1} s is {ratio:.2} × L");
    assert_eq!(
        status["tasks"][0]["checkpoint_bytes"]
            .as_u64()
            .map(|b| b > 0),
        Some(true)
    );
}

#[test]
fn an_oversized_checkpoint_is_refused_by_name_and_without_checkpoint_nothing_changes() {
    let mut host = NodeFixture::new(
        &format!("{}\n[guest]\nmax_checkpoint_mib = 1\n", test_config(60, "")),
        Some(node_support::QUIET_HOST),
    );
    let trace = host.dir.join("history.csv");
    std::fs::write(&trace, history(0)).unwrap();
    host.run_ok(&["history", "import", trace.to_str().unwrap()]);
    host.start();
    let host_id = peer(&host);
    let consumer = started(pool_node(
        None,
        &["--bootstrap", &addr(&host), "--no-guest"],
    ));
    wait_hosts(&consumer, &[&host_id], Duration::from_secs(60));

    // 2 MiB over a 1 MiB cap: refused with the file's name, the job goes on.
    let (code, lines) = consumer
        .json_stream(
            "submit",
            &[
                "--checkpoint",
                "big.ckpt",
                "--",
                "sh",
                "-c",
                "head -c 2097152 /dev/zero > big.ckpt; sleep 5; echo went on",
            ],
        )
        .finish(Duration::from_secs(120));
    assert_eq!(code, 0, "{lines:#?}\n{}", host.log());
    let evs = events(&lines);
    assert!(
        evs.iter().any(|e| e.starts_with("checkpoint refused")
            && e.contains("big.ckpt")
            && e.contains("2097152 bytes is over this host's cap of 1048576")),
        "{evs:#?}"
    );
    assert!(
        !evs.iter().any(|e| e.starts_with("checkpoint saved")),
        "{evs:#?}"
    );
    assert_eq!(result_of(&lines)["stdout"], "went on\n");

    // Without --checkpoint: no variable, no grace, no checkpoint event.
    let (code, lines) = consumer
        .json_stream(
            "submit",
            &[
                "--",
                "sh",
                "-c",
                "env | grep GLEANER_CHECKPOINT || echo none",
            ],
        )
        .finish(Duration::from_secs(120));
    assert_eq!(code, 0, "{lines:#?}");
    assert_eq!(result_of(&lines)["stdout"], "none\n");
    assert!(
        !events(&lines).iter().any(|e| e.contains("checkpoint")),
        "{lines:#?}"
    );
    let id = batch_of(&lines);
    let status: Value =
        serde_json::from_str(&consumer.run_ok(&["batch", "status", &id, "--json"])).unwrap();
    assert!(
        status["tasks"][0]["checkpoint_bytes"].is_null(),
        "{status:#}"
    );
    assert!(
        status["tasks"][0]["cpu_secs"].is_number(),
        "usage is reported for every task: {status:#}"
    );
}
