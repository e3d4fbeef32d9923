//! Answers prepared ahead (issue 29, goal 6: ≤ 1 ms an answer as the node
//! answers): what the node's next answers will need is made off the answer
//! path, on the blocking pool, when the record changes in a way that makes
//! the kept models stale, so an answer finds them ready.
//!
//! What goes stale, and when (the caches the answer reads):
//! - `logistic`'s fits are keyed by the record before the window's local
//!   midnight: a new local date (the day rolls over) and a retention pass
//!   (the record's front is cut) each want five new fits per question
//!   shape (window length and job memory), 3–5 ms of CPU together;
//! - the week's spells are kept for an hour ([`AnswerCache`]): the first
//!   answer of each hour reads them again (about 0.6 ms at 6 s steps).
//!
//! So the node (its host loop, the driver) asks [`prepare_due`] at each
//! reading whether the hour or the local date has turned since the last
//! preparation, and after a retention pass cuts the record it makes the cut
//! record aside and prepares it before answers read it (`series`'s
//! `retained`). A preparation replays the questions asked recently
//! ([`Questions`]) at the reading's time on the record as it is then, with
//! the node's own answer path ([`prepare`]): the fits, the table of the
//! record's hours and the spells it makes are the ones a later answer on
//! the same record looks up, so that answer is the one computed on demand,
//! to the bit (the caches are keyed by the record they were made from).
//!
//! What "valid" means for the model an answer reads while a preparation
//! runs: after a retention pass, the record before the cut (at most one
//! retention pass old, and at most [`super::host_loop`]'s two minutes of
//! rows behind) with its ready fits, until the cut record is prepared; after
//! the date turns, no earlier model is valid (yesterday's fit was made for
//! yesterday's hours and weights), so an answer that comes before the
//! preparation has made the day's fits makes them itself, as every answer
//! did before, and the preparation then finds them made.
//!
//! The decisions here are pure; the effects (spawning, the record, the
//! caches) are the driver's (`host_loop::reader`).

use crate::model::baselines::pool_prior::PoolPrior;
use crate::model::series::HostSeries;
use crate::node::answer::AnswerCache;
use crate::report::ReportRequest;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};

/// A question shape is replayed while it was asked within this long.
pub const REPLAY_SECS: i64 = 86_400;
/// Most question shapes kept (the pool host's summary asks 15: three
/// memories, five lengths; peers' questions add theirs).
pub const MAX_QUESTIONS: usize = 48;
/// The spells' hour ([`AnswerCache`] keeps them per UTC hour).
const HOUR_SECS: i64 = 3_600;

/// How far on a window starting later is prepared: past the time within
/// which a window reads as starting now (`baselines::later::NOW_SECS`), so
/// the answer is the later model's, whose fits (one per window length,
/// job memory and record, whatever the start) every later start then finds.
pub const LATER_PREPARED_SECS: i64 = 3_600;

/// A question shape: the window's length, the job's memory, and whether
/// the window starts later than now (a consumer weighing holds asks its
/// later windows; the node's fits for those are the later model's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub window_secs: u64,
    pub mem_mib: u64,
    pub later: bool,
}

/// A question shape and when it was last asked (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub shape: Shape,
    pub last_at: i64,
}

/// The question shapes asked recently, newest first.
#[derive(Debug, Clone, Default)]
pub struct Questions {
    asked: Vec<Asked>,
}

impl Questions {
    /// Notes a question of `shape` asked at `at`; the oldest shape goes
    /// when there are more than [`MAX_QUESTIONS`].
    pub fn note(&mut self, shape: Shape, at: i64) {
        self.asked.retain(|a| a.shape != shape);
        self.asked.insert(0, Asked { shape, last_at: at });
        self.asked.truncate(MAX_QUESTIONS);
    }

    /// The shapes to prepare at `now`: those asked within [`REPLAY_SECS`]
    /// before it (or after it, should the clock have stepped back).
    pub fn recent(&self, now: i64) -> Vec<Shape> {
        self.asked
            .iter()
            .filter(|a| now.saturating_sub(a.last_at) <= REPLAY_SECS)
            .map(|a| a.shape)
            .collect()
    }
}

/// When what is prepared at `at` goes stale: the next UTC hour (the
/// spells' key) or the next local midnight of `series`' zone (the fits'
/// date), whichever comes first.
pub fn stale_at(series: &HostSeries, at: i64) -> i64 {
    let hour = (at.div_euclid(HOUR_SECS) + 1).saturating_mul(HOUR_SECS);
    let midnight = jiff::Timestamp::from_second(at)
        .ok()
        .map(|t| t.to_zoned(series.tz.clone()).date())
        .and_then(|d| d.tomorrow().ok())
        .and_then(|d| d.to_zoned(series.tz.clone()).ok())
        .map(|z| z.timestamp().as_second());
    midnight.map_or(hour, |m| m.min(hour))
}

/// Whether a reading at `time` calls for a preparation: what was prepared
/// goes stale at `stale` (`i64::MIN`: nothing prepared yet) and some
/// question was asked.
pub fn prepare_due(time: i64, stale: i64, asked: bool) -> bool {
    asked && time >= stale
}

