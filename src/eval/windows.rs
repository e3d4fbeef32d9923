//! The per-window file of `gleaner eval --windows FILE`: one CSV row per
//! tested window and method, so every score in a report can be recomputed
//! from the forecasts and outcomes alone.
//!
//! Columns: `host,start,date,hour,length_s,method,forecast,outcome`.
//! `start` is W in RFC 3339 UTC, `date` and `hour` the host's local test day
//! and start hour (the day and week clusters of the intervals), `forecast`
//! the method's TR in full precision (Rust's shortest round-trip form) and
//! `outcome` 1 when the window survived. The file is bounded
//! (`MAX_WINDOW_ROWS`) and the bound is checked before the file is created.
//! This module writes rows; it neither runs methods nor scores them.

use crate::eval::protocol::DayResult;
use jiff::Timestamp;
use std::io::Write;
use std::path::Path;

/// At most this many rows (windows × methods), about 0.5 GB of CSV.
pub const MAX_WINDOW_ROWS: usize = 8_000_000;

/// The CSV header line.
pub const HEADER: &str = "host,start,date,hour,length_s,method,forecast,outcome";

/// Why the per-window file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WindowsError {
    #[error("--windows {path}: {rows} rows (windows × methods) is more than the bound of {max}; run fewer traces, lengths, hours or methods")]
    TooLarge {
        path: String,
        rows: usize,
        max: usize,
    },
    #[error("--windows {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Rows the file would hold.
pub fn row_count(days: &[DayResult], methods: usize) -> usize {
    days.iter()
        .map(|d| d.cases.len())
        .sum::<usize>()
        .saturating_mul(methods)
}

/// One label per trace: the header's host name, else the file name; a
/// repeated label gets `#index` so rows of two traces never merge.
pub fn host_labels(hosts: &[Option<String>], paths: &[String]) -> Vec<String> {
    let base: Vec<String> = hosts
        .iter()
        .zip(paths)
        .map(|(h, p)| {
            h.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| {
                Path::new(p)
                    .file_name()
                    .map_or_else(|| p.clone(), |f| f.to_string_lossy().into_owned())
            })
        })
        .collect();
    base.iter()
        .enumerate()
        .map(|(i, b)| {
            if base.iter().filter(|o| *o == b).count() > 1 {
                format!("{b}#{i}")
            } else {
                b.clone()
            }
        })
        .collect()
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// Writes the rows of `days` to `out`: methods in `names` order per window.
pub fn write_rows(
    out: &mut impl Write,
    days: &[DayResult],
    names: &[String],
    labels: &[String],
) -> std::io::Result<()> {
    writeln!(out, "{HEADER}")?;
    let names: Vec<String> = names.iter().map(|n| field(n)).collect();
    let labels: Vec<String> = labels.iter().map(|l| field(l)).collect();
    for day in days {
        for scored in &day.cases {
            let c = &scored.case;
            let host = labels.get(c.trace).map_or("?", String::as_str);
            let start =
                Timestamp::from_second(c.at).map_or_else(|_| c.at.to_string(), |t| t.to_string());
            for (name, tr) in names.iter().zip(&scored.tr) {
                writeln!(
                    out,
                    "{host},{start},{},{},{},{name},{tr},{}",
                    c.date,
                    c.hour,
                    c.window_secs,
                    u8::from(c.survived)
                )?;
            }
        }
    }
    Ok(())
}

/// Writes the file at `path`, refusing before creating it when it would
/// hold more than `MAX_WINDOW_ROWS` rows.
pub fn write_file(
    path: &Path,
    days: &[DayResult],
    names: &[String],
    labels: &[String],
) -> Result<usize, WindowsError> {
    write_bounded(path, days, names, labels, MAX_WINDOW_ROWS)
}

fn write_bounded(
    path: &Path,
    days: &[DayResult],
    names: &[String],
    labels: &[String],
    max: usize,
) -> Result<usize, WindowsError> {
    let rows = row_count(days, names.len());
    let shown = path.display().to_string();
    if rows > max {
        return Err(WindowsError::TooLarge {
            path: shown,
            rows,
            max,
        });
    }
    let io = |source| WindowsError::Io {
        path: shown.clone(),
        source,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    write_rows(&mut out, days, names, labels).map_err(io)?;
    out.flush().map_err(io)?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::protocol::{DayKind, ScoredCase, TestCase};
    use crate::model::state::State;

    fn day(trace: usize, at: i64, y: bool, tr: Vec<f64>) -> DayResult {
        let date = jiff::civil::date(2025, 9, 1);
        DayResult {
            trace,
            date: Some(date),
            cases: vec![ScoredCase {
                case: TestCase {
                    trace,
                    date,
                    kind: DayKind::Weekday,
                    hour: 8,
                    window_secs: 3600,
                    at,
                    start: State::S1,
                    survived: y,
                },
                tr,
            }],
            ..DayResult::default()
        }
    }

    #[test]
    fn rows_round_trip_the_forecasts() {
        let days = vec![
            day(0, 1_756_713_600, true, vec![0.1 + 0.2, 1.0]),
            day(1, 1_756_713_600, false, vec![0.25, 0.0]),
        ];
        let names = vec!["logistic".to_string(), "freq".to_string()];
        let labels = host_labels(
            &[Some("a,b".to_string()), None],
            &["x.csv".into(), "dir/y.csv".into()],
        );
        assert_eq!(labels, vec!["a,b".to_string(), "y.csv".to_string()]);
        let mut out = Vec::new();
        write_rows(&mut out, &days, &names, &labels).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + row_count(&days, names.len()));
        assert_eq!(lines[0], HEADER);
        assert_eq!(
            lines[1],
            "\"a,b\",2025-09-01T08:00:00Z,2025-09-01,8,3600,logistic,0.30000000000000004,1"
        );
        // The forecast column parses back to the very same number.
        let forecast: f64 = lines[1].rsplit(',').nth(1).unwrap().parse().unwrap();
        assert_eq!(forecast, 0.1 + 0.2);
        assert_eq!(
            lines[4],
            "y.csv,2025-09-01T08:00:00Z,2025-09-01,8,3600,freq,0,0"
        );
    }

    #[test]
    fn repeated_hosts_are_told_apart_and_the_bound_names_the_file() {
        let labels = host_labels(
            &[Some("h".into()), Some("h".into())],
            &["a".into(), "b".into()],
        );
        assert_eq!(labels, vec!["h#0".to_string(), "h#1".to_string()]);
        let big: Vec<DayResult> = (0..3).map(|i| day(0, i, true, vec![0.5])).collect();
        assert_eq!(row_count(&big, usize::MAX / 2), usize::MAX);
        let dir = std::env::temp_dir().join(format!("gleaner-windows-{}", std::process::id()));
        let err = write_file(&dir.join("missing/w.csv"), &big, &["m".into()], &labels).unwrap_err();
        assert!(err.to_string().contains("missing/w.csv"), "{err}");
        // Over the bound: refused before the file exists.
        let path = dir.with_extension("csv");
        let err = write_bounded(&path, &big, &["m".into()], &labels, 2).unwrap_err();
        assert!(
            matches!(err, WindowsError::TooLarge { rows: 3, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert!(!path.exists());
        assert_eq!(
            write_bounded(&path, &big, &["m".into()], &labels, 3).unwrap(),
            3
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 4);
        std::fs::remove_file(&path).unwrap();
    }
}
