//! Integration tests of the sled history store: real sled databases in temp
//! dirs, a scripted clock (times are passed in), and one real `kill -9`.

use gleaner::history::codec;
use gleaner::history::store::{
    DownInterval, HistoryStore, JobEvent, StoreError, StoreOptions, DEFAULT_RETENTION_DAYS,
};
use gleaner::history::trace::parse_trace;
use gleaner::model::series::Sample;
use gleaner::model::state::{State, Thresholds};
use rand::Rng;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const T0: i64 = 1_700_000_000;

pub(crate) fn opts() -> StoreOptions {
    StoreOptions {
        host: Some("lab-07".to_string()),
        tz_name: Some("America/Indiana/Indianapolis".to_string()),
        step_secs: Some(6),
        max_gap_secs: Some(120),
        ..StoreOptions::default()
    }
}

pub(crate) fn open(dir: &Path, now: i64) -> HistoryStore {
    HistoryStore::open(dir, &opts(), now).unwrap()
}

pub(crate) fn sample(time: i64, cpu: f64, free_mib: u64) -> Sample {
    Sample {
        time,
        cpu,
        free_mib,
        up: true,
    }
}

/// Samples every 6 s from `start`, with loads that vary so rows differ.
fn record_run(store: &HistoryStore, start: i64, n: i64) -> Vec<Sample> {
    (0..n)
        .map(|i| {
            let s = sample(start + 6 * i, (i % 37) as f64 * 1.25, 800 + i as u64);
            store.record_sample(&s).unwrap();
            s
        })
        .collect()
}

pub(crate) fn export_text(store: &HistoryStore) -> String {
    let mut buf = Vec::new();
    store.export(&mut buf).unwrap();
    String::from_utf8(buf).unwrap()
}

#[test]
fn samples_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let written = record_run(&store, T0, 50);
    store
        .record_sample(&sample(T0 + 300, 12.34567, u64::MAX))
        .unwrap();
    let read = store.samples(..).unwrap();
    assert_eq!(&read[..50], &written[..]);
    // The store keeps the load at 0.01 % resolution and free memory exactly.
    assert_eq!(read[50], sample(T0 + 300, 12.35, u64::MAX));
    assert_eq!(
        store.samples(T0 + 6..T0 + 18).unwrap(),
        written[1..3].to_vec()
    );
    assert_eq!(store.heartbeat().unwrap(), Some(T0 + 300));
    assert_eq!(store.corrupt_records_skipped(), 0);
}

#[test]
fn a_series_brought_up_to_date_equals_the_history_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    record_run(&store, T0, 200);
    let bulk = store.bulk();
    let mut series = bulk.series().unwrap();
    let rows = |s: &gleaner::model::series::HostSeries| s.samples().collect::<Vec<_>>();
    // The series' last row rewritten, and fifty rows after it.
    store.record_sample(&sample(T0 + 6 * 199, 99.0, 5)).unwrap();
    record_run(&store, T0 + 6 * 200, 50);
    assert_eq!(bulk.extend_series(&mut series).unwrap(), 50);
    assert_eq!(rows(&series), rows(&bulk.series().unwrap()));
    assert_eq!(series.get(199).unwrap().cpu, 99.0);
    // Held for as long as the node runs: no room beyond the rows (and the
    // one a rewritten row reserved).
    assert!(series.heap_bytes() <= (series.len() + 1) * (8 + 8 + 4 + 1));
    // A row before the series' last one (a clock stepped back) is not lost.
    store.record_sample(&sample(T0 + 3, 50.0, 7)).unwrap();
    bulk.extend_series(&mut series).unwrap();
    assert_eq!(rows(&series), rows(&bulk.series().unwrap()));
    assert_eq!(series.len(), 251);
}

#[test]
fn bad_samples_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    for cpu in [f64::NAN, -1.0, 100.5] {
        assert!(matches!(
            store.record_sample(&sample(T0, cpu, 1)),
            Err(StoreError::BadSample { .. })
        ));
    }
    assert_eq!(store.sample_count(), 0);
}

