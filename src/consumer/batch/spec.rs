//! A batch as the user wrote it, and its expansion into tasks.
//!
//! `{}` in the command, an environment value or an input's remote name is the
//! task's value from `--range` (an integer) or its row index in `--params`;
//! `{name}` is that row's column `name`; `{{` and `}}` are literal braces.
//! Everything is checked here, before a single task is queued: an unknown
//! column, a malformed CSV line, an output escaping the task's directory, a
//! batch over the caps. Errors name the input they are about.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::model::relpath::RelPath;

/// Most tasks one batch may have.
pub const MAX_TASKS: usize = 100_000;
/// Most arguments, environment entries, inputs or outputs one task may have
/// (a host refuses more: `node::pool_host::remote_jobs::check_submit`).
pub const MAX_LIST: usize = 256;
/// Longest argument, environment entry or name after expansion, bytes.
pub const MAX_TEXT: usize = 64 * 1024;
/// Most columns of a params file.
pub const MAX_COLUMNS: usize = 64;
/// Names a task's result directory holds besides the declared outputs.
pub const RESERVED_NAMES: [&str; 3] = ["stdout", "stderr", "exit_status"];

/// Which tasks a batch has.
#[derive(Debug, Clone, PartialEq)]
pub enum Sweep {
    /// One task; `{}` is 0.
    One,
    /// One task per integer in `start..end` (end excluded).
    Range { start: i64, end: i64 },
    /// One task per row; the header names the columns.
    Params(Params),
}

/// A parsed params file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Params {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// An input of every task: a file on the consumer's machine and the relative
/// path it gets in the task's work directory (a template).
#[derive(Debug, Clone, PartialEq)]
pub struct InputTemplate {
    pub local: PathBuf,
    pub remote: String,
}

/// What every task of a batch runs, before expansion.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTemplate {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub inputs: Vec<InputTemplate>,
    /// Output files to bring back; the same names for every task.
    pub outputs: Vec<String>,
}

/// One task, expanded.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Local file and remote relative path. An input's local file may be a
    /// template too (`--input data/{}.txt=in.txt`).
    pub inputs: Vec<(PathBuf, String)>,
    pub outputs: Vec<String>,
}

/// Why a batch cannot be made; the text names the input at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("the command line is empty")]
    EmptyCommand,
    #[error("{what}: {why}")]
    Template { what: String, why: String },
    #[error("params file {source_name}, line {line}: {why}")]
    Params {
        source_name: String,
        line: u64,
        why: String,
    },
    #[error("--output {name:?}: {why}")]
    Output { name: String, why: String },
    #[error("--input {name:?}: {why}")]
    Input { name: String, why: String },
    #[error("--checkpoint {path}: must be a relative path inside the task's work dir, without '..' or placeholders")]
    Checkpoint { path: String },
    #[error("the batch has {tasks} tasks; at most {MAX_TASKS} are allowed")]
    TooManyTasks { tasks: u128 },
    #[error("the range {start}..{end} is empty")]
    EmptyRange { start: i64, end: i64 },
    #[error("{what}: more than {MAX_LIST} entries")]
    TooMany { what: &'static str },
}

/// Parses a params CSV: a header row naming the columns, then one row per
/// task, each with as many fields as the header. `source_name` is what the
/// user gave, for errors.
pub fn parse_params(text: &[u8], source_name: &str) -> Result<Params, SpecError> {
    let err = |line: u64, why: String| SpecError::Params {
        source_name: source_name.to_string(),
        line,
        why,
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text);
    let header = reader
        .headers()
        .map_err(|e| err(e.position().map_or(1, |p| p.line()), e.to_string()))?
        .clone();
    if header.is_empty() || header.iter().all(str::is_empty) {
        return Err(err(1, "the first line must name the columns".into()));
    }
    if header.len() > MAX_COLUMNS {
        return Err(err(1, format!("more than {MAX_COLUMNS} columns")));
    }
    let mut columns: Vec<String> = Vec::with_capacity(header.len());
    for name in header.iter() {
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(err(
                1,
                format!("column name {name:?}: use letters, digits and '_'"),
            ));
        }
        if columns.iter().any(|c| c == name) {
            return Err(err(1, format!("column {name:?} appears twice")));
        }
        columns.push(name.to_string());
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            err(line, e.to_string())
        })?;
        if rows.len() >= MAX_TASKS {
            return Err(SpecError::TooManyTasks {
                tasks: rows.len() as u128 + 1,
            });
        }
        rows.push(record.iter().map(str::to_string).collect());
    }
    if rows.is_empty() {
        return Err(err(
            2,
            "no rows after the header: the batch would be empty".into(),
        ));
    }
    Ok(Params { columns, rows })
}

