//! The guest's narrow view of the filesystem: a mount namespace whose root is
//! a small read-only tmpfs holding the system's programs and libraries
//! (`/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`), a few devices, a fresh `/proc`
//! of the job's own PID namespace, and the job's work directory at the same
//! path as on the host. Nothing else of the host is there: not `/home`,
//! `/root`, `/tmp`, `/run`, `/var` (so no Unix socket of the host can be
//! reached by path), not the node's data dir beyond the work dir, and the
//! node's config dir is covered by an empty tmpfs where it lies under `/etc`.
//!
//! [`ViewPlan::new`] decides everything in the supervisor (it allocates and
//! reads paths); the child only walks the prepared steps with plain system
//! calls ([`ViewPlan::build`] in the guest's first process, after `unshare`,
//! and [`ViewPlan::enter`] in the PID namespace's init, which mounts `/proc`
//! and pivots into the new root). This module knows nothing about jobs.

use super::ids::Ids;
use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The top-level system entries a guest sees, bound from the host as they are.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Device nodes a guest gets (bound from the host's `/dev`).
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Where the new root is assembled inside the guest's private mount namespace.
/// Any directory every system has works: the tmpfs mounted over it exists only
/// in the guest's namespace and is the guest's `/` once the view is entered.
const ASSEMBLY_POINT: &str = "/tmp";

/// One step of assembling the view, with every path already a C string.
#[derive(Debug)]
enum Step {
    Mkdir(CString),
    /// Recursive bind of a host path onto a prepared mount point.
    Bind {
        src: CString,
        dst: CString,
    },
    /// Recursive bind of the current directory (the work dir, entered by the
    /// launcher as root), so no path above it has to be searchable.
    BindCwd {
        dst: CString,
    },
    /// An empty file to bind a device onto.
    Touch(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    /// Attaches a detached copy of a host tree (`open_tree` in the node,
    /// which may reach paths the guest's user cannot) and makes it
    /// read-only, nosuid, nodev. A descriptor opened before `unshare`
    /// names the node's mount namespace, where a plain bind from it fails
    /// (EINVAL); a detached tree belongs to none and attaches anywhere.
    MoveTree {
        fd: libc::c_int,
        dst: CString,
    },
    /// Recursive bind of `src` made read-only, nosuid, nodev (a node that
    /// cannot `open_tree`, not being root, runs guests as itself, and
    /// they can reach its image cache by path).
    BindRo {
        src: CString,
        dst: CString,
    },
    /// A fresh tmpfs; read-only ones cover a directory the guest must not see.
    Tmpfs {
        dst: CString,
        options: CString,
        read_only: bool,
    },
}

/// Everything the child needs to build and enter the view, prepared here.
#[derive(Debug)]
pub struct ViewPlan {
    root: CString,
    uid_map: CString,
    gid_map: CString,
    steps: Vec<Step>,
    proc_dir: CString,
    /// Where the guest starts: the work dir's path inside the view.
    work: CString,
    /// The detached trees the steps attach, held until the plan is dropped.
    _open: Vec<std::os::fd::OwnedFd>,
}

fn c(path: impl AsRef<Path>) -> io::Result<CString> {
    CString::new(path.as_ref().as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path contains NUL"))
}

fn cs(text: &str) -> io::Result<CString> {
    CString::new(text).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in text"))
}

/// `inner` placed under the assembly point: `/tmp` + `/usr` = `/tmp/usr`.
fn under_root(inner: &Path) -> PathBuf {
    let rel = inner.strip_prefix("/").unwrap_or(inner);
    Path::new(ASSEMBLY_POINT).join(rel)
}

impl ViewPlan {
    /// Plans the view for a guest running as `uid`/`gid` (mapped to
    /// themselves in its user namespace) whose work dir is `work_dir`;
    /// `hidden` are directories (the node's config dir) to cover where the
    /// system dirs would show them. Fails when the view cannot hold, e.g. a
    /// work dir inside a system dir.
    pub fn new(work_dir: &Path, uid: u32, gid: u32, hidden: &[PathBuf]) -> io::Result<ViewPlan> {
        if !Path::new(ASSEMBLY_POINT).is_dir() {
            return Err(io::Error::other(format!(
                "{ASSEMBLY_POINT} is not a directory to assemble the view on"
            )));
        }
        let work_dir = std::fs::canonicalize(work_dir)?;
        let mut steps = Vec::new();
        let mut bound = Vec::new();
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            let dst = under_root(path);
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(path)?;
                steps.push(Step::Symlink {
                    target: c(&target)?,
                    link: c(&dst)?,
                });
            } else if meta.is_dir() {
                steps.push(Step::Mkdir(c(&dst)?));
                steps.push(Step::Bind {
                    src: c(path)?,
                    dst: c(&dst)?,
                });
                bound.push(path.to_path_buf());
            }
        }
        if let Some(b) = bound.iter().find(|b| work_dir.starts_with(b)) {
            return Err(io::Error::other(format!(
                "the work dir {} lies inside the system dir {}",
                work_dir.display(),
                b.display()
            )));
        }
        dev_steps(&mut steps)?;
        for h in hidden {
            let Ok(h) = std::fs::canonicalize(h) else {
                continue;
            };
            if bound.iter().any(|b| h.starts_with(b)) && h.is_dir() {
                steps.push(Step::Tmpfs {
                    dst: c(under_root(&h))?,
                    options: cs("size=4k,nr_inodes=2,mode=000")?,
                    read_only: true,
                });
            }
        }
        let mut prefixes: Vec<&Path> = work_dir.ancestors().skip(1).collect();
        prefixes.reverse();
        for p in prefixes.into_iter().filter(|p| *p != Path::new("/")) {
            steps.push(Step::Mkdir(c(under_root(p))?));
        }
        steps.push(Step::Mkdir(c(under_root(&work_dir))?));
        steps.push(Step::BindCwd {
            dst: c(under_root(&work_dir))?,
        });
        let proc_dir = under_root(Path::new("/proc"));
        steps.push(Step::Mkdir(c(&proc_dir)?));
        Ok(ViewPlan {
            root: cs(ASSEMBLY_POINT)?,
            uid_map: cs(&format!("{uid} {uid} 1\n"))?,
            gid_map: cs(&format!("{gid} {gid} 1\n"))?,
            steps,
            proc_dir: c(&proc_dir)?,
            work: c(&work_dir)?,
            _open: Vec::new(),
        })
    }

    /// Plans the view of a guest whose root is an image (issue 31): each
    /// top-level directory of `rootfs` bound read-only (its links copied),
    /// the devices, a fresh `/proc`, and the work dir at `guest_work` (the
    /// image's `WorkingDir`, or `/work`) and again at `/tmp`, so what the
    /// guest writes lands where the job's quota and Landlock rule are.
    /// The image's own `/dev`, `/proc` and `/tmp` are not shown.
    pub fn with_image(
        uid: u32,
        gid: u32,
        rootfs: &Path,
        guest_work: &Path,
    ) -> io::Result<ViewPlan> {
        if !Path::new(ASSEMBLY_POINT).is_dir() {
            return Err(io::Error::other(format!(
                "{ASSEMBLY_POINT} is not a directory to assemble the view on"
            )));
        }
        let refuse = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
        let rel_work = image_work_path(guest_work).ok_or_else(|| {
            refuse(format!(
                "the image's working dir {} is not a plain absolute path outside /dev and /proc",
                guest_work.display()
            ))
        })?;
        let mut open = Vec::new();
        let mut steps = Vec::new();
        let mut shown = Vec::new();
        for (n, entry) in std::fs::read_dir(rootfs)?.enumerate() {
            if n >= 4096 {
                return Err(refuse("the image has over 4096 top-level entries".into()));
            }
            let entry = entry?;
            let name = entry.file_name();
            if ["dev", "proc", "tmp"]
                .iter()
                .any(|s| name.as_bytes() == s.as_bytes())
            {
                continue;
            }
            let dst = Path::new(ASSEMBLY_POINT).join(&name);
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                steps.push(Step::Symlink {
                    target: c(std::fs::read_link(entry.path())?)?,
                    link: c(&dst)?,
                });
            } else if kind.is_dir() {
                steps.push(Step::Mkdir(c(&dst)?));
                match clone_tree(&entry.path()) {
                    Ok(fd) => {
                        steps.push(Step::MoveTree {
                            fd: fd.as_raw_fd(),
                            dst: c(&dst)?,
                        });
                        open.push(fd);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => steps.push(Step::BindRo {
                        src: c(entry.path())?,
                        dst: c(&dst)?,
                    }),
                    Err(e) => return Err(e),
                }
                shown.push(name);
            }
        }
        dev_steps(&mut steps)?;
        // The work dir's mount point: made in the view's own root when its
        // top directory is not the image's, else it must be a directory the
        // image has (a read-only image gets no new directories).
        let top = rel_work
            .components()
            .next()
            .map(|c| c.as_os_str().to_owned());
        match top {
            Some(top) if shown.contains(&top) && !is_plain_dir(rootfs, &rel_work) => {
                return Err(refuse(format!(
                    "the image's working dir {} is not a directory in the image",
                    guest_work.display()
                )));
            }
            Some(top) if !shown.contains(&top) && rel_work != Path::new("tmp") => {
                let mut p = PathBuf::from(ASSEMBLY_POINT);
                for comp in rel_work.components() {
                    p.push(comp);
                    steps.push(Step::Mkdir(c(&p)?));
                }
            }
            _ => {}
        }
        let tmp = under_root(Path::new("/tmp"));
        steps.push(Step::Mkdir(c(&tmp)?));
        steps.push(Step::BindCwd { dst: c(&tmp)? });
        if rel_work != Path::new("tmp") {
            steps.push(Step::BindCwd {
                dst: c(under_root(guest_work))?,
            });
        }
        let proc_dir = under_root(Path::new("/proc"));
        steps.push(Step::Mkdir(c(&proc_dir)?));
        Ok(ViewPlan {
            root: cs(ASSEMBLY_POINT)?,
            uid_map: cs(&format!("{uid} {uid} 1\n"))?,
            gid_map: cs(&format!("{gid} {gid} 1\n"))?,
            steps,
            proc_dir: c(&proc_dir)?,
            work: c(guest_work)?,
            _open: open,
        })
    }

    /// In the guest's first process, right after `unshare(CLONE_NEWUSER |
    /// CLONE_NEWNS | ...)`: maps its ids, makes every mount private and
    /// assembles the new root. Plain system calls only, nothing allocated.
    pub fn build(&self) -> io::Result<()> {
        write_id_maps(&self.uid_map, &self.gid_map)?;
        // SAFETY (whole block): system calls on C strings owned by `self`.
        unsafe {
            // Nothing done here may reach the host's mount table.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"gleaner-view".as_ptr(),
                self.root.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=1m,nr_inodes=4096,mode=0755".as_ptr().cast(),
            ))?;
            for step in &self.steps {
                match step {
                    Step::Mkdir(p) => {
                        if libc::mkdir(p.as_ptr(), 0o755) < 0 {
                            let e = io::Error::last_os_error();
                            if e.raw_os_error() != Some(libc::EEXIST) {
                                return Err(e);
                            }
                        }
                    }
                    Step::Bind { src, dst } => check(libc::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?,
                    Step::BindCwd { dst } => check(libc::mount(
                        c".".as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?,
                    Step::MoveTree { fd, dst } => {
                        if libc::syscall(
                            libc::SYS_move_mount,
                            *fd,
                            c"".as_ptr(),
                            libc::AT_FDCWD,
                            dst.as_ptr(),
                            MOVE_MOUNT_F_EMPTY_PATH,
                        ) < 0
                        {
                            return Err(io::Error::last_os_error());
                        }
                        read_only(dst)?;
                    }
                    Step::BindRo { src, dst } => {
                        check(libc::mount(
                            src.as_ptr(),
                            dst.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        ))?;
                        read_only(dst)?;
                    }
                    Step::Touch(p) => {
                        let fd = libc::open(
                            p.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                            0o644,
                        );
                        check(fd)?;
                        libc::close(fd);
                    }
                    Step::Symlink { target, link } => {
                        check(libc::symlink(target.as_ptr(), link.as_ptr()))?
                    }
                    Step::Tmpfs {
                        dst,
                        options,
                        read_only,
                    } => {
                        let mut flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                        if *read_only {
                            flags |= libc::MS_RDONLY;
                        }
                        check(libc::mount(
                            c"gleaner-hide".as_ptr(),
                            dst.as_ptr(),
                            c"tmpfs".as_ptr(),
                            flags,
                            options.as_ptr().cast(),
                        ))?
                    }
                }
            }
        }
        Ok(())
    }

    /// In the init of the job's PID namespace (so the `/proc` it mounts shows
    /// the job's processes only): mounts `/proc`, makes the root read-only,
    /// pivots into it and enters the work dir. A `/proc` the kernel refuses
    /// (a container that masks parts of its own) is left out: the guest then
    /// sees no processes at all. Plain system calls only.
    pub fn enter(&self) -> io::Result<()> {
        // SAFETY (whole block): system calls on C strings owned by `self`.
        unsafe {
            let _ = libc::mount(
                c"proc".as_ptr(),
                self.proc_dir.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            );
            check(libc::mount(
                std::ptr::null(),
                self.root.as_ptr(),
                std::ptr::null(),
                libc::MS_REMOUNT
                    | libc::MS_BIND
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
                std::ptr::null(),
            ))?;
            check(libc::chdir(self.root.as_ptr()))?;
            // pivot_root(".", "."): the old root ends up on top of the new
            // one and is detached at once (what container runtimes do).
            let dot = c".".as_ptr();
            if libc::syscall(libc::SYS_pivot_root, dot, dot) < 0 {
                return Err(io::Error::last_os_error());
            }
            check(libc::umount2(dot, libc::MNT_DETACH))?;
            check(libc::chdir(self.work.as_ptr()))?;
        }
        Ok(())
    }
}

/// The guest's `/dev`: a few devices bound from the host, the `fd` links
/// and a small tmpfs for POSIX shared memory.
fn dev_steps(steps: &mut Vec<Step>) -> io::Result<()> {
    let dev = under_root(Path::new("/dev"));
    steps.push(Step::Mkdir(c(&dev)?));
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if std::fs::metadata(&host).is_ok_and(|m| m.file_type().is_char_device()) {
            steps.push(Step::Touch(c(dev.join(name))?));
            steps.push(Step::Bind {
                src: c(&host)?,
                dst: c(dev.join(name))?,
            });
        }
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        steps.push(Step::Symlink {
            target: cs(target)?,
            link: c(dev.join(link))?,
        });
    }
    // POSIX shared memory and semaphores live here; its pages count in
    // the job's memory group like any other.
    steps.push(Step::Mkdir(c(dev.join("shm"))?));
    steps.push(Step::Tmpfs {
        dst: c(dev.join("shm"))?,
        options: cs("size=64m,nr_inodes=1024,mode=1777")?,
        read_only: false,
    });
    Ok(())
}

/// `guest_work` relative to the root, when it is absolute, has no `..` and
/// is not in `/dev`, `/proc` or below `/tmp` (`/` itself is no place for a
/// work dir).
fn image_work_path(guest_work: &Path) -> Option<PathBuf> {
    use std::path::Component;
    if !guest_work.is_absolute() {
        return None;
    }
    let mut rel = PathBuf::new();
    for comp in guest_work.components() {
        match comp {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => rel.push(n),
            _ => return None,
        }
    }
    // `/tmp` is the work dir too; a path below it would be inside it.
    let top = rel.components().next()?.as_os_str().as_bytes().to_vec();
    let below_tmp = top == b"tmp" && rel != Path::new("tmp");
    (top != b"dev" && top != b"proc" && !below_tmp).then_some(rel)
}

/// Whether `rel` is a directory under `root` reached through directories
/// only (no link followed).
fn is_plain_dir(root: &Path, rel: &Path) -> bool {
    let mut p = root.to_path_buf();
    rel.components().all(|comp| {
        p.push(comp);
        std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir())
    })
}

