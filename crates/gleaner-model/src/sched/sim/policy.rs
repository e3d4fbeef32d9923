//! The simulator's scheduling policies: their names (what `--policy` takes
//! and prints) and which of the consumer's rules each one uses. It knows
//! nothing of how a policy places tasks (`dispatch.rs` does).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A scheduling policy of the simulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Policy {
    #[serde(rename = "random")]
    Random,
    #[serde(rename = "power")]
    Power,
    #[serde(rename = "tr-freq")]
    TrFreq,
    #[serde(rename = "tr")]
    Tr,
    #[serde(rename = "proactive")]
    Proactive,
    #[serde(rename = "proactive+checkpoint")]
    ProactiveCheckpoint,
    #[serde(rename = "oracle")]
    Oracle,
    /// `proactive`, and a task no free host is likely to finish now is
    /// held for the best (host, start) window over the coming hours, with
    /// exclusion and bounded kills (issue 28; `sim/windows.rs`): what the
    /// batch queue does by default (`[batch] later_windows`).
    #[serde(rename = "windows")]
    Windows,
    /// `proactive` or `windows` with bounded holds, whichever ended the
    /// batch sooner when replayed on the pool's own past at submission
    /// (`sched::duel`, `sim/duel.rs`; issue 28).
    #[serde(rename = "proactive-auto")]
    ProactiveAuto,
}

impl Policy {
    pub const ALL: [Policy; 9] = [
        Policy::Random,
        Policy::Power,
        Policy::TrFreq,
        Policy::Tr,
        Policy::Proactive,
        Policy::ProactiveCheckpoint,
        Policy::Oracle,
        Policy::Windows,
        Policy::ProactiveAuto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Random => "random",
            Policy::Power => "power",
            Policy::TrFreq => "tr-freq",
            Policy::Tr => "tr",
            Policy::Proactive => "proactive",
            Policy::ProactiveCheckpoint => "proactive+checkpoint",
            Policy::Oracle => "oracle",
            Policy::Windows => "windows",
            Policy::ProactiveAuto => "proactive-auto",
        }
    }

    /// Places the longest task first (the policies that use runtimes).
    pub(super) fn longest_first(self) -> bool {
        matches!(
            self,
            Policy::Proactive
                | Policy::ProactiveCheckpoint
                | Policy::Oracle
                | Policy::Windows
                | Policy::ProactiveAuto
        )
    }

    /// Places by the proactive rule (every free host weighed against the
    /// busy ones).
    pub(super) fn proactive_rule(self) -> bool {
        matches!(
            self,
            Policy::Proactive
                | Policy::ProactiveCheckpoint
                | Policy::Windows
                | Policy::ProactiveAuto
        )
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}; known: random, power, tr-freq, tr, proactive, proactive+checkpoint, oracle, windows, proactive-auto")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == lower)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}
