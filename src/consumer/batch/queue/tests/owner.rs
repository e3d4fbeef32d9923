//! Owner kills in the queue's core (issue 28, scope 4): an attempt killed
//! because its host's owner took the machine back (S3, S4, S5) is not the
//! task's fault: it spends no retry (the host is avoided for the task, as
//! after any failure); the task's own failures still count. A task every
//! host has killed is not left waiting for ever: the hosts it avoids take
//! it again once [`AVOID_FOR`] has passed since the last kill (`avoid`).

use super::*;
use crate::consumer::batch::queue::AVOID_FOR;

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
    // The copy stands for the task from when it started, not the lost attempt.
    assert_eq!(t.started_unix, Some(now.unix_secs));
}

#[test]
fn a_verified_copy_killed_by_its_owner_spends_no_retry() {
    // No retries at all: a failed copy would end the task "no retries left".
    let mut core = core(0);
    let new = checked_by_two(batch(1));
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

/// The hosts a survey action skips and how many it asks at most.
fn survey_of(actions: &[Action]) -> (Vec<PeerId>, Option<u32>) {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Survey { query, skip } => Some((skip.clone(), query.ask_at_most)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no survey in {actions:?}"))
}

#[test]
fn a_task_every_hosts_owner_killed_runs_again_once_the_avoidance_has_lapsed() {
    // A pool of three desktops; each owner takes the machine back from the
    // task in turn. Owner kills spend no retry, so nothing ever fails it.
    let mut core = core(3);
    let mut now = start();
    let (id, _) = admit(&mut core, now, batch(1));
    let hosts: Vec<SurveyedHost> = (0..3).map(|i| host(0.9 - 0.1 * i as f64)).collect();
    for h in &hosts {
        let _ = core.start_survey(now);
        let actions = core.on_survey(now, Ok(hosts.clone()));
        assert_eq!(launches(&actions), vec![(0, h.peer)]);
        let _ = core.on_ended(now, id, 0, h.peer, owner_kill());
        now = after(now, 60);
    }
    let t = core.task(id, 0).unwrap();
    assert_eq!(
        (t.state, t.owner_kills, t.host_failures()),
        (TaskState::Queued, 3, 0)
    );
    // Right after the last kill every host is avoided: none takes it, and
    // a round skips them all.
    let (skip, _) = survey_of(&core.start_survey(now));
    assert_eq!(skip.len(), 3, "{skip:?}");
    assert!(launches(&core.on_survey(now, Ok(hosts.clone()))).is_empty());
    // Nor half way through the avoidance.
    let half = after(now, AVOID_FOR.as_secs() / 2);
    let _ = core.tick(half);
    let _ = core.start_survey(half);
    assert!(launches(&core.on_survey(half, Ok(hosts.clone()))).is_empty());
    // Once it has lapsed (counted from the last kill, a minute before
    // `now`), the tick asks for a round that skips none of them, and the
    // pool's best host takes the task again.
    let lapsed = after(now, AVOID_FOR.as_secs());
    let _ = core.tick(lapsed);
    assert!(core.wants_survey(lapsed), "the lapse asks for a round");
    let (skip, asks) = survey_of(&core.start_survey(lapsed));
    assert!(skip.is_empty(), "{skip:?}");
    assert!(asks.is_some_and(|n| n > 0), "a round that asks: {asks:?}");
    let actions = core.on_survey(lapsed, Ok(hosts.clone()));
    assert_eq!(launches(&actions), vec![(0, hosts[0].peer)]);
    // Killed there again: that host is avoided for another hour, the
    // others are not (their avoidance lapsed), so the next goes there.
    let again = after(lapsed, 60);
    let _ = core.on_ended(again, id, 0, hosts[0].peer, owner_kill());
    let _ = core.start_survey(again);
    let actions = core.on_survey(again, Ok(hosts.clone()));
    assert_eq!(launches(&actions), vec![(0, hosts[1].peer)]);
}

#[test]
fn retrying_a_failed_host_after_the_lapse_still_spends_retries() {
    // Two hosts, two retries: the task fails on both, waits out the
    // avoidance, fails on the first again and is out of retries.
    let mut core = core(2);
    let mut now = start();
    let (id, _) = admit(&mut core, now, batch(1));
    let hosts = vec![host(0.9), host(0.8)];
    for h in &hosts {
        let _ = core.start_survey(now);
        assert_eq!(
            launches(&core.on_survey(now, Ok(hosts.clone()))),
            vec![(0, h.peer)]
        );
        let _ = core.on_ended(now, id, 0, h.peer, AttemptEnd::HostFailed("gone".into()));
        now = after(now, 1);
    }
    assert_eq!(core.task(id, 0).unwrap().state, TaskState::Queued);
    let _ = core.start_survey(now);
    assert!(launches(&core.on_survey(now, Ok(hosts.clone()))).is_empty());
    let now = after(now, AVOID_FOR.as_secs());
    let _ = core.tick(now);
    let _ = core.start_survey(now);
    assert_eq!(
        launches(&core.on_survey(now, Ok(hosts.clone()))),
        vec![(0, hosts[0].peer)]
    );
    let actions = core.on_ended(
        now,
        id,
        0,
        hosts[0].peer,
        AttemptEnd::HostFailed("gone".into()),
    );
    assert_eq!(persisted(&actions), vec![(0, TaskState::Failed)]);
    assert_eq!(core.task(id, 0).unwrap().host_failures(), 3);
}

/// A 3 h task whose hosts' owners took it back `kills` times (each on a
/// host of its own) runs on a risky host; four spare steady hosts are
/// then found at each of four looks a minute apart. Returns the copies
/// started at each look.
fn copies_at_each_look_after(kills: u32) -> Vec<usize> {
    let mut core = core(3);
    core.set_tail_copies(true);
    let mut new = batch(1);
    new.runtime_secs = 3 * 3600;
    new.limit_secs = 6 * 3600;
    let mut now = start();
    let (id, _) = admit(&mut core, now, new);
    for _ in 0..kills {
        let h = host(0.9);
        let _ = core.start_survey(now);
        let actions = core.on_survey(now, Ok(vec![h.clone()]));
        assert_eq!(launches(&actions), vec![(0, h.peer)]);
        let _ = core.on_ended(now, id, 0, h.peer, owner_kill());
        now = after(now, 60);
    }
    let risky = host(0.3);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![risky.clone()]));
    assert_eq!(launches(&actions), vec![(0, risky.peer)]);
    let spare: Vec<SurveyedHost> = (0..4).map(|_| host(0.99)).collect();
    let mut found = vec![risky];
    found.extend(spare);
    (0..4)
        .map(|_| {
            now = after(now, 60);
            let _ = core.start_survey(now);
            launches(&core.on_survey(now, Ok(found.clone()))).len()
        })
        .collect()
}

#[test]
fn a_task_its_owners_killed_again_and_again_runs_up_to_three_copies_in_the_tail() {
    use crate::model::sched::tail::TailRule;
    let often = TailRule::default().kills_for_more;
    assert_eq!(copies_at_each_look_after(often - 1), vec![1, 0, 0, 0]);
    assert_eq!(copies_at_each_look_after(often), vec![1, 1, 1, 0]);
}
