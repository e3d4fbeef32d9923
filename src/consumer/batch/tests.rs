//! The batch queue against a scripted pool ([`FakePool`]): placement by
//! rank, retries on other hosts, refusals, corrupted and missing outputs,
//! without sockets. The same queue runs `gleaner submit` (a batch of one
//! task) and `gleaner batch`; real-node tests are in `tests/it/batch_pool.rs`
//! and `tests/it/pool_nodes.rs`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libp2p::PeerId;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::queue::{NewBatch, TICK};
use super::spec::{Sweep, TaskTemplate};
use super::{BatchQueue, BatchView, PolicyName, TaskState};
use crate::clock::SystemClock;
use crate::consumer::job_pool::{JobPool, JobSettings};
use crate::consumer::survey::{SurveyQuery, SurveyedHost};
use crate::consumer::{HostJobEvent, Inbox};
use crate::data::{Catalog, InputSpec, Offer};
use crate::net::protocol::{
    JobEventKind, JobRequest, JobResponse, OutputName, RejectReason, WireState,
};
use crate::net::NetError;

#[derive(Debug, Clone, Copy)]
enum Host {
    Finish(i32),
    /// Finishes, but its stdout does not match the hash it reports.
    CorruptOutput,
    KilledByOwner,
    Vanish,
    /// Refuses every job for good (the consumer is not on its allowlist).
    NotAllowed,
    /// Takes the job, then restarts (its connections close and new ones
    /// open) and no longer knows it.
    Restarts,
    /// Takes the job, then says it never knew it, its connection held.
    Forgets,
    /// Takes the job and runs it for as long as it is asked.
    Runs,
    /// Says the job has finished (status 0) and serves `stdout`, each
    /// chunk after `fetch_delay_ms`.
    Ended {
        stdout: &'static [u8],
        fetch_delay_ms: u64,
    },
}

#[derive(Clone)]
struct FakePool {
    catalog: Catalog,
    inbox: Inbox,
    hosts: Arc<Vec<(PeerId, f64, Host)>>,
    submits: Arc<Mutex<Vec<PeerId>>>,
    gone: Arc<Mutex<HashSet<PeerId>>>,
    /// Restarts per host: its connection's id is the count.
    restarts: Arc<Mutex<std::collections::HashMap<PeerId, usize>>>,
    /// The hosts of the fetches answered, in order.
    fetched: Arc<Mutex<Vec<PeerId>>>,
    /// Hosts that answer about windows that start later: whether the host
    /// is busy now, and its TR for every later window. The others cannot
    /// answer such a query.
    later: Arc<Mutex<std::collections::HashMap<PeerId, (bool, f64)>>>,
}

impl FakePool {
    fn behaviour(&self, peer: PeerId) -> Host {
        self.hosts
            .iter()
            .find(|h| h.0 == peer)
            .map_or(Host::Vanish, |h| h.2)
    }
}

impl JobPool for FakePool {
    async fn offer(&self, inputs: &[InputSpec]) -> Result<Offer, String> {
        self.catalog.offer(inputs).await
    }

    async fn survey(
        &self,
        _q: SurveyQuery,
        _skip: Vec<PeerId>,
    ) -> Result<Vec<SurveyedHost>, NetError> {
        let later = self.later.lock().unwrap().clone();
        Ok(self
            .hosts
            .iter()
            .map(|(peer, tr, _)| SurveyedHost {
                answered: true,
                tr: Some(*tr),
                slot_free: Some(!later.get(peer).is_some_and(|(busy, _)| *busy)),
                ..SurveyedHost::new(*peer)
            })
            .collect())
    }

    async fn reliability(
        &self,
        host: PeerId,
        query: crate::net::protocol::ReliabilityQuery,
    ) -> Result<crate::net::protocol::ReliabilityResponse, NetError> {
        use crate::net::protocol::{FailureByCause, ReliabilityAnswer, ReliabilityResponse};
        let Some((busy, tr)) = self.later.lock().unwrap().get(&host).copied() else {
            return Err(NetError::UnsupportedProtocol);
        };
        Ok(ReliabilityResponse::Answer(ReliabilityAnswer {
            tr,
            failure: FailureByCause {
                s3: 1.0 - tr,
                s4: 0.0,
                s5: 0.0,
            },
            initial_state: WireState::S1,
            days_used: 10,
            method: "freq".into(),
            relative_power_milli: 1000,
            slot_free: !busy,
            curve: vec![(query.length_secs, tr)],
            availability_milli: None,
            speed_milli: 1000,
            spells: None,
            spell_lengths: None,
        }))
    }

