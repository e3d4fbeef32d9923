//! Tests of `nws` and `nws+mix`: with no past it is `logistic`; no peeking
//! (a forecast and its scores do not change with what follows W, or W's
//! date); forgetting (an old loss weighs less than a recent one); it
//! follows a candidate that is always right on a hand-built host.

use super::*;
use crate::baselines::test_series::{series_from, DAY, HOUR, MONDAY};
use crate::baselines::{method_by_name, truncated};
use crate::series::Sample;
use crate::state::Thresholds;

/// A hog at 10:00–10:30 every day (CPU contention, S3 once sustained).
fn daily_hog(days: i64, step: i64) -> HostSeries {
    series_from(days, step, |t| {
        let tod = (t - MONDAY).rem_euclid(DAY);
        if (10 * HOUR..10 * HOUR + 1800).contains(&tod) {
            95.0
        } else {
            5.0
        }
    })
}

fn request(at: i64, window: u64) -> PredictRequest {
    PredictRequest::new(at, window, Thresholds::default())
}

/// Always the same TR.
struct Constant(f64);

impl ReliabilityPredictor for Constant {
    fn name(&self) -> String {
        format!("constant {}", self.0)
    }
    fn forecast(
        &self,
        _: &HostSeries,
        _: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        Ok(ReliabilityForecast {
            tr: self.0,
            fail_by_cause: None,
        })
    }
}

/// Knows the outage: TR 0 when the window's steps after its start reach a
/// 10:00 (when the host goes down), 1 otherwise. Right on every window of
/// [`daily_outage`] that starts up.
struct Oracle;

impl ReliabilityPredictor for Oracle {
    fn name(&self) -> String {
        "oracle".into()
    }
    fn forecast(
        &self,
        _: &HostSeries,
        req: &PredictRequest,
    ) -> Result<ReliabilityForecast, PredictError> {
        let tod = (req.at - MONDAY).rem_euclid(DAY);
        let until = tod + req.window_secs as i64;
        let down = |at: i64| tod < at && at <= until;
        let hits = down(10 * HOUR) || down(DAY + 10 * HOUR);
        Ok(ReliabilityForecast {
            tr: if hits { 0.0 } else { 1.0 },
            fail_by_cause: None,
        })
    }
}

/// Up every day but 10:00–10:30, when the host is down (a failure at once).
fn daily_outage(days: i64, step: i64) -> HostSeries {
    let up = series_from(days, step, |_| 5.0);
    let mut out = HostSeries::new(up.step_secs, up.max_gap_secs, up.tz.clone());
    for s in up.samples() {
        let tod = (s.time - MONDAY).rem_euclid(DAY);
        let down = (10 * HOUR..10 * HOUR + 1800).contains(&tod);
        out.push(Sample { up: !down, ..s }).unwrap();
    }
    out
}

fn tournament(mode: Mode) -> Nws {
    Nws::with_candidates(mode, vec![Box::new(Constant(0.5)), Box::new(Oracle)])
}

#[test]
fn weights_forget_by_the_half_life() {
    assert_eq!(day_weight(0), 1.0);
    assert!((day_weight(28) - 0.5).abs() < 1e-15);
    assert!((day_weight(56) - 0.25).abs() < 1e-15);
    assert_eq!(day_weight(-3), 1.0);
}

/// Candidate 0 lost a window 40 days ago, candidate 1 the same amount
/// yesterday; every other day is a tie. The old loss weighs less, so
/// candidate 0 leads and carries more of the mix; reversed ages, candidate 1.
#[test]
fn an_old_loss_weighs_less_than_a_recent_one() {
    let tie = Scores {
        weight: 24.0,
        loss: [1.0, 1.0, 0.0, 0.0],
        days: 1,
    };
    let lost = |c: usize| {
        let mut s = tie;
        s.loss[c] += 1.0;
        s
    };
    let mut days: Vec<(i64, Scores)> = (1..30).map(|age| (age, tie)).collect();
    days.push((0, lost(1)));
    days.push((40, lost(0)));
    let s = discounted(&days);
    assert_eq!(s.days, 31);
    assert!(s.loss[0] < s.loss[1], "{s:?}");
    assert_eq!(s.leader(2), 0);
    let w = s.weights(2);
    assert!(w[0] > w[1] && (w[0] + w[1] - 1.0).abs() < 1e-12, "{w:?}");
    // Reversed: candidate 0's loss is the recent one.
    let mut days: Vec<(i64, Scores)> = (1..30).map(|age| (age, tie)).collect();
    days.push((0, lost(0)));
    days.push((40, lost(1)));
    let s = discounted(&days);
    assert_eq!(s.leader(2), 1);
    assert!(s.weights(2)[1] > 0.5);
    // The exact weights: exp(−η ΔL), ΔL = 1 − 2^(−40/28).
    let dl = 1.0 - (-40.0f64 / 28.0).exp2();
    let want = 1.0 / (1.0 + (-ETA * dl).exp());
    assert!((s.weights(2)[1] - want).abs() < 1e-12);
}

