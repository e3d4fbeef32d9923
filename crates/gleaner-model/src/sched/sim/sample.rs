//! The simulated consumer's sample of a large pool (issue 27, scope 5;
//! `gleaner simulate --knowledge sample`): what the node's network
//! (`net::leaf_digest`'s `Sampler`) gives its consumer in a pool of 64
//! members or more, where it no longer hears every member.
//!
//! The pool is split at random into leaves of the DHT trie of
//! [`SamplePlan::leaf_hosts`] members each (peer ids are random, so a leaf
//! is a random group of hosts). Each round wants a sample naming
//! [`sample_hosts_with`] the batch's width (its tasks queued or running:
//! the simulator's batch has no `max_running`), at most the pool, and
//! draws whole leaves at random until the sample names that many. A leaf's
//! digest gives its members' summaries as they last published them before
//! it was fetched; it is fetched again once per `refresh_secs` (the
//! summaries' heartbeat) while rounds go on. The sample is forgotten
//! `forget_secs` after the last round and drawn afresh at the next one; it
//! never shrinks while kept (the node's does not either). Placement is
//! then as in `knowledge.rs`: the hosts to ask are ranked and drawn among
//! the sampled ones only (a large pool tops up with nobody), and a host
//! outside the sample is not weighed. Pure, like the rest of the simulator.

use rand::seq::SliceRandom;
use rand::Rng;

use super::Sim;
use crate::pace::{SimSecs, StatusKey};
use crate::sched::probe::{sample_hosts_with, SAMPLE_MIN, SAMPLE_PER_TASK};

/// Members per leaf: the node's trie holds at most 16 a key and splits a
/// full one, so its keys average about 12 (86 keys with members at 1,000
/// members, `net::leaf_digest`'s `sample_cost_by_width_and_pool`).
pub const LEAF_HOSTS: usize = 12;

/// How the consumer's sample is drawn and kept: the node's rule
/// ([`sample_hosts_with`]) and constants by default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplePlan {
    /// Hosts wanted per task of the batch's width, and at least this many.
    pub per_task: usize,
    pub least: usize,
    /// Members a leaf's digest names.
    pub leaf_hosts: usize,
    /// A sampled leaf's digest is fetched again this often.
    pub refresh_secs: f64,
    /// The sample is forgotten this long after the last round.
    pub forget_secs: f64,
}

impl SamplePlan {
    /// The node's rule: [`SAMPLE_PER_TASK`] hosts per task and at least
    /// [`SAMPLE_MIN`], leaves of [`LEAF_HOSTS`], refreshed every
    /// `refresh_secs` (the heartbeat) and forgotten `forget_secs` after the
    /// last round.
    pub fn new(refresh_secs: f64, forget_secs: f64) -> SamplePlan {
        SamplePlan {
            per_task: SAMPLE_PER_TASK,
            least: SAMPLE_MIN,
            leaf_hosts: LEAF_HOSTS,
            refresh_secs,
            forget_secs,
        }
    }
}

/// The sample and the pool's leaves.
#[derive(Debug, Clone)]
pub(super) struct LeafSampler {
    plan: SamplePlan,
    /// Each leaf's hosts.
    leaves: Vec<Vec<usize>>,
    /// Per leaf: when its digest was last fetched, while it is sampled.
    fetched: Vec<Option<f64>>,
    /// Leaves not sampled, in the order they will be drawn.
    undrawn: Vec<usize>,
    /// Hosts the sample names.
    named: usize,
    last_round: Option<f64>,
    /// Per host: its summary (when published, and its key) as its leaf's
    /// last digest gave it.
    pub(super) digest: Vec<Option<(f64, StatusKey)>>,
    /// Digests fetched (refreshes too), samples drawn, the most hosts a
    /// sample named.
    pub(super) digests: u64,
    pub(super) draws: u64,
    pub(super) most_named: usize,
}

impl LeafSampler {
    pub(super) fn new<R: Rng + ?Sized>(plan: SamplePlan, hosts: usize, rng: &mut R) -> LeafSampler {
        let mut all: Vec<usize> = (0..hosts).collect();
        all.shuffle(rng);
        let leaves: Vec<Vec<usize>> = all
            .chunks(plan.leaf_hosts.max(1))
            .map(<[usize]>::to_vec)
            .collect();
        let mut undrawn: Vec<usize> = (0..leaves.len()).collect();
        undrawn.shuffle(rng);
        LeafSampler {
            plan,
            fetched: vec![None; leaves.len()],
            leaves,
            undrawn,
            named: 0,
            last_round: None,
            digest: vec![None; hosts],
            digests: 0,
            draws: 0,
            most_named: 0,
        }
    }
}

