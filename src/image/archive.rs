//! The outer archive: an index of its members (where each lies in the file;
//! nothing is extracted), which of the three formats it is, and the
//! [`Plan`]: the image's id, its run config and its layers in order, each
//! with the digests it must match.
//!
//! - docker-archive (`docker save`): `manifest.json` names the config and
//!   the layer tars; the config's `rootfs.diff_ids` give each layer's digest.
//! - OCI image layout: `index.json` → (an index →) a manifest → the config
//!   and the layer blobs under `blobs/sha256/`, each checked against its
//!   descriptor's digest and size. (`docker save` since 25 writes both; the
//!   docker manifest is read then.)
//! - anything else is a plain root-filesystem tar: one layer, no config,
//!   its id the SHA-256 of the file.
//!
//! Every JSON document is bounded before it is read; member links inside the
//! archive are followed a few hops at most and never out of it. Knows the
//! archive's layout, not what is inside a layer.

use super::spec::{self, ConfigBlob, Descriptor, DockerManifest, OciIndex, OciManifest};
use super::stream::hex;
use super::{ImageConfig, ImageError, ImageId, ImageLimits};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Where a member's bytes lie in the archive file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub offset: u64,
    pub size: u64,
}

/// A reader over `size` bytes of `file` from `offset` (positional reads,
/// so several may share the file).
pub struct Section<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl<'a> Section<'a> {
    pub fn new(file: &'a File, m: Member) -> Section<'a> {
        Section {
            file,
            pos: m.offset,
            end: m.offset.saturating_add(m.size),
        }
    }
}

impl Read for Section<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// One layer to apply.
#[derive(Debug, Clone)]
pub struct LayerRef {
    /// How errors name it: its position and its name in the archive.
    pub name: String,
    pub member: Member,
    /// The SHA-256 the stored blob must have, when the format says.
    pub blob_sha: Option<String>,
    /// The SHA-256 the uncompressed tar stream must have (`diff_id`).
    pub diff_id: Option<String>,
}

/// What to unpack.
#[derive(Debug)]
pub struct Plan {
    pub id: ImageId,
    pub format: &'static str,
    pub config: ImageConfig,
    /// Where the config's bytes lie in the archive (its SHA-256 is `id`);
    /// `None` for a plain root-filesystem tar, which has no config.
    pub config_blob: Option<Member>,
    pub layers: Vec<LayerRef>,
}

struct Index<'a> {
    path: &'a Path,
    file: &'a File,
    members: HashMap<String, Member>,
    /// Link members: name → the member name they stand for.
    links: HashMap<String, String>,
    /// Names held more than once: ambiguous, so never read.
    twice: HashSet<String>,
    limits: &'a ImageLimits,
}

fn archive_err(path: &Path, why: impl Into<String>) -> ImageError {
    ImageError::Archive {
        archive: path.to_path_buf(),
        why: why.into(),
    }
}

/// Plans the unpacking of the archive open as `file`.
pub fn plan(path: &Path, file: &File, limits: &ImageLimits) -> Result<Plan, ImageError> {
    let len = file
        .metadata()
        .map_err(|source| ImageError::Io {
            archive: path.to_path_buf(),
            what: "cannot stat the archive".into(),
            source,
        })?
        .len();
    match image_plan(path, file, limits, len)? {
        Some(plan) => Ok(plan),
        None => {
            let whole = Member {
                offset: 0,
                size: len,
            };
            rootfs_plan(path, file, whole, limits)
        }
    }
}

/// The plan of a docker-archive or an OCI layout open as `file` (of `len`
/// bytes), or `None` when it is neither: a plain root-filesystem tar, not
/// read any further here (its id is the whole file's digest).
pub fn image_plan(
    path: &Path,
    file: &File,
    limits: &ImageLimits,
    len: u64,
) -> Result<Option<Plan>, ImageError> {
    let Some(index) = index(path, file, limits, len)? else {
        return Ok(None);
    };
    if index.members.contains_key("manifest.json") {
        docker_plan(&index).map(Some)
    } else if index.members.contains_key("index.json") {
        oci_plan(&index).map(Some)
    } else {
        Ok(None)
    }
}

