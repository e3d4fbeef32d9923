//! The control API's bodies for the image cache (`GET /v1/images`,
//! `POST /v1/images/prune`, `gleaner images`), re-exported by
//! [`super::api`] with every other body: a file of their own so that
//! `api.rs` stays one job's length. Knows nothing about HTTP or the node.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One cached image (`GET /v1/images`, `gleaner images list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageEntry {
    /// `sha256:<hex>`: the image's id (the SHA-256 of its config).
    pub digest: String,
    /// Bytes of file contents, counted while unpacking (what the cap counts).
    pub bytes: u64,
    pub files: u64,
    pub layers: usize,
    /// The archive format it came in (`docker-archive`, `oci-layout`,
    /// `rootfs`), or `layers` when a host assembled it from the parts a
    /// consumer sent (issue 31).
    pub format: String,
    /// When a task last started in it, Unix seconds.
    pub last_used: i64,
    /// A running guest is in it: prune and eviction leave it.
    pub in_use: bool,
}

impl From<&crate::image::CachedImage> for ImageEntry {
    fn from(i: &crate::image::CachedImage) -> ImageEntry {
        ImageEntry {
            digest: i.id.to_string(),
            bytes: i.bytes,
            files: i.files,
            layers: i.layers,
            format: i.format.clone(),
            last_used: i.last_used_ms.div_euclid(1000),
            in_use: i.in_use,
        }
    }
}

/// The image cache: `GET /v1/images`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImagesReport {
    pub dir: PathBuf,
    /// `[guest] image_cache_mib` in bytes.
    pub cap_bytes: u64,
    /// The images' bytes together.
    pub used_bytes: u64,
    /// Most recently used first.
    pub images: Vec<ImageEntry>,
}

impl ImagesReport {
    /// What `cache` holds now.
    pub fn of(cache: &crate::image::ImageCache) -> Result<ImagesReport, crate::image::ImageError> {
        let images: Vec<ImageEntry> = cache.list()?.iter().map(ImageEntry::from).collect();
        Ok(ImagesReport {
            dir: cache.dir().to_path_buf(),
            cap_bytes: cache.cap_bytes(),
            used_bytes: images.iter().map(|i| i.bytes).sum(),
            images,
        })
    }
}

/// `POST /v1/images/prune`: remove cached images no guest runs in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PruneRequest {
    /// Keep the most recently used images up to this many MiB; all go
    /// (but those in use) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_mib: Option<u64>,
}

/// The answer to a prune.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PruneReport {
    /// The images removed, least recently used first.
    pub removed: Vec<ImageEntry>,
    pub freed_bytes: u64,
    /// The cache after the prune.
    pub left: ImagesReport,
}

impl PruneReport {
    /// Prunes `cache` as `request` asks.
    pub fn prune(
        cache: &crate::image::ImageCache,
        request: &PruneRequest,
    ) -> Result<PruneReport, crate::image::ImageError> {
        let keep = request.keep_mib.unwrap_or(0).saturating_mul(1 << 20);
        let removed: Vec<ImageEntry> = cache.prune(keep)?.iter().map(ImageEntry::from).collect();
        Ok(PruneReport {
            freed_bytes: removed.iter().map(|i| i.bytes).sum(),
            removed,
            left: ImagesReport::of(cache)?,
        })
    }
}