/// Answers each of `questions` at `at` on `series` through `answers` (a
/// shape asked for a later window, for one starting
/// [`LATER_PREPARED_SECS`] after `at`), as the node answers a peer: the
/// fits, the table of the record's hours and the spells this makes are
/// kept where the next answers on the same record look them up. The answers
/// themselves are not kept (one kept for `at`'s minute would be given for
/// another time in it: not the answer made on demand). `request` makes a
/// question's request as the node does. Returns how many were answered.
pub fn prepare(
    series: &HostSeries,
    questions: &[Shape],
    at: i64,
    answers: &AnswerCache,
    pool: Option<&PoolPrior>,
    request: impl Fn(i64, u64, u64) -> ReportRequest,
) -> usize {
    let mut answered = 0;
    for q in questions {
        let start = if q.later {
            at.saturating_add(LATER_PREPARED_SECS)
        } else {
            at
        };
        let asked = request(start, q.window_secs, q.mem_mib);
        if answers.answer_with_prior(series, &asked, pool).is_ok() {
            answered += 1;
        }
    }
    answered
}

/// What the node keeps to prepare ahead: the questions asked, when the
/// last preparation goes stale, and whether one is running (one at a time).
#[derive(Debug)]
pub struct Ahead {
    questions: Mutex<Questions>,
    stale: AtomicI64,
    running: AtomicBool,
}

impl Default for Ahead {
    fn default() -> Self {
        Ahead {
            questions: Mutex::new(Questions::default()),
            stale: AtomicI64::new(i64::MIN),
            running: AtomicBool::new(false),
        }
    }
}

impl Ahead {
    /// Notes a question of `shape` asked at `at`.
    pub fn note(&self, shape: Shape, at: i64) {
        self.questions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .note(shape, at);
    }

    /// The question shapes to prepare at `now`.
    pub fn recent(&self, now: i64) -> Vec<Shape> {
        self.questions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recent(now)
    }

    /// Whether a reading at `time` calls for a preparation ([`prepare_due`]).
    pub fn due(&self, time: i64) -> bool {
        let asked = !self.recent(time).is_empty();
        prepare_due(time, self.stale.load(Ordering::Acquire), asked)
    }

    /// Claims the one preparation: true when the caller should run it (and
    /// then call [`Self::done`]).
    pub fn claim(&self) -> bool {
        !self.running.swap(true, Ordering::AcqRel)
    }

    /// The claimed preparation has finished; what it made goes stale at
    /// `stale` (`None`: it made nothing, try again at the next reading).
    pub fn done(&self, stale: Option<i64>) {
        if let Some(stale) = stale {
            self.stale.store(stale, Ordering::Release);
        }
        self.running.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::tz::TimeZone;

    fn now(window_secs: u64, mem_mib: u64) -> Shape {
        Shape {
            window_secs,
            mem_mib,
            later: false,
        }
    }

    #[test]
    fn questions_are_kept_newest_first_for_a_day() {
        let mut q = Questions::default();
        q.note(now(3600, 256), 1_000);
        q.note(now(36_000, 256), 2_000);
        q.note(now(3600, 256), 3_000);
        assert_eq!(q.recent(3_000), vec![now(3600, 256), now(36_000, 256)]);
        // The 10 h question was last asked more than a day before.
        assert_eq!(q.recent(2_001 + REPLAY_SECS), vec![now(3600, 256)]);
        assert!(q.recent(3_001 + REPLAY_SECS).is_empty());
        // The same length and memory asked for a later window is a shape
        // of its own.
        let later = Shape {
            later: true,
            ..now(3600, 256)
        };
        q.note(later, 3_000);
        assert_eq!(
            q.recent(3_000),
            vec![later, now(3600, 256), now(36_000, 256)]
        );
        for k in 0..(MAX_QUESTIONS as u64 + 5) {
            q.note(now(60 + k, 0), 4_000);
        }
        assert_eq!(q.recent(4_000).len(), MAX_QUESTIONS);
        assert_eq!(q.recent(4_000)[0], now(60 + MAX_QUESTIONS as u64 + 4, 0));
    }

    #[test]
    fn what_is_prepared_goes_stale_at_the_hour_or_the_local_midnight() {
        let utc = HostSeries::new(6, 120, TimeZone::UTC);
        let at = 1_700_000_000; // 2023-11-14 22:13:20 UTC
        assert_eq!(stale_at(&utc, at), 1_700_002_800); // 23:00 UTC
                                                       // India's midnight falls at :30 of a UTC hour: 18:30 UTC.
        let india = HostSeries::new(6, 120, TimeZone::get("Asia/Kolkata").unwrap());
        let before = 1_700_000_000 - 4 * 3600 - 600; // 18:03:20 UTC, 23:33:20 there
        assert_eq!(stale_at(&india, before), 1_699_986_600); // 18:30 UTC
        assert!(prepare_due(at, i64::MIN, true), "nothing prepared yet");
        assert!(!prepare_due(at, i64::MIN, false), "nothing asked");
        assert!(!prepare_due(at, stale_at(&utc, at), true));
        assert!(prepare_due(stale_at(&utc, at), stale_at(&utc, at), true));
    }

    #[test]
    fn one_preparation_at_a_time() {
        let ahead = Ahead::default();
        assert!(!ahead.due(10), "nothing asked");
        ahead.note(now(3600, 256), 10);
        assert!(ahead.due(10));
        assert!(ahead.claim());
        assert!(!ahead.claim());
        ahead.done(Some(3600));
        assert!(!ahead.due(3599));
        assert!(ahead.due(3600));
        assert!(ahead.claim());
        ahead.done(None);
        assert!(
            ahead.due(3600),
            "a preparation that made nothing is tried again"
        );
    }
}