    async fn request(&self, host: PeerId, request: JobRequest) -> Result<JobResponse, NetError> {
        let behaviour = self.behaviour(host);
        if self.gone.lock().unwrap().contains(&host) {
            return Err(NetError::ConnectionClosed);
        }
        let event = |seq, kind| HostJobEvent {
            seq,
            time_unix: 0,
            kind,
        };
        match request {
            JobRequest::Submit(s) => {
                self.submits.lock().unwrap().push(host);
                match behaviour {
                    Host::NotAllowed => return Ok(JobResponse::Rejected(RejectReason::NotAllowed)),
                    Host::Finish(code) => {
                        // Events reach the attempt once it follows the job.
                        let inbox = self.inbox.clone();
                        let id = s.job_id.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            inbox.deliver(host, &id, event(0, JobEventKind::Started));
                            inbox.deliver(
                                host,
                                &id,
                                event(
                                    1,
                                    JobEventKind::Finished {
                                        exit_status: code,
                                        usage: None,
                                    },
                                ),
                            );
                        });
                    }
                    Host::CorruptOutput => {
                        let inbox = self.inbox.clone();
                        let id = s.job_id.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            inbox.deliver(
                                host,
                                &id,
                                event(
                                    0,
                                    JobEventKind::Finished {
                                        exit_status: 0,
                                        usage: None,
                                    },
                                ),
                            );
                        });
                    }
                    Host::KilledByOwner => {
                        let inbox = self.inbox.clone();
                        let id = s.job_id.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            inbox.deliver(
                                host,
                                &id,
                                event(
                                    0,
                                    JobEventKind::Killed {
                                        cause: Some(WireState::S3),
                                        usage: None,
                                    },
                                ),
                            );
                        });
                    }
                    Host::Vanish => {
                        self.gone.lock().unwrap().insert(host);
                    }
                    Host::Restarts | Host::Forgets | Host::Runs | Host::Ended { .. } => {}
                }
                Ok(JobResponse::Accepted)
            }
            JobRequest::Fetch {
                name, offset, len, ..
            } => {
                let stdout: &[u8] = match behaviour {
                    Host::Ended {
                        stdout,
                        fetch_delay_ms,
                    } => {
                        tokio::time::sleep(Duration::from_millis(fetch_delay_ms)).await;
                        stdout
                    }
                    _ => b"hello\n",
                };
                let data: &[u8] = match name {
                    OutputName::Stdout => stdout,
                    OutputName::Stderr => b"",
                    OutputName::File(_) | OutputName::Checkpoint => {
                        return Ok(JobResponse::NotFound)
                    }
                };
                let start = (offset as usize).min(data.len());
                let end = (start + len as usize).min(data.len());
                let mut hash = (offset == 0).then(|| *blake3::hash(data).as_bytes());
                let mut sent = data[start..end].to_vec();
                if matches!(behaviour, Host::CorruptOutput) && !sent.is_empty() {
                    // Bytes changed after the host hashed them.
                    sent[0] ^= 0x20;
                    hash = hash.or(Some([0; 32]));
                }
                self.fetched.lock().unwrap().push(host);
                Ok(JobResponse::Chunk {
                    data: sent,
                    total_len: data.len() as u64,
                    hash,
                })
            }
            JobRequest::Query { .. } => match behaviour {
                Host::Restarts => {
                    *self.restarts.lock().unwrap().entry(host).or_default() += 1;
                    Ok(JobResponse::NotFound)
                }
                Host::Forgets => Ok(JobResponse::NotFound),
                Host::Ended { .. } => Ok(JobResponse::JobState(
                    crate::net::protocol::RemoteJobState::Ended(JobEventKind::Finished {
                        exit_status: 0,
                        usage: None,
                    }),
                )),
                _ => Ok(JobResponse::JobState(
                    crate::net::protocol::RemoteJobState::Running,
                )),
            },
            JobRequest::Event { .. } | JobRequest::Cancel { .. } => Ok(JobResponse::NotFound),
            // No scripted host runs images.
            JobRequest::SubmitInImage { .. } | JobRequest::SubmitInLayers { .. } => {
                Ok(JobResponse::Rejected(RejectReason::NoImages))
            }
        }
    }

    async fn connections(&self, host: PeerId) -> Vec<libp2p::swarm::ConnectionId> {
        let restarts = self.restarts.lock().unwrap().get(&host).copied();
        vec![libp2p::swarm::ConnectionId::new_unchecked(
            restarts.unwrap_or(0),
        )]
    }
}

