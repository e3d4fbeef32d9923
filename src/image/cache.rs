//! The image cache: one directory per image, `sha256-<hex>/`, holding
//! `rootfs/` (the unpacked layers) and `image.json` (its [`ImageConfig`]
//! and sizes). An image is built in `.tmp/` inside the cache and renamed
//! into place whole, so a directory under its id is always complete; a
//! refused or interrupted image leaves nothing behind (`.tmp/` is emptied
//! at open). Knows directories and the plan; not jobs nor guests.

use super::archive::{self, Plan};
use super::layer::{self, remove_any, Budget};
use super::{ImageConfig, ImageError, ImageId, ImageLimits};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The cache directory and the limits every image unpacked into it obeys.
#[derive(Debug)]
pub struct ImageCache {
    dir: PathBuf,
    limits: ImageLimits,
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
        })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn image_dir(&self, id: &ImageId) -> PathBuf {
        self.dir.join(format!("sha256-{}", id.hex()))
    }

    /// Unpacks the image in `archive` (any of the three formats), or finds
    /// it in the cache by its id.
    pub fn unpack(&self, archive: &Path) -> Result<UnpackedImage, ImageError> {
        let io_err = |what: &str, source| ImageError::Io {
            archive: archive.to_path_buf(),
            what: what.to_string(),
            source,
        };
        let file = crate::fsutil::open_regular(archive).map_err(|e| ImageError::Archive {
            archive: archive.to_path_buf(),
            why: e.to_string(),
        })?;
        let plan = archive::plan(archive, &file, &self.limits)?;
        let dest = self.image_dir(&plan.id);
        if let Some(found) = self.cached(&plan.id) {
            return Ok(found);
        }
        let n = NEXT_TMP.fetch_add(1, Ordering::Relaxed);
        let tmp =
            self.dir
                .join(".tmp")
                .join(format!("{}-{}-{n}", plan.id.hex(), std::process::id()));
        let built = self.build(archive, &file, &plan, &tmp);
        if let Err(e) = built {
            let _ = remove_any(&tmp);
            return Err(e);
        }
        match fs::rename(&tmp, &dest) {
            Ok(()) => {}
            // Another unpacking of the same image finished first: its
            // copy is as good as ours.
            Err(_) if self.cached(&plan.id).is_some() => {
                let _ = remove_any(&tmp);
            }
            Err(e) => {
                let _ = remove_any(&tmp);
                return Err(io_err("cannot move the unpacked image into the cache", e));
            }
        }
        Ok(UnpackedImage {
            rootfs: dest.join("rootfs"),
            id: plan.id,
            config: plan.config,
            cached: false,
        })
    }

    /// The image `id` if the cache holds it whole.
    pub fn cached(&self, id: &ImageId) -> Option<UnpackedImage> {
        let dir = self.image_dir(id);
        let bytes =
            crate::fsutil::read_bounded(&dir.join("image.json"), self.limits.max_json_bytes)
                .ok()?;
        let stored: Stored = serde_json::from_slice(&bytes).ok()?;
        (stored.id == id.to_string()).then(|| UnpackedImage {
            id: id.clone(),
            rootfs: dir.join("rootfs"),
            config: stored.config,
            cached: true,
        })
    }

    fn build(
        &self,
        archive: &Path,
        file: &fs::File,
        plan: &Plan,
        tmp: &Path,
    ) -> Result<(), ImageError> {
        let io_err = |what: &str, source: io::Error| ImageError::Io {
            archive: archive.to_path_buf(),
            what: what.to_string(),
            source,
        };
        let root = tmp.join("rootfs");
        fs::create_dir_all(&root)
            .map_err(|e| io_err("cannot make a temporary root in the cache", e))?;
        let mut budget = Budget::default();
        for l in &plan.layers {
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
        fs::write(tmp.join("image.json"), json).map_err(|e| io_err("cannot write image.json", e))
    }
}
