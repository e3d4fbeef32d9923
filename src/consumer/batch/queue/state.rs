//! The batch queue's pure core: every batch, its tasks, which host runs
//! what, and every decision about them. Its inputs are the driver's calls
//! (a command, a survey's answer, a member's news, an attempt's news or end,
//! a judged copy, a copied result, a timer tick), each with the time as [`Now`]; its output is
//! the list of [`Action`]s the driver must perform (launch, re-attach, kill,
//! persist, emit, survey, judge, promote, copy...).
//!
//! It knows no tokio, no sled, no files and no clock: the driver reads the
//! clock, does the I/O and feeds the results back as inputs, so the core is
//! tested one input at a time (`queue::tests`). It is split by concern:
//! `rounds` (when to look at the pool and whom to ask), `placement`,
//! `later` (a task held for a host's later window), `retries`, `avoid` (how long a task keeps off the hosts it failed on), `deadlines`, `quorum` (state in `trust`), `outputs`,
//! `checkpoints`, `restore` and `commands`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libp2p::PeerId;

use super::trust::{Judge, Trust};
use super::types::{AvoidLapses, Held, LaterTr, Round, TaskEvent, IDLE_SURVEY_EVERY, SURVEY_GAP};
use crate::consumer::batch::attempt::AttemptPlan;
use crate::consumer::batch::checkpoint::Intervals;
use crate::consumer::batch::record::{BatchRecord, TaskRecord, TaskState};
use crate::consumer::batch::verify::Provenance;
use crate::consumer::job_pool::JobSettings;
use crate::consumer::survey::{SurveyQuery, SurveyedHost};
use crate::model::ids::{BatchId, JobId};
use crate::model::sched::window::WindowRule;
use crate::model::trust::Outcome;
use crate::net::protocol::CheckpointOrder;

/// The time of an input, read by the driver once per input.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Monotonic time, for the queue's own gaps (between surveys, the
    /// freshness of a ranking, between deadline checks).
    pub mono: Instant,
    /// Wall time, Unix seconds, for the records.
    pub unix_secs: i64,
    /// Wall time, Unix milliseconds, for new batch ids.
    pub unix_ms: u64,
}

/// A task's command line, environment and inputs (local file, remote path).
pub type TaskParts = (Vec<String>, Vec<(String, String)>, Vec<(PathBuf, String)>);

/// A new attempt for the driver to run: everything it hands to the host.
#[derive(Debug)]
pub struct Launch {
    pub batch: BatchId,
    pub task: u32,
    pub plan: AttemptPlan,
    pub record: BatchRecord,
    pub parts: TaskParts,
    /// The checkpoint order, for a batch with `--checkpoint`.
    pub order: Option<CheckpointOrder>,
    /// The task's latest checkpoint as an input (file, remote path): the
    /// driver adds it when the file is there.
    pub resume: Option<(PathBuf, String)>,
}

