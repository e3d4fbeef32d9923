//! The queue's core driven alone, one input at a time: no tokio, no store,
//! no files, the time given with each input. Each test reads the actions
//! the core returns and the task records it keeps.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use rand::SeedableRng;

use super::state::{Action, Now, QueueCore};
use super::trust::{Trust, Verdict};
use super::types::{HoldView, NewBatch};
use crate::consumer::batch::attempt::AttemptEnd;
use crate::consumer::batch::policy::PolicyName;
use crate::consumer::batch::record::{TaskCopy, TaskState};
use crate::consumer::batch::spec::{self, Sweep, TaskTemplate};
use crate::consumer::batch::verify::{LandedCopy, VerifySpec};
use crate::consumer::job_pool::JobSettings;
use crate::consumer::survey::SurveyedHost;
use crate::model::ids::BatchId;

fn start() -> Now {
    Now {
        mono: Instant::now(),
        unix_secs: 1_700_000_000,
        unix_ms: 1_700_000_000_000,
    }
}

fn after(now: Now, secs: u64) -> Now {
    Now {
        mono: now.mono + Duration::from_secs(secs),
        unix_secs: now.unix_secs + secs as i64,
        unix_ms: now.unix_ms + secs * 1000,
    }
}

fn core(max_retries: u32) -> QueueCore {
    let mut core = default_core(max_retries);
    // Holds for later windows off: most tests here place tasks on hosts
    // whose TR is low on purpose (risky hosts, owners' kills, copies), and
    // weigh something else than holds; the holds' own tests (`later`)
    // turn them on, and one checks the default.
    core.set_later_windows(false);
    core
}

/// A queue as the node makes it, every default as it is.
fn default_core(max_retries: u32) -> QueueCore {
    let settings = JobSettings {
        max_retries,
        ..JobSettings::default()
    };
    QueueCore::new(
        Path::new("/queue"),
        settings,
        rand_chacha::ChaCha8Rng::seed_from_u64(7),
        Trust::default(),
        start(),
    )
}

/// A free host that answered the survey with `tr`.
fn host(tr: f64) -> SurveyedHost {
    SurveyedHost {
        answered: true,
        tr: Some(tr),
        slot_free: Some(true),
        ..SurveyedHost::new(PeerId::random())
    }
}

/// `new` with each task checked by two agreeing copies of two.
fn checked_by_two(mut new: NewBatch) -> NewBatch {
    new.verify = VerifySpec {
        replicas: 2,
        quorum: 2,
        ..Default::default()
    }
    .checked()
    .unwrap();
    new
}

/// A batch of `tasks` tasks running `true`, placed by TR.
fn batch(tasks: i64) -> NewBatch {
    NewBatch {
        verify: VerifySpec::default(),
        image: None,
        name: None,
        template: TaskTemplate {
            argv: vec!["true".into()],
            env: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        },
        sweep: if tasks == 1 {
            Sweep::One
        } else {
            Sweep::Range {
                start: 0,
                end: tasks,
            }
        },
        mem_mib: 10,
        runtime_secs: 60,
        limit_secs: 600,
        max_running: None,
        output_dir: None,
        policy: PolicyName::Tr,
        deadline_unix: None,
        checkpoint: None,
    }
}

/// Checks, makes and admits `new` as the driver does (minus the store).
fn admit(core: &mut QueueCore, now: Now, new: NewBatch) -> (BatchId, Vec<Action>) {
    let tasks = spec::expand(&new.template, &new.sweep).unwrap();
    let (record, tasks, verify) = core.new_batch(now, new, tasks);
    let id = record.id;
    (id, core.admit(now, record, tasks, verify))
}

/// The hosts the actions launch attempts on, with their task, in order.
fn launches(actions: &[Action]) -> Vec<(u32, PeerId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch(l) => Some((l.task, l.plan.host)),
            _ => None,
        })
        .collect()
}

fn kills(actions: &[Action]) -> Vec<(u32, PeerId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Kill { task, host, .. } => Some((*task, *host)),
            _ => None,
        })
        .collect()
}

/// The task records the actions write through, in order.
fn persisted(actions: &[Action]) -> Vec<(u32, TaskState)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Persist { task, record, .. } => Some((*task, record.state)),
            _ => None,
        })
        .collect()
}

