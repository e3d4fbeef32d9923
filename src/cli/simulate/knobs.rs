//! The simulator's experiment knobs, read from the environment for sweeps
//! (`GLEANER_TAIL_RULE`, `GLEANER_TAIL_COPIES`, `GLEANER_WINDOW_RULE`,
//! `GLEANER_DUEL`): not
//! settings, so a malformed value or pair is ignored and the rule's default
//! kept.

/// The `KEY=VALUE` pairs of the knob `var` ([`parse_pairs`]); none when
/// it is unset.
fn pairs(var: &str) -> Vec<(String, String, Option<f64>)> {
    std::env::var(var).map_or_else(|_| Vec::new(), |v| parse_pairs(&v))
}

/// Comma-separated `KEY=VALUE` pairs, trimmed, each with its value as a
/// finite number when it is one; pairs without `=` are skipped.
fn parse_pairs(v: &str) -> Vec<(String, String, Option<f64>)> {
    v.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| {
            let (key, value) = (key.trim(), value.trim());
            let num = value.parse::<f64>().ok().filter(|x| x.is_finite());
            (key.to_string(), value.to_string(), num)
        })
        .collect()
}

/// The tail-copy rule: the default, or for sweeps `GLEANER_TAIL_RULE` as
/// "MIN_GAIN_SECS,MIN_GAIN_SHARE,KILL_EVIDENCE(0|1)" and
/// `GLEANER_TAIL_COPIES` as `KEY=VALUE` pairs (experiments' knobs, not
/// settings: a malformed value is ignored).
pub(super) fn tail_rule_from_env() -> crate::model::sched::tail::TailRule {
    let mut rule = crate::model::sched::tail::TailRule::default();
    if let Ok(v) = std::env::var("GLEANER_TAIL_RULE") {
        let parts: Vec<&str> = v.split(',').collect();
        if let [secs, share, kills] = parts.as_slice() {
            if let (Ok(secs), Ok(share)) = (secs.parse::<f64>(), share.parse::<f64>()) {
                rule.min_gain_secs = secs;
                rule.min_gain_share = share;
                rule.kill_evidence = *kills == "1";
            }
        }
    }
    // How many copies at once (`GLEANER_TAIL_COPIES`: `copies=`,
    // `kills_for_more=` (a count or `none`), `when_killed=`), and when a
    // task on the critical path gets one in the bulk (`critical=`, a share
    // or `none`).
    let count = |x: f64| x.clamp(0.0, f64::from(u32::MAX)) as u32;
    for (key, value, num) in pairs("GLEANER_TAIL_COPIES") {
        match (key.as_str(), num) {
            ("copies", Some(x)) => rule.copies = count(x),
            ("kills_for_more", Some(x)) => rule.kills_for_more = count(x),
            ("kills_for_more", None) if value == "none" => rule.kills_for_more = u32::MAX,
            ("when_killed", Some(x)) => rule.copies_when_killed = count(x),
            ("critical", Some(x)) if x >= 0.0 => rule.critical_share = Some(x),
            ("critical", None) if value == "none" => rule.critical_share = None,
            _ => {}
        }
    }
    rule
}

/// The later-window rule: the default, or for sweeps `GLEANER_WINDOW_RULE`
/// as comma-separated `KEY=VALUE` over the rule's fields (`hold_below`,
/// `min_gain`, `slack`, `retry_secs`, `retry_share`, `hopeless`,
/// `present_weight`, `kill_limit`, `typical_below` (`none` or a share),
/// `keep_pick`, `free_now_kept`, `tail_only` (0|1), `tail_within`,
/// `max_wait`, `kill_near`, `max_held` (seconds; also `none`)). An
/// experiment's knob, not a setting: a malformed pair is ignored.
pub(super) fn window_rule_from_env() -> crate::model::sched::window::WindowRule {
    let mut rule = crate::model::sched::window::WindowRule::default();
    for (key, value, num) in pairs("GLEANER_WINDOW_RULE") {
        let (key, value) = (key.as_str(), value.as_str());
        match (key, num) {
            ("hold_below", Some(x)) => rule.hold_below = x,
            ("min_gain", Some(x)) => rule.min_gain = x,
            ("slack", Some(x)) => rule.slack = x,
            ("retry_secs", Some(x)) => rule.retry_secs = x,
            ("retry_share", Some(x)) => rule.retry_share = x,
            ("hopeless", Some(x)) => rule.hopeless = x,
            ("present_weight", Some(x)) => rule.present_weight = x,
            ("kill_limit", Some(x)) if x >= 0.0 => {
                rule.kill_limit = x.min(f64::from(u32::MAX)) as u32
            }
            ("typical_below", Some(x)) => rule.typical_below = Some(x),
            ("typical_below", None) if value == "none" => rule.typical_below = None,
            ("keep_pick", Some(x)) => rule.keep_pick = x != 0.0,
            ("free_now_kept", Some(x)) => rule.free_now_kept = x != 0.0,
            ("tail_only", Some(x)) => rule.tail_only = x != 0.0,
            ("tail_within", Some(x)) => rule.tail_within_secs = x,
            ("max_wait", Some(x)) => rule.max_wait_secs = Some(x),
            ("max_wait", None) if value == "none" => rule.max_wait_secs = None,
            ("kill_near", Some(x)) => rule.kill_near_secs = Some(x),
            ("kill_near", None) if value == "none" => rule.kill_near_secs = None,
            ("max_held", Some(x)) => rule.max_held_secs = Some(x),
            ("max_held", None) if value == "none" => rule.max_held_secs = None,
            _ => {}
        }
    }
    rule
}

/// How `proactive-auto` back-tests the two rules (`GLEANER_DUEL`:
/// `first=`, the first back-test in the plain estimate's p50s; `step=`,
/// seconds between back-tests; `count=`, at most this many; `align=`,
/// the first put back to a whole number of these seconds), an
/// experiment's knob like `GLEANER_WINDOW_RULE`.
pub(super) fn duel_rule_from_env() -> crate::model::sched::duel::DuelRule {
    let mut rule = crate::model::sched::duel::DuelRule::default();
    for (key, _, num) in pairs("GLEANER_DUEL") {
        match (key.as_str(), num) {
            ("first", Some(x)) if x > 0.0 => rule.first_in_p50s = x,
            ("step", Some(x)) if x >= 1.0 => rule.step_secs = x,
            ("count", Some(x)) if x >= 1.0 => rule.backtests = (x as usize).min(64),
            ("align", Some(x)) if x >= 1.0 => rule.align_secs = Some(x),
            _ => {}
        }
    }
    rule
}

/// Whether a held task is weighed again whenever a host frees
/// (`GLEANER_WINDOW_RULE` with `give_way=1`; the same experiment's knob).
pub(super) fn gives_way_from_env() -> bool {
    std::env::var("GLEANER_WINDOW_RULE").is_ok_and(|v| {
        v.split(',')
            .any(|pair| pair.trim().replace(' ', "") == "give_way=1")
    })
}

#[cfg(test)]
mod tests {
    use super::parse_pairs;

    #[test]
    fn pairs_are_trimmed_numbers_finite_and_pairs_without_a_value_skipped() {
        let got = parse_pairs(" hold_below = 0.4,junk,max_wait=none,slack=inf,count=3");
        let want = [
            ("hold_below", "0.4", Some(0.4)),
            ("max_wait", "none", None),
            ("slack", "inf", None),
            ("count", "3", Some(3.0)),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for ((k, v, n), (wk, wv, wn)) in got.iter().zip(want) {
            assert_eq!((k.as_str(), v.as_str(), *n), (wk, wv, wn));
        }
    }
}