/// What the core asks its driver to do, in order.
#[must_use = "the driver performs every action"]
#[derive(Debug)]
pub enum Action {
    /// Survey the pool and answer with [`super::QueueMsg::Surveyed`],
    /// asking none of `skip` (hosts that could take none of the work now).
    Survey {
        query: SurveyQuery,
        skip: Vec<PeerId>,
    },
    /// Run a new attempt (its hand-over made durable first).
    Launch(Box<Launch>),
    /// Follow an attempt an earlier run of the node handed over.
    Reattach {
        batch: BatchId,
        task: u32,
        plan: Box<AttemptPlan>,
    },
    /// Cancel an attempt in flight (its end comes back as `Cancelled`).
    Kill {
        batch: BatchId,
        task: u32,
        host: PeerId,
    },
    /// Write a task's record through to the store.
    Persist {
        batch: BatchId,
        task: u32,
        record: Box<TaskRecord>,
    },
    /// Tell watchers how a task stands.
    Emit(Box<TaskEvent>),
    /// Flush the store off the loop.
    Flush,
    /// Digest a landed copy of a verified task, off the loop.
    Judge(Box<Judge>),
    /// Move the staging directory of the attempt that won a task (the
    /// first to land) into the task's results, by one rename that never
    /// replaces a result already there; done before the task's record says
    /// so. A failure comes back as [`super::QueueMsg::LandFailed`].
    Land {
        batch: BatchId,
        task: u32,
        from: PathBuf,
        to: PathBuf,
    },
    /// Remove the staging directory of an attempt that landed after
    /// another attempt of its task had won: its files never reach the
    /// task's results.
    Discard { dir: PathBuf },
    /// Rename an accepted copy into the task's results with its provenance.
    Promote {
        batch: BatchId,
        task: u32,
        from: PathBuf,
        to: PathBuf,
        provenance: Box<Provenance>,
    },
    /// Copy a landed task's results to the batch's output directory.
    CopyOut {
        batch: BatchId,
        task: u32,
        from: PathBuf,
        to: PathBuf,
    },
    /// The batch's copies to its output directory have all ended: answer
    /// whoever waits for them.
    CopiesDrained(BatchId),
    /// Record that `peer` gets no more of `batch` (durably).
    Taint { batch: BatchId, peer: PeerId },
    /// Count one checked result of `peer` (durably).
    Reputation { peer: PeerId, valid: bool },
    /// Count how one attempt on `peer` ended (durably), in every verify
    /// mode: what demotes and excludes a host that lies.
    Conduct { peer: PeerId, outcome: Outcome },
    /// Ask each of `peers` its TR for a window of `length_secs` starting at
    /// each of `starts_unix` (`later`), and answer with
    /// [`super::QueueMsg::Later`].
    AskLater {
        peers: Vec<PeerId>,
        starts_unix: Vec<i64>,
        length_secs: u64,
        mem_mib: u64,
    },
}

pub(super) struct LiveBatch {
    pub(super) record: BatchRecord,
    pub(super) tasks: Vec<TaskRecord>,
    /// Attempts of its tasks in flight.
    pub(super) running: u32,
}

impl LiveBatch {
    /// How many of its tasks are in `state`.
    pub(super) fn count_in(&self, state: TaskState) -> usize {
        self.tasks.iter().filter(|t| t.state == state).count()
    }

    /// Attempts it may still start under its `max_running` (unbounded
    /// without one).
    pub(super) fn room(&self) -> usize {
        self.record.max_running.map_or(usize::MAX, |m| {
            (m as usize).saturating_sub(self.running as usize)
        })
    }

    /// The numbers of the tasks in `state`, lowest first.
    pub(super) fn tasks_in(&self, state: TaskState) -> Vec<u32> {
        self.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.state == state)
            .map(|(i, _)| i as u32)
            .collect()
    }
}

/// The staging directory's name inside a batch's results directory: a dot
/// name, so no task's directory (named by its number) is ever called so.
pub const LANDING_DIR: &str = ".landing";

/// Whether tail copies are on when the queue is not told otherwise: on.
/// Over 32 seeds of six desktop pools, the shared lab samples and the VMs
/// they lengthened no pool's mean makespan, shortened those where owners
/// differ and the tail is long, and cost 0.3-2.6 % of the useful CPU on
/// the desktops and VMs (docs/scheduling.md, "Tail copies on by
/// default", issue 28); `[batch] tail_copies = false` turns them off.
/// Here, not in `tail.rs`, so that the rule's module depends on the
/// queue's state and not the other way; `gleaner simulate` takes its
/// default from here too.
pub const TAIL_COPIES_DEFAULT: bool = true;

/// Whether a task no free host is likely to finish waits for a host's
/// later window when the queue is not told otherwise (`later`): on. The
/// same rule in the simulator (`windows`, its holds within two hours) ends
/// office-like pools 8 % and mixed ones 4 % sooner than placing every task
/// at once (`proactive`), no other desktop pool measured later beyond
/// noise, and no desktop pool's worst seed past 1.74× the oracle (office's
/// was 2.26×) (docs/scheduling.md, "Holds within two hours").
pub const LATER_WINDOWS_DEFAULT: bool = true;
/// The unit of `later::LATER_STARTS` unless the node's config scales it
/// (`[batch] later_unit_secs`): an hour, the grain of owners' habits and
/// of the forecasts for windows that start later.
pub const LATER_UNIT_SECS: u64 = 3600;
/// The smallest unit a config may set: a minute, for tests and demos whose
/// owners' loads are scripted in minutes. The grid then reaches 24 minutes
/// on; a host answers a window within ten minutes of its last reading from
/// its present state (`baselines::later::NOW_SECS`), later ones from its
/// habit, so such a pool still sees both kinds of answer.
pub const LATER_UNIT_MIN_SECS: u64 = 60;

