//! The CPU a peer may cost the node by what it asks at its will (issue 30,
//! scope 3): an account per peer, in microseconds of CPU, that refills at a
//! steady share of a core up to a burst. What a request cost is known only
//! once it was served, so it is charged then, and the account may go into
//! debt; a request is served only while the peer's account is in credit.
//! Past that, requests are dropped against a tolerance (as for the request
//! budget, `budget::PeerBudgets`), and a peer that empties the tolerance is
//! cut off ([`crate::budget::Admit::CutOff`]: a flood of CPU in its record,
//! `budget::Overrun::Cpu`).
//!
//! The count of requests alone does not bound the CPU: a reliability query
//! for a window nobody asked before is a forecast, tens of times what a
//! query for a known job costs, and a peer within its request budget (64 a
//! second) asking only fresh windows cost the node a quarter of a core.
//! Pure: the time is a parameter (milliseconds from any fixed origin) and
//! the costs are what the caller measured.

use crate::budget::{Admit, TokenBucket};
use std::collections::HashMap;

/// What a peer's CPU account allows: a burst, a steady share of a core,
/// and how deep a debt may go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuLimits {
    /// CPU a peer may cost in a burst, microseconds (a full account).
    pub burst_us: u64,
    /// CPU a peer may cost per second after it, microseconds (the share of
    /// a core: 50,000 is 5 %).
    pub per_sec_us: u64,
    /// Deepest debt, microseconds: a request that cost more than the peer
    /// had leaves it refused for at most this over `per_sec_us` seconds.
    pub debt_max_us: u64,
}

/// One peer's account: `balance_us` may go below zero down to the debt
/// limit; it refills at `per_sec_us` up to `burst_us`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuAccount {
    limits: CpuLimits,
    balance_us: f64,
    last_ms: Option<u64>,
}

impl CpuAccount {
    /// A full account.
    pub fn new(limits: CpuLimits) -> CpuAccount {
        CpuAccount {
            limits,
            balance_us: limits.burst_us as f64,
            last_ms: None,
        }
    }

    /// Refills for the time since the last look. A time earlier than the
    /// last one adds nothing (a clock that steps back gives no credit).
    fn refill(&mut self, now_ms: u64) {
        if let Some(last) = self.last_ms {
            let elapsed = now_ms.saturating_sub(last) as f64 / 1000.0;
            self.balance_us = (self.balance_us + elapsed * self.limits.per_sec_us as f64)
                .min(self.limits.burst_us as f64);
        }
        self.last_ms = Some(self.last_ms.map_or(now_ms, |l| l.max(now_ms)));
    }

    /// Charges `cost_us` spent at `now_ms` on the peer's behalf.
    pub fn charge(&mut self, now_ms: u64, cost_us: u64) {
        self.refill(now_ms);
        self.balance_us = (self.balance_us - cost_us as f64).max(-(self.limits.debt_max_us as f64));
    }

    /// True while the account is in credit at `now_ms`: the next request
    /// may be served.
    pub fn in_credit(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        self.balance_us > 0.0
    }

    /// The balance as of the last look, microseconds (negative: a debt).
    pub fn balance_us(&self) -> f64 {
        self.balance_us
    }
}

/// CPU accounts per peer, with a tolerance for requests dropped past them
/// (a [`TokenBucket`] of drops forgiven, as for the request budget): a peer
/// whose account is in debt has its requests dropped, and one that goes on
/// past the tolerance is cut off. At most `max_peers` entries are kept: a
/// new peer past that replaces the one heard from longest ago, so fresh
/// peer ids cost a bounded map. An entry is made only by a charge (a peer
/// that cost nothing has nothing to account for).
#[derive(Debug, Clone)]
pub struct PeerCpu<K> {
    limits: CpuLimits,
    drops: (u32, f64),
    max_peers: usize,
    peers: HashMap<K, PeerAccount>,
}

#[derive(Debug, Clone, Copy)]
struct PeerAccount {
    cpu: CpuAccount,
    drops: TokenBucket,
    last_ms: u64,
}

impl<K: std::hash::Hash + Eq + Clone> PeerCpu<K> {
    /// `drops` is a (burst, per second) pair of requests forgiven past the
    /// account before the peer is cut off.
    pub fn new(limits: CpuLimits, drops: (u32, f64), max_peers: usize) -> PeerCpu<K> {
        PeerCpu {
            limits,
            drops,
            max_peers: max_peers.max(1),
            peers: HashMap::new(),
        }
    }

