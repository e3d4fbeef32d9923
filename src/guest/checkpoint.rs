//! Checkpoints of a self-checkpointing guest (docs/checkpoint.md): the
//! variables that tell the guest where and how often to save, the watcher
//! that snapshots the checkpoint file while the guest runs, and the last
//! snapshot taken after a kill.
//!
//! The watcher is a thread of its own (one per checkpointing job), never the
//! node's loop: it looks at the file every [`POLL_EVERY`], and when its size
//! or modification time changed — at most once per [`MIN_GAP`] — copies it
//! out of the work dir into the job's directory (`<job dir>/checkpoint`,
//! which the guest cannot see), hashing it with BLAKE3 as it copies, bounded
//! by the host's cap. The file is opened one component at a time relative to
//! the work dir's root without following symlinks, so a guest cannot make
//! the node read anything outside its work dir. It reports through the
//! supervisor's [`EventSink`]; it must not know about the network.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::event::{Clock, EventSink, GuestEvent, GuestEventKind};

/// How often the watcher looks at the checkpoint file.
pub const POLL_EVERY: Duration = Duration::from_secs(2);
/// Least time between two snapshots sent while the job runs: a guest that
/// rewrites its file every second costs the consumer one fetch per 10 s.
pub const MIN_GAP: Duration = Duration::from_secs(10);
/// Most grace a host grants between SIGTERM and SIGKILL on an S3/S4 kill:
/// the owner's machine is wanted back, so a few seconds at most.
pub const MAX_GRACE: Duration = Duration::from_secs(5);
/// Name of the snapshot in the job's directory.
pub const SNAPSHOT_NAME: &str = "checkpoint";

/// What the supervisor needs to run a checkpointing guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPlan {
    /// The checkpoint file, relative to the work dir (checked like an input path).
    pub path: String,
    /// The interval the consumer asks for, passed on as
    /// `GLEANER_CHECKPOINT_INTERVAL`.
    pub interval: Duration,
    /// SIGTERM-to-SIGKILL grace on an S3/S4 kill (at most [`MAX_GRACE`]).
    pub grace: Duration,
    /// Largest checkpoint the host takes (`[guest] max_checkpoint_mib`).
    pub max_bytes: u64,
}

impl CheckpointPlan {
    /// The grace the host grants: what was asked, at most [`MAX_GRACE`].
    pub fn granted_grace(&self) -> Duration {
        self.grace.min(MAX_GRACE)
    }

    /// The variables the guest gets: the file as the guest sees it (the work
    /// dir is at its host path in every view), the interval and the grace.
    pub fn env(&self, work_dir: &Path) -> Vec<(String, String)> {
        vec![
            (
                "GLEANER_CHECKPOINT".into(),
                work_dir.join(&self.path).to_string_lossy().into_owned(),
            ),
            (
                "GLEANER_CHECKPOINT_INTERVAL".into(),
                self.interval.as_secs().max(1).to_string(),
            ),
            (
                "GLEANER_CHECKPOINT_GRACE".into(),
                self.granted_grace().as_secs().to_string(),
            ),
        ]
    }
}

/// The file's identity as last seen: a change of either means a new checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    size: u64,
    mtime_ns: i128,
}

/// A snapshot taken: its size and hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub size: u64,
    pub hash: [u8; 32],
}

/// Why a checkpoint was not taken. The text names the file.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("checkpoint {path}: {size} bytes is over this host's cap of {cap} bytes ([guest] max_checkpoint_mib)")]
    TooBig { path: String, size: u64, cap: u64 },
    #[error("checkpoint {path}: not a regular file")]
    NotRegular { path: String },
    #[error("checkpoint {path}: {source}")]
    Io { path: String, source: io::Error },
}

/// Opens `rel` beneath `root` one component at a time, never following a
/// symlink (`O_NOFOLLOW` on every component), so the guest cannot point the
/// node elsewhere. `Ok(None)` when the file does not exist (yet).
fn open_beneath(root: &File, rel: &str) -> io::Result<Option<File>> {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut dir: Option<OwnedFd> = None;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let name =
            std::ffi::CString::new(*part).map_err(|_| io::Error::other("NUL in the path"))?;
        let flags = libc::O_RDONLY
            | libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | libc::O_NONBLOCK
            | if last { 0 } else { libc::O_DIRECTORY };
        let at = dir.as_ref().map_or(root.as_raw_fd(), |d| d.as_raw_fd());
        // SAFETY: a plain system call on a C string that outlives it.
        let fd = unsafe { libc::openat(at, name.as_ptr(), flags) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        if last {
            return Ok(Some(File::from(owned)));
        }
        dir = Some(owned);
    }
    Ok(None)
}

