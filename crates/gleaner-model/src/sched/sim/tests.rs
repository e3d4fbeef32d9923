//! Simulator tests on hand-made timelines: a host that never fails, a host
//! that fails every day at the same hour, and conservation of tasks.

use super::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A host on `timeline`, its trace read from `offset`, of relative power `power`.
fn sim_host(timeline: usize, offset: i64, power: f64) -> SimHost {
    SimHost {
        timeline,
        offset,
        power,
    }
}

/// Forecasts one fixed curve for every host.
struct Fixed(TrCurve);

impl Forecaster for Fixed {
    fn curve(&mut self, _trace: usize, _at: i64) -> TrCurve {
        self.0.clone()
    }
}

fn config(policy: Policy, runtimes: Vec<f64>) -> SimConfig {
    SimConfig {
        policy,
        runtimes,
        checkpoint_cost_secs: 60.0,
        horizon_secs: 30.0 * 86_400.0,
        estimate_runs: 200,
        recheck_secs: 600.0,
        windows: crate::sched::window::WindowRule::default(),
        duel: Default::default(),
        knowledge: Knowledge::Full,
        tail_copies: false,
        hold_gives_way: false,
        tail: Default::default(),
        claims: Default::default(),
    }
}

fn run(config: &SimConfig, hosts: &[SimHost], timelines: &[Timeline], curve: TrCurve) -> SimResult {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    simulate(
        config,
        hosts,
        timelines,
        &mut Fixed(curve),
        &mut rng,
        &mut |_| {},
    )
    .unwrap()
}

/// Ten days of one-minute cells, always usable at full speed.
fn never_failing() -> Timeline {
    let n = 10 * 1440;
    Timeline::from_cells(0, 60, vec![0; n], vec![1.0; n])
}

/// Ten days of one-minute cells, revoked (S5) in the minutes of the day
/// `minutes` every day.
fn daily_outage(minutes: std::ops::Range<usize>) -> Timeline {
    let n = 10 * 1440;
    let fail = (0..n)
        .map(|k| if minutes.contains(&(k % 1440)) { 5 } else { 0 })
        .collect();
    Timeline::from_cells(0, 60, fail, vec![1.0; n])
}

/// Ten days of one-minute cells, revoked (S5) from 12:00 to 13:00 every day.
fn daily_noon_outage() -> Timeline {
    daily_outage(720..780)
}

#[test]
fn on_hosts_that_never_fail_every_policy_gives_the_list_schedule() {
    // A week into their traces: a week without a failure tells even
    // `proactive+checkpoint` that a 1 h task needs no checkpoint.
    let timelines = [never_failing()];
    let hosts = [sim_host(0, 7 * 86_400, 1.0), sim_host(0, 7 * 86_400, 1.0)];
    for policy in Policy::ALL {
        let r = run(
            &config(policy, vec![3600.0; 10]),
            &hosts,
            &timelines,
            TrCurve::never_fails(),
        );
        assert_eq!(r.makespan_secs, Some(5.0 * 3600.0), "{policy}");
        assert_eq!(r.kills, [0, 0, 0], "{policy}");
        assert_eq!(r.wasted_cpu_secs, 0.0, "{policy}");
        assert_eq!(r.goodput, 1.0, "{policy}");
        // The estimate knows the same: every run gives 5 h.
        let e = r.estimate.unwrap();
        assert_eq!((e.p10, e.p90), (18_000.0, 18_000.0), "{policy}");
    }
}

