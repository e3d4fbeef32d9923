//! Holds in the queue's core (issue 28, scope 1): a queued task that no
//! free host is likely to finish now waits for a later window on a host
//! whose forecast says it will, and starts there when the window opens —
//! or earlier, when a host free by then is about as good — instead of
//! being started where it will be killed.
//!
//! The decision is the model's (`sched::window`: [`WindowRule::choose`],
//! [`follow_plan`], [`Plan::lapse`]), the one the simulator's `windows`
//! policy takes; this file only gathers its inputs from what the queue
//! knows: a free host's answer for a start now, the hosts' answers for
//! windows that start later (asked once per run length when a task could
//! use them, [`Action::AskLater`], at most every [`LATER_FRESH`]), the
//! windows other held tasks keep and the hosts our tasks run on. A hold is
//! bounded: it lapses when its host leaves, when its window comes and the
//! host is not free (or is not heard free within [`WINDOW_GRACE`]), or when
//! a run in it would end after the batch's deadline, and the task goes back
//! to normal placement. When a held
//! window comes, the next round asks its host (`rounds`).
//!
//! The later starts asked about are counted in a unit, an hour unless the
//! node's config sets a smaller one (`[batch] later_unit_secs`, down to a
//! minute) so that a test or a demo pool whose owners' loads are scripted
//! in minutes sees its holds come within minutes. Only the grid scales:
//! the rule's weights, how long answers are used, and the grace stay as
//! they are.
//!
//! Pure: no tokio, no files, no clock.

use std::collections::HashMap;
use std::time::Duration;

use libp2p::PeerId;

use super::state::{Action, Now, QueueCore, LATER_UNIT_MIN_SECS, LATER_UNIT_SECS};
use super::types::{Held, HoldView, LaterTr};
use crate::consumer::batch::estimate::{view_or_guess, HeldShape};
use crate::consumer::batch::record::TaskState;
use crate::consumer::batch::runtime::planned_runtime;
use crate::consumer::rank;
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;
use crate::model::sched::window::{follow_plan, Choice, HostNow, Lapse, Plan, Window, WindowRule};

/// The later starts a host is asked about, in units of the queue's later
/// unit from now (an hour: [`LATER_UNIT_SECS`]): hourly over the first
/// hours, sparser after (forecasts for windows that start later are
/// coarse: shared/findings/future-windows.md).
pub const LATER_STARTS: [i64; 11] = [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24];
/// Hosts asked about later windows at most, per run length.
pub const LATER_HOSTS_MAX: usize = 16;
/// How long the hosts' answers for later windows are used before they are
/// asked again (when a task still could use them).
pub(super) const LATER_FRESH: Duration = Duration::from_secs(15 * 60);
/// How long a task that may be held waits for those answers before it is
/// placed without them.
pub(super) const LATER_WAIT: Duration = Duration::from_secs(10);
/// How long after its window came a hold stands without its task having
/// started there. The round that asks the host when the window comes
/// (`due`) takes seconds; a host that did not answer it free by then (its
/// ask timed out, no round came, the batch had no room) is taken as not
/// free, and the hold lapses ([`Plan::lapse`]) rather than keep the task
/// off every other host until some round happens to ask that one.
pub(super) const WINDOW_GRACE: Duration = Duration::from_secs(5 * 60);
/// Queued tasks weighed per placement, at most (the oldest batches' first).
const WEIGHED_MAX: usize = 256;

/// What one batch's tasks share when weighed.
struct BatchWeigh {
    batch: BatchId,
    /// The batch's declared window (what hosts are asked about), seconds.
    window: u64,
    /// The run time placement plans with, seconds.
    runtime: f64,
    mem_mib: u64,
    deadline: Option<f64>,
    tasks: Vec<u32>,
}

impl QueueCore {
    /// Turns holds for later windows on or off (for every batch); off
    /// drops the holds there are.
    pub fn set_later_windows(&mut self, on: bool) {
        self.window_rule = on.then(WindowRule::default);
        if !on {
            self.holds.clear();
            self.held_since.clear();
        }
    }

