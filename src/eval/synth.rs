//! Synthetic desktop-lab host traces (`gleaner trace synth`).
//!
//! This module owns a small generative model of a lab PC and its owner: a
//! [`Personality`] drawn from a seed decides how often the owner comes in,
//! when and for how long, how heavy the work is, how often compiles, short
//! spikes, memory hogs, reboots and switch-offs happen. [`generate`] turns a
//! [`SynthConfig`] into a [`Trace`] that is a pure function of the config, so
//! tests can build small traces on the fly instead of committing big files.
//!
//! It knows the trace format only through `history::trace` and the state
//! rules only through `model`; it must not know about the command line, the
//! running node or any clock.

pub use habit::Habit;

use crate::history::trace::{write_trace, Trace, TraceHeader, MAX_STEP_SECS};
use crate::model::series::{HostSeries, Sample, DEFAULT_MAX_GAP_SECS, DEFAULT_STEP_SECS};
use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{self, Write};

/// The time zone used when none is given.
pub const DEFAULT_TZ_NAME: &str = "UTC";
/// Local date of the default start: a Monday, so weeks line up with the data.
pub const DEFAULT_START_DATE: Date = Date::constant(2025, 9, 1);
/// Largest number of rows a synthetic trace may have (about 3.8 years at 6 s).
pub const MAX_ROWS: u64 = 20_000_000;
/// Load above which a guest is suspended (Th2 of the trace format); bursts
/// and spikes stay above it, owner work stays below it.
const HOT_ABOVE: f64 = 60.0;
/// The sustain time after which a hot excursion is contention (S3).
const SUSTAIN_SECS: i64 = 60;

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthConfig {
    /// Everything random is drawn from this seed: the same seed gives the same bytes.
    pub seed: u64,
    /// Length of the trace in days of 86 400 s.
    pub days: u32,
    /// The owner's time zone: sessions follow its local clock.
    pub tz: TimeZone,
    /// IANA name of `tz`, written into the trace header.
    pub tz_name: String,
    /// Sampling period while the host is up, seconds.
    pub step_secs: u32,
    /// Unix time of the first row.
    pub start: i64,
    /// Longest silence that still counts as up; written into the header and
    /// used to decide which down periods may be left as silent gaps.
    pub max_gap_secs: u64,
    /// The kind of owner (`any`: whatever the seed draws).
    pub habit: Habit,
}

/// Why a synthetic trace cannot be made or written.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("unknown time zone `{0}` (expected an IANA name such as Europe/Berlin)")]
    UnknownTimeZone(String),
    #[error("the default start date has no midnight in time zone `{0}`")]
    NoStart(String),
    #[error("step must be whole seconds from 1 to {MAX_STEP_SECS}, got {0}")]
    BadStep(u32),
    #[error("days must be at least 1")]
    NoDays,
    #[error("{days} days at {step_secs} s steps is more than the {MAX_ROWS} rows a synthetic trace may have")]
    TooManyRows { days: u32, step_secs: u32 },
    #[error("max_gap ({max_gap_secs} s) must be at least the step ({step_secs} s)")]
    GapBelowStep { max_gap_secs: u64, step_secs: u32 },
    #[error("start {0} (Unix seconds) and the days after it must be valid times")]
    StartOutOfRange(i64),
    #[error("cannot write the synthetic trace: {0}")]
    Write(#[from] io::Error),
}

