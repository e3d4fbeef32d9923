//! The pool host: the actor that serves this machine to the pool. It owns the
//! jobs peers submitted here (their ordered event queues, their directories,
//! output fetches), answers peers' reliability queries with a typed forecast
//! from the host loop, and publishes this host's summary when its
//! [`Pacer`] says (a change of state, slot, Γ step or images held; a
//! heartbeat), its ladders computed and its images listed off the loop,
//! and keeps the pool's prior fresh for its answers ([`pool_prior`]).
//!
//! Inputs, selected into one closed [`Event`]: the network's requests, the
//! host loop's guest events and snapshots, [`PoolHostCommand`]s, and the end
//! of a job's preparation. Job events hosts send to *us* as a consumer go
//! straight to the consumer's [`Inbox`], where the attempt that expects them
//! waits; members' announcements go on to the consumer's batch queue as
//! [`MemberNews`] (a slot newly free lets waiting work start), and peers'
//! overruns of their budgets to the consumer, which keeps their records.
//!
//! A peer's job is accepted at once and then *prepared* in a tracked task:
//! its inputs come from the cache ([`crate::data::Cache`]) or are fetched
//! from the consumer and verified ([`crate::data::fetch_input`]), then copied
//! into a directory of the job's own; only then does the host loop start the
//! guest (which moves them into its work directory). One job is prepared at
//! a time, and the host answers `Busy` meanwhile.
//! This module must not know the Swarm (that is `net`), HTTP (`control`), nor
//! how a guest is run (the host loop starts it).

pub mod events;
pub mod outputs;
pub mod pool_prior;
mod prepare;
pub mod publish;
pub mod remote_jobs;
mod serving;

