//! A host's summary as this node believes it: the checks that turn a peer's
//! [`HostSummary`] (or the spells of a reliability answer) into typed,
//! bounded values, the pacing constants both the publisher and the network
//! task use, and [`MemberCache`], the bounded table of members heard that
//! a consumer ranks from.
//!
//! A summary is peer input: every list is bounded before it is read, every
//! number clamped or the summary refused, never a panic. Pure: no Swarm, no
//! clock (the time is a parameter), no knowledge of how a host computes
//! what it publishes.

use std::time::Duration;

use crate::model::sched::curve::TrCurve;
use crate::model::sched::spells::{
    PastSpells, SpellLengths, LOOKBACK_SECS, MAX_CUT_SPELLS, MAX_SPELL_LENGTHS,
};
use crate::net::codec::decode_body;
use crate::net::protocol::{
    Announcement, HostSummary, SummaryWithBasis, SummaryWithImages, WireSpellLengths, WireSpells,
    BASIS_BUILT_IN_PRIOR, BASIS_POOL_PRIOR, BASIS_RECORD, IMAGES_HELD_MAX, LADDER_SECS,
    MEMORY_LEVELS_MIB, PRIOR_METHODS, SUMMARY_FORMAT, SUMMARY_FORMAT_1, SUMMARY_FORMAT_3,
};

/// The pacing constants live in the model, shared with `gleaner simulate`.
pub use crate::model::pace::{min_gap, MIN_GAP_MAX};

/// How long a member stays in the table without being heard: four
/// heartbeats (each at most 1.25 of the nominal) and a margin.
pub fn member_ttl(heartbeat: Duration) -> Duration {
    heartbeat
        .saturating_mul(5)
        .saturating_add(Duration::from_secs(5))
}

/// What a summary says beyond the announcement, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// When the host computed it, Unix seconds (never later than when we
    /// heard it).
    pub computed_at_unix: i64,
    /// Relative speed P (0..1).
    pub speed: f64,
    /// Predicted CPU share for a guest (0..1).
    pub availability: Option<f64>,
    /// History days behind it.
    pub days_used: u32,
    /// `(memory MiB, TR curve)` per level, levels increasing.
    pub ladders: Vec<(u64, TrCurve)>,
    /// Its week's failure spells (checked), at the lowest level.
    pub spells: Option<PastSpells>,
    /// Their lengths (checked against them).
    pub spell_lengths: Option<SpellLengths>,
    /// The ids of the images it says it holds (at most
    /// [`IMAGES_HELD_MAX`]); `None` from a format 1 summary, which cannot
    /// say. A claim that only moves the host ahead for a task in one.
    pub images: Option<Vec<[u8; 32]>>,
    /// What its ladders stand on; `None` from a format 1 or 2 summary,
    /// which cannot say (`days_used` 0 there is a prior of either kind).
    pub basis: Option<LadderBasis>,
}

/// What a summary's ladders stand on, as its host said (format 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LadderBasis {
    /// The host's own record.
    Record,
    /// No day of record: the built-in population's prior.
    BuiltInPrior,
    /// No day of record: the pool's typical curve.
    PoolPrior,
    /// A value this node does not know (a newer host's): read as a claim
    /// that says nothing, never as an error.
    Unknown(u8),
}

impl LadderBasis {
    /// The wire's byte read.
    pub fn from_wire(byte: u8) -> LadderBasis {
        match byte {
            BASIS_RECORD => LadderBasis::Record,
            BASIS_BUILT_IN_PRIOR => LadderBasis::BuiltInPrior,
            BASIS_POOL_PRIOR => LadderBasis::PoolPrior,
            other => LadderBasis::Unknown(other),
        }
    }

    /// The wire's byte.
    pub fn to_wire(self) -> u8 {
        match self {
            LadderBasis::Record => BASIS_RECORD,
            LadderBasis::BuiltInPrior => BASIS_BUILT_IN_PRIOR,
            LadderBasis::PoolPrior => BASIS_POOL_PRIOR,
            LadderBasis::Unknown(other) => other,
        }
    }

    /// The `method` a reliability answer of a host with this basis names
    /// ([`PRIOR_METHODS`]: `pool-prior`, `built-in-prior`); `None` for a
    /// record (its answer names the method that read it) or a basis this
    /// node does not know.
    pub fn answer_method(self) -> Option<&'static str> {
        match self {
            LadderBasis::PoolPrior => Some(PRIOR_METHODS[0]),
            LadderBasis::BuiltInPrior => Some(PRIOR_METHODS[1]),
            LadderBasis::Record | LadderBasis::Unknown(_) => None,
        }
    }
}

impl Summary {
    /// The TR curve for a job of `mem_mib`: the lowest level at or above
    /// it; `None` when the job needs more than every level (the host did
    /// not say) or the host sent no ladder.
    pub fn curve_for(&self, mem_mib: u64) -> Option<&TrCurve> {
        self.ladders
            .iter()
            .find(|(level, _)| *level >= mem_mib)
            .map(|(_, c)| c)
    }

