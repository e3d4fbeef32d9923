//! Tail copies (issue 28, scope 3): when a batch's free hosts outnumber its
//! waiting tasks, which running tasks get an extra copy, and where. The
//! first copy to finish wins and the others are cancelled (the caller's job);
//! this rule only says which copies are worth starting.
//!
//! MapReduce's backup tasks and Kondo, Chien and Casanova's replication of
//! the tail: in a batch's tail the hosts that have nothing to run cost
//! nothing to use, and a long task killed late sets the makespan. A running
//! task is weighed by its expected finish if left alone — the time its
//! attempt still needs, plus, with the chance the host is taken back before
//! then, a restart from its last checkpoint on the best free host — and a
//! copy on a free host by how much it brings that expected finish down (the
//! two attempts are taken as independent: different owners). The tasks
//! expected to finish last are looked at first, each takes the free host
//! where its copy gains most, at most one copy each, and only while free
//! hosts are left over after every waiting task has had one. A task its
//! hosts' owners have killed again and again ([`TailRule::kills_for_more`])
//! may run more copies at once, one more at each look: it is long against
//! the pool's free spells, and only a start in the right host's rare long
//! spell finishes it (on the shared lab samples, a 17-hour task killed 48
//! times while 39 hosts stood idle: docs/scheduling.md, "More copies for a
//! task killed again and again").
//!
//! Pure code: the caller passes what it knows of the running attempts and
//! the free hosts (the simulator and the batch queue alike); nothing here
//! knows the queue, the network or the clock.

use super::place::HostView;

/// How much a copy must gain to be started, and whether a task's kills
/// so far weigh on its chance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailRule {
    /// A copy is started only when it brings the task's expected finish
    /// down by at least this share of it...
    pub min_gain_share: f64,
    /// ...and by at least this many seconds.
    pub min_gain_secs: f64,
    /// A task killed k times already has at most 1/(k+1) chance that its
    /// running attempt ends unhit, whatever its host's TR says: the
    /// owners have shown what the forecast missed.
    pub kill_evidence: bool,
    /// Copies a task may run beside its own attempt at once...
    pub copies: u32,
    /// Kills by its hosts' owners after which a task may run
    /// [`TailRule::copies_when_killed`] copies (`u32::MAX`: never).
    pub kills_for_more: u32,
    /// Copies a task killed [`TailRule::kills_for_more`] times may run at
    /// once: one more at each look, each only if it gains enough.
    pub copies_when_killed: u32,
    /// A running task expected to end more than this many times
    /// [`drain_secs`] from now (the time the batch's work left, its own
    /// included, takes the pool: past it the task alone sets the makespan)
    /// may get a copy while tasks still wait ([`critical_copies`]; `None`:
    /// only in the tail).
    pub critical_share: Option<f64>,
}

impl Default for TailRule {
    fn default() -> Self {
        TailRule::DEFAULT
    }
}

impl TailRule {
    /// The default rule (a `const`, for callers that keep it as one).
    pub const DEFAULT: TailRule = TailRule {
        min_gain_share: 0.05,
        min_gain_secs: 600.0,
        // On the desktop pools of docs/scheduling.md, as good or better
        // than without it on every pool (shared lab samples: 106 → 102 h).
        kill_evidence: true,
        copies: 1,
        // Shared lab samples, seeds 1-32: mean 82.0 -> 75 h, worst seed
        // 5.3x -> 3.0x the oracle; the desktop pools within noise.
        kills_for_more: 5,
        copies_when_killed: 3,
        // Desktop pools of docs/scheduling.md ("A copy for the task on the
        // critical path"), seeds 1-32 on three days: office and
        // weekends-away 2-3 % sooner on average, the rest within noise;
        // 1.0 and 1.25 within noise of it at up to 1.6x its extra CPU.
        critical_share: Some(1.5),
    };

    /// Whether a running attempt expected to need `left_secs` more sets
    /// the makespan alone: it ends more than
    /// [`TailRule::critical_share`] × `drain_secs` from now.
    pub fn on_critical_path(&self, left_secs: f64, drain_secs: f64) -> bool {
        self.critical_share
            .filter(|s| s.is_finite())
            .is_some_and(|share| drain_secs.is_finite() && left_secs > share * drain_secs)
    }

    /// How many copies a task killed `kills` times may run beside its own
    /// attempt at once.
    pub fn copies_allowed(&self, kills: u32) -> u32 {
        if kills >= self.kills_for_more {
            self.copies.max(self.copies_when_killed)
        } else {
            self.copies
        }
    }
}
/// A running attempt is expected to need at least this share of its
/// expected run still: one that has run past its expected end is slower
/// than expected (its host's owner is busy), not about to end.
pub const MIN_LEFT_SHARE: f64 = 0.1;