/// The archive's members, or `None` when it is not a tar of a few
/// documents and blobs (too many members: a root filesystem).
fn index<'a>(
    path: &'a Path,
    file: &'a File,
    limits: &'a ImageLimits,
    len: u64,
) -> Result<Option<Index<'a>>, ImageError> {
    let bad = |why: String| archive_err(path, why);
    let mut members = HashMap::new();
    let mut links = HashMap::new();
    let mut twice = HashSet::new();
    let mut archive = tar::Archive::new(file);
    let entries = archive
        .entries_with_seek()
        .map_err(|e| bad(format!("not a tar archive: {e}")))?;
    for (n, entry) in entries.enumerate() {
        if n >= limits.max_archive_entries {
            return Ok(None);
        }
        let entry = entry.map_err(|e| bad(format!("unreadable tar member #{n}: {e}")))?;
        let raw = entry.path_bytes();
        let Some(name) = member_name(&raw) else {
            // Names no image format uses; a root filesystem may.
            continue;
        };
        let kind = entry.header().entry_type();
        let target = entry
            .link_name_bytes()
            .and_then(|t| String::from_utf8(t.into_owned()).ok());
        if kind.is_file() {
            let m = Member {
                offset: entry.raw_file_position(),
                size: entry.size(),
            };
            if m.offset.checked_add(m.size).is_none_or(|end| end > len) {
                return Err(bad(format!("member {name} runs past the end of the file")));
            }
            if members.insert(name.clone(), m).is_some() {
                // Refused only if a format names it: a root filesystem
                // may repeat a name (the last copy wins there).
                twice.insert(name);
            }
        } else if kind.is_symlink() {
            let Some(target) = target else { continue };
            let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
            if let Some(t) = join_inside(dir, &target) {
                links.insert(name, t);
            }
        } else if kind.is_hard_link() {
            if let Some(t) = target.as_deref().and_then(|t| join_inside("", t)) {
                links.insert(name, t);
            }
        }
    }
    Ok(Some(Index {
        path,
        file,
        members,
        links,
        twice,
        limits,
    }))
}

/// A member name as formats write it (`./` and `/` prefixes dropped), or
/// `None` when it is not UTF-8 or climbs.
fn member_name(raw: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(raw).ok()?;
    join_inside("", s)
}

/// `target` read from directory `dir` of the archive, lexically, or `None`
/// when it climbs out of the archive.
fn join_inside(dir: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        dir.split('/').filter(|p| !p.is_empty()).collect()
    };
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// An image config's run settings and its layers' diff ids (hex), bottom
/// first; errors name `name` in the archive at `path`.
pub fn parse_config(
    path: &Path,
    bytes: &[u8],
    name: &str,
) -> Result<(ImageConfig, Vec<String>), ImageError> {
    let err = |why: String| archive_err(path, format!("{name}: {why}"));
    let blob: ConfigBlob = serde_json::from_slice(bytes).map_err(|e| err(e.to_string()))?;
    let config = blob.config.unwrap_or_default().to_config().map_err(err)?;
    let diff_ids = blob
        .rootfs
        .map(|r| r.diff_ids)
        .unwrap_or_default()
        .iter()
        .map(|d| spec::sha256_hex(d).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("rootfs.diff_ids: {e}")))?;
    Ok((config, diff_ids))
}

