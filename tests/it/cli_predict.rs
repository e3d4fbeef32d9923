//! `gleaner predict` and `gleaner trace synth` run as a user would: the
//! built binary on the shared traces and on files made in a temp dir.

use assert_cmd::Command;
use gleaner::model::baselines::{method_names, DEFAULT_METHOD};
use predicates::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A shared trace: `../shared/traces` next to the main checkout, or two
/// levels up from a worktree under `wt/` (as the benches look for it).
fn shared(rel: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    ["../shared/traces", "../../shared/traces"]
        .iter()
        .map(|dir| root.join(dir).join(rel))
        .find(|p| p.is_file())
        .unwrap_or_else(|| root.join("../shared/traces").join(rel))
}

fn gleaner() -> Command {
    let mut cmd = Command::cargo_bin("gleaner").expect("the gleaner binary is built");
    cmd.env_remove("RUST_LOG").env_remove("GLEANER_LOG");
    cmd
}

fn predict_json(trace: &Path, extra: &[&str]) -> Value {
    let out = gleaner()
        .arg("predict")
        .arg("--trace")
        .arg(trace)
        .args(extra)
        .arg("--json")
        .output()
        .expect("gleaner runs");
    assert!(
        out.status.success(),
        "{}: {}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON value")
}

/// Last row time of a trace file, read directly (not through gleaner).
fn last_time(trace: &Path) -> i64 {
    let text = std::fs::read_to_string(trace).expect("readable");
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .expect("rows");
    line.split(',').next().unwrap().parse().unwrap()
}

fn check_report(v: &Value) {
    let tr = v["tr"].as_f64().expect("tr");
    assert!((0.0..=1.0).contains(&tr), "tr = {tr}");
    let by_cause = v["fail_by_cause"].as_object().expect("fail_by_cause");
    // Only a method that does not split failures by cause (rippp) leaves it empty.
    if by_cause.is_empty() {
        assert_eq!(v["method"], "rippp", "{v}");
    } else {
        let causes: f64 = ["S3", "S4", "S5"]
            .iter()
            .map(|c| by_cause[*c].as_f64().expect("cause"))
            .sum();
        assert!(
            (tr + causes - 1.0).abs() < 1e-9,
            "{}: tr {tr} + causes {causes} != 1",
            v["method"]
        );
    }
    assert!(v["elapsed_us"].as_u64().is_some());
    let init = v["init_state"].as_str().unwrap();
    assert!(["S1", "S2", "S3", "S4", "S5", "unknown"].contains(&init));
    assert_eq!(
        v["days_used"].as_u64().unwrap() as usize,
        v["history_days"].as_array().unwrap().len()
    );
}

#[test]
fn lab_1_ten_hour_window_at_six_second_steps() {
    // Monday 2025-09-29 08:00 EDT, inside the trace.
    let v = predict_json(
        &shared("synthetic/lab-1.csv"),
        &["--at", "2025-09-29T08:00:00-04:00", "--window", "10h"],
    );
    check_report(&v);
    assert_eq!(v["steps"], 6000);
    assert_eq!(v["step_s"], 6);
    assert_eq!(v["window_s"], 36000);
    assert_eq!(v["days_used"], 10);
    assert_eq!(v["method"], DEFAULT_METHOD);
    assert_eq!(v["history_days"][0], "2025-09-26"); // the Friday before
    let init = v["init_state"].as_str().unwrap();
    assert!(init.starts_with('S'), "the trace covers 08:00: {init}");
}

#[test]
fn every_shared_trace_predicts_at_its_last_row() {
    for rel in [
        "synthetic/lab-1.csv",
        "synthetic/lab-2.csv",
        "real/bitbrains-60.csv",
        "real/bitbrains-72.csv",
        "real/bitbrains-363.csv",
        "real/bitbrains-407.csv",
        "real/lanl-1.csv",
        "real/lanl-21.csv",
    ] {
        let path = shared(rel);
        let at = last_time(&path) - 4 * 3600;
        for method in ["paper", "km", DEFAULT_METHOD] {
            let v = predict_json(
                &path,
                &[
                    "--at",
                    &at.to_string(),
                    "--window",
                    "3h",
                    "--method",
                    method,
                ],
            );
            check_report(&v);
            assert_eq!(v["method"], method);
        }
    }
}