    /// The format it came in: 1 says nothing of images, 2 nothing of its
    /// basis, 3 both.
    pub fn format(&self) -> u8 {
        match (&self.images, self.basis) {
            (None, _) => SUMMARY_FORMAT_1,
            (Some(_), None) => SUMMARY_FORMAT,
            (Some(_), Some(_)) => SUMMARY_FORMAT_3,
        }
    }
}

/// Why a summary is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    #[error(
        "summary format {0}, this node reads {SUMMARY_FORMAT_1}, {SUMMARY_FORMAT} and {SUMMARY_FORMAT_3}"
    )]
    Format(u8),
    #[error("summary does not decode: {0}")]
    Decode(String),
    #[error("summary ladders: {0}")]
    Ladders(String),
    #[error("summary images: {count} ids, at most {IMAGES_HELD_MAX}")]
    Images { count: usize },
}

/// A summary message as heard, checked: its format (the topic it belongs
/// on), the member it describes and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedSummary {
    /// [`SUMMARY_FORMAT_1`], [`SUMMARY_FORMAT`] or [`SUMMARY_FORMAT_3`].
    pub format: u8,
    pub member: Announcement,
    pub summary: Summary,
}

/// Decodes and checks a summary message heard at `heard_unix` (its bytes
/// are at most a gossipsub message; the codec's decode limit bounds every
/// list before it is allocated): the first byte is the format, 1 a
/// [`HostSummary`] alone, 2 a [`SummaryWithImages`]; anything else, bytes
/// left over, or a check below failing refuses it, naming why. 3 a
/// [`SummaryWithBasis`].
pub fn decode_summary(bytes: &[u8], heard_unix: i64) -> Result<DecodedSummary, SummaryError> {
    let decode_err = |e: crate::net::codec::CodecError| SummaryError::Decode(e.to_string());
    match bytes.first().copied() {
        Some(SUMMARY_FORMAT_1) => {
            let s: HostSummary = decode_body(bytes).map_err(decode_err)?;
            let summary = check_summary(&s, heard_unix)?;
            Ok(DecodedSummary {
                format: SUMMARY_FORMAT_1,
                member: s.member,
                summary,
            })
        }
        Some(SUMMARY_FORMAT) => {
            let s: SummaryWithImages = decode_body(bytes).map_err(decode_err)?;
            let summary = check_summary_with_images(&s, heard_unix)?;
            Ok(DecodedSummary {
                format: SUMMARY_FORMAT,
                member: s.summary.member,
                summary,
            })
        }
        Some(SUMMARY_FORMAT_3) => {
            let s: SummaryWithBasis = decode_body(bytes).map_err(decode_err)?;
            let summary = check_summary_with_basis(&s, heard_unix)?;
            Ok(DecodedSummary {
                format: SUMMARY_FORMAT_3,
                member: s.summary.summary.member,
                summary,
            })
        }
        other => Err(SummaryError::Format(other.unwrap_or(0))),
    }
}

/// Checks a format 2 summary: its format, at most [`IMAGES_HELD_MAX`]
/// image ids, and the rest as [`check_summary`] does (duplicate ids are
/// kept once).
pub fn check_summary_with_images(
    s: &SummaryWithImages,
    heard_unix: i64,
) -> Result<Summary, SummaryError> {
    if s.summary.format != SUMMARY_FORMAT {
        return Err(SummaryError::Format(s.summary.format));
    }
    checked_with_images(s, heard_unix)
}

/// Checks a format 3 summary: its format, then the rest as
/// [`check_summary_with_images`] does; its basis is read, whatever the
/// byte ([`LadderBasis::from_wire`]).
pub fn check_summary_with_basis(
    s: &SummaryWithBasis,
    heard_unix: i64,
) -> Result<Summary, SummaryError> {
    if s.summary.summary.format != SUMMARY_FORMAT_3 {
        return Err(SummaryError::Format(s.summary.summary.format));
    }
    let mut summary = checked_with_images(&s.summary, heard_unix)?;
    summary.basis = Some(LadderBasis::from_wire(s.basis));
    Ok(summary)
}

/// The images and reliability checks of a format 2 or 3 summary, its
/// format already checked.
fn checked_with_images(s: &SummaryWithImages, heard_unix: i64) -> Result<Summary, SummaryError> {
    if s.images.len() > IMAGES_HELD_MAX {
        return Err(SummaryError::Images {
            count: s.images.len(),
        });
    }
    let mut images: Vec<[u8; 32]> = Vec::with_capacity(s.images.len());
    for id in &s.images {
        if !images.contains(id) {
            images.push(*id);
        }
    }
    let mut summary = check_reliability(&s.summary, heard_unix)?;
    summary.images = Some(images);
    Ok(summary)
}

/// Checks a format 1 summary ([`HostSummary`] alone, format 1) heard at
/// `heard_unix`: the format and the reliability part ([`check_reliability`]).
pub fn check_summary(s: &HostSummary, heard_unix: i64) -> Result<Summary, SummaryError> {
    if s.format != SUMMARY_FORMAT_1 {
        return Err(SummaryError::Format(s.format));
    }
    check_reliability(s, heard_unix)
}

