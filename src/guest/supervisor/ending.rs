//! How a guest's end is seen and finished: the non-blocking poll that
//! enforces the wall-clock and memory limits and the grace of a SIGTERM,
//! the reaping of the job's first process with its CPU time, and the work
//! that follows off the loop (emptying the job group, saving the work dir
//! off its tmpfs, the last checkpoint) before the end is reported once.
//!
//! It must not know how a guest is started or how a policy action is sent;
//! it kills through [`Supervisor::apply`] and the tree signal of
//! [`super::actions`].

use super::actions::signal_tree;
use super::Supervisor;
use crate::guest::checkpoint;
use crate::guest::containment::JobGroup;
use crate::guest::event::{ExitInfo, GuestEventKind};
use crate::guest::{orphan, quota};
use crate::guest::{GuestStatus, KillCause};
use crate::model::policy::{GuestAction, GuestRunState};
use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

impl Supervisor {
    /// Checks, without blocking, whether the guest has ended; kills it first
    /// if it has run past its wall-clock limit. Returns the final status once,
    /// when the end is first seen. Members of the guest group that outlive
    /// the main process are killed then.
    pub fn poll_exit(&mut self) -> Option<GuestStatus> {
        let now = self.clock.now();
        let guest = self.guest.as_mut().filter(|g| g.is_running())?;
        if guest.pending_exit.is_some() {
            return self.finish_if_done();
        }
        let over_time = now.as_millisecond() - guest.started_at.as_millisecond()
            >= i64::try_from(guest.wall_limit.as_millis()).unwrap_or(i64::MAX);
        let over_memory = guest.group.as_ref().is_some_and(|g| g.memory_kills() > 0);
        let grace_over = guest
            .term_deadline
            .is_some_and(|d| std::time::Instant::now() >= d);
        if over_memory && guest.kill_cause.is_none() {
            let _ = self.apply(GuestAction::Kill(KillCause::OverDeclaredMemory));
        } else if over_time && guest.kill_cause.is_none() {
            let _ = self.apply(GuestAction::Kill(KillCause::WallTimeLimit));
        } else if grace_over {
            // The grace is over: SIGKILL (the term deadline stays set, so
            // this is the plain kill of `apply`).
            let cause = guest.kill_cause.unwrap_or(KillCause::Revocation);
            guest.term_deadline = Some(std::time::Instant::now() + Duration::from_secs(3600));
            let _ = self.apply(GuestAction::Kill(cause));
        }
        let guest = self.guest.as_mut()?;
        let (status, cpu) = try_wait_rusage(guest.leader)?;
        guest.pending_exit = Some(exit_info(status));
        guest.captures_until = Some(std::time::Instant::now() + CAPTURE_DRAIN);
        guest.cpu_time = cpu;
        guest.run_state = GuestRunState::Idle;
        let members = guest.group_members();
        let _ = signal_tree(guest.tree_root(), guest.pgid(), &members, Signal::SIGKILL);
        // The job ends with its first process: escapees included. Emptying
        // and removing the group (seconds on cgroup v1) and saving the work
        // dir off its tmpfs run on a thread; the end is reported once done.
        let (group, quota) = (guest.group.take(), guest.quota.take());
        // After a kill the last checkpoint is taken (off the loop, once the
        // work dir is saved) before the end is reported.
        let last_checkpoint = match (guest.checkpoint.clone(), guest.kill_cause) {
            (Some(plan), Some(_)) => {
                let seen = guest.watcher.take().and_then(|w| w.finish());
                let (clock, sink) = (self.clock.clone(), self.sink.clone());
                let (job_id, work_dir, dir) = (
                    guest.handle.job_id.to_string(),
                    guest.handle.work_dir.clone(),
                    guest.handle.dir.clone(),
                );
                Some(move || {
                    checkpoint::final_snapshot(
                        &job_id, &plan, &work_dir, &dir, seen, &*clock, &*sink,
                    )
                })
            }
            _ => {
                guest.watcher.take();
                None
            }
        };
        // Usually the group is empty by now (the namespace went with its
        // init) and the work dir small: then the end costs a few rmdirs and
        // a small copy, done here so the end is reported at once.
        let quick = last_checkpoint.is_none()
            && group.as_ref().is_none_or(|g| g.members().is_empty())
            && quota
                .as_ref()
                .is_none_or(|m| m.used_bytes().is_some_and(|u| u <= INLINE_SAVE_BYTES));
        if quick {
            end_job(guest.handle.job_id.as_str(), group, quota);
        } else if group.is_some() || quota.is_some() || last_checkpoint.is_some() {
            let job_id = guest.handle.job_id.clone();
            let end = move || {
                end_job(job_id.as_str(), group, quota);
                if let Some(snapshot) = last_checkpoint {
                    snapshot();
                }
            };
            match std::thread::Builder::new()
                .name("guest-end".into())
                .spawn(end)
            {
                Ok(thread) => guest.ending = Some(thread),
                Err(e) => {
                    tracing::warn!(error = %e, "no thread to end the job; ending it here");
                }
            }
        }
        self.finish_if_done()
    }