use crate::clock::Clock;
use crate::consumer::{Delivery, HostJobEvent, Inbox, MemberNews};
use crate::data::Cache;
use crate::guest::GuestEvent;
use crate::model::admit::{admit, GuestAsk};
use crate::model::budget::Overrun;
use crate::model::ids::JobId;
use crate::model::state::State;
use crate::net::protocol::{
    JobEventKind, JobRequest, JobResponse, JobSubmit, RejectReason, RemoteJobState,
    MEMORY_LEVELS_MIB,
};
use crate::net::{LocalStatus, NetEvent, NetHandle, SummaryBody};
use crate::node::config::Config;
use crate::node::host_loop::{GuestJob, GuestOrigin, GuestStart, HostHandle, HostSnapshot};
use crate::node::Hardware;
use events::{spawn_event_sender, wire_event};
use libp2p::PeerId;
use prepare::{prepare_inputs, ImageAsked, ImageOrder, PreparedInputs};
use publish::{summary_body, Pacer, StatusKey, LADDER_ASKS_SECS};
use remote_jobs::{
    check_submit, remove_job_dir, RemoteJob, RemoteJobSummary, RemoteJobs, REMOTE_PREFIX,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Most members whose benchmark claims are kept: a pool is a few hundred
/// hosts at most, and a flood of new peer ids must not grow the map.
const MAX_SCORE_CLAIMS: usize = 4096;

/// The pacer's wait when it has nothing to look at (any event looks again).
const LONG_WAIT: std::time::Duration = std::time::Duration::from_secs(3_600);

/// A request to the pool host.
#[derive(Debug)]
pub enum PoolHostCommand {
    /// The peers' jobs this host keeps (running or with outputs to fetch).
    RemoteJobs {
        reply: oneshot::Sender<Vec<RemoteJobSummary>>,
    },
}

/// The cloneable way to the pool host.
#[derive(Debug, Clone)]
pub struct PoolHostHandle {
    commands: mpsc::Sender<PoolHostCommand>,
}

impl PoolHostHandle {
    /// The peers' jobs kept here; empty once the node stops.
    pub async fn remote_jobs(&self) -> Vec<RemoteJobSummary> {
        let (reply, rx) = oneshot::channel();
        if self
            .commands
            .send(PoolHostCommand::RemoteJobs { reply })
            .await
            .is_err()
        {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

/// Everything the pool host reacts to.
#[derive(Debug)]
enum Event {
    Net(NetEvent),
    Guest(GuestEvent),
    HostChanged,
    Command(PoolHostCommand),
    /// A peer's job is prepared (or could not be).
    Prepared(Prepared),
    /// The pacer's time to look again.
    PaceTick,
    /// Our summary's reliability part is computed (with the image cache's
    /// count of changes it is as of).
    Summarised(Box<(SummaryBody, u64)>),
    Shutdown,
}

/// The end of a job's preparation.
#[derive(Debug)]
struct Prepared {
    local_id: JobId,
    result: Result<PreparedInputs, String>,
}

/// A job accepted and being prepared: what the guest will run.
#[derive(Debug)]
struct Preparing {
    local_id: JobId,
    job: GuestJob,
    /// Where its inputs are copied; removed once the guest started (or not).
    stage_dir: PathBuf,
    /// Its consumer cancelled it while its inputs were prepared.
    cancelled: bool,
}

/// What the pool host is made of.
pub struct PoolHostParts {
    pub config: Config,
    pub net: NetHandle,
    pub host: HostHandle,
    /// Where hosts' events for our own jobs (as a consumer) are delivered.
    pub job_events: Inbox,
    /// Where members' announcements go for our own batch queue (as a
    /// consumer): a slot newly free lets waiting work start at once.
    pub member_news: mpsc::Sender<MemberNews>,
    /// Where peers' overruns of their budgets go, for our records of them
    /// (the consumer keeps them), never waited on: a full queue drops one.
    pub overruns: mpsc::Sender<(PeerId, Overrun)>,
    pub clock: Arc<dyn Clock>,
    pub tracker: TaskTracker,
    pub hardware: Hardware,
    /// Peers' inputs by hash.
    pub cache: Cache,
    /// Where the host loop puts job directories (`<data dir>/jobs`).
    pub jobs_dir: PathBuf,
    /// Where jobs' images are unpacked; `None`: this host runs no images
    /// (`[guest] images = "deny"`, or the cache could not be opened) and
    /// refuses jobs that bring one.
    pub images: Option<Arc<crate::image::ImageCache>>,
}

/// The pool host's inputs.
pub struct PoolHostInputs {
    pub net: mpsc::Receiver<NetEvent>,
    pub guest_events: mpsc::UnboundedReceiver<GuestEvent>,
    pub shutdown: CancellationToken,
}

/// The pool host's state between events.
pub struct PoolHost {
    parts: PoolHostParts,
    commands: mpsc::Receiver<PoolHostCommand>,
    snapshot: watch::Receiver<HostSnapshot>,
    remote: RemoteJobs,
    jobs_started: u64,
    /// The benchmark score each current member claims (ours apart), at most
    /// [`MAX_SCORE_CLAIMS`]; P is measured against their upper quantile
    /// ([`crate::model::sched::power::reference_score`]), so no one member's
    /// claim sets the scale.
    score_claims: HashMap<PeerId, u64>,
    /// Outputs' hashes while unchanged (a fetch at offset 0 asks for one).
    output_hashes: Arc<outputs::HashMemo>,
    /// When to publish our summary (power included, so peers never rank
    /// us by a stale Γ).
    pacer: Pacer,
    /// A summary is being computed (one at a time).
    summarising: bool,
    summary_tx: mpsc::Sender<(SummaryBody, u64)>,
    summary_rx: mpsc::Receiver<(SummaryBody, u64)>,
    /// The job being prepared, if any (one at a time).
    preparing: Option<Preparing>,
    prepared_tx: mpsc::Sender<Prepared>,
    prepared_rx: mpsc::Receiver<Prepared>,
    /// Stops preparations at shutdown.
    shutdown: CancellationToken,
}

impl PoolHost {
    pub fn new(parts: PoolHostParts) -> (PoolHost, PoolHostHandle) {
        let (tx, commands) = mpsc::channel(16);
        let snapshot = parts.host.snapshot();
        let (prepared_tx, prepared_rx) = mpsc::channel(4);
        let (summary_tx, summary_rx) = mpsc::channel(1);
        let pacer = Pacer::new(parts.config.net.announce_interval);
        (
            PoolHost {
                parts,
                commands,
                snapshot,
                remote: RemoteJobs::default(),
                jobs_started: 0,
                score_claims: HashMap::new(),
                output_hashes: Arc::default(),
                pacer,
                summarising: false,
                summary_tx,
                summary_rx,
                preparing: None,
                prepared_tx,
                prepared_rx,
                shutdown: CancellationToken::new(),
            },
            PoolHostHandle { commands: tx },
        )
    }

    pub async fn run(mut self, mut inputs: PoolHostInputs) {
        self.shutdown = inputs.shutdown.clone();
        pool_prior::spawn(&self.parts, inputs.shutdown.clone());
        self.pace();
        loop {
            // No look while a summary is computed: its end looks again.
            let look = self
                .pacer
                .next_look(self.status_key(&self.local_status()))
                .filter(|_| !self.summarising)
                .map(tokio::time::Instant::from_std);
            let wake = look.unwrap_or_else(|| tokio::time::Instant::now() + LONG_WAIT);
            let event = tokio::select! {
                biased;
                _ = inputs.shutdown.cancelled() => Event::Shutdown,
                Some(e) = inputs.guest_events.recv() => Event::Guest(e),
                Some(c) = self.commands.recv() => Event::Command(c),
                Ok(()) = self.snapshot.changed() => Event::HostChanged,
                Some(p) = self.prepared_rx.recv() => Event::Prepared(p),
                Some(b) = self.summary_rx.recv() => Event::Summarised(Box::new(b)),
                () = tokio::time::sleep_until(wake), if look.is_some() => Event::PaceTick,
                Some(n) = inputs.net.recv() => Event::Net(n),
            };
            match event {
                Event::Net(n) => self.on_net(n).await,
                Event::Guest(e) => self.forward_to_consumer(&e),
                Event::HostChanged | Event::PaceTick => self.pace(),
                Event::Summarised(body) => self.publish(body.0, body.1),
                Event::Command(PoolHostCommand::RemoteJobs { reply }) => {
                    let _ = reply.send(self.remote.summaries());
                }
                Event::Prepared(p) => self.start_prepared(p).await,
                Event::Shutdown => break,
            }
        }
    }

    fn now(&self) -> i64 {
        self.parts.clock.unix_secs()
    }

    async fn on_net(&mut self, event: NetEvent) {
        match event {
            NetEvent::ReliabilityQuery { peer, query, reply } => {
                // Each direct query, so a test (and an operator) can count
                // what a consumer's placement costs the pool.
                tracing::debug!(consumer = %peer, "reliability query");
                self.answer_reliability(peer, query, reply)
            }
            NetEvent::JobRequest {
                peer,
                request,
                reply,
            } => match request {
                JobRequest::Submit(submit) => {
                    let answer = match self.accept_remote(peer, submit, None).await {
                        Ok(()) => JobResponse::Accepted,
                        Err(reason) => JobResponse::Rejected(reason),
                    };
                    let _ = reply.send(answer);
                }
                JobRequest::SubmitInImage { job, image } => {
                    let image = Some(ImageAsked::Whole(image));
                    let answer = match self.accept_remote(peer, *job, image).await {
                        Ok(()) => JobResponse::Accepted,
                        Err(reason) => JobResponse::Rejected(reason),
                    };
                    let _ = reply.send(answer);
                }
                JobRequest::SubmitInLayers { job, image } => {
                    let image = Some(ImageAsked::Layers(image));
                    let answer = match self.accept_remote(peer, *job, image).await {
                        Ok(()) => JobResponse::Accepted,
                        Err(reason) => JobResponse::Rejected(reason),
                    };
                    let _ = reply.send(answer);
                }
                JobRequest::Fetch {
                    job_id,
                    name,
                    offset,
                    len,
                } => self.serve_fetch(peer, &job_id, name, offset, len, reply),
                JobRequest::Query { job_id } => {
                    let answer = match self.remote.by_consumer(peer, &job_id) {
                        Some(job) => JobResponse::JobState(match &job.ended {
                            Some(kind) => RemoteJobState::Ended(kind.clone()),
                            None => RemoteJobState::Running,
                        }),
                        None => JobResponse::NotFound,
                    };
                    let _ = reply.send(answer);
                }
                JobRequest::Cancel { job_id } => {
                    let local = self
                        .remote
                        .by_consumer(peer, &job_id)
                        .map(|job| (job.local_id.clone(), job.ended.is_some()));
                    let answer = match local {
                        Some((local_id, ended)) => {
                            let preparing =
                                self.preparing.as_mut().filter(|p| p.local_id == local_id);
                            if let Some(p) = preparing {
                                // Not started yet: it will not be.
                                p.cancelled = true;
                            } else if !ended {
                                tracing::info!(job = %local_id, consumer = %peer, "cancelled by its consumer");
                                self.parts.host.cancel(local_id).await;
                            }
                            JobResponse::Cancelled
                        }
                        None => JobResponse::NotFound,
                    };
                    let _ = reply.send(answer);
                }
                JobRequest::Event {
                    job_id,
                    seq,
                    time_unix,
                    kind,
                } => {
                    // An event of a job *we* submitted elsewhere: straight to
                    // the consumer's attempt that waits for it (a map lookup
                    // and a channel send; nothing is spawned per event).
                    let event = HostJobEvent {
                        seq,
                        time_unix,
                        kind,
                    };
                    match self.parts.job_events.offer(peer, &job_id, event) {
                        Delivery::Delivered => {
                            let _ = reply.send(JobResponse::EventAck);
                        }
                        Delivery::NotWaited => {
                            let _ = reply.send(JobResponse::NotFound);
                        }
                        // Past the attempt's budget: no answer (the stream
                        // is dropped), which costs us least; the attempt
                        // counts it against the host.
                        Delivery::OverBudget => drop(reply),
                    }
                }
            },
            NetEvent::MemberAnnounced(member) => {
                // Never waits: a full queue drops it, and the consumer's
                // next look at the summaries finds what it said.
                let _ = self.parts.member_news.try_send(MemberNews {
                    peer: member.peer,
                    slot_free: member.status.slot_free,
                    state: member.status.state,
                });
                let known = self.score_claims.contains_key(&member.peer);
                if known || self.score_claims.len() < MAX_SCORE_CLAIMS {
                    self.score_claims
                        .insert(member.peer, member.status.benchmark_score);
                }
                self.pace();
            }
            NetEvent::MemberExpired(peer) => {
                self.score_claims.remove(&peer);
                self.pace();
            }
            NetEvent::Overrun { peer, what } => {
                let _ = self.parts.overruns.try_send((peer, what));
            }
        }
    }

    /// The score P is measured against: the reference of every current
    /// member's claim and ours.
    fn reference_score(&self) -> u64 {
        let own = self.parts.hardware.benchmark_score;
        let claims: Vec<u64> = self
            .score_claims
            .values()
            .copied()
            .chain(std::iter::once(own))
            .collect();
        crate::model::sched::power::reference_score(&claims).unwrap_or(own)
    }

    /// Γ = P·A in thousandths, with A from the last reading's owner load.
    fn power_milli(&self, snapshot: &HostSnapshot) -> u32 {
        let own = self.parts.hardware.benchmark_score;
        let load = snapshot.cpu.unwrap_or(0.0);
        crate::monitor::bench::effective_power_milli(own, self.reference_score(), load)
    }

    fn local_status(&self) -> LocalStatus {
        let snapshot = self.snapshot.borrow().clone();
        let hw = self.parts.hardware;
        LocalStatus {
            logical_cpus: hw.logical_cpus,
            memory_mib: hw.memory_mib,
            benchmark_score: hw.benchmark_score,
            relative_power_milli: self.power_milli(&snapshot),
            state: snapshot.state.unwrap_or(State::S1),
            slot_free: snapshot.slot_free,
        }
    }

    fn status_key(&self, status: &LocalStatus) -> StatusKey {
        StatusKey::new(status.state, status.slot_free, status.relative_power_milli)
            .holding(publish::holdings(self.parts.images.as_deref()))
    }

    /// Starts computing a summary when the pacer says one is due: its
    /// ladders come from this host's own predictor, off the loop.
    fn pace(&mut self) {
        let key = self.status_key(&self.local_status());
        if self.summarising || !self.pacer.due(std::time::Instant::now(), key) {
            return;
        }
        self.summarising = true;
        let reader = self.parts.host.reader().clone();
        let paused = self.snapshot.borrow().paused;
        let at = self.now();
        let speed = self.speed_milli();
        let done = self.summary_tx.clone();
        let images = self.parts.images.clone();
        self.parts.tracker.spawn(async move {
            let mut levels = Vec::with_capacity(MEMORY_LEVELS_MIB.len());
            for level in MEMORY_LEVELS_MIB {
                let mut answers = Vec::with_capacity(LADDER_ASKS_SECS.len());
                for secs in LADDER_ASKS_SECS {
                    // A paused host has no ladder to offer.
                    let answer = if paused {
                        None
                    } else {
                        reader.reliability(at, secs, u64::from(level)).await.ok()
                    };
                    answers.push(answer);
                }
                levels.push((level, answers));
            }
            let (holdings, held) = publish::images_held(images.as_deref());
            let _ = done
                .send((summary_body(at, speed, &levels, &held), holdings))
                .await;
        });
    }

    /// Publishes a computed summary with the status as it is now, and tells
    /// the pacer.
    fn publish(&mut self, body: SummaryBody, holdings: u64) {
        self.summarising = false;
        let status = self.local_status();
        let key = self.status_key(&status).holding(holdings);
        // A full network queue drops this one; counted as published all the
        // same, so the pacer waits for the next change or heartbeat instead
        // of computing again at once.
        if self.parts.net.try_publish(status, body).is_err() {
            tracing::debug!("summary not handed to the network task");
        }
        self.pacer
            .published(std::time::Instant::now(), key, rand::random::<f64>());
        // The status may have moved while the ladders were computed.
        self.pace();
    }

    /// P in thousandths: our benchmark against the pool's reference.
    fn speed_milli(&self) -> u32 {
        crate::monitor::bench::effective_power_milli(
            self.parts.hardware.benchmark_score,
            self.reference_score(),
            0.0,
        )
    }

    /// Accepts a peer's job if this host can take it, and starts preparing
    /// its inputs; the guest starts when they are ready ([`Self::start_prepared`]).
    async fn accept_remote(
        &mut self,
        consumer: PeerId,
        submit: JobSubmit,
        image: Option<ImageAsked>,
    ) -> Result<(), RejectReason> {
        let guest_cfg = &self.parts.config.guest;
        let consumer_job_id = check_submit(&submit, guest_cfg)?;
        let image = ImageOrder::checked(image, self.parts.images.as_ref())?;
        if self.preparing.is_some() {
            return Err(RejectReason::Busy);
        }
        // The host loop judges the same rule again when the guest starts;
        // this refuses early what would only be refused after a long fetch.
        let facts = self.snapshot.borrow().admission_facts(guest_cfg.enabled);
        let ask = GuestAsk {
            origin: GuestOrigin::Remote,
            mem_mib: submit.memory_mib,
            max_mem_mib: guest_cfg.max_mem_mib,
        };
        admit(&facts, &ask)?;
        self.jobs_started += 1;
        let local_id = JobId::new(format!(
            "{}{}-{}",
            REMOTE_PREFIX,
            self.now(),
            self.jobs_started
        ))
        .map_err(|e| RejectReason::Invalid(e.to_string()))?;
        let job = GuestJob {
            argv: submit.argv,
            env: submit.env,
            mem_mib: submit.memory_mib,
            runtime_secs: Some(submit.wall_time_limit_secs),
            inputs: Vec::new(),
            checkpoint: submit.checkpoint,
            image: None,
        };
        let events = spawn_event_sender(self.parts.net.clone(), consumer, &self.parts.tracker);
        // Registered now, so the consumer's probes find the job while its
        // inputs arrive (stdout reads as empty until the guest writes).
        let evicted = self.remote.add(RemoteJob {
            consumer,
            consumer_job_id: consumer_job_id.clone(),
            local_id: local_id.clone(),
            dir: self.parts.jobs_dir.join(local_id.as_str()),
            outputs: submit.outputs,
            seq: 0,
            ended: None,
            events,
            usage: None,
        });
        if let Some(old) = evicted {
            self.parts
                .tracker
                .spawn_blocking(move || remove_job_dir(&old.dir));
        }
        // Named like a peer's job directory, so a start-up after a crash removes it.
        let stage_dir = self.parts.jobs_dir.join(format!("{local_id}.inputs"));
        let preparation = prepare_inputs(
            self.parts.net.clone(),
            self.parts.cache.clone(),
            consumer,
            (submit.inputs, image),
            stage_dir.clone(),
        );
        let done = self.prepared_tx.clone();
        let shutdown = self.shutdown.clone();
        let id = local_id.clone();
        self.parts.tracker.spawn(async move {
            let result = tokio::select! {
                r = preparation => r,
                _ = shutdown.cancelled() => Err("the host is shutting down".to_string()),
            };
            let _ = done
                .send(Prepared {
                    local_id: id,
                    result,
                })
                .await;
        });
        self.preparing = Some(Preparing {
            local_id: local_id.clone(),
            job,
            stage_dir,
            cancelled: false,
        });
        tracing::info!(job = %local_id, %consumer, consumer_job = %consumer_job_id, "remote job accepted; preparing its inputs");
        Ok(())
    }

    /// Starts the guest of a prepared job, or tells its consumer why not.
    async fn start_prepared(&mut self, prepared: Prepared) {
        let Some(preparing) = self.preparing.take_if(|p| p.local_id == prepared.local_id) else {
            return;
        };
        let Preparing {
            local_id,
            mut job,
            stage_dir,
            cancelled,
        } = preparing;
        let now = self.parts.clock.now();
        let outcome = match prepared.result {
            _ if cancelled => Err("cancelled by its consumer".to_string()),
            Err(reason) => Err(reason),
            Ok(inputs) => {
                tracing::info!(
                    job = %local_id,
                    fetched = inputs.fetched_bytes,
                    cached = inputs.cached_bytes,
                    stats = ?self.parts.cache.stats(),
                    "inputs ready"
                );
                self.send_job_event(
                    local_id.as_str(),
                    now.as_second(),
                    JobEventKind::InputsReady {
                        fetched_bytes: inputs.fetched_bytes,
                        cached_bytes: inputs.cached_bytes,
                    },
                );
                job.inputs = inputs.files;
                job.image = inputs.image;
                let start = GuestStart {
                    origin: GuestOrigin::Remote,
                    job_id: Some(local_id.clone()),
                    job,
                };
                self.parts
                    .host
                    .start_guest(start)
                    .await
                    .map_err(|e| format!("the host could not start it: {e}"))
            }
        };
        self.parts
            .tracker
            .spawn_blocking(move || remove_job_dir(&stage_dir));
        match outcome {
            Ok(handle) => {
                if let Some(job) = self.remote.by_local_id(local_id.as_str()) {
                    job.dir = handle.dir;
                }
                tracing::info!(job = %local_id, "remote job started");
            }
            Err(reason) => {
                tracing::warn!(job = %local_id, %reason, "remote job not started");
                self.send_job_event(
                    local_id.as_str(),
                    now.as_second(),
                    JobEventKind::NotStarted { reason },
                );
            }
        }
    }

    /// Queues an event of a remote job to its consumer, in order.
    fn send_job_event(&mut self, local_id: &str, time_unix: i64, kind: JobEventKind) {
        let Some(job) = self.remote.by_local_id(local_id) else {
            return;
        };
        // What a consumer that lost its events is told (`JobRequest::Query`).
        if kind.ends_the_job() {
            job.ended = Some(kind.clone());
        }
        let request = JobRequest::Event {
            job_id: job.consumer_job_id.to_string(),
            seq: job.seq,
            time_unix,
            kind,
        };
        job.seq += 1;
        let _ = job.events.send(request);
    }

    /// Sends a guest event of a remote job to its consumer, in order.
    fn forward_to_consumer(&mut self, e: &GuestEvent) {
        if let crate::guest::GuestEventKind::Usage {
            cpu_millis: Some(cpu_millis),
            wall_millis,
        } = e.kind
        {
            // Sent with the end, which comes next.
            if let Some(job) = self.remote.by_local_id(&e.job_id) {
                job.usage = Some(crate::net::protocol::GuestUsage {
                    cpu_millis,
                    wall_millis,
                });
            }
            return;
        }
        let usage = self.remote.by_local_id(&e.job_id).and_then(|j| j.usage);
        let Some(kind) = wire_event(&e.kind, usage) else {
            return;
        };
        self.send_job_event(&e.job_id, e.at.as_second(), kind);
    }
}
