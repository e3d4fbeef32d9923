//! The host loop's engine: its parts, its state between events, the one
//! closed [`Event`] every input is selected into, and the one `match` that
//! handles it (rust-analyzer's `main_loop`); the snapshot it publishes after
//! each event; `status`; the shutdown order.
//!
//! What an event does lives beside this file by concern (`supervision`,
//! `owner`, `transfer`); the read-only queries do not come here at all
//! (`reader`). This module must not know HTTP (`control`), the Swarm
//! (`net`) nor peers' jobs (`pool_host`).

use super::handle::{HostCommand, HostHandle};
use super::messages::{HostSnapshot, HostStatus};
use super::reader::HostReader;
use super::series::SeriesCache;
use super::streams::ImportDone;
use super::{HostError, MAX_JOB_LOG, STATUS_WINDOWS_SECS};
use crate::clock::Clock;
use crate::guest::{GuestEvent, GuestPhase, GuestRunState, KillCause, Supervisor};
use crate::history::store::HistoryStore;
use crate::model::admit::{slot_free, HostFacts};
use crate::model::baselines::MethodId;
use crate::model::ids::JobId;
use crate::model::owner::Schedule;
use crate::model::state::State;
use crate::monitor::MonitorReading;
use crate::node::config::Config;
use crate::node::OwnerLoad;
use crate::report::ReportRequest;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often a running guest is checked for its end (and its wall limit).
const GUEST_POLL: Duration = Duration::from_millis(50);
/// How long shutdown waits for the killed guest to be reaped.
const GUEST_KILL_WAIT: Duration = Duration::from_secs(2);
/// How often the owner's rules (schedule, battery) are judged between readings.
const OWNER_CHECK: Duration = Duration::from_secs(15);
/// Everything the loop reacts to.
#[derive(Debug)]
enum Event {
    /// The monitor classified a sample of the host.
    Reading(MonitorReading),
    /// The supervisor reported something about the guest.
    Guest(GuestEvent),
    /// A command from a handle.
    Command(HostCommand),
    /// Time to check whether the running guest has ended.
    GuestTick,
    /// Time to delete history older than the retention.
    Compact,
    /// A `pause --for` has run out.
    PauseOver,
    /// Time to judge the schedule and the battery again.
    OwnerCheck,
    /// An import finished (off the loop).
    ImportDone(ImportDone),
    /// SIGINT/SIGTERM (or the caller's token): stop.
    Shutdown,
}

/// What the host loop is made of.
pub struct HostParts {
    pub config: Config,
    pub data_dir: PathBuf,
    pub store: HistoryStore,
    pub supervisor: Supervisor,
    pub clock: Arc<dyn Clock>,
    /// The guest's processes, for the monitor to leave out of L_H.
    pub guest_roots: watch::Sender<crate::procfs::ProcessScope>,
    pub tracker: TaskTracker,
    /// Guest events for the pool host (remote jobs' events go back to their consumers).
    pub to_pool: Option<mpsc::UnboundedSender<GuestEvent>>,
    pub owner_load: OwnerLoad,
    /// The power supply class (`/sys/class/power_supply`; a fake one in tests).
    pub power_supply_dir: PathBuf,
}

/// The loop's inputs.
pub struct HostInputs {
    pub readings: mpsc::Receiver<MonitorReading>,
    pub guest_events: mpsc::UnboundedReceiver<GuestEvent>,
    pub shutdown: CancellationToken,
}

