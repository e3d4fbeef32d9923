//! Tests of `logistic+hostcal`: the map's fit (the identity without two
//! weeks of resolved past, the intercept and slope that made the outcomes),
//! that it corrects a base 0.1 too high on a hand-built host, that a young
//! host gets `logistic` unchanged, and that it reads no outcome later than
//! W's local midnight.

use super::*;
use crate::baselines::test_series::{series_from, DAY, HOUR, MONDAY};
use crate::baselines::{method_by_name, truncated};
use crate::state::Thresholds;

fn request(at: i64, window: u64) -> PredictRequest {
    PredictRequest::new(at, window, Thresholds::default())
}

/// TR 0.9 for windows starting at an even UTC hour, 0.6 at an odd one.
struct ByHour;

impl ReliabilityPredictor for ByHour {
    fn name(&self) -> String {
        "by-hour".to_string()
    }
    fn forecast(
        &self,
        _: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let tr = if (req.at - MONDAY).rem_euclid(DAY) / HOUR % 2 == 0 {
            0.9
        } else {
            0.6
        };
        Ok(ReliabilityForecast {
            tr,
            fail_by_cause: Some([1.0 - tr, 0.0, 0.0]),
        })
    }
}

/// A host whose 1 h windows survive 4 days in 5 at even hours and every
/// other day at odd ones (a hog at h:30–h:50 on those days): `ByHour`'s
/// forecasts are 0.1 too high at both.
fn too_high_by_a_tenth(days: i64) -> HostSeries {
    series_from(days, 60, |t| {
        let since = t - MONDAY;
        let (day, tod) = (since.div_euclid(DAY), since.rem_euclid(DAY));
        let (hour, minute) = (tod / HOUR, (tod % HOUR) / 60);
        let hog_day = if hour % 2 == 0 {
            day % 5 == 0
        } else {
            day % 2 == 0
        };
        if hog_day && (30..50).contains(&minute) {
            95.0
        } else {
            5.0
        }
    })
}

/// `days` days of windows with base log-odds z ∈ {−2, −1, 0, 1, 2}, each
/// outcome the share σ(a + b z) (fractional: the fit's loss is the same
/// cross-entropy, so its minimum is (a, b) but for the ridge).
fn generated(days: i64, a: f64, b: f64) -> Vec<(i64, Arc<Vec<Past>>)> {
    (0..days)
        .map(|age| {
            let windows = (0..24)
                .map(|k| {
                    let z = f64::from(k % 5) - 2.0;
                    (z, sigmoid(a + b * z))
                })
                .collect();
            (age, Arc::new(windows))
        })
        .collect()
}

#[test]
fn no_resolved_past_is_the_identity() {
    let days = generated(MIN_PAST_DAYS as i64 - 1, -0.4, 0.7);
    assert_eq!(HostCalibration::fit(&days), HostCalibration::IDENTITY);
    // Days with no resolved window do not count.
    let mut padded = days.clone();
    padded.extend((20..40).map(|age| (age, Arc::new(Vec::new()))));
    assert_eq!(HostCalibration::fit(&padded), HostCalibration::IDENTITY);
    assert!((HostCalibration::IDENTITY.apply(0.3) - 0.3).abs() < 1e-12);
}

#[test]
fn fit_recovers_the_intercept_and_slope_that_made_the_outcomes() {
    // 120 days weigh ≈ 24 · 28 / ln 2 ≈ 970 windows against a ridge of 10:
    // the pull towards the identity moves each term by a few per cent.
    let c = HostCalibration::fit(&generated(120, -0.4, 0.7));
    assert_eq!(c.days, 120);
    assert!((-0.42..-0.36).contains(&c.intercept), "{c:?}");
    assert!((0.68..0.74).contains(&c.slope), "{c:?}");
    // Fewer days, more pull: the same outcomes over 20 days leave the map
    // nearer the identity.
    let young = HostCalibration::fit(&generated(20, -0.4, 0.7));
    assert!(
        young.intercept > c.intercept && young.slope > c.slope,
        "{young:?}"
    );
}

