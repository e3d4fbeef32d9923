//! The batch routes of the control API: HTTP and JSON in, typed calls on the
//! consumer's handle out, and the conversions between the two. The queue
//! itself is the consumer's (`consumer::batch`).

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::{broadcast, mpsc};

use crate::consumer::batch::estimate::BatchEstimate;
use crate::consumer::batch::policy::UnknownPolicy;
use crate::consumer::batch::queue::DEFAULT_CHECKPOINT_COST_SECS;
use crate::consumer::batch::record::BatchImage;
use crate::consumer::batch::spec::{check_checkpoint, InputTemplate, Params, Sweep, TaskTemplate};
use crate::consumer::batch::verify::{CopyView, Provenance};
use crate::consumer::batch::{
    BatchView, CheckpointSpec, Counts, HoldView, NewBatch, PolicyName, TaskEvent, TaskRecord,
};
use crate::control::api::{
    ApiError, BatchCreated, BatchLine, BatchReport, BatchResultsCopied, BatchResultsRequest,
    BatchSubmitRequest, CopyReport, EstimateReport, HoldReport, TaskCounts, TaskEtaReport,
    TaskReport, VerificationReport, PREFIX,
};
use crate::control::state::{consumer_of, ApiJson, ControlHandles};
use crate::model::ids::BatchId;

/// The largest `batch submit` body: a params table of up to 100,000 rows.
const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

pub fn routes() -> Router<ControlHandles> {
    Router::new()
        .route(
            &format!("{PREFIX}/batches"),
            post(submit)
                .get(list)
                .layer(DefaultBodyLimit::max(MAX_BATCH_BYTES)),
        )
        .route(
            &format!("{PREFIX}/batches/{{id}}"),
            get(status).delete(remove),
        )
        .route(
            &format!("{PREFIX}/batches/estimate"),
            post(estimate).layer(DefaultBodyLimit::max(MAX_BATCH_BYTES)),
        )
        .route(&format!("{PREFIX}/batches/{{id}}/cancel"), post(cancel))
        .route(&format!("{PREFIX}/batches/{{id}}/wait"), post(wait))
        .route(&format!("{PREFIX}/batches/{{id}}/results"), post(results))
}

fn batch_id(text: &str) -> Result<BatchId, ApiError> {
    text.parse()
        .map_err(|e: crate::model::ids::InvalidBatchId| ApiError::bad_request(e.to_string()))
}

/// A batch's `--image`, checked whole on this node before anything is
/// queued (the reader a host uses; a refusal names the layer and the
/// entry; the image stays in this node's image cache), with the image's
/// `Entrypoint` and `Cmd` put into the command and its `Env` before the
/// task's own, as `run-local` does: what a host runs is then the command
/// line the batch shows. The image's words are taken literally (their
/// braces are no placeholders).
async fn with_image(
    h: &ControlHandles,
    mut r: BatchSubmitRequest,
) -> Result<(BatchSubmitRequest, Option<BatchImage>), ApiError> {
    let Some(path) = r.image.take() else {
        return Ok((r, None));
    };
    if !path.is_absolute() {
        return Err(ApiError::bad_request(format!(
            "{}: paths sent to the node must be absolute",
            path.display()
        )));
    }
    let img = super::images::unpack_image(h, path.clone()).await?;
    let literal = |s: &String| s.replace('{', "{{").replace('}', "}}");
    let mut argv: Vec<String> = img.config.entrypoint.iter().map(literal).collect();
    if r.argv.is_empty() {
        argv.extend(img.config.cmd.iter().map(literal));
    } else {
        argv.append(&mut r.argv);
    }
    r.argv = argv;
    let mut env: Vec<(String, String)> = img
        .config
        .env
        .iter()
        .map(|(k, v)| (k.clone(), literal(v)))
        .collect();
    env.append(&mut r.env);
    r.env = env;
    let image = BatchImage {
        local: path,
        id: img.id.to_bytes(),
    };
    Ok((r, Some(image)))
}