    /// Sets the unit of the later-start grid ([`LATER_STARTS`]), seconds,
    /// kept within [`LATER_UNIT_MIN_SECS`]..=[`LATER_UNIT_SECS`] (the
    /// config refuses others with its key named). Answers asked on another
    /// grid are dropped.
    pub fn set_later_unit(&mut self, secs: u64) {
        // At most an hour after the clamp: no wrap.
        self.later_unit_secs = secs.clamp(LATER_UNIT_MIN_SECS, LATER_UNIT_SECS) as i64;
        self.later.clear();
    }

    /// Before placement on `free` (a round's free hosts, discounted by their
    /// records): weighs every queued task that no free host is likely to
    /// finish, or that is held, against the later windows the hosts
    /// forecast. A task held for a window not yet open, or waiting for the
    /// hosts' answers about later windows, is not started in this round
    /// ([`QueueCore::held_off`]).
    pub(super) fn weigh_holds(&mut self, hosts: &[SurveyedHost]) {
        self.deferred.clear();
        self.drop_stale_holds();
        let Some(rule) = self.window_rule else {
            return;
        };
        let free: Vec<&SurveyedHost> = hosts.iter().filter(|h| rank::eligible(h)).collect();
        let mut weighed = 0usize;
        for b in self.batches_to_weigh() {
            // The hosts' answers for the batch's length, read (or asked
            // for) once, when a task first needs them.
            let mut later = None;
            for &task in &b.tasks {
                if weighed >= WEIGHED_MAX {
                    return;
                }
                weighed += 1;
                self.weigh(&rule, &b, task, &free, hosts, &mut later);
            }
        }
    }

    /// Holds whose task is no longer queued (started, cancelled, ended) go,
    /// and with them when it was first held.
    fn drop_stale_holds(&mut self) {
        let batches = &self.batches;
        let queued = |(b, t): &(BatchId, u32)| {
            batches.get(b).is_some_and(|live| {
                !live.record.cancelled
                    && live
                        .tasks
                        .get(*t as usize)
                        .is_some_and(|t| t.state == TaskState::Queued)
            })
        };
        self.holds.retain(|key, _| queued(key));
        self.held_since.retain(|key, _| queued(key));
    }

    /// The queued tasks of the batches with room, oldest batch first.
    fn batches_to_weigh(&self) -> Vec<BatchWeigh> {
        self.batches
            .iter()
            .filter(|(_, b)| !b.record.cancelled && b.room() > 0)
            .map(|(id, b)| BatchWeigh {
                batch: *id,
                window: b.record.runtime_secs,
                runtime: planned_runtime(b.record.runtime_secs, &b.tasks).median,
                mem_mib: b.record.mem_mib,
                deadline: b.record.deadline_unix.map(|d| d as f64),
                tasks: b.tasks_in(TaskState::Queued),
            })
            .filter(|b| !b.tasks.is_empty())
            .collect()
    }

