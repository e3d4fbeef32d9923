//! Replayed owner load (`gleaner node --owner-load FILE`): plays back a
//! recorded or scripted owner load instead of measuring this host, for demos,
//! experiments and the node's tests. It is an explicit, documented option
//! that `status` reports ("owner load replayed from FILE"), never a hidden
//! switch.
//!
//! Two formats are read. A *script* has one sample per line, `secs cpu
//! free_mib`: from `secs` seconds after the node started the host shows
//! `cpu` percent load and `free_mib` MiB free, until the next line's time;
//! the last line holds forever; `#` starts a comment. A *trace* in format v1
//! (`../shared/trace-format.md`) is replayed from its first row on: a row `t`
//! seconds into the trace holds from `t` seconds after the start; down rows
//! (`up = 0`) keep the previous load, since replaying cannot switch the
//! machine off. Time is tokio's, so under paused time a test's node sees the
//! replay advance with virtual time. This module must not know what the
//! samples are used for.

use super::{LoadSource, RawSample, SampleError};
use crate::history::trace::parse_trace;
use std::path::{Path, PathBuf};
use tokio::time::Instant;

/// The largest owner-load file read (a 35-day trace at 6 s is ~15 MiB).
pub const MAX_REPLAY_BYTES: u64 = 256 << 20;

/// Plays back an owner-load script or trace against tokio's clock.
#[derive(Debug, Clone)]
pub struct OwnerLoadReplay {
    start: Instant,
    /// (seconds after start, sample), sorted by time.
    steps: Vec<(f64, RawSample)>,
}

impl OwnerLoadReplay {
    /// Reads a script or a trace file (at most [`MAX_REPLAY_BYTES`]; special
    /// files such as FIFOs and devices are refused).
    pub fn from_file(path: &Path) -> Result<Self, SampleError> {
        let read_err = |source| SampleError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read_err)?;
        if !meta.is_file() {
            return Err(SampleError::Parse {
                path: path.to_path_buf(),
                what: "not a regular file",
            });
        }
        let mut text = String::new();
        use std::io::Read;
        std::fs::File::open(path)
            .map_err(read_err)?
            .take(MAX_REPLAY_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read_err)?;
        if text.len() as u64 > MAX_REPLAY_BYTES {
            return Err(SampleError::Parse {
                path: path.to_path_buf(),
                what: "larger than 256 MiB",
            });
        }
        if text.trim_start().starts_with("# gleaner-trace") {
            return Self::from_trace(&text, path);
        }
        Self::parse(&text, path)
    }

    /// Replays a trace v1 from its first row.
    pub fn from_trace(text: &str, path: &Path) -> Result<Self, SampleError> {
        let trace = parse_trace(text.as_bytes(), path).map_err(|_| SampleError::Parse {
            path: path.to_path_buf(),
            what: "not a valid trace (check it with `gleaner predict --trace`)",
        })?;
        let first = trace.series.first_time().ok_or(SampleError::Parse {
            path: path.to_path_buf(),
            what: "the trace has no rows",
        })?;
        let steps: Vec<(f64, RawSample)> = trace
            .series
            .samples()
            .filter(|s| s.up)
            .map(|s| {
                (
                    (s.time - first) as f64,
                    RawSample {
                        cpu: s.cpu.clamp(0.0, 100.0),
                        free_mib: s.free_mib,
                    },
                )
            })
            .collect();
        if steps.is_empty() {
            return Err(SampleError::Parse {
                path: path.to_path_buf(),
                what: "the trace has no up rows",
            });
        }
        Ok(OwnerLoadReplay {
            start: Instant::now(),
            steps,
        })
    }

    /// Parses a script; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, SampleError> {
        let bad = |what| SampleError::Parse {
            path: PathBuf::from(path),
            what,
        };
        let mut steps = Vec::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [secs, cpu, free] = fields[..] else {
                return Err(bad("a line is not `secs cpu free_mib`"));
            };
            let secs: f64 = secs.parse().map_err(|_| bad("bad seconds"))?;
            let cpu: f64 = cpu.parse().map_err(|_| bad("bad cpu"))?;
            let free_mib: u64 = free.parse().map_err(|_| bad("bad free_mib"))?;
            if !secs.is_finite() || !(0.0..=100.0).contains(&cpu) {
                return Err(bad("seconds or cpu out of range"));
            }
            steps.push((secs, RawSample { cpu, free_mib }));
        }
        if steps.is_empty() {
            return Err(bad("the script has no samples"));
        }
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(OwnerLoadReplay {
            start: Instant::now(),
            steps,
        })
    }

    /// The sample in force `elapsed` seconds after the start.
    pub fn at(&self, elapsed: f64) -> RawSample {
        // Steps are sorted: the last one at or before `elapsed`, else the first.
        let after = self.steps.partition_point(|(t, _)| *t <= elapsed);
        let index = after.saturating_sub(1);
        self.steps.get(index).map_or(
            RawSample {
                cpu: 0.0,
                free_mib: 0,
            },
            |(_, s)| *s,
        )
    }
}

impl LoadSource for OwnerLoadReplay {
    fn sample(&mut self, _guest_pids: &[i32]) -> Result<RawSample, SampleError> {
        Ok(self.at(self.start.elapsed().as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl OwnerLoadReplay {
        /// Parses outside a runtime (tokio's `Instant::now` works without one).
        fn parse_at(text: &str, path: &Path) -> Result<Self, SampleError> {
            Self::parse(text, path)
        }
    }

    #[test]
    fn a_trace_replays_from_its_first_row_and_skips_down_rows() {
        let text = "# gleaner-trace v1\n# tz: UTC\n# step: 10\ntime,cpu,free_mib,up\n\
                    1000,5,4000,1\n1010,90,3000,1\n1020,0,0,0\n1030,7,2000,1\n";
        let s = OwnerLoadReplay::from_trace(text, Path::new("t.csv")).unwrap();
        assert_eq!(s.at(0.0).cpu, 5.0);
        assert_eq!(s.at(15.0).cpu, 90.0);
        assert_eq!(
            s.at(25.0).cpu,
            90.0,
            "the down row keeps the load before it"
        );
        assert_eq!(s.at(31.0).free_mib, 2000);
    }

    #[test]
    fn script_plays_each_line_from_its_time_and_holds_the_last() {
        let s = OwnerLoadReplay::parse_at(
            "# t cpu free\n0 5 4000\n10 90 4000 # burst\n12.5 5 100\n",
            Path::new("s"),
        )
        .unwrap();
        assert_eq!(s.at(0.0).cpu, 5.0);
        assert_eq!(s.at(9.9).cpu, 5.0);
        assert_eq!(s.at(10.0).cpu, 90.0);
        assert_eq!(s.at(100.0).free_mib, 100);
    }

    #[test]
    fn bad_scripts_are_refused() {
        for text in ["", "1 2", "0 150 10", "x 1 1"] {
            assert!(
                OwnerLoadReplay::parse_at(text, Path::new("s")).is_err(),
                "{text:?}"
            );
        }
    }
}
