//! The live monitor: takes a raw sample, classifies it with the model's
//! excursion tracker, and lets the model's adaptive period decide when to
//! look again. [`Monitor::step`] is the synchronous core (driven by tests
//! with scripted samples and a manual clock); [`run`] is the tokio loop
//! around it that the node spawns.
//!
//! This module owns the order of those calls and the sleeping between them.
//! It must not know how the host is measured (that is the [`LoadSource`]),
//! how states are defined or how the period adapts (that is `model`), nor who
//! consumes the readings.

use super::clock::Clock;
use super::{LoadSource, SampleError};
use crate::model::period::{AdaptivePeriod, PeriodPolicy, SampleKind};
use crate::model::series::DEFAULT_MAX_GAP_SECS;
use crate::model::state::{ExcursionTracker, State, Thresholds};
use crate::procfs::ProcessScope;
use rand::Rng;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// What the monitor needs to know, all of it from the node's config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MonitorConfig {
    /// The five-state model's thresholds, the same the predictor uses.
    pub thresholds: Thresholds,
    /// How the sampling period adapts.
    pub period: PeriodPolicy,
    /// A silence between two samples longer than this (machine asleep, node
    /// stopped) breaks any excursion above Th2, as a revocation does in traces.
    pub max_gap: Duration,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            thresholds: Thresholds::default(),
            period: PeriodPolicy::default(),
            max_gap: Duration::from_secs(DEFAULT_MAX_GAP_SECS),
        }
    }
}

/// One classified sample of the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MonitorReading {
    /// Unix seconds when the sample was taken.
    pub time: i64,
    /// Host CPU load L_H, percent of all logical CPUs, guest excluded.
    pub cpu: f64,
    /// Memory available to a guest, MiB.
    pub free_mib: u64,
    /// The host's state as the model defines it.
    pub state: State,
    /// Load is above Th2 but not yet for the sustain time: suspend the guest.
    pub suspending: bool,
    /// The regular sampling period in force after this sample.
    pub period: Duration,
    /// How long until the next sample.
    pub next_delay: Duration,
    /// Whether this was a regular or a random extra sample.
    pub kind: SampleKind,
    /// The previous sample was longer ago than `max_gap` (or in the future):
    /// the record was broken before this one.
    pub after_gap: bool,
}

/// The monitor's state between samples.
#[derive(Debug)]
pub struct Monitor<S, C, R> {
    source: S,
    clock: C,
    rng: R,
    thresholds: Thresholds,
    max_gap_secs: i64,
    tracker: ExcursionTracker,
    period: AdaptivePeriod,
    /// The kind of sample the period asked for last time, i.e. of the next one.
    next_kind: SampleKind,
    /// Time, state and suspension of the previous reading, to see changes.
    last: Option<(i64, State, bool)>,
}

impl<S: LoadSource, C: Clock, R: Rng> Monitor<S, C, R> {
    /// A monitor that has not sampled yet.
    pub fn new(config: MonitorConfig, source: S, clock: C, rng: R) -> Self {
        Monitor {
            source,
            clock,
            rng,
            thresholds: config.thresholds,
            max_gap_secs: i64::try_from(config.max_gap.as_secs()).unwrap_or(i64::MAX),
            tracker: ExcursionTracker::default(),
            period: AdaptivePeriod::new(config.period),
            next_kind: SampleKind::Regular,
            last: None,
        }
    }

    /// The current regular sampling period.
    pub fn period(&self) -> Duration {
        self.period.period()
    }

    /// The shortest period: how soon after start the first sample is due.
    pub fn min_period(&self) -> Duration {
        self.period.policy().min
    }

