//! Seeding the store with a trace: history from before the node ran,
//! streamed a day at a time so memory does not grow with the trace (each
//! whole day written as its file), checked in
//! full before anything is written (recorded history is never
//! overwritten), re-expressed under the store's gap rules, bounded in rows,
//! cancellable between batches, and rolled back when cut short (at once, or
//! by the next `open` after a crash).
//!
//! It must not know about pauses, the job log or retention.

use super::layout::{KEY_HEARTBEAT, KEY_IMPORT_BOUND};
use super::retention::delete_before;
use super::{sled_err, BulkHistory, HistoryStore, ImportReport, StoreError};
use crate::history::codec;
use crate::history::trace::{Trace, TraceError, TraceReader, MAX_TRACE_BYTES};
use crate::model::series::{GapRules, Sample};
use std::io;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::Ordering;

/// Rows an import writes one key each between flushes (those of a day it
/// cannot write whole as a file, see `write_import_day`). Rows go in one `insert` each, not as a sled `Batch`: sled
/// applies a batch as one transaction and, measured with
/// `examples/sled_rss.rs`, 500k rows in batches of 10,000 took the process
/// to 1.6 GiB (batches of 100: 134 MiB; single inserts flushed every 1,000
/// rows: 61 MiB with a 1 MiB cache).
pub const IMPORT_BATCH_ROWS: usize = 1_000;
/// Most rows one import may write once re-expressed under the store's
/// `max_gap` (twice a 256 MiB trace of 1-second samples). A trace whose
/// silences are much longer than the store's `max_gap` multiplies into
/// copies; this bounds the time and disk such a file can cost.
pub const MAX_IMPORT_ROWS: u64 = 20_000_000;

impl HistoryStore {
    /// Seeds the store with a parsed trace's rows; see [`BulkHistory::import_file`].
    pub fn import(&self, trace: &Trace) -> Result<ImportReport, StoreError> {
        self.bulk.import_trace(trace, &|| false)
    }

    /// Seeds the store with the rows of the trace file at `path`, streamed;
    /// errors name `name`. See [`BulkHistory::import_file`].
    pub fn import_file(&self, path: &Path, name: &Path) -> Result<ImportReport, StoreError> {
        self.bulk.import_file(path, name, &|| false)
    }
}

/// Where an import's rows come from; opened twice (check, then write).
type ImportRows<'a> = Box<dyn Iterator<Item = Result<Sample, StoreError>> + 'a>;

/// What the checking pass of an import found.
#[derive(Debug, Clone, Copy)]
struct ImportPass {
    /// Rows before the bound (to write).
    before_bound: u64,
    /// Rows at or after the bound, already stored with the same values.
    already_present: u64,
    /// The newest row, for the heartbeat.
    last_time: Option<i64>,
}

