//! Host trace files, format v1 (`shared/trace-format.md`): reading and writing.
//!
//! A trace may come from anywhere, so the reader treats it as hostile: it
//! caps the file size and the line length before looking at content, never
//! panics, and reports the file, the line and what is wrong. It owns the text
//! format only; what the rows mean lives in `model::series`.

use crate::model::series::{HostSeries, Sample, DEFAULT_MAX_GAP_SECS, DEFAULT_STEP_SECS};
use jiff::tz::TimeZone;
use std::fmt::Write as _;
use std::io::{self, BufRead, Read, Write};
use std::path::{Path, PathBuf};

/// The first line of every v1 trace.
pub const MAGIC: &str = "# gleaner-trace v1";
/// The column line that follows the header.
pub const COLUMNS: &str = "time,cpu,free_mib,up";
/// Largest trace file we agree to read: 256 MiB, about ten million rows
/// (four months of 1-second samples, nineteen years of 1-minute ones).
/// Parsed rows take about as much memory as their text, so `predict` and
/// `eval` stay well under a gigabyte per trace and refuse anything bigger
/// before reading past this limit.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;
/// Longest line we agree to read; real lines are a few dozen bytes.
pub const MAX_LINE_BYTES: usize = 4096;
/// Longest sampling period a header may declare (one day).
pub const MAX_STEP_SECS: u32 = 86_400;

/// The header of a trace: where it came from and how to read its rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceHeader {
    /// Host name, if given.
    pub host: Option<String>,
    /// IANA time-zone name as written (`UTC` when absent).
    pub tz_name: String,
    /// Where the trace came from, if given.
    pub source: Option<String>,
}

/// A parsed trace: header plus rows.
#[derive(Debug, Clone)]
pub struct Trace {
    pub header: TraceHeader,
    pub series: HostSeries,
    /// Rows that repeated the previous row's time and replaced it. The format
    /// asks for strictly increasing times, but real recorders (and the shared
    /// synthetic samples) write a boot row and a sample in the same second;
    /// the later row is the most recent one, so it wins. Callers warn.
    pub replaced_rows: usize,
}

/// What is wrong with a trace, and where.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read: missing, not a regular file, too large.
    #[error(transparent)]
    Read(#[from] crate::fsutil::FileReadError),
    #[error("{path}:{line}: {what}")]
    Malformed {
        path: PathBuf,
        line: usize,
        what: String,
    },
}

impl TraceError {
    /// The 1-based line number a parse error points at, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            TraceError::Malformed { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// Reads and parses a trace file: regular files only, at most
/// [`MAX_TRACE_BYTES`] counted while reading (see `crate::fsutil`).
pub fn read_trace(path: &Path) -> Result<Trace, TraceError> {
    let bytes = crate::fsutil::read_bounded(path, MAX_TRACE_BYTES)?;
    parse_trace(&bytes, path)
}

/// Parses trace text; `path` is only used in error messages.
pub fn parse_trace(bytes: &[u8], path: &Path) -> Result<Trace, TraceError> {
    let mut reader = TraceReader::new(bytes, path)?;
    let mut series = HostSeries::new(reader.step_secs(), reader.max_gap_secs(), reader.tz());
    // Rows are ~20 bytes; reserving avoids repeated growth on big files.
    series.reserve(bytes.len() / 24);
    while let Some(sample) = reader.next_sample()? {
        // The reader hands out strictly increasing, range-checked rows.
        if let Err(e) = series.push(sample) {
            return Err(reader.err(reader.line_no(), e.to_string()));
        }
    }
    Ok(Trace {
        header: reader.header().clone(),
        series,
        replaced_rows: reader.replaced_rows(),
    })
}

/// A trace read row by row, in constant memory: the header is parsed by
/// [`TraceReader::new`], then [`TraceReader::next_sample`] hands out rows in
/// strictly increasing time order (a row repeating the previous row's time
/// replaces it, as in [`Trace::replaced_rows`]). Imports use it so that a
/// big trace never sits in memory whole; [`parse_trace`] collects it.
pub struct TraceReader<'p, R> {
    input: R,
    parser: Parser<'p>,
    /// Line number of the last line read (1-based).
    line_no: usize,
    /// Whether the last line read ended with a newline (for the line count
    /// in the "no column line" error, which points past the last line).
    ended_with_newline: bool,
    /// The row read but not yet handed out: the next row may replace it.
    pending: Option<Sample>,
    replaced_rows: usize,
    buf: Vec<u8>,
}