impl Sweep {
    /// How many tasks.
    pub fn len(&self) -> usize {
        match self {
            Sweep::One => 1,
            Sweep::Range { start, end } => (end.saturating_sub(*start)).max(0) as usize,
            Sweep::Params(p) => p.rows.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check(&self) -> Result<(), SpecError> {
        if let Sweep::Range { start, end } = *self {
            if end <= start {
                return Err(SpecError::EmptyRange { start, end });
            }
            let tasks = i128::from(end) - i128::from(start);
            if tasks > MAX_TASKS as i128 {
                return Err(SpecError::TooManyTasks {
                    tasks: tasks as u128,
                });
            }
        }
        Ok(())
    }
}

/// The values a task's templates see.
struct TaskValues<'a> {
    index: String,
    row: Option<(&'a [String], &'a [String])>,
}

impl TaskValues<'_> {
    fn column(&self, name: &str) -> Option<&str> {
        let (columns, row) = self.row?;
        let i = columns.iter().position(|c| c == name)?;
        row.get(i).map(String::as_str)
    }
}

/// Expands `template` for every task of `sweep`.
pub fn expand(template: &TaskTemplate, sweep: &Sweep) -> Result<Vec<TaskSpec>, SpecError> {
    if template.argv.first().is_none_or(|a| a.is_empty()) {
        return Err(SpecError::EmptyCommand);
    }
    sweep.check()?;
    for (what, n) in [
        ("the command", template.argv.len()),
        ("--env", template.env.len()),
        ("--input", template.inputs.len()),
        ("--output", template.outputs.len()),
    ] {
        if n > MAX_LIST {
            return Err(SpecError::TooMany { what });
        }
    }
    for name in &template.outputs {
        check_output(name)?;
    }
    // Check every placeholder once against the columns, so an unknown column
    // is one clear error, not one per row.
    let columns: Option<&[String]> = match sweep {
        Sweep::Params(p) => Some(&p.columns),
        _ => None,
    };
    let texts = template
        .argv
        .iter()
        .map(|t| ("the command", t.as_str()))
        .chain(template.env.iter().map(|(_, v)| ("--env", v.as_str())))
        .chain(template.inputs.iter().flat_map(|i| {
            [
                ("--input", i.remote.as_str()),
                ("--input", i.local.to_str().unwrap_or("")),
            ]
        }));
    for (what, text) in texts {
        for name in placeholders(text).map_err(|why| template_error(what, text, why))? {
            let known = name.is_empty() || columns.is_some_and(|c| c.contains(&name));
            if !known {
                let why = match columns {
                    Some(c) => format!(
                        "{{{name}}} is not a column of the params file (it has: {})",
                        c.join(", ")
                    ),
                    None => format!("{{{name}}} needs --params with a column {name:?}"),
                };
                return Err(template_error(what, text, why));
            }
        }
    }
    let mut tasks = Vec::with_capacity(sweep.len());
    for i in 0..sweep.len() {
        let values = match sweep {
            Sweep::One => TaskValues {
                index: "0".into(),
                row: None,
            },
            Sweep::Range { start, .. } => TaskValues {
                index: (start + i as i64).to_string(),
                row: None,
            },
            Sweep::Params(p) => TaskValues {
                index: i.to_string(),
                row: Some((&p.columns, &p.rows[i])),
            },
        };
        tasks.push(expand_one(template, &values)?);
    }
    Ok(tasks)
}

