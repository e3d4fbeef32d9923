//! The node's own history in sled: compact samples, state transitions, a
//! heartbeat, the owner's pause flag and the guest job log.
//!
//! This module owns the layout of the database (which trees, which keys) and
//! the rules that keep history honest across crashes:
//! - every sample is written together with the heartbeat in one sled
//!   transaction and, by default, flushed before `record_sample` returns, so a
//!   `kill -9` loses at most the sample being written;
//! - on open, a silence since the heartbeat longer than `max_gap` means the
//!   node was off, and is recorded as a down row (S5), as in seed paper 000,
//!   section V.B: revocation is detected without reading system logs;
//! - history is never overwritten by an import, and retention never deletes
//!   the newest sample.
//!
//! The byte layouts live in `history::codec`; the meaning of rows lives in
//! `model::series`. This module must not know about the monitor, the network
//! or the wall clock: every time is passed in by the caller.

use crate::history::codec::{self, CodecError, JobEventRecord};
use crate::history::trace::{write_trace, Trace, TraceHeader, MAX_STEP_SECS};
use crate::model::series::{HostSeries, Sample, DEFAULT_MAX_GAP_SECS, DEFAULT_STEP_SECS};
use crate::model::state::State;
use jiff::tz::TimeZone;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::{Batch, IVec, Transactional, Tree};
use std::io::{self, Write};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Version of the store's layout; bumped when a tree or encoding changes.
pub const FORMAT_VERSION: u32 = 1;
/// How long samples are kept unless the owner says otherwise (8 weeks).
pub const DEFAULT_RETENTION_DAYS: u32 = 56;
/// sled's page cache; small, because the node must stay out of the owner's way.
pub const DEFAULT_CACHE_BYTES: u64 = 16 * 1024 * 1024;
/// The `source` header written by [`HistoryStore::export`].
pub const EXPORT_SOURCE: &str = "gleaner history store";

const SECS_PER_DAY: i64 = 86_400;
/// Rows per sled batch when deleting or importing, to bound memory.
const BATCH_ROWS: usize = 50_000;

const TREE_META: &str = "meta";
const TREE_SAMPLES: &str = "samples";
const TREE_TRANSITIONS: &str = "transitions";
const TREE_JOBS: &str = "jobs";

const KEY_VERSION: &[u8] = b"format_version";
const KEY_HOST: &[u8] = b"host";
const KEY_TZ: &[u8] = b"tz";
const KEY_STEP: &[u8] = b"step";
const KEY_MAX_GAP: &[u8] = b"max_gap";
const KEY_HEARTBEAT: &[u8] = b"heartbeat";
const KEY_PAUSED: &[u8] = b"paused";
/// When a timed pause ends (Unix seconds, i64 BE); absent for an open-ended one.
const KEY_PAUSE_UNTIL: &[u8] = b"pause_until";

/// How to open a store. `None` fields keep the value stored in the database
/// (or the trace-format default for a new one); `Some` replaces it, because
/// the node's configuration is the authority on host name, zone and periods.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Host name written into exported traces.
    pub host: Option<String>,
    /// IANA time-zone name of the owner.
    pub tz_name: Option<String>,
    /// Nominal sampling period, seconds.
    pub step_secs: Option<u32>,
    /// Longest silence that still counts as up, seconds.
    pub max_gap_secs: Option<u64>,
    /// Upper bound of sled's page cache, bytes.
    pub cache_bytes: u64,
    /// Flush (write and fsync) after every record. Off, sled's background
    /// flusher writes every `background_flush_ms`, and a `kill -9` can lose
    /// the records of that many milliseconds.
    pub flush_every_record: bool,
    /// Period of sled's background flusher, ms.
    pub background_flush_ms: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            host: None,
            tz_name: None,
            step_secs: None,
            max_gap_secs: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            flush_every_record: true,
            background_flush_ms: 500,
        }
    }
}

