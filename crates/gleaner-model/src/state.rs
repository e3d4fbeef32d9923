//! The five-state resource model of the seed papers (000, section III).
//!
//! This module owns what a state *is* and how one sample of host load and
//! free memory maps onto a state. It knows nothing about files, clocks or
//! processes: the trace reader, the live monitor and the guest policy all call
//! into it so that a host is classified the same way everywhere.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One of the five availability states of a host, as seen by a guest job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum State {
    /// Light host load (below Th1): the guest runs at normal priority.
    S1,
    /// Heavy host load (Th1..=Th2): the guest runs reniced to 19.
    S2,
    /// Host load above Th2 for the sustain time: the guest is killed (CPU contention).
    S3,
    /// Free memory below the guest's working set: the guest is killed (thrashing).
    S4,
    /// The node is off, stopped or paused by its owner: revocation.
    S5,
}

impl State {
    /// All states in order, for iteration and tables.
    pub const ALL: [State; 5] = [State::S1, State::S2, State::S3, State::S4, State::S5];

    /// The three failure states, in the order used by every per-cause array.
    pub const FAILURES: [State; 3] = [State::S3, State::S4, State::S5];

    /// True for S1 and S2, the states in which a guest survives.
    pub fn is_transient(self) -> bool {
        matches!(self, State::S1 | State::S2)
    }

    /// True for S3, S4 and S5: a guest job in the window is lost.
    pub fn is_failure(self) -> bool {
        !self.is_transient()
    }

    /// Index 0..5 in [`State::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Index 0..3 in [`State::FAILURES`], or `None` for S1/S2.
    pub fn failure_index(self) -> Option<usize> {
        match self {
            State::S3 => Some(0),
            State::S4 => Some(1),
            State::S5 => Some(2),
            State::S1 | State::S2 => None,
        }
    }

    /// The short label used in files, JSON and tables ("S1".."S5").
    pub fn label(self) -> &'static str {
        match self {
            State::S1 => "S1",
            State::S2 => "S2",
            State::S3 => "S3",
            State::S4 => "S4",
            State::S5 => "S5",
        }
    }

    /// A phrase an owner or a consumer understands.
    pub fn describe(self) -> &'static str {
        match self {
            State::S1 => "lightly loaded",
            State::S2 => "busy (a guest would run at low priority)",
            State::S3 => "overloaded by its owner",
            State::S4 => "short of free memory",
            State::S5 => "off or withheld by its owner",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Error for a state label that is not `S1`..`S5`.
#[derive(Debug, thiserror::Error)]
#[error("unknown state {0:?}: expected S1, S2, S3, S4 or S5")]
pub struct UnknownState(String);

impl FromStr for State {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_uppercase().as_str() {
            "S1" => Ok(State::S1),
            "S2" => Ok(State::S2),
            "S3" => Ok(State::S3),
            "S4" => Ok(State::S4),
            "S5" => Ok(State::S5),
            _ => Err(UnknownState(s.to_string())),
        }
    }
}

/// The four knobs of the five-state model. Defaults are the papers' values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Host CPU load (percent of the whole machine) below which the host is light (S1).
    pub th1: f64,
    /// Host CPU load above which a guest is suspended, and killed once it lasts `sustain_secs`.
    pub th2: f64,
    /// How long load must stay above `th2` before the guest is killed (S3).
    pub sustain_secs: u32,
    /// The guest's working set in MiB; free memory below it is S4. Zero means none.
    pub job_mem_mib: u64,
}

/// Default Th1 (percent): below it the host is lightly loaded (S1).
pub const DEFAULT_TH1: f64 = 20.0;
/// Default Th2 (percent): above it a guest is suspended, killed once sustained.
pub const DEFAULT_TH2: f64 = 60.0;
/// Default time (seconds) the load must stay above Th2 before S3.
pub const DEFAULT_SUSTAIN_SECS: u32 = 60;

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            th1: DEFAULT_TH1,
            th2: DEFAULT_TH2,
            sustain_secs: DEFAULT_SUSTAIN_SECS,
            job_mem_mib: 0,
        }
    }
}

/// Why a set of thresholds cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThresholdError {
    #[error("th1 must be a percentage between 0 and 100, got {0}")]
    Th1OutOfRange(f64),
    #[error("th2 must be a percentage between 0 and 100, got {0}")]
    Th2OutOfRange(f64),
    #[error("th1 ({th1}) must not exceed th2 ({th2})")]
    Th1AboveTh2 { th1: f64, th2: f64 },
}

impl Thresholds {
    /// Checks that the thresholds describe a meaningful model.
    pub fn validate(&self) -> Result<(), ThresholdError> {
        let pct = |v: f64| v.is_finite() && (0.0..=100.0).contains(&v);
        if !pct(self.th1) {
            return Err(ThresholdError::Th1OutOfRange(self.th1));
        }
        if !pct(self.th2) {
            return Err(ThresholdError::Th2OutOfRange(self.th2));
        }
        if self.th1 > self.th2 {
            return Err(ThresholdError::Th1AboveTh2 {
                th1: self.th1,
                th2: self.th2,
            });
        }
        Ok(())
    }

    /// Rule 4 of the trace format: S1 below Th1, otherwise S2.
    pub fn light_or_heavy(&self, cpu: f64) -> State {
        if cpu < self.th1 {
            State::S1
        } else {
            State::S2
        }
    }

