//! Tests of `logistic+hourbias`: the correction's fit (none without two
//! weeks of past, the hour bias that generated the outcomes, forgetting),
//! that it corrects a base biased by hour on a hand-built host, and that it
//! reads nothing of W's date or after it.

use super::*;
use crate::baselines::test_series::{series_from, DAY, HOUR, MONDAY};
use crate::baselines::{method_by_name, truncated};
use crate::state::Thresholds;

fn request(at: i64, window: u64) -> PredictRequest {
    PredictRequest::new(at, window, Thresholds::default())
}

/// Always the same TR.
struct Constant(f64);

impl ReliabilityPredictor for Constant {
    fn name(&self) -> String {
        format!("constant {}", self.0)
    }
    fn forecast(
        &self,
        _: &HostSeries,
        _: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        Ok(ReliabilityForecast {
            tr: self.0,
            fail_by_cause: Some([1.0 - self.0, 0.0, 0.0]),
        })
    }
}

/// `days` days of 24 windows (one per hour), base log-odds 0 at every
/// hour, each outcome the share σ(shift(h)) (a fractional outcome: the
/// fit's loss is the same cross-entropy, so its minimum sits at the shift's
/// coefficients but for the ridge).
fn generated(days: i64, shift: impl Fn(f64) -> f64) -> Vec<(i64, Arc<Vec<Past>>)> {
    (0..days)
        .map(|age| {
            let windows = (0..24)
                .map(|h| {
                    let hour = f64::from(h);
                    (0.0, hour, sigmoid(shift(hour)))
                })
                .collect();
            (age, Arc::new(windows))
        })
        .collect()
}

/// A morning that fails more than the base says and an evening that
/// survives more: c(h) = 0.3 − 0.8 cos(2πh/24).
fn morning_low(hour: f64) -> f64 {
    0.3 - 0.8 * (std::f64::consts::TAU * hour / 24.0).cos()
}

#[test]
fn fewer_than_two_weeks_is_no_correction() {
    let days = generated(MIN_PAST_DAYS as i64 - 1, morning_low);
    assert_eq!(HourCorrection::fit(&days), HourCorrection::NONE);
    // Empty days do not count towards the two weeks.
    let mut padded = days.clone();
    padded.extend((20..40).map(|age| (age, Arc::new(Vec::new()))));
    assert_eq!(HourCorrection::fit(&padded), HourCorrection::NONE);
    assert!((HourCorrection::NONE.apply(0.3, 7.0) - 0.3).abs() < 1e-12);
}

#[test]
fn fit_recovers_the_hour_bias_that_made_the_outcomes() {
    // 120 days: Σ weight ≈ 24 · 28 / ln 2 ≈ 970 windows; the curvature
    // on a term is Σ w p (1 − p) x² (≈ 200 for the intercept, ≈ 100 for a
    // harmonic, whose square averages ½) against a ridge of 10, so the pull
    // towards 0 shrinks the intercept by about 5 % and a harmonic by 9 %.
    let days = generated(120, morning_low);
    let c = HourCorrection::fit(&days);
    assert_eq!(c.days, 120);
    let [a, u1, v1, u2, v2] = c.coef;
    assert!((0.26..0.3).contains(&a), "a = {a}");
    assert!((-0.8..-0.7).contains(&u1), "u1 = {u1}");
    for other in [v1, u2, v2] {
        assert!(other.abs() < 0.01, "{:?}", c.coef);
    }
    assert!(c.apply(0.5, 0.0) < 0.4 && c.apply(0.5, 12.0) > 0.7);
    // And it is the minimum of the stated loss: its gradient,
    // ridge · c + Σ w (σ(η) − y) x, vanishes (to the curvature, ≈ 200,
    // times the last move allowed, 1e-7).
    let mut grad = c.coef.map(|ci| RIDGE * ci);
    for (age, windows) in &days {
        let w = (-(*age as f64) / HALF_LIFE_DAYS).exp2();
        for &(z, hour, y) in windows.iter() {
            let x = terms(hour);
            let r = w * (sigmoid(z + dot(&c.coef, &x)) - y);
            for (g, xi) in grad.iter_mut().zip(x) {
                *g += r * xi;
            }
        }
    }
    assert!(grad.iter().all(|g| g.abs() < 1e-4), "{grad:?}");
}

#[test]
fn recent_days_weigh_more_than_old_ones() {
    // The last 40 days say the morning is low; the 80 before, high. With
    // a half-life of 28 days the 40 weigh 1 − 2^(−40/28) ≈ 63 % of all.
    let mut days = generated(40, morning_low);
    days.extend(generated(120, |h| -morning_low(h)).into_iter().skip(40));
    assert!(HourCorrection::fit(&days).shift(0.0) < 0.0);
    // The same days with the regimes swapped: the other sign.
    let mut old_first = generated(40, |h| -morning_low(h));
    old_first.extend(generated(120, morning_low).into_iter().skip(40));
    assert!(HourCorrection::fit(&old_first).shift(0.0) > 0.0);
}

