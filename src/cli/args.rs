//! Parsing of the CLI's value types — times, durations — with no I/O.
//!
//! These are the "low" arguments of ripgrep's split: strings in, checked
//! values or a clear message out. Resolving them against files or a running
//! node happens in the commands.

use crate::model::state::{
    ThresholdError, Thresholds, DEFAULT_SUSTAIN_SECS, DEFAULT_TH1, DEFAULT_TH2,
};
use clap::Args;
use jiff::Timestamp;

/// Longest duration accepted anywhere on the command line (one year).
pub const MAX_DURATION_SECS: u64 = 366 * 86_400;

/// Parses a duration: whole seconds (`3600`) or a number with a unit
/// (`90s`, `90m`, `3h`, `2d`; fractions such as `1.5h` are allowed).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration: use e.g. 3600, 90m, 3h or 10h".to_string());
    }
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, "s"),
    };
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "s" | "sec" | "secs" => 1,
        "m" | "min" | "mins" => 60,
        "h" | "hr" | "hrs" => 3600,
        "d" | "day" | "days" => 86_400,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{t}`: use s, m, h or d"
            ))
        }
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{t}` is not a duration: use e.g. 3600, 90m, 3h or 10h"))?;
    let secs = value * scale as f64;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("duration `{t}` must be positive"));
    }
    if secs > MAX_DURATION_SECS as f64 {
        return Err(format!("duration `{t}` is longer than one year"));
    }
    Ok(secs.round() as u64)
}

/// Parses a point in time: RFC 3339 (`2025-10-06T09:00:00-04:00`) or Unix seconds.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<i64>() {
        return Timestamp::from_second(secs)
            .map(|ts| ts.as_second())
            .map_err(|_| format!("Unix time `{t}` is out of range"));
    }
    t.parse::<Timestamp>()
        .map(|ts| ts.as_second())
        .map_err(|_| {
            format!("`{t}` is not a time: use RFC 3339 (2025-10-06T09:00:00-04:00) or Unix seconds")
        })
}

/// A deadline as written: a duration from now (`3h`) or a point in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    In(u64),
    At(i64),
}

impl Deadline {
    /// Unix seconds, given now.
    pub fn at(self, now_unix: i64) -> i64 {
        match self {
            Deadline::In(secs) => now_unix.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX)),
            Deadline::At(t) => t,
        }
    }
}

/// Parses `--deadline`: a duration from now (`90m`, `3h`) or a time (RFC
/// 3339 or Unix seconds). A bare number is a time, as for `--at`.
pub fn parse_deadline(text: &str) -> Result<Deadline, String> {
    let t = text.trim();
    if t.parse::<i64>().is_err() {
        if let Ok(secs) = parse_duration(t) {
            return Ok(Deadline::In(secs));
        }
    }
    parse_time(t).map(Deadline::At).map_err(|_| {
        format!("`{t}` is not a deadline: use a duration from now (90m, 3h) or a time (RFC 3339 or Unix seconds)")
    })
}

/// The five-state model's thresholds, shared by every command that
/// classifies states. Unset flags take the model's defaults
/// (`model::state::DEFAULT_*`); they are options so that a command can tell
/// whether the user asked for a value (`predict` without `--trace` refuses
/// them rather than ignore them).
#[derive(Debug, Clone, Args)]
pub struct ThresholdArgs {
    #[arg(long, value_name = "PCT", help = format!(
        "Load (percent) below which the host is lightly loaded (S1) [default: {DEFAULT_TH1}]"
    ))]
    pub th1: Option<f64>,

    #[arg(long, value_name = "PCT", help = format!(
        "Load (percent) above which a guest is suspended, and killed once sustained [default: {DEFAULT_TH2}]"
    ))]
    pub th2: Option<f64>,

    #[arg(long, value_name = "SECS", help = format!(
        "Seconds load must stay above th2 before the guest is killed (S3) [default: {DEFAULT_SUSTAIN_SECS}]"
    ))]
    pub sustain: Option<u32>,
}

impl ThresholdArgs {
    /// The checked thresholds for a job of `job_mem_mib` MiB.
    pub fn resolve(&self, job_mem_mib: u64) -> Result<Thresholds, ThresholdError> {
        let thresholds = Thresholds {
            th1: self.th1.unwrap_or(DEFAULT_TH1),
            th2: self.th2.unwrap_or(DEFAULT_TH2),
            sustain_secs: self.sustain.unwrap_or(DEFAULT_SUSTAIN_SECS),
            job_mem_mib,
        };
        thresholds.validate()?;
        Ok(thresholds)
    }

    /// The flags the user gave, as typed (`--th1`, ...).
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--th1", self.th1.is_some()),
            ("--th2", self.th2.is_some()),
            ("--sustain", self.sustain.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_durations_from_now_or_times() {
        assert_eq!(parse_deadline("3h"), Ok(Deadline::In(3 * 3600)));
        assert_eq!(
            parse_deadline("1700000000"),
            Ok(Deadline::At(1_700_000_000))
        );
        assert_eq!(
            parse_deadline("2023-11-14T22:13:20Z"),
            Ok(Deadline::At(1_700_000_000))
        );
        assert_eq!(Deadline::In(60).at(1_000), 1_060);
        assert!(parse_deadline("soon").unwrap_err().contains("`soon`"));
    }

    #[test]
    fn durations_in_the_documented_forms() {
        assert_eq!(parse_duration("3600"), Ok(3600));
        assert_eq!(parse_duration("90m"), Ok(5400));
        assert_eq!(parse_duration("3h"), Ok(10_800));
        assert_eq!(parse_duration("10h"), Ok(36_000));
        assert_eq!(parse_duration("1.5h"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        assert_eq!(parse_duration(" 45s "), Ok(45));
    }

    #[test]
    fn bad_durations_are_refused() {
        for bad in ["", "h", "-3h", "0", "3x", "1e300h", "NaNh", "400d", "3h30m"] {
            assert!(parse_duration(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn times_in_both_forms() {
        assert_eq!(parse_time("1125532800"), Ok(1_125_532_800));
        assert_eq!(parse_time("2005-09-01T00:00:00Z"), Ok(1_125_532_800));
        assert_eq!(parse_time("2005-08-31T20:00:00-04:00"), Ok(1_125_532_800));
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("99999999999999999").is_err());
    }
}
