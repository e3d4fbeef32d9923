//! Reading the traces `gleaner eval` scores, within two limits: each file at
//! most the trace format's cap (`MAX_TRACE_BYTES`, 256 MiB) and all of them
//! together at most [`MAX_TOTAL_TRACE_BYTES`]. Parsed rows take about as
//! much memory as their text, so the total bounds what an evaluation holds.
//! Both limits are counted while reading (`crate::fsutil`), never taken from
//! metadata.

use crate::fsutil::{read_bounded, FileReadError};
use crate::history::trace::{parse_trace, Trace, TraceError, MAX_TRACE_BYTES};
use std::path::{Path, PathBuf};

/// Most bytes of trace text one evaluation reads, all files together (1 GiB).
pub const MAX_TOTAL_TRACE_BYTES: u64 = 1 << 30;

/// Why the traces could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(
        "{path}: the traces together pass eval's total limit of {max} bytes \
         (MAX_TOTAL_TRACE_BYTES; {used} bytes in the files before this one); \
         evaluate fewer or shorter traces"
    )]
    TotalTooLarge { path: PathBuf, max: u64, used: u64 },
}

/// Reads and parses `paths` in order within both limits.
pub fn read_traces(paths: &[PathBuf]) -> Result<Vec<Trace>, LoadError> {
    read_traces_within(paths, MAX_TOTAL_TRACE_BYTES)
}

/// [`read_traces`] with another total (for tests).
pub fn read_traces_within(paths: &[PathBuf], total: u64) -> Result<Vec<Trace>, LoadError> {
    let mut used = 0u64;
    let mut traces = Vec::with_capacity(paths.len());
    for path in paths {
        let left = total.saturating_sub(used);
        let limit = left.min(MAX_TRACE_BYTES);
        let bytes = match read_bounded(path, limit) {
            Ok(b) => b,
            Err(FileReadError::TooLarge { .. }) if limit < MAX_TRACE_BYTES => {
                return Err(LoadError::TotalTooLarge {
                    path: path.clone(),
                    max: total,
                    used,
                });
            }
            Err(e) => return Err(TraceError::Read(e).into()),
        };
        used = used.saturating_add(bytes.len() as u64);
        traces.push(parse_trace(&bytes, Path::new(path))?);
    }
    Ok(traces)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW_TRACE: &str = "# gleaner-trace v1\ntime,cpu,free_mib,up\n1,2,3,1\n2,2,3,1\n";

    #[test]
    fn the_total_limit_is_named_and_counts_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..3)
            .map(|i| {
                let p = dir.path().join(format!("t{i}.csv"));
                std::fs::write(&p, ROW_TRACE).unwrap();
                p
            })
            .collect();
        let size = ROW_TRACE.len() as u64;
        // Room for exactly three files.
        assert_eq!(read_traces_within(&paths, 3 * size).unwrap().len(), 3);
        // One byte short: the third file is refused, by name, with the limit.
        let e = read_traces_within(&paths, 3 * size - 1).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(&e, LoadError::TotalTooLarge { path, used, .. } if path == &paths[2] && *used == 2 * size),
            "{text}"
        );
        assert!(
            text.contains("t2.csv") && text.contains("MAX_TOTAL_TRACE_BYTES"),
            "{text}"
        );
        // A single file over its own cap is still the per-file error.
        assert!(read_traces(&paths).is_ok());
    }
}
