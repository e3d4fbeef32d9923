//! How a guest process is made: the steps run in the child between `fork` and
//! `exec` (new session, rlimits, nice, user switch, namespaces, Landlock,
//! parent-death signal), the probe that tells which of them this kernel
//! allows, and the launcher thread that forks.
//!
//! Everything that allocates or reads files happens here in the parent; the
//! child runs [`ChildSetup::apply`] only, which makes plain system calls and
//! allocates nothing (it must be async-signal-safe). This module knows nothing
//! about policy, jobs or events.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// A resource limit to set in the child.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub resource: libc::__rlimit_resource_t,
    pub soft: u64,
    pub hard: u64,
}

/// How many limits the child sets; fixed so the setup needs no allocation.
pub const LIMIT_COUNT: usize = 5;

/// Most `cgroup.procs` files a guest joins (v1: pids, memory, cpu, freezer, unified).
pub const MAX_JOIN_FDS: usize = 5;

/// The user and group the child switches to (only when the node is root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// Everything the child does before `exec`, decided in the parent.
#[derive(Debug, Clone, Copy)]
pub struct ChildSetup {
    /// Applied in order with `setrlimit`.
    pub limits: [Limit; LIMIT_COUNT],
    /// The nice value the guest starts at.
    pub start_nice: i32,
    /// Switch to these ids (after dropping supplementary groups) when set.
    pub ids: Option<Ids>,
    /// `unshare` flags (`CLONE_NEWUSER | CLONE_NEWNET`), or 0 for none.
    pub unshare_flags: libc::c_int,
    /// A Landlock ruleset descriptor to enforce, if any.
    pub landlock_fd: Option<libc::c_int>,
    /// Open `cgroup.procs` files (-1 for none): the child writes "0" to each
    /// to join its job's group before it drops root, so every process it
    /// makes is in the group from the start.
    pub join_fds: [libc::c_int; MAX_JOIN_FDS],
    /// The supervisor's pid: if the child's parent is no longer it once the
    /// death signal is armed, the supervisor died during the setup.
    pub parent_pid: libc::pid_t,
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl ChildSetup {
    /// Runs in the child between `fork` and `exec`. Plain system calls only:
    /// `io::Error::last_os_error` does not allocate.
    pub fn apply(&self) -> io::Result<()> {
        // SAFETY (whole block): each call is a plain system call on values
        // owned by `self`; no memory is allocated or freed.
        unsafe {
            // A session of its own: its own process group to signal as one,
            // no controlling terminal, and with autogroup its own scheduling group.
            check(libc::setsid())?;
            for &fd in &self.join_fds {
                if fd >= 0 {
                    let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                    if n < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            for l in &self.limits {
                let lim = libc::rlimit {
                    rlim_cur: l.soft,
                    rlim_max: l.hard,
                };
                check(libc::setrlimit(l.resource, &lim))?;
            }
            check(libc::setpriority(libc::PRIO_PROCESS, 0, self.start_nice))?;
            if let Some(ids) = self.ids {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(ids.gid))?;
                check(libc::setuid(ids.uid))?;
            }
            if self.unshare_flags != 0 {
                check(libc::unshare(self.unshare_flags))?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            if let Some(fd) = self.landlock_fd {
                super::landlock::restrict_self(fd)?;
            }
            // Last, because a change of credentials clears the death signal.
            check(libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            if libc::getppid() != self.parent_pid {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    }
}

/// Whether a child switched to `ids` can make a new user and network
/// namespace here. Forks a throw-away child that tries and exits.
pub fn can_unshare_net(ids: Option<Ids>) -> bool {
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
    // SAFETY: the child only makes system calls and leaves with `_exit`,
    // which is what is allowed after `fork` in a threaded process.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => unsafe {
            if let Some(ids) = ids {
                if libc::setgroups(0, std::ptr::null()) < 0
                    || libc::setgid(ids.gid) < 0
                    || libc::setuid(ids.uid) < 0
                {
                    libc::_exit(2);
                }
            }
            libc::_exit(if libc::unshare(flags) == 0 { 0 } else { 1 })
        },
        Ok(nix::unistd::ForkResult::Parent { child }) => matches!(
            nix::sys::wait::waitpid(child, None),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0))
        ),
        Err(_) => false,
    }
}

type LaunchRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// A thread that lives as long as the supervisor and does every `fork`.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
/// not the process. A node on tokio may call the supervisor from blocking-pool
/// threads, which retire when idle; forking from this thread instead ties the
/// guest's life to the supervisor's.
#[derive(Debug)]
pub struct Launcher {
    requests: Option<mpsc::Sender<LaunchRequest>>,
    thread: Option<JoinHandle<()>>,
}

impl Launcher {
    pub fn new() -> io::Result<Launcher> {
        let (tx, rx) = mpsc::channel::<LaunchRequest>();
        let thread = std::thread::Builder::new()
            .name("guest-launcher".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    // The requester may have gone; then the child is dropped
                    // and reaped by whoever owns the supervisor's cleanup.
                    let _ = reply.send(command.spawn());
                }
            })?;
        Ok(Launcher {
            requests: Some(tx),
            thread: Some(thread),
        })
    }

    /// Spawns `command` on the launcher thread and waits for the result.
    pub fn spawn(&self, command: Command) -> io::Result<Child> {
        let gone = || io::Error::other("the guest launcher thread has stopped");
        let (reply_tx, reply_rx) = mpsc::channel();
        self.requests
            .as_ref()
            .ok_or_else(gone)?
            .send((command, reply_tx))
            .map_err(|_| gone())?;
        reply_rx.recv().map_err(|_| gone())?
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