type Queue = (
    BatchQueue<FakePool>,
    tokio::sync::mpsc::UnboundedReceiver<super::QueueMsg>,
);

/// Opens a queue on `dir` over a scripted pool of `hosts`.
fn open_queue(dir: &std::path::Path, pool: &FakePool, max_retries: u32) -> Queue {
    let settings = JobSettings {
        max_retries,
        probe_every: Duration::from_millis(50),
        ..JobSettings::default()
    };
    BatchQueue::open(
        pool.clone(),
        pool.inbox.clone(),
        dir,
        Arc::new(SystemClock),
        settings,
        TaskTracker::new(),
        CancellationToken::new(),
    )
    .unwrap()
}

fn fake_pool(hosts: Vec<(PeerId, f64, Host)>) -> FakePool {
    FakePool {
        catalog: Catalog::new(),
        inbox: Inbox::default(),
        hosts: Arc::new(hosts),
        submits: Arc::default(),
        gone: Arc::default(),
        restarts: Arc::default(),
        fetched: Arc::default(),
        later: Arc::default(),
    }
}

/// A one-task batch running `true`, declaring `outputs`.
fn one_task(outputs: &[&str], output_dir: Option<std::path::PathBuf>) -> NewBatch {
    NewBatch {
        verify: Default::default(),
        image: None,
        name: None,
        template: TaskTemplate {
            argv: vec!["true".into()],
            env: Vec::new(),
            inputs: Vec::new(),
            outputs: outputs.iter().map(ToString::to_string).collect(),
        },
        sweep: Sweep::One,
        mem_mib: 10,
        runtime_secs: 60,
        limit_secs: 60,
        max_running: None,
        output_dir,
        policy: PolicyName::Tr,
        deadline_unix: None,
        checkpoint: None,
    }
}

