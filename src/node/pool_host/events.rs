//! A remote job's events on their way back to its consumer: which guest
//! events the consumer hears of, in which wire form, and the per-job sender
//! that delivers them in order and retries the end of a job longer than
//! progress. It must not know the Swarm beyond [`NetHandle`].

use std::time::Duration;

use libp2p::PeerId;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::guest::{ExitInfo, GuestEventKind, KillCause};
use crate::net::protocol::{GuestUsage, JobEventKind, JobRequest, WireState};
use crate::net::{NetError, NetHandle};

/// The wire event for a guest event, if the consumer needs to hear of it;
/// `usage` is what the guest used, sent with its end.
pub fn wire_event(kind: &GuestEventKind, usage: Option<GuestUsage>) -> Option<JobEventKind> {
    match kind {
        GuestEventKind::Checkpointed { size, hash } => Some(JobEventKind::Checkpointed {
            size: *size,
            hash: *hash,
        }),
        GuestEventKind::CheckpointRefused { reason } => Some(JobEventKind::CheckpointRefused {
            reason: reason.clone(),
        }),
        GuestEventKind::Started { .. } => Some(JobEventKind::Started),
        GuestEventKind::Reniced { nice, .. } if *nice > 0 => Some(JobEventKind::Reniced),
        GuestEventKind::Suspended => Some(JobEventKind::Suspended),
        GuestEventKind::Resumed => Some(JobEventKind::Resumed),
        GuestEventKind::Exited {
            cause: Some(KillCause::OverDeclaredMemory),
            ..
        } => Some(JobEventKind::KilledOverMemory),
        GuestEventKind::Exited {
            cause: Some(KillCause::Cancelled),
            ..
        } => Some(JobEventKind::Cancelled { usage }),
        GuestEventKind::Exited { cause: Some(c), .. } => Some(JobEventKind::Killed {
            cause: kill_state(*c),
            usage,
        }),
        GuestEventKind::Exited { exit, cause: None } => Some(JobEventKind::Finished {
            exit_status: match exit {
                ExitInfo::Code(c) => *c,
                ExitInfo::Signal(s) => 128 + s,
            },
            usage,
        }),
        _ => None,
    }
}

/// The failure state behind a kill; `None` for the wall-time limit (a
/// cancel has its own event, `Cancelled`).
fn kill_state(cause: KillCause) -> Option<WireState> {
    cause.state().map(WireState::from)
}

/// Starts the task that sends a job's events to its consumer one at a time,
/// in order, each retried a few times.
pub fn spawn_event_sender(
    net: NetHandle,
    consumer: PeerId,
    tracker: &TaskTracker,
) -> mpsc::UnboundedSender<JobRequest> {
    let (tx, mut rx) = mpsc::unbounded_channel::<JobRequest>();
    tracker.spawn(async move {
        while let Some(event) = rx.recv().await {
            let attempts = event_attempts(&event);
            for attempt in 0..attempts {
                match net.job_request(consumer, event.clone()).await {
                    Ok(_) => break,
                    // The node is shutting down: no retry can succeed.
                    Err(NetError::Stopped) => return,
                    Err(e) => {
                        tracing::debug!(%consumer, error = %e, attempt, "cannot send a job event");
                        if attempt + 1 < attempts {
                            tokio::time::sleep(event_retry_delay(attempt)).await;
                        }
                    }
                }
            }
        }
    });
    tx
}

/// How often an event is tried. The end of a job (killed or finished) is
/// worth a minute of retries: a consumer that misses it waits for the
/// wall-time limit before it tries elsewhere. Progress events are not.
fn event_attempts(event: &JobRequest) -> u32 {
    match event {
        JobRequest::Event { kind, .. } if kind.ends_the_job() => 16,
        _ => 3,
    }
}

/// Backoff between tries: 300 ms doubling up to 8 s (16 tries span ~90 s).
fn event_retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(300u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_job_is_retried_longer_than_progress() {
        let event = |kind| JobRequest::Event {
            job_id: "j".into(),
            seq: 0,
            time_unix: 0,
            kind,
        };
        let finished = event(JobEventKind::Finished {
            exit_status: 0,
            usage: None,
        });
        let killed = event(JobEventKind::Killed {
            cause: None,
            usage: None,
        });
        let started = event(JobEventKind::Started);
        assert!(event_attempts(&finished) > event_attempts(&started));
        assert_eq!(event_attempts(&finished), event_attempts(&killed));
        let total: Duration = (0..event_attempts(&finished) - 1)
            .map(event_retry_delay)
            .sum();
        assert!(total >= Duration::from_secs(60), "{total:?}");
        assert!(total <= Duration::from_secs(120), "{total:?}");
        assert_eq!(event_retry_delay(0), Duration::from_millis(300));
        assert_eq!(event_retry_delay(30), Duration::from_secs(8));
    }

    /// Issue 30, finding 5: a cancel was `Killed { cause: S5 }`, which a
    /// consumer could not tell from the owner revoking the machine.
    #[test]
    fn a_cancel_is_its_own_event_not_a_revocation() {
        let usage = Some(GuestUsage {
            cpu_millis: 1,
            wall_millis: 2,
        });
        let cancelled = wire_event(
            &GuestEventKind::Exited {
                exit: ExitInfo::Signal(9),
                cause: Some(KillCause::Cancelled),
            },
            usage,
        );
        assert_eq!(cancelled, Some(JobEventKind::Cancelled { usage }));
        let revoked = wire_event(
            &GuestEventKind::Exited {
                exit: ExitInfo::Signal(9),
                cause: Some(KillCause::Revocation),
            },
            None,
        );
        assert_eq!(
            revoked,
            Some(JobEventKind::Killed {
                cause: Some(WireState::S5),
                usage: None
            })
        );
        assert!(cancelled.is_some_and(|k| k.ends_the_job()));
    }

    #[test]
    fn guest_events_map_to_wire_events() {
        assert_eq!(
            wire_event(
                &GuestEventKind::Exited {
                    exit: ExitInfo::Signal(9),
                    cause: Some(KillCause::CpuContention)
                },
                Some(GuestUsage {
                    cpu_millis: 5,
                    wall_millis: 9
                })
            ),
            Some(JobEventKind::Killed {
                cause: Some(WireState::S3),
                usage: Some(GuestUsage {
                    cpu_millis: 5,
                    wall_millis: 9
                })
            })
        );
        assert_eq!(
            wire_event(
                &GuestEventKind::Exited {
                    exit: ExitInfo::Code(3),
                    cause: None
                },
                None
            ),
            Some(JobEventKind::Finished {
                exit_status: 3,
                usage: None
            })
        );
        assert_eq!(
            wire_event(
                &GuestEventKind::Exited {
                    exit: ExitInfo::Signal(9),
                    cause: Some(KillCause::WallTimeLimit)
                },
                None
            ),
            Some(JobEventKind::Killed {
                cause: None,
                usage: None
            })
        );
        assert_eq!(
            wire_event(&GuestEventKind::Suspended, None),
            Some(JobEventKind::Suspended)
        );
    }
}