fn landed(exit_status: i32) -> AttemptEnd {
    AttemptEnd::Landed {
        exit_status,
        wall_secs: 1.0,
        usage: None,
        missing: Vec::new(),
    }
}

#[test]
fn a_task_killed_on_its_host_is_retried_on_another_and_a_cancel_kills_the_retry() {
    let mut core = core(3);
    let now = start();
    let (id, actions) = admit(&mut core, now, batch(1));
    assert!(launches(&actions).is_empty(), "no survey yet, no host");
    assert!(core.wants_survey(now));
    let actions = core.start_survey(now);
    assert!(matches!(actions.as_slice(), [Action::Survey { query: q, .. }] if q.window_secs == 60));
    assert!(!core.wants_survey(now), "one survey at a time");

    let (good, worse) = (host(0.9), host(0.5));
    let actions = core.on_survey(now, Ok(vec![worse.clone(), good.clone()]));
    assert_eq!(
        launches(&actions),
        vec![(0, good.peer)],
        "the best TR first"
    );
    assert_eq!(persisted(&actions), vec![(0, TaskState::Running)]);

    // The owner's load kills the guest: the task goes back to the queue,
    // that host avoided.
    let now = after(now, 5);
    let killed = AttemptEnd::HostFailed("killed: S3".into());
    let actions = core.on_ended(now, id, 0, good.peer, killed);
    assert_eq!(persisted(&actions), vec![(0, TaskState::Queued)]);
    assert!(
        launches(&actions).is_empty(),
        "a failure waits for a survey"
    );
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.avoid, vec![good.peer.to_base58()]);
    assert_eq!(t.reason.as_deref(), Some("killed: S3"));

    let now = after(now, 1);
    assert!(core.wants_survey(now), "a waiting task asks for a survey");
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![worse.clone(), good.clone()]));
    assert_eq!(
        launches(&actions),
        vec![(0, worse.peer)],
        "retried elsewhere"
    );
    assert_eq!(core.task(id, 0).unwrap().attempts, 2);

    // A cancel kills the retry on its host; its end cancels the task.
    let record = core.cancel_record(id).unwrap();
    assert!(record.cancelled);
    let actions = core.cancel_tasks(now, id);
    assert_eq!(kills(&actions), vec![(0, worse.peer)]);
    let actions = core.on_ended(now, id, 0, worse.peer, AttemptEnd::Cancelled);
    assert_eq!(persisted(&actions), vec![(0, TaskState::Cancelled)]);
    assert!(core.counts(id).unwrap().finished());
}

#[test]
fn the_timer_runs_while_a_task_is_not_ended_and_stops_when_the_last_lands() {
    let mut core = core(3);
    let now = start();
    assert!(!core.wants_ticks(), "an idle queue has nothing to watch");
    let (id, _) = admit(&mut core, now, batch(2));
    assert!(core.wants_ticks(), "queued tasks");
    let (a, b) = (host(0.9), host(0.8));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert_eq!(launches(&actions).len(), 2);
    let _ = core.on_ended(now, id, 0, a.peer, landed(0));
    assert!(core.wants_ticks(), "task 1 still runs");
    let _ = core.on_ended(after(now, 1), id, 1, b.peer, landed(0));
    assert!(core.counts(id).unwrap().finished());
    assert!(!core.wants_ticks(), "every task ended: the timer stops");

    // A cancelled batch's attempt still in flight keeps it until it ends.
    let now = after(now, 60);
    let (id, _) = admit(&mut core, now, batch(1));
    assert!(core.wants_survey(now));
    let _ = core.start_survey(now);
    let c = host(0.9);
    let actions = core.on_survey(now, Ok(vec![c.clone()]));
    assert_eq!(launches(&actions), vec![(0, c.peer)]);
    let _ = core.cancel_record(id).unwrap();
    let _ = core.cancel_tasks(after(now, 1), id);
    assert!(core.wants_ticks(), "the kill is not confirmed yet");
    let _ = core.on_ended(after(now, 2), id, 0, c.peer, AttemptEnd::Cancelled);
    assert!(!core.wants_ticks());
}

