//! Landlock through raw system calls: a ruleset that lets the guest write only
//! beneath its work directory (and to `/dev/null`), and, where the kernel's
//! ABI has it, connect or bind no TCP port at all. Where the guest gets no
//! narrow view (no namespaces), the same ruleset also confines reads and
//! execution to the system dirs, a few devices and the work dir: the
//! fallback view (it cannot hide Unix sockets, which Landlock does not
//! cover, nor another process's `/proc` entries beyond denying `/proc`).
//!
//! The ruleset is built in the supervisor (it allocates and opens paths);
//! the child only calls [`restrict_self`], which is one system call and so
//! safe between `fork` and `exec`. This module knows nothing about jobs.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

const CREATE_RULESET_VERSION: libc::c_uint = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const ACCESS_FS_EXECUTE: u64 = 1 << 0;
const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
const ACCESS_FS_READ_FILE: u64 = 1 << 2;
const ACCESS_FS_READ_DIR: u64 = 1 << 3;
const ACCESS_FS_REMOVE_DIR: u64 = 1 << 4;
const ACCESS_FS_REMOVE_FILE: u64 = 1 << 5;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_DIR: u64 = 1 << 7;
const ACCESS_FS_MAKE_REG: u64 = 1 << 8;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_MAKE_SYM: u64 = 1 << 12;
const ACCESS_FS_REFER: u64 = 1 << 13;
const ACCESS_FS_TRUNCATE: u64 = 1 << 14;
const ACCESS_NET_BIND_TCP: u64 = 1 << 0;
const ACCESS_NET_CONNECT_TCP: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version of the running kernel, or `None` when Landlock is
/// not built in or not enabled.
pub fn abi_version() -> Option<i32> {
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call only
    // returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v as i32)
}

/// A ruleset ready to be enforced in the child.
#[derive(Debug)]
pub struct Ruleset {
    fd: OwnedFd,
    /// True when the ruleset also denies TCP bind and connect (ABI 4 and later).
    pub denies_tcp: bool,
}

impl Ruleset {
    /// The descriptor the child passes to [`restrict_self`]. It is close-on-exec.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Builds a ruleset for ABI `abi` that handles every write access, allows them
/// beneath `writable_dir`, allows writing `/dev/null`, and, when `deny_tcp`
/// and the ABI supports it, handles TCP bind and connect with no port allowed.
/// With `readable`, reads and execution are handled too and allowed only
/// beneath those paths (directories or files), the work dir and `/dev/null`.
pub fn build(
    abi: i32,
    writable_dir: &Path,
    deny_tcp: bool,
    readable: Option<&[&Path]>,
) -> io::Result<Ruleset> {
    let mut fs_access = ACCESS_FS_WRITE_FILE
        | ACCESS_FS_REMOVE_DIR
        | ACCESS_FS_REMOVE_FILE
        | ACCESS_FS_MAKE_CHAR
        | ACCESS_FS_MAKE_DIR
        | ACCESS_FS_MAKE_REG
        | ACCESS_FS_MAKE_SOCK
        | ACCESS_FS_MAKE_FIFO
        | ACCESS_FS_MAKE_BLOCK
        | ACCESS_FS_MAKE_SYM;
    if abi >= 2 {
        fs_access |= ACCESS_FS_REFER;
    }
    let mut file_access = ACCESS_FS_WRITE_FILE;
    if abi >= 3 {
        fs_access |= ACCESS_FS_TRUNCATE;
        file_access |= ACCESS_FS_TRUNCATE;
    }
    let read = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR;
    if readable.is_some() {
        fs_access |= read;
        file_access |= ACCESS_FS_READ_FILE;
    }
    let denies_tcp = deny_tcp && abi >= 4;
    let attr = RulesetAttr {
        handled_access_fs: fs_access,
        handled_access_net: if denies_tcp {
            ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
        } else {
            0
        },
    };
    // Older kernels reject a larger struct with unknown non-zero fields, so
    // pass only the first field when the net part is unused.
    let size = if denies_tcp {
        std::mem::size_of::<RulesetAttr>()
    } else {
        std::mem::size_of::<u64>()
    };
    // SAFETY: `attr` outlives the call and `size` does not exceed it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    allow_beneath(&fd, writable_dir, fs_access)?;
    allow_beneath(&fd, Path::new("/dev/null"), file_access)?;
    for path in readable.unwrap_or_default() {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        // A rule on a file may carry file rights only.
        let access = if meta.is_dir() {
            read
        } else {
            ACCESS_FS_READ_FILE
        };
        allow_beneath(&fd, path, access)?;
    }
    Ok(Ruleset { fd, denies_tcp })
}

fn allow_beneath(ruleset: &OwnedFd, path: &Path, access: u64) -> io::Result<()> {
    let target: File = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_path()
        .open(path)?;
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: target.as_raw_fd(),
    };
    // SAFETY: both descriptors are open for the call and `attr` outlives it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opening with `O_PATH` needs neither read nor write permission on the target.
trait PathOnly {
    fn custom_flags_path(&mut self) -> &mut Self;
}

impl PathOnly for std::fs::OpenOptions {
    fn custom_flags_path(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_PATH | libc::O_CLOEXEC)
    }
}

/// Enforces the ruleset on the calling thread. Requires `no_new_privs`.
/// Async-signal-safe: one system call, no allocation.
pub fn restrict_self(ruleset_fd: RawFd) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor the caller keeps open.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset_fd, 0u32) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
