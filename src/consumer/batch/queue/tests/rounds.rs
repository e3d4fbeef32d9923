//! Rounds in the queue's core with fake time: a batch waiting on a full
//! pool asks hosts when it is submitted and when something changes, never
//! on a clock, so its asks are bounded by its tasks whatever the wait and
//! the pool; a member's announcement that its slot is free is used within
//! a second, and a heartbeat saying what the queue knew is no news.

use super::super::rounds::{MemberNews, LOOK_EVERY_MAX};
use super::*;
use crate::model::state::State;
use std::collections::HashSet;

/// A host as a round reports it: `answered` when asked, else listed from
/// its summary; its slot `free` or not.
fn seen(peer: PeerId, answered: bool, free: bool) -> SurveyedHost {
    SurveyedHost {
        answered,
        summarised: !answered,
        tr: Some(0.9),
        slot_free: Some(free),
        state: Some(State::S1),
        ..SurveyedHost::new(peer)
    }
}

/// A pool of `size` members, each busy with someone else's work except
/// those in `free`.
struct Pool {
    peers: Vec<PeerId>,
    free: HashSet<PeerId>,
}

impl Pool {
    fn new(size: usize) -> Pool {
        Pool {
            peers: (0..size).map(|_| PeerId::random()).collect(),
            free: HashSet::new(),
        }
    }

    /// Answers a round as the driver's survey would: the first hosts not
    /// skipped that it may ask (free ones first, as the summaries rank
    /// them) answer; every other member is listed from its summary.
    fn answer(&self, most: u32, skip: &[PeerId]) -> Vec<SurveyedHost> {
        let mut order: Vec<PeerId> = self
            .peers
            .iter()
            .copied()
            .filter(|p| !skip.contains(p))
            .collect();
        order.sort_by_key(|p| !self.free.contains(p));
        let asked: HashSet<PeerId> = order.into_iter().take(most as usize).collect();
        self.peers
            .iter()
            .map(|p| seen(*p, asked.contains(p), self.free.contains(p)))
            .collect()
    }
}

/// What the fake driver counted over a run.
#[derive(Debug, Default)]
struct Cost {
    asks: u64,
    asking_rounds: u64,
    looks: u64,
    launched: Vec<(u32, PeerId)>,
}

/// Drives `core` second by second for `secs` as the consumer's loop would:
/// every member announces itself every `beat` seconds (spread over the
/// beat), rounds start when the core wants one and are answered at once.
fn run(core: &mut QueueCore, pool: &Pool, mut now: Now, secs: u64, beat: u64) -> (Now, Cost) {
    let mut cost = Cost::default();
    for _ in 0..secs {
        now = after(now, 1);
        let second = now.unix_secs as u64;
        for (i, peer) in pool.peers.iter().enumerate() {
            if (second + i as u64) % beat == 0 {
                let news = MemberNews {
                    peer: *peer,
                    slot_free: pool.free.contains(peer),
                    state: State::S1,
                };
                cost.launched.extend(launches(&core.on_member(now, news)));
            }
        }
        if !core.wants_survey(now) {
            continue;
        }
        let Some((most, skip)) = round_of(&core.start_survey(now)) else {
            continue;
        };
        let most = most.expect("a round always bounds its asks");
        if most == 0 {
            cost.looks += 1;
        } else {
            cost.asking_rounds += 1;
        }
        let hosts = pool.answer(most, &skip);
        cost.asks += hosts.iter().filter(|h| h.answered).count() as u64;
        cost.launched
            .extend(launches(&core.on_survey(now, Ok(hosts))));
    }
    (now, cost)
}