impl Sim<'_> {
    /// The node's sample, when the run places from one.
    fn sampler(&self) -> Option<&LeafSampler> {
        self.summaries.as_deref().and_then(|s| s.sample.as_ref())
    }

    fn sampler_mut(&mut self) -> Option<&mut LeafSampler> {
        self.summaries
            .as_deref_mut()
            .and_then(|s| s.sample.as_mut())
    }

    /// Brings the sample up to now for a round of a batch with `width`
    /// tasks queued or running: forgotten if it lapsed, its due leaves
    /// fetched again, then grown leaf by leaf to what the width wants.
    pub(super) fn sample_for_round(&mut self, width: usize) {
        let now = self.now;
        let lapsed = self
            .sampler()
            .and_then(|l| l.last_round.map(|t| now - t >= l.plan.forget_secs))
            .unwrap_or(false);
        if lapsed {
            self.forget_sample();
        }
        self.refresh_sample();
        let n = self.hosts.len();
        loop {
            let Some(l) = self.sampler_mut() else {
                return;
            };
            l.last_round = Some(now);
            let wanted = sample_hosts_with(width, l.plan.per_task, l.plan.least).min(n);
            if l.named >= wanted {
                return;
            }
            let Some(leaf) = l.undrawn.pop() else {
                return;
            };
            if l.named == 0 {
                l.draws += 1;
            }
            l.named += l.leaves[leaf].len();
            l.most_named = l.most_named.max(l.named);
            self.fetch_leaf(leaf, now);
        }
    }

    /// Fetches again every sampled leaf whose refresh came by now (while
    /// the sample was still wanted), as of the last refresh time due: the
    /// summaries as published by then. Run before a host's status moves
    /// past a refresh not yet made (`slot_changed`).
    pub(super) fn refresh_sample(&mut self) {
        let now = self.now;
        let Some(l) = self.sampler_mut() else {
            return;
        };
        let Some(last) = l.last_round else {
            return;
        };
        let until = now.min(last + l.plan.forget_secs);
        let every = l.plan.refresh_secs.max(1.0);
        let due: Vec<(usize, f64)> = l
            .fetched
            .iter()
            .enumerate()
            .filter_map(|(leaf, f)| {
                let f = (*f)?;
                let times = ((until - f) / every).floor();
                (times >= 1.0).then_some((leaf, f + times * every))
            })
            .collect();
        for (leaf, at) in due {
            if let Some(l) = self.sampler_mut() {
                let before = l.fetched[leaf].unwrap_or(at);
                // The refreshes in between cost as much; only the last counts.
                l.digests += (((at - before) / every).round() as u64).saturating_sub(1);
            }
            self.fetch_leaf(leaf, at);
        }
    }

    /// `leaf`'s digest at time `at`: each member's last summary by then.
    fn fetch_leaf(&mut self, leaf: usize, at: f64) {
        let hosts = match self.sampler_mut() {
            Some(l) => {
                l.fetched[leaf] = Some(at);
                l.digests += 1;
                l.leaves[leaf].clone()
            }
            None => return,
        };
        for g in hosts {
            self.publish_until(g, at, false);
            if let Some(s) = self.summaries.as_deref_mut() {
                let last = s.publishers[g].pacer.last().map(|(SimSecs(t), k)| (t, k));
                s.cached[g] = true;
                if let Some(l) = s.sample.as_mut() {
                    l.digest[g] = last;
                }
            }
        }
    }

    /// The sample lapsed: what it named is forgotten, every leaf may be
    /// drawn again (in a new order).
    fn forget_sample(&mut self) {
        let Some(s) = self.summaries.as_deref_mut() else {
            return;
        };
        let Some(l) = s.sample.as_mut() else {
            return;
        };
        for (hosts, fetched) in l.leaves.iter().zip(l.fetched.iter_mut()) {
            if fetched.take().is_some() {
                for &g in hosts {
                    s.cached[g] = false;
                    s.heard[g] = None;
                    l.digest[g] = None;
                }
            }
        }
        l.undrawn = (0..l.leaves.len()).collect();
        l.undrawn.shuffle(&mut s.rng);
        l.named = 0;
        l.last_round = None;
    }
}