#[test]
fn retries_stop_after_max_retries_failed_hosts() {
    let mut core = core(1);
    let now = start();
    let (id, _) = admit(&mut core, now, batch(1));
    let (a, b) = (host(0.9), host(0.8));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert_eq!(launches(&actions), vec![(0, a.peer)]);
    let _ = core.on_ended(now, id, 0, a.peer, AttemptEnd::HostFailed("gone".into()));
    let now = after(now, 1);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert_eq!(launches(&actions), vec![(0, b.peer)]);
    let actions = core.on_ended(now, id, 0, b.peer, AttemptEnd::HostFailed("gone".into()));
    assert_eq!(persisted(&actions), vec![(0, TaskState::Failed)]);
    let reason = core.task(id, 0).unwrap().reason.clone().unwrap();
    assert!(reason.contains("no retries left"), "{reason}");
}

#[test]
fn a_task_whose_deadline_is_at_risk_gets_a_copy_and_the_first_to_land_wins() {
    let mut core = core(3);
    let now = start();
    let mut new = batch(1);
    new.deadline_unix = Some(now.unix_secs + 120);
    let (id, _) = admit(&mut core, now, new);
    // Only a host that is likely to fail within the task's run answers.
    let shaky = host(0.05);
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![shaky.clone()]));
    assert_eq!(launches(&actions), vec![(0, shaky.peer)]);
    let nothing = core.tick(now);
    assert!(launches(&nothing).is_empty(), "no other host to copy to");

    // A reliable host shows up: the next check starts a second copy there.
    let now = after(now, 2);
    assert!(core.wants_survey(now), "a deadline keeps the view fresh");
    let _ = core.start_survey(now);
    let solid = host(1.0);
    let actions = core.on_survey(now, Ok(vec![shaky.clone(), solid.clone()]));
    assert!(launches(&actions).is_empty(), "no task waits");
    let actions = core.tick(now);
    assert_eq!(launches(&actions), vec![(0, solid.peer)], "the copy");
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.host.as_deref(), Some(shaky.peer.to_base58().as_str()));
    assert_eq!(t.copies.len(), 1);
    assert_eq!(t.copies[0].host, solid.peer.to_base58());
    let again = core.tick(after(now, 2));
    assert!(launches(&again).is_empty(), "one copy per task");

    // The copy lands first: it wins and the first attempt is killed.
    let now = after(now, 30);
    let actions = core.on_ended(now, id, 0, solid.peer, landed(0));
    assert_eq!(kills(&actions), vec![(0, shaky.peer)]);
    assert_eq!(persisted(&actions), vec![(0, TaskState::Done)]);
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.host.as_deref(), Some(solid.peer.to_base58().as_str()));
    assert!(t.copies.is_empty());
    // The killed attempt's end changes nothing.
    let actions = core.on_ended(now, id, 0, shaky.peer, AttemptEnd::Cancelled);
    assert!(persisted(&actions).is_empty());
    assert_eq!(core.task(id, 0).unwrap().state, TaskState::Done);
}

fn copy_of(host: PeerId, digest: u8) -> LandedCopy {
    LandedCopy {
        host: host.to_base58(),
        dir: PathBuf::from(format!("/queue/copies/{host}")),
        digest: [digest; 32],
        exit_status: 0,
        missing: Vec::new(),
        wall_secs: 1.0,
    }
}

