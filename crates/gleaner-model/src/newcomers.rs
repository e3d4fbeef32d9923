//! Which peer ids a node has met lately (issue 30, scope 3): the memory
//! behind counting, per source, the identities it brings that the node has
//! never met (`sources::SourceBudgets::newcomer`). An honest node keeps
//! its identity, so its reconnections cost its source nothing; a stranger
//! that takes a fresh peer id for every connection brings a newcomer each
//! time.
//!
//! The memory is two generations of at most `per_generation` ids each: an
//! id is met when it is in either; each sighting puts it in the current
//! one; the current one becomes the previous (and the previous is
//! forgotten) when it is full or half the window old, and both are
//! forgotten when the current one is a whole window old. So an id seen
//! within the last half window is remembered unless more than
//! `per_generation` other ids came since, one not seen for a whole window
//! is forgotten, and the memory never holds more than twice
//! `per_generation` ids, whatever a flood of fresh ids does. Forgetting an honest peer costs its source one
//! newcomer when it comes back, never more.
//!
//! Pure: the time is a parameter (milliseconds from any fixed origin). It
//! must not know what a peer id is (the caller may give a fingerprint).

use std::collections::HashSet;
use std::hash::Hash;

/// The ids met within a window, bounded (see the module doc).
#[derive(Debug, Clone)]
pub struct MetPeers<P> {
    per_generation: usize,
    half_window_ms: u64,
    current: HashSet<P>,
    previous: HashSet<P>,
    /// When the current generation began (milliseconds).
    current_since_ms: Option<u64>,
}

impl<P: Hash + Eq> MetPeers<P> {
    /// Remembers ids for `window_ms` (at least its half), at most
    /// `per_generation` new ones per half window (at least one).
    pub fn new(window_ms: u64, per_generation: usize) -> MetPeers<P> {
        MetPeers {
            per_generation: per_generation.max(1),
            half_window_ms: window_ms / 2,
            current: HashSet::new(),
            previous: HashSet::new(),
            current_since_ms: None,
        }
    }

    /// `peer` seen at `now_ms`: true when it was met before (remembered),
    /// false when it is a newcomer. Either way it is remembered from now.
    /// A time earlier than the generation's start counts as its start (a
    /// clock that steps back ages nothing).
    pub fn saw(&mut self, peer: P, now_ms: u64) -> bool {
        let since = *self.current_since_ms.get_or_insert(now_ms);
        let age = now_ms.saturating_sub(since);
        if age >= self.half_window_ms.saturating_mul(2) {
            // Nothing seen for a whole window is remembered.
            self.rotate(now_ms);
            self.previous.clear();
        } else if age >= self.half_window_ms {
            // Half a window old: the previous generation is past the window.
            self.rotate(now_ms);
        }
        let met = self.current.contains(&peer) || self.previous.contains(&peer);
        if !self.current.contains(&peer) && self.current.len() >= self.per_generation {
            self.rotate(now_ms);
        }
        self.current.insert(peer);
        met
    }

    fn rotate(&mut self, now_ms: u64) {
        self.previous = std::mem::take(&mut self.current);
        self.current_since_ms = Some(now_ms);
    }

    /// Ids remembered now (those in both generations counted twice).
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// True when no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;

    #[test]
    fn an_id_seen_again_within_half_the_window_is_met_and_a_fresh_one_is_not() {
        let mut m: MetPeers<u32> = MetPeers::new(HOUR, 100);
        assert!(!m.saw(1, 0), "first sight");
        assert!(m.saw(1, 1_000));
        assert!(!m.saw(2, 1_000));
        // Seen at 0 s and again at 29 min: met; then at 59 min (the
        // generation rotated at 30 min, it is in the previous one): met.
        assert!(!m.saw(3, 0));
        assert!(m.saw(3, 29 * 60_000));
        assert!(m.saw(3, 59 * 60_000));
        // Not seen for over an hour: forgotten, a newcomer again.
        assert!(!m.saw(2, 2 * HOUR + 1));
    }

    #[test]
    fn a_flood_of_fresh_ids_costs_a_bounded_memory() {
        let mut m: MetPeers<u64> = MetPeers::new(HOUR, 64);
        for id in 0..100_000u64 {
            assert!(!m.saw(id, id), "{id} is fresh");
            assert!(m.len() <= 128, "{} remembered", m.len());
        }
        // An id that keeps coming back during the flood stays met.
        let mut m: MetPeers<u64> = MetPeers::new(HOUR, 64);
        assert!(!m.saw(u64::MAX, 0));
        for id in 0..10_000u64 {
            let _ = m.saw(id, id);
            if id % 32 == 0 {
                assert!(m.saw(u64::MAX, id), "at {id}");
            }
        }
    }

    #[test]
    fn hostile_times_do_not_break_it() {
        let mut m: MetPeers<u32> = MetPeers::new(u64::MAX, 4);
        assert!(!m.saw(1, u64::MAX));
        assert!(m.saw(1, 0), "a clock that steps back ages nothing");
        assert!(m.saw(1, u64::MAX));
        // A window of nothing and no room: nothing is remembered.
        let mut z: MetPeers<u32> = MetPeers::new(0, 0);
        for id in 0..100 {
            assert!(!z.saw(id, 5));
            assert!(!z.saw(id, 5));
            assert!(z.len() <= 1);
        }
    }
}
