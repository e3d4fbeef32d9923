//! When a host publishes its summary (issue 27, scope 2): on a change of
//! state, slot or Γ step once a minimum gap has passed, and on a
//! randomised heartbeat of minutes; a host with nothing new is quiet.
//!
//! One rule for the node and the simulator: the node's pool host drives a
//! [`Pacer`] with `std::time::Instant`s, `gleaner simulate` with simulated
//! seconds ([`SimSecs`]). Pure: the caller reads its clock (or its
//! simulated time) and draws the heartbeat's jitter; nothing here knows the
//! network, the wire format or how a summary is computed.

use std::ops::Add;
use std::time::Duration;

use crate::state::State;

/// The longest gap a member leaves between two publications when it has
/// something new to say, however long its heartbeat.
pub const MIN_GAP_MAX: Duration = Duration::from_secs(10);

/// Γ counts in steps of this many thousandths for the pacer: a change a
/// consumer's ranking would notice goes out; the owner's load jitter does not.
pub const POWER_STEP_MILLI: u32 = 50;

/// Least time between two publications of one member for a heartbeat of
/// `heartbeat`: [`MIN_GAP_MAX`], or half the heartbeat when that is shorter
/// (tests run with heartbeats of a second or two).
pub fn min_gap(heartbeat: Duration) -> Duration {
    (heartbeat / 2).min(MIN_GAP_MAX)
}

/// What a publication follows besides the heartbeat: a change of any of
/// these goes out once the minimum gap allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusKey {
    pub state: State,
    pub slot_free: bool,
    /// Γ in steps of [`POWER_STEP_MILLI`].
    pub power_step: u32,
}

impl StatusKey {
    pub fn new(state: State, slot_free: bool, power_milli: u32) -> StatusKey {
        StatusKey {
            state,
            slot_free,
            power_step: power_milli / POWER_STEP_MILLI,
        }
    }
}

/// When to publish a summary: the first at once; then a changed status
/// once [`min_gap`] has passed since the last publication; and a heartbeat
/// every 0.75 to 1.25 `heartbeat` (randomised, so a pool's members do not
/// publish in step) whether or not anything changed, so consumers keep a
/// fresh ladder and know the member lives.
///
/// `T` is the caller's time (an `Instant` in the node, [`SimSecs`] in the
/// simulator); `K` what a change is judged on ([`StatusKey`]).
#[derive(Debug, Clone)]
pub struct Pacer<T, K> {
    heartbeat: Duration,
    gap: Duration,
    last: Option<(T, K)>,
    next_beat: Option<T>,
}

impl<T, K> Pacer<T, K>
where
    T: Copy + PartialOrd + Add<Duration, Output = T>,
    K: Copy + PartialEq,
{
    pub fn new(heartbeat: Duration) -> Pacer<T, K> {
        Pacer {
            heartbeat,
            gap: min_gap(heartbeat),
            last: None,
            next_beat: None,
        }
    }

    /// True when a summary should go out at `now` for a host whose status
    /// is `key`.
    pub fn due(&self, now: T, key: K) -> bool {
        let Some((at, published)) = self.last else {
            return true;
        };
        let changed = published != key && now >= at + self.gap;
        changed || self.next_beat.is_some_and(|beat| now >= beat)
    }

    /// When to ask [`due`](Self::due) again if nothing else happens: the
    /// end of the gap when a change waits for it, else the next heartbeat;
    /// `None` before the first publication (which is due at once).
    pub fn next_look(&self, key: K) -> Option<T> {
        let (at, published) = self.last?;
        let beat = self.next_beat.unwrap_or(at + self.heartbeat);
        if published != key {
            let gap_end = at + self.gap;
            Some(if gap_end < beat { gap_end } else { beat })
        } else {
            Some(beat)
        }
    }

    /// Records a publication of `key` at `now`; `jitter` in [0, 1) places
    /// the next heartbeat between 0.75 and 1.25 heartbeats away.
    pub fn published(&mut self, now: T, key: K, jitter: f64) {
        let factor = 0.75 + 0.5 * jitter.clamp(0.0, 1.0);
        self.last = Some((now, key));
        self.next_beat = Some(now + self.heartbeat.mul_f64(factor));
    }

    /// The last publication: when, and the status it went out with.
    pub fn last(&self) -> Option<(T, K)> {
        self.last
    }
}

/// Simulated seconds, as a time a [`Pacer`] can run on.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct SimSecs(pub f64);

impl Add<Duration> for SimSecs {
    type Output = SimSecs;
    fn add(self, d: Duration) -> SimSecs {
        SimSecs(self.0 + d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(slot_free: bool) -> StatusKey {
        StatusKey::new(State::S1, slot_free, 500)
    }

    #[test]
    fn simulated_seconds_follow_the_same_rule_as_instants() {
        let mut pacer: Pacer<SimSecs, StatusKey> = Pacer::new(Duration::from_secs(300));
        assert!(pacer.due(SimSecs(0.0), key(true)));
        pacer.published(SimSecs(0.0), key(true), 0.0);
        assert!(!pacer.due(SimSecs(224.0), key(true)));
        assert!(pacer.due(SimSecs(225.0), key(true)));
        assert!(
            !pacer.due(SimSecs(9.0), key(false)),
            "the gap holds a change"
        );
        assert!(pacer.due(SimSecs(10.0), key(false)));
        assert_eq!(pacer.next_look(key(false)), Some(SimSecs(10.0)));
        assert_eq!(pacer.last(), Some((SimSecs(0.0), key(true))));
    }

    #[test]
    fn the_gap_follows_the_heartbeat() {
        assert_eq!(min_gap(Duration::from_secs(300)), MIN_GAP_MAX);
        assert_eq!(min_gap(Duration::from_secs(2)), Duration::from_secs(1));
    }
}
