//! The image cache's routes (issue 31): `GET /v1/images` lists the cached
//! images and `POST /v1/images/prune` removes those no guest runs in. Going
//! through the node (rather than its data dir) is what lets a prune see the
//! images in use; the cache work runs off the async threads. Also the one
//! way a request's image is unpacked (`run-local`, a batch), used by both
//! the server's and the batches' routes.

use crate::control::api::{ApiError, ImagesReport, PruneReport, PruneRequest, PREFIX};
use crate::control::state::{json_result, ApiJson, ControlHandles};
use crate::image::{ImageCache, ImageError};
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use std::path::PathBuf;
use std::sync::Arc;

pub fn routes() -> Router<ControlHandles> {
    Router::new()
        .route(&format!("{PREFIX}/images"), get(list))
        .route(&format!("{PREFIX}/images/prune"), post(prune))
}

fn cache_of(h: &ControlHandles) -> Result<Arc<ImageCache>, ApiError> {
    h.images.clone().ok_or_else(|| {
        ApiError::conflict(
            "this node keeps no image cache ([guest] images = \"deny\", or the cache could not be opened)",
        )
    })
}

/// Runs `f` on the cache off the async threads.
async fn with_cache<T: Send + 'static>(
    h: &ControlHandles,
    f: impl FnOnce(&ImageCache) -> Result<T, ImageError> + Send + 'static,
) -> Result<T, ApiError> {
    let cache = cache_of(h)?;
    match tokio::task::spawn_blocking(move || f(&cache)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ApiError::internal(format!("image cache: {e}"))),
        Err(e) => Err(ApiError::internal(format!("image cache: {e}"))),
    }
}

async fn list(State(h): State<ControlHandles>) -> Response {
    json_result(with_cache(&h, ImagesReport::of).await)
}

async fn prune(
    State(h): State<ControlHandles>,
    ApiJson(request): ApiJson<PruneRequest>,
) -> Response {
    json_result(with_cache(&h, move |c| PruneReport::prune(c, &request)).await)
}

/// Unpacks (or finds in the cache) the image a `run-local` or a batch
/// names, off the async threads; a refused image is the request's fault,
/// named.
pub(super) async fn unpack_image(
    h: &ControlHandles,
    path: PathBuf,
) -> Result<crate::image::UnpackedImage, ApiError> {
    let Some(cache) = h.images.clone() else {
        return Err(ApiError::conflict(
            "this node runs no images ([guest] images = \"deny\", or its image cache could not be opened)",
        ));
    };
    let unpacked = tokio::task::spawn_blocking(move || cache.unpack(&path)).await;
    match unpacked {
        Ok(Ok(img)) => Ok(img),
        Ok(Err(
            e @ (crate::image::ImageError::Io { .. } | crate::image::ImageError::CacheFull { .. }),
        )) => Err(ApiError::conflict(format!("image: {e}"))),
        Ok(Err(e)) => Err(ApiError::bad_request(format!("image: {e}"))),
        Err(e) => Err(ApiError::conflict(format!("image unpacking stopped: {e}"))),
    }
}