    /// The load source, e.g. for a test to inspect what it was asked.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Takes one sample now, excluding the guest's processes (`guest`, resolved once),
    /// and classifies it. On error nothing is recorded: the next step measures
    /// over the longer interval.
    pub fn step(&mut self, guest: &ProcessScope) -> Result<MonitorReading, SampleError> {
        let guest = self.source.guest_tree(guest);
        let raw = self.source.sample(&guest)?;
        let now = self.clock.unix_secs();
        let th = self.thresholds;

        let after_gap = matches!(self.last, Some((t, _, _))
            if now < t || now.saturating_sub(t) > self.max_gap_secs);
        if after_gap {
            self.tracker.interrupt();
        }
        self.tracker.observe(&th, now, raw.cpu);
        let state = self.tracker.state_at(&th, now, raw.cpu, raw.free_mib);
        let suspending = self.tracker.is_suspending(&th, now);

        let changed = after_gap
            || matches!(self.last, Some((_, s, susp)) if (s, susp) != (state, suspending));
        let kind = self.next_kind;
        let mut next = self.period.observe(kind, changed, &mut self.rng);
        if suspending {
            next.delay = next.delay.min(self.until_sustained(now));
        }
        self.next_kind = next.kind;
        self.last = Some((now, state, suspending));

        Ok(MonitorReading {
            time: now,
            cpu: raw.cpu,
            free_mib: raw.free_mib,
            state,
            suspending,
            period: self.period.period(),
            next_delay: next.delay,
            kind,
            after_gap,
        })
    }

    /// Time until the current excursion above Th2 becomes S3, but at least
    /// the minimum period: waking then tells S3 without waiting a long period.
    fn until_sustained(&self, now: i64) -> Duration {
        let left = self.tracker.excursion_start().map_or(0, |start| {
            start
                .saturating_add(i64::from(self.thresholds.sustain_secs))
                .saturating_sub(now)
        });
        Duration::from_secs(u64::try_from(left).unwrap_or(0)).max(self.min_period())
    }
}

