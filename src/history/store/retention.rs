//! Retention: removing what is older than the owner keeps (samples,
//! transitions and job-log events), in bounded batches, never the newest
//! sample nor the newest transition, which say what the host does now; and
//! the row count kept in step with what is removed. A sealed day wholly
//! before the cutoff goes as one file; the day holding the cutoff is
//! written again with its rows from the cutoff on.
//!
//! It must not know how rows are written or read.

use super::{sled_err, BulkHistory, CompactReport, HistoryStore, StoreError};
use crate::history::codec::{self, SECS_PER_DAY};
use crate::model::series::Sample;
use sled::{IVec, Tree};
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
/// Rows deleted between flushes, to bound memory.
const BATCH_ROWS: usize = 1_000;

impl HistoryStore {
    /// Applies retention at `now`: deletes samples, transitions and job-log
    /// events older than `retention_days`, but never the newest sample nor
    /// the newest transition, which say what the host is doing now.
    pub fn compact(&self, now: i64, retention_days: u32) -> Result<CompactReport, StoreError> {
        let cutoff = now.saturating_sub(i64::from(retention_days).saturating_mul(SECS_PER_DAY));
        let cutoff_key = codec::time_key(cutoff);
        let newest = self.last_sample()?.map(|s| s.time);
        let report = CompactReport {
            samples_removed: delete_before(&self.bulk.samples, &cutoff_key, true)?
                + self.bulk.drop_days_before(cutoff, newest)?,
            transitions_removed: delete_before(&self.transitions, &cutoff_key, true)?,
            job_events_removed: delete_before(&self.jobs, &cutoff_key, false)?,
        };
        self.bulk.uncount(report.samples_removed);
        self.flush()?;
        Ok(report)
    }
}

impl BulkHistory {
    /// Removes the sealed rows older than `cutoff`, except the row at
    /// `newest`; returns how many went.
    fn drop_days_before(&self, cutoff: i64, newest: Option<i64>) -> Result<u64, StoreError> {
        let _writer = self
            .shared
            .days_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let holds_newest = |day: i64| newest.is_some_and(|n| codec::day_start(n) == day);
        let mut removed = 0u64;
        // The days up to the cutoff's; they are few (one file a day).
        for day in self.days.days(..=codec::day_start(cutoff))? {
            if day.saturating_add(SECS_PER_DAY) <= cutoff && !holds_newest(day) {
                // A whole day goes: its count from the file's length, no read.
                removed += self.days.rows_by_length(day)?;
                self.days.remove(day)?;
                continue;
            }
            let Some(v) = self.days.get(day)? else {
                continue;
            };
            let stored = codec::day_block_len(&v).unwrap_or(0);
            let Ok(rows) = codec::decode_day_block(day, &v) else {
                // Damaged beyond its rows: left for a reader to report.
                continue;
            };
            let kept: Vec<Sample> = rows
                .flatten()
                .filter(|s| s.time >= cutoff || Some(s.time) == newest)
                .collect();
            if kept.len() == stored {
                continue;
            }
            if kept.is_empty() {
                self.days.remove(day)?;
            } else {
                let value = codec::encode_day_block(day, &kept)
                    .map_err(|source| StoreError::BadSample { time: day, source })?;
                self.days.put(day, &value)?;
            }
            removed += (stored - kept.len()) as u64;
        }
        Ok(removed)
    }

    pub(super) fn uncount(&self, removed: u64) {
        let _ = self
            .shared
            .samples_len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(removed))
            });
    }
}

/// Deletes the records whose keys sort before `cutoff` (time keys and job
/// keys both start with the time key), keeping the newest record if
/// `keep_newest`.
pub(super) fn delete_before(
    tree: &Tree,
    cutoff: &[u8],
    keep_newest: bool,
) -> Result<u64, StoreError> {
    let newest: Option<IVec> = if keep_newest {
        tree.last()
            .map_err(sled_err("reading for retention"))?
            .map(|(k, _)| k)
    } else {
        None
    };
    let mut removed = 0u64;
    loop {
        // Keys first, then one `remove` each (sled's `Batch` is a
        // transaction whose memory grows with its size; see
        // `IMPORT_BATCH_ROWS`), with a flush every batch.
        let mut keys: Vec<IVec> = Vec::with_capacity(BATCH_ROWS);
        for item in tree.range(..cutoff) {
            let (k, _) = item.map_err(sled_err("reading for retention"))?;
            if newest.as_ref() == Some(&k) {
                continue;
            }
            keys.push(k);
            if keys.len() == BATCH_ROWS {
                break;
            }
        }
        if keys.is_empty() {
            return Ok(removed);
        }
        for k in &keys {
            if tree
                .remove(k)
                .map_err(sled_err("deleting old records"))?
                .is_some()
            {
                removed += 1;
            }
        }
        tree.flush().map_err(sled_err("flushing"))?;
    }
}
