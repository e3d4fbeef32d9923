//! The tasks the batch queue's driver spawns to perform the core's actions:
//! surveys, hosts' answers about later windows, attempts (new or re-attached), judgments of landed copies,
//! promotions of accepted ones, copies to output directories and estimates.
//! Each is tracked and reports back on the queue's own channel as a
//! [`QueueMsg`] (or answers its caller's `reply`); none decides anything.

use std::path::PathBuf;

use rand::SeedableRng;
use tokio::sync::{mpsc, oneshot};

use super::driver::BatchQueue;
use super::files;
use super::image_offer::{image_parts, image_specs, job_image};
use super::state::Launch;
use super::state::TaskParts;
use super::trust::{Judge, Verdict};
use super::types::{BatchError, BatchView, NewBatch, QueueMsg};
use crate::consumer::batch::attempt::{self, AttemptEnd, AttemptNews, AttemptPlan, JobImage};
use crate::consumer::batch::checkpoint::{self, CheckpointNews};
use crate::consumer::batch::estimate::{estimate_batch, BatchEstimate, BatchShape};
use crate::consumer::batch::record::BatchRecord;
use crate::consumer::batch::runtime::planned_runtime;
use crate::consumer::batch::verify::{self, LandedCopy, Provenance};
use crate::consumer::job_pool::JobPool;
use crate::consumer::survey::{SurveyQuery, SurveyedHost};
use crate::data::{InputSpec, Offer};
use crate::model::ids::BatchId;
use crate::net::protocol::{
    CheckpointOrder, JobEventKind, JobSubmit, ReliabilityQuery, ReliabilityResponse,
};
use crate::net::NetError;

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    pub(super) fn spawn_survey(&mut self, query: SurveyQuery, skip: Vec<libp2p::PeerId>) {
        let pool = self.pool.clone();
        let tx = self.to_self.clone();
        self.tracker.spawn(async move {
            let hosts = pool.survey(query, skip).await.map_err(|e| e.to_string());
            let _ = tx.send(QueueMsg::Surveyed(hosts));
        });
    }

    /// Asks each of `peers` its TR for windows of `length_secs` starting at
    /// each of `starts_unix` (one host after another in parallel, its starts
    /// in turn; a host that times out or cannot be dialled is asked no
    /// more), and reports what came back as [`QueueMsg::Later`].
    pub(super) fn spawn_ask_later(
        &mut self,
        peers: Vec<libp2p::PeerId>,
        starts_unix: Vec<i64>,
        length_secs: u64,
        mem_mib: u64,
    ) {
        let pool = self.pool.clone();
        let tx = self.to_self.clone();
        let shutdown = self.shutdown.clone();
        self.tracker.spawn(async move {
            let asks = peers.into_iter().map(|peer| {
                let (pool, starts) = (pool.clone(), starts_unix.clone());
                async move {
                    let mut points = Vec::with_capacity(starts.len());
                    for start in starts {
                        let query = ReliabilityQuery {
                            window_start_unix: start,
                            length_secs,
                            memory_mib: mem_mib,
                        };
                        match pool.reliability(peer, query).await {
                            Ok(ReliabilityResponse::Answer(a))
                                if a.tr.is_finite() && (0.0..=1.0).contains(&a.tr) =>
                            {
                                points.push((start, a.tr));
                            }
                            Ok(_) => {}
                            Err(NetError::Timeout | NetError::Dial(_)) => break,
                            Err(_) => {}
                        }
                    }
                    (peer, points)
                }
            });
            tokio::select! {
                answers = futures::future::join_all(asks) => {
                    let _ = tx.send(QueueMsg::Later { length_secs, answers });
                }
                () = shutdown.cancelled() => {}
            }
        });
    }

    /// Runs one attempt (the main one or a copy) of a task as a tracked task.
    pub(super) fn spawn_attempt(&mut self, launch: Launch) {
        let Launch {
            batch,
            task,
            plan,
            record,
            mut parts,
            order,
            resume,
        } = launch;
        if let Some(resume) = resume {
            // The task resumes from its latest checkpoint, when it is here.
            if resume.0.is_file() {
                checkpoint::with_resume(&mut parts.2, resume);
            }
        }
        let host = plan.host;
        let cancel = self.shutdown.child_token();
        self.attempts.insert((batch, task, host), cancel.clone());
        let (pool, inbox, store, tx) = (
            self.pool.clone(),
            self.inbox.clone(),
            self.store.clone(),
            self.to_self.clone(),
        );
        self.tracker.spawn(async move {
            // The hand-over is durable before the host hears of it: a restart
            // then asks the host instead of running the task twice.
            let flushed = tokio::task::spawn_blocking(move || store.flush()).await;
            let end = match flushed {
                Ok(Ok(())) => match job_submit(&pool, &plan, &record, parts, order).await {
                    Ok((submit, image, offer)) => {
                        let end = attempt::run(
                            &pool,
                            &inbox,
                            &plan,
                            (submit, image),
                            &cancel,
                            news_to(tx.clone(), batch, task, host),
                        )
                        .await;
                        drop(offer);
                        end
                    }
                    Err(e) => AttemptEnd::JobFailed(e),
                },
                _ => AttemptEnd::Refused {
                    reason: "cannot write the batch store".into(),
                    lasting: false,
                },
            };
            let _ = tx.send(QueueMsg::Ended {
                batch,
                task,
                host,
                end,
            });
        });
    }

    /// After a restart: asks the host of an attempt how it stands, and
    /// follows it.
    pub(super) fn spawn_reattach(&mut self, batch: BatchId, task: u32, plan: AttemptPlan) {
        let host = plan.host;
        let cancel = self.shutdown.child_token();
        self.attempts.insert((batch, task, host), cancel.clone());
        let (pool, inbox, tx) = (self.pool.clone(), self.inbox.clone(), self.to_self.clone());
        self.tracker.spawn(async move {
            let news = news_to(tx.clone(), batch, task, host);
            let end = attempt::reattach(&pool, &inbox, &plan, &cancel, news).await;
            let _ = tx.send(QueueMsg::Ended {
                batch,
                task,
                host,
                end,
            });
        });
    }

    /// Digests a landed copy on the blocking pool and finds the earlier
    /// copies it agrees with.
    pub(super) fn spawn_judge(&mut self, judge: Judge) {
        let Judge {
            batch,
            task,
            landing,
            earlier,
            outputs,
            validator,
        } = judge;
        let tx = self.to_self.clone();
        self.tracker.spawn_blocking(move || {
            let judged = verify::digest(&landing.dir, &outputs)
                .map_err(|e| format!("cannot read the copy of {}: {e}", landing.host))
                .map(|digest| LandedCopy {
                    host: landing.host,
                    dir: landing.dir,
                    digest,
                    exit_status: landing.exit_status,
                    missing: landing.missing,
                    wall_secs: landing.wall_secs,
                });
            let agrees_with = match &judged {
                Ok(copy) => verify::agreeing(copy, &earlier, validator.as_deref()),
                Err(_) => Vec::new(),
            };
            let _ = tx.send(QueueMsg::Verdict {
                batch,
                task,
                verdict: Verdict::Judged {
                    copy: judged,
                    agrees_with,
                },
            });
        });
    }

    /// Renames an accepted copy into the task's results with its provenance.
    pub(super) fn spawn_promote(
        &mut self,
        batch: BatchId,
        task: u32,
        from: PathBuf,
        to: PathBuf,
        provenance: Provenance,
    ) {
        let tx = self.to_self.clone();
        self.tracker.spawn_blocking(move || {
            let result = files::promote(&from, &to, &provenance);
            let _ = tx.send(QueueMsg::Verdict {
                batch,
                task,
                verdict: Verdict::Promoted(result),
            });
        });
    }

    /// Copies a landed task's results to the batch's output directory.
    pub(super) fn spawn_copy_out(&mut self, batch: BatchId, task: u32, from: PathBuf, to: PathBuf) {
        let tx = self.to_self.clone();
        self.tracker.spawn_blocking(move || {
            let error = files::copy_task_results(&from, &to).err();
            let _ = tx.send(QueueMsg::Copied { batch, task, error });
        });
    }

    /// Surveys the pool for a batch not yet queued and estimates its end.
    pub(super) fn spawn_estimate_new(
        &mut self,
        new: &NewBatch,
        tasks: usize,
        now: i64,
        reply: oneshot::Sender<Result<BatchEstimate, BatchError>>,
    ) {
        let runtime = new.runtime_secs.max(1);
        let prior = planned_runtime(runtime, &[]);
        let shape = BatchShape {
            // The prior's mean: the estimate draws runtimes around it.
            runtime_secs: prior.mean,
            window_secs: runtime,
            running: Vec::new(),
            waiting: (0..tasks as u32).collect(),
            deadline_in: new.deadline_unix.map(|d| (d - now) as f64),
            checkpoint_cost_secs: new.checkpoint.as_ref().map(|c| c.cost_secs as f64),
            runtime_sigma_log: Some(prior.spread),
            holds: Vec::new(),
        };
        let query = SurveyQuery {
            window_start_unix: now,
            window_secs: runtime,
            mem_mib: new.mem_mib,
            rounds: 1,
            // A few hosts per task, the best by their summaries: an
            // estimate costs what placing the batch would, not the pool.
            ask_at_most: Some(crate::consumer::rank::asks_for(tasks)),
            images: new.image.iter().map(|i| i.id).collect(),
            sample_hosts: Some(
                u32::try_from(crate::consumer::rank::sample_hosts(tasks)).unwrap_or(u32::MAX),
            ),
        };
        let pool = self.pool.clone();
        self.tracker.spawn(async move {
            let result = match pool.survey(query, Vec::new()).await {
                Err(e) => Err(BatchError::Estimate(format!("cannot survey the pool: {e}"))),
                Ok(hosts) => run_estimate(hosts, shape, now).await,
            };
            let _ = reply.send(result);
        });
    }

    /// Estimates a running batch's end from the hosts as last heard.
    pub(super) fn spawn_estimate(
        &self,
        mut view: BatchView,
        hosts: Vec<SurveyedHost>,
        shape: BatchShape,
        now: i64,
        reply: oneshot::Sender<Result<BatchView, BatchError>>,
    ) {
        self.tracker.spawn(async move {
            view.estimate = run_estimate(hosts, shape, now).await.ok();
            let _ = reply.send(Ok(view));
        });
    }
}

