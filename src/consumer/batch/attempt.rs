//! One attempt of one task on one host: hand it over, follow it, and land its
//! results (stdout, stderr, exit status, declared outputs) in the task's
//! result directory, whole or not at all.
//!
//! Results are written under a temporary name and renamed into place once
//! every file is complete, so a reader (or a restart) never sees half a
//! result, and landing the same task again replaces it: a task's results are
//! in its directory exactly once.
//!
//! An attempt follows its job by the host's events and, between them, by
//! asking the host how the job stands (`JobRequest::Query`): a consumer that
//! restarted, or lost an event, still learns how the job ended.

use std::path::{Path, PathBuf};
use std::time::Duration;

use libp2p::PeerId;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::consumer::pool::{input_allowance, JobPool, JobSettings};
use crate::consumer::Inbox;
use crate::model::ids::JobId;
use crate::net::protocol::{
    GuestUsage, JobEventKind, JobRequest, JobResponse, JobSubmit, OutputName, RejectReason,
    RemoteJobState, OUTPUT_CHUNK_MAX,
};

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd {
    /// The job ran to its end and its results landed in the task's
    /// directory; `missing` names the declared outputs it did not write
    /// (the task's fault, not the host's: another host would do the same).
    Landed {
        exit_status: i32,
        /// From the hand-over to the results landed, as the consumer saw it.
        wall_secs: f64,
        /// What the guest used, as its host measured it, when it said.
        usage: Option<GuestUsage>,
        missing: Vec<String>,
    },
    /// The host refused the job before running it. `lasting` when it would
    /// refuse this task again (not allowed, too big, malformed), as opposed
    /// to for now (busy, in a failure state, unreachable).
    Refused { reason: String, lasting: bool },
    /// The job did not end well on this host (killed by the owner's load,
    /// host gone, a corrupt or missing output); another host may do better.
    HostFailed(String),
    /// The job itself is at fault (over its declared memory): another host
    /// would do the same.
    JobFailed(String),
    /// The attempt was cancelled (`batch cancel` or the node stopping).
    Cancelled,
}

/// What an attempt needs besides the pool.
#[derive(Debug, Clone)]
pub struct AttemptPlan {
    pub host: PeerId,
    pub job_id: JobId,
    pub outputs: Vec<String>,
    /// The task's result directory (`…/results/<task>`); it is replaced.
    pub result_dir: PathBuf,
    /// The job's wall-time limit on the host.
    pub limit: Duration,
    pub settings: JobSettings,
    /// Where the task's latest checkpoint is kept, when it checkpoints: each
    /// snapshot its host reports is fetched there.
    pub checkpoint_dest: Option<PathBuf>,
    /// `Some(task)` when this landing is the task's result as it comes (no
    /// verification): `land` writes its `provenance.json` (this host, its
    /// digest) before the result appears. A verified copy's provenance is
    /// written when a quorum accepts it (`replicas`).
    pub provenance_task: Option<u32>,
}

/// What an attempt tells its queue while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptNews {
    /// The host has taken the job.
    Accepted,
    /// The host reported an event of the job (inputs ready, started,
    /// reniced, suspended...).
    HostEvent(JobEventKind),
    /// A checkpoint the host reported was fetched and verified into the
    /// plan's `checkpoint_dest`, in `fetch_secs`.
    Checkpoint {
        size: u64,
        hash: [u8; 32],
        fetch_secs: f64,
    },
}

/// Fetches the checkpoint a `Checkpointed` event announces, when the task
/// keeps checkpoints; a failed fetch is logged and the job goes on (the
/// next snapshot, or the last one after a kill, will be tried).
async fn take_checkpoint<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    kind: &JobEventKind,
    news: &(impl Fn(AttemptNews) + Send + Sync),
) {
    let (JobEventKind::Checkpointed { size, hash }, Some(dest)) = (kind, &plan.checkpoint_dest)
    else {
        return;
    };
    match fetch_checkpoint(pool, plan, dest, *size, *hash).await {
        Ok(fetch_secs) => news(AttemptNews::Checkpoint {
            size: *size,
            hash: *hash,
            fetch_secs,
        }),
        Err(e) => {
            tracing::info!(job = %plan.job_id, host = %plan.host, error = %e, "checkpoint not fetched")
        }
    }
}

