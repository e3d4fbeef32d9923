//! The node's control API and its life cycle, through the real binary:
//! status, pause/resume, the data-dir lock and socket mode, restarts (S5 for
//! the time off, history and job log kept), predict through the node and
//! from the stopped database, history export/import, config defaults.

use crate::node_support;

use gleaner::history::store::{HistoryStore, StoreOptions};
use gleaner::history::trace::parse_trace;
use gleaner::node::config::Config;
use node_support::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

#[test]
fn status_pause_and_resume_through_the_socket() {
    let mut node = NodeFixture::new(&test_config(3, ""), Some("0 5 8000\n"));
    node.start();
    let mode = std::fs::metadata(node.data_dir().join("control.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "control socket mode");

    // A second node on the same data dir is refused, naming the first.
    let second = node.gleaner().arg("node").output().unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains(&node.pid().to_string()), "{err}");

    let s = node.wait_status(Duration::from_secs(10), "a first sample", |s| {
        s["state"] == "S1"
    });
    assert_eq!(s["cpu"], 5.0);
    assert_eq!(s["free_mib"], 8000);
    assert_eq!(s["period_secs"], 1.0);
    assert_eq!(s["paused"], false);
    assert_eq!(s["predictions"].as_array().unwrap().len(), 3);
    assert_eq!(
        s["prediction_method"],
        gleaner::model::baselines::DEFAULT_METHOD
    );
    assert_eq!(s["guest"], Value::Null);

    let mut job = node.run_local(&["--runtime", "60s", "--", "sleep", "30"]);
    let started = job.wait_for("started", Duration::from_secs(10));
    let paused: Value =
        serde_json::from_str(&node.run_ok(&["--json", "pause", "--for", "1h"])).unwrap();
    assert_eq!(paused["changed"], true);
    assert_eq!(paused["killed_job"], started["job_id"]);
    let exit = job.wait_for("exit", Duration::from_secs(10));
    assert_eq!(exit["cause"], "Revocation");

    let s = node.status();
    assert_eq!(s["paused"], true);
    assert_eq!(s["state"], "S5");
    assert!(s["paused_until"].as_i64().unwrap() > s["now"].as_i64().unwrap() + 3000);
    // While paused no guest may start.
    let refused = node
        .gleaner()
        .args(["run-local", "--", "true"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("paused"));

    let resumed: Value = serde_json::from_str(&node.run_ok(&["--json", "resume"])).unwrap();
    assert_eq!(resumed["changed"], true);
    node.wait_status(
        Duration::from_secs(10),
        "sampling again after resume",
        |s| s["paused"] == false && s["state"] == "S1",
    );
    // The pause is in the history as a down row.
    let export = node.run_ok(&["history", "export"]);
    let trace = parse_trace(export.as_bytes(), Path::new("export")).unwrap();
    assert!(
        trace.series.samples().any(|s| !s.up),
        "no down row for the pause"
    );
    assert_eq!(node.stop().code(), Some(0));
}

#[test]
fn a_restart_after_a_gap_records_s5_and_keeps_history_and_job_log() {
    let config = test_config(3, "max_gap_secs = 2\n");
    let mut node = NodeFixture::new(&config, Some("0 5 8000\n"));
    node.start();
    let job = node.run_local(&["--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    let (code, lines) = job.finish(Duration::from_secs(20));
    assert_eq!(code, 3, "run-local exits with the job's code: {lines:?}");
    let stdout: String = lines
        .iter()
        .filter(|l| l["type"] == "stdout")
        .map(|l| l["data"].as_str().unwrap())
        .collect();
    assert_eq!(stdout, "out\n");
    assert!(lines
        .iter()
        .any(|l| l["type"] == "stderr" && l["data"] == "err\n"));
    // A long guest that the shutdown must kill with cause S5.
    let mut long = node.run_local(&["--", "sleep", "60"]);
    long.wait_for("started", Duration::from_secs(10));
    node.wait_status(Duration::from_secs(10), "some samples", |s| {
        s["samples"].as_u64() >= Some(3)
    });
    assert_eq!(node.stop().code(), Some(0), "clean exit on SIGTERM");
    let exit = long.wait_for("exit", Duration::from_secs(5));
    assert_eq!(exit["cause"], "Revocation");

    let before = read_store(&node.data_dir(), |store| {
        (store.sample_count(), store.job_events(..).unwrap().len())
    });
    std::thread::sleep(Duration::from_secs(4));
    node.start();
    assert!(
        node.stdout_lines
            .iter()
            .any(|l| l.contains("recorded as S5")),
        "{:?}",
        node.stdout_lines
    );
    node.wait_status(Duration::from_secs(10), "a sample after restart", |s| {
        s["last_sample"].as_i64() > s["started_at"].as_i64()
    });
    node.stop();
    read_store(&node.data_dir(), |store| {
        assert!(store.sample_count() > before.0, "history kept and extended");
        let events = store.job_events(..).unwrap();
        assert_eq!(events.len(), before.1, "job log kept");
        assert!(events
            .iter()
            .any(|e| e.kind == "exited" && e.detail.contains("Code")));
        assert!(events
            .iter()
            .any(|e| e.kind == "killed" && e.detail.contains("Revocation")));
        let s5 = store
            .transitions(..)
            .unwrap()
            .into_iter()
            .filter(|(_, s)| *s == gleaner::model::state::State::S5)
            .count();
        assert!(s5 >= 1, "no S5 transition for the gap");
        let samples = store.samples(..).unwrap();
        let down = samples.iter().position(|s| !s.up).expect("a down row");
        assert!(down > 0 && samples[down + 1..].iter().any(|s| s.up));
    });
}

fn read_store<T>(data: &Path, f: impl FnOnce(&HistoryStore) -> T) -> T {
    let store = HistoryStore::open(&data.join("history"), &StoreOptions::default(), 0).unwrap();
    f(&store)
}

/// Issue 29: a new volunteer's node is not "unknown" for its first day. In
/// its first minutes `status` gives every window the population prior,
/// marked as a prior; once a record of past days is in its history (here
/// imported), the same windows come from the record and the mark is gone.
#[test]
fn a_fresh_node_answers_with_a_marked_prior_then_from_its_record() {
    let mut node = NodeFixture::new(&test_config(3, ""), Some(QUIET_HOST));
    node.start();
    let s = node.wait_status(Duration::from_secs(20), "a TR from the prior", |s| {
        s["state"] == "S1" && s["predictions"][0]["tr"].is_number()
    });
    let predictions = s["predictions"].as_array().unwrap();
    assert_eq!(predictions.len(), 3, "{s}");
    for p in predictions {
        assert_eq!(p["prior"], true, "{p}");
        // A lone node has heard no pool: the built-in prior, and it says so.
        assert_eq!(p["prior_source"], "built-in prior", "{p}");
        let window = p["window_secs"].as_u64().unwrap();
        let want = gleaner::model::baselines::prior::population_survival(window);
        assert_eq!(p["tr"].as_f64(), Some(want), "{p}");
    }
    let text = node.run_ok(&["status"]);
    assert!(
        text.contains("(a prior: no past day of this kind in the record yet)"),
        "{text}"
    );
    assert!(text.contains("yet), built-in prior"), "{text}");

    let path = node.dir.join("history.csv");
    std::fs::write(&path, history(0)).unwrap();
    node.run_ok(&["history", "import", path.to_str().unwrap()]);
    let s = node.wait_status(Duration::from_secs(120), "TRs from the record", |s| {
        s["predictions"].as_array().is_some_and(|ps| {
            ps.iter()
                .all(|p| p["tr"].is_number() && p["prior"] == false)
        })
    });
    // A quiet record: its own TR, not the population's.
    let hour = &s["predictions"][0];
    let p0 = gleaner::model::baselines::prior::population_survival(
        hour["window_secs"].as_u64().unwrap(),
    );
    assert!(hour["tr"].as_f64().unwrap() > p0, "{s}");
}

#[test]
fn predict_through_the_node_and_from_the_stopped_database_agree() {
    // A history step matching the imported trace's periods (300 s rows, 900 s gaps).
    // The 2013 trace is older than the default retention (8 weeks).
    let config =
        "[monitor]\nmax_period_secs = 8\nmax_gap_secs = 900\n\n[history]\nretention_days = 10000\n";
    let mut node = NodeFixture::new(config, Some("0 5 8000\n"));
    node.start();
    let trace = example_trace();
    let imported: Value = serde_json::from_str(&node.run_ok(&[
        "--json",
        "history",
        "import",
        trace.to_str().unwrap(),
    ]))
    .unwrap();
    assert!(imported["added"].as_u64().unwrap() > 1000, "{imported}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let last: i64 = text
        .lines()
        .rev()
        .find_map(|l| l.split(',').next()?.parse().ok())
        .unwrap();
    let at = (last - 6 * 3600).to_string();
    let args = ["--json", "predict", "--window", "3h", "--at", &at];
    let live: Value = serde_json::from_str(&node.run_ok(&args)).unwrap();
    let tr = live["tr"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&tr));
    assert!(live["days_used"].as_u64().unwrap() >= 1, "{live}");
    assert_eq!(live["method"], gleaner::model::baselines::DEFAULT_METHOD);
    let km_args = [&args[..], &["--method", "km"]].concat();
    let live_km: Value = serde_json::from_str(&node.run_ok(&km_args)).unwrap();
    assert_eq!(live_km["method"], "km");

    let export = node.run_ok(&["history", "export"]);
    assert!(export.starts_with("# gleaner-trace v1"));
    let exported = parse_trace(export.as_bytes(), Path::new("export")).unwrap();
    assert!(exported.series.len() as u64 >= imported["added"].as_u64().unwrap());

    node.stop();
    let offline: Value = serde_json::from_str(&node.run_ok(&args)).unwrap();
    assert_eq!(offline["tr"], live["tr"], "node {live}\noffline {offline}");
    assert_eq!(offline["history_days"], live["history_days"]);
    assert_eq!(offline["method"], live["method"]);
    let offline_km: Value = serde_json::from_str(&node.run_ok(&km_args)).unwrap();
    assert_eq!(offline_km["tr"], live_km["tr"]);
    // The stopped node's export works too, and the lock is free again after it.
    let out = node.dir.join("export.csv");
    node.run_ok(&["history", "export", "--out", out.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .starts_with("# gleaner-trace v1"));
    node.start();
    node.stop();
}

#[test]
fn config_defaults_parse_back_and_unknown_keys_are_named() {
    let node = NodeFixture::new("", None);
    let text = node.run_ok(&["config", "--defaults"]);
    let parsed = Config::parse(&text, Path::new("defaults")).unwrap();
    assert_eq!(parsed, Config::default());
    for (section, key, _) in gleaner::node::config::KEY_DOCS {
        assert!(text.contains(&format!("[{section}]")) && text.contains(&format!("\n{key} = ")));
    }
    std::fs::write(node.dir.join("config.toml"), "[guest]\nmax_mem = 5\n").unwrap();
    let out = node.gleaner().args(["node", "--no-net"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_mem"));
}

#[test]
fn first_run_creates_data_dir_and_a_commented_config_from_the_environment() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("d");
    let conf = temp.path().join("c");
    let mut child = std::process::Command::new(bin())
        // The default config joins a LAN pool with mDNS: not here.
        .args(["node", "--no-net"])
        .env("GLEANER_DATA_DIR", &data)
        .env("GLEANER_CONFIG_DIR", &conf)
        .arg("--owner-load")
        .arg({
            let p = temp.path().join("load");
            std::fs::write(&p, "0 5 8000\n").unwrap();
            p
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ok = wait_until(Duration::from_secs(20), || {
        data.join("control.sock").exists()
    });
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert!(ok, "no control socket");
    assert!(status.success());
    let text = std::fs::read_to_string(conf.join("config.toml")).unwrap();
    assert!(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .all(|l| l.starts_with('#')));
    assert_eq!(
        Config::parse(&text, Path::new("c")).unwrap(),
        Config::default()
    );
    assert!(
        !data.join("control.sock").exists(),
        "socket removed on shutdown"
    );
}
