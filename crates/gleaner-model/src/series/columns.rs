//! The narrow columns of a [`HostSeries`](super::HostSeries): times as
//! offsets from the first row and loads in hundredths of a percent where
//! that is exact, so a node's two months of 6 s rows (806,400) take 11 bytes
//! a row instead of 21 (8.9 MB instead of 16.9). Values read back bit for
//! bit as they were pushed: a load that is not exactly a hundredth (a trace
//! with finer loads) turns the column into `f64`s.
//!
//! It must not know what a row means; `series` reads the columns.

use super::SeriesError;

/// Row times: seconds after the first row's, as `u32` (a series spans at
/// most 136 years).
#[derive(Debug, Clone, Default)]
pub(super) struct Times {
    base: i64,
    offsets: Vec<u32>,
}

impl Times {
    pub(super) fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Time of row `i` (which must exist).
    pub(super) fn at(&self, i: usize) -> i64 {
        // The offset came from `t - base`, so the sum is `t`.
        self.base + i64::from(self.offsets[i])
    }

    pub(super) fn get(&self, i: usize) -> Option<i64> {
        self.offsets.get(i).map(|&o| self.base + i64::from(o))
    }

    pub(super) fn first(&self) -> Option<i64> {
        self.get(0)
    }

    pub(super) fn last(&self) -> Option<i64> {
        self.len().checked_sub(1).map(|i| self.at(i))
    }

    /// Appends `t`, which the caller has checked is after the last time.
    pub(super) fn push(&mut self, t: i64) -> Result<(), SeriesError> {
        if self.offsets.is_empty() {
            self.base = t;
        }
        let offset = t
            .checked_sub(self.base)
            .and_then(|d| u32::try_from(d).ok())
            .ok_or(SeriesError::TooLong {
                first: self.base,
                time: t,
            })?;
        self.offsets.push(offset);
        Ok(())
    }

    /// How many rows have a time at or before `t`.
    pub(super) fn count_at_or_before(&self, t: i64) -> usize {
        if self.offsets.is_empty() || t < self.base {
            return 0;
        }
        match t.checked_sub(self.base).and_then(|d| u32::try_from(d).ok()) {
            Some(d) => self.offsets.partition_point(|&o| o <= d),
            None => self.offsets.len(),
        }
    }

    /// Seconds from row `i` to row `i + 1` (which must both exist).
    pub(super) fn gap_after(&self, i: usize) -> i64 {
        i64::from(self.offsets[i + 1]) - i64::from(self.offsets[i])
    }

    pub(super) fn reserve(&mut self, n: usize) {
        self.offsets.reserve(n);
    }

    pub(super) fn reserve_exact(&mut self, n: usize) {
        self.offsets.reserve_exact(n);
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.offsets.shrink_to_fit();
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.offsets.capacity() * std::mem::size_of::<u32>()
    }
}

/// CPU loads, percent: hundredths in a `u16` while every load pushed is
/// exactly one (every row a store reads back is: it keeps 0.01 %), else
/// `f64`s.
#[derive(Debug, Clone)]
pub(super) enum Loads {
    Hundredths(Vec<u16>),
    Exact(Vec<f64>),
}

impl Default for Loads {
    fn default() -> Self {
        Loads::Hundredths(Vec::new())
    }
}

/// The load `h` hundredths stand for: the same division the store's codec
/// makes, so a stored load reads back with the same bits.
fn percent(h: u16) -> f64 {
    f64::from(h) / 100.0
}

/// `cpu` as hundredths, if that reads back with the same bits.
fn hundredths(cpu: f64) -> Option<u16> {
    let h = (cpu * 100.0).round();
    if !(0.0..=10_000.0).contains(&h) {
        return None;
    }
    let h = h as u16;
    (percent(h).to_bits() == cpu.to_bits()).then_some(h)
}

impl Loads {
    /// Load of row `i` (which must exist).
    pub(super) fn at(&self, i: usize) -> f64 {
        match self {
            Loads::Hundredths(v) => percent(v[i]),
            Loads::Exact(v) => v[i],
        }
    }

