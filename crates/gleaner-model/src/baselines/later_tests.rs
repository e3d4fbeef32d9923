//! Tests of `logistic`'s answer for a window that starts after the
//! record's last sample ([`super::later`]): it must read the clock and the
//! present, not fall back to `freq`'s count of past days.

use super::later::lead_bucket;
use super::test_series::{series_from, DAY, HOUR, MONDAY};
use super::{truncated, Frequency, Logistic};
use crate::predict::PredictRequest;
use crate::predictor::ReliabilityPredictor;
use crate::series::HostSeries;
use crate::state::Thresholds;

/// Days on which the owner of [`afternoon_owner`] comes in (about 3 in 5,
/// in no weekly pattern).
fn comes_in(day: i64) -> bool {
    (day * 7 + 3) % 5 < 3
}

/// A host whose owner, on the days they come in, keeps it busy from
/// 14:00 to 22:00; idle all day otherwise. Whether the host is busy at
/// 15:00 tells whether it will be at 17:00; the clock alone says 3 in 5.
fn afternoon_owner(days: i64) -> HostSeries {
    series_from(days, 60, |t| {
        let (day, tod) = ((t - MONDAY).div_euclid(DAY), (t - MONDAY).rem_euclid(DAY));
        if comes_in(day) && (14 * HOUR..22 * HOUR).contains(&tod) {
            95.0
        } else {
            5.0
        }
    })
}

/// TR of `method` for a window of `len` starting `lead` after `origin`,
/// asked on the record cut at `origin` (as the node asks at its last sample).
fn later_tr(
    method: &dyn ReliabilityPredictor,
    series: &HostSeries,
    origin: i64,
    lead: i64,
    len: u64,
) -> f64 {
    let cut = truncated(series, origin);
    let req = PredictRequest::new(origin + lead, len, Thresholds::default());
    method.forecast(&cut, &req).unwrap().tr
}

/// The finding's case: the present at the origin decides a window two hours
/// later. `freq` counts past days (about 0.4 survive at 17:00); the default
/// must answer near 0 when the owner is in at 15:00 and near 1 when not,
/// and be closer to what happened than `freq` on every test weekday (within 0.2:
/// the ±1 h smoothing of the shares mixes in 14:00 origins, when the owner
/// has just come in and the host does not read busy yet).
#[test]
fn a_later_window_reads_the_present_not_freq() {
    let series = afternoon_owner(70);
    let method = Logistic::with_own_cache();
    let mut checked = [0usize; 2];
    // Weekdays: the weekend's cells hold 2 days in 7 and lean on the clock.
    for day in (50..70).filter(|d| d % 7 < 5) {
        let origin = MONDAY + day * DAY + 15 * HOUR;
        let truth = if comes_in(day) { 0.0 } else { 1.0 };
        let tr = later_tr(&method, &series, origin, 2 * HOUR, 3600);
        let freq = later_tr(&Frequency, &series, origin, 2 * HOUR, 3600);
        assert!(
            (tr - truth).abs() < 0.2,
            "day {day}: TR {tr}, truth {truth}"
        );
        assert!(
            (tr - truth).abs() + 0.2 < (freq - truth).abs(),
            "day {day}: TR {tr}, freq {freq}, truth {truth}"
        );
        checked[usize::from(comes_in(day))] += 1;
    }
    assert!(checked[0] >= 5 && checked[1] >= 5, "{checked:?}");
}

/// An evening habit: busy 19:00–23:00 every day. Asked at 10:00 (idle
/// now), a 1 h window at 19:00 is almost sure to fail and one at 13:00
/// almost sure to pass; the answers are not a count's tenths.
#[test]
fn a_later_window_reads_the_clock() {
    let series = series_from(40, 60, |t| {
        let tod = (t - MONDAY).rem_euclid(DAY);
        if (19 * HOUR..23 * HOUR).contains(&tod) {
            95.0
        } else {
            5.0
        }
    });
    let method = Logistic::with_own_cache();
    let origin = MONDAY + 35 * DAY + 10 * HOUR;
    let evening = later_tr(&method, &series, origin, 9 * HOUR, 3600);
    let afternoon = later_tr(&method, &series, origin, 3 * HOUR, 3600);
    assert!(evening < 0.1, "19:00: {evening}");
    assert!(afternoon > 0.9, "13:00: {afternoon}");
    assert!(((evening * 10.0).round() - evening * 10.0).abs() > 1e-9);
    // The next day's evening too (a lead beyond the day).
    let tomorrow = later_tr(&method, &series, origin, 33 * HOUR, 3600);
    assert!(tomorrow < 0.1, "19:00 tomorrow: {tomorrow}");
}

