//! The store's layout in sled: which trees it holds, which keys its
//! metadata uses, how a time range becomes a key range, and the metadata
//! record itself (read, overridden by the node's options, checked and
//! written back at open).
//!
//! It must not know what a sample or a pause means: the byte encodings are
//! `history::codec`'s, the rules the rest of the store's.

use super::{sled_err, StoreError, StoreMeta, StoreOptions, FORMAT_VERSION};
use crate::history::codec;
use crate::history::trace::MAX_STEP_SECS;
use crate::model::series::{DEFAULT_MAX_GAP_SECS, DEFAULT_STEP_SECS};
use sled::{Batch, Tree};
use std::ops::{Bound, RangeBounds};

pub(super) const TREE_META: &str = "meta";
pub(super) const TREE_SAMPLES: &str = "samples";
/// Finished UTC days of samples, one value each (`codec` day blocks), in
/// format version 2; version 3 keeps them as files (`day_files`) and `open`
/// moves them there.
pub(super) const TREE_DAYS_V2: &str = "sample_days";
pub(super) const TREE_TRANSITIONS: &str = "transitions";
pub(super) const TREE_JOBS: &str = "jobs";

pub(super) const KEY_VERSION: &[u8] = b"format_version";
pub(super) const KEY_HOST: &[u8] = b"host";
pub(super) const KEY_TZ: &[u8] = b"tz";
pub(super) const KEY_STEP: &[u8] = b"step";
pub(super) const KEY_MAX_GAP: &[u8] = b"max_gap";
pub(super) const KEY_HEARTBEAT: &[u8] = b"heartbeat";
pub(super) const KEY_PAUSED: &[u8] = b"paused";
/// When a timed pause ends (Unix seconds, i64 BE); absent for an open-ended one.
pub(super) const KEY_PAUSE_UNTIL: &[u8] = b"pause_until";
/// Present while an import writes: every sample row before this time
/// (i64 BE) was written by that import. `open` removes them if the import
/// never finished, so an interrupted import leaves nothing behind.
pub(super) const KEY_IMPORT_BOUND: &[u8] = b"import_bound";
/// Present when the sled database never held more than a day of rows one
/// key each: made empty by this version, or rebuilt (`rebuild`). A store
/// without it is rebuilt once its days are sealed.
pub(super) const KEY_FRESH_DB: &[u8] = b"fresh_db";

pub(super) fn time_key_range(
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

pub(super) fn job_key_range(
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
pub(super) fn resolve_meta(tree: &Tree, opts: &StoreOptions) -> Result<StoreMeta, StoreError> {
    let get = |key: &[u8]| tree.get(key).map_err(sled_err("reading metadata"));
    let corrupt = |key: &'static str| move |source| StoreError::CorruptMeta { key, source };
    if let Some(v) = get(KEY_VERSION)? {
        let found = codec::decode_u32("format_version", &v).map_err(corrupt("format_version"))?;
        // Older versions are upgraded by `open` (see `FORMAT_VERSION`).
        if !(1..=FORMAT_VERSION).contains(&found) {
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