impl<'p, R: BufRead> TraceReader<'p, R> {
    /// Reads the header up to and including the column line.
    pub fn new(input: R, path: &'p Path) -> Result<Self, TraceError> {
        let mut reader = TraceReader {
            input,
            parser: Parser {
                path,
                header: TraceHeader {
                    tz_name: "UTC".to_string(),
                    ..TraceHeader::default()
                },
                tz: TimeZone::UTC,
                step: DEFAULT_STEP_SECS,
                max_gap: DEFAULT_MAX_GAP_SECS,
            },
            line_no: 0,
            ended_with_newline: false,
            pending: None,
            replaced_rows: 0,
            buf: Vec::with_capacity(128),
        };
        let mut saw_magic = false;
        loop {
            if !reader.read_line()? {
                if !saw_magic {
                    return Err(reader.err(1, format!("empty file: expected `{MAGIC}`")));
                }
                let lines = reader.line_no + usize::from(reader.ended_with_newline);
                return Err(reader.err(
                    lines,
                    format!("no column line `{COLUMNS}`: the file has a header but no rows"),
                ));
            }
            let line_no = reader.line_no;
            let line = reader.parser.line_text(&reader.buf, line_no)?.to_string();
            if !saw_magic {
                reader.parser.check_magic(&line, line_no)?;
                saw_magic = true;
                continue;
            }
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix('#') {
                reader.parser.header_line(rest, line_no)?;
                continue;
            }
            if line != COLUMNS {
                return Err(reader.err(
                    line_no,
                    format!(
                        "expected the column line `{COLUMNS}`, found `{}`",
                        clip(&line)
                    ),
                ));
            }
            return Ok(reader);
        }
    }

    /// The header read so far (all of it once `new` returned).
    pub fn header(&self) -> &TraceHeader {
        &self.parser.header
    }

    /// The sampling period the header declares (or the default).
    pub fn step_secs(&self) -> u32 {
        self.parser.step
    }

    /// The longest silence the header declares as still up (or the default).
    pub fn max_gap_secs(&self) -> u64 {
        self.parser.max_gap
    }

    /// The header's time zone.
    pub fn tz(&self) -> TimeZone {
        self.parser.tz.clone()
    }

    /// Rows that replaced the previous row (same time) so far.
    pub fn replaced_rows(&self) -> usize {
        self.replaced_rows
    }

    /// The line number of the last line read.
    pub fn line_no(&self) -> usize {
        self.line_no
    }

    /// An error about line `line` of this trace.
    pub fn err(&self, line: usize, what: String) -> TraceError {
        self.parser.err(line, what)
    }

    /// The next row, or `None` at the end of the file.
    pub fn next_sample(&mut self) -> Result<Option<Sample>, TraceError> {
        loop {
            if !self.read_line()? {
                return Ok(self.pending.take());
            }
            let line_no = self.line_no;
            let line = self.parser.line_text(&self.buf, line_no)?;
            // After the column line, '#' lines are comments.
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let sample = self.parser.row(line, line_no)?;
            let Some(previous) = self.pending else {
                self.pending = Some(sample);
                continue;
            };
            if sample.time == previous.time {
                self.replaced_rows += 1;
                self.pending = Some(sample);
                continue;
            }
            if sample.time < previous.time {
                return Err(self.parser.err(
                    line_no,
                    format!(
                        "time {} is not after the previous row's {}",
                        sample.time, previous.time
                    ),
                ));
            }
            self.pending = Some(sample);
            return Ok(Some(previous));
        }
    }

