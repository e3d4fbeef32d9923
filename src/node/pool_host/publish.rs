//! What this host tells the pool about itself, as wire values: its answer
//! to a reliability query ([`wire_answer`]), its summary's reliability part
//! ([`summary_body`]: TR ladders at fixed window lengths and memory levels,
//! its week's spells, the images its cache holds: [`images_held`]), and
//! when to publish a summary ([`Pacer`]: on a change of state, slot, power
//! step or images held, at most once per minimum gap, and on a randomised
//! heartbeat of minutes; a host with nothing new is quiet).
//!
//! Pure: the pool host computes the answers and reads the clock; this
//! module turns them into wire values and decisions. It knows nothing of
//! the Swarm or of tokio.

use std::time::Instant;

use crate::model::baselines::pool_prior::PriorSource;
use crate::model::predict::InitialState;
use crate::net::protocol::{
    FailureByCause, ReliabilityAnswer, WireLadder, WireSpellLengths, WireSpells, WireState,
    CURVE_POINTS_MAX, IMAGES_HELD_MAX, LADDER_SECS,
};
use crate::net::summary::LadderBasis;
use crate::net::SummaryBody;
use crate::node::answer::HostAnswer;
use crate::report::{Basis, Forecast};

/// The window lengths asked of the host's own predictor to fill a ladder:
/// each answer's curve covers ¼ to 4 times the asked length, so these two
/// cover every rung of [`LADDER_SECS`].
pub const LADDER_ASKS_SECS: [u64; 2] = [3_600, 28_800];

// The pacing rule lives in the model, shared with `gleaner simulate`.
pub use crate::model::pace::{StatusKey, POWER_STEP_MILLI};

/// When to publish a summary ([`crate::model::pace::Pacer`]) on this
/// node's monotonic clock.
pub type Pacer = crate::model::pace::Pacer<Instant, StatusKey>;

/// A summary's reliability part from the host's own answers: for each
/// memory level, the answers to [`LADDER_ASKS_SECS`] (in that order, an
/// answer missing where the host could not predict). The spells,
/// availability and history days come from the lowest level's first answer.
/// `images` are the ids the image cache holds, most recently used first:
/// the first [`IMAGES_HELD_MAX`] go.
pub fn summary_body(
    computed_at_unix: i64,
    speed_milli: u32,
    levels: &[(u32, Vec<Option<HostAnswer>>)],
    images: &[[u8; 32]],
) -> SummaryBody {
    let first = levels
        .first()
        .and_then(|(_, answers)| answers.first())
        .and_then(Option::as_ref);
    let ladders = levels
        .iter()
        .map(|(memory_mib, answers)| WireLadder {
            memory_mib: *memory_mib,
            tr_milli: ladder(answers.iter().flatten()),
        })
        .filter(|l| !l.tr_milli.is_empty())
        .collect();
    SummaryBody {
        computed_at_unix,
        speed_milli,
        availability_milli: first
            .and_then(|a| a.availability)
            .map(|a| (a.clamp(0.0, 1.0) * 1000.0).round() as u32),
        days_used: first.map_or(0, |a| {
            u32::try_from(a.forecast.days_used).unwrap_or(u32::MAX)
        }),
        ladders,
        spells: first.and_then(|a| a.spells).map(|s| wire_spells(&s)),
        spell_lengths: first
            .and_then(|a| a.spell_lengths.as_ref())
            .map(wire_spell_lengths),
        images: images.iter().take(IMAGES_HELD_MAX).copied().collect(),
        // The ladders' first answer says what they stand on (a host
        // computes every rung from one record); none computed: no record.
        basis: first.map_or(LadderBasis::Record, |a| ladder_basis(a.forecast.basis)),
    }
}

/// What a forecast stands on, as a summary says it.
fn ladder_basis(basis: Basis) -> LadderBasis {
    match basis {
        Basis::Record => LadderBasis::Record,
        Basis::Prior(PriorSource::BuiltIn) => LadderBasis::BuiltInPrior,
        Basis::Prior(PriorSource::Pool { .. }) => LadderBasis::PoolPrior,
    }
}