impl SynthConfig {
    /// A config with the format's default step and max_gap, starting on
    /// [`DEFAULT_START_DATE`] at local midnight in `tz_name`.
    pub fn new(seed: u64, days: u32, tz_name: &str) -> Result<Self, SynthError> {
        let tz = jiff::tz::db()
            .get(tz_name)
            .map_err(|_| SynthError::UnknownTimeZone(tz_name.to_string()))?;
        let start = tz
            .to_timestamp(DEFAULT_START_DATE.to_datetime(Time::midnight()))
            .map_err(|_| SynthError::NoStart(tz_name.to_string()))?
            .as_second();
        let cfg = SynthConfig {
            seed,
            days,
            tz,
            tz_name: tz_name.to_string(),
            step_secs: DEFAULT_STEP_SECS,
            start,
            max_gap_secs: DEFAULT_MAX_GAP_SECS,
            habit: Habit::Any,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The same config with another sampling period.
    pub fn with_step(self, step_secs: u32) -> Result<Self, SynthError> {
        let cfg = SynthConfig { step_secs, ..self };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The same config with another kind of owner.
    pub fn with_habit(self, habit: Habit) -> Self {
        SynthConfig { habit, ..self }
    }

    /// The same config starting at another Unix time.
    pub fn with_start(self, start: i64) -> Result<Self, SynthError> {
        let cfg = SynthConfig { start, ..self };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The same config starting at local midnight `days` days before the local
    /// date of `end`, so the trace covers the whole days before that date: the
    /// history a node started at `end` would have (demos, seeding a node).
    pub fn ending_on_date_of(self, end: i64) -> Result<Self, SynthError> {
        let out_of_range = || SynthError::StartOutOfRange(end);
        let date = Timestamp::from_second(end)
            .map_err(|_| out_of_range())?
            .to_zoned(self.tz.clone())
            .date();
        let first = date
            .checked_sub(jiff::Span::new().days(i64::from(self.days)))
            .map_err(|_| out_of_range())?;
        let start = self
            .tz
            .to_timestamp(first.to_datetime(Time::midnight()))
            .map_err(|_| out_of_range())?
            .as_second();
        self.with_start(start)
    }

    /// Checks that the config describes a trace we agree to make.
    pub fn validate(&self) -> Result<(), SynthError> {
        if !(1..=MAX_STEP_SECS).contains(&self.step_secs) {
            return Err(SynthError::BadStep(self.step_secs));
        }
        if self.days == 0 {
            return Err(SynthError::NoDays);
        }
        if u64::from(self.days) * 86_400 / u64::from(self.step_secs) > MAX_ROWS {
            return Err(SynthError::TooManyRows {
                days: self.days,
                step_secs: self.step_secs,
            });
        }
        if Timestamp::from_second(self.start).is_err()
            || Timestamp::from_second(self.end()).is_err()
        {
            return Err(SynthError::StartOutOfRange(self.start));
        }
        if self.max_gap_secs < u64::from(self.step_secs) {
            return Err(SynthError::GapBelowStep {
                max_gap_secs: self.max_gap_secs,
                step_secs: self.step_secs,
            });
        }
        Ok(())
    }

    /// Unix time just after the last row.
    pub fn end(&self) -> i64 {
        self.start
            .saturating_add(i64::from(self.days).saturating_mul(86_400))
    }
}

/// The habits of one host and its owner, drawn once per seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Personality {
    /// Installed memory, MiB.
    pub total_mib: u64,
    /// Memory the system holds when nobody works, MiB.
    pub system_mib: u64,
    /// Extra memory the owner's applications hold during a session, MiB.
    pub session_mib: u64,
    /// Extra memory a compile holds, MiB.
    pub burst_mib: u64,
    /// Mean CPU load of an idle machine, percent.
    pub idle_load: f64,
    /// Chance that the owner comes in on a weekday.
    pub weekday_presence: f64,
    /// Chance that the owner comes in on a Saturday or Sunday.
    pub weekend_presence: f64,
    /// Mean local hour of arrival.
    pub arrival_hour: f64,
    /// How far the arrival wanders from day to day, hours.
    pub arrival_spread_hours: f64,
    /// Mean length of a weekday session, hours.
    pub session_hours: f64,
    /// Chance that a long session is split by a lunch break.
    pub lunch_break_prob: f64,
    /// Chance of a second session in the evening.
    pub evening_prob: f64,
    /// Mean load while the owner reads or types, percent (below Th1).
    pub light_load: f64,
    /// Mean load while the owner runs something heavy, percent (Th1..Th2).
    pub heavy_load: f64,
    /// Mean time the owner's work stays light before turning heavy, seconds.
    pub light_dwell_secs: f64,
    /// Mean time the owner's work stays heavy, seconds.
    pub heavy_dwell_secs: f64,
    /// Compiles (load above Th2 for minutes: S3) per session hour.
    pub bursts_per_session_hour: f64,
    /// Mean length of a compile beyond the sustain time, seconds.
    pub burst_mean_secs: f64,
    /// Short spikes (above Th2 for less than the sustain time) per session hour.
    pub spikes_per_session_hour: f64,
    /// Short spikes per hour when nobody works (cron jobs, updates).
    pub spikes_per_idle_hour: f64,
    /// Memory hogs (free memory below a small guest's needs: S4) per session hour.
    pub hogs_per_session_hour: f64,
    /// Mean length of a memory hog, seconds.
    pub hog_mean_secs: f64,
    /// Reboots and short owner pauses per day.
    pub reboots_per_day: f64,
    /// Share of down periods that leave a silent gap instead of an `up=0` row (crashes).
    pub crash_share: f64,
    /// Chance that the machine is switched off over a weekday night.
    pub night_off_prob: f64,
    /// Chance that the machine is switched off over a night that touches a weekend.
    pub weekend_off_prob: f64,
    /// Chance per night of a background job (updates, backup): heavy, not hot.
    pub nightly_job_prob: f64,
    /// Local hour at which the background job starts.
    pub nightly_job_hour: f64,
}

impl Personality {
    /// Draws a personality. Ranges are chosen so that the seeds' traces
    /// resemble the lab samples in `shared/traces/synthetic` but differ.
    pub fn draw(rng: &mut impl Rng) -> Self {
        const MEMORIES: [u64; 5] = [1024, 2048, 2048, 3072, 4096];
        const NIGHT_OFF: [f64; 5] = [0.0, 0.0, 0.03, 0.1, 0.25];
        let total_mib = MEMORIES[rng.random_range(0..MEMORIES.len())];
        let system_mib = rng.random_range(250..=(total_mib / 3).max(300));
        let burst_mib = rng.random_range(50..=200);
        // Owner work alone never starves a 256 MiB guest: that is the hogs' job.
        let session_room = total_mib.saturating_sub(system_mib + burst_mib + 450);
        let session_mib = rng.random_range(100..=600).min(session_room);
        Personality {
            total_mib,
            system_mib,
            session_mib,
            burst_mib,
            idle_load: rng.random_range(0.5..4.0),
            weekday_presence: rng.random_range(0.55..0.95),
            weekend_presence: rng.random_range(0.05..0.35),
            arrival_hour: rng.random_range(7.0..11.0),
            arrival_spread_hours: rng.random_range(0.3..1.5),
            session_hours: rng.random_range(4.0..10.0),
            lunch_break_prob: rng.random_range(0.0..0.7),
            evening_prob: rng.random_range(0.0..0.6),
            light_load: rng.random_range(4.0..12.0),
            heavy_load: rng.random_range(25.0..45.0),
            light_dwell_secs: rng.random_range(45.0..180.0),
            heavy_dwell_secs: rng.random_range(40.0..150.0),
            bursts_per_session_hour: rng.random_range(0.2..1.0),
            burst_mean_secs: rng.random_range(30.0..240.0),
            spikes_per_session_hour: rng.random_range(1.0..6.0),
            spikes_per_idle_hour: rng.random_range(0.05..0.5),
            hogs_per_session_hour: rng.random_range(0.05..0.15),
            hog_mean_secs: rng.random_range(180.0..900.0),
            reboots_per_day: rng.random_range(0.15..0.8),
            crash_share: rng.random_range(0.0..0.4),
            night_off_prob: NIGHT_OFF[rng.random_range(0..NIGHT_OFF.len())],
            weekend_off_prob: rng.random_range(0.0..0.3),
            nightly_job_prob: rng.random_range(0.0..0.5),
            nightly_job_hour: rng.random_range(1.0..5.0),
        }
    }

    /// The personality of a seed, as [`generate`] draws it.
    pub fn for_seed(seed: u64) -> Self {
        Personality::draw(&mut ChaCha8Rng::seed_from_u64(seed))
    }

    /// Free memory of the idle machine, MiB.
    fn idle_free_mib(&self) -> f64 {
        self.total_mib.saturating_sub(self.system_mib) as f64
    }
}

/// A stretch of time `[start, end)` with the level that holds during it
/// (load in percent, or free memory in MiB for hogs).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Episode {
    start: i64,
    end: i64,
    level: f64,
}

/// A period in which the host is down.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Down {
    start: i64,
    end: i64,
    /// True when no `up=0` row marks it: the silence alone (longer than max_gap) says down.
    silent: bool,
}

/// Everything that happens to the host, in Unix seconds, before rows are sampled.
#[derive(Debug, Default)]
struct Schedule {
    sessions: Vec<Episode>,
    background: Vec<Episode>,
    bursts: Vec<Episode>,
    spikes: Vec<Episode>,
    hogs: Vec<Episode>,
    downs: Vec<Down>,
}

/// Generates the trace described by `cfg`. Out-of-range fields are clamped
/// (step at least 1, max_gap at least the step); call
/// [`SynthConfig::validate`] first to refuse them instead.
pub fn generate(cfg: &SynthConfig) -> Trace {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let personality = cfg.habit.apply(Personality::draw(&mut rng), cfg.seed);
    let step = i64::from(cfg.step_secs.max(1));
    let max_gap = cfg.max_gap_secs.max(step as u64);
    let schedule = plan(cfg, step, max_gap, &personality, &mut rng);
    let series = sample_rows(cfg, step, max_gap, &personality, &schedule, &mut rng);
    Trace {
        header: TraceHeader {
            host: Some(format!("synth-{}", cfg.seed)),
            tz_name: cfg.tz_name.clone(),
            source: Some(format!(
                "gleaner trace synth --seed {} --days {} --step {}{}",
                cfg.seed,
                cfg.days,
                step,
                match cfg.habit {
                    Habit::Any => String::new(),
                    h => format!(" --habit {h}"),
                }
            )),
        },
        series,
        replaced_rows: 0,
    }
}

/// Validates `cfg`, generates its trace and writes it in format v1.
pub fn write_synth(cfg: &SynthConfig, out: impl Write) -> Result<(), SynthError> {
    cfg.validate()?;
    write_trace(out, &generate(cfg))?;
    Ok(())
}

/// A uniform draw from [-1, 1] peaked at 0: cheap noise that stays bounded.
fn triangular(rng: &mut impl Rng) -> f64 {
    rng.random::<f64>() + rng.random::<f64>() - 1.0
}

/// An exponential draw with the given mean: waiting times between independent events.
fn exponential(rng: &mut impl Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.random::<f64>()).ln()
}

