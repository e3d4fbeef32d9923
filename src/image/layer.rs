//! One layer applied onto the root being built, every entry checked first.
//!
//! Refused, each naming the layer and the entry: an absolute path or one
//! with `..`; a path through a symbolic link already in the root (links are
//! never followed while unpacking, so nothing can be written or removed
//! outside the root through one); a symbolic link whose target climbs above
//! the image's root (absolute targets are read in the guest's root, so
//! `/etc/localtime -> /usr/share/zoneinfo/UTC` stays allowed); a hard link
//! to anything this layer did not write itself (across layers); device
//! nodes and FIFOs; set-id bits on files (or stripped, by the limits'
//! choice; on directories they are dropped, being inheritance only); a
//! whiteout naming `.`, `..` or nothing; more entries or content bytes than
//! the image may have.
//!
//! Whiteouts (`.wh.NAME` removes NAME of the layers below, `.wh..wh..opq`
//! empties its directory of them) apply to lower layers only: what this
//! layer wrote itself is kept. Ownership and times are not kept: the cache
//! belongs to the node, and the guest reads it through a read-only view.
//! Knows tar entries and the root directory; not archives nor caches.

use super::archive::{LayerRef, Section};
use super::stream::{tar_stream, Tap, TapState};
use super::{ImageError, ImageLimits, SetIdBits};
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// Longest entry path or link target, bytes; deepest path.
const MAX_PATH_BYTES: usize = 4096;
const MAX_DEPTH: usize = 256;

/// What the whole image has used so far.
#[derive(Debug, Default)]
pub struct Budget {
    pub files: u64,
    pub bytes: u64,
}

/// Applies `layer` (its bytes in `file`) onto `root`.
pub fn apply(
    root: &Path,
    archive: &Path,
    file: &File,
    layer: &LayerRef,
    limits: &ImageLimits,
    budget: &mut Budget,
) -> Result<(), ImageError> {
    let stored_max = limits
        .max_layer_bytes
        .saturating_add(limits.max_layer_bytes / 64);
    let mut run = Run {
        root,
        archive,
        layer: &layer.name,
        limits,
        budget,
        written: HashSet::new(),
        files: HashSet::new(),
        raw: None,
        tar: None,
    };
    if layer.member.size > stored_max {
        return Err(run.layer_err(format!(
            "{} bytes stored, over the {stored_max}-byte limit",
            layer.member.size
        )));
    }
    let (raw, raw_state) = Tap::new(Section::new(file, layer.member), stored_max);
    let (stream, tar_state) =
        tar_stream(raw, limits.max_layer_bytes).map_err(|e| run.layer_err(e))?;
    run.raw = Some(raw_state);
    run.tar = Some(Rc::clone(&tar_state));
    let mut tar = tar::Archive::new(stream);
    let entries = tar.entries().map_err(|e| run.read_err(e))?;
    for entry in entries {
        let entry = entry.map_err(|e| run.read_err(e))?;
        run.entry(entry)?;
    }
    // The rest (the end blocks, padding, a compressed stream's tail) is
    // read too, so the digests cover every byte.
    let mut rest = tar.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(|e| run.read_err(e))?;
    drop(rest);
    run.check_digests(layer, &tar_state)
}

struct Run<'a> {
    root: &'a Path,
    archive: &'a Path,
    layer: &'a str,
    limits: &'a ImageLimits,
    budget: &'a mut Budget,
    /// Every path this layer wrote (whiteouts spare them).
    written: HashSet<PathBuf>,
    /// Regular files this layer wrote (the only targets of its hard links).
    files: HashSet<PathBuf>,
    raw: Option<Rc<RefCell<TapState>>>,
    tar: Option<Rc<RefCell<TapState>>>,
}

