//! One remote job from the consumer's side: rank the pool's hosts by TR for
//! [now, now + runtime], submit to the best that accepts, follow its events,
//! probe that the host is still there, fetch stdout, stderr and the declared
//! outputs when it finishes, and resubmit to the next-best host (a bounded
//! number of times) when the host kills the job, revokes it or disappears.
//!
//! Inputs travel by hash: [`JobPool::offer`] hashes a task's input files and
//! offers them in the node's catalog; the submission names them by hash, size
//! and path, and the chosen host reads what it lacks over `/gleaner/data/1`
//! (only that host may: [`crate::data::Offer::allow`]). Outputs come back in
//! chunks and are checked against the BLAKE3 hash the host reports; one that
//! does not match fails the attempt like a host that vanished.
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
use crate::data::{Catalog, InputSpec, Offer};
use crate::model::ids::JobId;
use crate::net::protocol::{
    JobEventKind, JobRequest, JobResponse, JobSubmit, OutputName, OUTPUT_CHUNK_MAX,
};
use crate::net::{NetError, NetHandle};

/// What `gleaner submit` sends to its node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Environment for the guest.
    pub env: Vec<(String, String)>,
    /// Input files: where each goes in the job's work directory and the
    /// local file (absolute path) the node reads and offers by hash.
    pub inputs: Vec<InputSpec>,
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
    /// An output is complete and matches the hash its host reported: what
    /// came in `Output` lines for it since the last `Submitted` may be kept.
    OutputVerified { name: String, hash: String },
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
    /// Hashes a task's input files and offers them to the hosts the task
    /// will be sent to; the one way inputs are shipped, for `submit` and
    /// batches alike. Errors name the input.
    fn offer(&self, inputs: &[InputSpec]) -> impl Future<Output = Result<Offer, String>> + Send;
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

/// The node's network and its catalog of offered files: the real [`JobPool`].
#[derive(Debug, Clone)]
pub struct PoolLink {
    /// The network.
    pub net: NetHandle,
    /// The files this node serves to hosts.
    pub catalog: Catalog,
}