    /// Charges `cost_us` spent at `now_ms` on `peer`'s behalf.
    pub fn charge(&mut self, peer: &K, now_ms: u64, cost_us: u64) {
        if !self.peers.contains_key(peer) && self.peers.len() >= self.max_peers {
            let oldest = self
                .peers
                .iter()
                .min_by_key(|(_, a)| a.last_ms)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.peers.remove(&oldest);
            }
        }
        let (limits, drops) = (self.limits, self.drops);
        let account = self
            .peers
            .entry(peer.clone())
            .or_insert_with(|| PeerAccount {
                cpu: CpuAccount::new(limits),
                drops: TokenBucket::new(drops.0, drops.1),
                last_ms: now_ms,
            });
        account.last_ms = account.last_ms.max(now_ms);
        account.cpu.charge(now_ms, cost_us);
    }

    /// Says what to do with a request from `peer` at `now_ms`: serve it
    /// while its account is in credit; past that drop it, and cut the peer
    /// off once it has gone past the tolerance (said once; the entry starts
    /// afresh).
    pub fn admit(&mut self, peer: &K, now_ms: u64) -> Admit {
        let Some(account) = self.peers.get_mut(peer) else {
            return Admit::Serve;
        };
        account.last_ms = account.last_ms.max(now_ms);
        if account.cpu.in_credit(now_ms) {
            return Admit::Serve;
        }
        if account.drops.take(now_ms) {
            return Admit::Drop;
        }
        self.peers.remove(peer);
        Admit::CutOff
    }

    /// `peer`'s balance, microseconds, if it has an account.
    pub fn balance_us(&self, peer: &K) -> Option<f64> {
        self.peers.get(peer).map(|a| a.cpu.balance_us())
    }

    /// Peers with an account.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// True when no peer has an account.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: CpuLimits = CpuLimits {
        burst_us: 1_000_000,
        per_sec_us: 50_000,
        debt_max_us: 1_000_000,
    };

    #[test]
    fn an_account_is_spent_by_what_was_charged_and_refills_at_its_share() {
        let mut a = CpuAccount::new(LIMITS);
        assert!(a.in_credit(0), "a new account is full");
        a.charge(0, 999_999);
        assert!(a.in_credit(0), "1 us left");
        a.charge(0, 1);
        assert!(!a.in_credit(0), "spent to 0");
        // 50 ms a second: 20 ms later, 1 ms of credit.
        assert!(a.in_credit(20));
        assert!(
            (a.balance_us() - 1_000.0).abs() < 1e-6,
            "{}",
            a.balance_us()
        );
        // A long quiet refills to the burst only.
        assert!(a.in_credit(3_600_000));
        assert_eq!(a.balance_us(), 1_000_000.0);
        // A clock stepping back gives nothing.
        a.charge(3_600_000, 1_000_000);
        assert!(!a.in_credit(0));
        assert!(!a.in_credit(3_600_000));
    }

    #[test]
    fn a_debt_is_bounded_so_one_costly_request_is_not_refused_for_ever() {
        let mut a = CpuAccount::new(LIMITS);
        a.charge(0, u64::MAX);
        assert_eq!(a.balance_us(), -1_000_000.0, "at most the debt limit");
        // Debt 1 s at 50 ms/s: back in credit after 20 s.
        assert!(!a.in_credit(19_999));
        assert!(a.in_credit(20_001));
    }

    /// The flood the budget is for: a peer asking 50 fresh forecasts a
    /// second (each ~5 ms) costs 250 ms of CPU a second, within any request
    /// budget. Its account lets through the burst and then its share.
    #[test]
    fn a_peer_asking_costly_requests_gets_its_share_then_is_dropped_then_cut_off() {
        let mut p: PeerCpu<u32> = PeerCpu::new(LIMITS, (64, 1.0), 100);
        let (mut served, mut dropped, mut cut_at) = (0u64, 0u64, None);
        for i in 0..50 * 60u64 {
            let now = i * 20;
            match p.admit(&1, now) {
                Admit::Serve => {
                    served += 1;
                    p.charge(&1, now, 5_000);
                }
                Admit::Drop => dropped += 1,
                Admit::CutOff => {
                    cut_at = Some(now);
                    break;
                }
            }
        }
        // The burst (1 s of CPU: 200 answers), then 50 ms a second (10 a
        // second) while 64 drops are forgiven, refilled at one a second.
        let cut_at = cut_at.expect("cut off within the minute");
        assert!((4_000..8_000).contains(&cut_at), "cut off at {cut_at} ms");
        let spent_us = served * 5_000;
        let allowed_us = LIMITS.burst_us + LIMITS.per_sec_us * cut_at / 1_000;
        assert!(spent_us <= allowed_us + 5_000, "{spent_us} > {allowed_us}");
        assert!(dropped >= 64, "{dropped}");
        // Another peer is not touched by the first one's account.
        assert_eq!(p.admit(&2, cut_at), Admit::Serve);
        // Cut off once; the entry starts afresh (the caller blocks it).
        assert_eq!(p.admit(&1, cut_at), Admit::Serve);
        assert_eq!(p.balance_us(&1), None);
    }

    /// An honest consumer placing a batch: it asks a few hundred forecasts
    /// at once (a survey of each host, later windows for each of hundreds
    /// of tasks), then cheap requests (job queries and fetches) at its
    /// request budget's rate for an hour. Never cut off, never dropped.
    #[test]
    fn an_honest_consumer_placing_a_batch_is_never_refused() {
        let mut p: PeerCpu<u32> = PeerCpu::new(LIMITS, (64, 1.0), 100);
        for _ in 0..150 {
            assert_eq!(p.admit(&7, 0), Admit::Serve);
            p.charge(&7, 0, 5_000);
        }
        for ms in (0..3_600_000u64).step_by(100) {
            assert_eq!(p.admit(&7, ms), Admit::Serve, "at {ms} ms");
            // Ten cheap requests a second at 400 us each: 4 ms a second.
            p.charge(&7, ms, 400);
        }
    }

    #[test]
    fn a_peer_never_charged_is_served_and_costs_no_entry() {
        let mut p: PeerCpu<u32> = PeerCpu::new(LIMITS, (1, 1.0), 100);
        assert!((0..1_000).all(|i| p.admit(&i, 0) == Admit::Serve));
        assert!(p.is_empty());
    }

    #[test]
    fn fresh_peer_ids_cost_a_bounded_map() {
        let mut p: PeerCpu<u32> = PeerCpu::new(LIMITS, (1, 1.0), 8);
        for peer in 0..1_000u32 {
            p.charge(&peer, u64::from(peer), 10);
        }
        assert_eq!(p.len(), 8);
        assert!(p.balance_us(&999).is_some(), "the newest is kept");
        assert!(p.balance_us(&0).is_none(), "the oldest made room");
    }
}
