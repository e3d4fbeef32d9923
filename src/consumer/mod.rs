//! The consumer half of a pool member: ask the pool who will stay available
//! for a job's window ([`survey`]), rank the answers ([`rank`]), send the job
//! to the best host, follow it, fetch its outputs and resubmit elsewhere when
//! the host kills the job, disappears or revokes it ([`job`]).
//!
//! This module talks to peers only through [`crate::net::NetHandle`] (or, in
//! tests, any [`job::JobPool`]); it does not know sockets or the Swarm. Job
//! events that hosts send back arrive at the node loop, which hands them to
//! the [`Inbox`] where the waiting job picks them up.

pub mod job;
pub mod rank;
pub mod survey;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use libp2p::PeerId;
use tokio::sync::mpsc;

use crate::net::protocol::JobEventKind;

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

type Key = (PeerId, String);

/// Where job events from hosts wait for the consumer task that submitted the
/// job. Shared by the node loop (which delivers) and the submit tasks (which
/// register); an event from a peer for a job it was not given is refused.
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    waiting: Arc<Mutex<HashMap<Key, mpsc::UnboundedSender<HostJobEvent>>>>,
}

/// A registration: events for one (host, job id) arrive on `events` until
/// this is dropped.
#[derive(Debug)]
pub struct Registration {
    inbox: Inbox,
    key: Key,
    /// The events, in arrival order.
    pub events: mpsc::UnboundedReceiver<HostJobEvent>,
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
    pub fn register(&self, host: PeerId, job_id: &str) -> Registration {
        let (tx, events) = mpsc::unbounded_channel();
        let key = (host, job_id.to_string());
        if let Ok(mut map) = self.waiting.lock() {
            map.insert(key.clone(), tx);
        }
        Registration {
            inbox: self.clone(),
            key,
            events,
        }
    }

    /// Hands an event to the job waiting for it. Returns false when nobody
    /// waits for this job from this peer (the host then gets `NotFound`).
    pub fn deliver(&self, from: PeerId, job_id: &str, event: HostJobEvent) -> bool {
        let Ok(map) = self.waiting.lock() else {
            return false;
        };
        match map.get(&(from, job_id.to_string())) {
            Some(tx) => tx.send(event).is_ok(),
            None => false,
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
        let mut reg = inbox.register(host, "j1");
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
}