    /// Weighs one queued task: starts as usual, holds for a later window,
    /// keeps or drops its hold, or waits for the hosts' answers.
    fn weigh(
        &mut self,
        rule: &WindowRule,
        b: &BatchWeigh,
        task: u32,
        free: &[&SurveyedHost],
        hosts: &[SurveyedHost],
        later: &mut Option<Option<LaterTr>>,
    ) {
        let key = (b.batch, task);
        let Some(t) = self.task(b.batch, task) else {
            return;
        };
        let kills = t.owner_kills;
        let now = self.now.unix_secs;
        let held_secs = self
            .held_since
            .get(&key)
            .map_or(0.0, |&since| now.saturating_sub(since).max(0) as f64);
        if rule.held_enough(held_secs) {
            // Held long enough in all (`max_held_secs`): placed as usual
            // from now on, as the simulator's `windows` does.
            if self.holds.remove(&key).is_some() {
                tracing::info!(batch = %b.batch, task, "a hold ended: held long enough");
                self.emit(b.batch, task, Some(HELD_ENOUGH.to_string()));
            }
            return;
        }
        let held = self.holds.get(&key).copied();
        // Windows name hosts by their place in `peers`.
        let mut peers: Vec<PeerId> = Vec::new();
        let mut windows: Vec<Window> = Vec::new();
        for h in free {
            if !self.open_to(b.batch, task, h.peer) {
                continue;
            }
            let view = view_or_guess(h, b.window);
            windows.push(Window {
                host: index(&mut peers, h.peer),
                start_in: 0.0,
                wall_secs: view.expected_run_secs(b.runtime),
                p: view.p_success(b.runtime),
            });
        }
        let best_now = windows.iter().map(|w| w.p).fold(0.0, f64::max);
        if held.is_none() && (windows.is_empty() || best_now >= rule.hold_below) {
            // A free host is likely to finish it (or none is free): placed
            // as usual.
            return;
        }
        let first_later = (now + LATER_STARTS[0] * self.later_unit_secs) as f64;
        if held.is_none() && b.deadline.is_some_and(|d| first_later + b.runtime > d) {
            // No later window ends before the deadline.
            return;
        }
        match later.get_or_insert_with(|| self.later_for(b.window, b.mem_mib)) {
            Some(later) => self.later_windows(b, task, later, &mut peers, &mut windows),
            None => {
                self.deferred.insert(key);
                return;
            }
        }
        // A window another held task keeps, or one of our tasks runs in, is
        // not offered.
        let kept = self.kept_windows(key);
        let now_f = now as f64;
        windows.retain(|w| {
            !rule.kept(
                w,
                now_f,
                kept.get(&peers[w.host]).into_iter().flatten().copied(),
            )
        });
        let mut choice = rule.choose_held(&windows, None, kills, held_secs);
        if let Some(h) = held {
            let plan = Plan {
                host: index(&mut peers, h.peer),
                start_at: h.start_unix as f64,
                wall_secs: h.wall_secs,
                p: h.p,
            };
            let host = match self.host_now(h.peer, hosts) {
                Some(host) => host,
                // Not asked in this round: busy for all the plan cares
                // before its window; at its window, left for the round
                // that asks it.
                None if now < h.start_unix => HostNow::Busy,
                None => return,
            };
            if let Some(why) = plan.lapse(now_f, host, b.deadline) {
                tracing::info!(batch = %b.batch, task, host = %h.peer, why = why.as_str(), "a hold lapsed");
                self.holds.remove(&key);
                // The task is weighed afresh; the next round asks broadly.
                self.wanted = true;
                self.emit(b.batch, task, Some(format!("hold ended: {}", why.as_str())));
            }
            choice = follow_plan(&plan, now_f, host, b.deadline, choice);
        }
        self.apply(key, choice, &peers);
    }

    /// Whether a task may go to `host` at all: it does not avoid it and was
    /// not refused by it (holds aside).
    fn open_to(&self, batch: BatchId, task: u32, host: PeerId) -> bool {
        self.task(batch, task).is_some_and(|t| {
            !self.avoids(batch, task, t, &host.to_base58())
                && !self
                    .refused_by
                    .get(&(batch, task))
                    .is_some_and(|r| r.contains(&host))
        })
    }

    /// The hosts' answers for later windows of `window` seconds, asking
    /// them when none are fresh. `None` while a first ask is under way (for
    /// at most [`LATER_WAIT`]).
    fn later_for(&mut self, window: u64, mem_mib: u64) -> Option<LaterTr> {
        let Some(l) = self.later.get(&window) else {
            return if self.ask_later(window, mem_mib) {
                None
            } else {
                Some(LaterTr::default())
            };
        };
        if !l.answered && l.by_peer.is_empty() {
            return None;
        }
        let later = l.clone();
        let age = l.asked.map(|a| self.now.mono.saturating_duration_since(a));
        if age.is_none_or(|a| a >= LATER_FRESH) {
            // Asked again; the answers at hand serve meanwhile.
            self.ask_later(window, mem_mib);
        }
        Some(later)
    }

