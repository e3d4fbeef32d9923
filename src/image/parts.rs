//! An image by its parts, as it crosses to a host layer by layer: where
//! an archive holds its config and each layer blob ([`archive_parts`], what
//! a consumer offers, each part as its own content-addressed input), and
//! the plan for an image assembled from those parts as loose files
//! ([`loose_plan`], what a host read). The parts are the archive's own
//! bytes, so a layer two images share is the same input in both, whatever
//! archive format either came in.
//!
//! The config names every layer by the SHA-256 of its uncompressed tar
//! (`rootfs.diff_ids`) and the image's id is the config's SHA-256, so an id
//! a host was asked for commits to every layer it assembles. Knows archives
//! and plans; not the data layer, the network nor jobs.

use super::archive::{self, LayerRef, Member, Plan};
use super::stream::hex;
use super::{ImageError, ImageId, ImageLimits};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Where an image archive holds the parts a host needs to assemble it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveParts {
    /// The image's id (the SHA-256 of its config).
    pub id: ImageId,
    /// `docker-archive` or `oci-layout`.
    pub format: &'static str,
    /// The config's bytes.
    pub config: Member,
    /// Each layer blob as stored (gzip allowed), bottom first.
    pub layers: Vec<Member>,
}

/// Where the archive at `path` holds its config and its layers, read from
/// its index and documents only (each bounded; no layer is read); `None`
/// for a plain root-filesystem tar, which has no config and is its own one
/// layer (it crosses whole, and is not read here).
pub fn archive_parts(
    path: &Path,
    limits: &ImageLimits,
) -> Result<Option<ArchiveParts>, ImageError> {
    let file = crate::fsutil::open_regular(path).map_err(|e| ImageError::Archive {
        archive: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let len = file
        .metadata()
        .map_err(|source| ImageError::Io {
            archive: path.to_path_buf(),
            what: "cannot stat the archive".into(),
            source,
        })?
        .len();
    let Some(plan) = archive::image_plan(path, &file, limits, len)? else {
        return Ok(None);
    };
    let Some(config) = plan.config_blob else {
        return Err(ImageError::Archive {
            archive: path.to_path_buf(),
            why: "the image has no config".into(),
        });
    };
    Ok(Some(ArchiveParts {
        id: plan.id,
        format: plan.format,
        config,
        layers: plan.layers.iter().map(|l| l.member).collect(),
    }))
}

/// The plan for the image `id` from its `config`'s bytes and its layer
/// blobs of `sizes` bytes as loose files (each read whole: offset 0): the
/// config must hash to `id` and name one diff id per layer, and each layer
/// is named in errors by its position and diff id. Errors name the image
/// by `name`.
pub fn loose_plan(
    name: &Path,
    id: &ImageId,
    config: &[u8],
    sizes: &[u64],
    limits: &ImageLimits,
) -> Result<Plan, ImageError> {
    let refuse = |why: String| ImageError::Archive {
        archive: name.to_path_buf(),
        why,
    };
    let sha = hex(&Sha256::digest(config));
    if sha != id.hex() {
        return Err(refuse(format!(
            "its config has sha256 {sha}; the job names the image {id}"
        )));
    }
    if sizes.len() > limits.max_layers {
        return Err(refuse(format!(
            "{} layers (at most {})",
            sizes.len(),
            limits.max_layers
        )));
    }
    let (run, diff_ids) = archive::parse_config(name, config, "config")?;
    if diff_ids.len() != sizes.len() {
        return Err(refuse(format!(
            "the config names {} layer digests for {} layers",
            diff_ids.len(),
            sizes.len()
        )));
    }
    let layers = sizes
        .iter()
        .zip(diff_ids)
        .enumerate()
        .map(|(i, (&size, diff_id))| LayerRef {
            name: format!("{} (sha256:{diff_id})", i + 1),
            member: Member { offset: 0, size },
            // The bytes were checked chunk by chunk as they crossed; what
            // they unpack to is checked against the diff id.
            blob_sha: None,
            diff_id: Some(diff_id),
        })
        .collect();
    Ok(Plan {
        id: id.clone(),
        format: "layers",
        config: run,
        config_blob: None,
        layers,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{
        check_two_layers, config, docker_archive, gzip, layer, oci_archive, sha, two_layers, E,
    };
    use super::*;
    use crate::image::ImageCache;
    use std::path::PathBuf;

    /// The bytes of `m` in `archive`.
    fn bytes(archive: &[u8], m: Member) -> Vec<u8> {
        archive[m.offset as usize..(m.offset + m.size) as usize].to_vec()
    }

    #[test]
    fn an_archives_parts_are_its_config_and_its_layer_blobs_in_either_format() {
        let dir = tempfile::tempdir().unwrap();
        let layers = two_layers();
        let cfg = config(&layers, &["A=1"], &["/bin/tool"]);
        let blobs: Vec<Vec<u8>> = layers.iter().map(|l| gzip(l)).collect();
        for (format, archive, stored) in [
            ("docker-archive", docker_archive(&layers, &cfg), &layers),
            ("oci-layout", oci_archive(&blobs, &cfg, None), &blobs),
        ] {
            let path = dir.path().join(format);
            std::fs::write(&path, &archive).unwrap();
            let parts = archive_parts(&path, &ImageLimits::default())
                .unwrap()
                .unwrap();
            assert_eq!(parts.format, format);
            assert_eq!(parts.id.hex(), sha(&cfg), "{format}");
            assert_eq!(bytes(&archive, parts.config), cfg, "{format}");
            let got: Vec<Vec<u8>> = parts.layers.iter().map(|m| bytes(&archive, *m)).collect();
            assert_eq!(&got, stored, "{format}: the blobs as stored, in order");
        }
        // A plain root filesystem has no config and is its own one layer:
        // it has no parts to cross apart.
        let tar = layer(&[E::File("etc/os-release", b"ID=plain\n", 0o644)]);
        let path = dir.path().join("rootfs.tar");
        std::fs::write(&path, &tar).unwrap();
        assert_eq!(archive_parts(&path, &ImageLimits::default()).unwrap(), None);
    }

    /// The config and the layers as loose files in `dir`.
    fn loose(dir: &Path, cfg: &[u8], blobs: &[Vec<u8>]) -> (PathBuf, Vec<PathBuf>) {
        let config = dir.join("config");
        std::fs::write(&config, cfg).unwrap();
        let layers = blobs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let p = dir.join(format!("layer{i}"));
                std::fs::write(&p, b).unwrap();
                p
            })
            .collect();
        (config, layers)
    }

    #[test]
    fn an_image_assembled_from_loose_parts_is_the_image_its_archive_unpacks_to() {
        let dir = tempfile::tempdir().unwrap();
        let layers = two_layers();
        let cfg = config(&layers, &["A=1"], &["/bin/tool"]);
        // One layer gzipped, one not: each is read as its archive held it.
        let blobs = vec![gzip(&layers[0]), layers[1].clone()];
        let (config_path, layer_paths) = loose(dir.path(), &cfg, &blobs);
        let cache = ImageCache::open(&dir.path().join("cache"), ImageLimits::default()).unwrap();
        let id = ImageId::from_hex(&sha(&cfg)).unwrap();
        let name = Path::new("probe.tar");
        let img = cache
            .assemble(name, &id, &config_path, &layer_paths)
            .unwrap();
        assert!(!img.cached);
        assert_eq!(img.id, id);
        check_two_layers(&img);
        let listed = cache.list().unwrap();
        assert_eq!((listed.len(), listed[0].layers), (1, 2));
        // Found by its id the next time, and the same image an archive of
        // it unpacks to.
        let again = cache
            .assemble(name, &id, &config_path, &layer_paths)
            .unwrap();
        assert!(again.cached);
        let archive = dir.path().join("image.tar");
        std::fs::write(&archive, docker_archive(&layers, &cfg)).unwrap();
        let unpacked = cache.unpack(&archive).unwrap();
        assert!(unpacked.cached, "the same id");
    }

    /// Nothing of a refused image stays in the cache.
    fn empty(cache: &ImageCache) {
        assert!(cache.list().unwrap().is_empty());
        assert_eq!(
            std::fs::read_dir(cache.dir().join(".tmp")).unwrap().count(),
            0
        );
    }

    #[test]
    fn loose_parts_unlike_the_image_named_or_hostile_are_refused_by_layer() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ImageCache::open(&dir.path().join("cache"), ImageLimits::default()).unwrap();
        let name = Path::new("probe.tar");
        let layers = two_layers();
        let cfg = config(&layers, &["A=1"], &["/bin/tool"]);
        let id = ImageId::from_hex(&sha(&cfg)).unwrap();
        let refused = |cfg: &[u8], blobs: &[Vec<u8>], id: &ImageId| {
            let parts = tempfile::tempdir_in(dir.path()).unwrap();
            let (c, l) = loose(parts.path(), cfg, blobs);
            let e = cache.assemble(name, id, &c, &l).unwrap_err().to_string();
            empty(&cache);
            e
        };
        // A config that is not the image named.
        let other = ImageId::from_hex(&"0".repeat(64)).unwrap();
        let e = refused(&cfg, &layers, &other);
        assert!(
            e.contains("probe.tar") && e.contains("the job names"),
            "{e}"
        );
        // A layer missing, and a layer swapped for another.
        let e = refused(&cfg, &layers[..1], &id);
        assert!(e.contains("2 layer digests for 1 layers"), "{e}");
        let swapped = vec![layers[0].clone(), layer(&[E::File("x", b"y", 0o644)])];
        let e = refused(&cfg, &swapped, &id);
        let second = format!("layer 2 (sha256:{})", sha(&layers[1]));
        assert!(e.contains(&second) && e.contains("the config says"), "{e}");
        // A hostile layer is refused naming the layer and the entry, as
        // in an archive.
        let hostile = vec![layer(&[E::File("/etc/passwd", b"x", 0o644)])];
        let hostile_cfg = config(&hostile, &[], &[]);
        let hostile_id = ImageId::from_hex(&sha(&hostile_cfg)).unwrap();
        let e = refused(&hostile_cfg, &hostile, &hostile_id);
        let first = format!("layer 1 (sha256:{})", sha(&hostile[0]));
        assert!(
            e.contains(&first) && e.contains("/etc/passwd") && e.contains("absolute"),
            "{e}"
        );
    }
}
