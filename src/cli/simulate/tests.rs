//! Unit tests of `gleaner simulate`'s own parts: the runtime argument's two
//! forms and the bar chart's escaping of names and bad numbers.

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
