//! Tests of the baselines on hand-made series with known answers, the
//! registry, and the no-peeking rule on synthetic lab traces.

use super::rippp::{self, Basis, Zone};
use super::test_series::{series_from, DAY, HOUR, MONDAY};
use super::*;
use crate::state::Thresholds;

fn day_of(t: i64) -> i64 {
    (t - MONDAY).div_euclid(DAY)
}

fn time_of_day(t: i64) -> i64 {
    (t - MONDAY).rem_euclid(DAY)
}

/// Load above Th2 is S3 at once: hand-made failures start where we put them.
fn instant_kill() -> Thresholds {
    Thresholds {
        sustain_secs: 0,
        ..Thresholds::default()
    }
}

/// The ten weekdays before day 15 (a Tuesday), as the predictor picks them.
const HISTORY_BEFORE_15: [i64; 10] = [14, 11, 10, 9, 8, 7, 4, 3, 2, 1];

fn request(at: i64, window: u64, th: Thresholds) -> PredictRequest {
    PredictRequest::new(at, window, th)
}

/// Light from 08:00, heavy (S2) from 08:00 on even days; on days with
/// `fails(day)` a hog runs 09:30–10:00. Hog elsewhere outside 08:00–12:00.
fn freq_series(start_load: impl Fn(i64) -> f64, fails: impl Fn(i64) -> bool) -> HostSeries {
    series_from(20, 60, |t| {
        let (day, tod) = (day_of(t), time_of_day(t));
        if !(8 * HOUR..12 * HOUR).contains(&tod) {
            return 95.0;
        }
        if fails(day) && (9 * HOUR + 1800..10 * HOUR).contains(&tod) {
            return 95.0;
        }
        start_load(day)
    })
}

#[test]
fn freq_is_the_share_of_same_start_days_that_survived() {
    let load = |day: i64| if day % 2 == 0 { 30.0 } else { 5.0 };
    let fails = |day: i64| day % 3 == 0;
    let s = freq_series(load, fails);
    let at = MONDAY + 15 * DAY + 9 * HOUR;
    let f = Frequency
        .forecast(&s, &request(at, 2 * 3600, instant_kill()))
        .unwrap();
    // W is light (day 15 is odd): the odd history days, minus those that failed.
    let same: Vec<i64> = HISTORY_BEFORE_15
        .into_iter()
        .filter(|d| d % 2 == 1)
        .collect();
    let survived = same.iter().filter(|d| !fails(**d)).count();
    let want = survived as f64 / same.len() as f64;
    assert!((f.tr - want).abs() < 1e-12, "tr {} want {want}", f.tr);
    let cause = f.fail_by_cause.unwrap();
    assert!((cause[0] - (1.0 - want)).abs() < 1e-12);
}

#[test]
fn freq_falls_back_to_all_days_when_no_day_started_like_w() {
    // Every history day starts light; today starts heavy.
    let load = |day: i64| if day == 15 { 30.0 } else { 5.0 };
    let fails = |day: i64| day % 4 == 0;
    let s = freq_series(load, fails);
    let at = MONDAY + 15 * DAY + 9 * HOUR;
    let f = Frequency
        .forecast(&s, &request(at, 2 * 3600, instant_kill()))
        .unwrap();
    let survived = HISTORY_BEFORE_15.iter().filter(|d| !fails(**d)).count();
    assert!((f.tr - survived as f64 / 10.0).abs() < 1e-12, "tr {}", f.tr);
    // A host failed at W gets zero.
    let hog_at = MONDAY + 15 * DAY + 7 * HOUR;
    let f = Frequency
        .forecast(&s, &request(hog_at, 3600, instant_kill()))
        .unwrap();
    assert_eq!(f.tr, 0.0);
}

/// From 09:00 each day the host is light for `light_minutes(day)` minutes,
/// then hogged until 12:00; hogged before 09:00.
fn markov_series(light_minutes: impl Fn(i64) -> i64) -> HostSeries {
    series_from(20, 60, |t| {
        let (day, tod) = (day_of(t), time_of_day(t));
        let light_end = 9 * HOUR + 60 * light_minutes(day);
        if (9 * HOUR..light_end).contains(&tod) {
            5.0
        } else {
            95.0
        }
    })
}