#[test]
fn reopen_keeps_history_and_job_log() {
    let dir = tempfile::tempdir().unwrap();
    let written;
    let events = vec![
        JobEvent {
            time: T0 + 10,
            job: "job-1".into(),
            kind: "started".into(),
            detail: String::new(),
        },
        JobEvent {
            time: T0 + 10,
            job: "job-1".into(),
            kind: "reniced".into(),
            detail: "S2".into(),
        },
        JobEvent {
            time: T0 + 70,
            job: "job-1".into(),
            kind: "killed".into(),
            detail: "S3 after 60 s above Th2".into(),
        },
    ];
    {
        let store = open(dir.path(), T0);
        written = record_run(&store, T0, 20);
        store.record_transition(T0, State::S1).unwrap();
        store.record_transition(T0 + 60, State::S3).unwrap();
        for e in &events {
            store.record_job_event(e).unwrap();
        }
    }
    let store = open(dir.path(), T0 + 6 * 20);
    assert_eq!(store.gap_on_open(), None);
    assert_eq!(store.samples(..).unwrap(), written);
    assert_eq!(store.job_events(..).unwrap(), events);
    assert_eq!(store.job_events(T0 + 10..=T0 + 10).unwrap(), events[..2]);
    assert_eq!(store.job_events(T0 + 11..).unwrap(), events[2..]);
    assert_eq!(
        store.transitions(..).unwrap(),
        vec![(T0, State::S1), (T0 + 60, State::S3)]
    );
    assert_eq!(store.meta().host.as_deref(), Some("lab-07"));
    // Options left out keep what the store holds.
    drop(store);
    let store = HistoryStore::open(dir.path(), &StoreOptions::default(), T0 + 120).unwrap();
    assert_eq!(store.meta().tz_name, "America/Indiana/Indianapolis");
    assert_eq!(store.meta().max_gap_secs, 120);
}

#[test]
fn a_long_silence_on_reopen_is_recorded_as_revocation() {
    let dir = tempfile::tempdir().unwrap();
    let last;
    {
        let store = open(dir.path(), T0);
        last = record_run(&store, T0, 11).last().unwrap().time;
    }
    let back = T0 + 5_000;
    let store = open(dir.path(), back);
    let gap = DownInterval {
        from: last + 6,
        until: back,
    };
    assert_eq!(store.gap_on_open(), Some(gap));
    store.record_sample(&sample(back, 5.0, 900)).unwrap();
    assert_eq!(store.transitions(..).unwrap(), vec![(last + 6, State::S5)]);

    let trace = parse_trace(export_text(&store).as_bytes(), Path::new("export")).unwrap();
    let down = trace
        .series
        .get(trace.series.row_at(last + 6).unwrap())
        .unwrap();
    assert_eq!((down.time, down.up), (last + 6, false));
    let th = Thresholds::default();
    assert_eq!(trace.series.state_at(th, last), Some(State::S1));
    for t in [last + 6, last + 1_000, back - 1] {
        assert_eq!(trace.series.state_at(th, t), Some(State::S5), "t = {t}");
    }
    assert_eq!(trace.series.state_at(th, back), Some(State::S1));

    // Opening again before any new sample does not add a second interval.
    drop(store);
    let store = open(dir.path(), back + 1);
    assert_eq!(store.gap_on_open(), None);
}

#[test]
fn a_short_restart_is_not_a_revocation() {
    let dir = tempfile::tempdir().unwrap();
    let last;
    {
        let store = open(dir.path(), T0);
        last = record_run(&store, T0, 5).last().unwrap().time;
    }
    let store = open(dir.path(), last + 120);
    assert_eq!(store.gap_on_open(), None);
    assert_eq!(store.sample_count(), 5);
    assert!(store.transitions(..).unwrap().is_empty());
}

