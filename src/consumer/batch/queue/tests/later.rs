//! Holds in the queue's core (issue 28, scope 1): a task that no free host
//! is likely to finish now waits for a host's later window, asks its host
//! when the window comes and starts there; a hold lapses when its host
//! leaves, and a task is never held past its deadline.

use super::*;
use crate::consumer::batch::estimate::BatchShape;

const H: i64 = 3600;

/// A queue with holds for later windows on (`[batch] later_windows`).
fn holding() -> QueueCore {
    let mut core = core(3);
    core.set_later_windows(true);
    core
}

/// A 9 h task, by its declared runtime.
fn long_batch() -> NewBatch {
    NewBatch {
        runtime_secs: 9 * H as u64,
        limit_secs: 12 * H as u64,
        ..batch(1)
    }
}

/// A host that answered the survey busy (running another consumer's job).
fn busy(tr: f64) -> SurveyedHost {
    SurveyedHost {
        slot_free: Some(false),
        ..host(tr)
    }
}

fn free(h: &SurveyedHost) -> SurveyedHost {
    SurveyedHost {
        slot_free: Some(true),
        ..h.clone()
    }
}

/// Admits a 9 h task at [`start`] and makes the first round, which finds
/// `hosts`: the batch and the round's actions.
fn first_round(core: &mut QueueCore, hosts: &[SurveyedHost]) -> (BatchId, Vec<Action>) {
    let now = start();
    let (id, _) = admit(core, now, long_batch());
    let _ = core.start_survey(now);
    (id, core.on_survey(now, Ok(hosts.to_vec())))
}

/// The later-window asks among the actions: `(peers, starts, length)`.
fn asks_later(actions: &[Action]) -> Vec<(Vec<PeerId>, Vec<i64>, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::AskLater {
                peers,
                starts_unix,
                length_secs,
                ..
            } => Some((peers.clone(), starts_unix.clone(), *length_secs)),
            _ => None,
        })
        .collect()
}

/// The job events the actions tell watchers of.
fn events(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) => e.event.clone(),
            _ => None,
        })
        .collect()
}

/// Each start asked, with the same TR except `good` from `from` on.
fn forecast(starts: &[i64], from: i64, bad: f64, good: f64) -> Vec<(i64, f64)> {
    starts
        .iter()
        .map(|&s| (s, if s >= from { good } else { bad }))
        .collect()
}

/// Admits a 9 h task while `a` (free, 0.15 for 9 h: its owner comes back
/// soon) and `b` (busy now; quiet from two hours on, as it answers) are the
/// pool, and hands the queue their answers about later windows. Returns
/// the batch, the time and the actions of the round after the answers.
fn held_for_b(
    core: &mut QueueCore,
    a: &SurveyedHost,
    b: &SurveyedHost,
) -> (BatchId, Now, Vec<Action>) {
    held_for_b_from(core, a, b, 2)
}

/// [`held_for_b`] with b quiet from `hours` on.
fn held_for_b_from(
    core: &mut QueueCore,
    a: &SurveyedHost,
    b: &SurveyedHost,
    hours: i64,
) -> (BatchId, Now, Vec<Action>) {
    let now = start();
    let (id, actions) = first_round(core, &[a.clone(), b.clone()]);
    // Not started on the host that will be taken back: the hosts are asked
    // about later windows first.
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    let asked = asks_later(&actions);
    assert_eq!(asked.len(), 1, "{actions:#?}");
    let (peers, starts, length) = asked[0].clone();
    assert_eq!(length, 9 * H as u64);
    assert!(peers.contains(&a.peer) && peers.contains(&b.peer));
    assert!(starts.iter().all(|&s| s > now.unix_secs));

    let from = now.unix_secs + hours * H;
    let now = after(now, 1);
    let answers = vec![
        (a.peer, forecast(&starts, from, 0.15, 0.15)),
        (b.peer, forecast(&starts, from, 0.2, 0.85)),
    ];
    let _ = core.on_later(now, length, answers);
    assert!(core.wants_survey(now), "the answers make a round");
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    (id, now, actions)
}

