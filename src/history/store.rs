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
use crate::history::trace::{
    write_trace_header, write_trace_row, Trace, TraceError, TraceHeader, TraceReader,
    MAX_STEP_SECS, MAX_TRACE_BYTES,
};
use crate::model::owner::S5Cause;
use crate::model::series::{GapRules, HostSeries, Sample, DEFAULT_MAX_GAP_SECS, DEFAULT_STEP_SECS};
use crate::model::state::State;
use jiff::tz::TimeZone;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::{Batch, IVec, Transactional, Tree};
use std::fs::File;
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::ops::{Bound, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Version of the store's layout; bumped when a tree or encoding changes.
pub const FORMAT_VERSION: u32 = 1;
/// How long samples are kept unless the owner says otherwise (8 weeks).
pub const DEFAULT_RETENTION_DAYS: u32 = 56;
/// sled's page cache; small, because the node must stay out of the owner's
/// way. Measured (`examples/sled_rss.rs`, 500k rows written one by one with
/// a flush every 1,000): peak RSS grows by 38 MiB with a 1 MiB cache, 52 MiB
/// with 4 MiB and 83 MiB with 16 MiB (the old default); the history is read
/// in sequential scans, which a bigger cache does not speed up.
pub const DEFAULT_CACHE_BYTES: u64 = 1024 * 1024;
/// The `source` header written by [`HistoryStore::export`].
pub const EXPORT_SOURCE: &str = "gleaner history store";

const SECS_PER_DAY: i64 = 86_400;
/// Rows deleted between flushes, to bound memory.
const BATCH_ROWS: usize = 1_000;
/// Rows an import writes between flushes (and between checks for a
/// cancel). Rows go in one `insert` each, not as a sled `Batch`: sled
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
/// The high-water mark's file in the store's directory.
const WATERMARK_FILE: &str = "gleaner-watermark";

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
/// Present while an import writes: every sample row before this time
/// (i64 BE) was written by that import. `open` removes them if the import
/// never finished, so an interrupted import leaves nothing behind.
const KEY_IMPORT_BOUND: &[u8] = b"import_bound";

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
    /// The trace being imported is unreadable or malformed (names the file).
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(
        "import refused: under the store's max_gap of {max_gap} s the trace becomes more than \
         {MAX_IMPORT_ROWS} rows (its silences are far longer than the store's max_gap)"
    )]
    ImportTooManyRows { max_gap: u64 },
    #[error("import cancelled: the node is shutting down; nothing was imported")]
    ImportCancelled,
    #[error("history store: cannot keep the high-water mark {path}: {source}")]
    Watermark {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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
    /// The samples, the metadata and the counters, shared with bulk work
    /// (imports, exports, building the series) done off the node's loop.
    bulk: BulkHistory,
    transitions: Tree,
    jobs: Tree,
    /// Cached copy of the stored pause flag.
    paused: bool,
    /// Cached copy of the stored end of a timed pause.
    pause_until: Option<i64>,
    /// The schedule or the battery withholds the machine (not stored: the
    /// node judges both again at start).
    withheld: Option<S5Cause>,
    flush_every_record: bool,
    /// The down interval recorded by `open`, for the caller to log.
    gap_on_open: Option<DownInterval>,
    /// Sample rows found missing at the end of the store by `open`.
    torn_tail: Option<TornTail>,
    /// Rows of an interrupted import that `open` removed.
    import_rolled_back: u64,
}

/// What several threads share about one open store.
struct SharedCounters {
    /// Sample rows stored, kept up to date so `status` never walks the tree
    /// (sled's `len` is a full scan). Counted once at open.
    samples_len: AtomicU64,
    /// Records found corrupt and skipped by readers since open.
    corrupt_skipped: AtomicU64,
    /// The high-water mark outside sled (see [`Watermark`]); the lock also
    /// keeps two flushes from writing it at once.
    watermark: Mutex<Option<File>>,
}

/// Sample rows that `open` found missing at the end of the store: sled drops
/// a torn or corrupt tail of its log when it recovers, silently. The
/// high-water mark written after every flush says how many rows, and up to
/// which time, the store held durably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornTail {
    /// Rows missing: the mark's count minus the rows found.
    pub lost: u64,
    /// The newest row the mark knew of, Unix seconds.
    pub last_time_before: i64,
    /// The newest row found, if any.
    pub last_time_now: Option<i64>,
}

