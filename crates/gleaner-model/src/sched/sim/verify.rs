//! Verified results in `gleaner simulate` (`--verify`): what checking a
//! batch's results by replication would have cost on the simulated pool,
//! with the node's own rules — [`AdaptiveRule`] for `adaptive`,
//! [`max_copies`] for the bound — and, with liars among the hosts, how many
//! wrong results would have been accepted.
//!
//! It replays the simulation's completions in the order they happened:
//! each task's first copy is the host that completed it in the simulation
//! (a host the batch excludes for an invalid result gets none: its task
//! goes to another host); further copies go to other hosts drawn in
//! proportion to the work they did in the simulation (a host that is often
//! free takes more copies). Honest hosts' copies always agree; each liar
//! returns its own wrong answer. The copies are counted, not scheduled:
//! their load is not fed back into the simulated pool (docs/trust.md).
//! Pure: the caller passes the completions, the pool's size and the draws.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::trust::{max_copies, AdaptiveRule, HostTrack};

/// How results are checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum VerifyPlan {
    /// Every task on `replicas` hosts, accepted when `quorum` agree.
    Replicate { replicas: u32, quorum: u32 },
    /// The adaptive rule: two copies until a host is trusted, then single
    /// copies with spot checks.
    Adaptive(AdaptiveRule),
}

/// What verification cost and caught.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifyOutcome {
    /// Results accepted (a quorum agreed, or a single unchecked copy).
    pub accepted: u64,
    /// Tasks that ended "no quorum".
    pub no_quorum: u64,
    /// Tasks in the warm-up (the first ones to complete) and the copies
    /// beyond the first they ran.
    pub warmup_tasks: u64,
    pub warmup_extra_copies: u64,
    /// The same after the warm-up.
    pub after_tasks: u64,
    pub after_extra_copies: u64,
    /// Accepted results that were wrong (a liar's unchecked copy).
    pub wrong_accepted: u64,
    /// Liars excluded from the batch for an invalid result.
    pub liars_caught: u32,
}

impl VerifyOutcome {
    /// Extra copies per accepted result during the warm-up.
    pub fn warmup_overhead(&self) -> f64 {
        ratio(self.warmup_extra_copies, self.warmup_tasks)
    }

