//! The peer book's durable half: one sled database in the node's data dir
//! (`peers/`), one tree per pool (`pool/<name>`), so a node moved to another
//! pool does not dial the old one's members. Bytes are laid out by `codec`.
//!
//! Writes are whatever [`PeerBook::take_changes`] hands over (the network
//! task calls it at most every few seconds) and the caller flushes each
//! write ([`BookStore::flush`], off its loop), so a `kill -9` loses at most
//! what changed since the last write. sled's background flusher runs only
//! as a backstop, every [`FLUSH_MS`]: at 500 ms its wake-ups were a tenth
//! of an idle node's CPU (two flushers, this one and the history's, were
//! 17 % of 20 idle hosts' CPU samples under `perf`, docs/scale.md).
//! Entries that do not decode are dropped at load, with a count, never a panic.

use std::path::{Path, PathBuf};

use libp2p::PeerId;

use super::codec::{decode_key, decode_value, encode_key, encode_value, BookCodecError};
use super::{BookChanges, BookEntry, PeerBook};
use crate::model::ids::PoolName;

/// sled's page cache for the book: the book lives in memory, sled is read once.
const CACHE_BYTES: u64 = 256 * 1024;
/// How often sled's background flusher looks for unwritten entries, ms: a
/// backstop, each write is flushed by its caller.
pub const FLUSH_MS: u64 = 30_000;

/// Why the peer book's store failed.
#[derive(Debug, thiserror::Error)]
pub enum BookStoreError {
    #[error("cannot open the peer book {path}: {source}")]
    Open { path: PathBuf, source: sled::Error },
    #[error("peer book: {0}")]
    Sled(#[from] sled::Error),
    #[error(transparent)]
    Codec(#[from] BookCodecError),
}

/// The book's tree for one pool.
#[derive(Debug, Clone)]
pub struct BookStore {
    tree: sled::Tree,
    /// Kept so the database stays open as long as the tree is used.
    _db: sled::Db,
}

/// What [`BookStore::load`] read.
#[derive(Debug)]
pub struct Loaded {
    pub book: PeerBook,
    /// Entries that did not decode (dropped from the store).
    pub unreadable: usize,
}

impl BookStore {
    /// Opens (or creates) the book of `pool` under `dir`.
    pub fn open(dir: &Path, pool: &PoolName) -> Result<BookStore, BookStoreError> {
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .flush_every_ms(Some(FLUSH_MS));
        let db = crate::sled_open::open_with_lock_retry(&config).map_err(|source| {
            BookStoreError::Open {
                path: dir.to_path_buf(),
                source,
            }
        })?;
        let tree = db.open_tree(format!("pool/{pool}"))?;
        Ok(BookStore { tree, _db: db })
    }

    /// Reads every entry into a book of at most `max` peers, keeping only
    /// the addresses `keep` allows (the pool's `AddressScope`, which may
    /// differ from the last run's). Unreadable entries are removed.
    pub fn load(
        &self,
        max: usize,
        keep: impl Fn(&libp2p::Multiaddr) -> bool,
    ) -> Result<Loaded, BookStoreError> {
        let mut entries: Vec<(PeerId, BookEntry)> = Vec::new();
        let mut bad: Vec<sled::IVec> = Vec::new();
        for item in self.tree.iter() {
            let (key, value) = item?;
            match (decode_key(&key), decode_value(&value)) {
                (Ok(peer), Ok(mut entry)) => {
                    entry.addresses.retain(&keep);
                    entries.push((peer, entry));
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!("dropping an unreadable peer book entry: {e}");
                    bad.push(key);
                }
            }
        }
        for key in &bad {
            self.tree.remove(key)?;
        }
        let mut book = PeerBook::loaded(max, entries);
        // Entries evicted at load (a smaller bound) leave the store too.
        let evicted = book.take_changes();
        self.write(&evicted)?;
        Ok(Loaded {
            book,
            unreadable: bad.len(),
        })
    }

    /// Writes what changed, as one sled batch.
    pub fn write(&self, changes: &BookChanges) -> Result<(), BookStoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for (peer, entry) in &changes.upserts {
            batch.insert(encode_key(peer), encode_value(entry)?);
        }
        for peer in &changes.removals {
            batch.remove(encode_key(peer));
        }
        self.tree.apply_batch(batch)?;
        Ok(())
    }

    /// Puts every write so far on disk (blocking: call it off the loop).
    pub fn flush(&self) -> Result<(), BookStoreError> {
        self._db.flush()?;
        Ok(())
    }

    /// Writes an undecodable value under `key`: for tests of hostile disks.
    #[cfg(test)]
    pub(crate) fn put_raw(&self, key: &[u8], value: &[u8]) {
        self.tree.insert(key, value).unwrap();
    }
}