impl Run<'_> {
    fn layer_err(&self, why: impl Into<String>) -> ImageError {
        ImageError::Layer {
            archive: self.archive.to_path_buf(),
            layer: self.layer.to_string(),
            why: why.into(),
        }
    }

    fn refuse(&self, entry: &str, why: impl Into<String>) -> ImageError {
        ImageError::Entry {
            archive: self.archive.to_path_buf(),
            layer: self.layer.to_string(),
            entry: entry.to_string(),
            why: why.into(),
        }
    }

    fn io_err(&self, entry: &str, source: io::Error) -> ImageError {
        ImageError::Io {
            archive: self.archive.to_path_buf(),
            what: format!("layer {}: entry {entry:?}: cannot unpack", self.layer),
            source,
        }
    }

    /// A read error: over a limit if a tap says so, else a broken layer.
    fn read_err(&self, e: io::Error) -> ImageError {
        let over = |s: &Option<Rc<RefCell<TapState>>>| s.as_ref().is_some_and(|s| s.borrow().over);
        if over(&self.raw) || over(&self.tar) {
            return self.layer_err(format!(
                "over the {}-byte layer limit (counted while reading)",
                self.limits.max_layer_bytes
            ));
        }
        self.layer_err(format!("unreadable: {e}"))
    }

    fn check_digests(
        &self,
        layer: &LayerRef,
        tar_state: &Rc<RefCell<TapState>>,
    ) -> Result<(), ImageError> {
        if let Some(raw) = &self.raw {
            let raw = raw.borrow();
            if raw.bytes != layer.member.size {
                return Err(self.layer_err(format!(
                    "read {} bytes of the {} its archive holds (a compressed stream ended early?)",
                    raw.bytes, layer.member.size
                )));
            }
            if let Some(want) = &layer.blob_sha {
                let got = raw.hex();
                if &got != want {
                    return Err(self.layer_err(format!("sha256 {got}, expected {want}")));
                }
            }
        }
        if let Some(want) = &layer.diff_id {
            let got = tar_state.borrow().hex();
            if &got != want {
                return Err(
                    self.layer_err(format!("uncompressed sha256 {got}, the config says {want}"))
                );
            }
        }
        Ok(())
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), ImageError> {
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        self.budget.files += 1;
        if self.budget.files > self.limits.max_files {
            return Err(self.refuse(
                &name,
                format!("more than {} entries in the image", self.limits.max_files),
            ));
        }
        let rel = rel_path(&raw).map_err(|why| self.refuse(&name, why))?;
        let kind = entry.header().entry_type();
        if kind == tar::EntryType::XGlobalHeader {
            return Ok(());
        }
        if rel.as_os_str().is_empty() {
            // The root itself ("./"): it is ours.
            return Ok(());
        }
        let file_name = rel.file_name().map(OsStr::as_bytes).unwrap_or_default();
        if let Some(hidden) = file_name.strip_prefix(b".wh.") {
            return self.whiteout(&name, &rel, hidden);
        }
        let mode = entry
            .header()
            .mode()
            .map_err(|e| self.refuse(&name, format!("bad mode: {e}")))?;
        self.parents(&name, &rel)?;
        let full = self.root.join(&rel);
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mode = self.file_mode(&name, mode)?;
                self.clear(&name, &full)?;
                self.write_file(&name, &full, &mut entry, mode)?;
                self.files.insert(rel.clone());
            }
            tar::EntryType::Directory => {
                let meta = fs::symlink_metadata(&full);
                if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                    self.clear(&name, &full)?;
                    fs::create_dir(&full).map_err(|e| self.io_err(&name, e))?;
                }
                // Set-id bits on a directory only pass a group on: dropped.
                let perms = fs::Permissions::from_mode((mode & 0o1777) | 0o700);
                fs::set_permissions(&full, perms).map_err(|e| self.io_err(&name, e))?;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .map(|t| t.into_owned())
                    .unwrap_or_default();
                if target.is_empty() || target.len() > MAX_PATH_BYTES {
                    return Err(
                        self.refuse(&name, "a symbolic link with an empty or overlong target")
                    );
                }
                if climbs_out(&rel, &target) {
                    return Err(self.refuse(
                        &name,
                        format!(
                            "a symbolic link to {:?}, which points out of the image's root",
                            String::from_utf8_lossy(&target)
                        ),
                    ));
                }
                self.clear(&name, &full)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &full)
                    .map_err(|e| self.io_err(&name, e))?;
            }
            tar::EntryType::Link => self.hard_link(&name, &rel, &full, &entry)?,
            tar::EntryType::Char => return Err(self.refuse(&name, "a character device node")),
            tar::EntryType::Block => return Err(self.refuse(&name, "a block device node")),
            tar::EntryType::Fifo => return Err(self.refuse(&name, "a FIFO (named pipe)")),
            other => {
                return Err(self.refuse(&name, format!("an entry of unsupported type {other:?}")))
            }
        }
        self.written.insert(rel);
        Ok(())
    }

    /// The mode a regular file is written with, by the set-id rule.
    fn file_mode(&self, name: &str, mode: u32) -> Result<u32, ImageError> {
        if mode & 0o6000 != 0 && self.limits.set_id == SetIdBits::Refuse {
            return Err(self.refuse(
                name,
                format!("a file with setuid or setgid bits (mode {mode:o}); [guest] image_setuid = \"strip\" unpacks it without them"),
            ));
        }
        Ok(mode & 0o777)
    }

    /// Makes the missing parents of `rel`; refuses a parent that is a
    /// symbolic link or not a directory (nothing is followed).
    fn parents(&self, name: &str, rel: &Path) -> Result<(), ImageError> {
        let mut cur = self.root.to_path_buf();
        let Some(parent) = rel.parent() else {
            return Ok(());
        };
        for comp in parent.components() {
            cur.push(comp);
            match fs::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self.refuse(
                        name,
                        format!(
                            "its parent {} is a symbolic link (never followed while unpacking)",
                            cur.strip_prefix(self.root).unwrap_or(&cur).display()
                        ),
                    ))
                }
                Ok(_) => {
                    return Err(self.refuse(
                        name,
                        format!(
                            "its parent {} is not a directory",
                            cur.strip_prefix(self.root).unwrap_or(&cur).display()
                        ),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&cur).map_err(|e| self.io_err(name, e))?;
                }
                Err(e) => return Err(self.io_err(name, e)),
            }
        }
        Ok(())
    }

    /// Removes whatever is at `full` (a directory with its contents; a
    /// link itself, never what it points to).
    fn clear(&self, name: &str, full: &Path) -> Result<(), ImageError> {
        remove_any(full).map_err(|e| self.io_err(name, e))
    }

    fn write_file<R: Read>(
        &mut self,
        name: &str,
        full: &Path,
        entry: &mut R,
        mode: u32,
    ) -> Result<(), ImageError> {
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(full)
            .map_err(|e| self.io_err(name, e))?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match entry.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.read_err(e)),
            };
            self.budget.bytes = self.budget.bytes.saturating_add(n as u64);
            if self.budget.bytes > self.limits.max_image_bytes {
                return Err(self.refuse(
                    name,
                    format!(
                        "the image is over its {}-byte limit (counted while reading)",
                        self.limits.max_image_bytes
                    ),
                ));
            }
            if self.budget.bytes > self.limits.max_cache_bytes {
                return Err(self.refuse(
                    name,
                    format!(
                        "the image is larger than the whole image cache, whose cap is {} MiB ([guest] image_cache_mib; counted while reading)",
                        self.limits.max_cache_bytes >> 20
                    ),
                ));
            }
            out.write_all(&buf[..n]).map_err(|e| self.io_err(name, e))?;
        }
        out.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| self.io_err(name, e))
    }

    fn hard_link<R: Read>(
        &mut self,
        name: &str,
        rel: &Path,
        full: &Path,
        entry: &tar::Entry<'_, R>,
    ) -> Result<(), ImageError> {
        let raw = entry
            .link_name_bytes()
            .map(|t| t.into_owned())
            .unwrap_or_default();
        let target =
            rel_path(&raw).map_err(|why| self.refuse(name, format!("hard link target: {why}")))?;
        if !self.files.contains(&target) || target == rel {
            return Err(self.refuse(
                name,
                format!(
                    "a hard link to {}, which is not a file this layer wrote (hard links across layers are refused)",
                    target.display()
                ),
            ));
        }
        self.parents(name, &target)?;
        let target_full = self.root.join(&target);
        if !fs::symlink_metadata(&target_full).is_ok_and(|m| m.is_file()) {
            return Err(self.refuse(
                name,
                format!("a hard link to {}, no longer a file", target.display()),
            ));
        }
        self.clear(name, full)?;
        fs::hard_link(&target_full, full).map_err(|e| self.io_err(name, e))?;
        self.files.insert(rel.to_path_buf());
        Ok(())
    }

    fn whiteout(&mut self, name: &str, rel: &Path, hidden: &[u8]) -> Result<(), ImageError> {
        let dir = rel.parent().unwrap_or(Path::new(""));
        if hidden == b".wh..opq" {
            self.parents(name, rel)?;
            let full = self.root.join(dir);
            if fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(self.refuse(name, "an opaque whiteout on a symbolic link"));
            }
            return self.clear_lower(dir).map_err(|e| self.io_err(name, e));
        }
        if hidden.is_empty() || hidden == b"." || hidden == b".." {
            return Err(self.refuse(name, "a whiteout that escapes its directory"));
        }
        let target = dir.join(OsStr::from_bytes(hidden));
        // Through a link a whiteout would remove what it points to: refused.
        self.parents(name, &target)?;
        if !self.written.contains(&target) {
            self.clear(name, &self.root.join(&target))?;
        }
        Ok(())
    }

    /// Empties `dir` of what the layers below put there (an opaque whiteout).
    fn clear_lower(&self, dir: &Path) -> io::Result<()> {
        let full = self.root.join(dir);
        if !fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        for child in fs::read_dir(&full)? {
            let child = child?;
            let rel = dir.join(child.file_name());
            if !self.written.contains(&rel) {
                remove_any(&child.path())?;
            } else if child.file_type()?.is_dir() {
                self.clear_lower(&rel)?;
            }
        }
        Ok(())
    }
}