    /// The loads of rows `range` (which must exist), in order: one match
    /// for the whole run, not one a row (a forecast's hottest loop).
    pub(super) fn range(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = f64> + '_ {
        let (narrow, wide): (&[u16], &[f64]) = match self {
            Loads::Hundredths(v) => (&v[range], &[]),
            Loads::Exact(v) => (&[], &v[range]),
        };
        narrow
            .iter()
            .map(|&h| percent(h))
            .chain(wide.iter().copied())
    }

    pub(super) fn push(&mut self, cpu: f64) {
        if let Loads::Hundredths(v) = self {
            if let Some(h) = hundredths(cpu) {
                v.push(h);
                return;
            }
            self.widen();
        }
        if let Loads::Exact(v) = self {
            v.push(cpu);
        }
    }

    /// Replaces the load of row `i` (which must exist).
    pub(super) fn set(&mut self, i: usize, cpu: f64) {
        if let Loads::Hundredths(v) = self {
            if let Some(h) = hundredths(cpu) {
                v[i] = h;
                return;
            }
            self.widen();
        }
        if let Loads::Exact(v) = self {
            v[i] = cpu;
        }
    }

    /// Turns the column into `f64`s, keeping every value.
    fn widen(&mut self) {
        if let Loads::Hundredths(v) = self {
            let mut wide = Vec::with_capacity(v.capacity());
            wide.extend(v.iter().map(|&h| percent(h)));
            *self = Loads::Exact(wide);
        }
    }

    pub(super) fn reserve(&mut self, n: usize) {
        match self {
            Loads::Hundredths(v) => v.reserve(n),
            Loads::Exact(v) => v.reserve(n),
        }
    }

    pub(super) fn reserve_exact(&mut self, n: usize) {
        match self {
            Loads::Hundredths(v) => v.reserve_exact(n),
            Loads::Exact(v) => v.reserve_exact(n),
        }
    }

    pub(super) fn shrink_to_fit(&mut self) {
        match self {
            Loads::Hundredths(v) => v.shrink_to_fit(),
            Loads::Exact(v) => v.shrink_to_fit(),
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Loads::Hundredths(v) => v.capacity() * std::mem::size_of::<u16>(),
            Loads::Exact(v) => v.capacity() * std::mem::size_of::<f64>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_read_back_bit_for_bit_and_stored_ones_take_two_bytes() {
        let mut loads = Loads::default();
        let stored: Vec<f64> = (0..=10_000u16).map(percent).collect();
        for &l in &stored {
            loads.push(l);
        }
        assert!(matches!(loads, Loads::Hundredths(_)));
        for (i, &l) in stored.iter().enumerate() {
            assert_eq!(loads.at(i).to_bits(), l.to_bits());
        }
        // A finer load widens the column and keeps every value.
        loads.push(12.345_678);
        assert!(matches!(loads, Loads::Exact(_)));
        assert_eq!(loads.at(10_001), 12.345_678);
        for (i, &l) in stored.iter().enumerate() {
            assert_eq!(loads.at(i).to_bits(), l.to_bits());
        }
        let mut minus_zero = Loads::default();
        minus_zero.push(-0.0);
        assert_eq!(minus_zero.at(0).to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn times_are_offsets_and_a_span_past_136_years_is_refused() {
        let mut times = Times::default();
        for t in [-5, 0, 6, 4_000_000_000] {
            times.push(t).unwrap();
        }
        assert_eq!(times.at(0), -5);
        assert_eq!(times.last(), Some(4_000_000_000));
        assert_eq!(times.count_at_or_before(-6), 0);
        assert_eq!(times.count_at_or_before(5), 2);
        assert_eq!(times.count_at_or_before(i64::MAX), 4);
        assert_eq!(times.gap_after(1), 6);
        assert!(times.push(i64::MAX).is_err());
        assert_eq!(times.len(), 4);
        assert_eq!(times.heap_bytes(), times.offsets.capacity() * 4);
    }
}
