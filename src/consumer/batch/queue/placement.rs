//! Placement in the queue's core: which hosts a round need not ask, how
//! many tasks could start now (a round asks a few hosts per task, bounded:
//! the survey picks them from the members' summaries; when rounds happen is
//! `rounds`), and which
//! waiting task goes to which free host (batches in order of age, each by
//! its policy, hosts that hold its image first; a verified task's further
//! copies first; a task held for a later window only on its host once the
//! window is open, `later`; the hosts left over
//! to tail copies, `tail`), each attempt
//! recorded as it is handed over and given to the driver to launch. Pure:
//! no tokio, no files, no clock.

use std::time::Duration;

use libp2p::PeerId;

use super::state::{Action, Launch, QueueCore};
use crate::consumer::batch::attempt::AttemptPlan;
use crate::consumer::batch::policy::TaskNeeds;
use crate::consumer::batch::record::{TaskCopy, TaskRecord, TaskState};
use crate::consumer::batch::runtime::planned_runtime;
use crate::consumer::rank::{holders_first, holds_any};
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::{BatchId, JobId};

/// The work a free host could take now ([`QueueCore::open_work`]).
pub(super) enum OpenWork {
    /// Any free host would do: a task no host has been tried for, or a
    /// running task a deadline copy may follow on any host.
    Any,
    /// Only a host one of these may go to: `(batch, task, copy)`, a queued
    /// task (`false`) or a task wanting a further copy, a quorum's or a
    /// tail copy (`true`).
    Only(Vec<(BatchId, u32, bool)>),
}

impl QueueCore {
    /// Hosts the survey need not ask: those running our work, and those of
    /// the last survey (members listed from their summaries included) that
    /// no waiting task could go to (each avoids, was refused by or already
    /// has a copy on it). So a survey's few asks go to hosts that can help,
    /// and a retry or a further copy always reaches a host not yet tried
    /// while the pool has one. A batch watching a deadline may put a second
    /// copy on any free host: then only busy ones are skipped.
    pub(super) fn no_use_now(&self) -> Vec<PeerId> {
        let mut skip: Vec<PeerId> = self.hosts_in_use.iter().copied().collect();
        let open = self.open_work();
        if matches!(open, OpenWork::Any) {
            return skip;
        }
        skip.extend(
            self.last_hosts
                .iter()
                .map(|h| h.peer)
                .filter(|p| !self.hosts_in_use.contains(p) && !self.could_take(&open, *p)),
        );
        skip
    }

    /// The work a free host could take now.
    pub(super) fn open_work(&self) -> OpenWork {
        // Queued tasks of batches with room (`false`) and tasks wanting a
        // further copy, a quorum's or a tail copy (`true`). A task no host
        // was tried for, or a deadline's watch, takes any free host.
        let mut open: Vec<(BatchId, u32, bool)> = Vec::new();
        for (id, b) in &self.batches {
            if b.record.cancelled || b.room() == 0 {
                continue;
            }
            if b.record.deadline_unix.is_some()
                && b.tasks.iter().any(|t| t.state == TaskState::Running)
            {
                return OpenWork::Any;
            }
            for (i, t) in b.tasks.iter().enumerate() {
                // A tail copy (`tail`) goes only where a further copy of
                // its task may: a running task that may get one is no
                // reason to ask hosts that could run nothing (they would
                // take the asks a copy a quorum wants needs).
                if self.tail_copies && self.may_get_tail_copy(*id, i as u32, t.state) {
                    open.push((*id, i as u32, true));
                }
                if t.state == TaskState::Queued {
                    if self.avoids_none(*id, i as u32, t)
                        && !self.refused_by.contains_key(&(*id, i as u32))
                    {
                        return OpenWork::Any;
                    }
                    open.push((*id, i as u32, false));
                }
            }
        }
        open.extend(
            self.trust
                .judging
                .keys()
                .filter(|(b, t)| self.wants_copy(*b, *t))
                .map(|(b, t)| (*b, *t, true)),
        );
        OpenWork::Only(open)
    }

    /// Whether some of `open` may go to `peer`.
    pub(super) fn could_take(&self, open: &OpenWork, peer: PeerId) -> bool {
        match open {
            OpenWork::Any => true,
            OpenWork::Only(open) => open.iter().any(|&(batch, task, copy)| {
                if copy {
                    self.may_copy_on(batch, task, peer)
                } else {
                    self.may_start_on(batch, task, peer)
                }
            }),
        }
    }