#[test]
fn pause_and_resume_withhold_the_machine() {
    let dir = tempfile::tempdir().unwrap();
    let paused_at = T0 + 60;
    {
        let mut store = open(dir.path(), T0);
        record_run(&store, T0, 10);
        assert!(store.pause(paused_at, None).unwrap());
        assert!(
            !store.pause(paused_at + 1, None).unwrap(),
            "second pause is a no-op"
        );
        assert!(store.is_paused());
        // The monitor keeps sampling while paused: only the heartbeat moves.
        store.record_sample(&sample(paused_at + 6, 1.0, 1)).unwrap();
        assert_eq!(store.heartbeat().unwrap(), Some(paused_at + 6));
        assert_eq!(store.sample_count(), 11);
    }
    // Still paused after a restart long after; the down row already says so.
    let mut store = open(dir.path(), T0 + 10_000);
    assert!(store.is_paused());
    assert_eq!(store.gap_on_open(), None);
    assert!(store.resume(T0 + 10_000).unwrap());
    assert!(!store.resume(T0 + 10_001).unwrap());
    assert!(!store.is_paused());
    store.record_sample(&sample(T0 + 10_006, 2.0, 700)).unwrap();

    let rows = store.samples(paused_at..).unwrap();
    assert_eq!(
        rows,
        vec![
            Sample {
                time: paused_at,
                cpu: 0.0,
                free_mib: 0,
                up: false
            },
            sample(T0 + 10_006, 2.0, 700),
        ]
    );
    assert_eq!(store.transitions(..).unwrap(), vec![(paused_at, State::S5)]);
    let series = store.to_trace().unwrap().series;
    let th = Thresholds::default();
    assert_eq!(series.state_at(th, paused_at - 1), Some(State::S1));
    assert_eq!(series.state_at(th, T0 + 5_000), Some(State::S5));
    assert_eq!(series.state_at(th, T0 + 10_006), Some(State::S1));
}

#[test]
fn retention_drops_old_rows_and_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let day = 86_400;
    let store = open(dir.path(), T0);
    // One sample a day for 100 days, then a transition and job event per day.
    for d in 0..100 {
        let t = T0 + d * day;
        store.record_sample(&sample(t, 1.0, d as u64)).unwrap();
        store.record_transition(t, State::S1).unwrap();
        store
            .record_job_event(&JobEvent {
                time: t,
                job: format!("j{d}"),
                kind: "started".into(),
                detail: String::new(),
            })
            .unwrap();
    }
    let now = T0 + 99 * day;
    let report = store.compact(now, DEFAULT_RETENTION_DAYS).unwrap();
    let cutoff = now - 56 * day;
    let kept = store.samples(..).unwrap();
    assert_eq!(kept.first().unwrap().time, cutoff);
    assert_eq!(kept.len(), 57);
    assert_eq!(report.samples_removed, 43);
    assert_eq!(report.transitions_removed, 43);
    assert_eq!(report.job_events_removed, 43);
    assert_eq!(store.job_events(..).unwrap().len(), 57);

    // Long silence: everything is old, but the newest sample stays.
    let report = store.compact(now + 365 * day, 56).unwrap();
    assert_eq!(report.samples_removed, 56);
    assert_eq!(store.samples(..).unwrap(), vec![sample(now, 1.0, 99)]);
    assert_eq!(store.transitions(..).unwrap(), vec![(now, State::S1)]);
    assert!(store.job_events(..).unwrap().is_empty());
}

#[test]
fn export_parse_import_round_trip_is_exact() {
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    {
        let store = open(a_dir.path(), T0);
        record_run(&store, T0, 200);
    }
    let a = open(a_dir.path(), T0 + 20_000); // leaves a recorded gap
    a.record_sample(&sample(T0 + 20_000, 99.99, 1)).unwrap();
    let text = export_text(&a);
    assert!(text.contains("# host: lab-07"), "{text}");
    assert!(text.contains(",0,0,0\n"), "the gap row is exported: {text}");

    let trace = parse_trace(text.as_bytes(), Path::new("a.csv")).unwrap();
    let b = open(b_dir.path(), T0);
    let report = b.import(&trace).unwrap();
    assert_eq!(report.added, 202);
    assert_eq!(b.samples(..).unwrap(), a.samples(..).unwrap());
    assert_eq!(export_text(&b), text);
    // The seeded node's heartbeat is the trace's end.
    assert_eq!(b.heartbeat().unwrap(), Some(T0 + 20_000));

    // Importing the same trace again changes nothing.
    let again = b.import(&trace).unwrap();
    assert_eq!((again.added, again.already_present), (0, 202));
    assert_eq!(export_text(&b), text);
}