/// Unix time of `secs` seconds after local midnight of `date` (may pass midnight).
fn local_time(tz: &TimeZone, date: Date, secs: f64) -> Option<i64> {
    let span = jiff::Span::new().try_seconds(secs.round() as i64).ok()?;
    let dt = date.to_datetime(Time::midnight()).checked_add(span).ok()?;
    tz.to_timestamp(dt).ok().map(|ts| ts.as_second())
}

fn local_date(tz: &TimeZone, t: i64) -> Option<Date> {
    Timestamp::from_second(t)
        .ok()
        .map(|ts| ts.to_zoned(tz.clone()).date())
}

fn is_weekend(date: Date) -> bool {
    matches!(date.weekday(), Weekday::Saturday | Weekday::Sunday)
}

/// Draws the schedule of sessions, load episodes and down periods.
fn plan(
    cfg: &SynthConfig,
    step: i64,
    max_gap: u64,
    p: &Personality,
    rng: &mut impl Rng,
) -> Schedule {
    let mut s = Schedule::default();
    // Start a day early so a session or switch-off may already be going on.
    let (Some(first), Some(last)) = (
        local_date(&cfg.tz, cfg.start).and_then(|d| d.yesterday().ok()),
        local_date(&cfg.tz, cfg.end()),
    ) else {
        return s;
    };
    let mut date = first;
    while date <= last {
        plan_day(&cfg.tz, date, p, rng, &mut s);
        match date.tomorrow() {
            Ok(next) => date = next,
            Err(_) => break,
        }
    }
    s.sessions = merged(s.sessions);
    s.background = merged(s.background);
    plan_session_events(cfg, step, p, rng, &mut s);
    plan_downs(cfg, max_gap, p, rng, &mut s);
    s
}

