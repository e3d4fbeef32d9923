//! Integration tests of the history store's sealed days (format version 3):
//! every finished UTC day's samples kept as one file, on real sled
//! databases and files in temp dirs, with times passed in.

use super::store::{export_text, open, opts, sample, T0};
use gleaner::history::codec;
use gleaner::history::store::{HistoryStore, StoreError, StoreOptions};
use gleaner::history::trace::parse_trace;
use gleaner::model::series::Sample;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const DAY: i64 = 86_400;

/// One row every 10 minutes for `days` days from T0, with loads that vary.
fn record_days(store: &HistoryStore, days: i64) -> Vec<Sample> {
    (0..days * 144)
        .map(|i| {
            let s = sample(T0 + 600 * i, (i % 37) as f64 * 1.25, 800 + i as u64);
            store.record_sample(&s).unwrap();
            s
        })
        .collect()
}

/// Opens again just after the newest row (no silence to record).
fn reopen(dir: &Path, written: &[Sample]) -> HistoryStore {
    open(dir, written.last().unwrap().time + 6)
}

/// Loose rows and day files, read behind the store's back.
fn keys(dir: &Path) -> (usize, usize) {
    let db = gleaner::sled_open::open_dir(dir).unwrap();
    let loose = db.open_tree("samples").unwrap().len();
    (loose, day_files(dir).len())
}

/// The names of the store's day files.
fn day_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir.join("days"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".day"))
                .collect()
        })
        .unwrap_or_default()
}

fn day_file(dir: &Path, day: i64) -> std::path::PathBuf {
    dir.join("days").join(format!("{day}.day"))
}

/// The loose rows and sealed days a store of `rows` should hold: the
/// newest row's day one key a row, every day before it one file.
fn expected_keys(rows: &[Sample]) -> (usize, usize) {
    let newest = codec::day_start(rows.last().unwrap().time);
    let loose = rows
        .iter()
        .filter(|s| codec::day_start(s.time) == newest)
        .count();
    let days: BTreeSet<i64> = rows
        .iter()
        .map(|s| codec::day_start(s.time))
        .filter(|&d| d < newest)
        .collect();
    (loose, days.len())
}

#[test]
fn finished_days_become_one_file_each_and_read_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written = record_days(&store, 4);
    let text = export_text(&store);
    drop(store);
    assert_eq!(keys(dir.path()), (written.len(), 0), "nothing sealed yet");

    let store = reopen(dir.path(), &written);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.sample_count(), written.len() as u64);
    assert_eq!(export_text(&store), text);
    assert_eq!(
        store.samples(T0 + DAY..T0 + 2 * DAY).unwrap(),
        written
            .iter()
            .filter(|s| (T0 + DAY..T0 + 2 * DAY).contains(&s.time))
            .copied()
            .collect::<Vec<_>>(),
        "a range that cuts two sealed days"
    );
    assert_eq!(store.last_sample().unwrap(), written.last().copied());
    drop(store);
    let (loose, days) = expected_keys(&written);
    assert!(days >= 3 && loose < 145, "{days} days, {loose} loose rows");
    assert_eq!(keys(dir.path()), (loose, days));

    // Opening again changes nothing and finds no torn tail.
    let store = reopen(dir.path(), &written);
    assert_eq!(store.torn_tail(), None);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.sample_count(), written.len() as u64);
    assert_eq!(store.corrupt_records_skipped(), 0);
}