#[test]
fn every_registry_method_answers_with_the_same_report() {
    let path = shared("real/bitbrains-60.csv");
    let at = (last_time(&path) - 8 * 3600).to_string();
    let base = &["--at", at.as_str(), "--window", "3h"];
    let default = predict_json(&path, base);
    check_report(&default);
    assert_eq!(default["method"], DEFAULT_METHOD);
    for method in method_names() {
        let v = predict_json(&path, &[&base[..], &["--method", method]].concat());
        check_report(&v);
        assert_eq!(v["method"], method);
        // The context does not depend on the method.
        for key in [
            "init_state",
            "days_used",
            "history_days",
            "window_s",
            "step_s",
            "steps",
        ] {
            assert_eq!(v[key], default[key], "{method}: {key}");
        }
        if method == DEFAULT_METHOD {
            assert_eq!(v["tr"], default["tr"]);
        }
    }
    // `--age` is km+age, also without --method; it applies to the kernel only.
    let aged = predict_json(&path, &[&base[..], &["--age"]].concat());
    assert_eq!(aged["method"], "km+age");
    assert!(aged["age_steps"].is_u64(), "{aged}");
    let named = predict_json(&path, &[&base[..], &["--method", "km+age"]].concat());
    assert_eq!(named["tr"], aged["tr"]);
    let paper = predict_json(
        &path,
        &[&base[..], &["--method", "paper", "--age"]].concat(),
    );
    assert_eq!(paper["method"], "paper+age");
    gleaner()
        .arg("predict")
        .arg("--trace")
        .arg(&path)
        .args(base)
        .args(["--method", "freq", "--age"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--age"));
}

#[test]
fn after_the_record_ends_the_start_state_is_unknown() {
    let path = shared("real/bitbrains-72.csv");
    let at = last_time(&path) + 86_400;
    let v = predict_json(&path, &["--at", &at.to_string(), "--window", "90m"]);
    check_report(&v);
    assert_eq!(v["init_state"], "unknown");
    let shares: f64 = v["init_distribution"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_f64().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-9);
}

#[test]
fn memory_requirement_can_only_lower_reliability() {
    let path = shared("real/bitbrains-363.csv");
    let at = (last_time(&path) - 86_400).to_string();
    let base = predict_json(&path, &["--at", &at, "--window", "5h"]);
    let hungry = predict_json(&path, &["--at", &at, "--window", "5h", "--mem", "200"]);
    assert!(hungry["tr"].as_f64().unwrap() <= base["tr"].as_f64().unwrap() + 1e-12);
    assert_eq!(hungry["mem_mib"], 200);
}

#[test]
fn the_plain_answer_is_one_sentence() {
    gleaner()
        .args(["predict", "--trace"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bitbrains-60-3weeks.csv"))
        .args(["--at", "2013-09-24T07:20:00+02:00", "--window", "3h"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "% chance that a guest job running 3h",
        ))
        .stdout(predicate::str::contains("learned from 10 past weekdays"));
}

#[test]
fn malformed_trace_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    std::fs::write(
        &path,
        "# gleaner-trace v1\ntime,cpu,free_mib,up\n100,5,512,1\n106,five,512,1\n",
    )
    .unwrap();
    gleaner()
        .args(["predict", "--window", "1h", "--trace"])
        .arg(&path)
        .assert()
        .failure()
        .code(1)
        .stderr(predicate::str::contains("bad.csv:4:"))
        .stderr(predicate::str::contains("cpu"));
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let trace = shared("real/lanl-1.csv");
    for (args, says) in [
        (vec!["--window", "0"], "positive"),
        (vec!["--window", "3x"], "unit"),
        (vec!["--window", "3h", "--method", "magic"], "paper"),
        (vec!["--window", "3h", "--at", "soon"], "RFC 3339"),
        (vec!["--window", "3h", "--th1", "90"], "th1"),
        (vec!["--window", "3h", "--days", "0"], "history days"),
    ] {
        gleaner()
            .arg("predict")
            .arg("--trace")
            .arg(&trace)
            .args(&args)
            .assert()
            .failure()
            .stderr(predicate::str::contains(says));
    }
}

#[test]
fn synth_is_deterministic_and_predictable_from() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    for out in [&a, &b] {
        gleaner()
            .args([
                "trace",
                "synth",
                "--seed",
                "9",
                "--days",
                "15",
                "--tz",
                "Europe/Berlin",
                "--out",
            ])
            .arg(out)
            .assert()
            .success();
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let v = predict_json(
        &a,
        &[
            "--at",
            &(last_time(&a) - 10 * 3600).to_string(),
            "--window",
            "3h",
        ],
    );
    check_report(&v);
    assert!(v["days_used"].as_u64().unwrap() >= 1);
}
