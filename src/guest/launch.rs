//! How a guest process is made: the steps run in the child between `fork` and
//! `exec` (new session, rlimits, nice, user switch, namespaces, the narrow
//! view, Landlock, parent-death signal), the probe that tells which of them
//! this kernel allows, and the launcher thread that forks.
//!
//! With the narrow view the job lives in a PID namespace of its own, and
//! the child the launcher forks becomes three processes: the *keeper* (the
//! launcher's child, which never calls `exec`: it waits and then ends the
//! way the guest ended), the namespace's *init* (pid 1: it mounts `/proc`,
//! enters the view, reaps orphans and records how the guest ended), and the
//! *guest* (pid 2, in a session of its own, which `exec`s the program). When
//! the guest ends, init exits and the kernel kills whatever else is left in
//! the namespace: ending the job's first process ends all, cgroup or not.
//! The keeper and init die with the node through their parent-death signals.
//!
//! Everything that allocates or reads files happens here in the parent; the
//! child runs [`ChildSetup::apply`] only, which makes plain system calls and
//! allocates nothing (it must be async-signal-safe). This module knows nothing
//! about policy, jobs or events.

use super::ids::Ids;
use super::view::ViewPlan;
use std::io;
use std::process::{Child, Command};
use std::sync::{mpsc, Arc};
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

/// Everything the child does before `exec`, decided in the parent.
#[derive(Debug, Clone)]
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
    /// The narrow view; with it `unshare_flags` include the user, mount and
    /// PID namespaces and the child becomes keeper, init and guest.
    pub view: Option<Arc<ViewPlan>>,
    /// Where the node's command line and environment lie in its memory: init
    /// is a copy of the node that the guest can see as pid 1, so it blanks
    /// them (see [`NodeStrings`]).
    pub node_strings: NodeStrings,
}

/// The address ranges of this process's command line and environment
/// strings (`arg_start..arg_end`, `env_start..env_end` of `/proc/self/stat`).
///
/// Init, pid 1 of a guest's namespace, is a fork of the node: without care
/// the guest reads the node's full command line in `/proc/1/cmdline` (issue
/// 30, finding 7) and could read its memory, keys included. Init therefore
/// zeroes these ranges in its own copy and makes itself non-dumpable, which
/// closes `/proc/1/{environ,mem,maps}` and `ptrace` to the guest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStrings {
    args: (usize, usize),
    env: (usize, usize),
}

impl NodeStrings {
    /// This process's ranges, read once (the kernel fixes them at `exec`);
    /// empty ranges when `/proc/self/stat` cannot be read or parsed.
    pub fn of_this_process() -> NodeStrings {
        static ONCE: std::sync::OnceLock<NodeStrings> = std::sync::OnceLock::new();
        *ONCE.get_or_init(|| {
            std::fs::read_to_string("/proc/self/stat")
                .ok()
                .and_then(|s| NodeStrings::parse_stat(&s))
                .unwrap_or_default()
        })
    }

    /// Fields 48-51 of a `/proc/<pid>/stat` line. The command name (field
    /// 2) may hold spaces and parentheses, so fields are counted after the
    /// last `)`. A range whose end is before its start is refused.
    pub fn parse_stat(stat: &str) -> Option<NodeStrings> {
        let rest = &stat[stat.rfind(')')? + 1..];
        // `rest` starts at field 3: field n is at index n - 3.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| -> Option<usize> { fields.get(n - 3)?.parse().ok() };
        let args = (field(48)?, field(49)?);
        let env = (field(50)?, field(51)?);
        (args.0 <= args.1 && env.0 <= env.1).then_some(NodeStrings { args, env })
    }

