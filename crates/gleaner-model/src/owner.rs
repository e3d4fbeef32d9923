//! The owner's rules, as pure values: the weekly schedule of `[owner] hours`
//! (parsed here, judged at a civil date-time the caller supplies), why the
//! machine is withheld (the cause recorded with an S5), and why no guest runs
//! now (the one answer `status` and the dashboard give).
//!
//! No clock and no time zone lookup: the node turns its clock into the
//! owner's civil time and asks [`Schedule::allows`].

use crate::state::State;
use jiff::civil::DateTime;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest `[owner] hours` text accepted.
pub const MAX_SCHEDULE_CHARS: usize = 1024;
const MINUTES_PER_DAY: u16 = 24 * 60;
const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// When the owner lends the machine: for each weekday (Monday first) the
/// minute ranges `[start, end)` of the day. An empty text means always.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schedule {
    /// `None`: no schedule, every minute allowed.
    days: Option<[Vec<(u16, u16)>; 7]>,
}

/// A malformed schedule, with the place it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {what}")]
pub struct ScheduleError {
    /// 1-based character position in the text.
    pub position: usize,
    pub what: String,
}

impl Schedule {
    /// Every minute of the week.
    pub fn always() -> Schedule {
        Schedule { days: None }
    }

    /// True when no schedule restricts the node.
    pub fn is_always(&self) -> bool {
        self.days.is_none()
    }

    /// Parses `"Mon-Fri 18:00-08:30; Sat,Sun"`: entries separated by `;`,
    /// each a list of days or day ranges (`Fri-Mon` wraps) and optionally
    /// time ranges `HH:MM-HH:MM` separated by `,`. A range whose end is not
    /// after its start crosses midnight into the next day; `24:00` ends a day.
    /// An entry with no times is the whole day.
    pub fn parse(text: &str) -> Result<Schedule, ScheduleError> {
        let chars = text.chars().count();
        if chars > MAX_SCHEDULE_CHARS {
            return Err(ScheduleError {
                position: MAX_SCHEDULE_CHARS + 1,
                what: format!("longer than {MAX_SCHEDULE_CHARS} characters"),
            });
        }
        if text.trim().is_empty() {
            return Ok(Schedule::always());
        }
        let mut days: [Vec<(u16, u16)>; 7] = Default::default();
        let mut offset = 0usize;
        for entry in text.split(';') {
            parse_entry(entry, offset, &mut days)?;
            offset += entry.chars().count() + 1;
        }
        for d in &mut days {
            d.sort_unstable();
            // Merge overlapping and touching ranges, so the normal form is short.
            let mut merged: Vec<(u16, u16)> = Vec::with_capacity(d.len());
            for &(s, e) in d.iter() {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            *d = merged;
        }
        Ok(Schedule { days: Some(days) })
    }

    /// Whether the owner lends the machine at `at`, the owner's civil time.
    pub fn allows(&self, at: DateTime) -> bool {
        let Some(days) = &self.days else {
            return true;
        };
        let day = usize::from(at.weekday().to_monday_zero_offset().unsigned_abs());
        let minute =
            u16::from(at.hour().unsigned_abs()) * 60 + u16::from(at.minute().unsigned_abs());
        days.get(day)
            .is_some_and(|ranges| ranges.iter().any(|&(s, e)| (s..e).contains(&minute)))
    }
}

impl fmt::Display for Schedule {
    /// A normalised form: one entry per day with ranges (`Mon 00:00-08:30,18:00-24:00`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(days) = &self.days else {
            return f.write_str("always");
        };
        let mut first = true;
        for (name, ranges) in DAY_NAMES.iter().zip(days) {
            if ranges.is_empty() {
                continue;
            }
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{name} ")?;
            for (i, (s, e)) in ranges.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{:02}:{:02}-{:02}:{:02}", s / 60, s % 60, e / 60, e % 60)?;
            }
        }
        if first {
            f.write_str("never")?;
        }
        Ok(())
    }
}

