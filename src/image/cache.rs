//! The image cache: one directory per image, `sha256-<hex>/`, holding
//! `rootfs/` (the unpacked layers), `image.json` (its [`ImageConfig`] and
//! sizes, counted while unpacking) and `last-used` (when a task last
//! started in it, Unix milliseconds). An image is built in `.tmp/` inside
//! the cache and renamed into place whole, so a directory under its id is
//! always complete; a refused or interrupted image leaves nothing behind
//! (`.tmp/` is emptied at open). The cache stays within its cap by evicting
//! the least recently used images no guest runs in (`lru`, `lease`).
//! Knows directories and the plan; not jobs nor guests.

use super::archive::{self, Plan};
use super::layer::{self, remove_any, Budget};
use super::lease::InUse;
use super::lru::{self, Entry};
use super::parts;
use super::{ImageConfig, ImageError, ImageId, ImageLease, ImageLimits};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The cache directory and the limits every image unpacked into it obeys.
#[derive(Debug)]
pub struct ImageCache {
    dir: PathBuf,
    limits: ImageLimits,
    /// Held while the set of images changes and while an image found is
    /// leased: no eviction falls between finding an image and leasing it,
    /// and two insertions never count the same free room.
    catalog: Mutex<()>,
    in_use: Arc<InUse>,
    /// Images gained (unpacked into it) and lost (evicted, pruned) since
    /// it was opened: a change is news for the host's summary, which says
    /// which images it holds (read without a scan of the directory).
    changes: AtomicU64,
}

/// An image ready to be a guest's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpackedImage {
    pub id: ImageId,
    /// The unpacked root (read-only to guests by their view).
    pub rootfs: PathBuf,
    pub config: ImageConfig,
    /// Whether it was in the cache already (nothing was unpacked).
    pub cached: bool,
    /// Keeps the image from eviction; the guest holds it until its end.
    pub lease: ImageLease,
}

/// One image in the cache, as `gleaner images list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedImage {
    pub id: ImageId,
    /// Bytes of file contents, counted while it was unpacked (what the
    /// cap counts).
    pub bytes: u64,
    pub files: u64,
    pub layers: usize,
    /// The archive format it came in, or `layers` when it was assembled
    /// from loose parts ([`ImageCache::assemble`]).
    pub format: String,
    /// When a task last started in it, Unix milliseconds (the time it was
    /// unpacked when no use was recorded).
    pub last_used_ms: i64,
    /// A guest runs in it now: eviction and prune leave it.
    pub in_use: bool,
}

/// What `image.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    id: String,
    format: String,
    config: ImageConfig,
    layers: usize,
    files: u64,
    bytes: u64,
}

/// The file of an image's last use.
const LAST_USED: &str = "last-used";

/// Distinct temporary names within one process.
static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

impl ImageCache {
    /// Opens (making it if need be) the cache at `dir`, emptying what an
    /// interrupted unpacking left in `.tmp/`.
    pub fn open(dir: &Path, limits: ImageLimits) -> Result<ImageCache, ImageError> {
        let io_err = |what: &str, source| ImageError::Io {
            archive: dir.to_path_buf(),
            what: what.to_string(),
            source,
        };
        let tmp = dir.join(".tmp");
        remove_any(&tmp).map_err(|e| io_err("cannot empty the cache's .tmp", e))?;
        fs::create_dir_all(&tmp).map_err(|e| io_err("cannot make the image cache", e))?;
        Ok(ImageCache {
            dir: dir.to_path_buf(),
            limits,
            catalog: Mutex::new(()),
            in_use: Arc::new(InUse::default()),
            changes: AtomicU64::new(0),
        })
    }

    /// How many times the set of images held has changed since the cache
    /// was opened (an image unpacked into it, evicted or pruned).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// The cap on all images together, bytes of file contents.
    pub fn cap_bytes(&self) -> u64 {
        self.limits.max_cache_bytes
    }

    fn catalog(&self) -> MutexGuard<'_, ()> {
        self.catalog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn image_dir(&self, id: &ImageId) -> PathBuf {
        self.dir.join(format!("sha256-{}", id.hex()))
    }

