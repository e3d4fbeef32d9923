//! Unit tests of the synthetic traces: the same seed gives the same bytes,
//! a trace parses back, the owner's rhythm (states, spikes, memory hogs,
//! weekdays, local time) shows in it, and bad configs are refused.

use super::*;
use crate::history::trace::parse_trace;
use crate::model::state::{State, Thresholds};
use std::path::Path;

fn cfg(seed: u64, days: u32, tz: &str, step: u32) -> SynthConfig {
    SynthConfig::new(seed, days, tz)
        .unwrap()
        .with_step(step)
        .unwrap()
}

fn bytes(cfg: &SynthConfig) -> Vec<u8> {
    let mut out = Vec::new();
    write_synth(cfg, &mut out).unwrap();
    out
}

fn job_256() -> Thresholds {
    Thresholds {
        job_mem_mib: 256,
        ..Thresholds::default()
    }
}

/// The state at every grid time of the series, counted per state.
fn state_counts(series: &HostSeries) -> [usize; 5] {
    let (first, last) = (series.first_time().unwrap(), series.last_time().unwrap());
    let step = series.step_secs;
    let m = ((last - first) / i64::from(step)) as usize;
    let mut states = Vec::new();
    assert!(series.window_states(job_256(), first, step, m, &mut states));
    let mut counts = [0; 5];
    for s in states {
        counts[s.index()] += 1;
    }
    counts
}

/// Runs of consecutive up rows with load above Th2: (first row, last row).
fn hot_runs(series: &HostSeries) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut open: Option<usize> = None;
    for (i, s) in series.samples().enumerate() {
        let hot = s.up && s.cpu > HOT_ABOVE;
        match (hot, open) {
            (true, None) => open = Some(i),
            (false, Some(first)) => {
                runs.push((first, i - 1));
                open = None;
            }
            _ => {}
        }
    }
    runs
}

/// Mean load of up rows whose local time passes `keep(weekday, hour)`.
fn mean_load(series: &HostSeries, tz: &TimeZone, keep: impl Fn(Weekday, i8) -> bool) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for s in series.samples().filter(|s| s.up) {
        let local = Timestamp::from_second(s.time).unwrap().to_zoned(tz.clone());
        if keep(local.weekday(), local.hour()) {
            sum += s.cpu;
            n += 1;
        }
    }
    assert!(n > 0, "no rows selected");
    sum / n as f64
}

fn weekday(w: Weekday) -> bool {
    !matches!(w, Weekday::Saturday | Weekday::Sunday)
}

#[test]
fn same_seed_gives_the_same_bytes_and_seeds_differ() {
    let a = bytes(&cfg(7, 3, "UTC", 6));
    assert_eq!(a, bytes(&cfg(7, 3, "UTC", 6)));
    assert_ne!(a, bytes(&cfg(8, 3, "UTC", 6)));
    assert_eq!(Personality::for_seed(7), Personality::for_seed(7));
    let distinct: Vec<Personality> = (0..5).map(Personality::for_seed).collect();
    for (i, a) in distinct.iter().enumerate() {
        for b in &distinct[i + 1..] {
            assert_ne!(a, b);
            assert_ne!(a.arrival_hour, b.arrival_hour);
        }
    }
}

