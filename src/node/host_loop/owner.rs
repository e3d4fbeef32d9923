//! The owner's will in the host loop: `pause` (now, timed, or once the
//! running guest finishes) and `resume`, a timed pause restored after a
//! restart, and the owner's rules — the schedule of `[owner] hours` and the
//! battery — judged every few seconds, withholding the machine (S5 with its
//! cause) and killing the guest when they say so.
//!
//! The rules themselves are the model's (`model::owner`: the schedule, the
//! pause's bound, why no guest runs); this module applies them to the store
//! and the supervisor. It must not know HTTP (`control`) nor the wire (`net`).

use super::engine::HostLoop;
use super::messages::PauseOutcome;
use super::HostError;
use crate::guest::{GuestPhase, GuestRunState, KillCause};
use crate::model::owner::{
    check_pause, why_idle, IdleFacts, IdleReason, OnBattery, S5Cause, Schedule, MAX_PAUSE_SECS,
};
use std::time::Duration;
use tokio::time::Instant;

impl HostLoop {
    /// Why no guest runs now (`None` while one runs).
    pub(super) fn why_idle(&self) -> Option<IdleReason> {
        why_idle(IdleFacts {
            guests_enabled: self.parts.config.guest.enabled,
            paused: self.parts.store.is_paused(),
            withheld: self.parts.store.withheld(),
            state: self.guest_state().map(|(s, _)| s),
            guest_running: self.guest_live.is_some(),
        })
    }

    /// What the schedule and the battery say now: the cause to withhold
    /// the machine for, or `None` to lend it.
    pub(super) fn owner_rules_withhold(&self) -> Option<S5Cause> {
        let now = self.parts.clock.now();
        if !schedule_allows(&self.schedule, &self.time_zone, now) {
            return Some(S5Cause::Schedule);
        }
        if self.parts.config.owner.on_battery == OnBattery::Pause
            && crate::monitor::power::on_battery(&self.parts.power_supply_dir)
        {
            return Some(S5Cause::Battery);
        }
        None
    }

    /// Withholds or lends the machine as the schedule and the battery say:
    /// an S5 with the cause is recorded when the node withholds itself, the
    /// running guest is killed (revocation), and the first sample after the
    /// end records the state again.
    pub(super) fn check_owner_rules(&mut self) {
        let wanted = self.owner_rules_withhold();
        let current = self.parts.store.withheld();
        let guest_running = self.parts.supervisor.run_state() != GuestRunState::Idle;
        let Some(change) = withholding_change(current, wanted, guest_running) else {
            return;
        };
        let now = self.now();
        if change.release {
            if let Err(e) = self.parts.store.release() {
                tracing::error!(error = %e, "cannot end the withholding");
            }
            self.recorded_state = None;
            tracing::info!(cause = ?current, "the owner's rules lend the machine again");
        }
        if let Some(cause) = change.withhold {
            match self.parts.store.withhold(now, cause) {
                Ok(_) => {
                    self.recorded_state = None;
                    tracing::info!(%cause, "the owner's rules withhold the machine (S5)");
                }
                Err(e) => tracing::error!(error = %e, %cause, "cannot record the withholding"),
            }
        }
        if change.kill_guest {
            self.kill_guest(KillCause::Revocation);
        }
    }

    /// A timed pause survives a restart: the store keeps its end. One that
    /// ran out while the node was off ends now; one still running gets its
    /// timer back.
    pub(super) fn restore_pause(&mut self) {
        if !self.parts.store.is_paused() {
            return;
        }
        let Some(until) = self.parts.store.pause_until() else {
            return;
        };
        let left = until.saturating_sub(self.now());
        if left <= 0 {
            if let Err(e) = self.resume() {
                tracing::error!(error = %e, "cannot end a pause that ran out while the node was off");
            }
            return;
        }
        let left = u64::try_from(left)
            .unwrap_or(MAX_PAUSE_SECS)
            .min(MAX_PAUSE_SECS);
        let deadline = Instant::now().checked_add(Duration::from_secs(left));
        self.pause_until = deadline.map(|d| (until, d));
        tracing::info!(until, "still paused by the owner (S5) until the saved end");
    }

    /// Pauses now (a plain `pause` also drops a waiting `--after-job`).
    pub(super) fn pause(&mut self, for_secs: Option<u64>) -> Result<PauseOutcome, HostError> {
        check_pause(for_secs)?;
        self.pause_after_job = None;
        let now = self.now();
        // Both ends are computed (and bounded) before anything is saved, so a
        // refused pause leaves no trace.
        let until = for_secs.and_then(|secs| {
            let at = Instant::now().checked_add(Duration::from_secs(secs))?;
            Some((now.saturating_add(i64::try_from(secs).ok()?), at))
        });
        if for_secs.is_some() && until.is_none() {
            return Err(HostError::Invalid("the pause's end is out of range".into()));
        }
        let changed = self
            .parts
            .store
            .pause(now, until.map(|u| u.0))
            .map_err(|e| HostError::Internal(e.to_string()))?;
        self.recorded_state = None;
        let killed_job = match self.parts.supervisor.status() {
            Some(s) if s.phase != GuestPhase::Exited => {
                self.kill_guest(KillCause::Revocation);
                Some(s.job_id)
            }
            _ => None,
        };
        self.pause_until = until;
        tracing::info!(until = ?self.pause_until.map(|p| p.0), "paused by the owner (S5)");
        Ok(PauseOutcome {
            paused: true,
            changed,
            until: self.pause_until.map(|p| p.0),
            killed_job,
            after_job: None,
        })
    }