    /// Asks the hosts the queue knows (those that answered first, at most
    /// [`LATER_HOSTS_MAX`]) their TR for windows of `window` seconds at the
    /// later starts. False when there is nobody to ask.
    fn ask_later(&mut self, window: u64, mem_mib: u64) -> bool {
        let mut known: Vec<&SurveyedHost> = self
            .last_hosts
            .iter()
            .filter(|h| h.answered || h.summarised)
            .collect();
        known.sort_by_key(|h| !h.answered);
        let peers: Vec<PeerId> = known
            .into_iter()
            .take(LATER_HOSTS_MAX)
            .map(|h| h.peer)
            .collect();
        if peers.is_empty() {
            return false;
        }
        let now = self.now.unix_secs;
        let entry = self.later.entry(window).or_default();
        entry.asked = Some(self.now.mono);
        entry.answered = false;
        self.push(Action::AskLater {
            peers,
            starts_unix: LATER_STARTS
                .iter()
                .map(|k| now + k * self.later_unit_secs)
                .collect(),
            length_secs: window,
            mem_mib,
        });
        true
    }

    /// The later windows of the hosts that answered, for `task`: of hosts
    /// the queue still knows, that `task` may go to, ending before the
    /// batch's deadline.
    fn later_windows(
        &self,
        b: &BatchWeigh,
        task: u32,
        later: &LaterTr,
        peers: &mut Vec<PeerId>,
        windows: &mut Vec<Window>,
    ) {
        let now = self.now.unix_secs;
        let mut answered: Vec<(&PeerId, &Vec<(i64, f64)>)> = later.by_peer.iter().collect();
        answered.sort_by_key(|(p, _)| **p);
        for (peer, points) in answered {
            let Some(known) = self.last_hosts.iter().find(|h| h.peer == *peer) else {
                continue;
            };
            if !self.open_to(b.batch, task, *peer) {
                continue;
            }
            // The run's wall time there, as placement would see it; the
            // host's TR as its record discounts its claims.
            let wall = view_or_guess(known, b.window).expected_run_secs(b.runtime);
            let factor = self.trust.claim_factor(peer);
            for &(start, p) in points {
                let ends = start as f64 + wall;
                if start > now && b.deadline.is_none_or(|d| ends <= d) {
                    windows.push(Window {
                        host: index(peers, *peer),
                        start_in: (start - now) as f64,
                        wall_secs: wall,
                        p: p * factor,
                    });
                }
            }
        }
    }

    /// The windows kept on each host, `(start, end)` in Unix seconds: by
    /// the other held tasks, and by our attempts running there (to their
    /// expected end).
    fn kept_windows(&self, except: (BatchId, u32)) -> HashMap<PeerId, Vec<(f64, f64)>> {
        let mut kept: HashMap<PeerId, Vec<(f64, f64)>> = HashMap::new();
        for (k, h) in &self.holds {
            if *k != except {
                let s = h.start_unix as f64;
                kept.entry(h.peer).or_default().push((s, s + h.wall_secs));
            }
        }
        for (batch, task, peer) in &self.running {
            let Some(live) = self.batches.get(batch) else {
                continue;
            };
            let started = live
                .tasks
                .get(*task as usize)
                .and_then(|t| t.started_unix)
                .unwrap_or(self.now.unix_secs) as f64;
            let run = planned_runtime(live.record.runtime_secs, &live.tasks).median;
            kept.entry(*peer)
                .or_default()
                .push((started, started + run));
        }
        kept
    }

    /// How a held task's host stands in this round's `hosts`: free when it
    /// answered free, busy when it answered otherwise or runs our work,
    /// gone when the queue no longer knows it; `None` when this round did
    /// not ask it.
    fn host_now(&self, peer: PeerId, hosts: &[SurveyedHost]) -> Option<HostNow> {
        if self.hosts_in_use.contains(&peer) {
            return Some(HostNow::Busy);
        }
        match hosts.iter().find(|h| h.peer == peer) {
            Some(h) if rank::eligible(h) => Some(HostNow::Free),
            Some(h) if h.answered => Some(HostNow::Busy),
            Some(_) => None,
            None if self.last_hosts.iter().any(|h| h.peer == peer) => None,
            None => Some(HostNow::Gone),
        }
    }

