//! The pool host: the actor that serves this machine to the pool. It owns the
//! jobs peers submitted here (their ordered event queues, their directories,
//! output fetches), answers peers' reliability queries with a typed forecast
//! from the host loop, and announces this host whenever its state, guest slot
//! or effective power Γ changes.
//!
//! Inputs, selected into one closed [`Event`]: the network's requests, the
//! host loop's guest events and snapshots, and [`PoolHostCommand`]s. Job
//! events hosts send to *us* as a consumer are handed to the consumer actor.
//! This module must not know the Swarm (that is `net`), HTTP (`control`), nor
//! how a guest is run (the host loop starts it).

use crate::clock::Clock;
use crate::consumer::{ConsumerHandle, HostJobEvent};
use crate::guest::GuestEvent;
use crate::model::ids::JobId;
use crate::model::predict::InitialState;
use crate::model::state::State;
use crate::net::protocol::{
    FailureByCause, JobEventKind, JobRequest, JobResponse, JobSubmit, OutputName, RejectReason,
    ReliabilityAnswer, ReliabilityQuery, ReliabilityResponse, RemoteJobState, WireState,
};
use crate::net::{LocalStatus, NetEvent, NetHandle, Responder};
use crate::node::config::Config;
use crate::node::host_loop::{
    GuestJob, GuestOrigin, GuestStart, HostError, HostHandle, HostSnapshot,
};
use crate::node::pool::{self, RemoteJob, RemoteJobs};
use crate::node::Hardware;
use crate::report::Forecast;
use libp2p::PeerId;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Γ is re-announced when it moves to another step of this many thousandths.
const POWER_ANNOUNCE_STEP_MILLI: u32 = 50;

/// A request to the pool host.
#[derive(Debug)]
pub enum PoolHostCommand {
    /// The peers' jobs this host keeps (running or with outputs to fetch).
    RemoteJobs {
        reply: oneshot::Sender<Vec<RemoteJobSummary>>,
    },
}

/// A peer's job as `status` could list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteJobSummary {
    pub consumer: PeerId,
    pub consumer_job_id: JobId,
    pub local_id: JobId,
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
    Shutdown,
}

/// What the pool host is made of.
pub struct PoolHostParts {
    pub config: Config,
    pub net: NetHandle,
    pub host: HostHandle,
    pub consumer: ConsumerHandle,
    pub clock: Arc<dyn Clock>,
    pub tracker: TaskTracker,
    pub hardware: Hardware,
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
    /// The best benchmark score heard in the pool (ours included).
    best_score: u64,
    /// State, slot and power step last announced, to announce only changes
    /// (power included, so peers never rank us by a stale Γ).
    announced: Option<(State, bool, u32)>,
}

impl PoolHost {
    pub fn new(parts: PoolHostParts) -> (PoolHost, PoolHostHandle) {
        let (tx, commands) = mpsc::channel(16);
        let snapshot = parts.host.snapshot();
        let best_score = parts.hardware.benchmark_score;
        (
            PoolHost {
                parts,
                commands,
                snapshot,
                remote: RemoteJobs::default(),
                jobs_started: 0,
                best_score,
                announced: None,
            },
            PoolHostHandle { commands: tx },
        )
    }

    pub async fn run(mut self, mut inputs: PoolHostInputs) {
        self.announce_if_changed();
        loop {
            let event = tokio::select! {
                biased;
                _ = inputs.shutdown.cancelled() => Event::Shutdown,
                Some(e) = inputs.guest_events.recv() => Event::Guest(e),
                Some(c) = self.commands.recv() => Event::Command(c),
                Ok(()) = self.snapshot.changed() => Event::HostChanged,
                Some(n) = inputs.net.recv() => Event::Net(n),
            };
            match event {
                Event::Net(n) => self.on_net(n).await,
                Event::Guest(e) => self.forward_to_consumer(&e),
                Event::HostChanged => self.announce_if_changed(),
                Event::Command(PoolHostCommand::RemoteJobs { reply }) => {
                    let _ = reply.send(self.remote.summaries());
                }
                Event::Shutdown => break,
            }
        }
    }

    fn now(&self) -> i64 {
        self.parts.clock.unix_secs()
    }

