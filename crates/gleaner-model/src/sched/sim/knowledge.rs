//! What the simulated consumer knows of its pool (issue 27, scope 5):
//! everything at every moment (`full`, the simulator's first mode), or, as
//! the real consumer will, only the members' summaries it has heard —
//! published by each host on a change of state, slot or Γ step and on a
//! randomised heartbeat ([`Pacer`], the node's own rule), held in a cache
//! that may name only a sample of the pool — and the fresh answers of the
//! few hosts it asks per placement round ([`best_then_random`] of the
//! hosts ordered as the node's `rank::by_summary` orders them,
//! [`asks_for_with`] of them, a round every couple of seconds while tasks
//! wait). Placement then runs the policy's own rule over what the round
//! knows: a task starts only on a host that answered, and the proactive
//! rule weighs every other host as last heard of.
//!
//! Summaries are delivered at once (gossip's mesh push is sub-second,
//! rounds are seconds apart); a host's publications are worked out lazily
//! from its trace when a round looks. With a [`SamplePlan`] the cache is
//! instead the node's sample of a large pool (`sample.rs`): whole leaves
//! drawn at random until they name twice the batch's width, each as its
//! last digest gave it. Pure, like the rest of the simulator.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::avoid::keeps_off;
use super::sample::{LeafSampler, SamplePlan};
use super::view::view_bucket;
use super::{Ev, Forecaster, Policy, Sim, SimHost, Slot};
use crate::pace::{Pacer, SimSecs, StatusKey};
use crate::sched::place::{by_slowdown, HostView, Rule, Scan};
use crate::sched::probe::{asks_for_with, best_share, best_then_random, ASKS_MAX, ASKS_PER_TASK};
use crate::sched::timeline::Timeline;
use crate::state::State;

/// How often the simulated consumer asks again while tasks wait and a host
/// is free: the node's batch queue did so every 2 s until its rounds became
/// event-driven (it now asks on a change — a task's end, a member's slot
/// newly free — and otherwise only looks at the summaries); the simulator
/// keeps the clocked rule, which asks at least as often.
pub const ROUND_EVERY_SECS: f64 = 2.0;
/// A guest's CPU share at or above this is S1 (owner load under Th1 = 20 %).
const S1_SHARE: f64 = 0.8;

/// What the consumer knows when it places.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Knowledge {
    /// Every host's present view and slot, at every placement.
    #[default]
    Full,
    /// The members' summaries and a few fresh answers per round.
    Summaries(SummaryPlan),
}

/// How summaries are published, cached and confirmed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SummaryPlan {
    /// A host's heartbeat (it also publishes on a change, at most once
    /// per `min(10 s, half of this)`).
    pub heartbeat_secs: f64,
    /// Members the consumer's cache holds (a seeded sample of the pool
    /// when fewer than the hosts).
    pub cache: usize,
    /// Hosts asked per task that could be placed, and at most per round.
    pub asks_per_task: u32,
    pub asks_max: u32,
    /// Seconds between rounds while tasks wait.
    pub round_secs: f64,
    /// The cache is a sample of leaves sized to the batch (`sample.rs`,
    /// what the node's consumer has in a large pool) instead of `cache`.
    pub sample: Option<SamplePlan>,
}

impl SummaryPlan {
    /// The node's defaults: every member cached, 2 asks per task, at most
    /// 32 a round, a round every 2 s.
    pub fn new(heartbeat_secs: f64) -> SummaryPlan {
        SummaryPlan {
            heartbeat_secs,
            cache: usize::MAX,
            asks_per_task: ASKS_PER_TASK,
            asks_max: ASKS_MAX,
            round_secs: ROUND_EVERY_SECS,
            sample: None,
        }
    }
}

