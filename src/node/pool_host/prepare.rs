//! A peer's job made ready to start: its image found in the image cache or
//! read like an input and unpacked there (issue 31), each input taken from
//! the cache or fetched from the consumer and verified, then copied into
//! the job's own directory (the guest gets its own copy). It must not know
//! the pool host's loop; errors name the input or the image.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use libp2p::PeerId;

use crate::data::{obtain_input, Cache, FetchLimits, Obtained};
use crate::guest::{GuestImage, IMAGE_WORK_DIR};
use crate::image::{ImageCache, ImageId};
use crate::net::protocol::{ImageRef, InputRef};

/// A job's inputs, verified and copied into its own directory, and its
/// image, unpacked.
#[derive(Debug)]
pub(super) struct PreparedInputs {
    /// (path in the work directory, prepared file).
    pub(super) files: Vec<(String, PathBuf)>,
    /// Bytes read from the consumer (inputs and the image's archive).
    pub(super) fetched_bytes: u64,
    /// Bytes of inputs found in the input cache, and of an image found in
    /// the image cache (its archive's size): what did not cross.
    pub(super) cached_bytes: u64,
    /// The root the guest runs in, when the job brought an image.
    pub(super) image: Option<GuestImage>,
}

/// The image of a job to prepare: what the consumer names, and where this
/// host keeps images.
pub(super) struct ImageOrder {
    pub(super) image: ImageRef,
    pub(super) cache: Arc<ImageCache>,
}

/// Finds the job's image in the image cache, or reads its archive from the
/// consumer (through the input cache, verified chunk by chunk) and unpacks
/// it there, every entry checked; an archive that unpacks to another id
/// than the job names is refused, naming both. Adds the archive's bytes to
/// `prepared`'s counts (fetched, or cached when the image was there).
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
    let id = ImageId::from_bytes(&image.id);
    let name = image.archive.path.clone();
    let size = image.archive.size;
    let (lookup, wanted) = (images.clone(), id.clone());
    let found = tokio::task::spawn_blocking(move || lookup.cached(&wanted))
        .await
        .map_err(|e| format!("image {name}: looking in the image cache stopped: {e}"))?;
    let unpacked = match found {
        Some(img) => {
            prepared.cached_bytes += size;
            img
        }
        None => {
            let (pinned, obtained) =
                obtain_input(net, cache, consumer, &image.archive, FetchLimits::default())
                    .await
                    .map_err(|e| format!("image {e}"))?;
            match obtained {
                Obtained::Cached => prepared.cached_bytes += size,
                Obtained::Fetched(f) => prepared.fetched_bytes += f.bytes,
            }
            let archive = pinned.path().to_path_buf();
            let unpacked = tokio::task::spawn_blocking(move || images.unpack(&archive))
                .await
                .map_err(|e| format!("image {name}: unpacking stopped: {e}"))?
                .map_err(|e| format!("image {name}: {e}"))?;
            // Kept in the input cache until here, so it is not evicted
            // while it is unpacked.
            drop(pinned);
            tracing::info!(image = %unpacked.id, archive = %name, size, "image unpacked into the image cache");
            unpacked
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