fn expand_one(template: &TaskTemplate, values: &TaskValues<'_>) -> Result<TaskSpec, SpecError> {
    let fill = |what: &str, text: &str| -> Result<String, SpecError> {
        let out = substitute(text, values).map_err(|why| template_error(what, text, why))?;
        if out.len() > MAX_TEXT || out.contains('\0') {
            return Err(template_error(
                what,
                text,
                format!("expands to more than {MAX_TEXT} bytes or to a NUL byte"),
            ));
        }
        Ok(out)
    };
    let argv = template
        .argv
        .iter()
        .map(|a| fill("the command", a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = template
        .env
        .iter()
        .map(|(k, v)| Ok((k.clone(), fill("--env", v)?)))
        .collect::<Result<Vec<_>, SpecError>>()?;
    let mut inputs = Vec::with_capacity(template.inputs.len());
    for input in &template.inputs {
        let local = input.local.to_str().map_or_else(
            || Ok(input.local.clone()),
            |l| fill("--input", l).map(PathBuf::from),
        )?;
        let remote = fill("--input", &input.remote)?;
        if let Err(e) = RelPath::new(remote.as_str()) {
            return Err(SpecError::Input {
                name: remote,
                why: format!(
                    "the remote name must be a relative path without '..': {}",
                    e.fault()
                ),
            });
        }
        inputs.push((local, remote));
    }
    Ok(TaskSpec {
        argv,
        env,
        inputs,
        outputs: template.outputs.clone(),
    })
}

fn template_error(what: &str, text: &str, why: String) -> SpecError {
    SpecError::Template {
        what: format!("{what} {:?}", text.chars().take(200).collect::<String>()),
        why,
    }
}

/// The names inside `{...}` in `text` (`""` for `{}`).
fn placeholders(text: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    walk(text, |piece| {
        if let Piece::Name(n) = piece {
            names.push(n.to_string());
        }
    })?;
    Ok(names)
}

fn substitute(text: &str, values: &TaskValues<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut missing = None;
    walk(text, |piece| match piece {
        Piece::Text(t) => out.push_str(t),
        Piece::Name("") => out.push_str(&values.index),
        Piece::Name(n) => match values.column(n) {
            Some(v) => out.push_str(v),
            None => missing = Some(n.to_string()),
        },
    })?;
    match missing {
        Some(n) => Err(format!("no value for {{{n}}}")),
        None => Ok(out),
    }
}

enum Piece<'a> {
    Text(&'a str),
    Name(&'a str),
}

/// Splits `text` into literal pieces and placeholders; `{{`/`}}` are braces.
fn walk<'a>(text: &'a str, mut each: impl FnMut(Piece<'a>)) -> Result<(), String> {
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        each(Piece::Text(&rest[..i]));
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            each(Piece::Text("{"));
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            each(Piece::Text("}"));
            rest = after;
        } else if tail.starts_with('}') {
            return Err("a lone '}' (write '}}' for a brace)".into());
        } else {
            let Some(end) = tail.find('}') else {
                return Err("a '{' without its '}' (write '{{' for a brace)".into());
            };
            let name = &tail[1..end];
            if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "{{{name}}} is not a placeholder: use {{}} or {{column}}"
                ));
            }
            each(Piece::Name(name));
            rest = &tail[end + 1..];
        }
    }
    each(Piece::Text(rest));
    Ok(())
}

/// An output name must stay inside the task's result directory and not
/// shadow the files every task has there.
pub fn check_output(name: &str) -> Result<RelPath, SpecError> {
    let err = |why: &str| {
        Err(SpecError::Output {
            name: name.to_string(),
            why: why.to_string(),
        })
    };
    let path = match RelPath::new(name) {
        Ok(path) => path,
        Err(e) => {
            return err(&format!(
                "must be a relative path inside the task's directory, without '..': {}",
                e.fault()
            ))
        }
    };
    if RESERVED_NAMES.contains(&name) {
        return err("that name is reserved for what every task has (stdout, stderr, exit_status)");
    }
    if name.contains(['{', '}']) {
        return err("output names are the same for every task; no placeholders");
    }
    Ok(path)
}

/// Checks a checkpoint file's path: relative, inside the task's work dir,
/// the same for every task (no placeholders). The one copy of this rule; the
/// command line and the control API both call it.
pub fn check_checkpoint(path: &str) -> Result<RelPath, SpecError> {
    match RelPath::new(path) {
        Ok(rel) if !path.contains(['{', '}']) => Ok(rel),
        _ => Err(SpecError::Checkpoint {
            path: path.to_string(),
        }),
    }
}