#[test]
fn too_little_evidence_keeps_the_first_and_ties_keep_it_too() {
    let mut s = Scores {
        weight: 100.0,
        loss: [9.0, 1.0, 0.0, 0.0],
        days: MIN_SCORED_DAYS - 1,
    };
    assert_eq!(s.leader(2), 0);
    assert_eq!(s.weights(2), [1.0, 0.0, 0.0, 0.0]);
    s.days = MIN_SCORED_DAYS;
    assert_eq!(s.leader(2), 1);
    s.loss[1] = 9.0;
    assert_eq!(s.leader(2), 0, "a tie keeps the first");
    assert_eq!(s.weights(2), [0.5, 0.5, 0.0, 0.0]);
}

/// Twenty days of a daily outage: the oracle is right on every past window,
/// the constant 0.5 is not; after two weeks of scores both modes follow the
/// oracle, before them both answer with the first candidate.
#[test]
fn it_follows_the_candidate_that_is_always_right() {
    let series = daily_outage(20, 300);
    let leader = tournament(Mode::Leader);
    let mix = tournament(Mode::Mix);
    for (at, fails) in [
        (MONDAY + 18 * DAY + 9 * HOUR + 1800, true),
        (MONDAY + 18 * DAY + 12 * HOUR, false),
    ] {
        let req = request(at, 3600);
        let scores = leader.scores(&series, &req).unwrap();
        assert!(scores.days >= MIN_SCORED_DAYS, "{scores:?}");
        assert_eq!(
            scores.loss[1], 0.0,
            "the oracle is right on every past window"
        );
        assert!(scores.loss[0] > 0.0);
        let want = if fails { 0.0 } else { 1.0 };
        assert_eq!(leader.forecast(&series, &req).unwrap().tr, want);
        let tr = mix.forecast(&series, &req).unwrap().tr;
        assert!((tr - want).abs() < 1e-6, "{tr}");
    }
    // Day 5: too few scored days, the constant.
    let early = request(MONDAY + 5 * DAY + 9 * HOUR + 1800, 3600);
    assert_eq!(leader.forecast(&series, &early).unwrap().tr, 0.5);
    assert_eq!(mix.forecast(&series, &early).unwrap().tr, 0.5);
}

/// With no past day to score (ten days of record), `nws` and `nws+mix`
/// answer exactly what `logistic` answers.
#[test]
fn with_no_past_it_equals_logistic() {
    let series = daily_hog(10, 300);
    let logistic = method_by_name("logistic", 1).unwrap();
    for name in ["nws", "nws+mix"] {
        let nws = method_by_name(name, 1).unwrap();
        assert_eq!(nws.name(), name);
        for (at, window) in [
            (MONDAY + 9 * DAY + 9 * HOUR, 3600),
            (MONDAY + 9 * DAY + 14 * HOUR, 3 * 3600),
        ] {
            let req = request(at, window);
            let want = logistic.forecast(&series, &req).unwrap();
            assert_eq!(nws.forecast(&series, &req).unwrap(), want, "{name} at {at}");
        }
    }
}

/// The registry's tournament on a record long enough to leave `logistic`:
/// the forecast on the record cut at W equals the one on the whole record,
/// and the scores do not change when W's date (before W) or anything after
/// it changes.
#[test]
fn no_peeking_past_w_nor_into_ws_date() {
    let series = daily_hog(24, 300);
    let at = MONDAY + 21 * DAY + 9 * HOUR;
    let cut = truncated(&series, at);
    for name in ["nws", "nws+mix"] {
        let nws = method_by_name(name, 1).unwrap();
        for window in [3600, 5 * 3600] {
            let req = request(at, window);
            let whole = nws.forecast(&series, &req).unwrap();
            let before = nws.forecast(&cut, &req).unwrap();
            assert_eq!(whole, before, "{name}, {window} s");
            assert!(whole.tr.is_finite() && (0.0..=1.0).contains(&whole.tr));
            // The split by cause and TR sum to 1, mixed or not.
            let causes: f64 = whole
                .fail_by_cause
                .expect("the candidates split by cause")
                .iter()
                .sum();
            assert!((whole.tr + causes - 1.0).abs() < 1e-9, "{name}: {whole:?}");
        }
    }
    // A failure early on W's date and on every later day: the scores (the
    // record before W's midnight) are unchanged.
    let mut changed = HostSeries::new(series.step_secs, series.max_gap_secs, series.tz.clone());
    for s in series.samples() {
        let late = s.time >= MONDAY + 21 * DAY && (s.time - MONDAY).rem_euclid(DAY) < 2 * HOUR;
        changed
            .push(Sample {
                cpu: if late { 99.0 } else { s.cpu },
                ..s
            })
            .unwrap();
    }
    let nws = Nws::shared(Mode::Leader);
    let req = request(at, 3600);
    assert_eq!(
        nws.scores(&series, &req).unwrap(),
        nws.scores(&changed, &req).unwrap()
    );
    let fresh = Nws::with_candidates(
        Mode::Leader,
        vec![
            Box::new(Logistic::with_own_cache()),
            Box::new(Hazard::with_own_cache()),
        ],
    );
    let scores = fresh.scores(&changed, &req).unwrap();
    assert!(
        scores.days >= MIN_SCORED_DAYS && scores.weight > 0.0,
        "{scores:?}"
    );
    assert_eq!(scores, fresh.scores(&series, &req).unwrap());
}
