//! Opening the store and what every other part of it leans on: the trees
//! and the metadata made or read, the pause flag and the high-water mark
//! loaded, the torn-tail check, an interrupted import rolled back, the
//! silence since the heartbeat recorded and the finished days sealed (which
//! also upgrades a version 1 store; a version 2 store's sealed days move
//! from sled to files first), in that order; then the handles
//! and facts the caller reads back, the flush after each record, and the
//! count of corrupt records skipped.
//!
//! It must not know how a sample, a pause or an import is written: those
//! are the sibling modules' jobs, which `open` only calls.

use super::day_files::DayFiles;
use super::layout::{
    resolve_meta, KEY_FRESH_DB, KEY_PAUSED, KEY_PAUSE_UNTIL, TREE_DAYS_V2, TREE_JOBS, TREE_META,
    TREE_SAMPLES, TREE_TRANSITIONS,
};
use super::rebuild;
use super::watermark::{Watermark, WATERMARK_FILE};
use super::{
    sled_err, BulkHistory, DownInterval, HistoryStore, SharedCounters, StoreError, StoreMeta,
    StoreOptions, TornTail,
};
use crate::history::codec::{self, CodecError};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

impl HistoryStore {
    /// Opens (or creates) the store in `dir` at time `now` (Unix seconds).
    ///
    /// If the heartbeat is older than `now - max_gap` and the node was not
    /// already down, records a down row and an S5 transition at
    /// `heartbeat + step`: the node was off from then until now.
    ///
    /// A store whose database once held many rows one key each (an older
    /// version's) is rebuilt as a fresh database once its days are sealed,
    /// then opened again (`rebuild` says why).
    pub fn open(dir: &Path, opts: &StoreOptions, now: i64) -> Result<Self, StoreError> {
        rebuild::recover(dir)?;
        let store = Self::open_database(dir, opts, now)?;
        if store
            .bulk
            .meta_tree
            .contains_key(KEY_FRESH_DB)
            .map_err(sled_err("reading metadata"))?
        {
            return Ok(store);
        }
        if store.bulk.samples.is_empty() && store.bulk.days.days(..)?.is_empty() {
            // A new store: nothing was ever one key a row here.
            store
                .bulk
                .meta_tree
                .insert(KEY_FRESH_DB, &[][..])
                .map_err(sled_err("writing metadata"))?;
            store.flush()?;
            return Ok(store);
        }
        // What the first open found is the caller's to hear.
        let (gap, torn, rolled_back) =
            (store.gap_on_open, store.torn_tail, store.import_rolled_back);
        drop(store);
        tracing::info!("rebuilding the history's database as a fresh one (once, after an upgrade)");
        rebuild::rebuild(dir, KEY_FRESH_DB)?;
        let mut store = Self::open_database(dir, opts, now)?;
        store.gap_on_open = store.gap_on_open.or(gap);
        store.torn_tail = store.torn_tail.or(torn);
        store.import_rolled_back += rolled_back;
        Ok(store)
    }

