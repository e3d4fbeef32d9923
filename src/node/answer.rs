//! What a host answers a consumer's reliability query with, beyond the TR
//! of the asked window: TR for other window lengths from the same start (a
//! small curve, so one query serves every runtime) and the CPU share a
//! guest is predicted to get over the window, both from the host's own
//! history (a prior while it has no day of record, the pool's typical
//! curve or the built-in population's: the forecast says which), and its failure spells over the past week (how long it stays
//! up between failures, how long a failure keeps it away). Computed on the blocking pool; answers are reused for a minute
//! (a queue asks the same question every few seconds while tasks wait).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::baselines::pool_prior::{prior_tr, PoolPrior};
use crate::model::predict::{history_days, InitialState, PredictRequest};
use crate::model::sched::spells::{spells_of_series, PastSpells, SpellLengths, LOOKBACK_SECS};
use crate::model::series::HostSeries;
use crate::model::state::State;
use crate::net::protocol::LADDER_SECS;
use crate::report::{
    curve_in_pool, forecast_or_pool_prior, Basis, Forecast, ReportError, ReportRequest,
};

/// The window lengths the curve answers, as multiples of the asked one: a
/// task runs longer than declared on a slow or loaded host (SDPN's SP),
/// shorter when the declaration was generous.
pub const CURVE_MULTIPLES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];
/// Shortest and longest window a curve point covers, seconds.
const CURVE_MIN_SECS: u64 = 60;
const CURVE_MAX_SECS: u64 = 7 * 24 * 3600;
/// Points of one history day's window the availability looks at, at most.
const AVAILABILITY_POINTS_PER_DAY: i64 = 2_000;
/// How long an answer is reused, seconds; also the rounding of its start.
const REUSE_SECS: i64 = 60;
/// Answers kept at most.
const CACHE_ENTRIES: usize = 64;

/// A host's full answer to one reliability query.
#[derive(Debug, Clone, PartialEq)]
pub struct HostAnswer {
    /// The asked window's forecast.
    pub forecast: Forecast,
    /// `(window seconds, TR)` from the same start, lengths increasing.
    pub curve: Vec<(u64, f64)>,
    /// Predicted CPU share for a guest over the window (0..1).
    pub availability: Option<f64>,
    /// Failure spells over the week before the window's start (or before
    /// the last reading, for a window that starts later).
    pub spells: Option<PastSpells>,
    /// The same spells' lengths (bounded: see [`SpellLengths`]).
    pub spell_lengths: Option<SpellLengths>,
}

/// A host's spells over a week: their sums and their lengths.
type WeekSpells = Option<(PastSpells, SpellLengths)>;

/// The curve's window lengths for a question of `asked` seconds, increasing,
/// the asked one among them: [`CURVE_MULTIPLES`] of it, each clamped to
/// 60 s..7 days, and each but the asked one that falls within the summary's
/// ladder ([`LADDER_SECS`]) moved to the rung nearest it (by ratio; the
/// shorter on a tie), a length that lands on another answered once. The
/// ladder's fits are the ones the node keeps made (its summary asks 1 h and
/// 8 h, whose multiples are the rungs, and `node::ready` prepares what was
/// asked), so a question of a length never asked before makes one fit of
/// its method's, not five (issue 29, goal 6). A rung asked gives its
/// multiples unchanged: the summary's answers are what they were.
pub fn curve_lengths(asked: u64) -> Vec<u64> {
    let (low, high) = (
        u64::from(LADDER_SECS[0]),
        u64::from(LADDER_SECS[LADDER_SECS.len() - 1]),
    );
    let mut lengths: Vec<u64> = CURVE_MULTIPLES
        .iter()
        .map(|&multiple| {
            let secs =
                ((asked as f64 * multiple).round() as u64).clamp(CURVE_MIN_SECS, CURVE_MAX_SECS);
            if multiple == 1.0 || !(low..=high).contains(&secs) {
                return secs;
            }
            let off = |rung: u32| (secs as f64 / f64::from(rung)).ln().abs();
            LADDER_SECS
                .iter()
                .copied()
                .min_by(|&a, &b| off(a).total_cmp(&off(b)))
                .map_or(secs, u64::from)
        })
        .collect();
    lengths.sort_unstable();
    lengths.dedup();
    lengths
}

/// Forecasts the request's window, the curve around it and the availability,
/// and reads the host's spells. A curve length the history cannot cover is
/// left out, never an error. The curve's other lengths are asked in one call
/// ([`curve`]), which a method such as `hazard` answers in one pass of its
/// survival. [`AnswerCache::answer`] is the same answer with the spells
/// reused for an hour.
pub fn host_answer(
    series: &HostSeries,
    request: &ReportRequest,
) -> Result<HostAnswer, ReportError> {
    answer_with_spells(series, request, None, |at| {
        spells_before(series, request, at)
    })
}