impl JobPool for PoolLink {
    fn offer(&self, inputs: &[InputSpec]) -> impl Future<Output = Result<Offer, String>> + Send {
        self.catalog.offer(inputs)
    }
    fn survey(
        &self,
        query: SurveyQuery,
    ) -> impl Future<Output = Result<Vec<HostReport>, NetError>> + Send {
        survey(&self.net, query)
    }
    fn request(
        &self,
        host: PeerId,
        request: JobRequest,
    ) -> impl Future<Output = Result<JobResponse, NetError>> + Send {
        self.net.job_request(host, request)
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
    let offer = match pool.offer(&request.inputs).await {
        Ok(o) => o,
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
            inputs: offer.refs().to_vec(),
            outputs: request.outputs.clone(),
            memory_mib: request.mem_mib,
            expected_runtime_secs: request.runtime_secs,
            wall_time_limit_secs: request.wall_limit_secs,
        };
        let Some((host, report, registration)) = place(
            pool,
            inbox,
            &ranked,
            (&job_id, &submit, &offer),
            &mut tried,
            &lines,
        )
        .await
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
        let limits = AttemptLimits {
            preparing: settings.grace + input_allowance(offer.total_bytes()),
            running: Duration::from_secs(request.wall_limit_secs) + settings.grace,
        };
        let mut end = follow(pool, host, &job_id, registration, settings, limits, &lines).await;
        if let AttemptEnd::Finished(_) = end {
            let fetched =
                fetch_outputs(pool, host, &job_id, &request.outputs, settings, &lines).await;
            if let Err(reason) = fetched {
                end = AttemptEnd::Failed(reason);
            }
        }
        match end {
            AttemptEnd::Finished(exit_status) => {
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

/// How long a host may take to prepare inputs of `bytes` before the
/// attempt counts as failed: a minute plus 1 MiB/s, far below any link the
/// data protocol is used on (the host bounds each chunk's wait itself).
fn input_allowance(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (1 << 20))
}

/// Bounds of one attempt: before the guest starts, and once it has.
#[derive(Debug, Clone, Copy)]
struct AttemptLimits {
    preparing: Duration,
    running: Duration,
}

/// Offers the job to the ranked hosts in order; returns the first that
/// accepts, with its event registration (made before the offer, so no event
/// is missed).
async fn place<P: JobPool>(
    pool: &P,
    inbox: &Inbox,
    ranked: &[HostReport],
    (job_id, submit, offer): (&JobId, &JobSubmit, &Offer),
    tried: &mut HashSet<String>,
    lines: &mpsc::Sender<SubmitLine>,
) -> Option<(PeerId, HostReport, crate::consumer::Registration)> {
    for report in ranked {
        let Ok(host) = report.peer.parse::<PeerId>() else {
            continue;
        };
        let registration = inbox.register(host, job_id);
        // The host reads the inputs as soon as it accepts.
        offer.allow(host);
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
    limits: AttemptLimits,
    lines: &mpsc::Sender<SubmitLine>,
) -> AttemptEnd {
    let mut probe = tokio::time::interval(settings.probe_every);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Until the guest starts the host is fetching inputs; the wall-time
    // limit counts from the start.
    let deadline = tokio::time::sleep(limits.preparing);
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
                if event.kind == JobEventKind::Started {
                    deadline.as_mut().reset(tokio::time::Instant::now() + limits.running);
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
        JobEventKind::InputsReady {
            fetched_bytes,
            cached_bytes,
        } => format!(
            "inputs ready: {fetched_bytes} bytes fetched, {cached_bytes} bytes from the host's cache"
        ),
        JobEventKind::NotStarted { reason } => format!("not started: {reason}"),
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
        JobEventKind::Killed { .. }
        | JobEventKind::KilledOverMemory
        | JobEventKind::NotStarted { .. } => Some(AttemptEnd::Failed(text)),
        _ => None,
    }
}

/// Brings back stdout, stderr and the declared output files, chunk by chunk.
/// An output missing or over the cap is reported and skipped; one that does
/// not match the hash its host reported fails the attempt (`Err`).
async fn fetch_outputs<P: JobPool>(
    pool: &P,
    host: PeerId,
    job_id: &JobId,
    outputs: &[String],
    settings: JobSettings,
    lines: &mpsc::Sender<SubmitLine>,
) -> Result<(), String> {
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
        match fetch_one(pool, host, job_id, &label, name, settings, lines).await {
            Ok(()) => {}
            Err(FetchFailure::Corrupt(reason)) => return Err(reason),
            Err(FetchFailure::Missing(reason)) => {
                let _ = lines
                    .send(SubmitLine::OutputMissing {
                        name: label,
                        reason,
                    })
                    .await;
            }
        }
    }
    Ok(())
}

/// Why an output did not come back.
enum FetchFailure {
    /// Not there, too big, or the link failed: reported, the job still counts.
    Missing(String),
    /// What arrived is not what the host hashed: the attempt failed.
    Corrupt(String),
}

impl From<String> for FetchFailure {
    fn from(s: String) -> Self {
        FetchFailure::Missing(s)
    }
}

impl From<&str> for FetchFailure {
    fn from(s: &str) -> Self {
        FetchFailure::Missing(s.to_string())
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
) -> Result<(), FetchFailure> {
    let mut offset = 0u64;
    let mut hasher = blake3::Hasher::new();
    let mut reported: Option<[u8; 32]> = None;
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
            JobResponse::Chunk {
                data,
                total_len,
                hash,
            } => {
                if offset == 0 {
                    reported = hash;
                }
                (data, total_len)
            }
            JobResponse::NotFound => return Err("the host has no such output".into()),
            other => return Err(format!("unexpected answer {other:?}").into()),
        };
        if total_len > settings.max_output_bytes {
            return Err(format!(
                "{total_len} bytes is over the cap of {} bytes",
                settings.max_output_bytes
            )
            .into());
        }
        if data.len() as u64 > u64::from(OUTPUT_CHUNK_MAX) {
            return Err("the host sent a chunk larger than asked".into());
        }
        offset += data.len() as u64;
        hasher.update(&data);
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
            let got = *hasher.finalize().as_bytes();
            return match reported {
                Some(h) if h == got => {
                    let hash = crate::data::ContentHash(got).to_string();
                    let line = SubmitLine::OutputVerified {
                        name: label.to_string(),
                        hash,
                    };
                    lines
                        .send(line)
                        .await
                        .map_err(|_| "the submitter went away")?;
                    Ok(())
                }
                Some(_) => Err(FetchFailure::Corrupt(format!(
                    "output {label} does not match the hash its host reported; discarded"
                ))),
                None => Err(FetchFailure::Corrupt(format!(
                    "output {label}: the host reported no hash for it"
                ))),
            };
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
        /// Finishes, but its stdout does not match the hash it reports.
        CorruptOutput,
        KilledByOwner,
        Vanish,
        Refuse,
    }

    struct FakePool {
        catalog: Catalog,
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
        async fn offer(&self, inputs: &[InputSpec]) -> Result<Offer, String> {
            self.catalog.offer(inputs).await
        }

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
                        Host::CorruptOutput => {
                            self.inbox.deliver(
                                host,
                                &s.job_id,
                                event(0, JobEventKind::Finished { exit_status: 0 }),
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
                    let mut hash = (offset == 0 && len > 0).then(|| *blake3::hash(data).as_bytes());
                    let mut sent = data[start..end].to_vec();
                    if matches!(behaviour, Host::CorruptOutput) && !sent.is_empty() {
                        // Bytes changed after the host hashed them.
                        sent[0] ^= 0x20;
                        hash = hash.or(Some([0; 32]));
                    }
                    Ok(JobResponse::Chunk {
                        data: sent,
                        total_len: data.len() as u64,
                        hash,
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
            catalog: Catalog::new(),
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

    /// An output that does not match its host's hash fails the attempt: it
    /// is never marked verified, and the job runs again elsewhere.
    #[tokio::test]
    async fn a_corrupted_output_fails_the_attempt_and_the_job_moves_on() {
        let (bad, good) = (PeerId::random(), PeerId::random());
        let (lines, submits) = run(
            vec![
                (bad, 0.9, Host::CorruptOutput),
                (good, 0.5, Host::Finish(0)),
            ],
            3,
        )
        .await;
        assert_eq!(submits, vec![bad, good]);
        assert_eq!(done(&lines), Some((good.to_base58(), 0, 2)));
        let failed = lines
            .iter()
            .position(|l| matches!(l, SubmitLine::HostFailed { reason, .. } if reason.contains("output stdout does not match")))
            .expect("the corrupt attempt failed");
        let verified: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| matches!(l, SubmitLine::OutputVerified { .. }))
            .map(|(i, _)| i)
            .collect();
        assert!(!verified.is_empty());
        assert!(
            verified.iter().all(|&i| i > failed),
            "only the good host's outputs are verified: {lines:#?}"
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
