//! Hosts a round of the queue asked that gave no response
//! ([`Silences`]), and when each is worth asking again. Pure: the caller
//! passes the time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libp2p::PeerId;

use crate::consumer::survey::SurveyedHost;

/// The first wait before a host that gave a round no response is asked
/// again; it doubles with each silence in a row, up to [`SILENT_RETRY_MAX`].
pub(super) const SILENT_RETRY_FIRST: Duration = Duration::from_secs(30);
/// The longest wait (the rounds' longest look, `rounds::LOOK_EVERY_MAX`).
pub(super) const SILENT_RETRY_MAX: Duration = Duration::from_secs(240);
/// Silent hosts remembered at most (the rest are forgotten, oldest first).
const SILENT_MAX: usize = 1_024;
/// Silences in a row after which a host is no longer made news by its
/// silence (about half an hour of waits): a host that never answers, or
/// that no round picks, costs at most this many rounds, not one every few
/// minutes for as long as work waits. Any other event still asks it.
pub(super) const SILENT_RETRIES_MAX: u32 = 8;

/// Hosts a round asked that gave no response. Their summaries or
/// announcements may still say they are free, and the queue knows nothing
/// better of them, so nothing they say is ever news: a host that missed its
/// one ask (a timeout, a dial that failed) would never be asked again, and
/// work only it may take (a quorum's copy, an image it alone holds) would
/// wait for ever. Each is news again once its wait is over, a wait that
/// doubles while it stays silent, at most [`SILENT_RETRIES_MAX`] times,
/// so a host that never answers costs a few rounds, not one per look.
#[derive(Debug, Clone, Default)]
pub struct Silences {
    /// The time of each host's last silence and how many in a row.
    hosts: HashMap<PeerId, (Instant, u32)>,
}

impl Silences {
    /// Notes what a round's asks came to: each host asked that gave no
    /// response (its query failed: not answered, an error, not listed from
    /// its summary; a member listed without a summary was not asked) is
    /// silent once more (once a round: a host the round started with as
    /// news has spent its retry already, [`Self::round_started`]); one
    /// that answered is silent no more.
    pub(super) fn note_round(&mut self, at: Instant, started: Instant, hosts: &[SurveyedHost]) {
        for h in hosts {
            if h.answered {
                self.hosts.remove(&h.peer);
            } else if !h.summarised && h.error.is_some() {
                match self.hosts.get_mut(&h.peer) {
                    Some(entry) if entry.0 >= started => entry.0 = at,
                    _ => self.once_more(h.peer, at),
                }
            }
        }
        if self.hosts.len() > SILENT_MAX {
            // The oldest go, in one pass.
            let mut by_age: Vec<(Instant, PeerId)> =
                self.hosts.iter().map(|(p, v)| (v.0, *p)).collect();
            by_age.sort_unstable();
            let over = self.hosts.len() - SILENT_MAX;
            for (_, peer) in by_age.into_iter().take(over) {
                self.hosts.remove(&peer);
            }
        }
    }

    /// A round started with `peers` as its news: each one silent and due
    /// spends a retry whether the round's few asks reach it or not, so a
    /// host no round picks is not news at every look.
    pub(super) fn round_started(&mut self, at: Instant, peers: impl IntoIterator<Item = PeerId>) {
        for peer in peers {
            if self.due(&peer, at) {
                self.once_more(peer, at);
            }
        }
    }

    fn once_more(&mut self, peer: PeerId, at: Instant) {
        let entry = self.hosts.entry(peer).or_insert((at, 0));
        *entry = (at, entry.1.saturating_add(1));
    }

    /// True when `peer` gave no response and its wait is over: what the
    /// queue knows of it is not to be trusted until it is asked again.
    pub(super) fn due(&self, peer: &PeerId, now: Instant) -> bool {
        self.hosts.get(peer).is_some_and(|&(at, count)| {
            if count > SILENT_RETRIES_MAX {
                return false;
            }
            let shift = count.saturating_sub(1).min(16);
            let wait = SILENT_RETRY_FIRST
                .saturating_mul(1 << shift)
                .min(SILENT_RETRY_MAX);
            now.saturating_duration_since(at) >= wait
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(peer: PeerId, answered: bool) -> SurveyedHost {
        SurveyedHost {
            answered,
            error: (!answered).then(|| "timeout".to_string()),
            ..SurveyedHost::new(peer)
        }
    }

    #[test]
    fn only_a_host_asked_that_gave_no_response_is_silent() {
        let t0 = Instant::now();
        let (silent, unasked, answered) = (PeerId::random(), PeerId::random(), PeerId::random());
        let mut s = Silences::default();
        // A member listed without a summary was not asked: no error.
        let listed = SurveyedHost::new(unasked);
        s.note_round(
            t0,
            t0,
            &[asked(silent, false), listed, asked(answered, true)],
        );
        let later = t0 + SILENT_RETRY_FIRST;
        assert!(s.due(&silent, later));
        assert!(!s.due(&silent, later - Duration::from_secs(1)));
        assert!(!s.due(&unasked, later + SILENT_RETRY_MAX));
        assert!(!s.due(&answered, later + SILENT_RETRY_MAX));
        // It answers the next ask: silent no more.
        s.note_round(later, later, &[asked(silent, true)]);
        assert!(!s.due(&silent, later + SILENT_RETRY_MAX));
    }

    /// A silent host that no round picks spends a retry at each round that
    /// starts with it as news, and after the last it is news no more.
    #[test]
    fn a_silent_host_is_news_a_bounded_number_of_times() {
        let mut now = Instant::now();
        let peer = PeerId::random();
        let mut s = Silences::default();
        s.note_round(now, now, &[asked(peer, false)]);
        let mut rounds = 0;
        for _ in 0..10_000 {
            now += Duration::from_secs(10);
            if s.due(&peer, now) {
                rounds += 1;
                s.round_started(now, [peer]);
            }
        }
        assert_eq!(rounds, SILENT_RETRIES_MAX, "rounds for one silent host");
        // A round that asks it and finds it silent again counts once.
        let mut s = Silences::default();
        s.note_round(now, now, &[asked(peer, false)]);
        now += SILENT_RETRY_FIRST;
        s.round_started(now, [peer]);
        s.note_round(now, now, &[asked(peer, false)]);
        assert_eq!(s.hosts[&peer].1, 2);
    }
}
