//! The host loop's public face: [`HostHandle`], the cloneable way in, and
//! the [`HostCommand`]s it sends (rust-libp2p's `file-sharing` shape: a
//! command with a oneshot for its answer). Read-only queries do not pass
//! here: [`HostHandle::reader`] answers them off the loop.
//!
//! This module must not know how the loop answers (that is `engine` and its
//! helpers), HTTP (`control`) nor the Swarm (`net`).

use super::messages::{GuestStart, HostSnapshot, HostStatus, ImportOutcome, PauseOutcome};
use super::streams::{ExportBody, ImportBody};
use super::{HostError, HostReader};
use crate::guest::{GuestEvent, GuestHandle};
use crate::history::store::JobEvent;
use crate::model::ids::JobId;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

/// A request to the host loop, with the channel its answer goes back on.
#[derive(Debug)]
pub enum HostCommand {
    Status {
        reply: oneshot::Sender<HostStatus>,
    },
    Pause {
        for_secs: Option<u64>,
        /// Let the running guest finish first (`pause --after-job`).
        after_job: bool,
        reply: oneshot::Sender<Result<PauseOutcome, HostError>>,
    },
    Resume {
        reply: oneshot::Sender<Result<PauseOutcome, HostError>>,
    },
    /// Start a guest (the owner's `run-local`, or a peer's job via the pool host).
    StartGuest {
        /// Boxed: a job is far larger than every other command.
        start: Box<GuestStart>,
        reply: oneshot::Sender<Result<GuestHandle, HostError>>,
    },
    /// Kill the guest if it is running job `job_id`.
    Cancel {
        job_id: JobId,
    },
    /// Stream the history as a trace (written off the loop).
    Export {
        reply: oneshot::Sender<Result<ExportBody, HostError>>,
    },
    /// The newest job-log events, newest first (the dashboard's job log).
    JobLog {
        limit: usize,
        reply: oneshot::Sender<Result<Vec<JobEvent>, HostError>>,
    },
    /// Import a trace: spooled and imported in batches off the loop, one
    /// import at a time; the reply comes when it has finished.
    Import {
        body: ImportBody,
        /// The file the owner named, for errors.
        source_name: String,
        reply: oneshot::Sender<Result<ImportOutcome, HostError>>,
    },
}

/// The cloneable way to the host loop.
#[derive(Debug, Clone)]
pub struct HostHandle {
    commands: mpsc::Sender<HostCommand>,
    snapshot: watch::Receiver<HostSnapshot>,
    events: broadcast::Sender<GuestEvent>,
    /// The read-only queries, answered without the loop.
    reader: HostReader,
}

impl HostHandle {
    pub(super) fn new(
        commands: mpsc::Sender<HostCommand>,
        snapshot: watch::Receiver<HostSnapshot>,
        events: broadcast::Sender<GuestEvent>,
        reader: HostReader,
    ) -> HostHandle {
        HostHandle {
            commands,
            snapshot,
            events,
            reader,
        }
    }

    /// The read-only queries (predict, a peer's reliability answer, the
    /// history): they read caches the loop shares and never wait for it.
    pub fn reader(&self) -> &HostReader {
        &self.reader
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> HostCommand,
    ) -> Result<T, HostError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
            .await
            .map_err(|_| HostError::Unavailable)?;
        rx.await.map_err(|_| HostError::Unavailable)
    }

    pub async fn status(&self) -> Result<HostStatus, HostError> {
        self.ask(|reply| HostCommand::Status { reply }).await
    }

    pub async fn pause(&self, for_secs: Option<u64>) -> Result<PauseOutcome, HostError> {
        self.ask(|reply| HostCommand::Pause {
            for_secs,
            after_job: false,
            reply,
        })
        .await?
    }

    /// `pause --after-job`: the running guest finishes, then the node pauses
    /// (at once when none runs); no guest starts meanwhile.
    pub async fn pause_after_job(&self, for_secs: Option<u64>) -> Result<PauseOutcome, HostError> {
        self.ask(|reply| HostCommand::Pause {
            for_secs,
            after_job: true,
            reply,
        })
        .await?
    }

    pub async fn resume(&self) -> Result<PauseOutcome, HostError> {
        self.ask(|reply| HostCommand::Resume { reply }).await?
    }

    pub async fn start_guest(&self, start: GuestStart) -> Result<GuestHandle, HostError> {
        self.ask(|reply| HostCommand::StartGuest {
            start: Box::new(start),
            reply,
        })
        .await?
    }

    /// Kills the guest if it runs `job_id` (a `run-local` client went away).
    pub async fn cancel(&self, job_id: JobId) {
        let _ = self.commands.send(HostCommand::Cancel { job_id }).await;
    }

    /// The history as a trace, streamed in chunks.
    pub async fn export(&self) -> Result<ExportBody, HostError> {
        self.ask(|reply| HostCommand::Export { reply }).await?
    }

    /// The whole export as text (tests and small histories).
    pub async fn export_text(&self) -> Result<String, HostError> {
        let mut body = self.export().await?;
        let mut out = Vec::new();
        while let Some(chunk) = body.recv().await {
            out.extend(chunk.map_err(HostError::Internal)?);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The newest `limit` (at most [`super::MAX_JOB_LOG`]) job-log events, newest first.
    pub async fn job_log(&self, limit: usize) -> Result<Vec<JobEvent>, HostError> {
        self.ask(|reply| HostCommand::JobLog { limit, reply })
            .await?
    }

    /// Imports the trace whose bytes arrive on `body`; errors name `source_name`.
    pub async fn import(
        &self,
        body: ImportBody,
        source_name: String,
    ) -> Result<ImportOutcome, HostError> {
        self.ask(|reply| HostCommand::Import {
            body,
            source_name,
            reply,
        })
        .await?
    }

    /// Imports a trace held in memory (tests and small traces).
    pub async fn import_text(
        &self,
        text: String,
        source_name: String,
    ) -> Result<ImportOutcome, HostError> {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.send(Ok(text.into_bytes())).await;
        drop(tx);
        self.import(rx, source_name).await
    }

    /// The latest snapshot, without asking the loop.
    pub fn snapshot(&self) -> watch::Receiver<HostSnapshot> {
        self.snapshot.clone()
    }

    /// Guest events from now on, for `run-local` streams (subscribe before
    /// starting the job so no event of it is missed).
    pub fn subscribe_events(&self) -> broadcast::Receiver<GuestEvent> {
        self.events.subscribe()
    }
}