/// The owner's sessions and the night's background job for one local day.
fn plan_day(tz: &TimeZone, date: Date, p: &Personality, rng: &mut impl Rng, s: &mut Schedule) {
    const HOUR: f64 = 3600.0;
    let weekend = is_weekend(date);
    let presence = if weekend {
        p.weekend_presence
    } else {
        p.weekday_presence
    };
    let add = |s: &mut Schedule, from_h: f64, hours: f64| {
        if let (Some(start), Some(end)) = (
            local_time(tz, date, from_h * HOUR),
            local_time(tz, date, (from_h + hours) * HOUR),
        ) {
            if start < end {
                s.sessions.push(Episode {
                    start,
                    end,
                    level: 0.0,
                });
            }
        }
    };
    if rng.random_bool(presence) {
        let late = if weekend { 1.5 } else { 0.0 };
        let arrive =
            (p.arrival_hour + late + triangular(rng) * p.arrival_spread_hours).clamp(5.0, 15.0);
        let shorter = if weekend { 0.5 } else { 1.0 };
        let hours = p.session_hours * rng.random_range(0.6..1.3) * shorter;
        if hours > 4.0 && rng.random_bool(p.lunch_break_prob) {
            let morning = hours * rng.random_range(0.4..0.6);
            let lunch = rng.random_range(0.5..1.0);
            add(s, arrive, morning);
            add(s, arrive + morning + lunch, hours - morning);
        } else {
            add(s, arrive, hours);
        }
    }
    let evening = if weekend { 0.7 } else { 1.0 };
    if rng.random_bool(p.evening_prob * evening) {
        add(s, rng.random_range(19.0..22.5), rng.random_range(0.5..3.0));
    }
    if rng.random_bool(p.nightly_job_prob) {
        let from = p.nightly_job_hour + rng.random_range(0.0..0.5);
        if let (Some(start), Some(end)) = (
            local_time(tz, date, from * HOUR),
            local_time(tz, date, from * HOUR + rng.random_range(300.0..1800.0)),
        ) {
            s.background.push(Episode {
                start,
                end,
                level: rng.random_range(20.0..45.0),
            });
        }
    }
}

