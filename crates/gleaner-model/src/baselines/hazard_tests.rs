//! Tests of `hazard`: survival by hand, censoring, the binomial fit by hand,
//! one pass equal to one forecast per length, no peeking, hostile records.

use super::*;
use crate::baselines::test_series::{series_from, DAY, HOUR, MONDAY};
use crate::baselines::truncated;
use crate::series::Sample;
use jiff::tz::TimeZone;

/// A weekday hog at 10:00–10:30 (CPU contention, S3 once sustained).
fn daily_hog(days: i64) -> HostSeries {
    series_from(days, 60, |t| {
        let tod = (t - MONDAY).rem_euclid(DAY);
        let weekday = (t - MONDAY).div_euclid(DAY).rem_euclid(7) < 5;
        if weekday && (10 * HOUR..10 * HOUR + 1800).contains(&tod) {
            95.0
        } else {
            5.0
        }
    })
}

fn request(at: i64, window: u64) -> PredictRequest {
    PredictRequest::new(at, window, Thresholds::default())
}

fn neutral_origin() -> Origin {
    Origin {
        class: 0,
        age: 0.0,
        load: 0.0,
        since: 0.0,
        mem: 0.0,
    }
}

#[test]
fn buckets_are_log2_of_the_step_index() {
    let b: Vec<usize> = (0..8).map(bucket).collect();
    assert_eq!(b, vec![0, 1, 1, 2, 2, 2, 2, 3]);
    assert_eq!(bucket(usize::MAX - 1), BUCKETS - 1);
}

/// Intercept-only coefficients give a constant hazard h = σ(b0); the
/// survival at m fine steps with c = 5 per coarse step is (1 − h)^(m/5),
/// worked out here by hand for h = σ(−2) = 0.119 202 922 0.
#[test]
fn survival_by_hand_from_one_pass() {
    let mut beta = [0.0; FEATURES];
    beta[0] = -2.0;
    let fit = HazardFit {
        base: [0.0; 48],
        beta,
        causes: [[0.0; CAUSES]; 2],
        coarse: 5,
        origins: 1,
    };
    let h: f64 = 0.119_202_922_022_117_6;
    let s = survival(&fit, &neutral_origin(), 5.0 / 60.0, &[12, 5, 10, 1], |_| {
        (false, 9)
    });
    let want = [
        (1.0 - h).powi(2) * (1.0 - h).powf(0.4),
        1.0 - h,
        (1.0 - h).powi(2),
        (1.0 - h).powf(0.2),
    ];
    for (got, want) in s.iter().zip(want) {
        assert!((got - want).abs() < 1e-12, "{s:?}");
    }
}

/// The hour's base hazard moves the step's hazard: base logits of −1 at
/// 09:00 and +1 at 10:00 with β = (0, 1, 0…) give h = σ(−1) then σ(1).
#[test]
fn survival_follows_the_hour_of_each_step() {
    let mut base = [0.0; 48];
    base[base_slot(false, 9)] = -1.0;
    base[base_slot(false, 10)] = 1.0;
    let fit = HazardFit {
        base,
        beta: NEUTRAL,
        causes: [[0.0; CAUSES]; 2],
        coarse: 1,
        origins: 1,
    };
    let s = survival(&fit, &neutral_origin(), 1.0, &[2, 1], |j| {
        (false, 9 + j as u8)
    });
    let (h9, h10) = (sigmoid(-1.0), sigmoid(1.0));
    assert!((s[0] - (1.0 - h9) * (1.0 - h10)).abs() < 1e-12);
    assert!((s[1] - (1.0 - h9)).abs() < 1e-12);
}

#[test]
fn censoring_contributes_survival_only() {
    // Failure in coarse step 3, 10 steps before the cut: 4 steps, the last an event.
    assert_eq!(follow_up(Some(3), 10), (4, true));
    // No failure known: followed to the cut, no event.
    assert_eq!(follow_up(None, 5), (5, false));
    // A failure at or after the cut is not seen: censored at the cut.
    assert_eq!(follow_up(Some(5), 5), (5, false));
    assert_eq!(follow_up(Some(7), 5), (5, false));
    assert_eq!(follow_up(Some(0), 0), (0, false));
}

/// Two origins as rows: one failing in its third step (3 at risk, 1
/// event), one censored after 5 steps (5 at risk, none). With an intercept
/// only and no pull, the hazard is events / steps at risk = 1/8: the
/// censored origin's steps count as survival and nothing else.
#[test]
fn the_fit_of_censored_rows_is_events_over_steps_at_risk() {
    let x = {
        let mut x = [0.0; FEATURES];
        x[0] = 1.0;
        x
    };
    let rows: [Row; 3] = [(x, 2.0, 0.0), (x, 1.0, 1.0), (x, 5.0, 0.0)];
    let beta = newton(&rows, [0.0; FEATURES], 1e-9);
    assert!((sigmoid(beta[0]) - 0.125).abs() < 1e-6, "{beta:?}");
    // A pull towards 0 of λ = 8 moves it to the root of
    // 8 (σ(b) − 1/8) + 8 b = 0, i.e. b = 1/8 − σ(b): b = −0.300 447 976 (by bisection).
    let pulled = newton(&rows, [0.0; FEATURES], 8.0);
    assert!((pulled[0] + 0.300_447_976).abs() < 1e-6, "{pulled:?}");
}

