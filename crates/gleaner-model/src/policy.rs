//! The guest policy of the five-state model (seed 000, section V): which
//! action the node takes on its guest for the host's current state.
//!
//! This module owns the vocabulary shared by the policy and the guest
//! supervisor — [`GuestAction`], [`KillCause`], [`GuestRunState`] — and the
//! pure [`decide`] function. It knows nothing about processes, signals or
//! clocks: the supervisor in `guest/` carries the actions out.

use crate::state::State;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The scheduling level the policy last asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Priority {
    /// Nice 0: the host is lightly loaded (S1).
    Normal,
    /// Nice 19 on every thread and on the guest's autogroup (S2).
    Background,
}

/// What the supervisor's guest is doing, as far as the policy is concerned.
///
/// The priority is the level the policy last *asked for*, not the nice value
/// the kernel shows: when lowering nice is not permitted the guest stays at 19
/// and the supervisor records that, but the policy must not ask again on every
/// sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GuestRunState {
    /// No guest, or it has exited: there is nothing to act on.
    Idle,
    /// The guest runs at the given level.
    Running(Priority),
    /// The guest group is stopped (SIGSTOP) during a short excursion above Th2.
    Suspended(Priority),
}

/// Why a guest was killed. Recorded in the job log and reported to the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KillCause {
    /// S3: the owner's load stayed above Th2 for the sustain time.
    CpuContention,
    /// S4: free memory fell below the guest's working set.
    MemoryShortage,
    /// S5: the owner paused the node or it is shutting down.
    Revocation,
    /// The job ran past its declared wall-clock limit.
    WallTimeLimit,
    /// The consumer or the owner cancelled this job.
    Cancelled,
    /// The job's processes together used more than its declared memory (plus
    /// the node's margin): the kernel's limit on the job's group was hit. The
    /// job's own doing, not the host's.
    OverDeclaredMemory,
}

impl KillCause {
    /// The kill cause a failure state implies, or `None` for S1 and S2.
    pub fn for_state(state: State) -> Option<KillCause> {
        match state {
            State::S3 => Some(KillCause::CpuContention),
            State::S4 => Some(KillCause::MemoryShortage),
            State::S5 => Some(KillCause::Revocation),
            State::S1 | State::S2 => None,
        }
    }

    /// The failure state behind this cause, if it is one of the model's.
    pub fn state(self) -> Option<State> {
        match self {
            KillCause::CpuContention => Some(State::S3),
            KillCause::MemoryShortage => Some(State::S4),
            KillCause::Revocation => Some(State::S5),
            KillCause::WallTimeLimit | KillCause::Cancelled | KillCause::OverDeclaredMemory => None,
        }
    }

    /// A short phrase for logs and tables.
    pub fn describe(self) -> &'static str {
        match self {
            KillCause::CpuContention => "host CPU contention (S3)",
            KillCause::MemoryShortage => "host memory shortage (S4)",
            KillCause::Revocation => "revoked by the owner (S5)",
            KillCause::WallTimeLimit => "wall-clock limit reached",
            KillCause::Cancelled => "cancelled",
            KillCause::OverDeclaredMemory => "over its declared memory",
        }
    }
}

impl fmt::Display for KillCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// One thing the supervisor can do to its guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GuestAction {
    /// Set nice 0 on every thread and the autogroup (S1).
    RunNormal,
    /// Set nice 19 on every thread and the autogroup (S2).
    Renice19,
    /// SIGSTOP the guest group: load is above Th2 but not yet for the sustain time.
    Suspend,
    /// SIGCONT the guest group: the excursion above Th2 ended.
    Resume,
    /// SIGKILL the guest group and record why.
    Kill(KillCause),
}

/// The action for a guest in `current` when the host is in `state`.
///
/// `state` and `suspending` are what `ExcursionTracker::state_at` and
/// `is_suspending` report: during a short excursion above Th2 the state is the
/// light/heavy state from before it and `suspending` is true.
///
/// Returns at most one action. After a `Resume` the priority may also need to
/// change; calling again with the updated run state returns that, so a caller
/// that applies actions until `None` reaches the fixed point in two steps.
pub fn decide(state: State, suspending: bool, current: GuestRunState) -> Option<GuestAction> {
    let priority = match current {
        GuestRunState::Idle => return None,
        GuestRunState::Running(p) | GuestRunState::Suspended(p) => p,
    };
    if let Some(cause) = KillCause::for_state(state) {
        return Some(GuestAction::Kill(cause));
    }
    let suspended = matches!(current, GuestRunState::Suspended(_));
    match (suspending, suspended) {
        (true, true) => None,
        (true, false) => Some(GuestAction::Suspend),
        (false, true) => Some(GuestAction::Resume),
        (false, false) => match (state, priority) {
            (State::S1, Priority::Background) => Some(GuestAction::RunNormal),
            (State::S2, Priority::Normal) => Some(GuestAction::Renice19),
            _ => None,
        },
    }
}

