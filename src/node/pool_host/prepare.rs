//! A peer's job made ready to start: its image found in the image cache, or
//! read and unpacked there (issue 31): by its parts, the config and each
//! layer an input taken from the input cache or fetched, or as a whole
//! archive read like an input; then each input taken from the cache or
//! fetched from the consumer and verified, and copied into the job's own
//! directory (the guest gets its own copy). It must not know the pool
//! host's loop; errors name the input or the image.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use libp2p::PeerId;

use super::remote_jobs::{check_image, check_layers};
use crate::data::{obtain_input, Cache, ContentHash, FetchLimits, Obtained};
use crate::guest::{GuestImage, IMAGE_WORK_DIR};
use crate::image::{ImageCache, ImageId, UnpackedImage};
use crate::net::protocol::{ImageRef, InputRef, LayeredImageRef, RejectReason};

/// A job's inputs, verified and copied into its own directory, and its
/// image, unpacked.
#[derive(Debug)]
pub(super) struct PreparedInputs {
    /// (path in the work directory, prepared file).
    pub(super) files: Vec<(String, PathBuf)>,
    /// Bytes read from the consumer (inputs and the image's parts).
    pub(super) fetched_bytes: u64,
    /// Bytes of inputs found in the input cache, of an image's parts found
    /// there, and of an image found in the image cache (all its parts):
    /// what did not cross.
    pub(super) cached_bytes: u64,
    /// The root the guest runs in, when the job brought an image.
    pub(super) image: Option<GuestImage>,
}

/// The image a peer's job names, as its submission named it.
#[derive(Debug)]
pub(super) enum ImageAsked {
    /// The whole archive (`SubmitInImage`).
    Whole(ImageRef),
    /// Its config and layers, each an input (`SubmitInLayers`).
    Layers(LayeredImageRef),
}

/// The image of a job to prepare: what the consumer names, and where this
/// host keeps images.
pub(super) struct ImageOrder {
    pub(super) image: ImageAsked,
    pub(super) cache: Arc<ImageCache>,
}

impl ImageOrder {
    /// The order for a job's image, checked before anything is fetched;
    /// refused when this host runs no images (`images` is `None`).
    pub(super) fn checked(
        image: Option<ImageAsked>,
        images: Option<&Arc<ImageCache>>,
    ) -> Result<Option<ImageOrder>, RejectReason> {
        let Some(image) = image else {
            return Ok(None);
        };
        let Some(cache) = images.cloned() else {
            return Err(RejectReason::NoImages);
        };
        match &image {
            ImageAsked::Whole(whole) => check_image(whole)?,
            ImageAsked::Layers(layers) => check_layers(layers)?,
        }
        Ok(Some(ImageOrder { image, cache }))
    }
}

/// Finds the job's image in the image cache, or reads it from the consumer
/// (through the input cache, verified chunk by chunk) and unpacks it there,
/// every entry checked; an image unpacked to another id than the job names
/// is refused, naming both. Adds the bytes of its parts (or archive) to
/// `prepared`'s counts: fetched, or cached when the host held them.
async fn prepare_image(
    net: &crate::net::NetHandle,
    cache: &Cache,
    consumer: PeerId,
    order: ImageOrder,
    prepared: &mut PreparedInputs,
) -> Result<GuestImage, String> {
    let ImageOrder {
        image,
        cache: images,
    } = order;
    let (id, name) = match &image {
        ImageAsked::Whole(i) => (ImageId::from_bytes(&i.id), i.archive.path.clone()),
        ImageAsked::Layers(i) => (ImageId::from_bytes(&i.id), i.name.clone()),
    };
    let (lookup, wanted) = (images.clone(), id.clone());
    let found = tokio::task::spawn_blocking(move || lookup.cached(&wanted))
        .await
        .map_err(|e| format!("image {name}: looking in the image cache stopped: {e}"))?;
    let unpacked = match (found, image) {
        (Some(img), ImageAsked::Whole(i)) => {
            prepared.cached_bytes += i.archive.size;
            img
        }
        (Some(img), ImageAsked::Layers(i)) => {
            prepared.cached_bytes += std::iter::once(&i.config)
                .chain(&i.layers)
                .fold(0u64, |t, p| t.saturating_add(p.size));
            img
        }
        (None, ImageAsked::Whole(i)) => {
            read_whole(net, cache, consumer, &i.archive, images, prepared).await?
        }
        (None, ImageAsked::Layers(i)) => {
            read_layers(net, cache, consumer, &i, images, prepared).await?
        }
    };
    if unpacked.id != id {
        return Err(format!(
            "image {name}: the archive is the image {}, the job names {id}",
            unpacked.id
        ));
    }
    let work = unpacked
        .config
        .working_dir
        .as_deref()
        .unwrap_or(IMAGE_WORK_DIR);
    Ok(GuestImage {
        work_dir: PathBuf::from(work),
        rootfs: unpacked.rootfs,
        // Held from here to the guest's end: no eviction removes its root.
        lease: unpacked.lease,
    })
}