    fn open_database(dir: &Path, opts: &StoreOptions, now: i64) -> Result<Self, StoreError> {
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(opts.cache_bytes)
            .flush_every_ms(Some(opts.background_flush_ms.max(1)));
        let db =
            crate::sled_open::open_with_lock_retry(&config).map_err(|source| StoreError::Open {
                path: dir.to_path_buf(),
                source,
            })?;
        let tree = |name: &str| db.open_tree(name).map_err(sled_err("opening a tree"));
        let meta_tree = tree(TREE_META)?;
        let samples = tree(TREE_SAMPLES)?;
        let days = DayFiles::open(dir)?;
        let moved = move_v2_days_to_files(&db, &days)?;
        if moved > 0 {
            tracing::info!(days = moved, "moved sealed days of history to files");
        }
        let transitions = tree(TREE_TRANSITIONS)?;
        let jobs = tree(TREE_JOBS)?;
        let meta = resolve_meta(&meta_tree, opts)?;
        let paused = match meta_tree
            .get(KEY_PAUSED)
            .map_err(sled_err("reading metadata"))?
        {
            Some(v) => {
                codec::decode_flag("paused", &v).map_err(|source| StoreError::CorruptMeta {
                    key: "paused",
                    source,
                })?
            }
            None => false,
        };
        let pause_until = match meta_tree
            .get(KEY_PAUSE_UNTIL)
            .map_err(sled_err("reading metadata"))?
        {
            Some(v) if paused => Some(codec::decode_i64("pause_until", &v).map_err(|source| {
                StoreError::CorruptMeta {
                    key: "pause_until",
                    source,
                }
            })?),
            _ => None,
        };
        let watermark_path = dir.join(WATERMARK_FILE);
        let watermark_file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&watermark_path)
            .map_err(|source| StoreError::Watermark {
                path: watermark_path.clone(),
                source,
            })?;
        let mark = Watermark::read(&watermark_file);
        let bulk = BulkHistory {
            db,
            meta_tree,
            samples,
            days,
            meta,
            shared: Arc::new(SharedCounters {
                samples_len: AtomicU64::new(0),
                corrupt_skipped: AtomicU64::new(0),
                watermark: Mutex::new(Some(watermark_file)),
                layout: RwLock::new(()),
                import: Mutex::new(()),
                days_writer: Mutex::new(()),
            }),
        };
        bulk.shared
            .samples_len
            .store(bulk.count_rows()?, Ordering::Relaxed);
        let mut store = HistoryStore {
            bulk,
            transitions,
            jobs,
            paused,
            pause_until,
            withheld: None,
            flush_every_record: opts.flush_every_record,
            gap_on_open: None,
            torn_tail: None,
            import_rolled_back: 0,
        };
        store.torn_tail = store.check_watermark(mark)?;
        store.import_rolled_back = store.bulk.roll_back_interrupted_import()?;
        store.gap_on_open = store.record_gap_since_heartbeat(now)?;
        // Once per day at most in a running node; at the first open of a
        // version 1 store, all of its days (seconds for two months).
        let sealed = store.bulk.seal_finished_days()?;
        if sealed.days > 0 {
            tracing::info!(
                days = sealed.days,
                rows = sealed.rows,
                "sealed finished days of history"
            );
        }
        store.flush()?;
        Ok(store)
    }

    /// Sample rows `open` found missing at the end of the store (a torn
    /// write that sled dropped when recovering), if any.
    pub fn torn_tail(&self) -> Option<TornTail> {
        self.torn_tail
    }

    /// Rows of an interrupted import that `open` removed.
    pub fn import_rolled_back(&self) -> u64 {
        self.import_rolled_back
    }

    /// A handle for bulk work off the node's loop (imports, exports, series).
    pub fn bulk(&self) -> BulkHistory {
        self.bulk.clone()
    }

    /// The facts stored with the history.
    pub fn meta(&self) -> &StoreMeta {
        &self.bulk.meta
    }

    /// The down interval `open` recorded, if the node had been off.
    pub fn gap_on_open(&self) -> Option<DownInterval> {
        self.gap_on_open
    }

    /// How many corrupt records readers have skipped since open (each one is
    /// also logged as a warning).
    pub fn corrupt_records_skipped(&self) -> u64 {
        self.bulk.shared.corrupt_skipped.load(Ordering::Relaxed)
    }

    /// Writes all pending records to disk and fsyncs, then moves the
    /// high-water mark.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.bulk.flush()
    }

    pub(super) fn flush_record(&self) -> Result<(), StoreError> {
        if self.flush_every_record {
            self.flush()?;
        }
        Ok(())
    }

    pub(super) fn note_corrupt(&self, tree: &str, e: &CodecError) {
        self.bulk.note_corrupt(tree, e);
    }
}

/// Moves the sealed days a version 2 store kept in sled (`sample_days`) to
/// files, each file durable before its value goes; returns how many moved.
/// A crash midway leaves a day in both places, and the next open writes the
/// file again from the same value. Keyed on the tree being there, not on
/// the stored version (which `resolve_meta` rewrites at every open).
fn move_v2_days_to_files(db: &sled::Db, files: &DayFiles) -> Result<u64, StoreError> {
    if !db.tree_names().iter().any(|n| n == TREE_DAYS_V2.as_bytes()) {
        return Ok(0);
    }
    let tree = db
        .open_tree(TREE_DAYS_V2)
        .map_err(sled_err("opening a tree"))?;
    let mut moved = 0u64;
    for item in tree.iter() {
        let (k, v) = item.map_err(sled_err("reading days"))?;
        match codec::decode_time_key(&k) {
            Ok(day) => {
                files.put(day, &v)?;
                moved += 1;
            }
            // No day to file it under: its rows cannot be read either.
            Err(e) => tracing::warn!(error = %e, "dropping a sealed day with a damaged key"),
        }
        tree.remove(&k).map_err(sled_err("moving days to files"))?;
    }
    db.flush().map_err(sled_err("flushing"))?;
    drop(tree);
    db.drop_tree(TREE_DAYS_V2)
        .map_err(sled_err("moving days to files"))?;
    Ok(moved)
}