#[test]
fn two_agreeing_copies_decide_a_verified_task_and_the_hosts_are_credited() {
    let mut core = core(3);
    let now = start();
    let new = checked_by_two(batch(1));
    let (id, _) = admit(&mut core, now, new);
    let (a, b) = (host(0.9), host(0.8));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone()]));
    assert_eq!(
        launches(&actions),
        vec![(0, a.peer), (0, b.peer)],
        "two copies"
    );
    for action in &actions {
        if let Action::Launch(l) = action {
            assert!(
                l.plan
                    .result_dir
                    .starts_with(format!("/queue/{id}/copies/0")),
                "a copy lands aside: {}",
                l.plan.result_dir.display()
            );
        }
    }

    let actions = core.on_ended(now, id, 0, a.peer, landed(0));
    let judge = actions.iter().find_map(|a| match a {
        Action::Judge(j) => Some(j),
        _ => None,
    });
    let judge = judge.expect("the landed copy is judged");
    assert_eq!(judge.landing.host, a.peer.to_base58());
    assert!(judge.earlier.is_empty());
    let judged = Verdict::Judged {
        copy: Ok(copy_of(a.peer, 1)),
        agrees_with: Vec::new(),
    };
    let actions = core.on_verdict(now, id, 0, judged);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Promote { .. })),
        "one copy is no quorum"
    );
    assert_eq!(core.task(id, 0).unwrap().state, TaskState::Running);

    let actions = core.on_ended(now, id, 0, b.peer, landed(0));
    let earlier = actions.iter().find_map(|a| match a {
        Action::Judge(j) => Some(j.earlier.len()),
        _ => None,
    });
    assert_eq!(earlier, Some(1), "judged against the first copy");
    let judged = Verdict::Judged {
        copy: Ok(copy_of(b.peer, 1)),
        agrees_with: vec![0],
    };
    let actions = core.on_verdict(now, id, 0, judged);
    let reputation: Vec<(PeerId, bool)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Reputation { peer, valid } => Some((*peer, *valid)),
            _ => None,
        })
        .collect();
    assert_eq!(reputation, vec![(a.peer, true), (b.peer, true)]);
    let promote = actions.iter().find_map(|a| match a {
        Action::Promote {
            from,
            to,
            provenance,
            ..
        } => Some((from.clone(), to.clone(), provenance.agreed.clone())),
        _ => None,
    });
    let (from, to, agreed) = promote.expect("the quorum's copy is promoted");
    assert_eq!(from, copy_of(a.peer, 1).dir);
    assert_eq!(to, core.results_dir(id).join("0"));
    assert_eq!(agreed, vec![a.peer.to_base58(), b.peer.to_base58()]);
    assert_eq!(core.reputation()[&a.peer].valid, 1);

    let actions = core.on_verdict(now, id, 0, Verdict::Promoted(Ok(())));
    assert_eq!(persisted(&actions), vec![(0, TaskState::Done)]);
    assert!(actions.iter().any(|a| matches!(a, Action::Flush)));
    assert!(core.counts(id).unwrap().finished());
}

#[test]
fn after_a_restart_running_tasks_are_reattached_and_one_with_no_host_is_queued_again() {
    let now = start();
    // What an earlier run left in the store: task 0 running on a host with
    // a second copy elsewhere, task 1 handed over to nobody yet, task 2
    // waiting.
    let (a, b, c) = (host(0.9), host(0.8), host(0.7));
    let (record, mut tasks) = {
        let scratch = core(3);
        let new = batch(3);
        let specs = spec::expand(&new.template, &new.sweep).unwrap();
        let (record, tasks, _) = scratch.new_batch(now, new, specs);
        (record, tasks)
    };
    let id = record.id;
    tasks[0].state = TaskState::Running;
    tasks[0].attempts = 2;
    tasks[0].host = Some(a.peer.to_base58());
    tasks[0].job_id = Some(id.job_id(0, 0));
    tasks[0].copies.push(TaskCopy {
        host: b.peer.to_base58(),
        job_id: id.job_id(0, 1),
        started_unix: now.unix_secs,
    });
    tasks[1].state = TaskState::Running;

    let mut core = core(3);
    let actions = core.restore_batch(now, record, tasks);
    let reattached: Vec<(u32, PeerId, String)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Reattach { task, plan, .. } => {
                Some((*task, plan.host, plan.job_id.to_string()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        reattached,
        vec![
            (0, a.peer, id.job_id(0, 0).to_string()),
            (0, b.peer, id.job_id(0, 1).to_string())
        ]
    );
    assert_eq!(persisted(&actions), vec![(1, TaskState::Queued)]);
    assert!(launches(&actions).is_empty());

    // The hosts still busy with task 0 take nothing; a free one takes the
    // lowest waiting task.
    assert!(core.wants_survey(now));
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(vec![a.clone(), b.clone(), c.clone()]));
    assert_eq!(launches(&actions), vec![(1, c.peer)]);
    let view = core.view(now, id).unwrap();
    assert_eq!((view.counts.running, view.counts.queued), (2, 1));
}

#[test]
fn a_disagreement_asks_for_a_third_copy_and_the_liar_gets_no_more_of_the_batch() {
    let mut core = core(3);
    let now = start();
    let new = checked_by_two(batch(1));
    let (id, _) = admit(&mut core, now, new);
    let (a, liar, c) = (host(0.9), host(0.8), host(0.7));
    let pool = vec![a.clone(), liar.clone(), c.clone()];
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(pool.clone()));
    assert_eq!(
        launches(&actions),
        vec![(0, a.peer), (0, liar.peer)],
        "two copies, the third host idle"
    );
    let _ = core.on_ended(now, id, 0, a.peer, landed(0));
    let _ = core.on_verdict(
        now,
        id,
        0,
        Verdict::Judged {
            copy: Ok(copy_of(a.peer, 1)),
            agrees_with: Vec::new(),
        },
    );
    let _ = core.on_ended(now, id, 0, liar.peer, landed(0));
    let actions = core.on_verdict(
        now,
        id,
        0,
        Verdict::Judged {
            copy: Ok(copy_of(liar.peer, 2)),
            agrees_with: Vec::new(),
        },
    );
    assert!(!actions.iter().any(|a| matches!(a, Action::Promote { .. })));
    assert_eq!(core.task(id, 0).unwrap().state, TaskState::Running);
    let disputed = core.trust.disputed(id);
    assert!(disputed.contains(&a.peer.to_base58()) && disputed.contains(&liar.peer.to_base58()));

    // The next survey sends a third copy to the host that has run none.
    let now = after(now, 1);
    assert!(core.wants_survey(now), "a task wants another copy");
    let _ = core.start_survey(now);
    let actions = core.on_survey(now, Ok(pool));
    assert_eq!(launches(&actions), vec![(0, c.peer)]);
    let _ = core.on_ended(now, id, 0, c.peer, landed(0));
    let actions = core.on_verdict(
        now,
        id,
        0,
        Verdict::Judged {
            copy: Ok(copy_of(c.peer, 1)),
            agrees_with: vec![0],
        },
    );
    let reputation: Vec<(PeerId, bool)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Reputation { peer, valid } => Some((*peer, *valid)),
            _ => None,
        })
        .collect();
    assert_eq!(
        reputation,
        vec![(a.peer, true), (liar.peer, false), (c.peer, true)]
    );
    let tainted: Vec<PeerId> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Taint { peer, .. } => Some(*peer),
            _ => None,
        })
        .collect();
    assert_eq!(tainted, vec![liar.peer], "written through for a restart");
    let order: Vec<PeerId> = core
        .trust
        .order(id, vec![(a.peer, ()), (liar.peer, ()), (c.peer, ())])
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(order, vec![a.peer, c.peer], "the liar is left out");
}

