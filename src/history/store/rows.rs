//! The samples of both places as one stream in time order: the newest
//! day's rows (one key each) and the finished days (one value each), with
//! the loose row winning where a crash mid-seal left a time in both.
//! Damaged records are skipped and counted, never fatal.
//!
//! It must not write, nor know why a day is sealed (`days`).

use super::layout::time_key_range;
use super::{sled_err, BulkHistory, StoreError};
use crate::history::codec;
use crate::model::series::Sample;
use std::ops::{Bound, RangeBounds};
use std::sync::{PoisonError, RwLockReadGuard};

/// The readable samples with times in a range, in time order.
pub(super) struct Rows<'a> {
    bulk: &'a BulkHistory,
    /// Keeps a seal from moving a day while this reads (see `layout`).
    _layout: RwLockReadGuard<'a, ()>,
    range: (Bound<i64>, Bound<i64>),
    loose: sled::Iter,
    loose_head: Option<Sample>,
    /// The days to read, listed at the first row wanted (a listing can
    /// fail, and `rows` cannot).
    days: Option<std::vec::IntoIter<i64>>,
    /// The rows left of the day being read, newest first (popped from the end).
    day_rows: Vec<Sample>,
    done: bool,
}

impl BulkHistory {
    /// The readable samples with times in `range`, in time order.
    pub(super) fn rows(&self, range: impl RangeBounds<i64>) -> Rows<'_> {
        let range = (range.start_bound().cloned(), range.end_bound().cloned());
        Rows {
            bulk: self,
            _layout: self
                .shared
                .layout
                .read()
                .unwrap_or_else(PoisonError::into_inner),
            loose: self.samples.range(time_key_range(&range)),
            days: None,
            range,
            loose_head: None,
            day_rows: Vec::new(),
            done: false,
        }
    }

    /// The newest readable sample: the newest of each place (the newest
    /// row is loose unless a crash or damage says otherwise).
    pub fn last_sample(&self) -> Result<Option<Sample>, StoreError> {
        let mut newest = self.first_readable_loose(&mut self.samples.iter().rev())?;
        for day in self.days.days(..)?.into_iter().rev() {
            let day_last = day.saturating_add(codec::SECS_PER_DAY - 1);
            if newest.is_some_and(|n: Sample| n.time >= day_last) {
                // Every row of this day and the older ones is older.
                break;
            }
            let Some(v) = self.days.get(day)? else {
                continue;
            };
            let last = codec::decode_day_block(day, &v).map(|rows| rows.flatten().last());
            match last {
                Ok(Some(s)) => {
                    if newest.is_none_or(|n| s.time > n.time) {
                        newest = Some(s);
                    }
                    break;
                }
                Ok(None) => {}
                Err(e) => self.note_corrupt("days", &e),
            }
        }
        Ok(newest)
    }
}

impl BulkHistory {
    /// The first readable sample `rows` (one key a row) yields, in its
    /// order; the damaged ones before it are skipped and counted.
    fn first_readable_loose(
        &self,
        rows: &mut impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
    ) -> Result<Option<Sample>, StoreError> {
        for item in rows {
            let (k, v) = item.map_err(sled_err("reading samples"))?;
            match codec::decode_sample(&k, &v) {
                Ok(s) => return Ok(Some(s)),
                Err(e) => self.note_corrupt("samples", &e),
            }
        }
        Ok(None)
    }
}

impl Rows<'_> {
    fn next_loose(&mut self) -> Result<Option<Sample>, StoreError> {
        if self.loose_head.is_none() {
            self.loose_head = self.bulk.first_readable_loose(&mut self.loose)?;
        }
        Ok(self.loose_head)
    }

    fn next_day_row(&mut self) -> Result<Option<Sample>, StoreError> {
        while self.day_rows.is_empty() {
            if self.days.is_none() {
                // The day holding a bound is read whole and its rows filtered.
                self.days = Some(self.bulk.days.days_holding(&self.range)?.into_iter());
            }
            let Some(day) = self.days.as_mut().and_then(Iterator::next) else {
                return Ok(None);
            };
            // Gone since the listing (retention): nothing of it to read.
            let Some(v) = self.bulk.days.get(day)? else {
                continue;
            };
            let decoded = codec::decode_day_block(day, &v).map(|rows| rows.collect::<Vec<_>>());
            match decoded {
                Ok(rows) => {
                    for row in rows.into_iter().rev() {
                        match row {
                            Ok(s) if self.range.contains(&s.time) => self.day_rows.push(s),
                            Ok(_) => {}
                            Err(e) => self.bulk.note_corrupt("days", &e),
                        }
                    }
                }
                Err(e) => self.bulk.note_corrupt("days", &e),
            }
        }
        Ok(self.day_rows.last().copied())
    }

    fn step(&mut self) -> Result<Option<Sample>, StoreError> {
        let loose = self.next_loose()?;
        let day = self.next_day_row()?;
        Ok(match (loose, day) {
            (Some(l), Some(d)) if d.time < l.time => self.day_rows.pop(),
            (Some(l), d) => {
                if d.is_some_and(|d| d.time == l.time) {
                    // Left in both by a crash mid-seal: the loose row wins.
                    self.day_rows.pop();
                }
                self.loose_head.take()
            }
            (None, Some(_)) => self.day_rows.pop(),
            (None, None) => None,
        })
    }
}

impl Iterator for Rows<'_> {
    type Item = Result<Sample, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(s)) => Some(Ok(s)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{HistoryStore, StoreOptions};
    use crate::model::series::Sample;
    use std::time::Duration;

    const T0: i64 = 1_700_000_000;

    #[test]
    fn a_seal_waits_for_a_reader_in_the_middle_of_a_day() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            flush_every_record: false,
            ..StoreOptions::default()
        };
        let store = HistoryStore::open(dir.path(), &opts, T0).unwrap();
        // A row every 10 minutes for three days, none sealed yet.
        let written: Vec<Sample> = (0..3 * 144)
            .map(|i| {
                let s = Sample {
                    time: T0 + 600 * i,
                    cpu: 1.0,
                    free_mib: 100,
                    up: true,
                };
                store.record_sample(&s).unwrap();
                s
            })
            .collect();
        let bulk = store.bulk();
        let mut rows = bulk.rows(..);
        // Into the first whole day, read from its own keys.
        let mut read: Vec<Sample> = rows.by_ref().take(100).map(Result::unwrap).collect();
        let sealer = {
            let bulk = bulk.clone();
            std::thread::spawn(move || bulk.seal_finished_days().unwrap())
        };
        // Time for a seal that did not wait to move every finished day.
        std::thread::sleep(Duration::from_millis(300));
        read.extend(rows.map(Result::unwrap));
        // Without the lock, the first day comes back a second time here.
        assert!(
            read == written,
            "{} rows read for {} written: each row once, in order",
            read.len(),
            written.len()
        );
        let report = sealer.join().unwrap();
        assert!(report.days >= 2, "{report:?}");
        assert_eq!(
            bulk.rows(..).map(Result::unwrap).collect::<Vec<_>>(),
            written
        );
    }
}