/// The host's spells over the week before `at`, read with the request's
/// thresholds (the job's memory sets S4).
fn spells_before(series: &HostSeries, request: &ReportRequest, at: i64) -> WeekSpells {
    spells_of_series(series, request.window.thresholds, at, LOOKBACK_SECS)
}

/// Where a request's spells end: the window's start, or the last reading
/// for a window that starts later.
fn spells_until(series: &HostSeries, request: &ReportRequest) -> Option<i64> {
    series.last_time().map(|last| last.min(request.window.at))
}

fn answer_with_spells(
    series: &HostSeries,
    request: &ReportRequest,
    pool: Option<&PoolPrior>,
    spells: impl FnOnce(i64) -> WeekSpells,
) -> Result<HostAnswer, ReportError> {
    let main = forecast_or_pool_prior(series, request, pool)?;
    let asked = request.window.window_secs;
    let lengths = curve_lengths(asked);
    // Every other length in one call: one pass for a method that can.
    let others: Vec<u64> = lengths.iter().copied().filter(|&s| s != asked).collect();
    let other_trs = match main.basis {
        Basis::Record => curve_in_pool(series, request, pool, &others),
        // No day of record: every length from the same prior, from the same start.
        Basis::Prior(_) => {
            let start = match main.initial {
                Some(InitialState::Observed(state)) => Some(state),
                _ => None,
            };
            others
                .iter()
                .map(|&secs| Some(prior_tr(pool, secs, start).0))
                .collect()
        }
    };
    let mut tr_of = others
        .iter()
        .copied()
        .zip(other_trs)
        .collect::<HashMap<u64, Option<f64>>>();
    let curve = lengths
        .into_iter()
        .filter_map(|secs| {
            if secs == asked {
                Some((secs, main.tr))
            } else {
                tr_of.remove(&secs).flatten().map(|tr| (secs, tr))
            }
        })
        .collect();
    let (spells, spell_lengths) = spells_until(series, request)
        .and_then(spells)
        .map_or((None, None), |(sums, lengths)| (Some(sums), Some(lengths)));
    Ok(HostAnswer {
        spells,
        spell_lengths,
        availability: predicted_availability(series, &request.window),
        forecast: main,
        curve,
    })
}

/// The CPU share a guest gets over the window on the history days the
/// forecast learns from: `1 − L_H` while the host is in S1 or S2, nothing
/// in S3, S4 or S5 (the guest is suspended, killed or the host is off).
/// `None` when no history day covers the window.
///
/// A day's states come from [`HostSeries::window_states`], the predictors'
/// row walk (runs of quiet rows filled at once), and the load of the row at
/// or before each point from a second index kept in step with it: the same
/// states and rows as a [`crate::model::series::StateCursor`] stepped
/// point by point (a day the row walk cannot cover is read that way), so
/// the same number to the bit, in about a third of the time on a 6 s record
/// (the walk was most of a cached answer: issue 29, goal 6).
pub fn predicted_availability(series: &HostSeries, window: &PredictRequest) -> Option<f64> {
    let span = i64::try_from(window.window_secs).ok()?;
    let days = history_days(series, window.at, span, window.days).ok()?;
    let stride = (span / AVAILABILITY_POINTS_PER_DAY).max(i64::from(series.step_secs.max(1)));
    // The points of a day: day.start + k·stride while before day.start + span.
    let points = usize::try_from((span + stride - 1) / stride).ok()?;
    let step = u32::try_from(stride).ok();
    let share = |state: State, row: usize| match state {
        State::S1 | State::S2 => series
            .get(row)
            .map_or(0.0, |s| (1.0 - s.cpu / 100.0).clamp(0.0, 1.0)),
        State::S3 | State::S4 | State::S5 => 0.0,
    };
    let (mut sum, mut n) = (0.0f64, 0u64);
    let mut states = Vec::new();
    for day in days {
        let walked = points > 0
            && step.is_some_and(|step| {
                series.window_states(window.thresholds, day.start, step, points - 1, &mut states)
            });
        if walked {
            let Some(mut row) = series.row_at(day.start) else {
                continue;
            };
            let mut t = day.start;
            for &state in &states {
                // The row at or before t, as the cursor's walk would stand.
                while series.time_at(row + 1).is_some_and(|next| next <= t) {
                    row += 1;
                }
                sum += share(state, row);
                n += 1;
                t = t.saturating_add(stride);
            }
            continue;
        }
        let Some(mut cursor) = series.cursor(window.thresholds, day.start) else {
            continue;
        };
        let mut t = day.start;
        while t < day.start.saturating_add(span) {
            // The cursor stands on the row at or before t: no search.
            let state = cursor.state_at(t);
            sum += share(state, cursor.row());
            n += 1;
            t = t.saturating_add(stride);
        }
    }
    (n > 0).then(|| sum / n as f64)
}

