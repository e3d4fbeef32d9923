//! The integration tests, one test binary: each module was a test crate of
//! its own, and every one linked the whole library and its dependencies
//! (libp2p, axum, sled), so a change to the library cost 27 links of the same
//! code. One crate links it once (issue 26). A test is named by its module:
//! `cargo test --test it batch_pool::` runs what `--test batch_pool` did.
//!
//! The modules share one process now, where each had its own before; what
//! that changes, and how each case keeps its tests independent:
//! - libtest runs one test a core at a time, as it did within each old
//!   binary (binaries ran one after another): as many tests run at once as
//!   before, but a test may now run beside one from another module. In the
//!   first full run here (2 cores, load 10 from other builds) no failure came
//!   from that pairing: each also failed in the old per-file binaries or
//!   passed when re-run beside the same neighbours.
//! - `getrusage(RUSAGE_CHILDREN)` sums every child any test has reaped, so a
//!   test that measures its own child's CPU or memory reaps that child with
//!   `wait4` and reads the child's own usage ([`reap_with_usage`]).
//! - Tests that re-run this binary in a helper role name the role by its full
//!   test name ([`test_name`]); `--exact` with a bare function name would
//!   match nothing now and the helper would silently do nothing.
//! - No test sets environment variables or the working directory of this
//!   process, installs a global tracing subscriber or signal handler; the
//!   in-process nodes are built from injected resources (`in_process`).
//!   Statics are per module (`control_fuzz`'s one node for all its cases).
//!
//! Nothing here is a test of its own; the shared fixtures are `node_support`
//! (the built binary as a node), `in_process` (`node::run` in the test's
//! runtime), `net_support` (a hostile libp2p client) and `nat_support`
//! (network namespaces behind NAT routers).

mod in_process;
mod nat_support;
mod net_support;
mod node_support;

mod architecture;
mod baselines_no_peeking;
mod batch_pool;
mod bounded_import;
mod checkpoint_pool;
mod cli_edges;
mod cli_eval;
mod cli_predict;
mod cli_simulate;
mod control_fuzz;
mod cpu_account;
mod dashboard_browser;
mod data_transfer;
mod hold_pool;
mod image_pool;
mod leaf_pool;
mod model_properties;
mod monitor_guest_exclusion;
mod nat_topology;
mod net_pool;
mod node_control;
mod node_in_process;
mod node_policy;
mod owner_rules;
mod package;
mod peer_book;
mod pool_nodes;
mod prior_pool;
mod rogue_pool;
mod store;
mod store_days;
mod summary_pool;
mod tail_pool;
mod throttle;
mod trust_pool;

// The probe image the sandbox tests build too; not every builder is used
// by both binaries.
#[allow(dead_code)]
#[path = "../shared/guest_image.rs"]
mod guest_image;
#[path = "../shared/test_name.rs"]
mod shared_test_name;
pub use shared_test_name::test_name;

/// What [`reap_with_usage`] learnt of a child that ended.
pub struct ChildUsage {
    pub status: std::process::ExitStatus,
    /// User + system CPU seconds of the child and of the children it waited for.
    pub cpu_secs: f64,
    /// Peak resident set of the child, or of the largest child it waited for.
    pub max_rss_kib: i64,
}

/// Waits up to `within` for `child` to end and returns what it used, counted
/// by `wait4` on its pid, which covers that child alone; `getrusage
/// (RUSAGE_CHILDREN)` would also count every child that the other tests in
/// this shared process reaped meanwhile. A child still running after `within`
/// is killed (SIGKILL) and reaped, and the answer is `None`.
pub fn reap_with_usage(
    child: std::process::Child,
    within: std::time::Duration,
) -> Option<ChildUsage> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as libc::pid_t;
    // Dropping a `Child` only closes its pipes: it neither kills nor waits.
    drop(child);
    let deadline = std::time::Instant::now() + within;
    let mut killed = false;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: wait4 writes into the zeroed struct and the int we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if killed { 0 } else { libc::WNOHANG };
        let rc = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if rc == pid {
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return (!killed).then(|| ChildUsage {
                status: std::process::ExitStatus::from_raw(status),
                cpu_secs: secs(usage.ru_utime) + secs(usage.ru_stime),
                max_rss_kib: usage.ru_maxrss,
            });
        }
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::Interrupted,
                "wait4({pid}): {err}"
            );
        } else if std::time::Instant::now() >= deadline {
            // Not reaped yet, so the pid is still this child's.
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[test]
fn test_name_drops_the_crate_and_keeps_the_module() {
    assert_eq!(test_name("it::guest", "role_node"), "guest::role_node");
    assert_eq!(test_name("it::a::b", "f"), "a::b::f");
    assert_eq!(test_name("it", "f"), "f");
    assert_eq!(test_name(module_path!(), "f"), "f", "main.rs is the root");
}