#[test]
fn markov_gives_the_geometric_survival_of_the_estimated_chain() {
    let minutes = |day: i64| 20 + 13 * (day % 7);
    let s = markov_series(minutes);
    let m = 120i64;
    let at = MONDAY + 15 * DAY + 9 * HOUR;
    let f = MarkovChain
        .forecast(&s, &request(at, m as u64 * 60, instant_kill()))
        .unwrap();
    // Each day gives L - 1 self-transitions and one kill if L ≤ m, else m self-transitions.
    let (mut stay, mut die) = (0.0, 0.0);
    for d in HISTORY_BEFORE_15 {
        let l = minutes(d);
        if l <= m {
            stay += (l - 1) as f64;
            die += 1.0;
        } else {
            stay += m as f64;
        }
    }
    let p = die / (stay + die);
    let want = (1.0 - p).powi(m as i32);
    assert!((f.tr - want).abs() < 1e-9, "tr {} want {want}", f.tr);
    let cause = f.fail_by_cause.unwrap();
    assert!((cause[0] - (1.0 - want)).abs() < 1e-9);
    assert_eq!(cause[1], 0.0);
}

/// Hogged except: idle in the morning from 08:00 for `morning(day)` minutes,
/// and idle 18:00–21:00 every day.
fn rippp_series(morning: impl Fn(i64) -> i64) -> HostSeries {
    series_from(20, 60, |t| {
        let (day, tod) = (day_of(t), time_of_day(t));
        let morning_end = 8 * HOUR + 60 * morning(day);
        if (8 * HOUR..morning_end).contains(&tod) || (18 * HOUR..21 * HOUR).contains(&tod) {
            30.0
        } else {
            95.0
        }
    })
}

#[test]
fn rippp_uses_the_zone_where_the_idle_period_started() {
    let morning = |day: i64| if day == 15 { 200 } else { 30 + 10 * (day % 5) };
    let s = rippp_series(morning);
    // Idle since 08:00 (21 points up to 08:20), asking for 30 more minutes.
    let at = MONDAY + 15 * DAY + 8 * HOUR + 20 * 60;
    let req = request(at, 30 * 60, instant_kill());
    let answer = rippp::explain(&s, &req).unwrap();
    assert_eq!(answer.age_points, Some(21));
    assert_eq!(answer.zone, Some(Zone::Morning));
    assert_eq!(
        answer.basis,
        Basis::Conditional {
            zone: Some(Zone::Morning)
        }
    );
    let lengths: Vec<i64> = HISTORY_BEFORE_15.iter().map(|d| morning(*d)).collect();
    let at_least = |l: i64| lengths.iter().filter(|x| **x >= l).count() as f64;
    let want = at_least(21 + 30) / at_least(21);
    assert!(
        (answer.tr - want).abs() < 1e-12,
        "tr {} want {want}",
        answer.tr
    );
    // Pooling with the three-hour evening periods would have said more.
    let pooled = (at_least(51) + 10.0) / (at_least(21) + 10.0);
    assert!(pooled > want + 0.1);
    assert_eq!(answer.periods.zone(Zone::Afternoon).len(), 10);
    assert_eq!(Rippp.forecast(&s, &req).unwrap().tr, answer.tr);
}

#[test]
fn rippp_drops_the_age_when_no_period_was_that_long() {
    // Today the morning idle period has lasted longer than any on record.
    let morning = |day: i64| if day == 15 { 200 } else { 30 };
    let s = rippp_series(morning);
    let at = MONDAY + 15 * DAY + 8 * HOUR + 100 * 60;
    let answer = rippp::explain(&s, &request(at, 20 * 60, instant_kill())).unwrap();
    // Pooled S(101) > 0 thanks to the 180-minute evening periods: 10 of them.
    assert_eq!(answer.basis, Basis::PooledConditional);
    assert!((answer.tr - 1.0).abs() < 1e-12);
    let at = MONDAY + 15 * DAY + 8 * HOUR + 190 * 60;
    let answer = rippp::explain(&s, &request(at, 20 * 60, instant_kill())).unwrap();
    assert_eq!(answer.basis, Basis::FreshPeriod);
    // A fresh period of 21 points: all 20 periods are at least that long.
    assert!((answer.tr - 1.0).abs() < 1e-12, "tr {}", answer.tr);
}

