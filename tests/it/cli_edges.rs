//! The command line's edges, run as a user would (the built binary, a temp
//! data dir and config dir): files that are devices, FIFOs or too large are
//! refused by name and never hang; config values out of their documented
//! range are refused with the key named; flags that would be ignored are
//! refused; precedence flags > environment > file; completions and man page.

use assert_cmd::Command;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every command here must answer promptly: a hang is the bug.
const PROMPT: Duration = Duration::from_secs(30);

struct Home {
    _dir: tempfile::TempDir,
    data: PathBuf,
    config: PathBuf,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let config = dir.path().join("config.toml");
        Home {
            _dir: dir,
            data,
            config,
        }
    }

    fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// The binary with this home's data dir and config, and none of the
    /// environment that would change its settings.
    fn std_command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("gleaner"));
        for var in [
            "RUST_LOG",
            "GLEANER_LOG",
            "GLEANER_POOL",
            "GLEANER_LISTEN",
            "GLEANER_BOOTSTRAP",
            "GLEANER_SWARM_KEY",
            "GLEANER_ALLOW",
        ] {
            cmd.env_remove(var);
        }
        cmd.arg("--data-dir")
            .arg(&self.data)
            .arg("--config")
            .arg(&self.config);
        cmd
    }

    fn gleaner(&self) -> Command {
        let mut cmd = Command::from_std(self.std_command());
        cmd.timeout(PROMPT);
        cmd
    }

    fn fifo(&self) -> PathBuf {
        let path = self.dir().join("a-fifo.csv");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        path
    }
}

/// Runs `cmd`, expects failure, returns stderr.
fn fails(cmd: &mut Command) -> String {
    let out = cmd.output().expect("gleaner runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "succeeded: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A timeout kills the child without an exit code: that is the hang.
    assert!(out.status.code().is_some(), "killed (hung?): {stderr}");
    stderr
}

/// [`fails`] for a command whose peak memory matters: also returns the
/// child's own peak resident set in KiB (by `wait4` on its pid: this process
/// is shared with other tests, whose children `RUSAGE_CHILDREN` would count).
fn fails_measured(mut cmd: std::process::Command) -> (String, i64) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gleaner runs");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let used = crate::reap_with_usage(child, PROMPT);
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let used = used.unwrap_or_else(|| panic!("killed after {PROMPT:?} (hung?): {stderr}"));
    assert!(!used.status.success(), "succeeded: {stdout}\n{stderr}");
    (stderr, used.max_rss_kib)
}

#[test]
fn history_import_of_a_device_or_fifo_is_refused_by_name() {
    let home = Home::new();
    let e = fails(home.gleaner().args(["history", "import", "/dev/zero"]));
    assert!(
        e.contains("/dev/zero") && e.contains("character device"),
        "{e}"
    );
    let fifo = home.fifo();
    let e = fails(home.gleaner().args(["history", "import"]).arg(&fifo));
    assert!(e.contains("a-fifo.csv") && e.contains("FIFO"), "{e}");
}

#[test]
fn submit_input_of_a_device_or_fifo_is_refused_by_name() {
    let home = Home::new();
    let e = fails(
        home.gleaner()
            .args(["submit", "--input", "/dev/zero", "--", "true"]),
    );
    assert!(
        e.contains("/dev/zero") && e.contains("character device"),
        "{e}"
    );
    let fifo = home.fifo();
    let e = fails(
        home.gleaner()
            .arg("submit")
            .arg("--input")
            .arg(&fifo)
            .args(["--", "true"]),
    );
    assert!(e.contains("FIFO"), "{e}");
}

#[test]
fn predict_and_eval_refuse_a_fifo_as_trace() {
    let home = Home::new();
    let fifo = home.fifo();
    let e = fails(
        home.gleaner()
            .arg("predict")
            .arg("--trace")
            .arg(&fifo)
            .args(["--window", "1h"]),
    );
    assert!(e.contains("a-fifo.csv") && e.contains("FIFO"), "{e}");
    let e = fails(home.gleaner().arg("eval").arg("--trace").arg(&fifo));
    assert!(e.contains("a-fifo.csv") && e.contains("FIFO"), "{e}");
}