#[test]
fn a_host_that_fails_at_noon_kills_a_task_started_at_eleven_unless_one_knows() {
    let timelines = [daily_noon_outage()];
    // Simulation time 0 is 11:00 on the host's first day.
    let hosts = [sim_host(0, 11 * 3600, 1.0)];
    let curve = TrCurve::exponential(86_400.0);
    // A 2 h task at 11:00 is killed at 12:00 (one S5 kill, 1 h of work lost),
    // waits out the outage and runs 13:00-15:00.
    let r = run(
        &config(Policy::Random, vec![7200.0]),
        &hosts,
        &timelines,
        curve.clone(),
    );
    assert_eq!(r.kills, [0, 0, 1]);
    assert_eq!(r.makespan_secs, Some(4.0 * 3600.0));
    assert!((r.wasted_cpu_secs - 3600.0).abs() < 1e-6);
    // The oracle sees the outage coming: it waits, loses nothing, ends as soon.
    let r = run(
        &config(Policy::Oracle, vec![7200.0]),
        &hosts,
        &timelines,
        curve.clone(),
    );
    assert_eq!(r.kills, [0, 0, 0]);
    assert_eq!(r.makespan_secs, Some(4.0 * 3600.0));
    assert_eq!(r.wasted_cpu_secs, 0.0);
    // A 30 h task never fits between two outages: restarting from zero it
    // never ends; with checkpoints it does.
    let r = run(
        &config(Policy::Proactive, vec![30.0 * 3600.0]),
        &hosts,
        &timelines,
        curve.clone(),
    );
    assert_eq!(r.unfinished, 1);
    assert!(r.kills[2] >= 5);
    let r = run(
        &config(Policy::ProactiveCheckpoint, vec![30.0 * 3600.0]),
        &hosts,
        &timelines,
        curve,
    );
    assert_eq!(r.unfinished, 0);
    assert!(r.checkpoints > 0);
    let makespan = r.makespan_secs.unwrap();
    // 30 h of work, two 1 h outages, a little lost work and overhead.
    assert!(
        makespan > 32.0 * 3600.0 && makespan < 34.0 * 3600.0,
        "{makespan}"
    );
}

#[test]
fn no_task_is_lost_or_run_twice() {
    // Three hosts whose cells fail at random with every cause.
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let timelines: Vec<Timeline> = (0..3)
        .map(|_| {
            let n = 20 * 1440;
            let mut fail = vec![0u8; n];
            let mut k = 0;
            while k < n {
                if rng.random::<f64>() < 0.002 {
                    let cause = [3, 4, 5][rng.random_range(0..3)];
                    let len = rng.random_range(5..90);
                    for c in fail.iter_mut().skip(k).take(len) {
                        *c = cause;
                    }
                    k += len;
                }
                k += 1;
            }
            let rate = (0..n).map(|_| rng.random_range(0.2f32..1.0)).collect();
            Timeline::from_cells(0, 60, fail, rate)
        })
        .collect();
    let hosts: Vec<SimHost> = (0..6)
        .map(|i| sim_host(i % 3, (i as i64) * 7_919, [1.0, 0.6, 0.3][i % 3]))
        .collect();
    let runtimes: Vec<f64> = (0..60).map(|i| 600.0 + 97.0 * i as f64).collect();
    for policy in Policy::ALL {
        let r = run(
            &config(policy, runtimes.clone()),
            &hosts,
            &timelines,
            TrCurve::exponential(20_000.0),
        );
        assert_eq!(r.finished + r.unfinished, runtimes.len(), "{policy}");
        assert_eq!(r.duplicate_completions, 0, "{policy}");
        assert_eq!(r.unfinished, 0, "{policy}");
        let kills: u64 = r.kills.iter().sum();
        assert_eq!(r.attempts, runtimes.len() as u64 + kills, "{policy}");
        for (task, end) in r.task_end.iter().enumerate() {
            // No task ends before its work could be done at full speed.
            assert!(end.unwrap() >= runtimes[task], "{policy} task {task}");
        }
        assert!(r.goodput > 0.0 && r.goodput <= 1.0, "{policy}");
    }
}

#[test]
fn a_host_down_at_submission_is_weighed_by_its_view_not_as_ideal() {
    // Host 0 (P = 0.4) is revoked for the first 10 h of the batch after a
    // day of full availability; host 1 (P = 0.5) is free. The one 1 h task
    // ends soonest on host 1 (2 h, against host 0's 2.5 h once back). A
    // blank view of host 0 (full speed, never failing, back within its
    // usual outage) made the rule wait for it until it came back.
    let n = 3 * 1440;
    let fail = (0..n)
        .map(|k| {
            if (1440..1440 + 600).contains(&k) {
                5
            } else {
                0
            }
        })
        .collect();
    let timelines = [
        Timeline::from_cells(0, 60, fail, vec![1.0; n]),
        never_failing(),
    ];
    let hosts = [sim_host(0, 86_400, 0.4), sim_host(1, 86_400, 0.5)];
    for policy in [Policy::Proactive, Policy::ProactiveCheckpoint] {
        // No estimate: making it views every host (as `gleaner simulate`,
        // which makes its estimates apart, does not).
        let r = run(
            &SimConfig {
                estimate_runs: 0,
                ..config(policy, vec![3600.0])
            },
            &hosts,
            &timelines,
            TrCurve::never_fails(),
        );
        // With checkpoints, each one written adds its cost (60 s): a day
        // of past is too short to rule failures out.
        let costs = 60.0 * r.checkpoints as f64;
        assert_eq!(r.makespan_secs, Some(7200.0 + costs), "{policy}: {r:?}");
    }
}