/// A running task that has one attempt and could get a copy.
#[derive(Debug, Clone, PartialEq)]
pub struct TailCandidate {
    /// Expected wall seconds until its running attempt ends.
    pub left_secs: f64,
    /// The chance its running attempt ends unhit (its host's TR over
    /// `left_secs`).
    pub p_finish: f64,
    /// Reference seconds of work a fresh copy must do (from the task's last
    /// checkpoint, or all of it).
    pub work_secs: f64,
    /// Times the task was killed so far (by its hosts' owners).
    pub kills: u32,
    /// Copies running beside its attempt already (taken to be as likely to
    /// end unhit as it, and independent of it).
    pub copies: u32,
}

/// Expected wall seconds a running attempt still needs: its expected run
/// less the time it has run, never below [`MIN_LEFT_SHARE`] of the run.
pub fn expected_left_secs(expected_run_secs: f64, elapsed_secs: f64) -> f64 {
    let run = expected_run_secs.max(0.0);
    (run - elapsed_secs.max(0.0)).max(run * MIN_LEFT_SHARE)
}

/// The expected finish (seconds from now) of `c` left alone, when a
/// restart after a kill costs `restart_secs`. A kill is taken to come, on
/// average, halfway through the run it ends.
fn finish_alone(c: &TailCandidate, restart_secs: f64) -> f64 {
    let p = c.p_finish.clamp(0.0, 1.0);
    let l = c.left_secs;
    p * l + (1.0 - p) * (0.5 * l + restart_secs)
}

/// The expected finish of `c` with a copy that would take `copy_secs` and
/// end unhit with chance `q`: the sooner of the two that end unhit, or a
/// restart once both are hit.
fn finish_with_copy(c: &TailCandidate, restart_secs: f64, copy_secs: f64, q: f64) -> f64 {
    let p = c.p_finish.clamp(0.0, 1.0);
    let q = q.clamp(0.0, 1.0);
    let l = c.left_secs;
    p * q * l.min(copy_secs)
        + p * (1.0 - q) * l
        + (1.0 - p) * q * copy_secs
        + (1.0 - p) * (1.0 - q) * (0.5 * l.max(copy_secs) + restart_secs)
}

