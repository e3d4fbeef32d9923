//! Rounds in the queue's core (issue 27): when the queue looks at the pool
//! and whether it asks anyone. Hosts are asked directly only when something
//! changed: a new batch, a task that ended, failed or was refused, a copy a
//! quorum wants, a deadline at risk with a better host by its summary, a
//! round that started work while more waits (an *ask* round: a few hosts
//! per placeable task), or a member whose announcement shows a slot newly
//! free that waiting work could take — a host that joined, one that
//! finished another consumer's job (a *news* round: a few hosts per such
//! member). When a task's held window comes (`later`), the next round asks
//! that window's host and nobody else. Otherwise the queue *looks*: it reads the members' summaries
//! the network task holds, asking nobody, less and less often while nothing
//! changes ([`IDLE_SURVEY_EVERY`] doubling up to [`LOOK_EVERY_MAX`]); a
//! host asked that gave no response is news again once its wait is over
//! ([`super::silences::Silences`]). So a
//! batch waiting an hour on a full pool costs its rounds of asks when it is
//! submitted and one per event, not one every 2 s: a submission's network
//! cost is bounded by its tasks, not by the time it waits or by the pool.
//!
//! Pure: no tokio, no files, no clock. The driver turns a member's
//! announcement into [`MemberNews`] and hands it over; the decision whether
//! it is news is taken here.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use libp2p::PeerId;

use super::silences::SILENT_RETRY_MAX;
use super::state::{Action, Now, QueueCore};
use super::types::{Round, IDLE_SURVEY_EVERY, SURVEY_GAP};
use crate::consumer::batch::record::TaskState;
use crate::consumer::rank::{asks_for, sample_hosts, ASKS_MAX, ASKS_PER_TASK};
use crate::consumer::survey::{SurveyQuery, SurveyedHost};
use crate::model::ids::BatchId;
use crate::model::state::State;
use crate::net::protocol::IMAGES_HELD_MAX;

/// The longest wait between two looks (and between two news rounds that
/// start nothing). Shorter than the time a node in a large pool keeps
/// listening to summaries after the last look at its members
/// ([`crate::net::listening::WATCH_FOR`]), so a consumer with work waiting
/// keeps hearing the pool, and so its members' news.
pub const LOOK_EVERY_MAX: Duration = Duration::from_secs(240);
const _: () = assert!(LOOK_EVERY_MAX.as_secs() < crate::net::listening::WATCH_FOR.as_secs());
/// How long a round's answers may place tasks on hosts that free up.
pub(super) const RANKING_FRESH_FOR: Duration = Duration::from_secs(10);
/// Rounds of asks one running task's deadline risk may ask for (each when a
/// host's summary says a copy there would help).
pub(super) const DEADLINE_ASKS_MAX: u8 = 2;

// The longest wait of a silent host is no longer than a look's.
const _: () = assert!(SILENT_RETRY_MAX.as_secs() <= LOOK_EVERY_MAX.as_secs());

/// What a member's announcement (or summary) says that may let waiting
/// work start: the driver passes each one on as it is heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberNews {
    pub peer: PeerId,
    pub slot_free: bool,
    pub state: State,
}

/// True when what we know of `host` says it could take a job now: its slot
/// free, no failure state (said or predicted).
pub(super) fn free_now(host: &SurveyedHost) -> bool {
    host.slot_free == Some(true)
        && !host.state.is_some_and(|s| s.is_failure())
        && !host.initial_state.is_some_and(|s| s.is_failure())
}

impl QueueCore {
    /// True when a round should start at `now` (the driver asks only while
    /// the node is not stopping).
    pub fn wants_survey(&self, now: Now) -> bool {
        if self.surveying || !self.watching_pool() {
            return false;
        }
        let Some(last) = self.last_survey else {
            return true;
        };
        let since = now.mono.saturating_duration_since(last);
        if self.wanted {
            return since >= SURVEY_GAP;
        }
        (!self.news.is_empty() && since >= self.news_gap) || since >= self.look_every
    }

    /// Whether anything could use a host now: a task waits (in a batch with
    /// room), a running task of a batch with a deadline has no copy, a
    /// verified task wants another copy, or a tail copy could help.
    fn watching_pool(&self) -> bool {
        // A batch with a deadline keeps its view of free hosts while its
        // tasks run, for second copies.
        let deadline = || {
            self.batches.values().any(|b| {
                !b.record.cancelled
                    && b.record.deadline_unix.is_some()
                    && b.tasks
                        .iter()
                        .any(|t| t.state == TaskState::Running && t.copies.is_empty())
            })
        };
        self.queued_with_room() || deadline() || self.any_wants_copy() || self.watching_tail()
    }