#[test]
fn windows_holds_a_task_that_would_run_into_the_daily_outage() {
    // Submitted at 08:00; the host is revoked every day from 12:00 to
    // 13:00, and its predictor gives a 5 h run a poor chance (M = 3 h).
    let timelines = [daily_noon_outage()];
    let hosts = [sim_host(0, 7 * 86_400 + 8 * 3600, 1.0)];
    // The window is five hours on, past the default's longest wait and
    // time held (two hours), so the rule here holds for as long as the
    // window needs.
    let windows = crate::sched::window::WindowRule {
        max_wait_secs: None,
        max_held_secs: None,
        ..Default::default()
    };
    let runs = |policy| {
        run(
            &SimConfig {
                estimate_runs: 0,
                windows,
                ..config(policy, vec![5.0 * 3600.0])
            },
            &hosts,
            &timelines,
            TrCurve::exponential(3.0 * 3600.0),
        )
    };
    let proactive = runs(Policy::Proactive);
    let windows = runs(Policy::Windows);
    // Proactive starts at once and is killed at noon.
    assert_eq!(proactive.kills.iter().sum::<u64>(), 1);
    // Windows waits for the 13:00 window its past days show, and is not killed.
    assert_eq!(windows.kills, [0, 0, 0]);
    assert!(windows.holds > 0);
    assert_eq!(windows.finished, 1);
    let end = windows.makespan_secs.unwrap();
    assert!((end - 10.0 * 3600.0).abs() < 120.0, "{end}");
    assert!(end <= proactive.makespan_secs.unwrap() + 1.0);
}

/// Forecasts one fixed curve per trace.
struct PerTrace(Vec<TrCurve>);

impl Forecaster for PerTrace {
    fn curve(&mut self, trace: usize, _at: i64) -> TrCurve {
        self.0[trace].clone()
    }
}

/// One 3 h task on two hosts that look alike to the forecaster (a 6 h
/// MTTF), host 0 at full power on timeline 0, host 1 at 0.9 on timeline 1,
/// both at 10:00 a week in, with and without tail copies.
fn tail_pair(timelines: &[Timeline], tail_copies: bool) -> SimResult {
    let hosts = [
        sim_host(0, 7 * 86_400 + 10 * 3600, 1.0),
        sim_host(1, 7 * 86_400 + 10 * 3600, 0.9),
    ];
    let curve = TrCurve::exponential(6.0 * 3600.0);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    simulate(
        &SimConfig {
            estimate_runs: 0,
            tail_copies,
            ..config(Policy::Proactive, vec![3.0 * 3600.0])
        },
        &hosts,
        timelines,
        &mut PerTrace(vec![curve.clone(), curve]),
        &mut rng,
        &mut |_| {},
    )
    .unwrap()
}

#[test]
fn a_tail_copy_finishes_first_when_the_first_host_is_taken_back() {
    // The task starts on host 0 (faster), which is revoked at noon; host 1
    // is idle, so it runs a copy from the start and finishes it at 3.33 h.
    let timelines = [daily_noon_outage(), never_failing()];
    let plain = tail_pair(&timelines, false);
    let tail = tail_pair(&timelines, true);
    assert_eq!(plain.kills, [0, 0, 1]);
    assert_eq!(plain.tail_copies, 0);
    // Without a copy: killed at 2 h, restarted on host 1 at once.
    let restart = 2.0 * 3600.0 + 3.0 * 3600.0 / 0.9;
    assert!(
        (plain.makespan_secs.unwrap() - restart).abs() < 61.0,
        "{plain:?}"
    );
    assert_eq!((tail.tail_copies, tail.tail_wins), (1, 1), "{tail:?}");
    assert_eq!(tail.kills, [0, 0, 1]);
    assert_eq!(tail.duplicate_completions, 0);
    assert!(
        (tail.makespan_secs.unwrap() - 3.0 * 3600.0 / 0.9).abs() < 61.0,
        "{tail:?}"
    );
    // The killed attempt would have been lost anyway: the copy cost nothing extra.
    assert_eq!(tail.tail_cpu_secs, 0.0);
}