    /// Reads one line into `buf` (without its newline), refusing lines
    /// longer than [`MAX_LINE_BYTES`] before buffering them. False at the end.
    fn read_line(&mut self) -> Result<bool, TraceError> {
        self.buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 2;
        let read = (&mut self.input)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| TraceError::Read(self.read_error(e)))?;
        if read == 0 {
            return Ok(false);
        }
        self.line_no += 1;
        self.ended_with_newline = self.buf.last() == Some(&b'\n');
        if self.ended_with_newline {
            self.buf.pop();
        } else if read as u64 == limit {
            return Err(self.parser.err(
                self.line_no,
                format!("line is longer than {MAX_LINE_BYTES} bytes"),
            ));
        }
        Ok(true)
    }

    fn read_error(&self, e: io::Error) -> crate::fsutil::FileReadError {
        crate::fsutil::FileReadError::from_io(self.parser.path, e)
    }
}

struct Parser<'p> {
    path: &'p Path,
    header: TraceHeader,
    tz: TimeZone,
    step: u32,
    max_gap: u64,
}

impl Parser<'_> {
    fn err(&self, line: usize, what: String) -> TraceError {
        TraceError::Malformed {
            path: self.path.to_path_buf(),
            line,
            what,
        }
    }

    fn line_text<'b>(&self, raw: &'b [u8], line_no: usize) -> Result<&'b str, TraceError> {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() > MAX_LINE_BYTES {
            return Err(self.err(
                line_no,
                format!("line is {} bytes, longer than {MAX_LINE_BYTES}", raw.len()),
            ));
        }
        std::str::from_utf8(raw)
            .map(str::trim)
            .map_err(|_| self.err(line_no, "line is not valid UTF-8".to_string()))
    }

    fn check_magic(&self, line: &str, line_no: usize) -> Result<(), TraceError> {
        if line == MAGIC {
            return Ok(());
        }
        if let Some(version) = line.strip_prefix("# gleaner-trace ") {
            return Err(self.err(
                line_no,
                format!(
                    "unsupported trace version `{}`: this gleaner reads v1",
                    clip(version)
                ),
            ));
        }
        Err(self.err(
            line_no,
            format!("not a gleaner trace: the first line must be `{MAGIC}`"),
        ))
    }

    fn header_line(&mut self, rest: &str, line_no: usize) -> Result<(), TraceError> {
        let Some((key, value)) = rest.split_once(':') else {
            // A '#' line without a key is a comment.
            return Ok(());
        };
        let value = value.trim();
        match key.trim() {
            "host" => self.header.host = Some(value.to_string()),
            "source" => self.header.source = Some(value.to_string()),
            "tz" => {
                self.tz = jiff::tz::db().get(value).map_err(|_| {
                    self.err(
                        line_no,
                        format!(
                            "unknown time zone `{}` (expected an IANA name)",
                            clip(value)
                        ),
                    )
                })?;
                self.header.tz_name = value.to_string();
            }
            "step" => {
                self.step = value
                    .parse::<u32>()
                    .ok()
                    .filter(|s| (1..=MAX_STEP_SECS).contains(s))
                    .ok_or_else(|| {
                        self.err(
                            line_no,
                            format!(
                                "step `{}` must be whole seconds from 1 to {MAX_STEP_SECS}",
                                clip(value)
                            ),
                        )
                    })?;
            }
            "max_gap" => {
                self.max_gap = value
                    .parse::<u64>()
                    .ok()
                    .filter(|&g| g >= 1)
                    .ok_or_else(|| {
                        self.err(
                            line_no,
                            format!(
                                "max_gap `{}` must be a positive whole number of seconds",
                                clip(value)
                            ),
                        )
                    })?;
            }
            // Unknown keys are ignored, as the format says.
            _ => {}
        }
        Ok(())
    }

    fn row(&self, line: &str, line_no: usize) -> Result<Sample, TraceError> {
        let mut fields = line.split(',');
        let mut next = |name: &str| {
            fields.next().map(str::trim).ok_or_else(|| {
                self.err(
                    line_no,
                    format!("missing field `{name}`: a row has 4 fields"),
                )
            })
        };
        let time_s = next("time")?;
        let cpu_s = next("cpu")?;
        let free_s = next("free_mib")?;
        let up_s = next("up")?;
        if fields.next().is_some() {
            return Err(self.err(line_no, "too many fields: a row has 4".to_string()));
        }
        let time = time_s.parse::<i64>().map_err(|_| {
            self.err(
                line_no,
                format!("time `{}` is not whole Unix seconds", clip(time_s)),
            )
        })?;
        let cpu = cpu_s
            .parse::<f64>()
            .ok()
            .filter(|c| c.is_finite() && (0.0..=100.0).contains(c))
            .ok_or_else(|| {
                self.err(
                    line_no,
                    format!("cpu `{}` is not a number from 0 to 100", clip(cpu_s)),
                )
            })?;
        let free_mib = free_s.parse::<u64>().map_err(|_| {
            self.err(
                line_no,
                format!(
                    "free_mib `{}` is not a whole number of MiB >= 0",
                    clip(free_s)
                ),
            )
        })?;
        let up = match up_s {
            "1" => true,
            "0" => false,
            _ => {
                return Err(self.err(line_no, format!("up `{}` must be 0 or 1", clip(up_s))));
            }
        };
        Ok(Sample {
            time,
            cpu,
            free_mib,
            up,
        })
    }
}

