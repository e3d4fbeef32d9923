//! Which rule places a batch (issue 28): plain `proactive`, or `proactive`
//! with bounded holds for later windows ([`bounded_holds`]).
//! Neither is the better one on every pool measured (holds win where the
//! owners all come back each morning, office and mixed pools; plain wins
//! on home, nights-off and weekends-away pools: docs/scheduling.md), so a
//! batch is placed by the one its consumer expects to end it sooner, judged
//! once, at the batch's start, from what is known then: the simulator's
//! `proactive-auto` (`sim/duel.rs`), tried and not the default
//! (docs/scheduling.md, "Tried: choosing the rule per batch").
//!
//! The caller measures both rules the same way (the same draws for both,
//! so the difference is the rules', not the noise's) and passes the two
//! expected makespans; this file only decides. Holds are chosen only when
//! they are expected to end the batch more than [`NEAR_TIE`] sooner: a
//! hold keeps a task back on a forecast, so near ties keep plain
//! placement. Pure code.

use super::window::WindowRule;
use serde::{Deserialize, Serialize};

/// Holds must be expected to end the batch at least this share sooner than
/// plain placement to be chosen.
pub const NEAR_TIE: f64 = 0.02;

/// The bounded holds of docs/scheduling.md ("Bounded holds"): no window
/// more than 6 h on, and at most 2 h held in all
/// (`max_wait=21600,max_held=7200`), as the duel was measured with (the
/// default window rule's wait is 2 h since).
pub fn bounded_holds() -> WindowRule {
    WindowRule {
        max_wait_secs: Some(6.0 * 3600.0),
        max_held_secs: Some(2.0 * 3600.0),
        ..WindowRule::default()
    }
}

/// How the two rules' makespans are expected by back-tests (the
/// simulator's `proactive-auto`): the first back-test is submitted
/// `first_in_p50s` times the plain estimate's p50 before now (most
/// replays are then done by now), each next one `step_secs` earlier, as
/// far as the hosts' history allows, at most `backtests`. With
/// `align_secs` the first is put back further, to a whole number of
/// `align_secs` before now (a day: every back-test replays the batch at
/// the hour of day it is submitted at now).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DuelRule {
    pub first_in_p50s: f64,
    pub step_secs: f64,
    pub backtests: usize,
    pub align_secs: Option<f64>,
}

impl DuelRule {
    /// Seconds before now back-test `b` (from 0) is submitted, for a
    /// plain estimate of median `p50_secs`.
    pub fn back_secs(&self, p50_secs: f64, b: usize) -> f64 {
        let mut first = self.first_in_p50s * p50_secs;
        if let Some(a) = self.align_secs.filter(|a| a.is_finite() && *a >= 1.0) {
            first = (first / a).ceil() * a;
        }
        first + b as f64 * self.step_secs
    }
}

impl Default for DuelRule {
    fn default() -> Self {
        DuelRule {
            first_in_p50s: 1.25,
            step_secs: 6.0 * 3600.0,
            backtests: 24,
            align_secs: None,
        }
    }
}

/// The two rules a batch can be placed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// `proactive`: every task starts on the best free host now.
    Plain,
    /// `proactive` with bounded holds for later windows.
    Holds,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Plain => "plain",
            Placement::Holds => "holds",
        }
    }
}

/// The decision and what it was made from: each rule's expected makespan
/// (seconds from the batch's start; infinite when the rule is not expected
/// to finish the batch).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Duel {
    pub plain_secs: f64,
    pub holds_secs: f64,
    pub chosen: Placement,
}

impl Duel {
    /// Holds when they are expected to end the batch more than
    /// [`NEAR_TIE`] sooner than plain placement (or plain placement is
    /// not expected to end it and holds are); plain otherwise, including
    /// when neither figure is a number.
    pub fn decide(plain_secs: f64, holds_secs: f64) -> Duel {
        let holds_finite = holds_secs.is_finite() && holds_secs >= 0.0;
        let plain_finite = plain_secs.is_finite() && plain_secs >= 0.0;
        let holds = holds_finite && (!plain_finite || holds_secs < plain_secs * (1.0 - NEAR_TIE));
        Duel {
            plain_secs,
            holds_secs,
            chosen: if holds {
                Placement::Holds
            } else {
                Placement::Plain
            },
        }
    }

    /// Why, in words: "holds: expected 27.6 h against 35.7 h plain".
    pub fn why(&self) -> String {
        let h = |s: f64| {
            if s.is_finite() {
                format!("{:.1} h", s / 3600.0)
            } else {
                "never".to_string()
            }
        };
        let (chosen, other, other_name) = match self.chosen {
            Placement::Holds => (self.holds_secs, self.plain_secs, "plain"),
            Placement::Plain => (self.plain_secs, self.holds_secs, "with holds"),
        };
        format!(
            "{}: expected {} against {} {other_name}",
            self.chosen.as_str(),
            h(chosen),
            h(other)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: f64 = 3600.0;

    #[test]
    fn holds_are_chosen_only_when_clearly_sooner() {
        assert_eq!(Duel::decide(35.7 * H, 27.6 * H).chosen, Placement::Holds);
        assert_eq!(Duel::decide(27.9 * H, 28.9 * H).chosen, Placement::Plain);
        // Within 2 %: a near tie keeps plain placement.
        assert_eq!(Duel::decide(100.0 * H, 98.5 * H).chosen, Placement::Plain);
        assert_eq!(Duel::decide(100.0 * H, 97.5 * H).chosen, Placement::Holds);
    }

    #[test]
    fn a_rule_not_expected_to_finish_loses() {
        assert_eq!(
            Duel::decide(f64::INFINITY, 50.0 * H).chosen,
            Placement::Holds
        );
        assert_eq!(
            Duel::decide(50.0 * H, f64::INFINITY).chosen,
            Placement::Plain
        );
        assert_eq!(
            Duel::decide(f64::INFINITY, f64::INFINITY).chosen,
            Placement::Plain
        );
        assert_eq!(Duel::decide(f64::NAN, f64::NAN).chosen, Placement::Plain);
    }

    #[test]
    fn aligned_backtests_fall_on_the_hour_of_day_of_now() {
        let day = DuelRule {
            step_secs: 24.0 * H,
            align_secs: Some(24.0 * H),
            ..DuelRule::default()
        };
        // p50 20 h: 1.25 x 20 = 25 h, put back to 48 h.
        assert_eq!(day.back_secs(20.0 * H, 0), 48.0 * H);
        assert_eq!(day.back_secs(20.0 * H, 2), 96.0 * H);
        let plain = DuelRule::default();
        assert_eq!(plain.back_secs(20.0 * H, 0), 25.0 * H);
        assert_eq!(plain.back_secs(20.0 * H, 1), 31.0 * H);
    }

    #[test]
    fn the_reason_names_both_figures() {
        let d = Duel::decide(35.7 * H, 27.6 * H);
        assert_eq!(d.why(), "holds: expected 27.6 h against 35.7 h plain");
        let d = Duel::decide(27.9 * H, f64::INFINITY);
        assert_eq!(d.why(), "plain: expected 27.9 h against never with holds");
    }
}