/// Drives the queue's loop (surveys, attempts' news) until `done` holds;
/// fails after 20 s.
async fn drive(queue: &mut Queue, mut done: impl FnMut(&BatchQueue<FakePool>) -> bool) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
    let (queue, msgs) = queue;
    while !done(queue) {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the queue did not get there: {:?}",
            queue.list()
        );
        if queue.wants_survey() {
            queue.start_survey();
        }
        tokio::select! {
            Some(m) = msgs.recv() => queue.on_msg(m),
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// Runs a one-task batch (`true`, declaring `outputs`) on `hosts` until it
/// ends; returns the batch and the hosts it was handed to, in order.
async fn run_one(
    hosts: Vec<(PeerId, f64, Host)>,
    max_retries: u32,
    outputs: &[&str],
) -> (BatchView, Vec<PeerId>) {
    let dir = tempfile::tempdir().unwrap();
    let pool = fake_pool(hosts);
    let mut queue = open_queue(dir.path(), &pool, max_retries);
    let id = queue.0.submit(one_task(outputs, None)).unwrap();
    drive(&mut queue, |q| q.view(id).unwrap().counts.finished()).await;
    let view = queue.0.view(id).unwrap();
    let submits = pool.submits.lock().unwrap().clone();
    // The results stay readable after the queue is gone.
    std::mem::forget(dir);
    (view, submits)
}

fn stdout_of(view: &BatchView) -> String {
    std::fs::read_to_string(view.results_dir.join("0/stdout")).unwrap_or_default()
}

#[tokio::test]
async fn the_best_host_runs_the_task_and_its_output_lands() {
    let (good, worse) = (PeerId::random(), PeerId::random());
    let (view, submits) = run_one(
        vec![(worse, 0.5, Host::Finish(0)), (good, 0.9, Host::Finish(7))],
        3,
        &[],
    )
    .await;
    assert_eq!(submits, vec![good]);
    let t = &view.tasks[0];
    assert_eq!(
        (t.state, t.exit_status, t.attempts),
        (TaskState::Failed, Some(7), 1)
    );
    assert_eq!(t.host.as_deref(), Some(good.to_base58().as_str()));
    assert_eq!(stdout_of(&view), "hello\n");
}

#[tokio::test]
async fn a_kill_or_a_vanished_host_sends_the_task_to_the_next_best() {
    let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
    let (view, submits) = run_one(
        vec![
            (a, 0.9, Host::KilledByOwner),
            (b, 0.8, Host::Vanish),
            (c, 0.1, Host::Finish(0)),
        ],
        3,
        &[],
    )
    .await;
    assert_eq!(submits, vec![a, b, c]);
    let t = &view.tasks[0];
    assert_eq!(
        (t.state, t.exit_status, t.attempts),
        (TaskState::Done, Some(0), 3)
    );
    assert_eq!(t.avoid, vec![a.to_base58(), b.to_base58()]);
    // The owner's kill and the host's failure are counted apart.
    assert_eq!((t.owner_kills, t.host_failures()), (1, 1));
}

/// Issue 30: a host that restarted since it took the job (every
/// connection the job was accepted over closed) has lost it, as an owner's
/// S5 would: no retry spent, a failure in its record but no offence. A host
/// that says the same with its connection held forgot the job: an offence.
#[tokio::test]
async fn a_host_that_restarted_lost_the_job_and_one_that_did_not_forgot_it() {
    use crate::model::trust::Standing;
    let (restarts, forgets, good) = (PeerId::random(), PeerId::random(), PeerId::random());
    let dir = tempfile::tempdir().unwrap();
    let pool = fake_pool(vec![
        (restarts, 0.9, Host::Restarts),
        (forgets, 0.8, Host::Forgets),
        (good, 0.1, Host::Finish(0)),
    ]);
    let mut queue = open_queue(dir.path(), &pool, 3);
    let id = queue.0.submit(one_task(&[], None)).unwrap();
    drive(&mut queue, |q| q.view(id).unwrap().counts.finished()).await;
    let view = queue.0.view(id).unwrap();
    assert_eq!(*pool.submits.lock().unwrap(), vec![restarts, forgets, good]);
    let t = &view.tasks[0];
    assert_eq!((t.state, t.attempts), (TaskState::Done, 3));
    assert_eq!((t.owner_kills, t.host_failures()), (1, 1), "{t:?}");
    let records = queue.0.reputation();
    let r = records[&restarts];
    assert_eq!((r.forgotten, r.failed), (0, 1), "{r:?}");
    assert_eq!(r.standing(), Standing::Clean);
    let f = records[&forgets];
    assert_eq!(f.forgotten, 1, "{f:?}");
    assert_eq!(f.standing(), Standing::Demoted);
}

#[tokio::test]
async fn retries_are_bounded_and_a_lasting_refusal_moves_on() {
    let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
    let (view, submits) = run_one(
        vec![
            (a, 0.9, Host::NotAllowed),
            // Hosts that vanish: owner kills spend no retry (issue 28).
            (b, 0.8, Host::Vanish),
            (c, 0.7, Host::Vanish),
        ],
        1,
        &[],
    )
    .await;
    // The refusing host is asked once, not at every survey.
    assert_eq!(submits, vec![a, b, c]);
    let t = &view.tasks[0];
    assert_eq!(t.state, TaskState::Failed);
    assert_eq!(t.exit_status, None);
    assert!(
        t.reason.as_deref().unwrap().contains("no retries left"),
        "{t:?}"
    );
}

/// An output that does not match its host's hash fails the attempt: it
/// never lands, and the task runs again elsewhere.
#[tokio::test]
async fn a_corrupted_output_fails_the_attempt_and_the_task_moves_on() {
    let (bad, good) = (PeerId::random(), PeerId::random());
    let (view, submits) = run_one(
        vec![
            (bad, 0.9, Host::CorruptOutput),
            (good, 0.5, Host::Finish(0)),
        ],
        3,
        &[],
    )
    .await;
    assert_eq!(submits, vec![bad, good]);
    let t = &view.tasks[0];
    assert_eq!((t.state, t.attempts), (TaskState::Done, 2));
    assert_eq!(t.avoid, vec![bad.to_base58()]);
    assert_eq!(
        stdout_of(&view),
        "hello\n",
        "only the good host's output landed"
    );
}

/// A declared output the task did not write is the task's fault: it lands
/// what it has, fails with the name, and is not retried elsewhere.
#[tokio::test]
async fn a_missing_declared_output_fails_the_task_without_retries() {
    let (a, b) = (PeerId::random(), PeerId::random());
    let (view, submits) = run_one(
        vec![(a, 0.9, Host::Finish(0)), (b, 0.5, Host::Finish(0))],
        3,
        &["result.txt"],
    )
    .await;
    assert_eq!(submits, vec![a]);
    let t = &view.tasks[0];
    assert_eq!((t.state, t.exit_status), (TaskState::Failed, Some(0)));
    assert!(t.reason.as_deref().unwrap().contains("result.txt"), "{t:?}");
    assert_eq!(stdout_of(&view), "hello\n");
}

/// `batch wait` ends on [`BatchQueue::when_copied`]: its answer comes only
/// once the landed result is in the output directory, and a node killed
/// before a copy was made makes it at its next start.
#[tokio::test]
async fn the_output_directory_is_whole_when_the_batch_is_answered_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let pool = fake_pool(vec![(PeerId::random(), 0.9, Host::Finish(0))]);
    let mut queue = open_queue(&dir.path().join("node"), &pool, 3);
    let id = queue.0.submit(one_task(&[], Some(out.clone()))).unwrap();
    drive(&mut queue, |q| q.view(id).unwrap().counts.finished()).await;
    // Asked on the loop's turn the task landed, before the copy's news.
    let (tx, mut answer) = tokio::sync::oneshot::channel();
    queue.0.when_copied(id, tx);
    let mut answered = None;
    drive(&mut queue, |_| {
        answered = answer.try_recv().ok();
        answered.is_some()
    })
    .await;
    assert_eq!(answered.unwrap().unwrap().counts.done, 1);
    assert_eq!(
        std::fs::read_to_string(out.join("0/stdout")).unwrap(),
        "hello\n"
    );

    // The node dies before the copy was made: the next start makes it.
    drop(queue);
    std::fs::remove_dir_all(out.join("0")).unwrap();
    let mut queue = open_queue(&dir.path().join("node"), &pool, 3);
    let (tx, mut answer) = tokio::sync::oneshot::channel();
    queue.0.when_copied(id, tx);
    drive(&mut queue, |_| answer.try_recv().is_ok()).await;
    assert_eq!(
        std::fs::read_to_string(out.join("0/stdout")).unwrap(),
        "hello\n"
    );
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["0"], "nothing half-made beside it");
}

