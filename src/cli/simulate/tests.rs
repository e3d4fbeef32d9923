//! Unit tests of `gleaner simulate`'s own parts: the runtime argument's two
//! forms, the bar chart's escaping of names and bad numbers, and how far
//! into each trace the batch is submitted.

use super::svg::bar_chart;
use super::*;

#[test]
fn runtimes_parse_as_durations_or_lognormal() {
    assert_eq!(parse_runtime("2h"), Ok(RuntimeSpec::Fixed(7200.0)));
    assert_eq!(
        parse_runtime("lognormal:1h,0.5"),
        Ok(RuntimeSpec::LogNormal {
            median: 3600.0,
            sigma: 0.5
        })
    );
    assert!(parse_runtime("lognormal:1h")
        .unwrap_err()
        .contains("MEDIAN,SIGMA"));
    assert!(parse_runtime("lognormal:1h,9").is_err());
    assert!(parse_runtime("soon").is_err());
}

#[test]
fn bar_charts_escape_names_and_survive_bad_numbers() {
    let svg = bar_chart(
        "a <b> & c",
        &["x\"y", "z"],
        &[vec![1.0, f64::NAN], vec![f64::INFINITY, 2.0]],
        &["S3", "S4"],
    );
    assert!(svg.contains("a &lt;b&gt; &amp; c"));
    assert!(svg.contains("x&quot;y"));
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
}

/// Thirty days of one-minute rows from a Monday 00:00 (2025-09-01), all
/// light: a trace whose time of day and weekday are known.
fn thirty_days() -> HostSeries {
    use crate::model::series::Sample;
    let monday = 1_756_684_800;
    let mut s = HostSeries::new(60, 120, jiff::tz::TimeZone::UTC);
    for k in 0..30 * 1440 {
        s.push(Sample {
            time: monday + k * 60,
            cpu: 5.0,
            free_mib: 1000,
            up: true,
        })
        .unwrap();
    }
    s
}

#[test]
fn the_batch_is_submitted_as_far_into_each_trace_as_told_at_most_half_way() {
    let series = [thirty_days()];
    let th = Thresholds::default();
    let start = series[0].first_time().unwrap();
    let offset = |after: i64| {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let (hosts, _) = build_pool(&series, 1, th, after, &mut rng).unwrap();
        hosts[0].offset - start
    };
    // The default, two weeks: Monday 00:00 again; 344 h: Monday 08:00
    // (within half of thirty days).
    assert_eq!(offset(14 * 86_400), 14 * 86_400);
    assert_eq!(offset(344 * 3600), 344 * 3600);
    // Never past half the trace (the predictors need its history, the
    // batch its future), nor before it.
    assert_eq!(offset(29 * 86_400), 15 * 86_400);
    assert_eq!(offset(-5), 0);
}

#[test]
fn traces_too_short_for_the_submission_are_counted() {
    let series = [thirty_days()];
    let timelines = [Timeline::from_series(
        &series[0],
        Thresholds::default(),
        series[0].first_time().unwrap(),
        series[0].last_time().unwrap() + i64::from(series[0].step_secs),
    )
    .unwrap()];
    assert_eq!(traces_short(&timelines, 14 * 86_400), 0);
    assert_eq!(traces_short(&timelines, 16 * 86_400), 1);
}
