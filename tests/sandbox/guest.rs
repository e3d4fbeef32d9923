//! Integration tests of the guest supervisor with real child processes.
//!
//! Linux only. Some tests re-run this test binary in a helper role (a node
//! that gets SIGKILLed, a node that dropped root): the role is an
//! `#[ignore]`d test of that name, told its directory by an environment variable.
//! Tests that need a kernel feature (namespaces, Landlock, autogroups) print
//! why they skip when it is missing.

use gleaner::guest::procfs::{self, read_stat};
use gleaner::guest::{
    Clock, ExitInfo, GuestAction, GuestConfig, GuestEvent, GuestEventKind, GuestPhase,
    GuestRunState, GuestSpec, KillCause, Priority, StartError, Stream, Supervisor, SystemClock,
};
use gleaner::model::ids::JobId;
use jiff::Timestamp;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A clock the test moves by hand.
struct ManualClock(Mutex<Timestamp>);

impl ManualClock {
    fn advance(&self, by: Duration) {
        let mut t = self.0.lock().unwrap();
        *t = t.checked_add(by).unwrap();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap()
    }
}

/// A supervisor in a temp dir that collects its events.
struct Fixture {
    dir: tempfile::TempDir,
    events: Arc<Mutex<Vec<GuestEvent>>>,
    sup: Supervisor,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_clock(Arc::new(SystemClock))
    }

    fn with_clock(clock: Arc<dyn Clock>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let (sup, events) = supervisor_in(dir.path(), clock);
        Fixture { dir, events, sup }
    }

    fn events(&self) -> Vec<GuestEventKind> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.kind.clone())
            .collect()
    }
}

fn supervisor_in(
    data_dir: &Path,
    clock: Arc<dyn Clock>,
) -> (Supervisor, Arc<Mutex<Vec<GuestEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let sup = Supervisor::new(
        GuestConfig::new(data_dir),
        clock,
        Arc::new(move |e: GuestEvent| sink.lock().unwrap().push(e)),
    )
    .unwrap();
    (sup, events)
}

fn spec(argv: &[&str]) -> GuestSpec {
    GuestSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        mem_mib: 100,
        cpu_time_limit: Duration::from_secs(120),
        wall_limit: Duration::from_secs(600),
        max_output_bytes: 1 << 20,
        allow_network: false,
        user: None,
        inputs: Vec::new(),
        checkpoint: None,
        image: None,
    }
}

fn sh(script: &str) -> GuestSpec {
    spec(&["sh", "-c", script])
}

const BUSY: &str = "while :; do :; done";

fn alive(pid: i32) -> bool {
    read_stat(pid).is_some_and(|s| s.is_alive())
}