/// A cloneable handle on a store's samples for bulk work that must not run
/// on the node's loop: imports (streamed in batches), exports (streamed) and
/// building the series for predictions. The host loop, which owns the
/// store, hands it to blocking tasks; it cannot pause, resume or write the
/// job log.
#[derive(Clone)]
pub struct BulkHistory {
    db: sled::Db,
    meta_tree: Tree,
    samples: Tree,
    meta: StoreMeta,
    shared: Arc<SharedCounters>,
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
        let db =
            crate::sled_open::open_with_lock_retry(&config).map_err(|source| StoreError::Open {
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
            meta,
            shared: Arc::new(SharedCounters {
                samples_len: AtomicU64::new(0),
                corrupt_skipped: AtomicU64::new(0),
                watermark: Mutex::new(Some(watermark_file)),
            }),
        };
        bulk.shared
            .samples_len
            .store(bulk.samples.len() as u64, Ordering::Relaxed);
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
        store.flush()?;
        Ok(store)
    }

    /// Compares the rows found with the high-water mark the last flush left.
    fn check_watermark(&self, mark: Option<Watermark>) -> Result<Option<TornTail>, StoreError> {
        let Some(mark) = mark else {
            return Ok(None);
        };
        let found = self.sample_count();
        let last_now = self.last_sample()?.map(|s| s.time);
        // Retention deletes old rows, never the newest: only a missing
        // newest row says the tail was lost.
        if mark.count <= found || last_now.is_some_and(|t| t >= mark.last_time) {
            return Ok(None);
        }
        let torn = TornTail {
            lost: mark.count - found,
            last_time_before: mark.last_time,
            last_time_now: last_now,
        };
        tracing::warn!(
            lost = torn.lost,
            newest_before = torn.last_time_before,
            newest_now = ?torn.last_time_now,
            "{} samples lost at the end of the store (torn write)",
            torn.lost
        );
        Ok(Some(torn))
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

    /// True while the owner withholds the machine.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The last time the node was known to be alive, if ever.
    pub fn heartbeat(&self) -> Result<Option<i64>, StoreError> {
        match self
            .bulk
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
        if self.paused || self.withheld.is_some() {
            self.bulk
                .meta_tree
                .insert(KEY_HEARTBEAT, &heartbeat[..])
                .map_err(sled_err("writing the heartbeat"))?;
        } else {
            let key = codec::time_key(sample.time);
            let added = (&self.bulk.samples, &self.bulk.meta_tree)
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
            self.write_down_row(now, true, S5Cause::Paused)?;
            self.paused = true;
        }
        match until {
            Some(t) => self
                .bulk
                .meta_tree
                .insert(KEY_PAUSE_UNTIL, &codec::encode_i64(t)[..])
                .map(|_| ()),
            None => self.bulk.meta_tree.remove(KEY_PAUSE_UNTIL).map(|_| ()),
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
        self.bulk
            .meta_tree
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

    /// True while the schedule or the battery withholds the machine.
    pub fn withheld(&self) -> Option<S5Cause> {
        self.withheld
    }

    /// Records that the node withholds the machine from `now` for `cause`
    /// (the schedule or the battery): a down row and an S5 transition with
    /// the cause; samples then only move the heartbeat, as in a pause. Not
    /// kept across restarts: the node judges the schedule again at start.
    /// Returns false if already withheld (for any cause) or paused.
    pub fn withhold(&mut self, now: i64, cause: S5Cause) -> Result<bool, StoreError> {
        if self.paused || self.withheld.is_some() {
            return Ok(false);
        }
        self.write_down_row(now, false, cause)?;
        self.bulk
            .meta_tree
            .insert(KEY_HEARTBEAT, &codec::encode_i64(now)[..])
            .map_err(sled_err("writing the heartbeat"))?;
        self.withheld = Some(cause);
        self.flush_record()?;
        Ok(true)
    }

    /// Ends a withholding; like `resume`, no row is written until the next
    /// sample. Returns false if the machine was not withheld.
    pub fn release(&mut self) -> Result<bool, StoreError> {
        Ok(self.withheld.take().is_some())
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
            .bulk
            .db
            .generate_id()
            .map_err(sled_err("numbering a job event"))?;
        self.jobs
            .insert(codec::job_key(event.time, seq), value)
            .map_err(sled_err("recording a job event"))?;
        self.flush_record()
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

    fn count_new_sample(&self, added: bool) {
        if added {
            self.bulk.shared.samples_len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The newest readable sample.
    pub fn last_sample(&self) -> Result<Option<Sample>, StoreError> {
        self.bulk.last_sample()
    }

    /// The stored samples with times in `range`, in time order; corrupt rows
    /// are skipped and counted.
    pub fn samples(&self, range: impl RangeBounds<i64>) -> Result<Vec<Sample>, StoreError> {
        let mut out = Vec::new();
        for item in self.bulk.samples.range(time_key_range(&range)) {
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

    /// Seeds the store with a parsed trace's rows; see [`BulkHistory::import_file`].
    pub fn import(&self, trace: &Trace) -> Result<ImportReport, StoreError> {
        self.bulk.import_trace(trace, &|| false)
    }

    /// Seeds the store with the rows of the trace file at `path`, streamed;
    /// errors name `name`. See [`BulkHistory::import_file`].
    pub fn import_file(&self, path: &Path, name: &Path) -> Result<ImportReport, StoreError> {
        self.bulk.import_file(path, name, &|| false)
    }

    /// Applies retention at `now`: deletes samples, transitions and job-log
    /// events older than `retention_days`, but never the newest sample nor
    /// the newest transition, which say what the host is doing now.
    pub fn compact(&self, now: i64, retention_days: u32) -> Result<CompactReport, StoreError> {
        let cutoff = now.saturating_sub(i64::from(retention_days).saturating_mul(SECS_PER_DAY));
        let cutoff_key = codec::time_key(cutoff);
        let report = CompactReport {
            samples_removed: delete_before(&self.bulk.samples, &cutoff_key, true)?,
            transitions_removed: delete_before(&self.transitions, &cutoff_key, true)?,
            job_events_removed: delete_before(&self.jobs, &cutoff_key, false)?,
        };
        self.bulk.uncount(report.samples_removed);
        self.flush()?;
        Ok(report)
    }

    /// Writes all pending records to disk and fsyncs, then moves the
    /// high-water mark.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.bulk.flush()
    }

    fn flush_record(&self) -> Result<(), StoreError> {
        if self.flush_every_record {
            self.flush()?;
        }
        Ok(())
    }

    /// The gap rule of section V.B: a heartbeat older than `max_gap` means the
    /// node (and so the sharing) was off. Writes nothing when the last row is
    /// already down (paused, or a gap found by an earlier open).
    fn record_gap_since_heartbeat(&mut self, now: i64) -> Result<Option<DownInterval>, StoreError> {
        let Some(heartbeat) = self.heartbeat()? else {
            return Ok(None);
        };
        let silence = now.saturating_sub(heartbeat);
        if silence <= 0 || silence as u64 <= self.bulk.meta.max_gap_secs {
            return Ok(None);
        }
        let last = self.last_sample()?;
        if last.is_some_and(|s| !s.up) {
            return Ok(None);
        }
        // A clock set back may leave rows after the heartbeat; stay after them.
        let alive_until = last.map_or(heartbeat, |s| s.time.max(heartbeat));
        let from = alive_until
            .saturating_add(i64::from(self.bulk.meta.step_secs))
            .min(now);
        self.write_down_row(from, false, S5Cause::Off)?;
        Ok(Some(DownInterval { from, until: now }))
    }

    /// Writes a down row and an S5 transition at `time`, and the heartbeat;
    /// with `set_paused`, also the pause flag. One transaction.
    fn write_down_row(
        &self,
        time: i64,
        set_paused: bool,
        cause: S5Cause,
    ) -> Result<(), StoreError> {
        let key = codec::time_key(time);
        let down = Sample {
            time,
            cpu: 0.0,
            free_mib: 0,
            up: false,
        };
        let value =
            codec::encode_sample(&down).map_err(|source| StoreError::BadSample { time, source })?;
        let s5 = codec::encode_transition(State::S5, Some(cause));
        let heartbeat = codec::encode_i64(time);
        let paused = codec::encode_flag(true);
        let added = (&self.bulk.samples, &self.transitions, &self.bulk.meta_tree)
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
        self.bulk.note_corrupt(tree, e);
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
    /// Number of stored sample rows (corrupt ones included), O(1).
    pub fn sample_count(&self) -> u64 {
        self.shared.samples_len.load(Ordering::Relaxed)
    }

    /// The facts stored with the history.
    pub fn meta(&self) -> &StoreMeta {
        &self.meta
    }

    fn uncount(&self, removed: u64) {
        let _ = self
            .shared
            .samples_len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(removed))
            });
    }

    fn note_corrupt(&self, tree: &str, e: &CodecError) {
        self.shared.corrupt_skipped.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(tree, error = %e, "skipping a corrupt history record");
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

    /// Writes all pending records to disk and fsyncs, then records the
    /// high-water mark (rows and newest row) outside sled. The mark is taken
    /// before the flush, so it never claims a row that is not yet durable:
    /// a later open that finds fewer rows, and not the newest, lost them.
    pub fn flush(&self) -> Result<(), StoreError> {
        let mut file = self
            .shared
            .watermark
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = self.sample_count();
        let last_time = self
            .samples
            .last()
            .map_err(sled_err("reading samples"))?
            .and_then(|(k, _)| codec::decode_time_key(&k).ok());
        self.db.flush().map_err(sled_err("flushing"))?;
        if let (Some(f), Some(last_time)) = (file.as_mut(), last_time) {
            let mark = Watermark { count, last_time };
            if let Err(e) = mark.write(f) {
                // The history itself is safe; only the torn-tail check is lost.
                tracing::warn!(error = %e, "cannot write the history's high-water mark");
            }
        }
        Ok(())
    }

    /// The whole sample history as a series read with the given facts.
    pub fn to_series(
        &self,
        tz: TimeZone,
        step_secs: u32,
        max_gap_secs: u64,
    ) -> Result<HostSeries, StoreError> {
        let mut series = HostSeries::new(step_secs, max_gap_secs, tz);
        series.reserve(usize::try_from(self.sample_count()).unwrap_or(0));
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
        for item in self.samples.iter() {
            let (k, v) = item.map_err(sled_err("reading samples"))?;
            match codec::decode_sample(&k, &v) {
                Ok(s) => {
                    write_trace_row(&mut out, &mut line, &s).map_err(StoreError::Export)?;
                    rows += 1;
                }
                Err(e) => self.note_corrupt("samples", &e),
            }
        }
        out.flush().map_err(StoreError::Export)?;
        Ok(rows)
    }

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
            let key = codec::time_key(sample.time);
            if sample.time >= bound {
                let stored = match self.samples.get(key) {
                    Ok(v) => v,
                    Err(e) => return ControlFlow::Break(sled_err("checking an import")(e)),
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
                batch.push((key, value));
                if batch.len() >= IMPORT_BATCH_ROWS {
                    if cancelled() {
                        return ControlFlow::Break(StoreError::ImportCancelled);
                    }
                    if let Err(e) = self.write_import_batch(&mut batch) {
                        return ControlFlow::Break(e);
                    }
                }
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
            self.write_import_batch(&mut batch)?;
        }
        Ok(pass)
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

    /// Removes every sample row before `bound` (all of them an unfinished
    /// import's) and the import's mark; returns how many rows went.
    fn roll_back_import(&self, bound: i64) -> Result<u64, StoreError> {
        let removed = delete_before(&self.samples, &codec::time_key(bound), false)?;
        self.uncount(removed);
        self.meta_tree
            .remove(KEY_IMPORT_BOUND)
            .map_err(sled_err("removing an import's mark"))?;
        self.flush()?;
        Ok(removed)
    }

    /// At open: removes what an import cut short by a crash had written.
    fn roll_back_interrupted_import(&self) -> Result<u64, StoreError> {
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

/// The store's high-water mark, kept outside sled: how many sample rows the
/// store held, and its newest row, at the last flush. 32 bytes at offset 0
/// (one sector, so written whole or not at all), checked by a hash so a
/// mangled mark is ignored rather than believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Watermark {
    count: u64,
    last_time: i64,
}

impl Watermark {
    const MAGIC: &'static [u8; 8] = b"GLWMARK1";

    fn encode(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..8].copy_from_slice(Self::MAGIC);
        out[8..16].copy_from_slice(&self.count.to_be_bytes());
        out[16..24].copy_from_slice(&self.last_time.to_be_bytes());
        let hash = fnv1a(&out[..24]);
        out[24..].copy_from_slice(&hash.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Watermark> {
        let bytes: &[u8; 32] = bytes.get(..32)?.try_into().ok()?;
        if &bytes[..8] != Self::MAGIC {
            return None;
        }
        let hash = u64::from_be_bytes(bytes[24..].try_into().ok()?);
        if hash != fnv1a(&bytes[..24]) {
            return None;
        }
        Some(Watermark {
            count: u64::from_be_bytes(bytes[8..16].try_into().ok()?),
            last_time: i64::from_be_bytes(bytes[16..24].try_into().ok()?),
        })
    }

    fn read(file: &File) -> Option<Watermark> {
        let mut buf = [0u8; 32];
        file.read_exact_at(&mut buf, 0).ok()?;
        Watermark::decode(&buf)
    }

    fn write(&self, file: &File) -> io::Result<()> {
        file.write_all_at(&self.encode(), 0)?;
        file.sync_data()
    }
}

/// FNV-1a, 64 bits: enough to tell a whole mark from a mangled one.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
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
