//! How the batch queue chooses hosts: the named placement policies a batch
//! can ask for (`--policy`), each behind [`PlacementPolicy`].
//!
//! `proactive` (the default) places by expected turnaround: run time slowed
//! by the host's effective power Γ and predicted availability, and the
//! host's chance of finishing it (seed 004's SDPN, seed 000's TR). The
//! others are kept as yardsticks: `tr` (TR for the task's window, then Γ),
//! `power` (Γ only, HTCondor's Rank) and `random`.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::consumer::rank;
use crate::consumer::survey::SurveyedHost;
use crate::model::sched::curve::TrCurve;
use crate::model::sched::place::HostView;

/// A placement policy by name, as a batch stores it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PolicyName {
    /// Least expected turnaround (run time × SP, retries by the TR curve).
    #[default]
    Proactive,
    /// Highest TR for the task's window, then Γ.
    Tr,
    /// Highest effective power Γ = P·A.
    Power,
    /// Any free host.
    Random,
}

impl PolicyName {
    pub const ALL: [PolicyName; 4] = [
        PolicyName::Proactive,
        PolicyName::Tr,
        PolicyName::Power,
        PolicyName::Random,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::Proactive => "proactive",
            PolicyName::Tr => "tr",
            PolicyName::Power => "power",
            PolicyName::Random => "random",
        }
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a policy knows about the task it places.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskNeeds {
    /// The task's expected reference run time (on a dedicated host of
    /// relative speed 1), seconds: the declared runtime until tasks of the
    /// batch have landed, then what they measured.
    pub runtime_secs: f64,
    /// The window the survey asked about, seconds (a host's single TR
    /// answer holds for that length).
    pub window_secs: u64,
}

impl PolicyName {
    /// The hosts that may take a task now (`rank::eligible`), best first
    /// for a task with `needs`. `rng` is drawn from by `random` only.
    pub fn order<'a, R: Rng + ?Sized>(
        self,
        hosts: &'a [SurveyedHost],
        needs: TaskNeeds,
        rng: &mut R,
    ) -> Vec<&'a SurveyedHost> {
        match self {
            PolicyName::Tr => rank::rank(hosts, &HashSet::new()),
            PolicyName::Power => {
                let mut v: Vec<&SurveyedHost> =
                    hosts.iter().filter(|h| rank::eligible(h)).collect();
                let power = |h: &SurveyedHost| h.power.filter(|p| p.is_finite()).unwrap_or(0.0);
                v.sort_by(|a, b| {
                    power(b)
                        .total_cmp(&power(a))
                        .then_with(|| a.peer.cmp(&b.peer))
                });
                v
            }
            PolicyName::Random => {
                let mut v: Vec<&SurveyedHost> =
                    hosts.iter().filter(|h| rank::eligible(h)).collect();
                v.shuffle(rng);
                v
            }
            PolicyName::Proactive => {
                let mut v: Vec<(&SurveyedHost, Option<f64>)> = hosts
                    .iter()
                    .filter(|h| rank::eligible(h))
                    .map(|h| {
                        let turnaround = host_view(h, needs.window_secs)
                            .map(|view| view.expected_turnaround(needs.runtime_secs))
                            .filter(|t| t.is_finite());
                        (h, turnaround)
                    })
                    .collect();
                // Hosts that cannot predict (too little history) come after
                // every host that can, by Γ, as `tr` puts them.
                let power = |h: &SurveyedHost| h.power.filter(|p| p.is_finite()).unwrap_or(0.0);
                v.sort_by(|(a, ta), (b, tb)| {
                    match (ta, tb) {
                        (Some(x), Some(y)) => x.total_cmp(y),
                        (Some(_), None) => Ordering::Less,
                        (None, Some(_)) => Ordering::Greater,
                        (None, None) => Ordering::Equal,
                    }
                    .then_with(|| power(b).total_cmp(&power(a)))
                    .then_with(|| a.peer.cmp(&b.peer))
                });
                v.into_iter().map(|(h, _)| h).collect()
            }
        }
    }
}