/// Tail and deadline copies (issues 28, 30): a copy of a task still
/// fetching its outputs when another copy of the task has landed never
/// replaces the landed result: the task's directory holds the files of the
/// attempt its record names, the later copy's are thrown away, and the
/// staging a killed node left behind is gone at the next start. Set up as
/// a restart finds it (a main attempt and a copy, both ended on their
/// hosts) so that the two land in a known order: the fast host's first,
/// the slow host's while it is still fetching.
#[tokio::test]
async fn a_copy_still_fetching_when_another_landed_never_replaces_the_landed_result() {
    use super::store::BatchStore;
    use super::TaskCopy;
    let dir = tempfile::tempdir().unwrap();
    let (fast, slow) = (PeerId::random(), PeerId::random());
    // First run: the task goes to `fast`, which keeps running it.
    let pool = fake_pool(vec![(fast, 0.9, Host::Runs)]);
    let mut queue = open_queue(dir.path(), &pool, 3);
    let id = queue.0.submit(one_task(&[], None)).unwrap();
    drive(&mut queue, |_| !pool.submits.lock().unwrap().is_empty()).await;
    let results = queue.0.view(id).unwrap().results_dir;
    drop(queue);

    // While the node is down: a copy of the task on `slow` (as a tail or
    // deadline copy is recorded), and a staging directory a killed node
    // left behind.
    let store = BatchStore::open(&dir.path().join("store")).unwrap();
    let (loaded, _) = store.load().unwrap();
    let mut t = loaded[0].1[0].clone();
    assert_eq!(t.state, TaskState::Running);
    t.copies.push(TaskCopy {
        host: slow.to_base58(),
        job_id: id.job_id(0, t.attempts),
        started_unix: t.started_unix.unwrap(),
    });
    t.attempts += 1;
    store.put_task(id, 0, &t).unwrap();
    store.flush().unwrap();
    drop(store);
    let stale = results.join(".landing").join("stale");
    std::fs::create_dir_all(&stale).unwrap();

    // Both hosts say the job finished; the slow one's outputs take a while.
    let pool = fake_pool(vec![
        (
            fast,
            0.9,
            Host::Ended {
                stdout: b"fast\n",
                fetch_delay_ms: 0,
            },
        ),
        (
            slow,
            0.8,
            Host::Ended {
                stdout: b"slow\n",
                fetch_delay_ms: 300,
            },
        ),
    ]);
    let mut queue = open_queue(dir.path(), &pool, 3);
    drive(&mut queue, |q| q.view(id).unwrap().counts.finished()).await;
    // Until the slow copy has fetched its stdout and stderr and nothing is
    // left half-made or staged beside the task's directory.
    let only = |dir: &std::path::Path, names: &[&str]| {
        std::fs::read_dir(dir).map_or(true, |d| {
            d.map(|e| e.unwrap().file_name())
                .all(|n| names.iter().any(|k| n == *k))
        })
    };
    let settled = |results: &std::path::Path| {
        only(results, &["0", ".landing"]) && only(&results.join(".landing"), &["stale"])
    };
    drive(&mut queue, |_| {
        pool.fetched
            .lock()
            .unwrap()
            .iter()
            .filter(|h| **h == slow)
            .count()
            >= 2
            && settled(&results)
    })
    .await;
    let view = queue.0.view(id).unwrap();
    let t = &view.tasks[0];
    assert_eq!((t.state, t.exit_status), (TaskState::Done, Some(0)));
    assert_eq!(t.host.as_deref(), Some(fast.to_base58().as_str()));
    assert_eq!(
        std::fs::read_to_string(results.join("0/stdout")).unwrap(),
        "fast\n",
        "the landed result stays the one the record names"
    );
    assert!(!stale.exists(), "a restart cleans stale staging");
}