#[test]
fn a_version_1_store_is_sealed_at_its_first_open() {
    let dir = tempfile::tempdir().unwrap();
    let written = record_days(&open(dir.path(), T0), 3);
    {
        let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
        let meta = db.open_tree("meta").unwrap();
        meta.insert(&b"format_version"[..], &1u32.to_be_bytes()[..])
            .unwrap();
        // An older gleaner's database, which held every row one key each.
        meta.remove(&b"fresh_db"[..]).unwrap();
        db.flush().unwrap();
    }
    let store = reopen(dir.path(), &written);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.sample_count(), written.len() as u64);
    assert_eq!(store.torn_tail(), None);
    drop(store);
    assert_eq!(keys(dir.path()), expected_keys(&written));
    let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
    let meta = db.open_tree("meta").unwrap();
    let version = meta.get(b"format_version").unwrap();
    assert_eq!(version.as_deref(), Some(&3u32.to_be_bytes()[..]));
    assert!(
        meta.contains_key(b"fresh_db").unwrap(),
        "rebuilt as a fresh database once sealed"
    );
    assert!(!dir.path().join(".rebuild").exists() && !dir.path().join(".old").exists());
}

#[test]
fn a_version_2_stores_sealed_days_move_from_sled_to_files_at_its_first_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written = record_days(&store, 4);
    drop(store);
    drop(reopen(dir.path(), &written));
    let (loose, days) = expected_keys(&written);
    // Made version 2 behind the store's back: its days back into sled.
    {
        let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
        let tree = db.open_tree("sample_days").unwrap();
        for name in day_files(dir.path()) {
            let day: i64 = name.trim_end_matches(".day").parse().unwrap();
            let path = day_file(dir.path(), day);
            tree.insert(codec::time_key(day), std::fs::read(&path).unwrap())
                .unwrap();
            std::fs::remove_file(path).unwrap();
        }
        db.open_tree("meta")
            .unwrap()
            .insert(&b"format_version"[..], &2u32.to_be_bytes()[..])
            .unwrap();
        db.flush().unwrap();
    }
    assert_eq!(keys(dir.path()), (loose, 0));
    let store = reopen(dir.path(), &written);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.sample_count(), written.len() as u64);
    assert_eq!(store.torn_tail(), None);
    drop(store);
    assert_eq!(keys(dir.path()), (loose, days));
    let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
    assert!(
        !db.tree_names().iter().any(|n| n == &b"sample_days"[..]),
        "the version 2 tree is dropped"
    );
}

#[test]
fn a_damaged_day_file_or_a_fifo_costs_its_day_and_a_half_written_one_is_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written = record_days(&store, 4);
    drop(store);
    drop(reopen(dir.path(), &written));
    let second_day = codec::day_start(T0) + DAY;
    // A file far longer than any day, and a temporary file a crash left.
    let huge = vec![1u8; 2 * 1024 * 1024];
    std::fs::write(day_file(dir.path(), second_day), &huge).unwrap();
    let tmp = dir
        .path()
        .join("days")
        .join(format!("{second_day}.day.tmp"));
    std::fs::write(&tmp, b"partial").unwrap();
    // And a FIFO in place of the third day, which would block a reader.
    let third_day = second_day + DAY;
    let fifo = day_file(dir.path(), third_day);
    std::fs::remove_file(&fifo).unwrap();
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let store = reopen(dir.path(), &written);
    assert!(!tmp.exists(), "a temporary file is removed at open");
    let kept: Vec<Sample> = written
        .iter()
        .filter(|s| ![second_day, third_day].contains(&codec::day_start(s.time)))
        .copied()
        .collect();
    assert_eq!(store.samples(..).unwrap(), kept);
    assert!(store.corrupt_records_skipped() >= 1);
    // Retention and sealing leave the damaged day as it is.
    store.seal_finished_days().unwrap();
    assert_eq!(
        std::fs::read(day_file(dir.path(), second_day)).unwrap(),
        huge
    );
}