fn new_batch(r: BatchSubmitRequest, image: Option<BatchImage>) -> Result<NewBatch, ApiError> {
    let sweep = match (r.range, r.params) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "--range and --params cannot be used together",
            ))
        }
        (Some((start, end)), None) => Sweep::Range { start, end },
        (None, Some(p)) => Sweep::Params(Params {
            columns: p.columns,
            rows: p.rows,
        }),
        (None, None) => Sweep::One,
    };
    for path in r
        .inputs
        .iter()
        .map(|i| &i.local)
        .chain(r.output_dir.as_ref())
    {
        if !path.is_absolute() {
            return Err(ApiError::bad_request(format!(
                "{}: paths sent to the node must be absolute",
                path.display()
            )));
        }
    }
    let policy = match r.policy.as_deref() {
        None => PolicyName::default(),
        Some(name) => name
            .parse()
            .map_err(|e: UnknownPolicy| ApiError::bad_request(format!("policy: {e}")))?,
    };
    let checkpoint = match r.checkpoint {
        None => None,
        Some(path) => {
            check_checkpoint(&path).map_err(|e| ApiError::bad_request(e.to_string()))?;
            Some(CheckpointSpec {
                path,
                cost_secs: r
                    .checkpoint_cost_secs
                    .unwrap_or(DEFAULT_CHECKPOINT_COST_SECS),
            })
        }
    };
    let verify = r
        .verify
        .unwrap_or_default()
        .checked()
        .map_err(ApiError::bad_request)?;
    Ok(NewBatch {
        verify,
        image,
        name: r.name,
        policy,
        deadline_unix: r.deadline_unix,
        checkpoint,
        template: TaskTemplate {
            argv: r.argv,
            env: r.env,
            inputs: r
                .inputs
                .into_iter()
                .map(|i| InputTemplate {
                    local: i.local,
                    remote: i.remote,
                })
                .collect(),
            outputs: r.outputs,
        },
        sweep,
        mem_mib: r.mem_mib,
        runtime_secs: r.runtime_secs,
        limit_secs: r.limit_secs,
        max_running: r.max_running,
        output_dir: r.output_dir,
    })
}

fn counts(c: Counts) -> TaskCounts {
    TaskCounts {
        queued: c.queued,
        running: c.running,
        done: c.done,
        failed: c.failed,
        cancelled: c.cancelled,
    }
}

fn task_report(task: u32, t: &TaskRecord) -> TaskReport {
    TaskReport {
        task,
        state: t.state.label().to_string(),
        host: t.host.clone(),
        attempts: t.attempts,
        exit_status: t.exit_status,
        started_unix: t.started_unix,
        ended_unix: t.ended_unix,
        reason: t.reason.clone(),
        event: None,
        cpu_secs: t.cpu_secs,
        checkpoint_bytes: t.checkpoint.as_ref().map(|c| c.size),
        copies: Vec::new(),
        owner_kills: t.owner_kills,
        host_failures: t.host_failures(),
        waiting_for: None,
    }
}

fn event_report(e: &TaskEvent) -> TaskReport {
    TaskReport {
        task: e.task,
        state: e.state.label().to_string(),
        host: e.host.clone(),
        attempts: e.attempts,
        exit_status: e.exit_status,
        started_unix: None,
        ended_unix: e.state.is_final().then_some(e.at_unix),
        reason: e.reason.clone(),
        cpu_secs: None,
        checkpoint_bytes: None,
        event: e.event.clone(),
        copies: Vec::new(),
        owner_kills: 0,
        host_failures: 0,
        waiting_for: e.hold.as_ref().map(hold_report),
    }
}

fn hold_report(h: &HoldView) -> HoldReport {
    HoldReport {
        host: h.host.clone(),
        start_unix: h.start_unix,
        p: h.p,
    }
}

/// The report of a batch; with its tasks when `with_tasks`.
pub fn batch_report(v: &BatchView, with_tasks: bool) -> BatchReport {
    BatchReport {
        id: v.record.id,
        name: v.record.name.clone(),
        created_unix: v.record.created_unix,
        counts: counts(v.counts),
        tasks: if with_tasks {
            v.tasks
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut report = task_report(i as u32, t);
                    report.copies = v
                        .copies
                        .get(&(i as u32))
                        .map(|copies| copies.iter().map(live_copy_report).collect())
                        .unwrap_or_default();
                    report.waiting_for = v.holds.get(&(i as u32)).map(hold_report);
                    report
                })
                .collect()
        } else {
            Vec::new()
        },
        eta_unix: v.eta_unix,
        results_dir: v.results_dir.clone(),
        output_dir: v.record.output_dir.clone(),
        cancelled: v.record.cancelled,
        policy: v.record.policy.to_string(),
        deadline_unix: v.record.deadline_unix,
        verification: v
            .verify
            .as_ref()
            .map(|s| VerificationReport {
                mode: s.mode.to_string(),
                replicas: s.replicas,
                quorum: s.quorum,
                validator: s.validator.clone(),
            })
            .unwrap_or_default(),
        estimate: v
            .estimate
            .as_ref()
            .map(|e| estimate_report(e, v.record.deadline_unix)),
        contact: None,
        summary_cache: None,
    }
}