/// A node killed between moving a landed result into a task's place and
/// writing the record that says so (issue 30): at the next start another
/// attempt of the task lands and finds the place taken. The result in
/// place is kept, and the record names its host and exit status (from its
/// `provenance.json` and `exit_status`), not the attempt that found it
/// there; before, `batch status` named one host and the result's
/// provenance another.
#[tokio::test]
async fn a_kept_earlier_result_is_recorded_as_its_own_hosts() {
    use super::store::BatchStore;
    use super::verify::{Provenance, VerifyMode, PROVENANCE_FILE};
    use super::TaskCopy;
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (PeerId::random(), PeerId::random());
    let pool = fake_pool(vec![(first, 0.9, Host::Runs)]);
    let mut queue = open_queue(dir.path(), &pool, 3);
    let id = queue.0.submit(one_task(&[], None)).unwrap();
    drive(&mut queue, |_| !pool.submits.lock().unwrap().is_empty()).await;
    let results = queue.0.view(id).unwrap().results_dir;
    drop(queue);

    // While the node is down: `first`'s result in the task's place (the
    // run that moved it in was killed before its record said so), and a
    // copy of the task on `second` in the record.
    let kept = results.join("0");
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::write(kept.join("stdout"), "first\n").unwrap();
    std::fs::write(kept.join("exit_status"), "3\n").unwrap();
    let provenance = Provenance::single(0, VerifyMode::None, first.to_base58(), &[0; 32], 3);
    std::fs::write(kept.join(PROVENANCE_FILE), provenance.to_json().unwrap()).unwrap();
    let store = BatchStore::open(&dir.path().join("store")).unwrap();
    let (loaded, _) = store.load().unwrap();
    let mut t = loaded[0].1[0].clone();
    t.copies.push(TaskCopy {
        host: second.to_base58(),
        job_id: id.job_id(0, t.attempts),
        started_unix: t.started_unix.unwrap(),
    });
    t.attempts += 1;
    store.put_task(id, 0, &t).unwrap();
    store.flush().unwrap();
    drop(store);

    // `second` lands; `first` still runs.
    let pool = fake_pool(vec![
        (first, 0.9, Host::Runs),
        (
            second,
            0.8,
            Host::Ended {
                stdout: b"second\n",
                fetch_delay_ms: 0,
            },
        ),
    ]);
    let mut queue = open_queue(dir.path(), &pool, 3);
    let named = first.to_base58();
    drive(&mut queue, |q| {
        let view = q.view(id).unwrap();
        view.counts.finished() && view.tasks[0].host.as_deref() == Some(named.as_str())
    })
    .await;
    let view = queue.0.view(id).unwrap();
    let t = &view.tasks[0];
    assert_eq!((t.state, t.exit_status), (TaskState::Failed, Some(3)));
    assert_eq!(t.reason.as_deref(), Some("exit status 3"));
    assert_eq!(
        std::fs::read_to_string(kept.join("stdout")).unwrap(),
        "first\n",
        "the result in place is kept"
    );
}