#[test]
fn rows_left_in_both_places_read_once_and_the_loose_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let mut written = record_days(&store, 3);
    drop(store);
    drop(reopen(dir.path(), &written));
    // A crash between writing a day and removing its rows leaves them in
    // both places: one row as it was, one rewritten since.
    let (same, changed) = (written[10], sample(written[20].time, 99.0, 5));
    // And a day value for the newest day (never sealed) holding two of
    // its loose rows' times with other values.
    let newest = *written.last().unwrap();
    let newest_day = codec::day_start(newest.time);
    let before_newest = written[written.len() - 2];
    {
        let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
        let samples = db.open_tree("samples").unwrap();
        for s in [same, changed] {
            samples
                .insert(
                    codec::time_key(s.time),
                    &codec::encode_sample(&s).unwrap()[..],
                )
                .unwrap();
        }
        let stale = [
            sample(before_newest.time, 1.0, 1),
            sample(newest.time, 2.0, 2),
        ];
        db.flush().unwrap();
        std::fs::write(
            day_file(dir.path(), newest_day),
            codec::encode_day_block(newest_day, &stale).unwrap(),
        )
        .unwrap();
    }
    written[20] = changed;
    let store = reopen(dir.path(), &written);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.last_sample().unwrap(), Some(newest));
    assert_eq!(store.corrupt_records_skipped(), 0);
}

#[test]
fn a_row_recorded_into_a_sealed_day_reads_in_order_and_is_sealed_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let mut written = record_days(&store, 3);
    drop(store);
    let store = reopen(dir.path(), &written);
    // A clock stepped back into the first day, which is sealed.
    let late = sample(T0 + 601, 42.0, 4);
    store.record_sample(&late).unwrap();
    written.insert(2, late);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.sample_count(), written.len() as u64);
    let report = store.seal_finished_days().unwrap();
    assert_eq!((report.days, report.rows), (1, 1));
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.sample_count(), written.len() as u64);
    drop(store);
    assert_eq!(keys(dir.path()), expected_keys(&written));
}

#[test]
fn an_import_is_checked_against_sealed_days() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written = record_days(&store, 3);
    drop(store);
    let store = reopen(dir.path(), &written);
    let text = export_text(&store);
    let again = parse_trace(text.as_bytes(), Path::new("again")).unwrap();
    let report = store.import(&again).unwrap();
    assert_eq!(
        (report.added, report.already_present),
        (0, written.len() as u64)
    );

    // One value changed in a sealed day: refused, nothing written.
    let row = written[30];
    let prefix = format!("{},", row.time);
    let changed: String = text
        .lines()
        .map(|line| {
            if line.starts_with(&prefix) {
                format!("{prefix}99,1,1\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    assert_ne!(changed, text);
    let changed = parse_trace(changed.as_bytes(), Path::new("changed")).unwrap();
    let err = store.import(&changed).unwrap_err();
    assert!(
        matches!(err, StoreError::ImportOverlap { time, .. } if time == row.time),
        "{err}"
    );
    assert_eq!(store.samples(..).unwrap(), written);
}

#[test]
fn retention_removes_sealed_days_as_it_removes_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written: Vec<Sample> = (0..100)
        .map(|d| {
            let s = sample(T0 + d * DAY, 1.0, d as u64);
            store.record_sample(&s).unwrap();
            s
        })
        .collect();
    drop(store);
    let store = reopen(dir.path(), &written);
    let now = T0 + 99 * DAY;
    let report = store.compact(now, 56).unwrap();
    let cutoff = now - 56 * DAY;
    let kept = store.samples(..).unwrap();
    assert_eq!(kept.first().unwrap().time, cutoff);
    assert_eq!(kept.len(), 57);
    assert_eq!(report.samples_removed, 43);
    assert_eq!(store.sample_count(), 57);

    // Everything old, and the newest row stays.
    let report = store.compact(now + 365 * DAY, 56).unwrap();
    assert_eq!(report.samples_removed, 56);
    assert_eq!(store.samples(..).unwrap(), vec![written[99]]);
    assert_eq!(store.sample_count(), 1);
}

#[test]
fn retention_cuts_a_sealed_day_at_the_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written = record_days(&store, 4);
    drop(store);
    let store = reopen(dir.path(), &written);
    // A cutoff in the middle of the second UTC day.
    let cutoff = codec::day_start(T0) + DAY + 12 * 3600 + 7;
    let now = cutoff + 56 * DAY;
    let report = store.compact(now, 56).unwrap();
    let kept: Vec<Sample> = written
        .iter()
        .filter(|s| s.time >= cutoff)
        .copied()
        .collect();
    assert_eq!(store.samples(..).unwrap(), kept);
    assert_eq!(report.samples_removed, (written.len() - kept.len()) as u64);
    assert_eq!(store.sample_count(), kept.len() as u64);
}

#[test]
fn a_series_brought_up_to_date_across_a_seal_equals_the_history_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written = record_days(&store, 2);
    let bulk = store.bulk();
    let mut series = bulk.series().unwrap();
    let rows = |s: &gleaner::model::series::HostSeries| s.samples().collect::<Vec<_>>();
    let last = written.last().unwrap().time;
    for i in 1..=150 {
        store
            .record_sample(&sample(last + 600 * i, 3.0, i as u64))
            .unwrap();
    }
    let report = bulk.seal_finished_days().unwrap();
    assert!(report.days >= 2, "{report:?}");
    assert_eq!(bulk.extend_series(&mut series).unwrap(), 150);
    assert_eq!(rows(&series), rows(&bulk.series().unwrap()));
}

