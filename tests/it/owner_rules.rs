//! The owner's rules on whole nodes run in-process (`daemon::run` with
//! injected resources, real sled stores, real guest processes): the schedule
//! of `[owner] hours` across its boundaries and a change of time zone (under
//! paused tokio time, the wall clock following it), `pause --after-job`
//! (real time: the guest must really finish), and `on_battery = "pause"`
//! with a fake power-supply directory.

use gleaner::clock::{Clock, TokioClock};
use gleaner::guest::{GuestEvent, GuestEventKind, KillCause};
use gleaner::history::store::HistoryStore;
use gleaner::model::ids::JobId;
use gleaner::model::owner::{IdleReason, S5Cause};
use gleaner::model::state::State;
use gleaner::node::config::Config;
use gleaner::node::host_loop::{GuestJob, GuestOrigin, GuestStart, HostError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

use crate::in_process;
use in_process::{Node, NodeSetup};

/// Monday 2025-09-01 08:00 UTC.
const START: i64 = 1_756_713_600;

/// A one-second monitor, no pool, `owner` appended as the `[owner]` section.
fn config(tz: &str, owner: &str) -> Config {
    let text = format!(
        "[net]\nenabled = false\n\n\
         [monitor]\nmin_period_secs = 1\nmax_period_secs = 1\nextra_sample_chance = 0.0\n\n\
         [history]\ntz = \"{tz}\"\nhost = \"test\"\n\n[owner]\n{owner}\n"
    );
    Config::parse(&text, Path::new("test.toml")).expect("test config")
}

/// Starts a node on `dir`, its wall clock following tokio's from `clock`
/// and its power supply read from `power`.
async fn start(dir: &Path, config: Config, power: &Path, clock: &TokioClock) -> Node {
    let mut setup = NodeSetup::new(dir, config, Arc::new(clock.clone()));
    setup.power_supply_dir = power.to_path_buf();
    setup.start().await
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().expect("temp dir");
    let p = t.path().to_path_buf();
    (t, p)
}

/// The transitions (with S5 causes) a stopped node recorded.
fn transitions(dir: &Path, config: &Config, at: i64) -> Vec<(i64, State, Option<S5Cause>)> {
    let store = HistoryStore::open(
        &dir.join("history"),
        &gleaner::daemon::store_options(config),
        at,
    )
    .expect("reopen");
    store.transitions_with_cause(..).expect("transitions")
}

fn job(argv: &[&str]) -> GuestStart {
    GuestStart {
        origin: GuestOrigin::Local,
        job_id: None,
        job: GuestJob {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            mem_mib: 10,
            runtime_secs: None,
            inputs: Vec::new(),
            checkpoint: None,
            image: None,
        },
    }
}

/// Waits for the guest of `job` to end: its kill cause, and when the kill
/// was sent (Unix seconds; the end itself is seen later, in real time).
async fn guest_end(
    events: &mut broadcast::Receiver<GuestEvent>,
    job: &JobId,
) -> (Option<KillCause>, Option<i64>) {
    let wait = async {
        let mut kill_at = None;
        loop {
            match events.recv().await {
                Ok(e) if e.job_id == job.as_str() => match e.kind {
                    GuestEventKind::KillSent { .. } => kill_at = Some(e.at.as_second()),
                    GuestEventKind::Exited { cause, .. } => return (cause, kill_at),
                    _ => {}
                },
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("events closed"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(3600), wait)
        .await
        .expect("the guest ended")
}

#[tokio::test(start_paused = true)]
async fn outside_its_hours_the_node_records_s5_schedule_and_refuses_jobs() {
    let (_t, dir) = temp();
    let power = dir.join("no-power-supply");
    // Lent on Monday from 08:05 to 08:10 only; the node starts at 08:00.
    let config = config("UTC", "hours = \"Mon 08:05-08:10\"");
    let clock = TokioClock::starting_at(START);
    let node = start(&dir, config.clone(), &power, &clock).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.state, Some(State::S5));
    assert_eq!(status.withheld, Some(S5Cause::Schedule));
    assert_eq!(status.why_idle, Some(IdleReason::Schedule));
    assert!(!node.host.snapshot().borrow().slot_free);
    let refused = node.host.start_guest(job(&["sleep", "100000"])).await;
    assert_eq!(
        refused.err(),
        Some(HostError::Withheld(S5Cause::Schedule)),
        "a job was not refused outside the hours"
    );

    // 08:05: inside the hours, the node takes a job.
    tokio::time::sleep(Duration::from_secs(300)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.state, Some(State::S1), "at 08:05:05");
    assert_eq!(status.why_idle, Some(IdleReason::NoWork));
    let mut events = node.host.subscribe_events();
    let running = node
        .host
        .start_guest(job(&["sleep", "100000"]))
        .await
        .expect("a job inside the hours")
        .job_id;
    assert_eq!(node.host.status().await.expect("status").why_idle, None);

    // 08:10: out again; the guest is revoked at the boundary.
    let (cause, killed_at) = guest_end(&mut events, &running).await;
    assert_eq!(cause, Some(KillCause::Revocation));
    let killed_at = killed_at.expect("a kill was sent");
    assert!(
        (START + 600..START + 602).contains(&killed_at),
        "revoked at {killed_at}, the hours end at {}",
        START + 600
    );
    node.stop().await;

    let seen = transitions(&dir, &config, clock.unix_secs());
    let causes: Vec<(State, Option<S5Cause>)> = seen.iter().map(|(_, s, c)| (*s, *c)).collect();
    assert_eq!(
        causes,
        vec![
            (State::S5, Some(S5Cause::Schedule)),
            (State::S1, None),
            (State::S5, Some(S5Cause::Schedule)),
        ],
        "{seen:?}"
    );
    assert!((START + 300..START + 302).contains(&seen[1].0), "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn a_change_of_time_zone_moves_the_hours() {
    let (_t, dir) = temp();
    let power = dir.join("no-power-supply");
    // 08:00 UTC is 10:00 in Berlin (CEST): outside in UTC, inside in Berlin.
    let hours = "hours = \"Mon 09:00-12:00\"";
    let clock = TokioClock::starting_at(START);
    let node = start(&dir, config("UTC", hours), &power, &clock).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.withheld, Some(S5Cause::Schedule));
    node.stop().await;

    let node = start(&dir, config("Europe/Berlin", hours), &power, &clock).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.withheld, None, "10:00 in Berlin is inside the hours");
    assert_eq!(status.state, Some(State::S1));
    // 12:00 in Berlin is 10:00 UTC.
    tokio::time::sleep(Duration::from_secs(7200)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.withheld, Some(S5Cause::Schedule), "12:00 Berlin");
    node.stop().await;
}

#[tokio::test(start_paused = true)]
async fn on_battery_pause_withholds_until_mains_is_back() {
    let (_t, dir) = temp();
    let power = dir.join("power_supply");
    let ac = power.join("AC");
    std::fs::create_dir_all(&ac).expect("fake sysfs");
    std::fs::write(ac.join("type"), "Mains\n").expect("type");
    std::fs::write(ac.join("online"), "0\n").expect("online");
    let clock = TokioClock::starting_at(START);
    let config = config("UTC", "on_battery = \"pause\"");
    let node = start(&dir, config.clone(), &power, &clock).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.withheld, Some(S5Cause::Battery));
    assert_eq!(status.why_idle, Some(IdleReason::Battery));
    let refused = node.host.start_guest(job(&["sleep", "100000"])).await;
    assert_eq!(refused.err(), Some(HostError::Withheld(S5Cause::Battery)));
    std::fs::write(ac.join("online"), "1\n").expect("online");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = node.host.status().await.expect("status");
    assert_eq!(status.withheld, None);
    assert_eq!(status.state, Some(State::S1));
    node.stop().await;
    let seen = transitions(&dir, &config, clock.unix_secs());
    assert_eq!(
        seen.first().map(|t| (t.1, t.2)),
        Some((State::S5, Some(S5Cause::Battery)))
    );

    // With on_battery = "run" the same machine hosts.
    std::fs::write(ac.join("online"), "0\n").expect("online");
    let node = start(&dir, self::config("UTC", ""), &power, &clock).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node.host.status().await.expect("status").withheld, None);
    node.stop().await;
}

