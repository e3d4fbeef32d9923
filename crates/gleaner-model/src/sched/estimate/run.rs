//! One Monte Carlo run of the estimate: its events, the hosts' failures
//! and returns drawn as it goes, attempts started and hit, and free hosts
//! given waiting tasks by the proactive rule (CISNE's Algorithm 1). What
//! a run draws of a host's failures and returns is `failures`'.

use super::super::place::Rule;
use super::bootstrap::{rest_of_outage, SpellUrn};
use super::draw::standard_normal;
use super::facts::{block, fits, HostFacts, AGES};
use super::held::Hold;
use super::memo::{Memo, QueueTurnarounds};
use super::{EstimateInput, MAX_ATTEMPTS};
use rand::Rng;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

mod failures;

/// What happens at an event. Indices are u32 (within [`super::MAX_TASKS`] and
/// [`super::MAX_HOSTS`]) and a failure's saved share sits in `Run::saved`, so an
/// event is 32 bytes, not 48: the heap moves events on every pop and push,
/// hundreds of millions of them in an estimate at 1,000 hosts.
#[derive(Debug, Clone, Copy)]
pub(super) enum EventKind {
    /// Task ended on host.
    Finish { task: u32, host: u32 },
    /// Task's attempt was hit on host, keeping `Run::saved[task]` of its work.
    Fail { task: u32, host: u32 },
    /// Host is free again (its own work or its recovery ended); stale
    /// unless its epoch still matches (a held window took the host first).
    HostFree { host: u32, epoch: u32 },
    /// An idle host's failure time came (stale unless its epoch still matches).
    HostDown { host: u32, epoch: u32 },
    /// A held task's window opened (an index into the plan's holds).
    Window { hold: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed, so the max-heap pops the earliest event first. At one
    /// instant a held window comes first: a host free at that instant is
    /// its window's, not the rule's to hand to another task.
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        let window = |e: &Event| matches!(e.kind, EventKind::Window { .. });
        other
            .time
            .total_cmp(&self.time)
            .then(window(self).cmp(&window(other)))
            .then(other.seq.cmp(&self.seq))
    }
}

/// The mutable state of one run, reused between runs to spare allocations.
pub(super) struct Run {
    /// σ of ln(true runtime / estimate) (0: exact).
    pub(super) sigma: f64,
    /// The estimated work left per task (what the rule plans with: the
    /// estimated runtime, less what checkpoints saved, as the simulator's
    /// and the node's rule weigh a resumed task by its remaining work).
    pub(super) runtimes: Vec<f64>,
    heap: BinaryHeap<Event>,
    seq: u64,
    pub(super) queue: VecDeque<usize>,
    /// Reference work left per task, in this run's true runtimes.
    left: Vec<f64>,
    /// This run's true runtime over the estimate, per task.
    factor: Vec<f64>,
    attempts: Vec<u32>,
    /// Per task: the share of its work its pending `Fail` keeps.
    saved: Vec<f64>,
    pub(super) end: Vec<f64>,
    /// Per host: when it is expected to be free (≤ now: free).
    free_at: Vec<f64>,
    pub(super) is_free: Vec<bool>,
    /// Per host: its next failure time (infinite: none).
    pub(super) next_fail: Vec<f64>,
    /// Per host: this run's failure rate after a return and past the
    /// curve's last window (NaN: none known; the curve decides).
    pub(super) rate: Vec<f64>,
    /// Per host: this run's picks from its past spells (used only for
    /// hosts with a [`super::bootstrap::SpellBootstrap`]).
    pub(super) urns: Vec<SpellUrn>,
    /// Per host: this run's picks of its past days, day by day from the
    /// submission (used only for hosts with [`HostFacts::replay`]).
    picks: Vec<Vec<u16>>,
    /// Per host: bumped when it takes a task, so a pending `HostDown` of
    /// an earlier idle spell is recognised as stale.
    epoch: Vec<u32>,
    /// Free hosts, fastest first (by their place in the rule's order).
    free_list: Vec<usize>,
    /// Per host: its place in the rule's scan order.
    rank: Vec<u32>,
    /// Per host: it has come back from a failure in this run (or from the
    /// outage it was in at the start), so the rule weighs it by its curve
    /// for a host just back ([`HostFacts::back`]), as the run draws its
    /// failures from then on, not by its curve at submission.
    pub(super) back: Vec<bool>,
    /// Per host: when its clock started (its last return, or the
    /// submission): the rule reads its curve as of the time up since
    /// ([`super::facts::block`]).
    pub(super) since: Vec<f64>,
    /// While `recheck_all` is off: the first time some host's block
    /// changes (its age reaches the next of [`AGES`]), busy or free. A
    /// free host whose block changed may answer differently, and so may
    /// the free hosts a busy one is counted against: from then every free
    /// host is weighed again (see `dispatch`).
    next_age: f64,
    /// Hosts that became free since the last dispatch.
    fresh: Vec<usize>,
    /// Hosts that became free since the last dispatch, to be given a
    /// `HostDown` event if they stay idle (not before: most take work at once).
    armed: Vec<usize>,
    /// Something other than a host becoming free changed what the rule
    /// sees (the queue's head, a host's expected wait grew): every free
    /// host must be weighed again, not only the fresh ones.
    pub(super) recheck_all: bool,
    pub(super) running: usize,
    /// Per host: one of our attempts runs there.
    pub(super) ours: Vec<bool>,
    /// The plan's held tasks, which wait for their windows outside the queue.
    pub(super) holds: Vec<Hold>,
    /// Held tasks whose window has not come yet.
    pub(super) holds_pending: usize,
    /// Attempts hit in this run.
    pub(super) failures: u64,
    /// A task ran out of attempts in this run.
    gave_up: bool,
}