    /// Unpacks the image in `archive` (any of the three formats), or finds
    /// it in the cache by its id, for a task about to start in it: its use
    /// is recorded now and the returned lease keeps it from eviction.
    pub fn unpack(&self, archive: &Path) -> Result<UnpackedImage, ImageError> {
        self.unpack_at(archive, jiff::Timestamp::now())
    }

    /// [`ImageCache::unpack`], recording the use at `now`. Room is made
    /// after unpacking, when the image's size is known: the least recently
    /// used images no guest runs in are evicted until it fits the cap; if
    /// the images in use leave too little room, nothing is evicted and the
    /// image is refused ([`ImageError::CacheFull`]).
    pub fn unpack_at(
        &self,
        archive: &Path,
        now: jiff::Timestamp,
    ) -> Result<UnpackedImage, ImageError> {
        let file = crate::fsutil::open_regular(archive).map_err(|e| ImageError::Archive {
            archive: archive.to_path_buf(),
            why: e.to_string(),
        })?;
        let plan = archive::plan(archive, &file, &self.limits)?;
        let files = vec![&file; plan.layers.len()];
        self.install(archive, plan, &files, now)
    }

    /// [`ImageCache::assemble_at`] now: the image `id` from its config and
    /// layer blobs as loose files, for a task about to start in it.
    pub fn assemble(
        &self,
        name: &Path,
        id: &ImageId,
        config: &Path,
        layers: &[PathBuf],
    ) -> Result<UnpackedImage, ImageError> {
        self.assemble_at(name, id, config, layers, jiff::Timestamp::now())
    }

    /// The image `id` assembled from its parts as loose files (what a host
    /// read from a consumer, layer by layer): its `config` (whose SHA-256
    /// must be `id`) and its layer blobs bottom first, each checked entry
    /// by entry as an archive's are and against the config's diff id;
    /// errors name the image by `name` and each layer by its position and
    /// diff id. Found in the cache by its id if it is there already; its
    /// use is recorded at `now` and it comes leased, as from
    /// [`ImageCache::unpack_at`].
    pub fn assemble_at(
        &self,
        name: &Path,
        id: &ImageId,
        config: &Path,
        layers: &[PathBuf],
        now: jiff::Timestamp,
    ) -> Result<UnpackedImage, ImageError> {
        if let Some(found) = self.cached_at(id, now) {
            return Ok(found);
        }
        let unreadable = |what: String, e: crate::fsutil::FileReadError| ImageError::Archive {
            archive: name.to_path_buf(),
            why: format!("{what}: {e}"),
        };
        let config = crate::fsutil::read_bounded(config, self.limits.max_json_bytes)
            .map_err(|e| unreadable("the config".into(), e))?;
        let mut files = Vec::with_capacity(layers.len());
        let mut sizes = Vec::with_capacity(layers.len());
        for (i, path) in layers.iter().enumerate() {
            let file = crate::fsutil::open_regular(path)
                .map_err(|e| unreadable(format!("layer {}", i + 1), e))?;
            let size = file.metadata().map_err(|source| ImageError::Io {
                archive: name.to_path_buf(),
                what: format!("cannot stat layer {}", i + 1),
                source,
            })?;
            sizes.push(size.len());
            files.push(file);
        }
        let plan = parts::loose_plan(name, id, &config, &sizes, &self.limits)?;
        let files: Vec<&fs::File> = files.iter().collect();
        self.install(name, plan, &files, now)
    }

