//! Following one attempt: hand the job to its host, follow it by the host's
//! events and, between them, by asking how it stands (`JobRequest::Query`),
//! fetch each checkpoint it announces, and land its results (stdout,
//! stderr, exit status, declared outputs) in the attempt's own directory
//! (the plan's `result_dir`) under a temporary name renamed into place once
//! whole. A host that no
//! longer knows the job is judged by the connections the job was accepted
//! over: closed since, it restarted and lost the job; still open, it forgot
//! it (issue 30).

use std::time::Duration;

use libp2p::swarm::ConnectionId;
use tokio_util::sync::CancellationToken;

use super::fetch::{fetch_checkpoint, fetch_to_file, replace_dir, FetchError};
use super::types::{event_text, AttemptEnd, AttemptNews, AttemptPlan, JobImage};
use crate::consumer::job_pool::{input_allowance, JobPool};
use crate::consumer::Inbox;
use crate::model::trust::Offence;
use crate::net::protocol::{
    GuestUsage, JobEventKind, JobRequest, JobResponse, JobSubmit, OutputName, RejectReason,
    RemoteJobState, WireState,
};

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

/// Hands `submit` (in its image, when it has one) to the plan's host and
/// follows it, telling `news` what happens.
pub async fn run<P: JobPool>(
    pool: &P,
    inbox: &Inbox,
    plan: &AttemptPlan,
    (submit, image): (JobSubmit, Option<JobImage>),
    cancel: &CancellationToken,
    news: impl Fn(AttemptNews) + Send + Sync,
) -> AttemptEnd {
    let registration = inbox.register(plan.host, &plan.job_id);
    // Until the guest starts the host fetches the inputs (and the image) it lacks.
    let bytes = submit.inputs.iter().map(|i| i.size).sum::<u64>()
        + image.as_ref().map_or(0, JobImage::bytes);
    let preparing = input_allowance(bytes);
    let in_image = image.is_some();
    let request = match image {
        None => JobRequest::Submit(submit),
        Some(image) => image.submit(submit),
    };
    let answer = tokio::select! {
        a = pool.request(plan.host, request) => a,
        _ = cancel.cancelled() => return AttemptEnd::Cancelled,
    };
    match answer {
        Ok(JobResponse::Accepted) => {}
        Ok(JobResponse::Rejected(RejectReason::NoImages)) => {
            return AttemptEnd::Refused {
                reason: "the host runs no images ([guest] images = \"deny\")".into(),
                lasting: true,
            };
        }
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
        // A host built before images (or before images by their layers)
        // cannot decode `SubmitInImage` (`SubmitInLayers`) and drops the
        // stream: it will not take this task later either.
        Err(e) => {
            return AttemptEnd::Refused {
                reason: e.to_string(),
                lasting: in_image,
            }
        }
    }
    news(AttemptNews::Accepted);
    // The connections the job was accepted over: if every one of them has
    // closed when the host says it no longer knows the job, it restarted.
    let held = pool.connections(plan.host).await;
    let accepted = Acceptance::Over(held);
    follow(pool, plan, registration, cancel, preparing, accepted, &news).await
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
    let allowance = input_allowance(0);
    follow(
        pool,
        &plan,
        registration,
        cancel,
        allowance,
        Acceptance::BeforeOurRestart,
        &news,
    )
    .await
}

/// Failed probes after which a re-attached job's host counts as gone.
const REATTACH_PROBES: u32 = 15;

/// What the consumer saw of the host when it accepted the attempt: what
/// tells a host that restarted (and so lost the job, as an owner's S5
/// would) from one that kept running and says it never knew the job (an
/// offence).
enum Acceptance {
    /// Accepted over these connections (empty when none was left by the
    /// time it looked).
    Over(Vec<ConnectionId>),
    /// Accepted before this node restarted: its connections then are
    /// unknown, and so is whether the host restarted too, or dropped the
    /// job's outputs off its list while we were away.
    BeforeOurRestart,
}

/// How an attempt ends when its host answers `NotFound` to a query: lost,
/// with no retry spent, when the host restarted since it accepted the job
/// (a restarted node holds none of the connections it had: each closed when
/// its process ended) or when we cannot tell ([`Acceptance::BeforeOurRestart`]);
/// an offence when a connection the job was accepted over is still open.
/// An honest host's old connection may outlive its process by a moment (its
/// close not yet read), so that look is taken again after one probe period.
async fn unknown_job<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    accepted: &Acceptance,
) -> AttemptEnd {
    let held = match accepted {
        Acceptance::Over(held) => held,
        Acceptance::BeforeOurRestart => {
            return AttemptEnd::OwnerKilled(
                "the host no longer knows the job, which it took before this node restarted".into(),
            )
        }
    };
    for look in 0..2 {
        if look > 0 {
            tokio::time::sleep(plan.settings.probe_every).await;
        }
        let now = pool.connections(plan.host).await;
        if !held.iter().any(|c| now.contains(c)) {
            return AttemptEnd::OwnerKilled(
                "the host restarted (every connection the job was accepted over closed) and lost the job"
                    .into(),
            );
        }
    }
    AttemptEnd::Misbehaved {
        offence: Offence::Forgot,
        reason: "the host no longer knows the job, and has not restarted since it took it".into(),
    }
}