/// What placing from summaries cost and saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeStats {
    /// Members in the consumer's cache (with a sample: the most it named).
    pub cached: usize,
    /// Placement rounds that asked anyone, and the hosts they asked.
    pub rounds: u64,
    pub asks: u64,
    /// The most hosts one round asked.
    pub max_round_asks: u32,
    /// Summaries published by all hosts up to the last round.
    pub publications: u64,
    /// Mean age of the cached summaries when rounds ranked them (seconds).
    pub mean_summary_age_secs: f64,
    /// With a sample: leaf digests fetched (refreshes too), and samples
    /// drawn (a new one after each lapse).
    #[serde(default)]
    pub digests: u64,
    #[serde(default)]
    pub samples: u64,
}

/// One host's summary as the consumer last heard it.
#[derive(Debug, Clone)]
pub(super) struct Heard {
    /// When it was published (simulation seconds).
    at: f64,
    /// Its ladder and availability, worked out once per view bucket as
    /// the full-knowledge consumer's views are (`view_bucket`).
    view: HostView,
    bucket: i64,
    /// TR at the ranking's window off that ladder.
    tr: f64,
    failing: bool,
    slot_free: bool,
    /// Γ then (what the node's ranking breaks TR ties on).
    gamma: f64,
    /// The outage the host's past then made likely (seconds).
    outage: f64,
}

/// One host's publisher, worked out lazily.
#[derive(Debug, Clone)]
pub(super) struct Publisher {
    pub(super) pacer: Pacer<SimSecs, StatusKey>,
    /// Its status has been looked at up to here since its last publication.
    looked_to: f64,
    /// No guest of ours runs there (the key's slot).
    slot_free: bool,
}

/// The consumer's cache of summaries and the hosts' publishers.
pub(super) struct Summaries {
    plan: SummaryPlan,
    /// Window the ranking reads TR at: the batch's median runtime (the
    /// node asks for the batch's declared runtime).
    window_secs: f64,
    pub(super) publishers: Vec<Publisher>,
    pub(super) cached: Vec<bool>,
    pub(super) heard: Vec<Option<Heard>>,
    /// Per host: asked in the current round.
    asked: Vec<bool>,
    pub(super) rng: ChaCha8Rng,
    /// The sample of leaves, when the cache is one.
    pub(super) sample: Option<LeafSampler>,
    pub(super) round_due: bool,
    pub(super) round_pending: bool,
    stats: ProbeStats,
    age_sum: f64,
    age_n: u64,
}

impl Summaries {
    pub(super) fn new<R: Rng + ?Sized>(
        plan: SummaryPlan,
        hosts: usize,
        runtimes: &[f64],
        rng: &mut R,
    ) -> Summaries {
        let mut rng = ChaCha8Rng::seed_from_u64(rng.random());
        let mut sorted = runtimes.to_vec();
        sorted.sort_by(f64::total_cmp);
        let window_secs = sorted.get(sorted.len() / 2).copied().unwrap_or(3600.0);
        let sample = plan.sample.map(|p| LeafSampler::new(p, hosts, &mut rng));
        let mut cached = vec![plan.cache >= hosts && sample.is_none(); hosts];
        if plan.cache < hosts && sample.is_none() {
            let mut all: Vec<usize> = (0..hosts).collect();
            rand::seq::SliceRandom::shuffle(all.as_mut_slice(), &mut rng);
            for &g in &all[..plan.cache] {
                cached[g] = true;
            }
        }
        let heartbeat = Duration::from_secs_f64(plan.heartbeat_secs.clamp(1.0, 1e9));
        let publishers = (0..hosts)
            .map(|_| Publisher {
                pacer: Pacer::new(heartbeat),
                looked_to: f64::NEG_INFINITY,
                slot_free: true,
            })
            .collect();
        Summaries {
            plan,
            window_secs,
            publishers,
            cached,
            heard: vec![None; hosts],
            asked: vec![false; hosts],
            rng,
            sample,
            round_due: true,
            round_pending: false,
            stats: ProbeStats {
                cached: if plan.sample.is_some() {
                    0
                } else {
                    plan.cache.min(hosts)
                },
                ..ProbeStats::default()
            },
            age_sum: 0.0,
            age_n: 0,
        }
    }

