//! Test fixture for integration tests of `gleaner node`: starts the real
//! binary in a temp data dir with a given config (and optionally a scripted
//! host load), waits for its "ready" line, and kills it on drop so a failed
//! test never leaves a node (or its guest) behind.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gleaner")
}

/// The `[net]` section every test node gets: loopback only, no mDNS (the
/// workplace's network rule; mDNS ignores loopback anyway).
pub const LOOPBACK_NET: &str =
    "[net]\nmdns = false\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\nannounce_secs = 2\n";

/// A config for tests: short periods and sustain, no random extra samples,
/// networking on loopback only. `extra` lands in `[monitor]`.
pub fn test_config(sustain_secs: u32, extra: &str) -> String {
    format!(
        "[policy]\nsustain_secs = {sustain_secs}\n\n{LOOPBACK_NET}\n[monitor]\nmin_period_secs = 1\nmax_period_secs = 1\nextra_sample_chance = 0.0\n{extra}"
    )
}

/// One node process in its own temp dir.
pub struct NodeFixture {
    pub dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    pub child: Option<Child>,
    pub stdout_lines: Vec<String>,
    /// CPUs to pin the node (and so its guests) to.
    pub cpus: Option<Vec<usize>>,
    pub script: Option<String>,
    /// Extra flags after `gleaner node`.
    pub node_args: Vec<String>,
    /// A named network namespace (`ip netns`) to start the node in.
    pub netns: Option<String>,
}

impl NodeFixture {
    /// A fixture in a fresh temp dir with `config` (TOML) and, if given, a
    /// load script (`secs cpu free_mib` lines); the node is not started yet.
    pub fn new(config: &str, script: Option<&str>) -> NodeFixture {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_path_buf();
        // Test nodes never use mDNS or a non-loopback address (workplace rule),
        // whatever else the test's config says.
        let config = if config.contains("[net]") {
            config.to_string()
        } else {
            format!("{config}\n{LOOPBACK_NET}")
        };
        std::fs::write(dir.join("config.toml"), config).unwrap();
        NodeFixture {
            dir,
            _temp: Some(temp),
            child: None,
            stdout_lines: Vec::new(),
            cpus: None,
            script: script.map(str::to_string),
            node_args: Vec::new(),
            netns: None,
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A `gleaner` command aimed at this node.
    pub fn gleaner(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg("--data-dir")
            .arg(self.data_dir())
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .env_remove("RUST_LOG")
            .env_remove("GLEANER_LOG")
            .env_remove("GLEANER_DATA_DIR")
            .env_remove("GLEANER_CONFIG_DIR");
        cmd
    }

    /// Starts the node and waits for "ready" (panics after 30 s).
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already started");
        let mut cmd = self.gleaner();
        cmd.arg("node")
            .args(&self.node_args)
            .env("GLEANER_LOG", "gleaner=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("node.log"))
                    .unwrap(),
            ));
        if let Some(script) = &self.script {
            let path = self.dir.join("load.txt");
            std::fs::write(&path, script).unwrap();
            cmd.arg("--owner-load").arg(path);
        }
        if let Some(cpus) = self.cpus.clone() {
            unsafe {
                cmd.pre_exec(move || pin_self(&cpus));
            }
        }
        // The namespace file stays open until the child has execed (`spawn` returns).
        let netns = self.netns.as_ref().map(|ns| {
            std::fs::File::open(Path::new("/run/netns").join(ns))
                .unwrap_or_else(|e| panic!("network namespace {ns}: {e}"))
        });
        if let Some(file) = &netns {
            use std::os::fd::AsRawFd;
            let fd = file.as_raw_fd();
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().unwrap();
        drop(netns);
        let stdout = child.stdout.take().unwrap();
        self.child = Some(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.starts_with("ready");
                    self.stdout_lines.push(line);
                    if ready {
                        return;
                    }
                }
                Err(_) => panic!(
                    "node did not get ready; stdout {:?}; log:\n{}",
                    self.stdout_lines,
                    self.log()
                ),
            }
        }
    }

    /// A value the node printed when ready, e.g. `peer id` or `listening`.
    pub fn ready_value(&self, key: &str) -> Option<String> {
        let prefix = format!("{key}:");
        self.stdout_lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }

    /// SIGTERM and wait (panics after 15 s).
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "node did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Runs a client command and returns its stdout; panics on failure.
    pub fn run_ok(&self, args: &[&str]) -> String {
        let out = self.gleaner().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "gleaner {args:?} failed: {}\nnode log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn status(&self) -> Value {
        serde_json::from_str(&self.run_ok(&["status", "--json"])).unwrap()
    }

    /// Starts `gleaner run-local --json` with `args`; its JSON lines arrive on the receiver.
    pub fn run_local(&self, args: &[&str]) -> JsonStream {
        self.json_stream("run-local", args)
    }

    /// Starts `gleaner --json COMMAND ARGS` (`run-local`, `submit`) and reads
    /// its JSON lines on a thread.
    pub fn json_stream(&self, command: &str, args: &[&str]) -> JsonStream {
        let mut child = self
            .gleaner()
            .arg("--json")
            .arg(command)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        JsonStream {
            command: command.to_string(),
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Polls `status` until `pred` holds (panics after `timeout`).
    pub fn wait_status(
        &self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.status();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last status {s}\nnode log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for NodeFixture {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A node killed mid-job may leave its job's work-dir tmpfs mounted;
        // it unmounts its leftovers when it starts again, but a test's node
        // is not started again, and the tmpfs (memory) would outlive the
        // test's temporary directory.
        gleaner::guest::unmount_leftovers(&self.data_dir());
    }
}

/// A running `gleaner run-local`.
pub struct JsonStream {
    command: String,
    pub child: Child,
    pub lines: mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
}

impl JsonStream {
    /// Waits for a line of `type` (panics after `timeout`).
    pub fn wait_for(&mut self, kind: &str, timeout: Duration) -> Value {
        self.wait_until(kind, timeout, |v| v["type"] == kind)
    }

    /// Waits for a line matching `pred`, `what` naming it (panics after `timeout`).
    pub fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return v.clone();
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no `{what}` line; saw {:#?}", self.seen));
            self.seen.push(v.clone());
            if pred(&v) {
                return v;
            }
        }
    }

    /// Waits for the process to end and returns its exit code.
    pub fn finish(mut self, timeout: Duration) -> (i32, Vec<Value>) {
        let deadline = Instant::now() + timeout;
        let code = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} did not end; saw {:#?}", self.command, self.seen);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(v) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(v);
        }
        (code, std::mem::take(&mut self.seen))
    }
}

