//! Connections on which the pool's topics have gone deaf, and which of them
//! a listening node closes and dials again.
//!
//! Why: rust-libp2p's gossipsub (0.50) disables its handler on a connection
//! for good once five substreams were attempted on it (`MAX_SUBSTREAM_ATTEMPTS`;
//! negotiation timeouts count, so an overloaded machine gets there), while
//! the connection stays open for Kademlia, the request protocols and ping.
//! The member at the other end is then connected and never heard: nothing it
//! publishes reaches us, and our subscription never reaches it, so it never
//! republishes for us. Seen in a 300-node pool on 2 cores (load ~180 while
//! the nodes started): one host connected to the consumer for ten minutes,
//! never in its table; closing that one TCP connection by hand put it there
//! within seconds (a new connection has a new handler, whose hello makes
//! the host republish). Other projects see the same warning in production
//! (sqd-network issue 119).
//!
//! The rule: while we have listened for [`DEAF_AFTER`], a peer that speaks
//! Gleaner's protocols, connected for as long, and not heard on the pool's
//! topics since we began listening is deaf. At most [`RECYCLES_PER_CHECK`]
//! are recycled per check, and a peer at most once per
//! [`RECYCLE_AGAIN_AFTER`]: a member that never publishes (an older or
//! foreign node) costs one reconnection per half hour, not a loop.
//!
//! Pure: no clock, no swarm; the driver (`event_loop::deaf`) measures the
//! durations and performs the closes and dials.

use std::time::Duration;

/// How long we must have listened, and a peer been connected, before its
/// silence means a deaf connection: a republication waits at most the
/// publication gap (`summary::min_gap`, 30 s at the default heartbeat).
pub const DEAF_AFTER: Duration = Duration::from_secs(90);
/// A recycled peer is not recycled again before this.
pub const RECYCLE_AGAIN_AFTER: Duration = Duration::from_secs(30 * 60);
/// Most connections recycled by one check.
pub const RECYCLES_PER_CHECK: usize = 8;
/// How often the driver checks.
pub const CHECK_EVERY: Duration = Duration::from_secs(30);

/// One connected peer as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link<P> {
    pub peer: P,
    /// Since its oldest open connection.
    pub connected_for: Duration,
    /// It said (identify) it serves Gleaner's job protocol.
    pub speaks_gleaner: bool,
    /// Heard on the pool's topics since we began listening.
    pub heard: bool,
    /// Since we last recycled it, if we did (and remember).
    pub recycled_ago: Option<Duration>,
}

/// The peers to disconnect and dial again, given how long we have listened
/// (`None`: not listening, nothing is expected to be heard).
#[must_use]
pub fn deaf_links<P: Copy>(listening_for: Option<Duration>, links: &[Link<P>]) -> Vec<P> {
    if listening_for.is_none_or(|l| l < DEAF_AFTER) {
        return Vec::new();
    }
    links
        .iter()
        .filter(|l| {
            l.speaks_gleaner
                && !l.heard
                && l.connected_for >= DEAF_AFTER
                && l.recycled_ago.is_none_or(|a| a >= RECYCLE_AGAIN_AFTER)
        })
        .map(|l| l.peer)
        .take(RECYCLES_PER_CHECK)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = DEAF_AFTER;

    fn link(peer: u32) -> Link<u32> {
        Link {
            peer,
            connected_for: LONG,
            speaks_gleaner: true,
            heard: false,
            recycled_ago: None,
        }
    }

    #[test]
    fn a_gleaner_peer_connected_and_unheard_while_we_listen_is_deaf() {
        assert_eq!(deaf_links(Some(LONG), &[link(1)]), vec![1]);
    }

    #[test]
    fn nothing_is_deaf_before_there_was_time_to_hear_it() {
        let short = DEAF_AFTER - Duration::from_secs(1);
        // Not listening, or not long enough: nothing was due.
        assert!(deaf_links(None, &[link(1)]).is_empty());
        assert!(deaf_links(Some(short), &[link(1)]).is_empty());
        // A connection too young for a republication to have arrived.
        let young = Link {
            connected_for: short,
            ..link(1)
        };
        assert!(deaf_links(Some(LONG), &[young]).is_empty());
    }

    #[test]
    fn heard_foreign_or_recently_recycled_peers_are_left_alone() {
        let heard = Link {
            heard: true,
            ..link(1)
        };
        let foreign = Link {
            speaks_gleaner: false,
            ..link(2)
        };
        let recycled = Link {
            recycled_ago: Some(RECYCLE_AGAIN_AFTER - Duration::from_secs(1)),
            ..link(3)
        };
        let again = Link {
            recycled_ago: Some(RECYCLE_AGAIN_AFTER),
            ..link(4)
        };
        assert_eq!(
            deaf_links(Some(LONG), &[heard, foreign, recycled, again]),
            vec![4]
        );
    }

    #[test]
    fn one_check_recycles_a_bounded_number() {
        let links: Vec<Link<u32>> = (0..100).map(link).collect();
        assert_eq!(
            deaf_links(Some(LONG), &links),
            (0..RECYCLES_PER_CHECK as u32).collect::<Vec<_>>()
        );
    }
}