    /// Zeroes the ranges in this process's memory.
    ///
    /// # Safety
    /// Only in a process whose ranges these are (a fork of the process that
    /// read them), and before anything reads its arguments or environment.
    unsafe fn blank(&self) {
        for (start, end) in [self.args, self.env] {
            if start > 0 && end > start {
                std::ptr::write_bytes(start as *mut u8, 0, end - start);
            }
        }
    }
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
            // With the view the limits go on the guest alone: the keeper
            // and init are copies of the node, whose address space may be
            // past the guest's, and must still map and fork.
            if self.view.is_none() {
                self.set_limits()?;
            }
            check(libc::setpriority(libc::PRIO_PROCESS, 0, self.start_nice))?;
            if let Some(ids) = self.ids {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(ids.gid))?;
                check(libc::setuid(ids.uid))?;
            }
            if let Some(view) = &self.view {
                check(libc::unshare(self.unshare_flags))?;
                arm_death_signal(self.parent_pid)?;
                view.build()?;
                return in_pid_namespace(view, self.landlock_fd, self.node_strings, || {
                    self.set_limits()
                });
            }
            if self.unshare_flags != 0 {
                check(libc::unshare(self.unshare_flags))?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            if let Some(fd) = self.landlock_fd {
                super::landlock::restrict_self(fd)?;
            }
            // Last, because a change of credentials clears the death signal.
            arm_death_signal(self.parent_pid)?;
        }
        Ok(())
    }
}

impl ChildSetup {
    fn set_limits(&self) -> io::Result<()> {
        for l in &self.limits {
            let lim = libc::rlimit {
                rlim_cur: l.soft,
                rlim_max: l.hard,
            };
            // SAFETY: a plain system call on a value owned by `self`.
            check(unsafe { libc::setrlimit(l.resource, &lim) })?;
        }
        Ok(())
    }
}

/// SIGKILL when the parent goes; fails if it has gone already.
fn arm_death_signal(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: plain system calls.
    unsafe {
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        if libc::getppid() != parent {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// Closes every descriptor from `from` up.
fn close_from(from: libc::c_uint) {
    close_between(from, libc::c_uint::MAX);
}

/// Closes every descriptor but `keep`.
fn close_all_but(keep: libc::c_int) {
    let keep = keep.max(0) as libc::c_uint;
    if keep > 0 {
        close_between(0, keep - 1);
    }
    close_from(keep + 1);
}

/// Closes the descriptors `from..=to`, with `close_range` where the kernel
/// has it and one by one (up to the open-files limit) where not.
fn close_between(from: libc::c_uint, to: libc::c_uint) {
    // SAFETY: plain system calls; closing a descriptor that is not open is harmless.
    unsafe {
        if libc::syscall(libc::SYS_close_range, from, to, 0) == 0 {
            return;
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(65_536) as libc::c_int
        } else {
            1024
        };
        let to = to.min(top as libc::c_uint) as libc::c_int;
        for fd in from as libc::c_int..=to {
            libc::close(fd);
        }
    }
}

/// Ends this process the way `status` (a wait status) says a process ended:
/// the same exit code, or the same signal.
fn end_like(status: libc::c_int) -> ! {
    // SAFETY: plain system calls; `_exit` does not return.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig)
        }
        libc::_exit(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            1
        })
    }
}

