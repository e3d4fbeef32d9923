//! Printing command results: JSON for scripts, text for people.
//!
//! A closed stdout (`gleaner … | head`) is not an error: printing stops and
//! the command exits 0, as command-line tools are expected to.

use serde::Serialize;
use std::io::{self, Write};

/// Writes `text` to stdout; a broken pipe ends the process quietly.
pub fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// Writes `value` as one line of JSON.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string(value)?;
    text.push('\n');
    print_text(&text)
}