/// Polls `check` every 10 ms until it holds or `timeout` passes.
fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn cpu_ticks(pid: i32) -> u64 {
    read_stat(pid).map_or(0, |s| s.utime + s.stime)
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Argv that re-runs this test binary as the `#[ignore]`d test `role`.
fn self_as(role: &str) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    vec![
        exe.to_string_lossy().into_owned(),
        "--exact".into(),
        crate::test_name(module_path!(), role),
        "--ignored".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

#[test]
fn guest_runs_in_its_own_session_and_group_with_a_cleared_environment() {
    let mut fx = Fixture::new();
    let mut s = spec(&["sleep", "30"]);
    s.env.push(("EXTRA".into(), "1".into()));
    let handle = fx.sup.start(&JobId::new("job-1").unwrap(), s).unwrap();
    let stat = read_stat(handle.pid).unwrap();
    assert_eq!(stat.pgrp, handle.pid, "own process group");
    assert_eq!(stat.session, handle.pid, "own session");
    assert_ne!(
        stat.session,
        read_stat(std::process::id() as i32).unwrap().session
    );
    assert_eq!(stat.nice, 19, "starts in the background");

    let environ = std::fs::read(format!("/proc/{}/environ", handle.pid)).unwrap();
    let mut names: Vec<String> = environ
        .split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| {
            String::from_utf8_lossy(v)
                .split('=')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["EXTRA", "GLEANER_JOB_ID", "HOME", "LANG", "PATH", "TMPDIR"]
    );

    if is_root() {
        let status = std::fs::read_to_string(format!("/proc/{}/status", handle.pid)).unwrap();
        let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            uid_line.split_whitespace().skip(1).all(|u| u == "65534"),
            "root node runs the guest as nobody: {uid_line}"
        );
        assert_eq!(handle.sandbox.uid, 65534);
    }
    // The job is the guest and, in a PID namespace, the two processes that
    // hold the namespace (its keeper and init), which are its ancestors.
    let tree = fx.sup.process_tree();
    assert!(tree.contains(&handle.pid), "{tree:?}");
    let mut ancestors = Vec::new();
    let mut p = handle.pid;
    while let Some(parent) = read_stat(p).map(|s| s.ppid).filter(|&pp| pp > 1) {
        ancestors.push(parent);
        p = parent;
    }
    for member in tree.iter().filter(|&&m| m != handle.pid) {
        assert!(
            ancestors.contains(member),
            "{member} is not the guest's: {tree:?}"
        );
    }
    assert_eq!(tree.len(), if handle.sandbox.pid_namespace { 3 } else { 1 });
    assert!(matches!(fx.events()[0], GuestEventKind::Started { .. }));
}

#[test]
fn a_guest_is_never_root_and_a_second_start_is_refused() {
    let mut fx = Fixture::new();
    if is_root() {
        let mut as_root = spec(&["true"]);
        as_root.user = Some("root".into());
        assert!(matches!(
            fx.sup.start(&JobId::new("root-job").unwrap(), as_root),
            Err(StartError::RootGuest(_))
        ));
    }
    let first = fx
        .sup
        .start(&JobId::new("first").unwrap(), spec(&["sleep", "30"]))
        .unwrap();
    let err = fx
        .sup
        .start(&JobId::new("second").unwrap(), spec(&["sleep", "30"]))
        .unwrap_err();
    assert!(matches!(err, StartError::Busy { ref job_id } if job_id.as_str() == "first"));
    assert!(err.to_string().contains("at most one"), "{err}");
    assert!(alive(first.pid));

    fx.sup
        .apply(GuestAction::Kill(KillCause::Cancelled))
        .unwrap();
    fx.sup.wait_exit(Duration::from_secs(5)).unwrap();
    // The directory of a finished job is not reused.
    assert!(matches!(
        fx.sup.start(&JobId::new("first").unwrap(), spec(&["true"])),
        Err(StartError::JobDir { .. })
    ));
    assert!(fx
        .sup
        .start(&JobId::new("third").unwrap(), spec(&["true"]))
        .is_ok());
}

#[test]
fn rlimits_are_visible_in_proc_limits() {
    let mut fx = Fixture::new();
    let mut s = spec(&["sleep", "30"]);
    s.mem_mib = 100;
    s.cpu_time_limit = Duration::from_secs(7);
    let handle = fx.sup.start(&JobId::new("limits").unwrap(), s).unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", handle.pid)).unwrap();
    let row = |name: &str| -> Vec<String> {
        let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..]
            .split_whitespace()
            .take(2)
            .map(String::from)
            .collect()
    };
    let address_space = ((100 + 512) * 1024 * 1024u64).to_string();
    assert_eq!(
        row("Max address space"),
        [address_space.clone(), address_space]
    );
    assert_eq!(row("Max cpu time"), ["7", "9"]);
    assert_eq!(row("Max open files"), ["256", "256"]);
    let fsize = (1u64 << 30).to_string();
    assert_eq!(row("Max file size"), [fsize.clone(), fsize]);
    assert_eq!(row("Max core file size"), ["0", "0"]);
}