    /// `pause --after-job`: with a guest running, remember to pause when it
    /// ends (and start no other meanwhile); with none, pause now.
    pub(super) fn pause_when_the_guest_ends(
        &mut self,
        for_secs: Option<u64>,
    ) -> Result<PauseOutcome, HostError> {
        check_pause(for_secs)?;
        let running = self
            .parts
            .supervisor
            .status()
            .filter(|s| s.phase != GuestPhase::Exited && self.guest_live.is_some());
        match running {
            Some(guest) if !self.parts.store.is_paused() => {
                self.pause_after_job = Some(for_secs);
                tracing::info!(job = %guest.job_id, "pausing once the running guest finishes");
                Ok(PauseOutcome {
                    paused: false,
                    changed: true,
                    until: None,
                    killed_job: None,
                    after_job: Some(guest.job_id),
                })
            }
            _ => self.pause(for_secs),
        }
    }

    pub(super) fn resume(&mut self) -> Result<PauseOutcome, HostError> {
        let changed = self
            .parts
            .store
            .resume(self.now())
            .map_err(|e| HostError::Internal(e.to_string()))?;
        self.pause_until = None;
        self.recorded_state = None;
        let changed = changed || self.pause_after_job.take().is_some();
        if changed {
            tracing::info!("resumed by the owner");
        }
        Ok(PauseOutcome {
            paused: false,
            changed,
            until: None,
            killed_job: None,
            after_job: None,
        })
    }
}

/// What the store and the guest must do when the owner's rules change their
/// mind, in this order: end the old withholding, record the new one (an S5
/// with its cause), kill the guest (revocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
struct Withholding {
    release: bool,
    withhold: Option<S5Cause>,
    kill_guest: bool,
}

/// The change from withholding for `current` to withholding for `wanted`
/// (`None`: lending the machine); `None` when nothing changes.
fn withholding_change(
    current: Option<S5Cause>,
    wanted: Option<S5Cause>,
    guest_running: bool,
) -> Option<Withholding> {
    (current != wanted).then_some(Withholding {
        release: current.is_some(),
        withhold: wanted,
        kill_guest: wanted.is_some() && guest_running,
    })
}

/// Whether `schedule` lends the machine at `now`, judged in the owner's
/// civil time in `tz` (so "18:00" stays 18:00 across a DST change).
pub fn schedule_allows(schedule: &Schedule, tz: &jiff::tz::TimeZone, now: jiff::Timestamp) -> bool {
    schedule.allows(now.to_zoned(tz.clone()).datetime())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::tz::TimeZone;

    fn ts(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_owners_rules_change_the_withholding_only_when_their_cause_changes() {
        use S5Cause::{Battery, Schedule as Hours};
        for running in [false, true] {
            assert_eq!(withholding_change(None, None, running), None);
            assert_eq!(withholding_change(Some(Hours), Some(Hours), running), None);
        }
        let start = |running| withholding_change(None, Some(Hours), running);
        assert_eq!(
            start(true),
            Some(Withholding {
                release: false,
                withhold: Some(Hours),
                kill_guest: true
            })
        );
        assert_eq!(start(false).map(|c| c.kill_guest), Some(false));
        assert_eq!(
            withholding_change(Some(Hours), None, true),
            Some(Withholding {
                release: true,
                withhold: None,
                kill_guest: false
            }),
            "lending again kills nothing"
        );
        assert_eq!(
            withholding_change(Some(Hours), Some(Battery), true),
            Some(Withholding {
                release: true,
                withhold: Some(Battery),
                kill_guest: true
            }),
            "a new cause ends the old one first"
        );
    }

    #[test]
    fn the_schedule_follows_the_owners_civil_time_across_dst_and_zones() {
        let s = Schedule::parse("Mon-Fri 18:00-08:30; Sat,Sun").unwrap();
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        // Friday 2026-03-27 17:30 UTC is 18:30 in Berlin (CET, +1): lent.
        assert!(schedule_allows(&s, &berlin, ts("2026-03-27T17:30:00Z")));
        // The clocks move on Sunday 29 March; Tuesday 31 at 06:45 UTC is
        // 08:45 CEST (+2): past 08:30, withheld, though it would be 07:45 in
        // winter; 06:15 UTC is 08:15, still Monday evening's range.
        assert!(!schedule_allows(&s, &berlin, ts("2026-03-31T06:45:00Z")));
        assert!(schedule_allows(&s, &berlin, ts("2026-03-31T06:15:00Z")));
        assert!(
            schedule_allows(&s, &berlin, ts("2026-01-13T06:45:00Z")),
            "07:45 CET in winter"
        );
        // The same instant in another zone: Monday 16:45 UTC is 18:45 in
        // Berlin (lent) and 11:45 in New York (withheld).
        let new_york = TimeZone::get("America/New_York").unwrap();
        assert!(schedule_allows(&s, &berlin, ts("2026-03-30T16:45:00Z")));
        assert!(!schedule_allows(&s, &new_york, ts("2026-03-30T16:45:00Z")));
    }
}
