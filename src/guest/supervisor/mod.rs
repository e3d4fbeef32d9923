//! The guest supervisor: runs at most one guest process and carries out the
//! policy's actions on it (renice, suspend, resume, kill).
//!
//! This file owns the [`Supervisor`] and the state of its one [`Guest`]:
//! creating the supervisor (the orphan and leftover-group sweep, the probes
//! of what this kernel allows), the read-only views of the guest (`status`,
//! `run_state`, `process_scope`, `containment`), and the stop of the node.
//! Its children hold the rest of its work, one job each: [`start`] (how a
//! guest is started), [`actions`] (how a policy action reaches it) and
//! [`ending`] (how its end is seen and finished).
//!
//! It must not know about sled, libp2p, tokio or the monitor: the node
//! drives it through [`Supervisor::start`], [`Supervisor::apply`] and
//! [`Supervisor::poll_exit`] and receives timestamped [`GuestEvent`]s
//! through an [`EventSink`].

mod actions;
mod ending;
mod start;

use super::capture::Capture;
use super::checkpoint::{self, CheckpointPlan};
use super::containment::{self, Containment, ContainmentReport, JobGroup};
use super::event::{Clock, EventSink, ExitInfo, GuestEvent, GuestEventKind};
use super::launch::Launcher;
use super::sandbox::Layers;
use super::throttle::{self, ThrottleMode};
use super::{
    landlock, orphan, procfs, quota, GuestConfig, GuestHandle, GuestPhase, GuestStatus,
    SupervisorError,
};
use crate::model::ids::JobId;
use crate::model::policy::{GuestAction, GuestRunState, KillCause};
use ending::end_job;
use jiff::Timestamp;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The running (or last) guest.
#[derive(Debug)]
struct Guest {
    handle: GuestHandle,
    started_at: Timestamp,
    wall_limit: Duration,
    run_state: GuestRunState,
    nice_not_lowered: bool,
    kill_cause: Option<KillCause>,
    exit: Option<ExitInfo>,
    stdout: Capture,
    stderr: Capture,
    /// The job's cgroup(s), when this node can make them.
    group: Option<Box<dyn JobGroup>>,
    /// The process the launcher forked: the guest itself, or, in a PID
    /// namespace, its keeper (whose descendants are the whole job).
    leader: i32,
    /// The work dir's tmpfs and its size, while mounted.
    quota: Option<quota::WorkMount>,
    /// How the first process ended, while the end is being finished.
    pending_exit: Option<ExitInfo>,
    /// Until when the end waits for stdout and stderr to be written out
    /// (set with `pending_exit`): the pipes close with the job's last
    /// process, but their capture threads may not have written the last
    /// bytes yet, and a consumer that fetched then would land an empty or
    /// short output under a matching hash (issue 30, finding 6).
    captures_until: Option<std::time::Instant>,
    /// Removing the job's group and saving its work dir off the loop.
    ending: Option<JoinHandle<()>>,
    /// How the CPU limit is enforced for this job.
    throttle: ThrottleMode,
    /// The SIGSTOP/SIGCONT cycle, when the limit has no cgroup quota.
    duty: Option<throttle::DutyCycle>,
    /// The checkpoint order, when the guest checkpoints.
    checkpoint: Option<CheckpointPlan>,
    /// The thread that snapshots the checkpoint file while the guest runs.
    watcher: Option<checkpoint::Watcher>,
    /// SIGTERM was sent (a kill with grace): SIGKILL follows at this instant
    /// unless the guest is gone by then.
    term_deadline: Option<std::time::Instant>,
    /// CPU time of the job's processes, from the keeper's rusage once reaped.
    cpu_time: Option<Duration>,
    /// The image the guest runs in, kept from eviction until its end is
    /// reported (issue 31).
    image: Option<crate::image::ImageLease>,
}

impl Guest {
    /// Members of the job's group beyond its tree (escapees included).
    fn group_members(&self) -> Vec<i32> {
        self.group.as_ref().map(|g| g.members()).unwrap_or_default()
    }

    fn pgid(&self) -> i32 {
        self.handle.pid
    }

