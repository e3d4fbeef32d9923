//! Whole nodes run in-process under paused tokio time (`daemon::run` with
//! injected resources): a replayed owner load drives the real host loop, real
//! sled stores in temp dirs record what happens, and real child processes are
//! the guests. Virtual time makes minutes of owner behaviour take
//! milliseconds, so these cover what the binary tests cover (state changes,
//! pause and resume, the restart gap recorded as S5, guests killed on S3 and
//! S4) without sleeping.

use gleaner::clock::{Clock, TokioClock};
use gleaner::guest::{GuestEvent, GuestEventKind, KillCause};
use gleaner::history::store::{HistoryStore, StoreOptions};
use gleaner::model::ids::JobId;
use gleaner::model::state::State;
use gleaner::node::config::Config;
use gleaner::node::host_loop::{GuestJob, GuestOrigin, GuestStart, HostHandle};
use gleaner::node::OwnerLoad;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

use crate::in_process;
use in_process::{Node, NodeSetup};

/// Monday 2025-09-01 08:00 UTC, the wall time every test node starts at.
const START: i64 = 1_756_713_600;

/// A node with a one-second monitor, a 60 s sustain and no pool.
fn config() -> Config {
    let text = "[policy]\nsustain_secs = 60\n\n[net]\nenabled = false\n\n\
                [monitor]\nmin_period_secs = 1\nmax_period_secs = 1\nextra_sample_chance = 0.0\n\n\
                [history]\ntz = \"UTC\"\nhost = \"test\"\n";
    Config::parse(text, Path::new("test.toml")).expect("test config")
}

fn store_options(config: &Config) -> StoreOptions {
    gleaner::daemon::store_options(config)
}

/// Starts a node on `dir` with the owner load `script` (`secs cpu
/// free_mib` lines), its wall clock following tokio's from `clock`.
async fn start(dir: &Path, script: &str, clock: &TokioClock) -> Node {
    let mut setup = NodeSetup::new(dir, config(), Arc::new(clock.clone()));
    setup.owner_script = script.into();
    setup.start().await
}

/// The transitions a stopped node's store recorded.
fn transitions(dir: &Path, at: i64) -> Vec<(i64, State)> {
    let config = config();
    let store =
        HistoryStore::open(&dir.join("history"), &store_options(&config), at).expect("reopen");
    store.transitions(..).expect("transitions")
}

fn states(transitions: &[(i64, State)]) -> Vec<State> {
    transitions.iter().map(|(_, s)| *s).collect()
}

