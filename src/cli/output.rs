//! Printing command results: JSON for scripts, text for people; tables
//! are laid out by `comfy-table`, never by hand-set widths.
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

/// A plain table for a terminal or a pipe: a header row, then `rows`;
/// columns after the first right-aligned when `numeric`. Widths follow the
/// content (comfy-table), so a long peer id or method name never shifts the
/// other columns.
pub fn table<R, C>(header: &[&str], rows: R, numeric: bool) -> String
where
    R: IntoIterator<Item = Vec<C>>,
    C: Into<comfy_table::Cell>,
{
    let mut table = comfy_table::Table::new();
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for row in rows {
        table.add_row(row);
    }
    if numeric {
        for column in table.column_iter_mut().skip(1) {
            column.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    let text = table.to_string();
    // comfy-table pads each line with one space on both sides: keep the
    // left margin out and the right end clean.
    let mut out = String::with_capacity(text.len() + 1);
    for line in text.lines() {
        out.push_str(line.strip_prefix(' ').unwrap_or(line).trim_end());
        out.push('\n');
    }
    out
}

/// Rows of "key  value", the keys aligned (a two-column table without header).
pub fn key_values(rows: &[(String, String)]) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled);
    for (k, v) in rows {
        table.add_row(vec![k.as_str(), v.as_str()]);
    }
    let mut out = String::new();
    for line in table.to_string().lines() {
        out.push_str(line.strip_prefix(' ').unwrap_or(line).trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_follow_the_widest_cell() {
        let text = table(
            &["method", "T = 1h"],
            vec![vec!["km", "0.1"], vec!["a-long-method-name", "0.25"]],
            true,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Right-aligned numbers end in the same column.
        let ends: Vec<usize> = lines.iter().map(|l| l.len()).collect();
        assert!(ends.windows(2).all(|w| w[0] == w[1]), "{text}");
        assert!(lines[2].starts_with("a-long-method-name"), "{text}");
        let kv = key_values(&[
            ("state".into(), "S1".into()),
            ("TR next 1h".into(), "0.9".into()),
        ]);
        let lines: Vec<&str> = kv.lines().collect();
        assert_eq!(lines[0].find("S1"), lines[1].find("0.9"), "{kv}");
    }
}