/// Compiles, spikes and memory hogs: mostly while the owner works.
fn plan_session_events(
    cfg: &SynthConfig,
    step: i64,
    p: &Personality,
    rng: &mut impl Rng,
    s: &mut Schedule,
) {
    const HOUR: f64 = 3600.0;
    // A burst must outlast the sustain time on the row grid to become S3.
    let min_burst = (SUSTAIN_SECS + 2 * step) as f64;
    for session in &s.sessions {
        let (from, to) = (session.start, session.end);
        for at in arrivals(rng, from, to, HOUR / p.bursts_per_session_hour) {
            let len = min_burst + exponential(rng, p.burst_mean_secs).min(900.0);
            s.bursts.push(Episode {
                start: at,
                end: at + len as i64,
                level: rng.random_range(70.0..98.0),
            });
        }
        for at in arrivals(rng, from, to, HOUR / p.hogs_per_session_hour) {
            let len = 60.0 + exponential(rng, p.hog_mean_secs).min(3600.0);
            s.hogs.push(Episode {
                start: at,
                end: at + len as i64,
                level: rng.random_range(10.0..230.0),
            });
        }
        for at in arrivals(rng, from, to, HOUR / p.spikes_per_session_hour) {
            push_spike(cfg, step, rng, at, &mut s.spikes);
        }
    }
    for at in arrivals(rng, cfg.start, cfg.end(), HOUR / p.spikes_per_idle_hour) {
        push_spike(cfg, step, rng, at, &mut s.spikes);
    }
    s.bursts = merged(std::mem::take(&mut s.bursts));
    s.hogs = merged(std::mem::take(&mut s.hogs));
    s.spikes = isolated_spikes(std::mem::take(&mut s.spikes), &s.bursts, step);
}

/// Times of events arriving at random with the given mean spacing in `[from, to)`.
fn arrivals(rng: &mut impl Rng, from: i64, to: i64, mean_secs: f64) -> Vec<i64> {
    let mut out = Vec::new();
    if !(mean_secs.is_finite() && mean_secs > 0.0) {
        return out;
    }
    let mut t = from as f64;
    loop {
        t += exponential(rng, mean_secs);
        if t >= to as f64 {
            return out;
        }
        out.push(t as i64);
    }
}

/// A spike covers whole rows of the grid, at most as many as fit in the
/// sustain time, so it suspends a guest but never kills it. With steps
/// longer than the sustain time every hot row is contention, so there are
/// no short spikes at all.
fn push_spike(cfg: &SynthConfig, step: i64, rng: &mut impl Rng, at: i64, out: &mut Vec<Episode>) {
    let max_rows = SUSTAIN_SECS / step;
    if max_rows == 0 {
        return;
    }
    let rows = (1 + exponential(rng, max_rows as f64 / 3.0) as i64).min(max_rows);
    let start = snap_up(cfg.start, step, at);
    out.push(Episode {
        start,
        end: start + rows * step,
        level: rng.random_range(62.0..100.0),
    });
}