/// Fetches the host's snapshot of the job's checkpoint into `dest` (through
/// a temporary file beside it), and keeps it only when it matches the `hash`
/// and `size` the host reported in its `Checkpointed` event. Returns the
/// seconds the fetch took.
pub async fn fetch_checkpoint<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    dest: &Path,
    size: u64,
    hash: [u8; 32],
) -> Result<f64, String> {
    let started = tokio::time::Instant::now();
    let dir = dest.parent().ok_or("the checkpoint path has no parent")?;
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let name = dest
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("the checkpoint path has no name")?;
    let tmp = dir.join(format!(".{name}.{}.part", plan.job_id));
    let result = async {
        let found = fetch_to_file(pool, plan, OutputName::Checkpoint, &tmp).await?;
        if !found {
            return Err("the host has no checkpoint".to_string());
        }
        // Hashed as it streams from disk: a checkpoint is never whole in memory.
        let path = tmp.clone();
        let (got_size, got_hash) = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&path)?;
            let size = file.metadata()?.len();
            let mut hasher = blake3::Hasher::new();
            hasher.update_reader(file)?;
            Ok::<_, std::io::Error>((size, *hasher.finalize().as_bytes()))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        // A newer snapshot may have replaced the one the event named: it is
        // not the one announced, so it waits for its own event.
        if got_size != size || got_hash != hash {
            return Err("does not match the hash its host announced; discarded".to_string());
        }
        tokio::fs::rename(&tmp, dest)
            .await
            .map_err(|e| format!("cannot rename into {}: {e}", dest.display()))
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result.map(|()| started.elapsed().as_secs_f64())
}

/// Hands `submit` to the plan's host and follows it, telling `news` what
/// happens.
pub async fn run<P: JobPool>(
    pool: &P,
    inbox: &Inbox,
    plan: &AttemptPlan,
    submit: JobSubmit,
    cancel: &CancellationToken,
    news: impl Fn(AttemptNews) + Send + Sync,
) -> AttemptEnd {
    let registration = inbox.register(plan.host, &plan.job_id);
    // Until the guest starts the host fetches the inputs it lacks.
    let preparing = input_allowance(submit.inputs.iter().map(|i| i.size).sum());
    let answer = tokio::select! {
        a = pool.request(plan.host, JobRequest::Submit(submit)) => a,
        _ = cancel.cancelled() => return AttemptEnd::Cancelled,
    };
    match answer {
        Ok(JobResponse::Accepted) => {}
        Ok(JobResponse::Rejected(r)) => {
            let lasting = !matches!(r, RejectReason::Busy | RejectReason::HostState(_));
            return AttemptEnd::Refused {
                reason: format!("{r:?}"),
                lasting,
            };
        }
        Ok(other) => {
            return AttemptEnd::Refused {
                reason: format!("unexpected answer {other:?}"),
                lasting: true,
            }
        }
        Err(e) => {
            return AttemptEnd::Refused {
                reason: e.to_string(),
                lasting: false,
            }
        }
    }
    news(AttemptNews::Accepted);
    follow(pool, plan, registration, cancel, preparing, &news).await
}

/// Picks up an attempt a restarted node finds running: asks the host, then
/// follows the job or lands what it left.
pub async fn reattach<P: JobPool>(
    pool: &P,
    inbox: &Inbox,
    plan: &AttemptPlan,
    cancel: &CancellationToken,
    news: impl Fn(AttemptNews) + Send + Sync,
) -> AttemptEnd {
    let registration = inbox.register(plan.host, &plan.job_id);
    // Right after a restart the node is still dialling its pool: give the
    // host longer to answer before counting it gone.
    let mut plan = plan.clone();
    plan.settings.probes_to_fail = plan.settings.probes_to_fail.max(REATTACH_PROBES);
    // The inputs' sizes are not kept: allow what an empty job gets; a host
    // still preparing answers the probes (`Running`) meanwhile.
    follow(pool, &plan, registration, cancel, input_allowance(0), &news).await
}

/// Failed probes after which a re-attached job's host counts as gone.
const REATTACH_PROBES: u32 = 15;

