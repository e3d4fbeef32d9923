//! The five-state policy through the real node: a scripted host load (the
//! `--owner-load` option) or a real CPU hog drives the node, whose
//! guest is a real busy loop started with `gleaner run-local`.

use crate::node_support;

use node_support::*;
use std::time::{Duration, Instant};

const BUSY: &[&str] = &["--", "sh", "-c", "while :; do :; done"];

fn guest_pid(started: &serde_json::Value) -> i32 {
    started["pid"].as_i64().unwrap() as i32
}

#[test]
fn a_burst_shorter_than_sustain_stops_the_guest_then_lets_it_run_again() {
    // Light load, a 2 s burst above Th2 from 6 s (sustain is 3 s), light again.
    let script = "0 5 8000\n6 95 8000\n8 5 8000\n";
    let mut node = NodeFixture::new(&test_config(3, ""), Some(script));
    node.start();
    let mut job = node.run_local(
        &["--runtime", "60s"]
            .iter()
            .chain(BUSY)
            .copied()
            .collect::<Vec<_>>(),
    );
    let pid = guest_pid(&job.wait_for("started", Duration::from_secs(10)));

    let mut states = Vec::new();
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(12) {
        states.push(proc_state(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    let first_t = states.iter().position(|s| *s == Some('T'));
    assert!(
        first_t.is_some(),
        "guest was never stopped: {states:?}\n{}",
        node.log()
    );
    let after: Vec<_> = states[first_t.unwrap()..].iter().collect();
    assert!(
        after.iter().any(|s| matches!(s, Some('R') | Some('S'))),
        "guest stayed stopped: {states:?}"
    );
    assert!(
        proc_state(pid).is_some_and(|s| s != 'T' && s != 'Z'),
        "guest alive and running at the end"
    );
    let status = node.status();
    assert_eq!(status["guest"]["kill_cause"], serde_json::Value::Null);
    assert_eq!(status["guest"]["phase"], "running");
}

#[test]
fn a_burst_longer_than_sustain_kills_the_guest_with_s3() {
    let script = "0 5 8000\n5 95 8000\n";
    let mut node = NodeFixture::new(&test_config(3, ""), Some(script));
    node.start();
    let mut job = node.run_local(
        &["--runtime", "60s"]
            .iter()
            .chain(BUSY)
            .copied()
            .collect::<Vec<_>>(),
    );
    job.wait_for("started", Duration::from_secs(10));
    let exit = job.wait_for("exit", Duration::from_secs(20));
    assert_eq!(exit["cause"], "CpuContention", "{exit}");
    let (code, lines) = job.finish(Duration::from_secs(5));
    assert_eq!(code, 128 + 9, "run-local exits with the job's status");
    // The guest was suspended during the excursion before it was killed.
    let kinds: Vec<String> = lines
        .iter()
        .filter(|l| l["type"] == "event")
        .map(|l| {
            let k = &l["event"]["kind"];
            k.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| k.as_object().unwrap().keys().next().unwrap().clone())
        })
        .collect();
    let suspended = kinds.iter().position(|k| k == "Suspended");
    let killed = kinds.iter().position(|k| k == "KillSent");
    assert!(suspended.is_some() && suspended < killed, "{kinds:?}");
}

#[test]
fn free_memory_below_the_declared_working_set_kills_the_guest_with_s4() {
    let script = "0 5 8000\n4 5 300\n";
    let mut node = NodeFixture::new(&test_config(3, ""), Some(script));
    node.start();
    let mut job = node.run_local(
        &["--mem", "500", "--runtime", "60s"]
            .iter()
            .chain(BUSY)
            .copied()
            .collect::<Vec<_>>(),
    );
    job.wait_for("started", Duration::from_secs(10));
    let exit = job.wait_for("exit", Duration::from_secs(20));
    assert_eq!(exit["cause"], "MemoryShortage", "{exit}");
    let status = node.status();
    assert_eq!(status["guest"]["kill_cause"], "MemoryShortage");
    assert_eq!(status["guest"]["phase"], "exited");
}

#[test]
fn a_nice_0_hog_on_the_guests_cpu_makes_s2_and_starves_the_guest() {
    // Real load this time: the node (and so its guest) and a hog share CPU 0.
    // Th2 at 100 % keeps other load on this machine from suspending the guest.
    let config = "[policy]\nth1 = 20.0\nth2 = 100.0\n\n[monitor]\nmin_period_secs = 1\nmax_period_secs = 1\nextra_sample_chance = 0.0\n";
    let mut node = NodeFixture::new(config, None);
    node.cpus = Some(vec![0]);
    node.start();
    let mut hog = std::process::Command::new("sh");
    hog.args(["-c", "while :; do :; done"]);
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut hog, || pin_self(&[0]));
    }
    let hog = HogGuard(hog.spawn().unwrap());
    let mut job = node.run_local(
        &["--runtime", "60s"]
            .iter()
            .chain(BUSY)
            .copied()
            .collect::<Vec<_>>(),
    );
    // The node shares its one CPU with a nice-0 hog, so it gets half of it at
    // best, less on a busy machine: these are waits for progress, not timings.
    let pid = guest_pid(&job.wait_for("started", Duration::from_secs(30)));

    node.wait_status(
        Duration::from_secs(30),
        "S2 with the guest at nice 19",
        |s| s["state"] == "S2" && s["guest"]["nice"] == 19,
    );
    let t0 = cpu_ticks(pid).unwrap();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let used = (cpu_ticks(pid).unwrap() - t0) as f64 / ticks_per_sec() as f64;
    let share = used / start.elapsed().as_secs_f64();
    let status = node.status();
    assert_eq!(status["state"], "S2", "{status}");
    assert!(
        share < 0.10,
        "guest got {:.1} % of the shared core",
        share * 100.0
    );
    drop(hog);
}