/// Answers reused for [`REUSE_SECS`]: keyed by the window's start rounded
/// to that, its length and the job's memory. The week's spells, which cost
/// about a millisecond to read at 6 s steps and move little in an hour, are
/// reused for [`SPELLS_REUSE_SECS`] whatever the window's length.
#[derive(Debug, Clone, Default)]
pub struct AnswerCache {
    inner: Arc<Mutex<HashMap<AnswerKey, HostAnswer>>>,
    spells: Arc<Mutex<HashMap<SpellsKey, WeekSpells>>>,
}

/// The window's start in minutes, its length and the job's memory.
pub type AnswerKey = (i64, u64, u64);
/// Where the spells end, in hours, and the job's memory.
type SpellsKey = (i64, u64);

/// How long a host's spells are reused, seconds.
const SPELLS_REUSE_SECS: i64 = 3_600;

impl AnswerCache {
    /// [`host_answer`], with the spells read at most once an hour per
    /// memory figure.
    pub fn answer(
        &self,
        series: &HostSeries,
        request: &ReportRequest,
    ) -> Result<HostAnswer, ReportError> {
        self.answer_with_prior(series, request, None)
    }

    /// [`Self::answer`] with the pool's prior for a host with no day of
    /// record, when the node has one.
    pub fn answer_with_prior(
        &self,
        series: &HostSeries,
        request: &ReportRequest,
        pool: Option<&PoolPrior>,
    ) -> Result<HostAnswer, ReportError> {
        answer_with_spells(series, request, pool, |at| {
            let key = (
                at.div_euclid(SPELLS_REUSE_SECS),
                request.window.thresholds.job_mem_mib,
            );
            if let Some(known) = self.spells.lock().ok().and_then(|m| m.get(&key).cloned()) {
                return known;
            }
            let read = spells_before(series, request, at);
            if let Ok(mut map) = self.spells.lock() {
                // Older hours are of no use once time has moved on.
                map.retain(|k, _| k.0 >= key.0 - 1);
                if map.len() >= CACHE_ENTRIES {
                    map.clear();
                }
                map.insert(key, read.clone());
            }
            read
        })
    }

    pub fn key(at: i64, window_secs: u64, mem_mib: u64) -> AnswerKey {
        (at.div_euclid(REUSE_SECS), window_secs, mem_mib)
    }

    pub fn get(&self, key: AnswerKey) -> Option<HostAnswer> {
        self.inner.lock().ok()?.get(&key).cloned()
    }

    /// Forgets every answer and every spell (the history changed: an import).
    pub fn clear(&self) {
        if let Ok(mut map) = self.inner.lock() {
            map.clear();
        }
        if let Ok(mut map) = self.spells.lock() {
            map.clear();
        }
    }

    /// Forgets every answer, keeping the spells (the record changed where
    /// they do not read: a retention cut older than their week).
    pub fn forget_answers(&self) {
        if let Ok(mut map) = self.inner.lock() {
            map.clear();
        }
    }