async fn follow<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    mut registration: crate::consumer::Registration,
    cancel: &CancellationToken,
    preparing: Duration,
    accepted: Acceptance,
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
    let mut flood_told = false;
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
                // A host flooding us with events is told on once, between
                // probes (the dropped events themselves wake nobody).
                let dropped = registration.dropped();
                if dropped > 0 && !flood_told {
                    flood_told = true;
                    tracing::warn!(job = %plan.job_id, host = %plan.host, dropped, "the host sends job events past its budget; dropped");
                    news(AttemptNews::Flooded { dropped });
                }
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
                        break Err(unknown_job(pool, plan, &accepted).await);
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
                break Err(AttemptEnd::Misbehaved {
                    offence: Offence::Forgot,
                    reason: "the host reported no end within the wall-time limit".into(),
                });
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
                Err(FetchError::Failed(reason)) => AttemptEnd::HostFailed(reason),
                Err(FetchError::HostLied(reason)) => AttemptEnd::Misbehaved {
                    offence: Offence::WrongOutput,
                    reason,
                },
            }
        }
        Err(end) => end,
    }
}

/// `Some(Ok(status))` when the job finished, `Some(Err(..))` when the host
/// ended it, `None` while it runs.
fn ending(kind: &JobEventKind) -> Option<Result<(i32, Option<GuestUsage>), AttemptEnd>> {
    match kind {
        JobEventKind::Finished { exit_status, usage } => Some(Ok((*exit_status, *usage))),
        JobEventKind::Killed {
            cause: Some(WireState::S3 | WireState::S4 | WireState::S5),
            ..
        } => Some(Err(AttemptEnd::OwnerKilled(event_text(kind)))),
        JobEventKind::Killed { .. } | JobEventKind::NotStarted { .. } => {
            Some(Err(AttemptEnd::HostFailed(event_text(kind))))
        }
        JobEventKind::KilledOverMemory => Some(Err(AttemptEnd::JobFailed(event_text(kind)))),
        // This consumer ends an attempt it cancels without waiting for the
        // host: a cancel it hears of is one it did not ask for.
        JobEventKind::Cancelled { .. } => Some(Err(AttemptEnd::HostFailed(format!(
            "{}, which this consumer did not ask for",
            event_text(kind)
        )))),
        JobEventKind::Started
        | JobEventKind::InputsReady { .. }
        | JobEventKind::Reniced
        | JobEventKind::Suspended
        | JobEventKind::Resumed
        | JobEventKind::Checkpointed { .. }
        | JobEventKind::CheckpointRefused { .. } => None,
    }
}

/// Fetches every result into a temporary directory beside the attempt's
/// own, then renames it into place. Returns the declared outputs the job
/// did not write.
async fn land<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    exit_status: i32,
) -> Result<Vec<String>, FetchError> {
    let failed = |why: &str| FetchError::Failed(why.to_string());
    let parent = plan
        .result_dir
        .parent()
        .ok_or_else(|| failed("the result directory has no parent"))?;
    let name = plan
        .result_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| failed("the result directory has no name"))?;
    let tmp = parent.join(format!(".{name}.{}.partial", plan.job_id));
    let _ = tokio::fs::remove_dir_all(&tmp).await;
    tokio::fs::create_dir_all(&tmp)
        .await
        .map_err(|e| failed(&format!("cannot make {}: {e}", tmp.display())))?;
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
                .map_err(|e| match e {
                    FetchError::Failed(why) => FetchError::Failed(format!("output {label}: {why}")),
                    FetchError::HostLied(why) => {
                        FetchError::HostLied(format!("output {label}: {why}"))
                    }
                })?;
            match (found, declared) {
                (true, _) => {}
                (false, true) => missing.push(label),
                (false, false) => {
                    return Err(failed(&format!("output {label}: the host has none")))
                }
            }
        }
        tokio::fs::write(tmp.join("exit_status"), format!("{exit_status}\n"))
            .await
            .map_err(|e| failed(&format!("exit_status: {e}")))?;
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
            .map_err(|e| failed(&format!("provenance: {e}")))?
            .map_err(|e| failed(&e))?;
        }
        replace_dir(&tmp, &plan.result_dir)
            .await
            .map_err(|e| failed(&e))?;
        Ok(missing)
    }
    .await;
    if landed.is_err() {
        let _ = tokio::fs::remove_dir_all(&tmp).await;
    }
    landed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_by_the_owner_is_told_from_the_hosts_own_failures() {
        for cause in [WireState::S3, WireState::S4, WireState::S5] {
            let kind = JobEventKind::Killed {
                cause: Some(cause),
                usage: None,
            };
            assert!(
                matches!(ending(&kind), Some(Err(AttemptEnd::OwnerKilled(_)))),
                "{cause:?}"
            );
        }
        // The wall-time limit is no owner's doing.
        let limit = JobEventKind::Killed {
            cause: None,
            usage: None,
        };
        assert!(matches!(
            ending(&limit),
            Some(Err(AttemptEnd::HostFailed(_)))
        ));
        assert!(matches!(
            ending(&JobEventKind::KilledOverMemory),
            Some(Err(AttemptEnd::JobFailed(_)))
        ));
    }
}
