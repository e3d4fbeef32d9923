//! Issue 30: a host whose node is killed and restarted mid-job has lost the
//! job, not forgotten it. The consumer held no connection to it across the
//! restart, so its `NotFound` counts as a failure (no retry spent), and its
//! record stays clean in `gleaner hosts --json`; the rogue, which says
//! `NotFound` for a job it accepted while its connection stays up, is still
//! counted as forgetting. The consumer is frozen (SIGSTOP) while the host
//! restarts on its old port, so that its first look at the host after the
//! restart is a query the new node answers, not a dial that fails.

use super::{entry, hosts_report, start_rogue, Lie};
use crate::node_support::{addr, batch_status, batch_until, peer, pool_of, wait_until};

use std::time::{Duration, Instant};

use libp2p::Multiaddr;

/// Sends `signal` to `pid`.
fn signal(pid: i32, signal: i32) {
    // SAFETY: kill(2) on a child of this test.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill({pid}, {signal})");
}

/// True when nobody holds `lock` (an exclusive `flock` is free).
fn lock_free(lock: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::File::open(lock) else {
        return true;
    };
    // SAFETY: flock(2) on a descriptor this function owns; closing the
    // file releases it.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_mid_job_lost_it_and_a_rogue_that_kept_running_forgot_it() {
    let (mut hosts, consumer) = tokio::task::block_in_place(|| pool_of(1));
    let honest = peer(&hosts[0]);
    let listening = addr(&hosts[0]);
    let boot: Multiaddr = listening.parse().unwrap();
    let rogue = start_rogue(boot, Lie::Forget).await;
    let rogue_id = rogue.handle.peer_id().to_base58();
    tokio::task::block_in_place(|| {
        let seen = wait_until(Duration::from_secs(60), || {
            entry(&hosts_report(&consumer), &rogue_id).is_some()
        });
        assert!(seen, "the consumer never saw the rogue");
    });

    let out = consumer.dir.join("restart-out");
    let id = super::submit_batch(&consumer, &["--runtime", "2m"], &out, "sleep 60; echo done");
    // The task runs on the honest host (the rogue, if tried first, forgot it).
    tokio::task::block_in_place(|| {
        batch_until(&consumer, &id, Duration::from_secs(120), |s| {
            s["tasks"][0]["state"] == "running" && s["tasks"][0]["host"] == honest
        });
        std::thread::sleep(Duration::from_secs(3));
    });

    // The host's node dies and comes back on its old port, while the
    // consumer is frozen.
    let port = listening
        .split('/')
        .nth(4)
        .unwrap_or_else(|| panic!("no port in {listening}"))
        .to_string();
    let config = hosts[0].dir.join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("/tcp/0\""), "{text}");
    std::fs::write(&config, text.replace("/tcp/0\"", &format!("/tcp/{port}\""))).unwrap();
    let pid = consumer.pid();
    signal(pid, libc::SIGSTOP);
    tokio::task::block_in_place(|| {
        hosts[0].kill9();
        // The dead node's guest keeper ends on its parent's death, a moment
        // later; until then it may still hold the data dir's lock.
        let lock = hosts[0].data_dir().join("node.lock");
        assert!(
            wait_until(Duration::from_secs(30), || lock_free(&lock)),
            "the killed node's data dir stayed locked"
        );
        hosts[0].start();
    });
    signal(pid, libc::SIGCONT);
    assert_eq!(addr(&hosts[0]), listening, "the host came back elsewhere");

    // The consumer learns that the honest host lost the job, and that the
    // rogue forgot one (the task goes to it once the honest host is out).
    let report = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let report = hosts_report(&consumer);
            let counted = |peer: &str, key: &str| {
                entry(&report, peer).map_or(0, |(_, h)| h[key].as_u64().unwrap_or(0))
            };
            let honest_failed = counted(&honest, "failed") + counted(&honest, "forgotten");
            if honest_failed >= 1 && counted(&rogue_id, "forgotten") >= 1 {
                break report;
            }
            assert!(
                Instant::now() < deadline,
                "{report:#}\n{:#}\n{}",
                batch_status(&consumer, &id),
                consumer.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let status = tokio::task::block_in_place(|| batch_status(&consumer, &id));
    let (_, h) = entry(&report, &honest).unwrap();
    assert_eq!(h["forgotten"], 0, "the restarted host: {h:#}\n{status:#}");
    assert_eq!(h["standing"], "clean", "the restarted host: {h:#}");
    let (_, r) = entry(&report, &rogue_id).unwrap();
    assert_ne!(r["standing"], "clean", "the rogue: {r:#}");
    // The restart spent no retry: it is counted as the owner's doing.
    assert!(
        status["tasks"][0]["owner_kills"].as_u64().unwrap_or(0) >= 1,
        "{status:#}"
    );
    assert!(
        consumer.log().contains("the host restarted"),
        "the consumer never heard the restarted host say it lost the job (it saw it gone instead): the test proves nothing\n{}",
        consumer.log()
    );
}