fn live_copy_report(c: &CopyView) -> CopyReport {
    CopyReport {
        host: c.host.clone(),
        state: c.state.to_string(),
        group: c.group,
        agrees: None,
        digest: None,
    }
}

/// Largest `provenance.json` `batch status` reads.
const PROVENANCE_MAX_BYTES: u64 = 1 << 20;

/// The copies of each decided task of a verifying batch, from the
/// `provenance.json` in its results (read here, off the consumer's loop);
/// a file missing, too large or unreadable leaves the task without copies.
async fn decided_copies(report: &mut BatchReport) {
    if report.verification.mode == "none" {
        return;
    }
    for t in &mut report.tasks {
        if !t.copies.is_empty() || !matches!(t.state.as_str(), "done" | "failed") {
            continue;
        }
        let path = report
            .results_dir
            .join(t.task.to_string())
            .join(crate::consumer::batch::verify::PROVENANCE_FILE);
        let Ok(meta) = tokio::fs::metadata(&path).await else {
            continue;
        };
        if meta.len() > PROVENANCE_MAX_BYTES {
            continue;
        }
        let Ok(bytes) = tokio::fs::read(&path).await else {
            continue;
        };
        let Ok(p) = serde_json::from_slice::<Provenance>(&bytes) else {
            continue;
        };
        let agreed = if p.agreed.is_empty() {
            vec![p.host.clone()]
        } else {
            p.agreed.clone()
        };
        t.copies = p
            .copies
            .iter()
            .map(|c| {
                let agrees = agreed.contains(&c.host);
                CopyReport {
                    host: c.host.clone(),
                    state: if c.host == p.host {
                        "accepted"
                    } else if agrees {
                        "agreed"
                    } else {
                        "disagreed"
                    }
                    .to_string(),
                    group: None,
                    agrees: Some(agrees),
                    digest: Some(c.digest.clone()),
                }
            })
            .collect();
    }
}

/// The estimate as the API reports it. A quantile past the runs that gave
/// up on a task is infinite, which JSON cannot carry (serde_json writes it
/// as `null`, and then no client could read the report back: `batch status`
/// failed while a task was held for a later window); it is `None`.
pub fn estimate_report(e: &BatchEstimate, deadline_unix: Option<i64>) -> EstimateReport {
    EstimateReport {
        at_unix: e.at_unix,
        makespan_p10_secs: finite(e.makespan.p10),
        makespan_p50_secs: finite(e.makespan.p50),
        makespan_p90_secs: finite(e.makespan.p90),
        makespan_mean_secs: finite(e.makespan.mean),
        p_deadline: e.p_deadline.and_then(finite),
        deadline_unix,
        hosts: e.hosts,
        runs: e.runs,
        unfinished_runs: e.unfinished_runs,
        tasks: e
            .tasks
            .iter()
            .map(|t| TaskEtaReport {
                task: t.task,
                end_p10_secs: finite(t.end.p10),
                end_p50_secs: finite(t.end.p50),
                end_p90_secs: finite(t.end.p90),
            })
            .collect(),
    }
}