#[test]
fn a_task_no_free_host_can_finish_waits_for_a_later_window_and_starts_there() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (id, now, actions) = held_for_b(&mut core, &a, &b);
    // Held for b's window two hours on, not started on a.
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    let view = core.view(now, id).unwrap();
    let hold = &view.holds[&0];
    assert_eq!(hold.host, b.peer.to_base58());
    assert_eq!(hold.start_unix, start().unix_secs + 2 * H);
    assert!((hold.p - 0.85).abs() < 1e-9, "{hold:?}");
    assert_eq!(view.tasks[0].state, TaskState::Queued);
    let told = events(&actions);
    assert!(
        told.iter()
            .any(|e| e.starts_with("waiting for host") && e.contains("(P 0.85)")),
        "{told:?}"
    );

    // An hour on, a is free again and b still busy: the task keeps waiting.
    let now = after(start(), H as u64);
    let _ = core.tick(now);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    assert!(events(&actions).is_empty(), "the same hold: {actions:#?}");

    // The window comes: the next round asks b, and nobody else.
    let now = after(start(), 2 * H as u64);
    let _ = core.tick(now);
    assert!(core.wants_survey(now));
    let survey = core.start_survey(now);
    let skip = survey
        .iter()
        .find_map(|a| match a {
            Action::Survey { skip, .. } => Some(skip.clone()),
            _ => None,
        })
        .expect("a round");
    assert!(
        skip.contains(&a.peer) && !skip.contains(&b.peer),
        "{skip:?}"
    );
    // b is free: the task starts there.
    let actions = core.on_survey(now, Ok(vec![a.clone(), free(&b)]));
    assert_eq!(launches(&actions), vec![(0, b.peer)]);
    let view = core.view(now, id).unwrap();
    assert!(view.holds.is_empty());
    assert_eq!(view.tasks[0].state, TaskState::Running);
}

/// `batch status`'s estimate weighs the hold: the held task starts in
/// b's window (two hours on, P 0.85) in the runs, not now on a (0.15).
/// Before, the estimate was made from the hosts as they were, and a took
/// the task at once in every run.
#[test]
fn the_estimate_of_a_held_task_starts_it_in_its_window() {
    use crate::consumer::batch::estimate::{estimate_batch, HeldShape};
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (id, now, _) = held_for_b(&mut core, &a, &b);
    let (hosts, shape) = core.estimate_inputs(now, id).expect("a live batch");
    let window_in = (start().unix_secs + 2 * H - now.unix_secs) as f64;
    assert_eq!(
        shape.holds,
        vec![HeldShape {
            task: 0,
            host: b.peer,
            start_in_secs: window_in,
            p: 0.85,
        }]
    );
    let estimate = |shape: &crate::consumer::batch::estimate::BatchShape| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        estimate_batch(&hosts, shape, now.unix_secs, &mut rng).expect("an estimate")
    };
    let held = estimate(&shape).tasks[0].end;
    // Never before the window opens (the runs draw the runtime around its
    // estimate, with the wide spread of a batch none of whose tasks has
    // landed yet: p10 is a short draw).
    assert!(held.p10 > window_in, "{held:?}");
    // The same estimate without the hold (what `batch status` said
    // before): a takes the task now and loses it to its owner in most
    // runs, and b is taken to be busy for a run's length; the median end
    // is more than twice as far.
    let unheld = estimate(&BatchShape {
        holds: Vec::new(),
        ..shape.clone()
    })
    .tasks[0]
        .end;
    assert!(held.p50 < 0.5 * unheld.p50, "{held:?} {unheld:?}");
}

#[test]
fn a_held_task_starts_at_once_where_a_better_host_frees() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (id, now, _) = held_for_b(&mut core, &a, &b);
    assert!(core.view(now, id).unwrap().holds.contains_key(&0));
    // A steady host joins half an hour on: no reason to wait for b.
    let c = host(0.95);
    let now = after(now, 1800);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone(), c.clone()]));
    assert_eq!(launches(&actions), vec![(0, c.peer)]);
    assert!(core.view(now, id).unwrap().holds.is_empty());
}

