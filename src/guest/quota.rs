//! The disk quota on a job's work dir: while the job runs, its work dir is a
//! size-limited tmpfs mounted by the node on the work dir (so the supervisor
//! writes the inputs like in any directory, and the guest's view binds it).
//! A write past the quota fails with "no space left". Once the guest's mount
//! namespace holds it, the node detaches it from its own mount table and
//! keeps it through a descriptor only: a node that crashes leaves no mount
//! behind (the tmpfs goes with the last holder). At the job's end the
//! supervisor copies what the job left (at most the quota) onto the disk
//! and lets the tmpfs go, so finished jobs' outputs hold no memory while
//! they wait to be fetched.
//!
//! tmpfs lives in memory: the pages a guest writes are charged to its job's
//! memory group, so a job's files count against its declared memory as well
//! as against the quota. Mounting needs root (`CAP_SYS_ADMIN`); a node that
//! is not root gives no quota (status says so) and relies on `RLIMIT_FSIZE`.
//!
//! This module knows mounts and files, nothing of jobs or policy.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Most files and directories a job's work dir may hold (tmpfs `nr_inodes`):
/// bounds the copy at the job's end as the size bounds its bytes.
pub const MAX_INODES: u64 = 65_536;

/// The tmpfs source name, so that leftovers of a crashed node are found.
const SOURCE: &str = "gleaner-work";

/// A job's work-dir tmpfs.
#[derive(Debug)]
pub struct WorkMount {
    work_dir: PathBuf,
    cap: u64,
    /// Set once detached from the node's mount table: the tmpfs's root.
    detached: Option<fs::File>,
}

impl WorkMount {
    /// Mounts a tmpfs of `bytes` on `work_dir`, owned by `owner` (uid, gid).
    pub fn mount(work_dir: &Path, bytes: u64, owner: (u32, u32)) -> io::Result<WorkMount> {
        mount(work_dir, bytes, owner)?;
        Ok(WorkMount {
            work_dir: work_dir.to_path_buf(),
            cap: bytes,
            detached: None,
        })
    }

    /// The quota, bytes.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// Takes the tmpfs off the node's mount table, keeping it through a
    /// descriptor (the guest's mount namespace has its own copy). Only for a
    /// guest in its own mount namespace: one in the node's would find the
    /// bare directory under its work dir's path.
    pub fn detach(&mut self) -> io::Result<()> {
        let root = fs::File::open(&self.work_dir)?;
        unmount(&self.work_dir)?;
        self.detached = Some(root);
        Ok(())
    }

    /// A descriptor of the tmpfs's root while it is detached (the node reads
    /// the running job's files through it); `None` while it is mounted at
    /// the work dir's path.
    pub fn root(&self) -> Option<io::Result<fs::File>> {
        self.detached.as_ref().map(|f| f.try_clone())
    }

    /// Bytes the job has written.
    pub fn used_bytes(&self) -> Option<u64> {
        match &self.detached {
            Some(root) => used_of(nix::sys::statvfs::fstatvfs(root).ok()?),
            None => used_bytes(&self.work_dir),
        }
    }

    /// Copies what the job left onto the disk at the work dir's path and
    /// lets the tmpfs go. Runs off the node's loop when it may be large.
    pub fn save(self) -> io::Result<Saved> {
        let Some(root) = self.detached else {
            return save_and_unmount(&self.work_dir, self.cap);
        };
        use std::os::fd::AsRawFd;
        let from = PathBuf::from(format!("/proc/self/fd/{}", root.as_raw_fd()));
        let mut saved = Saved::default();
        copy_tree(&from, &self.work_dir, self.cap, &mut saved, 0)?;
        Ok(saved)
    }
}

/// Mounts a tmpfs of `bytes` on `work_dir`, owned by `owner` (uid, gid), mode 0700.
fn mount(work_dir: &Path, bytes: u64, owner: (u32, u32)) -> io::Result<()> {
    let options = format!(
        "size={bytes},nr_inodes={MAX_INODES},mode=0700,uid={},gid={}",
        owner.0, owner.1
    );
    let c = |b: &[u8]| {
        std::ffi::CString::new(b).map_err(|_| io::Error::other("NUL in a mount argument"))
    };
    let (src, dst, fstype, opts) = (
        c(SOURCE.as_bytes())?,
        c(work_dir.as_os_str().as_bytes())?,
        c(b"tmpfs")?,
        c(options.as_bytes())?,
    );
    // SAFETY: a plain system call on C strings that outlive it.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes in use on the filesystem at `path` (the work dir's tmpfs).
// The block counts are 32-bit on some targets.
#[allow(clippy::useless_conversion)]
pub fn used_bytes(path: &Path) -> Option<u64> {
    used_of(nix::sys::statvfs::statvfs(path).ok()?)
}

// The block counts are 32-bit on some targets.
#[allow(clippy::useless_conversion)]
fn used_of(st: nix::sys::statvfs::Statvfs) -> Option<u64> {
    let used = u64::from(st.blocks()).saturating_sub(u64::from(st.blocks_free()));
    Some(used.saturating_mul(u64::from(st.fragment_size())))
}

fn unmount(path: &Path) -> io::Result<()> {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("NUL in a path"))?;
    // SAFETY: a plain system call on a C string that outlives it.
    if unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What [`save_and_unmount`] kept and left out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    pub files: u64,
    pub bytes: u64,
    /// Entries not copied: past the byte cap (hard links count once per
    /// name), or neither file, directory nor symlink.
    pub skipped: u64,
}

