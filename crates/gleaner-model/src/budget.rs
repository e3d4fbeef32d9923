//! Budgets for what peers send: a token bucket that refills at a steady
//! rate up to a burst, so that a peer may send what an honest one would
//! and no more; per-peer budgets of requests with a tolerance for drops,
//! past which a peer is cut off; streams a peer holds open at once; the
//! bytes a peer may read of the files offered to it (the CPU it may cost
//! is `cpu_budget`'s); and the names of the
//! budgets a peer can go past ([`Overrun`]), which its record counts as a
//! flood. Pure: the time is a parameter (milliseconds from any fixed
//! origin), so the caller's clock and tests' paused time both work.

/// Which of its budgets a peer went past: each is a flood in the peer's
/// record (`trust::Offence::Flood`), whatever role it played.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overrun {
    /// Requests on the reliability and job protocols, past the budget and
    /// the tolerance for drops: the peer was cut off.
    Requests,
    /// Summaries (or announcements) it published on the pool's topics, past
    /// the budget and the tolerance: cut off.
    Summaries,
    /// Data streams it opened, past the budget and the tolerance: cut off.
    DataStreams,
    /// Bytes of offered files it read past its allowance.
    Reads,
    /// CPU its requests cost the node, past its account and the tolerance
    /// (`cpu_budget::PeerCpu`): cut off.
    Cpu,
}

impl Overrun {
    /// What the peer flooded, for logs and refusals.
    pub fn label(self) -> &'static str {
        match self {
            Overrun::Requests => "requests",
            Overrun::Summaries => "summaries",
            Overrun::DataStreams => "data streams",
            Overrun::Reads => "reads of offered files",
            Overrun::Cpu => "CPU",
        }
    }
}

