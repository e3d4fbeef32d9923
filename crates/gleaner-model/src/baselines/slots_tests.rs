//! Tests of [`super::slots`]: a table of a record's hours reads every hour
//! as the state grid of the whole record does, made at once or kept and
//! brought up to the record as it grows and is cut at the front, and
//! `logistic` answers the same from a kept table as from a new one.

use super::grid::GridIndex;
use super::slots::{SlotCache, SlotTable};
use super::Logistic;
use crate::predict::PredictRequest;
use crate::predictor::ReliabilityPredictor;
use crate::series::{HostSeries, Sample};
use crate::state::Thresholds;
use jiff::tz::TimeZone;

/// 2025-03-10 00:00 UTC: a Monday three weeks before Berlin's clocks go
/// forward (a day of 23 hours in the records below).
const START: i64 = 1_741_564_800;
const DAY: i64 = 86_400;

/// `days` days of rows `step` seconds apart (with a second of jitter now
/// and then when `jitter`), every state in them: load that drifts between
/// light, heavy and hot for minutes at a time, memory dips, the host off
/// some nights, and now and then silent past the gap limit.
fn rows(days: i64, step: i64, seed: u64, jitter: bool) -> Vec<Sample> {
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut load, mut free) = (10.0f64, 6_000u64);
    let mut out = Vec::new();
    let mut t = START;
    while t < START + days * DAY {
        let r = next();
        if r % 60 == 0 {
            load = [5.0, 35.0, 5.0, 80.0, 93.0, 15.0][(r / 60 % 6) as usize];
        }
        if r % 300 == 1 {
            free = [6_000, 6_000, 100, 9_000][(r / 300 % 4) as usize];
        }
        let hour = (t - START) % DAY / 3_600;
        let off = hour < 5 && (t - START) / DAY % 3 != 0;
        if r % 2_000 == 2 {
            t += 600; // silent for ten minutes: past the gap limit
            continue;
        }
        out.push(Sample {
            time: t,
            cpu: load + (r % 7) as f64,
            free_mib: free,
            up: !off,
        });
        t += step + i64::from(jitter && r % 5 == 3);
    }
    out
}

fn series_of(rows: &[Sample], step: i64) -> HostSeries {
    let tz = TimeZone::get("Europe/Berlin").unwrap();
    let mut s = HostSeries::new(step as u32, 120, tz);
    for r in rows {
        s.push(*r).unwrap();
    }
    s
}

fn thresholds() -> Thresholds {
    Thresholds {
        job_mem_mib: 256,
        ..Thresholds::default()
    }
}

/// `got` equal to `want`, entry by entry (the first that differs shown).
fn assert_same_entries(got: &SlotTable, want: &SlotTable, what: &str) {
    assert_eq!(got.entries.len(), want.entries.len(), "{what}: hours");
    for (g, w) in got.entries.iter().zip(&want.entries) {
        assert_eq!(g, w, "{what}");
    }
    assert_eq!((got.t0, got.steps), (want.t0, want.steps), "{what}");
}

/// Every entry of `table` against the grid of the same record: the hours
/// a grid step holds, in order, each with the grid's present and first
/// failure after it.
fn assert_reads_as_the_grid(table: &SlotTable, series: &HostSeries, what: &str) {
    let th = thresholds();
    let grid = GridIndex::build(series, th).unwrap();
    let hours: Vec<_> = grid
        .slots
        .iter()
        .filter_map(|&(date, hour, start)| Some((date, hour, start, grid.step_of(start)?)))
        .collect();
    assert_eq!(table.entries.len(), hours.len(), "{what}: hours");
    assert_eq!((table.t0, table.step), (grid.t0, grid.step), "{what}");
    assert_eq!(table.steps, grid.states.len(), "{what}: steps");
    let mut failures = 0;
    for (e, &(date, hour, start, k)) in table.entries.iter().zip(&hours) {
        assert_eq!((e.date, e.hour, e.start), (date, hour, start), "{what}");
        assert_eq!(e.state, grid.states[k], "{what}: state at {start}");
        assert_eq!(
            e.present(grid.step, th.job_mem_mib),
            grid.present(k, th.job_mem_mib),
            "{what}: present at {start}"
        );
        let want = match grid.next_fail(k + 1) {
            u32::MAX => None,
            f => Some((f as usize, grid.states[f as usize].failure_index())),
        };
        failures += usize::from(want.is_some());
        assert_eq!(
            e.first_failure(table.t0, table.step),
            want,
            "{what}: failure after {start}"
        );
    }
    assert!(failures > 0, "{what}: no failure read");
}

#[test]
fn a_table_made_from_the_whole_record_reads_as_the_grid() {
    // What an hour of record holds (`docs/accuracy.md` counts on it).
    assert_eq!(std::mem::size_of::<super::slots::SlotFacts>(), 48);
    for (days, step, jitter) in [(30, 20, false), (12, 6, true)] {
        let series = series_of(&rows(days, step, 7, jitter), step);
        let table = SlotTable::build(&series, thresholds()).unwrap();
        assert_reads_as_the_grid(&table, &series, &format!("{days} days at {step} s"));
    }
}

