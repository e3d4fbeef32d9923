//! A task keeps off a host whose owner just killed it, as the node's batch
//! queue does (`consumer/batch/queue/avoid.rs`): for
//! [`AVOID_SECS`](crate::sched::place::AVOID_SECS) after the kill the host
//! is no place for that task, for a start now, a later window or a tail
//! copy. Before, a killed task could go back to the same host minutes
//! later: on the desktop pools one kill in ten was of an attempt started
//! on the host that had killed the task's last attempt, within the hour
//! (docs/scheduling.md, "A task keeps off the host that killed it"). The
//! oracle, which knows every host's future, keeps off nothing.

use super::{Ev, Policy, Sim};
use crate::sched::place::AVOID_SECS;

impl Sim<'_> {
    /// `host`'s owner killed an attempt of `task` now.
    pub(super) fn note_kill(&mut self, task: usize, host: usize) {
        if self.config.policy == Policy::Oracle {
            return;
        }
        let now = self.now;
        let until = now + AVOID_SECS as f64;
        let list = &mut self.avoid[task];
        list.retain(|&(_, u)| u > now);
        match list.iter_mut().find(|e| e.0 == host) {
            Some(e) => e.1 = until,
            None => list.push((host, until)),
        }
        // When the hour is out the host may take the task again: look
        // then, as the node's queue does (`watch_avoid`), rather than at
        // the next event that happens to come.
        self.push(until, Ev::Look);
    }

    /// Whether `task` keeps off `host` for a start at time `at`.
    pub(super) fn avoids(&self, task: usize, host: usize, at: f64) -> bool {
        keeps_off(&self.avoid, task, host, at)
    }

    /// The first waiting task, in queue order, that some host of `free`
    /// may take now, with those hosts: the FIFO policies' head, passing
    /// over a task every free host keeps off.
    pub(super) fn fifo_head(&self, free: &[usize]) -> Option<(usize, Vec<usize>)> {
        if free.is_empty() {
            return None;
        }
        self.queue.iter().enumerate().find_map(|(pos, &task)| {
            let ok: Vec<usize> = free
                .iter()
                .copied()
                .filter(|&g| !self.avoids(task, g, self.now))
                .collect();
            (!ok.is_empty()).then_some((pos, ok))
        })
    }
}

/// Whether `task` keeps off `host` for a start at `at` (a free function so
/// that the placement rule's closures, which borrow the simulator's fields
/// one by one, can call it).
pub(super) fn keeps_off(avoid: &[Vec<(usize, f64)>], task: usize, host: usize, at: f64) -> bool {
    avoid
        .get(task)
        .is_some_and(|l| l.iter().any(|&(g, until)| g == host && at < until))
}