/// Copies the job's work dir off its tmpfs onto the disk (at most `cap`
/// bytes; symlinks copied as symlinks, never followed), unmounts the tmpfs
/// and puts the copy where the work dir was. Runs off the node's loop.
pub fn save_and_unmount(work_dir: &Path, cap: u64) -> io::Result<Saved> {
    let saved_dir = work_dir.with_extension("saved");
    if saved_dir.exists() {
        fs::remove_dir_all(&saved_dir)?;
    }
    fs::create_dir(&saved_dir)?;
    fs::set_permissions(&saved_dir, fs::Permissions::from_mode(0o700))?;
    let mut saved = Saved::default();
    let copied = copy_tree(work_dir, &saved_dir, cap, &mut saved, 0);
    unmount(work_dir)?;
    copied?;
    fs::remove_dir(work_dir)?;
    fs::rename(&saved_dir, work_dir)?;
    Ok(saved)
}

/// Deepest directory nesting copied; deeper trees are cut there.
const MAX_DEPTH: usize = 64;

fn copy_tree(from: &Path, to: &Path, cap: u64, saved: &mut Saved, depth: usize) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() && depth < MAX_DEPTH {
            fs::create_dir(&dst)?;
            copy_tree(&src, &dst, cap, saved, depth + 1)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
        } else if kind.is_file() {
            let len = entry.metadata()?.len();
            if saved.bytes.saturating_add(len) > cap {
                saved.skipped += 1;
                continue;
            }
            // Opening without following a symlink swapped in meanwhile.
            let mut input = fs::OpenOptions::new()
                .read(true)
                .custom_flags_nofollow()
                .open(&src)?;
            let mut output = fs::File::create_new(&dst)?;
            let n = io::copy(
                &mut io::Read::take(&mut input, cap - saved.bytes),
                &mut output,
            )?;
            saved.bytes += n;
            saved.files += 1;
        } else {
            saved.skipped += 1;
        }
    }
    Ok(())
}

trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
    }
}

/// Unmounts every work-dir tmpfs under `jobs_dir` that an earlier run left
/// mounted (it crashed or was killed while a job ran). Returns them.
pub fn unmount_leftovers(jobs_dir: &Path) -> Vec<PathBuf> {
    let Ok(jobs) = fs::canonicalize(jobs_dir) else {
        return Vec::new();
    };
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut right = right.split_whitespace();
        if right.next() != Some("tmpfs") || right.next() != Some(SOURCE) {
            continue;
        }
        let Some(point) = left.split_whitespace().nth(4) else {
            continue;
        };
        let point = PathBuf::from(point.replace("\\040", " ").replace("\\134", "\\"));
        if !point.starts_with(&jobs) {
            continue;
        }
        // The job's files are kept as at a normal end, up to the tmpfs's size.
        let size = right.next().and_then(tmpfs_size).unwrap_or(1 << 30);
        match save_and_unmount(&point, size) {
            Ok(_) => found.push(point),
            Err(e) => {
                tracing::warn!(dir = %point.display(), error = %e, "cannot save a left work dir");
                if unmount(&point).is_ok() {
                    found.push(point);
                }
            }
        }
    }
    found
}

/// `size=` from a tmpfs's super options (`rw,size=8192k,...`), in bytes.
fn tmpfs_size(options: &str) -> Option<u64> {
    let v = options.split(',').find_map(|o| o.strip_prefix("size="))?;
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = digits.parse().ok()?;
    let mult = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_tmpfs_size() {
        assert_eq!(tmpfs_size("rw,size=8192k,nr_inodes=65536"), Some(8 << 20));
        assert_eq!(tmpfs_size("rw,nr_inodes=1"), None);
    }

    #[test]
    fn the_copy_keeps_files_dirs_and_symlinks_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        fs::create_dir_all(from.join("sub")).unwrap();
        fs::write(from.join("a"), vec![1u8; 600]).unwrap();
        fs::write(from.join("sub/b"), vec![2u8; 600]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("link")).unwrap();
        fs::create_dir(&to).unwrap();
        let mut saved = Saved::default();
        copy_tree(&from, &to, 1000, &mut saved, 0).unwrap();
        assert_eq!(saved.files, 1, "{saved:?}");
        assert_eq!(saved.bytes, 600);
        assert_eq!(saved.skipped, 1);
        assert_eq!(
            fs::read_link(to.join("link")).unwrap(),
            Path::new("/etc/passwd")
        );
    }
}
