//! The consumer half of a pool member: ask the pool who will stay available
//! for a task's window ([`survey`]), rank the answers ([`rank`]), and run
//! work on the pool through the durable [`batch`] queue: every submission is
//! a batch (`gleaner submit` is a batch of one task), placed on the best free
//! hosts, followed, landed, and resubmitted elsewhere when a host kills a
//! task, disappears or revokes it.
//!
//! The consumer is one of the node's three actors: a task with a cloneable
//! [`ConsumerHandle`] and a [`ConsumerCommand`] enum. It owns the surveys,
//! the ranking and the batch queue (each attempt runs as its own task the
//! queue spawns and tracks); job events that hosts send back go from the pool
//! host straight into the [`Inbox`], to the attempt that expects them, never
//! through this actor's loop.
//!
//! This module talks to peers only through [`crate::net::NetHandle`] (or, in
//! tests, any [`job_pool::JobPool`]); it does not know sockets, HTTP or the Swarm,
//! and reads time only through the node's [`Clock`].

pub mod batch;
pub mod inbox;
pub mod job_pool;
pub mod rank;
pub mod reputation;
pub mod survey;
pub mod surveyed;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use crate::model::budget::Overrun;
use crate::model::ids::BatchId;
pub use inbox::{Delivery, HostJobEvent, Inbox, Registration};
use libp2p::PeerId;
use std::path::PathBuf;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::net::listening::hosts_plan;
use crate::net::{NetError, NetHandle};
use batch::estimate::BatchEstimate;
pub use batch::queue::MemberNews;
use batch::{BatchError, BatchQueue, BatchView, Counts, NewBatch, QueueMsg, TaskEvent};
use job_pool::{JobSettings, PoolLink};
use survey::{SurveyQuery, SurveyedHost};

/// Why the consumer could not do what it was asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConsumerError {
    #[error("cannot ask the pool: {0}")]
    Pool(String),
    #[error("the node is shutting down")]
    Unavailable,
    #[error(transparent)]
    Batch(#[from] BatchError),
}

impl From<NetError> for ConsumerError {
    fn from(e: NetError) -> Self {
        ConsumerError::Pool(e.to_string())
    }
}

/// What `hosts` asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostsQuery {
    /// Window start, Unix seconds; now when absent.
    pub at: Option<i64>,
    pub window_secs: u64,
    pub mem_mib: u64,
    /// Queries per host (more than 1 measures round trips), 1..=100 000.
    pub rounds: u32,
    /// Ask every host directly (the survey), instead of answering from the
    /// members' summaries; implied by `rounds` above 1.
    pub probe: bool,
    /// In a large pool, every host (the pool-wide summary topic, and with
    /// `probe` a walk of the whole DHT trie: O(N)) instead of a sample
    /// (`net::listening::hosts_plan`).
    pub all: bool,
}

/// The pool's hosts for a window, ranked ones first in rank order.
#[derive(Debug, Clone, PartialEq)]
pub struct HostsView {
    pub our_peer_id: PeerId,
    pub query: SurveyQuery,
    pub hosts: Vec<SurveyedHost>,
    /// This node's count of each host's checked results.
    pub reputation: HashMap<PeerId, crate::model::trust::HostTrack>,
    /// What the table of members holds (how many summaries, their ages).
    pub summary_cache: Option<crate::net::SummaryCache>,
    /// The listing is a sample of a large pool, not every host.
    pub sampled: bool,
    /// The pool's size as this node's place in the DHT trie says, and
    /// whether it is only a floor.
    pub pool_estimate: Option<(u64, bool)>,
}