/// The facts stored with the history that are needed to read it.
#[derive(Debug, Clone)]
pub struct StoreMeta {
    pub host: Option<String>,
    pub tz_name: String,
    pub tz: TimeZone,
    pub step_secs: u32,
    pub max_gap_secs: u64,
}

/// A time interval during which the node was down, `[from, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownInterval {
    pub from: i64,
    pub until: i64,
}

/// One entry of the guest job log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    /// Unix seconds.
    pub time: i64,
    /// Which job the event is about.
    pub job: String,
    /// What happened, e.g. "started", "reniced", "killed", "exited".
    pub kind: String,
    /// Free text for people.
    pub detail: String,
}

/// What [`HistoryStore::compact`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactReport {
    pub samples_removed: u64,
    pub transitions_removed: u64,
    pub job_events_removed: u64,
}

/// What [`HistoryStore::import`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Rows written.
    pub added: u64,
    /// Rows the store already held with the same values (a repeated import).
    pub already_present: u64,
}

/// What went wrong in the history store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("history store at {path}: cannot open: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error("history store: {doing}: {source}")]
    Sled {
        doing: &'static str,
        #[source]
        source: sled::Error,
    },
    #[error("history store: metadata `{key}` is corrupt: {source}")]
    CorruptMeta {
        key: &'static str,
        #[source]
        source: CodecError,
    },
    #[error("history store has format version {found}; this gleaner reads version {supported}")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("history store: unknown time zone `{0}` (expected an IANA name)")]
    UnknownTimeZone(String),
    #[error("history store: {0}")]
    BadOption(String),
    #[error("history store: cannot record sample at {time}: {source}")]
    BadSample {
        time: i64,
        #[source]
        source: CodecError,
    },
    #[error("history store: cannot record job event: {0}")]
    BadJobEvent(#[source] CodecError),
    #[error(
        "import refused: the trace has a row at {time} that differs from or falls within \
         the store's history (which starts at {store_first}); only history before the \
         store's first row can be imported"
    )]
    ImportOverlap { time: i64, store_first: i64 },
    #[error("history store: cannot write the export: {0}")]
    Export(#[source] io::Error),
}

fn sled_err(doing: &'static str) -> impl Fn(sled::Error) -> StoreError {
    move |source| StoreError::Sled { doing, source }
}

fn tx_err(doing: &'static str) -> impl Fn(TransactionError<()>) -> StoreError {
    move |e| match e {
        TransactionError::Storage(source) => StoreError::Sled { doing, source },
        // Our closures never abort; keep a readable error all the same.
        TransactionError::Abort(()) => StoreError::Sled {
            doing,
            source: sled::Error::ReportableBug("transaction aborted".to_string()),
        },
    }
}

/// A transaction that says whether it added a sample row.
type TxNew = Result<bool, ConflictableTransactionError<()>>;

/// The node's history database.
pub struct HistoryStore {
    db: sled::Db,
    meta_tree: Tree,
    samples: Tree,
    transitions: Tree,
    jobs: Tree,
    meta: StoreMeta,
    /// Cached copy of the stored pause flag.
    paused: bool,
    /// Cached copy of the stored end of a timed pause.
    pause_until: Option<i64>,
    /// Sample rows stored, kept up to date so `status` never walks the tree
    /// (sled's `len` is a full scan). Counted once at open.
    samples_len: AtomicU64,
    flush_every_record: bool,
    /// The down interval recorded by `open`, for the caller to log.
    gap_on_open: Option<DownInterval>,
    /// Records found corrupt and skipped by readers since open.
    corrupt_skipped: AtomicU64,
}