/// The queue's state and decisions. Owned by the driver.
pub struct QueueCore {
    /// The queue's directory: result, copy and checkpoint paths are made
    /// from it (never read here).
    pub(super) dir: PathBuf,
    pub(super) settings: JobSettings,
    pub(super) batches: BTreeMap<BatchId, LiveBatch>,
    /// Attempts in flight (a task's main attempt and its copies, by host).
    pub(super) running: HashSet<(BatchId, u32, PeerId)>,
    pub(super) hosts_in_use: HashSet<PeerId>,
    /// Hosts that refused a task for good (not allowed, too big): not
    /// offered that task again while this node runs.
    pub(super) refused_by: HashMap<(BatchId, u32), HashSet<PeerId>>,
    /// When each entry of a task's avoid list stops applying (`avoid`): a
    /// task every host has failed or killed does not wait for ever.
    pub(super) avoid_lapses: HashMap<(BatchId, u32), AvoidLapses>,
    pub(super) surveying: bool,
    pub(super) last_survey: Option<Instant>,
    /// The hosts the last survey found, and when: a host that just
    /// finished a task takes the next one without waiting for a new survey
    /// while this is fresh.
    pub(super) last_hosts: Vec<SurveyedHost>,
    pub(super) last_hosts_at: Option<Instant>,
    /// Each host's last answer, while the host is in the pool's view or
    /// runs our work: what a running batch's estimate weighs a host by when
    /// the rounds since have not asked it (it runs one of our tasks, or
    /// they only read summaries) or found no host at all. Without it a
    /// batch's estimate vanished after its first round as soon as every
    /// host was busy with it (`estimate_hosts`).
    pub(super) answers: BTreeMap<PeerId, SurveyedHost>,
    /// Draws for the `random` policy and the adaptive check, seeded by the
    /// driver.
    pub(super) rng: rand_chacha::ChaCha8Rng,
    pub(super) last_deadline_check: Option<Instant>,
    /// Set when something changed that may let a task start: the next
    /// round asks a few hosts per placeable task (`rounds`).
    pub(super) wanted: bool,
    /// What the round in flight does (ask, news, look).
    pub(super) round: Round,
    /// How long the queue waits for its next look while nothing changes:
    /// doubles after each look that finds nothing new.
    pub(super) look_every: Duration,
    /// Members whose announcement showed a slot newly free that waiting
    /// work could take, for the next round to ask (at most `ASKS_MAX`).
    pub(super) news: HashSet<PeerId>,
    /// Least time between rounds asked for by news alone: doubles after
    /// each that started nothing, back to the least when one starts work.
    pub(super) news_gap: Duration,
    /// Hosts a round asked that gave no response (a timeout, no route):
    /// asked again once their wait is over ([`super::silences::Silences`]).
    pub(super) silent: super::silences::Silences,
    /// Rounds each running task's deadline risk has asked for (bounded).
    pub(super) deadline_asks: HashMap<(BatchId, u32), u8>,
    /// Checkpoint intervals: each host's last TR and the measured cost of
    /// each batch's checkpoints (`batch::checkpoint`).
    pub(super) checkpoints: Intervals,
    /// Verified results and the hosts' reputation (`trust`, `quorum`).
    pub(super) trust: Trust,
    /// The TR each running attempt's host claimed for its window when the
    /// attempt was handed over (from the survey that placed it), to hold
    /// the host to it when the attempt ends. Not kept across restarts: a
    /// re-attached attempt is counted without a claim.
    pub(super) claimed_tr: HashMap<(BatchId, u32, PeerId), f64>,
    /// Where each attempt in flight of a task taken as it comes (no
    /// verification) lands: its own staging directory
    /// ([`QueueCore::landing_dir`]), so that two attempts of a task never
    /// write the same place and only the one `retries` picks is moved into
    /// the task's results.
    pub(super) staging: HashMap<(BatchId, u32, PeerId), PathBuf>,
    /// Per batch, copies to its output directory in flight (never 0: the
    /// entry goes).
    pub(super) copies_out: HashMap<BatchId, u32>,
    /// Free hosts left over in a batch's tail run extra copies of the
    /// running tasks most at risk (`tail`).
    pub(super) tail_copies: bool,
    /// Queued tasks held for a host's later window (`later`).
    pub(super) holds: HashMap<(BatchId, u32), Held>,
    /// When each queued task was first held, while it has not started
    /// since (`later`: past the rule's `max_held_secs` it is placed as
    /// usual).
    pub(super) held_since: HashMap<(BatchId, u32), i64>,
    /// Hosts' TR for windows that start later, by run length (`later`).
    pub(super) later: HashMap<u64, LaterTr>,
    /// Tasks the placement under way leaves waiting for those answers
    /// (`later`); empty between placements.
    pub(super) deferred: HashSet<(BatchId, u32)>,
    /// Hosts whose held window has come, for the next round to ask
    /// (`later`).
    pub(super) due: HashSet<PeerId>,
    /// How windows are weighed (the model's rule, the simulator's default);
    /// `None` while holds are off.
    pub(super) window_rule: Option<WindowRule>,
    /// The unit of the later-start grid, seconds (`later`: an hour unless
    /// `[batch] later_unit_secs` scales it for a test or a demo).
    pub(super) later_unit_secs: i64,
    /// The time of the input being handled.
    pub(super) now: Now,
    /// The actions decided while handling it.
    out: Vec<Action>,
}