/// Parses one `;`-separated entry starting at character `offset` (0-based).
fn parse_entry(
    entry: &str,
    offset: usize,
    days: &mut [Vec<(u16, u16)>; 7],
) -> Result<(), ScheduleError> {
    let err = |at: usize, what: String| ScheduleError {
        position: offset + at + 1,
        what,
    };
    let lead = entry.chars().take_while(|c| c.is_whitespace()).count();
    let body: String = entry.chars().skip(lead).collect();
    let body = body.trim_end();
    if body.is_empty() {
        return Err(err(lead, "an empty entry (two ';' in a row?)".into()));
    }
    let days_len = body.chars().take_while(|c| !c.is_whitespace()).count();
    let day_part: String = body.chars().take(days_len).collect();
    let rest: String = body.chars().skip(days_len).collect();
    let times_lead = rest.chars().take_while(|c| c.is_whitespace()).count();
    let time_part: String = rest.chars().skip(times_lead).collect();
    let times_at = lead + days_len + times_lead;

    let mut chosen = [false; 7];
    let mut at = lead;
    for item in day_part.split(',') {
        let (from, to) = match item.split_once('-') {
            Some((a, b)) => (a, Some(b)),
            None => (item, None),
        };
        let first =
            day_index(from).ok_or_else(|| err(at, format!("{from:?} is not a day (Mon..Sun)")))?;
        let last = match to {
            Some(b) => day_index(b).ok_or_else(|| {
                err(
                    at + from.chars().count() + 1,
                    format!("{b:?} is not a day (Mon..Sun)"),
                )
            })?,
            None => first,
        };
        let mut d = first;
        loop {
            chosen[d] = true;
            if d == last {
                break;
            }
            d = (d + 1) % 7;
        }
        at += item.chars().count() + 1;
    }

    let mut ranges = Vec::new();
    if time_part.is_empty() {
        ranges.push((0, MINUTES_PER_DAY, false));
    } else {
        let mut at = times_at;
        for item in time_part.split(',') {
            let item_trim_lead = item.chars().take_while(|c| c.is_whitespace()).count();
            let it = item.trim();
            let pos = at + item_trim_lead;
            let (a, b) = it
                .split_once('-')
                .ok_or_else(|| err(pos, format!("{it:?} is not a time range HH:MM-HH:MM")))?;
            let start = minute_of_day(a)
                .ok_or_else(|| err(pos, format!("{a:?} is not a time HH:MM (00:00..24:00)")))?;
            let end = minute_of_day(b).ok_or_else(|| {
                err(
                    pos + a.chars().count() + 1,
                    format!("{b:?} is not a time HH:MM (00:00..24:00)"),
                )
            })?;
            if start == end {
                return Err(err(pos, format!("{it:?} is an empty range")));
            }
            if start == MINUTES_PER_DAY {
                return Err(err(pos, "a range cannot start at 24:00".into()));
            }
            ranges.push((start, end, end < start));
            at += item.chars().count() + 1;
        }
    }
    for (d, _) in chosen.iter().enumerate().filter(|(_, c)| **c) {
        for &(start, end, crosses) in &ranges {
            if crosses {
                days[d].push((start, MINUTES_PER_DAY));
                if end > 0 {
                    days[(d + 1) % 7].push((0, end));
                }
            } else {
                days[d].push((start, end));
            }
        }
    }
    Ok(())
}

fn day_index(name: &str) -> Option<usize> {
    DAY_NAMES
        .iter()
        .position(|d| d.eq_ignore_ascii_case(name.trim()))
}

/// `HH:MM` as minutes since midnight, `24:00` included.
fn minute_of_day(text: &str) -> Option<u16> {
    let (h, m) = text.trim().split_once(':')?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    let h: u16 = h.parse().ok()?;
    let m: u16 = m.parse().ok()?;
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return None;
    }
    Some(h * 60 + m)
}

/// Why the machine is withheld (S5), recorded with the transition so
/// predictions and the owner can tell a switched-off node from a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum S5Cause {
    /// The node was off (a silence longer than `max_gap`) or stopped.
    Off,
    /// `gleaner pause` (or a finished `pause --after-job`).
    Paused,
    /// Outside `[owner] hours`.
    Schedule,
    /// Running on battery with `[owner] on_battery = "pause"`.
    Battery,
}

impl S5Cause {
    pub const ALL: [S5Cause; 4] = [
        S5Cause::Off,
        S5Cause::Paused,
        S5Cause::Schedule,
        S5Cause::Battery,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            S5Cause::Off => "off",
            S5Cause::Paused => "paused",
            S5Cause::Schedule => "schedule",
            S5Cause::Battery => "battery",
        }
    }
}

impl fmt::Display for S5Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `[owner] on_battery` says to do when the machine runs on battery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBattery {
    /// Keep hosting as on mains power.
    #[default]
    Run,
    /// Withhold the machine (S5, cause `battery`) until mains power is back.
    Pause,
}