/// Issue 30, finding 6: a task once landed with an empty stdout where
/// "8\n" was expected. The end was reported when the job's last process was
/// gone, before the capture threads had written out what the pipes still
/// held, so a consumer that fetched at once got the file as it was then
/// (empty, with a hash that matched the empty file). The end must come with
/// the outputs whole: when the exit is reported, stdout and stderr are
/// captured and on disk. Tried several times, with an output bigger than a
/// pipe's buffer, since the old race was narrow.
#[test]
fn the_end_is_reported_only_once_the_output_is_written_out() {
    for round in 0..5 {
        let mut fx = Fixture::new();
        let mut s = sh("head -c 3000000 /dev/zero; echo 8; echo done >&2");
        s.max_output_bytes = 10_000_000;
        let id = JobId::new(format!("drain-{round}")).unwrap();
        let handle = fx.sup.start(&id, s).unwrap();
        // Polled without a pause, as a busy host loop would, so the end is
        // seen the moment it is reported.
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = fx.sup.poll_exit() {
                break status;
            }
            assert!(Instant::now() < deadline, "round {round}: no end");
            std::hint::spin_loop();
        };
        assert_eq!(status.exit, Some(ExitInfo::Code(0)), "round {round}");
        let (out, err) = status
            .stdout
            .zip(status.stderr)
            .unwrap_or_else(|| panic!("round {round}: the end came before the output: {status:?}"));
        assert_eq!(out.written, 3_000_002, "round {round}");
        assert_eq!(err.written, 5, "round {round}");
        let stdout = std::fs::read(handle.dir.join("stdout")).unwrap();
        assert_eq!(stdout.len(), 3_000_002, "round {round}");
        assert!(stdout.ends_with(b"8\n"), "round {round}");
    }
}

#[test]
fn output_is_captured_and_truncated_at_the_cap() {
    let mut fx = Fixture::new();
    let mut s = sh("echo hello >&2; head -c 100000 /dev/zero");
    s.max_output_bytes = 1000;
    let handle = fx.sup.start(&JobId::new("output").unwrap(), s).unwrap();
    let status = fx.sup.wait_exit(Duration::from_secs(10)).unwrap();
    assert_eq!(status.exit, Some(ExitInfo::Code(0)));
    let mut reports = None;
    assert!(eventually(Duration::from_secs(5), || {
        let st = fx.sup.status().unwrap();
        reports = st.stdout.zip(st.stderr);
        reports.is_some()
    }));
    let (out, err) = reports.unwrap();
    assert_eq!((out.written, out.dropped), (1000, 99_000));
    assert!(!err.truncated());
    assert_eq!(
        std::fs::metadata(handle.dir.join("stdout")).unwrap().len(),
        1000
    );
    assert_eq!(
        std::fs::read_to_string(handle.dir.join("stderr")).unwrap(),
        "hello\n"
    );
    let truncations: Vec<_> = fx
        .events()
        .into_iter()
        .filter(|e| matches!(e, GuestEventKind::OutputTruncated { .. }))
        .collect();
    assert_eq!(
        truncations,
        [GuestEventKind::OutputTruncated {
            stream: Stream::Stdout,
            cap_bytes: 1000
        }]
    );
}

#[test]
fn suspend_stops_the_group_and_resume_runs_it_again() {
    let mut fx = Fixture::new();
    let handle = fx
        .sup
        .start(&JobId::new("stop").unwrap(), sh(BUSY))
        .unwrap();
    let pid = handle.pid;
    fx.sup.apply(GuestAction::Suspend).unwrap();
    assert!(eventually(Duration::from_secs(2), || read_stat(pid)
        .is_some_and(|s| s.state == 'T')));
    assert_eq!(fx.sup.status().unwrap().phase, GuestPhase::Stopped);
    assert_eq!(
        fx.sup.run_state(),
        GuestRunState::Suspended(Priority::Background)
    );
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cpu_ticks(pid), before, "a stopped guest uses no CPU");

    fx.sup.apply(GuestAction::Resume).unwrap();
    assert!(eventually(Duration::from_secs(2), || read_stat(pid)
        .is_some_and(|s| s.state != 'T')));
    assert!(
        eventually(Duration::from_secs(3), || cpu_ticks(pid) > before),
        "the resumed guest runs again"
    );
    assert_eq!(fx.sup.status().unwrap().phase, GuestPhase::Running);
    let kinds = fx.events();
    assert!(kinds.contains(&GuestEventKind::Suspended));
    assert!(kinds.contains(&GuestEventKind::Resumed));
}

