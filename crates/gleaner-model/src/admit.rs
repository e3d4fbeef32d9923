//! The admission rule: may a guest start on this machine now? One pure
//! function, [`admit`], judged by the host loop when it starts a guest and
//! by the pool host before it accepts a peer's job (so what would be refused
//! after a long fetch of its inputs is refused at once), and [`slot_free`],
//! the part of the same rule a host announces to its pool.
//!
//! It must not know who asks over which channel, nor where the facts come
//! from: the node gathers [`HostFacts`] from its store, supervisor and last
//! reading, and maps a [`Refusal`] into its own error and the wire's reasons.

use crate::ids::JobId;
use crate::owner::S5Cause;
use crate::state::State;

/// Who asks for a guest; a peer's job is held to more than the owner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestOrigin {
    /// The owner's `run-local`: the owner may load their own machine.
    Local,
    /// A peer's job, accepted by the pool host.
    Remote,
}

/// The machine now, as far as the rule needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostFacts {
    /// `[guest] enabled`: off, the node is consumer-only and hosts no peer's
    /// job (the owner's own still run).
    pub guests_enabled: bool,
    /// The owner paused the node.
    pub paused: bool,
    /// The schedule or the battery withholds the machine.
    pub withheld: Option<S5Cause>,
    /// A `pause --after-job` waits for the running guest: none other starts.
    pub finishing: bool,
    /// The guest running here (started, its end not yet seen).
    pub running: Option<JobId>,
    /// The monitor's state at the last reading, `None` before the first.
    pub state: Option<State>,
    /// Memory free for a guest at the last reading, MiB.
    pub free_mib: Option<u64>,
}

/// What a guest asks of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestAsk {
    pub origin: GuestOrigin,
    /// The job's declared working set, MiB.
    pub mem_mib: u64,
    /// `[guest] max_mem_mib`: the most this node lends one guest.
    pub max_mem_mib: u64,
}

/// Why a guest may not start now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this node hosts no guests (consumer-only)")]
    NoGuests,
    #[error("the owner has paused this node; `gleaner resume` first")]
    Paused,
    #[error("this node withholds itself now ({0}) and takes no guest")]
    Withheld(S5Cause),
    #[error("the node pauses once its running guest has finished (`pause --after-job`)")]
    Finishing,
    #[error(
        "the job declares {asked} MiB; this node accepts at most {limit} MiB ([guest] max_mem_mib)"
    )]
    TooMuchMemory { asked: u64, limit: u64 },
    #[error("a guest is already running here (job {job_id})")]
    Busy { job_id: JobId },
    /// S3, S4 or S5 for a peer's job; S4 also when the memory free at the
    /// last reading cannot hold the job.
    #[error("the host is in {0} now and takes no guest")]
    HostState(State),
}

/// Whether a guest asking `ask` may start on a machine in `facts`.
///
/// The order is the one answer a combination of reasons gets: the owner's
/// will (consumer-only, paused, withheld, finishing) first, then the job's
/// size against the node's limit, then the one slot, then — for a peer's
/// job only — the host's state and free memory. The owner may run a job on
/// a loaded machine; a peer's job would only be suspended or killed there.
pub fn admit(facts: &HostFacts, ask: &GuestAsk) -> Result<(), Refusal> {
    owner_allows(facts, ask.origin)?;
    if ask.mem_mib > ask.max_mem_mib {
        return Err(Refusal::TooMuchMemory {
            asked: ask.mem_mib,
            limit: ask.max_mem_mib,
        });
    }
    if let Some(job_id) = &facts.running {
        return Err(Refusal::Busy {
            job_id: job_id.clone(),
        });
    }
    if ask.origin == GuestOrigin::Remote {
        if let Some(state @ (State::S3 | State::S4 | State::S5)) = facts.state {
            return Err(Refusal::HostState(state));
        }
        // The S4 rule (`Thresholds::lacks_memory`) for this job's working set.
        if facts.free_mib.is_some_and(|free| free < ask.mem_mib) {
            return Err(Refusal::HostState(State::S4));
        }
    }
    Ok(())
}

/// Whether the guest slot is open to a peer: [`admit`] before any job or
/// load is known (what a host announces; a job may still be refused for its
/// size or the host's state).
pub fn slot_free(facts: &HostFacts) -> bool {
    owner_allows(facts, GuestOrigin::Remote).is_ok() && facts.running.is_none()
}

