//! A host's recent days replayed in the estimate's runs (issue 28,
//! scope 5): the owner's calendar, which the spells' lengths lose.
//!
//! Up-spells and outages drawn as a renewal process ([`super::bootstrap`])
//! keep their lengths but not when they fell: a desktop whose owner is
//! away every weekend looks the same to them on Friday noon as on Monday
//! noon. On the desktop pools of docs/scheduling.md the estimate's band
//! then missed by the day of the week: batches submitted on Monday ended
//! under its p10 (nights-off 15 of 16, weekends-away 11), those submitted
//! on Friday over its p50 by 23-39 %. So a run reads the host's failures
//! and returns from its past days: each day to come is one of the host's
//! recent days of the same kind (weekday or weekend, as
//! [`super::super::window::counted_tr`] counts later windows), picked at
//! random for each run and each host, and the host is down when that day
//! was. A day is the owner's, midnight to midnight, so a night off is not
//! cut in two. The picks vary from run to run, which is what the band
//! carries of the days the past does not repeat.
//!
//! The host's first failure comes from the replay too: the host is up at
//! submission, so an outage its picked day holds at that hour is passed
//! over (to its end, or to that day's midnight at most: what is seen now
//! tells nothing of the next day's pick), and its first failure is the
//! replay's next outage after that. (Drawn from the predictor's curve
//! instead, as a first version did, the band held 19 fewer of the
//! desktop pools' 288 runs: docs/scheduling.md.) The curve stays what the
//! estimate's rule weighs hosts by. A host down at submission comes back
//! when both the rest of its outage and the replay have it back. A held
//! window (`held`) is the one exception: its task starts when the window
//! opens and is hit or not as the hold's chance says, whatever the replay
//! has the host doing then; a hit ends when the replay has the host back
//! (where the replay has it up then, after a drawn outage, put off to the
//! replay's next return), and the replay takes over again from there.
//!
//! Past [`REPLAY_DAYS`] days from the submission a run falls back to the
//! renewal draws (a host down through the replayed days is away to their
//! end at least).

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Seconds in a day.
pub const DAY_SECS: f64 = 86_400.0;
/// Most past days an estimate host may carry.
pub const MAX_PAST_DAYS: usize = 64;
/// Most outages one past day may hold (one per five minutes).
pub const MAX_DAY_OUTAGES: usize = 288;
/// Days after the submission a run replays; past them, renewal draws.
pub const REPLAY_DAYS: usize = 28;

/// A host's recent whole days, the owner's midnight to midnight, for the
/// estimate's runs to replay (see the module).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PastDays {
    /// Seconds from the submission to the owner's next midnight, in (0, 1 day].
    pub to_midnight_secs: f64,
    /// The owner's day of the week at the submission (0 Monday .. 6 Sunday).
    pub weekday: u8,
    /// Whole past days (any order; most recent first by convention).
    pub days: Vec<PastDay>,
}

/// One past day of a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PastDay {
    /// A Saturday or a Sunday.
    pub weekend: bool,
    /// When a guest could not run, as [start, end) seconds from the day's
    /// midnight: ascending, apart, within [0, 1 day].
    pub outages: Vec<(f64, f64)>,
}

impl PastDays {
    /// Why these days cannot be replayed, if they cannot.
    pub fn check(&self) -> Result<(), &'static str> {
        if !(self.to_midnight_secs > 0.0 && self.to_midnight_secs <= DAY_SECS) {
            return Err("the time to midnight must be more than 0 and at most a day");
        }
        if self.weekday > 6 {
            return Err("the weekday must be 0 (Monday) to 6 (Sunday)");
        }
        if self.days.len() > MAX_PAST_DAYS {
            return Err("too many past days");
        }
        for day in &self.days {
            if day.outages.len() > MAX_DAY_OUTAGES {
                return Err("too many outages in one day");
            }
            let mut end = f64::NEG_INFINITY;
            for &(s, e) in &day.outages {
                if !(s.is_finite() && e.is_finite() && 0.0 <= s && s < e && e <= DAY_SECS) {
                    return Err("an outage must lie within its day and end after it starts");
                }
                if s <= end {
                    return Err("outages must be ascending and apart");
                }
                end = e;
            }
        }
        Ok(())
    }
}

/// A host's past days sorted by kind for a run's picks.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DayReplay {
    to_midnight: f64,
    weekday: u8,
    weekdays: Vec<Vec<(f64, f64)>>,
    weekends: Vec<Vec<(f64, f64)>>,
}