#[test]
fn kaplan_meier_survival_handles_censoring() {
    use rippp::{survival, IdlePeriod};
    let p = |points, censored| IdlePeriod { points, censored };
    let mut v = vec![p(2, false), p(3, true), p(4, false), p(5, false)];
    v.sort_unstable();
    assert_eq!(survival(&v, 1), 1.0);
    assert!((survival(&v, 3) - 0.75).abs() < 1e-12);
    // The censored 3 leaves the risk set: 0.75 · (1 − 1/2) at 4.
    assert!((survival(&v, 5) - 0.375).abs() < 1e-12);
    assert_eq!(survival(&v, 6), 0.0);
}

/// Light (about 5 %) until `hog_from`, about 95 % after it.
fn hog_from(hog_from: i64) -> HostSeries {
    series_from(3, 6, |t| {
        let noise = ((t * 7919) % 200) as f64 / 100.0 - 1.0;
        if t >= hog_from {
            95.0 + noise
        } else {
            5.0 + noise
        }
    })
}

fn linear_methods() -> Vec<Box<dyn ReliabilityPredictor>> {
    LINEAR
        .iter()
        .flat_map(|(point, prob, _)| [*point, *prob])
        .filter_map(|n| method_by_name(n, 7))
        .collect()
}

#[test]
fn linear_baselines_see_a_steady_hog_coming() {
    // The hog began 90 minutes before W; the sustain time is two hours, so
    // W is not yet S3 but every model's load stays high and S3 comes at W + 30 min.
    let at = MONDAY + DAY + 12 * HOUR;
    let s = hog_from(at - 90 * 60);
    let th = Thresholds {
        sustain_secs: 7200,
        ..Thresholds::default()
    };
    assert_eq!(s.state_at(th, at), Some(State::S1));
    let methods = linear_methods();
    assert_eq!(methods.len(), 10);
    for method in methods {
        let f = method.forecast(&s, &request(at, 3600, th)).unwrap();
        if method.name() == "last-prob" {
            // A random walk from 95 %: a few paths wander below Th2 in time.
            assert!(f.tr < 0.1, "last-prob {}", f.tr);
        } else {
            assert_eq!(f.tr, 0.0, "{}", method.name());
            assert_eq!(f.fail_by_cause.unwrap()[0], 1.0, "{}", method.name());
        }
        // Half an hour is too short for the sustain rule to fire.
        let f = method.forecast(&s, &request(at, 1200, th)).unwrap();
        assert_eq!(f.tr, 1.0, "{}", method.name());
    }
}

#[test]
fn linear_baselines_trust_a_steady_idle_host() {
    let at = MONDAY + DAY + 12 * HOUR;
    let req = request(at, 3600, Thresholds::default());
    let constant = series_from(3, 6, |_| 5.0);
    let noisy = hog_from(i64::MAX);
    for method in linear_methods() {
        assert_eq!(
            method.forecast(&constant, &req).unwrap().tr,
            1.0,
            "{}",
            method.name()
        );
        let tr = method.forecast(&noisy, &req).unwrap().tr;
        if method.name() == "last-prob" {
            // LAST with simulated innovations is a random walk: over 600
            // steps a few paths of ±1 % noise wander up to Th2.
            assert!((0.9..1.0).contains(&tr), "last-prob {tr}");
        } else {
            assert_eq!(tr, 1.0, "{}", method.name());
        }
    }
}

#[test]
fn linear_baselines_forecast_memory_only_for_a_working_set() {
    let at = MONDAY + DAY + 12 * HOUR;
    let s = series_from(3, 6, |_| 5.0);
    // 4096 MiB free throughout: a 5000 MiB job cannot fit; a 1000 MiB job can.
    let th = |job_mem_mib| Thresholds {
        job_mem_mib,
        ..Thresholds::default()
    };
    for method in linear_methods() {
        let ok = method.forecast(&s, &request(at, 3600, th(1000))).unwrap();
        assert_eq!(ok.tr, 1.0, "{}", method.name());
        let short = method.forecast(&s, &request(at, 3600, th(5000))).unwrap();
        assert_eq!(short.tr, 0.0, "{}", method.name());
    }
}

