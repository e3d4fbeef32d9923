//! How a policy action reaches a running guest: renice every thread and
//! autogroup of its tree, stop and continue it (in step with the CPU duty
//! cycle), and kill it, with a SIGTERM and a grace first for a checkpointing
//! guest that the owner's need for the machine evicts.
//!
//! It must not know how the guest was started or how its end is finished;
//! it only signals the processes the [`Supervisor`] names.

use super::{Guest, Supervisor};
use crate::guest::containment::JobGroup;
use crate::guest::event::GuestEventKind;
use crate::guest::{procfs, ApplyError, KillCause, BACKGROUND_NICE};
use crate::model::policy::{GuestAction, GuestRunState};
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

impl Supervisor {
    /// Carries out one policy action on the running guest.
    pub fn apply(&mut self, action: GuestAction) -> Result<(), ApplyError> {
        let guest = self
            .guest
            .as_mut()
            .filter(|g| g.is_running())
            .ok_or(ApplyError::NoGuest)?;
        let (pid, pgid) = (guest.tree_root(), guest.pgid());
        let job_id = guest.handle.job_id.clone();
        let members = guest.group_members();
        // The duty cycle (if any) must not continue a guest the policy stops.
        let duty = guest.duty.as_ref().map(|d| d.shared.clone());
        let _duty_guard = duty.as_ref().map(|d| {
            if let GuestAction::Suspend | GuestAction::Resume = action {
                d.suspended.store(
                    action == GuestAction::Suspend,
                    std::sync::atomic::Ordering::Release,
                );
            }
            d.lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
        let kind = match action {
            GuestAction::Renice19 => {
                let (threads, autogroups, _) = set_tree_nice(pid, pgid, &members, BACKGROUND_NICE);
                GuestEventKind::Reniced {
                    nice: BACKGROUND_NICE,
                    threads,
                    autogroups,
                }
            }
            GuestAction::RunNormal => {
                let (threads, autogroups, refused) = set_tree_nice(pid, pgid, &members, 0);
                guest.nice_not_lowered = refused.is_some();
                match refused {
                    Some(err) => {
                        // Keep every thread at 19 rather than a mix.
                        set_tree_nice(pid, pgid, &members, BACKGROUND_NICE);
                        GuestEventKind::NiceNotLowered {
                            reason: err.to_string(),
                        }
                    }
                    None => GuestEventKind::Reniced {
                        nice: 0,
                        threads,
                        autogroups,
                    },
                }
            }
            GuestAction::Suspend => {
                signal_tree(pid, pgid, &members, Signal::SIGSTOP).map_err(ApplyError::Signal)?;
                GuestEventKind::Suspended
            }
            GuestAction::Resume => {
                signal_tree(pid, pgid, &members, Signal::SIGCONT).map_err(ApplyError::Signal)?;

                GuestEventKind::Resumed
            }
            GuestAction::Kill(cause) if guest.term_deadline.is_none() && graceful(guest, cause) => {
                let grace = guest
                    .checkpoint
                    .as_ref()
                    .map_or(Duration::ZERO, |c| c.granted_grace());
                // A stopped guest cannot save: continued, it gets its grace.
                signal_tree(pid, pgid, &members, Signal::SIGTERM).map_err(ApplyError::Signal)?;
                let _ = signal_tree(pid, pgid, &members, Signal::SIGCONT);
                guest.term_deadline = Some(std::time::Instant::now() + grace);
                guest.kill_cause.get_or_insert(cause);
                GuestEventKind::TermSent {
                    cause,
                    grace_millis: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                }
            }
            GuestAction::Kill(cause) => {
                signal_tree(pid, pgid, &members, Signal::SIGKILL).map_err(ApplyError::Signal)?;
                // Escapees too; waiting until the group is empty (seconds
                // on cgroup v1) is left to the end of the job, off the loop.
                if let Some(g) = &guest.group {
                    g.start_kill();
                }
                guest.kill_cause.get_or_insert(cause);
                GuestEventKind::KillSent { cause }
            }
        };
        guest.run_state = crate::model::policy::after(guest.run_state, action);
        if let GuestAction::Kill(_) = action {
            // Still running until reaped; the policy must not act on it again.
            guest.run_state = GuestRunState::Idle;
        }
        self.emit(job_id.as_str(), kind);
        Ok(())
    }
}

/// Whether a kill of this guest gets SIGTERM and a grace first: a
/// checkpointing guest killed for S3 or S4 (the owner needs the machine, but
/// a few seconds to save its state cost less than its lost work). Never for
/// S5 (revoked: the node may be going away), a cancel, or the job's own fault.
fn graceful(guest: &Guest, cause: KillCause) -> bool {
    guest
        .checkpoint
        .as_ref()
        .is_some_and(|c| !c.granted_grace().is_zero())
        && matches!(cause, KillCause::CpuContention | KillCause::MemoryShortage)
}

/// Reads the job group's members from another thread (the duty cycle):
/// the member lists, read afresh each time.
pub(super) fn group_member_reader(
    group: &Option<Box<dyn JobGroup>>,
) -> impl Fn() -> Vec<i32> + Send {
    let files = group.as_ref().map(|g| g.procs_files()).unwrap_or_default();
    move || {
        let mut pids: Vec<i32> = files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .flat_map(|t| {
                t.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// Sends `signal` to the guest's group and to every other process of its
/// tree (a child that changed its group). A group that is already gone is
/// not an error.
pub(super) fn signal_tree(
    pid: i32,
    pgid: i32,
    members: &[i32],
    signal: Signal,
) -> Result<(), Errno> {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => return Err(e),
    }
    for p in procfs::guest_tree(pid, pgid) {
        if p.pgrp != pgid {
            let _ = kill(Pid::from_raw(p.pid), signal);
        }
    }
    for &member in members {
        let _ = kill(Pid::from_raw(member), signal);
    }
    Ok(())
}

/// Sets `nice` on every thread of the guest tree and on each autogroup it
/// uses. Returns the threads and autogroups changed, and the first
/// permission error (lowering nice needs `CAP_SYS_NICE` or `RLIMIT_NICE`).
fn set_tree_nice(
    pid: i32,
    pgid: i32,
    members: &[i32],
    nice: i32,
) -> (usize, usize, Option<io::Error>) {
    let mut threads = 0;
    let mut refused = None;
    let mut autogroups = BTreeMap::new();
    let mut pids: Vec<i32> = procfs::guest_tree(pid, pgid)
        .iter()
        .map(|p| p.pid)
        .collect();
    pids.extend_from_slice(members);
    pids.sort_unstable();
    pids.dedup();
    for p in pids {
        for t in procfs::thread_stats(p) {
            // SAFETY: a plain system call; a thread that has gone gives ESRCH.
            let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, t.pid as libc::id_t, nice) };
            if rc == 0 {
                threads += 1;
            } else {
                let err = io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::ESRCH) && refused.is_none() {
                    refused = Some(err);
                }
            }
        }
        if let Some(group) = procfs::read_autogroup(p) {
            autogroups.entry(group.id).or_insert(p);
        }
    }
    let mut groups_set = 0;
    for member in autogroups.into_values() {
        match write_autogroup_nice_retrying(member, nice) {
            Ok(()) => groups_set += 1,
            Err(e) => {
                tracing::warn!(pid = member, error = %e, "cannot set the guest's autogroup nice")
            }
        }
    }
    (threads, groups_set, refused)
}

/// Without `CAP_SYS_ADMIN` the kernel allows one autogroup nice change per
/// 100 ms system-wide and answers EAGAIN in between.
fn write_autogroup_nice_retrying(pid: i32, nice: i32) -> io::Result<()> {
    match procfs::write_autogroup_nice(pid, nice) {
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
            std::thread::sleep(Duration::from_millis(110));
            procfs::write_autogroup_nice(pid, nice)
        }
        other => other,
    }
}
