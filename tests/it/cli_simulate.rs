//! `gleaner simulate` run as a user would: the built binary on the shared
//! traces, every policy, checked for conservation and for the estimate's
//! coverage of the realised makespan.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A shared trace: `../shared/traces` next to the main checkout, or two
/// levels up from a worktree under `wt/`.
fn shared(rel: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    ["../shared/traces", "../../shared/traces"]
        .iter()
        .map(|dir| root.join(dir).join(rel))
        .find(|p| p.is_file())
        .unwrap_or_else(|| root.join("../shared/traces").join(rel))
}

const TRACES: [&str; 8] = [
    "synthetic/lab-1.csv",
    "synthetic/lab-2.csv",
    "real/bitbrains-60.csv",
    "real/bitbrains-72.csv",
    "real/bitbrains-363.csv",
    "real/bitbrains-407.csv",
    "real/lanl-1.csv",
    "real/lanl-21.csv",
];

fn gleaner() -> Command {
    let mut cmd = Command::cargo_bin("gleaner").expect("the gleaner binary is built");
    cmd.env_remove("RUST_LOG").env_remove("GLEANER_LOG");
    cmd
}

/// The policies' labels, in the report's order.
fn labels(policies: &[Value]) -> Vec<&str> {
    policies
        .iter()
        .map(|p| p["label"].as_str().unwrap())
        .collect()
}