    /// Tasks that could start now: each batch's queued tasks within its
    /// `max_running`, and one for each running task that may want a further
    /// copy (a deadline's, a verified task's or a tail copy).
    pub(super) fn placeable_now(&self) -> usize {
        self.batches
            .iter()
            .filter(|(_, b)| !b.record.cancelled)
            .map(|(id, b)| {
                let queued = b.count_in(TaskState::Queued);
                let room = b.room();
                let copies = if b.record.deadline_unix.is_some()
                    || self.trust.spec(*id).is_some()
                    || self.tail_copies
                {
                    b.count_in(TaskState::Running)
                } else {
                    0
                };
                queued.min(room).saturating_add(copies)
            })
            .fold(0usize, usize::saturating_add)
    }

    /// Hands waiting tasks to the free hosts among `hosts`: batches in
    /// order of age, each taking the hosts its policy puts first.
    pub(super) fn place_on(&mut self, hosts: &[SurveyedHost]) {
        // Each host's claims as its record discounts them; the claim it
        // is held to (`launch`) stays the one it made.
        let mut free: Vec<SurveyedHost> = hosts
            .iter()
            .filter(|h| !self.hosts_in_use.contains(&h.peer))
            .map(|h| self.trust.discounted(h))
            .collect();
        // A task on its batch's critical path gets a copy first (`tail`).
        self.start_critical_copies(hosts, &mut free);
        // Tasks no free host is likely to finish may be held for a later
        // window (`later`).
        self.weigh_holds(&free);
        let waiting: Vec<BatchId> = self
            .batches
            .iter()
            .filter(|(id, b)| {
                !b.record.cancelled
                    && (b.tasks.iter().any(|t| t.state == TaskState::Queued)
                        || self.trust.spec(**id).is_some())
            })
            .map(|(id, _)| *id)
            .collect();
        for batch in waiting {
            if free.is_empty() {
                break;
            }
            let Some(live) = self.batches.get(&batch) else {
                continue;
            };
            let needs = TaskNeeds {
                runtime_secs: planned_runtime(live.record.runtime_secs, &live.tasks).median,
                window_secs: live.record.runtime_secs,
            };
            let ordered = live.record.policy.order(&free, needs, &mut self.rng);
            // A host that holds the batch's image starts a task without
            // reading it: first, in the policy's order (the one locality
            // rule, also `rank::by_summary`'s). Reputation orders after it.
            let ordered = match live.record.image.as_ref().map(|i| i.id) {
                Some(id) => holders_first(ordered, |h| holds_any(h, &[id])),
                None => ordered,
            };
            let ordered: Vec<(PeerId, Option<f64>)> =
                ordered.into_iter().map(|h| (h.peer, h.power)).collect();
            let ordered = self.trust.order(batch, ordered);
            let verifying = self.trust.spec(batch).is_some();
            // Hosts in an unsettled dispute over a verified task take only
            // further copies (tie-breaks), no new task, until it settles.
            let disputed = self.trust.disputed(batch);
            for (peer, gamma) in ordered {
                // A verified task's further copies go before new tasks.
                if let Some(task) = verifying.then(|| self.copy_task_for(batch, peer)).flatten() {
                    self.start_replica(batch, task, peer);
                } else if disputed.contains(&peer.to_base58()) {
                    continue;
                } else if let Some(task) = self.next_task_of(batch, peer) {
                    self.start(batch, task, peer, gamma);
                    if verifying {
                        self.plan_copies(batch, task, peer);
                    }
                } else {
                    continue;
                }
                free.retain(|h| h.peer != peer);
            }
        }
        self.deferred.clear();
        self.start_tail_copies(hosts);
    }

    /// The first waiting task of `batch` that may run on `host`.
    pub(super) fn next_task_of(&self, batch: BatchId, host: PeerId) -> Option<u32> {
        let b = self.batches.get(&batch)?;
        if b.record.cancelled || b.room() == 0 {
            return None;
        }
        // A task whose held window on this host is open goes first.
        if let Some(task) = self.opened_on(batch, host) {
            return Some(task);
        }
        let name = host.to_base58();
        b.tasks
            .iter()
            .enumerate()
            .position(|(i, t)| self.startable(batch, i as u32, t, host, &name))
            .map(|i| i as u32)
    }

    /// Whether a queued task may start on `host`: it does not avoid it
    /// (failed or was killed there less than [`super::AVOID_FOR`] ago: `avoid`),
    /// was not refused by it, and is not held off it (`later`).
    pub(super) fn may_start_on(&self, batch: BatchId, task: u32, host: PeerId) -> bool {
        self.task(batch, task)
            .is_some_and(|t| self.startable(batch, task, t, host, &host.to_base58()))
    }

