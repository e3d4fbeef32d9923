//! Owner habits for `gleaner trace synth --habit` (issue 28): the kinds of
//! desktop owner a pool of home and office machines mixes, as overrides of
//! the fields of a drawn [`Personality`] that make the habit.
//!
//! `any` leaves the personality as the seed draws it (the traces of earlier
//! versions, byte for byte). Every other habit re-draws only its own fields
//! from a generator of its own, seeded from the trace's seed, so the rest of
//! the trace is drawn as before. This module knows nothing of the trace
//! format, the command line or the scheduler that replays the traces.

use super::Personality;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;
use std::str::FromStr;

/// A kind of owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Habit {
    /// Whatever the seed draws (the generator's spread of lab owners).
    #[default]
    Any,
    /// Office hours: in on most weekdays from the morning for a full day,
    /// seldom in the evening or at the weekend; the machine stays on.
    Office,
    /// A home desktop: used in the evenings and at weekends, seldom in the
    /// day, often switched off for the night.
    Evening,
    /// Office hours, and the machine switched off most nights and weekends.
    NightsOff,
    /// Weekdays at work, never at the weekend, and the machine mostly off
    /// from Friday evening to Monday.
    WeekendsAway,
}

impl Habit {
    pub const ALL: [Habit; 5] = [
        Habit::Any,
        Habit::Office,
        Habit::Evening,
        Habit::NightsOff,
        Habit::WeekendsAway,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Habit::Any => "any",
            Habit::Office => "office",
            Habit::Evening => "evening",
            Habit::NightsOff => "nights-off",
            Habit::WeekendsAway => "weekends-away",
        }
    }

    /// `p` with this habit's fields drawn for `seed`.
    pub fn apply(self, p: Personality, seed: u64) -> Personality {
        // A generator apart from the trace's, so the rest is drawn as before.
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6861_6269_7400_0000);
        let r = &mut rng;
        match self {
            Habit::Any => p,
            Habit::Office => Personality {
                weekday_presence: r.random_range(0.85..0.97),
                weekend_presence: r.random_range(0.0..0.1),
                arrival_hour: r.random_range(7.5..9.5),
                session_hours: r.random_range(7.0..10.0),
                evening_prob: r.random_range(0.0..0.1),
                night_off_prob: 0.0,
                weekend_off_prob: r.random_range(0.0..0.1),
                ..p
            },
            Habit::Evening => Personality {
                weekday_presence: r.random_range(0.1..0.35),
                weekend_presence: r.random_range(0.5..0.85),
                arrival_hour: r.random_range(9.0..13.0),
                session_hours: r.random_range(2.0..5.0),
                evening_prob: r.random_range(0.8..0.97),
                night_off_prob: r.random_range(0.4..0.9),
                weekend_off_prob: r.random_range(0.2..0.5),
                ..p
            },
            Habit::NightsOff => Personality {
                weekday_presence: r.random_range(0.8..0.95),
                arrival_hour: r.random_range(7.5..10.0),
                session_hours: r.random_range(6.0..9.0),
                night_off_prob: r.random_range(0.6..0.95),
                weekend_off_prob: r.random_range(0.6..0.95),
                ..p
            },
            Habit::WeekendsAway => Personality {
                weekday_presence: r.random_range(0.75..0.95),
                weekend_presence: 0.0,
                evening_prob: r.random_range(0.1..0.4),
                night_off_prob: r.random_range(0.0..0.2),
                weekend_off_prob: r.random_range(0.6..0.95),
                ..p
            },
        }
    }
}

impl fmt::Display for Habit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown habit name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown habit {0:?}; known: any, office, evening, nights-off, weekends-away")]
pub struct UnknownHabit(pub String);

impl FromStr for Habit {
    type Err = UnknownHabit;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Habit::ALL
            .into_iter()
            .find(|h| h.name() == lower)
            .ok_or_else(|| UnknownHabit(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_keeps_the_drawn_owner_and_the_others_set_their_habit() {
        let drawn = Personality::for_seed(3);
        assert_eq!(Habit::Any.apply(drawn.clone(), 3), drawn);
        let office = Habit::Office.apply(drawn.clone(), 3);
        assert!(office.weekday_presence >= 0.85 && office.night_off_prob == 0.0);
        // Only the habit's fields change.
        assert_eq!(office.total_mib, drawn.total_mib);
        assert_eq!(
            office.bursts_per_session_hour,
            drawn.bursts_per_session_hour
        );
        let home = Habit::Evening.apply(drawn.clone(), 3);
        assert!(home.evening_prob >= 0.8 && home.weekday_presence < 0.35);
        assert_eq!(Habit::WeekendsAway.apply(drawn, 3).weekend_presence, 0.0);
    }

    #[test]
    fn names_parse_back() {
        for h in Habit::ALL {
            assert_eq!(h.name().parse::<Habit>(), Ok(h));
        }
        assert!("weekend".parse::<Habit>().is_err());
    }
}
