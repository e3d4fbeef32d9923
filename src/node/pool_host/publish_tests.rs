//! Tests of `node::publish`: the pacer publishes on a change (after the
//! gap) and on a randomised heartbeat, and is quiet otherwise; a summary's
//! ladder is read off the host's answers rung by rung.

use super::*;
use crate::model::baselines::MethodId;
use crate::model::state::State;
use crate::report::{Basis, Forecast};
use std::time::Duration;

fn key(state: State, slot_free: bool) -> StatusKey {
    StatusKey::new(state, slot_free, 500)
}

#[test]
fn a_host_with_nothing_new_is_quiet_until_its_heartbeat() {
    let heartbeat = Duration::from_secs(300);
    let mut pacer = Pacer::new(heartbeat);
    let t0 = Instant::now();
    let idle = key(State::S1, true);
    assert!(pacer.due(t0, idle), "the first summary goes out at once");
    pacer.published(t0, idle, 0.5);
    // Nothing changes: quiet for the whole heartbeat (0.5 → exactly 1.0 of it).
    for secs in [1, 10, 60, 299] {
        assert!(!pacer.due(t0 + Duration::from_secs(secs), idle), "{secs}");
    }
    assert_eq!(pacer.next_look(idle), Some(t0 + heartbeat));
    assert!(pacer.due(t0 + heartbeat, idle));
    // The heartbeat is randomised between 0.75 and 1.25 of the nominal.
    pacer.published(t0, idle, 0.0);
    assert_eq!(pacer.next_look(idle), Some(t0 + Duration::from_secs(225)));
    pacer.published(t0, idle, 1.0);
    assert_eq!(pacer.next_look(idle), Some(t0 + Duration::from_secs(375)));
}

#[test]
fn a_change_goes_out_once_the_gap_allows_and_power_jitter_does_not() {
    let mut pacer = Pacer::new(Duration::from_secs(300));
    let t0 = Instant::now();
    let idle = key(State::S1, true);
    pacer.published(t0, idle, 0.5);
    let busy = key(State::S1, false);
    // Within the 10 s gap a change waits; the pacer says when to look again.
    assert!(!pacer.due(t0 + Duration::from_secs(3), busy));
    assert_eq!(pacer.next_look(busy), Some(t0 + Duration::from_secs(10)));
    assert!(pacer.due(t0 + Duration::from_secs(10), busy));
    assert!(pacer.due(t0 + Duration::from_secs(11), key(State::S3, true)));
    // Γ moving within a 5 % step is no change; across one it is.
    assert_eq!(
        StatusKey::new(State::S1, true, 510),
        StatusKey::new(State::S1, true, 549)
    );
    assert_ne!(
        StatusKey::new(State::S1, true, 549),
        StatusKey::new(State::S1, true, 550)
    );
}

fn answer(curve: Vec<(u64, f64)>) -> HostAnswer {
    HostAnswer {
        forecast: Forecast {
            tr: 0.9,
            fail_by_cause: None,
            initial: None,
            days_used: 6,
            method: MethodId::default(),
            basis: Basis::Record,
        },
        curve,
        availability: Some(0.75),
        spells: None,
        spell_lengths: None,
    }
}

#[test]
fn the_ladder_is_read_off_the_answers_and_stops_where_history_ends() {
    let short = answer(vec![
        (900, 0.99),
        (1_800, 0.98),
        (3_600, 0.95),
        (7_200, 0.9),
        (14_400, 0.8),
    ]);
    let long = answer(vec![(7_200, 0.9), (14_400, 0.8), (28_800, 0.6)]);
    // More images than a summary carries: the most recently used go.
    let held: Vec<[u8; 32]> = (0..40u8).map(|i| [i; 32]).collect();
    let body = summary_body(
        1_700_000_000,
        900,
        &[
            (256, vec![Some(short.clone()), Some(long)]),
            (2_048, vec![Some(short), None]),
            (8_192, vec![None, None]),
        ],
        &held,
    );
    assert_eq!(body.images, held[..crate::net::protocol::IMAGES_HELD_MAX]);
    assert_eq!(body.ladders.len(), 2, "a level without answers is left out");
    assert_eq!(body.ladders[0].tr_milli, vec![990, 980, 950, 900, 800, 600]);
    assert_eq!(body.ladders[1].tr_milli, vec![990, 980, 950, 900, 800]);
    assert_eq!(
        (body.days_used, body.availability_milli, body.speed_milli),
        (6, Some(750), 900)
    );
    // What it builds is what a receiver accepts.
    let wire = crate::net::protocol::HostSummary {
        format: crate::net::protocol::SUMMARY_FORMAT,
        member: crate::net::protocol::Announcement {
            peer_id: vec![],
            addresses: vec![],
            logical_cpus: 1,
            memory_mib: 1,
            benchmark_score: 1,
            relative_power_milli: 1,
            state: WireState::S1,
            slot_free: true,
            version: "x".into(),
        },
        computed_at_unix: body.computed_at_unix,
        speed_milli: body.speed_milli,
        availability_milli: body.availability_milli,
        days_used: body.days_used,
        ladders: body.ladders,
        spells: None,
        spell_lengths: None,
    };
    let wire = crate::net::protocol::SummaryWithImages {
        summary: wire,
        images: body.images.clone(),
    };
    let checked = crate::net::summary::check_summary_with_images(&wire, 1_700_000_000).unwrap();
    assert_eq!(checked.images.as_deref(), Some(&body.images[..]));
    assert!((checked.curve_for(1_000).unwrap().tr_at(3_600.0) - 0.95).abs() < 1e-9);
}

#[test]
fn a_prior_answer_says_on_the_wire_which_prior_it_is() {
    use crate::model::baselines::pool_prior::PriorSource;
    let power = PowerMilli {
        effective: 500,
        speed: 600,
    };
    let mut a = answer(vec![(3_600, 0.9)]);
    let method = |a: &HostAnswer| wire_answer(a, WireState::S1, power, true).method;
    assert_eq!(method(&a), MethodId::default().to_string());
    a.forecast.days_used = 0;
    a.forecast.basis = Basis::Prior(PriorSource::Pool { members: 7 });
    assert_eq!(method(&a), "pool-prior");
    a.forecast.basis = Basis::Prior(PriorSource::BuiltIn);
    assert_eq!(method(&a), "built-in-prior");
    assert_eq!(wire_answer(&a, WireState::S1, power, true).days_used, 0);
}

#[test]
fn a_summary_says_which_prior_its_ladders_are() {
    use crate::model::baselines::pool_prior::PriorSource;
    use crate::net::summary::LadderBasis;
    let body = |basis: Basis| {
        let mut a = answer(vec![(3_600, 0.9), (7_200, 0.8)]);
        a.forecast.basis = basis;
        a.forecast.days_used = usize::from(basis == Basis::Record);
        summary_body(0, 500, &[(256, vec![Some(a)])], &[])
    };
    assert_eq!(body(Basis::Record).basis, LadderBasis::Record);
    let pooled = body(Basis::Prior(PriorSource::Pool { members: 5 }));
    assert_eq!(
        (pooled.days_used, pooled.basis),
        (0, LadderBasis::PoolPrior)
    );
    let built_in = body(Basis::Prior(PriorSource::BuiltIn));
    assert_eq!(built_in.basis, LadderBasis::BuiltInPrior);
    // Nothing computed: no ladders, and no prior to name.
    assert_eq!(summary_body(0, 500, &[], &[]).basis, LadderBasis::Record);
}
