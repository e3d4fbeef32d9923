//! Summaries on the leaves of the pool's DHT trie, performed (the decisions
//! are `leaf_digest`'s, pure): in a large pool, this member's leaf topic
//! (joined once its place in the trie is known and the pool seen large,
//! moved with its place, its summaries kept in the bounded leaf store, its
//! leaf mates dialed so that gossipsub can mesh them), digest requests
//! answered from that store, and a consumer's sample: DHT probes of the
//! trie's keys, digest fetches, the checked members kept apart from the
//! member table (which a quiet node keeps as last heard), and the surveys
//! that asked for it answered once nothing is out or at [`SAMPLE_WAIT`].
//! A small pool does none of it: a survey there reads the member table as
//! before.
//!
//! It must not know how a summary is computed or how the node ranks hosts.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::gossipsub::{IdentTopic, MessageAcceptance};
use libp2p::kad::{QueryId, RecordKey};
use libp2p::request_response::{self, OutboundRequestId};
use libp2p::{Multiaddr, PeerId};
use tokio::sync::oneshot;

use super::connectivity::Timer;
use super::membership::member_from;
use super::EventLoop;
use crate::net::handle::Member;
use crate::net::leaf_digest::{check_digest, LeafStore, SampleStep, Sampler, SAMPLE_HOSTS_MAX};
use crate::net::listening::Republish;
use crate::net::pool_shards::Shard;
use crate::net::protocol::{
    leaf_topic, DigestRequest, DigestResponse, SUMMARY_FORMAT, SUMMARY_MAX_BYTES,
};
use crate::net::summary::decode_summary;

/// How long a survey waits for its sample before it is answered with what
/// came: a few DHT round trips down the trie and a digest.
pub(super) const SAMPLE_WAIT: Duration = Duration::from_secs(3);

/// Surveys waiting for a sample at once; past it one is answered at once.
const WAITING_MAX: usize = 64;

/// Leaf mates a member keeps connected to: gossipsub's mesh target.
const MATES_DIALED: usize = 4;

/// The leaf side of the network task's state.
pub(super) struct Leaves {
    /// What we heard on our leaf's topic.
    store: LeafStore,
    /// Our leaf's topic, while we are on it.
    topic: Option<IdentTopic>,
    /// Our summary as last published (format 2), for our digest.
    own: Option<Vec<u8>>,
    /// A consumer's sample of the pool.
    sampler: Sampler,
    /// The sample's DHT probes: the key, and whether its providers were
    /// reported (at the first answer that names some: a provider's
    /// addresses live only as long as the query, and the fetch dials it).
    probes: HashMap<QueryId, (Shard, bool)>,
    /// Digest requests out, by the leaf asked.
    fetches: HashMap<OutboundRequestId, Shard>,
    /// The members the sample names, as their digests said.
    sampled: HashMap<PeerId, Member>,
    /// Surveys waiting for the sample.
    waiting: Vec<oneshot::Sender<Vec<Member>>>,
    /// Digests that came, in all (for `status`).
    digests: u32,
}

impl Leaves {
    /// Nothing joined, no sample; `full` is the trie's `SHARD_FULL`, a
    /// sample's leaves are fetched again every `heartbeat`.
    pub(super) fn new(full: usize, heartbeat: Duration) -> Leaves {
        Leaves {
            store: LeafStore::default(),
            topic: None,
            own: None,
            sampler: Sampler::new(full, heartbeat.max(Duration::from_secs(1))),
            probes: HashMap::new(),
            fetches: HashMap::new(),
            sampled: HashMap::new(),
            waiting: Vec::new(),
            digests: 0,
        }
    }

    /// Where a sampled member said it can be reached.
    pub(super) fn addresses_of(&self, peer: &PeerId) -> Option<&[Multiaddr]> {
        self.sampled.get(peer).map(|m| m.addresses.as_slice())
    }

    /// Keeps our summary as published, for our digest.
    pub(super) fn published(&mut self, data: &[u8]) {
        self.own = Some(data.to_vec());
    }