/// The host loop's state between events.
pub struct HostLoop {
    pub(super) parts: HostParts,
    pub(super) commands: mpsc::Receiver<HostCommand>,
    pub(super) snapshot: watch::Sender<HostSnapshot>,
    pub(super) events: broadcast::Sender<GuestEvent>,
    pub(super) started_at: i64,
    /// The last reading, for status and to judge a guest started between readings.
    pub(super) last: Option<MonitorReading>,
    /// The state of the last recorded transition (`None` after a pause, so
    /// the first sample after `resume` records one).
    pub(super) recorded_state: Option<State>,
    /// The running guest's declared working set, MiB (S4 below it).
    pub(super) guest_mem_mib: u64,
    /// The job of the guest started and whose end was not yet seen (it may
    /// be killed but not reaped, when the policy no longer acts on it).
    pub(super) guest_live: Option<JobId>,
    /// When a `pause --for` ends: Unix seconds and the timer deadline.
    pub(super) pause_until: Option<(i64, Instant)>,
    pub(super) local_jobs_started: u64,
    /// The history as a series, built off the loop; the loop holds the one
    /// strong reference (its readers borrow it while it runs).
    pub(super) series_cache: Arc<SeriesCache>,
    /// The read-only queries, sharing the series cache and the peers' answers.
    pub(super) reader: HostReader,
    /// Cancelled at shutdown: the reader refuses queries from then on.
    pub(super) closed: CancellationToken,
    /// An import is running (one at a time).
    pub(super) import_running: bool,
    /// Imports report their end here.
    pub(super) import_done_tx: mpsc::UnboundedSender<ImportDone>,
    pub(super) import_done: mpsc::UnboundedReceiver<ImportDone>,
    /// The node's shutdown token (set by `run`), so an import stops with it.
    pub(super) shutdown: CancellationToken,
    /// `[owner] hours`, judged in `time_zone`.
    pub(super) schedule: Schedule,
    pub(super) time_zone: jiff::tz::TimeZone,
    /// `pause --after-job` waits for the running guest: `Some(for_secs)`.
    pub(super) pause_after_job: Option<Option<u64>>,
}

impl HostLoop {
    /// The loop and its handle; nothing runs until [`HostLoop::run`].
    pub fn new(parts: HostParts) -> (HostLoop, HostHandle) {
        let (commands_tx, commands) = mpsc::channel(64);
        let (snapshot, snapshot_rx) = watch::channel(HostSnapshot::default());
        let (events, _) = broadcast::channel(256);
        let started_at = parts.clock.unix_secs();
        let closed = CancellationToken::new();
        let series_cache = Arc::new(SeriesCache::new(parts.store.bulk()));
        let reader = HostReader::new(
            Arc::downgrade(&series_cache),
            Arc::new(parts.config.clone()),
            parts.clock.clone(),
            parts.tracker.clone(),
            closed.clone(),
        );
        let (import_done_tx, import_done) = mpsc::unbounded_channel();
        let handle = HostHandle::new(commands_tx, snapshot_rx, events.clone(), reader.clone());
        let mut host = HostLoop {
            parts,
            commands,
            snapshot,
            events,
            started_at,
            last: None,
            recorded_state: None,
            guest_mem_mib: 0,
            guest_live: None,
            pause_until: None,
            local_jobs_started: 0,
            series_cache,
            reader,
            closed,
            import_running: false,
            import_done_tx,
            import_done,
            shutdown: CancellationToken::new(),
            schedule: Schedule::always(),
            time_zone: jiff::tz::TimeZone::UTC,
            pause_after_job: None,
        };
        host.schedule = host.parts.config.schedule();
        host.time_zone = host.parts.config.time_zone();
        host.restore_pause();
        host.check_owner_rules();
        host.publish();
        (host, handle)
    }