#[test]
fn registry_round_trips_every_name() {
    let names = method_names();
    assert_eq!(names.len(), 29);
    for name in &names {
        let method = method_by_name(name, 1).unwrap();
        assert_eq!(method.name(), *name);
    }
    assert!(method_by_name("arima", 1).is_none());
    assert_eq!(
        parse_method_list(" km, freq ,rippp,km").unwrap(),
        vec!["km", "freq", "rippp"]
    );
    assert_eq!(parse_method_list("ALL").unwrap(), names);
    assert!(matches!(
        parse_method_list("km,nope"),
        Err(MethodListError::Unknown { .. })
    ));
    assert_eq!(parse_method_list(" , "), Err(MethodListError::Empty));
}

#[test]
fn truncated_keeps_rows_up_to_w() {
    let s = series_from(1, 60, |_| 5.0);
    let t = truncated(&s, MONDAY + 90);
    assert_eq!(t.len(), 2);
    assert_eq!(t.last_time(), Some(MONDAY + 60));
    assert_eq!(truncated(&s, MONDAY - 1).len(), 0);
}

#[test]
fn blend_is_the_mean_of_km_and_freq() {
    // Same series as the freq tests: some days fail, so km and freq differ.
    let s = freq_series(|_| 5.0, |day| day % 3 == 0);
    let at = MONDAY + 15 * DAY + 9 * HOUR;
    let req = request(at, 2 * 3600, instant_kill());
    let km = method_by_name("km", 1).unwrap().forecast(&s, &req).unwrap();
    let freq = method_by_name("freq", 1)
        .unwrap()
        .forecast(&s, &req)
        .unwrap();
    let blend = method_by_name("blend", 1)
        .unwrap()
        .forecast(&s, &req)
        .unwrap();
    assert!(
        (km.tr - freq.tr).abs() > 1e-3,
        "km {} freq {}",
        km.tr,
        freq.tr
    );
    assert!((blend.tr - (km.tr + freq.tr) / 2.0).abs() < 1e-12);
    let (bf, kf, ff) = (
        blend.fail_by_cause.unwrap(),
        km.fail_by_cause.unwrap(),
        freq.fail_by_cause.unwrap(),
    );
    for c in 0..CAUSES {
        assert!((bf[c] - (kf[c] + ff[c]) / 2.0).abs() < 1e-12);
    }
    let with_age = method_by_name("blend+age", 1)
        .unwrap()
        .forecast(&s, &req)
        .unwrap();
    let aged = method_by_name("km+age", 1)
        .unwrap()
        .forecast(&s, &req)
        .unwrap();
    assert!((with_age.tr - (km.tr + freq.tr + aged.tr) / 3.0).abs() < 1e-12);
}

#[test]
fn blend_refuses_what_its_parts_refuse_and_needs_parts() {
    let s = freq_series(|_| 5.0, |_| false);
    // No weekday before the first day: no history.
    let req = request(MONDAY + 9 * HOUR, 3600, instant_kill());
    let blend = method_by_name("blend", 1).unwrap();
    assert!(matches!(
        blend.forecast(&s, &req),
        Err(PredictError::NoHistory { .. })
    ));
    assert!(Blend::new("empty", Vec::new()).is_none());
    let b = Blend::new("pair", vec![Box::new(Frequency), Box::new(MarkovChain)]).unwrap();
    assert_eq!(b.part_names(), vec!["freq", "markov"]);
}

#[test]
fn mean_forecast_drops_causes_unless_every_part_has_them() {
    let a = ReliabilityForecast {
        tr: 0.2,
        fail_by_cause: Some([0.8, 0.0, 0.0]),
    };
    let b = ReliabilityForecast {
        tr: 0.6,
        fail_by_cause: None,
    };
    let m = blend::mean_forecast(&[a, b]);
    assert!((m.tr - 0.4).abs() < 1e-12);
    assert_eq!(m.fail_by_cause, None);
    let m = blend::mean_forecast(&[a, a]);
    assert_eq!(m.fail_by_cause, Some([0.8, 0.0, 0.0]));
}

#[test]
fn inverse_brier_weights_favour_the_part_that_did_better() {
    // Part 0 had Brier 0.0, part 1 had 0.18 over 10 windows.
    let w = blend::inverse_brier_weights(&[0.0, 1.8], 10);
    assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    let want0 = (1.0 / blend::BRIER_FLOOR) / (1.0 / blend::BRIER_FLOOR + 1.0 / 0.2);
    assert!((w[0] - want0).abs() < 1e-12, "{w:?}");
    assert_eq!(blend::inverse_brier_weights(&[3.0, 1.0], 0), vec![0.5, 0.5]);
    let f = blend::weighted_forecast(
        &[
            ReliabilityForecast {
                tr: 1.0,
                fail_by_cause: Some([0.0; CAUSES]),
            },
            ReliabilityForecast {
                tr: 0.0,
                fail_by_cause: Some([1.0, 0.0, 0.0]),
            },
        ],
        &[0.75, 0.25],
    );
    assert!((f.tr - 0.75).abs() < 1e-12);
    assert_eq!(f.fail_by_cause, Some([0.25, 0.0, 0.0]));
}