#[test]
fn trace_parses_back_and_keeps_step_start_and_header() {
    let c = cfg(11, 4, "Europe/Berlin", 10);
    let text = bytes(&c);
    let trace = parse_trace(&text, Path::new("synth.csv")).unwrap();
    assert_eq!(trace.header.tz_name, "Europe/Berlin");
    assert_eq!(trace.header.host.as_deref(), Some("synth-11"));
    let s = &trace.series;
    assert_eq!((s.step_secs, s.max_gap_secs), (10, DEFAULT_MAX_GAP_SECS));
    // Default start: Monday 2025-09-01 00:00 in Berlin (UTC+2).
    assert_eq!(s.first_time(), Some(1_756_677_600));
    assert_eq!(c.start, 1_756_677_600);
    assert!(s.last_time().unwrap() < c.end());
    assert!(s.last_time().unwrap() >= c.end() - 86_400);
    let rows: Vec<Sample> = s.samples().collect();
    assert!(rows.iter().all(|r| (r.time - c.start) % 10 == 0));
    let linked: Vec<i64> = rows
        .windows(2)
        .filter(|w| w[0].up && w[1].up && w[1].time - w[0].time <= 120)
        .map(|w| w[1].time - w[0].time)
        .collect();
    assert!(linked.iter().all(|&dt| dt == 10));
    assert!(linked.len() > rows.len() * 9 / 10);
    assert!(rows
        .iter()
        .all(|r| r.up || (r.cpu == 0.0 && r.free_mib == 0)));
}

#[test]
fn most_seeds_show_all_five_states_in_two_weeks() {
    let mut complete = 0;
    for seed in 1..=10 {
        let trace = generate(&cfg(seed, 14, "UTC", 6));
        let counts = state_counts(&trace.series);
        assert!(counts[State::S1.index()] > counts[State::S2.index()]);
        assert!(counts[State::S2.index()] > 0);
        if counts.iter().all(|&n| n > 0) {
            complete += 1;
        }
    }
    assert!(
        complete >= 8,
        "only {complete} of 10 seeds show all five states"
    );
}

#[test]
fn short_spikes_only_suspend_and_bursts_reach_s3() {
    let trace = generate(&cfg(2, 7, "UTC", 6));
    let s = &trace.series;
    let th = job_256();
    let (mut short, mut long) = (0, 0);
    for (first, last) in hot_runs(s) {
        let (a, b) = (s.get(first).unwrap(), s.get(last).unwrap());
        let lasts = b.time + i64::from(s.step_secs) - a.time;
        let states: Vec<State> = (first..=last)
            .map(|i| s.state_at(th, s.get(i).unwrap().time).unwrap())
            .collect();
        if lasts < 60 {
            short += 1;
            assert!(!states.contains(&State::S3), "spike at {} is S3", a.time);
        } else if states.contains(&State::S3) {
            long += 1;
        }
    }
    assert!(short >= 20, "only {short} short spikes in a week");
    assert!(long >= 5, "only {long} compiles reached S3 in a week");
}

#[test]
fn memory_hogs_starve_a_small_guest_for_minutes() {
    let trace = generate(&cfg(3, 14, "UTC", 6));
    let mut longest = 0;
    let mut open: Option<i64> = None;
    for s in trace.series.samples() {
        match (s.up && s.free_mib < 256, open) {
            (true, None) => open = Some(s.time),
            (false, Some(from)) => {
                longest = longest.max(s.time - from);
                open = None;
            }
            _ => {}
        }
    }
    assert!(longest >= 60, "longest memory shortage {longest} s");
}

#[test]
fn weekdays_are_busier_than_weekends_in_office_hours() {
    for seed in 1..=6 {
        let c = cfg(seed, 28, "America/Indiana/Indianapolis", 30);
        let trace = generate(&c);
        let office = |h: i8| (9..17).contains(&h);
        let work = mean_load(&trace.series, &c.tz, |w, h| weekday(w) && office(h));
        let rest = mean_load(&trace.series, &c.tz, |w, h| !weekday(w) && office(h));
        assert!(
            work > rest,
            "seed {seed}: weekdays {work:.1} vs weekends {rest:.1}"
        );
    }
}

