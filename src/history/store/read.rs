//! Reading the history back: samples, transitions and job-log events by
//! time range, the newest of each, the whole history as a series for the
//! predictors, and the export as a trace (format v1), streamed row by row.
//! A corrupt record is skipped and counted, never fatal: a damaged row must
//! not hide the others.
//!
//! It must not write: appends, pauses, imports and retention are the
//! sibling modules'.

use super::layout::{job_key_range, time_key_range};
use super::{sled_err, BulkHistory, HistoryStore, JobEvent, StoreError, StoreMeta, EXPORT_SOURCE};
use crate::history::codec::{self, CodecError};
use crate::history::trace::{write_trace_header, write_trace_row, Trace, TraceHeader};
use crate::model::owner::S5Cause;
use crate::model::series::{HostSeries, Sample};
use crate::model::state::State;
use jiff::tz::TimeZone;
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::sync::atomic::Ordering;

impl HistoryStore {
    /// The recorded transitions with times in `range`, in time order.
    pub fn transitions(
        &self,
        range: impl RangeBounds<i64>,
    ) -> Result<Vec<(i64, State)>, StoreError> {
        Ok(self
            .transitions_with_cause(range)?
            .into_iter()
            .map(|(t, s, _)| (t, s))
            .collect())
    }

    /// The recorded transitions with the cause of each S5 where it was
    /// recorded (`None` for other states and for records older than causes).
    pub fn transitions_with_cause(
        &self,
        range: impl RangeBounds<i64>,
    ) -> Result<Vec<(i64, State, Option<S5Cause>)>, StoreError> {
        let mut out = Vec::new();
        for item in self.transitions.range(time_key_range(&range)) {
            let (k, v) = item.map_err(sled_err("reading transitions"))?;
            match codec::decode_time_key(&k)
                .and_then(|t| codec::decode_transition(&v).map(|(s, c)| (t, s, c)))
            {
                Ok(row) => out.push(row),
                Err(e) => self.note_corrupt("transitions", &e),
            }
        }
        Ok(out)
    }

    /// One job-log entry, or `None` (counted as corrupt) when its key or
    /// value does not decode: a damaged row must not hide the others.
    fn decode_job_entry(&self, key: &[u8], value: &[u8]) -> Option<JobEvent> {
        let decoded = codec::decode_job_key(key)
            .and_then(|(time, _)| codec::decode_job_event(value).map(|r| (time, r)));
        match decoded {
            Ok((time, r)) => Some(JobEvent {
                time,
                job: r.job,
                kind: r.kind,
                detail: r.detail,
            }),
            Err(e) => {
                self.note_corrupt("jobs", &e);
                None
            }
        }
    }

    /// The job-log events with times in `range`, in order.
    pub fn job_events(&self, range: impl RangeBounds<i64>) -> Result<Vec<JobEvent>, StoreError> {
        let mut out = Vec::new();
        for item in self.jobs.range(job_key_range(&range)) {
            let (k, v) = item.map_err(sled_err("reading the job log"))?;
            if let Some(event) = self.decode_job_entry(&k, &v) {
                out.push(event);
            }
        }
        Ok(out)
    }

    /// The newest `limit` job-log events, newest first: reads only those
    /// (the dashboard's job log asks on the host loop).
    pub fn recent_job_events(&self, limit: usize) -> Result<Vec<JobEvent>, StoreError> {
        let mut out = Vec::with_capacity(limit.min(1024));
        for item in self.jobs.iter().rev() {
            if out.len() >= limit {
                break;
            }
            let (k, v) = item.map_err(sled_err("reading the job log"))?;
            if let Some(event) = self.decode_job_entry(&k, &v) {
                out.push(event);
            }
        }
        Ok(out)
    }

    /// Number of stored sample rows (corrupt ones included), O(1).
    pub fn sample_count(&self) -> u64 {
        self.bulk.sample_count()
    }

    /// The newest readable sample.
    pub fn last_sample(&self) -> Result<Option<Sample>, StoreError> {
        self.bulk.last_sample()
    }

    /// The stored samples with times in `range`, in time order; corrupt rows
    /// are skipped and counted.
    pub fn samples(&self, range: impl RangeBounds<i64>) -> Result<Vec<Sample>, StoreError> {
        self.bulk.rows(range).collect()
    }

    /// The whole sample history as a series read with the given facts.
    pub fn to_series(
        &self,
        tz: TimeZone,
        step_secs: u32,
        max_gap_secs: u64,
    ) -> Result<HostSeries, StoreError> {
        self.bulk.to_series(tz, step_secs, max_gap_secs)
    }

    /// The history as a trace (format v1) with the stored host, zone and periods.
    pub fn to_trace(&self) -> Result<Trace, StoreError> {
        let m = &self.bulk.meta;
        Ok(Trace {
            header: self.bulk.export_header(),
            series: self.to_series(m.tz.clone(), m.step_secs, m.max_gap_secs)?,
            replaced_rows: 0,
        })
    }