/// Checks the reliability part of a summary heard at `heard_unix`: at
/// most one ladder per memory level with levels increasing and
/// no more rungs than [`LADDER_SECS`]. TRs are clamped to 1000 ‰ and made
/// non-increasing, a computed-at in the future is taken as `heard_unix`;
/// spells that cannot be true are dropped (not the summary).
fn check_reliability(s: &HostSummary, heard_unix: i64) -> Result<Summary, SummaryError> {
    if s.ladders.len() > MEMORY_LEVELS_MIB.len() {
        return Err(SummaryError::Ladders(format!(
            "{} of them, at most {}",
            s.ladders.len(),
            MEMORY_LEVELS_MIB.len()
        )));
    }
    if s.ladders
        .windows(2)
        .any(|w| w[0].memory_mib >= w[1].memory_mib)
    {
        return Err(SummaryError::Ladders("memory levels not increasing".into()));
    }
    if let Some(l) = s
        .ladders
        .iter()
        .find(|l| l.tr_milli.len() > LADDER_SECS.len())
    {
        return Err(SummaryError::Ladders(format!(
            "{} rungs, at most {}",
            l.tr_milli.len(),
            LADDER_SECS.len()
        )));
    }
    // Its age is judged by when we heard it (our monotonic clock), not by
    // this claim, which only says when its windows start.
    let computed_at_unix = s.computed_at_unix.min(heard_unix);
    let ladders = s
        .ladders
        .iter()
        .map(|l| {
            let points = LADDER_SECS
                .iter()
                .zip(&l.tr_milli)
                .map(|(&secs, &tr)| (f64::from(secs), f64::from(tr.min(1000)) / 1000.0));
            (u64::from(l.memory_mib), TrCurve::new(points))
        })
        .collect();
    let spells = s.spells.and_then(checked_spells);
    let spell_lengths = match (&spells, &s.spell_lengths) {
        (Some(sp), Some(l)) => checked_spell_lengths(l.clone(), sp),
        _ => None,
    };
    Ok(Summary {
        computed_at_unix,
        speed: f64::from(s.speed_milli.min(1000)) / 1000.0,
        availability: s
            .availability_milli
            .map(|m| f64::from(m.min(1000)) / 1000.0),
        days_used: s.days_used,
        ladders,
        spells,
        spell_lengths,
        images: None,
        basis: None,
    })
}

/// A host's claimed spells, or `None` when they cannot be true: more time
/// than the week they cover (an hour's slack for rounding), or more failure
/// episodes than seconds on either side of them.
pub fn checked_spells(w: WireSpells) -> Option<PastSpells> {
    let covered = u64::from(w.usable_secs) + u64::from(w.failing_secs);
    let week = u64::try_from(LOOKBACK_SECS).unwrap_or(u64::MAX);
    (covered <= week + 3_600 && w.episodes <= w.usable_secs.min(w.failing_secs)).then(|| {
        PastSpells {
            usable_secs: f64::from(w.usable_secs),
            failing_secs: f64::from(w.failing_secs),
            episodes: w.episodes,
        }
    })
}

/// A host's claimed spell lengths, or `None` when they cannot be true of
/// its (checked) spells: more lengths than the answer may carry, a length
/// of zero or longer than the week, fewer spells seen than lengths sent,
/// more whole spells seen than failure episodes, or, when every whole
/// up-spell is sent, more up time than the spells' own. Lengths are sorted
/// here, whatever order they came in.
pub fn checked_spell_lengths(w: WireSpellLengths, spells: &PastSpells) -> Option<SpellLengths> {
    let week = u32::try_from(LOOKBACK_SECS).unwrap_or(u32::MAX);
    let sane =
        |v: &[u32], most: usize| v.len() <= most && v.iter().all(|&x| (1..=week).contains(&x));
    if !(sane(&w.up_secs, MAX_SPELL_LENGTHS)
        && sane(&w.outage_secs, MAX_SPELL_LENGTHS)
        && sane(&w.up_cut_secs, MAX_CUT_SPELLS))
    {
        return None;
    }
    let counts_ok = |sent: usize, seen: u32| {
        u32::try_from(sent).is_ok_and(|sent| sent <= seen) && seen <= spells.episodes
    };
    if !(counts_ok(w.up_secs.len(), w.up_seen) && counts_ok(w.outage_secs.len(), w.outages_seen)) {
        return None;
    }
    let secs = |v: &[u32]| -> Vec<f64> {
        let mut out: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        out.sort_by(f64::total_cmp);
        out
    };
    let (up, up_cut) = (secs(&w.up_secs), secs(&w.up_cut_secs));
    // Whole seconds: each length may have been rounded by half a second.
    let slack = (up.len() + up_cut.len()) as f64;
    let all_sent = w.up_seen as usize == up.len();
    if all_sent && up.iter().chain(&up_cut).sum::<f64>() > spells.usable_secs + slack {
        return None;
    }
    Some(SpellLengths {
        up,
        up_seen: w.up_seen,
        up_cut,
        outages: secs(&w.outage_secs),
        outages_seen: w.outages_seen,
    })
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