/// Reads an image's whole archive (from the input cache, or from the
/// consumer) and unpacks it into the image cache.
async fn read_whole(
    net: &crate::net::NetHandle,
    cache: &Cache,
    consumer: PeerId,
    archive: &InputRef,
    images: Arc<ImageCache>,
    prepared: &mut PreparedInputs,
) -> Result<UnpackedImage, String> {
    let name = archive.path.clone();
    let (pinned, obtained) = obtain_input(net, cache, consumer, archive, FetchLimits::default())
        .await
        .map_err(|e| format!("image {e}"))?;
    match obtained {
        Obtained::Cached => prepared.cached_bytes += archive.size,
        Obtained::Fetched(f) => prepared.fetched_bytes += f.bytes,
    }
    let path = pinned.path().to_path_buf();
    let unpacked = tokio::task::spawn_blocking(move || images.unpack(&path))
        .await
        .map_err(|e| format!("image {name}: unpacking stopped: {e}"))?
        .map_err(|e| format!("image {name}: {e}"))?;
    // Kept in the input cache until here, so it is not evicted while it
    // is unpacked.
    drop(pinned);
    tracing::info!(image = %unpacked.id, archive = %name, size = archive.size, "image unpacked into the image cache");
    Ok(unpacked)
}

/// Takes an image's config and each of its layers from the input cache, or
/// reads it from the consumer (so a layer this host holds for another
/// image does not cross again), then assembles the image into the image
/// cache from them, each layer checked entry by entry and against the
/// config's digest of it. Logs each part with its content hash, read or
/// found.
async fn read_layers(
    net: &crate::net::NetHandle,
    cache: &Cache,
    consumer: PeerId,
    image: &LayeredImageRef,
    images: Arc<ImageCache>,
    prepared: &mut PreparedInputs,
) -> Result<UnpackedImage, String> {
    let name = image.name.clone();
    let id = ImageId::from_bytes(&image.id);
    let mut pinned = Vec::with_capacity(image.layers.len() + 1);
    for part in std::iter::once(&image.config).chain(&image.layers) {
        let (pin, obtained) = obtain_input(net, cache, consumer, part, FetchLimits::default())
            .await
            .map_err(|e| format!("image {name}: {e}"))?;
        let content = ContentHash(part.hash);
        match obtained {
            Obtained::Cached => {
                prepared.cached_bytes += part.size;
                tracing::info!(image = %id, part = %part.path, %content, size = part.size, "image part found in the input cache");
            }
            Obtained::Fetched(f) => {
                prepared.fetched_bytes += f.bytes;
                tracing::info!(image = %id, part = %part.path, %content, size = f.bytes, "image part read from the consumer");
            }
        }
        pinned.push(pin);
    }
    let mut paths = pinned.iter().map(|p| p.path().to_path_buf());
    let config = paths
        .next()
        .ok_or_else(|| format!("image {name}: no config"))?;
    let layers: Vec<PathBuf> = paths.collect();
    let (named, wanted) = (PathBuf::from(&name), id.clone());
    let unpacked =
        tokio::task::spawn_blocking(move || images.assemble(&named, &wanted, &config, &layers))
            .await
            .map_err(|e| format!("image {name}: unpacking stopped: {e}"))?
            .map_err(|e| format!("image {name}: {e}"))?;
    // Kept in the input cache until here, so none is evicted while the
    // image is assembled.
    drop(pinned);
    tracing::info!(image = %unpacked.id, archive = %name, layers = image.layers.len(), "image unpacked into the image cache");
    Ok(unpacked)
}

/// Makes the job's image ready first (found or read and unpacked), then
/// takes each input from the cache or fetches it from `consumer`, verified,
/// and copies it into `stage_dir` (the guest gets its own copy; the cached
/// one stays pinned only while it is copied). Errors name the input or the
/// image.
pub(super) async fn prepare_inputs(
    net: crate::net::NetHandle,
    cache: Cache,
    consumer: PeerId,
    (inputs, image): (Vec<InputRef>, Option<ImageOrder>),
    stage_dir: PathBuf,
) -> Result<PreparedInputs, String> {
    let dir = stage_dir.clone();
    tokio::task::spawn_blocking(move || std::fs::create_dir_all(&dir))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot make {}: {e}", stage_dir.display()))?;
    let mut prepared = PreparedInputs {
        files: Vec::with_capacity(inputs.len()),
        fetched_bytes: 0,
        cached_bytes: 0,
        image: None,
    };
    if let Some(order) = image {
        prepared.image = Some(prepare_image(&net, &cache, consumer, order, &mut prepared).await?);
    }
    for (index, input) in inputs.into_iter().enumerate() {
        let (pinned, obtained) =
            obtain_input(&net, &cache, consumer, &input, FetchLimits::default()).await?;
        match obtained {
            Obtained::Cached => prepared.cached_bytes += input.size,
            Obtained::Fetched(f) => prepared.fetched_bytes += f.bytes,
        }
        let name = &input.path;
        let dest = stage_dir.join(index.to_string());
        let source = pinned.path().to_path_buf();
        let to = dest.clone();
        tokio::task::spawn_blocking(move || copy_input(&source, &to))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("input {name}: copying from the cache: {e}"))?;
        drop(pinned);
        prepared.files.push((input.path, dest));
    }
    Ok(prepared)
}

/// Copies a cached input for one job (the kernel copies; nothing is read
/// into memory).
fn copy_input(source: &Path, dest: &Path) -> std::io::Result<()> {
    std::fs::copy(source, dest).map(|_| ())
}
