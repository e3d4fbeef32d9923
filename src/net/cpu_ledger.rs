//! What each peer's work costs the node's CPU, and whether it may send
//! more (issue 30, scope 3): the accounts of
//! [`crate::model::cpu_budget::PeerCpu`], one per peer for every kind of
//! work it sends at its will, shared between the event loop, which admits
//! each inbound request ([`REQUEST_COST`]) and each summary or announcement
//! ([`SUMMARY_COST`]) and charges what the network spends on one, the data
//! server, which does the same for each data stream ([`STREAM_COST`]), and
//! the node's handlers, which charge what their answer cost on the thread
//! that computed it
//! ([`NetHandle::charge_cpu`](crate::net::NetHandle::charge_cpu), measured
//! with [`crate::cpu_time::thread_cpu`]). So a peer that uses every path
//! at once, each within its own count, is bounded by one account.
//!
//! It must not know what a request asks nor how it is answered.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use libp2p::PeerId;

use crate::model::budget::Admit;
use crate::model::cpu_budget::{CpuLimits, PeerCpu};

/// What the node spends on an inbound request before and after its
/// handler, whatever it asks: its stream opened and negotiated, its frame
/// read and decoded, the budgets' look, the hand-over to the node and
/// back, the answer encoded and written. Measured (docs/trust.md, "A peer's
/// CPU"): the node's CPU over a flood of job queries for an unknown job
/// (a handler of a map lookup) over the requests answered.
pub(crate) const REQUEST_COST: Duration = Duration::from_micros(600);

/// What the node spends on a data stream a peer opens, whatever it asks:
/// the stream opened and negotiated, its request read and decoded, the
/// catalog's look and a refusal or the header written. The bytes of an
/// offered file are not charged: the consumer offered them and asked the
/// host to read them, and the read allowance bounds them
/// (`data::catalog`). Measured (docs/trust.md, "Every kind, one account"):
/// the node's CPU over 15 data streams a second for a file nobody offered,
/// 0.65 ms a stream, 0.93 times a job query's 0.70 ms in the same run.
pub(crate) const STREAM_COST: Duration = Duration::from_micros(600);

/// What the node spends on a summary (or announcement) a member publishes,
/// past gossipsub: decoded, checked and recorded in the member table, and
/// the node told. Measured as [`STREAM_COST`] was, 3 summaries a second:
/// 0.67 ms a summary, 0.95 times a job query's.
pub(crate) const SUMMARY_COST: Duration = Duration::from_micros(600);

/// The share of a core, in percent, a peer may cost by default: a flood
/// within every other budget costs the node a twentieth of a core.
pub const PEER_CPU_PERCENT: u32 = 5;

/// A peer's burst, in seconds of CPU: a consumer placing a batch asks each
/// host a survey and later windows for its tasks at once.
const BURST: Duration = Duration::from_secs(2);

/// Drops past the account forgiven before the peer is cut off: a burst, and
/// one a second (as the request budget's, `event_loop::requests`).
const DROPS_FORGIVEN: u32 = 64;

/// Peers with an account at once (the one heard from longest ago makes
/// room), as for the request budget.
const PEERS_MAX: usize = 4_096;

/// The accounts, shared; `None` when the node gives peers no CPU budget
/// (`NetConfig::peer_cpu_percent` 0).
#[derive(Clone, Default)]
pub(crate) struct CpuLedger {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    origin: Instant,
    accounts: Mutex<PeerCpu<PeerId>>,
}

impl CpuLedger {
    /// Each peer may cost `percent` of a core after a burst of [`BURST`];
    /// 0: no budget (every request is admitted, nothing is counted).
    pub(crate) fn new(percent: u32) -> CpuLedger {
        if percent == 0 {
            return CpuLedger::default();
        }
        let per_sec_us = u64::from(percent.min(100)) * 10_000;
        let limits = CpuLimits {
            burst_us: BURST.as_micros() as u64,
            per_sec_us,
            debt_max_us: BURST.as_micros() as u64,
        };
        CpuLedger {
            inner: Some(Arc::new(Inner {
                origin: Instant::now(),
                accounts: Mutex::new(PeerCpu::new(limits, (DROPS_FORGIVEN, 1.0), PEERS_MAX)),
            })),
        }
    }

    /// Charges `cost`, spent on `peer`'s behalf now.
    pub(crate) fn charge(&self, peer: &PeerId, cost: Duration) {
        if let Some(inner) = &self.inner {
            let cost_us = u64::try_from(cost.as_micros()).unwrap_or(u64::MAX);
            let now_ms = inner.now_ms();
            inner.lock().charge(peer, now_ms, cost_us);
        }
    }

    /// Admits one item of `peer`'s work (a request, a data stream, a
    /// summary) and, when it may be served, charges `cost`, what the
    /// network spends on one: the one gate every inbound kind passes.
    pub(crate) fn admit_charged(&self, peer: &PeerId, cost: Duration) -> Admit {
        let admitted = self.admit(peer);
        if admitted == Admit::Serve {
            self.charge(peer, cost);
        }
        admitted
    }

    /// Whether `peer`'s next request may be served: while its account is
    /// in credit; past it dropped, and past the tolerance cut off.
    pub(crate) fn admit(&self, peer: &PeerId) -> Admit {
        match &self.inner {
            Some(inner) => {
                let now_ms = inner.now_ms();
                inner.lock().admit(peer, now_ms)
            }
            None => Admit::Serve,
        }
    }
}

impl Inner {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PeerCpu<PeerId>> {
        self.accounts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_past_its_account_is_dropped_then_cut_off_and_others_are_served() {
        let ledger = CpuLedger::new(5);
        let (rogue, other) = (PeerId::random(), PeerId::random());
        assert_eq!(ledger.admit(&rogue), Admit::Serve);
        ledger.charge(&rogue, BURST + Duration::from_millis(100));
        assert_eq!(ledger.admit(&rogue), Admit::Drop);
        assert_eq!(ledger.admit(&other), Admit::Serve);
        let said: Vec<Admit> = (0..DROPS_FORGIVEN).map(|_| ledger.admit(&rogue)).collect();
        assert_eq!(said.last(), Some(&Admit::CutOff), "{said:?}");
    }

    /// A consumer placing a batch of hundreds of tasks at one host: a
    /// burst of its request budget's 512 cheap requests (submissions,
    /// queries, fetches of small outputs) and 250 forecasts for windows
    /// nobody asked, each charged as much as a week-long window's costs
    /// (some 5 ms), all at once: within the burst, every one served.
    #[test]
    fn a_consumer_placing_a_batch_is_served_at_once() {
        let ledger = CpuLedger::new(PEER_CPU_PERCENT);
        let consumer = PeerId::random();
        for _ in 0..512 {
            assert_eq!(ledger.admit(&consumer), Admit::Serve);
            ledger.charge(&consumer, REQUEST_COST);
        }
        for _ in 0..250 {
            assert_eq!(ledger.admit(&consumer), Admit::Serve);
            ledger.charge(&consumer, REQUEST_COST + Duration::from_millis(5));
        }
        // At the request budget's steady rate (64 a second) of cheap
        // requests, a peer costs less than its share: the request budget,
        // not this one, is what bounds it.
        assert!(64 * REQUEST_COST.as_micros() < u128::from(PEER_CPU_PERCENT) * 10_000);
    }

    #[test]
    fn with_no_budget_nothing_is_counted() {
        let ledger = CpuLedger::new(0);
        let peer = PeerId::random();
        ledger.charge(&peer, Duration::from_secs(3_600));
        assert_eq!(ledger.admit(&peer), Admit::Serve);
    }
}
