//! Checks the invariants ARCHITECTURE.md states about the code's layout that
//! the compiler cannot: only the command line uses `cli/`, and every source
//! file says what it is. (The model's purity is the compiler's job now: see
//! `crates/gleaner-model/Cargo.toml` and its `clippy.toml`.)

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("readable source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Shipped code lines only: comments cannot break the invariant, and test
/// modules (which by convention close a file) may build data any way they like.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .take_while(|(_, l)| !l.starts_with("#[cfg(test)]"))
        .filter(|(_, l)| !l.starts_with("//"))
}

#[test]
fn only_the_command_line_uses_the_cli_module() {
    // The CLI is the outermost layer: the node, the control API and the rest
    // must not reach back into it (shared code lives in the inner modules).
    let mut offences = Vec::new();
    for file in rust_files(&root().join("src")) {
        if file.starts_with(root().join("src/cli")) || file.ends_with("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        for (line_no, line) in code_lines(&text) {
            let names_cli = line.contains("crate::cli")
                || line.contains("super::cli")
                || (line.starts_with("use crate::{") && line.contains("cli"));
            if names_cli {
                offences.push(format!("{}:{line_no}", file.display()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "only src/cli and main.rs may use crate::cli:\n{}",
        offences.join("\n")
    );
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    let mut missing = Vec::new();
    for dir in ["src", "tests", "benches", "examples", "crates"] {
        let path = root().join(dir);
        if !path.exists() {
            continue;
        }
        for file in rust_files(&path) {
            let text = std::fs::read_to_string(&file).expect("readable");
            if !text.trim_start().starts_with("//!") {
                missing.push(file.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files without a //! doc:\n{}",
        missing.join("\n")
    );
}

#[test]
fn imports_point_down_from_the_composition_root() {
    // `daemon` wires the actors and the adapters; the adapters (control API,
    // dashboard) use the actors' handles; the actors and everything below
    // them import neither the adapters nor the root, so no arrow runs up.
    let rules: [(&str, &[&str]); 2] = [
        (
            "src/node src/consumer src/guest src/history src/net src/data src/monitor src/eval src/report.rs",
            &["crate::control", "crate::ui", "crate::daemon"],
        ),
        ("src/control src/ui", &["crate::daemon"]),
    ];
    let mut offences = Vec::new();
    for (dirs, banned) in rules {
        for dir in dirs.split(' ') {
            let path = root().join(dir);
            let files = if path.is_dir() {
                rust_files(&path)
            } else {
                vec![path]
            };
            for file in files {
                let text = std::fs::read_to_string(&file).expect("readable");
                for (line_no, line) in code_lines(&text) {
                    if let Some(b) = banned.iter().find(|b| line.contains(**b)) {
                        offences.push(format!("{}:{line_no} names {b}", file.display()));
                    }
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "an import runs back up:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_batch_queues_core_does_no_io() {
    // The queue's core decides and its driver acts (conventions.md, 11): the
    // core's files take the time as an input and return actions, so they
    // name no runtime, store, file, network, process or clock. `PeerId` is
    // a value (a host's identity), the one thing they take from libp2p.
    let core = [
        "state.rs",
        "rounds.rs",
        "placement.rs",
        "retries.rs",
        "avoid.rs",
        "deadlines.rs",
        "replicas.rs",
        "quorum.rs",
        "trust.rs",
        "outputs.rs",
        "checkpoints.rs",
        "restore.rs",
        "commands.rs",
    ];
    let forbidden = [
        "tokio",
        "sled",
        "std::fs",
        "std::net",
        "std::process",
        "Instant::now",
        "SystemTime",
        "Clock",
        "spawn",
        "BatchStore",
        "JobPool",
    ];
    let dir = root().join("src/consumer/batch/queue");
    let mut offences = Vec::new();
    for name in core {
        let file = dir.join(name);
        let text = std::fs::read_to_string(&file).expect("a core file of the batch queue");
        for (line_no, line) in code_lines(&text) {
            for word in forbidden {
                if line.contains(word) {
                    offences.push(format!("{}:{line_no}: {word}", file.display()));
                }
            }
            if line.contains("libp2p::") && !line.contains("libp2p::PeerId") {
                offences.push(format!("{}:{line_no}: libp2p", file.display()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "the batch queue's core must do no I/O (the driver does):\n{}",
        offences.join("\n")
    );
}
/// Where a path named in ARCHITECTURE.md lives: `it::` is this crate,
/// `sandbox::` the guest tests' own binary,
/// `model::` and `baselines::` the model crate, anything else `src/`.
fn base_of(first: &str) -> (PathBuf, bool) {
    match first {
        "it" => (root().join("tests/it"), true),
        "sandbox" => (root().join("tests/sandbox"), true),
        "model" => (root().join("crates/gleaner-model/src"), true),
        "baselines" => (root().join("crates/gleaner-model/src/baselines"), true),
        _ => (root().join("src"), false),
    }
}

/// Whether `fn name` is defined in `path` (a file, or any file below a dir).
fn defines_fn(path: &Path, name: &str) -> bool {
    let files = if path.is_dir() {
        rust_files(path)
    } else {
        vec![path.to_path_buf()]
    };
    files.iter().any(|f| {
        std::fs::read_to_string(f)
            .is_ok_and(|t| t.contains(&format!("fn {name}(")) || t.contains(&format!("fn {name}<")))
    })
}

/// Resolves `a::b::c` to a module (file or folder) and, when segments are
/// left, a function defined in it. `None` when nothing of that name exists.
fn resolve(reference: &str) -> Option<()> {
    let segments: Vec<&str> = reference.split("::").collect();
    let (base, skip_first) = base_of(segments[0]);
    let path_segments = if skip_first {
        &segments[1..]
    } else {
        &segments[..]
    };
    // The longest prefix that names a file or folder.
    let mut module = base.clone();
    let mut used = 0;
    for (i, _) in path_segments.iter().enumerate() {
        let candidate = base.join(path_segments[..=i].join("/"));
        let file = candidate.with_extension("rs");
        if file.is_file() {
            module = file;
            used = i + 1;
        } else if candidate.is_dir() {
            module = candidate;
            used = i + 1;
        }
    }
    if used == 0 && !skip_first {
        return None;
    }
    let rest: Vec<&&str> = path_segments[used..]
        .iter()
        .filter(|s| **s != "tests")
        .collect();
    match rest.as_slice() {
        [] => Some(()),
        [name] => defines_fn(&module, name).then_some(()),
        _ => None,
    }
}

#[test]
fn every_invariant_names_what_backs_it() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let invariants: Vec<&str> = text
        .split("\n\n")
        .filter(|p| p.trim_start().starts_with("**Invariant:**"))
        .collect();
    assert!(
        invariants.len() >= 20,
        "only {} invariants found",
        invariants.len()
    );
    let mut problems = Vec::new();
    for invariant in &invariants {
        let references: Vec<&str> = invariant
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|r| {
                r.contains("::")
                    && r.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':'
                    })
            })
            .collect();
        for r in &references {
            if resolve(r).is_none() {
                problems.push(format!("{r}: no such module or test"));
            }
        }
        let by_compiler = invariant.contains("Compiler") || invariant.contains("clippy");
        if references.is_empty() && !by_compiler {
            let head: String = invariant.chars().take(80).collect();
            problems.push(format!("backed by nothing: {head}"));
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's invariants:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_invariant_check_sees_a_missing_test() {
    assert!(resolve("it::batch_pool::no_such_test_anywhere").is_none());
    assert!(resolve("consumer::no_such_module").is_none());
    assert!(resolve("it::architecture::every_invariant_names_what_backs_it").is_some());
    assert!(resolve("net::codec").is_some());
}

#[test]
fn no_shipped_file_outside_the_model_is_over_800_lines() {
    // Issue 26: four files of ~1,500 lines each did several jobs. A file
    // that grows past this does two jobs; split it by job (the model's
    // maths, in crates/, is exempt: a solver or an estimator is one job).
    const MAX_LINES: usize = 800;
    let mut big = Vec::new();
    for file in rust_files(&root().join("src")) {
        if file
            .file_name()
            .is_some_and(|n| n == "tests.rs" || n.to_string_lossy().ends_with("_tests.rs"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        let lines = text
            .lines()
            .take_while(|l| !l.trim().starts_with("#[cfg(test)]"))
            .count();
        if lines > MAX_LINES {
            big.push(format!("{}: {lines} lines", file.display()));
        }
    }
    assert!(
        big.is_empty(),
        "files over {MAX_LINES} lines before their tests:\n{}",
        big.join("\n")
    );
}