    /// True when a task waits in a batch with room for it.
    fn queued_with_room(&self) -> bool {
        self.batches.values().any(|b| {
            !b.record.cancelled
                && b.room() > 0
                && b.tasks.iter().any(|t| t.state == TaskState::Queued)
        })
    }

    /// Starts a round for the oldest waiting task's window: asking a few
    /// hosts per placeable task when something changed, a few per member
    /// with news when only that, nobody otherwise.
    #[must_use = "the driver performs every action"]
    pub fn start_survey(&mut self, now: Now) -> Vec<Action> {
        self.at(now);
        let Some(first) = self.batches.values().find(|b| {
            !b.record.cancelled
                && b.tasks.iter().any(|t| {
                    t.state == TaskState::Queued
                        || ((b.record.deadline_unix.is_some()
                            || self.trust.spec(b.record.id).is_some()
                            || self.tail_copies)
                            && t.state == TaskState::Running)
                })
        }) else {
            return self.actions();
        };
        let since = self
            .last_survey
            .map(|t| now.mono.saturating_duration_since(t));
        let round = if self.wanted {
            Round::Ask
        } else if !self.news.is_empty() && since.is_none_or(|s| s >= self.news_gap) {
            Round::News
        } else {
            Round::Look
        };
        let placeable = asks_for(self.placeable_now());
        let news = u32::try_from(self.news.len()).unwrap_or(u32::MAX);
        let mut ask_at_most = match round {
            Round::Ask => placeable,
            Round::News => placeable.min(news.saturating_mul(ASKS_PER_TASK)),
            Round::Look => 0,
        };
        // A held window has come (`later`): this round asks its hosts and
        // nobody else, so that the answer says whether the task starts there.
        let due: Vec<PeerId> = if round == Round::Ask {
            self.due.drain().collect()
        } else {
            Vec::new()
        };
        if !due.is_empty() {
            ask_at_most = u32::try_from(due.len()).unwrap_or(u32::MAX);
        }
        let query = SurveyQuery {
            window_start_unix: now.unix_secs,
            window_secs: first.record.runtime_secs,
            mem_mib: first.record.mem_mib,
            rounds: 1,
            ask_at_most: Some(ask_at_most),
            images: self.images_waiting(),
            // Summaries naming twice the hosts the work can use at once: a
            // large pool's sample follows the batches' width, not the pool
            // (the rule `gleaner simulate --knowledge sample` runs).
            sample_hosts: Some(u32::try_from(sample_hosts(self.width())).unwrap_or(u32::MAX)),
        };
        let skip = if round == Round::Look {
            Vec::new()
        } else if !due.is_empty() {
            self.last_hosts
                .iter()
                .map(|h| h.peer)
                .chain(self.hosts_in_use.iter().copied())
                .filter(|p| !due.contains(p))
                .collect()
        } else {
            self.no_use_now()
        };
        if round != Round::Look {
            let news = std::mem::take(&mut self.news);
            self.silent.round_started(now.mono, news);
        }
        if round == Round::Ask {
            self.wanted = false;
            self.look_every = IDLE_SURVEY_EVERY;
        }
        tracing::debug!(
            ?round,
            ask_at_most,
            skipped = skip.len(),
            "batch queue: a round starts"
        );
        self.round = round;
        self.surveying = true;
        self.last_survey = Some(now.mono);
        self.push(Action::Survey { query, skip });
        self.actions()
    }

    /// Tasks the batches want running at once: each live batch's queued and
    /// running tasks, at most its `max_running`.
    fn width(&self) -> usize {
        self.batches
            .values()
            .filter(|b| !b.record.cancelled)
            .map(|b| {
                let live = b
                    .tasks
                    .iter()
                    .filter(|t| matches!(t.state, TaskState::Queued | TaskState::Running))
                    .count();
                b.record.max_running.map_or(live, |m| live.min(m as usize))
            })
            .sum()
    }

    /// The images of the batches with work waiting, oldest batch first, at
    /// most as many as a summary names: members that hold one are asked
    /// first among those equally free.
    fn images_waiting(&self) -> Vec<[u8; 32]> {
        let mut images: Vec<[u8; 32]> = Vec::new();
        let waiting = self.batches.values().filter(|b| {
            !b.record.cancelled && b.tasks.iter().any(|t| t.state == TaskState::Queued)
        });
        for id in waiting.filter_map(|b| b.record.image.as_ref().map(|i| i.id)) {
            if !images.contains(&id) && images.len() < IMAGES_HELD_MAX {
                images.push(id);
            }
        }
        images
    }