#[test]
fn kill_for_s3_kills_the_whole_group_and_records_the_cause() {
    let mut fx = Fixture::new();
    // sh -> sh -> sleep: the sleep is a grandchild of the guest.
    let handle = fx
        .sup
        .start(
            &JobId::new("kill").unwrap(),
            sh("sh -c 'sleep 60; true' & sleep 60; wait"),
        )
        .unwrap();
    let mut tree = Vec::new();
    assert!(
        eventually(Duration::from_secs(3), || {
            tree = fx.sup.process_tree();
            tree.len() >= 4
        }),
        "guest tree {tree:?}"
    );
    assert!(tree.contains(&handle.pid));
    fx.sup
        .apply(GuestAction::Kill(KillCause::CpuContention))
        .unwrap();
    assert_eq!(fx.sup.run_state(), GuestRunState::Idle);
    let status = fx.sup.wait_exit(Duration::from_secs(5)).unwrap();
    assert_eq!(status.exit, Some(ExitInfo::Signal(9)));
    assert_eq!(status.kill_cause, Some(KillCause::CpuContention));
    assert!(
        eventually(Duration::from_secs(1), || tree.iter().all(|&p| !alive(p))),
        "every process of the tree is gone"
    );
    assert!(fx.events().contains(&GuestEventKind::Exited {
        exit: ExitInfo::Signal(9),
        cause: Some(KillCause::CpuContention)
    }));
    assert!(!fx.dir.path().join("guest.pid").exists());
    assert!(matches!(
        fx.sup.apply(GuestAction::Suspend),
        Err(gleaner::guest::ApplyError::NoGuest)
    ));
}

#[test]
fn the_wall_limit_kills_the_guest() {
    let clock = Arc::new(ManualClock(Mutex::new(Timestamp::UNIX_EPOCH)));
    let mut fx = Fixture::with_clock(clock.clone());
    let mut s = spec(&["sleep", "60"]);
    s.wall_limit = Duration::from_secs(30);
    fx.sup.start(&JobId::new("wall").unwrap(), s).unwrap();
    clock.advance(Duration::from_secs(29));
    assert!(fx.sup.poll_exit().is_none());
    clock.advance(Duration::from_secs(1));
    let status = fx.sup.wait_exit(Duration::from_secs(5)).unwrap();
    assert_eq!(status.kill_cause, Some(KillCause::WallTimeLimit));
    let ev = fx.events.lock().unwrap().clone();
    let exited = ev
        .iter()
        .find(|e| matches!(e.kind, GuestEventKind::Exited { .. }))
        .unwrap();
    assert_eq!(exited.at, Timestamp::UNIX_EPOCH + Duration::from_secs(30));
}

#[test]
fn guest_without_network_cannot_connect_to_a_local_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
    let mut fx = Fixture::new();

    // Control: with network allowed the same command connects.
    let mut open = spec(&["bash", "-c", &connect]);
    open.allow_network = true;
    fx.sup
        .start(&JobId::new("net-open").unwrap(), open)
        .unwrap();
    let status = fx.sup.wait_exit(Duration::from_secs(10)).unwrap();
    assert_eq!(status.exit, Some(ExitInfo::Code(0)), "control connects");

    let handle = fx
        .sup
        .start(
            &JobId::new("net-closed").unwrap(),
            spec(&["bash", "-c", &connect]),
        )
        .unwrap();
    if !handle.sandbox.network_blocked {
        // Skip only where the kernel really refuses a user+net namespace to
        // the guest's user and Landlock cannot deny TCP either.
        let offered = Command::new("unshare")
            .args(["-U", "-n", "--map-user=65534", "true"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            !offered,
            "the kernel offers user and net namespaces but the guest's network is open: {:?}",
            handle.sandbox.warnings
        );
        eprintln!(
            "SKIP network isolation: unshare -U -n fails here and no Landlock TCP rules ({:?})",
            handle.sandbox.warnings
        );
        return;
    }
    let status = fx.sup.wait_exit(Duration::from_secs(10)).unwrap();
    assert_ne!(
        status.exit,
        Some(ExitInfo::Code(0)),
        "isolated guest connected"
    );
}

