//! Reading files a user names (traces, `history import`, `submit --input`,
//! swarm keys, the config) without trusting them.
//!
//! Two rules, both learnt the hard way: a size check on metadata is worthless
//! (`/dev/zero` reports 0 bytes and never ends), so the limit is counted while
//! reading; and opening a FIFO for reading blocks until a writer appears, so
//! the file is opened non-blocking and refused unless `fstat` on the open
//! descriptor says it is a regular file. Every error names the file as the
//! user gave it.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a named file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: is a {kind}, not a regular file; refusing to read it")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path}: larger than the {max}-byte limit (stopped reading at {read} bytes)")]
    TooLarge { path: PathBuf, max: u64, read: u64 },
}

impl FileReadError {
    /// An error met while reading `path` through a [`BoundedFile`] (the
    /// limit becomes [`FileReadError::TooLarge`] again).
    pub fn from_io(path: &Path, e: io::Error) -> FileReadError {
        classify(path, e)
    }

    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            FileReadError::Io { path, .. }
            | FileReadError::NotRegular { path, .. }
            | FileReadError::TooLarge { path, .. } => path,
        }
    }
}

fn kind_name(file_type: std::fs::FileType) -> &'static str {
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "FIFO (named pipe)"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// Opens `path` for reading if, and only if, it is a regular file (symlinks
/// followed). Never blocks on a FIFO: the open is non-blocking and the type
/// is checked on the open descriptor, so a file swapped after a `stat`
/// cannot slip through.
pub fn open_regular(path: &Path) -> Result<File, FileReadError> {
    let io_err = |source| FileReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    // A stat first, so that opening a device (which may have side effects,
    // e.g. a tape rewinding) is not even tried.
    let meta = std::fs::metadata(path).map_err(io_err)?;
    if !meta.is_file() {
        return Err(FileReadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_name(meta.file_type()),
        });
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(FileReadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_name(meta.file_type()),
        });
    }
    // O_NONBLOCK has no effect on regular files; it is left set.
    Ok(file)
}

/// A reader over a regular file that fails with [`FileReadError::TooLarge`]
/// (as an `io::Error` of kind `FileTooLarge` wrapping it) once more than
/// `max` bytes have come through. For streaming consumers (imports).
pub struct BoundedFile {
    path: PathBuf,
    inner: File,
    read: u64,
    max: u64,
}

impl BoundedFile {
    /// Opens `path` (regular files only) with a limit of `max` bytes.
    pub fn open(path: &Path, max: u64) -> Result<BoundedFile, FileReadError> {
        Ok(BoundedFile {
            path: path.to_path_buf(),
            inner: open_regular(path)?,
            read: 0,
            max,
        })
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read
    }
}

impl Read for BoundedFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // One byte past the limit is asked for, so that a file of exactly
        // `max` bytes passes and one of `max + 1` fails.
        let room = self.max.saturating_add(1).saturating_sub(self.read);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if want == 0 {
            return Err(too_large(&self.path, self.max, self.read));
        }
        let n = self.inner.read(&mut buf[..want])?;
        self.read = self.read.saturating_add(n as u64);
        if self.read > self.max {
            return Err(too_large(&self.path, self.max, self.read));
        }
        Ok(n)
    }
}

fn too_large(path: &Path, max: u64, read: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        FileReadError::TooLarge {
            path: path.to_path_buf(),
            max,
            read,
        },
    )
}

/// Turns an `io::Error` from a [`BoundedFile`] back into the typed error.
fn classify(path: &Path, e: io::Error) -> FileReadError {
    if let Some(FileReadError::TooLarge { max, read, .. }) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<FileReadError>())
    {
        return FileReadError::TooLarge {
            path: path.to_path_buf(),
            max: *max,
            read: *read,
        };
    }
    FileReadError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// Reads the whole of a regular file of at most `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, FileReadError> {
    let mut file = BoundedFile::open(path, max)?;
    // The metadata size is only a capacity hint, capped by the limit.
    let hint = file.inner.metadata().map(|m| m.len().min(max)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    file.read_to_end(&mut bytes)
        .map_err(|e| classify(path, e))?;
    Ok(bytes)
}

/// Reads a UTF-8 regular file of at most `max` bytes.
pub fn read_to_string_bounded(path: &Path, max: u64) -> Result<String, FileReadError> {
    let bytes = read_bounded(path, max)?;
    String::from_utf8(bytes).map_err(|e| FileReadError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_regular_file_within_the_limit_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_bounded(&path, 5).unwrap(), b"12345");
        let e = read_bounded(&path, 4).unwrap_err();
        assert!(matches!(e, FileReadError::TooLarge { max: 4, .. }), "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn devices_and_directories_are_refused_by_name() {
        for (p, kind) in [("/dev/zero", "character device"), ("/tmp", "directory")] {
            let e = read_bounded(Path::new(p), 1 << 20).unwrap_err();
            assert!(matches!(e, FileReadError::NotRegular { .. }), "{p}: {e}");
            let text = e.to_string();
            assert!(text.contains(p) && text.contains(kind), "{text}");
        }
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let started = Instant::now();
        let e = read_bounded(&fifo, 1 << 20).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(e.to_string().contains("pipe"), "{e}");
    }

    #[test]
    fn the_limit_is_counted_while_reading_not_taken_from_metadata() {
        // /proc files report size 0 in metadata yet have content: a reader
        // that trusted metadata would let anything through.
        let path = Path::new("/proc/self/status");
        let e = read_bounded(path, 8).unwrap_err();
        assert!(matches!(e, FileReadError::TooLarge { read: 9, .. }), "{e}");
        assert!(read_bounded(path, 1 << 20).unwrap().len() > 8);
    }
}