#[test]
fn a_tail_copy_that_loses_is_cancelled_and_its_work_counted() {
    let timelines = [never_failing(), never_failing()];
    let plain = tail_pair(&timelines, false);
    let tail = tail_pair(&timelines, true);
    assert_eq!(plain.makespan_secs, Some(3.0 * 3600.0));
    assert_eq!(plain.wasted_cpu_secs, 0.0);
    // Host 0 ends first at 3 h; the copy on host 1 had done 3 h × 0.9 of
    // reference work, which is cancelled and counted.
    assert_eq!(tail.makespan_secs, Some(3.0 * 3600.0));
    assert_eq!((tail.tail_copies, tail.tail_wins), (1, 0), "{tail:?}");
    assert_eq!(tail.duplicate_completions, 0);
    assert_eq!(tail.attempts, 2);
    assert!(
        (tail.tail_cpu_secs - 0.9 * 3.0 * 3600.0).abs() < 1e-6,
        "{tail:?}"
    );
    assert!((tail.wasted_cpu_secs - tail.tail_cpu_secs).abs() < 1e-6);
}

/// Trace time of a Monday 00:00 UTC (1970-01-05), which the calendar
/// (`Timeline::weekday`) and the tests' days agree on.
const MONDAY: i64 = 4 * 86_400;

/// Four weeks of ten-minute cells from a Monday 00:00: off (S5) every
/// weekend, Friday 20:00 to Monday 08:00, and on weeknights: Tuesday
/// 00:00-08:00, Tuesday and Wednesday 20:00-08:00, Thursday 20:00-24:00
/// (Monday evening and Friday morning are on).
fn weekends_off() -> Timeline {
    let n = 28 * 144;
    let fail = (0..n)
        .map(|k| {
            let (day, hour) = ((k / 144) % 7, (k % 144) / 6);
            let off = match day {
                0 => hour < 8,
                4 => hour >= 20,
                5 | 6 => true,
                _ => !(8..20).contains(&hour),
            };
            if off {
                5
            } else {
                0
            }
        })
        .collect();
    Timeline::from_cells(MONDAY, 600, fail, vec![1.0; n])
}

#[test]
fn a_host_found_in_its_weekend_off_comes_back_on_monday_morning_in_the_estimate() {
    // Submitted on the third Monday at 00:00: off for 52 h, back at 08:00.
    // The week before holds no whole outage that long (the weekend in
    // progress is cut by now); the two weeks before hold the last one.
    let timelines = [weekends_off()];
    let hosts = [sim_host(0, MONDAY + 14 * 86_400, 1.0)];
    let config = config(Policy::Proactive, vec![3600.0]);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (q, _) = submission_estimate(
        &config,
        &hosts,
        &timelines,
        &mut Fixed(TrCurve::never_fails()),
        |input| crate::sched::estimate::estimate(input, &mut rng),
    )
    .unwrap();
    // Back at 08:00, the task runs an hour: 9 h. Drawn as long again as
    // the 52 h so far, the median was past two days.
    assert!(q.p50 < 12.0 * 3600.0, "{q:?}");
    assert!(q.p10 >= 9.0 * 3600.0 - 1.0, "{q:?}");
}