/// A request to the consumer actor.
#[derive(Debug)]
pub enum ConsumerCommand {
    Hosts {
        query: HostsQuery,
        reply: oneshot::Sender<Result<HostsView, ConsumerError>>,
    },
    /// Queue a batch; the reply holds its task events from before it was
    /// queued, so a waiter misses none.
    SubmitBatch {
        batch: Box<NewBatch>,
        reply: oneshot::Sender<Result<(BatchId, broadcast::Receiver<TaskEvent>), ConsumerError>>,
    },
    /// Estimate a batch's end before queueing it (`batch estimate`, and
    /// `--deadline`'s check): nothing is queued or sent but a survey.
    EstimateBatch {
        batch: Box<NewBatch>,
        reply: oneshot::Sender<Result<BatchEstimate, ConsumerError>>,
    },
    /// Every batch on this node.
    Batches {
        reply: oneshot::Sender<Vec<BatchView>>,
    },
    /// One batch, with its estimate when `estimate` (computed off the loop).
    Batch {
        id: BatchId,
        estimate: bool,
        reply: oneshot::Sender<Result<BatchView, ConsumerError>>,
    },
    /// One batch, once every landed result is in its output directory
    /// (`batch wait`'s last line: the directory is whole when it ends).
    BatchCopied {
        id: BatchId,
        reply: oneshot::Sender<Result<BatchView, ConsumerError>>,
    },
    /// Cancel a batch's tasks that have not ended.
    CancelBatch {
        id: BatchId,
        reply: oneshot::Sender<Result<Counts, ConsumerError>>,
    },
    /// Forget an ended batch and the node's copy of its results.
    RemoveBatch {
        id: BatchId,
        reply: oneshot::Sender<Result<Counts, ConsumerError>>,
    },
    /// Task events from now on, and the batch as it stands (so a waiter
    /// misses nothing between the two).
    WatchBatch {
        id: BatchId,
        reply: oneshot::Sender<Result<(BatchView, broadcast::Receiver<TaskEvent>), ConsumerError>>,
    },
}

/// A sender for an answer the queue gives later (off the loop), relayed
/// to `reply` with the queue's error made the actor's.
fn relay<T: Send + 'static>(
    reply: oneshot::Sender<Result<T, ConsumerError>>,
) -> oneshot::Sender<Result<T, BatchError>> {
    let (tx, rx) = oneshot::channel::<Result<T, BatchError>>();
    tokio::spawn(async move {
        if let Ok(answer) = rx.await {
            let _ = reply.send(answer.map_err(Into::into));
        }
    });
    tx
}

/// The cloneable way to the consumer actor.
#[derive(Debug, Clone)]
pub struct ConsumerHandle {
    commands: mpsc::Sender<ConsumerCommand>,
}

impl ConsumerHandle {
    pub async fn hosts(&self, query: HostsQuery) -> Result<HostsView, ConsumerError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(ConsumerCommand::Hosts { query, reply })
            .await
            .map_err(|_| ConsumerError::Unavailable)?;
        rx.await.map_err(|_| ConsumerError::Unavailable)?
    }

    async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<T>) -> ConsumerCommand,
    ) -> Result<T, ConsumerError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(command(reply))
            .await
            .map_err(|_| ConsumerError::Unavailable)?;
        rx.await.map_err(|_| ConsumerError::Unavailable)
    }

    pub async fn submit_batch(
        &self,
        batch: NewBatch,
    ) -> Result<(BatchId, broadcast::Receiver<TaskEvent>), ConsumerError> {
        self.ask(|reply| ConsumerCommand::SubmitBatch {
            batch: Box::new(batch),
            reply,
        })
        .await?
    }

    /// The estimate of a batch's end, before it is queued.
    pub async fn estimate_batch(&self, batch: NewBatch) -> Result<BatchEstimate, ConsumerError> {
        self.ask(|reply| ConsumerCommand::EstimateBatch {
            batch: Box::new(batch),
            reply,
        })
        .await?
    }

    pub async fn batches(&self) -> Result<Vec<BatchView>, ConsumerError> {
        self.ask(|reply| ConsumerCommand::Batches { reply }).await
    }

    pub async fn batch(&self, id: BatchId) -> Result<BatchView, ConsumerError> {
        self.ask(|reply| ConsumerCommand::Batch {
            id,
            estimate: false,
            reply,
        })
        .await?
    }

    /// One batch, answered once no copy of its results to its output
    /// directory is in flight.
    pub async fn batch_copied(&self, id: BatchId) -> Result<BatchView, ConsumerError> {
        self.ask(|reply| ConsumerCommand::BatchCopied { id, reply })
            .await?
    }

    /// One batch with the estimate of its end (`batch status`).
    pub async fn batch_with_estimate(&self, id: BatchId) -> Result<BatchView, ConsumerError> {
        self.ask(|reply| ConsumerCommand::Batch {
            id,
            estimate: true,
            reply,
        })
        .await?
    }

    pub async fn cancel_batch(&self, id: BatchId) -> Result<Counts, ConsumerError> {
        self.ask(|reply| ConsumerCommand::CancelBatch { id, reply })
            .await?
    }

    pub async fn remove_batch(&self, id: BatchId) -> Result<Counts, ConsumerError> {
        self.ask(|reply| ConsumerCommand::RemoveBatch { id, reply })
            .await?
    }

    pub async fn watch_batch(
        &self,
        id: BatchId,
    ) -> Result<(BatchView, broadcast::Receiver<TaskEvent>), ConsumerError> {
        self.ask(|reply| ConsumerCommand::WatchBatch { id, reply })
            .await?
    }
}