/// A queue with one batch of one task whose results are copied out to
/// `/out/{batch}`, and one solid host the survey found.
fn one_task_copied_out_to_a_dir() -> (QueueCore, Now, BatchId, SurveyedHost) {
    let mut core = core(3);
    let now = start();
    let mut new = batch(1);
    new.output_dir = Some(PathBuf::from("/out/{batch}"));
    let (id, _) = admit(&mut core, now, new);
    let solid = host(1.0);
    let _ = core.start_survey(now);
    let _ = core.on_survey(now, Ok(vec![solid.clone()]));
    (core, now, id, solid)
}

#[test]
fn a_landed_result_is_copied_out_and_waiters_are_answered_when_the_copy_ends() {
    let (mut core, now, id, solid) = one_task_copied_out_to_a_dir();
    assert!(!core.copying_out(id));
    let actions = core.on_ended(now, id, 0, solid.peer, landed(0));
    let copy = actions.iter().find_map(|a| match a {
        Action::CopyOut { from, to, .. } => Some((from.clone(), to.clone())),
        _ => None,
    });
    assert_eq!(
        copy,
        Some((
            core.results_dir(id).join("0"),
            PathBuf::from(format!("/out/{id}/0"))
        )),
        "`{{batch}}` is the batch's id"
    );
    assert!(core.copying_out(id), "`batch wait` waits for it");
    let actions = core.on_copied(now, id, 0, None);
    assert!(matches!(actions.as_slice(), [Action::CopiesDrained(b)] if *b == id));
    assert!(!core.copying_out(id));
}