async fn follow<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    mut registration: crate::consumer::Registration,
    cancel: &CancellationToken,
    preparing: Duration,
    news: &(impl Fn(AttemptNews) + Send + Sync),
) -> AttemptEnd {
    let started = tokio::time::Instant::now();
    // The first probe after one period, not at once: a job that ends within
    // milliseconds is then told by its events (started, finished), which a
    // probe's answer would skip.
    let mut probe = tokio::time::interval_at(
        tokio::time::Instant::now() + plan.settings.probe_every,
        plan.settings.probe_every,
    );
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = tokio::time::sleep(plan.limit + plan.settings.grace + preparing);
    tokio::pin!(deadline);
    let mut failed_probes = 0u32;
    let end = loop {
        tokio::select! {
            event = registration.events.recv() => {
                let Some(event) = event else {
                    break Err(AttemptEnd::HostFailed("the node stopped following the job".into()));
                };
                news(AttemptNews::HostEvent(event.kind.clone()));
                take_checkpoint(pool, plan, &event.kind, news).await;
                if let Some(end) = ending(&event.kind) {
                    break end;
                }
                // Until the guest starts the host is fetching inputs; the
                // wall-time limit counts from the start.
                if event.kind == JobEventKind::Started {
                    deadline
                        .as_mut()
                        .reset(tokio::time::Instant::now() + plan.limit + plan.settings.grace);
                }
            }
            _ = probe.tick() => {
                let query = JobRequest::Query { job_id: plan.job_id.to_string() };
                match pool.request(plan.host, query).await {
                    Ok(JobResponse::JobState(RemoteJobState::Running)) => failed_probes = 0,
                    Ok(JobResponse::JobState(RemoteJobState::Ended(kind))) => {
                        // Events that came meanwhile are still news.
                        while let Ok(event) = registration.events.try_recv() {
                            take_checkpoint(pool, plan, &event.kind, news).await;
                            news(AttemptNews::HostEvent(event.kind));
                        }
                        if let Some(end) = ending(&kind) {
                            break end;
                        }
                        break Err(AttemptEnd::HostFailed(format!("the host reports {kind:?} as the end")));
                    }
                    Ok(JobResponse::NotFound) => {
                        break Err(AttemptEnd::HostFailed("the host no longer knows the job".into()));
                    }
                    Ok(other) => {
                        break Err(AttemptEnd::HostFailed(format!("unexpected answer to a query: {other:?}")));
                    }
                    Err(e) => {
                        failed_probes += 1;
                        if failed_probes >= plan.settings.probes_to_fail {
                            break Err(AttemptEnd::HostFailed(format!("the host is gone: {e}")));
                        }
                    }
                }
            }
            _ = &mut deadline => {
                break Err(AttemptEnd::HostFailed("the host reported no end within the wall-time limit".into()));
            }
            _ = cancel.cancelled() => {
                let _ = pool
                    .request(plan.host, JobRequest::Cancel { job_id: plan.job_id.to_string() })
                    .await;
                return AttemptEnd::Cancelled;
            }
        }
    };
    match end {
        Ok((exit_status, usage)) => {
            let wall_secs = started.elapsed().as_secs_f64();
            match land(pool, plan, exit_status).await {
                Ok(missing) => AttemptEnd::Landed {
                    exit_status,
                    wall_secs,
                    usage,
                    missing,
                },
                Err(reason) => AttemptEnd::HostFailed(reason),
            }
        }
        Err(end) => end,
    }
}

/// A host's job event as people read it (`batch wait`, `submit`).
pub fn event_text(kind: &JobEventKind) -> String {
    match kind {
        JobEventKind::Started => "started".to_string(),
        JobEventKind::Reniced => "reniced to 19 (the owner is busy)".to_string(),
        JobEventKind::Suspended => "suspended (owner load spike)".to_string(),
        JobEventKind::Resumed => "resumed".to_string(),
        JobEventKind::Killed { cause, .. } => match cause {
            Some(state) => format!(
                "killed by the host ({})",
                crate::model::state::State::from(*state).label()
            ),
            None => "killed by the host (wall-time limit)".to_string(),
        },
        JobEventKind::Finished { exit_status, .. } => {
            format!("finished with status {exit_status}")
        }
        JobEventKind::Checkpointed { size, .. } => {
            format!("checkpoint taken on the host ({size} bytes)")
        }
        JobEventKind::CheckpointRefused { reason } => format!("checkpoint refused: {reason}"),
        JobEventKind::KilledOverMemory => {
            "killed by the host: over its declared memory".to_string()
        }
        JobEventKind::InputsReady {
            fetched_bytes,
            cached_bytes,
        } => format!(
            "inputs ready: {fetched_bytes} bytes fetched, {cached_bytes} bytes from the host's cache"
        ),
        JobEventKind::NotStarted { reason } => format!("not started: {reason}"),
    }
}

/// `Some(Ok(status))` when the job finished, `Some(Err(..))` when the host
/// ended it, `None` while it runs.
fn ending(kind: &JobEventKind) -> Option<Result<(i32, Option<GuestUsage>), AttemptEnd>> {
    match kind {
        JobEventKind::Finished { exit_status, usage } => Some(Ok((*exit_status, *usage))),
        JobEventKind::Killed { .. } | JobEventKind::NotStarted { .. } => {
            Some(Err(AttemptEnd::HostFailed(event_text(kind))))
        }
        JobEventKind::KilledOverMemory => Some(Err(AttemptEnd::JobFailed(event_text(kind)))),
        JobEventKind::Started
        | JobEventKind::InputsReady { .. }
        | JobEventKind::Reniced
        | JobEventKind::Suspended
        | JobEventKind::Resumed
        | JobEventKind::Checkpointed { .. }
        | JobEventKind::CheckpointRefused { .. } => None,
    }
}