#[test]
fn a_batch_waiting_on_a_full_pool_asks_for_its_tasks_not_for_the_time_or_the_pool() {
    use crate::consumer::rank::ASKS_PER_TASK;
    const TASKS: i64 = 5;
    let bound = u64::from(ASKS_PER_TASK) * TASKS as u64;
    let mut costs = Vec::new();
    for (pool_size, hours) in [(50, 1), (50, 4), (1_000, 1)] {
        let pool = Pool::new(pool_size);
        let mut core = core(3);
        let now = start();
        let (id, _) = admit(&mut core, now, batch(TASKS));
        let (_, cost) = run(&mut core, &pool, now, hours * 3600, 300);
        assert!(cost.launched.is_empty(), "no host was ever free");
        assert_eq!(core.counts(id).unwrap().queued, TASKS as u32);
        assert!(
            cost.asks <= bound,
            "{pool_size} members, {hours} h: {cost:?}, bound {bound}"
        );
        // It kept looking at the summaries, slower and slower: a few looks
        // to reach the longest wait, then one per it.
        let most_looks = 10 + hours * 3600 / LOOK_EVERY_MAX.as_secs();
        assert!(
            (hours * 3600 / LOOK_EVERY_MAX.as_secs()..=most_looks).contains(&cost.looks),
            "{pool_size} members, {hours} h: {cost:?}"
        );
        assert_eq!(core.look_every(), LOOK_EVERY_MAX);
        costs.push(cost.asks);
    }
    // The same however long it waits and however large the pool.
    assert!(costs.windows(2).all(|w| w[0] == w[1]), "{costs:?}");
}

#[test]
fn a_member_whose_slot_frees_up_takes_a_waiting_task_within_a_second() {
    let mut pool = Pool::new(200);
    let mut core = core(3);
    // Tail copies (on by default) ask for the running task too (4 asks in
    // the last round instead of 2): this test counts a waiting task's.
    core.set_tail_copies(false);
    let now = start();
    let (id, _) = admit(&mut core, now, batch(2));
    let (now, waited) = run(&mut core, &pool, now, 3600, 300);
    assert!(waited.launched.is_empty());
    assert_eq!(core.look_every(), LOOK_EVERY_MAX, "looking slowly by now");

    // One member finishes someone else's job and says so.
    let freed = pool.peers[17];
    pool.free.insert(freed);
    let _ = core.on_member(
        now,
        MemberNews {
            peer: freed,
            slot_free: true,
            state: State::S1,
        },
    );
    assert_eq!(core.news_count(), 1);
    let (now, cost) = run(&mut core, &pool, now, 1, 10_000);
    assert_eq!(cost.launched, vec![(0, freed)], "{cost:?}");
    // The news round asked a few hosts for one member, not a task's worth
    // for every waiting task.
    assert!(cost.asks <= 2, "{cost:?}");
    assert_eq!(core.task(id, 0).unwrap().state, TaskState::Running);

    // The other task still waits: one round asks a task's worth more (the
    // round after one that started work); the members' heartbeats, the
    // freed one's included, ask nothing more.
    let (_, later) = run(&mut core, &pool, now, 3600, 300);
    assert!(later.launched.is_empty());
    assert_eq!(later.asking_rounds, 1, "{later:?}");
    assert!(later.asks <= 2, "{later:?}");
}

#[test]
fn a_look_at_the_summaries_that_shows_a_slot_newly_free_asks_it() {
    let mut pool = Pool::new(30);
    let mut core = core(3);
    let now = start();
    let (_, _) = admit(&mut core, now, batch(1));
    // No announcement reaches the queue (its channel was full): only looks.
    let (now, cost) = run(&mut core, &pool, now, 600, u64::MAX);
    assert!(cost.launched.is_empty() && cost.looks > 0);
    let freed = pool.peers[3];
    pool.free.insert(freed);
    // The next look (at most the longest wait away) sees it free, and the
    // round after asks it.
    let (_, cost) = run(
        &mut core,
        &pool,
        now,
        LOOK_EVERY_MAX.as_secs() + 2,
        u64::MAX,
    );
    assert_eq!(cost.launched, vec![(0, freed)], "{cost:?}");
    assert!(cost.asks <= 2, "{cost:?}");
}