    /// Carries out the rule's choice for a task.
    fn apply(&mut self, key: (BatchId, u32), choice: Option<Choice>, peers: &[PeerId]) {
        let now = self.now.unix_secs;
        match choice {
            Some(Choice::Hold(w)) => {
                let Some(&peer) = peers.get(w.host) else {
                    return;
                };
                let start_unix = now + w.start_in.round() as i64;
                self.held_since.entry(key).or_insert(now);
                let before = self.holds.get(&key).copied();
                let same = before.is_some_and(|h| h.peer == peer && h.start_unix == start_unix);
                self.holds.insert(
                    key,
                    Held {
                        peer,
                        start_unix,
                        wall_secs: w.wall_secs,
                        p: w.p,
                        open: false,
                        due_asked: same && before.is_some_and(|h| h.due_asked),
                    },
                );
                if !same {
                    let text = hold_text(&peer.to_base58(), w.start_in, w.p);
                    tracing::info!(batch = %key.0, task = key.1, host = %peer, "{text}");
                    self.emit(key.0, key.1, Some(text));
                }
            }
            Some(Choice::Start { host, .. }) => {
                // The window has come and its host is free: the task starts
                // there (and only there) in this round. Any other start is
                // placement's as usual.
                let peer = peers.get(host).copied();
                match self.holds.get_mut(&key) {
                    Some(h) if Some(h.peer) == peer && now >= h.start_unix => h.open = true,
                    Some(_) => {
                        // Watchers learn that the hold went (`submit`'s
                        // queue limit stops only while a task is held).
                        self.holds.remove(&key);
                        self.emit(key.0, key.1, Some(GAVE_WAY.to_string()));
                    }
                    None => {}
                }
            }
            None => {
                self.holds.remove(&key);
            }
        }
    }

    /// Whether placement leaves `task` off `host` in this round: it waits
    /// for the hosts' answers about later windows, or it is held and its
    /// window on `host` is not open.
    pub(super) fn held_off(&self, batch: BatchId, task: u32, host: PeerId) -> bool {
        self.deferred.contains(&(batch, task))
            || self
                .holds
                .get(&(batch, task))
                .is_some_and(|h| !(h.open && h.peer == host))
    }

    /// The task of `batch` whose held window on `host` is open, if any:
    /// it goes before the batch's other tasks there.
    pub(super) fn opened_on(&self, batch: BatchId, host: PeerId) -> Option<u32> {
        self.holds
            .iter()
            .filter(|((b, _), h)| *b == batch && h.open && h.peer == host)
            .map(|((_, t), _)| *t)
            .min()
    }

    /// The hosts' answers about later windows.
    #[must_use = "the driver performs every action"]
    pub fn on_later(
        &mut self,
        now: Now,
        length_secs: u64,
        answers: Vec<(PeerId, Vec<(i64, f64)>)>,
    ) -> Vec<Action> {
        self.at(now);
        let entry = self.later.entry(length_secs).or_default();
        entry.answered = true;
        entry.by_peer = answers
            .into_iter()
            .map(|(peer, points)| {
                let points = points
                    .into_iter()
                    .filter(|(_, p)| p.is_finite() && (0.0..=1.0).contains(p))
                    .take(LATER_STARTS.len())
                    .collect();
                (peer, points)
            })
            .collect();
        // The tasks that waited for them are weighed by the next round.
        self.wanted = true;
        self.actions()
    }

