//! Hand-made series the baselines' unit tests share (`tests.rs`,
//! `hazard_tests.rs`, the isotonic calibration's tests): UTC records that
//! start on a Monday, always up, with a load the test chooses.

use crate::series::{HostSeries, Sample};
use jiff::tz::TimeZone;

/// Monday 2025-09-01 00:00 UTC.
pub const MONDAY: i64 = 1_756_684_800;
pub const DAY: i64 = 86_400;
pub const HOUR: i64 = 3600;

/// A UTC series of `days` days at `step` seconds, load `cpu(t)`, always up.
pub fn series_from(days: i64, step: i64, cpu: impl Fn(i64) -> f64) -> HostSeries {
    let mut s = HostSeries::new(step as u32, 120, TimeZone::UTC);
    let mut t = MONDAY;
    while t < MONDAY + days * DAY {
        s.push(Sample {
            time: t,
            cpu: cpu(t),
            free_mib: 4096,
            up: true,
        })
        .unwrap();
        t += step;
    }
    s
}