#[test]
fn a_host_away_longer_than_usual_is_not_waited_for_while_another_is_free() {
    // Submitted on the third Friday at 19:00 to a fast host that is off
    // from 20:00 until Monday 08:00 (its past week's five outages average
    // 19.2 h, so it is expected back on Saturday at 15:12) and a slow one
    // always up: twenty tasks of an hour's work, two hours each on the
    // slow host. Once the fast host is overdue, the head of the queue
    // waited for it (back "any moment", an hour's run there against two)
    // until Monday while the slow host ran the rest; as long again as
    // it has been away, it is no longer worth waiting for.
    let always = Timeline::from_cells(MONDAY, 600, vec![0; 28 * 144], vec![1.0; 28 * 144]);
    let timelines = [weekends_off(), always];
    let offset = MONDAY + (14 + 4) * 86_400 + 19 * 3600;
    let hosts = [sim_host(0, offset, 1.0), sim_host(1, offset, 0.5)];
    let mut config = config(Policy::Proactive, vec![3600.0; 20]);
    config.estimate_runs = 0;
    let r = run(&config, &hosts, &timelines, TrCurve::never_fails());
    assert_eq!(r.finished, 20, "{r:?}");
    // Monday 08:00 is 61 h after the submission; with the fast host's
    // first task done before 20:00, the slow host ends the other nineteen
    // 38 h in (62 h with the old wait).
    let makespan = r.makespan_secs.unwrap();
    assert!(makespan < 50.0 * 3600.0, "{} h", makespan / 3600.0);
}

#[test]
fn a_host_overdue_is_expected_back_after_as_long_again() {
    // Expected back in 3 h: 3 h. Seven hours down, expected back after
    // five: as long again as the seven.
    assert_eq!(
        super::back_in(100.0, 100.0 + 5.0 * 3600.0, 100.0 + 2.0 * 3600.0),
        3.0 * 3600.0
    );
    assert_eq!(
        super::back_in(100.0, 100.0 + 5.0 * 3600.0, 100.0 + 7.0 * 3600.0),
        7.0 * 3600.0
    );
    // Exactly at the expected time, as long again too (never "any moment").
    assert_eq!(super::back_in(0.0, 3600.0, 3600.0), 3600.0);
}

/// Twenty days of one-minute cells, revoked (S5) from 12:00 to 13:00
/// every day; from minute `for_good` on (if any), revoked for good.
fn noon_outages(for_good: Option<usize>) -> Timeline {
    let n = 20 * 1440;
    let fail = (0..n)
        .map(|k| {
            let noon = (720..780).contains(&(k % 1440));
            if noon || for_good.is_some_and(|f| k >= f) {
                5
            } else {
                0
            }
        })
        .collect();
    Timeline::from_cells(0, 60, fail, vec![1.0; n])
}

/// An 11 h and a 55 min task submitted at 11:00 on day 14 to one host
/// (a 3 h MTTF to its predictor), under `policy`; `proactive-auto`
/// back-tests at the same hour on earlier days.
fn noon_pair(timelines: &[Timeline], policy: Policy) -> SimResult {
    let day = 86_400.0;
    let hosts = [sim_host(0, 14 * 86_400 + 11 * 3600, 1.0)];
    run(
        &SimConfig {
            estimate_runs: 0,
            duel: crate::sched::duel::DuelRule {
                step_secs: day,
                align_secs: Some(day),
                backtests: 8,
                ..Default::default()
            },
            ..config(policy, vec![11.0 * 3600.0, 55.0 * 60.0])
        },
        &hosts,
        timelines,
        TrCurve::exponential(3.0 * 3600.0),
    )
}

#[test]
fn proactive_auto_holds_where_the_past_shows_holds_ending_sooner() {
    // Every past day looks alike: plain placement starts the long task at
    // once, it is killed at noon and ends at 24:00, the short one after
    // it (24:55); held for 13:00, it leaves the hour before noon to the
    // short one, and the batch ends at 24:00.
    let timelines = [noon_outages(None)];
    let plain = noon_pair(&timelines, Policy::Proactive);
    let auto = noon_pair(&timelines, Policy::ProactiveAuto);
    let duel = auto.duel.expect("a duel");
    assert_eq!(
        duel.chosen,
        crate::sched::duel::Placement::Holds,
        "{duel:?}"
    );
    assert!(duel.holds_secs < duel.plain_secs * 0.98, "{duel:?}");
    assert_eq!(auto.policy, Policy::ProactiveAuto);
    let (a, p) = (auto.makespan_secs.unwrap(), plain.makespan_secs.unwrap());
    assert!(a + 1800.0 < p, "auto {a} against plain {p}");
}