/// Looks at the checkpoint and, if it changed since `last`, copies it to
/// `<job_dir>/checkpoint` (through a temporary file and a rename, so a
/// fetch never reads half a snapshot), at most `max_bytes`. `Ok(None)` when
/// there is no file or it has not changed.
pub fn take_snapshot(
    root: &File,
    plan: &CheckpointPlan,
    job_dir: &Path,
    last: Option<Seen>,
) -> Result<Option<(Seen, Snapshot)>, SnapshotError> {
    let io_err = |source| SnapshotError::Io {
        path: plan.path.clone(),
        source,
    };
    let Some(file) =
        open_beneath(root, &plan.path).map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => SnapshotError::NotRegular {
                path: plan.path.clone(),
            },
            _ => io_err(source),
        })?
    else {
        return Ok(None);
    };
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(SnapshotError::NotRegular {
            path: plan.path.clone(),
        });
    }
    let seen = Seen {
        size: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    };
    if last == Some(seen) {
        return Ok(None);
    }
    if seen.size > plan.max_bytes {
        return Err(SnapshotError::TooBig {
            path: plan.path.clone(),
            size: seen.size,
            cap: plan.max_bytes,
        });
    }
    let tmp = job_dir.join(format!(".{SNAPSHOT_NAME}.tmp"));
    let copy = || -> io::Result<Snapshot> {
        let mut out = File::create(&tmp)?;
        let mut hasher = blake3::Hasher::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; 256 * 1024];
        // One byte past the cap tells a file that grew while it was read.
        let mut reader = file.take(plan.max_bytes + 1);
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > plan.max_bytes {
                return Err(io::Error::other("grew past the cap while it was read"));
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
        out.sync_all()?;
        std::fs::rename(&tmp, job_dir.join(SNAPSHOT_NAME))?;
        Ok(Snapshot {
            size,
            hash: *hasher.finalize().as_bytes(),
        })
    };
    match copy() {
        Ok(snap) => Ok(Some((seen, snap))),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(io_err(e))
        }
    }
}

/// The watcher thread of one job. Dropping `stop` (or sending on it) ends it;
/// [`Watcher::finish`] then returns what it saw last.
#[derive(Debug)]
pub struct Watcher {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<Option<Seen>>>,
}

/// What a watcher needs: where to read, where to write, whom to tell.
pub struct WatchParts {
    pub job_id: String,
    pub plan: CheckpointPlan,
    /// The work dir's root as the node reads it (the tmpfs when the work dir
    /// is one, held by a descriptor).
    pub root: File,
    pub job_dir: PathBuf,
    pub clock: Arc<dyn Clock>,
    pub sink: Arc<dyn EventSink>,
}