/// How long `open` waits for a file lock that a just-dropped handle still holds.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens the database, retrying while its file lock is busy. sled's
/// background flusher keeps the lock for a moment after the last handle is
/// dropped, so reopening right after closing (a restart within one process,
/// or the tests) can find it taken. Another process holding it for longer
/// still gets the error after `LOCK_RETRY`.
fn open_with_lock_retry(config: &sled::Config) -> Result<sled::Db, sled::Error> {
    let started = std::time::Instant::now();
    loop {
        match config.open() {
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.to_string().contains("could not acquire lock") =>
            {
                if started.elapsed() >= LOCK_RETRY {
                    return Err(sled::Error::Io(e));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

impl HistoryStore {
    /// Opens (or creates) the store in `dir` at time `now` (Unix seconds).
    ///
    /// If the heartbeat is older than `now - max_gap` and the node was not
    /// already down, records a down row and an S5 transition at
    /// `heartbeat + step`: the node was off from then until now.
    pub fn open(dir: &Path, opts: &StoreOptions, now: i64) -> Result<Self, StoreError> {
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(opts.cache_bytes)
            .flush_every_ms(Some(opts.background_flush_ms.max(1)));
        let db = open_with_lock_retry(&config).map_err(|source| StoreError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let tree = |name: &str| db.open_tree(name).map_err(sled_err("opening a tree"));
        let meta_tree = tree(TREE_META)?;
        let samples = tree(TREE_SAMPLES)?;
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
        let samples_len = AtomicU64::new(samples.len() as u64);
        let mut store = HistoryStore {
            db,
            meta_tree,
            samples,
            transitions,
            jobs,
            meta,
            paused,
            pause_until,
            samples_len,
            flush_every_record: opts.flush_every_record,
            gap_on_open: None,
            corrupt_skipped: AtomicU64::new(0),
        };
        store.gap_on_open = store.record_gap_since_heartbeat(now)?;
        store.flush()?;
        Ok(store)
    }

    /// The facts stored with the history.
    pub fn meta(&self) -> &StoreMeta {
        &self.meta
    }

    /// The down interval `open` recorded, if the node had been off.
    pub fn gap_on_open(&self) -> Option<DownInterval> {
        self.gap_on_open
    }

    /// How many corrupt records readers have skipped since open (each one is
    /// also logged as a warning).
    pub fn corrupt_records_skipped(&self) -> u64 {
        self.corrupt_skipped.load(Ordering::Relaxed)
    }

    /// True while the owner withholds the machine.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The last time the node was known to be alive, if ever.
    pub fn heartbeat(&self) -> Result<Option<i64>, StoreError> {
        match self
            .meta_tree
            .get(KEY_HEARTBEAT)
            .map_err(sled_err("reading the heartbeat"))?
        {
            Some(v) => match codec::decode_i64("heartbeat", &v) {
                Ok(t) => Ok(Some(t)),
                Err(e) => {
                    // The last sample tells nearly as much; do not refuse to start.
                    self.note_corrupt("meta/heartbeat", &e);
                    Ok(self.last_sample()?.map(|s| s.time))
                }
            },
            None => Ok(self.last_sample()?.map(|s| s.time)),
        }
    }

    /// Appends a sample and moves the heartbeat to its time, atomically.
    ///
    /// While paused only the heartbeat moves: the down row written by
    /// [`pause`](Self::pause) holds until the first sample after `resume`.
    /// The CPU load is stored at 0.01 % resolution.
    pub fn record_sample(&self, sample: &Sample) -> Result<(), StoreError> {
        let value = codec::encode_sample(sample).map_err(|source| StoreError::BadSample {
            time: sample.time,
            source,
        })?;
        let heartbeat = codec::encode_i64(sample.time);
        if self.paused {
            self.meta_tree
                .insert(KEY_HEARTBEAT, &heartbeat[..])
                .map_err(sled_err("writing the heartbeat"))?;
        } else {
            let key = codec::time_key(sample.time);
            let added = (&self.samples, &self.meta_tree)
                .transaction(|(samples, meta)| -> TxNew {
                    let old = samples.insert(&key[..], &value[..])?;
                    meta.insert(KEY_HEARTBEAT, &heartbeat[..])?;
                    Ok(old.is_none())
                })
                .map_err(tx_err("recording a sample"))?;
            self.count_new_sample(added);
        }
        self.flush_record()
    }

    /// Records that the owner withholds the machine from `now` on: a down
    /// row, an S5 transition and the pause flag, and the pause's end when it
    /// is timed (so it survives a restart). Returns false if already paused;
    /// then only the end is updated.
    pub fn pause(&mut self, now: i64, until: Option<i64>) -> Result<bool, StoreError> {
        let changed = !self.paused;
        if changed {
            self.write_down_row(now, true)?;
            self.paused = true;
        }
        match until {
            Some(t) => self
                .meta_tree
                .insert(KEY_PAUSE_UNTIL, &codec::encode_i64(t)[..])
                .map(|_| ()),
            None => self.meta_tree.remove(KEY_PAUSE_UNTIL).map(|_| ()),
        }
        .map_err(sled_err("recording the pause's end"))?;
        self.pause_until = until;
        self.flush_record()?;
        Ok(changed)
    }

    /// When the current timed pause ends, Unix seconds.
    pub fn pause_until(&self) -> Option<i64> {
        self.pause_until.filter(|_| self.paused)
    }

    /// Records that the owner gives the machine back at `now`. No row is
    /// written: the node has no load figures yet, so it stays down in the
    /// history until the next sample. Returns false if not paused.
    pub fn resume(&mut self, now: i64) -> Result<bool, StoreError> {
        if !self.paused {
            return Ok(false);
        }
        let mut batch = Batch::default();
        batch.insert(KEY_PAUSED, &codec::encode_flag(false)[..]);
        batch.remove(KEY_PAUSE_UNTIL);
        batch.insert(KEY_HEARTBEAT, &codec::encode_i64(now)[..]);
        self.meta_tree
            .apply_batch(batch)
            .map_err(sled_err("clearing the pause flag"))?;
        self.paused = false;
        self.pause_until = None;
        self.flush_record()?;
        Ok(true)
    }

    /// Records that the host entered `state` at `time`.
    pub fn record_transition(&self, time: i64, state: State) -> Result<(), StoreError> {
        self.transitions
            .insert(codec::time_key(time), &codec::encode_state(state)[..])
            .map_err(sled_err("recording a transition"))?;
        self.flush_record()
    }

    /// The recorded transitions with times in `range`, in time order.
    pub fn transitions(
        &self,
        range: impl RangeBounds<i64>,
    ) -> Result<Vec<(i64, State)>, StoreError> {
        let mut out = Vec::new();
        for item in self.transitions.range(time_key_range(&range)) {
            let (k, v) = item.map_err(sled_err("reading transitions"))?;
            match codec::decode_time_key(&k).and_then(|t| codec::decode_state(&v).map(|s| (t, s))) {
                Ok(row) => out.push(row),
                Err(e) => self.note_corrupt("transitions", &e),
            }
        }
        Ok(out)
    }

    /// Appends an event to the guest job log.
    pub fn record_job_event(&self, event: &JobEvent) -> Result<(), StoreError> {
        let record = JobEventRecord {
            job: event.job.clone(),
            kind: event.kind.clone(),
            detail: event.detail.clone(),
        };
        let value = codec::encode_job_event(&record).map_err(StoreError::BadJobEvent)?;
        // sled's ids are unique across restarts, so two events in the same
        // second never share a key and keep their order.
        let seq = self
            .db
            .generate_id()
            .map_err(sled_err("numbering a job event"))?;
        self.jobs
            .insert(codec::job_key(event.time, seq), value)
            .map_err(sled_err("recording a job event"))?;
        self.flush_record()
    }

    /// The job-log events with times in `range`, in order.
    pub fn job_events(&self, range: impl RangeBounds<i64>) -> Result<Vec<JobEvent>, StoreError> {
        let mut out = Vec::new();
        for item in self.jobs.range(job_key_range(&range)) {
            let (k, v) = item.map_err(sled_err("reading the job log"))?;
            let decoded = codec::decode_job_key(&k)
                .and_then(|(time, _)| codec::decode_job_event(&v).map(|r| (time, r)));
            match decoded {
                Ok((time, r)) => out.push(JobEvent {
                    time,
                    job: r.job,
                    kind: r.kind,
                    detail: r.detail,
                }),
                Err(e) => self.note_corrupt("jobs", &e),
            }
        }
        Ok(out)
    }

    /// Number of stored sample rows (corrupt ones included), O(1).
    pub fn sample_count(&self) -> u64 {
        self.samples_len.load(Ordering::Relaxed)
    }

    fn count_new_sample(&self, added: bool) {
        if added {
            self.samples_len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The newest readable sample.
    pub fn last_sample(&self) -> Result<Option<Sample>, StoreError> {
        for item in self.samples.iter().rev() {
            let (k, v) = item.map_err(sled_err("reading samples"))?;
            match codec::decode_sample(&k, &v) {
                Ok(s) => return Ok(Some(s)),
                Err(e) => self.note_corrupt("samples", &e),
            }
        }
        Ok(None)
    }

    /// The stored samples with times in `range`, in time order; corrupt rows
    /// are skipped and counted.
    pub fn samples(&self, range: impl RangeBounds<i64>) -> Result<Vec<Sample>, StoreError> {
        let mut out = Vec::new();
        for item in self.samples.range(time_key_range(&range)) {
            let (k, v) = item.map_err(sled_err("reading samples"))?;
            match codec::decode_sample(&k, &v) {
                Ok(s) => out.push(s),
                Err(e) => self.note_corrupt("samples", &e),
            }
        }
        Ok(out)
    }

    /// The whole sample history as a series read with the given facts.
    pub fn to_series(
        &self,
        tz: TimeZone,
        step_secs: u32,
        max_gap_secs: u64,
    ) -> Result<HostSeries, StoreError> {
        let mut series = HostSeries::new(step_secs, max_gap_secs, tz);
        series.reserve(self.samples.len());
        for item in self.samples.iter() {
            let (k, v) = item.map_err(sled_err("reading samples"))?;
            match codec::decode_sample(&k, &v) {
                // Keys are unique and ordered and cpu is range-checked, so push
                // cannot fail; if it ever did, the row is skipped, not fatal.
                Ok(s) => {
                    if let Err(e) = series.push(s) {
                        self.note_corrupt(
                            "samples",
                            &CodecError::Invalid {
                                what: "sample",
                                detail: e.to_string(),
                            },
                        );
                    }
                }
                Err(e) => self.note_corrupt("samples", &e),
            }
        }
        Ok(series)
    }

    /// The history as a trace (format v1) with the stored host, zone and periods.
    pub fn to_trace(&self) -> Result<Trace, StoreError> {
        let m = &self.meta;
        Ok(Trace {
            header: TraceHeader {
                host: m.host.clone(),
                tz_name: m.tz_name.clone(),
                source: Some(EXPORT_SOURCE.to_string()),
            },
            series: self.to_series(m.tz.clone(), m.step_secs, m.max_gap_secs)?,
            replaced_rows: 0,
        })
    }

    /// Writes the history as trace format v1; returns the number of rows.
    pub fn export<W: Write>(&self, out: &mut W) -> Result<usize, StoreError> {
        let trace = self.to_trace()?;
        write_trace(out, &trace).map_err(StoreError::Export)?;
        Ok(trace.series.len())
    }

    /// Seeds the store with a trace's rows.
    ///
    /// Recorded history is never overwritten: every row must either already
    /// be stored with the same values (so repeating an import, or finishing an
    /// interrupted one, is harmless) or lie before the store's first row.
    /// Anything else refuses the whole import before writing. The CPU load is
    /// stored at 0.01 % resolution. Rows go in newest first, in batches, so an
    /// interrupted import leaves a suffix that a repeated import completes.
    pub fn import(&self, trace: &Trace) -> Result<ImportReport, StoreError> {
        let store_first = self.first_sample_time()?;
        let mut report = ImportReport::default();
        let mut rows: Vec<([u8; codec::TIME_KEY_LEN], [u8; codec::SAMPLE_LEN])> = Vec::new();
        // The store reads every row with its own step and max_gap; a trace
        // sampled otherwise (say every 300 s) is re-expressed under those
        // rules so that it means the same host, not one that is always down.
        let (step, max_gap) = (self.meta.step_secs, self.meta.max_gap_secs);
        let converted;
        let series = if (trace.series.step_secs, trace.series.max_gap_secs) == (step, max_gap) {
            &trace.series
        } else {
            converted = trace.series.with_gap_rules(step, max_gap);
            &converted
        };
        for sample in series.samples() {
            let value = codec::encode_sample(&sample).map_err(|source| StoreError::BadSample {
                time: sample.time,
                source,
            })?;
            let key = codec::time_key(sample.time);
            match store_first {
                Some(first) if sample.time >= first => {
                    let stored = self
                        .samples
                        .get(key)
                        .map_err(sled_err("checking an import"))?;
                    if stored.as_deref() != Some(&value[..]) {
                        return Err(StoreError::ImportOverlap {
                            time: sample.time,
                            store_first: first,
                        });
                    }
                    report.already_present += 1;
                }
                _ => rows.push((key, value)),
            }
        }
        for chunk in rows.rchunks(BATCH_ROWS) {
            let mut batch = Batch::default();
            for (k, v) in chunk {
                batch.insert(&k[..], &v[..]);
            }
            self.samples
                .apply_batch(batch)
                .map_err(sled_err("importing samples"))?;
            report.added += chunk.len() as u64;
            self.samples_len
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        if let Some(last) = series.last_time() {
            // A seeded node that never ran has been down since the trace ended.
            if self.heartbeat()?.is_none_or(|h| h < last) {
                self.meta_tree
                    .insert(KEY_HEARTBEAT, &codec::encode_i64(last)[..])
                    .map_err(sled_err("writing the heartbeat"))?;
            }
        }
        self.flush()?;
        Ok(report)
    }

    /// Applies retention at `now`: deletes samples, transitions and job-log
    /// events older than `retention_days`, but never the newest sample nor
    /// the newest transition, which say what the host is doing now.
    pub fn compact(&self, now: i64, retention_days: u32) -> Result<CompactReport, StoreError> {
        let cutoff = now.saturating_sub(i64::from(retention_days).saturating_mul(SECS_PER_DAY));
        let cutoff_key = codec::time_key(cutoff);
        let report = CompactReport {
            samples_removed: delete_before(&self.samples, &cutoff_key, true)?,
            transitions_removed: delete_before(&self.transitions, &cutoff_key, true)?,
            job_events_removed: delete_before(&self.jobs, &cutoff_key, false)?,
        };
        let _ = self
            .samples_len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(report.samples_removed))
            });
        self.flush()?;
        Ok(report)
    }

    /// Writes all pending records to disk and fsyncs.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(sled_err("flushing"))?;
        Ok(())
    }

    fn flush_record(&self) -> Result<(), StoreError> {
        if self.flush_every_record {
            self.flush()?;
        }
        Ok(())
    }

    fn first_sample_time(&self) -> Result<Option<i64>, StoreError> {
        for item in self.samples.iter() {
            let (k, _) = item.map_err(sled_err("reading samples"))?;
            match codec::decode_time_key(&k) {
                Ok(t) => return Ok(Some(t)),
                Err(e) => self.note_corrupt("samples", &e),
            }
        }
        Ok(None)
    }

    /// The gap rule of section V.B: a heartbeat older than `max_gap` means the
    /// node (and so the sharing) was off. Writes nothing when the last row is
    /// already down (paused, or a gap found by an earlier open).
    fn record_gap_since_heartbeat(&mut self, now: i64) -> Result<Option<DownInterval>, StoreError> {
        let Some(heartbeat) = self.heartbeat()? else {
            return Ok(None);
        };
        let silence = now.saturating_sub(heartbeat);
        if silence <= 0 || silence as u64 <= self.meta.max_gap_secs {
            return Ok(None);
        }
        let last = self.last_sample()?;
        if last.is_some_and(|s| !s.up) {
            return Ok(None);
        }
        // A clock set back may leave rows after the heartbeat; stay after them.
        let alive_until = last.map_or(heartbeat, |s| s.time.max(heartbeat));
        let from = alive_until
            .saturating_add(i64::from(self.meta.step_secs))
            .min(now);
        self.write_down_row(from, false)?;
        Ok(Some(DownInterval { from, until: now }))
    }

    /// Writes a down row and an S5 transition at `time`, and the heartbeat;
    /// with `set_paused`, also the pause flag. One transaction.
    fn write_down_row(&self, time: i64, set_paused: bool) -> Result<(), StoreError> {
        let key = codec::time_key(time);
        let down = Sample {
            time,
            cpu: 0.0,
            free_mib: 0,
            up: false,
        };
        let value =
            codec::encode_sample(&down).map_err(|source| StoreError::BadSample { time, source })?;
        let s5 = codec::encode_state(State::S5);
        let heartbeat = codec::encode_i64(time);
        let paused = codec::encode_flag(true);
        let added = (&self.samples, &self.transitions, &self.meta_tree)
            .transaction(|(samples, transitions, meta)| -> TxNew {
                let old = samples.insert(&key[..], &value[..])?;
                transitions.insert(&key[..], &s5[..])?;
                if set_paused {
                    meta.insert(KEY_PAUSED, &paused[..])?;
                    meta.insert(KEY_HEARTBEAT, &heartbeat[..])?;
                }
                Ok(old.is_none())
            })
            .map_err(tx_err("recording a down row"))?;
        self.count_new_sample(added);
        Ok(())
    }

    fn note_corrupt(&self, tree: &str, e: &CodecError) {
        self.corrupt_skipped.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(tree, error = %e, "skipping a corrupt history record");
    }
}

/// Deletes the records whose keys sort before `cutoff` (time keys and job
/// keys both start with the time key), keeping the newest record if
/// `keep_newest`.
fn delete_before(tree: &Tree, cutoff: &[u8], keep_newest: bool) -> Result<u64, StoreError> {
    let newest: Option<IVec> = if keep_newest {
        tree.last()
            .map_err(sled_err("reading for retention"))?
            .map(|(k, _)| k)
    } else {
        None
    };
    let mut removed = 0u64;
    loop {
        let mut batch = Batch::default();
        let mut n = 0usize;
        for item in tree.range(..cutoff) {
            let (k, _) = item.map_err(sled_err("reading for retention"))?;
            if newest.as_ref() == Some(&k) {
                continue;
            }
            batch.remove(k);
            n += 1;
            if n == BATCH_ROWS {
                break;
            }
        }
        if n == 0 {
            return Ok(removed);
        }
        tree.apply_batch(batch)
            .map_err(sled_err("deleting old records"))?;
        removed += n as u64;
    }
}

fn time_key_range(
    range: &impl RangeBounds<i64>,
) -> (
    Bound<[u8; codec::TIME_KEY_LEN]>,
    Bound<[u8; codec::TIME_KEY_LEN]>,
) {
    (
        range.start_bound().map(|&t| codec::time_key(t)),
        range.end_bound().map(|&t| codec::time_key(t)),
    )
}

fn job_key_range(
    range: &impl RangeBounds<i64>,
) -> (
    Bound<[u8; codec::JOB_KEY_LEN]>,
    Bound<[u8; codec::JOB_KEY_LEN]>,
) {
    // A time bound covers every sequence number within that second.
    let start = match range.start_bound() {
        Bound::Included(&t) => Bound::Included(codec::job_key(t, 0)),
        Bound::Excluded(&t) => Bound::Excluded(codec::job_key(t, u64::MAX)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let end = match range.end_bound() {
        Bound::Included(&t) => Bound::Included(codec::job_key(t, u64::MAX)),
        Bound::Excluded(&t) => Bound::Excluded(codec::job_key(t, 0)),
        Bound::Unbounded => Bound::Unbounded,
    };
    (start, end)
}

/// Reads the stored metadata, lets `opts` override it, validates the result
/// and writes it back.
fn resolve_meta(tree: &Tree, opts: &StoreOptions) -> Result<StoreMeta, StoreError> {
    let get = |key: &[u8]| tree.get(key).map_err(sled_err("reading metadata"));
    let corrupt = |key: &'static str| move |source| StoreError::CorruptMeta { key, source };
    if let Some(v) = get(KEY_VERSION)? {
        let found = codec::decode_u32("format_version", &v).map_err(corrupt("format_version"))?;
        if found != FORMAT_VERSION {
            return Err(StoreError::UnsupportedVersion {
                found,
                supported: FORMAT_VERSION,
            });
        }
    }
    let stored_host = get(KEY_HOST)?
        .map(|v| codec::decode_text("host", &v))
        .transpose()
        .map_err(corrupt("host"))?;
    let stored_tz = get(KEY_TZ)?
        .map(|v| codec::decode_text("tz", &v))
        .transpose()
        .map_err(corrupt("tz"))?;
    let stored_step = get(KEY_STEP)?
        .map(|v| codec::decode_u32("step", &v))
        .transpose()
        .map_err(corrupt("step"))?;
    let stored_gap = get(KEY_MAX_GAP)?
        .map(|v| codec::decode_u64("max_gap", &v))
        .transpose()
        .map_err(corrupt("max_gap"))?;

    let host = opts.host.clone().or(stored_host);
    let tz_name = opts
        .tz_name
        .clone()
        .or(stored_tz)
        .unwrap_or_else(|| "UTC".to_string());
    let step_secs = opts.step_secs.or(stored_step).unwrap_or(DEFAULT_STEP_SECS);
    let max_gap_secs = opts
        .max_gap_secs
        .or(stored_gap)
        .unwrap_or(DEFAULT_MAX_GAP_SECS);
    if !(1..=MAX_STEP_SECS).contains(&step_secs) {
        return Err(StoreError::BadOption(format!(
            "step {step_secs} must be whole seconds from 1 to {MAX_STEP_SECS}"
        )));
    }
    if max_gap_secs == 0 {
        return Err(StoreError::BadOption(
            "max_gap must be at least 1 second".to_string(),
        ));
    }
    if let Some(h) = &host {
        if h.len() > codec::MAX_TEXT_BYTES {
            return Err(StoreError::BadOption(format!(
                "host name is longer than {} bytes",
                codec::MAX_TEXT_BYTES
            )));
        }
    }
    let tz = jiff::tz::db()
        .get(&tz_name)
        .map_err(|_| StoreError::UnknownTimeZone(tz_name.clone()))?;

    let mut batch = Batch::default();
    batch.insert(KEY_VERSION, &codec::encode_u32(FORMAT_VERSION)[..]);
    if let Some(h) = &host {
        batch.insert(KEY_HOST, h.as_bytes());
    }
    batch.insert(KEY_TZ, tz_name.as_bytes());
    batch.insert(KEY_STEP, &codec::encode_u32(step_secs)[..]);
    batch.insert(KEY_MAX_GAP, &codec::encode_u64(max_gap_secs)[..]);
    tree.apply_batch(batch)
        .map_err(sled_err("writing metadata"))?;
    Ok(StoreMeta {
        host,
        tz_name,
        tz,
        step_secs,
        max_gap_secs,
    })
}
