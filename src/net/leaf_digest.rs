//! Summaries on the leaves of the pool's DHT trie (issue 27: a consumer's
//! cost per submission must not grow with the pool): decisions only, no
//! Swarm, no clock (the time and the randomness are parameters).
//!
//! On the one pool-wide summary topic a listener hears every member, so a
//! consumer placing a batch in a pool of N pays N × ~16 B/s while it
//! places. In a large pool (`listening`) a member therefore also publishes
//! its summary on its own leaf's topic (the DHT key it provides,
//! `pool_shards`: at most ~16 members) and keeps what it hears there
//! ([`LeafStore`]); a consumer asks one member of a leaf for that leaf's
//! summaries (`/gleaner/digest/1`, [`LeafStore::answer`], checked by
//! [`check_digest`]), and samples as many leaves as its batch is wide
//! ([`Sampler`]): it probes keys of the trie at random, top down, until the
//! leaves found name about the hosts it wants, fetches each leaf's digest,
//! fetches it again once per heartbeat while it still wants the sample, and
//! forgets the sample [`SAMPLE_FOR`] after the last request for it. What a
//! sample costs follows the number of hosts asked for, never N.
//!
//! A digest's entries are the answerer's word on its leaf mates: each is
//! checked as a summary heard on the topic (format, bounds), must describe a
//! member whose id lies under the answered leaf (so an answerer speaks for
//! its own leaf only), and a consumer never places on a host it did not ask
//! itself (`consumer::survey`), so a forged entry costs at most an ask.
//!
//! It must not know the Swarm, how queries or requests are sent, or the node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::net::listening::WATCH_FOR;
use crate::net::pool_shards::Shard;
use crate::net::protocol::{
    DigestEntry, DigestResponse, DIGEST_ENTRIES_MAX, DIGEST_RESPONSE_CAP, SUMMARY_FORMAT,
    SUMMARY_MAX_BYTES,
};
use crate::net::summary::{decode_summary, DecodedSummary};

/// How long a consumer keeps its sample after the last request for it:
/// as long as a node listens after the last request for its members
/// (longer than the longest a waiting batch goes between two looks).
pub const SAMPLE_FOR: Duration = WATCH_FOR;

/// Most keys one sample probes in all: bounds what one consumer's sample
/// can cost (about 4,000 hosts named at 8 a key), whatever it asks for.
pub const SAMPLE_PROBES_MAX: usize = 512;

/// Digest requests out at once.
pub const FETCHES_AT_ONCE: usize = 16;

/// Most hosts a sample aims to name (the member table's bound).
pub const SAMPLE_HOSTS_MAX: usize = crate::net::members::MEMBERS_MAX;

/// Bytes an entry costs in a digest beyond its summary (its age and the
/// summary's length, as varints), and the answer's own fields.
const ENTRY_OVERHEAD: usize = 16;
const ANSWER_OVERHEAD: usize = 32;

/// The summaries a member heard on its leaf's topic, bounded: at most
/// [`DIGEST_ENTRIES_MAX`], the least recently heard dropped first, only
/// members under the leaf.
#[derive(Debug, Default)]
pub struct LeafStore {
    leaf: Option<Shard>,
    heard: HashMap<PeerId, (Vec<u8>, Instant)>,
}

impl LeafStore {
    /// The leaf we are on (the DHT key we provide), once known.
    pub fn leaf(&self) -> Option<Shard> {
        self.leaf
    }

    /// We provide `leaf` now: what we heard of members outside it goes.
    pub fn moved(&mut self, leaf: Shard) {
        self.leaf = Some(leaf);
        self.heard.retain(|p, _| leaf.holds(p));
    }

    /// A summary `member` published on our leaf's topic (the caller checked
    /// that it decodes and comes from the member it describes). False when
    /// it is not kept: no leaf yet, a member outside it, or too long.
    pub fn heard(&mut self, member: PeerId, bytes: Vec<u8>, now: Instant) -> bool {
        let Some(leaf) = self.leaf else {
            return false;
        };
        if !leaf.holds(&member) || bytes.len() > SUMMARY_MAX_BYTES {
            return false;
        }
        if !self.heard.contains_key(&member) && self.heard.len() >= DIGEST_ENTRIES_MAX {
            let oldest = self
                .heard
                .iter()
                .min_by_key(|(p, (_, at))| (*at, **p))
                .map(|(p, _)| *p);
            if let Some(old) = oldest {
                self.heard.remove(&old);
            }
        }
        self.heard.insert(member, (bytes, now));
        true
    }

