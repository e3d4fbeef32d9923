//! One remote job from the consumer's side: rank the pool's hosts by TR for
//! [now, now + runtime], submit to the best that accepts, follow its events,
//! probe that the host is still there, fetch stdout, stderr and the declared
//! outputs when it finishes, and resubmit to the next-best host (a bounded
//! number of times) when the host kills the job, revokes it or disappears.
//!
//! Progress leaves as [`SubmitLine`]s (the `gleaner submit` stream). The
//! network is behind [`JobPool`] so the retry logic is tested without sockets.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use base64::Engine;
use libp2p::PeerId;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::consumer::rank::rank;
use crate::consumer::survey::{survey, HostReport, SurveyQuery};
use crate::consumer::{HostJobEvent, Inbox};
use crate::model::ids::JobId;
use crate::net::protocol::{
    InputFile, JobEventKind, JobRequest, JobResponse, JobSubmit, OutputName, OUTPUT_CHUNK_MAX,
};
use crate::net::{NetError, NetHandle};

/// What `gleaner submit` sends to its node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment for the guest.
    pub env: Vec<(String, String)>,
    /// Input files: relative path and contents (base64).
    pub inputs: Vec<(String, String)>,
    /// Output files to bring back (relative paths in the job's work dir).
    pub outputs: Vec<String>,
    /// Declared memory, MiB.
    pub mem_mib: u64,
    /// Expected runtime, seconds: the window hosts are ranked for.
    pub runtime_secs: u64,
    /// Wall-time limit on the host, seconds.
    pub wall_limit_secs: u64,
}

/// One line of the `submit` stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SubmitLine {
    /// The hosts that can take the job, best first.
    Ranked {
        attempt: u32,
        hosts: Vec<HostReport>,
    },
    /// A host refused the job.
    Rejected { host: String, reason: String },
    /// A host accepted the job.
    Submitted {
        attempt: u32,
        host: String,
        job_id: JobId,
        tr: Option<f64>,
    },
    /// The host reported an event.
    Event {
        host: String,
        time_unix: i64,
        event: String,
    },
    /// The job failed on a host; it goes to another if retries are left.
    HostFailed { host: String, reason: String },
    /// A piece of an output (`stdout`, `stderr` or a file name), base64.
    Output { name: String, data: String },
    /// An output could not be brought back.
    OutputMissing { name: String, reason: String },
    /// The job finished on `host` with this exit status.
    Done {
        host: String,
        exit_status: i32,
        attempts: u32,
    },
    /// The job could not be run; the reason is for humans.
    Failed { reason: String, attempts: u32 },
}

/// The network as a job needs it.
pub trait JobPool: Send + Sync {
    /// Surveys the pool for a window.
    fn survey(
        &self,
        query: SurveyQuery,
    ) -> impl Future<Output = Result<Vec<HostReport>, NetError>> + Send;
    /// Sends a job request to a host.
    fn request(
        &self,
        host: PeerId,
        request: JobRequest,
    ) -> impl Future<Output = Result<JobResponse, NetError>> + Send;
}

impl JobPool for NetHandle {
    fn survey(
        &self,
        query: SurveyQuery,
    ) -> impl Future<Output = Result<Vec<HostReport>, NetError>> + Send {
        survey(self, query)
    }
    fn request(
        &self,
        host: PeerId,
        request: JobRequest,
    ) -> impl Future<Output = Result<JobResponse, NetError>> + Send {
        self.job_request(host, request)
    }
}

/// Knobs of one submission.
#[derive(Debug, Clone, Copy)]
pub struct JobSettings {
    /// Resubmissions after the first host failed.
    pub max_retries: u32,
    /// How often a running job's host is probed.
    pub probe_every: Duration,
    /// Failed probes in a row after which the host counts as gone.
    pub probes_to_fail: u32,
    /// Largest output brought back, bytes (each of stdout, stderr, files).
    pub max_output_bytes: u64,
    /// Time after the wall limit before a silent host counts as gone.
    pub grace: Duration,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            max_retries: 3,
            probe_every: Duration::from_secs(1),
            probes_to_fail: 2,
            max_output_bytes: 64 << 20,
            grace: Duration::from_secs(30),
        }
    }
}

/// How one attempt on a host ended.
#[derive(Debug, Clone, PartialEq)]
enum AttemptEnd {
    Finished(i32),
    Failed(String),
}