/// Samples until `shutdown` is cancelled or the receiver of `tx` is dropped,
/// sending every reading. `guest_scope` says where the guest's processes are
/// (nothing while no guest runs); each sample excludes all of them.
///
/// A failed sample is logged and retried after the current period. The
/// `/proc` reads are a few small files, so they run inline on the runtime.
pub async fn run<S, C, R>(
    mut monitor: Monitor<S, C, R>,
    guest_scope: watch::Receiver<ProcessScope>,
    shutdown: CancellationToken,
    tx: mpsc::Sender<MonitorReading>,
) where
    S: LoadSource,
    C: Clock,
    R: Rng,
{
    // The first sample waits one minimum period so that the source's
    // baseline covers a real interval.
    let mut delay = monitor.min_period();
    let mut failures: u32 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        let scope = guest_scope.borrow().clone();
        match monitor.step(&scope) {
            Ok(reading) => {
                failures = 0;
                delay = reading.next_delay;
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    sent = tx.send(reading) => if sent.is_err() {
                        return; // Nobody listens any more.
                    },
                }
            }
            Err(error) => {
                // Say it once per run of failures, not once a second.
                if failures == 0 {
                    tracing::warn!(%error, "resource monitor could not sample the host");
                } else {
                    tracing::debug!(%error, failures, "resource monitor still failing");
                }
                failures = failures.saturating_add(1);
                delay = monitor.period();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::clock::ManualClock;
    use crate::monitor::RawSample;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::SystemTime;

    /// Plays back a fixed load forever after the script runs out, and records
    /// which guest pids it was asked to exclude.
    #[derive(Debug, Default)]
    struct Scripted {
        script: VecDeque<RawSample>,
        steady: Option<RawSample>,
        asked: Vec<Vec<i32>>,
    }

    impl Scripted {
        fn new(samples: &[(f64, u64)]) -> Self {
            Scripted {
                script: samples
                    .iter()
                    .map(|&(cpu, free_mib)| RawSample { cpu, free_mib })
                    .collect(),
                ..Scripted::default()
            }
        }
        fn then_steady(mut self, cpu: f64, free_mib: u64) -> Self {
            self.steady = Some(RawSample { cpu, free_mib });
            self
        }
    }

    impl LoadSource for Scripted {
        fn sample(&mut self, guest_pids: &[i32]) -> Result<RawSample, SampleError> {
            self.asked.push(guest_pids.to_vec());
            self.script
                .pop_front()
                .or(self.steady)
                .ok_or(SampleError::TooSoon)
        }
        fn guest_tree(&mut self, scope: &ProcessScope) -> Vec<i32> {
            // Pretend the root has one child, pid + 1.
            match scope {
                ProcessScope::Tree { root, .. } => vec![*root, root + 1],
                _ => Vec::new(),
            }
        }
    }

    fn tree(root: i32) -> ProcessScope {
        ProcessScope::Tree {
            root,
            whole_session: false,
        }
    }

    fn no_extras() -> MonitorConfig {
        MonitorConfig {
            period: PeriodPolicy {
                extra_sample_chance: 0.0,
                ..PeriodPolicy::default()
            },
            ..MonitorConfig::default()
        }
    }

    fn monitor(
        config: MonitorConfig,
        source: Scripted,
    ) -> (Monitor<Scripted, ManualClock, ChaCha8Rng>, ManualClock) {
        let clock = ManualClock::at(1_700_000_000);
        let m = Monitor::new(config, source, clock.clone(), ChaCha8Rng::seed_from_u64(7));
        (m, clock)
    }

    /// Steps the monitor as the real loop would: sample, then wait the delay it asks for.
    fn drive(
        m: &mut Monitor<Scripted, ManualClock, ChaCha8Rng>,
        clock: &ManualClock,
        n: usize,
    ) -> Vec<MonitorReading> {
        (0..n)
            .map(|_| {
                let r = m.step(&ProcessScope::Nothing).unwrap();
                clock.advance(r.next_delay);
                r
            })
            .collect()
    }

    #[test]
    fn load_walks_s1_s2_then_s3_only_after_the_sustain_time() {
        let source =
            Scripted::new(&[(5.0, 4000), (5.0, 4000), (35.0, 4000)]).then_steady(90.0, 4000);
        let (mut m, clock) = monitor(no_extras(), source);
        let readings = drive(&mut m, &clock, 80);
        assert_eq!(readings[0].state, State::S1);
        assert_eq!(readings[2].state, State::S2);
        let hot_start = readings[3].time;
        assert!(readings[3].suspending);
        for r in &readings[3..] {
            let sustained = r.time - hot_start >= 60;
            // Before the sustain time the state is the one before the excursion.
            let expected = if sustained { State::S3 } else { State::S2 };
            assert_eq!(r.state, expected, "at +{}s", r.time - hot_start);
            assert_eq!(r.suspending, !sustained);
        }
        let first_s3 = readings.iter().find(|r| r.state == State::S3).unwrap();
        // The monitor wakes at the deadline instead of sleeping a long period past it.
        assert_eq!(first_s3.time - hot_start, 60);
    }

    #[test]
    fn a_short_spike_only_suspends() {
        let mut script = vec![(30.0, 4000); 3];
        script.extend(vec![(95.0, 4000); 10]);
        let source = Scripted::new(&script).then_steady(30.0, 4000);
        let (mut m, clock) = monitor(no_extras(), source);
        let readings = drive(&mut m, &clock, 30);
        assert!(readings.iter().all(|r| r.state == State::S2));
        assert!(readings[3..13].iter().all(|r| r.suspending));
        assert!(readings[13..].iter().all(|r| !r.suspending));
    }

    #[test]
    fn memory_shortage_is_s4() {
        let config = MonitorConfig {
            thresholds: Thresholds {
                job_mem_mib: 1024,
                ..Thresholds::default()
            },
            ..no_extras()
        };
        let source = Scripted::new(&[(5.0, 4000), (5.0, 1000), (5.0, 2000)]);
        let (mut m, clock) = monitor(config, source);
        let states: Vec<State> = drive(&mut m, &clock, 3).iter().map(|r| r.state).collect();
        assert_eq!(states, [State::S1, State::S4, State::S1]);
    }

    #[test]
    fn period_grows_while_stable_and_drops_on_a_change() {
        let mut script = vec![(5.0, 4000); 40];
        script.push((35.0, 4000));
        let source = Scripted::new(&script).then_steady(35.0, 4000);
        let (mut m, clock) = monitor(no_extras(), source);
        let readings = drive(&mut m, &clock, 42);
        let periods: Vec<u64> = readings.iter().map(|r| r.period.as_secs()).collect();
        assert!(
            periods.windows(2).take(39).all(|w| w[0] <= w[1]),
            "{periods:?}"
        );
        assert_eq!(readings[39].period, Duration::from_secs(8));
        assert_eq!(readings[39].next_delay, Duration::from_secs(8));
        assert_eq!(readings[40].state, State::S2);
        assert_eq!(readings[40].period, Duration::from_secs(1));
        assert_eq!(readings[40].next_delay, Duration::from_secs(1));
    }

    #[test]
    fn extra_samples_happen_and_catch_a_change_inside_a_long_period() {
        let mut script = vec![(5.0, 4000); 200];
        script.push((35.0, 4000));
        let source = Scripted::new(&script).then_steady(35.0, 4000);
        let (mut m, clock) = monitor(MonitorConfig::default(), source);
        let readings = drive(&mut m, &clock, 201);
        assert!(readings.iter().any(|r| r.kind == SampleKind::Extra));
        let last = readings[200];
        assert_eq!(last.state, State::S2);
        assert_eq!(last.next_delay, Duration::from_secs(1));
    }

    #[test]
    fn a_long_silence_breaks_an_excursion() {
        let source = Scripted::new(&[(5.0, 4000)]).then_steady(90.0, 4000);
        let (mut m, clock) = monitor(no_extras(), source);
        drive(&mut m, &clock, 10);
        clock.advance(Duration::from_secs(3_600)); // The machine slept.
        let r = m.step(&ProcessScope::Nothing).unwrap();
        assert!(r.after_gap);
        // A new excursion with no known state before it: heavy, suspending, not S3.
        assert_eq!(r.state, State::S2);
        assert!(r.suspending);
    }

    #[test]
    fn the_guest_tree_is_handed_to_the_source_and_errors_are_not_recorded() {
        let (mut m, _clock) = monitor(no_extras(), Scripted::new(&[(5.0, 4000)]));
        m.step(&tree(40)).unwrap();
        assert!(matches!(
            m.step(&ProcessScope::Nothing),
            Err(SampleError::TooSoon)
        ));
        assert_eq!(m.source().asked, vec![vec![40, 41], vec![]]);
    }

    /// Wall time that follows tokio's (pausable) clock.
    #[derive(Debug, Clone)]
    struct TokioClock {
        base: SystemTime,
        start: tokio::time::Instant,
    }

    impl Clock for TokioClock {
        fn now(&self) -> jiff::Timestamp {
            crate::clock::timestamp_of(self.base + self.start.elapsed())
        }
    }

    #[derive(Debug, Clone, Default)]
    struct Shared(Arc<Mutex<Vec<Vec<i32>>>>);

    impl LoadSource for Shared {
        fn sample(&mut self, guest_pids: &[i32]) -> Result<RawSample, SampleError> {
            self.0.lock().unwrap().push(guest_pids.to_vec());
            Ok(RawSample {
                cpu: 5.0,
                free_mib: 4000,
            })
        }
        fn guest_tree(&mut self, scope: &ProcessScope) -> Vec<i32> {
            match scope {
                ProcessScope::Tree { root, .. } => vec![*root],
                _ => Vec::new(),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_paces_itself_follows_the_guest_and_stops_on_shutdown() {
        let clock = TokioClock {
            base: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            start: tokio::time::Instant::now(),
        };
        let source = Shared::default();
        let m = Monitor::new(
            no_extras(),
            source.clone(),
            clock,
            ChaCha8Rng::seed_from_u64(1),
        );
        let (roots_tx, roots_rx) = watch::channel(ProcessScope::Nothing);
        let (tx, mut rx) = mpsc::channel(4);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(m, roots_rx, shutdown.clone(), tx));

        let started = tokio::time::Instant::now();
        let mut readings = Vec::new();
        for i in 0..20 {
            if i == 10 {
                roots_tx.send(tree(7)).unwrap();
            }
            let r = rx.recv().await.unwrap();
            readings.push((started.elapsed(), r));
        }
        // Each reading arrives after the delay the previous one asked for.
        for pair in readings.windows(2) {
            let ((t0, r0), (t1, _)) = (pair[0], pair[1]);
            assert_eq!(t1 - t0, r0.next_delay);
        }
        assert!(readings[19].1.period > Duration::from_secs(1));
        let asked = source.0.lock().unwrap().clone();
        assert!(asked[..10].iter().all(|p| p.is_empty()));
        assert_eq!(asked[19], vec![7]);

        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_ends_when_nobody_listens() {
        let clock = ManualClock::at(0);
        let m = Monitor::new(
            no_extras(),
            Shared::default(),
            clock,
            ChaCha8Rng::seed_from_u64(1),
        );
        let (_roots_tx, roots_rx) = watch::channel(ProcessScope::Nothing);
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        run(m, roots_rx, CancellationToken::new(), tx).await;
    }
}
