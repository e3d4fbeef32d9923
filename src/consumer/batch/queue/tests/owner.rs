//! Owner kills in the queue's core (issue 28, scope 4): an attempt killed
//! because its host's owner took the machine back (S3, S4, S5) is not the
//! task's fault: it spends no retry (the host is avoided for the task, as
//! after any failure); the task's own failures still count.

use super::*;

fn owner_kill() -> AttemptEnd {
    AttemptEnd::OwnerKilled("killed: S3".into())
}

#[test]
fn owner_kills_spend_no_retry_and_the_tasks_own_failures_still_do() {
    // One retry allowed; three hosts' owners take them back in turn.
    let mut core = core(1);
    let now = start();
    let (id, _) = admit(&mut core, now, batch(1));
    let hosts: Vec<SurveyedHost> = (0..5).map(|i| host(0.9 - 0.1 * i as f64)).collect();
    let mut now = now;
    for (i, h) in hosts.iter().take(3).enumerate() {
        let _ = core.start_survey(now);
        let actions = core.on_survey(now, Ok(hosts.clone()));
        assert_eq!(
            launches(&actions),
            vec![(0, h.peer)],
            "the best host not tried"
        );
        let actions = core.on_ended(now, id, 0, h.peer, owner_kill());
        assert_eq!(
            persisted(&actions),
            vec![(0, TaskState::Queued)],
            "kill {}",
            i + 1
        );
        let t = core.task(id, 0).unwrap();
        assert_eq!((t.owner_kills, t.host_failures()), (i as u32 + 1, 0));
        // The host that killed it is not tried for it again.
        assert_eq!(t.avoid.len(), i + 1);
        now = after(now, 1);
    }
    // The task's own failures still count: two more end it.
    for (h, state) in [
        (&hosts[3], TaskState::Queued),
        (&hosts[4], TaskState::Failed),
    ] {
        let _ = core.start_survey(now);
        let actions = core.on_survey(now, Ok(hosts.clone()));
        assert_eq!(launches(&actions), vec![(0, h.peer)]);
        let actions = core.on_ended(now, id, 0, h.peer, AttemptEnd::HostFailed("gone".into()));
        assert_eq!(persisted(&actions), vec![(0, state)]);
        now = after(now, 1);
    }
    let t = core.task(id, 0).unwrap();
    assert_eq!((t.owner_kills, t.host_failures()), (3, 2));
    assert!(t.reason.as_deref().unwrap().contains("no retries left"));
}

#[test]
fn an_owner_kill_of_one_of_two_copies_counts_and_the_other_runs_on() {
    let mut core = core(3);
    core.set_tail_copies(true);
    let mut new = batch(1);
    new.runtime_secs = 3 * 3600;
    new.limit_secs = 6 * 3600;
    let (id, _) = admit(&mut core, start(), new);
    let (risky, steady) = (host(0.3), host(0.99));
    let _ = core.start_survey(start());
    let _ = core.on_survey(start(), Ok(vec![risky.clone()]));
    let now = after(start(), 60);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![risky.clone(), steady.clone()]));
    assert_eq!(launches(&actions), vec![(0, steady.peer)]);
    let _ = core.on_ended(now, id, 0, risky.peer, owner_kill());
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.state, TaskState::Running);
    assert_eq!(t.host.as_deref(), Some(steady.peer.to_base58().as_str()));
    assert_eq!((t.owner_kills, t.host_failures()), (1, 0));
}

#[test]
fn a_verified_copy_killed_by_its_owner_spends_no_retry() {
    // No retries at all: a failed copy would end the task "no retries left".
    let mut core = core(0);
    let mut new = batch(1);
    new.verify = VerifySpec {
        replicas: 2,
        quorum: 2,
        ..Default::default()
    }
    .checked()
    .unwrap();
    let (id, _) = admit(&mut core, start(), new);
    let (a, b, c) = (host(0.9), host(0.8), host(0.7));
    let now = start();
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert_eq!(launches(&actions).len(), 2);
    // Both copies' hosts are taken back by their owners: with owner kills
    // counted as failures, that would be past the retry limit.
    let _ = core.on_ended(now, id, 0, a.peer, owner_kill());
    let _ = core.on_ended(now, id, 0, b.peer, owner_kill());
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.state, TaskState::Running, "{:?}", t.reason);
    assert_eq!((t.owner_kills, t.host_failures()), (2, 0));
    // Two copies are wanted again, on hosts that have not been taken back.
    let d = host(0.6);
    let now = after(now, 1);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone(), c.clone(), d.clone()]));
    assert_eq!(launches(&actions), vec![(0, c.peer), (0, d.peer)]);
}
