//! Where job events from hosts wait for the attempt that submitted the job:
//! the consumer's side of `JobRequest::Event`. An event from a peer for a
//! job it was not given is refused; each attempt's events have a budget
//! (an honest host sends a handful per job, a checkpoint at most every
//! 10 s), and what a host sends past it is dropped and counted, so that a
//! flooding host costs the consumer a bounded share of a core and is
//! marked in its record. Events that end a job
//! ([`JobEventKind::ends_the_job`]) always pass: the budget must never cost
//! an honest result. This module must not know the queue or the
//! network; it is a shared map and a clock reading.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use libp2p::PeerId;
use tokio::sync::mpsc;

use crate::model::budget::TokenBucket;
use crate::model::ids::JobId;
use crate::net::protocol::JobEventKind;

/// Job events one attempt may send in a burst, and per second after it.
pub const EVENT_BURST: u32 = 32;
pub const EVENTS_PER_SEC: f64 = 2.0;

/// One job event a host reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostJobEvent {
    /// Per-job sequence number from the host.
    pub seq: u32,
    /// Unix seconds on the host.
    pub time_unix: i64,
    /// What happened.
    pub kind: JobEventKind,
}

/// What became of an event a host sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The attempt that waits for it has it.
    Delivered,
    /// Nobody waits for this job from this peer (the host gets `NotFound`).
    NotWaited,
    /// Past the attempt's budget: dropped, and counted for the attempt.
    OverBudget,
}

type Key = (PeerId, JobId);

struct Waiting {
    tx: mpsc::UnboundedSender<HostJobEvent>,
    budget: TokenBucket,
    dropped: Arc<AtomicU64>,
}

/// The shared map of attempts waiting for events. Shared by the pool host
/// (which delivers) and the attempts (which register).
#[derive(Clone)]
pub struct Inbox {
    waiting: Arc<Mutex<HashMap<Key, Waiting>>>,
    /// The origin of the budgets' clock (tokio's, so paused time works).
    origin: tokio::time::Instant,
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox {
            waiting: Arc::default(),
            origin: tokio::time::Instant::now(),
        }
    }
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = self.waiting.lock().map(|m| m.len()).unwrap_or(0);
        f.debug_struct("Inbox").field("waiting", &waiting).finish()
    }
}

/// A registration: events for one (host, job id) arrive on `events` until
/// this is dropped.
#[derive(Debug)]
pub struct Registration {
    inbox: Inbox,
    key: Key,
    /// The events, in arrival order.
    pub events: mpsc::UnboundedReceiver<HostJobEvent>,
    dropped: Arc<AtomicU64>,
}

impl Registration {
    /// Events the host sent past this attempt's budget so far (dropped).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut map) = self.inbox.waiting.lock() {
            map.remove(&self.key);
        }
    }
}

impl Inbox {
    /// Starts waiting for events of `job_id` from `host`.
    pub fn register(&self, host: PeerId, job_id: &JobId) -> Registration {
        let (tx, events) = mpsc::unbounded_channel();
        let key = (host, job_id.clone());
        let dropped = Arc::new(AtomicU64::new(0));
        if let Ok(mut map) = self.waiting.lock() {
            map.insert(
                key.clone(),
                Waiting {
                    tx,
                    budget: TokenBucket::new(EVENT_BURST, EVENTS_PER_SEC),
                    dropped: dropped.clone(),
                },
            );
        }
        Registration {
            inbox: self.clone(),
            key,
            events,
            dropped,
        }
    }

    /// Hands an event to the job waiting for it. Returns false when nobody
    /// waits for this job from this peer or the event was over its budget.
    pub fn deliver(&self, from: PeerId, job_id: &str, event: HostJobEvent) -> bool {
        self.offer(from, job_id, event) == Delivery::Delivered
    }

    /// Hands an event to the job waiting for it, within the attempt's
    /// budget, and says what became of it. Never blocks: a map lookup, a
    /// bucket and a channel send.
    pub fn offer(&self, from: PeerId, job_id: &str, event: HostJobEvent) -> Delivery {
        // An id we would never have made cannot be waited for.
        let Ok(job_id) = JobId::new(job_id) else {
            return Delivery::NotWaited;
        };
        let now_ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        let Ok(mut map) = self.waiting.lock() else {
            return Delivery::NotWaited;
        };
        let Some(waiting) = map.get_mut(&(from, job_id)) else {
            return Delivery::NotWaited;
        };
        // The end of a job is never held to the budget.
        if !event.kind.ends_the_job() && !waiting.budget.take(now_ms) {
            waiting.dropped.fetch_add(1, Ordering::Relaxed);
            return Delivery::OverBudget;
        }
        if waiting.tx.send(event).is_ok() {
            Delivery::Delivered
        } else {
            Delivery::NotWaited
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_reach_only_the_registered_job_from_its_host() {
        let inbox = Inbox::default();
        let host = PeerId::random();
        let stranger = PeerId::random();
        let mut reg = inbox.register(host, &JobId::new("j1").unwrap());
        let ev = HostJobEvent {
            seq: 0,
            time_unix: 1,
            kind: JobEventKind::Started,
        };
        assert!(inbox.deliver(host, "j1", ev.clone()));
        assert!(!inbox.deliver(stranger, "j1", ev.clone()));
        assert!(!inbox.deliver(host, "j2", ev.clone()));
        assert_eq!(reg.events.try_recv().unwrap(), ev);
        assert!(reg.events.try_recv().is_err());
        drop(reg);
        assert!(!inbox.deliver(host, "j1", ev));
    }

    /// Issue 30, finding 3: a host that sends events without end gets its
    /// burst through, the rest dropped and counted, and its job's end
    /// still passes.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_events_is_cut_to_the_budget_and_the_end_still_passes() {
        let inbox = Inbox::default();
        let host = PeerId::random();
        let mut reg = inbox.register(host, &JobId::new("j1").unwrap());
        let ev = |seq, kind| HostJobEvent {
            seq,
            time_unix: 1,
            kind,
        };
        let mut delivered = 0u32;
        for seq in 0..10_000 {
            match inbox.offer(host, "j1", ev(seq, JobEventKind::Resumed)) {
                Delivery::Delivered => delivered += 1,
                Delivery::OverBudget => {}
                Delivery::NotWaited => panic!("registered"),
            }
        }
        assert_eq!(delivered, EVENT_BURST);
        assert_eq!(reg.dropped(), 10_000 - u64::from(EVENT_BURST));
        // A second later, the rate's worth more.
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let more = (0..100)
            .filter(|_| inbox.deliver(host, "j1", ev(0, JobEventKind::Resumed)))
            .count();
        assert_eq!(more, EVENTS_PER_SEC as usize);
        let finished = JobEventKind::Finished {
            exit_status: 0,
            usage: None,
        };
        assert_eq!(
            inbox.offer(host, "j1", ev(1, finished.clone())),
            Delivery::Delivered
        );
        let received: Vec<_> = std::iter::from_fn(|| reg.events.try_recv().ok()).collect();
        assert_eq!(received.len(), EVENT_BURST as usize + 2 + 1);
        assert_eq!(received.last().unwrap().kind, finished);
    }
}