    /// Our leaf's topic, while we are on it.
    pub(super) fn topic(&self) -> Option<&IdentTopic> {
        self.topic.as_ref()
    }

    /// A leaf mate whose summary we keep (`LeafStore::knows`).
    pub(super) fn knows(&self, peer: &PeerId) -> bool {
        self.store.knows(peer)
    }
}

impl EventLoop {
    /// The members publishing on `shard`'s topic lately when it is our
    /// leaf (none otherwise): they provide the key as they see it, even
    /// where no holder lists them (a store keeps a key's first 20), so a
    /// probe of our own key counts them too and a crowded key looks
    /// crowded to everyone on it; its members past the first 16 then move
    /// down (`Placement::crowded_out`). In the 300-member harness keys two
    /// deep carried 30 to 75 members while the DHT listed about 20. Two
    /// heartbeats: a live member publishes at least once in that time, and
    /// one that moved down drops out by then.
    pub(super) fn leaf_publishers(&self, shard: Shard) -> Vec<PeerId> {
        if self.leaves.store.leaf() != Some(shard) {
            return Vec::new();
        }
        let within = self.cfg.announce_interval.saturating_mul(2);
        self.leaves.store.heard_within(Instant::now(), within)
    }

    /// In a large pool, puts us on our leaf's topic (or moves us to the
    /// new one when our place in the trie changed). On joining, and with
    /// `dial` (a placement that found the leaf's providers), dials a few
    /// leaf mates when we hold fewer than a gossip mesh's worth: gossipsub
    /// meshes connected peers only, and a few links per member keep the
    /// leaf's mesh whole without a connection to each.
    pub(super) fn join_leaf(&mut self, mut dial: bool) {
        if !self.listening.large() {
            return;
        }
        let Some(at) = self.discovery.at() else {
            return;
        };
        if self.leaves.store.leaf() != Some(at) || self.leaves.topic.is_none() {
            let topic = IdentTopic::new(leaf_topic(&self.cfg.pool, &at.label()));
            let gossipsub = &mut self.swarm.behaviour_mut().gossipsub;
            if let Some(old) = self.leaves.topic.take() {
                gossipsub.unsubscribe(&old);
            }
            if let Err(e) = gossipsub.subscribe(&topic) {
                tracing::warn!(%topic, "could not join our leaf's topic: {e}");
                return;
            }
            tracing::info!(leaf = %at.label(), "on our leaf's summary topic");
            self.leaves.topic = Some(topic);
            self.leaves.store.moved(at);
            self.reach
                .send_modify(|r| r.summaries.leaf_depth = Some(at.depth()));
            // Our leaf mates hear us there soon, not at our next heartbeat.
            self.republish(Republish::LeafJoined);
            dial = true;
        }
        if !dial {
            return;
        }
        let me = *self.swarm.local_peer_id();
        let mates: Vec<PeerId> = self
            .discovery
            .mates()
            .iter()
            .filter(|p| **p != me)
            .copied()
            .collect();
        let linked = mates.iter().filter(|p| self.swarm.is_connected(p)).count();
        let unlinked: Vec<PeerId> = mates
            .into_iter()
            .filter(|p| !self.swarm.is_connected(p))
            .take(MATES_DIALED.saturating_sub(linked))
            .collect();
        for peer in unlinked {
            self.dial_peer(peer, true);
        }
    }