    /// A round's answer. Hosts that answered take the waiting tasks; a round
    /// that started work while more waits asks again. A look (nobody asked)
    /// refreshes what the queue knows from the summaries and turns a host
    /// newly free into news; when it finds none the looks slow down.
    #[must_use = "the driver performs every action"]
    pub fn on_survey(&mut self, now: Now, hosts: Result<Vec<SurveyedHost>, String>) -> Vec<Action> {
        self.at(now);
        self.surveying = false;
        let hosts = match hosts {
            Ok(hosts) => hosts,
            Err(e) => {
                tracing::debug!(error = %e, "batch queue: survey failed");
                self.slower_after(self.round);
                return self.actions();
            }
        };
        let looked = self.round == Round::Look && !hosts.iter().any(|h| h.answered);
        if looked {
            let news = self.news_in(&hosts);
            self.merge_look(hosts);
            if news.is_empty() {
                self.slower_after(Round::Look);
            }
            self.add_news(news);
            return self.actions();
        }
        let before = self.running.len();
        let round_began = self.last_survey.unwrap_or(now.mono);
        self.silent.note_round(now.mono, round_began, &hosts);
        self.checkpoints.surveyed(&hosts);
        self.set_view(hosts);
        self.last_hosts_at = Some(now.mono);
        let hosts = self.last_hosts.clone();
        self.place_on(&hosts);
        self.settle_news();
        let started = self.running.len() > before;
        if started {
            self.news_gap = SURVEY_GAP;
            // More waits: the next few hosts are asked at once, so a
            // batch larger than one round's asks starts round after round.
            if self.queued_with_room() {
                self.wanted = true;
            }
        } else {
            self.slower_after(self.round);
        }
        self.actions()
    }

    /// A member's announcement: news when it says the member could take a
    /// job now, what the queue knew of it did not, it runs none of ours and
    /// some waiting work may go there. News makes a round ask it (and a few
    /// others) as soon as the gap allows.
    #[must_use = "the driver performs every action"]
    pub fn on_member(&mut self, now: Now, news: MemberNews) -> Vec<Action> {
        self.at(now);
        // Nothing could use a host: the next round (a new batch asks) reads
        // the pool afresh.
        if !self.watching_pool() {
            return self.actions();
        }
        let free = news.slot_free && !news.state.is_failure();
        let candidate = free
            && !self.hosts_in_use.contains(&news.peer)
            && !self.news.contains(&news.peer)
            && self.news.len() < ASKS_MAX as usize;
        if candidate {
            let knew_free = self
                .last_hosts
                .iter()
                .find(|h| h.peer == news.peer)
                .is_some_and(free_now)
                && !self.silent.due(&news.peer, now.mono);
            if !knew_free && self.could_take(&self.open_work(), news.peer) {
                tracing::debug!(host = %news.peer, "batch queue: a member's slot is newly free");
                self.news.insert(news.peer);
            }
        }
        self.note_status(news);
        self.actions()
    }

    /// Keeps what a member's announcement says in the queue's view when no
    /// answer of its own is there to trust more, so the member's next
    /// heartbeat saying the same is no news.
    fn note_status(&mut self, news: MemberNews) {
        if let Some(h) = self
            .last_hosts
            .iter_mut()
            .find(|h| h.peer == news.peer && !h.answered)
        {
            h.slot_free = Some(news.slot_free);
            h.state = Some(news.state);
        }
    }

    /// The hosts of a look that are news: free by their summaries, free
    /// by nothing the queue knew, running none of ours, and a host some
    /// waiting work may go to.
    fn news_in(&self, hosts: &[SurveyedHost]) -> Vec<PeerId> {
        // A host silent when last asked, its wait over, is known free by
        // nothing: its summary is news again.
        let knew: HashMap<PeerId, bool> = self
            .last_hosts
            .iter()
            .map(|h| {
                (
                    h.peer,
                    free_now(h) && !self.silent.due(&h.peer, self.now.mono),
                )
            })
            .collect();
        let candidates: Vec<PeerId> = hosts
            .iter()
            .filter(|h| free_now(h) && !self.hosts_in_use.contains(&h.peer))
            .filter(|h| knew.get(&h.peer) != Some(&true))
            .map(|h| h.peer)
            .collect();
        if candidates.is_empty() {
            return candidates;
        }
        let open = self.open_work();
        candidates
            .into_iter()
            .filter(|p| self.could_take(&open, *p))
            .collect()
    }