/// A task held two hours in all (the rule's `max_held_secs`, as the
/// simulator's `windows`) is placed as usual: here on a, the only free
/// host, when b is still busy as its window two hours on comes; watchers
/// are told why. Before the queue counted the time held, it was held
/// again for b's next window.
#[test]
fn a_task_held_two_hours_in_all_is_placed_as_usual() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (id, now, actions) = held_for_b_from(&mut core, &a, &b, 2);
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    assert!(core.view(now, id).unwrap().holds.contains_key(&0));
    // An hour held: still waiting for b.
    let now = after(start(), H as u64);
    let _ = core.tick(now);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    assert!(core.view(now, id).unwrap().holds.contains_key(&0));
    // Two hours held, b busy still: started on a, the hold gone.
    let now = after(start(), 2 * H as u64 + 60);
    let _ = core.tick(now);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert_eq!(launches(&actions), vec![(0, a.peer)], "{actions:#?}");
    let told = events(&actions);
    assert!(
        told.iter().any(|e| e == "hold ended: held long enough"),
        "{told:?}"
    );
    assert!(core.view(now, id).unwrap().holds.is_empty());
}

#[test]
fn a_hold_lapses_when_its_host_leaves_and_the_task_is_placed_as_usual() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (id, now, _) = held_for_b(&mut core, &a, &b);
    assert!(core.view(now, id).unwrap().holds.contains_key(&0));
    // b leaves the pool: the hold ends, and a is all there is.
    let now = after(now, 1800);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone()]));
    assert_eq!(launches(&actions), vec![(0, a.peer)]);
    let told = events(&actions);
    assert!(
        told.iter().any(|e| e == "hold ended: its host left"),
        "{told:?}"
    );
}

/// The events the actions tell watchers of, with the hold each carries.
fn events_with_holds(actions: &[Action]) -> Vec<(String, Option<HoldView>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Emit(e) => e.event.clone().map(|text| (text, e.hold.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn watchers_are_told_the_window_a_task_is_held_for_and_when_the_hold_ends() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (_, now, actions) = held_for_b(&mut core, &a, &b);
    // The hold's news carries the window itself (what `submit` reads to
    // stop its queue limit), not only its words.
    let told = events_with_holds(&actions);
    let (_, hold) = told
        .iter()
        .find(|(e, _)| e.starts_with("waiting for host"))
        .unwrap_or_else(|| panic!("{told:?}"));
    let hold = hold.as_ref().unwrap_or_else(|| panic!("{told:?}"));
    assert_eq!(hold.host, b.peer.to_base58());
    assert_eq!(hold.start_unix, start().unix_secs + 2 * H);
    assert!((hold.p - 0.85).abs() < 1e-9, "{hold:?}");
    // b leaves: the news of the lapse carries no hold.
    let now = after(now, 1800);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone()]));
    let told = events_with_holds(&actions);
    assert!(
        told.iter()
            .any(|(e, h)| e == "hold ended: its host left" && h.is_none()),
        "{told:?}"
    );
}

#[test]
fn watchers_are_told_when_a_held_task_starts_now_on_a_host_about_as_good() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (_, now, _) = held_for_b(&mut core, &a, &b);
    let c = host(0.95);
    let now = after(now, 1800);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone(), c.clone()]));
    assert_eq!(launches(&actions), vec![(0, c.peer)]);
    // The hold's end is news of its own, carrying no hold, before the start.
    let told = events_with_holds(&actions);
    assert!(
        told.iter()
            .any(|(e, h)| e.starts_with("hold ended") && h.is_none()),
        "{told:?}"
    );
}

#[test]
fn no_task_is_held_for_a_window_past_its_deadline() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let now = start();
    // Nine hours of work, nine and a half to the deadline: nothing later
    // fits (the first later start asked is an hour on).
    let new = NewBatch {
        deadline_unix: Some(now.unix_secs + 9 * H + H / 2),
        ..long_batch()
    };
    let (_, _) = admit(&mut core, now, new);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert!(asks_later(&actions).is_empty());
    assert_eq!(launches(&actions), vec![(0, a.peer)]);
}

#[test]
fn a_task_a_free_host_is_likely_to_finish_is_never_held() {
    let mut core = holding();
    let (a, b) = (host(0.8), busy(0.9));
    let (_, actions) = first_round(&mut core, &[a.clone(), b.clone()]);
    assert!(asks_later(&actions).is_empty(), "nobody asked about later");
    assert_eq!(launches(&actions), vec![(0, a.peer)]);
}

/// Holds are on unless the node's config turns them off.
#[test]
fn a_queue_not_told_otherwise_holds_a_task_no_free_host_can_finish() {
    let mut core = default_core(3);
    let (a, b) = (host(0.15), busy(0.9));
    let (_, actions) = first_round(&mut core, &[a.clone(), b.clone()]);
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    assert_eq!(asks_later(&actions).len(), 1, "{actions:#?}");
}

