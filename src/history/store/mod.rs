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
//!
//! This file is the store's face: its options, facts, reports, errors and
//! the two handles ([`HistoryStore`] for the node's loop, [`BulkHistory`]
//! for bulk work off it). Each child holds one job: `layout` (trees, keys,
//! metadata), `open` (opening and the flush after each record),
//! `watermark` (the torn-tail check), `record` (appends), `downtime`
//! (pauses, withholding, the heartbeat and the gap rule), `days` (sealing
//! finished days into one value each), `day_files` (where those live), `rows` (the samples of both places
//! in time order), `read` (queries, series, export), `import` and
//! `retention`.
//!
//! Where samples live (format version 3): the rows of the newest day, one
//! sled key each, in the `samples` tree; every finished UTC day as one
//! file in `days/` (`day_files`). Two months of 6 s rows are ~800,000 keys
//! one by one, and sled's page table and its segment cleaner (measured: 3 %
//! of a core idle, 74 % of it in the cleaner) grow with the keys; as days
//! they are 56 files, which sled does not hold in memory once read.

mod day_files;
mod days;
mod downtime;
mod import;
mod layout;
mod open;
mod read;
mod rebuild;
mod record;
mod retention;
mod rows;
mod watermark;

pub use import::{IMPORT_BATCH_ROWS, MAX_IMPORT_ROWS};

use crate::history::codec::CodecError;
use crate::history::trace::TraceError;
use crate::model::owner::S5Cause;
use day_files::DayFiles;
use jiff::tz::TimeZone;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Tree;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

/// Version of the store's layout; bumped when a tree or encoding changes.
/// Older versions are upgraded at open: version 1 (every sample a key of
/// its own) is version 3 with no day sealed yet; version 2 kept the sealed
/// days as values of the `sample_days` tree, which `open` moves to files.
pub const FORMAT_VERSION: u32 = 3;
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
    /// Period of sled's background flusher, ms. With
    /// `flush_every_record` (the node's way) it is a backstop for the
    /// store's other writes (sealed days, compaction), so it runs seldom:
    /// each of its wake-ups costs an idle node CPU (at 500 ms the node's two
    /// flushers were 17 % of an idle host's CPU, docs/scale.md).
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
            background_flush_ms: 5_000,
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
    #[error("history store: {doing} the day file {path}: {source}")]
    DayFile {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("history store: rebuilding its database: {doing} {path}: {source}")]
    Rebuild {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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
    /// The high-water mark outside sled (see `watermark`); the lock also
    /// keeps two flushes from writing it at once.
    watermark: Mutex<Option<File>>,
    /// Sealing a day moves rows between the two places: readers of many
    /// rows and imports hold it shared, so that none sees a day twice or
    /// not at all; sealing takes it only when free (`try_write`), so it
    /// never waits on a long read and no reader waits on it for long.
    layout: RwLock<()>,
    /// Held by an import for its whole run and by sealing: an import cut
    /// short removes its rows from their own keys, so none may be sealed
    /// while it runs.
    import: Mutex<()>,
    /// Held by whoever writes a sealed day (sealing, retention), one day at
    /// a time, so that neither writes over the other's day.
    days_writer: Mutex<()>,
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
    /// The newest day's samples, one key each (`layout` explains why).
    samples: Tree,
    /// Every finished day's samples as one file (`day_files`).
    days: DayFiles,
    meta: StoreMeta,
    shared: Arc<SharedCounters>,
}