#[test]
fn import_never_overwrites_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    record_run(&store, T0, 10);
    let before = store.samples(..).unwrap();

    let overlapping = "# gleaner-trace v1\ntime,cpu,free_mib,up\n\
                       1699999000,1,1,1\n1700000006,50,1,1\n";
    let trace = parse_trace(overlapping.as_bytes(), Path::new("o")).unwrap();
    let err = store.import(&trace).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::ImportOverlap {
                time: 1_700_000_006,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.samples(..).unwrap(), before, "nothing written");

    let older = "# gleaner-trace v1\ntime,cpu,free_mib,up\n1699999000,1,1,1\n1699999006,2,2,1\n";
    let trace = parse_trace(older.as_bytes(), Path::new("p")).unwrap();
    assert_eq!(store.import(&trace).unwrap().added, 2);
    assert_eq!(store.sample_count(), 12);
    assert_eq!(store.samples(T0..).unwrap(), before);
    assert_eq!(store.heartbeat().unwrap(), before.last().map(|s| s.time));
}

#[test]
fn corrupt_records_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path(), T0);
        record_run(&store, T0, 10);
        store.record_transition(T0, State::S1).unwrap();
    }
    {
        // Damage the database behind the store's back.
        let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
        let samples = db.open_tree("samples").unwrap();
        samples
            .insert(codec::time_key(T0 + 6), &b"garbage"[..])
            .unwrap();
        samples.insert(&b"bad key"[..], &[0u8; 11][..]).unwrap();
        let mut flags = [0u8; 11];
        flags[10] = 0xff;
        samples.insert(codec::time_key(T0 + 7), &flags[..]).unwrap();
        db.open_tree("transitions")
            .unwrap()
            .insert(codec::time_key(T0 + 1), &[9u8][..])
            .unwrap();
        db.open_tree("jobs")
            .unwrap()
            .insert(codec::job_key(T0, 1), &b"{not json"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let store = open(dir.path(), T0 + 60);
    let text = export_text(&store);
    let trace = parse_trace(text.as_bytes(), Path::new("x")).unwrap();
    assert_eq!(trace.series.len(), 9, "the damaged row is left out");
    assert_eq!(store.transitions(..).unwrap(), vec![(T0, State::S1)]);
    assert!(store.job_events(..).unwrap().is_empty());
    // The garbage sample, the bad key, the bad flags, the state, the job event.
    assert_eq!(store.corrupt_records_skipped(), 5);
}

#[test]
fn corrupt_metadata_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), T0));
    {
        let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
        db.open_tree("meta")
            .unwrap()
            .insert(&b"step"[..], &b"abcdefg"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let err = HistoryStore::open(dir.path(), &StoreOptions::default(), T0)
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(msg.contains("`step` is corrupt"), "{msg}");
    assert!(msg.contains("7 bytes"), "{msg}");

    {
        let db = gleaner::sled_open::open_dir(dir.path()).unwrap();
        let meta = db.open_tree("meta").unwrap();
        meta.insert(&b"step"[..], &6u32.to_be_bytes()[..]).unwrap();
        meta.insert(&b"format_version"[..], &4u32.to_be_bytes()[..])
            .unwrap();
        db.flush().unwrap();
    }
    let err = HistoryStore::open(dir.path(), &StoreOptions::default(), T0)
        .err()
        .unwrap();
    assert!(
        matches!(err, StoreError::UnsupportedVersion { found: 4, .. }),
        "{err}"
    );
}

#[test]
fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad_tz = StoreOptions {
        tz_name: Some("Mars/Olympus".into()),
        ..StoreOptions::default()
    };
    assert!(matches!(
        HistoryStore::open(dir.path(), &bad_tz, T0),
        Err(StoreError::UnknownTimeZone(_))
    ));
    let bad_step = StoreOptions {
        step_secs: Some(0),
        ..StoreOptions::default()
    };
    assert!(matches!(
        HistoryStore::open(dir.path(), &bad_step, T0),
        Err(StoreError::BadOption(_))
    ));
}