impl Run {
    pub(super) fn new(n_hosts: usize, runtimes: &[f64]) -> Run {
        let n_tasks = runtimes.len();
        Run {
            sigma: 0.0,
            runtimes: runtimes.to_vec(),
            heap: BinaryHeap::with_capacity(2 * n_hosts),
            seq: 0,
            queue: VecDeque::with_capacity(n_tasks),
            left: vec![0.0; n_tasks],
            factor: vec![1.0; n_tasks],
            attempts: vec![0; n_tasks],
            saved: vec![0.0; n_tasks],
            end: vec![0.0; n_tasks],
            free_at: vec![0.0; n_hosts],
            is_free: vec![false; n_hosts],
            next_fail: vec![f64::INFINITY; n_hosts],
            rate: vec![f64::NAN; n_hosts],
            urns: vec![SpellUrn::default(); n_hosts],
            picks: vec![Vec::new(); n_hosts],
            epoch: vec![0; n_hosts],
            free_list: Vec::with_capacity(n_hosts),
            rank: Vec::new(),
            back: vec![false; n_hosts],
            since: vec![0.0; n_hosts],
            next_age: f64::INFINITY,
            fresh: Vec::with_capacity(n_hosts),
            armed: Vec::with_capacity(n_hosts),
            recheck_all: true,
            running: 0,
            ours: vec![false; n_hosts],
            holds: Vec::new(),
            holds_pending: 0,
            failures: 0,
            gave_up: false,
        }
    }

    pub(super) fn push(&mut self, time: f64, kind: EventKind) {
        self.seq += 1;
        self.heap.push(Event {
            time,
            seq: self.seq,
            kind,
        });
    }

    /// Host `host` is free from `now`: it can take work, and if it is
    /// still idle after the dispatch and its next failure comes before it
    /// takes any, it goes down then.
    pub(super) fn host_free(&mut self, host: usize, now: f64) {
        self.is_free[host] = true;
        self.free_at[host] = now;
        let rank = &self.rank;
        let at = self.free_list.partition_point(|&g| rank[g] < rank[host]);
        self.free_list.insert(at, host);
        self.fresh.push(host);
        self.armed.push(host);
    }

    pub(super) fn remove_free(&mut self, host: usize) {
        let rank = &self.rank;
        let at = self.free_list.partition_point(|&g| rank[g] < rank[host]);
        if self.free_list.get(at) == Some(&host) {
            self.free_list.remove(at);
        }
    }

