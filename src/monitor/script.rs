//! A scripted load source: a test hook that plays back host load from a
//! file instead of reading `/proc`, so integration tests can drive the
//! node's policy deterministically with a real clock.
//!
//! The file has one sample per line, `secs cpu free_mib`: from `secs`
//! seconds after the source was created the host shows `cpu` percent load
//! and `free_mib` MiB free, until the next line's time; the last line holds
//! forever. `#` starts a comment. The node selects this source only when the
//! hidden `GLEANER_TEST_LOAD_SCRIPT` variable names a file. This module must
//! not know what the samples are used for.

use super::{LoadSource, RawSample, SampleError};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The environment variable that selects a scripted source (tests only).
pub const LOAD_SCRIPT_ENV: &str = "GLEANER_TEST_LOAD_SCRIPT";

/// Plays back a load script against the monotonic clock.
#[derive(Debug, Clone)]
pub struct ScriptedLoadSource {
    start: Instant,
    /// (seconds after start, sample), sorted by time.
    steps: Vec<(f64, RawSample)>,
}

impl ScriptedLoadSource {
    /// Reads a script file.
    pub fn from_file(path: &Path) -> Result<Self, SampleError> {
        let text = std::fs::read_to_string(path).map_err(|source| SampleError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
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
        Ok(ScriptedLoadSource {
            start: Instant::now(),
            steps,
        })
    }

    /// The sample in force `elapsed` seconds after the start.
    pub fn at(&self, elapsed: f64) -> RawSample {
        let mut current = self.steps[0].1;
        for (t, s) in &self.steps {
            if *t <= elapsed {
                current = *s;
            } else {
                break;
            }
        }
        current
    }
}

impl LoadSource for ScriptedLoadSource {
    fn sample(&mut self, _guest_pids: &[i32]) -> Result<RawSample, SampleError> {
        Ok(self.at(self.start.elapsed().as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_plays_each_line_from_its_time_and_holds_the_last() {
        let s = ScriptedLoadSource::parse(
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
                ScriptedLoadSource::parse(text, Path::new("s")).is_err(),
                "{text:?}"
            );
        }
    }
}
