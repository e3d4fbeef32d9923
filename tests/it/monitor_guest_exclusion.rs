//! The real `/proc` load source against real processes: a busy-loop child
//! counts as host load unless its pid is passed as the guest, and the process
//! tree walk finds a shell's children.

use gleaner::monitor::{process_tree, LoadSource, ProcLoadSource};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Kills and reaps the child even when an assertion fails (unless a test
/// took it to reap it itself).
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn logical_cpus() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

#[test]
fn a_guest_hog_is_excluded_from_host_load() {
    // Two sources over the same interval: one told about the guest, one not.
    let mut excluding = ProcLoadSource::new().unwrap();
    let mut including = ProcLoadSource::new().unwrap();
    let started = Instant::now();
    let mut hog = Reaped(Some(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    ));
    let pid = hog.0.as_ref().unwrap().id() as i32;
    std::thread::sleep(Duration::from_secs(2));
    let with_guest = excluding.sample(&[pid]).unwrap();
    let without_guest = including.sample(&[]).unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let mut hog = hog.0.take().unwrap();
    hog.kill().unwrap();
    let hog_cpu = crate::reap_with_usage(hog, Duration::from_secs(10))
        .expect("the killed hog is reaped")
        .cpu_secs;

    // The hog's share of the whole machine, measured independently by the kernel's rusage.
    let hog_share = hog_cpu / (elapsed * logical_cpus()) * 100.0;
    let dropped = without_guest.cpu - with_guest.cpu;
    eprintln!(
        "L_H with guest excluded {:.1} %, included {:.1} %, drop {:.1} points; \
         hog share by rusage {:.1} % ({:.2} CPU s over {:.2} s on {} CPUs)",
        with_guest.cpu,
        without_guest.cpu,
        dropped,
        hog_share,
        hog_cpu,
        elapsed,
        logical_cpus()
    );
    // The hog really ran (on an idle 2-core machine it gets one core: ~50 %).
    assert!(
        hog_share > 100.0 / logical_cpus() * 0.3,
        "hog share {hog_share}"
    );
    // Excluding it lowers L_H by its share; the tolerance covers the few
    // milliseconds between the two reads and the kill.
    assert!(
        (dropped - hog_share).abs() < 5.0,
        "drop {dropped} vs share {hog_share}"
    );
}

#[test]
fn process_tree_finds_a_shells_children() {
    let shell = Reaped(Some(
        Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap(),
    ));
    let pid = shell.0.as_ref().unwrap().id() as i32;
    // Give the shell time to fork.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut tree = process_tree(&[pid]);
    while tree.len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        tree = process_tree(&[pid]);
    }
    assert_eq!(tree[0], pid);
    assert_eq!(tree.len(), 3, "tree {tree:?}");
    let me = std::process::id() as i32;
    assert!(!tree.contains(&me));
    // The sleeps are orphaned when the shell is killed; kill them by pid too.
    for &child in &tree[1..] {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
}