/// A host where the 1 h windows starting at odd hours fail and those at
/// even hours survive: a hog (S3 once sustained) at h:30–h:50 of every odd
/// hour h.
fn odd_hours_fail(days: i64) -> HostSeries {
    series_from(days, 60, |t| {
        let tod = (t - MONDAY).rem_euclid(DAY);
        let (hour, minute) = (tod / HOUR, (tod % HOUR) / 60);
        if hour % 2 == 1 && (30..50).contains(&minute) {
            95.0
        } else {
            5.0
        }
    })
}

#[test]
fn a_base_blind_to_the_hour_is_pulled_to_the_share_of_its_hours() {
    let series = odd_hours_fail(24);
    let method = HourBias::over(Box::new(Constant(0.9)));
    // Two harmonics cannot tell odd from even hours: the shift is about
    // flat, taking 0.9 to the overall share ½ (the ridge keeps it a little
    // above).
    for hour in [8, 9] {
        let req = request(MONDAY + 20 * DAY + hour * HOUR, 3600);
        let c = method.correction(&series, &req).unwrap();
        assert!(c.days >= MIN_PAST_DAYS, "{c:?}");
        let f = method.forecast(&series, &req).unwrap();
        assert!((f.tr - 0.5).abs() < 0.1, "tr {} at {hour}", f.tr);
        let split = f.fail_by_cause.unwrap();
        assert!((split.iter().sum::<f64>() - (1.0 - f.tr)).abs() < 1e-12);
    }
    assert_eq!(method.name(), "constant 0.9+hourbias");
}

/// A host whose 3 h windows fail when they start between 06:00 and 11:00
/// (a hog at 10:00–10:30 every day): a constant base is low at night and
/// high in the morning once corrected, as the outcomes were.
#[test]
fn a_constant_base_learns_the_morning() {
    let series = series_from(24, 60, |t| {
        let tod = (t - MONDAY).rem_euclid(DAY);
        if (10 * HOUR..10 * HOUR + 1800).contains(&tod) {
            95.0
        } else {
            5.0
        }
    });
    let method = HourBias::over(Box::new(Constant(0.7)));
    let at = |hour: i64| MONDAY + 20 * DAY + hour * HOUR;
    let morning = method.forecast(&series, &request(at(8), 3 * 3600)).unwrap();
    let evening = method
        .forecast(&series, &request(at(20), 3 * 3600))
        .unwrap();
    assert!(morning.tr < 0.6, "morning {}", morning.tr);
    assert!(evening.tr > 0.8, "evening {}", evening.tr);
}

#[test]
fn with_little_past_it_is_logistic() {
    let series = odd_hours_fail(30);
    let req = request(MONDAY + 10 * DAY + 8 * HOUR, 3600);
    let corrected = method_by_name("logistic+hourbias", 1).unwrap();
    let logistic = method_by_name("logistic", 1).unwrap();
    assert_eq!(corrected.name(), "logistic+hourbias");
    assert_eq!(
        corrected.forecast(&series, &req).unwrap(),
        logistic.forecast(&series, &req).unwrap()
    );
}

/// No peeking: the forecast at W reads nothing after W, and the correction
/// nothing of W's own date (a hog all of W's morning changes it not).
#[test]
fn reads_nothing_after_w_nor_of_ws_date() {
    let series = odd_hours_fail(30);
    let date_start = MONDAY + 25 * DAY;
    let at = date_start + 9 * HOUR;
    let req = request(at, 3 * 3600);
    let method = HourBias::shared();
    let full = method.forecast(&series, &req).unwrap();
    let cut = truncated(&series, at);
    assert_eq!(method.forecast(&cut, &req).unwrap(), full);
    let correction = HourBias::over(Box::new(Logistic::with_own_cache()))
        .correction(&series, &req)
        .unwrap();
    assert!(correction.days >= MIN_PAST_DAYS);
    let changed = series_from(30, 60, |t| {
        let tod = (t - MONDAY).rem_euclid(DAY);
        let (hour, minute) = (tod / HOUR, (tod % HOUR) / 60);
        let odd_hog = hour % 2 == 1 && (30..50).contains(&minute);
        if odd_hog || (date_start..date_start + 12 * HOUR).contains(&t) {
            95.0
        } else {
            5.0
        }
    });
    let later_that_day = request(date_start + 20 * HOUR, 3 * 3600);
    let changed_correction = HourBias::over(Box::new(Logistic::with_own_cache()))
        .correction(&changed, &later_that_day)
        .unwrap();
    assert_eq!(changed_correction, correction);
}

#[test]
fn a_failed_host_gets_the_base_answer() {
    // A hog all of day 20: S3 by noon.
    let series = series_from(22, 60, |t| {
        if (MONDAY + 20 * DAY..MONDAY + 21 * DAY).contains(&t) {
            95.0
        } else {
            5.0
        }
    });
    let req = request(MONDAY + 20 * DAY + 12 * HOUR, 3600);
    let f = HourBias::over(Box::new(Logistic::with_own_cache()))
        .forecast(&series, &req)
        .unwrap();
    assert_eq!(f.tr, 0.0);
}
