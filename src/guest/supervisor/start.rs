//! How a guest is started, step by step: refuse while one runs, check the
//! spec, resolve its user, make its job dir (and the work dir's tmpfs), move
//! its inputs in, plan its sandbox, make its job group and CPU limit, fork it
//! on the launcher thread, capture its output, record its pid for the orphan
//! check, and start the duty cycle and the checkpoint watcher it needs.
//!
//! What a start set up before it fails is undone ([`Staged::abandon`]), so a
//! refused start leaves no group and no mount. It must not know how actions
//! reach a running guest or how its end is finished; it leaves a [`Guest`]
//! for those.

use super::actions::{group_member_reader, signal_tree};
use super::{Guest, Supervisor};
use crate::guest::capture::{Capture, Stream};
use crate::guest::checkpoint;
use crate::guest::containment::{GroupLimits, JobGroup};
use crate::guest::event::{GuestEvent, GuestEventKind};
use crate::guest::ids::{guest_ids, Ids};
use crate::guest::launch::{self, ChildSetup, Limit};
use crate::guest::sandbox::SandboxPlan;
use crate::guest::throttle::{self, ThrottleMode};
use crate::guest::{
    orphan, procfs, quota, GuestConfig, GuestHandle, GuestSpec, StartError, BACKGROUND_NICE,
    GUEST_PATH,
};
use crate::model::ids::JobId;
use crate::model::policy::{GuestRunState, Priority};
use crate::model::relpath::RelPath;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

/// What a start has set up on the host before the fork; undone by
/// [`Staged::abandon`] when the start fails after it.
struct Staged {
    /// The job directory: `stdout`, `stderr` and `work/`.
    dir: PathBuf,
    work_dir: PathBuf,
    /// The work dir's tmpfs, while mounted.
    quota: Option<quota::WorkMount>,
    /// The job's cgroup(s), once made.
    group: Option<Box<dyn JobGroup>>,
}

impl Staged {
    /// Removes the job's group, then saves the work dir off its tmpfs and
    /// unmounts it.
    fn abandon(self) {
        if let Some(mut g) = self.group {
            let _ = g.remove();
        }
        if let Some(m) = self.quota {
            let _ = m.save();
        }
    }
}

