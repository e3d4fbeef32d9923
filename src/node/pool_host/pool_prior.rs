//! Keeps the host's pool prior fresh (issue 29): every [`REFRESH`] it reads
//! the member table the network task holds, as it is (a host that stopped
//! listening in a large pool keeps the table it last heard, and reading it
//! does not make it listen), turns the members' summaries into the pool's
//! typical curve ([`PoolPrior::from_heard`], the rule) and hands it to the
//! host's reader, which answers with it while the host has no day of
//! record. Too few members with records: the built-in prior stands.
//!
//! A driver only: the rule is in `model::baselines::pool_prior`. It must
//! not know the Swarm or the wire format beyond the ladder's lengths.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::model::baselines::pool_prior::{HeardCurve, PoolPrior};
use crate::model::state::State;
use crate::net::protocol::LADDER_SECS;
use crate::net::{Member, NetHandle};
use crate::node::host_loop::HostReader;

/// How often the pool prior is recomputed (the first time shortly after
/// the start, so a new node's first minutes already use it).
pub const REFRESH: Duration = Duration::from_secs(120);
const FIRST: Duration = Duration::from_secs(15);

/// The pool prior from the members in the table at `now_unix` (ourselves
/// left out): each member's lowest memory level's ladder.
pub fn pool_prior_of(members: &[Member], me: libp2p::PeerId, now_unix: i64) -> Option<PoolPrior> {
    let lengths: Vec<f64> = LADDER_SECS.iter().map(|&s| f64::from(s)).collect();
    let heard = members.iter().filter(|m| m.peer != me).filter_map(|m| {
        let summary = m.summary.as_ref()?;
        let (_, curve) = summary.ladders.first()?;
        Some(HeardCurve {
            days_used: summary.days_used,
            usable: matches!(m.status.state, State::S1 | State::S2),
            computed_at_unix: summary.computed_at_unix,
            curve,
        })
    });
    PoolPrior::from_heard(heard, now_unix, &lengths)
}

/// Starts [`keep_fresh`] on the pool host's tracker.
pub fn spawn(parts: &super::PoolHostParts, shutdown: CancellationToken) {
    parts.tracker.spawn(keep_fresh(
        parts.net.clone(),
        parts.host.reader().clone(),
        parts.clock.clone(),
        shutdown,
    ));
}

/// Recomputes the pool prior every [`REFRESH`] until `shutdown` or the
/// network task ends.
pub async fn keep_fresh(
    net: NetHandle,
    reader: HostReader,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) {
    let mut wait = FIRST;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = REFRESH;
        let Ok(members) = net.known_members().await else {
            return;
        };
        let prior = pool_prior_of(&members, net.peer_id(), clock.unix_secs());
        if let Some(p) = &prior {
            tracing::debug!(members = p.members(), "pool prior from the members heard");
        }
        reader.set_pool_prior(prior);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sched::curve::TrCurve;
    use crate::net::summary::Summary;
    use crate::net::LocalStatus;
    use libp2p::PeerId;

    fn member(days_used: u32, state: State, tr_1h: f64, computed_at_unix: i64) -> Member {
        let ladder = TrCurve::new(
            LADDER_SECS
                .iter()
                .map(|&s| (f64::from(s), tr_1h.powf(f64::from(s) / 3600.0))),
        );
        Member {
            peer: PeerId::random(),
            addresses: Vec::new(),
            status: LocalStatus {
                logical_cpus: 4,
                memory_mib: 8192,
                benchmark_score: 1000,
                relative_power_milli: 500,
                state,
                slot_free: true,
            },
            version: "test".to_string(),
            last_seen: std::time::Instant::now(),
            summary: Some(Arc::new(Summary {
                computed_at_unix,
                speed: 0.5,
                availability: None,
                days_used,
                ladders: vec![(256, ladder)],
                spells: None,
                spell_lengths: None,
                images: None,
                basis: None,
            })),
        }
    }

    #[test]
    fn the_members_summaries_make_the_pool_prior_ourselves_and_priors_left_out() {
        let now = 1_760_000_000;
        let mut members: Vec<Member> = [0.97, 0.98, 0.99, 0.96, 0.95]
            .iter()
            .map(|&tr| member(14, State::S1, tr, now - 60))
            .collect();
        let prior = pool_prior_of(&members, PeerId::random(), now).unwrap();
        assert_eq!(prior.members(), 5);
        assert!((prior.tr(3600, None) - 0.97).abs() < 1e-9, "{prior:?}");
        // We are one of them: four others are too few.
        assert!(pool_prior_of(&members, members[0].peer, now).is_none());
        // Members answering with a prior, or failing now, are not heard.
        members.push(member(0, State::S1, 0.5, now - 60));
        members.push(member(30, State::S3, 0.5, now - 60));
        assert!(pool_prior_of(&members, members[0].peer, now).is_none());
        // A member without a summary (an old node) neither.
        let mut old = member(30, State::S1, 0.5, now - 60);
        old.summary = None;
        members.push(old);
        assert!(pool_prior_of(&members, members[0].peer, now).is_none());
        members.push(member(30, State::S2, 0.9, now - 60));
        let prior = pool_prior_of(&members, members[0].peer, now).unwrap();
        assert_eq!(prior.members(), 5);
    }

    /// Servers and desktops switched off at night in one pool: their claims
    /// disagree at every rung, so the node keeps the built-in prior (the
    /// median of such a pool cost a new member up to 0.14 of Brier score on
    /// its first day, docs/accuracy.md).
    #[test]
    fn a_pool_of_members_that_disagree_leaves_the_built_in_prior() {
        let now = 1_760_000_000;
        let members: Vec<Member> = [0.995, 0.99, 0.985, 0.7, 0.6, 0.5]
            .iter()
            .map(|&tr| member(14, State::S1, tr, now - 60))
            .collect();
        assert!(pool_prior_of(&members, PeerId::random(), now).is_none());
        // Those that agree still make one.
        let agree: Vec<Member> = [0.995, 0.99, 0.985, 0.99, 0.98]
            .iter()
            .map(|&tr| member(14, State::S1, tr, now - 60))
            .collect();
        let prior = pool_prior_of(&agree, PeerId::random(), now).unwrap();
        assert!((prior.tr(3600, None) - 0.99).abs() < 1e-9, "{prior:?}");
    }
}