impl DayReplay {
    /// From days that pass [`PastDays::check`]; `None` without any or
    /// when they do not.
    pub(super) fn new(days: &PastDays) -> Option<DayReplay> {
        if days.days.is_empty() || days.check().is_err() {
            return None;
        }
        let of = |weekend: bool| -> Vec<Vec<(f64, f64)>> {
            days.days
                .iter()
                .filter(|d| d.weekend == weekend)
                .map(|d| d.outages.clone())
                .collect()
        };
        Some(DayReplay {
            to_midnight: days.to_midnight_secs,
            weekday: days.weekday,
            weekdays: of(false),
            weekends: of(true),
        })
    }

    /// Run time (seconds from the submission) at which day `k` begins
    /// (day 0, the submission's, began before it).
    fn day_start(&self, k: usize) -> f64 {
        self.to_midnight + (k as f64 - 1.0) * DAY_SECS
    }

    /// The day run time `t` falls in (`None` past the replayed days, or
    /// for a `t` that is not a number). Stepped to agree with
    /// [`Self::day_start`] bit for bit: the division alone may round a
    /// time at a midnight into the day before.
    fn day_of(&self, t: f64) -> Option<usize> {
        let guess = ((t - self.to_midnight) / DAY_SECS).floor() + 1.0;
        if guess.is_nan() || guess >= REPLAY_DAYS as f64 + 1.0 {
            return None;
        }
        let mut k = guess.clamp(0.0, REPLAY_DAYS as f64) as usize;
        while k > 0 && t < self.day_start(k) {
            k -= 1;
        }
        while k < REPLAY_DAYS && t >= self.day_start(k + 1) {
            k += 1;
        }
        (k < REPLAY_DAYS).then_some(k)
    }

    /// Day `k`'s outages: this run's pick for it among the past days of
    /// its kind (of the other kind when the past has none), picked now
    /// if not yet.
    fn outages<R: Rng + ?Sized>(
        &self,
        k: usize,
        picks: &mut Vec<u16>,
        rng: &mut R,
    ) -> &[(f64, f64)] {
        // Days skipped over are picked too, each among its own kind: a
        // later question may come back to them.
        while picks.len() <= k {
            let n = self.pool(picks.len()).len();
            picks.push(rng.random_range(0..n.max(1)) as u16);
        }
        self.pool(k)
            .get(usize::from(picks[k]))
            .map_or(&[], Vec::as_slice)
    }

    /// The past days day `k` is picked among: those of its kind, or of the
    /// other kind when the past has none.
    fn pool(&self, k: usize) -> &[Vec<(f64, f64)>] {
        let weekend = (usize::from(self.weekday) + k) % 7 >= 5;
        let (same, other) = if weekend {
            (&self.weekends, &self.weekdays)
        } else {
            (&self.weekdays, &self.weekends)
        };
        if same.is_empty() {
            other
        } else {
            same
        }
    }

    /// The first run time at or after `t` (never before it, whatever the
    /// rounding) at which the replay has the host down; `None` when it
    /// does not within the replayed days.
    pub(super) fn next_down<R: Rng + ?Sized>(
        &self,
        t: f64,
        picks: &mut Vec<u16>,
        rng: &mut R,
    ) -> Option<f64> {
        let first = self.day_of(t)?;
        for k in first..REPLAY_DAYS {
            let found = self
                .outages(k, picks, rng)
                .iter()
                .map(|o| self.span(k, o))
                .find(|&(_, e)| e > t);
            if let Some((s, _)) = found {
                return Some(s.max(t));
            }
        }
        None
    }

    /// The first run time at or after `t` (never before it) at which the
    /// replay has the host up (an outage over midnight goes on into the
    /// next day's pick when that day begins down); `None` when it stays
    /// down through the replayed days.
    pub(super) fn next_up<R: Rng + ?Sized>(
        &self,
        t: f64,
        picks: &mut Vec<u16>,
        rng: &mut R,
    ) -> Option<f64> {
        let first = self.day_of(t)?;
        let mut at = t;
        for k in first..REPLAY_DAYS {
            at = at.max(self.day_start(k));
            match self.covering(k, at, picks, rng) {
                None => return Some(at),
                Some((e, false)) => return Some(e),
                Some((e, true)) => at = e,
            }
        }
        None
    }

    /// An outage of day `k` in run time: [start, end), an outage to
    /// midnight ending where the next day begins. Both answers compare and
    /// return these very sums, so a failure one gives is down to the other
    /// and a return up, whatever the rounding.
    fn span(&self, k: usize, &(s, e): &(f64, f64)) -> (f64, f64) {
        let start = self.day_start(k);
        let end = if e < DAY_SECS {
            start + e
        } else {
            self.day_start(k + 1)
        };
        (start + s, end)
    }