/// `x` when it is a number JSON can carry.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// `POST /v1/batches/estimate`: the submit body, nothing queued or sent
/// but a survey of the pool.
async fn estimate(
    State(h): State<ControlHandles>,
    ApiJson(request): ApiJson<BatchSubmitRequest>,
) -> Response {
    let run = async {
        let consumer = consumer_of(&h)?;
        let (request, image) = with_image(&h, request).await?;
        let batch = new_batch(request, image)?;
        let deadline = batch.deadline_unix;
        let e = consumer.estimate_batch(batch).await?;
        Ok::<_, ApiError>(estimate_report(&e, deadline))
    };
    match run.await {
        Ok(report) => Json(report).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn submit(
    State(h): State<ControlHandles>,
    ApiJson(request): ApiJson<BatchSubmitRequest>,
) -> Response {
    let wait = request.wait;
    let run = async {
        let consumer = consumer_of(&h)?;
        let (request, image) = with_image(&h, request).await?;
        let batch = new_batch(request, image)?;
        let (id, events) = consumer.submit_batch(batch).await?;
        let view = consumer.batch(id).await?;
        Ok::<_, ApiError>((id, consumer, view, events))
    };
    match run.await {
        Ok((id, consumer, view, events)) if wait => {
            let first = BatchLine::Queued {
                batch: id,
                tasks: view.record.task_count,
            };
            stream(&h, id, consumer, view, events, Some(first))
        }
        Ok((id, _, view, _)) => Json(BatchCreated {
            id,
            tasks: view.record.task_count,
        })
        .into_response(),
        Err(e) => e.into_response(),
    }
}

async fn list(State(h): State<ControlHandles>) -> Response {
    let run = async {
        let consumer = consumer_of(&h)?;
        let views = consumer.batches().await?;
        Ok::<_, ApiError>(
            views
                .iter()
                .map(|v| batch_report(v, false))
                .collect::<Vec<_>>(),
        )
    };
    match run.await {
        Ok(list) => Json(list).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn status(State(h): State<ControlHandles>, Path(id): Path<String>) -> Response {
    let run = async {
        let id = batch_id(&id)?;
        let view = consumer_of(&h)?.batch_with_estimate(id).await?;
        let mut report = batch_report(&view, true);
        decided_copies(&mut report).await;
        // Said only while it explains something: no member reachable.
        report.contact = h
            .net
            .as_ref()
            .map(|n| n.reachability().contact)
            .filter(|c| c.alone_since.is_some());
        report.summary_cache = match &h.net {
            Some(net) => super::state::summary_cache(net).await.map(Box::new),
            None => None,
        };
        Ok::<_, ApiError>(report)
    };
    match run.await {
        Ok(report) => Json(report).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `DELETE /v1/batches/{id}`: forget an ended batch (409 while tasks wait
/// or run).
async fn remove(State(h): State<ControlHandles>, Path(id): Path<String>) -> Response {
    let run = async {
        let id = batch_id(&id)?;
        Ok::<_, ApiError>(consumer_of(&h)?.remove_batch(id).await?)
    };
    match run.await {
        Ok(c) => Json(counts(c)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn cancel(State(h): State<ControlHandles>, Path(id): Path<String>) -> Response {
    let run = async {
        let id = batch_id(&id)?;
        let counts = consumer_of(&h)?.cancel_batch(id).await?;
        Ok::<_, ApiError>(self::counts(counts))
    };
    match run.await {
        Ok(c) => Json(c).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn results(
    State(h): State<ControlHandles>,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<BatchResultsRequest>,
) -> Response {
    let run = async {
        let id = batch_id(&id)?;
        if !request.out.is_absolute() {
            return Err(ApiError::bad_request("--out must be an absolute path"));
        }
        let view = consumer_of(&h)?.batch(id).await?;
        let landed: Vec<u32> = view
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.exit_status.is_some())
            .map(|(i, _)| i as u32)
            .collect();
        let from = view.results_dir.clone();
        let out = request.out.clone();
        let copied = tokio::task::spawn_blocking(move || {
            for task in &landed {
                let name = task.to_string();
                crate::consumer::batch::queue::copy_task_results(
                    &from.join(&name),
                    &out.join(&name),
                )?;
            }
            Ok::<_, String>(landed.len() as u32)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("copying results: {e}")))?;
        Ok(BatchResultsCopied {
            tasks: copied,
            out: request.out,
        })
    };
    match run.await {
        Ok(c) => Json(c).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Streams the batch's task events as JSON lines until every task has ended,
/// then the batch itself.
async fn wait(State(h): State<ControlHandles>, Path(id): Path<String>) -> Response {
    let start = async {
        let id = batch_id(&id)?;
        let consumer = consumer_of(&h)?;
        let (view, events) = consumer.watch_batch(id).await?;
        Ok::<_, ApiError>((id, consumer, view, events))
    };
    match start.await {
        Ok((id, consumer, view, events)) => stream(&h, id, consumer, view, events, None),
        Err(e) => e.into_response(),
    }
}

/// Streams `first`, then the batch's task events as JSON lines until every
/// task has ended, then the batch itself.
fn stream(
    h: &ControlHandles,
    id: BatchId,
    consumer: crate::consumer::ConsumerHandle,
    view: BatchView,
    mut events: broadcast::Receiver<TaskEvent>,
    first: Option<BatchLine>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Result<String, Infallible>>(256);
    let shutdown = h.shutdown.clone();
    h.tracker.spawn(async move {
        let send = |line: BatchLine| {
            let tx = tx.clone();
            async move {
                let Ok(mut text) = serde_json::to_string(&line) else {
                    return true;
                };
                text.push('\n');
                tx.send(Ok(text)).await.is_ok()
            }
        };
        if let Some(line) = first {
            if !send(line).await {
                return;
            }
        }
        let mut states: Vec<_> = view.tasks.iter().map(|t| t.state).collect();
        let ended =
            |states: &[crate::consumer::batch::TaskState]| states.iter().all(|s| s.is_final());
        while !ended(&states) {
            let event = tokio::select! {
                e = events.recv() => e,
                _ = shutdown.cancelled() => return,
            };
            match event {
                Ok(e) if e.batch == id => {
                    if let Some(s) = states.get_mut(e.task as usize) {
                        *s = e.state;
                    }
                    if !send(BatchLine::Task {
                        batch: id,
                        task: event_report(&e),
                    })
                    .await
                    {
                        return;
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Missed some: take the states as they are now.
                    match consumer.batch(id).await {
                        Ok(v) => states = v.tasks.iter().map(|t| t.state).collect(),
                        Err(_) => return,
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
        // The last line waits for the results' copies to the batch's
        // output directory: whoever reads it may read the directory.
        if let Ok(v) = consumer.batch_copied(id).await {
            let _ = send(BatchLine::Batch(batch_report(&v, true))).await;
        }
    });
    (
        [(header::CONTENT_TYPE, "application/jsonl")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::batch::estimate::TaskEta;
    use crate::consumer::batch::{BatchRecord, TaskState};
    use crate::model::sched::estimate::Quantiles;

    /// A batch of one task, queued and held for a host's later window; its
    /// estimate, made from the hosts as they are now, has runs that never
    /// end it (the model gives those an infinite makespan).
    fn held_batch() -> BatchView {
        let record = BatchRecord {
            id: BatchId::new(3),
            name: None,
            created_unix: 1_700_000_000,
            command: vec!["sleep".into(), "1".into()],
            mem_mib: 64,
            runtime_secs: 9 * 3600,
            limit_secs: 18 * 3600,
            outputs: Vec::new(),
            output_dir: None,
            max_running: None,
            task_count: 1,
            cancelled: false,
            policy: PolicyName::default(),
            deadline_unix: None,
            checkpoint: None,
            image: None,
        };
        let tasks = vec![TaskRecord::queued(
            vec!["sleep".into()],
            Vec::new(),
            Vec::new(),
        )];
        let no_end = Quantiles {
            p10: 40_000.0,
            p50: f64::INFINITY,
            p90: f64::INFINITY,
            mean: f64::INFINITY,
        };
        BatchView {
            counts: Counts::of(&tasks),
            record,
            tasks,
            eta_unix: None,
            results_dir: "/r/3".into(),
            estimate: Some(BatchEstimate {
                at_unix: 1_700_000_100,
                makespan: no_end,
                p_deadline: None,
                hosts: 2,
                runs: 200,
                unfinished_runs: 150,
                tasks: vec![TaskEta {
                    task: 0,
                    end: no_end,
                }],
            }),
            verify: None,
            copies: Default::default(),
            holds: [(
                0,
                HoldView {
                    host: "12D3KooWHeldHostB".into(),
                    start_unix: 1_700_007_200,
                    p: 0.75,
                },
            )]
            .into(),
        }
    }

    #[test]
    fn a_status_while_a_task_is_held_reads_back_and_says_what_it_waits_for() {
        let view = held_batch();
        assert_eq!(view.tasks[0].state, TaskState::Queued);
        let report = batch_report(&view, true);
        let json = serde_json::to_string(&report).unwrap();
        // What `batch status --json` and the text status read: before, the
        // infinite quantiles went out as `null` where a number was due.
        let back: BatchReport = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("the status does not read back: {e}\n{json}"));
        assert_eq!(back, report);
        let e = back.estimate.as_ref().unwrap();
        assert_eq!(e.makespan_p10_secs, Some(40_000.0));
        assert_eq!(e.makespan_p50_secs, None);
        assert_eq!(e.makespan_p90_secs, None);
        assert_eq!(e.makespan_mean_secs, None);
        assert_eq!(e.unfinished_runs, 150);
        assert_eq!(e.tasks[0].end_p50_secs, None);
        assert_eq!(
            back.tasks[0].waiting_for,
            Some(HoldReport {
                host: "12D3KooWHeldHostB".into(),
                start_unix: 1_700_007_200,
                p: 0.75,
            })
        );
    }

    #[test]
    fn a_task_event_while_held_carries_the_window() {
        let hold = HoldView {
            host: "12D3KooWHeldHostB".into(),
            start_unix: 1_700_007_200,
            p: 0.75,
        };
        let event = TaskEvent {
            batch: BatchId::new(3),
            task: 0,
            state: TaskState::Queued,
            host: None,
            attempts: 0,
            exit_status: None,
            reason: None,
            event: Some("waiting for host B's window in 2h00 (P 0.75)".into()),
            at_unix: 1_700_000_000,
            hold: Some(hold.clone()),
        };
        let r = event_report(&event);
        assert_eq!(r.waiting_for, Some(hold_report(&hold)));
        let ended = TaskEvent {
            hold: None,
            event: Some("hold ended: its host left".into()),
            ..event
        };
        assert_eq!(event_report(&ended).waiting_for, None);
    }
}