struct HogGuard(std::process::Child);

impl Drop for HogGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_guest_without_network_cannot_reach_a_local_listener() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut node = NodeFixture::new(&test_config(3, ""), Some("0 5 8000\n"));
    node.start();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let mut job = node.run_local(&["--runtime", "30s", "--", "bash", "-c", &connect]);
    let started = job.wait_for("started", Duration::from_secs(10));
    if started["sandbox"]["network_blocked"] != true {
        eprintln!("SKIP network isolation: {}", started["sandbox"]);
        return;
    }
    let (code, lines) = job.finish(Duration::from_secs(20));
    assert_ne!(code, 0, "isolated guest connected: {lines:?}");
    assert!(listener.accept().is_err(), "the listener saw a connection");
}

#[test]
fn sigkill_of_the_node_leaves_no_guest_behind() {
    let mut node = NodeFixture::new(&test_config(3, ""), Some("0 5 8000\n"));
    node.start();
    let mut job = node.run_local(
        &["--runtime", "60s"]
            .iter()
            .chain(BUSY)
            .copied()
            .collect::<Vec<_>>(),
    );
    let pid = guest_pid(&job.wait_for("started", Duration::from_secs(10)));
    assert!(proc_state(pid).is_some());
    node.kill9();
    // Within a second the kill is under way: the guest is gone, or it or a
    // process above it (the keeper, the job's init: each dies by its death
    // signal when the one above it goes) holds a pending SIGKILL. Then the
    // guest must die, untimed: on a loaded machine (the whole suite on 2
    // cores) each process in the chain can wait seconds to run its exit,
    // the guest longest in its idle-class cgroup (measured idle: SIGKILL
    // reached the guest 0.5-2.0 s after the node died, gone 0.2-0.8 s later).
    let under_way = wait_until(Duration::from_secs(1), || {
        matches!(proc_state(pid), None | Some('Z'))
            || chain_above(pid).into_iter().any(sigkill_pending)
    });
    assert!(
        under_way,
        "guest {pid} still {:?} and no SIGKILL pending in {:?} 1 s after the node died",
        proc_state(pid),
        chain_above(pid)
    );
    let gone = wait_until(Duration::from_secs(60), || {
        matches!(proc_state(pid), None | Some('Z'))
    });
    assert!(
        gone,
        "guest {pid} still {:?} after its kill",
        proc_state(pid)
    );
}

/// Whether SIGKILL is pending for `pid` (`SigPnd` or `ShdPnd` in its
/// status): sent, and fatal the next time the process runs.
fn sigkill_pending(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SigPnd:")
                .or_else(|| l.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
}

/// `pid` and the processes above it, as seen from here, up to this test's
/// own process (at most five).
fn chain_above(pid: i32) -> Vec<i32> {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let mut chain = vec![pid];
    while let Some(up) = chain.last().and_then(|&p| parent_pid(p)) {
        if up <= 1 || up == me || chain.len() == 5 {
            break;
        }
        chain.push(up);
    }
    chain
}