impl Index<'_> {
    fn err(&self, why: impl Into<String>) -> ImageError {
        archive_err(self.path, why)
    }

    /// The member `name` stands for, following links a few hops.
    fn member(&self, name: &str) -> Result<Member, ImageError> {
        let mut name = join_inside("", name).ok_or_else(|| self.err(format!("{name:?} climbs")))?;
        for _ in 0..8 {
            if self.twice.contains(&name) {
                return Err(self.err(format!("member {name} appears twice")));
            }
            if let Some(m) = self.members.get(&name) {
                return Ok(*m);
            }
            match self.links.get(&name) {
                Some(t) => name = t.clone(),
                None => return Err(self.err(format!("names {name}, which it does not hold"))),
            }
        }
        Err(self.err(format!("the link {name} goes round in circles")))
    }

    /// A JSON document, bounded, with its SHA-256.
    fn read_json(&self, name: &str) -> Result<(Vec<u8>, String), ImageError> {
        let m = self.member(name)?;
        let max = self.limits.max_json_bytes;
        if m.size > max {
            return Err(self.err(format!("{name} is {} bytes (at most {max})", m.size)));
        }
        let mut bytes = Vec::with_capacity(m.size as usize);
        Section::new(self.file, m)
            .take(max)
            .read_to_end(&mut bytes)
            .map_err(|source| ImageError::Io {
                archive: self.path.to_path_buf(),
                what: format!("cannot read {name}"),
                source,
            })?;
        if bytes.len() as u64 != m.size {
            return Err(self.err(format!("{name} is cut short")));
        }
        let sha = hex(&Sha256::digest(&bytes));
        Ok((bytes, sha))
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<T, ImageError> {
        serde_json::from_slice(bytes).map_err(|e| self.err(format!("{name}: {e}")))
    }

    /// A blob by descriptor, checked against its digest and size.
    fn blob(&self, d: &Descriptor, what: &str) -> Result<Vec<u8>, ImageError> {
        let hex = spec::sha256_hex(&d.digest).map_err(|e| self.err(format!("{what}: {e}")))?;
        let name = format!("blobs/sha256/{hex}");
        let (bytes, sha) = self.read_json(&name)?;
        if sha != hex || bytes.len() as u64 != d.size {
            return Err(self.err(format!(
                "{what} {name} does not match its descriptor (sha256 {sha}, {} bytes; declared {} bytes)",
                bytes.len(),
                d.size
            )));
        }
        Ok(bytes)
    }

    fn config(&self, bytes: &[u8], name: &str) -> Result<(ImageConfig, Vec<String>), ImageError> {
        parse_config(self.path, bytes, name)
    }

    fn check_layer_count(&self, n: usize) -> Result<(), ImageError> {
        if n > self.limits.max_layers {
            return Err(self.err(format!("{n} layers (at most {})", self.limits.max_layers)));
        }
        Ok(())
    }
}

fn docker_plan(ix: &Index<'_>) -> Result<Plan, ImageError> {
    let (bytes, _) = ix.read_json("manifest.json")?;
    let mut images: Vec<DockerManifest> = ix.parse("manifest.json", &bytes)?;
    if images.len() != 1 {
        return Err(ix.err(format!(
            "manifest.json lists {} images; an image archive for a task holds one",
            images.len()
        )));
    }
    let image = images.remove(0);
    ix.check_layer_count(image.layers.len())?;
    let config_blob = ix.member(&image.config)?;
    let (bytes, sha) = ix.read_json(&image.config)?;
    if let Some(named) = hex_in_name(&image.config) {
        if named != sha {
            return Err(ix.err(format!("config {} has sha256 {sha}", image.config)));
        }
    }
    let (config, diff_ids) = ix.config(&bytes, &image.config)?;
    if diff_ids.len() != image.layers.len() {
        return Err(ix.err(format!(
            "config {} names {} layer digests for {} layers",
            image.config,
            diff_ids.len(),
            image.layers.len()
        )));
    }
    let mut layers = Vec::with_capacity(image.layers.len());
    for (i, (name, diff_id)) in image.layers.iter().zip(diff_ids).enumerate() {
        layers.push(LayerRef {
            name: format!("{} ({name})", i + 1),
            member: ix.member(name)?,
            blob_sha: hex_in_name(name),
            diff_id: Some(diff_id),
        });
    }
    Ok(Plan {
        id: image_id(ix.path, &sha)?,
        format: "docker-archive",
        config,
        config_blob: Some(config_blob),
        layers,
    })
}

/// The digest a member's name carries (`<hex>.json`, `blobs/sha256/<hex>`).
fn hex_in_name(name: &str) -> Option<String> {
    let last = name.rsplit('/').next()?;
    let stem = last.strip_suffix(".json").unwrap_or(last);
    ImageId::from_hex(stem).map(|id| id.hex().to_string())
}

fn image_id(path: &Path, hex: &str) -> Result<ImageId, ImageError> {
    ImageId::from_hex(hex).ok_or_else(|| archive_err(path, format!("bad image id {hex}")))
}

/// This machine's architecture in OCI's words.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

fn pick<'d>(
    ix: &Index<'_>,
    list: &'d [Descriptor],
    what: &str,
) -> Result<&'d Descriptor, ImageError> {
    match list {
        [] => Err(ix.err(format!("{what} lists no manifest"))),
        [one] => Ok(one),
        many => many
            .iter()
            .find(|d| {
                d.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == oci_arch())
            })
            .ok_or_else(|| {
                ix.err(format!(
                    "{what} lists {} manifests and none for linux/{}",
                    many.len(),
                    oci_arch()
                ))
            }),
    }
}

