//! The guest's side of the host loop: each reading recorded and judged
//! (the state the guest sees, S4 below its declared memory), the policy's
//! actions applied to the supervisor, a guest started when the admission
//! rule lets it, its events logged and passed on, its end noticed.
//!
//! The decisions are the model's (`model::policy::decide`,
//! `model::admit::admit`); this module applies them. It must not know how a
//! guest is sandboxed (`guest`), HTTP (`control`) nor peers' jobs
//! (`pool_host`).

use super::engine::HostLoop;
use super::messages::{guest_spec, GuestStart};
use super::HostError;
use crate::guest::{
    GuestAction, GuestEvent, GuestEventKind, GuestHandle, GuestRunState, KillCause, StartError,
};
use crate::history::store::JobEvent;
use crate::model::admit::{admit, GuestAsk};
use crate::model::ids::JobId;
use crate::model::policy::decide;
use crate::model::series::Sample;
use crate::model::state::State;
use crate::monitor::MonitorReading;

impl HostLoop {
    pub(super) fn on_reading(&mut self, r: MonitorReading) {
        self.check_owner_rules();
        let store = &mut self.parts.store;
        if !store.is_paused() && store.withheld().is_none() && self.recorded_state != Some(r.state)
        {
            match store.record_transition(r.time, r.state) {
                Ok(()) => self.recorded_state = Some(r.state),
                Err(e) => tracing::error!(error = %e, "cannot record a state transition"),
            }
            tracing::info!(state = %r.state, cpu = r.cpu, free_mib = r.free_mib, "host state");
        }
        let sample = Sample {
            time: r.time,
            cpu: r.cpu,
            free_mib: r.free_mib,
            up: true,
        };
        if let Err(e) = store.record_sample(&sample) {
            tracing::error!(error = %e, "cannot record a sample");
        }
        // A new hour or local date: the next answers prepared off the loop.
        self.reader.reading_at(r.time);
        self.last = Some(r);
        self.apply_policy();
        self.refresh_guest_roots();
    }

    /// The host's state as the running guest sees it: S4 when free memory is
    /// below the guest's declared working set, else the monitor's state.
    pub(super) fn guest_state(&self) -> Option<(State, bool)> {
        let r = self.last?;
        let th = self.parts.config.thresholds(self.guest_mem_mib);
        let state = if th.lacks_memory(r.free_mib) {
            State::S4
        } else {
            r.state
        };
        Some((state, r.suspending))
    }

    /// Applies policy actions until the policy is satisfied (at most two are
    /// needed: a resume and then a priority change).
    pub(super) fn apply_policy(&mut self) {
        if self.parts.store.is_paused() || self.parts.store.withheld().is_some() {
            if self.parts.supervisor.run_state() != GuestRunState::Idle {
                self.kill_guest(KillCause::Revocation);
            }
            return;
        }
        let Some((state, suspending)) = self.guest_state() else {
            return;
        };
        for _ in 0..3 {
            let current = self.parts.supervisor.run_state();
            let Some(action) = decide(state, suspending, current) else {
                break;
            };
            tracing::debug!(?action, %state, suspending, "guest policy");
            if let Err(e) = self.parts.supervisor.apply(action) {
                tracing::warn!(error = %e, ?action, "cannot apply the guest policy");
                break;
            }
        }
    }

    pub(super) fn kill_guest(&mut self, cause: KillCause) {
        if let Err(e) = self.parts.supervisor.apply(GuestAction::Kill(cause)) {
            tracing::warn!(error = %e, %cause, "cannot kill the guest");
        }
    }

    /// Tells the monitor which processes are the guest's, so their CPU is
    /// not counted as the owner's. Session and group members are included,
    /// so a guest that daemonizes is still left out.
    pub(super) fn refresh_guest_roots(&mut self) {
        let tree = self.parts.supervisor.process_scope();
        self.parts.guest_roots.send_if_modified(|roots| {
            if *roots == tree {
                false
            } else {
                *roots = tree;
                true
            }
        });
    }