    /// What placing cost: with a sample, its digests and draws too.
    pub(super) fn stats(&self) -> ProbeStats {
        let sampled = self.sample.as_ref().map(|l| ProbeStats {
            cached: l.most_named,
            digests: l.digests,
            samples: l.draws,
            ..self.stats
        });
        ProbeStats {
            mean_summary_age_secs: if self.age_n > 0 {
                self.age_sum / self.age_n as f64
            } else {
                0.0
            },
            ..sampled.unwrap_or(self.stats)
        }
    }

    /// The cache is a sample of leaves (`--knowledge sample`).
    pub(super) fn sampled(&self) -> bool {
        self.sample.is_some()
    }
}

/// The order the node's `rank::by_summary` gives, for its first `best`
/// hosts (the rest follow in no order): hosts not failing with a free slot
/// first, then busy, then failing; within a tier higher TR at the window
/// first (unknown last), then higher Γ, then the lower index (the peer
/// id's stand-in).
fn summary_order(heard: &[Option<Heard>], best: usize) -> Vec<usize> {
    let mut listed: Vec<(u8, f64, f64, usize)> = heard
        .iter()
        .enumerate()
        .filter_map(|(g, h)| {
            let h = h.as_ref()?;
            let tier = if h.failing { 2 } else { u8::from(!h.slot_free) };
            Some((tier, h.tr, h.gamma, g))
        })
        .collect();
    let cmp = |a: &(u8, f64, f64, usize), b: &(u8, f64, f64, usize)| {
        a.0.cmp(&b.0)
            .then_with(|| b.1.total_cmp(&a.1))
            .then_with(|| b.2.total_cmp(&a.2))
            .then_with(|| a.3.cmp(&b.3))
    };
    // Only the head is read in order (the rest is drawn from at random):
    // the best `best` selected, then sorted, instead of sorting them all.
    if best < listed.len() {
        listed.select_nth_unstable_by(best, cmp);
        listed[..best].sort_by(cmp);
    } else {
        listed.sort_by(cmp);
    }
    listed.into_iter().map(|l| l.3).collect()
}

/// The status key a host on `tl` would publish at simulation time `t`:
/// its state (S1 while the owner leaves a guest most of the CPU), our
/// slot, and Γ = P × the guest's share.
fn status_key(h: &SimHost, tl: &Timeline, t: f64, slot_free: bool) -> StatusKey {
    let tt = h.offset as f64 + t;
    let share = tl.rate_at(tt);
    let state = tl.failure_at(tt).unwrap_or(if share >= S1_SHARE {
        State::S1
    } else {
        State::S2
    });
    let gamma_milli = (h.power * share * 1000.0).round().clamp(0.0, 1e6) as u32;
    StatusKey::new(state, slot_free, gamma_milli)
}

