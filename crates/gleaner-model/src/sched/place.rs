//! Proactive placement: what a task is expected to cost on a host, and
//! which free host it should go to so the batch's expected makespan is
//! smallest (issue 11, scope 1).
//!
//! A host is described by what the consumer can know of it: its relative
//! power P, its predicted availability A over the coming window (from its
//! history, not only its last reading) and its TR curve over window
//! lengths. A task is its runtime estimate on a dedicated reference host.
//! Then: expected run time = runtime · SP (SP = 1/(P·A), seed 004),
//! P(success) = TR(expected run time), expected turnaround counting restarts
//! = ∫₀^r TR / TR(r). Pure code.

use super::curve::TrCurve;
use super::power::{effective_power, slowdown};
use serde::{Deserialize, Serialize};

/// What the consumer knows of a host when it places a task there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostView {
    /// Relative power P in (0, 1]: the host's speed against the pool's fastest.
    pub power: f64,
    /// Predicted availability A in [0, 1] over the coming window (1 − owner load).
    pub availability: f64,
    /// TR over window lengths, for windows starting now.
    pub curve: TrCurve,
}

impl HostView {
    /// Γ = P·A.
    pub fn gamma(&self) -> f64 {
        effective_power(self.power, self.availability)
    }

    /// Wall seconds `runtime_secs` of reference work take here (runtime · SP).
    pub fn expected_run_secs(&self, runtime_secs: f64) -> f64 {
        runtime_secs * slowdown(self.gamma())
    }

    /// The probability that a task of `runtime_secs` finishes here unhit.
    pub fn p_success(&self, runtime_secs: f64) -> f64 {
        let run = self.expected_run_secs(runtime_secs);
        if run.is_finite() {
            self.curve.tr_at(run)
        } else {
            0.0
        }
    }

    /// Expected wall seconds until the task has succeeded, counting restarts
    /// from zero (on hosts like this one).
    pub fn expected_turnaround(&self, runtime_secs: f64) -> f64 {
        let run = self.expected_run_secs(runtime_secs);
        if run.is_finite() {
            self.curve.expected_time_with_restarts(run)
        } else {
            f64::INFINITY
        }
    }
}

/// How long a task keeps off a host after an attempt of it ended badly
/// there (its owner took the machine back, or it failed): an hour, long
/// enough that a task killed at once goes to the pool's other hosts first,
/// short against a desktop owner's day. The node's batch queue
/// (`consumer/batch/queue/avoid.rs`) and the simulator keep to it.
pub const AVOID_SECS: u64 = 3600;

/// How far down the queue a free host looks for a task it should take
/// (bounds the work per placement; the queue is longest first, so the tasks
/// further down are shorter and a weak host fits them better).
pub const LOOKAHEAD: usize = 8;

/// Task indices ordered longest first (LPT), ties by index so the order is
/// stable. Use it when runtimes are known: long tasks placed last set the makespan.
pub fn longest_first(runtimes: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..runtimes.len()).collect();
    order.sort_by(|&a, &b| runtimes[b].total_cmp(&runtimes[a]).then(a.cmp(&b)));
    order
}

/// The free host (an index into `hosts`, drawn from `free`) with the least
/// expected turnaround for a task of `runtime_secs`; ties go to the lower
/// index; `None` when no free host can run it.
pub fn choose_host(runtime_secs: f64, hosts: &[HostView], free: &[usize]) -> Option<usize> {
    free.iter()
        .filter(|&&h| h < hosts.len())
        .map(|&h| (h, hosts[h].expected_turnaround(runtime_secs)))
        .filter(|(_, e)| e.is_finite())
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(h, _)| h)
}