#[test]
fn proactive_auto_keeps_plain_placement_where_holds_gain_nothing() {
    // A host that never fails: no hold, both rules alike, plain kept.
    let timelines = [never_failing_days(20)];
    let plain = noon_pair(&timelines, Policy::Proactive);
    let auto = noon_pair(&timelines, Policy::ProactiveAuto);
    let duel = auto.duel.expect("a duel");
    assert_eq!(
        duel.chosen,
        crate::sched::duel::Placement::Plain,
        "{duel:?}"
    );
    assert_eq!(auto.makespan_secs, plain.makespan_secs);
}

#[test]
fn proactive_auto_reads_nothing_after_the_submission() {
    // Two pools alike up to the submission (11:00, day 14) and unlike
    // after it: a duel that looked past it would tell them apart.
    let now = 14 * 1440 + 11 * 60;
    let same = noon_pair(&[noon_outages(None)], Policy::ProactiveAuto);
    let revoked = noon_pair(&[noon_outages(Some(now + 1))], Policy::ProactiveAuto);
    assert!(same.duel.is_some());
    assert_eq!(same.duel, revoked.duel);
}

/// `days` days of one-minute cells, always usable at full speed.
fn never_failing_days(days: usize) -> Timeline {
    let n = days * 1440;
    Timeline::from_cells(0, 60, vec![0; n], vec![1.0; n])
}

/// One 3 h task at 10:00 a week in on four hosts that look alike to the
/// forecaster (a 6 h MTTF): hosts 0 and 1 at full power, revoked at noon;
/// host 2 at 0.9, never failing; host 3 at 0.9, away 11:00-11:30 (the
/// looks in between). Tail copies on, under `rule`.
fn tail_four(rule: crate::sched::tail::TailRule) -> SimResult {
    let timelines = [daily_noon_outage(), never_failing(), daily_outage(660..690)];
    let at = 7 * 86_400 + 10 * 3600;
    let host = |timeline, power| sim_host(timeline, at, power);
    let hosts = [host(0, 1.0), host(0, 1.0), host(1, 0.9), host(2, 0.9)];
    let curve = TrCurve::exponential(6.0 * 3600.0);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    simulate(
        &SimConfig {
            estimate_runs: 0,
            tail_copies: true,
            tail: rule,
            ..config(Policy::Proactive, vec![3.0 * 3600.0])
        },
        &hosts,
        &timelines,
        &mut PerTrace(vec![curve.clone(), curve.clone(), curve]),
        &mut rng,
        &mut |_| {},
    )
    .unwrap()
}

#[test]
fn a_task_allowed_more_copies_gets_another_at_the_next_look_while_two_run() {
    use crate::sched::tail::TailRule;
    // Any gain is enough here: the rules differ only in the copies allowed.
    let any_gain = TailRule {
        min_gain_secs: 0.0,
        min_gain_share: 0.0,
        ..TailRule::default()
    };
    // One copy at a time: the task runs on hosts 0 and 1 until both are
    // revoked at noon, then on host 2 from 12:00 (ends 15:20).
    let one = tail_four(any_gain);
    // Three allowed from the first kill on (here: from the start): the
    // look at 11:00 starts a copy on host 2 beside the two (ends 14:20).
    let three = tail_four(TailRule {
        kills_for_more: 0,
        ..any_gain
    });
    // Simulated time starts at the hosts' 10:00.
    let from_ten = |r: &SimResult| r.makespan_secs.unwrap();
    assert!(
        (from_ten(&one) - (2.0 + 3.0 / 0.9) * 3600.0).abs() < 61.0,
        "{one:?}"
    );
    assert!(
        (from_ten(&three) - (1.0 + 3.0 / 0.9) * 3600.0).abs() < 61.0,
        "{three:?}"
    );
    assert!(three.tail_copies > one.tail_copies, "{one:?} {three:?}");
    assert_eq!((one.finished, three.finished), (1, 1));
    assert_eq!(three.duplicate_completions, 0);
}