    /// True when this load is above Th2 (the guest must at least be suspended).
    pub fn is_hot(&self, cpu: f64) -> bool {
        cpu > self.th2
    }

    /// True when this much free memory cannot hold the guest (S4).
    pub fn lacks_memory(&self, free_mib: u64) -> bool {
        free_mib < self.job_mem_mib
    }
}

/// Tracks an excursion above Th2 so that a short spike (guest suspended) can
/// be told from sustained contention (S3). It is fed samples in time order;
/// both the trace reader's cursor and the live monitor use it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExcursionTracker {
    /// When the current run of load above Th2 began, if load is above Th2 now.
    start: Option<i64>,
    /// The light/heavy state just before the excursion began (S2 after a break).
    before: State,
    /// The light/heavy state of the most recent up sample, if it continues unbroken.
    last_light: Option<State>,
}

impl Default for ExcursionTracker {
    fn default() -> Self {
        ExcursionTracker {
            start: None,
            before: State::S2,
            last_light: None,
        }
    }
}

impl ExcursionTracker {
    /// Records that the node was down (or the record broken) before the next sample:
    /// an excursion cannot span a revocation.
    pub fn interrupt(&mut self) {
        self.start = None;
        self.last_light = None;
    }

    /// Feeds the next up sample, taken at `time` with host load `cpu`.
    pub fn observe(&mut self, th: &Thresholds, time: i64, cpu: f64) {
        if th.is_hot(cpu) {
            if self.start.is_none() {
                self.start = Some(time);
                self.before = self.last_light.unwrap_or(State::S2);
            }
        } else {
            self.start = None;
        }
        self.last_light = Some(th.light_or_heavy(cpu));
    }

    /// Feeds the next up sample whose load is known to be at most Th2 and
    /// whose light/heavy state is `light`: the same as [`Self::observe`] for
    /// such a sample, without looking at the load again.
    pub fn observe_cool(&mut self, light: State) {
        self.start = None;
        self.last_light = Some(light);
    }

    /// Starts tracking as if an excursion had been going on since `start`,
    /// preceded by `before`. Used when a cursor is placed mid-trace.
    pub fn resume_excursion(&mut self, start: i64, before: State) {
        self.start = Some(start);
        self.before = before;
    }

    /// The time the current excursion above Th2 began, if one is going on.
    pub fn excursion_start(&self) -> Option<i64> {
        self.start
    }

    /// The state at time `t` of an up host whose latest sample had load `cpu`
    /// and free memory `free_mib` (rules 2 to 4 of the trace format).
    pub fn state_at(&self, th: &Thresholds, t: i64, cpu: f64, free_mib: u64) -> State {
        if th.lacks_memory(free_mib) {
            return State::S4;
        }
        match self.start {
            Some(start) if th.is_hot(cpu) => {
                if t.saturating_sub(start) >= i64::from(th.sustain_secs) {
                    State::S3
                } else {
                    self.before
                }
            }
            _ => th.light_or_heavy(cpu),
        }
    }

    /// True while an excursion is going on but has not yet lasted the sustain
    /// time at `t`: the guest should be suspended, not killed.
    pub fn is_suspending(&self, th: &Thresholds, t: i64) -> bool {
        matches!(self.start, Some(start) if t.saturating_sub(start) < i64::from(th.sustain_secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn light_heavy_boundaries_follow_the_trace_format() {
        let th = Thresholds::default();
        assert_eq!(th.light_or_heavy(19.99), State::S1);
        assert_eq!(th.light_or_heavy(20.0), State::S2);
        assert!(!th.is_hot(60.0));
        assert!(th.is_hot(60.01));
    }

    #[test]
    fn short_spike_keeps_the_state_before_it_and_long_one_is_s3() {
        let th = Thresholds::default();
        let mut ex = ExcursionTracker::default();
        ex.observe(&th, 0, 5.0);
        ex.observe(&th, 6, 90.0);
        assert_eq!(ex.state_at(&th, 6, 90.0, 1000), State::S1);
        assert!(ex.is_suspending(&th, 60));
        assert_eq!(ex.state_at(&th, 65, 90.0, 1000), State::S1);
        assert_eq!(ex.state_at(&th, 66, 90.0, 1000), State::S3);
        ex.observe(&th, 70, 10.0);
        assert_eq!(ex.state_at(&th, 70, 10.0, 1000), State::S1);
    }

    #[test]
    fn excursion_after_interrupt_counts_as_heavy_before() {
        let th = Thresholds::default();
        let mut ex = ExcursionTracker::default();
        ex.observe(&th, 0, 5.0);
        ex.interrupt();
        ex.observe(&th, 100, 95.0);
        assert_eq!(ex.state_at(&th, 100, 95.0, 10), State::S2);
    }

    #[test]
    fn memory_rule_wins_over_load() {
        let th = Thresholds {
            job_mem_mib: 512,
            ..Thresholds::default()
        };
        let ex = ExcursionTracker::default();
        assert_eq!(ex.state_at(&th, 0, 1.0, 511), State::S4);
        assert_eq!(ex.state_at(&th, 0, 1.0, 512), State::S1);
    }

    #[test]
    fn thresholds_are_validated() {
        let bad = Thresholds {
            th1: 70.0,
            ..Thresholds::default()
        };
        assert!(bad.validate().is_err());
        assert!(Thresholds::default().validate().is_ok());
        let nan = Thresholds {
            th2: f64::NAN,
            ..Thresholds::default()
        };
        assert!(nan.validate().is_err());
    }
}
