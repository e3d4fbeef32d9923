//! Sealing finished days: the samples of every UTC day before the newest
//! row's day move from one key each (`samples`) into one file for the day
//! (`day_files`), merged with what that day's value already held (rows
//! imported or recorded into a day after it was sealed); and the row count
//! of both places, taken at open.
//!
//! Why: sled keeps a page per few dozen keys and its segment cleaner
//! rewrites them; two months of 6 s rows as ~800,000 keys cost a lone node
//! 3 % of a core idle and ~15 MB, where 56 files cost next to nothing.
//!
//! Crash safety without one big transaction (sled's transactions hold
//! every write in memory, see `IMPORT_BATCH_ROWS`): the day's file is
//! written durably first, then its rows are removed one by one, each
//! only if unchanged. A crash between leaves rows in both places, which
//! readers merge (`rows`) and the next seal removes; a row is never in
//! neither. It must not know what a sample means nor how retention or
//! imports choose rows.

use super::layout::time_key_range;
use super::{sled_err, BulkHistory, HistoryStore, StoreError};
use crate::history::codec;
use crate::model::series::Sample;
use sled::IVec;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;

/// Rows removed between flushes while sealing, to bound sled's buffers.
const REMOVE_BATCH_ROWS: usize = 1_000;

/// What one call of [`BulkHistory::seal_finished_days`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Days whose rows were written as one value.
    pub days: u64,
    /// Rows that moved out of one key each.
    pub rows: u64,
    /// Days left as they were because their stored value is damaged.
    pub days_skipped: u64,
}

impl HistoryStore {
    /// Seals every day before the newest row's (see [`BulkHistory::seal_finished_days`]).
    pub fn seal_finished_days(&self) -> Result<SealReport, StoreError> {
        self.bulk.seal_finished_days()
    }
}

impl BulkHistory {
    /// Seals every finished day: the rows of each UTC day before the newest
    /// row's day become that day's value. Runs off the node's loop (a day
    /// of 6 s rows is 14,400 removes); waits for an import to end and
    /// holds readers of many rows off one day at a time.
    pub fn seal_finished_days(&self) -> Result<SealReport, StoreError> {
        let _import = self
            .shared
            .import
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut report = SealReport::default();
        let Some(newest) = self.last_sample()? else {
            return Ok(report);
        };
        let today = codec::day_start(newest.time);
        let mut from = i64::MIN;
        while let Some(day) = self.oldest_loose_day(from, today)? {
            let moved = self.seal_day(day)?;
            match moved {
                Some(rows) => {
                    report.days += 1;
                    report.rows += rows;
                }
                None => report.days_skipped += 1,
            }
            from = day.saturating_add(codec::SECS_PER_DAY);
        }
        Ok(report)
    }

    /// The day of the oldest readable loose row in `[from, before)`.
    fn oldest_loose_day(&self, from: i64, before: i64) -> Result<Option<i64>, StoreError> {
        for item in self.samples.range(time_key_range(&(from..before))) {
            let (k, _) = item.map_err(sled_err("reading samples"))?;
            if let Ok(t) = codec::decode_time_key(&k) {
                return Ok(Some(codec::day_start(t)));
            }
        }
        Ok(None)
    }

    /// Writes the day starting at `day` as one value: its stored value's
    /// rows, replaced by its loose rows where both hold a time, then
    /// removes the loose rows. `None` when the stored value is damaged
    /// beyond its rows (left as it is, loose rows too: nothing is lost).
    fn seal_day(&self, day: i64) -> Result<Option<u64>, StoreError> {
        // Readers first: a long export holds them, and retention, on the
        // node's loop, must not wait for it behind `days_writer`.
        let _layout = self
            .shared
            .layout
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let _writer = self
            .shared
            .days_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let end = day.saturating_add(codec::SECS_PER_DAY);
        let mut rows: BTreeMap<i64, Sample> = BTreeMap::new();
        let stored = self.days.get(day)?;
        let mut stored_len = 0usize;
        if let Some(bytes) = &stored {
            let Ok(decoded) = codec::decode_day_block(day, bytes) else {
                tracing::warn!(
                    day,
                    "a day of samples is damaged; its rows stay where they are"
                );
                return Ok(None);
            };
            stored_len = codec::day_block_len(bytes).unwrap_or(0);
            // Damaged rows cannot be read; writing the day again drops them.
            rows.extend(decoded.flatten().map(|s| (s.time, s)));
        }
        let mut loose: Vec<(IVec, IVec)> = Vec::new();
        for item in self.samples.range(time_key_range(&(day..end))) {
            let (k, v) = item.map_err(sled_err("reading samples"))?;
            // A damaged row stays where it is (readers skip and count it).
            if let Ok(s) = codec::decode_sample(&k, &v) {
                rows.insert(s.time, s);
                loose.push((k, v));
            }
        }
        if loose.is_empty() {
            return Ok(Some(0));
        }
        let merged: Vec<Sample> = rows.into_values().collect();
        let value = codec::encode_day_block(day, &merged)
            .map_err(|source| StoreError::BadSample { time: day, source })?;
        // The day is durable before any of its rows leaves its own key.
        self.days.put(day, &value)?;
        for (i, (k, v)) in loose.iter().enumerate() {
            // Only if unchanged: a row rewritten meanwhile stays (and wins).
            let _ = self
                .samples
                .compare_and_swap(k, Some(v), None::<&[u8]>)
                .map_err(sled_err("removing sealed samples"))?;
            if (i + 1) % REMOVE_BATCH_ROWS == 0 {
                self.db.flush().map_err(sled_err("flushing"))?;
            }
        }
        self.db.flush().map_err(sled_err("flushing"))?;
        let before = stored_len.saturating_add(loose.len());
        self.recount(before, merged.len());
        Ok(Some(loose.len() as u64))
    }

    /// Moves the row count from `before` to `after` rows.
    pub(super) fn recount(&self, before: usize, after: usize) {
        let (before, after) = (before as u64, after as u64);
        let _ = self
            .shared
            .samples_len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(before).saturating_add(after))
            });
    }

    /// Rows stored in both places (damaged ones included). Read at open:
    /// sled's `len` walks the tree, and a day's count is its file's length.
    pub(super) fn count_rows(&self) -> Result<u64, StoreError> {
        let mut n = self.samples.len() as u64;
        for day in self.days.days(..)? {
            n += self.days.rows_by_length(day)?;
        }
        Ok(n)
    }

    /// The stored value of the row at `time`, wherever it lives; `cache`
    /// keeps the last day read (an import checks rows in time order).
    pub(super) fn stored_value(
        &self,
        time: i64,
        cache: &mut Option<(i64, Option<Vec<u8>>)>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(v) = self
            .samples
            .get(codec::time_key(time))
            .map_err(sled_err("reading samples"))?
        {
            return Ok(Some(v.to_vec()));
        }
        let day = codec::day_start(time);
        if cache.as_ref().is_none_or(|(d, _)| *d != day) {
            *cache = Some((day, self.days.get(day)?));
        }
        Ok(cache
            .as_ref()
            .and_then(|(_, v)| v.as_ref())
            .and_then(|v| codec::find_in_day_block(day, v, time))
            .map(<[u8]>::to_vec))
    }
}