impl Watcher {
    pub fn start(parts: WatchParts) -> io::Result<Watcher> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("guest-checkpoint".into())
            .spawn(move || watch(parts, stopped))?;
        Ok(Watcher {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread (within one read of the file) and returns the last
    /// file identity it snapshotted or refused.
    pub fn finish(mut self) -> Option<Seen> {
        self.stop.take();
        self.thread.take().and_then(|t| t.join().ok()).flatten()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.take();
    }
}

fn watch(parts: WatchParts, stopped: mpsc::Receiver<()>) -> Option<Seen> {
    let mut last: Option<Seen> = None;
    let mut last_sent: Option<Instant> = None;
    loop {
        match stopped.recv_timeout(POLL_EVERY) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return last,
        }
        if last_sent.is_some_and(|t| t.elapsed() < MIN_GAP) {
            continue;
        }
        let (seen, kind) = match take_snapshot(&parts.root, &parts.plan, &parts.job_dir, last) {
            Ok(None) => continue,
            Ok(Some((seen, snap))) => (
                seen,
                GuestEventKind::Checkpointed {
                    size: snap.size,
                    hash: snap.hash,
                },
            ),
            Err(e) => (
                refused_identity(&parts.root, &parts.plan.path).unwrap_or_default(),
                GuestEventKind::CheckpointRefused {
                    reason: e.to_string(),
                },
            ),
        };
        // A refused file is reported once until it changes.
        if last == Some(seen) {
            continue;
        }
        last = Some(seen);
        last_sent = Some(Instant::now());
        parts.sink.record(GuestEvent {
            at: parts.clock.now(),
            job_id: parts.job_id.clone(),
            kind,
        });
    }
}

/// The identity of a file that was refused, so it is not reported again
/// until it changes.
fn refused_identity(root: &File, rel: &str) -> Option<Seen> {
    let meta = open_beneath(root, rel).ok()??.metadata().ok()?;
    Some(Seen {
        size: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    })
}

/// The last snapshot after a kill: taken from the work dir once the guest
/// is gone (saved to disk), reported unless the watcher already sent it.
pub fn final_snapshot(
    job_id: &str,
    plan: &CheckpointPlan,
    work_dir: &Path,
    job_dir: &Path,
    last: Option<Seen>,
    clock: &dyn Clock,
    sink: &dyn EventSink,
) {
    let root = match File::open(work_dir) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(job = job_id, error = %e, "cannot open the work dir for the last checkpoint");
            return;
        }
    };
    let kind = match take_snapshot(&root, plan, job_dir, last) {
        Ok(None) => return,
        Ok(Some((_, snap))) => GuestEventKind::Checkpointed {
            size: snap.size,
            hash: snap.hash,
        },
        Err(e) => GuestEventKind::CheckpointRefused {
            reason: e.to_string(),
        },
    };
    sink.record(GuestEvent {
        at: clock.now(),
        job_id: job_id.to_string(),
        kind,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(cap: u64) -> CheckpointPlan {
        CheckpointPlan {
            path: "state/ckpt".into(),
            interval: Duration::from_secs(60),
            grace: Duration::from_secs(30),
            max_bytes: cap,
        }
    }

    #[test]
    fn the_environment_names_the_file_interval_and_granted_grace() {
        let env = plan(10).env(Path::new("/data/jobs/j/work"));
        assert_eq!(
            env,
            vec![
                (
                    "GLEANER_CHECKPOINT".to_string(),
                    "/data/jobs/j/work/state/ckpt".to_string()
                ),
                ("GLEANER_CHECKPOINT_INTERVAL".to_string(), "60".to_string()),
                ("GLEANER_CHECKPOINT_GRACE".to_string(), "5".to_string()),
            ]
        );
    }

    #[test]
    fn a_changed_file_is_copied_and_hashed_once_and_caps_and_symlinks_hold() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join("state")).unwrap();
        let job = dir.path();
        let root = File::open(&work).unwrap();
        let p = plan(16);
        assert!(
            take_snapshot(&root, &p, job, None).unwrap().is_none(),
            "no file yet"
        );
        std::fs::write(work.join("state/ckpt"), b"step 7").unwrap();
        let (seen, snap) = take_snapshot(&root, &p, job, None).unwrap().unwrap();
        assert_eq!(snap.size, 6);
        assert_eq!(snap.hash, *blake3::hash(b"step 7").as_bytes());
        assert_eq!(std::fs::read(job.join(SNAPSHOT_NAME)).unwrap(), b"step 7");
        assert!(
            take_snapshot(&root, &p, job, Some(seen)).unwrap().is_none(),
            "unchanged"
        );
        // Over the cap: refused, naming the file and the cap; the old snapshot stays.
        std::fs::write(work.join("state/ckpt"), [0u8; 17]).unwrap();
        let e = take_snapshot(&root, &p, job, Some(seen))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("state/ckpt") && e.contains("17 bytes") && e.contains("16"),
            "{e}"
        );
        assert_eq!(std::fs::read(job.join(SNAPSHOT_NAME)).unwrap(), b"step 7");
        // A symlink, at the end or on the way, is never followed.
        std::fs::write(dir.path().join("secret"), b"owner").unwrap();
        std::fs::remove_file(work.join("state/ckpt")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), work.join("state/ckpt")).unwrap();
        assert!(matches!(
            take_snapshot(&root, &p, job, None),
            Err(SnapshotError::NotRegular { .. })
        ));
        std::fs::remove_dir_all(work.join("state")).unwrap();
        std::os::unix::fs::symlink(dir.path(), work.join("state")).unwrap();
        std::fs::write(dir.path().join("ckpt"), b"outside").unwrap();
        assert!(take_snapshot(&root, &p, job, None).is_err());
    }
}
