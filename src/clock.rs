//! The wall clock, behind one small trait so tests can drive time by hand.
//!
//! The monitor stamps its readings with it and the guest supervisor its
//! events; the node hands both the same clock. This module owns only "what
//! time is it": it must not know about sampling, sleeping (the async loops
//! sleep with tokio's timer) or what the time is used for.

use jiff::Timestamp;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// The current time in Unix seconds, the unit of the model's samples.
    fn unix_secs(&self) -> i64 {
        self.now().as_second()
    }
}

/// Unix seconds of `t`, negative before 1970, saturating far outside i64.
pub fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs())
            .map(|s| -s)
            .unwrap_or(i64::MIN),
    }
}

/// The timestamp of `t`, clamped to jiff's supported range.
pub fn timestamp_of(t: SystemTime) -> Timestamp {
    Timestamp::try_from(t).unwrap_or_else(|_| {
        if t < UNIX_EPOCH {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        }
    })
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// Wall time that moves with tokio's clock from a chosen start: under
/// paused time (tests) it follows virtual time, so a node run in-process
/// stamps its samples with the time its timers see.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start_ms: i64,
    started: tokio::time::Instant,
}

impl TokioClock {
    /// A clock showing `unix_secs` now and advancing with tokio's time.
    pub fn starting_at(unix_secs: i64) -> Self {
        TokioClock {
            start_ms: unix_secs.saturating_mul(1000),
            started: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let ms = self.start_ms.saturating_add(elapsed);
        Timestamp::from_millisecond(ms).unwrap_or(Timestamp::MAX)
    }
}

/// The machine's real-time clock. Unlike a monotonic clock it keeps running
/// while the machine sleeps, which is what lets the monitor notice the gap.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to. Clones share the same time, so a test
/// can keep one and hand the other to the code under test.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// Milliseconds since the Unix epoch.
    millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock showing `unix_secs`.
    pub fn at(unix_secs: i64) -> Self {
        ManualClock {
            millis: Arc::new(AtomicI64::new(unix_secs.saturating_mul(1000))),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `unix_secs` (it may go backwards, as real clocks do).
    pub fn set(&self, unix_secs: i64) {
        self.millis
            .store(unix_secs.saturating_mul(1000), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        let ms = self.millis.load(Ordering::SeqCst);
        Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_it() {
        let clock = ManualClock::at(1_000);
        let view = clock.clone();
        assert_eq!(view.unix_secs(), 1_000);
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(view.unix_secs(), 1_001);
        clock.set(-5);
        assert_eq!(view.unix_secs(), -5);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.unix_secs() > 1_577_836_800);
    }

    #[test]
    fn system_time_converts_both_ways_of_the_epoch() {
        assert_eq!(unix_secs(UNIX_EPOCH + Duration::from_secs(5)), 5);
        assert_eq!(unix_secs(UNIX_EPOCH - Duration::from_secs(5)), -5);
        assert_eq!(
            timestamp_of(UNIX_EPOCH + Duration::from_secs(7)).as_second(),
            7
        );
    }
}