    /// When a host seen up at `t`, where its picked day had it down, is
    /// exposed to its replay again: at the end of that outage, or at the
    /// next midnight when the outage runs to it (what is seen now tells
    /// nothing of the next day's pick); `t` itself when the replay has it
    /// up. `None` past the replayed days.
    pub(super) fn passed_over<R: Rng + ?Sized>(
        &self,
        t: f64,
        picks: &mut Vec<u16>,
        rng: &mut R,
    ) -> Option<f64> {
        let k = self.day_of(t)?;
        Some(self.covering(k, t, picks, rng).map_or(t, |(e, _)| e))
    }

    /// The outage of day `k` that run time `t` falls in, if any: its end
    /// in run time ([`Self::span`]'s) and whether it runs to midnight.
    fn covering<R: Rng + ?Sized>(
        &self,
        k: usize,
        t: f64,
        picks: &mut Vec<u16>,
        rng: &mut R,
    ) -> Option<(f64, bool)> {
        self.outages(k, picks, rng)
            .iter()
            .map(|o| (self.span(k, o), o.1 >= DAY_SECS))
            .find(|&((s, e), _)| s <= t && t < e)
            .map(|((_, e), to_midnight)| (e, to_midnight))
    }

    /// The run time replayed days end at.
    pub(super) fn end(&self) -> f64 {
        self.day_start(REPLAY_DAYS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const H: f64 = 3_600.0;

    /// Submitted on a Friday at noon; weekdays down 9:00-17:00, weekends
    /// down all day.
    fn office() -> DayReplay {
        let weekday = PastDay {
            weekend: false,
            outages: vec![(9.0 * H, 17.0 * H)],
        };
        let weekend = PastDay {
            weekend: true,
            outages: vec![(0.0, DAY_SECS)],
        };
        DayReplay::new(&PastDays {
            to_midnight_secs: 12.0 * H,
            weekday: 4,
            days: vec![weekday, weekend],
        })
        .unwrap()
    }

    #[test]
    fn the_replay_follows_the_owners_week_from_the_submission() {
        let r = office();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut picks = Vec::new();
        // Friday 12:00 is in the office: down now, up at 17:00 (5 h on).
        assert_eq!(r.next_down(0.0, &mut picks, &mut rng), Some(0.0));
        assert_eq!(r.next_up(0.0, &mut picks, &mut rng), Some(5.0 * H));
        // From Friday 17:00 the next outage is the weekend, from
        // Saturday 00:00 (12 h on), and lasts to Monday 9:00 (69 h on),
        // where Monday's day begins up.
        assert_eq!(r.next_down(5.0 * H, &mut picks, &mut rng), Some(12.0 * H));
        assert_eq!(r.next_up(12.0 * H, &mut picks, &mut rng), Some(60.0 * H));
        assert_eq!(r.next_down(60.0 * H, &mut picks, &mut rng), Some(69.0 * H));
        // Past the replayed days: no answer.
        assert_eq!(r.next_down(r.end(), &mut picks, &mut rng), None);
    }

    /// A host seen up where its picked day had it down is exposed again
    /// when that outage ends, or at midnight when it runs to it.
    #[test]
    fn an_outage_seen_through_is_passed_over_to_its_end_or_midnight() {
        let r = office();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut picks = Vec::new();
        // Friday 12:00, in the office: exposed at 17:00; up at 18:00: then.
        assert_eq!(r.passed_over(0.0, &mut picks, &mut rng), Some(5.0 * H));
        assert_eq!(r.passed_over(6.0 * H, &mut picks, &mut rng), Some(6.0 * H));
        // Saturday 10:00, in a weekend off: exposed at Sunday 00:00 only,
        // where Sunday's pick has it down again.
        assert_eq!(
            r.passed_over(22.0 * H, &mut picks, &mut rng),
            Some(36.0 * H)
        );
        assert_eq!(r.next_down(36.0 * H, &mut picks, &mut rng), Some(36.0 * H));
    }

    #[test]
    fn each_run_picks_its_days_among_the_past_days_of_their_kind() {
        let day = |outages| PastDay {
            weekend: false,
            outages,
        };
        // Two past weekdays: one down at 10:00, one at 14:00. Submitted on
        // a Monday at midnight.
        let r = DayReplay::new(&PastDays {
            to_midnight_secs: DAY_SECS,
            weekday: 0,
            days: vec![
                day(vec![(10.0 * H, 11.0 * H)]),
                day(vec![(14.0 * H, 15.0 * H)]),
            ],
        })
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut seen = [0, 0];
        for _ in 0..200 {
            let mut picks = Vec::new();
            match r.next_down(0.0, &mut picks, &mut rng) {
                Some(t) if t == 10.0 * H => seen[0] += 1,
                Some(t) if t == 14.0 * H => seen[1] += 1,
                other => panic!("{other:?}"),
            }
            // A run keeps its pick: asked again, the same day answers.
            let again = r.next_down(0.0, &mut picks, &mut rng);
            assert!(again == Some(10.0 * H) || again == Some(14.0 * H));
        }
        assert!(seen[0] > 60 && seen[1] > 60, "{seen:?}");
    }

    /// Whatever the time to midnight (not a whole second in the node) and
    /// the days: each day's start is that day's, answers never come
    /// before the time asked, the host is up at a return (the next outage
    /// comes after it) and down at a failure.
    #[test]
    fn answers_never_come_before_the_time_asked_and_agree_with_each_other() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for _ in 0..300 {
            let day = |rng: &mut ChaCha8Rng, weekend| {
                let mut outages = Vec::new();
                let mut t = 0.0;
                while rng.random_range(0..3) > 0 {
                    let s = t + rng.random_range(0.0..8.0 * H);
                    let e = s + rng.random_range(1.0..10.0 * H);
                    if e > DAY_SECS || s == t && t > 0.0 {
                        break;
                    }
                    outages.push((s, e));
                    t = e + 1.0;
                }
                if rng.random_range(0..4) == 0 {
                    outages.push((t.max(20.0 * H), DAY_SECS));
                }
                PastDay { weekend, outages }
            };
            let days = PastDays {
                to_midnight_secs: rng.random_range(1e-3..DAY_SECS),
                weekday: rng.random_range(0..7),
                days: (0..4).map(|i| day(&mut rng, i % 2 == 0)).collect(),
            };
            if days.check().is_err() {
                continue;
            }
            let r = DayReplay::new(&days).unwrap();
            let mut picks = Vec::new();
            for k in 0..REPLAY_DAYS {
                assert_eq!(r.day_of(r.day_start(k).max(0.0)), Some(k), "{days:?}");
            }
            for _ in 0..50 {
                let t = rng.random_range(0.0..r.end());
                if let Some(up) = r.next_up(t, &mut picks, &mut rng) {
                    assert!(up >= t, "{up} < {t}: {days:?}");
                    if let Some(down) = r.next_down(up, &mut picks, &mut rng) {
                        assert!(down > up, "down at a return {up}: {days:?}");
                    }
                }
                if let Some(down) = r.next_down(t, &mut picks, &mut rng) {
                    assert!(down >= t, "{down} < {t}: {days:?}");
                    let up = r.next_up(down, &mut picks, &mut rng);
                    assert!(
                        up.is_none_or(|up| up > down),
                        "up at a failure {down}: {days:?}"
                    );
                }
            }
        }
    }

    /// A question that jumps ahead picks the days it skips among their
    /// own kind: asked of Monday first, then of Saturday, a Friday
    /// submission's Saturday is the past's one weekend day, down all day.
    #[test]
    fn days_skipped_over_are_picked_among_their_own_kind() {
        let up = PastDay {
            weekend: false,
            outages: vec![],
        };
        let r = DayReplay::new(&PastDays {
            to_midnight_secs: 12.0 * H,
            weekday: 4,
            days: vec![
                up.clone(),
                up.clone(),
                up.clone(),
                up,
                PastDay {
                    weekend: true,
                    outages: vec![(0.0, DAY_SECS)],
                },
            ],
        })
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..100 {
            let mut picks = Vec::new();
            // Monday 10:00 (up), then Saturday 10:00.
            assert_eq!(r.next_up(70.0 * H, &mut picks, &mut rng), Some(70.0 * H));
            assert_eq!(r.next_down(22.0 * H, &mut picks, &mut rng), Some(22.0 * H));
        }
    }

    #[test]
    fn days_that_do_not_hold_together_are_refused() {
        let days = |outages| PastDays {
            to_midnight_secs: H,
            weekday: 2,
            days: vec![PastDay {
                weekend: false,
                outages,
            }],
        };
        assert!(days(vec![(0.0, H), (2.0 * H, 3.0 * H)]).check().is_ok());
        assert!(days(vec![(2.0 * H, H)]).check().is_err());
        assert!(days(vec![(0.0, 2.0 * H), (H, 3.0 * H)]).check().is_err());
        assert!(days(vec![(0.0, 2.0 * DAY_SECS)]).check().is_err());
        assert!(days(vec![(f64::NAN, H)]).check().is_err());
        let mut bad = days(vec![]);
        bad.to_midnight_secs = 0.0;
        assert!(bad.check().is_err());
        bad.to_midnight_secs = H;
        bad.weekday = 7;
        assert!(bad.check().is_err());
    }
}