    /// Starts an attempt of `task` on `host` at `now`: its end, or its
    /// failure when the host's next failure comes first. With checkpoints
    /// the task writes one after every `checkpoint` seconds of work (wall
    /// seconds at the host's expected speed) and each adds its cost to the
    /// run, as the simulator and the guest contract have it.
    pub(super) fn start(&mut self, facts: &[HostFacts], task: usize, host: usize, now: f64) {
        let fact = &facts[host];
        let work = self.left[task] * fact.slowdown;
        let (tau, cost) = (fact.checkpoint, fact.checkpoint_cost);
        let checkpoints = checkpoints_in(work, tau);
        let run = work + checkpoints as f64 * cost;
        self.ours[host] = true;
        self.attempts[task] += 1;
        self.gave_up |= self.attempts[task] > MAX_ATTEMPTS;
        self.is_free[host] = false;
        self.epoch[host] = self.epoch[host].wrapping_add(1);
        self.running += 1;
        // The rule plans with the estimate, not with this run's truth.
        let planned = self.left[task] / self.factor[task].max(f64::MIN_POSITIVE);
        self.free_at[host] = now + planned * fact.slowdown;
        let f = self.next_fail[host] - now;
        if f < run {
            // Blocks of work and checkpoint written before the failure.
            let blocks = if checkpoints > 0 {
                ((f / (tau + cost)).floor() as u64).min(checkpoints)
            } else {
                0
            };
            let saved = if blocks > 0 {
                (blocks as f64 * tau / work).clamp(0.0, 1.0)
            } else {
                0.0
            };
            self.saved[task] = saved;
            let (task, host) = (task as u32, host as u32);
            self.push(now + f, EventKind::Fail { task, host });
        } else {
            let (task, host) = (task as u32, host as u32);
            self.push(now + run, EventKind::Finish { task, host });
        }
    }

    /// Wall seconds an attempt of `task` on a host with `fact` would take
    /// in this run ([`Self::start`]'s: its work and its checkpoints).
    pub(super) fn attempt_secs(&self, fact: &HostFacts, task: usize) -> f64 {
        let work = self.left[task] * fact.slowdown;
        work + checkpoints_in(work, fact.checkpoint) as f64 * fact.checkpoint_cost
    }

    /// One Monte Carlo run; false when a task ran out of attempts.
    pub(super) fn simulate<R: Rng + ?Sized>(
        &mut self,
        input: &EstimateInput<'_>,
        facts: &[HostFacts],
        order: &[usize],
        queue_order: &[usize],
        memo: &mut Memo<'_>,
        rng: &mut R,
    ) -> bool {
        // Alg. 1:1-2: duplicate the state; t0 = 0.
        self.heap.clear();
        self.seq = 0;
        self.gave_up = false;
        self.running = 0;
        self.failures = 0;
        self.recheck_all = true;
        self.next_age = f64::INFINITY;
        self.queue.clear();
        self.queue.extend(queue_order.iter().copied());
        let sigma = self.sigma;
        if sigma > 0.0 {
            for task in 0..self.left.len() {
                let factor = (sigma * standard_normal(rng) - sigma * sigma / 2.0).exp();
                self.factor[task] = factor;
                self.left[task] = memo.runtimes[task] * factor;
            }
        } else {
            self.factor.iter_mut().for_each(|f| *f = 1.0);
            self.left.copy_from_slice(&memo.runtimes);
        }
        self.runtimes.copy_from_slice(&memo.runtimes);
        self.attempts.iter_mut().for_each(|a| *a = 0);
        // A task the run never ends (it gave up) ends never, not at 0.
        self.end.iter_mut().for_each(|e| *e = f64::INFINITY);
        self.ours.iter_mut().for_each(|o| *o = false);
        self.free_list.clear();
        self.fresh.clear();
        self.armed.clear();
        if self.rank.len() != order.len() {
            self.rank = vec![0; order.len()];
            for (i, &h) in order.iter().enumerate() {
                self.rank[h] = i as u32;
            }
        }
        for (h, host) in input.hosts.iter().enumerate() {
            self.rate[h] = facts[h].draw_rate(rng).unwrap_or(f64::NAN);
            self.urns[h].clear();
            // Each host's failure clock starts when it is first free.
            let down = host.down_secs.is_finite() && host.down_secs > 0.0;
            let mut from = match facts[h].bootstrap.as_ref() {
                Some(b) if down => rest_of_outage(b, host.down_secs, rng),
                _ => host.busy_secs.max(0.0),
            };
            self.picks[h].clear();
            if let Some(replay) = &facts[h].replay {
                let picks = &mut self.picks[h];
                // A host down now is back when its past has it back too;
                // one up now (busy with its owner's work until `from`) is
                // free when its replay has it up, once past the outage it
                // is seen out of now (or, down through the replayed days,
                // at their end).
                let exposed = replay.passed_over(0.0, picks, rng).unwrap_or(0.0);
                if down || from > exposed {
                    from = replay
                        .next_up(from, picks, rng)
                        .unwrap_or_else(|| from.max(replay.end()));
                }
            }
            // A host down now is weighed as back once it returns; one up
            // now by its curve at submission, as of the time since.
            self.back[h] = down;
            self.since[h] = if down { from } else { 0.0 };
            self.next_fail[h] = if down {
                self.next_failure_after(facts, h, from, rng)
            } else {
                self.first_failure_at(facts, h, from, rng)
            };
            if from <= 0.0 {
                self.host_free(h, 0.0);
            } else {
                self.is_free[h] = false;
                self.free_at[h] = from;
                let epoch = self.epoch[h];
                self.push(
                    from,
                    EventKind::HostFree {
                        host: h as u32,
                        epoch,
                    },
                );
            }
        }
        for (task, r) in input.running.iter().enumerate() {
            if self.is_free[r.host] {
                self.remove_free(r.host);
                self.start(facts, task, r.host, 0.0);
            } else {
                // Two of our tasks on one host cannot be: queue the extra one.
                self.queue.push_front(task);
            }
        }
        self.arm_holds();
        let mut now = 0.0;
        loop {
            // Alg. 1:8-13: free hosts take waiting tasks by the proactive rule.
            self.dispatch(facts, order, memo, now);
            if self.gave_up {
                return false;
            }
            if self.queue.is_empty() && self.running == 0 && self.holds_pending == 0 {
                return true;
            }
            // Alg. 1:3-6: the next event; nothing left to happen ends the run.
            let Some(event) = self.heap.pop() else {
                return self.queue.is_empty();
            };
            now = event.time;
            match event.kind {
                EventKind::Finish { task, host } => {
                    let (task, host) = (task as usize, host as usize);
                    self.running -= 1;
                    self.ours[host] = false;
                    self.end[task] = now;
                    self.left[task] = 0.0;
                    self.host_free(host, now);
                }
                EventKind::Fail { task, host } => {
                    let (task, host) = (task as usize, host as usize);
                    let saved = self.saved[task];
                    self.running -= 1;
                    self.ours[host] = false;
                    self.failures += 1;
                    self.left[task] *= 1.0 - saved;
                    self.runtimes[task] *= 1.0 - saved;
                    self.queue.push_front(task);
                    self.host_failed(facts, host, now, rng);
                }
                EventKind::HostFree { host, epoch } => {
                    let host = host as usize;
                    if self.epoch[host] == epoch {
                        self.host_free(host, now);
                    }
                }
                EventKind::Window { hold } => {
                    if let Some(&hold) = self.holds.get(hold as usize) {
                        self.window(facts, &hold, now, rng);
                    }
                }
                EventKind::HostDown { host, epoch } => {
                    let host = host as usize;
                    if self.is_free[host] && self.epoch[host] == epoch {
                        self.is_free[host] = false;
                        self.remove_free(host);
                        self.host_failed(facts, host, now, rng);
                    }
                }
            }
        }
    }