    pub fn put(&self, key: AnswerKey, answer: HostAnswer) {
        let Ok(mut map) = self.inner.lock() else {
            return;
        };
        // Older windows are of no use once time has moved on.
        map.retain(|k, _| k.0 >= key.0 - 1);
        if map.len() >= CACHE_ENTRIES {
            map.clear();
        }
        map.insert(key, answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::series::Sample;
    use crate::model::state::Thresholds;
    use jiff::tz::TimeZone;

    /// Twelve days at a 60 s step: load 30 % from 09:00 to 12:00 UTC, 0
    /// otherwise, and the host off from 12:00 to 13:00.
    fn series() -> HostSeries {
        let mut s = HostSeries::new(60, 120, TimeZone::UTC);
        let start = 1_700_006_400; // a Wednesday 00:00 UTC
        for i in 0..(12 * 1440) {
            let time = start + i * 60;
            let minute = i % 1440;
            let cpu = if (9 * 60..12 * 60).contains(&minute) {
                30.0
            } else {
                0.0
            };
            let up = !(12 * 60..13 * 60).contains(&minute);
            s.push(Sample {
                time,
                cpu,
                free_mib: 4096,
                up,
            })
            .unwrap();
        }
        s
    }

    fn thresholds() -> Thresholds {
        Thresholds {
            th1: 20.0,
            th2: 60.0,
            sustain_secs: 60,
            job_mem_mib: 0,
        }
    }

    fn window(at: i64, secs: u64) -> PredictRequest {
        let mut w = PredictRequest::new(at, secs, thresholds());
        w.days = 5;
        w
    }

    #[test]
    fn availability_is_one_minus_load_and_nothing_while_off() {
        let s = series();
        let day11 = 1_700_006_400 + 11 * 86_400;
        // 09:00–12:00: 70 % left.
        let a = predicted_availability(&s, &window(day11 + 9 * 3600, 3 * 3600)).unwrap();
        assert!((a - 0.7).abs() < 1e-9, "{a}");
        // 11:00–13:00: one hour at 70 %, one hour off.
        let a = predicted_availability(&s, &window(day11 + 11 * 3600, 2 * 3600)).unwrap();
        assert!((a - 0.35).abs() < 0.02, "{a}");
        // Before the record: no history.
        assert_eq!(
            predicted_availability(&s, &window(1_600_000_000, 3600)),
            None
        );
    }

    #[test]
    fn the_curves_lengths_lie_on_the_ladder_where_it_reaches() {
        // The summary's two questions: their multiples are rungs.
        assert_eq!(curve_lengths(3_600), [900, 1_800, 3_600, 7_200, 14_400]);
        assert_eq!(
            curve_lengths(28_800),
            [7_200, 14_400, 28_800, 57_600, 115_200]
        );
        // 45 min, 1.5 h, 6 h, 12 h move to their nearest rungs.
        assert_eq!(
            curve_lengths(10_800),
            [3_600, 7_200, 10_800, 28_800, 57_600]
        );
        // Below and beyond the ladder the multiples stay.
        assert_eq!(curve_lengths(1_200), [300, 600, 1_200, 1_800, 3_600]);
        assert_eq!(
            curve_lengths(108_000),
            [28_800, 57_600, 108_000, 216_000, 432_000]
        );
        // Clamped to 60 s..7 days, a length that lands on another once.
        assert_eq!(curve_lengths(60), [60, 120, 240]);
        assert_eq!(curve_lengths(7 * 86_400), [151_200, 302_400, 604_800]);
        for asked in [1, 61, 899, 900, 5_000, 86_400, 115_201, 10 * 86_400] {
            let lengths = curve_lengths(asked);
            assert!(
                lengths.windows(2).all(|w| w[0] < w[1]),
                "{asked}: {lengths:?}"
            );
            assert!(lengths.contains(&asked.clamp(CURVE_MIN_SECS, CURVE_MAX_SECS)));
        }
    }

    #[test]
    fn the_curve_has_the_asked_length_and_never_rises() {
        let s = series();
        let day11 = 1_700_006_400 + 11 * 86_400;
        let request = ReportRequest::new(window(day11 + 6 * 3600, 4 * 3600));
        let answer = host_answer(&s, &request).unwrap();
        assert!(answer
            .curve
            .iter()
            .any(|&(t, tr)| t == 4 * 3600 && tr == answer.forecast.tr));
        assert!(answer.curve.windows(2).all(|w| w[0].0 < w[1].0));
        // 06:00 + 1 h and + 2 h stay clear of the 12:00 outage; + 8 h and
        // + 16 h cross it every day.
        let tr = |t: u64| answer.curve.iter().find(|p| p.0 == t).map(|p| p.1);
        assert!(tr(3600).unwrap() > 0.9, "{:?}", answer.curve);
        if let Some(long) = tr(8 * 3600) {
            assert!(long < 0.1, "{:?}", answer.curve);
        }
        // The week before 06:00 on day 11 holds seven daily hours off.
        let spells = answer.spells.unwrap();
        assert_eq!(spells.episodes, 7, "{spells:?}");
        assert!((spells.mean_outage_secs().unwrap() - 3600.0).abs() <= 60.0);
        assert!((spells.mean_uptime_secs().unwrap() - 82_800.0).abs() <= 120.0);
        // Their lengths: the seven hours off, and the days between them.
        let lengths = answer.spell_lengths.unwrap();
        assert_eq!(lengths.outages_seen, 7);
        assert!(lengths.outages.iter().all(|o| (o - 3600.0).abs() <= 60.0));
        assert!(lengths.up.iter().all(|u| (u - 82_800.0).abs() <= 120.0));
        let up: f64 = lengths.up.iter().chain(&lengths.up_cut).sum();
        assert_eq!(up, spells.usable_secs);
    }

    #[test]
    fn the_cached_answer_is_the_answer_and_its_spells_last_an_hour() {
        let s = series();
        let day11 = 1_700_006_400 + 11 * 86_400;
        let cache = AnswerCache::default();
        let at = |t: i64| ReportRequest::new(window(t, 4 * 3600));
        let first = at(day11 + 6 * 3600);
        assert_eq!(cache.answer(&s, &first), host_answer(&s, &first));
        // A record that never went off, asked first, leaves its spells
        // for the hour: the cache shows it by giving them for `s` too.
        let mut calm = HostSeries::new(60, 120, TimeZone::UTC);
        for mut sample in s.samples() {
            sample.up = true;
            calm.push(sample).unwrap();
        }
        let cache = AnswerCache::default();
        let calm_spells = cache.answer(&calm, &first).unwrap().spells.unwrap();
        assert_eq!(calm_spells.episodes, 0);
        let same_hour = at(day11 + 6 * 3600 + 600);
        assert_eq!(
            cache.answer(&s, &same_hour).unwrap().spells,
            Some(calm_spells)
        );
        let next_hour = at(day11 + 7 * 3600);
        let read = cache.answer(&s, &next_hour).unwrap().spells.unwrap();
        assert_eq!(read.episodes, 7);
        assert_eq!(Some(read), host_answer(&s, &next_hour).unwrap().spells);
        cache.clear();
        assert_eq!(
            cache.answer(&s, &same_hour).unwrap().spells,
            host_answer(&s, &same_hour).unwrap().spells
        );
    }

    #[test]
    fn the_cache_reuses_an_answer_within_a_minute_only() {
        let cache = AnswerCache::default();
        let answer = HostAnswer {
            forecast: Forecast {
                tr: 0.5,
                fail_by_cause: None,
                initial: None,
                days_used: 3,
                method: Default::default(),
                basis: crate::report::Basis::Record,
            },
            curve: vec![(60, 0.9)],
            availability: Some(0.5),
            spells: None,
            spell_lengths: None,
        };
        cache.put(AnswerCache::key(120, 3600, 0), answer.clone());
        assert_eq!(cache.get(AnswerCache::key(179, 3600, 0)), Some(answer));
        assert_eq!(cache.get(AnswerCache::key(180, 3600, 0)), None);
        assert_eq!(cache.get(AnswerCache::key(150, 3601, 0)), None);
    }

    /// The availability as it was computed before round five (a search for
    /// the row of every point): the walk that reads the cursor's row must
    /// give the same number to the bit.
    fn availability_by_search(series: &HostSeries, window: &PredictRequest) -> Option<f64> {
        let span = i64::try_from(window.window_secs).ok()?;
        let days = history_days(series, window.at, span, window.days).ok()?;
        let stride = (span / AVAILABILITY_POINTS_PER_DAY).max(i64::from(series.step_secs.max(1)));
        let mut shares = Vec::new();
        for day in days {
            let Some(mut cursor) = series.cursor(window.thresholds, day.start) else {
                continue;
            };
            let end = day.start.saturating_add(span);
            let points = std::iter::successors(Some(day.start), |t| Some(t + stride));
            shares.extend(points.take_while(|&t| t < end).map(|t| {
                let busy = matches!(cursor.state_at(t), State::S3 | State::S4 | State::S5);
                let row = series.row_at(t).and_then(|i| series.get(i));
                match row {
                    Some(s) if !busy => (1.0 - s.cpu / 100.0).clamp(0.0, 1.0),
                    _ => 0.0,
                }
            }));
        }
        // Summed in the same order as the walk under test.
        let sum = shares.iter().fold(0.0f64, |acc, v| acc + v);
        (!shares.is_empty()).then(|| sum / shares.len() as f64)
    }

    #[test]
    fn availability_equals_the_searching_walk_on_a_synthetic_host() {
        let trace = crate::eval::synth::generate(
            &crate::eval::synth::SynthConfig::new(7, 20, "Europe/Berlin").unwrap(),
        );
        let s = &trace.series;
        let first = s.first_time().unwrap();
        let mut compared = 0;
        for k in 0..12 {
            let at = first + 12 * 86_400 + k * 37_501;
            for secs in [600, 3 * 3600, 10 * 3600, 40 * 3600] {
                let mut w = PredictRequest::new(at, secs, Thresholds::default());
                w.days = 10;
                let (a, b) = (predicted_availability(s, &w), availability_by_search(s, &w));
                assert_eq!(
                    a.map(f64::to_bits),
                    b.map(f64::to_bits),
                    "at {at}, {secs} s"
                );
                compared += usize::from(a.is_some());
            }
        }
        assert!(compared >= 30, "only {compared} compared");
    }
}