    /// [`may_start_on`](Self::may_start_on) with the task and the host's
    /// name at hand.
    fn startable(
        &self,
        batch: BatchId,
        task: u32,
        t: &TaskRecord,
        host: PeerId,
        name: &str,
    ) -> bool {
        t.state == TaskState::Queued
            && !self.avoids(batch, task, t, name)
            && !self
                .refused_by
                .get(&(batch, task))
                .is_some_and(|r| r.contains(&host))
            && !self.held_off(batch, task, host)
    }

    /// Hands a waiting task to `host`: its main attempt.
    pub(super) fn start(&mut self, batch: BatchId, task: u32, host: PeerId, gamma: Option<f64>) {
        let now = self.now.unix_secs;
        let Some(live) = self.batches.get_mut(&batch) else {
            return;
        };
        let Some(t) = live.tasks.get_mut(task as usize) else {
            return;
        };
        let job_id = batch.job_id(task, t.attempts);
        t.attempts += 1;
        t.state = TaskState::Running;
        t.host = Some(host.to_base58());
        t.job_id = Some(job_id.clone());
        t.started_unix = Some(now);
        t.host_gamma = gamma;
        live.running += 1;
        self.holds.remove(&(batch, task));
        // Started: a later return to the queue holds it afresh, as the
        // simulator's `windows` does.
        self.held_since.remove(&(batch, task));
        self.persist(batch, task);
        self.launch(batch, task, host, job_id);
    }

    /// Records one more attempt of a task on `host`, not yet started: its
    /// main attempt when it has none, else a further copy. Returns the
    /// attempt's job id.
    pub(super) fn add_attempt(&mut self, batch: BatchId, task: u32, host: PeerId) -> Option<JobId> {
        let now = self.now.unix_secs;
        let live = self.batches.get_mut(&batch)?;
        let t = live.tasks.get_mut(task as usize)?;
        let job_id = batch.job_id(task, t.attempts);
        t.attempts += 1;
        if t.host.is_none() {
            t.host = Some(host.to_base58());
            t.job_id = Some(job_id.clone());
            t.started_unix.get_or_insert(now);
        } else {
            t.copies.push(TaskCopy {
                host: host.to_base58(),
                job_id: job_id.clone(),
                started_unix: now,
            });
        }
        live.running += 1;
        Some(job_id)
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
        let landing = self.landing_dir(batch, &job_id);
        Some(AttemptPlan {
            host,
            job_id,
            outputs: live.record.outputs.clone(),
            provenance_task: copy_dir.is_none().then_some(task),
            // Its own staging, moved into the task's results only if it
            // wins (`retries`): a copy landing late never touches them.
            result_dir: copy_dir.unwrap_or(landing),
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

    /// Counts an attempt in flight: its host in use and, for a task taken
    /// as it comes (a verified copy lands in its own copy directory), its
    /// staging directory.
    pub(super) fn track(&mut self, batch: BatchId, task: u32, plan: &AttemptPlan) {
        let host = plan.host;
        self.running.insert((batch, task, host));
        self.hosts_in_use.insert(host);
        if self.trust.spec(batch).is_none() {
            self.staging
                .insert((batch, task, host), plan.result_dir.clone());
        }
    }

    /// Hands one attempt (the main one or a copy) of a task to the driver
    /// to run.
    pub(super) fn launch(&mut self, batch: BatchId, task: u32, host: PeerId, job_id: JobId) {
        let Some(live) = self.batches.get(&batch) else {
            return;
        };
        let record = live.record.clone();
        let Some(t) = live.tasks.get(task as usize) else {
            return;
        };
        let parts = (t.argv.clone(), t.env.clone(), t.inputs.clone());
        // A checkpointing task gets its order, and its latest checkpoint as
        // an input at the checkpoint path, so it resumes wherever it runs
        // (a deadline's second copy too).
        let (order, resume) = self.checkpoint_order(batch, task, &record, host);
        let Some(plan) = self.plan(batch, task, host, job_id) else {
            return;
        };
        self.track(batch, task, &plan);
        if let Some(tr) = self
            .last_hosts
            .iter()
            .find(|h| h.peer == host)
            .and_then(|h| h.tr)
        {
            self.claimed_tr.insert((batch, task, host), tr);
        }
        self.push(Action::Launch(Box::new(Launch {
            batch,
            task,
            plan,
            record,
            parts,
            order,
            resume,
        })));
    }
}
