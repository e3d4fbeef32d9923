//! The store's high-water mark, kept outside sled so that a torn tail can
//! be seen: every flush records how many sample rows the store holds and
//! its newest row, and `open` compares what it finds with that mark (sled
//! drops a torn or corrupt tail of its log when it recovers, silently).
//!
//! It owns the flush (the mark must follow it), the mark's file and its
//! encoding; it must not know about pauses, imports or the job log.

use super::{sled_err, BulkHistory, HistoryStore, StoreError, TornTail};
use crate::history::codec;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The high-water mark's file in the store's directory.
pub(super) const WATERMARK_FILE: &str = "gleaner-watermark";

impl HistoryStore {
    /// Compares the rows found with the high-water mark the last flush left.
    pub(super) fn check_watermark(
        &self,
        mark: Option<Watermark>,
    ) -> Result<Option<TornTail>, StoreError> {
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
}

impl BulkHistory {
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
        // The newest row is loose (the newest day is never sealed) unless
        // every loose row is gone or damaged.
        let last_time = match self
            .samples
            .last()
            .map_err(sled_err("reading samples"))?
            .and_then(|(k, _)| codec::decode_time_key(&k).ok())
        {
            Some(t) => Some(t),
            None => self.last_sample()?.map(|s| s.time),
        };
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
}

/// The store's high-water mark, kept outside sled: how many sample rows the
/// store held, and its newest row, at the last flush. 32 bytes at offset 0
/// (one sector, so written whole or not at all), checked by a hash so a
/// mangled mark is ignored rather than believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Watermark {
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

    pub(super) fn read(file: &File) -> Option<Watermark> {
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