#[test]
fn landlock_confines_writes_to_the_work_dir() {
    let mut fx = Fixture::new();
    let outside = fx.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    // World-writable, so only Landlock can stop the guest writing here.
    std::fs::set_permissions(
        &outside,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    std::fs::set_permissions(
        fx.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let target = outside.join("escaped");
    let script = format!(
        "echo inside > inside.txt || exit 3; echo out > '{}' && exit 4; echo x > /dev/null || exit 5; exit 0",
        target.display()
    );
    let handle = fx
        .sup
        .start(&JobId::new("landlock").unwrap(), sh(&script))
        .unwrap();
    let status = fx.sup.wait_exit(Duration::from_secs(10)).unwrap();
    if !handle.sandbox.landlock {
        // landlock_create_ruleset(NULL, 0, VERSION) answers the ABI, or fails
        // when Landlock is not built in or not enabled.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        assert!(
            abi <= 0,
            "the kernel offers Landlock ABI {abi} but the guest was not confined: {:?}",
            handle.sandbox.warnings
        );
        eprintln!("SKIP landlock: the kernel has no Landlock (landlock_create_ruleset fails)");
        return;
    }
    assert_eq!(status.exit, Some(ExitInfo::Code(0)));
    assert!(handle.work_dir.join("inside.txt").exists());
    assert!(!target.exists());
}

#[test]
fn renice19_sets_every_thread_and_the_autogroup_and_runnormal_undoes_it() {
    let mut fx = Fixture::new();
    // Perl's threads, not this test binary: the narrow view shows the system
    // dirs and the work dir only.
    let s = spec(&[
        "perl",
        "-Mthreads",
        "-e",
        "my @t = map { threads->create(sub { sleep 60 }) } 1..3; $_->join for @t",
    ]);
    let handle = match fx.sup.start(&JobId::new("threads").unwrap(), s) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("SKIP renice of threads: cannot run the test binary as a guest: {e}");
            return;
        }
    };
    let pid = handle.pid;
    if !eventually(Duration::from_secs(5), || {
        procfs::thread_stats(pid).len() >= 4
    }) {
        let st = fx.sup.wait_exit(Duration::from_secs(1));
        eprintln!("SKIP renice of threads: the threaded guest did not come up ({st:?})");
        return;
    }
    let nices = || -> Vec<i32> { procfs::thread_stats(pid).iter().map(|t| t.nice).collect() };
    let autogroup = procfs::read_autogroup(pid);
    if autogroup.is_none() {
        eprintln!("note: no autogroups on this kernel; only thread nice is checked");
    }

    fx.sup.apply(GuestAction::RunNormal).unwrap();
    assert!(
        nices().iter().all(|&n| n == 0),
        "after RunNormal: {:?}",
        nices()
    );
    if autogroup.is_some() {
        assert_eq!(procfs::read_autogroup(pid).unwrap().nice, 0);
    }
    fx.sup.apply(GuestAction::Renice19).unwrap();
    assert!(nices().len() >= 4);
    assert!(
        nices().iter().all(|&n| n == 19),
        "after Renice19: {:?}",
        nices()
    );
    assert_eq!(read_stat(pid).unwrap().nice, 19);
    if let Some(before) = autogroup {
        let after = procfs::read_autogroup(pid).unwrap();
        assert_eq!(after.id, before.id);
        assert_eq!(after.nice, 19);
        // A process that never called setsid (e.g. a test run under a container's
        // init) sits in the root task group and its autogroup file is empty: that
        // is a different group from the guest's, which is all this checks.
        if let Some(ours) = procfs::read_autogroup(std::process::id() as i32) {
            assert_ne!(after.id, ours.id, "the guest has an autogroup of its own");
        }
    }
    assert_eq!(
        fx.sup.run_state(),
        GuestRunState::Running(Priority::Background)
    );
    assert!(fx.events().iter().any(|e| matches!(
        e,
        GuestEventKind::Reniced { nice: 19, threads, .. } if *threads >= 4
    )));
}