    /// We keep a summary `peer` published on our leaf's topic: it is a
    /// leaf mate that has been on the leaf's mesh with us.
    pub fn knows(&self, peer: &PeerId) -> bool {
        self.heard.contains_key(peer)
    }

    /// The members heard on our leaf's topic within `within` of `now`:
    /// those that provide our key as they see it. A member that moved down
    /// stops publishing here and drops out once `within` has passed.
    pub fn heard_within(&self, now: Instant, within: Duration) -> Vec<PeerId> {
        self.heard
            .iter()
            .filter(|(_, (_, at))| now.saturating_duration_since(*at) <= within)
            .map(|(p, _)| *p)
            .collect()
    }

    /// Summaries kept now.
    pub fn len(&self) -> usize {
        self.heard.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heard.is_empty()
    }

    /// The answer to a digest request at `now`: our leaf, our own summary
    /// (`own`, as last published) first, then the others newest first, none
    /// older than `ttl` and none of `me`, while the answer fits
    /// [`DIGEST_RESPONSE_CAP`]. `None` before we have a leaf.
    pub fn answer(
        &self,
        me: PeerId,
        own: Option<&[u8]>,
        now: Instant,
        ttl: Duration,
    ) -> Option<DigestResponse> {
        let leaf = self.leaf?;
        let mut others: Vec<(&PeerId, &(Vec<u8>, Instant))> = self
            .heard
            .iter()
            .filter(|(p, (_, at))| **p != me && now.saturating_duration_since(*at) <= ttl)
            .collect();
        others.sort_by_key(|(p, (_, at))| (std::cmp::Reverse(*at), **p));
        let candidates = own
            .map(|b| (0u32, b))
            .into_iter()
            .chain(others.into_iter().map(|(_, (b, at))| {
                let age = now.saturating_duration_since(*at).as_secs();
                (u32::try_from(age).unwrap_or(u32::MAX), b.as_slice())
            }));
        let mut room = (DIGEST_RESPONSE_CAP as usize).saturating_sub(ANSWER_OVERHEAD);
        let mut entries = Vec::new();
        for (age, bytes) in candidates {
            let cost = bytes.len() + ENTRY_OVERHEAD;
            if entries.len() >= DIGEST_ENTRIES_MAX || cost > room {
                break;
            }
            room -= cost;
            entries.push(DigestEntry {
                heard_secs_ago: age,
                summary: bytes.to_vec(),
            });
        }
        Some(DigestResponse {
            depth: leaf.depth(),
            bits: leaf.bits(),
            entries,
        })
    }
}

/// Why a digest answer is refused whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("digest names no leaf of the trie (depth {depth}, bits {bits:#x})")]
    Leaf { depth: u8, bits: u32 },
    #[error("digest answerer is not on the leaf it names")]
    NotOnLeaf,
    #[error("digest of {0} entries, at most {DIGEST_ENTRIES_MAX}")]
    TooMany(usize),
}

/// One member as a digest describes it, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct DigestMember {
    pub peer: PeerId,
    /// Seconds since the answerer heard it.
    pub heard_secs_ago: u32,
    pub summary: DecodedSummary,
}

/// A digest answer from `from`, heard at `heard_unix`, checked: the leaf it
/// names must be a key of the trie with `from` under it, and it may carry
/// at most [`DIGEST_ENTRIES_MAX`] entries (else it is refused whole). Each
/// entry must be a format 2 summary within [`SUMMARY_MAX_BYTES`] that
/// passes a summary's checks, of a member under that leaf, named once;
/// entries that fail are left out (their count is the third value).
pub fn check_digest(
    from: &PeerId,
    answer: &DigestResponse,
    heard_unix: i64,
) -> Result<(Shard, Vec<DigestMember>, usize), DigestError> {
    let leaf = Shard::from_wire(answer.depth, answer.bits).ok_or(DigestError::Leaf {
        depth: answer.depth,
        bits: answer.bits,
    })?;
    if !leaf.holds(from) {
        return Err(DigestError::NotOnLeaf);
    }
    if answer.entries.len() > DIGEST_ENTRIES_MAX {
        return Err(DigestError::TooMany(answer.entries.len()));
    }
    let mut members: Vec<DigestMember> = Vec::with_capacity(answer.entries.len());
    let mut refused = 0;
    for entry in &answer.entries {
        let checked = check_entry(leaf, &entry.summary, heard_unix)
            .filter(|(peer, _)| !members.iter().any(|m| m.peer == *peer));
        match checked {
            Some((peer, summary)) => members.push(DigestMember {
                peer,
                heard_secs_ago: entry.heard_secs_ago,
                summary,
            }),
            None => refused += 1,
        }
    }
    Ok((leaf, members, refused))
}