/// Runs `request` on the pool until it finishes somewhere or retries run out.
/// `now` gives Unix seconds (the window start of each ranking). Stops early if
/// the receiver of `lines` goes away.
pub async fn run_job<P: JobPool>(
    pool: &P,
    inbox: &Inbox,
    base_id: &str,
    request: &SubmitRequest,
    settings: JobSettings,
    now: impl Fn() -> i64,
    lines: mpsc::Sender<SubmitLine>,
) {
    let inputs = match decode_inputs(&request.inputs) {
        Ok(i) => i,
        Err(reason) => {
            let _ = lines
                .send(SubmitLine::Failed {
                    reason,
                    attempts: 0,
                })
                .await;
            return;
        }
    };
    let mut tried: HashSet<String> = HashSet::new();
    let mut attempt = 0u32;
    let mut attempts_made = 0u32;
    while attempt <= settings.max_retries {
        let query = SurveyQuery {
            window_start_unix: now(),
            window_secs: request.runtime_secs.max(1),
            mem_mib: request.mem_mib,
            rounds: 1,
        };
        let hosts = match pool.survey(query).await {
            Ok(h) => h,
            Err(e) => {
                let reason = format!("cannot ask the pool: {e}");
                let _ = lines
                    .send(SubmitLine::Failed {
                        reason,
                        attempts: attempts_made,
                    })
                    .await;
                return;
            }
        };
        let ranked: Vec<HostReport> = rank(&hosts, &tried).into_iter().cloned().collect();
        let line = SubmitLine::Ranked {
            attempt,
            hosts: ranked.clone(),
        };
        if lines.send(line).await.is_err() {
            return;
        }
        let job_id = match JobId::new(format!("{base_id}-{attempt}")) {
            Ok(id) => id,
            Err(e) => {
                let _ = lines
                    .send(SubmitLine::Failed {
                        reason: e.to_string(),
                        attempts: attempts_made,
                    })
                    .await;
                return;
            }
        };
        let submit = JobSubmit {
            job_id: job_id.to_string(),
            argv: request.argv.clone(),
            env: request.env.clone(),
            inputs: inputs.clone(),
            outputs: request.outputs.clone(),
            memory_mib: request.mem_mib,
            expected_runtime_secs: request.runtime_secs,
            wall_time_limit_secs: request.wall_limit_secs,
        };
        let Some((host, report, registration)) =
            place(pool, inbox, &ranked, &job_id, &submit, &mut tried, &lines).await
        else {
            let reason = if hosts.is_empty() {
                "no pool member answered; is the node connected to a pool? (`gleaner hosts`)"
            } else {
                "no host can take the job now (all busy, failing, refusing or already tried)"
            };
            let _ = lines
                .send(SubmitLine::Failed {
                    reason: reason.into(),
                    attempts: attempts_made,
                })
                .await;
            return;
        };
        attempts_made += 1;
        let line = SubmitLine::Submitted {
            attempt,
            host: host.to_base58(),
            job_id: job_id.clone(),
            tr: report.tr,
        };
        if lines.send(line).await.is_err() {
            return;
        }
        let limit = Duration::from_secs(request.wall_limit_secs) + settings.grace;
        let end = follow(pool, host, &job_id, registration, settings, limit, &lines).await;
        match end {
            AttemptEnd::Finished(exit_status) => {
                fetch_outputs(pool, host, &job_id, &request.outputs, settings, &lines).await;
                let _ = lines
                    .send(SubmitLine::Done {
                        host: host.to_base58(),
                        exit_status,
                        attempts: attempts_made,
                    })
                    .await;
                return;
            }
            AttemptEnd::Failed(reason) => {
                tried.insert(host.to_base58());
                let line = SubmitLine::HostFailed {
                    host: host.to_base58(),
                    reason,
                };
                if lines.send(line).await.is_err() {
                    return;
                }
            }
        }
        attempt += 1;
    }
    let _ = lines
        .send(SubmitLine::Failed {
            reason: format!(
                "the job failed on {attempts_made} host(s); no retries left (max_retries = {})",
                settings.max_retries
            ),
            attempts: attempts_made,
        })
        .await;
}

fn decode_inputs(inputs: &[(String, String)]) -> Result<Vec<InputFile>, String> {
    inputs
        .iter()
        .map(|(path, b64)| {
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(|data| InputFile {
                    path: path.clone(),
                    data,
                })
                .map_err(|e| format!("input {path}: not base64: {e}"))
        })
        .collect()
}