/// Fetches every result into a temporary directory beside the task's, then
/// renames it into place. Returns the declared outputs the job did not write.
async fn land<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    exit_status: i32,
) -> Result<Vec<String>, String> {
    let parent = plan
        .result_dir
        .parent()
        .ok_or("the result directory has no parent")?;
    let name = plan
        .result_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("the result directory has no name")?;
    let tmp = parent.join(format!(".{name}.{}.partial", plan.job_id));
    let _ = tokio::fs::remove_dir_all(&tmp).await;
    tokio::fs::create_dir_all(&tmp)
        .await
        .map_err(|e| format!("cannot make {}: {e}", tmp.display()))?;
    let landed = async {
        let mut names = vec![
            ("stdout".to_string(), OutputName::Stdout),
            ("stderr".to_string(), OutputName::Stderr),
        ];
        names.extend(
            plan.outputs
                .iter()
                .map(|o| (o.clone(), OutputName::File(o.clone()))),
        );
        let mut missing = Vec::new();
        for (label, name) in names {
            let declared = matches!(name, OutputName::File(_));
            let found = fetch_to_file(pool, plan, name, &tmp.join(&label))
                .await
                .map_err(|e| format!("output {label}: {e}"))?;
            match (found, declared) {
                (true, _) => {}
                (false, true) => missing.push(label),
                (false, false) => return Err(format!("output {label}: the host has none")),
            }
        }
        tokio::fs::write(tmp.join("exit_status"), format!("{exit_status}\n"))
            .await
            .map_err(|e| format!("exit_status: {e}"))?;
        if let Some(task) = plan.provenance_task {
            // Digesting reads every output: on the blocking pool.
            let (dir, outputs, host) = (tmp.clone(), plan.outputs.clone(), plan.host.to_base58());
            tokio::task::spawn_blocking(move || {
                crate::consumer::batch::verify::write_single_provenance(
                    &dir,
                    &outputs,
                    task,
                    host,
                    exit_status,
                )
            })
            .await
            .map_err(|e| format!("provenance: {e}"))??;
        }
        replace_dir(&tmp, &plan.result_dir).await?;
        Ok(missing)
    }
    .await;
    if landed.is_err() {
        let _ = tokio::fs::remove_dir_all(&tmp).await;
    }
    landed
}

/// Renames `from` onto `to`, replacing what an earlier landing left there.
pub async fn replace_dir(from: &Path, to: &Path) -> Result<(), String> {
    if tokio::fs::metadata(to).await.is_ok() {
        tokio::fs::remove_dir_all(to)
            .await
            .map_err(|e| format!("cannot replace {}: {e}", to.display()))?;
    }
    tokio::fs::rename(from, to)
        .await
        .map_err(|e| format!("cannot rename into {}: {e}", to.display()))
}

/// Fetches one output into `path`, checked against its host's hash.
/// `Ok(false)` when the host says the job wrote no such file.
pub(crate) async fn fetch_to_file<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    name: OutputName,
    path: &Path,
) -> Result<bool, String> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut offset = 0u64;
    let mut hasher = blake3::Hasher::new();
    let mut reported: Option<[u8; 32]> = None;
    loop {
        let request = JobRequest::Fetch {
            job_id: plan.job_id.to_string(),
            name: name.clone(),
            offset,
            len: OUTPUT_CHUNK_MAX,
        };
        let (data, total_len) = match pool.request(plan.host, request).await {
            Ok(JobResponse::Chunk {
                data,
                total_len,
                hash,
            }) => {
                if offset == 0 {
                    reported = hash;
                }
                (data, total_len)
            }
            Ok(JobResponse::NotFound) if offset == 0 => {
                drop(file);
                let _ = tokio::fs::remove_file(path).await;
                return Ok(false);
            }
            Ok(JobResponse::NotFound) => return Err("the output went away while fetched".into()),
            Ok(other) => return Err(format!("unexpected answer {other:?}")),
            Err(e) => return Err(e.to_string()),
        };
        if total_len > plan.settings.max_output_bytes {
            return Err(format!(
                "{total_len} bytes is over the cap of {} bytes",
                plan.settings.max_output_bytes
            ));
        }
        if data.len() as u64 > u64::from(OUTPUT_CHUNK_MAX) || offset + data.len() as u64 > total_len
        {
            return Err("the host sent more than it announced".into());
        }
        file.write_all(&data).await.map_err(|e| e.to_string())?;
        hasher.update(&data);
        offset += data.len() as u64;
        if data.is_empty() || offset >= total_len {
            if offset != total_len {
                return Err(format!("the host sent {offset} of {total_len} bytes"));
            }
            // Checked before the results are renamed into place: a
            // corrupted output fails the attempt and never lands.
            if reported != Some(*hasher.finalize().as_bytes()) {
                return Err("does not match the hash its host reported; discarded".into());
            }
            break;
        }
    }
    file.flush().await.map_err(|e| e.to_string())?;
    file.sync_all().await.map_err(|e| e.to_string())?;
    Ok(true)
}