#[test]
fn stack_weights_parts_by_their_history_and_stays_between_them() {
    // Even days fail: the parts (freq, markov) disagree, and the stacked
    // forecast is their mix with the weights it reports.
    let s = freq_series(|_| 5.0, |day| day % 2 == 0);
    let at = MONDAY + 15 * DAY + 9 * HOUR;
    let req = request(at, 2 * 3600, instant_kill());
    let stack = Stacked::new("s", vec![Box::new(Frequency), Box::new(MarkovChain)]).unwrap();
    let w = stack.weights(&s, &req).unwrap();
    assert_eq!(w.len(), 2);
    assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    let f = stack.forecast(&s, &req).unwrap();
    let a = Frequency.forecast(&s, &req).unwrap().tr;
    let b = MarkovChain.forecast(&s, &req).unwrap().tr;
    assert!(f.tr >= a.min(b) - 1e-12 && f.tr <= a.max(b) + 1e-12);
    assert!((f.tr - (w[0] * a + w[1] * b)).abs() < 1e-12);
    // The registry's stack reads nothing past W either (checked for all
    // names in no_method_peeks_past_w); here it must answer.
    assert!(method_by_name("stack", 1)
        .unwrap()
        .forecast(&s, &req)
        .is_ok());
}

/// A weekday hog at 10:00–10:30 every day: `logistic` learns the hour, does
/// not read past W (a truncated record with a cache of its own gives the
/// same answer), and answers the same from its cache.
#[test]
fn logistic_learns_a_daily_failure_without_peeking() {
    let series = series_from(30, 60, |t| {
        let tod = time_of_day(t);
        let weekday = day_of(t).rem_euclid(7) < 5;
        if weekday && (10 * HOUR..10 * HOUR + 1800).contains(&tod) {
            95.0
        } else {
            5.0
        }
    });
    let th = Thresholds::default();
    // Day 29 is a Wednesday.
    let before = MONDAY + 29 * DAY + 9 * HOUR;
    let after = MONDAY + 29 * DAY + 13 * HOUR;
    let method = Logistic::with_own_cache();
    let hit = method
        .forecast(&series, &request(before, 2 * 3600, th))
        .unwrap();
    let clear = method
        .forecast(&series, &request(after, 2 * 3600, th))
        .unwrap();
    assert!(hit.tr < 0.1, "window over the hog: {}", hit.tr);
    assert!(clear.tr > 0.9, "window after the hog: {}", clear.tr);
    let causes = hit.fail_by_cause.unwrap();
    assert!(
        causes[0] > 0.8,
        "the failures are CPU contention: {causes:?}"
    );
    // Cached: the same answer.
    assert_eq!(
        method
            .forecast(&series, &request(before, 2 * 3600, th))
            .unwrap(),
        hit
    );
    for at in [before, after] {
        let cut = truncated(&series, at);
        let fresh = Logistic::with_own_cache();
        assert_eq!(
            fresh.forecast(&cut, &request(at, 2 * 3600, th)),
            method.forecast(&series, &request(at, 2 * 3600, th)),
            "at {at}"
        );
    }
    // A host already failed at W gets 0; W beyond the record still answers.
    let during = MONDAY + 29 * DAY + 10 * HOUR + 600;
    let f = method.forecast(&series, &request(during, 3600, instant_kill()));
    assert_eq!(f.unwrap().tr, 0.0);
    let beyond = MONDAY + 31 * DAY + 13 * HOUR;
    assert!(method.forecast(&series, &request(beyond, 3600, th)).is_ok());
}

/// `logistic+cal` on the same daily hog: on day 29 it has two held-out
/// weeks (days 15–28) and an early fit from the days before; the hog is as
/// regular then as now, so the recalibration keeps the hour, and a
/// truncated record with a cache of its own gives the same answer.
#[test]
fn logistic_cal_keeps_a_regular_daily_failure_without_peeking() {
    calibrated_logistic_keeps_a_regular_daily_failure(
        || Logistic::with_own_cache().calibrated(),
        "logistic+cal",
    );
}