/// Where an attempt's news goes: the queue's own channel, as messages for
/// the actor.
fn news_to(
    tx: mpsc::UnboundedSender<QueueMsg>,
    batch: BatchId,
    task: u32,
    host: libp2p::PeerId,
) -> impl Fn(AttemptNews) + Send + Sync {
    move |news| {
        if let Some(news) = checkpoint_news(&news) {
            let _ = tx.send(QueueMsg::Checkpoint { batch, task, news });
        }
        let _ = tx.send(match news {
            AttemptNews::Accepted => QueueMsg::Accepted { batch, task },
            AttemptNews::HostEvent(kind) => QueueMsg::HostEvent {
                batch,
                task,
                text: attempt::event_text(&kind),
            },
            AttemptNews::Checkpoint { .. } => return,
            AttemptNews::Flooded { dropped } => QueueMsg::Flooded {
                batch,
                task,
                host,
                dropped,
            },
        });
    }
}

/// The checkpoint or usage news in an attempt's news, if any.
fn checkpoint_news(news: &AttemptNews) -> Option<CheckpointNews> {
    match news {
        AttemptNews::Checkpoint {
            size,
            hash,
            fetch_secs,
        } => Some(CheckpointNews::Saved {
            size: *size,
            hash: *hash,
            fetch_secs: *fetch_secs,
        }),
        AttemptNews::HostEvent(
            JobEventKind::Finished { usage: Some(u), .. }
            | JobEventKind::Killed { usage: Some(u), .. },
        ) => Some(CheckpointNews::Used {
            cpu_secs: u.cpu_millis as f64 / 1000.0,
        }),
        _ => None,
    }
}