/// The records a node holds one after another: rows added at the end (a
/// minute to a day and a half at a time) and, now and then, the oldest
/// cut off (by whole rows, so the grid's steps stay where they were, or
/// past a jittered row, so they move).
fn a_node_s_records(all: &[Sample], step: i64) -> Vec<HostSeries> {
    let mut out = Vec::new();
    let (mut from, mut to) = (0usize, all.len() / 2);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut k = 0;
    while to < all.len() {
        out.push(series_of(&all[from..to], step));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let grow = [1, 10, 600, 3_000, 9_000, 20_000][k % 6];
        to = (to + grow * 20 / step as usize).min(all.len());
        if k % 3 == 1 {
            from += (rng % 5_000) as usize;
        }
        k += 1;
    }
    out
}

#[test]
fn a_table_kept_as_the_record_grows_and_is_cut_reads_as_a_new_one_and_the_grid() {
    for (step, jitter) in [(20, false), (20, true)] {
        let all = rows(40, step, 11, jitter);
        let th = thresholds();
        let cache = SlotCache::default();
        let (mut updated, mut records) = (0, 0);
        let mut previous: Option<SlotTable> = None;
        for series in a_node_s_records(&all, step) {
            let what = format!("{step} s, jitter {jitter}, record {records}");
            let fresh = SlotTable::build(&series, th).unwrap();
            if let Some(kept) = previous.take().and_then(|p| p.updated(&series)) {
                assert_same_entries(&kept, &fresh, &format!("{what}: kept and brought up"));
                updated += 1;
            }
            let cached = cache.table_for(&series, th).unwrap();
            assert_same_entries(&cached, &fresh, &format!("{what}: from the cache"));
            assert_reads_as_the_grid(&fresh, &series, &what);
            previous = Some(fresh);
            records += 1;
        }
        // Without jitter every record is the last one grown and cut by
        // whole rows: each is brought up, none made anew.
        if !jitter {
            assert_eq!(updated, records - 1, "{step} s: brought up");
        } else {
            assert!(updated > 0, "jittered: none brought up");
        }
    }
}

/// What the node answers: `logistic`'s curve for a 10 h window at 256 MiB,
/// by one method kept across the records (its fits dropped before each,
/// its tables kept: a day's first answer) and by one made anew for each.
#[test]
fn logistic_answers_from_a_kept_table_as_from_a_new_one() {
    let step = 20;
    let all = rows(40, step, 23, false);
    let kept = Logistic::with_own_cache();
    let mut answers = 0;
    for series in a_node_s_records(&all, step) {
        let at = series.last_time().unwrap();
        kept.clear_fits();
        let fresh = Logistic::with_own_cache();
        for hours in [2.5, 5.0, 10.0, 20.0, 40.0] {
            let req = PredictRequest::new(at, (hours * 3600.0) as u64, thresholds());
            let (a, b) = (kept.forecast(&series, &req), fresh.forecast(&series, &req));
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.tr.to_bits(), b.tr.to_bits(), "{hours} h at {at}");
                    answers += 1;
                }
                (a, b) => assert_eq!(a.is_ok(), b.is_ok(), "{hours} h at {at}"),
            }
        }
    }
    assert!(answers > 20, "{answers} answers");
}

/// A table for a job's memory read off the table without one equals the
/// one made from the whole record, for memories under, between and over
/// the record's free memory (100, 6,000 and 9,000 MiB in `rows`), on
/// every record a node holds as it grows and is cut; and the cache, asked
/// for memories one after another, gives the same tables.
#[test]
fn a_memorys_table_read_off_the_table_without_one_equals_one_made_from_the_record() {
    let memories = [
        1, 100, 101, 256, 5_999, 6_000, 6_001, 8_000, 9_000, 9_001, 50_000,
    ];
    for (step, jitter) in [(20, false), (20, true), (6, true)] {
        let all = rows(if step == 6 { 8 } else { 30 }, step, 31, jitter);
        let cache = SlotCache::default();
        let mut s4_hours = 0;
        for (n, series) in a_node_s_records(&all, step).into_iter().enumerate() {
            let base = SlotTable::build(&series, Thresholds::default()).unwrap();
            for &mem in &memories {
                let th = Thresholds {
                    job_mem_mib: mem,
                    ..Thresholds::default()
                };
                let what = format!("{step} s, jitter {jitter}, record {n}, {mem} MiB");
                let want = SlotTable::build(&series, th).unwrap();
                let got = base.for_memory(&series, th).unwrap();
                assert_same_entries(&got, &want, &what);
                let cached = cache.table_for(&series, th).unwrap();
                assert_same_entries(&cached, &want, &format!("{what}: from the cache"));
                s4_hours += want
                    .entries
                    .iter()
                    .filter(|e| e.state == crate::state::State::S4)
                    .count();
            }
        }
        assert!(s4_hours > 100, "{step} s: {s4_hours} hours in S4");
    }
}

/// Only the table without a memory, of the record as it is, gives others.
#[test]
fn a_memorys_table_is_read_off_only_the_table_without_one_of_the_same_record() {
    let all = rows(12, 20, 5, false);
    let series = series_of(&all, 20);
    let shorter = series_of(&all[..all.len() - 10], 20);
    let th = thresholds();
    let with_memory = SlotTable::build(&series, th).unwrap();
    assert!(with_memory.for_memory(&series, th).is_none());
    let of_shorter = SlotTable::build(&shorter, Thresholds::default()).unwrap();
    assert!(of_shorter.for_memory(&series, th).is_none());
    let other_th2 = Thresholds {
        th2: 70.0,
        ..Thresholds::default()
    };
    let base = SlotTable::build(&series, other_th2).unwrap();
    assert!(base.for_memory(&series, th).is_none());
}