/// What a submission takes from the node's config.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub max_retries: u32,
    /// Largest output brought back, bytes.
    pub max_output_bytes: u64,
    /// Where the batch queue keeps its store and results.
    pub batch_dir: PathBuf,
    /// Tail copies for every batch (`[batch] tail_copies`, issue 28).
    pub tail_copies: bool,
    /// Holds for later windows for every batch (`[batch] later_windows`,
    /// issue 28).
    pub later_windows: bool,
    /// The unit of the later starts the hosts are asked about, seconds
    /// (`[batch] later_unit_secs`: an hour but in tests and demos).
    pub later_unit_secs: u64,
}

/// The consumer actor.
pub struct Consumer {
    net: NetHandle,
    /// Files offered to hosts by hash; served by `data::serve`.
    catalog: crate::data::Catalog,
    clock: Arc<dyn Clock>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    inbox: Inbox,
    commands: mpsc::Receiver<ConsumerCommand>,
    queue: BatchQueue<PoolLink>,
    queue_msgs: mpsc::UnboundedReceiver<QueueMsg>,
    /// Members' announcements as the pool host hears them.
    member_news: mpsc::Receiver<MemberNews>,
    news_tx: mpsc::Sender<MemberNews>,
    /// Peers that went past a budget of ours (the network's, the data
    /// server's): each a flood in the peer's record.
    overruns: mpsc::Receiver<(PeerId, Overrun)>,
    overruns_tx: mpsc::Sender<(PeerId, Overrun)>,
}

/// Overruns waiting for the consumer's loop; past this they are dropped (a
/// peer that goes on is reported again).
const OVERRUN_QUEUE: usize = 256;

/// Announcements waiting for the consumer's loop; past this the pool host
/// drops them (the queue's next look at the summaries finds what they said).
const MEMBER_NEWS_QUEUE: usize = 1024;

