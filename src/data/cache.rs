//! The host's cache of job inputs, by content hash, with a size cap
//! (`[guest] cache_mib`) and least-recently-used eviction, so an input shared
//! by many tasks crosses to a host once.
//!
//! A file enters the cache only after every chunk of it was verified
//! (renamed from a temporary name, so a half-written file is never found).
//! Files a job is being prepared with are pinned and never evicted under it;
//! the cap can be exceeded by pinned files only, and is restored when they
//! are unpinned. The cache is emptied when the node starts: it does not
//! survive a restart (the job directories of peers do not either), so a file
//! on disk that nobody verified in this run is never handed to a guest.
//!
//! Counters (`CacheStats`) tell how many bytes crossed and how many were
//! served from the cache; the node logs them and tests count crossings with
//! them. Knows files and hashes; not the network nor jobs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::data::hash::ContentHash;

/// What crossed, what was found, what was refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    /// Files read from consumers.
    pub files_fetched: u64,
    /// Bytes read from consumers (verified chunks only).
    pub bytes_fetched: u64,
    /// Inputs found in the cache.
    pub hits: u64,
    /// Bytes of the inputs found in the cache.
    pub bytes_hit: u64,
    /// Chunks refused because they did not match their hash (fetched again).
    pub chunks_refused: u64,
    /// Files evicted to keep under the cap.
    pub evicted: u64,
    /// Files in the cache now.
    pub files: u64,
    /// Bytes in the cache now.
    pub bytes: u64,
    /// The cap, bytes.
    pub cap_bytes: u64,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    last_used: u64,
    pins: u32,
}

#[derive(Debug)]
struct Inner {
    blobs: PathBuf,
    tmp: PathBuf,
    cap: u64,
    used: u64,
    entries: HashMap<ContentHash, Entry>,
    /// Logical clock of uses, for least-recently-used order.
    tick: u64,
    next_tmp: u64,
    stats: CacheStats,
}

/// The cache; cloneable, shared by the pool host and its preparation tasks.
#[derive(Debug, Clone)]
pub struct Cache {
    inner: Arc<Mutex<Inner>>,
}

/// A cached file held for a job: not evicted until this is dropped.
#[derive(Debug)]
pub struct Pinned {
    cache: Cache,
    hash: ContentHash,
    path: PathBuf,
}

impl Pinned {
    /// The verified file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let mut inner = self.cache.lock();
        if let Some(e) = inner.entries.get_mut(&self.hash) {
            e.pins = e.pins.saturating_sub(1);
        }
        inner.evict_over_cap();
    }
}

impl Inner {
    fn blob(&self, hash: &ContentHash) -> PathBuf {
        self.blobs.join(hash.to_string())
    }

    /// Evicts unpinned files, least recently used first, until under the cap.
    fn evict_over_cap(&mut self) {
        while self.used > self.cap {
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| e.pins == 0)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(h, _)| *h);
            let Some(hash) = victim else { break };
            if let Some(e) = self.entries.remove(&hash) {
                self.used = self.used.saturating_sub(e.size);
                self.stats.evicted += 1;
                let path = self.blob(&hash);
                if let Err(err) = std::fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), error = %err, "cannot remove an evicted cache file");
                }
            }
        }
    }
}

