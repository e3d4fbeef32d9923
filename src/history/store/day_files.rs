//! Finished days of samples as files: one file a UTC day, named by the
//! day's start in Unix seconds (`<dir>/days/1764374400.day`), holding the
//! day's `codec` day block. Written whole and durably (a temporary file,
//! fsync, rename, fsync of the directory), so a reader sees the old day or
//! the new one, never part of one.
//!
//! Why files and not sled values (format version 3; version 2 kept them in
//! the `sample_days` tree): sled 0.34 keeps every value it has read or
//! written in memory, past its cache's bound. Two months of days are ~12 MB
//! of values the node reads at least once (its series), so a node held them
//! all for good (heaptrack: 10.8 MB in 54 values via `PageCache::get`). A
//! file read is dropped when the reader is done with it.
//!
//! It must not know what a day block holds (`codec`) nor when a day is
//! sealed (`days`).

use super::StoreError;
use crate::fsutil::{self, FileReadError};
use crate::history::codec::{self, SECS_PER_DAY};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};

/// The directory, inside the store's, that holds the day files.
pub(super) const DAYS_DIR: &str = "days";
const SUFFIX: &str = ".day";
const TMP_SUFFIX: &str = ".day.tmp";
/// The largest day block: a row for every second of the day. A longer file
/// is damaged and reads as an empty (so undecodable) block, like a damaged
/// sled value did: the day's readers skip and count it.
pub(super) const MAX_DAY_FILE_BYTES: u64 = 1 + (SECS_PER_DAY as u64) * codec::DAY_ROW_LEN as u64;

/// The day files of one store.
#[derive(Debug, Clone)]
pub(super) struct DayFiles {
    dir: PathBuf,
}

impl DayFiles {
    /// Opens (creating) `<store>/days` and removes the temporary files a
    /// crash mid-write left (their day's old file, if any, is intact).
    pub(super) fn open(store_dir: &Path) -> Result<DayFiles, StoreError> {
        let dir = store_dir.join(DAYS_DIR);
        fs::create_dir_all(&dir).map_err(|source| day_err("creating", &dir, source))?;
        let files = DayFiles { dir };
        for entry in fs::read_dir(&files.dir).map_err(|e| day_err("listing", &files.dir, e))? {
            let entry = entry.map_err(|e| day_err("listing", &files.dir, e))?;
            if entry.file_name().to_string_lossy().ends_with(TMP_SUFFIX) {
                let path = entry.path();
                fs::remove_file(&path).map_err(|e| day_err("removing", &path, e))?;
            }
        }
        Ok(files)
    }

    fn path(&self, day: i64) -> PathBuf {
        self.dir.join(format!("{day}{SUFFIX}"))
    }

    /// The stored block of the day starting at `day`, if any. A file
    /// longer than any day block, or not a regular file (a FIFO would block
    /// the reader), reads as an empty block (damaged).
    pub(super) fn get(&self, day: i64) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path(day);
        match fsutil::read_bounded(&path, MAX_DAY_FILE_BYTES) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(FileReadError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(FileReadError::TooLarge { .. } | FileReadError::NotRegular { .. }) => {
                Ok(Some(Vec::new()))
            }
            Err(FileReadError::Io { source, .. }) => Err(day_err("reading", &path, source)),
        }
    }

    /// The rows the day's file holds, from its length and its first byte
    /// (see [`codec::day_block_len`]; a damaged header, an oversized file
    /// or one that is not a regular file counts none, as [`Self::get`]
    /// reads it), without reading the rows.
    pub(super) fn rows_by_length(&self, day: i64) -> Result<u64, StoreError> {
        let path = self.path(day);
        let mut file = match fsutil::open_regular(&path) {
            Ok(f) => f,
            Err(FileReadError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Ok(0)
            }
            Err(FileReadError::Io { source, .. }) => return Err(day_err("opening", &path, source)),
            // Not a regular file: damaged, as a reader finds it.
            Err(_) => return Ok(0),
        };
        let len = file
            .metadata()
            .map_err(|e| day_err("reading the length of", &path, e))?
            .len();
        let mut header = [0u8; 1];
        let read = file
            .read(&mut header)
            .map_err(|e| day_err("reading", &path, e))?;
        if len > MAX_DAY_FILE_BYTES || codec::day_block_len(&header[..read]).is_err() {
            return Ok(0);
        }
        Ok((len - 1).div_ceil(codec::DAY_ROW_LEN as u64))
    }

    /// Writes the day's block whole and durably: when this returns, the
    /// file is the new block and survives a crash.
    pub(super) fn put(&self, day: i64, block: &[u8]) -> Result<(), StoreError> {
        let path = self.path(day);
        let tmp = self.dir.join(format!("{day}{TMP_SUFFIX}"));
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(block)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            sync_dir(&self.dir)
        };
        write().map_err(|e| day_err("writing", &path, e))
    }

    /// Removes the day's file (durably); nothing if there is none.
    pub(super) fn remove(&self, day: i64) -> Result<(), StoreError> {
        let path = self.path(day);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir).map_err(|e| day_err("removing", &path, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(day_err("removing", &path, e)),
        }
    }

    /// The days with a file whose start lies in `range`, oldest first.
    /// Files with other names are not days and are left alone.
    pub(super) fn days(&self, range: impl RangeBounds<i64>) -> Result<Vec<i64>, StoreError> {
        let mut days = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| day_err("listing", &self.dir, e))? {
            let entry = entry.map_err(|e| day_err("listing", &self.dir, e))?;
            let name = entry.file_name();
            let Some(day) = name
                .to_str()
                .and_then(|n| n.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<i64>().ok())
                .filter(|&d| codec::day_start(d) == d)
            else {
                continue;
            };
            if range.contains(&day) {
                days.push(day);
            }
        }
        days.sort_unstable();
        Ok(days)
    }

    /// The days whose start lies in the days holding `range`'s bounds, for
    /// readers of a time range: the day holding a bound is read whole.
    pub(super) fn days_holding(
        &self,
        range: &(Bound<i64>, Bound<i64>),
    ) -> Result<Vec<i64>, StoreError> {
        let day_bound = |b: Bound<i64>| match b {
            Bound::Included(t) | Bound::Excluded(t) => Bound::Included(codec::day_start(t)),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.days((day_bound(range.0), day_bound(range.1)))
    }
}

/// Makes the directory's entries (a rename, a removal) durable.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn day_err(doing: &'static str, path: &Path, source: io::Error) -> StoreError {
    StoreError::DayFile {
        doing,
        path: path.to_path_buf(),
        source,
    }
}
