//! The streamed import and export of the history: an import's bytes are
//! spooled to a file in the data dir (bounded) and imported in batches on
//! the blocking pool, one import at a time, its end handed back to the loop;
//! an export is written by a blocking task down a bounded channel, paced by
//! the client. The loop only starts them and keeps sampling meanwhile.
//!
//! This module must not know HTTP (`control`) nor the trace format's rules
//! (`history`): it moves bytes and maps the store's errors.

use super::engine::HostLoop;
use super::messages::ImportOutcome;
use super::streams::{ExportBody, ImportBody, ImportDone};
use super::HostError;
use crate::history::store::{BulkHistory, StoreError};
use std::path::{Path, PathBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Where an import's bytes wait (in the data dir, not a tmpfs that would
/// hold them in memory) until the blocking task reads them twice.
const IMPORT_SPOOL: &str = "import.partial";
/// Largest import through the node: the trace format's own cap.
pub const MAX_IMPORT_BYTES: u64 = crate::history::trace::MAX_TRACE_BYTES;
/// Bytes per chunk of a streamed export.
const EXPORT_CHUNK: usize = 64 * 1024;

impl HostLoop {
    /// Streams the history as a trace from a blocking task; the loop only
    /// starts it. The client's reading paces the writer (a bounded channel).
    pub(super) fn export(&mut self) -> ExportBody {
        let (tx, rx) = mpsc::channel(4);
        let bulk = self.parts.store.bulk();
        self.parts.tracker.spawn_blocking(move || {
            let mut out = ChannelWriter {
                tx,
                buf: Vec::with_capacity(EXPORT_CHUNK),
            };
            let result = bulk.export(&mut out);
            match result {
                Ok(_) => {
                    let _ = std::io::Write::flush(&mut out);
                }
                Err(e) => {
                    let _ = out.tx.blocking_send(Err(e.to_string()));
                }
            }
        });
        rx
    }

    /// Starts an import: the body is spooled to a file in the data dir (at
    /// most [`MAX_IMPORT_BYTES`]) and imported from it in batches on the
    /// blocking pool; the loop keeps sampling and answering meanwhile and
    /// hears of the end as an `Event::ImportDone`.
    pub(super) fn import(
        &mut self,
        body: ImportBody,
        source_name: String,
        reply: oneshot::Sender<Result<ImportOutcome, HostError>>,
    ) {
        if self.import_running {
            let _ = reply.send(Err(HostError::Invalid(
                "another import is running; try again when it has finished".into(),
            )));
            return;
        }
        self.import_running = true;
        let bulk = self.parts.store.bulk();
        let spool = self.parts.data_dir.join(IMPORT_SPOOL);
        let shutdown = self.shutdown.clone();
        let done = self.import_done_tx.clone();
        self.parts.tracker.spawn(async move {
            let outcome = import_streamed(bulk, body, spool, source_name, shutdown).await;
            let _ = done.send(ImportDone { outcome, reply });
        });
    }
}

/// Spools an import's body to `spool` (bounded, stopping with the node),
/// then imports it in batches on the blocking pool. Errors name the user's file.
async fn import_streamed(
    bulk: BulkHistory,
    mut body: ImportBody,
    spool: PathBuf,
    source_name: String,
    shutdown: CancellationToken,
) -> Result<ImportOutcome, HostError> {
    use tokio::io::AsyncWriteExt;
    let invalid = |what: String| HostError::Invalid(format!("{source_name}: {what}"));
    let mut file = tokio::fs::File::create(&spool).await.map_err(|e| {
        HostError::Internal(format!(
            "cannot spool the import to {}: {e}",
            spool.display()
        ))
    })?;
    let mut written = 0u64;
    loop {
        let chunk = tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = tokio::fs::remove_file(&spool).await;
                return Err(HostError::Unavailable);
            }
            chunk = body.recv() => chunk,
        };
        let Some(chunk) = chunk else { break };
        let chunk = match chunk {
            Ok(c) => c,
            Err(why) => {
                let _ = tokio::fs::remove_file(&spool).await;
                return Err(invalid(why));
            }
        };
        written = written.saturating_add(chunk.len() as u64);
        if written > MAX_IMPORT_BYTES {
            let _ = tokio::fs::remove_file(&spool).await;
            return Err(invalid(format!(
                "larger than the {MAX_IMPORT_BYTES}-byte limit of a trace"
            )));
        }
        if let Err(e) = file.write_all(&chunk).await {
            let _ = tokio::fs::remove_file(&spool).await;
            return Err(HostError::Internal(format!("cannot spool the import: {e}")));
        }
    }
    let synced = file.sync_all().await;
    drop(file);
    if let Err(e) = synced {
        let _ = tokio::fs::remove_file(&spool).await;
        return Err(HostError::Internal(format!("cannot spool the import: {e}")));
    }
    let spool_for_task = spool.clone();
    let result = tokio::task::spawn_blocking(move || {
        let cancelled = || shutdown.is_cancelled();
        bulk.import_file(&spool_for_task, Path::new(&source_name), &cancelled)
    })
    .await;
    let _ = tokio::fs::remove_file(&spool).await;
    let report = result
        .map_err(|e| HostError::Internal(format!("the import task failed: {e}")))?
        .map_err(|e| match e {
            StoreError::ImportCancelled => HostError::Unavailable,
            StoreError::Trace(_)
            | StoreError::ImportOverlap { .. }
            | StoreError::ImportTooManyRows { .. }
            | StoreError::BadSample { .. } => HostError::Invalid(e.to_string()),
            other => HostError::Internal(other.to_string()),
        })?;
    Ok(ImportOutcome {
        added: report.added,
        already_present: report.already_present,
    })
}

/// A `Write` that sends full chunks down a bounded channel from a blocking
/// task; a dropped receiver (the client went away) ends the writer.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Vec<u8>, String>>,
    buf: Vec<u8>,
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= EXPORT_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(EXPORT_CHUNK));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}
