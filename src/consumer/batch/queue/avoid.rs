//! How long a task avoids the hosts it failed on or was killed on (issue 28,
//! liveness). An attempt that ends badly puts its host in the task's
//! `avoid` list, so the retry goes elsewhere. Kept for ever, that list could
//! hold every host of the pool: on a desktop pool each owner in turn takes
//! the machine back from a long task, and since owner kills spend no retry
//! the task then neither ran nor failed — it waited for ever (`batch wait`
//! never ended). So each entry is bounded in time: a task avoids a host for
//! [`AVOID_FOR`] after the attempt there ended; after that the host may
//! take it again, ranked by the batch's policy like any other (an
//! owner who took the machine back at 10:00 is often gone by the evening).
//! The task's own failures still count against `max_retries`, so a host
//! that fails it again spends a retry and the task still ends, failed, past
//! the limit. Hosts that refused it for good (`refused_by`) and hosts
//! tainted by an invalid result are not lifted. Pure: the time comes with
//! each input.

use std::time::Duration;

use super::state::QueueCore;
use crate::consumer::batch::record::{TaskRecord, TaskState};
use crate::model::ids::BatchId;

/// How long a task avoids a host of its `avoid` list after the attempt
/// that put it there ended ([`crate::model::sched::place::AVOID_SECS`],
/// which the simulator keeps to as well): also the longest a task every
/// host avoids waits with a free host there.
pub const AVOID_FOR: Duration = Duration::from_secs(crate::model::sched::place::AVOID_SECS);

impl QueueCore {
    /// Whether `t` (task `task` of `batch`) keeps off `name` now: an entry
    /// of its avoid list names the host and has not lapsed. An entry the
    /// lapse times do not cover yet counts as fresh.
    pub(super) fn avoids(&self, batch: BatchId, task: u32, t: &TaskRecord, name: &str) -> bool {
        let until = self
            .avoid_lapses
            .get(&(batch, task))
            .map_or(&[][..], |c| &c.until[..]);
        t.avoid
            .iter()
            .enumerate()
            .any(|(i, a)| a == name && until.get(i).is_none_or(|u| self.now.mono < *u))
    }

    /// Whether every entry of the task's avoid list has lapsed (true for an
    /// empty list): any host may take it.
    pub(super) fn avoids_none(&self, batch: BatchId, task: u32, t: &TaskRecord) -> bool {
        let until = self
            .avoid_lapses
            .get(&(batch, task))
            .map_or(&[][..], |c| &c.until[..]);
        until.len() >= t.avoid.len() && until[..t.avoid.len()].iter().all(|u| self.now.mono >= *u)
    }

    /// Sets the lapse time of every entry of the task's avoid list it does
    /// not cover yet (those an attempt's end just added, or all of them
    /// after a restart, when the ends' times are not kept); drops it once
    /// the task has ended for good.
    pub(super) fn note_avoid(&mut self, batch: BatchId, task: u32) {
        let Some(t) = self.task(batch, task) else {
            self.avoid_lapses.remove(&(batch, task));
            return;
        };
        if t.state.is_final() {
            self.avoid_lapses.remove(&(batch, task));
            return;
        }
        let len = t.avoid.len();
        if len == 0 {
            return;
        }
        let until = self.now.mono + AVOID_FOR;
        let lapses = self.avoid_lapses.entry((batch, task)).or_default();
        if lapses.until.len() < len {
            lapses.until.resize(len, until);
        }
    }

    /// At a restart: the lapse times of the batch's waiting and running tasks
    /// start now.
    pub(super) fn restore_avoid(&mut self, batch: BatchId) {
        let Some(b) = self.batches.get(&batch) else {
            return;
        };
        let tasks: Vec<u32> = (0..b.tasks.len() as u32).collect();
        for task in tasks {
            self.note_avoid(batch, task);
        }
    }

    /// On a tick: a waiting task an entry of whose avoid list has just
    /// lapsed may go to a host the last rounds skipped for it, so the next
    /// round asks (a look at the summaries says nothing new of hosts the
    /// queue already knew free).
    pub(super) fn watch_avoid(&mut self) {
        let now = self.now.mono;
        let mut lapsed = false;
        for ((batch, task), lapses) in &mut self.avoid_lapses {
            // Entries lapse in the order they were added.
            let gone = lapses.until.partition_point(|u| *u <= now);
            if gone <= lapses.announced {
                continue;
            }
            lapses.announced = gone;
            lapsed |= self
                .batches
                .get(batch)
                .and_then(|b| b.tasks.get(*task as usize))
                .is_some_and(|t| t.state == TaskState::Queued);
        }
        if lapsed {
            self.wanted = true;
        }
    }

    /// Drops what the queue counted of a batch's avoid lists.
    pub(super) fn forget_avoid(&mut self, batch: BatchId) {
        self.avoid_lapses.retain(|(b, _), _| *b != batch);
    }
}