/// A host whose busy hours fall at random (independent of the clock and of
/// the present): the answer for a later window is about its base rate at
/// every lead, neither sure nor a copy of the present.
#[test]
fn an_unpredictable_host_gets_its_base_rate() {
    // Busy in a pseudo-random third of the hours (splitmix64 of the hour).
    let busy = |hour: i64| {
        let mut z = (hour as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % 3 == 0
    };
    let series = series_from(60, 60, |t| {
        if busy((t - MONDAY).div_euclid(HOUR)) {
            95.0
        } else {
            5.0
        }
    });
    // The share of 1 h windows on the hour that pass: their hour is idle
    // (a busy next hour is S3 only after the 60 s sustain, past the end).
    let hours = 60 * 24;
    let passed = (0..hours).filter(|&h| !busy(h)).count() as f64 / hours as f64;
    let method = Logistic::with_own_cache();
    for day in [50, 55, 58] {
        for lead in [3, 6, 12, 24] {
            let origin = MONDAY + day * DAY + 9 * HOUR;
            let tr = later_tr(&method, &series, origin, lead * HOUR, 3600);
            assert!(
                (tr - passed).abs() < 0.12,
                "day {day} +{lead} h: {tr} against {passed}"
            );
        }
    }
}

#[test]
fn leads_map_to_the_nearest_trained_lead() {
    assert_eq!(lead_bucket(0), 0);
    assert_eq!(lead_bucket(60), 0);
    assert_eq!(lead_bucket(3600), 0);
    assert_eq!(lead_bucket(2 * 3600), 1);
    assert_eq!(lead_bucket(5 * 3600), 4); // 6 h is nearer than 4 h on a log scale
    assert_eq!(lead_bucket(24 * 3600), 8);
    assert_eq!(lead_bucket(7 * 86_400), 9);
}

/// A W a few minutes after the last sample (the node's clock runs ahead of
/// its samples) is the window at the last sample: the same answer, which
/// reads the present there; ten minutes on, the later model answers.
#[test]
fn a_window_just_after_the_last_sample_is_answered_at_it() {
    let series = afternoon_owner(60);
    let method = Logistic::with_own_cache();
    let origin = MONDAY + 52 * DAY + 15 * HOUR;
    let at_last = later_tr(&method, &series, origin, 0, 3 * 3600);
    for lead in [1, 30, 300, 600] {
        assert_eq!(later_tr(&method, &series, origin, lead, 3 * 3600), at_last);
    }
    let later = later_tr(&method, &series, origin, 601, 3 * 3600);
    assert_ne!(later, at_last);
    assert!(later < 0.2, "{later}");
}

/// A node that starts after being off writes a down row (the gap) and is
/// asked for "now" before its first reading: the record ends down, but the
/// node asking is up. The answer must not be the certain failure of a
/// window starting down (it was, and every freshly started host then
/// published TR 0: it::pool_nodes caught it); a steady host answers near 1.
#[test]
fn a_record_that_ends_down_is_not_a_present_failure() {
    let mut series = series_from(28, 60, |_| 5.0);
    let last = series.last_time().unwrap();
    series
        .push(crate::series::Sample {
            time: last + 60,
            cpu: 0.0,
            free_mib: 0,
            up: false,
        })
        .unwrap();
    let method = Logistic::with_own_cache();
    for lead in [1, 30, 300, 600] {
        let req = PredictRequest::new(last + 60 + lead, 3600, Thresholds::default());
        let tr = method.forecast(&series, &req).unwrap().tr;
        assert!(tr > 0.9, "{lead} s after a down row: {tr}");
    }
}
