//! Pools of real `gleaner node` processes on 127.0.0.1 (static bootstrap, no
//! mDNS): discovery, `gleaner hosts` with TRs from each host's own history,
//! remote jobs with inputs, outputs and exit status, a host killed mid-job,
//! a 64 MiB input shared by two jobs crossing to its host once, private
//! pools, the allowlist, and hostile frames against a live node.

use crate::net_support;
use crate::node_support;

use std::time::{Duration, Instant};

use node_support::{addr, history, peer, pool_node, started, JsonStream, NodeFixture};
use serde_json::Value;

fn hosts(node: &NodeFixture) -> Value {
    serde_json::from_str(&node.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap()
}

fn host_entry<'a>(report: &'a Value, peer: &str) -> Option<&'a Value> {
    report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["peer"] == peer)
}

/// Polls `hosts` until `ok` holds (panics after `limit`), returns the last report.
fn hosts_until(node: &NodeFixture, limit: Duration, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let report = hosts(node);
        if ok(&report) {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "hosts never satisfied the test: {report:#}\nlog:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `gleaner --json submit ARGS` through `node`.
fn submit(node: &NodeFixture, args: &[&str]) -> JsonStream {
    node.json_stream("submit", args)
}

/// How long a submitted job may take here, retries on another host included.
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// The last line of `submit --json`: the task's end, stdout and stderr.
fn result_of(lines: &[Value]) -> &Value {
    lines
        .iter()
        .find(|l| l["type"] == "result")
        .unwrap_or_else(|| panic!("no result line: {lines:#?}"))
}

/// The task's stdout or stderr from the result line.
fn output_of(lines: &[Value], name: &str) -> String {
    result_of(lines)[name]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_pool_of_three_nodes_ranks_by_tr_runs_jobs_and_survives_a_host_killed_mid_job() {
    let steady = started(pool_node(Some(&history(0)), &[]));
    let bootstrap = addr(&steady);
    let flaky = started(pool_node(Some(&history(20)), &["--bootstrap", &bootstrap]));
    let consumer = started(pool_node(None, &["--bootstrap", &bootstrap, "--no-guest"]));
    let (steady_id, flaky_id) = (peer(&steady), peer(&flaky));

    // Both hosts are heard on gossip and listed from their summaries (no
    // host asked: `hosts` answers from them since protocol version 2), with
    // TRs from their own histories: the steady host ranks first.
    let report = hosts_until(&consumer, Duration::from_secs(40), |r| {
        [&steady_id, &flaky_id].iter().all(|p| {
            host_entry(r, p).is_some_and(|h| {
                h["tr"].is_number()
                    && h["found_by"][0] == "gossip"
                    && h["summarised"] == true
                    && h["state"] == "S1"
            })
        })
    });
    let steady_tr = host_entry(&report, &steady_id).unwrap()["tr"]
        .as_f64()
        .unwrap();
    let flaky_tr = host_entry(&report, &flaky_id).unwrap()["tr"]
        .as_f64()
        .unwrap();
    assert!(steady_tr > 0.9 && flaky_tr < steady_tr - 0.3, "{report:#}");
    // Each host's week, read off its own record: the flaky one fails at
    // the top of every hour (S3 from its second busy minute to its 20th),
    // the steady one never (but for the gap, if any, between its imported
    // record and its first reading).
    let week = |id: &str, field: &str| host_entry(&report, id).unwrap()[field].as_f64();
    assert!(
        week(&steady_id, "failures_past_week").unwrap() <= 1.0,
        "{report:#}"
    );
    assert!(
        week(&steady_id, "mean_outage_secs").unwrap_or(0.0) < 300.0,
        "{report:#}"
    );
    let fails = week(&flaky_id, "failures_past_week").unwrap();
    assert!((160.0..=170.0).contains(&fails), "{report:#}");
    let away = week(&flaky_id, "mean_outage_secs").unwrap();
    assert!((17.0 * 60.0..=20.0 * 60.0).contains(&away), "{report:#}");
    let up = week(&flaky_id, "mean_uptime_secs").unwrap();
    assert!((40.0 * 60.0..=43.0 * 60.0).contains(&up), "{report:#}");
    // And spell by spell, as the answer carried them (32 quantiles of
    // the week's ~165): the usual outage and up-spell, whatever their order.
    let lengths = |field: &str| -> Vec<f64> {
        host_entry(&report, &flaky_id).unwrap()[field]
            .as_array()
            .unwrap_or_else(|| panic!("no {field}: {report:#}"))
            .iter()
            .filter_map(Value::as_f64)
            .collect()
    };
    let (ups, outages) = (lengths("up_spell_secs"), lengths("outage_secs"));
    assert_eq!((ups.len(), outages.len()), (32, 32), "{report:#}");
    let median = |v: &[f64]| v[v.len() / 2];
    assert!(
        (39.0 * 60.0..=43.0 * 60.0).contains(&median(&ups)),
        "{report:#}"
    );
    assert!(
        (17.0 * 60.0..=20.0 * 60.0).contains(&median(&outages)),
        "{report:#}"
    );
    assert_eq!(report["hosts"][0]["peer"], steady_id.as_str(), "best first");
    assert!(
        host_entry(&report, &peer(&consumer)).is_none(),
        "a node does not list itself"
    );
    // A consumer-only node answers queries but offers no slot.
    let from_steady = hosts_until(&steady, Duration::from_secs(20), |r| {
        host_entry(r, &peer(&consumer)).is_some_and(|h| h["slot_free"] == false)
    });
    assert!(host_entry(&from_steady, &flaky_id).is_some());

    // A job with an input file runs on the best host; its stdout, stderr, output
    // file and exit status come back.
    let input = consumer.dir.join("words.txt");
    std::fs::write(&input, "hello pool\n").unwrap();
    let out_dir = consumer.dir.join("results");
    let job = submit(
        &consumer,
        &[
            // The flaky host fails in the first 20 minutes of every hour: a
            // 2 h window always holds one, whatever the time of day, so the
            // ranking never ties (a 5 min window at minute 30 would).
            "--runtime",
            "2h",
            "--limit",
            "10m",
            "--input",
            input.to_str().unwrap(),
            "--output",
            "upper.txt",
            "--output-dir",
            out_dir.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "cat words.txt; tr a-z A-Z < words.txt > upper.txt; echo warn >&2; exit 3",
        ],
    );
    let (code, lines) = job.finish(JOB_TIMEOUT);
    assert_eq!(code, 3, "{lines:#?}");
    let done = result_of(&lines);
    assert_eq!(done["host"], steady_id.as_str());
    assert_eq!(done["exit_status"], 3);
    assert_eq!(output_of(&lines, "stdout"), "hello pool\n");
    assert_eq!(output_of(&lines, "stderr"), "warn\n");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("upper.txt")).unwrap(),
        "HELLO POOL\n",
        "declared outputs land in --output-dir (also with --json)"
    );

    // The host dies mid-job: the job completes on the other host.
    let mut job = submit(
        &consumer,
        &[
            "--runtime",
            "2h",
            "--limit",
            "10m",
            "--",
            "sh",
            "-c",
            "sleep 3; echo survived",
        ],
    );
    let submitted = job.wait_until("handed to a host", Duration::from_secs(60), |l| {
        l["type"] == "task" && l["state"] == "running"
    });
    assert_eq!(submitted["host"], steady_id.as_str());
    job.wait_until("started", Duration::from_secs(60), |l| {
        l["type"] == "task" && l["event"] == "started"
    });
    let mut steady = steady;
    steady.kill9();
    let (code, lines) = job.finish(JOB_TIMEOUT);
    assert_eq!(code, 0, "{lines:#?}");
    // The task went back to the queue from the dead host, with a reason.
    assert!(lines.iter().any(|l| l["type"] == "task"
        && l["state"] == "queued"
        && l["host"] == steady_id.as_str()
        && l["reason"].is_string()));
    let done = result_of(&lines);
    assert_eq!(done["host"], flaky_id.as_str());
    assert_eq!(done["attempts"], 2);
    assert_eq!(output_of(&lines, "stdout"), "survived\n");
    drop(flaky);
}

/// `mib` MiB of reproducible bytes that do not compress.
fn big_input(path: &std::path::Path, mib: u64) -> Vec<u8> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut data = Vec::with_capacity((mib << 20) as usize);
    while data.len() < (mib << 20) as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, &data).unwrap();
    data
}