    /// Writes the history as trace format v1, row by row; returns the number of rows.
    pub fn export<W: Write>(&self, out: &mut W) -> Result<u64, StoreError> {
        self.bulk.export(out)
    }
}

impl BulkHistory {
    /// Number of stored sample rows (corrupt ones included), O(1).
    pub fn sample_count(&self) -> u64 {
        self.shared.samples_len.load(Ordering::Relaxed)
    }

    /// The facts stored with the history.
    pub fn meta(&self) -> &StoreMeta {
        &self.meta
    }

    pub(super) fn note_corrupt(&self, tree: &str, e: &CodecError) {
        self.shared.corrupt_skipped.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(tree, error = %e, "skipping a corrupt history record");
    }

    pub(super) fn first_sample_time(&self) -> Result<Option<i64>, StoreError> {
        self.rows(..).next().transpose().map(|s| s.map(|s| s.time))
    }

    /// The whole sample history as a series read with the given facts.
    pub fn to_series(
        &self,
        tz: TimeZone,
        step_secs: u32,
        max_gap_secs: u64,
    ) -> Result<HostSeries, StoreError> {
        let mut series = HostSeries::new(step_secs, max_gap_secs, tz);
        // Rows recorded while the tree is read arrive beyond the count; a
        // little room for them keeps a column from doubling for one row.
        let rows = usize::try_from(self.sample_count()).unwrap_or(0);
        series.reserve(rows.saturating_add(rows / 256 + 64));
        for s in self.rows(..) {
            // Rows come unique and ordered and cpu is range-checked, so push
            // cannot fail; if it ever did, the row is skipped, not fatal.
            if let Err(e) = series.push(s?) {
                self.note_corrupt(
                    "samples",
                    &CodecError::Invalid {
                        what: "sample",
                        detail: e.to_string(),
                    },
                );
            }
        }
        // Held as long as the node runs: the room left over goes back.
        series.shrink_to_fit();
        Ok(series)
    }

    /// Brings `series` (read earlier from this store, with nothing deleted
    /// or imported since) up to date: the rows recorded after its last one,
    /// and its last row again should it have been rewritten. Reads only
    /// those rows, where [`Self::to_series`] decodes the whole history (a
    /// good part of a second for two months of 6 s rows). Returns the rows
    /// added.
    pub fn extend_series(&self, series: &mut HostSeries) -> Result<usize, StoreError> {
        let Some(last) = series.last_time() else {
            *series = self.to_series(series.tz.clone(), series.step_secs, series.max_gap_secs)?;
            return Ok(series.len());
        };
        let before = series.len();
        let newer: Vec<Sample> = self.rows(last..).collect::<Result<_, _>>()?;
        // Exactly the room the new rows need: a held series must not double.
        series.reserve_exact(newer.len());
        for sample in newer {
            let added = if sample.time == last {
                series.replace_last_if_same_time(sample).map(|_| ())
            } else {
                series.push(sample)
            };
            if let Err(e) = added {
                self.note_corrupt(
                    "samples",
                    &CodecError::Invalid {
                        what: "sample",
                        detail: e.to_string(),
                    },
                );
            }
        }
        // A row recorded before the series' last one (a clock stepped
        // back) is not among those read: the counts then disagree and the
        // history is read whole, as it is when a row is corrupt.
        if u64::try_from(series.len()).ok() != Some(self.sample_count()) {
            *series = self.to_series(series.tz.clone(), series.step_secs, series.max_gap_secs)?;
        }
        Ok(series.len().saturating_sub(before))
    }

    /// The series with the stored host's own facts.
    pub fn series(&self) -> Result<HostSeries, StoreError> {
        let m = &self.meta;
        self.to_series(m.tz.clone(), m.step_secs, m.max_gap_secs)
    }

    fn export_header(&self) -> TraceHeader {
        TraceHeader {
            host: self.meta.host.clone(),
            tz_name: self.meta.tz_name.clone(),
            source: Some(EXPORT_SOURCE.to_string()),
        }
    }

    /// Writes the history as trace format v1, one row at a time straight
    /// from the tree (memory does not grow with the history); returns the
    /// number of rows.
    pub fn export<W: Write>(&self, out: &mut W) -> Result<u64, StoreError> {
        let mut out = io::BufWriter::with_capacity(64 * 1024, out);
        let m = &self.meta;
        write_trace_header(&mut out, &self.export_header(), m.step_secs, m.max_gap_secs)
            .map_err(StoreError::Export)?;
        let mut rows = 0u64;
        let mut line = String::with_capacity(64);
        for s in self.rows(..) {
            write_trace_row(&mut out, &mut line, &s?).map_err(StoreError::Export)?;
            rows += 1;
        }
        out.flush().map_err(StoreError::Export)?;
        Ok(rows)
    }
}