/// `batch status` keeps a running batch's estimate. Once every host runs
/// one of its tasks the next round asks none of them, and a later round may
/// find no host at all (no member heard of for a while); each host is still
/// weighed by its last answer, and the tasks running on them count as
/// running (each ends before any waiting task), not as waiting again.
#[test]
fn a_running_batchs_estimate_outlives_rounds_that_ask_no_host() {
    use crate::consumer::batch::estimate::estimate_batch;
    const TASKS: i64 = 8;
    let mut pool = Pool::new(3);
    pool.free = pool.peers.iter().copied().collect();
    let mut core = core(3);
    let mut now = start();
    let (id, _) = admit(&mut core, now, batch(TASKS));
    // The running tasks' ends and the waiting ones', as `batch status` shows them.
    let ends = |core: &QueueCore, now: Now| -> (Vec<f64>, Vec<f64>) {
        let (hosts, shape) = core
            .estimate_inputs(now, id)
            .expect("the batch runs: its estimate has inputs");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let estimate = estimate_batch(&hosts, &shape, now.unix_secs, &mut rng)
            .unwrap_or_else(|e| panic!("no estimate: {e}"));
        assert_eq!(estimate.tasks.len(), TASKS as usize);
        let state = |t: u32| core.task(id, t).unwrap().state;
        let of = |s: TaskState| {
            estimate
                .tasks
                .iter()
                .filter(|t| state(t.task) == s)
                .map(|t| t.end.p50)
                .collect::<Vec<f64>>()
        };
        (of(TaskState::Running), of(TaskState::Queued))
    };
    let check = |(running, waiting): (Vec<f64>, Vec<f64>), when: &str| {
        assert_eq!((running.len(), waiting.len()), (3, 5), "{when}");
        let latest = running.iter().copied().fold(0.0, f64::max);
        assert!(
            waiting.iter().all(|w| *w > latest),
            "{when}: a waiting task ends before a running one: {running:?} {waiting:?}"
        );
    };

    // The first round: every host answers and takes a task.
    let (most, skip) = round_of(&core.start_survey(now)).expect("work waits");
    let placed = launches(&core.on_survey(now, Ok(pool.answer(most.unwrap_or(0), &skip))));
    assert_eq!(placed.len(), 3);
    check(ends(&core, now), "after the round that placed them");

    // Work still waits, so another round comes: it skips the three hosts
    // (they run our tasks) and lists them from their summaries, asking none.
    now = after(now, 1);
    let (most, skip) = round_of(&core.start_survey(now)).expect("work still waits");
    assert!(pool.peers.iter().all(|p| skip.contains(p)), "{skip:?}");
    let hosts = pool.answer(most.unwrap_or(0), &skip);
    assert!(hosts.iter().all(|h| !h.answered));
    assert!(launches(&core.on_survey(now, Ok(hosts))).is_empty());
    check(ends(&core, now), "after a round that asked nobody");

    // Later a round finds no host at all.
    now = after(now, 30);
    assert!(round_of(&core.start_survey(now)).is_some());
    assert!(launches(&core.on_survey(now, Ok(Vec::new()))).is_empty());
    check(ends(&core, now), "after a round that found no host");
}

#[test]
fn news_heard_while_a_round_is_out_is_settled_by_its_answers() {
    let mut core = core(3);
    let now = start();
    let (first, _) = admit(&mut core, now, batch(1));
    let _ = core.start_survey(now);
    let (steady, flaky) = (host(0.99), host(0.5));
    // While the round is out, the steady host's announcement says its
    // slot is free: news, as the queue knew nothing of it yet.
    let _ = core.on_member(
        now,
        MemberNews {
            peer: steady.peer,
            slot_free: true,
            state: State::S1,
        },
    );
    assert_eq!(core.news_count(), 1);
    let actions = core.on_survey(now, Ok(vec![steady.clone(), flaky.clone()]));
    assert_eq!(launches(&actions), vec![(0, steady.peer)]);
    assert_eq!(core.news_count(), 0, "its answer settled it");

    // So no round of news asks the other host alone while the job runs
    // (its answers would become the queue's view), and a batch submitted
    // as the job ends goes to the host that answered best.
    let mut t = now;
    for _ in 0..5 {
        t = after(t, 1);
        if !core.wants_survey(t) {
            continue;
        }
        if let Some((most, skip)) = round_of(&core.start_survey(t)) {
            let asked: Vec<SurveyedHost> = [&steady, &flaky]
                .into_iter()
                .filter(|h| !skip.contains(&h.peer))
                .take(most.unwrap_or(u32::MAX) as usize)
                .cloned()
                .collect();
            let _ = core.on_survey(t, Ok(asked));
        }
    }
    let _ = core.on_ended(t, first, 0, steady.peer, landed(0));
    let (_, actions) = admit(&mut core, t, batch(1));
    assert_eq!(launches(&actions), vec![(0, steady.peer)]);
}