    pub(super) fn dispatch(
        &mut self,
        facts: &[HostFacts],
        order: &[usize],
        memo: &mut Memo<'_>,
        now: f64,
    ) {
        self.recheck_all |= now >= self.next_age;
        let mut settled = false;
        while !self.queue.is_empty() && !self.free_list.is_empty() {
            let (back, since) = (&self.back, &self.since);
            let block_of = |g: usize| block(back[g], now - since[g]);
            let (free_at, is_free, queue) = (&self.free_at, &self.is_free, &self.queue);
            let runtimes = &self.runtimes;
            let rule = Rule {
                order,
                free_sorted: Some(&self.free_list),
                lower: |j: usize, g: usize| match queue.get(j) {
                    Some(&task) => runtimes[task] * facts[g].slowdown,
                    None => f64::INFINITY,
                },
                free_in: |g: usize| {
                    if is_free[g] {
                        0.0
                    } else {
                        (free_at[g] - now).max(f64::MIN_POSITIVE)
                    }
                },
                queue_len: queue.len(),
            };
            let mut turnarounds = QueueTurnarounds {
                memo,
                queue,
                runtimes,
                place: &self.rank,
                facts,
                block_of: &block_of,
            };
            let placed = if rule.in_bulk() {
                // The rule's bulk: the head to the first free host that
                // can run it (else a task just behind it to the first free
                // host that can). Entering the tail, everyone idle is weighed.
                self.recheck_all = true;
                rule.pick_pair(&mut turnarounds)
            } else if self.recheck_all {
                let pair = rule.pick_pair(&mut turnarounds);
                if pair.is_none() {
                    self.recheck_all = false;
                    settled = true;
                    self.fresh.clear();
                }
                pair
            } else {
                // Only the hosts freed since the last look can have
                // changed their answer: time passing only shortens the
                // busy hosts' waits, which makes an idle host's answer no
                // better, and a host taking a task shifts the later tasks
                // forward as it leaves their counts (see `Rule::pick_pair`).
                // Not so with ages ([`block`]): a busy host read as of a
                // later age may weigh worse, and an idle host's answer be
                // better then; `next_age` has every free host weighed again.
                let mut placed = None;
                while let Some(host) = self.fresh.pop() {
                    if !is_free[host] {
                        continue;
                    }
                    let pick = rule.pick_for_host(host, &mut turnarounds);
                    if let Some(j) = pick {
                        placed = Some((j, host));
                        break;
                    }
                }
                placed
            };
            let Some((j, host)) = placed else {
                break;
            };
            self.remove_free(host);
            let Some(task) = self.queue.remove(j) else {
                break;
            };
            self.start(facts, task, host, now);
        }
        if settled {
            // No clock restarts while the re-check is off (a failure turns
            // it on), so the first block change from here stays the first.
            self.next_age = next_block_change(&self.since, now);
        }
        // Hosts still idle go down when their failure time comes.
        while let Some(host) = self.armed.pop() {
            let f = self.next_fail[host];
            if self.is_free[host] && f.is_finite() {
                let epoch = self.epoch[host];
                let host = host as u32;
                self.push(f.max(now), EventKind::HostDown { host, epoch });
            }
        }
        if self.running > 0 || self.queue.is_empty() {
            return;
        }
        let task = self.queue[0];
        let left = self.runtimes[task];
        if !facts.iter().any(|f| fits(left, f.slowdown, f.max_horizon)) {
            // No host can ever finish it: the run would go on forever.
            self.gave_up = true;
            return;
        }
        // Every host is free, nothing of ours runs, and still the rule
        // keeps them idle (no finite turnaround anywhere it would take):
        // rather than stall, the best free host takes the head.
        if self.free_list.len() == facts.len() {
            let (back, since) = (&self.back, &self.since);
            let block_of = |g: usize| block(back[g], now - since[g]);
            let best = (0..self.free_list.len()).min_by(|&a, &b| {
                let (ha, hb) = (self.free_list[a], self.free_list[b]);
                memo.get(task, left, ha, block_of(ha)).total_cmp(&memo.get(
                    task,
                    left,
                    hb,
                    block_of(hb),
                ))
            });
            if let Some(i) = best {
                let host = self.free_list.remove(i);
                self.queue.pop_front();
                self.start(facts, task, host, now);
            }
        }
    }
}