/// The proactive rule, from the free host's side: which waiting task (a
/// position in `queue`, runtimes in queue order, longest first) host `host`
/// should take now so that the batch's expected makespan is least, or `None`
/// when it should stay idle.
///
/// `free_in[g]` is the expected wall time until host g is free (0 for a free
/// host, infinity for one that cannot be used). Task j (0-based) waits for
/// a better host only when more than j busy hosts would finish it sooner
/// (expected time until free plus expected turnaround there) than this host
/// would, free hosts counted with a wait of 0 — the j tasks ahead of it
/// take the first of them. The first [`LOOKAHEAD`] tasks are weighed one by
/// one; beyond them the task at position max(other hosts, LOOKAHEAD)
/// qualifies by counting alone. While more tasks wait than there are hosts
/// plus [`LOOKAHEAD`] (not yet the batch's tail) the head goes at once:
/// every host is needed, as in list scheduling.
pub fn pick_task_for_host(
    host: usize,
    hosts: &[HostView],
    free_in: &[f64],
    queue: &[f64],
) -> Option<usize> {
    if host >= hosts.len() || free_in.len() != hosts.len() {
        return None;
    }
    let slowdowns: Vec<f64> = hosts.iter().map(|h| h.expected_run_secs(1.0)).collect();
    let order = by_slowdown(&slowdowns);
    let rule = Rule {
        order: &order,
        free_sorted: None,
        lower: |j: usize, g: usize| queue[j] * slowdowns[g],
        free_in: |g: usize| free_in[g],
        queue_len: queue.len(),
    };
    rule.pick_for_host(
        host,
        &mut Scan(|j: usize, g: usize| hosts[g].expected_turnaround(queue[j])),
    )
}

/// The expected turnarounds the rule weighs, as its caller knows them.
pub(crate) trait Turnarounds {
    /// The expected turnaround of queue position `j` on host `g`.
    fn turnaround(&mut self, j: usize, g: usize) -> f64;

    /// Every host by position `j`'s expected turnaround there, least
    /// first, ties in the rule's order, and those turnarounds (see
    /// [`Ranked`]); `None` when the caller keeps no such list (the rule
    /// then scans). Only for a position whose finite turnarounds are all
    /// at least the rule's lower bound: then a scan's early stop skips no
    /// host the list would have found, and the two give the same answer.
    fn ranked(&mut self, _j: usize) -> Option<Ranked<'_>> {
        None
    }

    /// Whether position `j` can succeed on host `g` at all (its expected
    /// turnaround there is finite): all the bulk asks of a host. A caller
    /// that knows it more cheaply than the turnaround (the estimate, from
    /// a host's horizon) answers so, with the same answer but for rounding
    /// at the horizon itself.
    fn can_run(&mut self, j: usize, g: usize) -> bool {
        self.turnaround(j, g).is_finite()
    }
}

/// A position's hosts ranked by its expected turnaround there
/// ([`Turnarounds::ranked`]). An entry is a host; or, when a host has
/// several turnarounds of which one holds now (the estimate's: a host as
/// at submission or as just back from a failure, as of how long it has
/// been up), entry b·n + g is host g's b-th, and the rule passes over the
/// entries that do not hold.
pub(crate) struct Ranked<'a> {
    /// The entries, least turnaround first (infinite ones last).
    pub order: &'a [u32],
    /// The turnaround of each entry.
    pub cells: &'a [f64],
    /// With several entries per host: which holds now.
    pub blocks: Option<Blocks<'a>>,
}

/// A ranking's entries when a host has several ([`Ranked`]).
#[derive(Clone, Copy)]
pub(crate) struct Blocks<'a> {
    /// The hosts (n).
    pub hosts: usize,
    /// Entries per host.
    pub per_host: usize,
    /// Which of host g's entries holds now (taken modulo `per_host`).
    pub block_of: &'a dyn Fn(usize) -> usize,
}

impl Ranked<'_> {
    /// The host of `entry`.
    fn host(&self, entry: u32) -> usize {
        let entry = entry as usize;
        self.blocks.map_or(entry, |b| entry % b.hosts.max(1))
    }

    /// Whether `entry` (one of host `g`'s) is the one that holds now:
    /// asked last, after the cheaper tests, as it asks the caller.
    fn holds(&self, entry: u32, g: usize) -> bool {
        self.blocks
            .is_none_or(|b| entry as usize / b.hosts.max(1) == (b.block_of)(g) % b.per_host.max(1))
    }

    /// Entries per host.
    fn per_host(&self) -> usize {
        self.blocks.map_or(1, |b| b.per_host.max(1))
    }
}

/// Turnarounds from a function, with no ranked lists: the rule scans.
pub(crate) struct Scan<T>(pub T);

impl<T: FnMut(usize, usize) -> f64> Turnarounds for Scan<T> {
    fn turnaround(&mut self, j: usize, g: usize) -> f64 {
        (self.0)(j, g)
    }
}

