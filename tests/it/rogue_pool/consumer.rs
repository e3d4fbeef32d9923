//! Issue 30, scope 5: the rogue as a consumer. A peer of its own (its own
//! swarm in this test process, speaking `/gleaner/job/3` from PROTOCOL.md's
//! tables) submits hostile jobs to a real `gleaner node` on 127.0.0.1:
//! absurd sizes, wall-time limits of 0 and `u64::MAX`, inputs at one path,
//! paths that leave the job directory, events sent to a host, requests for
//! jobs it never submitted, a job id used twice, a cancel, and a flood. The
//! host refuses each with the documented answer, keeps answering `status`,
//! writes nothing outside its data dir, keeps at most its list of jobs, and
//! serves other peers through a flood.

use crate::node_support::{addr, history, peer, pool_node, wait_until, NodeFixture};

use std::time::{Duration, Instant};

use gleaner::model::ids::PoolName;
use gleaner::net::codec::{read_frame, write_frame, DATA_CAPS};
use gleaner::net::protocol::{
    DataRequest, DataResponse, InputRef, JobEventKind, JobRequest, JobResponse, JobSubmit,
    OutputName, RejectReason, RemoteJobState, DATA_PROTOCOL,
};
use gleaner::net::{start, LocalStatus, NetConfig, NetEvent, NetHandle};
use libp2p::identity::Keypair;
use libp2p::{Multiaddr, PeerId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The host's caps on inputs, small so that the rogue can pass them with
/// claims alone.
const HOST_GUEST: &str = "\n[guest]\nmax_input_mib = 1\nmax_job_input_mib = 2\nmax_runtime_secs = 3600\nmax_mem_mib = 4096\n";

/// The rogue consumer's swarm, and the job events hosts send it.
pub(super) struct RogueConsumer {
    pub(super) handle: NetHandle,
    events: mpsc::UnboundedReceiver<(String, JobEventKind)>,
    pub(super) host: PeerId,
    cancel: CancellationToken,
}

impl Drop for RogueConsumer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl RogueConsumer {
    /// Starts the rogue, connected to `host`; every job event it is sent is
    /// acknowledged and kept.
    pub(super) async fn start(host: &NodeFixture) -> RogueConsumer {
        let cancel = CancellationToken::new();
        let target: Multiaddr = addr(host).parse().unwrap();
        let mut cfg = NetConfig::loopback(&PoolName::default());
        cfg.bootstrap = vec![target.clone()];
        let (handle, mut net_events, event_loop) =
            start(Keypair::generate_ed25519(), cfg, cancel.clone()).unwrap();
        tokio::spawn(event_loop.run());
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(event) = net_events.recv().await {
                if let NetEvent::JobRequest {
                    request: JobRequest::Event { job_id, kind, .. },
                    reply,
                    ..
                } = event
                {
                    let _ = reply.send(JobResponse::EventAck);
                    let _ = tx.send((job_id, kind));
                }
            }
        });
        let host_id = handle.dial(target).await.unwrap();
        RogueConsumer {
            handle,
            events,
            host: host_id,
            cancel,
        }
    }

    pub(super) async fn ask(&self, request: JobRequest) -> JobResponse {
        self.handle
            .job_request(self.host, request)
            .await
            .unwrap_or_else(|e| panic!("the host did not answer: {e}"))
    }

    /// Submits until the host takes the job (it may be busy, or not yet in
    /// S1 right after its start); panics on any other answer or after 60 s.
    pub(super) async fn submit_accepted(&self, job: JobSubmit) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.ask(JobRequest::Submit(job.clone())).await {
                JobResponse::Accepted => return,
                JobResponse::Rejected(RejectReason::Busy | RejectReason::HostState(_))
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                other => panic!("{}: {other:?}", job.job_id),
            }
        }
    }

    /// Waits for the event that ends `job_id` (skipping progress and other
    /// jobs' events); panics after 60 s.
    pub(super) async fn end_of(&mut self, job_id: &str) -> JobEventKind {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let next = tokio::time::timeout_at(deadline, self.events.recv()).await;
            let (id, kind) = next
                .unwrap_or_else(|_| panic!("{job_id} never ended"))
                .expect("the rogue's network stopped");
            let ends = matches!(
                kind,
                JobEventKind::Finished { .. }
                    | JobEventKind::Killed { .. }
                    | JobEventKind::KilledOverMemory
                    | JobEventKind::NotStarted { .. }
                    | JobEventKind::Cancelled { .. }
            );
            if id == job_id && ends {
                return kind;
            }
        }
    }

    /// The whole of one output of a job, read as a consumer reads it.
    async fn fetch_all(&self, job_id: &str, name: OutputName) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let fetch = JobRequest::Fetch {
                job_id: job_id.into(),
                name: name.clone(),
                offset: out.len() as u64,
                len: u32::MAX,
            };
            match self.ask(fetch).await {
                JobResponse::Chunk {
                    data, total_len, ..
                } => {
                    assert!(data.len() <= 1 << 20, "a chunk of {} bytes", data.len());
                    out.extend_from_slice(&data);
                    if out.len() as u64 >= total_len || data.is_empty() {
                        return Some(out);
                    }
                }
                JobResponse::NotFound => return None,
                other => panic!("fetch {job_id}: {other:?}"),
            }
        }
    }
}