    /// Extra copies per accepted result after the warm-up.
    pub fn after_overhead(&self) -> f64 {
        ratio(self.after_extra_copies, self.after_tasks)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// A copy's answer: the right one, or liar `i`'s own wrong one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Right,
    Wrong(usize),
}

/// Replays `ends`/`hosts_of` (each task's completion time and host, from
/// [`super::SimResult`]) on `n_hosts` hosts, the first `liars` of which
/// always lie; the first `warmup` completions count as warm-up.
pub fn replay<R: Rng + ?Sized>(
    ends: &[Option<f64>],
    hosts_of: &[Option<usize>],
    n_hosts: usize,
    liars: usize,
    plan: VerifyPlan,
    warmup: u64,
    rng: &mut R,
) -> VerifyOutcome {
    let mut done: Vec<(f64, usize)> = ends
        .iter()
        .zip(hosts_of)
        .filter_map(|(e, h)| Some(((*e)?, (*h)?)))
        .filter(|(_, h)| *h < n_hosts)
        .collect();
    done.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut weight = vec![0u64; n_hosts];
    for (_, h) in &done {
        weight[*h] += 1;
    }
    let mut out = VerifyOutcome::default();
    if n_hosts == 0 {
        return out;
    }
    let mut track = vec![HostTrack::default(); n_hosts];
    let mut excluded = vec![false; n_hosts];
    let answer = |h: usize| {
        if h < liars {
            Answer::Wrong(h)
        } else {
            Answer::Right
        }
    };
    for (i, (_, host)) in done.into_iter().enumerate() {
        let first = if excluded[host] {
            match draw_host(&weight, &excluded, &[], rng) {
                Some(h) => h,
                None => break,
            }
        } else {
            host
        };
        let (wanted, quorum) = match plan {
            VerifyPlan::Replicate { replicas, quorum } => (replicas.max(1), quorum.max(1)),
            VerifyPlan::Adaptive(rule) => match rule.copies(track[first].streak, rng.random()) {
                1 => (1, 1),
                _ => (2, 2),
            },
        };
        let bound = max_copies(wanted, quorum);
        let mut copies = vec![first];
        let mut accepted = None;
        loop {
            while (copies.len() as u32) < wanted {
                match draw_host(&weight, &excluded, &copies, rng) {
                    Some(h) => copies.push(h),
                    None => break,
                }
            }
            let answers: Vec<Answer> = copies.iter().map(|h| answer(*h)).collect();
            if let Some(a) = answers
                .iter()
                .find(|a| answers.iter().filter(|b| b == a).count() as u32 >= quorum)
            {
                accepted = Some(*a);
                break;
            }
            if copies.len() as u32 >= bound {
                break;
            }
            match draw_host(&weight, &excluded, &copies, rng) {
                Some(h) => copies.push(h),
                None => break,
            }
        }
        let extra = copies.len() as u64 - 1;
        if (i as u64) < warmup {
            out.warmup_tasks += 1;
            out.warmup_extra_copies += extra;
        } else {
            out.after_tasks += 1;
            out.after_extra_copies += extra;
        }
        let Some(accepted) = accepted else {
            out.no_quorum += 1;
            continue;
        };
        out.accepted += 1;
        if accepted != Answer::Right {
            out.wrong_accepted += 1;
        }
        // Only compared results count, as on the node.
        if copies.len() > 1 {
            for h in copies {
                let valid = answer(h) == accepted;
                track[h].record(valid);
                if !valid && !excluded[h] {
                    excluded[h] = true;
                    if h < liars {
                        out.liars_caught += 1;
                    }
                }
            }
        }
    }
    out
}

/// A host not excluded and not in `taken`, drawn in proportion to
/// `weight` (uniformly when none of them has any).
fn draw_host<R: Rng + ?Sized>(
    weight: &[u64],
    excluded: &[bool],
    taken: &[usize],
    rng: &mut R,
) -> Option<usize> {
    let open = |h: usize| !excluded[h] && !taken.contains(&h);
    let total: u64 = (0..weight.len())
        .filter(|h| open(*h))
        .map(|h| weight[h])
        .sum();
    if total == 0 {
        let open: Vec<usize> = (0..weight.len()).filter(|h| open(*h)).collect();
        return (!open.is_empty()).then(|| open[rng.random_range(0..open.len())]);
    }
    let mut pick = rng.random_range(0..total);
    for h in (0..weight.len()).filter(|h| open(*h)) {
        if pick < weight[h] {
            return Some(h);
        }
        pick -= weight[h];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn pool(tasks: usize, hosts: usize) -> (Vec<Option<f64>>, Vec<Option<usize>>) {
        let ends = (0..tasks).map(|i| Some(i as f64)).collect();
        let hosts_of = (0..tasks).map(|i| Some(i % hosts)).collect();
        (ends, hosts_of)
    }

    #[test]
    fn on_an_honest_pool_adaptive_costs_little_after_warm_up_and_replicate_costs_k_minus_one() {
        let (ends, hosts_of) = pool(20_000, 20);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let rule = AdaptiveRule::default();
        let warm = u64::from(rule.trust_after) * 20;
        let a = replay(
            &ends,
            &hosts_of,
            20,
            0,
            VerifyPlan::Adaptive(rule),
            warm,
            &mut rng,
        );
        assert_eq!(a.accepted, 20_000);
        assert_eq!((a.wrong_accepted, a.no_quorum), (0, 0));
        assert!(a.warmup_overhead() > 0.3, "{a:?}");
        assert!(a.after_overhead() < 0.10, "{a:?}");
        let r = replay(
            &ends,
            &hosts_of,
            20,
            0,
            VerifyPlan::Replicate {
                replicas: 2,
                quorum: 2,
            },
            warm,
            &mut rng,
        );
        assert_eq!(r.after_overhead(), 1.0);
    }

    #[test]
    fn liars_are_caught_and_excluded_and_replication_accepts_nothing_wrong() {
        let (ends, hosts_of) = pool(5_000, 10);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let a = replay(
            &ends,
            &hosts_of,
            10,
            2,
            VerifyPlan::Adaptive(AdaptiveRule::default()),
            100,
            &mut rng,
        );
        // A liar is untrusted from its start: its first task is checked.
        assert_eq!(a.liars_caught, 2, "{a:?}");
        assert_eq!(a.wrong_accepted, 0, "{a:?}");
        let r = replay(
            &ends,
            &hosts_of,
            10,
            2,
            VerifyPlan::Replicate {
                replicas: 2,
                quorum: 2,
            },
            100,
            &mut rng,
        );
        assert_eq!((r.wrong_accepted, r.liars_caught), (0, 2), "{r:?}");
        assert_eq!(r.accepted, 5_000);
    }

    #[test]
    fn when_no_host_is_left_for_a_quorum_the_task_ends_without_one() {
        // Two hosts, both liars: no two copies ever agree.
        let (ends, hosts_of) = pool(10, 2);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let r = replay(
            &ends,
            &hosts_of,
            2,
            2,
            VerifyPlan::Replicate {
                replicas: 2,
                quorum: 2,
            },
            0,
            &mut rng,
        );
        assert_eq!(r.accepted, 0);
        assert!(r.no_quorum >= 1, "{r:?}");
    }
}