/// Shortens untrusted text quoted in an error message.
fn clip(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head}…")
    }
}

/// Writes a trace in format v1.
pub fn write_trace<W: Write>(out: W, trace: &Trace) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    let s = &trace.series;
    write_trace_header(&mut out, &trace.header, s.step_secs, s.max_gap_secs)?;
    let mut line = String::with_capacity(64);
    for row in s.samples() {
        write_trace_row(&mut out, &mut line, &row)?;
    }
    out.flush()
}

/// Writes the header and the column line of a v1 trace.
pub fn write_trace_header<W: Write>(
    out: &mut W,
    header: &TraceHeader,
    step_secs: u32,
    max_gap_secs: u64,
) -> io::Result<()> {
    writeln!(out, "{MAGIC}")?;
    if let Some(host) = &header.host {
        writeln!(out, "# host: {}", one_line(host))?;
    }
    writeln!(out, "# tz: {}", one_line(&header.tz_name))?;
    writeln!(out, "# step: {step_secs}")?;
    writeln!(out, "# max_gap: {max_gap_secs}")?;
    if let Some(source) = &header.source {
        writeln!(out, "# source: {}", one_line(source))?;
    }
    writeln!(out, "{COLUMNS}")
}

/// Writes one row of a v1 trace; `line` is a reusable buffer.
pub fn write_trace_row<W: Write>(out: &mut W, line: &mut String, row: &Sample) -> io::Result<()> {
    line.clear();
    // `{}` on f64 prints the shortest text that parses back to the same value.
    let _ = writeln!(
        line,
        "{},{},{},{}",
        row.time,
        row.cpu,
        row.free_mib,
        u8::from(row.up)
    );
    out.write_all(line.as_bytes())
}