/// A job the host takes: `sh -c SCRIPT`, small, a minute at most.
pub(super) fn job(job_id: &str, script: &str) -> JobSubmit {
    JobSubmit {
        job_id: job_id.into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: Vec::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        memory_mib: 64,
        expected_runtime_secs: 10,
        wall_time_limit_secs: 60,
        checkpoint: None,
    }
}

/// One data stream from `net` to `to` asking for a file nobody offered
/// (the hash made from `i`): whether the peer answered it, with its
/// refusal, within `wait`.
pub(crate) async fn ask_unoffered(net: &NetHandle, to: PeerId, i: u64, wait: Duration) -> bool {
    let ask = async {
        let mut stream = net.open_stream(to, DATA_PROTOCOL).await.ok()?;
        let mut hash = [0u8; 32];
        hash[..8].copy_from_slice(&i.to_le_bytes());
        let request = DataRequest {
            hash,
            size: 1,
            first_chunk: 0,
        };
        write_frame(&mut stream, &request, DATA_CAPS.request)
            .await
            .ok()?;
        read_frame::<DataResponse, _>(&mut stream, DATA_CAPS.response)
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(wait, ask).await,
        Ok(Some(DataResponse::Refused { .. }))
    )
}

/// The `i`th of a flood of summaries: a new benchmark score each time and a
/// slot that comes and goes (news for a consumer).
pub(crate) fn flood_status(i: u64) -> LocalStatus {
    LocalStatus {
        logical_cpus: 8,
        memory_mib: 8_192,
        benchmark_score: 1_000 + i,
        relative_power_milli: 500,
        state: gleaner::model::state::State::S1,
        slot_free: i % 2 == 0,
    }
}

fn input(path: &str, size: u64) -> InputRef {
    InputRef {
        path: path.into(),
        hash: [7; 32],
        size,
    }
}

/// A host of the pool with small input caps, started.
pub(super) fn hostile_target() -> NodeFixture {
    hostile_target_with("")
}

/// [`hostile_target`] with `net` (TOML lines) added to its `[net]` section.
pub(super) fn hostile_target_with(net: &str) -> NodeFixture {
    let mut host = pool_node(Some(&history(0)), &[]);
    let config = host.dir.join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let mut text = text.replacen("[net]\n", &format!("[net]\n{net}"), 1);
    text.push_str(HOST_GUEST);
    std::fs::write(&config, text).unwrap();
    host.start();
    host
}

/// `gleaner status` answers, and how long it took.
pub(super) fn status_time(host: &NodeFixture) -> Duration {
    let t = Instant::now();
    let status = host.status();
    assert_eq!(status["pid"], host.pid(), "{status:#}");
    t.elapsed()
}