    /// Runs until shutdown; then kills the guest (S5) and flushes the store.
    pub async fn run(mut self, mut inputs: HostInputs) {
        self.shutdown = inputs.shutdown.clone();
        let mut guest_tick = tokio::time::interval(GUEST_POLL);
        guest_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first retention pass runs before any request is served, so a
        // client never races it (an import older than the retention would
        // otherwise survive or vanish depending on which event came first).
        self.compact();
        // At most a week (validated with the config); checked all the same.
        let every = self
            .parts
            .config
            .history
            .compact_every
            .max(Duration::from_secs(1));
        let first = Instant::now()
            .checked_add(every)
            .unwrap_or_else(Instant::now);
        let mut compact = tokio::time::interval_at(first, every);
        compact.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut owner_check = tokio::time::interval(OWNER_CHECK);
        owner_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let guest_running = self.guest_live.is_some();
            let pause_deadline = self.pause_until.map(|(_, at)| at);
            let event = tokio::select! {
                biased;
                _ = inputs.shutdown.cancelled() => Event::Shutdown,
                Some(e) = inputs.guest_events.recv() => Event::Guest(e),
                Some(r) = inputs.readings.recv() => Event::Reading(r),
                Some(c) = self.commands.recv() => Event::Command(c),
                Some(d) = self.import_done.recv() => Event::ImportDone(d),
                _ = guest_tick.tick(), if guest_running => Event::GuestTick,
                _ = compact.tick() => Event::Compact,
                _ = owner_check.tick() => Event::OwnerCheck,
                _ = sleep_until(pause_deadline), if pause_deadline.is_some() => Event::PauseOver,
            };
            match event {
                Event::Reading(r) => self.on_reading(r),
                Event::Guest(e) => self.on_guest_event(e),
                Event::Command(c) => self.on_command(c),
                Event::GuestTick => self.poll_guest(),
                Event::Compact => self.compact(),
                Event::OwnerCheck => self.check_owner_rules(),
                Event::PauseOver => {
                    if let Err(e) = self.resume() {
                        tracing::error!(error = %e, "cannot end the pause");
                    }
                }
                Event::ImportDone(d) => {
                    self.import_running = false;
                    self.reader.invalidate();
                    self.seal_finished_days();
                    if let Ok(o) = &d.outcome {
                        tracing::info!(
                            added = o.added,
                            already_present = o.already_present,
                            "imported history"
                        );
                    }
                    let _ = d.reply.send(d.outcome);
                }
                Event::Shutdown => {
                    // Queries stop with the commands, not after the guest is reaped.
                    self.closed.cancel();
                    break;
                }
            }
            self.publish();
        }
        self.shut_down(&mut inputs.guest_events);
    }

    /// Shutdown order, part 1 (the rest is in `daemon::run`):
    /// 1. the token was cancelled, so the monitor stops sampling and the
    ///    control server stops accepting;
    /// 2. the guest is killed with cause S5 (revocation) and reaped, so it
    ///    never outlives the node;
    /// 3. the guest events still queued (kill, exit) go to the job log and to
    ///    open `run-local` streams, and the store is flushed.
    fn shut_down(&mut self, guest_events: &mut mpsc::UnboundedReceiver<GuestEvent>) {
        if self.parts.supervisor.run_state() != GuestRunState::Idle {
            self.kill_guest(KillCause::Revocation);
        }
        if self.guest_live.is_some() {
            self.parts.supervisor.wait_exit(GUEST_KILL_WAIT);
            self.guest_ended();
        }
        while let Ok(e) = guest_events.try_recv() {
            self.on_guest_event(e);
        }
        if let Err(e) = self.parts.store.flush() {
            tracing::error!(error = %e, "cannot flush the history on shutdown");
        }
    }

    pub(super) fn now(&self) -> i64 {
        self.parts.clock.unix_secs()
    }

    /// What the admission rule judges: the owner's will, the slot and the
    /// last reading.
    pub(super) fn admission_facts(&self) -> HostFacts {
        HostFacts {
            guests_enabled: self.parts.config.guest.enabled,
            paused: self.parts.store.is_paused(),
            withheld: self.parts.store.withheld(),
            finishing: self.pause_after_job.is_some(),
            running: self.guest_live.clone(),
            state: self.last.map(|r| r.state),
            free_mib: self.last.map(|r| r.free_mib),
        }
    }

    /// Publishes the snapshot when it changed.
    pub(super) fn publish(&self) {
        let facts = self.admission_facts();
        let paused = facts.paused;
        let withheld = facts.withheld;
        let snapshot = HostSnapshot {
            state: if paused || withheld.is_some() {
                Some(State::S5)
            } else {
                self.last.map(|r| r.state)
            },
            paused,
            slot_free: slot_free(&facts),
            cpu: self.last.map(|r| r.cpu),
            free_mib: facts.free_mib,
            withheld,
            pause_after_job: facts.finishing,
            why_idle: self.why_idle(),
            throttle: self.parts.supervisor.throttle_mode(),
            running: facts.running,
        };
        self.snapshot.send_if_modified(|s| {
            let changed = *s != snapshot;
            *s = snapshot;
            changed
        });
    }

    pub(super) fn compact(&mut self) {
        let now = self.now();
        match self
            .parts
            .store
            .compact(now, self.parts.config.history.retention_days)
        {
            Ok(r) => {
                if r.samples_removed + r.transitions_removed + r.job_events_removed > 0 {
                    tracing::info!(?r, "deleted history past the retention");
                }
                // The record without the removed rows is made and prepared
                // off the loop while answers read the one before: no answer
                // decodes the history nor refits after a retention pass.
                // Sealing below moves rows without changing them.
                if r.samples_removed > 0 {
                    self.reader.retained(now);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot delete old history");
                self.reader.invalidate();
            }
        }
        self.seal_finished_days();
    }

    /// Seals the finished days off the loop (a day of 6 s rows is 14,400
    /// removes): once a day there is one; after an import, all it brought.
    pub(super) fn seal_finished_days(&self) {
        let bulk = self.parts.store.bulk();
        tokio::task::spawn_blocking(move || match bulk.seal_finished_days() {
            Ok(r) if r.days + r.days_skipped > 0 => {
                tracing::info!(?r, "sealed finished days of history");
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot seal finished days of history"),
        });
    }

    pub(super) fn on_command(&mut self, command: HostCommand) {
        match command {
            HostCommand::Status { reply } => self.status(reply),
            HostCommand::Pause {
                for_secs,
                after_job: false,
                reply,
            } => {
                let _ = reply.send(self.pause(for_secs));
            }
            HostCommand::Pause {
                for_secs,
                after_job: true,
                reply,
            } => {
                let _ = reply.send(self.pause_when_the_guest_ends(for_secs));
            }
            HostCommand::Resume { reply } => {
                let _ = reply.send(self.resume());
            }
            HostCommand::StartGuest { start, reply } => {
                let _ = reply.send(self.start_guest(*start));
            }
            HostCommand::Cancel { job_id } => {
                let running = self
                    .parts
                    .supervisor
                    .status()
                    .filter(|s| s.phase != GuestPhase::Exited);
                if running.is_some_and(|s| s.job_id == job_id) {
                    self.kill_guest(KillCause::Cancelled);
                }
            }
            HostCommand::Export { reply } => {
                let _ = reply.send(Ok(self.export()));
            }
            HostCommand::Import {
                body,
                source_name,
                reply,
            } => self.import(body, source_name, reply),
            HostCommand::JobLog { limit, reply } => {
                let events = self
                    .parts
                    .store
                    .recent_job_events(limit.min(MAX_JOB_LOG))
                    .map_err(|e| HostError::Internal(e.to_string()));
                let _ = reply.send(events);
            }
        }
    }

    pub(super) fn status(&mut self, reply: oneshot::Sender<HostStatus>) {
        let now = self.now();
        let paused = self.parts.store.is_paused();
        let guest = self
            .parts
            .supervisor
            .status()
            .map(|s| (s, self.guest_mem_mib));
        let mut status = HostStatus {
            data_dir: self.parts.data_dir.clone(),
            started_at: self.started_at,
            now,
            paused,
            paused_until: self.pause_until.map(|p| p.0),
            state: if paused || self.parts.store.withheld().is_some() {
                Some(State::S5)
            } else {
                self.guest_state().map(|(s, _)| s)
            },
            last: self.last,
            samples: self.parts.store.sample_count(),
            guest,
            predictions: Vec::new(),
            method: MethodId::default(),
            owner_load: self.parts.owner_load.clone(),
            containment: self.parts.supervisor.containment().to_string(),
            samples_lost_at_start: self.parts.store.torn_tail().map_or(0, |t| t.lost),
            schedule: self.schedule.clone(),
            withheld: self.parts.store.withheld(),
            pause_after_job: self.pause_after_job.is_some(),
            why_idle: self.why_idle(),
            throttle: self.parts.supervisor.throttle_mode(),
        };
        // `status` never waits for the history: it shows the predictions
        // of the last refresh (at most a minute old, or from before an
        // import) and asks for a new one in the background. Only the very
        // first `status` computes them while the caller waits.
        let requests: Vec<ReportRequest> = STATUS_WINDOWS_SECS
            .iter()
            .map(|&w| ReportRequest::new(self.reader.predict_request(now, w, 0)))
            .collect();
        let cache = self.series_cache.clone();
        let (cached, fresh) = cache.status_predictions(now);
        match cached {
            Some(predictions) => {
                status.predictions = predictions;
                let _ = reply.send(status);
                if !fresh && cache.start_refresh() {
                    self.parts.tracker.spawn_blocking(move || {
                        cache.refresh_status_predictions(now, &requests);
                        cache.refreshed();
                    });
                }
            }
            None => {
                self.parts.tracker.spawn_blocking(move || {
                    status.predictions = cache.refresh_status_predictions(now, &requests);
                    let _ = reply.send(status);
                });
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