impl QueueCore {
    /// An empty queue on `dir`; `trust` is what the store remembers of
    /// verified batches and hosts. Batches come back through
    /// [`QueueCore::restore_batch`].
    pub fn new(
        dir: &Path,
        settings: JobSettings,
        rng: rand_chacha::ChaCha8Rng,
        trust: Trust,
        now: Now,
    ) -> QueueCore {
        QueueCore {
            dir: dir.to_path_buf(),
            settings,
            batches: BTreeMap::new(),
            running: HashSet::new(),
            hosts_in_use: HashSet::new(),
            refused_by: HashMap::new(),
            avoid_lapses: HashMap::new(),
            surveying: false,
            last_survey: None,
            last_hosts: Vec::new(),
            last_hosts_at: None,
            answers: BTreeMap::new(),
            rng,
            last_deadline_check: None,
            wanted: true,
            round: Round::Ask,
            look_every: IDLE_SURVEY_EVERY,
            news: HashSet::new(),
            news_gap: SURVEY_GAP,
            silent: super::silences::Silences::default(),
            deadline_asks: HashMap::new(),
            checkpoints: Intervals::default(),
            trust,
            claimed_tr: HashMap::new(),
            staging: HashMap::new(),
            copies_out: HashMap::new(),
            tail_copies: TAIL_COPIES_DEFAULT,
            holds: HashMap::new(),
            held_since: HashMap::new(),
            later: HashMap::new(),
            deferred: HashSet::new(),
            due: HashSet::new(),
            window_rule: LATER_WINDOWS_DEFAULT.then(WindowRule::default),
            later_unit_secs: LATER_UNIT_SECS as i64,
            now,
            out: Vec::new(),
        }
    }

    /// Starts handling an input at `now`.
    pub(super) fn at(&mut self, now: Now) {
        self.now = now;
    }

