//! One host as the consumer knows it ([`SurveyedHost`]): what its summary
//! or announcement said and what it answered when asked, typed and checked.
//! The survey fills it and the ranking orders it; it knows neither, so both
//! import it from here.

use libp2p::{Multiaddr, PeerId};

use crate::model::sched::curve::TrCurve;
use crate::model::sched::spells::{PastSpells, SpellLengths};
use crate::model::solver::CAUSES;
use crate::model::state::State;

/// One host as a survey saw it: what it announced and what it answered,
/// typed. Its JSON copy for `gleaner hosts` is `control::api::HostReport`.
#[derive(Debug, Clone, PartialEq)]
pub struct SurveyedHost {
    pub peer: PeerId,
    /// Heard on the pool's gossip topic.
    pub by_gossip: bool,
    /// Listed as a provider of the pool's DHT key.
    pub by_dht: bool,
    /// Addresses it announced.
    pub addresses: Vec<Multiaddr>,
    /// It returned a reliability response (an answer or "unavailable").
    pub answered: bool,
    /// Temporal reliability for the window, when it could predict.
    pub tr: Option<f64>,
    /// Failure probability by cause, in [`State::FAILURES`] order.
    pub fail_by_cause: Option<[f64; CAUSES]>,
    /// State the prediction starts from.
    pub initial_state: Option<State>,
    /// History days behind the prediction.
    pub days_used: Option<u32>,
    /// Its estimator, as it named it (at most 32 characters; a newer host
    /// may name one this node does not know).
    pub method: Option<String>,
    /// Effective computing power Γ = P·A (0..1).
    pub power: Option<f64>,
    /// Relative speed P (0..1): Γ without the owner's load.
    pub speed: Option<f64>,
    /// Predicted CPU share for a guest over the window (0..1), from the
    /// host's history (SDPN's A, forecast rather than read now).
    pub availability: Option<f64>,
    /// TR over window lengths from the window's start (checked: at most
    /// [`CURVE_POINTS_MAX`](crate::net::protocol::CURVE_POINTS_MAX) points, lengths increasing, TR non-increasing).
    pub curve: Option<TrCurve>,
    /// Its failure spells over the past week (checked: no more time than
    /// the week, no more episodes than either side's seconds).
    pub spells: Option<PastSpells>,
    /// The same spells' lengths (checked against them: see
    /// [`checked_spell_lengths`](crate::net::summary::checked_spell_lengths)); `None` without spells.
    pub spell_lengths: Option<SpellLengths>,
    /// Guest slot free (from the answer, else from its announcement).
    pub slot_free: Option<bool>,
    /// Current state from its announcement.
    pub state: Option<State>,
    /// Logical CPUs and memory (MiB) it announced.
    pub logical_cpus: Option<u32>,
    pub memory_mib: Option<u64>,
    /// Its Gleaner version.
    pub version: Option<String>,
    /// Why there is no TR (unavailable, timeout, unreachable).
    pub error: Option<String>,
    /// Round trip of the last query, milliseconds.
    pub rtt_ms: Option<f64>,
    /// Round-trip median and 99th percentile over all rounds, milliseconds.
    pub rtt_p50_ms: Option<f64>,
    pub rtt_p99_ms: Option<f64>,
    /// Queries that got a response, of `rounds`.
    pub responses: u32,
    /// Its TR, power, slot and week come from its summary, not from an
    /// answer (it was not asked).
    pub summarised: bool,
    /// Seconds since we last heard its summary or announcement.
    pub heard_secs_ago: Option<f64>,
    /// The ids of the images its summary says it holds (a claim: it only
    /// moves the host ahead for a task in one); empty when its summary
    /// (format 1, or none) does not say.
    pub images: Vec<[u8; 32]>,
}

impl SurveyedHost {
    /// A host known only by its id.
    pub fn new(peer: PeerId) -> SurveyedHost {
        SurveyedHost {
            peer,
            by_gossip: false,
            by_dht: false,
            addresses: Vec::new(),
            answered: false,
            tr: None,
            fail_by_cause: None,
            initial_state: None,
            days_used: None,
            method: None,
            power: None,
            speed: None,
            availability: None,
            curve: None,
            spells: None,
            spell_lengths: None,
            slot_free: None,
            state: None,
            logical_cpus: None,
            memory_mib: None,
            version: None,
            error: None,
            rtt_ms: None,
            rtt_p50_ms: None,
            rtt_p99_ms: None,
            responses: 0,
            summarised: false,
            heard_secs_ago: None,
            images: Vec::new(),
        }
    }
}
