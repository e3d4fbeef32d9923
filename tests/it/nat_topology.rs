//! Homes behind NAT routers, proven end to end: a relay on a small "internet" and
//! three homes, each behind its own masquerading router, built from network
//! namespaces (see `nat_support`). The nodes are real `gleaner node` processes
//! configured like `netconf/public.toml` (both on port 4610, mDNS off, the relay as
//! bootstrap).
//!
//! Homes 0 and 1 sit behind cone NATs, home 2 behind a symmetric one. Which pairs can
//! be upgraded by DCUtR hole punching, and so which the test asserts:
//! - cone + cone (0–1): yes. Each side's public port is the one the relay observed,
//!   and the simultaneous dials open both routers' filters.
//! - cone + symmetric (0–2): no. The symmetric router gives the punching connection
//!   a fresh port, not the one the relay observed, so the cone side's filter drops
//!   it; the pair stays on the relay.
//!
//! The test skips only after proving the machine cannot build the topology (no
//! `ip`/`nft`, or no right to create a network namespace), and says which. Figures
//! (discovery, query round trips, recovery) are printed, not asserted; run with
//! `cargo test --test it nat_topology:: -- --nocapture` to see them.

use crate::nat_support;
use crate::node_support;

use std::time::{Duration, Instant};

use nat_support::{Nat, Topology, RELAY_IP};
use node_support::{history, NodeFixture, QUIET_HOST};
use serde_json::Value;

const MONITOR: &str =
    "[monitor]\nmin_period_secs = 1\nmax_period_secs = 1\nextra_sample_chance = 0.0\n";

/// `netconf/public.toml` with the relay as bootstrap, short announce and request
/// periods (the test waits on them), mDNS off.
fn home_config(pool: &str, bootstrap: &str) -> String {
    format!(
        "[policy]\nsustain_secs = 60\n\n[net]\npool = \"{pool}\"\n\
         listen = [\"/ip4/0.0.0.0/tcp/4610\", \"/ip4/0.0.0.0/udp/4610/quic-v1\"]\n\
         bootstrap = [\"{bootstrap}\"]\nmdns = false\nkad_server = false\nautonat = true\n\
         announce_secs = 2\nrequest_timeout_secs = 5\n\n{MONITOR}"
    )
}

/// The relay: the same file, run with `--relay --no-guest`.
fn relay_config(pool: &str) -> String {
    format!(
        "[net]\npool = \"{pool}\"\n\
         listen = [\"/ip4/0.0.0.0/tcp/4610\", \"/ip4/0.0.0.0/udp/4610/quic-v1\"]\n\
         mdns = false\nautonat = false\nannounce_secs = 2\nrequest_timeout_secs = 5\n\n{MONITOR}"
    )
}

fn peer(node: &NodeFixture) -> String {
    node.ready_value("peer id")
        .expect("the node prints its peer id")
}

fn hosts(node: &NodeFixture, rounds: u32) -> Value {
    let rounds = rounds.to_string();
    // --probe: these tests are about reaching each host (answered, round
    // trips), which `hosts` shows only when it asks them.
    serde_json::from_str(&node.run_ok(&[
        "hosts", "--json", "--window", "1h", "--rounds", &rounds, "--probe",
    ]))
    .unwrap()
}

fn host_entry<'a>(report: &'a Value, peer: &str) -> Option<&'a Value> {
    report["hosts"]
        .as_array()?
        .iter()
        .find(|h| h["peer"] == peer)
}

fn has_tr(report: &Value, peer: &str) -> bool {
    host_entry(report, peer).is_some_and(|h| h["answered"] == true && h["tr"].is_number())
}

