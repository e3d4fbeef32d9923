//! `gleaner eval` run as a user would: the built binary on traces generated
//! into a temp dir, writing JSON, markdown and SVG; two runs must agree on
//! everything but the timing.

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

fn gleaner() -> Command {
    let mut cmd = Command::cargo_bin("gleaner").expect("the gleaner binary is built");
    cmd.env_remove("RUST_LOG").env_remove("GLEANER_LOG");
    cmd
}

fn synth(dir: &Path, seed: u64, days: u32, tz: &str) -> std::path::PathBuf {
    let path = dir.join(format!("synth-{seed}.csv"));
    gleaner()
        .args([
            "trace",
            "synth",
            "--seed",
            &seed.to_string(),
            "--days",
            &days.to_string(),
        ])
        .args(["--tz", tz, "--step", "30", "--out"])
        .arg(&path)
        .assert()
        .success();
    path
}

fn eval(dir: &Path, traces: &[&Path], extra: &[&str]) {
    let out = gleaner()
        .current_dir(dir)
        .arg("eval")
        .arg("--trace")
        .args(traces)
        .args([
            "--lengths",
            "1h,3h",
            "--hours",
            "6-11,20",
            "--methods",
            // One of each family; every method is run by the unit tests of
            // the registry, and all 16 through the harness would take minutes
            // in a debug build.
            "paper,km,km+age,freq,markov,rippp,ar8,bm8-prob",
            "--resamples",
            "500",
        ])
        .args([
            "--json", "e.json", "--report", "e.md", "--plots", "plots", "--seed", "9",
        ])
        .args(extra)
        .output()
        .expect("gleaner runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not a terminal: no progress bar drawn on stderr.
    assert!(!String::from_utf8_lossy(&out.stderr).contains("days,"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("T = 1h") && text.contains("km"), "{text}");
}

fn without_timing(mut v: Value) -> Value {
    v.as_object_mut().expect("an object").remove("timing");
    v
}

#[test]
fn eval_writes_json_report_and_plots_reproducibly() {
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), 3, 28, "UTC");
    let b = synth(dir.path(), 4, 28, "America/New_York");
    eval(
        dir.path(),
        &[&a, &b],
        &[
            "--noise",
            "--noise-trials",
            "2",
            "--training-sizes",
            "2,5",
            "--cost",
        ],
    );

    let read_json = || -> Value {
        serde_json::from_slice(&std::fs::read(dir.path().join("e.json")).unwrap()).unwrap()
    };
    let first = read_json();
    assert_eq!(
        first["default_method"],
        gleaner::model::baselines::DEFAULT_METHOD
    );
    assert_eq!(first["traces"].as_array().unwrap().len(), 2);
    for name in ["paper", "km", "km+age"] {
        for len in ["3600", "10800"] {
            let l = &first["methods"][name]["by_length"][len];
            let n = l["n"].as_u64().unwrap();
            assert!(n > 50, "{name} {len}: n = {n}");
            for key in [
                "brier",
                "log_loss",
                "accuracy_mean",
                "accuracy_worst",
                "ece",
            ] {
                let v = l[key]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{name} {len} {key}"));
                assert!(v.is_finite());
            }
            assert!(l["groups_excluded"].is_u64());
            assert!(l["brier_ci"]["lo"].as_f64().unwrap() <= l["brier"].as_f64().unwrap());
            assert_eq!(l["reliability"].as_array().unwrap().len(), 10);
            assert!(l["by_hour"]["8"]["n"].as_u64().unwrap() > 0);
        }
    }
    // Every method saw the same windows.
    assert_eq!(
        first["methods"]["km"]["by_length"]["3600"]["n"],
        first["methods"]["paper"]["by_length"]["3600"]["n"]
    );
    assert!(
        first["training_size"]["5"]["km"]["3600"]["n"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(first["noise"]["3"]["km"]["3600"]["mean_abs"].is_f64());
    assert_eq!(first["timing"]["cost"].as_array().unwrap().len(), 2);

    let md = std::fs::read_to_string(dir.path().join("e.md")).unwrap();
    for part in [
        "gleaner eval --trace",
        "### T = 3h",
        "by start hour",
        "| 0.9–1.0 |",
        "Noise robustness",
        "Training size",
        "## Timing",
    ] {
        assert!(md.contains(part), "report lacks {part}");
    }
    for plot in ["accuracy.svg", "brier.svg", "reliability.svg"] {
        let svg = std::fs::read_to_string(dir.path().join("plots").join(plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("km+age"), "{plot}");
    }

    // Again, same inputs and seed: identical apart from timing.
    eval(
        dir.path(),
        &[&a, &b],
        &[
            "--noise",
            "--noise-trials",
            "2",
            "--training-sizes",
            "2,5",
            "--cost",
        ],
    );
    assert_eq!(without_timing(first), without_timing(read_json()));
    let again = std::fs::read_to_string(dir.path().join("e.md")).unwrap();
    let cut = |s: &str| s[..s.find("## Timing").unwrap()].to_string();
    assert_eq!(cut(&md), cut(&again));
}

#[test]
fn global_json_prints_the_report_and_bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), 6, 22, "UTC");
    let out = gleaner()
        .args([
            "eval",
            "--json",
            "--methods",
            "km",
            "--lengths",
            "2h",
            "--hours",
            "9",
            "--trace",
        ])
        .arg(&a)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["method_order"], serde_json::json!(["km"]));
    assert!(
        v["methods"]["km"]["by_length"]["7200"]["n"]
            .as_u64()
            .unwrap()
            > 0
    );

    // `--json FILE` writes the file and prints the table; `--json-out` is the same option.
    for option in ["--json", "--json-out"] {
        let file = dir.path().join(format!("{option}.json"));
        let out = gleaner()
            .args(["eval", "--methods", "km", "--lengths", "2h", "--hours", "9"])
            .arg(option)
            .arg(&file)
            .arg("--trace")
            .arg(&a)
            .output()
            .unwrap();
        assert!(out.status.success(), "{option}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("T = 2h"),
            "{option}"
        );
        let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(v["method_order"], serde_json::json!(["km"]), "{option}");
    }
    // The top-level `gleaner --json eval` still prints the JSON.
    let out = gleaner()
        .args([
            "--json",
            "eval",
            "--methods",
            "km",
            "--lengths",
            "2h",
            "--hours",
            "9",
        ])
        .arg("--trace")
        .arg(&a)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["method_order"], serde_json::json!(["km"]));

    for bad in [
        &["--methods", "nonsense"][..],
        &["--test-from", "1.0"],
        &["--hours", "24"],
        &["--resamples", "10"],
        &["--lengths", "0"],
    ] {
        gleaner()
            .arg("eval")
            .arg("--trace")
            .arg(&a)
            .args(bad)
            .assert()
            .failure();
    }
}