impl Cache {
    /// Opens the cache in `dir` with a cap of `cap_bytes`, emptying whatever
    /// an earlier run left there.
    pub fn open(dir: &Path, cap_bytes: u64) -> std::io::Result<Cache> {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let blobs = dir.join("blobs");
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&blobs)?;
        std::fs::create_dir_all(&tmp)?;
        Ok(Cache {
            inner: Arc::new(Mutex::new(Inner {
                blobs,
                tmp,
                cap: cap_bytes,
                used: 0,
                entries: HashMap::new(),
                tick: 0,
                next_tmp: 0,
                stats: CacheStats::default(),
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain counters behind: go on.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached file of `hash` (of `size` bytes), pinned, if present; counts a hit.
    pub fn lookup(&self, hash: ContentHash, size: u64) -> Option<Pinned> {
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.entries.get_mut(&hash).filter(|e| e.size == size)?;
        entry.pins += 1;
        entry.last_used = tick;
        inner.stats.hits += 1;
        inner.stats.bytes_hit += size;
        let path = inner.blob(&hash);
        Some(Pinned {
            cache: self.clone(),
            hash,
            path,
        })
    }

    /// A fresh temporary path to fetch into (inside the cache's directory, so
    /// admitting it is a rename).
    pub fn temp_path(&self) -> PathBuf {
        let mut inner = self.lock();
        inner.next_tmp += 1;
        inner.tmp.join(format!("{}.part", inner.next_tmp))
    }

    /// Takes a fully verified file at `temp` into the cache under `hash`,
    /// pinned; evicts others to keep under the cap.
    pub fn admit(&self, hash: ContentHash, size: u64, temp: &Path) -> std::io::Result<Pinned> {
        let mut inner = self.lock();
        let path = inner.blob(&hash);
        std::fs::rename(temp, &path)?;
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(old) = inner.entries.insert(
            hash,
            Entry {
                size,
                last_used: tick,
                pins: 1,
            },
        ) {
            inner.used = inner.used.saturating_sub(old.size);
        }
        inner.used += size;
        inner.evict_over_cap();
        Ok(Pinned {
            cache: self.clone(),
            hash,
            path,
        })
    }

    /// Counts one file read from a consumer.
    pub fn record_fetch(&self, bytes: u64, refused_chunks: u64) {
        let mut inner = self.lock();
        inner.stats.files_fetched += 1;
        inner.stats.bytes_fetched += bytes;
        inner.stats.chunks_refused += refused_chunks;
    }

    /// Counts chunks refused in a fetch that failed in the end.
    pub fn record_refused(&self, refused_chunks: u64) {
        self.lock().stats.chunks_refused += refused_chunks;
    }

    /// The counters and the current contents.
    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            files: inner.entries.len() as u64,
            bytes: inner.used,
            cap_bytes: inner.cap,
            ..inner.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(cache: &Cache, n: u8, size: usize) -> Pinned {
        let temp = cache.temp_path();
        std::fs::write(&temp, vec![n; size]).unwrap();
        cache
            .admit(ContentHash([n; 32]), size as u64, &temp)
            .unwrap()
    }

    #[test]
    fn the_least_recently_used_unpinned_file_goes_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 300).unwrap();
        drop(put(&cache, 1, 100));
        drop(put(&cache, 2, 100));
        drop(put(&cache, 3, 100));
        // 1 is used again: 2 is now the oldest.
        drop(cache.lookup(ContentHash([1; 32]), 100).unwrap());
        let held = put(&cache, 4, 100);
        assert!(cache.lookup(ContentHash([2; 32]), 100).is_none());
        assert!(cache.lookup(ContentHash([1; 32]), 100).is_some());
        let s = cache.stats();
        assert_eq!((s.files, s.bytes, s.evicted), (3, 300, 1));
        assert_eq!(std::fs::read(held.path()).unwrap(), vec![4; 100]);
        // A lookup with another size is another file.
        assert!(cache.lookup(ContentHash([4; 32]), 99).is_none());
    }

    #[test]
    fn pinned_files_stay_over_the_cap_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 150).unwrap();
        let a = put(&cache, 1, 100);
        let b = put(&cache, 2, 100);
        assert_eq!(
            cache.stats().bytes,
            200,
            "both pinned: over the cap for now"
        );
        assert!(a.path().exists() && b.path().exists());
        let a_path = a.path().to_path_buf();
        drop(a);
        assert!(!a_path.exists(), "released and oldest: evicted");
        assert_eq!(cache.stats().bytes, 100);
        drop(b);
        // A zero cap keeps nothing once released.
        let none = Cache::open(&dir.path().join("z"), 0).unwrap();
        let p = put(&none, 5, 10);
        let path = p.path().to_path_buf();
        assert!(path.exists());
        drop(p);
        assert!(!path.exists());
        assert_eq!(none.stats().files, 0);
    }

    #[test]
    fn opening_empties_what_an_earlier_run_left() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1000).unwrap();
        drop(put(&cache, 1, 10));
        drop(cache);
        let again = Cache::open(dir.path(), 1000).unwrap();
        assert!(again.lookup(ContentHash([1; 32]), 10).is_none());
        assert_eq!(
            std::fs::read_dir(dir.path().join("blobs")).unwrap().count(),
            0
        );
    }
}
