//! Capture of a guest's stdout or stderr into a file with a size cap.
//!
//! A thread per stream copies the pipe into the file until the cap, then
//! keeps reading and discarding so the guest never blocks on a full pipe,
//! and reports the truncation once through a callback. This module knows
//! nothing about jobs, policy or the event log.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// The file name in the job directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// What a finished capture wrote and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CaptureReport {
    /// Bytes written to the file (at most the cap).
    pub written: u64,
    /// Bytes read past the cap and discarded.
    pub dropped: u64,
}

impl CaptureReport {
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }
}

/// A running capture.
#[derive(Debug)]
pub struct Capture {
    thread: Option<JoinHandle<io::Result<CaptureReport>>>,
    report: Option<CaptureReport>,
}

impl Capture {
    /// Starts copying `source` into a new file `dir/<stream>`, keeping at most
    /// `cap` bytes. `on_truncate` is called once, from the capture thread,
    /// when the first byte past the cap arrives.
    pub fn start<R>(
        source: R,
        dir: &Path,
        stream: Stream,
        cap: u64,
        on_truncate: Arc<dyn Fn(Stream) + Send + Sync>,
    ) -> io::Result<Capture>
    where
        R: Read + Send + 'static,
    {
        let file = File::create_new(dir.join(stream.file_name()))?;
        let thread = std::thread::Builder::new()
            .name(format!("guest-{}", stream.file_name()))
            .spawn(move || copy_capped(source, file, cap, || on_truncate(stream)))?;
        Ok(Capture {
            thread: Some(thread),
            report: None,
        })
    }

    /// The report once the stream has closed (every writer of the pipe has
    /// exited); `None` while it is still open. Never blocks.
    pub fn poll(&mut self) -> Option<CaptureReport> {
        if self.report.is_none() && self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            if let Some(thread) = self.thread.take() {
                let report = thread.join().ok().and_then(|r| r.ok());
                self.report = Some(report.unwrap_or_default());
            }
        }
        self.report
    }
}

fn copy_capped(
    mut source: impl Read,
    mut sink: impl Write,
    cap: u64,
    mut on_truncate: impl FnMut(),
) -> io::Result<CaptureReport> {
    let mut report = CaptureReport::default();
    let mut buf = [0u8; 8192];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let room = usize::try_from(cap.saturating_sub(report.written)).unwrap_or(usize::MAX);
        let keep = n.min(room);
        if keep > 0 {
            sink.write_all(&buf[..keep])?;
            report.written += keep as u64;
        }
        if keep < n {
            if report.dropped == 0 {
                on_truncate();
            }
            report.dropped += (n - keep) as u64;
        }
    }
    sink.flush()?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_up_to_the_cap_and_counts_the_rest() {
        let input = vec![b'x'; 20_000];
        let mut out = Vec::new();
        let mut calls = 0;
        let report = copy_capped(&input[..], &mut out, 12_345, || calls += 1).expect("copy");
        assert_eq!(out.len(), 12_345);
        assert_eq!(report.written, 12_345);
        assert_eq!(report.dropped, 20_000 - 12_345);
        assert_eq!(calls, 1);
    }

    #[test]
    fn short_output_is_not_truncated() {
        let mut out = Vec::new();
        let report =
            copy_capped(&b"hello"[..], &mut out, 100, || panic!("no truncation")).expect("copy");
        assert_eq!(out, b"hello");
        assert!(!report.truncated());
    }
}