    pub(super) fn poll_guest(&mut self) {
        if self.parts.supervisor.poll_exit().is_some() {
            self.guest_ended();
        }
    }

    pub(super) fn guest_ended(&mut self) {
        self.guest_mem_mib = 0;
        self.guest_live = None;
        self.refresh_guest_roots();
        if let Some(for_secs) = self.pause_after_job.take() {
            match self.pause(for_secs) {
                Ok(_) => tracing::info!("the guest finished; paused as asked (--after-job)"),
                Err(e) => tracing::error!(error = %e, "cannot pause after the job"),
            }
        }
    }

    pub(super) fn on_guest_event(&mut self, e: GuestEvent) {
        let detail = serde_json::to_string(&e.kind).unwrap_or_default();
        let entry = JobEvent {
            time: e.at.as_second(),
            job: e.job_id.clone(),
            kind: event_name(&e.kind).to_string(),
            detail,
        };
        if let Err(err) = self.parts.store.record_job_event(&entry) {
            tracing::error!(error = %err, "cannot write the job log");
        }
        tracing::info!(job = %e.job_id, kind = entry.kind, "guest event");
        if let Some(pool) = &self.parts.to_pool {
            let _ = pool.send(e.clone());
        }
        // Nobody listening is fine.
        let _ = self.events.send(e);
    }

    /// Starts a guest if the admission rule lets it start now.
    pub(super) fn start_guest(&mut self, start: GuestStart) -> Result<GuestHandle, HostError> {
        let ask = GuestAsk {
            origin: start.origin,
            mem_mib: start.job.mem_mib,
            max_mem_mib: self.parts.config.guest.max_mem_mib,
        };
        admit(&self.admission_facts(), &ask)?;
        let job_id = match start.job_id {
            Some(id) => id,
            None => {
                self.local_jobs_started += 1;
                JobId::new(format!("local-{}-{}", self.now(), self.local_jobs_started))
                    .map_err(|e| HostError::Internal(e.to_string()))?
            }
        };
        let mem_mib = start.job.mem_mib;
        let spec = guest_spec(&self.parts.config, start.job);
        let handle = self
            .parts
            .supervisor
            .start(&job_id, spec)
            .map_err(|e| match e {
                StartError::Busy { job_id } => HostError::Busy { job_id },
                // A command that does not exist or may not run is the
                // request's fault, not the node's.
                StartError::Spawn(ref io)
                    if matches!(
                        io.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                    ) =>
                {
                    HostError::Invalid(format!("argv[0]: {e}"))
                }
                StartError::Spawn(_) | StartError::JobDir { .. } => {
                    HostError::Internal(e.to_string())
                }
                _ => HostError::Invalid(e.to_string()),
            })?;
        self.guest_mem_mib = mem_mib;
        self.guest_live = Some(job_id);
        self.refresh_guest_roots();
        // Judge the new guest by the last reading at once, not at the next sample.
        self.apply_policy();
        Ok(handle)
    }
}

/// The job-log kind of a guest event.
fn event_name(kind: &GuestEventKind) -> &'static str {
    match kind {
        GuestEventKind::Started { .. } => "started",
        GuestEventKind::Reniced { .. } => "reniced",
        GuestEventKind::NiceNotLowered { .. } => "nice_not_lowered",
        GuestEventKind::Suspended => "suspended",
        GuestEventKind::Resumed => "resumed",
        GuestEventKind::KillSent { .. } => "killed",
        GuestEventKind::TermSent { .. } => "term_sent",
        GuestEventKind::Usage { .. } => "usage",
        GuestEventKind::Checkpointed { .. } => "checkpointed",
        GuestEventKind::CheckpointRefused { .. } => "checkpoint_refused",
        GuestEventKind::Exited { .. } => "exited",
        GuestEventKind::OutputTruncated { .. } => "output_truncated",
        GuestEventKind::OrphanKilled { .. } => "orphan_killed",
        GuestEventKind::LeftoverGroupKilled { .. } => "leftover_group_killed",
    }
}