#[test]
fn with_later_windows_off_the_task_starts_where_it_will_be_killed() {
    let mut core = core(3);
    let (a, b) = (host(0.15), busy(0.9));
    let (_, actions) = first_round(&mut core, &[a.clone(), b.clone()]);
    assert!(asks_later(&actions).is_empty());
    assert_eq!(launches(&actions), vec![(0, a.peer)]);
}

/// A hold is bounded in time too: when its window comes and the round that
/// asks its host hears nothing from it (the ask timed out; no later round
/// happens to ask it), the hold lapses a little after the window came
/// instead of keeping the task off every other host for good.
#[test]
fn a_hold_whose_host_is_not_heard_when_its_window_comes_lapses() {
    let mut core = holding();
    let (a, b) = (host(0.15), busy(0.9));
    let (id, _, _) = held_for_b(&mut core, &a, &b);
    // The window comes; the round asks b, whose ask times out.
    let now = after(start(), 2 * H as u64);
    let _ = core.tick(now);
    let _ = core.start_survey(now);
    let silent = SurveyedHost {
        answered: false,
        error: Some("timed out".into()),
        ..b.clone()
    };
    let actions = core.on_survey(now, Ok(vec![a.clone(), silent.clone()]));
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    // A while later, nothing has been heard from b: the hold for its
    // window is gone, and watchers are told why.
    let later = after(now, 15 * 60);
    let actions = core.tick(later);
    let view = core.view(later, id).unwrap();
    assert!(
        view.holds
            .get(&0)
            .is_none_or(|h| h.start_unix != start().unix_secs + 2 * H),
        "still held for the window that came unheard: {:?}",
        view.holds
    );
    let told = events(&actions);
    assert!(
        told.iter().any(|e| e.starts_with("hold ended:")),
        "{told:?}"
    );
}

/// `[batch] later_unit_secs = 60`: the hosts are asked about windows 1 to
/// 24 minutes on instead of hours, and a hold waits minutes; the rest of
/// the rule is the same. Units outside a minute to an hour are clamped.
#[test]
fn a_minute_unit_asks_about_windows_minutes_on_and_the_task_waits_minutes() {
    let mut core = holding();
    core.set_later_unit(60);
    let (a, b) = (host(0.15), busy(0.9));
    let now = start();
    let (id, _) = admit(&mut core, now, long_batch());
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    let (_, starts, length) = asks_later(&actions)[0].clone();
    let minutes: Vec<i64> = starts.iter().map(|s| (s - now.unix_secs) / 60).collect();
    assert_eq!(minutes, vec![1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24]);
    assert!(starts.iter().all(|s| (s - now.unix_secs) % 60 == 0));

    // b is busy now, and a window within ten minutes of its last reading
    // is answered from that (0); from twelve minutes on, from its habit.
    let from = now.unix_secs + 12 * 60;
    let now = after(now, 1);
    let answers = vec![
        (a.peer, forecast(&starts, from, 0.15, 0.15)),
        (b.peer, forecast(&starts, from, 0.0, 0.9)),
    ];
    let _ = core.on_later(now, length, answers);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert!(launches(&actions).is_empty(), "{actions:#?}");
    let hold = core.view(now, id).unwrap().holds[&0].clone();
    assert_eq!(hold.host, b.peer.to_base58());
    assert_eq!(hold.start_unix, from);
    assert!(
        events(&actions)
            .iter()
            .any(|e| e.contains("window in 0h12")),
        "{actions:#?}"
    );

    // Twelve minutes on the window comes: b is asked, free, and runs it.
    let now = after(start(), 12 * 60);
    let _ = core.tick(now);
    assert!(core.wants_survey(now));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), free(&b)]));
    assert_eq!(launches(&actions), vec![(0, b.peer)]);

    // A unit below a minute is taken as a minute, above an hour as an hour.
    for (unit, first) in [(1, 60), (86_400, 3600)] {
        let mut core = holding();
        core.set_later_unit(unit);
        let now = start();
        let _ = admit(&mut core, now, long_batch());
        let _ = core.start_survey(now);
        let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
        let (_, starts, _) = asks_later(&actions)[0].clone();
        assert_eq!(starts[0] - now.unix_secs, first, "unit {unit}");
    }
}
