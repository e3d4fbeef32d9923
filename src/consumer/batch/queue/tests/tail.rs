//! Tail copies in the queue's core: a free host left over once no task
//! waits runs a copy of the running task most at risk; the first result
//! wins and the other copy is killed (its results discarded if it landed
//! anyway, never moved in); a verified task's tail copy is one more replica
//! judged with the others.

use super::*;

/// A 3 h task (long enough for a copy to be worth starting).
fn long_batch() -> NewBatch {
    NewBatch {
        runtime_secs: 3 * 3600,
        limit_secs: 6 * 3600,
        ..batch(1)
    }
}

/// Admits `new` and starts it on `risky` alone; a minute later a survey
/// finds `risky` busy and `steady` free. Returns the batch and the
/// actions of that survey.
fn running_then_survey(
    core: &mut QueueCore,
    new: NewBatch,
    first: &[SurveyedHost],
    later: &[SurveyedHost],
) -> (BatchId, Vec<Action>) {
    let now = start();
    let (id, _) = admit(core, now, new);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(first.to_vec()));
    assert_eq!(launches(&actions).len(), first.len());
    let now = after(now, 60);
    assert!(
        core.wants_survey(now),
        "the tail keeps its view of the pool fresh"
    );
    let _ = core.start_survey(now);
    (id, core.on_survey(now, Ok(later.to_vec())))
}

#[test]
fn a_free_host_in_the_tail_runs_a_copy_and_the_first_result_wins() {
    let mut core = core(3);
    core.set_tail_copies(true);
    let (risky, steady) = (host(0.3), host(0.99));
    let (id, actions) = running_then_survey(
        &mut core,
        long_batch(),
        std::slice::from_ref(&risky),
        &[risky.clone(), steady.clone()],
    );
    assert_eq!(launches(&actions), vec![(0, steady.peer)], "a tail copy");
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.host.as_deref(), Some(risky.peer.to_base58().as_str()));
    assert_eq!(t.copies.len(), 1);

    // The copy lands first: it wins, the attempt on the risky host is killed.
    let now = after(start(), 3 * 3600);
    let actions = core.on_ended(now, id, 0, steady.peer, landed(0));
    assert_eq!(kills(&actions), vec![(0, risky.peer)]);
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.state, TaskState::Done);
    assert_eq!(t.host.as_deref(), Some(steady.peer.to_base58().as_str()));
    // The killed attempt's end changes nothing.
    let actions = core.on_ended(now, id, 0, risky.peer, AttemptEnd::Cancelled);
    assert!(persisted(&actions).is_empty());
    assert_eq!(core.task(id, 0).unwrap().state, TaskState::Done);
}

#[test]
fn a_queue_not_told_otherwise_runs_tail_copies() {
    // On by default (`TAIL_COPIES_DEFAULT`, `[batch] tail_copies`).
    let mut core = core(3);
    let (risky, steady) = (host(0.3), host(0.99));
    let (_, actions) = running_then_survey(
        &mut core,
        long_batch(),
        std::slice::from_ref(&risky),
        &[risky.clone(), steady.clone()],
    );
    assert_eq!(launches(&actions), vec![(0, steady.peer)], "a tail copy");
}

#[test]
fn no_tail_copy_when_turned_off_for_a_short_task_or_for_a_safe_one() {
    let (risky, steady) = (host(0.3), host(0.99));
    let mut off = core(3);
    off.set_tail_copies(false);
    let now = start();
    let (_, _) = admit(&mut off, now, long_batch());
    let _ = off.start_survey(now);
    let _ = off.on_survey(now, Ok(vec![risky.clone()]));
    assert!(!off.wants_survey(after(now, 60)), "nothing to look for");
    let actions = off.on_survey(after(now, 60), Ok(vec![risky.clone(), steady.clone()]));
    assert!(launches(&actions).is_empty());

    // A one-minute task: a copy cannot gain enough.
    let mut on = core(3);
    on.set_tail_copies(true);
    let (_, actions) = running_then_survey(
        &mut on,
        batch(1),
        std::slice::from_ref(&risky),
        &[risky.clone(), steady.clone()],
    );
    assert!(launches(&actions).is_empty());

    // A long task on a host sure to finish it: no copy either.
    let mut on = core(3);
    on.set_tail_copies(true);
    let sure = host(0.999);
    let (_, actions) = running_then_survey(
        &mut on,
        long_batch(),
        std::slice::from_ref(&sure),
        &[sure.clone(), steady.clone()],
    );
    assert!(launches(&actions).is_empty());
}

