//! What every control handler shares: the actors' handles (the router's
//! state), the JSON extractors whose refusals are JSON [`ApiError`]s, and the
//! one mapping of domain errors ([`HostError`], [`ConsumerError`]) to HTTP
//! statuses. The route modules (`server`, `batches`) import this; it imports
//! neither, so they form no circle.

use super::api::ApiError;
use crate::consumer::batch::BatchError;
use crate::consumer::{ConsumerError, ConsumerHandle};
use crate::model::ids::PoolName;
use crate::node::host_loop::{HostError, HostHandle};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What every handler needs: the handles of the node's actors.
#[derive(Debug, Clone)]
pub struct ControlHandles {
    pub host: HostHandle,
    /// The consumer, when the node is in a pool (`hosts` and `submit` need it).
    pub consumer: Option<ConsumerHandle>,
    /// The pool's name and our peer id, when in a pool.
    pub pool: Option<PoolName>,
    pub peer_id: Option<String>,
    /// The network task, for its reachability snapshot.
    pub net: Option<crate::net::NetHandle>,
    /// Owner of the stream tasks, so shutdown waits for them.
    pub tracker: TaskTracker,
    /// Cancelled when the node shuts down.
    pub shutdown: CancellationToken,
    /// The image cache (`<data dir>/images`), when `[guest] images` allows
    /// images and it could be opened.
    pub images: Option<std::sync::Arc<crate::image::ImageCache>>,
}

impl From<HostError> for ApiError {
    /// The one place a host's refusal becomes an HTTP status.
    fn from(e: HostError) -> Self {
        let message = e.to_string();
        match e {
            HostError::NoGuests
            | HostError::Paused
            | HostError::Withheld(_)
            | HostError::Finishing
            | HostError::Busy { .. }
            | HostError::HostState(_) => ApiError::conflict(message),
            HostError::TooMuchMemory { .. } | HostError::Invalid(_) => {
                ApiError::bad_request(message)
            }
            // The bound is the host's (`model::owner::check_pause`); the
            // request's field is named here, where the request is known.
            HostError::PauseLength(_) => ApiError::bad_request(format!("for_secs: {message}")),
            HostError::Internal(_) => ApiError::internal(message),
            HostError::Unavailable => ApiError::unavailable(),
        }
    }
}

impl From<ConsumerError> for ApiError {
    fn from(e: ConsumerError) -> Self {
        let message = e.to_string();
        match e {
            ConsumerError::Pool(_) => ApiError::internal(message),
            ConsumerError::Unavailable => ApiError::unavailable(),
            ConsumerError::Batch(BatchError::UnknownBatch(_)) => ApiError::not_found(message),
            ConsumerError::Batch(BatchError::NotEnded(_)) => ApiError::conflict(message),
            ConsumerError::Batch(BatchError::Store(_)) => ApiError::internal(message),
            ConsumerError::Batch(BatchError::Estimate(_)) => ApiError::unavailable_because(message),
            ConsumerError::Batch(_) => ApiError::bad_request(message),
        }
    }
}

/// `Json` whose refusals are JSON [`ApiError`]s naming what is wrong with
/// the body (serde's message names the field and the position), with
/// axum's status (400, 413, 415, 422).
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(ApiError {
                status: rejection.status().as_u16(),
                message: format!("bad request body: {}", rejection.body_text()),
            }),
        }
    }
}

/// `Query` whose refusals are JSON [`ApiError`]s naming the parameter.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(ApiError {
                status: rejection.status().as_u16(),
                message: format!("bad query string: {}", rejection.body_text()),
            }),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self)).into_response()
    }
}

pub(crate) fn consumer_of(h: &ControlHandles) -> Result<ConsumerHandle, ApiError> {
    h.consumer.clone().ok_or_else(|| {
        ApiError::conflict("this node is not in a pool ([net] enabled = false or --no-net)")
    })
}

pub(crate) fn json_result<T: serde::Serialize, E: Into<ApiError>>(r: Result<T, E>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into().into_response(),
    }
}

/// What the network task's table of members holds now; `None` when the
/// task has stopped.
pub(super) async fn summary_cache(net: &crate::net::NetHandle) -> Option<crate::net::SummaryCache> {
    let members = net.known_members().await.ok()?;
    Some(crate::net::SummaryCache::of(
        &members,
        net.peer_id(),
        std::time::Instant::now(),
    ))
}