    /// A message on our leaf's topic: a format 2 summary from the member it
    /// describes, kept in the leaf store (not in the member table: a quiet
    /// member does not hear the pool, its leaf only).
    pub(super) fn on_leaf_summary(&mut self, source: PeerId, data: &[u8]) -> MessageAcceptance {
        if data.len() > SUMMARY_MAX_BYTES {
            return MessageAcceptance::Reject;
        }
        let heard = jiff::Timestamp::now().as_second();
        let Ok(h) = decode_summary(data, heard) else {
            return MessageAcceptance::Reject;
        };
        if h.format != SUMMARY_FORMAT || member_from(source, h.member, None).is_none() {
            return MessageAcceptance::Reject;
        }
        if self
            .leaves
            .store
            .heard(source, data.to_vec(), Instant::now())
        {
            let kept = u32::try_from(self.leaves.store.len()).unwrap_or(u32::MAX);
            self.reach.send_modify(|r| r.summaries.leaf_heard = kept);
            self.count(|c| c.heard_leaf += 1);
            MessageAcceptance::Accept
        } else {
            // A member of another leaf (we moved, or it did): not ours to keep.
            MessageAcceptance::Ignore
        }
    }

    /// A survey wants about `hosts` hosts named: in a large pool the sample
    /// goes on (or is wanted again) and the survey is answered from it when
    /// nothing is out; in a small pool it reads the member table as
    /// `members` does, listening for a while.
    pub(super) fn want_sample(&mut self, hosts: usize, reply: oneshot::Sender<Vec<Member>>) {
        let now = Instant::now();
        if !self.listening.large() {
            self.listening.watch(now);
            self.update_listening();
            let _ = reply.send(self.members.values().cloned().collect());
            return;
        }
        let steps = self.leaves.sampler.want(hosts, now, &mut rand::rng());
        self.sample_steps(steps);
        if self.leaves.sampler.settled() || self.leaves.waiting.len() >= WAITING_MAX {
            let _ = reply.send(self.leaves.sampled.values().cloned().collect());
            return;
        }
        self.leaves.waiting.push(reply);
        self.start_timer(SAMPLE_WAIT, Timer::SampleDeadline);
    }

    /// Answers the surveys waiting for the sample with what it names now.
    pub(super) fn answer_sample_waiters(&mut self) {
        if self.leaves.waiting.is_empty() {
            return;
        }
        let named: Vec<Member> = self.leaves.sampled.values().cloned().collect();
        for reply in self.leaves.waiting.drain(..) {
            let _ = reply.send(named.clone());
        }
    }

    /// The heartbeat of the sample: leaves due are fetched again, a lapsed
    /// sample is forgotten, and a member no digest named within the member
    /// TTL (it left its leaf, or the pool) leaves the sample.
    pub(super) fn sample_tick(&mut self) {
        let now = Instant::now();
        let ttl = self.cfg.member_ttl;
        self.leaves
            .sampled
            .retain(|_, m| now.saturating_duration_since(m.last_seen) <= ttl);
        let steps = self.leaves.sampler.tick(now, &mut rand::rng());
        self.sample_steps(steps);
    }

    fn sample_steps(&mut self, steps: Vec<SampleStep>) {
        for step in steps {
            match step {
                SampleStep::Probe(shard) => {
                    let key = RecordKey::new(&shard.key(&self.cfg.pool));
                    let id = self.swarm.behaviour_mut().kad.get_providers(key);
                    self.leaves.probes.insert(id, (shard, false));
                }
                SampleStep::Fetch { leaf, from } => {
                    let request = DigestRequest {
                        depth: leaf.depth(),
                        bits: leaf.bits(),
                    };
                    let id = self
                        .swarm
                        .behaviour_mut()
                        .digest
                        .send_request(&from, request);
                    self.leaves.fetches.insert(id, leaf);
                }
                SampleStep::Forget => {
                    tracing::info!(
                        hosts = self.leaves.sampled.len(),
                        "no survey wants the pool's sample any more: forgetting it"
                    );
                    self.leaves.sampled.clear();
                    self.leaves.probes.clear();
                    self.leaves.fetches.clear();
                }
            }
        }
        let sampled = u32::try_from(self.leaves.sampled.len()).unwrap_or(u32::MAX);
        let digests = self.leaves.digests;
        self.reach.send_if_modified(|r| {
            let changed = r.summaries.sampled != sampled || r.summaries.digests != digests;
            r.summaries.sampled = sampled;
            r.summaries.digests = digests;
            changed
        });
        if self.leaves.sampler.settled() {
            self.answer_sample_waiters();
        }
    }