impl BulkHistory {
    /// Seeds the store with a parsed trace's rows (see [`Self::import_file`]).
    pub fn import_trace(
        &self,
        trace: &Trace,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ImportReport, StoreError> {
        let series = &trace.series;
        self.import_rows(
            series.step_secs,
            series.max_gap_secs,
            &mut || Ok(Box::new(series.samples().map(Ok)) as ImportRows<'_>),
            cancelled,
        )
    }

    /// Seeds the store with the rows of the trace file at `path` (a regular
    /// file of at most `MAX_TRACE_BYTES`), streamed in batches of
    /// [`IMPORT_BATCH_ROWS`]: memory does not grow with the trace. Errors
    /// name `name`, the file as the user gave it.
    ///
    /// Recorded history is never overwritten: every row must either already
    /// be stored with the same values (so repeating an import is harmless)
    /// or lie before the store's first row. A first pass checks every row
    /// and writes nothing, so anything else refuses the whole import; the
    /// second pass writes. The CPU load is stored at 0.01 % resolution, and a
    /// trace sampled under other gap rules is re-expressed under the store's
    /// (see `GapRules`). While the second pass runs, a mark in the metadata
    /// says which rows are the import's: an import cut short by an error, a
    /// cancel or a crash is removed (at once, or by the next `open`).
    /// `cancelled` is asked between batches.
    pub fn import_file(
        &self,
        path: &Path,
        name: &Path,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ImportReport, StoreError> {
        let open =
            || -> Result<TraceReader<'_, io::BufReader<crate::fsutil::BoundedFile>>, StoreError> {
                let file =
                    crate::fsutil::BoundedFile::open(path, MAX_TRACE_BYTES).map_err(|e| {
                        // The spool or copy has another path; the user knows `name`.
                        TraceError::Read(rename_read_error(e, name))
                    })?;
                Ok(TraceReader::new(
                    io::BufReader::with_capacity(64 * 1024, file),
                    name,
                )?)
            };
        let first = open()?;
        let (step, max_gap) = (first.step_secs(), first.max_gap_secs());
        let mut first = Some(first);
        self.import_rows(
            step,
            max_gap,
            &mut || {
                let mut reader = match first.take() {
                    Some(r) => r,
                    None => open()?,
                };
                Ok(Box::new(std::iter::from_fn(move || {
                    reader.next_sample().map_err(StoreError::from).transpose()
                })) as ImportRows<'_>)
            },
            cancelled,
        )
    }

    fn import_rows<'a>(
        &self,
        step: u32,
        max_gap: u64,
        open: &mut dyn FnMut() -> Result<ImportRows<'a>, StoreError>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ImportReport, StoreError> {
        // No day is sealed while an import runs: one cut short removes its
        // rows from their own keys.
        let _import = self
            .shared
            .import
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Rows at or after the store's first row must already be there.
        let bound = self.first_sample_time()?.unwrap_or(i64::MAX);
        let check = self.import_pass(step, max_gap, bound, open()?, false, cancelled)?;
        if check.before_bound > 0 {
            self.meta_tree
                .insert(KEY_IMPORT_BOUND, &codec::encode_i64(bound)[..])
                .map_err(sled_err("marking an import"))?;
            self.flush()?;
            let written = open()
                .and_then(|rows| self.import_pass(step, max_gap, bound, rows, true, cancelled));
            if let Err(e) = written {
                match self.roll_back_import(bound) {
                    Ok(removed) => tracing::warn!(removed, "an import failed and was removed"),
                    Err(re) => {
                        tracing::error!(error = %re, "cannot remove a failed import; the next start will")
                    }
                }
                return Err(e);
            }
        }
        if let Some(last) = check.last_time {
            // A seeded node that never ran has been down since the trace ended.
            let heartbeat = self
                .meta_tree
                .get(KEY_HEARTBEAT)
                .map_err(sled_err("reading the heartbeat"))?
                .and_then(|v| codec::decode_i64("heartbeat", &v).ok());
            if heartbeat.is_none_or(|h| h < last) {
                self.meta_tree
                    .insert(KEY_HEARTBEAT, &codec::encode_i64(last)[..])
                    .map_err(sled_err("writing the heartbeat"))?;
            }
        }
        self.meta_tree
            .remove(KEY_IMPORT_BOUND)
            .map_err(sled_err("finishing an import"))?;
        self.flush()?;
        Ok(ImportReport {
            added: check.before_bound,
            already_present: check.already_present,
        })
    }

    /// One pass over an import's rows, re-expressed under the store's gap
    /// rules: checks rows at or after `bound` against the store and counts
    /// (or, with `write`, writes in batches) the rows before it.
    fn import_pass(
        &self,
        step: u32,
        max_gap: u64,
        bound: i64,
        rows: ImportRows<'_>,
        write: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ImportPass, StoreError> {
        let store_max_gap = self.meta.max_gap_secs;
        let same_rules = (step, max_gap) == (self.meta.step_secs, store_max_gap);
        let mut rules = GapRules::new(step, max_gap, store_max_gap);
        let mut pass = ImportPass {
            before_bound: 0,
            already_present: 0,
            last_time: None,
        };
        let mut emitted = 0u64;
        let mut day_cache = None;
        // The rows of the day being read, written as the day's file once a
        // later day begins (see `write_import_day`).
        let mut day_rows: Vec<Sample> = Vec::new();
        let mut batch: Vec<([u8; codec::TIME_KEY_LEN], [u8; codec::SAMPLE_LEN])> =
            Vec::with_capacity(if write { IMPORT_BATCH_ROWS } else { 0 });
        let mut emit = |sample: Sample| -> ControlFlow<StoreError> {
            emitted += 1;
            if emitted > MAX_IMPORT_ROWS {
                return ControlFlow::Break(StoreError::ImportTooManyRows {
                    max_gap: store_max_gap,
                });
            }
            pass.last_time = Some(sample.time);
            let value = match codec::encode_sample(&sample) {
                Ok(v) => v,
                Err(source) => {
                    return ControlFlow::Break(StoreError::BadSample {
                        time: sample.time,
                        source,
                    })
                }
            };
            if sample.time >= bound {
                let stored = match self.stored_value(sample.time, &mut day_cache) {
                    Ok(v) => v,
                    Err(e) => return ControlFlow::Break(e),
                };
                if stored.as_deref() != Some(&value[..]) {
                    return ControlFlow::Break(StoreError::ImportOverlap {
                        time: sample.time,
                        store_first: bound,
                    });
                }
                pass.already_present += 1;
                return ControlFlow::Continue(());
            }
            pass.before_bound += 1;
            if write {
                if day_rows
                    .last()
                    .is_some_and(|r| codec::day_start(r.time) != codec::day_start(sample.time))
                {
                    if cancelled() {
                        return ControlFlow::Break(StoreError::ImportCancelled);
                    }
                    if let Err(e) = self.write_import_day(bound, &mut day_rows, &mut batch) {
                        return ControlFlow::Break(e);
                    }
                }
                day_rows.push(sample);
            } else if pass.before_bound % IMPORT_BATCH_ROWS as u64 == 0 && cancelled() {
                return ControlFlow::Break(StoreError::ImportCancelled);
            }
            ControlFlow::Continue(())
        };
        for row in rows {
            let row = row?;
            let flow = if same_rules {
                emit(row)
            } else {
                rules.push(row, &mut emit)
            };
            if let ControlFlow::Break(e) = flow {
                return Err(e);
            }
        }
        if !same_rules {
            if let ControlFlow::Break(e) = rules.finish(&mut emit) {
                return Err(e);
            }
        }
        if write {
            // The import's last day stays one key a row, as the newest day
            // does: sealing merges it when its time comes.
            batch.extend(
                day_rows
                    .iter()
                    .filter_map(|s| Some((codec::time_key(s.time), codec::encode_sample(s).ok()?))),
            );
            self.write_import_batch(&mut batch)?;
        }
        Ok(pass)
    }

    /// Writes a whole day of imported rows as the day's file when the day
    /// lies before the bound's day (so the store held nothing in it) and
    /// has no file yet; otherwise (the bound's day, or a file a damaged
    /// store left) the rows go one key each, as before. Why: two months
    /// imported one key a row leave sled's page table at its peak for good
    /// (sled 0.34 never frees a page a tree once held: 38.7 MiB after
    /// 730,000 keys were removed, against 1.1 for a fresh database).
    fn write_import_day(
        &self,
        bound: i64,
        day_rows: &mut Vec<Sample>,
        batch: &mut Vec<([u8; codec::TIME_KEY_LEN], [u8; codec::SAMPLE_LEN])>,
    ) -> Result<(), StoreError> {
        let Some(first) = day_rows.first() else {
            return Ok(());
        };
        let day = codec::day_start(first.time);
        if day < codec::day_start(bound) && self.days.get(day)?.is_none() {
            if let Ok(block) = codec::encode_day_block(day, day_rows) {
                self.days.put(day, &block)?;
                self.shared
                    .samples_len
                    .fetch_add(day_rows.len() as u64, Ordering::Relaxed);
                day_rows.clear();
                return Ok(());
            }
        }
        for s in day_rows.drain(..) {
            let value = codec::encode_sample(&s).map_err(|source| StoreError::BadSample {
                time: s.time,
                source,
            })?;
            batch.push((codec::time_key(s.time), value));
            if batch.len() >= IMPORT_BATCH_ROWS {
                self.write_import_batch(batch)?;
            }
        }
        Ok(())
    }

    fn write_import_batch(
        &self,
        rows: &mut Vec<([u8; codec::TIME_KEY_LEN], [u8; codec::SAMPLE_LEN])>,
    ) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        for (k, v) in rows.iter() {
            // Rows before the bound are new: the store held nothing there.
            if self
                .samples
                .insert(&k[..], &v[..])
                .map_err(sled_err("importing samples"))?
                .is_none()
            {
                self.shared.samples_len.fetch_add(1, Ordering::Relaxed);
            }
        }
        rows.clear();
        // Flushing often keeps sled's write buffers (and so memory) small.
        self.flush()
    }

    /// Removes every sample row before `bound` and every day file before
    /// the bound's day (all of them an unfinished import's) and the
    /// import's mark; returns how many rows went.
    fn roll_back_import(&self, bound: i64) -> Result<u64, StoreError> {
        let mut removed = delete_before(&self.samples, &codec::time_key(bound), false)?;
        for day in self.days.days(..codec::day_start(bound))? {
            removed += self.days.rows_by_length(day)?;
            self.days.remove(day)?;
        }
        self.uncount(removed);
        self.meta_tree
            .remove(KEY_IMPORT_BOUND)
            .map_err(sled_err("removing an import's mark"))?;
        self.flush()?;
        Ok(removed)
    }

    /// At open: removes what an import cut short by a crash had written.
    pub(super) fn roll_back_interrupted_import(&self) -> Result<u64, StoreError> {
        let Some(v) = self
            .meta_tree
            .get(KEY_IMPORT_BOUND)
            .map_err(sled_err("reading metadata"))?
        else {
            return Ok(0);
        };
        let bound =
            codec::decode_i64("import_bound", &v).map_err(|source| StoreError::CorruptMeta {
                key: "import_bound",
                source,
            })?;
        let removed = self.roll_back_import(bound)?;
        tracing::warn!(
            removed,
            "removed the rows of an import that did not finish (the node stopped during it)"
        );
        Ok(removed)
    }
}

/// The errors of reading the import's own copy name the user's file.
fn rename_read_error(e: crate::fsutil::FileReadError, name: &Path) -> crate::fsutil::FileReadError {
    use crate::fsutil::FileReadError as E;
    let path = name.to_path_buf();
    match e {
        E::Io { source, .. } => E::Io { path, source },
        E::NotRegular { kind, .. } => E::NotRegular { path, kind },
        E::TooLarge { max, read, .. } => E::TooLarge { path, max, read },
    }
}
