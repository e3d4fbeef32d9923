//! `[guest] cpu_limit_percent = 30` on a real node (in-process, real time)
//! with a CPU-bound guest that spins for 20 s of wall time and then prints
//! the CPU time it used (its own `times`, user + system): the job's cgroup
//! quota and the SIGSTOP/SIGCONT duty cycle (forced with `[guest]
//! job_cgroups = false`) must each hold it to at most 35 % of one core.
//! `status` names the mode in force.

use gleaner::clock::SystemClock;
use gleaner::guest::{GuestEventKind, ThrottleMode};
use gleaner::node::config::Config;
use gleaner::node::host_loop::{GuestJob, GuestOrigin, GuestStart};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::in_process;
use in_process::NodeSetup;

/// Spins 20 s of wall time, then prints its CPU seconds.
const SPIN: &str = "use Time::HiRes qw(time); my $t = time; my $n = 0; \
                    while (time - $t < 20) { $n++ } my @c = times; \
                    printf(\"%.3f\\n\", $c[0] + $c[1]);";
const WALL_SECS: f64 = 20.0;

/// The CPU quota the kernel holds for `pid`'s cgroup: v1's
/// `cpu.cfs_quota_us` and `cpu.cfs_period_us`, or v2's `cpu.max`.
fn cgroup_quota(pid: i32) -> Option<String> {
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "cpu") {
            let dir = Path::new("/sys/fs/cgroup/cpu").join(path.trim_start_matches('/'));
            let quota = std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).ok()?;
            let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).ok()?;
            return Some(format!("{} {}", quota.trim(), period.trim()));
        }
    }
    let v2 = groups.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = Path::new("/sys/fs/cgroup").join(v2.trim_start_matches('/'));
    std::fs::read_to_string(dir.join("cpu.max"))
        .ok()
        .map(|t| t.trim().to_string())
}

/// Runs the spinner under `cpu_limit_percent = 30`; returns the mode
/// `status` reported while it ran, the quota its cgroup held (if any) and
/// the share of one core it used.
async fn spin_under_limit(job_cgroups: bool) -> (ThrottleMode, Option<String>, f64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = format!(
        "[net]\nenabled = false\n\n[monitor]\nmin_period_secs = 1\nmax_period_secs = 1\n\
         extra_sample_chance = 0.0\n\n[history]\ntz = \"UTC\"\nhost = \"test\"\n\n\
         [guest]\ncpu_limit_percent = 30\njob_cgroups = {job_cgroups}\n"
    );
    let config = Config::parse(&text, Path::new("test.toml")).expect("config");
    // The default light owner: the guest runs at full priority, only the
    // limit holds it.
    let node = NodeSetup::new(dir.path(), config, Arc::new(SystemClock))
        .start()
        .await;
    let host = node.host.clone();
    let mut events = host.subscribe_events();
    let handle = host
        .start_guest(GuestStart {
            origin: GuestOrigin::Local,
            job_id: None,
            job: GuestJob {
                argv: vec!["perl".into(), "-e".into(), SPIN.into()],
                env: Vec::new(),
                mem_mib: 64,
                runtime_secs: Some(120),
                inputs: Vec::new(),
                checkpoint: None,
                image: None,
            },
        })
        .await
        .expect("guest starts");
    let mode = host.status().await.expect("status").throttle;
    let quota = cgroup_quota(handle.pid);
    let ended = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            match events.recv().await {
                Ok(e) if e.job_id == handle.job_id.as_str() => {
                    if let GuestEventKind::Exited { exit, cause } = e.kind {
                        return (exit, cause);
                    }
                }
                Ok(_) => {}
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await
    .expect("the spinner ended within 90 s");
    assert_eq!(ended.1, None, "the spinner was killed: {ended:?}");
    node.stop().await;
    let out = std::fs::read_to_string(handle.dir.join("stdout")).expect("stdout");
    let cpu: f64 = out.trim().parse().expect("CPU seconds");
    (mode, quota, cpu / WALL_SECS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_duty_cycle_holds_a_cpu_bound_guest_to_its_limit() {
    let (mode, _, share) = spin_under_limit(false).await;
    println!(
        "duty cycle: the guest used {:.1} % of a core over 20 s",
        share * 100.0
    );
    assert_eq!(mode, ThrottleMode::DutyCycle(30));
    assert!(share <= 0.35, "{:.1} % of a core", share * 100.0);
    assert!(share > 0.0, "the guest got no CPU at all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cgroup_quota_holds_a_cpu_bound_guest_to_its_limit() {
    // The cpu controller: v1's `cpu` hierarchy, or v2's when delegated. Job
    // cgroups need a root node (or a delegated subtree).
    let v1 = Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists();
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu"));
    let root = nix::unistd::geteuid().is_root();
    if !(root && (v1 || v2)) {
        println!("skipped: no cpu cgroup controller for job groups here (root {root}, v1 cpu {v1}, v2 cpu {v2})");
        return;
    }
    let (mode, quota, share) = spin_under_limit(true).await;
    println!(
        "cgroup quota {quota:?}: the guest used {:.1} % of a core over 20 s",
        share * 100.0
    );
    assert_eq!(mode, ThrottleMode::Cgroup(30));
    // The job group holds the quota itself (the guest's share alone cannot
    // show it on a busy machine, where its idle-class group may get less).
    assert_eq!(
        quota.as_deref(),
        Some("30000 100000"),
        "the job cgroup's quota"
    );
    assert!(share <= 0.35, "{:.1} % of a core", share * 100.0);
    assert!(share > 0.0, "the guest got no CPU at all");
}