/// The copies to start: pairs (index into `candidates`, index into
/// `free`), at most one per candidate (and none for one that runs
/// [`TailRule::copies_allowed`] already) and one per free host, at most
/// `free.len() - waiting` in all (none while waiting tasks need every free
/// host). Candidates expected to finish last come first; each takes the
/// free host where its copy lowers its expected finish most, if by at least
/// the rule's `min_gain_share` and `min_gain_secs`. `allowed(candidate, host)`
/// says whether that host may run that task at all (the caller's
/// exclusions: hosts that failed it, run a copy of it already...).
pub fn tail_copies(
    rule: &TailRule,
    waiting: usize,
    free: &[HostView],
    candidates: &[TailCandidate],
    allowed: impl Fn(usize, usize) -> bool,
) -> Vec<(usize, usize)> {
    let mut spare = free.len().saturating_sub(waiting);
    if spare == 0 || candidates.is_empty() {
        return Vec::new();
    }
    // A restart after a kill: from the candidate's checkpoint on the best
    // free host, counting its own restarts.
    let restart = |c: &TailCandidate| {
        free.iter()
            .map(|h| h.expected_turnaround(c.work_secs))
            .fold(f64::INFINITY, f64::min)
    };
    // Each running attempt's chance, and the chance that one of the task's
    // attempts running now ends unhit.
    let weighed: Vec<TailCandidate> = candidates
        .iter()
        .map(|c| {
            let each = if rule.kill_evidence {
                c.p_finish.min(1.0 / (f64::from(c.kills) + 1.0))
            } else {
                c.p_finish
            }
            .clamp(0.0, 1.0);
            TailCandidate {
                p_finish: 1.0 - (1.0 - each).powf(f64::from(c.copies) + 1.0),
                ..c.clone()
            }
        })
        .collect();
    let mut order: Vec<(usize, f64, f64)> = weighed
        .iter()
        .enumerate()
        .filter(|(_, c)| c.left_secs.is_finite() && c.work_secs > 0.0)
        .filter(|(_, c)| c.copies < rule.copies_allowed(c.kills))
        .map(|(i, c)| {
            let r = restart(c);
            (i, r, finish_alone(c, r))
        })
        .collect();
    // Latest expected finish first; ties by index so the answer is stable.
    order.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut taken = vec![false; free.len()];
    let mut out = Vec::new();
    for (i, restart_secs, alone) in order {
        if spare == 0 {
            break;
        }
        let c = &weighed[i];
        let best = free
            .iter()
            .enumerate()
            .filter(|(h, _)| !taken[*h] && allowed(i, *h))
            .filter_map(|(h, v)| {
                let copy_secs = v.expected_run_secs(c.work_secs);
                if !copy_secs.is_finite() {
                    return None;
                }
                let with = finish_with_copy(c, restart_secs, copy_secs, v.p_success(c.work_secs));
                Some((h, alone - with))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((h, gain)) = best else {
            continue;
        };
        // Left alone it may never finish (no free host could restart it):
        // any copy that makes its finish finite is worth it.
        let enough = if alone.is_finite() {
            gain >= rule.min_gain_secs && gain >= rule.min_gain_share * alone
        } else {
            gain > 0.0
        };
        if enough {
            taken[h] = true;
            spare -= 1;
            out.push((i, h));
        }
    }
    out
}

/// Seconds until the batch's work is done if the pool shares it out
/// evenly: `work_secs` of reference work left (the waiting tasks' and
/// the running attempts') over `capacity`, the pool's effective power
/// (the sum of Γ over its hosts that are up). Infinite with no capacity.
pub fn drain_secs(work_secs: f64, capacity: f64) -> f64 {
    if capacity > 0.0 && work_secs.is_finite() {
        work_secs.max(0.0) / capacity
    } else {
        f64::INFINITY
    }
}

/// Copies of the running tasks on the batch's critical path, started even
/// while tasks wait (Kondo, Chien and Casanova replicate the tail; a task
/// of three times the median run, killed part-way in the bulk, is the tail
/// from its restart on): among `candidates`, those expected to end later
/// than [`TailRule::critical_share`] × `drain_secs` ([`drain_secs`] of the
/// batch's work left, theirs included), each weighed as
/// [`tail_copies`] weighs it with every free host spare. A copy delays
/// the waiting tasks by its run spread over the pool, a small share of
/// the makespan the task sets alone. Pairs as [`tail_copies`]'.
pub fn critical_copies(
    rule: &TailRule,
    drain_secs: f64,
    free: &[HostView],
    candidates: &[TailCandidate],
    allowed: impl Fn(usize, usize) -> bool,
) -> Vec<(usize, usize)> {
    let critical: Vec<usize> = (0..candidates.len())
        .filter(|&i| rule.on_critical_path(candidates[i].left_secs, drain_secs))
        .collect();
    if critical.is_empty() {
        return Vec::new();
    }
    let picked: Vec<TailCandidate> = critical.iter().map(|&i| candidates[i].clone()).collect();
    tail_copies(rule, 0, free, &picked, |c, h| allowed(critical[c], h))
        .into_iter()
        .map(|(c, h)| (critical[c], h))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::curve::TrCurve;

    fn host(mttf_secs: Option<f64>) -> HostView {
        HostView {
            power: 1.0,
            availability: 1.0,
            curve: mttf_secs.map_or_else(TrCurve::never_fails, TrCurve::exponential),
        }
    }

    fn running(left_secs: f64, p_finish: f64) -> TailCandidate {
        TailCandidate {
            left_secs,
            p_finish,
            work_secs: 3.0 * 3600.0,
            kills: 0,
            copies: 0,
        }
    }

    #[test]
    fn a_task_killed_again_and_again_may_run_more_copies_others_one() {
        let rule = TailRule::default();
        let free = vec![host(None), host(None)];
        let copied = |kills: u32, copies: u32| {
            let c = vec![TailCandidate {
                kills,
                copies,
                ..running(12.0 * 3600.0, 0.3)
            }];
            tail_copies(&rule, 0, &free, &c, |_, _| true).len()
        };
        assert_eq!(copied(0, 0), 1, "one copy for any task at risk");
        assert_eq!(copied(rule.kills_for_more - 1, 1), 0, "one copy at most");
        assert_eq!(copied(rule.kills_for_more, 1), 1, "killed often: another");
        assert_eq!(copied(rule.kills_for_more, 2), 1);
        assert_eq!(copied(rule.kills_for_more, 3), 0, "and no more than three");
        assert_eq!(rule.copies_allowed(0), 1);
        assert_eq!(rule.copies_allowed(rule.kills_for_more), 3);
    }

    #[test]
    fn the_copies_running_already_count_in_the_tasks_chance() {
        // A task sure to end unhit with its copies gets no other copy.
        let rule = TailRule {
            kill_evidence: false,
            kills_for_more: 0,
            ..TailRule::default()
        };
        // 2 h left at even odds: a sure 3 h copy gains 30 min; with two
        // copies running already (7 in 8 that one ends unhit), 7.5 min.
        let free = vec![host(None)];
        let c = |copies| {
            vec![TailCandidate {
                copies,
                ..running(2.0 * 3600.0, 0.5)
            }]
        };
        assert_eq!(tail_copies(&rule, 0, &free, &c(0), |_, _| true).len(), 1);
        assert!(tail_copies(&rule, 0, &free, &c(2), |_, _| true).is_empty());
    }

    #[test]
    fn no_copy_while_waiting_tasks_need_every_free_host() {
        let free = vec![host(None), host(None)];
        let c = vec![running(8.0 * 3600.0, 0.2)];
        assert!(tail_copies(&TailRule::default(), 2, &free, &c, |_, _| true).is_empty());
        assert_eq!(
            tail_copies(&TailRule::default(), 1, &free, &c, |_, _| true).len(),
            1
        );
    }

    #[test]
    fn the_task_at_risk_gets_the_copy_not_the_safe_one() {
        let free = vec![host(None)];
        let c = vec![running(2.0 * 3600.0, 0.99), running(2.0 * 3600.0, 0.3)];
        assert_eq!(
            tail_copies(&TailRule::default(), 0, &free, &c, |_, _| true),
            vec![(1, 0)]
        );
    }

    #[test]
    fn the_latest_finisher_goes_first_and_each_host_is_used_once() {
        let free = vec![host(None)];
        let c = vec![running(1.0 * 3600.0, 0.5), running(5.0 * 3600.0, 0.5)];
        assert_eq!(
            tail_copies(&TailRule::default(), 0, &free, &c, |_, _| true),
            vec![(1, 0)]
        );
        let two = vec![host(None), host(None)];
        let got = tail_copies(&TailRule::default(), 0, &two, &c, |_, _| true);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, 1);
        assert_ne!(got[0].1, got[1].1);
    }

    #[test]
    fn a_safe_task_about_to_end_gets_no_copy() {
        let free = vec![host(None)];
        let c = vec![running(600.0, 0.999)];
        assert!(tail_copies(&TailRule::default(), 0, &free, &c, |_, _| true).is_empty());
    }

    #[test]
    fn a_copy_on_a_host_likelier_to_be_hit_than_the_running_one_is_not_started() {
        // The running attempt is sure to end in 1 h; a copy would need 3 h
        // on a host that fails hourly: it cannot bring the finish down.
        let free = vec![host(Some(3600.0))];
        let c = vec![running(3600.0, 1.0)];
        assert!(tail_copies(&TailRule::default(), 0, &free, &c, |_, _| true).is_empty());
    }

    #[test]
    fn the_copy_goes_to_the_free_host_that_gains_most() {
        let free = vec![host(Some(2.0 * 3600.0)), host(None)];
        let c = vec![running(6.0 * 3600.0, 0.3)];
        assert_eq!(
            tail_copies(&TailRule::default(), 0, &free, &c, |_, _| true),
            vec![(0, 1)]
        );
    }

    #[test]
    fn a_host_the_caller_excludes_for_a_task_is_not_given_its_copy() {
        let free = vec![host(Some(2.0 * 3600.0)), host(None)];
        let c = vec![running(6.0 * 3600.0, 0.3)];
        assert_eq!(
            tail_copies(&TailRule::default(), 0, &free, &c, |_, h| h != 1),
            vec![(0, 0)]
        );
        assert!(tail_copies(&TailRule::default(), 0, &free, &c, |_, _| false).is_empty());
    }

    #[test]
    fn a_task_ending_after_the_rest_of_the_batch_gets_a_copy_while_tasks_wait() {
        let rule = TailRule::default();
        let free = vec![host(None), host(None)];
        // Ten hours left at even odds; the batch's work drains in 4 h, and
        // the task of 4 h left is not past 1.5 times that.
        let c = vec![running(4.0 * 3600.0, 0.5), running(10.0 * 3600.0, 0.5)];
        // Tasks wait: no tail copy, but the critical one gets its copy.
        assert!(tail_copies(&rule, 5, &free, &c, |_, _| true).is_empty());
        assert_eq!(
            critical_copies(&rule, 4.0 * 3600.0, &free, &c, |_, _| true),
            vec![(1, 0)]
        );
        // Ending before the rest drains, it is no critical task.
        assert!(critical_copies(&rule, 12.0 * 3600.0, &free, &c, |_, _| true).is_empty());
        // Nor one the caller excludes from the host, nor with the rule off.
        assert!(critical_copies(&rule, 4.0 * 3600.0, &free, &c, |c, _| c != 1).is_empty());
        let off = TailRule {
            critical_share: None,
            ..rule
        };
        assert!(critical_copies(&off, 4.0 * 3600.0, &free, &c, |_, _| true).is_empty());
        assert!(critical_copies(&rule, f64::INFINITY, &free, &c, |_, _| true).is_empty());
        assert_eq!(drain_secs(7200.0, 2.0), 3600.0);
        assert!(drain_secs(7200.0, 0.0).is_infinite());
    }

    #[test]
    fn left_time_never_drops_below_its_floor() {
        assert_eq!(expected_left_secs(1000.0, 200.0), 800.0);
        assert_eq!(expected_left_secs(1000.0, 5000.0), 100.0);
    }
}