impl Sim<'_> {
    /// Works host `host`'s publications out up to `until` (excluded when
    /// `before`): its pacer is asked at every change of its trace's cell
    /// and whenever it says to look again, as the node's pool host asks it
    /// at every reading.
    pub(super) fn publish_until(&mut self, host: usize, until: f64, before: bool) {
        let (hosts, timelines) = (self.hosts, self.timelines);
        let Some(s) = self.summaries.as_deref_mut() else {
            return;
        };
        let h = hosts[host];
        let tl = &timelines[h.timeline];
        let step = (tl.span_secs() / tl.cells().max(1) as i64).max(1) as f64;
        let origin = tl.start() as f64 - h.offset as f64;
        let p = &mut s.publishers[host];
        let mut t = p.looked_to;
        if p.pacer.last().is_none() {
            // The host has been a member for a while: its last summary
            // went out some time within a heartbeat before the batch (a
            // day at most: a host's status changes within a day, and the
            // look back costs a step per cell).
            t = -s.rng.random::<f64>() * s.plan.heartbeat_secs.min(86_400.0);
        }
        while t < until || (!before && t == until) {
            let key = status_key(&h, tl, t, p.slot_free);
            if p.pacer.due(SimSecs(t), key) {
                p.pacer.published(SimSecs(t), key, s.rng.random());
                s.stats.publications += 1;
            }
            // Look again at the next cell or when the pacer says.
            let cell = origin + (((t - origin) / step).floor() + 1.0) * step;
            let look = p.pacer.next_look(key).map_or(cell, |l| l.0);
            t = if look > t { cell.min(look) } else { cell };
        }
        p.looked_to = t;
    }

    /// A guest of ours starts on `host` (`free` false) or leaves it.
    pub(super) fn slot_changed(&mut self, host: usize, free: bool) {
        if self.summaries.is_none() {
            return;
        }
        // A digest due before now gives the host's summary before this.
        self.refresh_sample();
        let now = self.now;
        self.publish_until(host, now, true);
        if let Some(s) = self.summaries.as_deref_mut() {
            s.publishers[host].slot_free = free;
            s.publishers[host].looked_to = now;
            if free {
                // The node's queue surveys again when a task of its ends.
                s.round_due = true;
            }
        }
    }

    /// The cached hosts' summaries brought up to now (a sample's, up to
    /// its leaf's last digest).
    fn hear(&mut self, forecaster: &mut dyn Forecaster) {
        let now = self.now;
        let sampled = self.summaries.as_ref().is_some_and(|s| s.sampled());
        for g in 0..self.hosts.len() {
            if !self.summaries.as_ref().is_some_and(|s| s.cached[g]) {
                continue;
            }
            if !sampled {
                self.publish_until(g, now, false);
            }
            let Some(s) = self.summaries.as_deref() else {
                return;
            };
            let last = match &s.sample {
                Some(l) => l.digest[g],
                None => s.publishers[g].pacer.last().map(|(SimSecs(t), k)| (t, k)),
            };
            let Some((at, key)) = last else {
                continue;
            };
            if s.heard[g].as_ref().is_some_and(|h| h.at == at) {
                continue;
            }
            let share = self.timelines[self.hosts[g].timeline].rate_at(self.trace_time(g, at));
            let gamma = self.hosts[g].power * share;
            let bucket = view_bucket(at);
            let window = s.window_secs;
            let same_bucket = s.heard[g].as_ref().is_some_and(|h| h.bucket == bucket);
            if same_bucket {
                if let Some(h) = self
                    .summaries
                    .as_deref_mut()
                    .and_then(|s| s.heard[g].as_mut())
                {
                    h.at = at;
                    h.gamma = gamma;
                    h.failing = key.state.is_failure();
                    h.slot_free = key.slot_free;
                }
                continue;
            }
            let view = self.view_at(g, at, forecaster);
            let tr = view.curve.tr_at(window);
            let heard = Heard {
                at,
                bucket,
                tr: if tr.is_finite() {
                    tr
                } else {
                    f64::NEG_INFINITY
                },
                gamma,
                view,
                failing: key.state.is_failure(),
                slot_free: key.slot_free,
                outage: self.outage_guess_at(g, at),
            };
            if let Some(s) = self.summaries.as_deref_mut() {
                s.heard[g] = Some(heard);
            }
        }
    }

    /// A round is due or pending in summaries mode: hold one while tasks
    /// wait and a host could take one, every `round_secs`, as the node's
    /// queue asks again every couple of seconds.
    pub(super) fn dispatch_summaries(&mut self, forecaster: &mut dyn Forecaster) {
        let could = !self.queue.is_empty() && !self.free.is_empty();
        if could && self.summaries.as_ref().is_some_and(|s| s.round_due) {
            if let Some(s) = self.summaries.as_deref_mut() {
                s.round_due = false;
            }
            self.summary_round(forecaster);
        }
        let could = !self.queue.is_empty() && !self.free.is_empty();
        let next = self.summaries.as_deref_mut().and_then(|s| {
            (could && !s.round_pending).then(|| {
                s.round_pending = true;
                s.plan.round_secs.max(0.001)
            })
        });
        if let Some(wait) = next {
            self.push(self.now + wait, Ev::Round);
        }
    }

    /// A round's time has come.
    pub(super) fn round_tick(&mut self) {
        if let Some(s) = self.summaries.as_deref_mut() {
            s.round_pending = false;
            s.round_due = true;
        }
    }

    /// One placement round from the summaries: rank, ask a few, place on
    /// the answers. Returns whether it placed a task.
    pub(super) fn summary_round(&mut self, forecaster: &mut dyn Forecaster) -> bool {
        // The node's width: the batch's tasks queued or running.
        self.sample_for_round(self.config.runtimes.len() - self.done);
        self.hear(forecaster);
        let now = self.now;
        let Some(s) = self.summaries.as_deref_mut() else {
            return false;
        };
        let placeable = self.queue.len();
        let most = asks_for_with(placeable, s.plan.asks_per_task, s.plan.asks_max) as usize;
        let order = summary_order(&s.heard, best_share(most));
        for h in s.heard.iter().flatten() {
            s.age_sum += now - h.at;
            s.age_n += 1;
        }
        let mut asked = best_then_random(order, most, &mut s.rng);
        if asked.len() < most && !s.sampled() {
            // The summaries name too few: the node tops up with DHT
            // providers it has no summary of, at random (in a small pool
            // only: a large pool's sample is its view).
            let mut unknown: Vec<usize> = (0..self.hosts.len())
                .filter(|&g| !s.cached[g] && !asked.contains(&g))
                .collect();
            rand::seq::SliceRandom::shuffle(unknown.as_mut_slice(), &mut s.rng);
            let room = most - asked.len();
            asked.extend(unknown.into_iter().take(room));
        }
        s.stats.rounds += 1;
        s.stats.asks += asked.len() as u64;
        s.stats.max_round_asks = s.stats.max_round_asks.max(asked.len() as u32);
        s.asked.iter_mut().for_each(|a| *a = false);
        for &g in &asked {
            s.asked[g] = true;
        }
        // The answers: each asked host's present view and slot.
        let mut answered_free: Vec<usize> = Vec::new();
        for &g in &asked {
            if matches!(self.slots[g], Slot::Free) {
                self.view(g, forecaster);
                answered_free.push(g);
            }
        }
        if answered_free.is_empty() {
            return false;
        }
        if self.config.policy.proactive_rule() {
            self.place_proactive_on(answered_free, forecaster)
        } else {
            self.place_fifo_on(answered_free, forecaster)
        }
    }

    /// FIFO policies: the head of the queue takes the answered host the
    /// policy picks, until none is left.
    fn place_fifo_on(&mut self, mut free: Vec<usize>, forecaster: &mut dyn Forecaster) -> bool {
        let mut placed = false;
        let mut rng = match self.summaries.as_deref_mut() {
            Some(s) => ChaCha8Rng::seed_from_u64(s.rng.random()),
            None => return false,
        };
        while !free.is_empty() {
            let Some((pos, ok)) = self.fifo_head(&free) else {
                break;
            };
            let task = self.queue[pos];
            let host = ok[self.choose_fifo(task, &ok, forecaster, &mut rng)];
            if let Some(k) = free.iter().position(|&g| g == host) {
                free.swap_remove(k);
            }
            self.take(host);
            self.queue.remove(pos);
            self.start(task, host, forecaster);
            placed = true;
        }
        placed
    }

    /// The proactive rule over what the round knows: the answered free
    /// hosts may take a task; every other host is weighed as last heard of
    /// (ours by the view we placed on, the rest by their summaries; a
    /// host the cache does not hold is not weighed).
    fn place_proactive_on(
        &mut self,
        mut free: Vec<usize>,
        forecaster: &mut dyn Forecaster,
    ) -> bool {
        let n = self.hosts.len();
        let now = self.now;
        // The scan order: by each host's slowdown as the round knows it
        // (placing a task changes no view, so once per round).
        let order = {
            let Some(s) = self.summaries.as_deref() else {
                return false;
            };
            let slowdowns: Vec<f64> = (0..n)
                .map(|g| {
                    known_view(s, &self.slots, &self.views, g)
                        .map_or(f64::INFINITY, |v| v.expected_run_secs(1.0))
                })
                .collect();
            by_slowdown(&slowdowns)
        };
        let mut rank = vec![0; n];
        for (i, &g) in order.iter().enumerate() {
            rank[g] = i;
        }
        free.sort_by_key(|&g| rank[g]);
        let mut placed = false;
        loop {
            if self.queue.is_empty() || free.is_empty() {
                return placed;
            }
            let Some(s) = self.summaries.as_deref() else {
                return placed;
            };
            let (slots, views, left, queue) = (&self.slots, &self.views, &self.left, &self.queue);
            let known = |g: usize| known_view(s, slots, views, g);
            let free_in = |g: usize| -> f64 {
                match &slots[g] {
                    Slot::Free if s.asked[g] => return 0.0,
                    slot @ Slot::Busy(_) => return slot.free_in(now).max(f64::MIN_POSITIVE),
                    slot @ Slot::Down { .. } if s.asked[g] => {
                        return slot.free_in(now).max(f64::MIN_POSITIVE)
                    }
                    _ => {}
                }
                match &s.heard[g] {
                    None => f64::INFINITY,
                    Some(h) if h.failing => (h.at + h.outage - now).max(f64::MIN_POSITIVE),
                    // Busy with someone else's guest: when it ends is not said.
                    Some(h) if !h.slot_free => f64::INFINITY,
                    Some(_) => 0.0,
                }
            };
            let rule = Rule {
                order: &order,
                free_sorted: Some(&free),
                lower: |j: usize, g: usize| match (queue.get(j), known(g)) {
                    (Some(&task), Some(v)) => v.expected_run_secs(left[task]),
                    _ => f64::INFINITY,
                },
                free_in,
                queue_len: queue.len(),
            };
            let avoid = &self.avoid;
            let turnaround = |j: usize, g: usize| match (queue.get(j), known(g)) {
                (Some(&task), _) if keeps_off(avoid, task, g, now + free_in(g)) => f64::INFINITY,
                (Some(&task), Some(v)) => v.expected_turnaround(left[task]),
                _ => f64::INFINITY,
            };
            let Some((j, host)) = rule.pick_pair(&mut Scan(turnaround)) else {
                return placed;
            };
            let Some(task) = self.queue.remove(j) else {
                return placed;
            };
            free.retain(|&g| g != host);
            self.take(host);
            self.start(task, host, forecaster);
            placed = true;
        }
    }
}

/// What the round knows of host `g`: ours and the asked ones as they
/// are, the rest as last heard (none for a host the cache does not hold).
fn known_view<'v>(
    s: &'v Summaries,
    slots: &[Slot],
    views: &'v [HostView],
    g: usize,
) -> Option<&'v HostView> {
    if s.asked[g] || matches!(slots[g], Slot::Busy(_)) {
        Some(&views[g])
    } else {
        s.heard[g].as_ref().map(|h| &h.view)
    }
}

/// Whether `policy` can be simulated from summaries (the oracle knows
/// every future by definition; `windows` weighs every host's later windows
/// and is not modelled on summaries yet).
pub fn summaries_apply(policy: Policy) -> bool {
    !matches!(
        policy,
        Policy::Oracle | Policy::Windows | Policy::ProactiveAuto
    )
}

#[cfg(test)]
#[path = "knowledge_tests.rs"]
mod tests;