/// Drops spikes that touch another spike or a burst: merged, they could
/// outlast the sustain time and stop being short.
fn isolated_spikes(mut spikes: Vec<Episode>, bursts: &[Episode], step: i64) -> Vec<Episode> {
    spikes.sort_by_key(|e| e.start);
    let margin = 2 * step;
    let mut out: Vec<Episode> = Vec::with_capacity(spikes.len());
    let mut burst = 0;
    for spike in spikes {
        while burst < bursts.len() && bursts[burst].end + margin <= spike.start {
            burst += 1;
        }
        let near_burst = bursts
            .get(burst)
            .is_some_and(|b| b.start - margin < spike.end);
        let near_spike = out.last().is_some_and(|e| spike.start < e.end + margin);
        if !near_burst && !near_spike {
            out.push(spike);
        }
    }
    out
}

/// Reboots and pauses at random times, and switch-offs over some nights.
fn plan_downs(
    cfg: &SynthConfig,
    max_gap: u64,
    p: &Personality,
    rng: &mut impl Rng,
    s: &mut Schedule,
) {
    let mut downs = Vec::new();
    for at in arrivals(rng, cfg.start, cfg.end(), 86_400.0 / p.reboots_per_day) {
        // Most are reboots of a few minutes; some are an owner's longer pause.
        let len = if rng.random_bool(0.65) {
            rng.random_range(60.0..360.0)
        } else {
            (rng.random_range(600f64.ln()..7200f64.ln())).exp()
        };
        downs.push((at, at + len as i64));
    }
    for pair in s.sessions.windows(2) {
        let (evening, morning) = (pair[0].end, pair[1].start);
        // Owners switch off for a night or a weekend; a lab machine left
        // behind for days stays on, so longer absences are no chance.
        let away = morning - evening;
        let chance = match (spans_weekend(&cfg.tz, evening, morning), away / 3600) {
            (_, 0..4) => 0.0,
            (false, 4..=20) => p.night_off_prob,
            (true, 4..=72) => p.weekend_off_prob,
            _ => 0.0,
        };
        if rng.random_bool(chance) {
            let off = evening + rng.random_range(120..1200);
            let on = morning - rng.random_range(300..1800);
            if off < on {
                downs.push((off, on));
            }
        }
    }
    downs.sort_unstable();
    let mut merged: Vec<Down> = Vec::with_capacity(downs.len());
    for (start, end) in downs {
        match merged.last_mut() {
            Some(last) if start <= last.end => last.end = last.end.max(end),
            _ => merged.push(Down {
                start,
                end,
                silent: false,
            }),
        }
    }
    for down in &mut merged {
        // Only a silence longer than max_gap reads as down; shorter ones need a row.
        let long_enough = (down.end - down.start) as u64 > max_gap;
        down.silent = long_enough && rng.random_bool(p.crash_share);
    }
    s.downs = merged;
}

/// True when a Saturday or Sunday lies between the local dates of `from` and `to`.
fn spans_weekend(tz: &TimeZone, from: i64, to: i64) -> bool {
    let (Some(mut date), Some(last)) = (local_date(tz, from), local_date(tz, to)) else {
        return false;
    };
    while date <= last {
        if is_weekend(date) {
            return true;
        }
        match date.tomorrow() {
            Ok(next) => date = next,
            Err(_) => return false,
        }
    }
    false
}

/// Sorts episodes and joins overlapping ones (the earlier one's level wins).
fn merged(mut v: Vec<Episode>) -> Vec<Episode> {
    v.sort_by_key(|e| e.start);
    let mut out: Vec<Episode> = Vec::with_capacity(v.len());
    for e in v {
        match out.last_mut() {
            Some(last) if e.start <= last.end => last.end = last.end.max(e.end),
            _ => out.push(e),
        }
    }
    out
}

/// The first grid time `start + k * step` at or after `t`.
fn snap_up(start: i64, step: i64, t: i64) -> i64 {
    if t <= start {
        return start;
    }
    start + (t - start + step - 1) / step * step
}

/// Walks sorted, disjoint episodes at non-decreasing times.
struct Track<'a> {
    episodes: &'a [Episode],
    next: usize,
}

impl<'a> Track<'a> {
    fn new(episodes: &'a [Episode]) -> Self {
        Track { episodes, next: 0 }
    }

    /// The episode going on at `t` and its index, if any.
    fn at(&mut self, t: i64) -> Option<(usize, Episode)> {
        while self.next < self.episodes.len() && self.episodes[self.next].end <= t {
            self.next += 1;
        }
        self.episodes
            .get(self.next)
            .filter(|e| e.start <= t)
            .map(|&e| (self.next, e))
    }
}