/// The owner's side of the rule, whatever the job.
fn owner_allows(facts: &HostFacts, origin: GuestOrigin) -> Result<(), Refusal> {
    if origin == GuestOrigin::Remote && !facts.guests_enabled {
        return Err(Refusal::NoGuests);
    }
    if facts.paused {
        return Err(Refusal::Paused);
    }
    if let Some(cause) = facts.withheld {
        return Err(Refusal::Withheld(cause));
    }
    if facts.finishing {
        return Err(Refusal::Finishing);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> HostFacts {
        HostFacts {
            guests_enabled: true,
            state: Some(State::S1),
            free_mib: Some(4096),
            ..HostFacts::default()
        }
    }

    fn ask(origin: GuestOrigin, mem_mib: u64) -> GuestAsk {
        GuestAsk {
            origin,
            mem_mib,
            max_mem_mib: 1024,
        }
    }

    fn job(id: &str) -> JobId {
        JobId::new(id).unwrap()
    }

    #[test]
    fn an_idle_host_admits_both_origins_and_offers_its_slot() {
        for origin in [GuestOrigin::Local, GuestOrigin::Remote] {
            assert_eq!(admit(&idle(), &ask(origin, 512)), Ok(()), "{origin:?}");
        }
        assert!(slot_free(&idle()));
    }

    #[test]
    fn a_consumer_only_node_refuses_peers_but_not_its_owner() {
        let facts = HostFacts {
            guests_enabled: false,
            ..idle()
        };
        assert_eq!(
            admit(&facts, &ask(GuestOrigin::Remote, 1)),
            Err(Refusal::NoGuests)
        );
        assert_eq!(admit(&facts, &ask(GuestOrigin::Local, 1)), Ok(()));
        assert!(!slot_free(&facts));
    }

    #[test]
    fn the_owners_will_comes_first_in_its_own_order() {
        let all = HostFacts {
            paused: true,
            withheld: Some(S5Cause::Battery),
            finishing: true,
            running: Some(job("local-1")),
            state: Some(State::S3),
            ..idle()
        };
        let local = ask(GuestOrigin::Local, 4096);
        assert_eq!(admit(&all, &local), Err(Refusal::Paused));
        let withheld = HostFacts {
            paused: false,
            ..all.clone()
        };
        assert_eq!(
            admit(&withheld, &local),
            Err(Refusal::Withheld(S5Cause::Battery))
        );
        let finishing = HostFacts {
            withheld: None,
            ..withheld
        };
        assert_eq!(admit(&finishing, &local), Err(Refusal::Finishing));
        for facts in [&all, &finishing] {
            assert!(!slot_free(facts));
        }
    }

    #[test]
    fn a_job_too_big_is_refused_before_the_slot_is_looked_at() {
        let busy = HostFacts {
            running: Some(job("local-1")),
            ..idle()
        };
        assert_eq!(
            admit(&busy, &ask(GuestOrigin::Local, 1025)),
            Err(Refusal::TooMuchMemory {
                asked: 1025,
                limit: 1024
            })
        );
        assert_eq!(
            admit(&busy, &ask(GuestOrigin::Local, 1024)),
            Err(Refusal::Busy {
                job_id: job("local-1")
            })
        );
        assert!(!slot_free(&busy));
    }

    #[test]
    fn a_peers_job_needs_a_light_host_with_room_the_owners_does_not() {
        for state in [State::S3, State::S4, State::S5] {
            let loaded = HostFacts {
                state: Some(state),
                ..idle()
            };
            assert_eq!(
                admit(&loaded, &ask(GuestOrigin::Remote, 1)),
                Err(Refusal::HostState(state))
            );
            assert_eq!(admit(&loaded, &ask(GuestOrigin::Local, 1)), Ok(()));
            assert!(slot_free(&loaded), "the slot ignores the load");
        }
        let heavy = HostFacts {
            state: Some(State::S2),
            ..idle()
        };
        assert_eq!(admit(&heavy, &ask(GuestOrigin::Remote, 1)), Ok(()));
        let tight = HostFacts {
            free_mib: Some(511),
            ..idle()
        };
        assert_eq!(
            admit(&tight, &ask(GuestOrigin::Remote, 512)),
            Err(Refusal::HostState(State::S4))
        );
        assert_eq!(
            admit(&tight, &ask(GuestOrigin::Remote, 511)),
            Ok(()),
            "exactly enough"
        );
        assert_eq!(admit(&tight, &ask(GuestOrigin::Local, 512)), Ok(()));
        let unread = HostFacts {
            state: None,
            free_mib: None,
            ..idle()
        };
        assert_eq!(
            admit(&unread, &ask(GuestOrigin::Remote, 512)),
            Ok(()),
            "before the first reading nothing is known against the job"
        );
    }
}