/// The values of each task as `batch status` shows them (for `--params`,
/// the row; for `--range`, the integer).
pub fn task_labels(sweep: &Sweep) -> Vec<BTreeMap<String, String>> {
    match sweep {
        Sweep::One => vec![BTreeMap::new()],
        Sweep::Range { start, end } => (*start..*end)
            .map(|v| BTreeMap::from([(String::new(), v.to_string())]))
            .collect(),
        Sweep::Params(p) => p
            .rows
            .iter()
            .map(|row| p.columns.iter().cloned().zip(row.iter().cloned()).collect())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(argv: &[&str]) -> TaskTemplate {
        TaskTemplate {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![],
            inputs: vec![],
            outputs: vec![],
        }
    }

    #[test]
    fn a_range_fills_braces_with_its_integers() {
        let tasks = expand(
            &template(&["sim", "--seed", "{}", "{{x}}"]),
            &Sweep::Range { start: -1, end: 2 },
        )
        .unwrap();
        let argv: Vec<_> = tasks.iter().map(|t| t.argv[2].clone()).collect();
        assert_eq!(argv, ["-1", "0", "1"]);
        assert_eq!(tasks[0].argv[3], "{x}");
    }

    #[test]
    fn params_fill_columns_and_the_row_index() {
        let params = parse_params(b"alpha,beta\n0.1,x\n0.2,y\n", "p.csv").unwrap();
        let mut t = template(&["run", "{alpha}", "{beta}-{}"]);
        t.inputs.push(InputTemplate {
            local: "data/{beta}.txt".into(),
            remote: "in/{}.txt".into(),
        });
        let tasks = expand(&t, &Sweep::Params(params)).unwrap();
        assert_eq!(tasks[1].argv, ["run", "0.2", "y-1"]);
        assert_eq!(tasks[1].inputs[0], ("data/y.txt".into(), "in/1.txt".into()));
    }

    #[test]
    fn an_unknown_column_is_named() {
        let params = parse_params(b"alpha\n1\n", "p.csv").unwrap();
        let e = expand(&template(&["run", "{gamma}"]), &Sweep::Params(params))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("{gamma} is not a column") && e.contains("alpha"),
            "{e}"
        );
        let e = expand(&template(&["run", "{gamma}"]), &Sweep::One)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs --params"), "{e}");
    }

    #[test]
    fn a_malformed_params_line_is_named() {
        let e = parse_params(b"a,b\n1,2\n3\n", "sweep.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("params file sweep.csv, line 3"), "{e}");
        assert!(parse_params(b"a,a\n1,2\n", "p").is_err());
        assert!(parse_params(b"a b\n1\n", "p").is_err());
        assert!(parse_params(b"a\n", "p").is_err());
    }

    #[test]
    fn a_checkpoint_path_stays_in_the_work_dir_and_is_the_same_for_every_task() {
        assert_eq!(
            check_checkpoint("state/ckpt.bin").map(|p| p.as_str().to_string()),
            Ok("state/ckpt.bin".to_string())
        );
        for bad in ["../x", "/etc/passwd", "a/../../b", "ckpt-{i}", "", "a\0b"].map(String::from) {
            let refused = check_checkpoint(&bad);
            assert!(
                matches!(&refused, Err(SpecError::Checkpoint { path }) if *path == bad),
                "{bad:?}: {refused:?}"
            );
        }
    }

    #[test]
    fn outputs_cannot_escape_or_shadow() {
        for bad in [
            "../x",
            "/etc/passwd",
            "stdout",
            "exit_status",
            "a/../../b",
            "o{}",
        ] {
            let mut t = template(&["x"]);
            t.outputs.push(bad.into());
            assert!(
                matches!(expand(&t, &Sweep::One), Err(SpecError::Output { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn caps_and_bad_braces_are_refused() {
        let r = expand(
            &template(&["x"]),
            &Sweep::Range {
                start: 0,
                end: i64::MAX,
            },
        );
        assert!(matches!(r, Err(SpecError::TooManyTasks { .. })));
        let r = expand(&template(&["x"]), &Sweep::Range { start: 3, end: 3 });
        assert!(matches!(r, Err(SpecError::EmptyRange { .. })));
        for bad in ["{", "}", "{a b}", "{x"] {
            assert!(
                expand(&template(&["x", bad]), &Sweep::One).is_err(),
                "{bad}"
            );
        }
        assert!(matches!(
            expand(&template(&[]), &Sweep::One),
            Err(SpecError::EmptyCommand)
        ));
    }
}