/// The run's side of holds ([`super::held`] has the rule).
impl Run {
    /// Sets the run's holds going: each held task waits for its window.
    pub(super) fn arm_holds(&mut self) {
        self.holds_pending = self.holds.len();
        for i in 0..self.holds.len() {
            let start = self.holds[i].start;
            self.push(start, EventKind::Window { hold: i as u32 });
        }
    }

    /// Hold `hold`'s window has come at `now` (see the module's rule).
    pub(super) fn window<R: Rng + ?Sized>(
        &mut self,
        facts: &[HostFacts],
        hold: &Hold,
        now: f64,
        rng: &mut R,
    ) {
        self.holds_pending -= 1;
        let (task, host) = (hold.task, hold.host);
        let run = self.attempt_secs(&facts[host], task);
        if self.ours[host] || !run.is_finite() {
            self.queue.push_front(task);
            self.recheck_all = true;
            return;
        }
        if self.is_free[host] {
            self.remove_free(host);
        }
        self.next_fail[host] = if rng.random::<f64>() < hold.p {
            self.next_failure_after(facts, host, now + run, rng)
        } else {
            now + rng.random::<f64>() * run
        };
        // `start` bumps the host's epoch: a return from an outage or from
        // its owner's work still pending is stale from now on.
        self.start(facts, task, host, now);
        // The rule's view of the pool changed (a host it may have counted
        // on is taken).
        self.recheck_all = true;
    }
}

/// The first time after `now` that some host's block changes ([`block`]):
/// its age, from its clock's start `since`, reaching the next of [`AGES`]
/// past the first (a host yet to return is read as of age 0 until then;
/// infinite: none will change).
fn next_block_change(since: &[f64], now: f64) -> f64 {
    since
        .iter()
        .filter_map(|&s| {
            let age = now - s;
            AGES[1..].iter().find(|&&a| a > age).map(|&a| s + a)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Checkpoints written in `work` wall seconds at one every `tau` (0: none):
/// one after each full interval but the last.
pub(super) fn checkpoints_in(work: f64, tau: f64) -> u64 {
    if tau > 0.0 && work.is_finite() && work > 0.0 {
        ((work / tau).ceil() as u64).saturating_sub(1)
    } else {
        0
    }
}