    /// The root of the job's process tree.
    fn tree_root(&self) -> i32 {
        self.leader
    }

    fn is_running(&self) -> bool {
        self.exit.is_none()
    }
}

/// Runs at most one guest and applies policy actions to it.
pub struct Supervisor {
    config: GuestConfig,
    clock: Arc<dyn Clock>,
    sink: Arc<dyn EventSink>,
    launcher: Launcher,
    guest: Option<Guest>,
    containment: Containment,
    /// What this kernel lets a guest have, probed once at start-up.
    layers: Layers,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("config", &self.config)
            .field("guest", &self.guest)
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Creates the job directory root and kills a guest group that a previous
    /// run of the node left behind (recorded in the pid file).
    pub fn new(
        config: GuestConfig,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn EventSink>,
    ) -> Result<Supervisor, SupervisorError> {
        let jobs = config.jobs_dir();
        std::fs::create_dir_all(&jobs).map_err(|source| SupervisorError::DataDir {
            path: jobs.clone(),
            source,
        })?;
        let pid_file = config.pid_file();
        if let Some(record) = orphan::read(&pid_file) {
            if orphan::kill_if_live(&record) {
                tracing::warn!(pgid = record.pgid, job = %record.job_id, "killed an orphaned guest");
                sink.record(GuestEvent {
                    at: clock.now(),
                    job_id: record.job_id.clone(),
                    kind: GuestEventKind::OrphanKilled { pgid: record.pgid },
                });
            }
        }
        if let Err(e) = orphan::remove(&pid_file) {
            tracing::warn!(path = %pid_file.display(), error = %e, "cannot remove the guest pid file");
        }
        for point in quota::unmount_leftovers(&jobs) {
            tracing::warn!(dir = %point.display(), "unmounted a job's work dir left mounted");
        }
        let containment = if config.job_cgroups {
            Containment::detect(&containment::node_key(&config.data_dir))
        } else {
            Containment::disabled()
        };
        let layers = Layers::probe(&config);
        match &containment {
            Containment::None { reason } => {
                tracing::warn!(%reason, "guest jobs get no cgroup; a PID namespace must hold them")
            }
            c => tracing::info!(kind = c.kind(), "guest jobs are contained in cgroups"),
        }
        let launcher = Launcher::new().map_err(SupervisorError::Launcher)?;
        let supervisor = Supervisor {
            config,
            clock,
            sink,
            launcher,
            guest: None,
            containment,
            layers,
        };
        supervisor.kill_leftover_groups();
        Ok(supervisor)
    }

    /// Kills and removes every job group an earlier run or job left.
    fn kill_leftover_groups(&self) {
        for (name, processes) in self.containment.kill_leftovers() {
            if processes > 0 {
                tracing::warn!(group = %name, processes, "killed a job group left behind");
                self.sink.record(GuestEvent {
                    at: self.clock.now(),
                    job_id: name,
                    kind: GuestEventKind::LeftoverGroupKilled { processes },
                });
            }
        }
    }

    /// Which containment layers a guest started now gets, for `status`.
    pub fn containment(&self) -> ContainmentReport {
        let mut namespaces = Vec::new();
        if self.layers.view {
            namespaces.extend(
                [
                    "user",
                    "mount",
                    "pid",
                    "ipc",
                    "net (when the job has no network)",
                ]
                .map(String::from),
            );
        } else if self.layers.netns {
            namespaces
                .extend(["user", "ipc", "net (when the job has no network)"].map(String::from));
        }
        let view = if self.layers.view {
            "narrow: system dirs, devices, own /proc and the work dir (mount namespace)"
        } else if landlock::abi_version().is_some() {
            "system dirs and the work dir readable (Landlock read rules); Unix sockets not hidden"
        } else {
            "whole filesystem readable; writes not confined"
        };
        ContainmentReport {
            cgroup: self.containment.kind().to_string(),
            group_controls: self.containment.controls(),
            no_cgroup_reason: match &self.containment {
                Containment::None { reason } => Some(reason.clone()),
                _ => None,
            },
            namespaces,
            view: view.into(),
            landlock_abi: landlock::abi_version(),
            work_quota_bytes: self
                .layers
                .quota
                .then(|| self.config.disk_mib.saturating_mul(1024 * 1024)),
        }
    }