/// `open_tree` flags (linux/mount.h), spelt out for libc versions without them.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// A detached recursive copy of the tree at `path` (needs the node to be
/// root; EPERM otherwise).
fn clone_tree(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let p = c(path)?;
    // SAFETY: a plain system call on a C string; the descriptor it returns
    // is owned by the `OwnedFd` at once.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            p.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Remounts the bind at `dst` read-only, nosuid and nodev, keeping the
/// flags it has (a user namespace may not clear a flag its mount is locked
/// with). Plain system calls only.
fn read_only(dst: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: plain system calls on a C string and a zeroed struct.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        check(libc::statvfs(dst.as_ptr(), &mut st))?;
        let mut keep: libc::c_ulong = 0;
        for (st_flag, ms_flag) in [
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (libc::ST_RELATIME, libc::MS_RELATIME),
        ] {
            if st.f_flag & st_flag != 0 {
                keep |= ms_flag;
            }
        }
        check(libc::mount(
            std::ptr::null(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | keep,
            std::ptr::null(),
        ))
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Maps the process's ids to themselves in its new user namespace. A process
/// that switched from root to another user is not dumpable, and its
/// `/proc/self` files then belong to root: it is made dumpable for the
/// writes and put back after. No allocation.
fn write_id_maps(uid_map: &std::ffi::CStr, gid_map: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: plain system calls.
    let was = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
    unsafe { check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0))? };
    let written = write_proc_self(c"/proc/self/setgroups", c"deny")
        .and_then(|()| write_proc_self(c"/proc/self/uid_map", uid_map))
        .and_then(|()| write_proc_self(c"/proc/self/gid_map", gid_map));
    if was == 0 {
        // SAFETY: a plain system call.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    }
    written
}

/// Writes `text` to a `/proc/self` file in one `write`. No allocation.
fn write_proc_self(path: &std::ffi::CStr, text: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: plain system calls on NUL-terminated strings that outlive them.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd)?;
        let bytes = text.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// Whether a guest running as `ids` (or as the node's user) can get the
/// narrow view here: forks a throw-away child that makes the namespaces,
/// maps its ids and mounts a tmpfs in its private mount namespace, then exits.
/// A kernel (or a security module) that allows the namespaces but not mounts
/// in them answers false.
pub fn can_build(ids: Option<Ids>, flags: libc::c_int) -> bool {
    let uid = ids.map_or_else(|| nix::unistd::geteuid().as_raw(), |i| i.uid);
    let gid = ids.map_or_else(|| nix::unistd::getegid().as_raw(), |i| i.gid);
    let (Ok(uid_map), Ok(gid_map)) = (
        cs(&format!("{uid} {uid} 1\n")),
        cs(&format!("{gid} {gid} 1\n")),
    ) else {
        return false;
    };
    // SAFETY: the child only makes system calls and leaves with `_exit`,
    // which is what is allowed after `fork` in a threaded process.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => unsafe {
            if let Some(ids) = ids {
                if libc::setgroups(0, std::ptr::null()) < 0
                    || libc::setgid(ids.gid) < 0
                    || libc::setuid(ids.uid) < 0
                {
                    libc::_exit(2);
                }
            }
            let ok = libc::unshare(flags) == 0
                && write_id_maps(&uid_map, &gid_map).is_ok()
                && libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    c"gleaner-probe".as_ptr(),
                    c"/tmp".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    c"size=4k".as_ptr().cast(),
                ) == 0;
            libc::_exit(if ok { 0 } else { 1 })
        },
        Ok(nix::unistd::ForkResult::Parent { child }) => matches!(
            nix::sys::wait::waitpid(child, None),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0))
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_binds_system_dirs_and_the_work_dir_and_nothing_of_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("jobs/j/work");
        std::fs::create_dir_all(&work).unwrap();
        let plan = ViewPlan::new(&work, 65534, 65534, &[]).unwrap();
        let text = format!("{plan:?}");
        assert!(text.contains("\"/usr\""), "{text}");
        assert!(text.contains("BindCwd"), "{text}");
        // Only the work dir's own path is made under the new root, never a
        // bind of /tmp, /home or /run.
        for hidden in ["\"/tmp\"", "\"/home\"", "\"/run\"", "\"/root\""] {
            assert!(!text.contains(&format!("src: {hidden}")), "{text}");
        }
    }

    #[test]
    fn an_images_work_dir_is_a_plain_path_outside_dev_proc_and_below_tmp() {
        assert_eq!(
            image_work_path(Path::new("/srv/job")),
            Some(PathBuf::from("srv/job"))
        );
        assert_eq!(
            image_work_path(Path::new("/tmp")),
            Some(PathBuf::from("tmp"))
        );
        for bad in ["/", "srv", "/proc/1", "/dev", "/tmp/x", "/srv/../etc"] {
            assert_eq!(image_work_path(Path::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_work_dir_inside_a_system_dir_is_refused() {
        assert!(ViewPlan::new(Path::new("/usr/share"), 1, 1, &[]).is_err());
    }
}