impl Supervisor {
    /// Starts a guest for `job_id` in a fresh directory `jobs/<job_id>`.
    ///
    /// Refuses while another guest is running. The guest starts at nice 19
    /// (policy level `Background`); apply `RunNormal` when the host is in S1.
    pub fn start(&mut self, job: &JobId, spec: GuestSpec) -> Result<GuestHandle, StartError> {
        let job_id = job.as_str();
        self.refuse_if_busy()?;
        validate(&spec)?;
        let ids = guest_ids(&self.config, &spec)?;
        let (mut staged, quota_warning) = self.stage_job_dir(job_id, ids)?;
        if let Err(e) = write_inputs(&staged.work_dir, &spec.inputs, ids) {
            staged.abandon();
            return Err(e);
        }
        let mut plan = self.plan_sandbox(job_id, &staged, ids, &spec, quota_warning);
        if spec.image.is_some() && plan.view.is_none() {
            let why = plan.report.warnings.join("; ");
            staged.abandon();
            return Err(StartError::Image(format!(
                "an image needs the narrow view: {why}"
            )));
        }
        // One guest at a time: whatever is left in a job group now is stray.
        self.kill_leftover_groups();
        staged.group = self.make_group(job_id, &spec);
        let throttle = limit_cpu(
            job_id,
            self.config.cpu_limit_percent,
            staged.group.as_deref(),
        );
        let mut child = match self.fork(job_id, &spec, &staged, ids, &mut plan) {
            Ok(c) => c,
            Err(e) => {
                staged.abandon();
                return Err(StartError::Spawn(e));
            }
        };
        drop(plan.landlock);
        let leader = child.id() as i32;
        // The guest's mount namespace holds the tmpfs now: off the node's
        // mount table with it, so a crash of the node leaves no mount.
        if let Some(m) = staged.quota.as_mut().filter(|_| plan.report.narrow_view) {
            if let Err(e) = m.detach() {
                tracing::warn!(job = job_id, error = %e, "the work dir's tmpfs stays mounted");
            }
        }
        // In a PID namespace the program runs in the keeper's grandchild.
        let pid = if plan.report.pid_namespace {
            first_child(leader).and_then(first_child).unwrap_or(leader)
        } else {
            leader
        };

        // Match the thread nice on the scheduling group the new session got.
        if procfs::read_autogroup(pid).is_some() {
            let _ = procfs::write_autogroup_nice(pid, BACKGROUND_NICE);
        }
        let (stdout, stderr) = match self.start_captures(&mut child, job_id, &staged.dir, &spec) {
            Ok(c) => c,
            Err(source) => {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(leader), Signal::SIGKILL);
                let _ = child.wait();
                let path = staged.dir.clone();
                staged.abandon();
                return Err(StartError::JobDir { path, source });
            }
        };
        self.record_pid(job_id, pid);
        let Staged {
            dir,
            work_dir,
            quota,
            group,
        } = staged;
        let handle = GuestHandle {
            job_id: job.clone(),
            pid,
            dir,
            work_dir,
            sandbox: plan.report,
        };
        let started_at = self.clock.now();
        self.emit(
            job_id,
            GuestEventKind::Started {
                pid,
                dir: handle.dir.clone(),
                sandbox: handle.sandbox.clone(),
            },
        );
        let duty = start_duty_cycle(job_id, throttle, &group, leader, pid);
        let watcher = self.watch_checkpoint(job_id, &spec, &handle, quota.as_ref());
        self.guest = Some(Guest {
            handle: handle.clone(),
            started_at,
            wall_limit: spec.wall_limit,
            run_state: GuestRunState::Running(Priority::Background),
            nice_not_lowered: false,
            kill_cause: None,
            exit: None,
            stdout,
            stderr,
            group,
            leader,
            quota,
            pending_exit: None,
            captures_until: None,
            ending: None,
            throttle,
            duty,
            checkpoint: spec.checkpoint,
            watcher,
            term_deadline: None,
            cpu_time: None,
            image: spec.image.map(|i| i.lease),
        });
        Ok(handle)
    }

    /// The supervisor runs at most one guest.
    fn refuse_if_busy(&self) -> Result<(), StartError> {
        match self.guest.as_ref().filter(|g| g.is_running()) {
            Some(g) => Err(StartError::Busy {
                job_id: g.handle.job_id.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Makes the job's fresh directory and work dir, and mounts the work
    /// dir's tmpfs (its quota) where the node can; a mount that fails is a
    /// warning for the sandbox report, not a refusal.
    fn stage_job_dir(
        &self,
        job_id: &str,
        ids: Option<Ids>,
    ) -> Result<(Staged, Option<String>), StartError> {
        let dir = self.config.jobs_dir().join(job_id);
        let work_dir = dir.join("work");
        make_job_dir(&dir, &work_dir, ids)?;
        let quota_bytes = self.config.disk_mib.saturating_mul(1024 * 1024);
        let mut quota_warning = None;
        let quota = if self.layers.quota {
            let owner = ids.map_or_else(
                || {
                    (
                        nix::unistd::geteuid().as_raw(),
                        nix::unistd::getegid().as_raw(),
                    )
                },
                |i| (i.uid, i.gid),
            );
            match quota::WorkMount::mount(&work_dir, quota_bytes, owner) {
                Ok(m) => Some(m),
                Err(e) => {
                    quota_warning = Some(format!("no quota on the work dir: {e}"));
                    None
                }
            }
        } else {
            None
        };
        let staged = Staged {
            dir,
            work_dir,
            quota,
            group: None,
        };
        Ok((staged, quota_warning))
    }

    /// The isolation this guest gets, with every layer it misses logged.
    fn plan_sandbox(
        &self,
        job_id: &str,
        staged: &Staged,
        ids: Option<Ids>,
        spec: &GuestSpec,
        quota_warning: Option<String>,
    ) -> SandboxPlan {
        let mut plan = SandboxPlan::prepare(
            &staged.work_dir,
            ids,
            spec.allow_network,
            self.layers,
            &self.config.hidden_dirs,
            spec.image.as_ref(),
        );
        plan.report.warnings.extend(quota_warning);
        plan.report.work_quota_bytes = staged.quota.as_ref().map(|q| q.cap());
        for w in &plan.report.warnings {
            tracing::warn!(job = job_id, "guest sandbox: {w}");
        }
        plan
    }

    /// The job's cgroup(s) with its process and memory limits, where this
    /// node can make them; without, the job is held by its PID namespace.
    fn make_group(&self, job_id: &str, spec: &GuestSpec) -> Option<Box<dyn JobGroup>> {
        if !self.containment.has_cgroups() {
            return None;
        }
        let limits = GroupLimits {
            pids_max: self.config.max_processes,
            memory_max_bytes: spec
                .mem_mib
                .saturating_add(self.config.mem_margin_mib)
                .saturating_mul(1024 * 1024),
        };
        match self.containment.create(job_id, limits) {
            Ok(g) => Some(g),
            Err(e) => {
                tracing::warn!(job = job_id, error = %e, "cannot make the job's cgroup");
                None
            }
        }
    }

    /// Forks the guest on the launcher thread: its limits, ids, namespaces,
    /// view and Landlock ruleset, and its group joined before `exec`.
    fn fork(
        &self,
        job_id: &str,
        spec: &GuestSpec,
        staged: &Staged,
        ids: Option<Ids>,
        plan: &mut SandboxPlan,
    ) -> io::Result<Child> {
        let mut join_fds = [-1; launch::MAX_JOIN_FDS];
        if let Some(g) = &staged.group {
            for (slot, fd) in join_fds.iter_mut().zip(g.join_fds()) {
                *slot = fd;
            }
        }
        let setup = ChildSetup {
            join_fds,
            limits: limits(&self.config, spec),
            start_nice: BACKGROUND_NICE,
            ids,
            unshare_flags: plan.unshare_flags,
            landlock_fd: plan.landlock.as_ref().map(|r| r.raw_fd()),
            parent_pid: std::process::id() as libc::pid_t,
            view: plan.view.take().map(Arc::new),
            node_strings: launch::NodeStrings::of_this_process(),
        };
        let mut command = Command::new(&spec.argv[0]);
        command
            .args(&spec.argv[1..])
            .env_clear()
            .envs(guest_env(job_id, guest_work(&staged.work_dir, spec), spec))
            .current_dir(&staged.work_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: `ChildSetup::apply` makes plain system calls and allocates nothing.
        unsafe {
            command.pre_exec(move || setup.apply());
        }
        self.launcher.spawn(command)
    }

    fn start_captures(
        &self,
        child: &mut Child,
        job_id: &str,
        dir: &Path,
        spec: &GuestSpec,
    ) -> io::Result<(Capture, Capture)> {
        let cap = spec.max_output_bytes;
        let (clock, sink, job) = (self.clock.clone(), self.sink.clone(), job_id.to_string());
        let on_truncate: Arc<dyn Fn(Stream) + Send + Sync> = Arc::new(move |stream| {
            sink.record(GuestEvent {
                at: clock.now(),
                job_id: job.clone(),
                kind: GuestEventKind::OutputTruncated {
                    stream,
                    cap_bytes: cap,
                },
            })
        });
        let missing = || io::Error::other("the guest's output pipe is missing");
        let out = child.stdout.take().ok_or_else(missing)?;
        let err = child.stderr.take().ok_or_else(missing)?;
        let stdout = Capture::start(out, dir, Stream::Stdout, cap, on_truncate.clone())?;
        let stderr = Capture::start(err, dir, Stream::Stderr, cap, on_truncate)?;
        Ok((stdout, stderr))
    }

    /// Records the guest's group in the pid file, so that the next start
    /// of a node that crashed kills it.
    fn record_pid(&self, job_id: &str, pid: i32) {
        let record = orphan::GuestRecord {
            job_id: job_id.to_string(),
            pgid: pid,
            starttime: procfs::read_stat(pid).map_or(0, |s| s.starttime),
            boot_id: procfs::boot_id(),
        };
        if let Err(e) = orphan::write(&self.config.pid_file(), &record) {
            tracing::warn!(error = %e, "cannot write the guest pid file; an orphan would survive a crash");
        }
    }

    /// The thread that snapshots the checkpoint file while the guest runs,
    /// when it checkpoints.
    fn watch_checkpoint(
        &self,
        job_id: &str,
        spec: &GuestSpec,
        handle: &GuestHandle,
        quota: Option<&quota::WorkMount>,
    ) -> Option<checkpoint::Watcher> {
        spec.checkpoint.clone().and_then(|plan| {
            // The node reads the work dir through the tmpfs's descriptor when
            // the mount left its table, else by its path.
            let root = match quota.and_then(|q| q.root()) {
                Some(r) => r,
                None => std::fs::File::open(&handle.work_dir),
            };
            let parts = root.map(|root| checkpoint::WatchParts {
                job_id: job_id.to_string(),
                plan,
                root,
                job_dir: handle.dir.clone(),
                clock: self.clock.clone(),
                sink: self.sink.clone(),
            });
            match parts.and_then(checkpoint::Watcher::start) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(job = job_id, error = %e, "cannot watch the job's checkpoint");
                    None
                }
            }
        })
    }
}

/// How the CPU limit is enforced for a job: a cgroup quota where its group
/// takes one, else a SIGSTOP/SIGCONT duty cycle; off at 100 %.
fn limit_cpu(job_id: &str, limit: u64, group: Option<&dyn JobGroup>) -> ThrottleMode {
    if limit >= 100 {
        return ThrottleMode::Off;
    }
    if let Some(g) = group {
        match g.limit_cpu(limit) {
            Ok(()) => return ThrottleMode::Cgroup(limit),
            Err(e) => tracing::info!(
                job = job_id,
                error = %e,
                "no cgroup CPU quota; the limit is a SIGSTOP/SIGCONT duty cycle"
            ),
        }
    }
    ThrottleMode::DutyCycle(limit)
}

/// The SIGSTOP/SIGCONT cycle of a job whose CPU limit has no cgroup quota.
fn start_duty_cycle(
    job_id: &str,
    throttle: ThrottleMode,
    group: &Option<Box<dyn JobGroup>>,
    leader: i32,
    pid: i32,
) -> Option<throttle::DutyCycle> {
    let ThrottleMode::DutyCycle(percent) = throttle else {
        return None;
    };
    let members_of = group_member_reader(group);
    let signal = move |run: bool| {
        let sig = if run {
            Signal::SIGCONT
        } else {
            Signal::SIGSTOP
        };
        let _ = signal_tree(leader, pid, &members_of(), sig);
    };
    match throttle::DutyCycle::start(percent, signal) {
        Ok(d) => Some(d),
        Err(e) => {
            tracing::warn!(job = job_id, error = %e, "cannot start the CPU duty cycle");
            None
        }
    }
}

/// The first child of `pid` (the kernel lists children in the order they came).
fn first_child(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Checks what the type of the job id does not already guarantee.
fn validate(spec: &GuestSpec) -> Result<(), StartError> {
    if spec.argv.is_empty() || spec.argv[0].is_empty() {
        return Err(StartError::EmptyArgv);
    }
    for text in &spec.argv {
        if text.contains('\0') {
            return Err(StartError::InvalidText(text.clone()));
        }
    }
    for (name, _) in &spec.inputs {
        if !RelPath::is_valid(name) {
            return Err(StartError::InvalidText(format!("input path {name}")));
        }
    }
    if let Some(c) = spec
        .checkpoint
        .as_ref()
        .filter(|c| !RelPath::is_valid(&c.path))
    {
        return Err(StartError::InvalidText(format!(
            "checkpoint path {}",
            c.path
        )));
    }
    for (name, value) in &spec.env {
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(StartError::InvalidText(format!("{name}={value}")));
        }
    }
    Ok(())
}

/// Makes `dir` (the supervisor's) and `work_dir` (the guest's) fresh.
fn make_job_dir(dir: &Path, work_dir: &Path, ids: Option<Ids>) -> Result<(), StartError> {
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StartError::JobDir { path, source }
    };
    std::fs::create_dir(dir).map_err(fail(dir))?;
    std::fs::create_dir(work_dir).map_err(fail(work_dir))?;
    std::fs::set_permissions(work_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(fail(work_dir))?;
    if let Some(ids) = ids {
        std::os::unix::fs::chown(work_dir, Some(ids.uid), Some(ids.gid)).map_err(fail(work_dir))?;
    }
    Ok(())
}

/// Writes the job's input files into its work directory, owned by the guest.
fn write_inputs(
    work_dir: &Path,
    inputs: &[(String, PathBuf)],
    ids: Option<Ids>,
) -> Result<(), StartError> {
    for (name, source) in inputs {
        let path = work_dir.join(name);
        let fail = |source| StartError::JobDir {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| *p != work_dir) {
            std::fs::create_dir_all(parent).map_err(fail)?;
            if let Some(ids) = ids {
                let mut dir = parent;
                while dir != work_dir {
                    std::os::unix::fs::chown(dir, Some(ids.uid), Some(ids.gid)).map_err(fail)?;
                    let Some(up) = dir.parent() else { break };
                    dir = up;
                }
            }
        }
        if std::fs::rename(source, &path).is_err() {
            std::fs::copy(source, &path).map_err(fail)?;
        }
        if let Some(ids) = ids {
            std::os::unix::fs::chown(&path, Some(ids.uid), Some(ids.gid)).map_err(fail)?;
        }
    }
    Ok(())
}

fn limits(config: &GuestConfig, spec: &GuestSpec) -> [Limit; launch::LIMIT_COUNT] {
    let mib = 1024 * 1024;
    let address_space = spec
        .mem_mib
        .saturating_add(config.mem_headroom_mib)
        .saturating_mul(mib);
    // Round up so a sub-second limit is not zero (which would mean "none left").
    let cpu = spec.cpu_time_limit.as_secs() + u64::from(spec.cpu_time_limit.subsec_nanos() > 0);
    let cpu = cpu.max(1);
    let same = |resource, value| Limit {
        resource,
        soft: value,
        hard: value,
    };
    [
        same(libc::RLIMIT_AS, address_space),
        Limit {
            resource: libc::RLIMIT_CPU,
            soft: cpu,
            hard: cpu + 2,
        },
        same(libc::RLIMIT_FSIZE, config.max_file_bytes),
        same(libc::RLIMIT_NOFILE, config.max_open_files),
        same(libc::RLIMIT_CORE, 0),
    ]
}

/// The work dir as the guest sees it: where its image shows it, else at
/// its own path.
fn guest_work<'a>(work_dir: &'a Path, spec: &'a GuestSpec) -> &'a Path {
    spec.image
        .as_ref()
        .map_or(work_dir, |i| i.work_dir.as_path())
}

/// The guest's whole environment: a few fixed variables plus the spec's.
fn guest_env(job_id: &str, work_dir: &Path, spec: &GuestSpec) -> BTreeMap<String, String> {
    let work = work_dir.to_string_lossy().into_owned();
    let mut env: BTreeMap<String, String> = [
        ("PATH", GUEST_PATH.to_string()),
        ("HOME", work.clone()),
        ("TMPDIR", work),
        ("LANG", "C.UTF-8".to_string()),
        ("GLEANER_JOB_ID", job_id.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(spec.env.iter().cloned());
    // After the job's own: a job cannot point the node's variables elsewhere.
    if let Some(c) = &spec.checkpoint {
        env.extend(c.env(work_dir));
    }
    env
}