/// Offers the job to the ranked hosts in order; returns the first that
/// accepts, with its event registration (made before the offer, so no event
/// is missed).
async fn place<P: JobPool>(
    pool: &P,
    inbox: &Inbox,
    ranked: &[HostReport],
    job_id: &JobId,
    submit: &JobSubmit,
    tried: &mut HashSet<String>,
    lines: &mpsc::Sender<SubmitLine>,
) -> Option<(PeerId, HostReport, crate::consumer::Registration)> {
    for report in ranked {
        let Ok(host) = report.peer.parse::<PeerId>() else {
            continue;
        };
        let registration = inbox.register(host, job_id);
        let answer = pool.request(host, JobRequest::Submit(submit.clone())).await;
        let reason = match answer {
            Ok(JobResponse::Accepted) => return Some((host, report.clone(), registration)),
            Ok(JobResponse::Rejected(r)) => format!("{r:?}"),
            Ok(other) => format!("unexpected answer {other:?}"),
            Err(e) => e.to_string(),
        };
        tried.insert(report.peer.clone());
        let _ = lines
            .send(SubmitLine::Rejected {
                host: report.peer.clone(),
                reason,
            })
            .await;
    }
    None
}

/// Follows a running job until it finishes or fails on its host.
async fn follow<P: JobPool>(
    pool: &P,
    host: PeerId,
    job_id: &JobId,
    mut registration: crate::consumer::Registration,
    settings: JobSettings,
    limit: Duration,
    lines: &mpsc::Sender<SubmitLine>,
) -> AttemptEnd {
    let mut probe = tokio::time::interval(settings.probe_every);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    let mut failed_probes = 0u32;
    loop {
        tokio::select! {
            event = registration.events.recv() => {
                let Some(event) = event else {
                    return AttemptEnd::Failed("the node stopped following the job".into());
                };
                if let Some(end) = report_event(host, &event, lines).await {
                    return end;
                }
            }
            _ = probe.tick() => {
                let answer = pool.request(host, JobRequest::Fetch {
                    job_id: job_id.to_string(),
                    name: OutputName::Stdout,
                    offset: 0,
                    len: 0,
                }).await;
                match answer {
                    Ok(JobResponse::Chunk { .. }) => failed_probes = 0,
                    Ok(JobResponse::NotFound) => {
                        return AttemptEnd::Failed("the host no longer knows the job (restarted?)".into());
                    }
                    Ok(other) => {
                        return AttemptEnd::Failed(format!("unexpected answer to a probe: {other:?}"));
                    }
                    Err(e) => {
                        failed_probes += 1;
                        if failed_probes >= settings.probes_to_fail {
                            return AttemptEnd::Failed(format!("the host is gone: {e}"));
                        }
                    }
                }
            }
            _ = &mut deadline => {
                return AttemptEnd::Failed("the host reported no end within the wall-time limit".into());
            }
            _ = lines.closed() => {
                return AttemptEnd::Failed("the submitter went away".into());
            }
        }
    }
}

/// Passes an event on; returns how the attempt ended if it did.
async fn report_event(
    host: PeerId,
    event: &HostJobEvent,
    lines: &mpsc::Sender<SubmitLine>,
) -> Option<AttemptEnd> {
    let text = match &event.kind {
        JobEventKind::Started => "started".to_string(),
        JobEventKind::Reniced => "reniced to 19 (the owner is busy)".to_string(),
        JobEventKind::Suspended => "suspended (owner load spike)".to_string(),
        JobEventKind::Resumed => "resumed".to_string(),
        JobEventKind::Killed { cause } => match cause {
            Some(state) => format!(
                "killed by the host ({})",
                crate::model::state::State::from(*state).label()
            ),
            None => "killed by the host (wall-time limit)".to_string(),
        },
        JobEventKind::Finished { exit_status } => format!("finished with status {exit_status}"),
        JobEventKind::KilledOverMemory => {
            "killed by the host (over its declared memory)".to_string()
        }
    };
    let _ = lines
        .send(SubmitLine::Event {
            host: host.to_base58(),
            time_unix: event.time_unix,
            event: text.clone(),
        })
        .await;
    match event.kind {
        JobEventKind::Finished { exit_status } => Some(AttemptEnd::Finished(exit_status)),
        JobEventKind::Killed { .. } | JobEventKind::KilledOverMemory => {
            Some(AttemptEnd::Failed(text))
        }
        _ => None,
    }
}