#[test]
fn the_windows_file_recomputes_the_report_and_the_goals_are_printed() {
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), 8, 22, "UTC");
    let out = gleaner()
        .current_dir(dir.path())
        .arg("eval")
        .arg("--trace")
        .arg(&a)
        .args([
            "--lengths",
            "1h,3h",
            "--hours",
            "0,3,6,9,12,15,18,21",
            "--methods",
            "logistic,freq",
        ])
        .args([
            "--resamples",
            "500",
            "--json",
            "e.json",
            "--windows",
            "w.csv",
        ])
        .output()
        .expect("gleaner runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Goals (issue 29) for `logistic`"), "{text}");
    assert!(text.contains("| 3h |"), "{text}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("e.json")).unwrap()).unwrap();
    let csv = std::fs::read_to_string(dir.path().join("w.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("host,start,date,hour,length_s,method,forecast,outcome")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    for method in ["logistic", "freq"] {
        for len in ["3600", "10800"] {
            let (mut sq, mut n) = (0.0, 0usize);
            for r in rows.iter().filter(|r| r[5] == method && r[4] == len) {
                let p: f64 = r[6].parse().unwrap();
                let y: f64 = r[7].parse().unwrap();
                sq += (p - y).powi(2);
                n += 1;
            }
            let cell = &report["methods"][method]["by_length"][len];
            assert_eq!(cell["n"].as_u64(), Some(n as u64), "{method} {len}");
            let brier = cell["brier"].as_f64().unwrap();
            assert!((sq / n as f64 - brier).abs() < 1e-12, "{method} {len}");
        }
    }
    // The goals' cells count the same windows.
    assert_eq!(
        report["goals"]["cells"][0]["n"].as_u64(),
        report["methods"]["logistic"]["by_length"]["3600"]["n"].as_u64()
    );
}

#[test]
fn the_rivals_goal_tests_every_other_method_and_a_challenger_must_be_run() {
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), 8, 22, "UTC");
    let run = |challenger: &str| {
        gleaner()
            .current_dir(dir.path())
            .arg("eval")
            .arg("--trace")
            .arg(&a)
            .args(["--lengths", "1h,3h", "--hours", "0,6,12,18"])
            .args(["--methods", "logistic,freq,markov", "--resamples", "500"])
            .args(["--json", "e.json", "--challenger", challenger])
            .output()
            .expect("gleaner runs")
    };
    let out = run("bogus");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--challenger \"bogus\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run("Markov");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Challenger `markov`"), "{text}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("e.json")).unwrap()).unwrap();
    let goals = &report["goals"];
    assert_eq!(goals["rivals"], serde_json::json!(["freq", "markov"]));
    assert_eq!(goals["challenger"], "markov");
    for cell in goals["cells"].as_array().unwrap() {
        let rivals = &cell["rivals"];
        let p = rivals["test"]["p_value"].as_f64().unwrap();
        let holm = rivals["holm_p"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p) && holm >= p, "{rivals}");
        assert!(cell["met_rivals"].is_boolean(), "{cell}");
        assert!(cell["challenger"]["difference"].is_number(), "{cell}");
    }
}

#[test]
fn goals_for_judges_other_methods_as_the_default_and_only_methods_run() {
    let dir = tempfile::tempdir().unwrap();
    let a = synth(dir.path(), 8, 22, "UTC");
    let run = |goals_for: &str| {
        gleaner()
            .current_dir(dir.path())
            .arg("eval")
            .arg("--trace")
            .arg(&a)
            .args(["--lengths", "1h", "--hours", "0,6,12,18"])
            .args(["--methods", "logistic,freq,markov", "--resamples", "500"])
            .args(["--json", "e.json", "--goals-for", goals_for])
            .output()
            .expect("gleaner runs")
    };
    let out = run("markov,km");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--goals-for \"km\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run("Markov, freq");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("as if it were the default"), "{text}");
    assert!(text.contains("| markov | 1h |"), "{text}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("e.json")).unwrap()).unwrap();
    let judged = report["goals_for"].as_array().unwrap();
    assert_eq!(judged.len(), 2, "{report:#}");
    assert_eq!(judged[0]["method"], "markov");
    // Markov's own forecasts, its rivals the others: not the default's goals.
    assert_eq!(judged[0]["rivals"], serde_json::json!(["logistic", "freq"]));
    assert_ne!(
        judged[0]["cells"][0]["auc"],
        report["goals"]["cells"][0]["auc"]
    );
    assert_eq!(judged[1]["method"], "freq");
}