/// Rounds a load to one decimal, as a monitor would print it.
fn tenth(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Appends a row, rounding the load as a monitor would print it.
fn push_row(series: &mut HostSeries, time: i64, cpu: f64, free_mib: f64, up: bool) {
    let pushed = series.push(Sample {
        time,
        cpu: tenth(cpu.clamp(0.0, 100.0)),
        free_mib: free_mib.max(0.0).round() as u64,
        up,
    });
    // Times only grow and loads are clamped, so the series accepts every row.
    debug_assert!(pushed.is_ok(), "synthetic row rejected: {pushed:?}");
}

/// Turns the schedule into rows on the grid `start + k * step`.
fn sample_rows(
    cfg: &SynthConfig,
    step: i64,
    max_gap: u64,
    p: &Personality,
    s: &Schedule,
    rng: &mut impl Rng,
) -> HostSeries {
    let end = cfg.end();
    let mut series = HostSeries::new(step as u32, max_gap, cfg.tz.clone());
    series.reserve(((end - cfg.start).max(0) / step) as usize + 1);
    let (mut sessions, mut background) = (Track::new(&s.sessions), Track::new(&s.background));
    let (mut bursts, mut spikes) = (Track::new(&s.bursts), Track::new(&s.spikes));
    let mut hogs = Track::new(&s.hogs);
    let mut downs = s.downs.iter().peekable();
    // The owner's work flips between light and heavy; these are per-row odds.
    let to_heavy = (step as f64 / p.light_dwell_secs).min(1.0);
    let to_light = (step as f64 / p.heavy_dwell_secs).min(1.0);
    let mut heavy = false;
    let mut current_session = None;
    let mut t = cfg.start;
    while t < end {
        while downs.peek().is_some_and(|d| d.end <= t) {
            downs.next();
        }
        if let Some(down) = downs.peek().filter(|d| d.start <= t) {
            if !down.silent || series.is_empty() {
                push_row(&mut series, t, 0.0, 0.0, false);
            }
            t = snap_up(cfg.start, step, down.end).max(t.saturating_add(step));
            continue;
        }
        let session = sessions.at(t);
        let burst = bursts.at(t);
        let mut free = p.idle_free_mib() + 12.0 * triangular(rng);
        if session.is_some() {
            free -= p.session_mib as f64;
        }
        if burst.is_some() {
            free -= p.burst_mib as f64;
        }
        if let Some((_, hog)) = hogs.at(t) {
            free = (hog.level + 10.0 * triangular(rng)).clamp(0.0, 250.0);
        }
        let cpu = if let Some((_, spike)) = spikes.at(t) {
            (spike.level + 5.0 * triangular(rng)).clamp(HOT_ABOVE + 0.5, 100.0)
        } else if let Some((_, b)) = burst {
            (b.level + 6.0 * triangular(rng)).clamp(HOT_ABOVE + 0.5, 100.0)
        } else if let Some((index, _)) = session {
            if current_session != Some(index) {
                current_session = Some(index);
                heavy = false;
            }
            heavy = rng.random_bool(if heavy { 1.0 - to_light } else { to_heavy });
            if heavy {
                (p.heavy_load + 12.0 * triangular(rng)).clamp(20.0, 58.0)
            } else {
                (p.light_load + 4.0 * triangular(rng)).clamp(0.0, 19.9)
            }
        } else if let Some((_, job)) = background.at(t) {
            (job.level + 8.0 * triangular(rng)).clamp(0.0, 58.0)
        } else {
            p.idle_load * (1.0 + 1.2 * triangular(rng))
        };
        push_row(&mut series, t, cpu, free, true);
        let Some(next) = t.checked_add(step) else {
            break;
        };
        t = next;
    }
    // A host off at the end gets a down row at the last grid time, so every
    // trace covers its whole span: without it a trace ending in an outage
    // stops at the outage's start and reads as shorter, and a simulation
    // submitting half-way in would submit its host before the others.
    let last_grid = snap_up(cfg.start, step, end) - step;
    if series.last_time().is_some_and(|last| last < last_grid) {
        push_row(&mut series, last_grid, 0.0, 0.0, false);
    }
    series
}

pub mod habit;
#[cfg(test)]
mod tests;