#[test]
fn a_host_forecast_a_tenth_too_high_is_corrected_towards_its_outcomes() {
    let series = too_high_by_a_tenth(30);
    let method = HostCal::over(Box::new(ByHour));
    assert_eq!(method.name(), "by-hour+hostcal");
    for (hour, truth) in [(8, 0.8), (9, 0.5)] {
        let req = request(MONDAY + 28 * DAY + hour * HOUR, 3600);
        let c = method.calibration(&series, &req).unwrap();
        assert!(c.days >= MIN_PAST_DAYS, "{c:?}");
        let base = ByHour.forecast(&series, &req).unwrap().tr;
        let f = method.forecast(&series, &req).unwrap();
        assert!((base - truth - 0.1).abs() < 1e-12);
        assert!((f.tr - truth).abs() < 0.04, "tr {} at {hour} h", f.tr);
        let split = f.fail_by_cause.unwrap();
        assert!((split.iter().sum::<f64>() - (1.0 - f.tr)).abs() < 1e-12);
    }
}

#[test]
fn a_host_with_no_resolved_past_gets_logistic_unchanged() {
    let series = too_high_by_a_tenth(30);
    let hostcal = method_by_name("logistic+hostcal", 1).unwrap();
    let logistic = method_by_name("logistic", 1).unwrap();
    assert_eq!(hostcal.name(), "logistic+hostcal");
    // A day of past and ten days (under the two weeks).
    for day in [1, 10] {
        let req = request(MONDAY + day * DAY + 8 * HOUR, 3600);
        assert_eq!(
            hostcal.forecast(&series, &req).unwrap(),
            logistic.forecast(&series, &req).unwrap(),
            "day {day}"
        );
    }
}

/// A host with a hog at 10:30–10:50 and 11:30–11:50 every third day, and
/// all day on `hog_date` (a day number) if given: no window that starts
/// after noon and ends before the next 10:00 fails otherwise.
fn morning_hogs(days: i64, hog_date: Option<i64>) -> HostSeries {
    series_from(days, 60, |t| {
        let since = t - MONDAY;
        let (day, tod) = (since.div_euclid(DAY), since.rem_euclid(DAY));
        let (hour, minute) = (tod / HOUR, (tod % HOUR) / 60);
        let hog = day % 3 == 0 && (10..12).contains(&hour) && (30..50).contains(&minute);
        if hog || hog_date == Some(day) {
            95.0
        } else {
            5.0
        }
    })
}

/// No peeking: the map at W reads no outcome later than W's local
/// midnight. A hog over all of W's date — its small hours, where
/// yesterday's 10 h windows end before W (20:00), and after W — changes no
/// map (it would: those windows survive without it); the forecast at W is
/// the same from the record cut at W.
#[test]
fn reads_no_outcome_after_the_forecasts_origin() {
    let date = 26;
    let at = MONDAY + date * DAY + 20 * HOUR;
    let series = morning_hogs(30, None);
    let changed = morning_hogs(30, Some(date));
    for window in [3600, 10 * 3600] {
        let req = request(at, window);
        let before = HostCal::over(Box::new(ByHour))
            .calibration(&series, &req)
            .unwrap();
        assert!(before.days >= MIN_PAST_DAYS, "{before:?}");
        assert!(before.intercept.abs() > 0.1, "{before:?}");
        let after = HostCal::over(Box::new(ByHour))
            .calibration(&changed, &req)
            .unwrap();
        assert_eq!(after, before, "{window} s");
    }
    let req = request(at, 3 * 3600);
    let method = HostCal::shared();
    assert_eq!(
        method.forecast(&truncated(&series, at), &req).unwrap(),
        method.forecast(&series, &req).unwrap()
    );
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
    let f = HostCal::over(Box::new(Logistic::with_own_cache()))
        .forecast(&series, &req)
        .unwrap();
    assert_eq!(f.tr, 0.0);
}