/// A 9 h task: no host free now with 0.15 is likely to finish it.
fn nine_hours() -> NewBatch {
    NewBatch {
        runtime_secs: 9 * 3600,
        limit_secs: 12 * 3600,
        ..one_task(&[], None)
    }
}

#[tokio::test]
async fn the_queue_asks_the_hosts_about_later_windows_and_holds_the_task_for_the_best() {
    let (shaky, evening) = (PeerId::random(), PeerId::random());
    let pool = fake_pool(vec![
        (shaky, 0.15, Host::Finish(0)),
        (evening, 0.9, Host::Finish(0)),
    ]);
    pool.later
        .lock()
        .unwrap()
        .extend([(shaky, (false, 0.15)), (evening, (true, 0.9))]);
    let dir = tempfile::tempdir().unwrap();
    let mut queue = open_queue(dir.path(), &pool, 3);
    queue.0.set_later_windows(true);
    let id = queue.0.submit(nine_hours()).unwrap();
    drive(&mut queue, |q| !q.view(id).unwrap().holds.is_empty()).await;
    let view = queue.0.view(id).unwrap();
    let hold = &view.holds[&0];
    assert_eq!(hold.host, evening.to_base58());
    // The first later start asked: an hour on.
    let in_secs = hold.start_unix - crate::clock::unix_secs(std::time::SystemTime::now());
    assert!((3500..=3600).contains(&in_secs), "{in_secs}");
    assert_eq!(view.tasks[0].state, TaskState::Queued);
    assert!(
        pool.submits.lock().unwrap().is_empty(),
        "not started where it would be killed"
    );
}

#[tokio::test]
async fn hosts_that_cannot_answer_about_later_windows_do_not_keep_a_task_waiting() {
    let shaky = PeerId::random();
    let pool = fake_pool(vec![(shaky, 0.15, Host::Finish(0))]);
    let dir = tempfile::tempdir().unwrap();
    let mut queue = open_queue(dir.path(), &pool, 3);
    queue.0.set_later_windows(true);
    let id = queue.0.submit(nine_hours()).unwrap();
    drive(&mut queue, |q| q.view(id).unwrap().counts.finished()).await;
    assert_eq!(*pool.submits.lock().unwrap(), vec![shaky]);
    assert_eq!(queue.0.view(id).unwrap().tasks[0].state, TaskState::Done);
}