#[test]
fn a_tail_copy_waits_while_tasks_wait_for_the_free_hosts() {
    let mut core = core(3);
    core.set_tail_copies(true);
    let (risky, steady) = (host(0.3), host(0.99));
    let new = NewBatch {
        max_running: Some(1),
        ..long_batch()
    };
    let mut new = new;
    new.sweep = Sweep::Range { start: 0, end: 2 };
    // Task 1 waits (max_running 1): the free host is not spare.
    let (_, actions) = running_then_survey(
        &mut core,
        new,
        std::slice::from_ref(&risky),
        &[risky.clone(), steady.clone()],
    );
    assert!(launches(&actions).is_empty());
}

#[test]
fn a_verified_tasks_tail_copy_is_one_more_replica_and_a_quorum_kills_the_last() {
    let mut core = core(3);
    core.set_tail_copies(true);
    let new = checked_by_two(long_batch());
    let (a, b, steady) = (host(0.3), host(0.3), host(0.99));
    let (id, actions) = running_then_survey(
        &mut core,
        new,
        &[a.clone(), b.clone()],
        &[a.clone(), b.clone(), steady.clone()],
    );
    assert_eq!(launches(&actions), vec![(0, steady.peer)], "a third copy");
    for action in &actions {
        if let Action::Launch(l) = action {
            assert!(l
                .plan
                .result_dir
                .starts_with(format!("/queue/{id}/copies/0")));
        }
    }
    // The tail copy and one replica land and agree: a quorum; the last
    // replica still running is killed.
    let now = after(start(), 3 * 3600);
    let _ = core.on_ended(now, id, 0, steady.peer, landed(0));
    let _ = core.on_verdict(
        now,
        id,
        0,
        Verdict::Judged {
            copy: Ok(copy_of(steady.peer, 1)),
            agrees_with: Vec::new(),
        },
    );
    let _ = core.on_ended(now, id, 0, a.peer, landed(0));
    let actions = core.on_verdict(
        now,
        id,
        0,
        Verdict::Judged {
            copy: Ok(copy_of(a.peer, 1)),
            agrees_with: vec![0],
        },
    );
    assert_eq!(kills(&actions), vec![(0, b.peer)]);
    assert!(actions.iter().any(|a| matches!(a, Action::Promote { .. })));
}

/// The staging directories the actions move into a task's results, with
/// where to.
fn lands(actions: &[Action]) -> Vec<(PathBuf, PathBuf)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Land { from, to, .. } => Some((from.clone(), to.clone())),
            _ => None,
        })
        .collect()
}

fn discards(actions: &[Action]) -> Vec<PathBuf> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Discard { dir } => Some(dir.clone()),
            _ => None,
        })
        .collect()
}

