//! Job images (issue 31): a task brings the root filesystem it runs in, as a
//! `docker save` / `podman save` archive (docker-archive), an OCI image
//! layout tarball, or a plain root-filesystem tar. This module reads such a
//! file without trusting it and unpacks it once into a per-image read-only
//! cache directory that the guest's view can use as its root.
//!
//! - `spec`: the JSON documents (docker `manifest.json`, OCI `index.json`,
//!   manifests, the image config) as serde structs, and the few config
//!   fields a guest honours ([`ImageConfig`]).
//! - `archive`: the outer tarball: an index of its entries (offsets into the
//!   file, nothing extracted), which format it is, and the plan: the image's
//!   id, its config and its layers in order with their digests.
//! - `stream`: one layer's bytes, counted, hashed and decompressed while read.
//! - `layer`: one layer applied onto the root being built, every entry
//!   checked (paths, links, types, set-id bits, whiteouts, sizes, counts).
//! - `cache`: the cache directory: one `sha256-<hex>/` per image, built in a
//!   temporary directory inside the cache and renamed into place whole.
//! - `lease`: which images guests run in ([`ImageLease`]), so that eviction
//!   never removes one under a running guest.
//! - `lru`: which images leave a full cache (least recently used first,
//!   never one in use), a pure decision over sizes and times.
//! - `parts`: an image by its parts, as it crosses to a host layer by
//!   layer: where an archive holds its config and layer blobs, and the
//!   plan for an image assembled from them as loose files.
//!
//! Hostile input is refused with an [`ImageError`] naming the archive, the
//! layer and the entry; nothing is written outside the cache, and nothing is
//! left in it from a refused image. This module knows files, tar and JSON;
//! it knows nothing of jobs, guests, the network or the node.

mod archive;
mod cache;
mod layer;
mod lease;
mod lru;
mod parts;
mod spec;
mod stream;

pub use archive::Member;
pub use cache::{CachedImage, ImageCache, UnpackedImage};
pub use lease::ImageLease;
pub use parts::{archive_parts, ArchiveParts};
pub use spec::ImageConfig;

use std::fmt;
use std::io;
use std::path::PathBuf;

/// An image's identity: the SHA-256 of its config (docker's "image id"), or
/// of the whole file for a plain root-filesystem tar. The config names every
/// layer by the digest of its contents, so the id commits to the whole root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageId(String);

impl ImageId {
    /// From 64 lowercase hex digits; anything else is refused.
    pub fn from_hex(hex: &str) -> Option<ImageId> {
        let ok = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| ImageId(hex.to_string()))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0
    }

    /// From the 32 bytes of the digest (as the wire carries it).
    pub fn from_bytes(bytes: &[u8; 32]) -> ImageId {
        ImageId(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The 32 bytes of the digest.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            // Made only from 64 lowercase hex digits, so every pair parses.
            *byte =
                u8::from_str_radix(self.0.get(2 * i..2 * i + 2).unwrap_or("00"), 16).unwrap_or(0);
        }
        out
    }
}

impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// What to do with a setuid or setgid bit on a file of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetIdBits {
    /// Refuse the image, naming the file (the rule, the default).
    Refuse,
    /// Unpack the file without the bits (a guest runs with `no_new_privs`
    /// in a user namespace, where the bits do nothing anyway; but in the
    /// cache on the host a set-id file must never exist).
    Strip,
}

/// The bounds an image must stay within; each is counted while reading,
/// never taken from a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Bytes of one layer as a tar stream (after decompression), and of one
    /// layer blob as stored.
    pub max_layer_bytes: u64,
    /// Bytes of file contents in the whole unpacked image.
    pub max_image_bytes: u64,
    /// Entries (files, directories, links, whiteouts) in the whole image.
    pub max_files: u64,
    /// Layers in one image (docker's own limit is 127).
    pub max_layers: usize,
    /// Bytes of one JSON document (manifest, index, config).
    pub max_json_bytes: u64,
    /// Entries in the outer archive.
    pub max_archive_entries: usize,
    /// Set-id bits on files.
    pub set_id: SetIdBits,
    /// Bytes of file contents of every image in the cache together (the
    /// owner's `[guest] image_cache_mib`): least recently used images not
    /// in use are evicted to make room, and one image over it alone is
    /// refused while it is unpacked.
    pub max_cache_bytes: u64,
}

impl Default for ImageLimits {
    fn default() -> ImageLimits {
        ImageLimits {
            max_layer_bytes: 2 << 30,
            max_image_bytes: 4 << 30,
            max_files: 200_000,
            max_layers: 127,
            max_json_bytes: 1 << 20,
            max_archive_entries: 10_000,
            set_id: SetIdBits::Refuse,
            max_cache_bytes: DEFAULT_CACHE_MIB << 20,
        }
    }
}

/// The image cache's default cap, MiB: two images at the per-image limit.
pub const DEFAULT_CACHE_MIB: u64 = 8192;

/// Why an image was not unpacked. Every variant names what it is about.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The outer archive or one of its JSON documents is malformed or lies.
    #[error("image {archive}: {why}")]
    Archive { archive: PathBuf, why: String },
    /// One entry of one layer was refused.
    #[error("image {archive}: layer {layer}: entry {entry:?}: {why}")]
    Entry {
        archive: PathBuf,
        layer: String,
        entry: String,
        why: String,
    },
    /// A layer as a whole was refused (size, digest, compression).
    #[error("image {archive}: layer {layer}: {why}")]
    Layer {
        archive: PathBuf,
        layer: String,
        why: String,
    },
    /// The image is within every limit but the cache has no room for it:
    /// the images that fill it are in use by running guests.
    #[error("image {archive}: {why}")]
    CacheFull { archive: PathBuf, why: String },
    /// The file system failed us (not the image's fault).
    #[error("image {archive}: {what}: {source}")]
    Io {
        archive: PathBuf,
        what: String,
        #[source]
        source: io::Error,
    },
}

#[cfg(test)]
mod eviction_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod id_tests {
    use super::ImageId;

    #[test]
    fn an_image_id_goes_to_the_wire_and_back() {
        let hex = "00ff10ab".repeat(8);
        let id = ImageId::from_hex(&hex).unwrap();
        let bytes = id.to_bytes();
        assert_eq!(&bytes[..4], &[0x00, 0xff, 0x10, 0xab]);
        assert_eq!(ImageId::from_bytes(&bytes), id);
        assert_eq!(id.to_string(), format!("sha256:{hex}"));
    }
}
