//! The members this node has heard of, bounded: the table the network task
//! keeps of each member's addresses, status and checked summary, with the
//! least recently heard dropped first and the silent expired, and
//! [`SummaryCache`], what `status`, `hosts` and `batch status` say of it
//! (how many members, how long ago they were heard). It must not know how a
//! summary is checked (`summary`) nor the Swarm.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libp2p::PeerId;
use serde::{Deserialize, Serialize};

use crate::net::handle::Member;

/// Most members a node keeps in its table; past it the least recently
/// heard goes first.
pub const MEMBERS_MAX: usize = 10_000;

/// The members heard, bounded: at most `max`, the least recently heard
/// dropped first when a new one arrives, and any not heard for a TTL
/// dropped by [`expire`](Self::expire).
#[derive(Debug)]
pub struct MemberCache {
    members: HashMap<PeerId, Member>,
    max: usize,
}

impl MemberCache {
    /// An empty table of at most `max` members (at least one).
    pub fn new(max: usize) -> MemberCache {
        MemberCache {
            members: HashMap::new(),
            max: max.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn contains_key(&self, peer: &PeerId) -> bool {
        self.members.contains_key(peer)
    }

    pub fn get(&self, peer: &PeerId) -> Option<&Member> {
        self.members.get(peer)
    }

    /// Records what `member` said. A member heard again keeps the summary
    /// it sent before when this message (an old node's announcement) has
    /// none, or when this one is a copy of it in an older format (the same
    /// computation, for nodes that read nothing newer): a copy never makes
    /// a newer node look old, so a pool does not go on paying for copies
    /// once its older nodes have left. Returns the member evicted to make
    /// room, if any.
    pub fn insert(&mut self, mut member: Member) -> Option<PeerId> {
        if let Some(old) = self.members.get(&member.peer) {
            let keep_old = match (&member.summary, &old.summary) {
                (None, _) => true,
                (Some(new), Some(old)) => {
                    new.computed_at_unix == old.computed_at_unix && new.format() < old.format()
                }
                (Some(_), None) => false,
            };
            if keep_old {
                member.summary.clone_from(&old.summary);
            }
        }
        let mut evicted = None;
        if !self.members.contains_key(&member.peer) && self.members.len() >= self.max {
            // A scan only when full and a stranger arrives: rare, and at most
            // `max` entries.
            evicted = self
                .members
                .values()
                .min_by_key(|m| (m.last_seen, m.peer))
                .map(|m| m.peer);
            if let Some(old) = evicted {
                self.members.remove(&old);
            }
        }
        self.members.insert(member.peer, member);
        evicted
    }

    /// True when some member's last summary came in format 1 (a node
    /// built before format 2, which hears only that): then ours goes out
    /// in both formats.
    pub fn any_of_format_1(&self) -> bool {
        self.members
            .values()
            .any(|m| m.summary.as_ref().is_some_and(|s| s.images.is_none()))
    }

    /// True when some member's last summary came in format 2 (a node
    /// built before format 3, which refuses its bytes on the summary
    /// topic): then ours goes out there in both formats.
    pub fn any_of_format_2(&self) -> bool {
        self.members.values().any(|m| {
            m.summary
                .as_ref()
                .is_some_and(|s| s.format() == crate::net::protocol::SUMMARY_FORMAT)
        })
    }

    /// Drops the members not heard within `ttl` of `now`; returns them.
    pub fn expire(&mut self, now: Instant, ttl: Duration) -> Vec<PeerId> {
        let expired: Vec<PeerId> = self
            .members
            .values()
            .filter(|m| now.saturating_duration_since(m.last_seen) > ttl)
            .map(|m| m.peer)
            .collect();
        for peer in &expired {
            self.members.remove(peer);
        }
        expired
    }

    pub fn values(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }
}

/// What this node's table of members holds, as `status`, `hosts` and
/// `batch status` say it: a consumer ranks from these summaries, so their
/// number and age are what its placement knows of the pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SummaryCache {
    /// Members in the table, ourselves left out.
    pub members: u32,
    /// Of them, those known from a summary (a member of protocol version 1
    /// announces without one).
    pub summarised: u32,
    /// Seconds since the summaries were heard: the newest, the median and
    /// the oldest; `None` when there is none.
    pub newest_secs: Option<f64>,
    pub median_secs: Option<f64>,
    pub oldest_secs: Option<f64>,
}

impl SummaryCache {
    /// The table `members` (as [`crate::net::NetHandle::members`] lists
    /// it) at `now`, `me` left out.
    pub fn of(members: &[Member], me: PeerId, now: Instant) -> SummaryCache {
        let others = members.iter().filter(|m| m.peer != me);
        let mut ages: Vec<f64> = others
            .clone()
            .filter(|m| m.summary.is_some())
            .map(|m| now.saturating_duration_since(m.last_seen).as_secs_f64())
            .collect();
        ages.sort_by(f64::total_cmp);
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        SummaryCache {
            members: count(others.count()),
            summarised: count(ages.len()),
            newest_secs: ages.first().copied(),
            // The lower median for an even count: an age some member has.
            median_secs: ages.get(ages.len().saturating_sub(1) / 2).copied(),
            oldest_secs: ages.last().copied(),
        }
    }

    /// "12 members known from summaries, heard 3 s to 4 min ago (median 1
    /// min)"; `duration` shows whole seconds to people.
    pub fn text(&self, duration: impl Fn(u64) -> String) -> String {
        let known = format!(
            "{} member{} known from summaries",
            self.summarised,
            if self.summarised == 1 { "" } else { "s" }
        );
        let without = self.members.saturating_sub(self.summarised);
        let without = if without > 0 {
            format!(", {without} from an announcement only")
        } else {
            String::new()
        };
        let secs = |s: f64| duration(s.max(0.0).round() as u64);
        match (self.newest_secs, self.median_secs, self.oldest_secs) {
            (Some(new), Some(mid), Some(old)) => format!(
                "{known}{without}, heard {} to {} ago (median {})",
                secs(new),
                secs(old),
                secs(mid)
            ),
            _ => format!("{known}{without}"),
        }
    }
}