    /// Reports the end once the ending thread (if any) is done and the
    /// job's stdout and stderr are written out (or [`CAPTURE_DRAIN`] has
    /// passed: a pipe some stray process still holds must not hold the end).
    fn finish_if_done(&mut self) -> Option<GuestStatus> {
        let guest = self.guest.as_mut()?;
        let ended = guest.ending.as_ref().is_none_or(|t| t.is_finished());
        let captured = guest.stdout.poll().is_some() && guest.stderr.poll().is_some();
        let now = std::time::Instant::now();
        if !end_is_ready(ended, captured, now, guest.captures_until) {
            return None;
        }
        if !captured {
            tracing::warn!(job = %guest.handle.job_id, "the job's output pipes are still open after its end; reporting the end without them");
        }
        if let Some(thread) = guest.ending.take() {
            let _ = thread.join();
        }
        let exit = guest.pending_exit.take()?;
        guest.exit = Some(exit);
        // Stops the duty-cycle thread (it joins within one period).
        guest.duty = None;
        // Its processes and views are gone: the image may be evicted.
        guest.image = None;
        guest.run_state = GuestRunState::Idle;
        let (job_id, cause) = (guest.handle.job_id.clone(), guest.kill_cause);
        let wall = self.clock.now().as_millisecond() - guest.started_at.as_millisecond();
        let usage = GuestEventKind::Usage {
            cpu_millis: guest
                .cpu_time
                .map(|c| u64::try_from(c.as_millis()).unwrap_or(u64::MAX)),
            wall_millis: u64::try_from(wall).unwrap_or(0),
        };
        if let Err(e) = orphan::remove(&self.config.pid_file()) {
            tracing::warn!(error = %e, "cannot remove the guest pid file");
        }
        self.emit(job_id.as_str(), usage);
        self.emit(job_id.as_str(), GuestEventKind::Exited { exit, cause });
        self.status()
    }

    /// Polls until the guest ends or `timeout` passes (for shutdown and tests).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<GuestStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Some(status);
            }
            if !self.guest.as_ref().is_some_and(|g| g.is_running()) {
                return self.status();
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Longest the end of a job waits for its stdout and stderr to be written
/// out after its last process is gone.
const CAPTURE_DRAIN: Duration = Duration::from_secs(5);

/// Whether a job's end may be reported: its ending work is done, and its
/// stdout and stderr are written out, or waiting for them has run to
/// `captures_until`.
fn end_is_ready(
    ended: bool,
    captured: bool,
    now: std::time::Instant,
    captures_until: Option<std::time::Instant>,
) -> bool {
    ended && (captured || captures_until.is_none_or(|t| now >= t))
}

/// Most bytes of a work dir saved on the caller's thread at the job's end.
const INLINE_SAVE_BYTES: u64 = 1 << 20;

/// Finishes a job off the loop: empties and removes its group, then copies
/// its work dir off the tmpfs and unmounts it.
pub(super) fn end_job(
    job_id: &str,
    group: Option<Box<dyn JobGroup>>,
    quota: Option<quota::WorkMount>,
) {
    if let Some(mut g) = group {
        if let Err(e) = g.remove() {
            tracing::warn!(job = job_id, error = %e, "cannot remove the job's group");
        }
    }
    if let Some(work) = quota {
        match work.save() {
            Ok(saved) if saved.skipped > 0 => {
                tracing::warn!(job = job_id, ?saved, "some of the work dir was not kept")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(job = job_id, error = %e, "cannot save the work dir off its tmpfs")
            }
        }
    }
}

/// Reaps `pid` if it has ended, without blocking, with the CPU time of it
/// and of the descendants it reaped (the keeper reaps init, which reaps the
/// job: so the whole job's CPU). `None` while it runs.
fn try_wait_rusage(pid: i32) -> Option<(ExitStatus, Option<Duration>)> {
    let mut status = 0;
    // SAFETY: rusage is plain data, written by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a plain system call on our own child with valid pointers.
    let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    if rc <= 0 {
        return None;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
    Some((ExitStatus::from_raw(status), Some(cpu)))
}

fn exit_info(status: ExitStatus) -> ExitInfo {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitInfo::Code(code),
        (None, Some(sig)) => ExitInfo::Signal(sig),
        (None, None) => ExitInfo::Code(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 30, finding 6: the end was reported before the outputs were
    /// written out, so a fast consumer could land an empty stdout.
    #[test]
    fn the_end_waits_for_the_outputs_but_not_forever() {
        let now = std::time::Instant::now();
        let until = Some(now + CAPTURE_DRAIN);
        assert!(
            !end_is_ready(true, false, now, until),
            "outputs not written"
        );
        assert!(end_is_ready(true, true, now, until));
        assert!(
            end_is_ready(true, false, now + CAPTURE_DRAIN, until),
            "a stray pipe holder does not hold the end"
        );
        assert!(!end_is_ready(false, true, now, until), "ending work left");
    }
}