impl Consumer {
    pub fn new(
        net: NetHandle,
        clock: Arc<dyn Clock>,
        settings: ConsumerSettings,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<(Consumer, ConsumerHandle), ConsumerError> {
        let (tx, commands) = mpsc::channel(32);
        let (news_tx, member_news) = mpsc::channel(MEMBER_NEWS_QUEUE);
        let (overruns_tx, overruns) = mpsc::channel(OVERRUN_QUEUE);
        let inbox = Inbox::default();
        let catalog = crate::data::Catalog::new();
        let (mut queue, queue_msgs) = BatchQueue::open(
            PoolLink {
                net: net.clone(),
                catalog: catalog.clone(),
            },
            inbox.clone(),
            &settings.batch_dir,
            clock.clone(),
            JobSettings {
                max_retries: settings.max_retries,
                max_output_bytes: settings.max_output_bytes,
                ..JobSettings::default()
            },
            tracker.clone(),
            shutdown.clone(),
        )?;
        queue.set_tail_copies(settings.tail_copies);
        queue.set_later_windows(settings.later_windows);
        queue.set_later_unit(settings.later_unit_secs);
        Ok((
            Consumer {
                net,
                catalog,
                clock,
                tracker,
                shutdown,
                inbox,
                commands,
                queue,
                queue_msgs,
                member_news,
                news_tx,
                overruns,
                overruns_tx,
            },
            ConsumerHandle { commands: tx },
        ))
    }

    /// Where hosts' events for our jobs go: the pool host delivers each one
    /// here as it arrives from the network, straight to the attempt that
    /// waits for it (no hop through this actor's loop).
    pub fn job_events(&self) -> Inbox {
        self.inbox.clone()
    }

    /// Where the pool host passes members' announcements (without waiting:
    /// a full queue drops one).
    pub fn member_news(&self) -> mpsc::Sender<MemberNews> {
        self.news_tx.clone()
    }

    /// Where peers' overruns of their budgets are reported (without
    /// waiting: a full queue drops one).
    pub fn overruns(&self) -> mpsc::Sender<(PeerId, Overrun)> {
        self.overruns_tx.clone()
    }

    /// Serves commands until shutdown or until every handle is gone.
    pub async fn run(mut self) {
        self.tracker.spawn(crate::data::serve(
            self.net.clone(),
            self.catalog.clone(),
            self.tracker.clone(),
            self.shutdown.clone(),
        ));
        let mut tick = tokio::time::interval(batch::queue::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            if self.queue.wants_survey() {
                self.queue.start_survey();
            }
            self.queue.watch_deadlines();
            let command = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                msg = self.queue_msgs.recv() => {
                    if let Some(msg) = msg {
                        self.queue.on_msg(msg);
                    }
                    continue;
                }
                news = self.member_news.recv() => {
                    if let Some(news) = news {
                        self.queue.on_member(news);
                    }
                    continue;
                }
                overrun = self.overruns.recv() => {
                    if let Some((peer, what)) = overrun {
                        self.queue.on_overrun(peer, what);
                    }
                    continue;
                }
                _ = tick.tick(), if self.queue.wants_ticks() => continue,
                c = self.commands.recv() => match c {
                    Some(c) => c,
                    None => return,
                },
            };
            match command {
                ConsumerCommand::SubmitBatch { batch, reply } => {
                    let events = self.queue.subscribe();
                    let queued = self.queue.submit(*batch).map(|id| (id, events));
                    let _ = reply.send(queued.map_err(Into::into));
                }
                ConsumerCommand::Batches { reply } => {
                    let _ = reply.send(self.queue.list());
                }
                ConsumerCommand::Batch {
                    id,
                    estimate: false,
                    reply,
                } => {
                    let _ = reply.send(self.queue.view(id).map_err(Into::into));
                }
                ConsumerCommand::Batch {
                    id,
                    estimate: true,
                    reply,
                } => {
                    // Answered when the estimate is made, off the loop.
                    self.queue.view_with_estimate(id, relay(reply));
                }
                ConsumerCommand::EstimateBatch { batch, reply } => {
                    self.queue.estimate_new(&batch, relay(reply));
                }
                ConsumerCommand::BatchCopied { id, reply } => {
                    self.queue.when_copied(id, relay(reply));
                }
                ConsumerCommand::CancelBatch { id, reply } => {
                    let _ = reply.send(self.queue.cancel(id).map_err(Into::into));
                }
                ConsumerCommand::RemoveBatch { id, reply } => {
                    let _ = reply.send(self.queue.remove(id).map_err(Into::into));
                }
                ConsumerCommand::WatchBatch { id, reply } => {
                    let events = self.queue.subscribe();
                    let answer = self.queue.view(id).map(|v| (v, events));
                    let _ = reply.send(answer.map_err(Into::into));
                }
                ConsumerCommand::Hosts { query, reply } => self.hosts(query, reply),
            }
        }
    }