/// Removes whatever is at `path`: a directory with its contents, a link
/// itself (never what it points to). Nothing there is fine.
pub fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// An entry's path as a relative path inside the root: `./` and empty
/// components dropped; absolute paths and `..` refused.
fn rel_path(raw: &[u8]) -> Result<PathBuf, String> {
    if raw.len() > MAX_PATH_BYTES {
        return Err(format!("a path of {} bytes", raw.len()));
    }
    if raw.first() == Some(&b'/') {
        return Err("an absolute path".into());
    }
    let mut rel = PathBuf::new();
    for comp in raw.split(|b| *b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => return Err("a path with '..'".into()),
            c => rel.push(OsStr::from_bytes(c)),
        }
    }
    if rel.components().count() > MAX_DEPTH {
        return Err(format!("a path deeper than {MAX_DEPTH}"));
    }
    debug_assert!(rel.components().all(|c| matches!(c, Component::Normal(_))));
    Ok(rel)
}

/// Whether a symbolic link at `link` (relative to the root) with `target`
/// climbs above the root, read lexically (absolute targets start at the
/// image's root).
fn climbs_out(link: &Path, target: &[u8]) -> bool {
    let mut depth = if target.first() == Some(&b'/') {
        0
    } else {
        link.parent().map_or(0, |p| p.components().count())
    };
    for comp in target.split(|b| *b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                if depth == 0 {
                    return true;
                }
                depth -= 1;
            }
            _ => depth += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_and_never_climb() {
        assert_eq!(
            rel_path(b"./etc//os-release").unwrap(),
            PathBuf::from("etc/os-release")
        );
        assert!(rel_path(b"/etc/passwd").unwrap_err().contains("absolute"));
        assert!(rel_path(b"a/../../b").unwrap_err().contains(".."));
        assert_eq!(rel_path(b"./").unwrap(), PathBuf::new());
    }

    #[test]
    fn links_that_climb_above_the_root_are_told_apart() {
        assert!(!climbs_out(
            Path::new("etc/localtime"),
            b"/usr/share/zoneinfo/UTC"
        ));
        assert!(!climbs_out(Path::new("usr/bin/sh"), b"../../bin/busybox"));
        assert!(climbs_out(Path::new("usr/bin/sh"), b"../../../etc/passwd"));
        assert!(climbs_out(Path::new("x"), b".."));
        assert!(climbs_out(Path::new("a/x"), b"/../../etc"));
    }
}
