//! A rogue host in a pool of real `gleaner node` processes on 127.0.0.1
//! (issue 30): a peer of its own (its own swarm in this test process,
//! speaking the pool's protocols) that announces a benchmark score of
//! `u64::MAX`, answers every reliability query with TR 1, accepts every job,
//! says it finished at once, and serves a stdout whose bytes do not match
//! the hash it reports. Under the default `--verify none`, the batch still
//! lands every task from the honest host, once and right; the honest host's
//! power is not taken to 0 by the rogue's score; and afterwards the rogue
//! is last in `gleaner hosts`, with its offences counted, also after the
//! consumer restarts. mDNS is off; everything is on loopback.

use crate::node_support::{addr, batch_until, peer, pool_of};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gleaner::model::ids::PoolName;
use gleaner::model::state::State;
use gleaner::net::protocol::{
    FailureByCause, JobEventKind, JobRequest, JobResponse, ReliabilityAnswer, ReliabilityResponse,
    RemoteJobState, WireState,
};
use gleaner::net::{start, LocalStatus, NetConfig, NetEvent, NetHandle};
use libp2p::identity::Keypair;
use libp2p::Multiaddr;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const TASKS: u32 = 4;

/// What the rogue serves as every job's stdout, and the hash it claims.
const LIE: &[u8] = b"wrong\n";
const CLAIMED: &[u8] = b"right\n";

/// The rogue's swarm and what it counts; stops when dropped.
struct Rogue {
    handle: NetHandle,
    submits: Arc<AtomicUsize>,
    cancel: CancellationToken,
}

impl Drop for Rogue {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn rogue_answer() -> ReliabilityResponse {
    ReliabilityResponse::Answer(ReliabilityAnswer {
        tr: 1.0,
        failure: FailureByCause {
            s3: 0.0,
            s4: 0.0,
            s5: 0.0,
        },
        initial_state: WireState::S1,
        days_used: 21,
        method: "km".into(),
        relative_power_milli: 1000,
        slot_free: true,
        curve: Vec::new(),
        availability_milli: Some(1000),
        speed_milli: 1000,
        spells: None,
        spell_lengths: None,
    })
}

/// Starts the rogue, bootstrapped from `boot`, and serves the pool as a
/// liar until dropped.
async fn start_rogue(boot: Multiaddr) -> Rogue {
    let cancel = CancellationToken::new();
    let mut cfg = NetConfig::loopback(&PoolName::default());
    cfg.bootstrap = vec![boot];
    cfg.announce_interval = Duration::from_secs(1);
    let (handle, mut events, event_loop) =
        start(Keypair::generate_ed25519(), cfg, cancel.clone()).unwrap();
    tokio::spawn(event_loop.run());
    handle
        .announce(LocalStatus {
            logical_cpus: 64,
            memory_mib: 1 << 20,
            benchmark_score: u64::MAX,
            relative_power_milli: 1000,
            state: State::S1,
            slot_free: true,
        })
        .await
        .unwrap();
    let submits = Arc::new(AtomicUsize::new(0));
    let counted = submits.clone();
    let net = handle.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                NetEvent::ReliabilityQuery { reply, .. } => {
                    let _ = reply.send(rogue_answer());
                }
                NetEvent::JobRequest {
                    peer,
                    request,
                    reply,
                } => match request {
                    JobRequest::Submit(s) => {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let _ = reply.send(JobResponse::Accepted);
                        // "Finished at once", told as a host tells it.
                        let net = net.clone();
                        tokio::spawn(async move {
                            for (seq, kind) in [
                                JobEventKind::Started,
                                JobEventKind::Finished {
                                    exit_status: 0,
                                    usage: None,
                                },
                            ]
                            .into_iter()
                            .enumerate()
                            {
                                let event = JobRequest::Event {
                                    job_id: s.job_id.clone(),
                                    seq: seq as u32,
                                    time_unix: 0,
                                    kind,
                                };
                                let _ = net.job_request(peer, event).await;
                            }
                        });
                    }
                    JobRequest::Fetch { offset, len, .. } => {
                        let first = offset == 0 && len > 0;
                        let _ = reply.send(JobResponse::Chunk {
                            data: if first { LIE.to_vec() } else { Vec::new() },
                            total_len: LIE.len() as u64,
                            hash: first.then(|| *blake3::hash(CLAIMED).as_bytes()),
                        });
                    }
                    JobRequest::Query { .. } => {
                        let _ = reply.send(JobResponse::JobState(RemoteJobState::Ended(
                            JobEventKind::Finished {
                                exit_status: 0,
                                usage: None,
                            },
                        )));
                    }
                    JobRequest::Cancel { .. } => {
                        let _ = reply.send(JobResponse::Cancelled);
                    }
                    JobRequest::Event { .. } => {
                        let _ = reply.send(JobResponse::NotFound);
                    }
                },
                _ => {}
            }
        }
    });
    Rogue {
        handle,
        submits,
        cancel,
    }
}