fn simulate(extra: &[&str]) -> Value {
    let mut cmd = gleaner();
    cmd.arg("simulate").arg("--trace");
    for t in TRACES {
        cmd.arg(shared(t));
    }
    let out = cmd
        .args(extra)
        .args(["--json", "-"])
        .output()
        .expect("gleaner runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("simulate prints JSON")
}

#[test]
fn every_policy_finishes_every_task_once_on_the_shared_traces() {
    let r = simulate(&[
        "--hosts",
        "24",
        "--tasks",
        "80",
        "--runtime",
        "lognormal:90m,0.5",
        "--seed",
        "5",
    ]);
    let policies = r["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 7);
    for p in policies {
        let name = p["policy"].as_str().unwrap();
        assert_eq!(p["tasks"], 80, "{name}");
        assert_eq!(p["finished"], 80, "{name}");
        assert_eq!(p["unfinished"], 0, "{name}");
        assert_eq!(p["duplicate_completions"], 0, "{name}");
        let kills: u64 = p["kills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_u64().unwrap())
            .sum();
        // Every attempt ends once: the 80 that finish, the killed ones and
        // the tail copies' losers, cancelled (tail copies are on by default).
        let attempts = p["attempts"].as_u64().unwrap();
        let copies = p["tail_copies"].as_u64().unwrap();
        assert!(
            (80 + kills..=80 + kills + copies).contains(&attempts),
            "{name}: {attempts} attempts, {kills} kills, {copies} tail copies"
        );
        let goodput = p["goodput"].as_f64().unwrap();
        assert!(goodput > 0.0 && goodput <= 1.0, "{name}");
        let e = &p["estimate"];
        assert!(
            e["p10"].as_f64().unwrap() <= e["p90"].as_f64().unwrap(),
            "{name}"
        );
    }
    let by = |n: &str| policies.iter().find(|p| p["policy"] == n).unwrap();
    // The oracle never puts a task where it will be hit.
    assert_eq!(by("oracle")["kills"], serde_json::json!([0, 0, 0]));
    assert_eq!(by("oracle")["wasted_cpu_secs"], 0.0);
    assert!(by("proactive+checkpoint")["checkpoints"].as_u64().unwrap() > 0);
}

/// The report without what measures this run's timing or machine
/// (`setup_secs`, each policy's `wall_secs`, `threads`).
fn outcome(mut r: Value) -> Value {
    let obj = r.as_object_mut().unwrap();
    obj.remove("setup_secs");
    obj.remove("threads");
    for p in obj["policies"].as_array_mut().unwrap() {
        p.as_object_mut().unwrap().remove("wall_secs");
    }
    r
}

#[test]
fn the_same_seed_gives_the_same_report_on_one_thread_or_several() {
    let args = |threads: &'static str| {
        [
            "--hosts",
            "30",
            "--tasks",
            "120",
            "--runtime",
            "lognormal:2h,0.5",
            "--seed",
            "9",
            "--estimate-runs",
            "40",
            "--threads",
            threads,
        ]
    };
    let first = outcome(simulate(&args("2")));
    let again = outcome(simulate(&args("2")));
    assert_eq!(first, again, "two runs with the same seed differ");
    let single = outcome(simulate(&args("1")));
    assert_eq!(first, single, "one thread and two differ");
    let many = outcome(simulate(&args("5")));
    assert_eq!(first, many, "five threads and two differ");
    // The seed matters: another gives another outcome.
    let mut other = args("2");
    other[7] = "10";
    assert_ne!(first, outcome(simulate(&other)));
}

#[test]
fn bad_arguments_are_refused_by_name() {
    gleaner()
        .args([
            "simulate",
            "--trace",
            "x.csv",
            "--tasks",
            "1",
            "--runtime",
            "1h",
            "--policy",
            "fastest",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("unknown policy \"fastest\""));
    gleaner()
        .args([
            "simulate",
            "--trace",
            "x.csv",
            "--tasks",
            "1",
            "--runtime",
            "lognormal:1h",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("MEDIAN,SIGMA"));
    gleaner()
        .arg("simulate")
        .arg("--trace")
        .arg(shared(TRACES[2]))
        .args(["--tasks", "0", "--runtime", "1h"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--tasks"));
    gleaner()
        .arg("simulate")
        .arg("--trace")
        .arg(shared(TRACES[2]))
        .args(["--tasks", "1", "--runtime", "1h", "--backtests", "51"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--backtests must be at most 50"));
    gleaner()
        .args([
            "simulate",
            "--trace",
            "/nonexistent/t.csv",
            "--tasks",
            "1",
            "--runtime",
            "1h",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("/nonexistent/t.csv"));
}

/// Issue 11's target: the realised makespan within the estimate's
/// [p10, p90] for at least 70 % of seeds, with and without checkpoints,
/// here with margin (8 of 10). The model's own band held 8 and 6 of these
/// seeds (71 and 64 of 100 over seeds 1-50 in both trace orders);
/// calibrated by ten back-tests on the pool's past (the default), 8 and
/// 10, and 79 and 91 of 100 (docs/scheduling.md).
#[test]
fn the_estimate_covers_the_realised_makespan_for_most_seeds() {
    let seeds = 10;
    let mut covered = [0; 2];
    for seed in 1..=seeds {
        let r = simulate(&[
            "--hosts",
            "40",
            "--tasks",
            "200",
            "--runtime",
            "lognormal:2h,0.5",
            "--policy",
            "proactive,proactive+checkpoint",
            "--seed",
            &seed.to_string(),
        ]);
        for (i, c) in covered.iter_mut().enumerate() {
            if r["policies"][i]["within_estimate"] == true {
                *c += 1;
            }
        }
    }
    assert!(
        covered.iter().all(|c| c * 10 >= seeds * 7),
        "covered (proactive, proactive+checkpoint) {covered:?} of {seeds} seeds"
    );
}

#[test]
fn verify_adaptive_reports_the_overhead_and_catches_liars() {
    let r = simulate(&[
        "--hosts",
        "12",
        "--tasks",
        "600",
        "--runtime",
        "20m",
        "--policy",
        "tr",
        "--estimate-runs",
        "0",
        "--verify",
        "adaptive",
        "--liars",
        "2",
    ]);
    assert_eq!(r["verify"], "adaptive");
    assert_eq!(r["verify_warmup"], 120, "10 × 12 hosts");
    let v = &r["policies"][0]["verification"];
    let warm = v["warmup_tasks"].as_u64().unwrap();
    let after = v["after_tasks"].as_u64().unwrap();
    assert_eq!(warm + after, 600, "{v:#}");
    assert_eq!(v["liars_caught"], 2, "{v:#}");
    assert_eq!(v["wrong_accepted"], 0, "{v:#}");
    // Extra copies: more while hosts earn trust than after.
    let rate = |extra: &str, tasks: u64| v[extra].as_u64().unwrap() as f64 / tasks as f64;
    assert!(
        rate("warmup_extra_copies", warm) > rate("after_extra_copies", after),
        "{v:#}"
    );
    // Without --verify the report has no verification.
    let plain = simulate(&[
        "--hosts",
        "4",
        "--tasks",
        "10",
        "--runtime",
        "20m",
        "--policy",
        "tr",
        "--estimate-runs",
        "0",
    ]);
    assert!(plain["policies"][0].get("verification").is_none());
}

#[test]
fn summaries_place_from_a_few_asks_a_round_and_the_report_says_so() {
    let args = |sample: &'static str| {
        [
            "--hosts",
            "24",
            "--tasks",
            "60",
            "--runtime",
            "lognormal:90m,0.5",
            "--seed",
            "5",
            "--policy",
            "proactive,oracle",
            "--knowledge",
            "full,summaries",
            "--asks-per-task",
            "1",
            "--asks-max",
            "2",
            "--summary-heartbeat",
            "1d",
            "--summary-sample",
            sample,
            "--estimate-runs",
            "0",
            "--backtests",
            "0",
        ]
    };
    let r = simulate(&args("24"));
    let policies = r["policies"].as_array().unwrap();
    let labels = labels(policies);
    // The oracle knows every future: it runs once, with full knowledge.
    assert_eq!(labels, ["proactive", "proactive [summaries]", "oracle"]);
    for p in policies {
        assert_eq!(p["finished"], 60, "{}", p["label"]);
        assert_eq!(p["duplicate_completions"], 0, "{}", p["label"]);
    }
    let (full, summaries) = (&policies[0], &policies[1]);
    assert_eq!(full["knowledge"], "full");
    assert!(full.get("probe").is_none());
    assert_eq!(summaries["knowledge"], "summaries");
    let probe = &summaries["probe"];
    let n = |key: &str| probe[key].as_u64().unwrap();
    assert_eq!(n("cached"), 24);
    assert!(n("rounds") > 0 && n("publications") >= 24, "{probe}");
    assert!(n("max_round_asks") <= 2, "{probe}");
    assert!(n("asks") <= 2 * n("rounds"), "{probe}");
    // Two asks a round cannot start 24 hosts at once as full knowledge does.
    assert_ne!(full["makespan_secs"], summaries["makespan_secs"]);
    // A cache of a sample of the pool.
    let r = simulate(&args("5"));
    assert_eq!(r["policies"][1]["probe"]["cached"], 5);
    assert_eq!(r["policies"][1]["finished"], 60);
    // Nonsense is refused by name.
    refused_by_name(&[
        ("--knowledge", "psychic"),
        ("--summary-sample", "0"),
        ("--asks-max", "0"),
        ("--summary-heartbeat", "0s"),
    ]);
}

/// Each `(flag, value)` makes `simulate` fail with an error naming the flag.
fn refused_by_name(cases: &[(&str, &str)]) {
    for (flag, value) in cases {
        let mut cmd = gleaner();
        cmd.arg("simulate").arg("--trace").arg(shared(TRACES[0]));
        cmd.args(["--tasks", "2", "--runtime", "1h", flag, value])
            .assert()
            .failure()
            .stderr(predicate::str::contains(flag.trim_start_matches("--")));
    }
}

#[test]
fn a_large_pools_sample_follows_the_batch_not_the_pool_and_the_report_says_so() {
    let args = |per_task: &'static str, min: &'static str| {
        [
            "--hosts",
            "100",
            "--tasks",
            "10",
            "--runtime",
            "lognormal:90m,0.5",
            "--seed",
            "3",
            "--policy",
            "proactive",
            "--knowledge",
            "full,summaries,sample",
            "--sample-per-task",
            per_task,
            "--sample-min",
            min,
            "--estimate-runs",
            "0",
            "--backtests",
            "0",
        ]
    };
    // Without the node's minimum, to see the per-task part.
    let r = simulate(&args("2", "1"));
    let policies = r["policies"].as_array().unwrap();
    let labels = labels(policies);
    assert_eq!(
        labels,
        ["proactive", "proactive [summaries]", "proactive [sample]"]
    );
    for p in policies {
        assert_eq!(p["finished"], 10, "{}", p["label"]);
        assert_eq!(p["duplicate_completions"], 0, "{}", p["label"]);
    }
    let (everyone, sample) = (&policies[1]["probe"], &policies[2]["probe"]);
    assert_eq!(everyone["cached"], 100);
    assert_eq!(policies[2]["knowledge"], "sample");
    // Twice the 10 tasks, in whole leaves of 12: 20 to 31 hosts, not 100.
    let named = sample["cached"].as_u64().unwrap();
    assert!((20..32).contains(&named), "{sample}");
    assert!(sample["digests"].as_u64().unwrap() >= 2, "{sample}");
    assert!(sample["samples"].as_u64().unwrap() >= 1, "{sample}");
    // The rule is the node's, with its multiple and minimum as parameters.
    let r = simulate(&args("5", "1"));
    let named = r["policies"][2]["probe"]["cached"].as_u64().unwrap();
    assert!((50..62).contains(&named), "{}", r["policies"][2]["probe"]);
    let r = simulate(&args("2", "40"));
    let named = r["policies"][2]["probe"]["cached"].as_u64().unwrap();
    assert!((40..52).contains(&named), "{}", r["policies"][2]["probe"]);
    refused_by_name(&[
        ("--sample-leaf", "0"),
        ("--sample-per-task", "0"),
        ("--sample-min", "0"),
    ]);
}

#[test]
fn overclaimers_are_reported_with_and_without_scoring_and_only_when_asked() {
    let base = [
        "--hosts",
        "24",
        "--tasks",
        "60",
        "--runtime",
        "lognormal:2h,0.5",
        "--seed",
        "3",
        "--policy",
        "proactive",
        "--estimate-runs",
        "0",
    ];
    // Nothing asked: the report is as before issue 29, no claims.
    let plain = simulate(&base);
    assert!(plain["policies"][0].get("claims").is_none());
    let mut asked = base.to_vec();
    asked.extend([
        "--overclaim",
        "0.25",
        "--claim-scoring",
        "off,discount,record",
    ]);
    let r = simulate(&asked);
    let policies = r["policies"].as_array().unwrap();
    let labels = labels(policies);
    assert_eq!(
        labels,
        ["proactive", "proactive [discount]", "proactive [record]"]
    );
    for p in policies {
        let c = &p["claims"];
        assert_eq!(c["overclaimers"], 6, "{p}");
        assert_eq!(c["hosts"], 24, "{p}");
        assert_eq!(p["finished"], 60, "{p}");
        assert!(c["attempts_over"].as_u64().unwrap() <= c["attempts"].as_u64().unwrap());
        assert!(c["kills_over"].as_u64().unwrap() <= c["kills"].as_u64().unwrap());
    }
    assert_eq!(policies[0]["claims"]["scoring"], "off");
    assert_eq!(policies[1]["claims"]["scoring"], "discount");
    assert_eq!(policies[2]["claims"]["scoring"], "record");
    // A host that claims TR 1 and is killed lands less than it promised:
    // its record discounts it (kept in both runs, used in the scored one).
    for p in policies {
        let c = &p["claims"];
        if c["kills_over"].as_u64().unwrap() > 0 {
            assert!(c["discount_over"].as_f64().unwrap() < 1.0, "{p}");
        }
    }
    gleaner()
        .arg("simulate")
        .arg("--trace")
        .arg(shared(TRACES[2]))
        .args(["--tasks", "1", "--runtime", "1h", "--overclaim", "1.5"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--overclaim"));
}