    /// A round's answers settle the news heard while it was out (a round
    /// clears the news when it starts): a member now running our work, or
    /// known free from its answer, is news no more, by the rule that made
    /// it news ([`Self::on_member`]). Else a member's announcement that
    /// crossed the round would start a round of news asking the others,
    /// whose answers would replace what the queue knew of it.
    fn settle_news(&mut self) {
        let known_free: HashSet<PeerId> = self
            .last_hosts
            .iter()
            .filter(|h| free_now(h))
            .map(|h| h.peer)
            .collect();
        let in_use = &self.hosts_in_use;
        self.news
            .retain(|p| !in_use.contains(p) && !known_free.contains(p));
    }

    fn add_news(&mut self, peers: Vec<PeerId>) {
        for peer in peers {
            if self.news.len() >= ASKS_MAX as usize {
                break;
            }
            self.news.insert(peer);
        }
    }

    /// A look's hosts become the queue's view, except that a fresh answer
    /// stays what the queue knows of its host (listed or not: a provider
    /// found through the DHT is no member).
    fn merge_look(&mut self, mut hosts: Vec<SurveyedHost>) {
        let fresh = self
            .last_hosts_at
            .is_some_and(|t| self.now.mono.saturating_duration_since(t) < RANKING_FRESH_FOR);
        if fresh {
            let mut answered: HashMap<PeerId, SurveyedHost> = self
                .last_hosts
                .iter()
                .filter(|h| h.answered)
                .map(|h| (h.peer, h.clone()))
                .collect();
            for h in &mut hosts {
                if let Some(a) = answered.remove(&h.peer) {
                    *h = a;
                }
            }
            hosts.extend(answered.into_values());
        }
        self.set_view(hosts);
    }

    /// Takes `hosts` as the queue's view of the pool. Each answer among them
    /// becomes its host's last (`answers`); the last answers kept are those
    /// of hosts the view lists or that run our work, and a round that found
    /// no host at all forgets none of them.
    fn set_view(&mut self, hosts: Vec<SurveyedHost>) {
        for h in hosts.iter().filter(|h| h.answered) {
            self.answers.insert(h.peer, h.clone());
        }
        if !hosts.is_empty() {
            let listed: HashSet<PeerId> = hosts.iter().map(|h| h.peer).collect();
            let in_use = &self.hosts_in_use;
            self.answers
                .retain(|peer, _| listed.contains(peer) || in_use.contains(peer));
        }
        self.last_hosts = hosts;
    }

    /// A round that found nothing to start: the next look waits twice as
    /// long, and so does the next round asked for by news alone.
    fn slower_after(&mut self, round: Round) {
        match round {
            Round::Look => self.look_every = (self.look_every * 2).min(LOOK_EVERY_MAX),
            Round::News => self.news_gap = (self.news_gap * 2).min(LOOK_EVERY_MAX),
            Round::Ask => {}
        }
    }

    /// The last round's answers while fresh; empty after that.
    pub(super) fn fresh_hosts(&self) -> &[SurveyedHost] {
        if self
            .last_hosts_at
            .is_some_and(|t| self.now.mono.saturating_duration_since(t) < RANKING_FRESH_FOR)
        {
            &self.last_hosts
        } else {
            &[]
        }
    }

    /// A running task of a batch with a deadline looks at risk and a host's
    /// summary says a copy there would help: a round asks, at most
    /// [`DEADLINE_ASKS_MAX`] times per task, so that the answer confirms it.
    pub(super) fn ask_for_deadline(&mut self, batch: BatchId, task: u32) {
        let asked = self.deadline_asks.entry((batch, task)).or_default();
        if *asked < DEADLINE_ASKS_MAX {
            *asked += 1;
            self.wanted = true;
        }
    }

    /// How the queue's rounds stand, for tests and logs.
    #[cfg(test)]
    pub(super) fn look_every(&self) -> Duration {
        self.look_every
    }

    /// The members with news waiting for a round.
    #[cfg(test)]
    pub(super) fn news_count(&self) -> usize {
        self.news.len()
    }

    /// Drops what the queue counted of a batch's deadline asks.
    pub(super) fn forget_deadline_asks(&mut self, batch: BatchId) {
        self.deadline_asks.retain(|(b, _), _| *b != batch);
    }
}