/// Polls `hosts` on `node` until `pred` holds; returns the report and the time taken.
fn hosts_until(
    node: &NodeFixture,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let report = hosts(node, 1);
        if pred(&report) {
            return (report, start.elapsed());
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}; last hosts {report:#}\nstatus {:#}\nnode log tail:\n{}",
            node.status()["network"],
            tail(&node.log(), 60)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn network(node: &NodeFixture) -> Value {
    node.status()["network"].clone()
}

/// The status entry of our connections to `peer`.
fn link(net: &Value, peer: &str) -> Option<Value> {
    net["peers"]
        .as_array()?
        .iter()
        .find(|p| p["peer"] == peer)
        .cloned()
}

fn relay_entry(net: &Value) -> Value {
    net["relays"]
        .as_array()
        .and_then(|r| r.first().cloned())
        .unwrap_or(Value::Null)
}

/// Polls the network part of `status` until `pred` holds; returns the time taken.
fn network_until(
    node: &NodeFixture,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Duration {
    let start = Instant::now();
    node.wait_status(timeout, what, |s| pred(&s["network"]));
    start.elapsed()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[test]
fn homes_behind_nat_find_query_punch_through_and_recover() {
    if let Err(nat_support::Unsupported(why)) = nat_support::probe() {
        eprintln!("SKIPPED homes_behind_nat: {why}");
        return;
    }
    // Declared first, dropped last: the nodes leave their namespaces before these go.
    let topo = Topology::build(&[Nat::Cone, Nat::Cone, Nat::Symmetric])
        .unwrap_or_else(|e| panic!("building the namespaces failed: {e}"));
    let pool = format!("nat-{}", topo.id);

    let mut relay = NodeFixture::new(&relay_config(&pool), None);
    relay.netns = Some(topo.internet());
    relay.node_args = vec!["--relay".into(), "--no-guest".into()];
    relay.start();
    let relay_id = peer(&relay);
    let bootstrap = format!("/ip4/{RELAY_IP}/tcp/4610/p2p/{relay_id}");

    // Homes 0 and 1 have a quiet owner; home 2's owner is busy 20 minutes an hour,
    // so the consumer's job goes to home 1 (over the punched connection).
    let mut homes: Vec<NodeFixture> = [0, 0, 20]
        .iter()
        .enumerate()
        .map(|(h, &busy)| {
            let mut node = NodeFixture::new(&home_config(&pool, &bootstrap), Some(QUIET_HOST));
            let trace = node.dir.join("history.csv");
            std::fs::write(&trace, history(busy)).unwrap();
            node.run_ok(&["history", "import", trace.to_str().unwrap()]);
            node.netns = Some(topo.home(h));
            node
        })
        .collect();
    let started = Instant::now();
    for node in &mut homes {
        node.start();
    }
    let ids: Vec<String> = homes.iter().map(peer).collect();
    let (a, b, c) = (&homes[0], &homes[1], &homes[2]);

    // AutoNAT says each home is private; each reserves a slot on the relay and is
    // reachable through it; nothing it announces is a loopback or LAN address.
    for (h, node) in homes.iter().enumerate() {
        let took = network_until(node, Duration::from_secs(60), "private + relay slot", |n| {
            n["nat"] == "private" && relay_entry(n)["reserved"] == true
        });
        let net = network(node);
        eprintln!(
            "nat: home {h} private with a relay slot after {:.1} s (since start {:.1} s)",
            secs(took),
            secs(started.elapsed())
        );
        let circuit = format!("/ip4/{RELAY_IP}/tcp/4610/p2p/{relay_id}/p2p-circuit");
        let reachable: Vec<&str> = net["reachable_at"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            reachable.iter().any(|r| r.starts_with(&circuit)),
            "home {h} is reachable through the relay: {net:#}"
        );
        let announced = net["announced"].as_array().unwrap();
        assert!(!announced.is_empty(), "home {h} announces: {net:#}");
        for addr in announced.iter().filter_map(Value::as_str) {
            assert!(
                !addr.contains("/127.")
                    && !addr.contains("/192.168.")
                    && !addr.contains("/0.0.0.0/"),
                "home {h} announces an address no other home can reach: {addr}"
            );
        }
    }

    // Each home lists the others with a TR, across the relay.
    let (report, took) = hosts_until(
        a,
        Duration::from_secs(60),
        "home 0 lists homes 1 and 2",
        |r| has_tr(r, &ids[1]) && has_tr(r, &ids[2]),
    );
    eprintln!(
        "nat: home 0 lists homes 1 and 2 with a TR {:.1} s after the homes started ({:.1} s polling)",
        secs(started.elapsed()),
        secs(took)
    );
    let _ = report;
    let (_, took) = hosts_until(c, Duration::from_secs(30), "home 2 lists home 0", |r| {
        has_tr(r, &ids[0])
    });
    eprintln!(
        "nat: home 2 lists home 0 with a TR after {:.1} s more",
        secs(took)
    );

    // DCUtR: cone + cone is upgraded to a direct connection...
    let took = network_until(a, Duration::from_secs(30), "a direct connection 0-1", |n| {
        link(n, &ids[1]).is_some_and(|l| l["direct"].as_u64() > Some(0))
    });
    eprintln!(
        "nat: 0-1 (cone+cone) direct {:.1} s after the first query",
        secs(took)
    );
    // ...cone + symmetric is not: the punch toward the symmetric router's fresh port
    // is dropped, the pair stays on the relay. Where punching works here it takes well
    // under a second (0–1 above), so ten more seconds without a direct 0–2 connection
    // is a fair "no"; the failed attempt itself surfaces only when the dropped TCP
    // SYNs time out (minutes), so it is reported, not awaited.
    std::thread::sleep(Duration::from_secs(10));
    let net_a = network(a);
    let net_c = network(c);
    let to_c = link(&net_a, &ids[2]).unwrap_or(Value::Null);
    assert!(
        to_c["direct"] == 0 && to_c["relayed"].as_u64() > Some(0),
        "cone+symmetric stays on the relay (a direct connection means the symmetric \
         router does not behave as one): {net_a:#}\nrouter 2:\n{}",
        topo.ruleset(2)
    );
    eprintln!(
        "nat: 0-2 (cone+symmetric) still relayed only after 10 s; hole punching so far: \
         home 0 {} upgraded / {} failed, home 2 {} upgraded / {} failed",
        net_a["dcutr_upgraded"],
        net_a["dcutr_failed"],
        net_c["dcutr_upgraded"],
        net_c["dcutr_failed"]
    );

    // Queries over the relay (0→2) and over the punched connection (0→1).
    let report = hosts(a, 20);
    for (who, via) in [(1, "direct"), (2, "relay")] {
        let h = host_entry(&report, &ids[who]).expect("listed");
        assert_eq!(
            h["responses"], 20,
            "every query to home {who} answered: {h:#}"
        );
        eprintln!(
            "nat: query 0→{who} over the {via}: p50 {:.2} ms, p99 {:.2} ms",
            h["rtt_p50_ms"].as_f64().unwrap(),
            h["rtt_p99_ms"].as_f64().unwrap()
        );
    }

    // A job with an input runs from home 0 on home 1, the most reliable host, over
    // the punched connection: the relayed one is closed once a direct one exists.
    let net_a = network(a);
    let to_b = link(&net_a, &ids[1]).unwrap_or(Value::Null);
    assert!(
        to_b["direct"].as_u64() > Some(0) && to_b["relayed"] == 0,
        "only the direct connection 0-1 is left: {net_a:#}"
    );
    let input = a.dir.join("input.bin");
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let job_started = Instant::now();
    let (code, lines) = a
        .json_stream(
            "submit",
            &[
                "--runtime",
                "2h",
                "--limit",
                "5m",
                "--input",
                input.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "wc -c < input.bin",
            ],
        )
        .finish(Duration::from_secs(90));
    assert_eq!(code, 0, "{lines:#?}");
    let done = lines
        .iter()
        .find(|l| l["type"] == "result")
        .expect("result");
    assert_eq!(done["host"], ids[1].as_str(), "{lines:#?}");
    eprintln!(
        "nat: 1 MiB job 0→1 over the punched connection: {:.2} s",
        secs(job_started.elapsed())
    );

    // A 50 MiB input crosses over the same direct connection: the host reads it
    // from home 0 over /gleaner/data/1, which refuses relayed circuits.
    let big = a.dir.join("big.bin");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(50 << 20).unwrap();
    drop(file);
    let big_started = Instant::now();
    let (code, lines) = a
        .json_stream(
            "submit",
            &[
                "--runtime",
                "2h",
                "--limit",
                "5m",
                "--input",
                big.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "wc -c < big.bin",
            ],
        )
        .finish(Duration::from_secs(180));
    assert_eq!(code, 0, "{lines:#?}");
    let done = lines
        .iter()
        .find(|l| l["type"] == "result")
        .expect("result");
    assert_eq!(done["host"], ids[1].as_str(), "{lines:#?}");
    assert!(
        lines.iter().any(|l| l["type"] == "task"
            && l["event"]
                .as_str()
                .is_some_and(|e| e.starts_with("inputs ready: 52428800 bytes fetched"))),
        "the host read the 50 MiB input from home 0: {lines:#?}"
    );
    let big_secs = secs(big_started.elapsed());
    eprintln!(
        "nat: 50 MiB job 0→1 over the punched connection: {big_secs:.2} s ({:.1} MB/s end to end, job included)",
        52.428_8 / big_secs
    );

    // Churn 1: the relay restarts. Every home reserves a slot again, and the pair that
    // only the relay connects (0–2) finds each other again.
    let before: Vec<u64> = homes
        .iter()
        .map(|n| {
            relay_entry(&network(n))["reservations"]
                .as_u64()
                .unwrap_or(0)
        })
        .collect();
    relay.stop();
    let restarted = Instant::now();
    relay.start();
    for (h, node) in homes.iter().enumerate() {
        network_until(
            node,
            Duration::from_secs(45),
            "a new relay reservation",
            |n| {
                let r = relay_entry(n);
                r["reserved"] == true && r["reservations"].as_u64() > Some(before[h])
            },
        );
        eprintln!(
            "nat: relay restart: home {h} reserved again {:.1} s after the restart",
            secs(restarted.elapsed())
        );
    }
    let (_, _) = hosts_until(
        a,
        Duration::from_secs(45),
        "home 0 lists home 2 again",
        |r| has_tr(r, &ids[2]),
    );
    eprintln!(
        "nat: relay restart: home 0 queries home 2 again {:.1} s after the restart",
        secs(restarted.elapsed())
    );
    assert!(
        link(&network(a), &ids[1]).is_some_and(|l| l["direct"].as_u64() > Some(0)),
        "the punched connection 0-1 survives the relay restart"
    );

    // Churn 2: home 2's symmetric router forgets its NAT mappings; its connection to
    // the relay breaks on the next packet, it re-dials and re-reserves, and home 0
    // reaches it again.
    let before = relay_entry(&network(c))["reservations"]
        .as_u64()
        .unwrap_or(0);
    topo.flush_nat(2)
        .unwrap_or_else(|e| panic!("flushing router 2's mappings (conntrack): {e}"));
    let flushed = Instant::now();
    network_until(
        c,
        Duration::from_secs(60),
        "home 2 re-reserves after the flush",
        |n| {
            let r = relay_entry(n);
            r["reserved"] == true && r["reservations"].as_u64() > Some(before)
        },
    );
    eprintln!(
        "nat: NAT flush at router 2: home 2 reserved again after {:.1} s",
        secs(flushed.elapsed())
    );
    hosts_until(
        a,
        Duration::from_secs(45),
        "home 0 lists home 2 after the flush",
        |r| has_tr(r, &ids[2]),
    );
    eprintln!(
        "nat: NAT flush at router 2: home 0 queries home 2 again {:.1} s after the flush",
        secs(flushed.elapsed())
    );

    // Where only the relay connects (home 2 behind the symmetric NAT), a job's
    // input does not cross: each host waits for a direct connection, then
    // says it did not start and why; `submit` ends with 75 and that reason,
    // never hanging.
    hosts_until(
        c,
        Duration::from_secs(45),
        "home 2 lists homes 0 and 1",
        |r| has_tr(r, &ids[0]) && has_tr(r, &ids[1]),
    );
    let small = c.dir.join("small.bin");
    std::fs::write(&small, vec![1u8; 1 << 20]).unwrap();
    let relay_only = Instant::now();
    let (code, lines) = c
        .json_stream(
            "submit",
            &[
                "--runtime",
                "2h",
                "--queue-limit",
                "5s",
                "--input",
                small.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "wc -c < small.bin",
            ],
        )
        .finish(Duration::from_secs(240));
    assert_eq!(code, 75, "{lines:#?}");
    let said = |l: &Value| {
        ["event", "reason"].iter().any(|k| {
            l[*k]
                .as_str()
                .is_some_and(|t| t.contains("only a relayed connection to the consumer"))
        })
    };
    assert!(lines.iter().any(said), "the hosts said why: {lines:#?}");
    eprintln!(
        "nat: a job with a 1 MiB input from home 2 (symmetric NAT, relay only): refused with the reason after {:.1} s",
        secs(relay_only.elapsed())
    );
    let _ = b;
}