impl Drop for JsonStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pins the calling process to `cpus` (async-signal-safe: one system call).
pub fn pin_self(cpus: &[usize]) -> std::io::Result<()> {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The fields of /proc/PID/stat after the command name (state first),
/// `None` once the process is gone.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 2..)?;
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// The process state letter from /proc/PID/stat, `None` once it is gone.
pub fn proc_state(pid: i32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// The parent's pid from /proc/PID/stat, as seen from here.
pub fn parent_pid(pid: i32) -> Option<i32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// utime + stime of a process, clock ticks.
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

pub fn ticks_per_sec() -> u64 {
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as u64 }
}

pub fn wait_until(timeout: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if pred() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    pred()
}

pub fn example_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bitbrains-60-3weeks.csv")
}

/// Steady owner load for every node: 5 % CPU, 8000 MiB free (S1).
pub const QUIET_HOST: &str = "0 5 8000\n";

/// A trace of the last 21 days, one row a minute, in which the owner's load
/// exceeds Th2 for the first `busy_minutes` of every hour (S3 once sustained).
pub fn history(busy_minutes: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let end = now - now % 60 - 120;
    let mut text = String::from(
        "# gleaner-trace v1\n# host: test\n# tz: UTC\n# step: 60\ntime,cpu,free_mib,up\n",
    );
    let mut t = end - 21 * 86_400;
    while t <= end {
        let cpu = if (t / 60) % 60 < busy_minutes {
            95.0
        } else {
            5.0
        };
        text.push_str(&format!("{t},{cpu},8000,1\n"));
        t += 60;
    }
    text
}

/// A node of a loopback pool, not started yet; `history` (a trace) is imported first.
pub fn pool_node(history: Option<&str>, flags: &[&str]) -> NodeFixture {
    let mut node = NodeFixture::new(&test_config(60, ""), Some(QUIET_HOST));
    if let Some(trace) = history {
        let path = node.dir.join("history.csv");
        std::fs::write(&path, trace).unwrap();
        node.run_ok(&["history", "import", path.to_str().unwrap()]);
    }
    node.node_args = flags.iter().map(|s| s.to_string()).collect();
    node
}

pub fn started(mut node: NodeFixture) -> NodeFixture {
    node.start();
    node
}

pub fn addr(node: &NodeFixture) -> String {
    node.ready_value("listening")
        .expect("the node prints its address")
}

pub fn peer(node: &NodeFixture) -> String {
    node.ready_value("peer id")
        .expect("the node prints its peer id")
}

/// Three hosts with history and a consumer-only node, all bootstrapped from
/// the first host; returns once the consumer sees every host with a TR.
pub fn pool() -> (Vec<NodeFixture>, NodeFixture) {
    pool_of(3)
}

/// `n` hosts (at least one) and a consumer-only node, as [`pool`].
pub fn pool_of(n: usize) -> (Vec<NodeFixture>, NodeFixture) {
    let first = started(pool_node(Some(&history(0)), &[]));
    let boot = addr(&first);
    let mut hosts = vec![first];
    for _ in 1..n.max(1) {
        hosts.push(started(pool_node(
            Some(&history(0)),
            &["--bootstrap", &boot],
        )));
    }
    let consumer = started(pool_node(None, &["--bootstrap", &boot, "--no-guest"]));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let report: Value =
            serde_json::from_str(&consumer.run_ok(&["hosts", "--json", "--window", "1h"])).unwrap();
        let with_tr = report["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["tr"].is_number())
            .count();
        if with_tr == hosts.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer never saw {} hosts: {report:#}",
            hosts.len()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    (hosts, consumer)
}

pub fn batch_status(node: &NodeFixture, id: &str) -> Value {
    serde_json::from_str(&node.run_ok(&["batch", "status", id, "--json"])).unwrap()
}

/// Polls the batch until `ok` holds (panics after `limit`).
pub fn batch_until(
    node: &NodeFixture,
    id: &str,
    limit: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let s = batch_status(node, id);
        if ok(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "batch never got there: {s:#}\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