const CRASH_CHILD_ENV: &str = "GLEANER_CRASH_CHILD";
const CRASH_TEST: &str = "kill_9_loses_at_most_the_last_sample";

/// In the child: record a sample a millisecond apart forever, printing each
/// time once `record_sample` (and so its flush) has returned.
fn crash_child(dir: &Path) {
    let store = HistoryStore::open(dir, &opts(), T0).unwrap();
    let start = store.last_sample().unwrap().map_or(T0, |s| s.time + 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut t = start;
    while Instant::now() < deadline {
        store.record_sample(&sample(t, 12.5, t as u64)).unwrap();
        // libtest may print its own text ahead of the first line, and a kill can
        // cut the last one: the reader takes only complete "recorded T ok" marks.
        println!("recorded {t} ok");
        t += 1;
    }
}

#[test]
fn kill_9_loses_at_most_the_last_sample() {
    if let Some(dir) = std::env::var_os(CRASH_CHILD_ENV) {
        crash_child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut reported: Vec<i64> = Vec::new();
    for round in 0..4 {
        let wait_ms = rng.random_range(50..600);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &crate::test_name(module_path!(), CRASH_TEST)])
            .args(["--nocapture", "--test-threads=1"])
            .env(CRASH_CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| {
                    let (_, mark) = l.split_once("recorded ")?;
                    mark.strip_suffix(" ok")?.parse::<i64>().ok()
                })
                .collect::<Vec<_>>()
        });
        // Wait until the child is writing, then kill it at a random moment.
        std::thread::sleep(Duration::from_millis(300 + wait_ms));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let this_round = reader.join().unwrap();
        assert!(
            !this_round.is_empty(),
            "round {round}: child recorded nothing"
        );
        reported.extend(this_round);

        let last_reported = *reported.last().unwrap();
        let store = open(dir.path(), last_reported + 1);
        let stored: Vec<i64> = store.samples(..).unwrap().iter().map(|s| s.time).collect();
        // Every reported sample is there; at most one more (being written at the kill).
        assert!(
            stored.len() == reported.len() || stored.len() == reported.len() + 1,
            "round {round} (waited {wait_ms} ms): {} reported, {} stored; reported tail {:?}, stored tail {:?}",
            reported.len(),
            stored.len(),
            &reported[reported.len().saturating_sub(3)..],
            &stored[stored.len().saturating_sub(4)..]
        );
        assert_eq!(&stored[..reported.len()], &reported[..], "round {round}");
        assert_eq!(store.corrupt_records_skipped(), 0);
        if stored.len() > reported.len() {
            // Keep the unreported sample in the count for later rounds.
            reported.push(stored[reported.len()]);
        }
        eprintln!(
            "round {round}: killed after {wait_ms}+300 ms, {} samples stored",
            stored.len()
        );
    }
}

#[test]
fn a_trace_with_coarser_sampling_keeps_its_meaning_when_imported() {
    // Rows every 300 s, silences up to 900 s still up: a store that reads
    // rows with a 120 s max_gap must not see this host as always down.
    let text = format!(
        "# gleaner-trace v1\n# step: 300\n# max_gap: 900\ntime,cpu,free_mib,up\n\
         {},5,800,1\n{},30,800,1\n{},90,800,1\n{},5,800,1\n{},5,800,1\n",
        T0 - 10_000,
        T0 - 9_700,
        T0 - 9_400,
        T0 - 9_100,
        T0 - 7_000, // 2100 s after the previous row: down from +300 s
    );
    let trace = parse_trace(text.as_bytes(), Path::new("coarse.csv")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0 - 20_000);
    store.import(&trace).unwrap();
    let meta = store.meta().clone();
    assert!(
        meta.max_gap_secs < 300,
        "the test needs a store with a finer gap rule"
    );
    let stored = store
        .to_series(meta.tz.clone(), meta.step_secs, meta.max_gap_secs)
        .unwrap();
    let th = Thresholds::default();
    for t in (T0 - 10_000)..=(T0 - 7_000) {
        assert_eq!(
            stored.state_at(th, t),
            trace.series.state_at(th, t),
            "state at {t}"
        );
    }
    assert_eq!(stored.state_at(th, T0 - 9_000), Some(State::S1));
    assert_eq!(stored.state_at(th, T0 - 8_000), Some(State::S5));
    assert_eq!(stored.state_at(th, T0 - 9_500), Some(State::S2));
}