/// Why no guest runs here now: the one answer to "why is my machine not
/// working?". `None` from [`why_idle`] means a guest runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason", content = "state")]
pub enum IdleReason {
    /// Hosting is off in the config (`[guest] enabled = false`).
    GuestsDisabled,
    /// The owner paused the node.
    Paused,
    /// Outside `[owner] hours`.
    Schedule,
    /// On battery, with `on_battery = "pause"`.
    Battery,
    /// No reading of the host yet.
    Starting,
    /// The owner uses the machine (S2 takes only what is left, S3 none).
    OwnerBusy(State),
    /// Free memory below what a guest may need (S4).
    MemoryShort,
    /// The node could take a guest but nobody sent one.
    NoWork,
}

impl fmt::Display for IdleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdleReason::GuestsDisabled => f.write_str("hosting is off ([guest] enabled = false)"),
            IdleReason::Paused => f.write_str("paused by the owner"),
            IdleReason::Schedule => f.write_str("outside the owner's hours ([owner] hours)"),
            IdleReason::Battery => f.write_str("on battery ([owner] on_battery = \"pause\")"),
            IdleReason::Starting => f.write_str("starting: no reading of the host yet"),
            IdleReason::OwnerBusy(s) => write!(f, "the owner is using the machine ({s})"),
            IdleReason::MemoryShort => f.write_str("memory is short (S4)"),
            IdleReason::NoWork => f.write_str("no work: no job was sent here"),
        }
    }
}

/// What [`why_idle`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleFacts {
    pub guests_enabled: bool,
    pub paused: bool,
    /// Withheld by the schedule or the battery (not by a pause).
    pub withheld: Option<S5Cause>,
    /// The last reading's state, `None` before the first.
    pub state: Option<State>,
    pub guest_running: bool,
}

/// Why no guest runs, most binding reason first; `None` when one runs.
pub fn why_idle(facts: IdleFacts) -> Option<IdleReason> {
    if facts.guest_running {
        return None;
    }
    if !facts.guests_enabled {
        return Some(IdleReason::GuestsDisabled);
    }
    if facts.paused {
        return Some(IdleReason::Paused);
    }
    match facts.withheld {
        Some(S5Cause::Schedule) => return Some(IdleReason::Schedule),
        Some(S5Cause::Battery) => return Some(IdleReason::Battery),
        Some(S5Cause::Paused) => return Some(IdleReason::Paused),
        Some(S5Cause::Off) | None => {}
    }
    Some(match facts.state {
        None => IdleReason::Starting,
        Some(s @ (State::S2 | State::S3)) => IdleReason::OwnerBusy(s),
        Some(State::S4) => IdleReason::MemoryShort,
        Some(State::S5) => IdleReason::Paused,
        Some(State::S1) => IdleReason::NoWork,
    })
}

/// Longest `pause --for`: a year. Every instant computed from a pause's
/// length stays representable below it.
pub const MAX_PAUSE_SECS: u64 = 366 * 86_400;

/// A timed pause outside 1 s ..= [`MAX_PAUSE_SECS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a timed pause lasts 1 to {MAX_PAUSE_SECS} seconds (a year)")]
pub struct PauseOutOfRange {
    /// The length asked for, seconds.
    pub asked: u64,
}