/// The job a task's attempt hands to its host, its image (its config and
/// layers offered like inputs, or a root-filesystem tar whole), and the
/// offer of its inputs by hash (kept for the attempt; the host reads what
/// it lacks over `/gleaner/data/1`). A file shared by every task, and each
/// part of the image, is hashed once.
async fn job_submit<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    record: &BatchRecord,
    (argv, env, inputs): TaskParts,
    checkpoint: Option<CheckpointOrder>,
) -> Result<(JobSubmit, Option<JobImage>, Offer), String> {
    let mut specs: Vec<InputSpec> = inputs
        .into_iter()
        .map(|(local, path)| InputSpec {
            path,
            local,
            part: None,
        })
        .collect();
    let own = specs.len();
    let mut layered = false;
    if let Some(image) = &record.image {
        let parts = image_parts(image).await?;
        layered = parts.is_some();
        specs.extend(image_specs(image, parts.as_ref()));
    }
    let offer = pool.offer(&specs).await?;
    offer.allow(plan.host);
    let mut refs = offer.refs().to_vec();
    // The image's parts were offered after the task's own inputs.
    let image_refs = refs.split_off(own.min(refs.len()));
    let image = match &record.image {
        None => None,
        Some(image) => Some(job_image(image, layered, image_refs)?),
    };
    let submit = JobSubmit {
        job_id: plan.job_id.to_string(),
        argv,
        env,
        inputs: refs,
        outputs: record.outputs.clone(),
        memory_mib: record.mem_mib,
        expected_runtime_secs: record.runtime_secs,
        wall_time_limit_secs: record.limit_secs,
        checkpoint,
    };
    Ok((submit, image, offer))
}

/// Runs [`estimate_batch`] on the blocking pool.
async fn run_estimate(
    hosts: Vec<SurveyedHost>,
    shape: BatchShape,
    now: i64,
) -> Result<BatchEstimate, BatchError> {
    tokio::task::spawn_blocking(move || {
        let mut rng = rand_chacha::ChaCha8Rng::from_os_rng();
        estimate_batch(&hosts, &shape, now, &mut rng)
            .map_err(|e| BatchError::Estimate(e.to_string()))
    })
    .await
    .unwrap_or_else(|e| Err(BatchError::Estimate(e.to_string())))
}