/// Two attempts of one task never land in the same place, and the queue
/// alone decides whose files become the task's result: the first to land
/// is moved into `results/<task>` before its record says so; one that
/// lands after it (it was still fetching when the winner landed, so its
/// kill came too late) is discarded, never moved in.
#[test]
fn a_copy_that_lands_after_the_winner_is_discarded_never_moved_in() {
    let mut core = core(3);
    core.set_tail_copies(true);
    let (risky, steady) = (host(0.3), host(0.99));
    let now = start();
    let (id, _) = admit(&mut core, now, long_batch());
    let _ = core.start_survey(now);
    let first = core.on_survey(now, Ok(vec![risky.clone()]));
    let now = after(now, 60);
    let _ = core.start_survey(now);
    let second = core.on_survey(now, Ok(vec![risky.clone(), steady.clone()]));
    let dirs: Vec<PathBuf> = first
        .iter()
        .chain(&second)
        .filter_map(|a| match a {
            Action::Launch(l) => Some(l.plan.result_dir.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(dirs.len(), 2, "the task and its tail copy");
    assert_ne!(dirs[0], dirs[1], "each attempt lands in its own place");
    for dir in &dirs {
        assert!(dir.starts_with(core.landing_root(id)), "{}", dir.display());
    }

    // The copy lands first: its staging is moved in, then recorded.
    let now = after(start(), 3 * 3600);
    let actions = core.on_ended(now, id, 0, steady.peer, landed(0));
    let to = core.results_dir(id).join("0");
    assert_eq!(lands(&actions), vec![(dirs[1].clone(), to)]);
    let moved = actions
        .iter()
        .position(|a| matches!(a, Action::Land { .. }));
    let recorded = actions
        .iter()
        .position(|a| matches!(a, Action::Persist { .. }));
    assert!(moved < recorded, "moved in before the record says so");
    assert!(discards(&actions).is_empty());

    // The first attempt had fetched its results before its kill reached it.
    let actions = core.on_ended(now, id, 0, risky.peer, landed(0));
    assert!(
        lands(&actions).is_empty(),
        "a landed result is never replaced"
    );
    assert_eq!(discards(&actions), vec![dirs[0].clone()]);
    assert!(persisted(&actions).is_empty());
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.state, TaskState::Done);
    assert_eq!(t.host.as_deref(), Some(steady.peer.to_base58().as_str()));
}

/// Eleven 3 h tasks: nine start on steady hosts. `late`: 2.5 h on, task
/// 0's owner takes its host back and it restarts on a risky host; else a
/// minute on, task 9 starts on the risky host. A minute later one steady
/// host is found free (with the risky one, busy), two tasks still
/// waiting. Returns the launches of that survey.
fn a_start_on_a_risky_host(copies: bool, late: bool) -> Vec<(u32, PeerId)> {
    let mut core = core(3);
    core.set_tail_copies(copies);
    let mut new = long_batch();
    new.sweep = Sweep::Range { start: 0, end: 11 };
    let now = start();
    let (id, _) = admit(&mut core, now, new);
    let first: Vec<SurveyedHost> = (0..9).map(|_| host(0.99)).collect();
    let _ = core.start_survey(now);
    assert_eq!(launches(&core.on_survey(now, Ok(first.clone()))).len(), 9);
    let risky = host(0.3);
    let (now, task) = if late {
        let now = after(now, 9000);
        let killed = AttemptEnd::OwnerKilled("killed: S3".into());
        let _ = core.on_ended(now, id, 0, first[0].peer, killed);
        (now, 0)
    } else {
        (after(now, 60), 9)
    };
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![risky.clone()]));
    assert_eq!(launches(&actions), vec![(task, risky.peer)]);
    let now = after(now, 60);
    let steady = host(0.99);
    let _ = core.start_survey(now);
    launches(&core.on_survey(now, Ok(vec![steady, risky])))
}

#[test]
fn a_task_restarted_late_in_the_bulk_gets_a_copy_before_the_waiting_tasks() {
    // Late: the eight others end in half an hour, the two waiting ones
    // soon after; task 0, restarted on a host likely to be taken back,
    // would end last: the free host runs a copy of it, not a waiting task
    // (the tail rule alone copies nothing while two tasks wait for one
    // host).
    let with = a_start_on_a_risky_host(true, true);
    assert_eq!(with.len(), 1);
    assert_eq!(with[0].0, 0, "a copy of the task on the critical path");
    let without = a_start_on_a_risky_host(false, true);
    assert_eq!(without.len(), 1);
    assert_ne!(without[0].0, 0, "without copies a waiting task goes");
    // Early in the bulk the same start is no critical one (every task has
    // about as long to go): a waiting task goes.
    let early = a_start_on_a_risky_host(true, false);
    assert_eq!(early.len(), 1);
    assert_eq!(early[0].0, 10, "{early:?}");
}

#[test]
fn copies_count_against_the_batchs_max_running() {
    // Two tasks at risk, two steady hosts free, nothing waiting: two tail
    // copies, but with `max_running` 3 only one fits beside the two runs.
    let copies = |max_running| {
        let mut core = core(3);
        core.set_tail_copies(true);
        let mut new = long_batch();
        new.sweep = Sweep::Range { start: 0, end: 2 };
        new.max_running = max_running;
        let (a, b) = (host(0.3), host(0.3));
        let (_, actions) = running_then_survey(
            &mut core,
            new,
            &[a.clone(), b.clone()],
            &[a, b, host(0.99), host(0.99)],
        );
        launches(&actions).len()
    };
    assert_eq!(copies(None), 2);
    assert_eq!(copies(Some(3)), 1);
}

#[test]
fn a_host_its_record_excludes_gets_no_copy() {
    let mut core = core(3);
    core.set_tail_copies(true);
    let (risky, steady) = (host(0.3), host(0.99));
    for _ in 0..3 {
        let _ = core.on_overrun(start(), steady.peer);
    }
    let (_, actions) = running_then_survey(
        &mut core,
        long_batch(),
        std::slice::from_ref(&risky),
        &[risky.clone(), steady],
    );
    assert!(launches(&actions).is_empty(), "{actions:?}");
}