/// One digest entry's summary, checked as one heard on the topic, of a
/// member under `leaf`; `None` when it is not.
fn check_entry(leaf: Shard, bytes: &[u8], heard_unix: i64) -> Option<(PeerId, DecodedSummary)> {
    if bytes.len() > SUMMARY_MAX_BYTES {
        return None;
    }
    let summary = decode_summary(bytes, heard_unix).ok()?;
    if summary.format != SUMMARY_FORMAT {
        return None;
    }
    let peer = PeerId::from_bytes(&summary.member.peer_id).ok()?;
    leaf.holds(&peer).then_some((peer, summary))
}

/// What the network task should do next for a consumer's sample.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum SampleStep {
    /// Ask the DHT for this key's providers and report them with
    /// [`Sampler::probed`].
    Probe(Shard),
    /// Ask `from` for the digest of `leaf`; report with
    /// [`Sampler::fetched`] or [`Sampler::failed`].
    Fetch { leaf: Shard, from: PeerId },
    /// The sample lapsed: forget what it named.
    Forget,
}

/// One key of the trie found with providers: a leaf to fetch.
#[derive(Debug, Clone)]
struct Leaf {
    /// Its providers, in a random order: the next to ask is at `next`.
    providers: Vec<PeerId>,
    next: usize,
    /// When its digest last came (or we gave up on it until the refresh).
    fetched_at: Option<Instant>,
    fetching: bool,
    /// Members its last digest named.
    named: usize,
}

/// A consumer's sample of a large pool: which keys to probe and which
/// leaves to fetch, and when. A pure state machine the network task
/// drives.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// The trie's `SHARD_FULL`.
    full: usize,
    /// A key with at least this many providers may have members below it.
    descend_at: usize,
    /// How often a leaf's digest is fetched again while wanted.
    refresh: Duration,
    /// Hosts the sample should name.
    hosts: usize,
    /// Wanted until then; `None` when no sample is on.
    until: Option<Instant>,
    leaves: BTreeMap<Shard, Leaf>,
    /// Keys not probed yet below a well-filled one.
    frontier: Vec<Shard>,
    probing: HashSet<Shard>,
    /// Probes this sample made.
    probed: usize,
}

impl Sampler {
    /// No sample on; `full` is the trie's `SHARD_FULL` (lower in tests),
    /// `refresh` the summaries' heartbeat.
    pub fn new(full: usize, refresh: Duration) -> Sampler {
        Sampler {
            full,
            descend_at: (full / 2).max(1),
            refresh,
            hosts: 0,
            until: None,
            leaves: BTreeMap::new(),
            frontier: Vec::new(),
            probing: HashSet::new(),
            probed: 0,
        }
    }

    /// True while a sample is wanted at `now`.
    pub fn active(&self, now: Instant) -> bool {
        self.until.is_some_and(|t| now < t)
    }

    /// Someone wants a sample naming about `hosts` hosts at `now` (a
    /// survey: twice the tasks its batch wants running at once).
    pub fn want(&mut self, hosts: usize, now: Instant, rng: &mut impl Rng) -> Vec<SampleStep> {
        let mut steps = Vec::new();
        if self.until.is_some_and(|t| now >= t) {
            // Lapsed before a tick said so: a new sample, the old one gone.
            *self = Sampler::new(self.full, self.refresh);
            steps.push(SampleStep::Forget);
        }
        if self.until.is_none() {
            self.frontier = vec![Shard::ROOT];
        }
        self.hosts = hosts.clamp(1, SAMPLE_HOSTS_MAX);
        self.until = Some(now + SAMPLE_FOR);
        steps.extend(self.plan(now, rng));
        steps
    }