/// Node role: starts a guest, writes its pid to a file, then waits to be killed.
#[test]
#[ignore = "helper role, run by guest_dies_when_the_node_is_sigkilled"]
fn role_node() {
    let Ok(dir) = std::env::var("GLEANER_GUEST_NODE_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let (mut sup, _events) = supervisor_in(&dir, Arc::new(SystemClock));
    let handle = sup
        .start(&JobId::new("orphan").unwrap(), spec(&["sleep", "60"]))
        .unwrap();
    std::fs::write(dir.join("guest-pid.tmp"), handle.pid.to_string()).unwrap();
    std::fs::rename(dir.join("guest-pid.tmp"), dir.join("guest-pid")).unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn guest_dies_within_a_second_when_the_node_is_sigkilled() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Command::new(std::env::current_exe().unwrap())
        .args(&self_as("role_node")[1..])
        .env("GLEANER_GUEST_NODE_DIR", dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = dir.path().join("guest-pid");
    assert!(
        eventually(Duration::from_secs(10), || pid_file.exists()),
        "the helper node started a guest"
    );
    let guest: i32 = std::fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    assert!(alive(guest));
    node.kill().unwrap(); // SIGKILL: no destructor runs in the node.
    node.wait().unwrap();
    let killed_at = Instant::now();
    assert!(
        eventually(Duration::from_secs(1), || !alive(guest)),
        "the guest outlived its node"
    );
    eprintln!(
        "guest gone {:?} after the node's SIGKILL",
        killed_at.elapsed()
    );
    // A root node's work-dir tmpfs is off its mount table while the guest
    // runs in its own mount namespace, so a crash leaves no mount; where it
    // had to stay mounted, the next start on the same data dir unmounts it.
    let work = std::fs::canonicalize(dir.path().join("jobs/orphan/work")).unwrap();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&format!(" {} ", work.display()))
    };
    let was_mounted = mounted();
    drop(supervisor_in(dir.path(), Arc::new(SystemClock)));
    assert!(
        !mounted(),
        "the work dir of the killed node's job is still mounted"
    );
    eprintln!("work dir mounted after the kill: {was_mounted}; unmounted at restart");
}

#[test]
fn a_restarted_supervisor_kills_the_group_its_predecessor_left() {
    let dir = tempfile::tempdir().unwrap();
    let spawn_group = || {
        use std::os::unix::process::CommandExt;
        Command::new("sh")
            .args(["-c", "sleep 60 & sleep 60; wait"])
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let mut orphan = spawn_group();
    let mut stranger = spawn_group();
    let pgid = orphan.id() as i32;
    assert!(eventually(Duration::from_secs(3), || procfs::guest_tree(
        pgid, pgid
    )
    .len()
        >= 3));
    let members: Vec<i32> = procfs::guest_tree(pgid, pgid)
        .iter()
        .map(|p| p.pid)
        .collect();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let record = |pgid: i32, starttime: u64| {
        format!(
            r#"{{"job_id":"old","pgid":{pgid},"starttime":{starttime},"boot_id":"{}"}}"#,
            boot_id.trim()
        )
    };
    let pid_file = dir.path().join("guest.pid");

    // A record whose start time does not match (a reused pid) is left alone.
    let stranger_pid = stranger.id() as i32;
    std::fs::write(&pid_file, record(stranger_pid, 1)).unwrap();
    drop(supervisor_in(dir.path(), Arc::new(SystemClock)));
    assert!(alive(stranger_pid), "an unrelated group was killed");
    assert!(!pid_file.exists());

    let starttime = read_stat(pgid).unwrap().starttime;
    std::fs::write(&pid_file, record(pgid, starttime)).unwrap();
    let (_sup, events) = supervisor_in(dir.path(), Arc::new(SystemClock));
    assert_eq!(
        events.lock().unwrap()[0].kind,
        GuestEventKind::OrphanKilled { pgid }
    );
    orphan.wait().unwrap();
    assert!(eventually(Duration::from_secs(1), || members
        .iter()
        .all(|&p| !alive(p))));
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

fn pin_to_cpu0(pid: i32) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(0)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid), &set)
}

/// The guest's share of CPU 0 against a nice-0 hog over `span`.
fn guest_share(guest: i32, hog: i32, span: Duration) -> f64 {
    let (g0, h0) = (cpu_ticks(guest), cpu_ticks(hog));
    std::thread::sleep(span);
    let (g, h) = (cpu_ticks(guest) - g0, cpu_ticks(hog) - h0);
    g as f64 / (g + h).max(1) as f64
}