/// The run state after `action` is carried out on a guest in `current`.
///
/// The supervisor tracks its guest the same way; tests use this to check
/// that [`decide`] converges.
pub fn after(current: GuestRunState, action: GuestAction) -> GuestRunState {
    use GuestRunState::{Idle, Running, Suspended};
    match (current, action) {
        (Idle, _) | (_, GuestAction::Kill(_)) => Idle,
        (Running(_), GuestAction::RunNormal) => Running(Priority::Normal),
        (Running(_), GuestAction::Renice19) => Running(Priority::Background),
        (Suspended(_), GuestAction::RunNormal) => Suspended(Priority::Normal),
        (Suspended(_), GuestAction::Renice19) => Suspended(Priority::Background),
        (Running(p) | Suspended(p), GuestAction::Suspend) => Suspended(p),
        (Running(p) | Suspended(p), GuestAction::Resume) => Running(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use GuestRunState::{Idle, Running, Suspended};
    use Priority::{Background, Normal};

    #[test]
    fn table_of_decisions() {
        let cases: &[(State, bool, GuestRunState, Option<GuestAction>)] = &[
            (State::S1, false, Running(Normal), None),
            (
                State::S1,
                false,
                Running(Background),
                Some(GuestAction::RunNormal),
            ),
            (
                State::S2,
                false,
                Running(Normal),
                Some(GuestAction::Renice19),
            ),
            (State::S2, false, Running(Background), None),
            (State::S1, true, Running(Normal), Some(GuestAction::Suspend)),
            (
                State::S2,
                true,
                Running(Background),
                Some(GuestAction::Suspend),
            ),
            (State::S2, true, Suspended(Background), None),
            (
                State::S1,
                false,
                Suspended(Background),
                Some(GuestAction::Resume),
            ),
            (
                State::S3,
                false,
                Suspended(Normal),
                Some(GuestAction::Kill(KillCause::CpuContention)),
            ),
            (
                State::S4,
                true,
                Running(Normal),
                Some(GuestAction::Kill(KillCause::MemoryShortage)),
            ),
            (
                State::S5,
                false,
                Running(Background),
                Some(GuestAction::Kill(KillCause::Revocation)),
            ),
            (State::S3, false, Idle, None),
            (State::S1, true, Idle, None),
        ];
        for &(state, suspending, current, want) in cases {
            assert_eq!(
                decide(state, suspending, current),
                want,
                "decide({state}, {suspending}, {current:?})"
            );
        }
    }

    #[test]
    fn kill_causes_round_trip_to_failure_states() {
        for state in State::ALL {
            match KillCause::for_state(state) {
                Some(cause) => assert_eq!(cause.state(), Some(state)),
                None => assert!(state.is_transient()),
            }
        }
        assert_eq!(KillCause::WallTimeLimit.state(), None);
    }

    #[test]
    fn applying_decisions_reaches_a_fixed_point_within_two_steps() {
        let starts = [
            Idle,
            Running(Normal),
            Running(Background),
            Suspended(Normal),
            Suspended(Background),
        ];
        for state in State::ALL {
            for suspending in [false, true] {
                for start in starts {
                    let mut current = start;
                    let mut steps = 0;
                    while let Some(action) = decide(state, suspending, current) {
                        current = after(current, action);
                        steps += 1;
                        assert!(steps <= 2, "{state} {suspending} {start:?} does not settle");
                    }
                    // At the fixed point the guest matches the state.
                    match (state, suspending, current) {
                        (_, _, Idle) => {}
                        (State::S1 | State::S2, true, Suspended(_)) => {}
                        (State::S1, false, Running(Normal)) => {}
                        (State::S2, false, Running(Background)) => {}
                        other => panic!("unexpected fixed point {other:?} from {start:?}"),
                    }
                }
            }
        }
    }
}
