//! How durations read for people, one style for the CLI and the dashboard
//! (`ui` does not depend on `cli`, so the shared text lives here).

/// "3h", "90m" as "1h 30m", "45s"; zero reads "0s".
pub fn duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut parts = Vec::new();
    if h > 0 {
        parts.push(format!("{h}h"));
    }
    if m > 0 {
        parts.push(format!("{m}m"));
    }
    if s > 0 || parts.is_empty() {
        parts.push(format!("{s}s"));
    }
    parts.join(" ")
}

/// A window length as eval's tables label it, in its largest whole unit: "1h", "90m", "45s".
pub fn length_label(secs: u64) -> String {
    if secs % 3600 == 0 {
        format!("{}h", secs / 3600)
    } else if secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_read_as_hours_minutes_and_seconds() {
        assert_eq!(duration(10_800), "3h");
        assert_eq!(duration(5400), "1h 30m");
        assert_eq!(duration(3661), "1h 1m 1s");
        assert_eq!(duration(45), "45s");
        assert_eq!(duration(0), "0s");
    }
}
