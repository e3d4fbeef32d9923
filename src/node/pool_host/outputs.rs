//! A remote job's outputs as its consumer fetches them: the file behind an
//! output name, confined to the job's directory (symlinks resolved), read in
//! bounded chunks and hashed. It must not know the network.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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

/// BLAKE3 hash of an output file, read in chunks; the last component is
/// opened without following symlinks. A missing file (stdout never written)
/// hashes as empty, as it reads.
pub fn hash_output(path: &Path) -> std::io::Result<[u8; 32]> {
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
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file)?;
    Ok(*hasher.finalize().as_bytes())
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
}