    /// The timer: a held window that has come makes the next round ask its
    /// host, and a hold still there [`WINDOW_GRACE`] after its window came
    /// lapses; hosts' answers about later windows not in within
    /// [`LATER_WAIT`] are waited for no longer (the next round places the
    /// tasks without them).
    pub(super) fn watch_holds(&mut self) {
        let mono = self.now.mono;
        for l in self.later.values_mut() {
            let late = l
                .asked
                .is_some_and(|a| mono.saturating_duration_since(a) >= LATER_WAIT);
            if !l.answered && late {
                l.answered = true;
                self.wanted = true;
            }
        }
        let now = self.now.unix_secs;
        let grace = i64::try_from(WINDOW_GRACE.as_secs()).unwrap_or(i64::MAX);
        let mut missed = Vec::new();
        for (key, h) in &mut self.holds {
            if now >= h.start_unix && !h.due_asked {
                h.due_asked = true;
                self.due.insert(h.peer);
                self.wanted = true;
            }
            if now >= h.start_unix.saturating_add(grace) {
                missed.push((*key, *h));
            }
        }
        // Still held a grace after the window came: its host was not heard
        // free there, so the plan lapses as for a host that answered busy.
        for ((batch, task), h) in missed {
            // `lapse` reads no host index.
            let plan = Plan {
                host: 0,
                start_at: h.start_unix as f64,
                wall_secs: h.wall_secs,
                p: h.p,
            };
            let deadline = self
                .batches
                .get(&batch)
                .and_then(|b| b.record.deadline_unix)
                .map(|d| d as f64);
            let why = plan
                .lapse(now as f64, HostNow::Busy, deadline)
                .unwrap_or(Lapse::Missed);
            tracing::info!(%batch, task, host = %h.peer, why = why.as_str(), "a hold lapsed unheard");
            self.holds.remove(&(batch, task));
            self.wanted = true;
            self.emit(batch, task, Some(format!("hold ended: {}", why.as_str())));
        }
    }

    /// The queued tasks of `batch` held for a later window.
    pub(super) fn hold_views(&self, batch: BatchId) -> std::collections::BTreeMap<u32, HoldView> {
        self.holds
            .iter()
            .filter(|((b, _), _)| *b == batch)
            .map(|((_, t), h)| (*t, hold_view(h)))
            .collect()
    }

    /// The held tasks of `batch` as its estimate weighs them, their
    /// windows' starts counted from `now_unix`.
    pub(super) fn held_shapes(&self, batch: BatchId, now_unix: i64) -> Vec<HeldShape> {
        let mut shapes: Vec<HeldShape> = self
            .holds
            .iter()
            .filter(|((b, _), _)| *b == batch)
            .map(|((_, task), h)| HeldShape {
                task: *task,
                host: h.peer,
                start_in_secs: (h.start_unix - now_unix).max(0) as f64,
                p: h.p,
            })
            .collect();
        // The map's order is not the same from run to run; the estimate's is.
        shapes.sort_by_key(|s| s.task);
        shapes
    }

    /// The later window `task` of `batch` is held for, if it is.
    pub(super) fn hold_view(&self, batch: BatchId, task: u32) -> Option<HoldView> {
        self.holds.get(&(batch, task)).map(hold_view)
    }
}

/// `peer`'s place in `peers`, added at the end when new.
fn index(peers: &mut Vec<PeerId>, peer: PeerId) -> usize {
    match peers.iter().position(|p| *p == peer) {
        Some(i) => i,
        None => {
            peers.push(peer);
            peers.len() - 1
        }
    }
}

fn hold_view(h: &Held) -> HoldView {
    HoldView {
        host: h.peer.to_base58(),
        start_unix: h.start_unix,
        p: h.p,
    }
}

/// What watchers are told when a held task starts now instead, on a free
/// host about as good as its window.
const GAVE_WAY: &str = "hold ended: a host free now is about as good";

/// What watchers are told when a task's holds have kept it waiting the
/// rule's longest ([`WindowRule::max_held_secs`]) and it is placed as usual.
const HELD_ENOUGH: &str = "hold ended: held long enough";

/// What watchers are told when a task is held.
fn hold_text(host: &str, start_in: f64, p: f64) -> String {
    let mins = (start_in / 60.0).round().max(0.0) as u64;
    format!(
        "waiting for host {host}'s window in {}h{:02} (P {p:.2})",
        mins / 60,
        mins % 60
    )
}