/// A winner's files that cannot be moved into the task's results fail the
/// task with why, and nothing counts it as landed any more: a restart copies
/// no results that are not there to the output directory (nor does `batch
/// results`, which copies the tasks with an exit status).
#[test]
fn a_result_that_cannot_be_moved_in_fails_its_task_and_is_not_landed() {
    let (mut core, now, id, solid) = one_task_copied_out_to_a_dir();
    let _ = core.on_ended(now, id, 0, solid.peer, landed(0));
    let landed_tasks = |core: &QueueCore| core.landed_results(id).map(|(_, _, l)| l);
    assert_eq!(landed_tasks(&core), Some(vec![0]));
    let _ = core.on_land_failed(now, id, 0, "permission denied".into());
    let t = core.task(id, 0).unwrap();
    assert_eq!(t.state, TaskState::Failed);
    assert!(
        t.reason
            .as_deref()
            .is_some_and(|r| r.contains("permission denied")),
        "{:?}",
        t.reason
    );
    assert_eq!(
        landed_tasks(&core),
        Some(vec![]),
        "its results are not there"
    );
}

/// The hosts a survey action asks at most.
fn asks(actions: &[Action]) -> Option<u32> {
    actions.iter().find_map(|a| match a {
        Action::Survey { query, .. } => query.ask_at_most,
        _ => None,
    })
}

#[test]
fn a_placement_asks_a_few_hosts_per_placeable_task_never_the_pool() {
    use crate::consumer::rank::{ASKS_MAX, ASKS_PER_TASK};
    let mut q = core(3);
    // Tail copies (on by default) make each running task placeable too
    // (a copy): this test counts what placing the waiting ones asks.
    q.set_tail_copies(false);
    let now = start();
    let (_, _) = admit(&mut q, now, batch(3));
    assert_eq!(asks(&q.start_survey(now)), Some(3 * ASKS_PER_TASK));
    // Three of the pool's hosts answered (of the hundreds its summaries
    // name): they take the three tasks; nothing is left to place.
    let hosts = vec![host(0.9), host(0.8), host(0.7)];
    assert_eq!(launches(&q.on_survey(now, Ok(hosts))).len(), 3);
    assert_eq!(q.placeable_now(), 0);
    // A batch of ten thousand asks at most the bound, and a batch capped to
    // two running tasks asks for two.
    let mut big = core(3);
    let (_, _) = admit(&mut big, now, batch(10_000));
    assert_eq!(asks(&big.start_survey(now)), Some(ASKS_MAX));
    let mut capped = core(3);
    let mut two = batch(100);
    two.max_running = Some(2);
    let (_, _) = admit(&mut capped, now, two);
    assert_eq!(asks(&capped.start_survey(now)), Some(2 * ASKS_PER_TASK));
}

