//! The pool in the DHT: this member's provider record kept in its place
//! among the sharded pool keys (`pool_shards::Placement`), re-checked on a
//! jittered timer that soon grows to minutes, and the listings of the pool
//! (`pool_shards::Walk`) that `find_hosts` asks for, answered with what was
//! found when the walk ends or its deadline passes.
//!
//! The decisions are `pool_shards`' (pure); this file performs them. It must
//! not know about announcements or the request protocols.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use libp2p::kad::{self, GetProvidersOk, QueryId, QueryResult, RecordKey};
use libp2p::PeerId;
use rand::Rng;

use super::connectivity::Timer;
use super::{EventLoop, Reply};
use crate::net::pool_shards::{pool_size_estimate, PlaceStep, Placement, Shard, Walk};

/// How long a listing of the pool may take before it answers with what it
/// found: under the consumer's survey wait (3 s), so a slow walk still
/// yields the members it reached.
pub(super) const WALK_DEADLINE: Duration = Duration::from_millis(2500);

/// Most listings under way at once; more answer at once with nothing.
const WALKS_MAX: usize = 16;

/// When the next re-check of our place comes, by how many checks were
/// done: soon after the first (members that started together overflow a
/// key and find their place then), then every 10 to 20 minutes, well
/// within a provider record's life (`swarm::PROVIDER_RECORD_TTL`).
fn recheck_after(checks: u32) -> Duration {
    let (low, high) = match checks {
        0 | 1 => (20, 40),
        2 => (120, 240),
        _ => (600, 1200),
    };
    Duration::from_secs(rand::rng().random_range(low..=high))
}

/// The DHT side of the network task's state.
pub(super) struct Discovery {
    placement: Placement,
    /// The placement's probe under way: its query, its key, providers so far.
    probe: Option<(QueryId, Shard, HashSet<PeerId>)>,
    /// Checks started so far (for the re-check interval).
    checks: u32,
    /// A re-check is on the timer.
    scheduled: bool,
    /// Listings under way, by their number.
    walks: HashMap<u64, (Walk, Reply<Vec<PeerId>>)>,
    next_walk: u64,
    /// A listing's queries: its number, the key, providers so far.
    walk_queries: HashMap<QueryId, (u64, Shard, HashSet<PeerId>)>,
    /// Providers at which a member goes one level down (`SHARD_FULL`).
    full: usize,
    /// The other providers of the key we provide, as its last probe found
    /// them: our leaf mates (`digests`).
    mates: HashSet<PeerId>,
}

impl Discovery {
    pub(super) fn new(me: PeerId, full: usize) -> Discovery {
        Discovery {
            placement: Placement::new(me, full),
            probe: None,
            checks: 0,
            scheduled: false,
            walks: HashMap::new(),
            next_walk: 0,
            walk_queries: HashMap::new(),
            full,
            mates: HashSet::new(),
        }
    }

    /// The key we provide, once placed: our leaf.
    pub(super) fn at(&self) -> Option<Shard> {
        self.placement.at()
    }

    /// Our leaf's other providers, as last probed.
    pub(super) fn mates(&self) -> &HashSet<PeerId> {
        &self.mates
    }
}

impl EventLoop {
    pub(super) fn on_kad_event(&mut self, event: kad::Event) {
        match event {
            kad::Event::RoutingUpdated {
                is_new_peer: true, ..
            } => {
                // The first contact: place ourselves now (the re-check soon
                // after corrects what a near-empty routing table got wrong);
                // later contacts change nothing.
                self.provide();
            }
            kad::Event::OutboundQueryProgressed {
                id,
                result: QueryResult::GetProviders(result),
                step,
                ..
            } => {
                let found = match result {
                    Ok(GetProvidersOk::FoundProviders { providers, .. }) => providers,
                    _ => HashSet::new(),
                };
                self.on_providers(id, found, step.last);
            }
            kad::Event::InboundRequest { .. } => self.count(|c| c.kad_requests += 1),
            _ => {}
        }
    }

    /// Makes sure our provider record gets placed: starts the first check
    /// unless one ran or runs. Cheap to call often (every announcement
    /// does): later checks run on their own timer.
    pub(super) fn provide(&mut self) {
        if self.discovery.checks == 0 && !self.discovery.placement.checking() {
            self.check_placement();
        }
    }

    /// A re-check of our place is due (the timer), or the first one.
    pub(super) fn check_placement(&mut self) {
        self.discovery.scheduled = false;
        self.discovery.checks = self.discovery.checks.saturating_add(1);
        let step = self.discovery.placement.check();
        self.place(step);
        if !self.discovery.scheduled {
            self.discovery.scheduled = true;
            let wait = recheck_after(self.discovery.checks);
            self.start_timer(wait, Timer::Recheck);
        }
    }