/// The keeper / init / guest split (see the module doc). Returns only in the
/// guest, which then `exec`s; an error returned in init or the guest reaches
/// the supervisor through the spawn's error pipe like any setup error.
///
/// # Safety
/// Runs between `fork` and `exec`: plain system calls only.
unsafe fn in_pid_namespace(
    view: &ViewPlan,
    landlock_fd: Option<libc::c_int>,
    node_strings: NodeStrings,
    set_limits: impl Fn() -> io::Result<()>,
) -> io::Result<()> {
    // How the guest ended, written by init, read by the keeper.
    let shared = libc::mmap(
        std::ptr::null_mut(),
        4096,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if shared == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let shared = shared.cast::<libc::c_int>();
    // The keeper holds the write end for its whole life: init reads end of
    // file from it once the keeper is gone.
    let mut alive = [0 as libc::c_int; 2];
    check(libc::pipe2(alive.as_mut_ptr(), libc::O_CLOEXEC))?;
    let init = libc::fork();
    if init < 0 {
        return Err(io::Error::last_os_error());
    }
    if init > 0 {
        // The keeper: close everything (stdout and stderr too, so the
        // captures end with the guest; and the spawn's error pipe, so the
        // supervisor hears from the guest's `exec` alone) and wait.
        close_all_but(alive[1]);
        let mut status = 0;
        loop {
            let r = libc::waitpid(init, &mut status, 0);
            if r == init {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(1);
            }
        }
        if std::ptr::read_volatile(shared) == 1 {
            end_like(std::ptr::read_volatile(shared.add(1)));
        }
        end_like(status);
    }
    // Init, pid 1 of the job's namespace: first no longer the node to the
    // guest's eyes (its strings blanked, not dumpable: see `NodeStrings`).
    node_strings.blank();
    check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
    libc::close(alive[1]);
    check(libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    ))?;
    // The keeper may have died before the signal was armed.
    check(libc::fcntl(alive[0], libc::F_SETFL, libc::O_NONBLOCK))?;
    let mut byte = 0u8;
    if libc::read(alive[0], (&mut byte as *mut u8).cast(), 1) == 0 {
        libc::_exit(1);
    }
    view.enter()?;
    let guest = libc::fork();
    if guest < 0 {
        return Err(io::Error::last_os_error());
    }
    if guest == 0 {
        // The guest: a session of its own, its limits, then the usual last steps.
        check(libc::setsid())?;
        set_limits()?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        if let Some(fd) = landlock_fd {
            super::landlock::restrict_self(fd)?;
        }
        return Ok(());
    }
    // Init: reap every orphan until the guest itself ends; leaving then
    // makes the kernel kill the rest of the namespace.
    close_from(0);
    loop {
        let mut status = 0;
        let r = libc::waitpid(-1, &mut status, 0);
        if r == guest {
            std::ptr::write_volatile(shared.add(1), status);
            std::ptr::write_volatile(shared, 1);
            libc::_exit(0);
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(1);
        }
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

#[cfg(test)]
mod tests {
    use super::NodeStrings;

    /// A stat line whose command name holds spaces and a `)`, with fields
    /// 48-51 set to 1000 2000 3000 4000.
    fn stat_line(comm: &str, ranges: [usize; 4]) -> String {
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        for (i, v) in ranges.iter().enumerate() {
            fields[48 - 3 + i] = v.to_string();
        }
        format!("123 ({comm}) {}", fields.join(" "))
    }

    #[test]
    fn the_string_ranges_are_read_after_the_last_parenthesis() {
        let line = stat_line("evil) 1 2 (name", [1000, 2000, 3000, 4000]);
        let got = NodeStrings::parse_stat(&line).unwrap();
        assert_eq!(
            got,
            NodeStrings {
                args: (1000, 2000),
                env: (3000, 4000)
            }
        );
    }

    #[test]
    fn a_short_or_backwards_stat_line_gives_nothing() {
        assert_eq!(NodeStrings::parse_stat("123 (x) 1 2 3"), None);
        assert_eq!(NodeStrings::parse_stat("no parenthesis"), None);
        let backwards = stat_line("x", [2000, 1000, 3000, 4000]);
        assert_eq!(NodeStrings::parse_stat(&backwards), None);
    }

    #[test]
    fn this_process_has_its_command_line_where_stat_says() {
        let strings = NodeStrings::of_this_process();
        assert!(strings.args.1 > strings.args.0, "{strings:?}");
        // SAFETY: the range is this process's own argument block, mapped
        // and readable for the life of the process; read, not written.
        let block = unsafe {
            std::slice::from_raw_parts(strings.args.0 as *const u8, strings.args.1 - strings.args.0)
        };
        let first = std::env::args_os().next().unwrap();
        let first = first.as_encoded_bytes();
        assert!(block.starts_with(first), "argv[0] is not at arg_start");
    }
}