    /// The providers a probe of `shard` found.
    pub fn probed(
        &mut self,
        shard: Shard,
        providers: &HashSet<PeerId>,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Vec<SampleStep> {
        if !self.probing.remove(&shard) {
            return Vec::new();
        }
        if !providers.is_empty() {
            let mut list: Vec<PeerId> = providers.iter().copied().collect();
            list.sort();
            list.shuffle(rng);
            self.leaves.insert(
                shard,
                Leaf {
                    providers: list,
                    next: 0,
                    fetched_at: None,
                    fetching: false,
                    named: 0,
                },
            );
        }
        if providers.len() >= self.descend_at {
            if let Some(children) = shard.children() {
                self.frontier.extend(children);
            }
        }
        self.plan(now, rng)
    }

    /// `leaf`'s digest came, naming `named` members.
    pub fn fetched(
        &mut self,
        leaf: Shard,
        named: usize,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Vec<SampleStep> {
        if let Some(l) = self.leaves.get_mut(&leaf) {
            l.fetching = false;
            l.fetched_at = Some(now);
            l.named = named;
        }
        self.plan(now, rng)
    }

    /// Asking a provider of `leaf` for its digest failed: the next one is
    /// asked; when every one failed, the leaf waits for the refresh.
    pub fn failed(&mut self, leaf: Shard, now: Instant, rng: &mut impl Rng) -> Vec<SampleStep> {
        if let Some(l) = self.leaves.get_mut(&leaf) {
            l.fetching = false;
            l.next += 1;
            if l.next >= l.providers.len() {
                l.next = 0;
                l.fetched_at = Some(now);
            }
        }
        self.plan(now, rng)
    }

    /// The heartbeat: refreshes what is due while wanted; forgets the
    /// sample once it lapsed.
    pub fn tick(&mut self, now: Instant, rng: &mut impl Rng) -> Vec<SampleStep> {
        match self.until {
            Some(t) if now >= t => {
                *self = Sampler::new(self.full, self.refresh);
                vec![SampleStep::Forget]
            }
            _ => self.plan(now, rng),
        }
    }

    /// True when nothing is out: every probe answered, no fetch under way.
    pub fn settled(&self) -> bool {
        self.probing.is_empty() && !self.leaves.values().any(|l| l.fetching)
    }

    /// Leaves whose digest came at least once.
    pub fn leaves_fetched(&self) -> usize {
        self.leaves
            .values()
            .filter(|l| l.fetched_at.is_some() && l.named > 0)
            .count()
    }

    /// Hosts the sample names now: each leaf's last digest, or its
    /// providers before its digest came.
    pub fn named(&self) -> usize {
        self.leaves
            .values()
            .map(|l| {
                if l.named > 0 {
                    l.named
                } else {
                    l.providers.len()
                }
            })
            .sum()
    }

    fn plan(&mut self, now: Instant, rng: &mut impl Rng) -> Vec<SampleStep> {
        let mut steps = Vec::new();
        if !self.active(now) {
            return steps;
        }
        let fetching = self.leaves.values().filter(|l| l.fetching).count();
        let mut room = FETCHES_AT_ONCE.saturating_sub(fetching);
        for (shard, leaf) in &mut self.leaves {
            if room == 0 {
                break;
            }
            let due = leaf
                .fetched_at
                .is_none_or(|t| now.saturating_duration_since(t) >= self.refresh);
            if leaf.fetching || !due {
                continue;
            }
            let Some(from) = leaf.providers.get(leaf.next).copied() else {
                continue;
            };
            leaf.fetching = true;
            room -= 1;
            steps.push(SampleStep::Fetch { leaf: *shard, from });
        }
        // A probe under way is counted as naming what a well-filled key
        // does, so one answer does not start a probe per host missing.
        let mut expected = self.named() + self.probing.len() * self.descend_at;
        while expected < self.hosts && !self.frontier.is_empty() && self.probed < SAMPLE_PROBES_MAX
        {
            let i = rng.random_range(0..self.frontier.len());
            let shard = self.frontier.swap_remove(i);
            self.probing.insert(shard);
            self.probed += 1;
            expected += self.descend_at;
            steps.push(SampleStep::Probe(shard));
        }
        steps
    }
}

#[cfg(test)]
#[path = "leaf_digest_tests.rs"]
mod tests;
