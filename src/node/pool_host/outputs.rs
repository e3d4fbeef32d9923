//! A remote job's outputs as its consumer fetches them: the file behind an
//! output name, confined to the job's directory (symlinks resolved), read in
//! bounded chunks and hashed, each file's hash remembered while the file is
//! unchanged ([`HashMemo`]). It must not know the network.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::remote_jobs::RemoteJob;
use crate::model::relpath::RelPath;
use crate::net::protocol::{OutputName, OUTPUT_CHUNK_MAX};

/// The file behind an output name, confined to the job: stdout and stderr,
/// or a declared output file whose real path (symlinks resolved) lies inside
/// the work directory.
pub fn output_path(job: &RemoteJob, name: &OutputName) -> Option<PathBuf> {
    match name {
        OutputName::Stdout => Some(job.dir.join("stdout")),
        OutputName::Stderr => Some(job.dir.join("stderr")),
        OutputName::Checkpoint => Some(job.dir.join(crate::guest::checkpoint::SNAPSHOT_NAME)),
        OutputName::File(f) => {
            if !job.outputs.iter().any(|o| o == f) || !RelPath::is_valid(f) {
                return None;
            }
            let work = job.dir.join("work").canonicalize().ok()?;
            let real = work.join(f).canonicalize().ok()?;
            real.starts_with(&work).then_some(real)
        }
    }
}

/// Reads up to `len` bytes (at most one chunk) from `offset`; returns them with
/// the file's size. The last component is opened without following symlinks.
pub fn read_chunk(path: &Path, offset: u64, len: u32) -> std::io::Result<(Vec<u8>, u64)> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let total = meta.len();
    let want = u64::from(len.min(OUTPUT_CHUNK_MAX));
    let mut data = Vec::new();
    if offset < total && want > 0 {
        file.seek(SeekFrom::Start(offset))?;
        Read::by_ref(&mut file).take(want).read_to_end(&mut data)?;
    }
    Ok((data, total))
}

/// A file's identity and contents as its metadata tells them: size,
/// modification and change times (ns), inode and device. Any write changes
/// one of them.
type Stamp = (u64, i64, i64, i64, i64, u64, u64);

fn stamp(meta: &std::fs::Metadata) -> Stamp {
    (
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
        meta.ino(),
        meta.dev(),
    )
}

/// Output files remembered with their hash, at most; past it the memory is
/// cleared (a host keeps 16 jobs, each with a few outputs).
const MEMO_MAX: usize = 1024;

/// The hash of each output file fetched, kept while the file is unchanged.
/// Every fetch at offset 0 carries the whole output's hash: without this,
/// each such request from the job's consumer (the request budget allows 64
/// a second) would read and hash the whole output again, up to
/// `[guest] max_output_mib`, where an honest consumer asks once.
#[derive(Debug, Default)]
pub struct HashMemo {
    known: Mutex<HashMap<PathBuf, (Stamp, [u8; 32])>>,
    /// Files read whole to hash them (not answered from memory).
    hashed: AtomicU64,
}

impl HashMemo {
    /// BLAKE3 hash of the output file at `path`, read in chunks (the last
    /// component opened without following symlinks; a missing file, a stdout
    /// never written, hashes as empty, as it reads), from memory while the
    /// file is unchanged.
    pub fn hash(&self, path: &Path) -> std::io::Result<[u8; 32]> {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(*blake3::hash(b"").as_bytes())
            }
            other => other?,
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let before = stamp(&meta);
        let remembered = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .copied();
        if let Some((known, hash)) = remembered {
            if known == before {
                return Ok(hash);
            }
        }
        self.hashed.fetch_add(1, Ordering::Relaxed);
        let mut hasher = blake3::Hasher::new();
        hasher.update_reader(&file)?;
        let hash = *hasher.finalize().as_bytes();
        // Kept only when nothing wrote the file while it was read.
        if stamp(&file.metadata()?) == before {
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            if known.len() >= MEMO_MAX {
                known.clear();
            }
            known.insert(path.to_path_buf(), (before, hash));
        }
        Ok(hash)
    }

    /// Files read whole so far.
    pub fn hashed(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }
}

/// A file that may not exist yet (stdout before the first write) reads as empty.
pub fn read_chunk_or_empty(path: &Path, offset: u64, len: u32) -> std::io::Result<(Vec<u8>, u64)> {
    match read_chunk(path, offset, len) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Vec::new(), 0)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::JobId;
    use libp2p::PeerId;
    use tokio::sync::mpsc;

    #[test]
    fn outputs_cannot_escape_the_work_dir_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("out.txt"), b"result").unwrap();
        std::fs::write(dir.path().join("secret"), b"owner's").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), work.join("link")).unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let job = RemoteJob {
            consumer: PeerId::random(),
            consumer_job_id: JobId::new("j").unwrap(),
            local_id: JobId::new("l").unwrap(),
            dir: dir.path().to_path_buf(),
            outputs: vec!["out.txt".into(), "link".into()],
            seq: 0,
            ended: None,
            events: tx,
            usage: None,
        };
        let out = output_path(&job, &OutputName::File("out.txt".into())).unwrap();
        assert_eq!(read_chunk(&out, 0, 1024).unwrap(), (b"result".to_vec(), 6));
        assert_eq!(read_chunk(&out, 2, 2).unwrap(), (b"su".to_vec(), 6));
        assert_eq!(read_chunk(&out, 99, 2).unwrap(), (Vec::new(), 6));
        assert!(output_path(&job, &OutputName::File("link".into())).is_none());
        assert!(output_path(&job, &OutputName::File("undeclared".into())).is_none());
        assert!(read_chunk(&work.join("link"), 0, 10).is_err());
    }

    /// Issue 30, scope 3: a consumer that asks for an output's first chunk
    /// again and again has it hashed once while it is unchanged; a changed
    /// file is hashed again, and every answer is the file's hash.
    #[test]
    fn an_unchanged_output_is_hashed_once_however_often_it_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("stdout");
        std::fs::write(&out, b"8\n").unwrap();
        let memo = HashMemo::default();
        for _ in 0..100 {
            assert_eq!(memo.hash(&out).unwrap(), *blake3::hash(b"8\n").as_bytes());
        }
        assert_eq!(memo.hashed(), 1);
        // Rewritten (same size, other bytes): hashed again, and right.
        std::fs::write(&out, b"9\n").unwrap();
        assert_eq!(memo.hash(&out).unwrap(), *blake3::hash(b"9\n").as_bytes());
        assert_eq!(memo.hashed(), 2);
        // A missing stdout hashes as empty, as it reads; a link is refused.
        let missing = dir.path().join("stderr");
        assert_eq!(memo.hash(&missing).unwrap(), *blake3::hash(b"").as_bytes());
        std::os::unix::fs::symlink(&out, dir.path().join("link")).unwrap();
        assert!(memo.hash(&dir.path().join("link")).is_err());
    }
}
