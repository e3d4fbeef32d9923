//! The next answers prepared off the answer path (`node::ready`): after a
//! retention pass and when the local date turns, the node's next answer
//! finds its `logistic` fits made (it makes none: counted on the answering
//! thread), equal to the answer made on demand; and a question asked while
//! the cut record is made aside is answered from the held one, without
//! waiting for it.

use super::reader::HostReader;
use super::series::SeriesCache;
use crate::clock::ManualClock;
use crate::history::store::{HistoryStore, StoreOptions};
use crate::model::baselines::{fits_made_here, Logistic};
use crate::model::series::{HostSeries, Sample};
use crate::node::answer::AnswerCache;
use crate::node::config::Config;
use crate::node::ready;
use crate::report::ReportRequest;
use std::sync::Arc;
use std::sync::{mpsc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A Wednesday, 00:00 UTC.
const START: i64 = 1_700_006_400;
const STEP: i64 = 600;
const WINDOW: u64 = 3 * 3600;
const MEM: u64 = 256;

/// Held by the tests that count fits or empty the process's fits, one at
/// a time (the method's cache is the process's: one test's emptying would
/// make another's answer fit).
static FITS: Mutex<()> = Mutex::new(());

/// A host's row at `time`: load 30 % from 09:00 to 12:00 UTC, off from
/// 12:00 to 13:00, and on some days (every third) off from 18:00 to 20:00.
fn row(time: i64) -> Sample {
    let minute = (time - START).rem_euclid(86_400) / 60;
    let day = (time - START).div_euclid(86_400);
    let evening = day % 3 == 0 && (18 * 60..20 * 60).contains(&minute);
    Sample {
        time,
        cpu: if (9 * 60..12 * 60).contains(&minute) {
            30.0
        } else {
            0.0
        },
        free_mib: 4096,
        up: !(12 * 60..13 * 60).contains(&minute) && !evening,
    }
}

/// A store holding `START` up to (not including) `end`, every [`STEP`].
fn store_until(dir: &std::path::Path, end: i64) -> HistoryStore {
    let opts = StoreOptions {
        tz_name: Some("UTC".to_string()),
        step_secs: Some(STEP as u32),
        max_gap_secs: Some(2 * STEP as u64),
        flush_every_record: false,
        ..StoreOptions::default()
    };
    let store = HistoryStore::open(dir, &opts, START).unwrap();
    let mut t = START;
    while t < end {
        store.record_sample(&row(t)).unwrap();
        t += STEP;
    }
    store
}

/// The record the retention tests cut: three weeks and fifteen hours of
/// rows, its last sample (returned with the store) a Wednesday 15:00.
fn three_weeks(dir: &std::path::Path) -> (i64, HistoryStore) {
    let last = START + 21 * 86_400 + 15 * 3600;
    (last, store_until(dir, last + STEP))
}

fn request(config: &Config, at: i64) -> ReportRequest {
    request_for(config, at, MEM)
}

fn request_for(config: &Config, at: i64, mem: u64) -> ReportRequest {
    request_sized(config, at, WINDOW, mem)
}

fn request_sized(config: &Config, at: i64, window_secs: u64, mem: u64) -> ReportRequest {
    ReportRequest::new(config.predict_request(at, window_secs, mem))
}

/// The answer made on demand: every fit made anew.
fn on_demand(series: &HostSeries, request: &ReportRequest) -> crate::node::answer::HostAnswer {
    Logistic::shared().clear_fits();
    AnswerCache::default().answer(series, request).unwrap()
}

#[test]
fn after_a_retention_pass_the_next_answer_makes_no_fit() {
    let _one = FITS.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let (last, store) = three_weeks(dir.path());
    let cache = SeriesCache::new(store.bulk());
    let config = Config::default();
    let answers = AnswerCache::default();
    let now = last + 30;
    // An answer on the record held: its fits are made.
    let held = cache.get(now).unwrap();
    answers.answer(&held, &request(&config, last)).unwrap();
    // Retention of 20 days: the first day and more goes.
    assert!(store.compact(now, 20).unwrap().samples_removed > 0);
    let cutoff = now - 20 * 86_400;
    let placed = cache
        .cut_ahead(now, cutoff, |series| {
            let n = ready::prepare(
                series,
                &[ready::Shape {
                    window_secs: WINDOW,
                    mem_mib: MEM,
                    later: false,
                }],
                last,
                &answers,
                None,
                |at, _, _| request(&config, at),
            );
            assert_eq!(n, 1);
        })
        .unwrap();
    assert!(placed);
    // The record put in place is the store's, row for row.
    let cut = cache.get(now).unwrap();
    let whole = store.bulk().series().unwrap();
    assert!(cut.len() < held.len());
    assert!(cut.samples().eq(whole.samples()));
    let before = fits_made_here();
    let answer = AnswerCache::default()
        .answer(&cut, &request(&config, last))
        .unwrap();
    assert_eq!(fits_made_here(), before, "the answer made fits");
    let again = on_demand(&whole, &request(&config, last));
    assert!(fits_made_here() > before, "on demand makes its fits");
    assert_eq!(answer, again);
}

/// A consumer weighing holds asks a host its TR for windows that start
/// hours on, which the later model answers from fits of its own: after a
/// retention pass, a preparation that replays that shape (`later`) makes
/// them, so the next such answer makes no fit and equals the one made on
/// demand; replaying only the window starting now leaves them to the
/// answer (what the node did before it noted later shapes).
#[test]
fn after_a_retention_pass_the_next_answer_for_a_later_window_makes_no_fit() {
    let _one = FITS.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let (last, store) = three_weeks(dir.path());
    let config = Config::default();
    let now = last + 30;
    assert!(store.compact(now, 20).unwrap().samples_removed > 0);
    let cut = store.bulk().series().unwrap();
    let later_start = last + 5 * 3600;
    let shape = |later| ready::Shape {
        window_secs: WINDOW,
        mem_mib: MEM,
        later,
    };
    for (prepared, makes_fits) in [
        (vec![shape(false)], true),
        (vec![shape(false), shape(true)], false),
    ] {
        Logistic::shared().clear_fits();
        let answers = AnswerCache::default();
        let n = ready::prepare(&cut, &prepared, last, &answers, None, |at, _, _| {
            request(&config, at)
        });
        assert_eq!(n, prepared.len());
        let before = fits_made_here();
        let answer = AnswerCache::default()
            .answer(&cut, &request(&config, later_start))
            .unwrap();
        assert_eq!(
            fits_made_here() > before,
            makes_fits,
            "{prepared:?}: fits made by the later answer"
        );
        assert_eq!(answer, on_demand(&cut, &request(&config, later_start)));
    }
}

#[test]
fn a_question_while_the_cut_record_is_made_reads_the_held_one() {
    let _one = FITS.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let (last, store) = three_weeks(dir.path());
    let cache = Arc::new(SeriesCache::new(store.bulk()));
    let config = Config::default();
    let now = last + 30;
    let held = cache.get(now).unwrap();
    assert!(store.compact(now, 20).unwrap().samples_removed > 0);
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let cutter = {
        let cache = cache.clone();
        std::thread::spawn(move || {
            cache.cut_ahead(now, now - 20 * 86_400, |_| {
                started_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            })
        })
    };
    started_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    // Asked while the cut record is being prepared, more than the minute
    // after which the held record is otherwise brought up to the store:
    // answered at once, from the record held (the cut one is not in place
    // yet, and the store no longer holds the held one's first rows).
    let (tx, rx) = mpsc::channel();
    {
        let (cache, config) = (cache.clone(), config.clone());
        std::thread::spawn(move || {
            let series = cache.get(now + 90).unwrap();
            let answer = AnswerCache::default().answer(&series, &request(&config, last));
            tx.send((series.len(), answer.is_ok())).unwrap();
        });
    }
    let (rows, answered) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the question waited for the cut record");
    assert_eq!(rows, held.len(), "not the record held");
    assert!(answered);
    go_tx.send(()).unwrap();
    assert!(cutter.join().unwrap().unwrap());
    let cut = cache.get(now + 90).unwrap();
    assert!(cut.samples().eq(store.bulk().series().unwrap().samples()));
    assert!(cut.len() < held.len());
}

#[test]
fn a_reading_in_a_new_day_makes_the_days_fits_before_it_is_asked() {
    let _one = FITS.lock().unwrap_or_else(PoisonError::into_inner);
    // Another memory than the other tests' (their fits are for the same
    // rows before this midnight).
    const MEM_HERE: u64 = 512;
    let dir = tempfile::tempdir().unwrap();
    let midnight = START + 21 * 86_400;
    let store = store_until(dir.path(), midnight);
    let cache = Arc::new(SeriesCache::new(store.bulk()));
    let config = Config::default();
    let clock = Arc::new(ManualClock::at(midnight - 30));
    let tracker = TaskTracker::new();
    let reader = HostReader::new(
        Arc::downgrade(&cache),
        Arc::new(config.clone()),
        clock.clone(),
        tracker.clone(),
        CancellationToken::new(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Asked the evening before.
        reader
            .reliability(midnight - STEP, WINDOW, MEM_HERE)
            .await
            .unwrap();
        // The first reading of the new day: the day's fits made off the answers.
        store.record_sample(&row(midnight)).unwrap();
        clock.set(midnight + 5);
        reader.reading_at(midnight);
        tracker.close();
        tracker.wait().await;
    });
    // The record with the new day's reading (the answers' series reaches
    // it within a minute).
    let series = cache.get_through(midnight + 5, midnight).unwrap();
    assert_eq!(series.last_time(), Some(midnight));
    let asked = request_for(&config, midnight, MEM_HERE);
    let before = fits_made_here();
    let answer = reader.answers().answer(&series, &asked).unwrap();
    assert_eq!(fits_made_here(), before, "the day's first answer made fits");
    assert_eq!(answer, on_demand(&series, &asked));
}

/// A question of a length never asked makes one fit, not five: the
/// curve's other points lie on the summary's ladder, whose fits the
/// summary's own two questions made.
#[test]
fn a_new_length_after_the_summarys_questions_makes_one_fit() {
    use crate::node::pool_host::publish::LADDER_ASKS_SECS;
    let _one = FITS.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let (last, store) = three_weeks(dir.path());
    let series = store.bulk().series().unwrap();
    let config = Config::default();
    let ask = |secs: u64| request_sized(&config, last, secs, MEM);
    Logistic::shared().clear_fits();
    let answers = AnswerCache::default();
    for secs in LADDER_ASKS_SECS {
        answers.answer(&series, &ask(secs)).unwrap();
    }
    let before = fits_made_here();
    let answer = answers.answer(&series, &ask(3 * 3600)).unwrap();
    assert_eq!(
        fits_made_here() - before,
        1,
        "the curve {:?} made fits of its own",
        answer.curve
    );
    assert_eq!(answer.curve.len(), 5, "{:?}", answer.curve);
}