/// Cuts the last `bytes` bytes of written data from the end of sled's log
/// (`db`), as a torn write at power loss leaves it: the file keeps its size
/// (sled preallocates) but the tail reads as zeros.
fn tear_log_tail(dir: &Path, bytes: u64) {
    use std::os::unix::fs::FileExt;
    let path = dir.join("db");
    let data = std::fs::read(&path).unwrap();
    let end = data.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let from = end.saturating_sub(bytes);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&vec![0u8; (end - from) as usize], from)
        .unwrap();
    file.sync_all().unwrap();
}

#[test]
fn a_torn_tail_of_the_store_is_counted_and_reported_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let store = open(dir.path(), T0);
        record_run(&store, T0, 200).len() as u64
    };
    // Give sled's background flusher time to let go of the files.
    std::thread::sleep(Duration::from_millis(600));
    tear_log_tail(dir.path(), 400);
    let store = open(dir.path(), T0 + 6 * 200);
    let found = store.sample_count();
    // sled recovers by dropping the torn records, silently: rows are gone.
    assert!(found < written, "nothing was lost ({found} of {written})");
    let torn = store
        .torn_tail()
        .expect("the lost rows at the end of the store are reported");
    assert_eq!(torn.lost, written - found, "{torn:?}");
    assert_eq!(torn.last_time_before, T0 + 6 * 199);
    assert!(
        torn.last_time_now.is_some_and(|t| t < T0 + 6 * 199),
        "{torn:?}"
    );
    drop(store);
    // Reported once: the next open finds the mark moved to what is there.
    std::thread::sleep(Duration::from_millis(600));
    let store = open(dir.path(), T0 + 6 * 201);
    assert_eq!(store.torn_tail(), None);
}

#[test]
fn retention_is_not_mistaken_for_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path(), T0);
        record_run(&store, T0, 100);
        store.compact(T0 + 86_400 * 60, 56).unwrap();
    }
    std::thread::sleep(Duration::from_millis(600));
    let store = open(dir.path(), T0 + 6 * 100);
    assert_eq!(store.torn_tail(), None);
    assert_eq!(store.sample_count(), 1);
}

#[test]
fn a_big_import_streams_from_a_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), T0);
    let trace = dir.path().join("seed.csv");
    let mut text =
        String::from("# gleaner-trace v1\n# step: 6\n# max_gap: 120\ntime,cpu,free_mib,up\n");
    for i in 0..25_000i64 {
        text.push_str(&format!(
            "{},{},{},1\n",
            T0 - 200_000 + 6 * i,
            i % 90,
            500 + i % 300
        ));
    }
    std::fs::write(&trace, &text).unwrap();
    let r = store
        .import_file(&trace, Path::new("my-trace.csv"))
        .unwrap();
    assert_eq!((r.added, r.already_present), (25_000, 0));
    assert_eq!(store.sample_count(), 25_000);
    // Repeating it is harmless.
    let r = store
        .import_file(&trace, Path::new("my-trace.csv"))
        .unwrap();
    assert_eq!((r.added, r.already_present), (0, 25_000));
    // A bad row deep in the file: refused whole, named by the user's name and line.
    let older = dir.path().join("older.csv");
    let mut bad = String::from("# gleaner-trace v1\ntime,cpu,free_mib,up\n");
    for i in 0..15_000i64 {
        bad.push_str(&format!("{},5,500,1\n", T0 - 900_000 + 6 * i));
    }
    bad.push_str("x,5,500,1\n");
    std::fs::write(&older, &bad).unwrap();
    let e = store
        .import_file(&older, Path::new("given-name.csv"))
        .unwrap_err();
    assert!(e.to_string().starts_with("given-name.csv:15003:"), "{e}");
    assert_eq!(store.sample_count(), 25_000, "a refused import wrote rows");
}