    /// Providers a DHT query found; true when it was the sample's probe.
    pub(super) fn on_sample_providers(
        &mut self,
        id: QueryId,
        found: &HashSet<PeerId>,
        last: bool,
    ) -> bool {
        let Some((shard, reported)) = self.leaves.probes.get_mut(&id) else {
            return false;
        };
        let shard = *shard;
        let report = !*reported && (!found.is_empty() || last);
        if report {
            *reported = true;
        }
        if last {
            self.leaves.probes.remove(&id);
        }
        if report {
            // We are no provider to ask: our own leaf's mates are heard on
            // its topic, not through a digest.
            let me = *self.swarm.local_peer_id();
            let others: HashSet<PeerId> = found.iter().filter(|p| **p != me).copied().collect();
            let steps =
                self.leaves
                    .sampler
                    .probed(shard, &others, Instant::now(), &mut rand::rng());
            self.sample_steps(steps);
        }
        true
    }

    pub(super) fn on_digest_event(
        &mut self,
        event: request_response::Event<DigestRequest, DigestResponse>,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let Some(channel) = self.admit_inbound(peer, channel) else {
                        return;
                    };
                    let me = *self.swarm.local_peer_id();
                    let answer = self.leaves.store.answer(
                        me,
                        self.leaves.own.as_deref(),
                        Instant::now(),
                        self.cfg.member_ttl,
                    );
                    tracing::debug!(%peer, depth = request.depth, answered = answer.is_some(), "digest asked");
                    // No leaf yet: the channel is dropped, the asker tries
                    // another provider.
                    if let Some(answer) = answer {
                        let _ = self
                            .swarm
                            .behaviour_mut()
                            .digest
                            .send_response(channel, answer);
                    }
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(asked) = self.leaves.fetches.remove(&request_id) {
                        self.on_digest(asked, peer, &response);
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                if let Some(asked) = self.leaves.fetches.remove(&request_id) {
                    tracing::debug!(leaf = %asked.label(), "digest request failed: {error}");
                    let steps = self
                        .leaves
                        .sampler
                        .failed(asked, Instant::now(), &mut rand::rng());
                    self.sample_steps(steps);
                }
            }
            _ => {}
        }
    }

    /// A digest came for the leaf `asked` from `from`: its members, checked,
    /// join the sample at their age (none older than the member TTL).
    fn on_digest(&mut self, asked: Shard, from: PeerId, answer: &DigestResponse) {
        let now = Instant::now();
        let heard = jiff::Timestamp::now().as_second();
        let (_, members, refused) = match check_digest(&from, answer, heard) {
            Ok(checked) => checked,
            Err(e) => {
                tracing::debug!(%from, "digest refused: {e}");
                let steps = self.leaves.sampler.failed(asked, now, &mut rand::rng());
                self.sample_steps(steps);
                return;
            }
        };
        if refused > 0 {
            tracing::debug!(%from, refused, "digest entries refused");
        }
        let mut named = 0;
        for m in members {
            let age = Duration::from_secs(u64::from(m.heard_secs_ago));
            if age > self.cfg.member_ttl {
                continue;
            }
            let summary = Some(Arc::new(m.summary.summary));
            let Some(mut member) = member_from(m.peer, m.summary.member, summary) else {
                continue;
            };
            member.last_seen = now.checked_sub(age).unwrap_or(now);
            if self.leaves.sampled.len() < SAMPLE_HOSTS_MAX
                || self.leaves.sampled.contains_key(&m.peer)
            {
                self.leaves.sampled.insert(m.peer, member);
                named += 1;
            }
        }
        self.leaves.digests = self.leaves.digests.saturating_add(1);
        let steps = self
            .leaves
            .sampler
            .fetched(asked, named, now, &mut rand::rng());
        self.sample_steps(steps);
    }
}