/// What the scheduling maths needs of a surveyed host: its speed P, its
/// predicted availability A and its TR curve. `None` when the host gave no
/// prediction. An older host without a curve has its one TR for the
/// survey's window (constant hazard through it); without a predicted
/// availability, A is read off its current Γ.
pub fn host_view(host: &SurveyedHost, window_secs: u64) -> Option<HostView> {
    let curve = match (&host.curve, host.tr.filter(|t| t.is_finite())) {
        (Some(curve), _) => curve.clone(),
        (None, Some(tr)) => TrCurve::new([(window_secs.max(1) as f64, tr)]),
        (None, None) => return None,
    };
    let gamma = host.power.filter(|p| p.is_finite()).unwrap_or(1.0);
    let speed = host
        .speed
        .filter(|p| p.is_finite() && *p > 0.0)
        .unwrap_or(gamma.max(f64::MIN_POSITIVE));
    let availability = host
        .availability
        .filter(|a| a.is_finite())
        .unwrap_or((gamma / speed).clamp(0.0, 1.0));
    Some(HostView {
        power: speed,
        availability,
        curve,
    })
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown placement policy `{0}` (one of: proactive, tr, power, random)")]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyName {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyName::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPolicy(s.chars().take(64).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::State;
    use libp2p::PeerId;
    use rand::SeedableRng;

    fn host(speed: f64, availability: f64, mttf_secs: Option<f64>) -> SurveyedHost {
        SurveyedHost {
            answered: true,
            tr: mttf_secs.map(|m| (-3600.0 / m).exp()),
            curve: mttf_secs.map(TrCurve::exponential),
            speed: Some(speed),
            availability: Some(availability),
            power: Some(speed * availability),
            slot_free: Some(true),
            state: Some(State::S1),
            ..SurveyedHost::new(PeerId::random())
        }
    }

    fn order(policy: PolicyName, hosts: &[SurveyedHost], runtime_secs: f64) -> Vec<usize> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let needs = TaskNeeds {
            runtime_secs,
            window_secs: 3600,
        };
        policy
            .order(hosts, needs, &mut rng)
            .iter()
            .map(|h| hosts.iter().position(|x| x.peer == h.peer).unwrap())
            .collect()
    }

    #[test]
    fn proactive_weighs_speed_availability_and_failures_together() {
        let hosts = vec![
            host(1.0, 1.0, Some(1800.0)), // fast, fails every half hour
            host(0.5, 1.0, Some(1e9)),    // half speed, never fails
            host(1.0, 0.45, Some(1e9)),   // full speed, owner takes 55 %
            host(1.0, 1.0, Some(1e9)),    // fast and safe
            host(1.0, 1.0, None),         // cannot predict
        ];
        // A 1 h task: the safe fast host, then the slow ones (2 h, 2.2 h),
        // then the failing one (e^2 - 1 half hours ≈ 3.2 h), then the one
        // that cannot predict.
        assert_eq!(
            order(PolicyName::Proactive, &hosts, 3600.0),
            [3, 1, 2, 0, 4]
        );
        // A 5 min task barely risks a failure on the fast host.
        assert_eq!(order(PolicyName::Proactive, &hosts, 300.0)[..2], [3, 0]);
        // `power` ranks by Γ alone; `tr` by TR alone.
        let mut by_power = order(PolicyName::Power, &hosts, 3600.0);
        by_power[..3].sort();
        assert_eq!(by_power, [0, 3, 4, 1, 2]);
        assert_eq!(order(PolicyName::Tr, &hosts, 3600.0)[3..], [0, 4]);
    }

    #[test]
    fn every_policy_leaves_out_busy_and_failing_hosts() {
        let mut hosts = vec![host(1.0, 1.0, Some(1e9)); 3];
        for h in &mut hosts {
            h.peer = PeerId::random();
        }
        hosts[0].slot_free = Some(false);
        hosts[1].state = Some(State::S3);
        for p in PolicyName::ALL {
            assert_eq!(order(p, &hosts, 60.0), [2], "{p}");
        }
    }

    #[test]
    fn a_host_without_a_curve_or_availability_is_read_from_its_tr_and_gamma() {
        let mut h = host(0.8, 0.5, Some(3600.0));
        h.curve = None;
        h.availability = None;
        let view = host_view(&h, 7200).unwrap();
        assert!((view.availability - 0.5).abs() < 1e-12);
        assert!((view.curve.tr_at(7200.0) - h.tr.unwrap()).abs() < 1e-12);
        h.tr = None;
        assert!(host_view(&h, 7200).is_none());
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_named() {
        for p in PolicyName::ALL {
            assert_eq!(p.to_string().parse::<PolicyName>(), Ok(p));
        }
        let err = "fastest".parse::<PolicyName>().unwrap_err();
        assert!(err.to_string().contains("`fastest`"), "{err}");
        assert_eq!(PolicyName::default(), PolicyName::Proactive);
    }
}