/// A token bucket: `capacity` tokens at most, `per_sec` added each second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    capacity: f64,
    per_sec: f64,
    tokens: f64,
    last_ms: Option<u64>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(capacity: u32, per_sec: f64) -> TokenBucket {
        let capacity = f64::from(capacity.max(1));
        TokenBucket {
            capacity,
            per_sec: if per_sec.is_finite() {
                per_sec.max(0.0)
            } else {
                0.0
            },
            tokens: capacity,
            last_ms: None,
        }
    }

    /// Takes one token at `now_ms` if there is one. A time earlier than the
    /// last one adds nothing (a clock that steps back gives no credit).
    pub fn take(&mut self, now_ms: u64) -> bool {
        if let Some(last) = self.last_ms {
            let elapsed = now_ms.saturating_sub(last) as f64 / 1000.0;
            self.tokens = (self.tokens + elapsed * self.per_sec).min(self.capacity);
        }
        self.last_ms = Some(self.last_ms.map_or(now_ms, |l| l.max(now_ms)));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What to do with one request from a peer, by [`PeerBudgets::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Within the peer's budget: serve it.
    Serve,
    /// Past the budget: drop it unanswered (the cheapest answer).
    Drop,
    /// Past the budget and past the tolerance for drops: drop it and cut
    /// the peer off for a while. Said once; the entry starts afresh.
    CutOff,
}

/// Request budgets per peer, for requests that come in at a peer's will:
/// each peer gets a [`TokenBucket`] of requests, and a second one of drops
/// it is forgiven (an honest burst that overflows now and then); a peer
/// that empties both is cut off. At most `max_peers` entries are kept: a
/// new peer past that replaces the one heard from longest ago, so a flood
/// of fresh peer ids costs a bounded map. Pure, like the bucket.
#[derive(Debug, Clone)]
pub struct PeerBudgets<K> {
    requests: (u32, f64),
    drops: (u32, f64),
    max_peers: usize,
    peers: std::collections::HashMap<K, PeerBudget>,
}

#[derive(Debug, Clone, Copy)]
struct PeerBudget {
    requests: TokenBucket,
    drops: TokenBucket,
    last_ms: u64,
}

impl<K: std::hash::Hash + Eq + Clone> PeerBudgets<K> {
    /// `requests` and `drops` are each a (burst, per second) pair.
    pub fn new(requests: (u32, f64), drops: (u32, f64), max_peers: usize) -> PeerBudgets<K> {
        PeerBudgets {
            requests,
            drops,
            max_peers: max_peers.max(1),
            peers: std::collections::HashMap::new(),
        }
    }

    /// Counts one request from `peer` at `now_ms` and says what to do with it.
    pub fn admit(&mut self, peer: &K, now_ms: u64) -> Admit {
        if !self.peers.contains_key(peer) && self.peers.len() >= self.max_peers {
            let oldest = self
                .peers
                .iter()
                .min_by_key(|(_, b)| b.last_ms)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.peers.remove(&oldest);
            }
        }
        let (requests, drops) = (self.requests, self.drops);
        let budget = self
            .peers
            .entry(peer.clone())
            .or_insert_with(|| PeerBudget {
                requests: TokenBucket::new(requests.0, requests.1),
                drops: TokenBucket::new(drops.0, drops.1),
                last_ms: now_ms,
            });
        budget.last_ms = budget.last_ms.max(now_ms);
        if budget.requests.take(now_ms) {
            return Admit::Serve;
        }
        if budget.drops.take(now_ms) {
            return Admit::Drop;
        }
        self.peers.remove(peer);
        Admit::CutOff
    }

    /// Peers with an entry.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// True when no peer has an entry.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}

/// Streams each peer holds open at once, at most `cap` a peer. A peer has
/// an entry only while it holds one, so the map is bounded by what the
/// caller lets be open in all.
#[derive(Debug, Clone)]
pub struct PeerSlots<K> {
    cap: u32,
    open: std::collections::HashMap<K, u32>,
}

impl<K: std::hash::Hash + Eq + Clone> PeerSlots<K> {
    /// At most `cap` (at least 1) open streams a peer.
    pub fn new(cap: u32) -> PeerSlots<K> {
        PeerSlots {
            cap: cap.max(1),
            open: std::collections::HashMap::new(),
        }
    }

    /// Takes one of `peer`'s slots: false when it holds `cap` already.
    pub fn take(&mut self, peer: &K) -> bool {
        let held = self.open.entry(peer.clone()).or_insert(0);
        if *held >= self.cap {
            return false;
        }
        *held += 1;
        true
    }

    /// Gives one of `peer`'s slots back (nothing when it holds none).
    pub fn give_back(&mut self, peer: &K) {
        if let Some(held) = self.open.get_mut(peer) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                self.open.remove(peer);
            }
        }
    }

    /// Slots `peer` holds.
    pub fn held(&self, peer: &K) -> u32 {
        self.open.get(peer).copied().unwrap_or(0)
    }

    /// Peers holding a slot.
    pub fn peers(&self) -> usize {
        self.open.len()
    }
}

/// Bytes a peer may still read of what was offered to it: granted with
/// each offer, spent as chunks are served; a read past it is refused. Data
/// streams come at the peer's will and each may ask a file again from any
/// chunk: without a bound, one host could have a consumer send the same
/// file forever.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByteAllowance {
    left: u64,
    /// The peer asked more than was left, at least once.
    overdrawn: bool,
}

impl ByteAllowance {
    /// Adds `bytes` (saturating).
    pub fn grant(&mut self, bytes: u64) {
        self.left = self.left.saturating_add(bytes);
    }

    /// Takes `bytes` if that many are left; nothing otherwise.
    pub fn spend(&mut self, bytes: u64) -> bool {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }

    /// Bytes left.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// Notes that the peer asked more than is left: true the first time
    /// only, so one allowance is one flood in the peer's record however
    /// often it asks again.
    pub fn overdraw(&mut self) -> bool {
        !std::mem::replace(&mut self.overdrawn, true)
    }
}

/// What one offer of files of `bytes` in all lets a host read: the files
/// once, and again for each of the `rereads` a host may ask after refusing
/// a chunk (each asks from the refused chunk to the end, so at most the
/// whole file again).
pub fn read_grant(bytes: u64, rereads: u32) -> u64 {
    bytes.saturating_mul(1 + u64::from(rereads))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_holds_at_most_its_slots_and_others_are_not_touched() {
        let mut s: PeerSlots<u32> = PeerSlots::new(2);
        assert!(s.take(&1) && s.take(&1));
        assert!(!s.take(&1), "a third stream of one peer");
        assert_eq!(s.held(&1), 2);
        assert!(s.take(&2), "another peer has its own slots");
        s.give_back(&1);
        assert!(s.take(&1), "a slot given back is free again");
        s.give_back(&1);
        s.give_back(&1);
        s.give_back(&1);
        assert_eq!(s.held(&1), 0, "giving back more than held saturates");
        s.give_back(&2);
        assert_eq!(s.peers(), 0, "no entry without an open stream");
        let mut one: PeerSlots<u32> = PeerSlots::new(0);
        assert!(one.take(&1) && !one.take(&1), "a cap of 0 is 1");
    }

    #[test]
    fn a_read_allowance_serves_the_grant_and_no_byte_more() {
        let mut a = ByteAllowance::default();
        assert!(a.spend(0), "an empty file costs nothing");
        assert!(!a.spend(1), "nothing granted, nothing read");
        a.grant(read_grant(10, 2));
        assert_eq!(a.left(), 30);
        assert!(a.spend(10) && a.spend(10) && a.spend(10));
        assert!(!a.spend(1));
        assert_eq!(a.left(), 0);
        // A second offer grants again; a refused read spends nothing.
        a.grant(read_grant(10, 0));
        assert!(!a.spend(11));
        assert!(a.spend(10));
        // Asking past it is noted once per allowance.
        assert!(a.overdraw(), "the first overdraw");
        assert!(!a.overdraw(), "and no other");
        // Absurd sizes saturate instead of wrapping.
        a.grant(read_grant(u64::MAX, 8));
        a.grant(1);
        assert_eq!(a.left(), u64::MAX);
    }

    #[test]
    fn a_flooding_peer_is_served_its_budget_then_dropped_then_cut_off() {
        let mut b: PeerBudgets<u32> = PeerBudgets::new((10, 5.0), (20, 1.0), 100);
        let said: Vec<Admit> = (0..31).map(|_| b.admit(&1, 1_000)).collect();
        let count = |a: Admit| said.iter().filter(|&&x| x == a).count();
        assert_eq!(count(Admit::Serve), 10);
        assert_eq!(count(Admit::Drop), 20);
        assert_eq!(said[30], Admit::CutOff, "{said:?}");
        // Cut off once, then it starts afresh (the caller blocks it meanwhile).
        assert_eq!(b.admit(&1, 1_000), Admit::Serve);
        // Another peer is not touched by the first one's flood.
        assert!((0..10).all(|_| b.admit(&2, 1_000) == Admit::Serve));
    }

    #[test]
    fn an_honest_peer_at_its_rate_is_never_cut_off() {
        let mut b: PeerBudgets<u32> = PeerBudgets::new((10, 5.0), (20, 1.0), 100);
        // Five a second for an hour, with a burst of 25 every minute.
        for sec in 0..3_600u64 {
            let n = if sec % 60 == 0 { 25 } else { 5 };
            for _ in 0..n {
                assert_ne!(b.admit(&7, sec * 1_000), Admit::CutOff, "second {sec}");
            }
        }
    }

    #[test]
    fn fresh_peer_ids_cost_a_bounded_map() {
        let mut b: PeerBudgets<u32> = PeerBudgets::new((1, 1.0), (1, 1.0), 8);
        for peer in 0..1_000u32 {
            assert_eq!(b.admit(&peer, u64::from(peer)), Admit::Serve);
        }
        assert_eq!(b.len(), 8);
    }

    #[test]
    fn a_burst_then_the_steady_rate_and_no_credit_for_a_step_back() {
        let mut b = TokenBucket::new(5, 2.0);
        let taken = (0..100).filter(|_| b.take(1_000)).count();
        assert_eq!(taken, 5, "the burst");
        // One second later: two more.
        let taken = (0..100).filter(|_| b.take(2_000)).count();
        assert_eq!(taken, 2);
        // A clock stepping back gives nothing.
        assert!(!b.take(0));
        // A minute of flooding at 1,000 a second gets the rate, not the flood.
        let taken = (0..60_000u64).filter(|i| b.take(2_000 + i)).count();
        assert!((119..=121).contains(&taken), "{taken}");
        // A long quiet refills to the burst only.
        let taken = (0..100).filter(|_| b.take(10_000_000)).count();
        assert_eq!(taken, 5);
    }
}