#[test]
fn owner_rhythm_follows_the_local_clock() {
    let tokyo = cfg(4, 21, "Asia/Tokyo", 30);
    let la = cfg(4, 21, "America/Los_Angeles", 30);
    let day = |h: i8| (10..16).contains(&h);
    let night = |h: i8| (1..5).contains(&h);
    for c in [&tokyo, &la] {
        let t = generate(c);
        let d = mean_load(&t.series, &c.tz, |w, h| weekday(w) && day(h));
        let n = mean_load(&t.series, &c.tz, |w, h| weekday(w) && night(h));
        assert!(d > 2.0 * n, "{}: day {d:.1} vs night {n:.1}", c.tz_name);
    }
    // Tokyo's office hours fall in Los Angeles' night, so read on the
    // wrong clock the Tokyo trace is quiet in the daytime.
    let t = generate(&tokyo);
    let own = mean_load(&t.series, &tokyo.tz, |w, h| weekday(w) && day(h));
    let wrong = mean_load(&t.series, &la.tz, |w, h| weekday(w) && day(h));
    assert!(
        wrong < own / 2.0,
        "own clock {own:.1}, wrong clock {wrong:.1}"
    );
}

#[test]
fn bad_configs_are_refused() {
    assert!(matches!(
        SynthConfig::new(1, 3, "Mars/Olympus"),
        Err(SynthError::UnknownTimeZone(_))
    ));
    assert!(matches!(
        SynthConfig::new(1, 0, "UTC"),
        Err(SynthError::NoDays)
    ));
    let ok = SynthConfig::new(1, 3, "UTC").unwrap();
    assert!(matches!(
        ok.clone().with_step(0),
        Err(SynthError::BadStep(0))
    ));
    assert!(matches!(
        ok.clone().with_step(300),
        Err(SynthError::GapBelowStep { .. })
    ));
    let long = SynthConfig {
        days: 400,
        ..ok.clone()
    };
    assert!(matches!(
        long.with_step(1),
        Err(SynthError::TooManyRows { .. })
    ));
    assert!(matches!(
        ok.clone().with_start(i64::MAX - 5),
        Err(SynthError::StartOutOfRange(_))
    ));
    let mut out = Vec::new();
    let bad = SynthConfig { step_secs: 0, ..ok };
    assert!(write_synth(&bad, &mut out).is_err());
    assert!(out.is_empty());
}

#[test]
fn long_steps_and_odd_starts_still_give_valid_traces() {
    let c = SynthConfig {
        max_gap_secs: 900,
        ..cfg(5, 5, "Australia/Adelaide", 6)
    }
    .with_step(300)
    .unwrap()
    .with_start(1_700_000_123)
    .unwrap();
    let trace = parse_trace(&bytes(&c), Path::new("x")).unwrap();
    assert_eq!(trace.series.first_time(), Some(1_700_000_123));
    assert!(trace
        .series
        .samples()
        .all(|s| (s.time - c.start) % 300 == 0));
    let counts = state_counts(&trace.series);
    assert!(counts[State::S1.index()] > 0);
}

#[test]
fn a_trace_ending_in_an_outage_still_covers_its_whole_span() {
    // Five days from a Monday end on Saturday 00:00, so many weekend-away
    // owners have switched off on Friday evening.
    let mut ended_down = 0;
    for seed in 0..24 {
        let c = cfg(seed, 5, "UTC", 60).with_habit(Habit::WeekendsAway);
        let trace = parse_trace(&bytes(&c), Path::new("synth.csv")).unwrap();
        let s = &trace.series;
        assert_eq!(s.last_time(), Some(c.end() - 60), "seed {seed}");
        let last = s.samples().last().unwrap();
        if last.up {
            continue;
        }
        ended_down += 1;
        // Down without a break from the outage's first row to the end.
        let rows: Vec<Sample> = s.samples().collect();
        let back = rows.iter().rposition(|r| r.up).unwrap();
        let off = rows[back + 1].time.min(rows[back].time + 60);
        let m = ((c.end() - 60 - off) / 60) as usize;
        let mut states = Vec::new();
        assert!(s.window_states(job_256(), off, 60, m, &mut states));
        assert!(states.iter().all(|&x| x == State::S5), "seed {seed}");
    }
    assert!(ended_down >= 3, "only {ended_down} traces end down");
}