    /// Unpacks `plan` (layer `i` read from `files[i]`) into a temporary
    /// directory in the cache and renames it into place whole, making room
    /// first; or finds the image there (another unpacking of it came
    /// first). Its use is recorded at `now` and it comes leased.
    fn install(
        &self,
        archive: &Path,
        plan: Plan,
        files: &[&fs::File],
        now: jiff::Timestamp,
    ) -> Result<UnpackedImage, ImageError> {
        let io_err = |what: &str, source| ImageError::Io {
            archive: archive.to_path_buf(),
            what: what.to_string(),
            source,
        };
        let dest = self.image_dir(&plan.id);
        if let Some(found) = self.cached_at(&plan.id, now) {
            return Ok(found);
        }
        let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
        let tmp =
            self.dir
                .join(".tmp")
                .join(format!("{}-{}-{n}", plan.id.hex(), std::process::id()));
        let bytes = match self.build(archive, files, &plan, &tmp) {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = remove_any(&tmp);
                return Err(e);
            }
        };
        let _catalog = self.catalog();
        // Another unpacking of the same image finished first: its copy is
        // as good as ours.
        if let Some(found) = self.lease_found(&plan.id, now) {
            let _ = remove_any(&tmp);
            return Ok(found);
        }
        if let Err(e) = self.make_room(archive, bytes) {
            let _ = remove_any(&tmp);
            return Err(e);
        }
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = remove_any(&tmp);
            return Err(io_err("cannot move the unpacked image into the cache", e));
        }
        self.changes.fetch_add(1, Ordering::Relaxed);
        self.record_use(&plan.id, now);
        Ok(UnpackedImage {
            rootfs: dest.join("rootfs"),
            lease: self.in_use.lease(&plan.id),
            id: plan.id,
            config: plan.config,
            cached: false,
        })
    }

    /// The image `id` if the cache holds it whole, for a task about to
    /// start in it: its use is recorded and it comes leased.
    pub fn cached(&self, id: &ImageId) -> Option<UnpackedImage> {
        self.cached_at(id, jiff::Timestamp::now())
    }

    fn cached_at(&self, id: &ImageId, now: jiff::Timestamp) -> Option<UnpackedImage> {
        let _catalog = self.catalog();
        self.lease_found(id, now)
    }

    /// The image `id` leased with its use recorded, if the cache holds it
    /// (the caller holds the catalog lock).
    fn lease_found(&self, id: &ImageId, now: jiff::Timestamp) -> Option<UnpackedImage> {
        let dir = self.image_dir(id);
        let stored = self.stored(id)?;
        self.record_use(id, now);
        Some(UnpackedImage {
            id: id.clone(),
            rootfs: dir.join("rootfs"),
            config: stored.config,
            cached: true,
            lease: self.in_use.lease(id),
        })
    }

    /// What `image.json` of `id` says, if it is whole and names `id`.
    fn stored(&self, id: &ImageId) -> Option<Stored> {
        let path = self.image_dir(id).join("image.json");
        let bytes = crate::fsutil::read_bounded(&path, self.limits.max_json_bytes).ok()?;
        let stored: Stored = serde_json::from_slice(&bytes).ok()?;
        (stored.id == id.to_string()).then_some(stored)
    }

    /// Writes when a task last started in `id`. A write that fails costs
    /// only the eviction order, so it is a warning.
    fn record_use(&self, id: &ImageId, now: jiff::Timestamp) {
        let dir = self.image_dir(id);
        let tmp = dir.join(format!("{LAST_USED}.tmp"));
        let written = fs::write(&tmp, now.as_millisecond().to_string())
            .and_then(|()| fs::rename(&tmp, dir.join(LAST_USED)));
        if let Err(e) = written {
            tracing::warn!(image = %id, error = %e, "cannot record the image's last use");
        }
    }

    /// When a task last started in `id`: its `last-used`, else the time
    /// its `image.json` was written (an image never used since unpacking).
    fn last_used_ms(&self, id: &ImageId) -> i64 {
        let dir = self.image_dir(id);
        crate::fsutil::read_bounded(&dir.join(LAST_USED), 64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|t| t.trim().parse().ok())
            .or_else(|| {
                let modified = fs::metadata(dir.join("image.json")).ok()?.modified().ok()?;
                let ts = jiff::Timestamp::try_from(modified).ok()?;
                Some(ts.as_millisecond())
            })
            .unwrap_or(0)
    }

    /// Every image the cache holds whole, most recently used first.
    pub fn list(&self) -> Result<Vec<CachedImage>, ImageError> {
        let _catalog = self.catalog();
        self.list_locked()
    }

    fn list_locked(&self) -> Result<Vec<CachedImage>, ImageError> {
        let io_err = |source| ImageError::Io {
            archive: self.dir.clone(),
            what: "cannot list the image cache".to_string(),
            source,
        };
        let mut images = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_err)? {
            let entry = entry.map_err(io_err)?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("sha256-"))
                .and_then(ImageId::from_hex)
            else {
                continue;
            };
            let Some(stored) = self.stored(&id) else {
                continue;
            };
            images.push(CachedImage {
                bytes: stored.bytes,
                files: stored.files,
                layers: stored.layers,
                format: stored.format,
                last_used_ms: self.last_used_ms(&id),
                in_use: self.in_use.contains(&id),
                id,
            });
        }
        images.sort_by(|a, b| {
            b.last_used_ms
                .cmp(&a.last_used_ms)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(images)
    }

    /// Evicts what `incoming` more bytes need (the caller holds the
    /// catalog lock); refuses, evicting nothing, when the images in use
    /// leave too little room.
    fn make_room(&self, archive: &Path, incoming: u64) -> Result<(), ImageError> {
        let images = self.list_locked()?;
        let room = lru::make_room(&entries(&images), incoming, self.cap_bytes());
        if room.over > 0 {
            let in_use: Vec<String> = images
                .iter()
                .filter(|i| i.in_use)
                .map(|i| format!("{} ({} MiB)", i.id, i.bytes >> 20))
                .collect();
            return Err(ImageError::CacheFull {
                archive: archive.to_path_buf(),
                why: format!(
                    "its {incoming} bytes do not fit the image cache's cap of {} bytes ([guest] image_cache_mib) beside the images guests run in now: {}",
                    self.cap_bytes(),
                    in_use.join(", ")
                ),
            });
        }
        for id in &room.evict {
            self.evict(id)?;
            tracing::info!(image = %id, "evicted from the image cache to make room");
        }
        Ok(())
    }

    /// Removes images no guest runs in, least recently used first, until
    /// the rest hold at most `keep_bytes`; returns those removed.
    pub fn prune(&self, keep_bytes: u64) -> Result<Vec<CachedImage>, ImageError> {
        let _catalog = self.catalog();
        let images = self.list_locked()?;
        let room = lru::make_room(&entries(&images), 0, keep_bytes);
        let mut removed = Vec::new();
        for id in &room.evict {
            self.evict(id)?;
            removed.extend(images.iter().find(|i| &i.id == id).cloned());
        }
        Ok(removed)
    }

    /// Moves `id` out of its place into `.tmp/` (one rename, so it is gone
    /// whole at once) and deletes it there.
    fn evict(&self, id: &ImageId) -> Result<(), ImageError> {
        let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
        let gone =
            self.dir
                .join(".tmp")
                .join(format!("evicted-{}-{}-{n}", id.hex(), std::process::id()));
        fs::rename(self.image_dir(id), &gone).map_err(|source| ImageError::Io {
            archive: self.image_dir(id),
            what: "cannot evict the image".to_string(),
            source,
        })?;
        self.changes.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = remove_any(&gone) {
            tracing::warn!(image = %id, error = %e, "cannot delete an evicted image (emptied at the next start)");
        }
        tracing::debug!(image = %id, "evicted from the image cache");
        Ok(())
    }

    fn build(
        &self,
        archive: &Path,
        files: &[&fs::File],
        plan: &Plan,
        tmp: &Path,
    ) -> Result<u64, ImageError> {
        let io_err = |what: &str, source: io::Error| ImageError::Io {
            archive: archive.to_path_buf(),
            what: what.to_string(),
            source,
        };
        let root = tmp.join("rootfs");
        fs::create_dir_all(&root)
            .map_err(|e| io_err("cannot make a temporary root in the cache", e))?;
        let mut budget = Budget::default();
        for (l, file) in plan.layers.iter().zip(files) {
            layer::apply(&root, archive, file, l, &self.limits, &mut budget)?;
        }
        let stored = Stored {
            id: plan.id.to_string(),
            format: plan.format.to_string(),
            config: plan.config.clone(),
            layers: plan.layers.len(),
            files: budget.files,
            bytes: budget.bytes,
        };
        let json = serde_json::to_vec_pretty(&stored)
            .map_err(|e| io_err("cannot encode image.json", io::Error::other(e)))?;
        fs::write(tmp.join("image.json"), json)
            .map_err(|e| io_err("cannot write image.json", e))?;
        Ok(budget.bytes)
    }
}

/// The cached images as eviction sees them.
fn entries(images: &[CachedImage]) -> Vec<Entry> {
    images
        .iter()
        .map(|i| Entry {
            id: i.id.clone(),
            bytes: i.bytes,
            last_used_ms: i.last_used_ms,
            in_use: i.in_use,
        })
        .collect()
}
