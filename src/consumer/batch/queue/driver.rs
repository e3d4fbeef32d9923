//! The queue's effects: what tasks report back ([`QueueMsg`]), and the
//! attempts it runs as tracked tasks (a new one, or one re-attached after a
//! restart), with the job each hands to its host.

use std::path::PathBuf;
use std::time::Duration;

use libp2p::PeerId;
use tokio::sync::mpsc;

use super::{BatchQueue, QueueMsg};
use crate::clock::Clock;
use crate::consumer::batch::attempt::{self, AttemptEnd, AttemptNews, AttemptPlan};
use crate::consumer::batch::checkpoint::{self, CheckpointNews};
use crate::consumer::batch::record::{BatchRecord, TaskState};
use crate::consumer::pool::JobPool;
use crate::data::{InputSpec, Offer};
use crate::model::ids::{BatchId, JobId};
use crate::net::protocol::{JobEventKind, JobSubmit};

impl<P: JobPool + Clone + 'static> BatchQueue<P> {
    /// Handles what a task reported.
    pub fn on_msg(&mut self, msg: QueueMsg) {
        match msg {
            QueueMsg::Surveyed(Ok(hosts)) => {
                self.surveying = false;
                self.place(hosts);
            }
            QueueMsg::Surveyed(Err(e)) => {
                self.surveying = false;
                tracing::debug!(error = %e, "batch queue: survey failed");
            }
            QueueMsg::Accepted { batch, task } => {
                self.emit(batch, task, None);
            }
            QueueMsg::HostEvent { batch, task, text } => {
                self.emit(batch, task, Some(text));
            }
            QueueMsg::Checkpoint { batch, task, news } => {
                let now = self.clock.unix_secs();
                let Some(t) = self
                    .batches
                    .get_mut(&batch)
                    .and_then(|b| b.tasks.get_mut(task as usize))
                else {
                    return;
                };
                let text = self.checkpoints.record(batch, t, news, now);
                if let Err(e) =
                    self.store
                        .put_task(batch, task, &self.batches[&batch].tasks[task as usize])
                {
                    tracing::error!(%batch, task, error = %e, "cannot record a task's checkpoint");
                }
                if let Some(text) = text {
                    self.emit(batch, task, Some(text));
                }
            }
            QueueMsg::Ended {
                batch,
                task,
                host,
                end,
            } => self.ended(batch, task, host, end),
            QueueMsg::Verdict {
                batch,
                task,
                verdict,
            } => self.on_verdict(batch, task, verdict),
            QueueMsg::Copied { batch, task, error } => self.copied(batch, task, error),
        }
    }

    pub(super) fn plan(
        &self,
        batch: BatchId,
        task: u32,
        host: PeerId,
        job_id: JobId,
    ) -> Option<AttemptPlan> {
        let live = self.batches.get(&batch)?;
        let copy_dir = self.copy_result_dir(batch, task, host);
        Some(AttemptPlan {
            host,
            job_id,
            outputs: live.record.outputs.clone(),
            provenance_task: copy_dir.is_none().then_some(task),
            result_dir: copy_dir.unwrap_or_else(|| self.results_dir(batch).join(task.to_string())),
            limit: Duration::from_secs(live.record.limit_secs),
            settings: self.settings,
            checkpoint_dest: live.record.checkpoint.as_ref().map(|_| {
                crate::consumer::batch::checkpoint::checkpoint_file(
                    &self.dir.join(batch.to_string()),
                    task,
                )
            }),
        })
    }

    /// Runs one attempt (the main one or a copy) of a task as a tracked task.
    pub(super) fn launch(&mut self, batch: BatchId, task: u32, host: PeerId, job_id: JobId) {
        let Some(live) = self.batches.get(&batch) else {
            return;
        };
        let record = live.record.clone();
        let Some(t) = live.tasks.get(task as usize) else {
            return;
        };
        let mut submit_parts = (t.argv.clone(), t.env.clone(), t.inputs.clone());
        // A checkpointing task gets its order, and its latest checkpoint as
        // an input at the checkpoint path, so it resumes wherever it runs
        // (a deadline's second copy too).
        let batch_dir = self.dir.join(batch.to_string());
        let order = self.checkpoints.order(batch, &record, host);
        if let Some(resume) = checkpoint::resume_input(task, t, &record, &batch_dir) {
            if resume.0.is_file() {
                checkpoint::with_resume(&mut submit_parts.2, resume);
            }
        }
        let Some(plan) = self.plan(batch, task, host, job_id) else {
            return;
        };
        let cancel = self.shutdown.child_token();
        self.running.insert((batch, task, host), cancel.clone());
        self.hosts_in_use.insert(host);
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
                Ok(Ok(())) => match job_submit(&pool, &plan, &record, submit_parts, order).await {
                    Ok((submit, offer)) => {
                        let end = attempt::run(
                            &pool,
                            &inbox,
                            &plan,
                            submit,
                            &cancel,
                            news_to(tx.clone(), batch, task),
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

    /// After a restart: asks the hosts of a task that was running (its main
    /// attempt and any copies) how it stands.
    pub(super) fn reattach(&mut self, batch: BatchId, task: u32) {
        let Some(t) = self.task(batch, task) else {
            return;
        };
        let main = t
            .host
            .as_deref()
            .and_then(|h| h.parse::<PeerId>().ok())
            .zip(t.job_id.clone());
        let copies: Vec<(PeerId, JobId)> = t
            .copies
            .iter()
            .filter_map(|c| Some((c.host.parse::<PeerId>().ok()?, c.job_id.clone())))
            .collect();
        let Some(main) = main else {
            // Nothing to ask: run it again.
            if let Some(t) = self
                .batches
                .get_mut(&batch)
                .and_then(|b| b.tasks.get_mut(task as usize))
            {
                t.state = TaskState::Queued;
                t.copies.clear();
            }
            self.persist(batch, task);
            return;
        };
        for (host, job_id) in std::iter::once(main).chain(copies) {
            let Some(plan) = self.plan(batch, task, host, job_id) else {
                continue;
            };
            tracing::info!(%batch, task, %host, "re-attaching to a task that was running");
            if let Some(b) = self.batches.get_mut(&batch) {
                b.running += 1;
            }
            let cancel = self.shutdown.child_token();
            self.running.insert((batch, task, host), cancel.clone());
            self.hosts_in_use.insert(host);
            let (pool, inbox, tx) = (self.pool.clone(), self.inbox.clone(), self.to_self.clone());
            self.tracker.spawn(async move {
                let news = news_to(tx.clone(), batch, task);
                let end = attempt::reattach(&pool, &inbox, &plan, &cancel, news).await;
                let _ = tx.send(QueueMsg::Ended {
                    batch,
                    task,
                    host,
                    end,
                });
            });
        }
    }
}

/// Where an attempt's news goes: the queue's own channel, as messages for
/// the actor.
pub(super) fn news_to(
    tx: mpsc::UnboundedSender<QueueMsg>,
    batch: BatchId,
    task: u32,
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
        });
    }
}