fn is_index(d: &Descriptor) -> bool {
    d.media_type.contains("image.index") || d.media_type.contains("manifest.list")
}

fn oci_plan(ix: &Index<'_>) -> Result<Plan, ImageError> {
    let (bytes, _) = ix.read_json("index.json")?;
    let top: OciIndex = ix.parse("index.json", &bytes)?;
    let mut chosen = pick(ix, &top.manifests, "index.json")?;
    let nested;
    if is_index(chosen) {
        let bytes = ix.blob(chosen, "nested index")?;
        nested = ix.parse::<OciIndex>("nested index", &bytes)?;
        chosen = pick(ix, &nested.manifests, "nested index")?;
        if is_index(chosen) {
            return Err(ix.err("indexes nested more than twice"));
        }
    }
    let bytes = ix.blob(chosen, "manifest")?;
    let manifest: OciManifest = ix.parse("manifest", &bytes)?;
    ix.check_layer_count(manifest.layers.len())?;
    let config_bytes = ix.blob(&manifest.config, "config")?;
    let config_hex = spec::sha256_hex(&manifest.config.digest)
        .map_err(|e| ix.err(format!("config: {e}")))?
        .to_string();
    let config_blob = ix.member(&format!("blobs/sha256/{config_hex}"))?;
    let (config, diff_ids) = ix.config(&config_bytes, "config")?;
    if diff_ids.len() != manifest.layers.len() {
        return Err(ix.err(format!(
            "the config names {} layer digests for {} layers",
            diff_ids.len(),
            manifest.layers.len()
        )));
    }
    let mut layers = Vec::with_capacity(manifest.layers.len());
    for (i, (d, diff_id)) in manifest.layers.iter().zip(diff_ids).enumerate() {
        let hex =
            spec::sha256_hex(&d.digest).map_err(|e| ix.err(format!("layer {}: {e}", i + 1)))?;
        let name = format!("blobs/sha256/{hex}");
        let member = ix.member(&name)?;
        if member.size != d.size {
            return Err(ix.err(format!(
                "layer {} ({name}) is {} bytes, its descriptor says {}",
                i + 1,
                member.size,
                d.size
            )));
        }
        layers.push(LayerRef {
            name: format!("{} ({name})", i + 1),
            member,
            blob_sha: Some(hex.to_string()),
            diff_id: Some(diff_id),
        });
    }
    Ok(Plan {
        id: image_id(ix.path, &config_hex)?,
        format: "oci-layout",
        config,
        config_blob: Some(config_blob),
        layers,
    })
}

/// A plain root-filesystem tar: one layer, its id the file's SHA-256
/// (read once here, bounded by the layer limit).
fn rootfs_plan(
    path: &Path,
    file: &File,
    whole: Member,
    limits: &ImageLimits,
) -> Result<Plan, ImageError> {
    if whole.size > limits.max_layer_bytes {
        return Err(ImageError::Layer {
            archive: path.to_path_buf(),
            layer: "1 (root filesystem)".into(),
            why: format!(
                "{} bytes stored, over the {}-byte layer limit",
                whole.size, limits.max_layer_bytes
            ),
        });
    }
    let mut hasher = Sha256::new();
    io::copy(&mut Section::new(file, whole), &mut hasher).map_err(|source| ImageError::Io {
        archive: path.to_path_buf(),
        what: "cannot read the archive".into(),
        source,
    })?;
    let sha = hex(&hasher.finalize());
    Ok(Plan {
        id: image_id(path, &sha)?,
        format: "rootfs",
        config: ImageConfig::default(),
        config_blob: None,
        layers: vec![LayerRef {
            name: "1 (root filesystem)".into(),
            member: whole,
            blob_sha: Some(sha),
            diff_id: None,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_stay_inside_the_archive() {
        assert_eq!(
            join_inside("", "./manifest.json").as_deref(),
            Some("manifest.json")
        );
        assert_eq!(
            join_inside("a/b", "../c/layer.tar").as_deref(),
            Some("a/c/layer.tar")
        );
        assert_eq!(join_inside("a", "../../x"), None);
        assert_eq!(
            hex_in_name(&format!("blobs/sha256/{}", "b".repeat(64))),
            Some("b".repeat(64))
        );
        assert_eq!(hex_in_name("abc/layer.tar"), None);
    }
}
