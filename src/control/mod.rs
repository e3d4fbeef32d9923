//! The node's local control API: HTTP/1.1 with JSON bodies over a Unix
//! socket in the data dir (mode 0600, never TCP), used by `gleaner status`,
//! `pause`, `resume`, `predict`, `run-local` and `history`.
//!
//! This module owns the wire types ([`api`]), the server that turns HTTP
//! requests into [`ControlRequest`]s for the node loop ([`server`]), and the
//! client the CLI uses ([`client`]). It must not know how the node answers a
//! request: the node loop owns the store and the supervisor and replies
//! through the `oneshot` each request carries.
//!
//! axum and hyper were chosen over a hand-written HTTP/1.1 parser: they are
//! already the conventions' choice, streaming bodies (`run-local`) and
//! graceful shutdown come for free, and a parser of our own would be one more
//! piece of code facing input.

pub mod api;
pub mod client;
pub mod server;

use crate::report::PredictReport;
use api::{
    ApiError, ImportSummary, PauseReport, PredictQuery, RunLocalRequest, RunStarted, StatusReport,
};
use tokio::sync::oneshot;

/// One request to the node loop, with the channel its answer goes back on.
#[derive(Debug)]
pub enum ControlRequest {
    Status {
        reply: oneshot::Sender<StatusReport>,
    },
    Pause {
        for_secs: Option<u64>,
        reply: oneshot::Sender<Result<PauseReport, ApiError>>,
    },
    Resume {
        reply: oneshot::Sender<Result<PauseReport, ApiError>>,
    },
    Predict {
        query: PredictQuery,
        reply: oneshot::Sender<Result<PredictReport, ApiError>>,
    },
    RunLocal {
        request: RunLocalRequest,
        reply: oneshot::Sender<Result<RunStarted, ApiError>>,
    },
    /// The client of a `run-local` went away: kill its job.
    Cancel { job_id: String },
    Export {
        reply: oneshot::Sender<Result<String, ApiError>>,
    },
    Import {
        text: String,
        reply: oneshot::Sender<Result<ImportSummary, ApiError>>,
    },
}