/// The checkpoint or usage news in an attempt's news, if any.
pub(super) fn checkpoint_news(news: &AttemptNews) -> Option<CheckpointNews> {
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

/// A task's command line, environment and inputs (local file, remote path).
pub(super) type TaskParts = (Vec<String>, Vec<(String, String)>, Vec<(PathBuf, String)>);

/// The job a task's attempt hands to its host, and the offer of its inputs
/// by hash (kept for the attempt; the host reads what it lacks over
/// `/gleaner/data/1`). A file shared by every task is hashed once.
pub(super) async fn job_submit<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    record: &BatchRecord,
    (argv, env, inputs): TaskParts,
    checkpoint: Option<crate::net::protocol::CheckpointOrder>,
) -> Result<(JobSubmit, Offer), String> {
    let specs: Vec<InputSpec> = inputs
        .into_iter()
        .map(|(local, path)| InputSpec { path, local })
        .collect();
    let offer = pool.offer(&specs).await?;
    offer.allow(plan.host);
    let submit = JobSubmit {
        job_id: plan.job_id.to_string(),
        argv,
        env,
        inputs: offer.refs().to_vec(),
        outputs: record.outputs.clone(),
        memory_mib: record.mem_mib,
        expected_runtime_secs: record.runtime_secs,
        wall_time_limit_secs: record.limit_secs,
        checkpoint,
    };
    Ok((submit, offer))
}