/// The one bound on a pause's length (`None`: until `resume`), checked by
/// the host loop before anything is saved; the control API only forwards.
pub fn check_pause(for_secs: Option<u64>) -> Result<(), PauseOutOfRange> {
    match for_secs {
        Some(asked) if asked == 0 || asked > MAX_PAUSE_SECS => Err(PauseOutOfRange { asked }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    fn at(y: i16, mo: i8, d: i8, h: i8, mi: i8) -> DateTime {
        date(y, mo, d).at(h, mi, 0, 0)
    }

    #[test]
    fn weekday_evenings_cross_midnight_and_weekends_are_whole_days() {
        let s = Schedule::parse("Mon-Fri 18:00-08:30; Sat,Sun").unwrap();
        // 2026-11-23 is a Monday.
        assert!(!s.allows(at(2026, 11, 23, 12, 0)));
        assert!(!s.allows(at(2026, 11, 23, 17, 59)));
        assert!(s.allows(at(2026, 11, 23, 18, 0)));
        assert!(
            s.allows(at(2026, 11, 24, 8, 29)),
            "Monday's range runs into Tuesday"
        );
        assert!(!s.allows(at(2026, 11, 24, 8, 30)));
        // Sunday's whole day ends at midnight: Monday morning is not lent.
        assert!(!s.allows(at(2026, 11, 23, 3, 0)));
        // Friday night runs into Saturday, which is whole anyway.
        assert!(s.allows(at(2026, 11, 28, 12, 0)));
        assert!(s.allows(at(2026, 11, 29, 23, 59)));
        assert_eq!(
            s.to_string(),
            "Mon 18:00-24:00; Tue 00:00-08:30,18:00-24:00; Wed 00:00-08:30,18:00-24:00; \
             Thu 00:00-08:30,18:00-24:00; Fri 00:00-08:30,18:00-24:00; Sat 00:00-24:00; Sun 00:00-24:00"
        );
    }

    #[test]
    fn day_ranges_wrap_and_several_times_per_entry() {
        let s = Schedule::parse("fri-mon 10:00-12:00, 14:00-24:00").unwrap();
        assert!(s.allows(at(2026, 11, 23, 11, 0))); // Monday
        assert!(!s.allows(at(2026, 11, 24, 11, 0))); // Tuesday
        assert!(s.allows(at(2026, 11, 29, 23, 59))); // Sunday
        assert!(!s.allows(at(2026, 11, 29, 13, 0)));
        assert!(Schedule::parse("").unwrap().is_always());
        assert!(Schedule::parse("  ").unwrap().allows(at(2026, 1, 1, 0, 0)));
    }

    #[test]
    fn malformed_schedules_name_the_position() {
        let cases = [
            ("Mon-Fry 18:00-08:30", 5, "\"Fry\""),
            ("Mon-Fri 18:00-08:30; Sat,Sunday", 26, "\"Sunday\""),
            ("Mon 25:00-08:00", 5, "\"25:00\""),
            ("Mon 08:00-8:5", 11, "\"8:5\""),
            ("Mon 08:00", 5, "not a time range"),
            ("Mon 08:00-08:00", 5, "empty range"),
            ("Mon;;Tue", 5, "empty entry"),
        ];
        for (text, position, needle) in cases {
            let e = Schedule::parse(text).unwrap_err();
            assert_eq!(e.position, position, "{text}: {e}");
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
        let long = "Mon ".repeat(300);
        assert!(Schedule::parse(&long).is_err());
    }

    #[test]
    fn why_idle_puts_the_owner_first() {
        let base = IdleFacts {
            guests_enabled: true,
            paused: false,
            withheld: None,
            state: Some(State::S1),
            guest_running: false,
        };
        assert_eq!(why_idle(base), Some(IdleReason::NoWork));
        assert_eq!(
            why_idle(IdleFacts {
                guest_running: true,
                ..base
            }),
            None
        );
        assert_eq!(
            why_idle(IdleFacts {
                state: Some(State::S3),
                ..base
            }),
            Some(IdleReason::OwnerBusy(State::S3))
        );
        assert_eq!(
            why_idle(IdleFacts {
                state: Some(State::S4),
                ..base
            }),
            Some(IdleReason::MemoryShort)
        );
        assert_eq!(
            why_idle(IdleFacts {
                withheld: Some(S5Cause::Schedule),
                state: Some(State::S3),
                ..base
            }),
            Some(IdleReason::Schedule)
        );
        assert_eq!(
            why_idle(IdleFacts {
                withheld: Some(S5Cause::Battery),
                ..base
            }),
            Some(IdleReason::Battery)
        );
        assert_eq!(
            why_idle(IdleFacts {
                paused: true,
                withheld: Some(S5Cause::Schedule),
                ..base
            }),
            Some(IdleReason::Paused)
        );
        assert_eq!(
            why_idle(IdleFacts {
                state: None,
                ..base
            }),
            Some(IdleReason::Starting)
        );
    }

    #[test]
    fn a_pause_lasts_a_second_to_a_year_or_until_resume() {
        assert_eq!(check_pause(None), Ok(()));
        assert_eq!(check_pause(Some(1)), Ok(()));
        assert_eq!(check_pause(Some(MAX_PAUSE_SECS)), Ok(()));
        for asked in [0, MAX_PAUSE_SECS + 1, u64::MAX] {
            assert_eq!(check_pause(Some(asked)), Err(PauseOutOfRange { asked }));
        }
        assert_eq!(
            PauseOutOfRange { asked: 0 }.to_string(),
            "a timed pause lasts 1 to 31622400 seconds (a year)"
        );
    }
}