/// Header values are single lines; a newline would let a value forge rows.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# gleaner-trace v1\n# host: lab-07\n# tz: America/Indiana/Indianapolis\n# step: 6\n# max_gap: 300\n# source: test\ntime,cpu,free_mib,up\n1125532800,3.5,812,1\n1125532806,4.1,812,1\n1125540000,0.0,0,0\n1125541200,18.0,640,1\n";

    fn parse(text: &str) -> Result<Trace, TraceError> {
        parse_trace(text.as_bytes(), Path::new("t.csv"))
    }

    #[test]
    fn reads_the_format_example() {
        let t = parse(GOOD).unwrap();
        assert_eq!(t.header.host.as_deref(), Some("lab-07"));
        assert_eq!(t.header.tz_name, "America/Indiana/Indianapolis");
        assert_eq!(t.header.source.as_deref(), Some("test"));
        assert_eq!(t.series.step_secs, 6);
        assert_eq!(t.series.max_gap_secs, 300);
        assert_eq!(t.series.len(), 4);
        assert!(!t.series.get(2).unwrap().up);
    }

    #[test]
    fn defaults_apply_without_keys() {
        let t = parse("# gleaner-trace v1\ntime,cpu,free_mib,up\n1,2,3,1\n").unwrap();
        assert_eq!(t.header.tz_name, "UTC");
        assert_eq!(t.series.step_secs, DEFAULT_STEP_SECS);
        assert_eq!(t.series.max_gap_secs, DEFAULT_MAX_GAP_SECS);
    }

    #[test]
    fn round_trips_through_the_writer() {
        let t = parse(GOOD).unwrap();
        let mut buf = Vec::new();
        write_trace(&mut buf, &t).unwrap();
        let back = parse_trace(&buf, Path::new("back.csv")).unwrap();
        assert_eq!(back.header, t.header);
        assert_eq!(
            back.series.samples().collect::<Vec<_>>(),
            t.series.samples().collect::<Vec<_>>()
        );
    }

    fn line_of(text: &str) -> usize {
        parse(text).unwrap_err().line().unwrap()
    }

    #[test]
    fn malformed_rows_name_their_line() {
        let base = "# gleaner-trace v1\n# tz: UTC\ntime,cpu,free_mib,up\n1,2,3,1\n";
        assert_eq!(line_of(&format!("{base}2,x,3,1\n")), 5);
        assert_eq!(line_of(&format!("{base}2,101,3,1\n")), 5);
        assert_eq!(line_of(&format!("{base}2,5,-3,1\n")), 5);
        assert_eq!(line_of(&format!("{base}2,5,3,2\n")), 5);
        assert_eq!(line_of(&format!("{base}0,5,3,1\n")), 5);
        assert_eq!(line_of(&format!("{base}2,5,3\n")), 5);
        assert_eq!(line_of(&format!("{base}2,5,3,1,9\n")), 5);
        assert_eq!(line_of(&format!("{base}2,NaN,3,1\n")), 5);
        assert_eq!(line_of("# gleaner-trace v2\n"), 1);
        assert_eq!(line_of("time,cpu,free_mib,up\n"), 1);
        assert_eq!(line_of("# gleaner-trace v1\n# tz: Mars/Olympus\n"), 2);
        assert_eq!(line_of("# gleaner-trace v1\n# step: 0\n"), 2);
        assert_eq!(line_of("# gleaner-trace v1\ntime,cpu\n"), 2);
    }

    #[test]
    fn a_repeated_time_replaces_the_previous_row() {
        let t = parse(
            "# gleaner-trace v1\ntime,cpu,free_mib,up\n1,2,3,0\n5,2,3,1\n5,70,9,1\n6,1,1,1\n",
        )
        .unwrap();
        assert_eq!(t.replaced_rows, 1);
        assert_eq!(t.series.len(), 3);
        let row = t.series.get(1).unwrap();
        assert_eq!(
            (row.time, row.cpu, row.free_mib, row.up),
            (5, 70.0, 9, true)
        );
    }

    #[test]
    fn error_message_names_file_line_and_problem() {
        let err = parse("# gleaner-trace v1\ntime,cpu,free_mib,up\n5,abc,1,1\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("t.csv:3:"), "{msg}");
        assert!(msg.contains("cpu"), "{msg}");
    }

    #[test]
    fn overlong_lines_are_refused_before_parsing() {
        let long = format!(
            "# gleaner-trace v1\n# host: {}\n",
            "x".repeat(MAX_LINE_BYTES + 1)
        );
        assert_eq!(line_of(&long), 2);
    }

    #[test]
    fn header_values_cannot_inject_rows() {
        let mut t = parse(GOOD).unwrap();
        t.header.host = Some("evil\n1,2,3,1".to_string());
        let mut buf = Vec::new();
        write_trace(&mut buf, &t).unwrap();
        let back = parse_trace(&buf, Path::new("b")).unwrap();
        assert_eq!(back.series.len(), t.series.len());
    }
}