    async fn on_net(&mut self, event: NetEvent) {
        match event {
            NetEvent::ReliabilityQuery { query, reply, .. } => {
                self.answer_reliability(query, reply)
            }
            NetEvent::JobRequest {
                peer,
                request,
                reply,
            } => match request {
                JobRequest::Submit(submit) => {
                    let answer = match self.accept_remote(peer, submit).await {
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
                            if !ended {
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
                    // An event of a job *we* submitted elsewhere: the consumer's.
                    let consumer = self.parts.consumer.clone();
                    let event = HostJobEvent {
                        seq,
                        time_unix,
                        kind,
                    };
                    self.parts.tracker.spawn(async move {
                        let answer = if consumer.deliver(peer, job_id, event).await {
                            JobResponse::EventAck
                        } else {
                            JobResponse::NotFound
                        };
                        let _ = reply.send(answer);
                    });
                }
            },
            NetEvent::MemberAnnounced(member) => {
                self.best_score = self.best_score.max(member.status.benchmark_score);
                self.announce_if_changed();
            }
            NetEvent::MemberExpired(_) => {}
        }
    }

    /// Γ = P·A in thousandths, with A from the last reading's owner load.
    fn power_milli(&self, snapshot: &HostSnapshot) -> u32 {
        let own = self.parts.hardware.benchmark_score;
        let load = snapshot.cpu.unwrap_or(0.0);
        crate::monitor::bench::effective_power_milli(own, self.best_score, load)
    }

    fn local_status(&self) -> LocalStatus {
        let snapshot = *self.snapshot.borrow();
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

    /// Announces on a change of state, slot or power (the network task
    /// re-publishes the last status every announce interval by itself).
    /// Power counts in steps of 5 %: a change a consumer's ranking would
    /// notice goes out at once; the owner's load jitter does not.
    fn announce_if_changed(&mut self) {
        let status = self.local_status();
        let key = (
            status.state,
            status.slot_free,
            status.relative_power_milli / POWER_ANNOUNCE_STEP_MILLI,
        );
        if self.announced == Some(key) {
            return;
        }
        if self.parts.net.try_announce(status).is_ok() {
            self.announced = Some(key);
        }
    }

    /// Answers a peer's reliability query from this host's own history; the
    /// forecast is computed off both loops.
    fn answer_reliability(&mut self, q: ReliabilityQuery, reply: Responder<ReliabilityResponse>) {
        let snapshot = *self.snapshot.borrow();
        let power = self.power_milli(&snapshot);
        let slot_free = snapshot.slot_free;
        if snapshot.paused {
            let _ = reply.send(ReliabilityResponse::Answer(ReliabilityAnswer {
                tr: 0.0,
                failure: FailureByCause {
                    s3: 0.0,
                    s4: 0.0,
                    s5: 1.0,
                },
                initial_state: WireState::S5,
                days_used: 0,
                method: String::new(),
                relative_power_milli: power,
                slot_free,
            }));
            return;
        }
        let fallback_state = WireState::from(snapshot.state.unwrap_or(State::S1));
        let host = self.parts.host.clone();
        self.parts.tracker.spawn(async move {
            let answer = match host
                .forecast(q.window_start_unix, q.length_secs, q.memory_mib)
                .await
            {
                Ok(f) => {
                    ReliabilityResponse::Answer(wire_answer(&f, fallback_state, power, slot_free))
                }
                Err(e) => ReliabilityResponse::Unavailable {
                    reason: e.to_string(),
                },
            };
            let _ = reply.send(answer);
        });
    }

    /// Starts a peer's job if this host can take it.
    async fn accept_remote(
        &mut self,
        consumer: PeerId,
        submit: JobSubmit,
    ) -> Result<(), RejectReason> {
        let guest_cfg = &self.parts.config.guest;
        if !guest_cfg.enabled {
            return Err(RejectReason::Invalid(
                "this node hosts no guests (consumer-only)".into(),
            ));
        }
        let consumer_job_id = pool::check_submit(&submit, guest_cfg)?;
        self.jobs_started += 1;
        let local_id = JobId::new(format!(
            "{}{}-{}",
            pool::REMOTE_PREFIX,
            self.now(),
            self.jobs_started
        ))
        .map_err(|e| RejectReason::Invalid(e.to_string()))?;
        let job = GuestJob {
            argv: submit.argv,
            env: submit.env,
            mem_mib: submit.memory_mib,
            runtime_secs: Some(submit.wall_time_limit_secs),
            inputs: submit
                .inputs
                .into_iter()
                .map(|f| (f.path, f.data))
                .collect(),
        };
        let start = GuestStart {
            origin: GuestOrigin::Remote,
            job_id: Some(local_id.clone()),
            job,
        };
        let handle = self
            .parts
            .host
            .start_guest(start)
            .await
            .map_err(|e| reject_reason(e, consumer))?;
        // The host loop queues the job's Started event behind this reply, so
        // registering now still catches every event of the job.
        let events =
            pool::spawn_event_sender(self.parts.net.clone(), consumer, &self.parts.tracker);
        let evicted = self.remote.add(RemoteJob {
            consumer,
            consumer_job_id: consumer_job_id.clone(),
            local_id: local_id.clone(),
            dir: handle.dir,
            outputs: submit.outputs,
            seq: 0,
            ended: None,
            events,
        });
        if let Some(old) = evicted {
            self.parts
                .tracker
                .spawn_blocking(move || pool::remove_job_dir(&old.dir));
        }
        tracing::info!(job = %local_id, %consumer, consumer_job = %consumer_job_id, "remote job started");
        Ok(())
    }

    /// Sends a guest event of a remote job to its consumer, in order.
    fn forward_to_consumer(&mut self, e: &GuestEvent) {
        let Some(kind) = pool::wire_event(&e.kind) else {
            return;
        };
        let Some(job) = self.remote.by_local_id(&e.job_id) else {
            return;
        };
        if matches!(
            kind,
            JobEventKind::Finished { .. }
                | JobEventKind::Killed { .. }
                | JobEventKind::KilledOverMemory
        ) {
            job.ended = Some(kind.clone());
        }
        let request = JobRequest::Event {
            job_id: job.consumer_job_id.to_string(),
            seq: job.seq,
            time_unix: e.at.as_second(),
            kind,
        };
        job.seq += 1;
        let _ = job.events.send(request);
    }

    /// Serves a piece of a remote job's output to the consumer that submitted it.
    fn serve_fetch(
        &mut self,
        peer: PeerId,
        job_id: &str,
        name: OutputName,
        offset: u64,
        len: u32,
        reply: Responder<JobResponse>,
    ) {
        let path: Option<PathBuf> = self
            .remote
            .by_consumer(peer, job_id)
            .and_then(|job| pool::output_path(job, &name));
        let Some(path) = path else {
            let _ = reply.send(JobResponse::NotFound);
            return;
        };
        let captured = matches!(name, OutputName::Stdout | OutputName::Stderr);
        self.parts.tracker.spawn_blocking(move || {
            let read = if captured {
                pool::read_chunk_or_empty(&path, offset, len)
            } else {
                pool::read_chunk(&path, offset, len)
            };
            let answer = match read {
                Ok((data, total_len)) => JobResponse::Chunk { data, total_len },
                Err(_) => JobResponse::NotFound,
            };
            let _ = reply.send(answer);
        });
    }
}

/// The wire reason for a refused start.
fn reject_reason(e: HostError, consumer: PeerId) -> RejectReason {
    match e {
        HostError::Busy { .. } => RejectReason::Busy,
        HostError::Paused | HostError::Unavailable => RejectReason::HostState(WireState::S5),
        HostError::HostState(state) => RejectReason::HostState(state.into()),
        HostError::TooMuchMemory { .. } => RejectReason::TooBig,
        HostError::Invalid(why) | HostError::Internal(why) => {
            tracing::warn!(error = %why, %consumer, "cannot start a remote job");
            RejectReason::Invalid(format!("cannot start: {why}"))
        }
    }
}

/// The wire form of a forecast. The wire's `initial_state` holds one state:
/// when the record stops before W the forecast starts from the history's mix
/// of states, and the wire then carries the host's current state instead
/// (PROTOCOL.md says so).
pub fn wire_answer(
    f: &Forecast,
    fallback_state: WireState,
    relative_power_milli: u32,
    slot_free: bool,
) -> ReliabilityAnswer {
    let [s3, s4, s5] = f.fail_by_cause.unwrap_or([0.0; 3]);
    ReliabilityAnswer {
        tr: f.tr,
        failure: FailureByCause { s3, s4, s5 },
        initial_state: match f.initial {
            Some(InitialState::Observed(state)) => state.into(),
            _ => fallback_state,
        },
        days_used: u32::try_from(f.days_used).unwrap_or(u32::MAX),
        method: f.method.to_string(),
        relative_power_milli,
        slot_free,
    }
}