#[test]
fn renice19_drops_the_guest_below_a_tenth_of_a_shared_core() {
    let mut hog = Command::new("sh").args(["-c", BUSY]).spawn().unwrap();
    let hog_pid = hog.id() as i32;
    let mut fx = Fixture::new();
    let handle = fx
        .sup
        .start(&JobId::new("share").unwrap(), sh(BUSY))
        .unwrap();
    pin_to_cpu0(hog_pid).unwrap();
    pin_to_cpu0(handle.pid).unwrap();
    fx.sup.apply(GuestAction::RunNormal).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let normal = guest_share(handle.pid, hog_pid, Duration::from_secs(2));

    fx.sup.apply(GuestAction::Renice19).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let reniced = guest_share(handle.pid, hog_pid, Duration::from_secs(2));

    // For the record: threads at 19 but the autogroup put back to 0.
    let group_only = if procfs::read_autogroup(handle.pid).is_some() {
        procfs::write_autogroup_nice(handle.pid, 0).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        Some(guest_share(handle.pid, hog_pid, Duration::from_secs(2)))
    } else {
        None
    };
    eprintln!(
        "guest share of cpu0: nice 0 {normal:.3}, Renice19 {reniced:.3}, \
         threads 19 with autogroup 0 {group_only:?}"
    );
    hog.kill().unwrap();
    hog.wait().unwrap();
    // A job group with cpu.idle (cgroup containment) yields to the owner
    // even at nice 0, as the five-state policy wants; without it nice 0 is a
    // fair share.
    let idle_group = fx
        .sup
        .containment()
        .group_controls
        .iter()
        .any(|c| c.starts_with("cpu.idle"));
    if idle_group {
        assert!(normal < 0.10, "an idle job group took {normal} at nice 0");
    } else {
        assert!(
            normal > 0.25,
            "at nice 0 the guest gets a fair share: {normal}"
        );
    }
    assert!(
        reniced < 0.10,
        "after Renice19 the guest share is {reniced}"
    );
}

/// Node role: a node that is not root (it drops to nobody first) asks for nice 0.
#[test]
#[ignore = "helper role, run by an_unprivileged_node_cannot_lower_nice..."]
fn role_unprivileged_node() {
    let Ok(dir) = std::env::var("GLEANER_GUEST_NODE_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    nix::unistd::setgroups(&[]).unwrap();
    nix::unistd::setgid(nix::unistd::Gid::from_raw(65534)).unwrap();
    nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).unwrap();
    let (mut sup, events) = supervisor_in(&dir.join("data"), Arc::new(SystemClock));
    let handle = sup
        .start(&JobId::new("unprivileged").unwrap(), spec(&["sleep", "30"]))
        .unwrap();
    sup.apply(GuestAction::RunNormal).unwrap();
    let status = sup.status().unwrap();
    let report = serde_json::json!({
        "nice": status.nice,
        "nice_not_lowered": status.nice_not_lowered,
        "run_state": status.run_state,
        "namespaces": handle.sandbox.namespaces,
        "uid": handle.sandbox.uid,
        "events": events.lock().unwrap().iter().map(|e| format!("{:?}", e.kind)).collect::<Vec<_>>(),
    });
    std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
}

#[test]
fn an_unprivileged_node_cannot_lower_nice_and_records_that() {
    if !is_root() {
        eprintln!("SKIP: needs root to play an unprivileged node by dropping to nobody");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(&self_as("role_unprivileged_node")[1..])
        .env("GLEANER_GUEST_NODE_DIR", dir.path())
        .output()
        .unwrap();
    let report_path = dir.path().join("report.json");
    if !report_path.exists() {
        eprintln!(
            "SKIP: the test binary could not run as nobody: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        return;
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report_path).unwrap()).unwrap();
    eprintln!("unprivileged node: {report}");
    assert_eq!(report["uid"], 65534);
    assert_eq!(report["nice"], 19, "the guest stays at 19");
    assert_eq!(report["nice_not_lowered"], true);
    assert_eq!(
        report["run_state"],
        serde_json::json!({"Running": "Normal"})
    );
    let events = report["events"].as_array().unwrap();
    assert!(events
        .iter()
        .any(|e| e.as_str().unwrap().starts_with("NiceNotLowered")));
}