/// The host's job events a task line reported.
fn events(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["type"] == "task" && l["event"].is_string())
        .map(|l| l["event"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_64_mib_input_runs_and_crosses_to_its_host_once_for_two_jobs() {
    let host = started(pool_node(Some(&history(0)), &[]));
    let bootstrap = addr(&host);
    let consumer = started(pool_node(None, &["--bootstrap", &bootstrap, "--no-guest"]));
    let host_id = peer(&host);
    hosts_until(&consumer, Duration::from_secs(40), |r| {
        host_entry(r, &host_id).is_some_and(|h| h["tr"].is_number())
    });
    let input = consumer.dir.join("big.bin");
    let data = big_input(&input, 64);
    for job in 0..2 {
        let out_dir = consumer.dir.join(format!("results-{job}"));
        let (code, lines) = submit(
            &consumer,
            &[
                "--runtime",
                "10m",
                "--input",
                input.to_str().unwrap(),
                "--output",
                "tail.bin",
                "--output-dir",
                out_dir.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "wc -c < big.bin; tail -c 4096 big.bin > tail.bin",
            ],
        )
        .finish(JOB_TIMEOUT);
        assert_eq!(code, 0, "{lines:#?}");
        let done = result_of(&lines);
        assert_eq!(done["host"], host_id.as_str());
        assert_eq!(
            output_of(&lines, "stdout").trim(),
            (64u64 << 20).to_string()
        );
        assert_eq!(
            std::fs::read(out_dir.join("tail.bin")).unwrap(),
            data[data.len() - 4096..],
            "the guest saw the consumer's bytes; the output matched its hash and landed"
        );
        // Only the declared output lands there; the staging dir is gone.
        let names: Vec<_> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["tail.bin"], "{names:?}");
        // The host says where the input came from: read once, then its cache.
        let (fetched, cached) = if job == 0 {
            (64u64 << 20, 0)
        } else {
            (0, 64u64 << 20)
        };
        let want =
            format!("inputs ready: {fetched} bytes fetched, {cached} bytes from the host's cache");
        assert!(
            events(&lines).contains(&want),
            "job {job}: {:#?}",
            events(&lines)
        );
    }
}

#[test]
fn a_private_pool_keeps_out_other_keys_and_only_allowlisted_consumers_submit() {
    let temp = tempfile::tempdir().unwrap();
    let key = |name: &str, byte: u8| {
        let path = temp.path().join(name);
        let hex: String = std::iter::repeat_n(format!("{byte:02x}"), 32).collect();
        std::fs::write(&path, format!("/key/swarm/psk/1.0.0/\n/base16/\n{hex}\n")).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (ours, theirs) = (key("ours.key", 0x11), key("theirs.key", 0x22));
    let allowed = started(pool_node(None, &["--swarm-key", &ours, "--no-guest"]));
    let refused = started(pool_node(None, &["--swarm-key", &ours, "--no-guest"]));
    let stranger = started(pool_node(None, &["--swarm-key", &theirs]));
    let allowed_id = peer(&allowed);
    let host = started(pool_node(
        None,
        &[
            "--swarm-key",
            &ours,
            "--allow",
            &allowed_id,
            "--bootstrap",
            &addr(&allowed),
            "--bootstrap",
            &addr(&refused),
            "--bootstrap",
            &addr(&stranger),
        ],
    ));
    let host_id = peer(&host);
    // Heard through the private pool (its summary: `hosts` asks nobody).
    hosts_until(&allowed, Duration::from_secs(30), |r| {
        host_entry(r, &host_id).is_some_and(|h| h["summarised"] == true)
    });
    hosts_until(&refused, Duration::from_secs(30), |r| {
        host_entry(r, &host_id).is_some_and(|h| h["summarised"] == true)
    });

    let (code, lines) = submit(&allowed, &["--", "echo", "inside"]).finish(JOB_TIMEOUT);
    assert_eq!(code, 0, "{lines:#?}");
    assert_eq!(output_of(&lines, "stdout"), "inside\n");

    // Refused for good by the only host: `submit` gives up after its queue
    // limit and says why.
    let (code, lines) =
        submit(&refused, &["--queue-limit", "5s", "--", "echo", "outside"]).finish(JOB_TIMEOUT);
    assert_eq!(code, 75, "{lines:#?}");
    let refusal = format!("refused by {host_id}: NotAllowed");
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "task"
                && l["reason"].as_str().is_some_and(|r| r.contains(&refusal))),
        "{lines:#?}"
    );
    let end = result_of(&lines);
    assert_eq!(end["state"], "cancelled", "{end:#}");
    assert!(
        end["reason"].as_str().unwrap().contains(&refusal),
        "{end:#}"
    );

    // The node with another key never got in, though the host dialled it.
    let report = hosts(&stranger);
    assert!(report["hosts"].as_array().unwrap().is_empty(), "{report:#}");
    let from_host = hosts(&host);
    assert!(
        host_entry(&from_host, &peer(&stranger)).is_none(),
        "{from_host:#}"
    );
    assert!(
        host_entry(&from_host, &allowed_id).is_some(),
        "{from_host:#}"
    );
    assert!(host.log().contains("joined the pool"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_are_refused_and_the_node_keeps_serving() {
    let node = started(pool_node(None, &[]));
    let target: libp2p::Multiaddr = addr(&node).parse().unwrap();
    let peer_id: libp2p::PeerId = peer(&node).parse().unwrap();

    assert!(!net_support::send_raw(&target, peer_id, vec![0xff, 0xff, 0xff, 0xff, 1, 2]).await);
    let mut garbage = 24u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0xfd; 24]);
    assert!(!net_support::send_raw(&target, peer_id, garbage).await);
    // Garbage below libp2p: raw bytes on the TCP port.
    let port = target
        .iter()
        .find_map(|p| match p {
            libp2p::multiaddr::Protocol::Tcp(port) => Some(port),
            _ => None,
        })
        .unwrap();
    {
        use std::io::Write;
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = tcp.write_all(&[0xAB; 64 * 1024]);
    }
    // An unknown protocol version, or one this node no longer speaks, is
    // refused at negotiation.
    for unknown in [
        "/gleaner/reliability/1",
        "/gleaner/job/99",
        "/gleaner/data/99",
    ] {
        assert_eq!(
            net_support::send_raw_on(unknown, &target, peer_id, vec![0, 0, 0, 0]).await,
            net_support::RawOutcome::Unsupported,
            "{unknown}"
        );
    }
    // A well-formed query still gets an answer from the live node.
    let query = gleaner::net::protocol::ReliabilityQuery {
        window_start_unix: 0,
        length_secs: 3600,
        memory_mib: 0,
    };
    let good =
        gleaner::net::codec::encode_frame(&query, gleaner::net::protocol::RELIABILITY_REQUEST_CAP)
            .unwrap();
    assert!(net_support::send_raw(&target, peer_id, good).await);
    let status = node.status();
    assert_eq!(status["pid"], node.pid(), "{status:#}");
}