#[test]
fn a_task_keeps_off_the_host_that_killed_it_for_an_hour() {
    // A fast host off for five minutes at 01:00 every day (its usual
    // outage), a host half as fast that never fails; one task of 3 h
    // submitted at 00:00. The fast host takes it and is taken back at
    // 01:00. Back at 01:05, it would end the task at 04:05, sooner than the
    // slow host's 6 h, and the rule used to wait for it; as the node does,
    // the task keeps off it for an hour and runs on the slow host at once.
    let timelines = [daily_outage(60..65), never_failing()];
    let hosts = [sim_host(0, 7 * 86_400, 1.0), sim_host(1, 7 * 86_400, 0.5)];
    let mut config = config(Policy::Proactive, vec![3.0 * 3600.0]);
    config.estimate_runs = 0;
    let r = run(&config, &hosts, &timelines, TrCurve::never_fails());
    assert_eq!(r.kills, [0, 0, 1]);
    assert_eq!(r.task_host, vec![Some(1)], "{r:?}");
    assert_eq!(r.makespan_secs, Some(7.0 * 3600.0));
}

#[test]
fn a_task_on_the_critical_path_gets_its_copy_while_tasks_wait() {
    // Three hosts as fast; one 12 h task and eight of 1 h. Host 0, which
    // takes the long one, is revoked at 10:00. Without the critical rule
    // its copy waits for the tail (4 h, the short tasks done) and ends at
    // 16 h; with it, at 1 h the long task would still end after the rest
    // (11 h left, the rest drains in under 6 h), and a freed host runs its
    // copy at once, ending at 13 h.
    let timelines = [daily_outage(600..660), never_failing()];
    let host = |timeline| sim_host(timeline, 7 * 86_400, 1.0);
    let hosts = [host(0), host(1), host(1)];
    let mut runtimes = vec![12.0 * 3600.0];
    runtimes.extend([3600.0; 8]);
    let makespan_and_copies = |critical_share| {
        let config = SimConfig {
            estimate_runs: 0,
            tail_copies: true,
            tail: crate::sched::tail::TailRule {
                critical_share,
                ..Default::default()
            },
            ..config(Policy::Proactive, runtimes.clone())
        };
        let r = run(
            &config,
            &hosts,
            &timelines,
            TrCurve::exponential(24.0 * 3600.0),
        );
        assert_eq!(r.finished, 9, "{r:?}");
        assert_eq!(r.kills, [0, 0, 1], "{r:?}");
        (r.makespan_secs.unwrap(), r.tail_copies)
    };
    let (tail_only, _) = makespan_and_copies(None);
    let (critical, copies) =
        makespan_and_copies(crate::sched::tail::TailRule::default().critical_share);
    // Two copies, both of the long task: the critical one at 1 h (it
    // wins), and once host 0 took its attempt back at 10 h the tail
    // rule's beside it. None of a short task.
    assert_eq!(copies, 2);
    assert!((tail_only - 16.0 * 3600.0).abs() < 61.0, "{tail_only}");
    assert!((critical - 13.0 * 3600.0).abs() < 61.0, "{critical}");
}

/// The days the estimate replays are whole days before the submission's:
/// on a host up until the submission and off from then on, none holds an
/// outage; the owner's calendar sorts them (ten weekdays, ten weekend
/// days at most) and gives the submission's weekday and time to midnight.
#[test]
fn the_estimate_replays_only_days_before_the_submission() {
    let n = 60 * 144;
    let at = 40 * 144 + 60; // Day 40 (a Saturday: day 0 is a Monday), 10:00.
    let fail = (0..n).map(|k| if k >= at { 5 } else { 0 }).collect();
    let tl = Timeline::from_cells(MONDAY, 600, fail, vec![1.0; n]);
    let t = (MONDAY + at as i64 * 600) as f64;
    let days = super::submission::past_days(&tl, t).unwrap();
    assert_eq!(days.weekday, 5);
    assert_eq!(days.to_midnight_secs, 14.0 * 3600.0);
    assert!(days.days.iter().all(|d| d.outages.is_empty()), "{days:?}");
    let weekends = days.days.iter().filter(|d| d.weekend).count();
    assert_eq!((days.days.len() - weekends, weekends), (10, 10));
    // Off from 10:00 on the day before instead: that day (a Friday) holds
    // the outage to its midnight.
    let fail = (0..n).map(|k| if k >= at - 144 { 5 } else { 0 }).collect();
    let tl = Timeline::from_cells(MONDAY, 600, fail, vec![1.0; n]);
    let days = super::submission::past_days(&tl, t).unwrap();
    assert_eq!(days.days[0].outages, vec![(10.0 * 3600.0, 86_400.0)]);
    assert!(!days.days[0].weekend);
}
