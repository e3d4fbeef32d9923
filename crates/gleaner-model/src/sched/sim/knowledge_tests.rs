//! Tests of placing from summaries (`knowledge.rs`) and from a sample of
//! leaves (`sample.rs`).

use super::super::{simulate, SimConfig, SimResult};
use super::*;
use crate::sched::curve::TrCurve;
use crate::sched::window::WindowRule;

/// Forecasts one fixed curve for every host.
struct Fixed(TrCurve);

impl Forecaster for Fixed {
    fn curve(&mut self, _trace: usize, _at: i64) -> TrCurve {
        self.0.clone()
    }
}

/// `n` hosts that never fail, at full speed.
fn steady_pool(n: usize) -> (Vec<SimHost>, Vec<Timeline>) {
    let cells = 10 * 1440;
    let timelines = vec![Timeline::from_cells(
        0,
        60,
        vec![0; cells],
        vec![1.0; cells],
    )];
    let hosts = (0..n)
        .map(|_| SimHost {
            timeline: 0,
            offset: 7 * 86_400,
            power: 1.0,
        })
        .collect();
    (hosts, timelines)
}

fn run(policy: Policy, knowledge: Knowledge, tasks: usize, hosts: usize) -> SimResult {
    let (hosts, timelines) = steady_pool(hosts);
    let config = SimConfig {
        policy,
        runtimes: vec![3600.0; tasks],
        checkpoint_cost_secs: 60.0,
        horizon_secs: 30.0 * 86_400.0,
        estimate_runs: 0,
        recheck_secs: 600.0,
        windows: WindowRule::default(),
        duel: Default::default(),
        knowledge,
        tail_copies: false,
        hold_gives_way: false,
        tail: Default::default(),
        claims: Default::default(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    simulate(
        &config,
        &hosts,
        &timelines,
        &mut Fixed(TrCurve::never_fails()),
        &mut rng,
        &mut |_| {},
    )
    .unwrap()
}

#[test]
fn a_round_asks_at_most_its_bound_so_a_full_start_takes_rounds() {
    // Twenty steady hosts, twenty 1 h tasks. Knowing everything, the
    // consumer starts them all at once; asking two hosts a round, one
    // round every 2 s, it needs ten rounds to start them.
    let full = run(Policy::Proactive, Knowledge::Full, 20, 20);
    assert_eq!(full.makespan_secs, Some(3600.0));
    assert_eq!(full.knowledge, "full");
    assert!(full.probe.is_none());
    let plan = SummaryPlan {
        asks_per_task: 1,
        asks_max: 2,
        ..SummaryPlan::new(300.0)
    };
    for policy in [Policy::Proactive, Policy::Tr, Policy::Random] {
        let r = run(policy, Knowledge::Summaries(plan), 20, 20);
        assert_eq!(r.knowledge, "summaries", "{policy}");
        assert_eq!((r.finished, r.duplicate_completions), (20, 0), "{policy}");
        let probe = r.probe.unwrap();
        assert_eq!(probe.max_round_asks, 2, "{policy}");
        assert!(probe.asks <= 2 * probe.rounds, "{policy}: {probe:?}");
        assert!(probe.publications >= 20, "{policy}: every host publishes");
        let end = r.makespan_secs.unwrap();
        // Nine rounds after the first, 2 s apart, at the least; a
        // summary still saying "free" for a host just given a task
        // (the 10 s gap holds its change) can waste an ask or two.
        assert!((3618.0..3700.0).contains(&end), "{policy}: {end}");
    }
}

#[test]
fn the_cache_may_hold_a_sample_and_asks_are_topped_up_with_others() {
    // The cache names one host of ten; a round of four asks tops up
    // with hosts it has no summary of, so every task still runs.
    let plan = SummaryPlan {
        cache: 1,
        asks_per_task: 2,
        asks_max: 4,
        ..SummaryPlan::new(300.0)
    };
    let r = run(Policy::Proactive, Knowledge::Summaries(plan), 10, 10);
    assert_eq!((r.finished, r.duplicate_completions), (10, 0));
    let probe = r.probe.unwrap();
    assert_eq!(probe.cached, 1);
    assert_eq!(probe.max_round_asks, 4);
    // The oracle knows everything by definition.
    let oracle = run(Policy::Oracle, Knowledge::Summaries(plan), 10, 10);
    assert_eq!(oracle.knowledge, "full");
}

/// One host over ten days, its owner's load flipping every `flip` cells
/// of a minute (0: never), placed as the simulator's first mode does.
fn one_flipping_host(flip: usize) -> (SimConfig, [SimHost; 1], [Timeline; 1]) {
    let cells = 10 * 1440;
    let rate = (0..cells)
        .map(|k| {
            if flip > 0 && (k / flip) % 2 == 1 {
                0.5
            } else {
                1.0
            }
        })
        .collect();
    let timelines = [Timeline::from_cells(0, 60, vec![0; cells], rate)];
    let hosts = [SimHost {
        timeline: 0,
        offset: 86_400,
        power: 1.0,
    }];
    let config = SimConfig {
        policy: Policy::Proactive,
        runtimes: vec![60.0],
        checkpoint_cost_secs: 0.0,
        horizon_secs: 86_400.0,
        estimate_runs: 0,
        recheck_secs: 600.0,
        windows: WindowRule::default(),
        duel: Default::default(),
        knowledge: Knowledge::Full,
        tail_copies: false,
        hold_gives_way: false,
        tail: Default::default(),
        claims: Default::default(),
    };
    (config, hosts, timelines)
}

/// Publications of one host over `secs`, its owner's load flipping
/// every `flip` cells of a minute (0: never).
fn publications(flip: usize, secs: f64) -> u64 {
    let (config, hosts, timelines) = one_flipping_host(flip);
    let mut sim = Sim::new(&config, &hosts, &timelines);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    sim.summaries = Some(Box::new(Summaries::new(
        SummaryPlan::new(300.0),
        1,
        &config.runtimes,
        &mut rng,
    )));
    // Looked at in pieces, as rounds do: the same as at once.
    for k in 1..=10 {
        sim.publish_until(0, secs * f64::from(k) / 10.0, false);
    }
    sim.summaries.map_or(0, |s| s.stats.publications)
}

#[test]
fn a_host_publishes_on_its_heartbeat_and_on_a_change_at_most_once_a_gap() {
    // Steady: one heartbeat every 225 to 375 s (and the one before).
    let steady = publications(0, 30_000.0);
    assert!((80..=135).contains(&steady), "{steady}");
    // Γ steps every minute: a summary a minute (the gap is 10 s).
    let flipping = publications(1, 30_000.0);
    assert!((490..=510).contains(&flipping), "{flipping}");
}

/// The node's sample (leaves of 12, refreshed every 300 s, forgotten 300 s
/// after the last round), 2 hosts per task and no minimum (set here, so
/// that the tests follow the rule's parts, not its constants).
fn sample_plan() -> SummaryPlan {
    SummaryPlan {
        sample: Some(SamplePlan {
            least: 1,
            ..SamplePlan::new(300.0, 300.0)
        }),
        ..SummaryPlan::new(300.0)
    }
}

#[test]
fn a_sample_names_twice_the_batch_in_whole_leaves_and_places_only_there() {
    // 10 tasks on 100 hosts: the sample wants 20 hosts, so two leaves of
    // 12 (or a third when the short leaf of 4 is drawn), never the pool.
    let r = run(
        Policy::Proactive,
        Knowledge::Summaries(sample_plan()),
        10,
        100,
    );
    assert_eq!(r.knowledge, "sample");
    assert_eq!((r.finished, r.duplicate_completions), (10, 0));
    let probe = r.probe.unwrap();
    assert!((20..32).contains(&probe.cached), "{probe:?}");
    assert_eq!(probe.samples, 1, "{probe:?}");
    assert!(probe.digests >= 2, "{probe:?}");
    let mut used: Vec<usize> = r.task_host.iter().flatten().copied().collect();
    used.sort_unstable();
    used.dedup();
    assert!(used.len() <= probe.cached, "{used:?}");
    // The node's rule, not a constant: three per task want 30 hosts.
    let wider = SummaryPlan {
        sample: Some(SamplePlan {
            per_task: 3,
            least: 1,
            ..SamplePlan::new(300.0, 300.0)
        }),
        ..SummaryPlan::new(300.0)
    };
    let r = run(Policy::Proactive, Knowledge::Summaries(wider), 10, 100);
    assert!((30..42).contains(&r.probe.unwrap().cached), "{:?}", r.probe);
    // A batch wider than half the pool samples all of it.
    let r = run(
        Policy::Proactive,
        Knowledge::Summaries(sample_plan()),
        20,
        30,
    );
    assert_eq!(r.probe.unwrap().cached, 30);
    assert_eq!(r.finished, 20);
}

#[test]
fn a_sampled_summary_is_as_its_last_digest_gave_it_and_a_lapsed_sample_is_drawn_again() {
    // One host whose Γ moves every minute: it publishes every minute, but
    // the consumer sees it only as each digest (every 300 s) gave it.
    let (config, hosts, timelines) = one_flipping_host(1);
    let mut sim = Sim::new(&config, &hosts, &timelines);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    sim.summaries = Some(Box::new(Summaries::new(
        sample_plan(),
        1,
        &config.runtimes,
        &mut rng,
    )));
    let digest_at = |sim: &Sim<'_>| {
        let s = sim.summaries.as_deref().unwrap();
        s.sample.as_ref().unwrap().digest[0].unwrap().0
    };
    sim.sample_for_round(1);
    let first = digest_at(&sim);
    assert!(first <= 0.0);
    // Rounds at 250 s and 500 s: the digest of 0 s, then the one due at
    // 300 s (the host published since; the consumer did not hear it).
    sim.now = 250.0;
    sim.sample_for_round(1);
    assert_eq!(digest_at(&sim), first);
    sim.now = 500.0;
    sim.sample_for_round(1);
    let second = digest_at(&sim);
    assert!((240.0..=300.0).contains(&second), "{second}");
    // A task's end at 920 s takes the digest due at 600 s, the last one
    // while the sample was wanted (300 s after the last round).
    sim.now = 920.0;
    sim.slot_changed(0, true);
    let third = digest_at(&sim);
    assert!((540.0..=600.0).contains(&third), "{third}");
    // The sample lapsed at 800 s: the next round draws a new one.
    sim.now = 2_000.0;
    sim.sample_for_round(1);
    assert!((1_940.0..=2_000.0).contains(&digest_at(&sim)));
    let stats = sim.summaries.as_deref().unwrap().stats();
    assert_eq!((stats.samples, stats.cached), (2, 1), "{stats:?}");
    assert_eq!(stats.digests, 4, "{stats:?}");
}

#[test]
fn a_narrow_batch_samples_enough_leaves_to_hold_the_pools_fastest_hosts() {
    // 1,000 steady hosts, one in twenty at full speed and the rest at half
    // speed; one 1 h task, placed from the node's sample (its own rule and
    // constants). Twice one task is one leaf of 12 hosts, which holds a
    // fast host on about half of the seeds (1 - 0.95^12): the task then
    // takes 2 h where full knowledge takes 1 h. The node's floor on the
    // sample (`probe::SAMPLE_MIN`) draws enough leaves that a narrow
    // batch's sample holds some of the pool's best hosts nearly always.
    let (mut hosts, timelines) = steady_pool(1_000);
    for (g, h) in hosts.iter_mut().enumerate() {
        h.power = if g % 20 == 0 { 1.0 } else { 0.5 };
    }
    let plan = SummaryPlan {
        sample: Some(SamplePlan::new(300.0, 300.0)),
        ..SummaryPlan::new(300.0)
    };
    let config = SimConfig {
        policy: Policy::Proactive,
        runtimes: vec![3_600.0],
        checkpoint_cost_secs: 60.0,
        horizon_secs: 30.0 * 86_400.0,
        estimate_runs: 0,
        recheck_secs: 600.0,
        windows: WindowRule::default(),
        duel: Default::default(),
        knowledge: Knowledge::Summaries(plan),
        tail_copies: false,
        hold_gives_way: false,
        tail: Default::default(),
        claims: Default::default(),
    };
    let fast = (1..=20)
        .filter(|&seed| {
            let r = simulate(
                &config,
                &hosts,
                &timelines,
                &mut Fixed(TrCurve::never_fails()),
                &mut ChaCha8Rng::seed_from_u64(seed),
                &mut |_| {},
            )
            .unwrap();
            assert_eq!(r.knowledge, "sample");
            assert_eq!(r.finished, 1);
            assert!(r.probe.unwrap().cached >= crate::sched::probe::sample_hosts(1));
            r.makespan_secs.unwrap() < 1.5 * 3_600.0
        })
        .count();
    assert!(fast >= 19, "a fast host in {fast} of 20 samples");
}
