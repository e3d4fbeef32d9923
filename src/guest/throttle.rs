//! `[guest] cpu_limit_percent` where the job has no cgroup CPU quota: a
//! duty cycle of SIGCONT and SIGSTOP on the guest's processes, run on its
//! own thread (never on the node's loop), every [`DUTY_PERIOD`].
//!
//! The policy's own suspension wins: while the supervisor holds the guest
//! suspended (S2 above Th2), the cycle sends no SIGCONT. Both sides take the
//! same lock around their signals, so a suspension never races a resume.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One on/off cycle of the duty cycle.
pub const DUTY_PERIOD: Duration = Duration::from_millis(100);

/// How the CPU limit is enforced, for `status` and the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", content = "percent")]
pub enum ThrottleMode {
    /// `cpu_limit_percent = 100`: no limit.
    #[default]
    Off,
    /// The job's cgroup quota (`cpu.max` or `cpu.cfs_quota_us`).
    Cgroup(u64),
    /// SIGSTOP/SIGCONT from the supervisor's duty-cycle thread.
    DutyCycle(u64),
}

impl std::fmt::Display for ThrottleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ThrottleMode::Off => f.write_str("off (cpu_limit_percent = 100)"),
            ThrottleMode::Cgroup(p) => write!(f, "{p}% of a core by the job's cgroup CPU quota"),
            ThrottleMode::DutyCycle(p) => {
                write!(
                    f,
                    "{p}% of a core by a SIGSTOP/SIGCONT duty cycle (no cgroup quota)"
                )
            }
        }
    }
}

/// What the duty-cycle thread and the supervisor share.
#[derive(Debug, Default)]
pub struct DutyShared {
    /// Held around every signal either side sends.
    pub lock: Mutex<()>,
    /// The policy suspended the guest: send no SIGCONT.
    pub suspended: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// A running duty cycle; dropping it stops the thread (and leaves the
/// guest running, unless the policy holds it suspended).
#[derive(Debug)]
pub struct DutyCycle {
    pub shared: Arc<DutyShared>,
    thread: Option<JoinHandle<()>>,
}

impl DutyCycle {
    /// Starts the cycle: `signal(true)` continues the guest, `signal(false)`
    /// stops it; on for `percent` of each period.
    pub fn start(
        percent: u64,
        signal: impl Fn(bool) + Send + 'static,
    ) -> std::io::Result<DutyCycle> {
        let shared = Arc::new(DutyShared::default());
        let on = DUTY_PERIOD.mul_f64(percent.min(100) as f64 / 100.0);
        let off = DUTY_PERIOD.saturating_sub(on);
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("guest-duty".into())
            .spawn(move || loop {
                if s.wait_stop(on) {
                    break;
                }
                {
                    let _g = s
                        .lock
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    signal(false);
                }
                if s.wait_stop(off) {
                    break;
                }
                let _g = s
                    .lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if !s.suspended.load(Ordering::Acquire) {
                    signal(true);
                }
            })?;
        Ok(DutyCycle {
            shared,
            thread: Some(thread),
        })
    }
}

impl DutyShared {
    /// Waits `d` or until stopped; true when stopped.
    fn wait_stop(&self, d: Duration) -> bool {
        let stop = self
            .stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (stop, _) = self
            .wake
            .wait_timeout_while(stop, d, |s| !*s)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *stop
    }
}

impl Drop for DutyCycle {
    fn drop(&mut self) {
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