fn hosts_report(consumer: &crate::node_support::NodeFixture) -> Value {
    serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap()
}

fn entry<'a>(report: &'a Value, peer: &str) -> Option<(usize, &'a Value)> {
    report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .find(|(_, h)| h["peer"] == peer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rogue_host_costs_the_batch_nothing_and_is_ranked_last_also_after_a_restart() {
    let (hosts, mut consumer) = tokio::task::block_in_place(|| pool_of(1));
    let honest = peer(&hosts[0]);
    let boot: Multiaddr = addr(&hosts[0]).parse().unwrap();
    let rogue = start_rogue(boot).await;
    let rogue_id = rogue.handle.peer_id().to_base58();

    // The consumer sees the rogue, first by its claimed TR 1, and the
    // honest host's power is not taken to 0 by the rogue's score.
    let report = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let report = hosts_report(&consumer);
            let seen = entry(&report, &rogue_id).is_some_and(|(_, h)| h["tr"] == 1.0);
            if seen {
                break report;
            }
            assert!(Instant::now() < deadline, "never saw the rogue: {report:#}");
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let (_, h) = entry(&report, &honest).expect("the honest host is listed");
    let power = h["power"].as_f64().unwrap_or(0.0);
    assert!(power > 0.5, "the honest host's power: {power} ({report:#})");

    let out = consumer.dir.join("rogue-out");
    let id = tokio::task::block_in_place(|| {
        let range = format!("0..{TASKS}");
        let answer = consumer.run_ok(&[
            "--json",
            "batch",
            "submit",
            "--range",
            &range,
            "--runtime",
            "1m",
            "--output-dir",
            out.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo $(( {} * 7 ))",
        ]);
        serde_json::from_str::<Value>(&answer).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    });
    let status = tokio::task::block_in_place(|| {
        batch_until(&consumer, &id, Duration::from_secs(240), |s| {
            s["counts"]["queued"] == 0 && s["counts"]["running"] == 0
        })
    });
    assert_eq!(status["counts"]["done"], TASKS, "{status:#}");
    for task in 0..TASKS {
        let stdout = std::fs::read_to_string(out.join(task.to_string()).join("stdout"))
            .unwrap_or_else(|e| panic!("task {task}: {e}\n{status:#}"));
        assert_eq!(stdout, format!("{}\n", task * 7), "task {task}");
        assert_eq!(
            status["tasks"][task as usize]["host"], honest,
            "task {task} landed from the honest host: {status:#}"
        );
    }
    let tried = rogue.submits.load(Ordering::SeqCst);
    assert!(
        tried >= 1,
        "the rogue was never tried: the test proves nothing"
    );

    // Afterwards: the rogue is last, its lies counted; and so after a
    // restart of the consumer.
    let check = |report: &Value, when: &str| {
        let count = report["hosts"].as_array().unwrap().len();
        let (place, r) = entry(report, &rogue_id)
            .unwrap_or_else(|| panic!("{when}: the rogue is not listed: {report:#}"));
        assert_eq!(
            place,
            count - 1,
            "{when}: the rogue is not last: {report:#}"
        );
        assert!(r["invalid"].as_u64().unwrap_or(0) >= 1, "{when}: {r:#}");
        assert_ne!(r["standing"], "clean", "{when}: {r:#}");
        let (_, h) = entry(report, &honest).unwrap();
        assert_eq!(h["standing"], "clean", "{when}: {h:#}");
    };
    let report = tokio::task::block_in_place(|| hosts_report(&consumer));
    check(&report, "before the restart");
    let report = tokio::task::block_in_place(|| {
        consumer.stop();
        consumer.start();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let report = hosts_report(&consumer);
            if entry(&report, &rogue_id).is_some() && entry(&report, &honest).is_some() {
                break report;
            }
            assert!(Instant::now() < deadline, "after the restart: {report:#}");
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    check(&report, "after the restart");
    eprintln!("the rogue was sent {tried} job(s); {report:#}");
}
