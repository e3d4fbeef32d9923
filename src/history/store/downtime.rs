//! When the machine is not shared, and how the history says so: the
//! owner's pause (kept across restarts, with its end when timed), the
//! schedule's or the battery's withholding (judged again at each start),
//! the heartbeat, and the gap rule of seed paper 000, section V.B (a
//! silence since the heartbeat longer than `max_gap` means the node was
//! off). Each begins with a down row and an S5 transition with its cause.
//!
//! It must not know about the job log or imports.

use super::layout::{KEY_HEARTBEAT, KEY_PAUSED, KEY_PAUSE_UNTIL};
use super::{sled_err, tx_err, DownInterval, HistoryStore, StoreError, TxNew};
use crate::history::codec;
use crate::model::owner::S5Cause;
use crate::model::series::Sample;
use crate::model::state::State;
use sled::{Batch, Transactional};

impl HistoryStore {
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

    /// The gap rule of section V.B: a heartbeat older than `max_gap` means the
    /// node (and so the sharing) was off. Writes nothing when the last row is
    /// already down (paused, or a gap found by an earlier open).
    pub(super) fn record_gap_since_heartbeat(
        &mut self,
        now: i64,
    ) -> Result<Option<DownInterval>, StoreError> {
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
}