    /// The actions decided for the input just handled.
    #[must_use = "the driver performs every action"]
    pub(super) fn actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.out)
    }

    pub(super) fn push(&mut self, action: Action) {
        self.out.push(action);
    }

    pub(super) fn batch_dir(&self, batch: BatchId) -> PathBuf {
        self.dir.join(batch.to_string())
    }

    pub fn results_dir(&self, batch: BatchId) -> PathBuf {
        self.batch_dir(batch).join("results")
    }

    /// Where the attempts of `batch`'s tasks taken as they come land, one
    /// directory per job id, before one of them is moved into the task's
    /// results: inside the results directory, so that the move is a rename
    /// on one filesystem. Whatever is there when the node starts is stale
    /// (every attempt re-attached fetches again): the driver removes it.
    pub fn landing_root(&self, batch: BatchId) -> PathBuf {
        self.results_dir(batch).join(LANDING_DIR)
    }

    /// The staging directory of the attempt `job_id`.
    pub(super) fn landing_dir(&self, batch: BatchId, job_id: &JobId) -> PathBuf {
        self.landing_root(batch).join(job_id.as_str())
    }

    pub fn task(&self, batch: BatchId, task: u32) -> Option<&TaskRecord> {
        self.batches.get(&batch)?.tasks.get(task as usize)
    }

    /// Every batch's id, oldest first.
    pub fn batch_ids(&self) -> Vec<BatchId> {
        self.batches.keys().copied().collect()
    }

    /// Writes a task's record through and tells watchers.
    pub(super) fn persist(&mut self, batch: BatchId, task: u32) {
        self.persist_quietly(batch, task);
        self.emit(batch, task, None);
    }

    /// Writes a task's record through without telling watchers.
    pub(super) fn persist_quietly(&mut self, batch: BatchId, task: u32) {
        let Some(t) = self.task(batch, task) else {
            return;
        };
        let record = Box::new(t.clone());
        self.push(Action::Persist {
            batch,
            task,
            record,
        });
    }

    /// Tells watchers how a task stands, with a host's job event when one
    /// is the news.
    pub(super) fn emit(&mut self, batch: BatchId, task: u32, event: Option<String>) {
        let Some(t) = self.task(batch, task) else {
            return;
        };
        let event = TaskEvent {
            batch,
            task,
            state: t.state,
            host: t.host.clone(),
            attempts: t.attempts,
            exit_status: t.exit_status,
            reason: t.reason.clone(),
            event,
            at_unix: self.now.unix_secs,
            hold: self.hold_view(batch, task),
        };
        self.push(Action::Emit(Box::new(event)));
    }

    /// Kills every attempt in flight of `batch` (and of `task`, when given).
    pub(super) fn kill_running(&mut self, batch: BatchId, task: Option<u32>) {
        let mut kills: Vec<(u32, PeerId)> = self
            .running
            .iter()
            .filter(|k| k.0 == batch && task.is_none_or(|t| k.1 == t))
            .map(|k| (k.1, k.2))
            .collect();
        kills.sort_unstable();
        for (task, host) in kills {
            self.push(Action::Kill { batch, task, host });
        }
    }

    /// Every host's checked results as this node has counted them.
    pub fn reputation(&self) -> HashMap<PeerId, crate::model::trust::HostTrack> {
        self.trust.reputation.clone()
    }

    /// An attempt's news that changes nothing but what watchers see: the
    /// host took the job, or reported an event of it.
    #[must_use = "the driver performs every action"]
    pub fn on_news(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        event: Option<String>,
    ) -> Vec<Action> {
        self.at(now);
        self.emit(batch, task, event);
        self.actions()
    }

    /// The host of a running attempt sent job events past the attempt's
    /// budget (the inbox dropped them): an offence in its record, and the
    /// task's watchers are told.
    #[must_use = "the driver performs every action"]
    pub fn on_flood(
        &mut self,
        now: Now,
        batch: BatchId,
        task: u32,
        host: PeerId,
        dropped: u64,
    ) -> Vec<Action> {
        self.at(now);
        let outcome = Outcome::Offence(crate::model::trust::Offence::Flood);
        self.trust.conduct(host, outcome);
        self.push(Action::Conduct {
            peer: host,
            outcome,
        });
        let text = format!("{host}: {dropped} job events past its budget dropped");
        self.emit(batch, task, Some(text));
        self.actions()
    }

    /// A peer went past one of this node's budgets (the network cut it off,
    /// or it read past its allowance of our files): an offence in its
    /// record, whatever role it played, so that as a host it is demoted and
    /// then excluded like any other offender.
    #[must_use = "the driver performs every action"]
    pub fn on_overrun(&mut self, now: Now, peer: PeerId) -> Vec<Action> {
        self.at(now);
        let outcome = Outcome::Offence(crate::model::trust::Offence::Flood);
        self.trust.conduct(peer, outcome);
        self.push(Action::Conduct { peer, outcome });
        self.actions()
    }
}