/// Every path under `dir`, relative, except under `data/` (the node's own).
fn outside_data(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            if rel == "data" {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
            found.push(rel);
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_submissions_are_refused_as_documented_and_nothing_lands_outside_the_data_dir() {
    let host = tokio::task::block_in_place(hostile_target);
    let before = outside_data(&host.dir);
    let mut rogue = RogueConsumer::start(&host).await;
    assert_eq!(rogue.host.to_base58(), peer(&host));
    let tag = format!("gleaner-rogue-{}", std::process::id());
    let escape = std::env::temp_dir().join(&tag);

    let invalid = |answer: JobResponse, what: &str, says: &str| match answer {
        JobResponse::Rejected(RejectReason::Invalid(why)) => {
            assert!(why.contains(says), "{what}: {why:?} does not say {says:?}")
        }
        other => panic!("{what}: {other:?}"),
    };
    let with = |f: &dyn Fn(&mut JobSubmit)| {
        let mut j = job("hostile", "true");
        f(&mut j);
        JobRequest::Submit(j)
    };
    // Limits: 0 is not a limit; u64::MAX is more than any host offers.
    invalid(
        rogue.ask(with(&|j| j.wall_time_limit_secs = 0)).await,
        "wall-time limit 0",
        "wall-time limit",
    );
    assert_eq!(
        rogue
            .ask(with(&|j| j.wall_time_limit_secs = u64::MAX))
            .await,
        JobResponse::Rejected(RejectReason::TooBig),
        "wall-time limit u64::MAX"
    );
    assert_eq!(
        rogue.ask(with(&|j| j.memory_mib = u64::MAX)).await,
        JobResponse::Rejected(RejectReason::TooBig),
        "memory u64::MAX"
    );
    // Absurd input sizes, one and in sum (the sum saturates, never wraps).
    assert_eq!(
        rogue
            .ask(with(&|j| j.inputs = vec![input("big", u64::MAX)]))
            .await,
        JobResponse::Rejected(RejectReason::InputTooBig {
            path: "big".into(),
            size: u64::MAX,
            cap: 1 << 20,
        })
    );
    let three: Vec<InputRef> = (0..3).map(|i| input(&format!("in{i}"), 1 << 20)).collect();
    assert_eq!(
        rogue.ask(with(&|j| j.inputs = three.clone())).await,
        JobResponse::Rejected(RejectReason::InputsTooBig {
            total: 3 << 20,
            cap: 2 << 20,
        })
    );
    // Two inputs at one place.
    invalid(
        rogue
            .ask(with(&|j| j.inputs = vec![input("a", 1), input("a", 2)]))
            .await,
        "the same input path twice",
        "given twice",
    );
    invalid(
        rogue
            .ask(with(&|j| j.inputs = vec![input("a", 1), input("a/b", 2)]))
            .await,
        "an input inside another",
        "inside input",
    );
    // Paths that leave the job directory, as input, output or checkpoint.
    let outside = escape.display().to_string();
    let climbing = format!("../../../../../../../..{outside}");
    for path in [outside.as_str(), climbing.as_str(), "a/../../b", "", "./x"] {
        invalid(
            rogue.ask(with(&|j| j.inputs = vec![input(path, 1)])).await,
            &format!("input {path:?}"),
            "not a relative path",
        );
        invalid(
            rogue.ask(with(&|j| j.outputs = vec![path.into()])).await,
            &format!("output {path:?}"),
            "not a relative path",
        );
        invalid(
            rogue
                .ask(with(&|j| {
                    j.checkpoint = Some(gleaner::net::protocol::CheckpointOrder {
                        path: path.into(),
                        interval_secs: 60,
                        grace_secs: 1,
                    })
                }))
                .await,
            &format!("checkpoint {path:?}"),
            "not a relative path",
        );
    }
    // Malformed commands and ids.
    invalid(
        rogue.ask(with(&|j| j.argv.clear())).await,
        "no argv",
        "empty",
    );
    invalid(
        rogue.ask(with(&|j| j.argv = vec!["x".into(); 257])).await,
        "257 arguments",
        "more than 256",
    );
    invalid(
        rogue.ask(with(&|j| j.argv.push("nul\0byte".into()))).await,
        "a NUL",
        "NUL",
    );
    invalid(
        rogue
            .ask(with(&|j| j.env = vec![("A=B".into(), "c".into())]))
            .await,
        "an env name with '='",
        "'='",
    );
    let long = "x".repeat(65);
    for id in ["", "../x", long.as_str(), "a b"] {
        match rogue.ask(with(&|j| j.job_id = id.into())).await {
            JobResponse::Rejected(RejectReason::Invalid(_)) => {}
            other => panic!("job id {id:?}: {other:?}"),
        }
    }
    // Requests about jobs it never submitted, and an event sent to a host.
    for request in [
        JobRequest::Query {
            job_id: "never".into(),
        },
        JobRequest::Cancel {
            job_id: "never".into(),
        },
        JobRequest::Fetch {
            job_id: "never".into(),
            name: OutputName::Stdout,
            offset: 0,
            len: u32::MAX,
        },
        JobRequest::Event {
            job_id: "never".into(),
            seq: 0,
            time_unix: 0,
            kind: JobEventKind::Started,
        },
    ] {
        assert_eq!(
            rogue.ask(request.clone()).await,
            JobResponse::NotFound,
            "{request:?}"
        );
    }

    // A job that tries to reach out through its outputs: a symbolic link
    // and a fetch past the end are answered from inside its directory only.
    let mut reach = job(
        "reach",
        &format!("ln -s {outside} link; ln -s /etc/hostname host; echo hi > out"),
    );
    reach.outputs = vec!["link".into(), "host".into(), "out".into()];
    rogue.submit_accepted(reach).await;
    assert!(matches!(
        rogue.end_of("reach").await,
        JobEventKind::Finished { exit_status: 0, .. }
    ));
    for link in ["link", "host"] {
        assert_eq!(
            rogue
                .fetch_all("reach", OutputName::File(link.into()))
                .await,
            None,
            "the symbolic link {link} was followed"
        );
    }
    assert_eq!(
        rogue
            .fetch_all("reach", OutputName::File("out".into()))
            .await
            .as_deref(),
        Some(&b"hi\n"[..])
    );
    let past = JobRequest::Fetch {
        job_id: "reach".into(),
        name: OutputName::File("out".into()),
        offset: u64::MAX,
        len: u32::MAX,
    };
    match rogue.ask(past).await {
        JobResponse::Chunk { data, .. } => assert!(data.is_empty()),
        JobResponse::NotFound => {}
        other => panic!("a fetch at offset u64::MAX: {other:?}"),
    }

    assert!(!escape.exists(), "{} was written", escape.display());
    let after = outside_data(&host.dir);
    let new: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
    assert!(
        new.is_empty(),
        "the host wrote outside its data dir: {new:?}"
    );
    let took = tokio::task::block_in_place(|| status_time(&host));
    eprintln!("status after the hostile submissions: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_ends_cancelled_a_reused_id_names_the_newest_job_and_the_list_is_bounded() {
    let host = tokio::task::block_in_place(hostile_target);
    let mut rogue = RogueConsumer::start(&host).await;

    // A cancel ends the job with its own event, not an S5 kill.
    rogue.submit_accepted(job("long", "sleep 30")).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (id, kind) = tokio::time::timeout(Duration::from_secs(30), rogue.events.recv())
            .await
            .expect("no event")
            .unwrap();
        if id == "long" && kind == JobEventKind::Started {
            break;
        }
        assert!(Instant::now() < deadline, "never started");
    }
    let cancelled = JobRequest::Cancel {
        job_id: "long".into(),
    };
    assert_eq!(rogue.ask(cancelled.clone()).await, JobResponse::Cancelled);
    assert!(
        matches!(rogue.end_of("long").await, JobEventKind::Cancelled { .. }),
        "a cancel must end as Cancelled"
    );
    // Again, once ended: still Cancelled, and the job's state says so.
    assert_eq!(rogue.ask(cancelled).await, JobResponse::Cancelled);
    assert!(matches!(
        rogue
            .ask(JobRequest::Query {
                job_id: "long".into()
            })
            .await,
        JobResponse::JobState(RemoteJobState::Ended(JobEventKind::Cancelled { .. }))
    ));

    // One id, two jobs: the host answers for the newest.
    for (round, word) in ["first", "second"].iter().enumerate() {
        rogue
            .submit_accepted(job("again", &format!("echo {word}")))
            .await;
        assert!(
            matches!(rogue.end_of("again").await, JobEventKind::Finished { .. }),
            "round {round}"
        );
        let stdout = rogue.fetch_all("again", OutputName::Stdout).await;
        assert_eq!(
            stdout.as_deref(),
            Some(format!("{word}\n").as_bytes()),
            "round {round}: the host answered for an older job of the same id"
        );
    }

    // Many jobs: the host keeps the last 16 and their directories only.
    for i in 0..20 {
        let id = format!("many{i}");
        rogue.submit_accepted(job(&id, "echo x")).await;
        rogue.end_of(&id).await;
    }
    // (An evicted job's directory is removed off the host's loop: a moment.)
    let jobs_dir = host.data_dir().join("jobs");
    let kept = || -> Vec<String> {
        std::fs::read_dir(&jobs_dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("remote-"))
            .collect()
    };
    let bounded =
        tokio::task::block_in_place(|| wait_until(Duration::from_secs(10), || kept().len() <= 16));
    assert!(bounded, "{} job directories: {:?}", kept().len(), kept());
    assert_eq!(
        rogue
            .ask(JobRequest::Query {
                job_id: "many0".into()
            })
            .await,
        JobResponse::NotFound,
        "the oldest job fell off the list"
    );
    assert!(matches!(
        rogue
            .ask(JobRequest::Query {
                job_id: "many19".into()
            })
            .await,
        JobResponse::JobState(RemoteJobState::Ended(_))
    ));
}

/// Issue 30, finding 6: an output is read only once its job has ended. A
/// consumer that reuses a job id (its record of an attempt lost in a
/// crash) can hear the end of the earlier job while the newest of the id
/// runs; its fetch of stdout then met the newest job's stdout so far (empty,
/// under the hash of empty) and landed it. Now such a read is `NotFound`
/// (the attempt fails and is tried again); a zero-length read (liveness)
/// still answers, and the newest job's stdout is read whole once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_is_read_only_once_its_job_has_ended() {
    let host = tokio::task::block_in_place(hostile_target);
    let mut rogue = RogueConsumer::start(&host).await;
    rogue.submit_accepted(job("again", "echo 8")).await;
    assert!(matches!(
        rogue.end_of("again").await,
        JobEventKind::Finished { .. }
    ));
    rogue.submit_accepted(job("again", "sleep 3; echo 9")).await;
    let read = |len| JobRequest::Fetch {
        job_id: "again".into(),
        name: OutputName::Stdout,
        offset: 0,
        len,
    };
    assert_eq!(
        rogue.ask(read(1 << 20)).await,
        JobResponse::NotFound,
        "the stdout of a job still running was read"
    );
    assert!(
        matches!(rogue.ask(read(0)).await, JobResponse::Chunk { .. }),
        "a zero-length read still says the host has the job"
    );
    assert!(matches!(
        rogue.end_of("again").await,
        JobEventKind::Finished { .. }
    ));
    let stdout = rogue.fetch_all("again", OutputName::Stdout).await;
    assert_eq!(stdout.as_deref(), Some(&b"9\n"[..]));
}

/// A flood of submissions and cancels: the host answers its owner's
/// `status` quickly all along, keeps at most its list of jobs, and still
/// serves another peer afterwards (the requests past the flooder's budget
/// go unanswered; its CPU share is the request budget's, measured in
/// `an_event_flood_is_cut_to_the_budget_and_counted_against_the_flooder`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_flood_leaves_the_host_responsive_to_its_owner_and_other_peers() {
    use futures::StreamExt;
    let host = tokio::task::block_in_place(hostile_target);
    let rogue = RogueConsumer::start(&host).await;
    let (net, target) = (rogue.handle.clone(), rogue.host);
    let flood = tokio::spawn(async move {
        let requests = (0..6_000u32).map(move |i| {
            let net = net.clone();
            let request = if i % 2 == 0 {
                JobRequest::Submit(job(&format!("flood{i}"), "true"))
            } else {
                JobRequest::Cancel {
                    job_id: format!("flood{}", i - 1),
                }
            };
            async move { net.job_request(target, request).await }
        });
        let mut answers = futures::stream::iter(requests).buffer_unordered(256);
        let (mut answered, mut failed) = (0u32, 0u32);
        while let Some(a) = answers.next().await {
            match a {
                Ok(_) => answered += 1,
                Err(_) => failed += 1,
            }
        }
        (answered, failed)
    });
    let mut slowest = Duration::ZERO;
    while !flood.is_finished() {
        let took = tokio::task::block_in_place(|| status_time(&host));
        slowest = slowest.max(took);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (answered, failed) = flood.await.unwrap();
    eprintln!("flood: {answered} answered, {failed} failed; slowest status during it {slowest:?}");
    assert!(
        slowest < Duration::from_secs(5),
        "status took {slowest:?} during the flood"
    );
    // Another peer is still served.
    let other = RogueConsumer::start(&host).await;
    let query = JobRequest::Query {
        job_id: "flood0".into(),
    };
    assert_eq!(other.ask(query).await, JobResponse::NotFound);
    // What it kept of the flood's jobs is bounded by its list.
    let jobs_dir = host.data_dir().join("jobs");
    let kept = || {
        std::fs::read_dir(&jobs_dir)
            .map(|d| d.flatten().count())
            .unwrap_or(0)
    };
    let bounded =
        tokio::task::block_in_place(|| wait_until(Duration::from_secs(10), || kept() <= 16));
    assert!(bounded, "{} entries in the jobs dir", kept());
    let took = tokio::task::block_in_place(|| status_time(&host));
    assert!(took < Duration::from_secs(5), "status took {took:?}");
}