#[test]
fn an_oversized_trace_is_refused_within_bounded_memory() {
    let home = Home::new();
    // Sparse: it costs no disk, and reads as zeros like /dev/zero would,
    // but passes the regular-file check, so only the counted limit stops it.
    let big = home.dir().join("big.csv");
    let limit = gleaner::history::trace::MAX_TRACE_BYTES;
    std::fs::File::create(&big)
        .unwrap()
        .set_len(limit + 4096)
        .unwrap();
    let mut predict = home.std_command();
    predict
        .arg("predict")
        .arg("--trace")
        .arg(&big)
        .args(["--window", "1h"]);
    let (e, max_rss_kib) = fails_measured(predict);
    assert!(e.contains("big.csv") && e.contains("limit"), "{e}");
    let max_rss_mib = max_rss_kib / 1024;
    assert!(
        max_rss_mib < 1024,
        "predict used {max_rss_mib} MiB before refusing"
    );
}

#[test]
fn import_errors_name_the_users_file_and_line() {
    let home = Home::new();
    let bad = home.dir().join("my-host.csv");
    std::fs::write(
        &bad,
        "# gleaner-trace v1\ntime,cpu,free_mib,up\n1700000000,10,1000,1\n1700000006,oops,1000,1\n",
    )
    .unwrap();
    let e = fails(home.gleaner().args(["history", "import"]).arg(&bad));
    assert!(e.contains("my-host.csv:4"), "{e}");
    assert!(!e.contains("imported trace"), "{e}");
}

#[test]
fn config_values_outside_their_range_are_refused_with_the_key_named() {
    let home = Home::new();
    for (text, key) in [
        (
            "[history]\ncompact_every_secs = 9223372036854775807\n",
            "compact_every_secs",
        ),
        (
            "[guest]\nmax_runtime_secs = 18446744073709551615\n",
            "max_runtime_secs",
        ),
        ("[monitor]\nmax_gap_secs = 99999999999\n", "max_gap_secs"),
        ("[history]\ndays = 0\n", "days"),
        ("[history]\ntz = \"Mars/Olympus\"\n", "tz"),
        ("[net]\nlisten = [\"not an address\"]\n", "listen"),
    ] {
        std::fs::write(&home.config, text).unwrap();
        let e = fails(home.gleaner().arg("config"));
        assert!(e.contains(key), "{text}: {e}");
        // The node refuses it before it starts anything (a node that
        // started would run until the timeout).
        let e = fails(home.gleaner().args(["node", "--no-net"]));
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn a_device_as_swarm_key_is_refused_at_start() {
    let home = Home::new();
    for flag in [
        &["--swarm-key", "/dev/zero"][..],
        &[], // the config key
    ] {
        std::fs::write(
            &home.config,
            "[net]\nmdns = false\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\nswarm_key_file = \"/dev/zero\"\n",
        )
        .unwrap();
        let e = fails(home.gleaner().arg("node").args(flag));
        assert!(
            e.contains("/dev/zero") && e.contains("character device"),
            "{e}"
        );
    }
}

#[test]
fn predict_from_the_node_refuses_flags_it_would_ignore() {
    let home = Home::new();
    for flags in [
        &["--days", "3"][..],
        &["--step", "60"],
        &["--th1", "10"],
        &["--th2", "90", "--sustain", "5"],
    ] {
        let e = fails(
            home.gleaner()
                .args(["predict", "--window", "1h"])
                .args(flags),
        );
        assert!(e.contains(flags[0]) && e.contains("--trace"), "{e}");
    }
}

/// Starts `gleaner node --json` and returns the pool its ready line names.
fn ready_pool(mut cmd: std::process::Command) -> String {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let ready: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!("no ready line ({e}): {line:?}");
    });
    ready["pool"].as_str().unwrap_or_default().to_string()
}

#[test]
fn flags_win_over_environment_which_wins_over_the_file() {
    let home = Home::new();
    std::fs::write(
        &home.config,
        "[net]\npool = \"from-file\"\nmdns = false\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\n",
    )
    .unwrap();
    let node = || {
        let mut cmd = home.std_command();
        cmd.args(["node", "--no-guest", "--json"]);
        cmd
    };
    assert_eq!(ready_pool(node()), "from-file");
    let mut with_env = node();
    with_env.env("GLEANER_POOL", "from-env");
    assert_eq!(ready_pool(with_env), "from-env");
    let mut with_flag = node();
    with_flag
        .env("GLEANER_POOL", "from-env")
        .args(["--pool", "from-flag"]);
    assert_eq!(ready_pool(with_flag), "from-flag");
}

#[test]
fn completions_and_man_page() {
    let home = Home::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = home
            .gleaner()
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("history") && text.contains("swarm-key"),
            "{shell}"
        );
    }
    let out = home.gleaner().arg("man").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH gleaner"),
        "{page:.200}"
    );
    assert!(
        page.contains("GLEANER NODE") && page.contains("swarm\\-key"),
        "{page:.400}"
    );
}
