//! The byte streams of an import and an export between a client and the
//! host loop, and an import's end as the loop hears of it. Apart from
//! `transfer` (which does the work) so that the loop, its handle and the
//! transfer all import these without importing each other in a circle.

use super::messages::ImportOutcome;
use super::HostError;
use tokio::sync::{mpsc, oneshot};

/// An import's bytes as they arrive from the client, chunk by chunk, or why
/// the upload broke off. The host loop spools them to a file off the loop.
pub type ImportBody = mpsc::Receiver<Result<Vec<u8>, String>>;
/// An export's bytes, written off the loop as the client reads them; an
/// `Err` chunk means the export broke off.
pub type ExportBody = mpsc::Receiver<Result<Vec<u8>, String>>;

/// An import's end, handed back to the loop.
#[derive(Debug)]
pub(super) struct ImportDone {
    pub(super) outcome: Result<ImportOutcome, HostError>,
    pub(super) reply: oneshot::Sender<Result<ImportOutcome, HostError>>,
}