/// Host indices by slowdown, fastest first (ties by index): the order the
/// rule scans hosts in, so that a scan can stop at the first host too slow
/// to matter.
pub(crate) fn by_slowdown(slowdowns: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..slowdowns.len()).collect();
    // Ties go by index, so no two compare equal: unstable is as stable, and faster.
    order.sort_unstable_by(|&a, &b| slowdowns[a].total_cmp(&slowdowns[b]).then(a.cmp(&b)));
    order
}

/// The pool as the proactive rule sees it at one instant.
///
/// `order` lists every host once, and `lower(j, g)` is a lower bound of the
/// expected turnaround of queue position j on host g that does not fall
/// along `order` (runtime × SP with `order` by SP: a run takes at least its
/// failure-free time), so a scan for hosts that would end j sooner than
/// some time stops at the first host whose bound reaches it.
pub(crate) struct Rule<'a, L, F> {
    pub order: &'a [usize],
    /// The free hosts in `order`'s order, when the caller keeps them so
    /// (else they are found by scanning `order` for a wait of 0).
    pub free_sorted: Option<&'a [usize]>,
    pub lower: L,
    /// Expected wait until host g is free: 0 when free, infinite when unusable.
    pub free_in: F,
    pub queue_len: usize,
}

impl<L, F> Rule<'_, L, F>
where
    L: Fn(usize, usize) -> f64,
    F: Fn(usize) -> f64,
{
    fn n_hosts(&self) -> usize {
        self.order.len()
    }

    /// Not the tail yet: every host will be needed, and the head (the
    /// longest task) is what list scheduling gives the first free host.
    pub fn in_bulk(&self) -> bool {
        self.queue_len > self.n_hosts() + LOOKAHEAD
    }

    /// The queue position free host `host` takes in the bulk: the first of
    /// the first [`LOOKAHEAD`] positions it can run, the head first (a
    /// head that keeps off this host, `AVOID_SECS`, or cannot finish
    /// there does not leave it idle while other tasks wait; the node's
    /// queue takes the first task a host may start too).
    fn bulk_position(&self, host: usize, turnarounds: &mut impl Turnarounds) -> Option<usize> {
        (0..self.queue_len.min(LOOKAHEAD)).find(|&j| turnarounds.can_run(j, host))
    }

    /// Whether at most `j` hosts other than `host` would end the task at
    /// queue position `j` sooner than `mine` (its expected turnaround on `host`).
    fn better_hosts_at_most(
        &self,
        host: usize,
        j: usize,
        mine: f64,
        turnarounds: &mut impl Turnarounds,
    ) -> bool {
        let mut better = 0;
        // With several entries per host the ranking holds many that do not
        // hold now, and the scan below (same answer) visits fewer.
        if let Some(ranked) = turnarounds.ranked(j).filter(|r| r.per_host() == 1) {
            // The hosts that end j sooner than `mine` with no wait, and
            // only they, come before the first that does not.
            for &entry in ranked.order {
                let t = ranked.cells[entry as usize];
                if t.is_nan() || t >= mine {
                    break;
                }
                let g = ranked.host(entry);
                if g == host {
                    continue;
                }
                let wait = (self.free_in)(g);
                if wait < mine && wait + t < mine && ranked.holds(entry, g) {
                    better += 1;
                    if better > j {
                        return false;
                    }
                }
            }
            return true;
        }
        for &g in self.order {
            if (self.lower)(j, g) >= mine {
                break;
            }
            if g == host {
                continue;
            }
            let wait = (self.free_in)(g);
            if wait < mine && wait + turnarounds.turnaround(j, g) < mine {
                better += 1;
                if better > j {
                    return false;
                }
            }
        }
        true
    }

    /// [`pick_task_for_host`]: the queue position free host `host` takes.
    pub fn pick_for_host(&self, host: usize, turnarounds: &mut impl Turnarounds) -> Option<usize> {
        if self.in_bulk() {
            return self.bulk_position(host, turnarounds);
        }
        let others = self.n_hosts().saturating_sub(1);
        for j in 0..self.queue_len.min(LOOKAHEAD) {
            let mine = turnarounds.turnaround(j, host);
            if !mine.is_finite() {
                continue;
            }
            if j >= others || self.better_hosts_at_most(host, j, mine, turnarounds) {
                return Some(j);
            }
        }
        // Past the lookahead, the task at position `others` always qualifies;
        // take it when the queue reaches it.
        let j = others.max(LOOKAHEAD);
        (j < self.queue_len && turnarounds.turnaround(j, host).is_finite()).then_some(j)
    }

    /// The free host (wait 0) that would end position `j` soonest, with
    /// its expected turnaround; ties go to the faster, then lower, index.
    fn best_free(&self, j: usize, turnarounds: &mut impl Turnarounds) -> Option<(usize, f64)> {
        if let Some(ranked) = turnarounds.ranked(j) {
            // The first free host in the ranking; unusable hosts (an
            // infinite turnaround) come last. The walk pays a step for
            // every busy host ranked ahead of it: with few hosts free,
            // asking each of them is cheaper, so after a few steps per
            // free host the scan below takes over (same answer). Entries
            // that do not hold now (a host's other turnarounds) are passed
            // over, and count as steps too.
            let budget = self.free_sorted.map_or(usize::MAX, |f| 4 * f.len() + 16);
            let mut walked_all = true;
            for (steps, &entry) in ranked.order.iter().enumerate() {
                if steps == budget {
                    walked_all = false;
                    break;
                }
                let t = ranked.cells[entry as usize];
                if !t.is_finite() {
                    return None;
                }
                let g = ranked.host(entry);
                if (self.free_in)(g) == 0.0 && ranked.holds(entry, g) {
                    return Some((g, t));
                }
            }
            if walked_all {
                return None;
            }
        }
        let mut best: Option<(usize, f64)> = None;
        let (hosts, all) = match self.free_sorted {
            Some(free) => (free, false),
            None => (self.order, true),
        };
        for &g in hosts {
            if best.is_some_and(|(_, t)| (self.lower)(j, g) >= t) {
                break;
            }
            if all && (self.free_in)(g) != 0.0 {
                continue;
            }
            let t = turnarounds.turnaround(j, g);
            if t.is_finite() && best.is_none_or(|(_, b)| t < b) {
                best = Some((g, t));
            }
        }
        best
    }

    /// The same rule from the tasks' side, for every free host at once:
    /// the first (queue position, host) pair the rule places, or `None`
    /// when every free host should stay idle.
    ///
    /// Position j goes to the free host that would end it soonest, if that
    /// host takes it by [`Self::pick_for_host`]'s count. A free host that
    /// would not take j cannot be one that ends j sooner, so no other free
    /// host would take it either: asking positions in order finds what
    /// asking each free host would find (ties aside), at the cost of one
    /// count per position instead of one per free host and position.
    /// In the bulk the head goes to the first free host in the rule's
    /// order (fastest first) that can run it; if none can, the first free
    /// host takes the first of the next positions it can run.
    pub fn pick_pair(&self, turnarounds: &mut impl Turnarounds) -> Option<(usize, usize)> {
        if self.queue_len == 0 {
            return None;
        }
        if self.in_bulk() {
            let mut free = self
                .free_sorted
                .unwrap_or(self.order)
                .iter()
                .copied()
                .filter(|&g| (self.free_in)(g) == 0.0);
            if let Some(g) = free.clone().find(|&g| turnarounds.can_run(0, g)) {
                return Some((0, g));
            }
            return free.find_map(|g| self.bulk_position(g, turnarounds).map(|j| (j, g)));
        }
        let others = self.n_hosts().saturating_sub(1);
        for j in 0..self.queue_len.min(LOOKAHEAD) {
            let Some((host, mine)) = self.best_free(j, turnarounds) else {
                continue;
            };
            if j >= others || self.better_hosts_at_most(host, j, mine, turnarounds) {
                return Some((j, host));
            }
        }
        let j = others.max(LOOKAHEAD);
        if j < self.queue_len {
            return self.best_free(j, turnarounds).map(|(g, _)| (j, g));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(power: f64, availability: f64, mttf: f64) -> HostView {
        HostView {
            power,
            availability,
            curve: TrCurve::exponential(mttf),
        }
    }

    #[test]
    fn in_the_bulk_a_host_the_head_keeps_off_takes_the_next_task_it_can_run() {
        // One free host, twenty tasks waiting (the bulk); the head cannot
        // run there (it keeps off the host, or cannot finish): the host
        // takes the next task rather than stand idle.
        let order = [0];
        let rule = Rule {
            order: &order,
            free_sorted: None,
            lower: |_: usize, _: usize| 0.0,
            free_in: |_: usize| 0.0,
            queue_len: 20,
        };
        assert!(rule.in_bulk());
        let turnaround = |j: usize, _: usize| if j == 0 { f64::INFINITY } else { 3600.0 };
        assert_eq!(rule.pick_for_host(0, &mut Scan(turnaround)), Some(1));
        assert_eq!(rule.pick_pair(&mut Scan(turnaround)), Some((1, 0)));
        // A head it can run still goes first.
        let any = |_: usize, _: usize| 3600.0;
        assert_eq!(rule.pick_pair(&mut Scan(any)), Some((0, 0)));
    }

    #[test]
    fn expected_costs_combine_sp_and_tr() {
        // P = 0.5, A = 0.8: SP = 2.5; 1440 s of work takes 3600 s.
        let h = host(0.5, 0.8, 3600.0);
        assert!((h.expected_run_secs(1440.0) - 3600.0).abs() < 1e-9);
        // M = 1 h: P(success) = e^-1, turnaround with restarts 3600·(e − 1).
        assert!((h.p_success(1440.0) - (-1.0f64).exp()).abs() < 1e-12);
        assert!((h.expected_turnaround(1440.0) - 3600.0 * (1f64.exp() - 1.0)).abs() < 1e-6);
        let dead = host(0.5, 0.0, 3600.0);
        assert_eq!(dead.p_success(10.0), 0.0);
        assert!(dead.expected_turnaround(10.0).is_infinite());
    }

    #[test]
    fn the_free_host_with_the_least_expected_turnaround_wins() {
        let hosts = vec![
            host(1.0, 1.0, 1e9),   // fast and safe
            host(1.0, 1.0, 600.0), // fast, fails often
            host(0.5, 1.0, 1e9),   // half speed, safe
        ];
        // A 1 h task: host 1 expects 600·(e^6 − 1) ≈ 242 000 s, host 2 7200 s.
        assert_eq!(choose_host(3600.0, &hosts, &[1, 2]), Some(2));
        assert_eq!(choose_host(3600.0, &hosts, &[0, 1, 2]), Some(0));
        assert_eq!(choose_host(3600.0, &hosts, &[]), None);
        assert_eq!(longest_first(&[1.0, 5.0, 3.0, 5.0]), vec![1, 3, 2, 0]);
    }

    #[test]
    fn in_the_tail_a_weak_host_leaves_the_long_task_to_a_better_one() {
        let hosts = vec![host(1.0, 1.0, 1e9), host(0.25, 1.0, 1e9)];
        // Host 0 is busy for 600 s more; host 1 is free and 4× slower.
        let free_in = [600.0, 0.0];
        // One 1 h task left: host 0 finishes it at 600 + 3600 < 14 400 on host 1.
        assert_eq!(pick_task_for_host(1, &hosts, &free_in, &[3600.0]), None);
        // A 1 h task then a 100 s task: host 1 takes the short one (400 s on it).
        assert_eq!(
            pick_task_for_host(1, &hosts, &free_in, &[3600.0, 100.0]),
            Some(1)
        );
        // Three equal tasks: the head waits for host 0, host 1 takes the second.
        assert_eq!(
            pick_task_for_host(1, &hosts, &free_in, &[3600.0, 3600.0, 3600.0]),
            Some(1)
        );
        // Both free: the fast host takes the task, the slow one leaves it.
        assert_eq!(
            pick_task_for_host(0, &hosts, &[0.0, 0.0], &[3600.0]),
            Some(0)
        );
        assert_eq!(pick_task_for_host(1, &hosts, &[0.0, 0.0], &[3600.0]), None);
        // A host that would be slower than waiting even for a short task idles.
        let free_in = [10.0, 0.0];
        assert_eq!(pick_task_for_host(1, &hosts, &free_in, &[100.0]), None);
        assert_eq!(pick_task_for_host(5, &hosts, &free_in, &[100.0]), None);
    }
}