/// Real time: the guest must really run to its end.
#[tokio::test]
async fn pause_after_job_lets_the_running_guest_finish_then_withholds() {
    let (_t, dir) = temp();
    let power = dir.join("no-power-supply");
    let clock = TokioClock::starting_at(START);
    let config = config("UTC", "");
    let node = start(&dir, config.clone(), &power, &clock).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut events = node.host.subscribe_events();
    let running = node
        .host
        .start_guest(job(&["sleep", "3"]))
        .await
        .expect("guest starts")
        .job_id;
    let outcome = node
        .host
        .pause_after_job(None)
        .await
        .expect("pause --after-job");
    assert!(!outcome.paused);
    assert_eq!(outcome.after_job.as_ref(), Some(&running));
    let status = node.host.status().await.expect("status");
    assert!(!status.paused && status.pause_after_job);
    assert!(status.guest.is_some());
    assert_eq!(status.why_idle, None, "the guest still runs");
    let refused = node.host.start_guest(job(&["sleep", "1"])).await;
    assert_eq!(refused.err(), Some(HostError::Finishing));

    // The guest ends on its own (no kill cause), then the node is paused.
    let (cause, killed_at) = guest_end(&mut events, &running).await;
    assert_eq!(cause, None, "the guest was killed, not allowed to finish");
    assert_eq!(killed_at, None, "a kill was sent to the finishing guest");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = node.host.status().await.expect("status");
    assert!(status.paused, "not paused after the job");
    assert!(!status.pause_after_job);
    assert_eq!(status.why_idle, Some(IdleReason::Paused));
    node.stop().await;
    let seen = transitions(&dir, &config, clock.unix_secs());
    assert_eq!(
        seen.last().map(|t| (t.1, t.2)),
        Some((State::S5, Some(S5Cause::Paused))),
        "{seen:?}"
    );
}