    fn place(&mut self, step: PlaceStep) {
        match step {
            PlaceStep::Probe(shard) => {
                let key = RecordKey::new(&shard.key(&self.cfg.pool));
                let id = self.swarm.behaviour_mut().kad.get_providers(key);
                self.discovery.probe = Some((id, shard, HashSet::new()));
            }
            PlaceStep::Stay(at) => self.placed(at),
            PlaceStep::Provide { at, leave } => {
                if let Some(old) = leave {
                    let key = RecordKey::new(&old.key(&self.cfg.pool));
                    self.swarm.behaviour_mut().kad.stop_providing(&key);
                }
                tracing::debug!(depth = at.depth(), "providing the pool's key");
                let key = RecordKey::new(&at.key(&self.cfg.pool));
                if let Err(e) = self.swarm.behaviour_mut().kad.start_providing(key) {
                    tracing::warn!("cannot provide the pool key: {e}");
                }
                self.placed(at);
            }
        }
    }

    /// A check ended with us providing `at`: what our place says of the
    /// pool's size, and our leaf's topic.
    fn placed(&mut self, at: Shard) {
        self.discovery.probe = None;
        // Our mates are the providers this placement's last probe found.
        let me = *self.swarm.local_peer_id();
        let mates = self.discovery.mates.iter().filter(|p| **p != me).count();
        let size = pool_size_estimate(at, mates, self.discovery.full);
        self.reach.send_if_modified(|r| {
            let s = &mut r.summaries;
            let changed =
                s.pool_estimate != Some(size.members) || s.pool_estimate_at_least != size.at_least;
            s.pool_estimate = Some(size.members);
            s.pool_estimate_at_least = size.at_least;
            changed
        });
        self.join_leaf(true);
    }

    /// Providers a query found; `last` when the query is over.
    fn on_providers(&mut self, id: QueryId, found: HashSet<PeerId>, last: bool) {
        if self.on_sample_providers(id, &found, last) {
            return;
        }
        if let Some((probe, shard, acc)) = &mut self.discovery.probe {
            if *probe == id {
                acc.extend(found);
                if last {
                    let (shard, mut acc) = (*shard, std::mem::take(acc));
                    self.discovery.probe = None;
                    acc.extend(self.leaf_publishers(shard));
                    if let Some(step) = self.discovery.placement.probed(shard, &acc) {
                        if matches!(step, PlaceStep::Provide { at, .. } | PlaceStep::Stay(at) if at == shard)
                        {
                            self.discovery.mates = acc;
                        }
                        self.place(step);
                    }
                }
                return;
            }
        }
        let Some((_, _, acc)) = self.discovery.walk_queries.get_mut(&id) else {
            return;
        };
        acc.extend(found);
        if !last {
            return;
        }
        let Some((walk_id, shard, acc)) = self.discovery.walk_queries.remove(&id) else {
            return;
        };
        let Some((walk, _)) = self.discovery.walks.get_mut(&walk_id) else {
            return;
        };
        let next = walk.answered(shard, &acc);
        self.ask_shards(walk_id, next);
        self.finish_walk_if_done(walk_id);
    }

    /// `find_hosts`: starts a listing of the pool's members.
    pub(super) fn start_walk(&mut self, reply: Reply<Vec<PeerId>>) {
        if self.discovery.walks.len() >= WALKS_MAX {
            let _ = reply.send(Ok(Vec::new()));
            return;
        }
        let id = self.discovery.next_walk;
        self.discovery.next_walk += 1;
        let mut walk = Walk::new(self.discovery.full);
        let first = walk.start();
        self.discovery.walks.insert(id, (walk, reply));
        self.ask_shards(id, first);
        self.start_timer(WALK_DEADLINE, Timer::WalkDeadline(id));
    }

    fn ask_shards(&mut self, walk_id: u64, shards: Vec<Shard>) {
        for shard in shards {
            let key = RecordKey::new(&shard.key(&self.cfg.pool));
            let qid = self.swarm.behaviour_mut().kad.get_providers(key);
            self.discovery
                .walk_queries
                .insert(qid, (walk_id, shard, HashSet::new()));
        }
    }

    fn finish_walk_if_done(&mut self, walk_id: u64) {
        if self
            .discovery
            .walks
            .get(&walk_id)
            .is_some_and(|(w, _)| w.done())
        {
            self.end_walk(walk_id);
        }
    }

    /// Answers a listing with what it found (its deadline, or it is done);
    /// its queries still out are stopped.
    pub(super) fn end_walk(&mut self, walk_id: u64) {
        let Some((walk, reply)) = self.discovery.walks.remove(&walk_id) else {
            return;
        };
        let open: Vec<QueryId> = self
            .discovery
            .walk_queries
            .iter()
            .filter(|(_, (w, _, _))| *w == walk_id)
            .map(|(q, _)| *q)
            .collect();
        for q in open {
            self.discovery.walk_queries.remove(&q);
            if let Some(mut query) = self.swarm.behaviour_mut().kad.query_mut(&q) {
                query.finish();
            }
        }
        let me = *self.swarm.local_peer_id();
        let found = walk.into_found().into_iter().filter(|p| *p != me).collect();
        let _ = reply.send(Ok(found));
    }
}