#[test]
fn a_reader_never_sees_a_day_twice_or_missing_while_days_are_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let fast = StoreOptions {
        flush_every_record: false,
        ..opts()
    };
    let store = HistoryStore::open(dir.path(), &fast, T0).unwrap();
    let bulk = store.bulk();
    let recorded = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (bulk, recorded, done) = (bulk.clone(), recorded.clone(), done.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) {
                let at_least = recorded.load(Ordering::Acquire);
                let series = bulk.series().unwrap();
                let times: Vec<i64> = series.samples().map(|s| s.time).collect();
                assert!(times.len() >= at_least, "{} < {at_least}", times.len());
                assert!(times.windows(2).all(|w| w[0] < w[1]), "order or twice");
                reads += 1;
            }
            reads
        })
    };
    // A row a minute for six days, sealing every six hours.
    const ROWS: i64 = 6 * 1440;
    for i in 0..ROWS {
        store
            .record_sample(&sample(T0 + 60 * i, 1.0, i as u64))
            .unwrap();
        recorded.store(i as usize + 1, Ordering::Release);
        if i % 360 == 0 {
            bulk.seal_finished_days().unwrap();
        }
    }
    done.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    assert_eq!(store.sample_count(), ROWS as u64);
    assert_eq!(store.samples(..).unwrap().len(), ROWS as usize);
}

#[test]
fn an_import_writes_its_whole_days_as_files_and_a_crash_mid_import_removes_them() {
    // A trace of four days, exported from one store and imported into a
    // new one.
    let source = tempfile::tempdir().unwrap();
    let store = open(source.path(), T0);
    let written = record_days(&store, 4);
    let text = export_text(&store);
    drop(store);
    let trace = parse_trace(text.as_bytes(), Path::new("four-days")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let report = store.import(&trace).unwrap();
    assert_eq!(report.added, written.len() as u64);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.sample_count(), written.len() as u64);
    drop(store);
    // Never one key a row for the whole days: only the last day's rows.
    assert_eq!(keys(dir.path()), expected_keys(&written));

    // The import's mark left behind, as a crash mid-import leaves it.
    {
        let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
        db.open_tree("meta")
            .unwrap()
            .insert(&b"import_bound"[..], &i64::MAX.to_be_bytes()[..])
            .unwrap();
        db.flush().unwrap();
    }
    let store = reopen(dir.path(), &written);
    assert_eq!(store.import_rolled_back(), written.len() as u64);
    assert_eq!(store.sample_count(), 0);
    assert_eq!(store.samples(..).unwrap(), Vec::<Sample>::new());
    drop(store);
    assert_eq!(keys(dir.path()), (0, 0));
}