/// The hosts a survey action skips.
fn skipped(actions: &[Action]) -> Vec<PeerId> {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Survey { skip, .. } => Some(skip.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The round `actions` start: at most how many hosts it asks and whom it
/// skips; `None` when they start none.
fn round_of(actions: &[Action]) -> Option<(Option<u32>, Vec<PeerId>)> {
    actions.iter().find_map(|a| match a {
        Action::Survey { query, skip } => Some((query.ask_at_most, skip.clone())),
        _ => None,
    })
}

/// A member listed from its summary, not asked.
fn listed(tr: f64) -> SurveyedHost {
    SurveyedHost {
        summarised: true,
        tr: Some(tr),
        slot_free: Some(true),
        ..SurveyedHost::new(PeerId::random())
    }
}

#[test]
fn a_survey_skips_the_hosts_no_waiting_task_could_go_to() {
    let mut core = core(5);
    let now = start();
    let (id, _) = admit(&mut core, now, batch(2));
    // Nothing known yet: nobody skipped.
    assert!(skipped(&core.start_survey(now)).is_empty());
    let (a, b) = (host(0.9), host(0.8));
    let others = [listed(0.99), listed(0.7)];
    let mut hosts = vec![a.clone(), b.clone()];
    hosts.extend(others.iter().cloned());
    let started = launches(&core.on_survey(now, Ok(hosts.clone())));
    assert_eq!(started, vec![(0, a.peer), (1, b.peer)]);
    // Both fail on their hosts: each task now avoids its host, and the
    // hosts are free again. Task 0 may go to b or to the unasked ones,
    // task 1 to a or to them: nobody is skipped.
    let now = after(now, 11);
    let _ = core.on_ended(now, id, 0, a.peer, AttemptEnd::HostFailed("gone".into()));
    let _ = core.on_ended(now, id, 1, b.peer, AttemptEnd::HostFailed("gone".into()));
    assert!(skipped(&core.start_survey(now)).is_empty());
    // Task 1 fails on a too, task 0 on b: a and b are tried by every
    // waiting task, so the survey asks only hosts not yet tried.
    let mut started = launches(&core.on_survey(now, Ok(hosts.clone())));
    started.sort();
    assert_eq!(started, vec![(0, b.peer), (1, a.peer)]);
    let now = after(now, 11);
    let _ = core.on_ended(now, id, 0, b.peer, AttemptEnd::HostFailed("gone".into()));
    let _ = core.on_ended(now, id, 1, a.peer, AttemptEnd::HostFailed("gone".into()));
    let mut skip = skipped(&core.start_survey(now));
    skip.sort();
    let mut tried = vec![a.peer, b.peer];
    tried.sort();
    assert_eq!(skip, tried);
    // A host running our work is skipped too.
    let asked = SurveyedHost {
        answered: true,
        summarised: false,
        ..others[0].clone()
    };
    let started = launches(&core.on_survey(now, Ok(vec![asked, others[1].clone()])));
    assert_eq!(started, vec![(0, others[0].peer)]);
    let skip = skipped(&core.start_survey(now));
    assert!(skip.contains(&others[0].peer) && !skip.contains(&others[1].peer));
}

/// Runs a batch of `tasks` to its end through the core alone, as the driver
/// would, on a pool of `pool` free hosts: each survey is answered by the
/// first hosts it may ask (not skipped, at most `ask_at_most`), each launch
/// ends at once, failing on its host the first time when `fail_first`.
/// Returns the reliability queries the batch cost, and its surveys.
fn queries_for_a_batch(pool: usize, tasks: i64, fail_first: bool) -> (usize, usize) {
    let hosts: Vec<SurveyedHost> = (0..pool)
        .map(|i| host(0.5 + 0.4 * (i % 7) as f64 / 7.0))
        .collect();
    let mut core = core(3);
    let mut now = start();
    let (id, actions) = admit(&mut core, now, batch(tasks));
    let mut launched = launches(&actions);
    let (mut queries, mut surveys) = (0, 0);
    for _ in 0..1_000 {
        let all_done =
            (0..tasks as u32).all(|t| core.task(id, t).unwrap().state == TaskState::Done);
        if all_done {
            return (queries, surveys);
        }
        while let Some((task, peer)) = launched.pop() {
            let first = core.task(id, task).unwrap().attempts == 1;
            let end = if fail_first && first {
                AttemptEnd::HostFailed("gone".into())
            } else {
                landed(0)
            };
            launched.extend(launches(&core.on_ended(now, id, task, peer, end)));
        }
        now = after(now, 3);
        if !core.wants_survey(now) {
            continue;
        }
        let Some((most, skip)) = round_of(&core.start_survey(now)) else {
            continue;
        };
        let most = most.expect("placement always bounds its asks") as usize;
        let asked: Vec<SurveyedHost> = hosts
            .iter()
            .filter(|h| !skip.contains(&h.peer))
            .take(most)
            .cloned()
            .collect();
        surveys += 1;
        queries += asked.len();
        launched.extend(launches(&core.on_survey(now, Ok(asked))));
    }
    panic!("the batch of {tasks} never ended on {pool} hosts");
}

#[test]
fn a_submissions_queries_are_bounded_by_its_tasks_not_by_the_pool() {
    use crate::consumer::rank::ASKS_PER_TASK;
    for (tasks, fail_first) in [(1, false), (10, false), (10, true), (40, true)] {
        let failures = if fail_first { tasks as usize } else { 0 };
        let bound = ASKS_PER_TASK as usize * (tasks as usize + failures);
        let mut costs = Vec::new();
        for pool in [100, 1_000, 10_000] {
            let (queries, surveys) = queries_for_a_batch(pool, tasks, fail_first);
            assert!(
                queries <= bound,
                "{tasks} tasks (failing first: {fail_first}) on {pool} hosts: {queries} queries in {surveys} surveys, bound {bound}"
            );
            costs.push(queries);
        }
        // The same however large the pool.
        assert!(
            costs.windows(2).all(|w| w[0] == w[1]),
            "{tasks} tasks: {costs:?}"
        );
    }
}

#[cfg(test)]
mod copies;
#[cfg(test)]
mod images;
#[cfg(test)]
mod later;
#[cfg(test)]
mod owner;
#[cfg(test)]
mod record;
#[cfg(test)]
mod rounds;
#[cfg(test)]
mod tail;