/// The daily hog: the hazard learns the hour, the curve from one pass
/// equals one forecast per length, and the answers do not depend on rows
/// after W (a truncated record with a cache of its own answers the same).
#[test]
fn hazard_learns_a_daily_failure_without_peeking() {
    let series = daily_hog(30);
    // Day 29 is a Wednesday.
    let before = MONDAY + 29 * DAY + 9 * HOUR;
    let after = MONDAY + 29 * DAY + 13 * HOUR;
    let method = Hazard::with_own_cache();
    let hit = method
        .forecast(&series, &request(before, 2 * 3600))
        .unwrap();
    let clear = method.forecast(&series, &request(after, 2 * 3600)).unwrap();
    // The hazard is learnt per hour of the day (the 10:00 hour also holds
    // the at-risk steps after 10:30), so a failure at one fixed minute is
    // spread over its hour: TR well under `freq`'s 0 + smoothing, not 0.
    assert!(hit.tr < 0.3, "window over the hog: {}", hit.tr);
    assert!(clear.tr > 0.8, "window after the hog: {}", clear.tr);
    let causes = hit.fail_by_cause.unwrap();
    assert!(
        (causes[0] - (1.0 - hit.tr)).abs() < 1e-12,
        "all CPU contention: {causes:?}"
    );
    // One pass for the curve, the same as one forecast per length, never rising.
    let lengths = [1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600];
    let curve = method.forecast_curve(&series, &request(before, 3600), &lengths);
    let mut last = 1.0;
    for (w, c) in lengths.iter().zip(&curve) {
        let one = Hazard::with_own_cache()
            .forecast(&series, &request(before, *w))
            .unwrap()
            .tr;
        let c = c.as_ref().unwrap().tr;
        // The curve's fit has the 12 h horizon of its longest length, as
        // each single one here: equal.
        assert!((c - one).abs() < 1e-12, "{w}: {c} vs {one}");
        assert!(c <= last + 1e-12);
        last = c;
    }
    for at in [before, after] {
        let cut = truncated(&series, at);
        let fresh = Hazard::with_own_cache();
        assert_eq!(
            fresh.forecast(&cut, &request(at, 2 * 3600)),
            method.forecast(&series, &request(at, 2 * 3600)),
            "at {at}"
        );
        // A record whose future differs (no hog after W) gives the same answer.
        let mut other = cut.clone();
        let mut t = cut.last_time().unwrap() + 60;
        while t < MONDAY + 31 * DAY {
            other
                .push(Sample {
                    time: t,
                    cpu: 1.0,
                    free_mib: 4096,
                    up: true,
                })
                .unwrap();
            t += 60;
        }
        assert_eq!(
            Hazard::with_own_cache().forecast(&other, &request(at, 2 * 3600)),
            fresh.forecast(&cut, &request(at, 2 * 3600)),
            "future changed, at {at}"
        );
    }
    // A host already failed at W gets 0.
    let during = MONDAY + 29 * DAY + 10 * HOUR + 1500;
    let f = method.forecast(&series, &request(during, 3600)).unwrap();
    assert_eq!(f.tr, 0.0);
}

/// The rows of a fit never reach past W's midnight: the fit of day 20 is
/// the same from the whole record and from the record cut at 00:00 of day 20.
#[test]
fn the_fit_reads_nothing_after_midnight() {
    let series = daily_hog(30);
    let th = Thresholds::default();
    let midnight = MONDAY + 20 * DAY;
    let (date, m) = local_midnight(&series, midnight + 9 * HOUR).unwrap();
    assert_eq!(m, midnight);
    let full = GridIndex::build(&series, th).unwrap();
    let cut = GridIndex::build(&truncated(&series, midnight), th).unwrap();
    let a = fit(&full, 0, 5, 144, date, midnight);
    let b = fit(&cut, 0, 5, 144, date, midnight);
    assert_eq!(a.beta, b.beta);
    assert_eq!(a.base, b.base);
    assert_eq!(a.origins, b.origins);
    assert!(a.origins > 400, "{}", a.origins);
}

#[test]
fn hostile_records_get_errors_not_panics() {
    let method = Hazard::with_own_cache();
    let empty = HostSeries::new(60, 120, TimeZone::UTC);
    assert!(method.forecast(&empty, &request(MONDAY, 3600)).is_err());
    let one = series_from(1, DAY, |_| 5.0);
    assert!(method.forecast(&one, &request(MONDAY, 3600)).is_err());
    // Half a day: no past date to learn from.
    let short = series_from(1, 60, |_| 5.0);
    assert!(method
        .forecast(&short, &request(MONDAY + 12 * HOUR, 3600))
        .is_err());
    // Two days: answers, inside [0, 1].
    let two = daily_hog(2);
    let f = method
        .forecast(&two, &request(MONDAY + DAY + 12 * HOUR, 3600))
        .unwrap();
    assert!((0.0..=1.0).contains(&f.tr));
    // A zero-length window and an absurd one are refused by the request's
    // checks, the others of the same curve still answer.
    let curve = method.forecast_curve(
        &two,
        &request(MONDAY + DAY + 12 * HOUR, 3600),
        &[0, 3600, u64::MAX],
    );
    assert!(curve[0].is_err() && curve[1].is_ok() && curve[2].is_err());
    assert_eq!(curve[1].as_ref().unwrap(), &f);
    // W far before or after the record.
    assert!(method.forecast(&two, &request(0, 3600)).is_err());
    assert!(method
        .forecast(&two, &request(MONDAY + 400 * DAY, 3600))
        .is_ok_and(|f| (0.0..=1.0).contains(&f.tr)));
}