/// Brings back stdout, stderr and the declared output files, chunk by chunk.
async fn fetch_outputs<P: JobPool>(
    pool: &P,
    host: PeerId,
    job_id: &JobId,
    outputs: &[String],
    settings: JobSettings,
    lines: &mpsc::Sender<SubmitLine>,
) {
    let mut names = vec![
        ("stdout".to_string(), OutputName::Stdout),
        ("stderr".to_string(), OutputName::Stderr),
    ];
    names.extend(
        outputs
            .iter()
            .map(|o| (o.clone(), OutputName::File(o.clone()))),
    );
    for (label, name) in names {
        if let Err(reason) = fetch_one(pool, host, job_id, &label, name, settings, lines).await {
            let _ = lines
                .send(SubmitLine::OutputMissing {
                    name: label,
                    reason,
                })
                .await;
        }
    }
}

async fn fetch_one<P: JobPool>(
    pool: &P,
    host: PeerId,
    job_id: &JobId,
    label: &str,
    name: OutputName,
    settings: JobSettings,
    lines: &mpsc::Sender<SubmitLine>,
) -> Result<(), String> {
    let mut offset = 0u64;
    loop {
        let answer = pool
            .request(
                host,
                JobRequest::Fetch {
                    job_id: job_id.to_string(),
                    name: name.clone(),
                    offset,
                    len: OUTPUT_CHUNK_MAX,
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        let (data, total_len) = match answer {
            JobResponse::Chunk { data, total_len } => (data, total_len),
            JobResponse::NotFound => return Err("the host has no such output".into()),
            other => return Err(format!("unexpected answer {other:?}")),
        };
        if total_len > settings.max_output_bytes {
            return Err(format!(
                "{total_len} bytes is over the cap of {} bytes",
                settings.max_output_bytes
            ));
        }
        if data.len() as u64 > u64::from(OUTPUT_CHUNK_MAX) {
            return Err("the host sent a chunk larger than asked".into());
        }
        offset += data.len() as u64;
        if !data.is_empty() {
            let line = SubmitLine::Output {
                name: label.to_string(),
                data: base64::engine::general_purpose::STANDARD.encode(&data),
            };
            lines
                .send(line)
                .await
                .map_err(|_| "the submitter went away")?;
        }
        if data.is_empty() || offset >= total_len {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::protocol::WireState;
    use std::sync::Mutex;

    #[derive(Debug, Clone, Copy)]
    enum Host {
        Finish(i32),
        KilledByOwner,
        Vanish,
        Refuse,
    }

    struct FakePool {
        inbox: Inbox,
        hosts: Vec<(PeerId, f64, Host)>,
        submits: Mutex<Vec<PeerId>>,
        gone: Mutex<HashSet<PeerId>>,
    }

    impl FakePool {
        fn behaviour(&self, peer: PeerId) -> Host {
            self.hosts.iter().find(|h| h.0 == peer).unwrap().2
        }
    }

    impl JobPool for FakePool {
        async fn survey(&self, _q: SurveyQuery) -> Result<Vec<HostReport>, NetError> {
            Ok(self
                .hosts
                .iter()
                .map(|(peer, tr, _)| HostReport {
                    peer: peer.to_base58(),
                    answered: true,
                    tr: Some(*tr),
                    slot_free: Some(true),
                    ..HostReport::default()
                })
                .collect())
        }

        async fn request(
            &self,
            host: PeerId,
            request: JobRequest,
        ) -> Result<JobResponse, NetError> {
            let behaviour = self.behaviour(host);
            match request {
                JobRequest::Submit(s) => {
                    self.submits.lock().unwrap().push(host);
                    let event = |seq, kind| HostJobEvent {
                        seq,
                        time_unix: 0,
                        kind,
                    };
                    match behaviour {
                        Host::Refuse => {
                            return Ok(JobResponse::Rejected(
                                crate::net::protocol::RejectReason::Busy,
                            ))
                        }
                        Host::Finish(code) => {
                            self.inbox
                                .deliver(host, &s.job_id, event(0, JobEventKind::Started));
                            self.inbox.deliver(
                                host,
                                &s.job_id,
                                event(1, JobEventKind::Finished { exit_status: code }),
                            );
                        }
                        Host::KilledByOwner => {
                            self.inbox
                                .deliver(host, &s.job_id, event(0, JobEventKind::Started));
                            self.inbox.deliver(
                                host,
                                &s.job_id,
                                event(
                                    1,
                                    JobEventKind::Killed {
                                        cause: Some(WireState::S3),
                                    },
                                ),
                            );
                        }
                        Host::Vanish => {
                            self.gone.lock().unwrap().insert(host);
                        }
                    }
                    Ok(JobResponse::Accepted)
                }
                JobRequest::Fetch {
                    name, offset, len, ..
                } => {
                    if self.gone.lock().unwrap().contains(&host) {
                        return Err(NetError::ConnectionClosed);
                    }
                    let data: &[u8] = match name {
                        OutputName::Stdout => b"hello\n",
                        OutputName::Stderr => b"",
                        OutputName::File(_) => return Ok(JobResponse::NotFound),
                    };
                    let start = (offset as usize).min(data.len());
                    let end = (start + len as usize).min(data.len());
                    Ok(JobResponse::Chunk {
                        data: data[start..end].to_vec(),
                        total_len: data.len() as u64,
                    })
                }
                JobRequest::Event { .. } | JobRequest::Query { .. } | JobRequest::Cancel { .. } => {
                    Ok(JobResponse::NotFound)
                }
            }
        }
    }

    fn request() -> SubmitRequest {
        SubmitRequest {
            argv: vec!["true".into()],
            env: Vec::new(),
            inputs: Vec::new(),
            outputs: vec!["result.txt".into()],
            mem_mib: 10,
            runtime_secs: 60,
            wall_limit_secs: 60,
        }
    }

    async fn run(
        hosts: Vec<(PeerId, f64, Host)>,
        max_retries: u32,
    ) -> (Vec<SubmitLine>, Vec<PeerId>) {
        let inbox = Inbox::default();
        let pool = FakePool {
            inbox: inbox.clone(),
            hosts,
            submits: Mutex::new(Vec::new()),
            gone: Mutex::new(HashSet::new()),
        };
        let (tx, mut rx) = mpsc::channel(1000);
        let settings = JobSettings {
            max_retries,
            probe_every: Duration::from_millis(10),
            ..JobSettings::default()
        };
        run_job(&pool, &inbox, "job", &request(), settings, || 0, tx).await;
        let mut lines = Vec::new();
        while let Ok(l) = rx.try_recv() {
            lines.push(l);
        }
        let submits = pool.submits.lock().unwrap().clone();
        (lines, submits)
    }

    fn done(lines: &[SubmitLine]) -> Option<(String, i32, u32)> {
        lines.iter().find_map(|l| match l {
            SubmitLine::Done {
                host,
                exit_status,
                attempts,
            } => Some((host.clone(), *exit_status, *attempts)),
            _ => None,
        })
    }

    #[tokio::test]
    async fn the_best_host_runs_the_job_and_its_output_comes_back() {
        let (good, worse) = (PeerId::random(), PeerId::random());
        let (lines, submits) = run(
            vec![(worse, 0.5, Host::Finish(0)), (good, 0.9, Host::Finish(7))],
            3,
        )
        .await;
        assert_eq!(submits, vec![good]);
        assert_eq!(done(&lines), Some((good.to_base58(), 7, 1)));
        assert!(lines.contains(&SubmitLine::Output {
            name: "stdout".into(),
            data: base64::engine::general_purpose::STANDARD.encode("hello\n"),
        }));
        assert!(lines
            .iter()
            .any(|l| matches!(l, SubmitLine::OutputMissing { name, .. } if name == "result.txt")));
    }

    #[tokio::test]
    async fn a_kill_or_a_vanished_host_sends_the_job_to_the_next_best() {
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        let (lines, submits) = run(
            vec![
                (a, 0.9, Host::KilledByOwner),
                (b, 0.8, Host::Vanish),
                (c, 0.1, Host::Finish(0)),
            ],
            3,
        )
        .await;
        assert_eq!(submits, vec![a, b, c]);
        assert_eq!(done(&lines), Some((c.to_base58(), 0, 3)));
        let failures = lines
            .iter()
            .filter(|l| matches!(l, SubmitLine::HostFailed { .. }))
            .count();
        assert_eq!(failures, 2);
    }

    #[tokio::test]
    async fn retries_are_bounded_and_refusals_move_on() {
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        let (lines, submits) = run(
            vec![
                (a, 0.9, Host::Refuse),
                (b, 0.8, Host::KilledByOwner),
                (c, 0.7, Host::KilledByOwner),
            ],
            1,
        )
        .await;
        assert_eq!(submits, vec![a, b, c]);
        assert!(done(&lines).is_none());
        assert!(
            matches!(lines.last(), Some(SubmitLine::Failed { attempts: 2, .. })),
            "{lines:?}"
        );
    }

    #[tokio::test]
    async fn an_empty_pool_fails_with_a_reason() {
        let (lines, _) = run(Vec::new(), 3).await;
        assert!(
            matches!(lines.last(), Some(SubmitLine::Failed { reason, .. }) if reason.contains("no pool member"))
        );
    }
}