    /// Answers from the members' summaries (one call to the network task,
    /// no host asked), or, with `probe`, surveys in its own task: a survey
    /// waits for every host's answer.
    fn hosts(
        &mut self,
        query: HostsQuery,
        reply: oneshot::Sender<Result<HostsView, ConsumerError>>,
    ) {
        let probe = query.probe || query.rounds > 1;
        let net = self.net.clone();
        let reach = net.reachability().summaries;
        let plan = hosts_plan(reach.large_pool, query.all, probe);
        let survey = SurveyQuery {
            window_start_unix: query.at.unwrap_or_else(|| self.clock.unix_secs()),
            window_secs: query.window_secs.max(1),
            mem_mib: query.mem_mib,
            rounds: query.rounds.clamp(1, 100_000),
            ask_at_most: None,
            images: Vec::new(),
            // A sample is asked as it is listed; without one the survey
            // asks every member and walks the DHT (`survey::survey`).
            sample_hosts: plan.sample.map(|h| u32::try_from(h).unwrap_or(u32::MAX)),
        };
        let reputation = self.queue.reputation();
        self.tracker.spawn(async move {
            let members = match plan.sample {
                Some(hosts) => sampled_and_known(&net, hosts).await,
                None => net.members().await,
            };
            let summary_cache = members
                .as_ref()
                .ok()
                .map(|m| crate::net::SummaryCache::of(m, net.peer_id(), Instant::now()));
            let found = if probe {
                survey::survey(&net, survey.clone(), &[]).await
            } else {
                members.map(|members| {
                    survey::from_members(&members, net.peer_id(), &survey, Instant::now())
                })
            };
            let answer = match found {
                Ok(mut hosts) => {
                    // Asked hosts by their answers; listed ones by their
                    // summaries.
                    let order: Vec<PeerId> = if probe {
                        rank::rank(&hosts, &HashSet::new())
                            .iter()
                            .map(|r| r.peer)
                            .collect()
                    } else {
                        rank::by_summary(&hosts, &HashSet::new(), &[])
                    };
                    // Hosts by their record's standing (clean, demoted,
                    // excluded); within each part ranked hosts first in
                    // rank order, then the rest by peer id.
                    hosts.sort_by_key(|r| {
                        (
                            reputation
                                .get(&r.peer)
                                .map_or(crate::model::trust::Standing::Clean, |t| t.standing()),
                            order
                                .iter()
                                .position(|p| *p == r.peer)
                                .unwrap_or(usize::MAX),
                            r.peer,
                        )
                    });
                    Ok(HostsView {
                        our_peer_id: net.peer_id(),
                        query: survey,
                        hosts,
                        reputation,
                        summary_cache,
                        sampled: plan.sample.is_some(),
                        pool_estimate: {
                            let s = net.reachability().summaries;
                            s.pool_estimate.map(|n| (n, s.pool_estimate_at_least))
                        },
                    })
                }
                Err(e) => Err(e.into()),
            };
            let _ = reply.send(answer);
        });
    }
}

/// The members a sample of about `hosts` hosts names (`NetHandle::sample`:
/// a few leaf digests in a large pool, no pool-wide topic) and those the
/// member table holds as last heard (no listening asked), the sample's
/// fresher word first: what a node of a large pool knows without paying
/// for the whole pool.
async fn sampled_and_known(
    net: &NetHandle,
    hosts: usize,
) -> Result<Vec<crate::net::handle::Member>, NetError> {
    let mut members = net.sample(hosts).await?;
    let named: HashSet<PeerId> = members.iter().map(|m| m.peer).collect();
    members.extend(
        net.known_members()
            .await?
            .into_iter()
            .filter(|m| !named.contains(&m.peer)),
    );
    Ok(members)
}