/// TR in thousandths at each rung of [`LADDER_SECS`], read off the answers'
/// curves; it stops at the first rung no curve covers.
fn ladder<'a>(answers: impl Iterator<Item = &'a HostAnswer> + Clone) -> Vec<u16> {
    let mut rungs = Vec::with_capacity(LADDER_SECS.len());
    for secs in LADDER_SECS {
        let tr = answers.clone().find_map(|a| {
            a.curve
                .iter()
                .find(|(len, _)| *len == u64::from(secs))
                .map(|&(_, tr)| tr)
        });
        match tr.filter(|t| t.is_finite()) {
            Some(tr) => rungs.push((tr.clamp(0.0, 1.0) * 1000.0).round() as u16),
            None => break,
        }
    }
    rungs
}

fn wire_spells(s: &crate::model::sched::spells::PastSpells) -> WireSpells {
    WireSpells {
        usable_secs: whole_secs(s.usable_secs),
        failing_secs: whole_secs(s.failing_secs),
        episodes: s.episodes,
    }
}

fn wire_spell_lengths(l: &crate::model::sched::spells::SpellLengths) -> WireSpellLengths {
    let secs = |v: &[f64]| v.iter().map(|&x| whole_secs(x)).collect();
    WireSpellLengths {
        up_secs: secs(&l.up),
        up_seen: l.up_seen,
        up_cut_secs: secs(&l.up_cut),
        outage_secs: secs(&l.outages),
        outages_seen: l.outages_seen,
    }
}

/// The wire form of a forecast. The wire's `initial_state` holds one state:
/// when the record stops before W the forecast starts from the history's mix
/// of states, and the wire then carries the host's current state instead
/// (PROTOCOL.md says so).
pub fn wire_answer(
    answer: &HostAnswer,
    fallback_state: WireState,
    power: PowerMilli,
    slot_free: bool,
) -> ReliabilityAnswer {
    let f = &answer.forecast;
    let [s3, s4, s5] = f.fail_by_cause.unwrap_or([0.0; 3]);
    ReliabilityAnswer {
        tr: f.tr,
        failure: FailureByCause { s3, s4, s5 },
        initial_state: match f.initial {
            Some(InitialState::Observed(state)) => state.into(),
            _ => fallback_state,
        },
        days_used: u32::try_from(f.days_used).unwrap_or(u32::MAX),
        method: wire_method(f),
        relative_power_milli: power.effective,
        slot_free,
        curve: answer
            .curve
            .iter()
            .take(CURVE_POINTS_MAX)
            .copied()
            .collect(),
        availability_milli: answer
            .availability
            .map(|a| (a.clamp(0.0, 1.0) * 1000.0).round() as u32),
        speed_milli: power.speed,
        spells: answer.spells.as_ref().map(wire_spells),
        spell_lengths: answer.spell_lengths.as_ref().map(wire_spell_lengths),
    }
}

/// The wire's `method`: the method's name for a forecast from the record;
/// for a host with no day of record, which prior it answered with
/// ([`PRIOR_METHODS`]).
fn wire_method(f: &Forecast) -> String {
    match f.basis {
        Basis::Record => f.method.to_string(),
        Basis::Prior(PriorSource::Pool { .. }) => PRIOR_METHODS[0].to_string(),
        Basis::Prior(PriorSource::BuiltIn) => PRIOR_METHODS[1].to_string(),
    }
}

/// The wire `method` of a prior answer: the pool's typical curve, or the
/// built-in population's (a wire value, so `net::protocol`'s).
pub use crate::net::protocol::PRIOR_METHODS;

/// The image cache's count of changes ([`crate::image::ImageCache::changes`]),
/// 0 for a host that runs no images: the pacer's `holdings`.
pub fn holdings(images: Option<&crate::image::ImageCache>) -> u64 {
    images.map_or(0, crate::image::ImageCache::changes)
}

/// The count of changes, read first, and the ids of the images the cache
/// holds, most recently used first (none when it cannot be listed; a few
/// small reads, one `image.json` per image): a summary that goes out with
/// this count says at least these.
pub fn images_held(images: Option<&crate::image::ImageCache>) -> (u64, Vec<[u8; 32]>) {
    let count = holdings(images);
    let held = images
        .and_then(|c| c.list().ok())
        .map(|list| list.iter().map(|i| i.id.to_bytes()).collect())
        .unwrap_or_default();
    (count, held)
}

/// Seconds as the wire's u32 (a week fits many times over).
fn whole_secs(secs: f64) -> u32 {
    secs.round().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// A host's power as it answers: Γ = P·A now, and P alone, in thousandths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerMilli {
    pub effective: u32,
    pub speed: u32,
}

#[cfg(test)]
#[path = "publish_tests.rs"]
mod tests;
