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

/// Hosts a round asked that gave no response. Their summaries or
/// announcements may still say they are free, and the queue knows nothing
/// better of them, so nothing they say is ever news: a host that missed its
/// one ask (a timeout, a dial that failed) would never be asked again, and
/// work only it may take (a quorum's copy, an image it alone holds) would
/// wait for ever. Each is news again once its wait is over, a wait that
/// doubles while it stays silent, so a host that never answers costs a
/// round now and then, not one per look.
#[derive(Debug, Clone, Default)]
pub struct Silences {
    /// The time of each host's last silence and how many in a row.
    hosts: HashMap<PeerId, (Instant, u32)>,
}

impl Silences {
    /// Notes what a round's asks came to: each host asked (not listed from
    /// its summary) that gave no response is silent once more; one that
    /// answered is silent no more.
    pub(super) fn note_round(&mut self, at: Instant, hosts: &[SurveyedHost]) {
        for h in hosts {
            if h.answered {
                self.hosts.remove(&h.peer);
            } else if !h.summarised {
                let entry = self.hosts.entry(h.peer).or_insert((at, 0));
                *entry = (at, entry.1.saturating_add(1));
            }
        }
        while self.hosts.len() > SILENT_MAX {
            let Some(oldest) = self.hosts.iter().min_by_key(|(_, v)| v.0).map(|(p, _)| *p) else {
                break;
            };
            self.hosts.remove(&oldest);
        }
    }

    /// True when `peer` gave no response and its wait is over: what the
    /// queue knows of it is not to be trusted until it is asked again.
    pub(super) fn due(&self, peer: &PeerId, now: Instant) -> bool {
        self.hosts.get(peer).is_some_and(|&(at, count)| {
            let shift = count.saturating_sub(1).min(16);
            let wait = SILENT_RETRY_FIRST
                .saturating_mul(1 << shift)
                .min(SILENT_RETRY_MAX);
            now.saturating_duration_since(at) >= wait
        })
    }
}