/// `logistic+iso` on the same daily hog: its past forecasts of days 15–28
/// agree with what happened (the hog is as regular), so the isotonic map
/// keeps the hour.
#[test]
fn logistic_iso_keeps_a_regular_daily_failure_without_peeking() {
    calibrated_logistic_keeps_a_regular_daily_failure(
        || Logistic::with_own_cache().isotonic(),
        "logistic+iso",
    );
}

/// The checks of the two tests above for the method `make` builds (each
/// call a cache of its own).
fn calibrated_logistic_keeps_a_regular_daily_failure(make: fn() -> Logistic, name: &str) {
    let series = series_from(30, 60, |t| {
        let tod = time_of_day(t);
        let weekday = day_of(t).rem_euclid(7) < 5;
        if weekday && (10 * HOUR..10 * HOUR + 1800).contains(&tod) {
            95.0
        } else {
            5.0
        }
    });
    let th = Thresholds::default();
    let before = MONDAY + 29 * DAY + 9 * HOUR;
    let after = MONDAY + 29 * DAY + 13 * HOUR;
    let method = make();
    assert_eq!(method.name(), name);
    let hit = method
        .forecast(&series, &request(before, 2 * 3600, th))
        .unwrap();
    let clear = method
        .forecast(&series, &request(after, 2 * 3600, th))
        .unwrap();
    assert!(hit.tr < 0.1, "window over the hog: {}", hit.tr);
    assert!(clear.tr > 0.9, "window after the hog: {}", clear.tr);
    for at in [before, after] {
        let cut = truncated(&series, at);
        assert_eq!(
            make().forecast(&cut, &request(at, 2 * 3600, th)),
            method.forecast(&series, &request(at, 2 * 3600, th)),
            "at {at}"
        );
    }
    // Day 20: the record before the held-out days is 6 days, too short, so
    // the answer is plain `logistic`'s.
    let early = MONDAY + 20 * DAY + 9 * HOUR;
    assert_eq!(
        method.forecast(&series, &request(early, 2 * 3600, th)),
        Logistic::with_own_cache().forecast(&series, &request(early, 2 * 3600, th))
    );
}

/// `logistic` remembers the last present it read (the node asks one W for
/// five lengths): answers through the memo equal answers from a fresh
/// cache, however lengths, W and records (a copy heavy for three hours
/// around W, which changes the present) alternate.
#[test]
fn logistic_present_memo_gives_the_fresh_answer() {
    // Even days heavy from 08:00 to 12:00 with a hog at 10:00: a window
    // begun heavy at 09:00 fails, a light one survives.
    let load = |t: i64, heavy_today: bool| {
        let tod = time_of_day(t);
        let heavy = heavy_today && (8 * HOUR..12 * HOUR).contains(&tod);
        if heavy && (10 * HOUR..10 * HOUR + 1800).contains(&tod) {
            95.0
        } else if heavy {
            30.0
        } else {
            12.0
        }
    };
    let quiet = series_from(20, 60, |t| load(t, day_of(t) % 2 == 0));
    // Day 17 (a Thursday, odd: light) heavy in the copy.
    let hog = series_from(20, 60, |t| load(t, day_of(t) % 2 == 0 || day_of(t) == 17));
    let at = MONDAY + 17 * DAY + 9 * HOUR;
    let th = Thresholds::default();
    let memo = Logistic::with_own_cache();
    let mut differ = false;
    for (record, w, secs) in [
        (&quiet, at, 3600),
        (&quiet, at, 36_000),
        (&hog, at, 3600),
        (&hog, at + 600, 3600),
        (&quiet, at, 3600),
        (&hog, at, 36_000),
    ] {
        let req = request(w, secs, th);
        let fresh = Logistic::with_own_cache().forecast(record, &req).unwrap();
        assert_eq!(memo.forecast(record, &req).unwrap(), fresh, "{w} {secs}");
        let other = if std::ptr::eq(record, &quiet) {
            &hog
        } else {
            &quiet
        };
        differ |= Logistic::with_own_cache().forecast(other, &req).unwrap() != fresh;
    }
    assert!(differ, "the heavy hours never changed the present");
}