    /// How `cpu_limit_percent` is enforced: for the running guest, how it
    /// is; with none, how it would be for the next.
    pub fn throttle_mode(&self) -> ThrottleMode {
        if let Some(g) = self.guest.as_ref().filter(|g| g.is_running()) {
            return g.throttle;
        }
        let limit = self.config.cpu_limit_percent;
        if limit >= 100 {
            ThrottleMode::Off
        } else if self.containment.cpu_quota() {
            ThrottleMode::Cgroup(limit)
        } else {
            ThrottleMode::DutyCycle(limit)
        }
    }

    /// The current (or last) guest's status; `None` if none was started.
    pub fn status(&mut self) -> Option<GuestStatus> {
        let g = self.guest.as_mut()?;
        let stat = g
            .is_running()
            .then(|| procfs::read_stat(g.handle.pid))
            .flatten();
        let phase = match (&g.exit, &stat) {
            (Some(_), _) => GuestPhase::Exited,
            (None, Some(s)) if matches!(s.state, 'T' | 't') => GuestPhase::Stopped,
            (None, _) => GuestPhase::Running,
        };
        Some(GuestStatus {
            job_id: g.handle.job_id.clone(),
            pid: g.handle.pid,
            started_at: g.started_at,
            phase,
            nice: stat.map(|s| s.nice),
            run_state: g.run_state,
            nice_not_lowered: g.nice_not_lowered,
            exit: g.exit,
            kill_cause: g.kill_cause,
            stdout: g.stdout.poll(),
            stderr: g.stderr.poll(),
        })
    }

    /// The directory a job with this id gets (`stdout`, `stderr`, `work/`).
    pub fn job_dir(&self, job_id: &JobId) -> PathBuf {
        self.config.jobs_dir().join(job_id.as_str())
    }

    /// The directory holding every job's directory.
    pub fn jobs_dir(&self) -> PathBuf {
        self.config.jobs_dir()
    }

    /// What the policy needs to know about the guest for `decide`.
    pub fn run_state(&self) -> GuestRunState {
        self.guest
            .as_ref()
            .filter(|g| g.is_running())
            .map_or(GuestRunState::Idle, |g| g.run_state)
    }

    /// Where the guest's processes are, for the monitor to resolve once per
    /// sample and subtract their CPU from the host load. Cheap: it walks nothing.
    pub fn process_scope(&self) -> procfs::ProcessScope {
        match self.guest.as_ref().filter(|g| g.is_running()) {
            Some(Guest {
                group: Some(group), ..
            }) => procfs::ProcessScope::Cgroup(group.procs_files()),
            Some(g) => procfs::ProcessScope::Tree {
                root: g.tree_root(),
                whole_session: true,
            },
            None => procfs::ProcessScope::Nothing,
        }
    }

    /// The pids of every live process of the guest (main process,
    /// descendants, group and session members). Empty when no guest runs.
    pub fn process_tree(&self) -> Vec<i32> {
        self.process_scope().pids()
    }

    fn emit(&self, job_id: &str, kind: GuestEventKind) {
        self.sink.record(GuestEvent {
            at: self.clock.now(),
            job_id: job_id.to_string(),
            kind,
        });
    }
}

impl Drop for Supervisor {
    /// The node is going away (S5): the guest must not outlive it.
    fn drop(&mut self) {
        if self.guest.as_ref().is_some_and(|g| g.is_running()) {
            let _ = self.apply(GuestAction::Kill(KillCause::Revocation));
            self.wait_exit(Duration::from_secs(2));
        }
        if let Some(guest) = self.guest.as_mut() {
            if let Some(thread) = guest.ending.take() {
                let _ = thread.join();
            }
            // A guest that did not end in time (a loaded machine): its group
            // and work dir are finished here, blocking, as the node goes.
            let (group, quota) = (guest.group.take(), guest.quota.take());
            end_job(guest.handle.job_id.as_str(), group, quota);
        }
        // A clean stop leaves no cgroup of this node behind.
        self.containment.remove_base();
    }
}