/// Waits (in virtual time) for the guest of `job` to end; returns its kill cause.
async fn guest_end(
    events: &mut broadcast::Receiver<GuestEvent>,
    job: &str,
) -> Option<Option<KillCause>> {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(e) if e.job_id == job => {
                    if let GuestEventKind::Exited { cause, .. } = e.kind {
                        return Some(cause);
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(3600), wait)
        .await
        .ok()
        .flatten()
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().expect("temp dir");
    let p = t.path().to_path_buf();
    (t, p)
}

#[tokio::test(start_paused = true)]
async fn owner_load_moves_the_host_through_s1_s2_s3_and_back() {
    let (_t, dir) = temp();
    let clock = TokioClock::starting_at(START);
    // Light, heavy (S2), a sustained hog (S3 after the 60 s sustain), light.
    let node = start(
        &dir,
        "0 5 8000\n100 40 8000\n200 95 8000\n400 5 8000\n",
        &clock,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(500)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.state, Some(State::S1));
    assert!(status.samples >= 400, "{} samples", status.samples);
    assert_eq!(
        status.owner_load,
        OwnerLoad::Supplied("the test's script".into())
    );
    node.stop().await;
    let seen = states(&transitions(&dir, clock.unix_secs()));
    assert_eq!(
        seen,
        vec![State::S1, State::S2, State::S3, State::S1],
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timed_pause_ends_by_itself_and_survives_a_restart() {
    let (_t, dir) = temp();
    let clock = TokioClock::starting_at(START);
    let node = start(&dir, "0 5 8000\n", &clock).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let paused = node.host.pause(Some(600)).await.expect("pause");
    assert!(paused.paused && paused.changed);
    assert_eq!(paused.until, Some(START + 5 + 600));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(node.host.status().await.expect("status").paused);
    // A clean restart in the middle of the pause keeps its end.
    node.stop().await;
    let node = start(&dir, "0 5 8000\n", &clock).await;
    let status = node.host.status().await.expect("status");
    assert!(status.paused, "the pause was lost on restart");
    assert_eq!(status.paused_until, Some(START + 605));
    assert_eq!(status.state, Some(State::S5));
    tokio::time::sleep(Duration::from_secs(600)).await;
    let status = node.host.status().await.expect("status");
    assert!(!status.paused, "the pause did not end at its time");
    // Absurd pauses are refused before anything is saved.
    assert!(node.host.pause(Some(u64::MAX)).await.is_err());
    assert!(!node.host.status().await.expect("status").paused);
    node.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_restart_after_a_gap_records_the_time_off_as_s5() {
    let (_t, dir) = temp();
    let clock = TokioClock::starting_at(START);
    let node = start(&dir, "0 5 8000\n", &clock).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    node.stop().await;
    // The machine is off for an hour.
    tokio::time::advance(Duration::from_secs(3600)).await;
    let node = start(&dir, "0 5 8000\n", &clock).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    node.stop().await;
    let seen = transitions(&dir, clock.unix_secs());
    assert_eq!(
        states(&seen),
        vec![State::S1, State::S5, State::S1],
        "{seen:?}"
    );
    let (off_at, _) = seen[1];
    assert!(
        (START + 25..START + 40).contains(&off_at),
        "S5 from {off_at}, the node stopped at {}",
        START + 30
    );
}

/// Starts `sleep 100000` as a local guest declaring `mem_mib`.
async fn start_sleeper(host: &HostHandle, mem_mib: u64) -> JobId {
    host.start_guest(GuestStart {
        origin: GuestOrigin::Local,
        job_id: None,
        job: GuestJob {
            argv: vec!["sleep".into(), "100000".into()],
            env: Vec::new(),
            mem_mib,
            runtime_secs: None,
            inputs: Vec::new(),
            checkpoint: None,
            image: None,
        },
    })
    .await
    .expect("guest starts")
    .job_id
}

#[tokio::test(start_paused = true)]
async fn a_sustained_owner_load_kills_the_guest_for_cpu_contention() {
    let (_t, dir) = temp();
    let clock = TokioClock::starting_at(START);
    let node = start(&dir, "0 5 8000\n20 95 8000\n", &clock).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut events = node.host.subscribe_events();
    let job = start_sleeper(&node.host, 100).await;
    let cause = guest_end(&mut events, job.as_str()).await;
    assert_eq!(cause, Some(Some(KillCause::CpuContention)));
    // Killed only after the spike had lasted the sustain time.
    let ended_at = clock.unix_secs();
    assert!(ended_at >= START + 20 + 60, "killed at {ended_at}");
    node.stop().await;
}

#[tokio::test(start_paused = true)]
async fn memory_below_the_guests_working_set_kills_it_for_memory() {
    let (_t, dir) = temp();
    let clock = TokioClock::starting_at(START);
    let node = start(&dir, "0 5 8000\n30 5 300\n", &clock).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut events = node.host.subscribe_events();
    let job = start_sleeper(&node.host, 500).await;
    let cause = guest_end(&mut events, job.as_str()).await;
    assert_eq!(cause, Some(Some(KillCause::MemoryShortage)));
    assert!(clock.unix_secs() >= START + 30);
    node.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_short_spike_suspends_the_guest_and_it_runs_on() {
    let (_t, dir) = temp();
    let clock = TokioClock::starting_at(START);
    // 20 s above Th2: shorter than the 60 s sustain, so suspend, not kill.
    let node = start(&dir, "0 5 8000\n20 95 8000\n40 5 8000\n", &clock).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut events = node.host.subscribe_events();
    let job = start_sleeper(&node.host, 100).await;
    let mut seen = Vec::new();
    let collect = async {
        while let Ok(e) = events.recv().await {
            if e.job_id == job.as_str() {
                let resumed = matches!(e.kind, GuestEventKind::Resumed);
                seen.push(e.kind);
                if resumed {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(600), collect)
        .await
        .expect("the guest was suspended and resumed");
    assert!(seen.iter().any(|k| matches!(k, GuestEventKind::Suspended)));
    assert!(!seen
        .iter()
        .any(|k| matches!(k, GuestEventKind::Exited { .. })));
    let status = node.host.status().await.expect("status");
    assert_eq!(status.guest.map(|(g, _)| g.job_id), Some(job));
    node.stop().await;
}
