//! Knowing the pool: what the members' summaries say, read from the
//! network task's bounded member table at once ([`from_members`]), and
//! asking hosts directly for their temporal reliability over a window
//! ([`survey`]): only the few best candidates by their summaries when the
//! query bounds it (placement, a few per task), every member and DHT
//! provider when it does not (`hosts --probe` in a small pool, `hosts
//! --all --probe` in a large one), the hosts a sample names for a large
//! pool's `hosts --probe`. A host that does not answer
//! within the request timeout is listed with the error, never waited on for
//! longer.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use futures::future::join_all;
use libp2p::PeerId;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::model::sched::curve::TrCurve;
use crate::model::state::State;

use crate::net::handle::Member;
use crate::net::protocol::{
    ReliabilityAnswer, ReliabilityQuery, ReliabilityResponse, CURVE_POINTS_MAX,
};
use crate::net::summary::{checked_spell_lengths, checked_spells};
use crate::net::summary::{LadderBasis, Summary};
use crate::net::{NetError, NetHandle};

pub use super::surveyed::SurveyedHost;

/// What one survey asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveyQuery {
    /// Window start, Unix seconds.
    pub window_start_unix: i64,
    /// Window length, seconds.
    pub window_secs: u64,
    /// The job's memory, MiB.
    pub mem_mib: u64,
    /// Queries per host (1 for a listing; more to measure round trips).
    pub rounds: u32,
    /// Ask at most this many hosts, the best by their summaries (then, when
    /// the summaries name too few, DHT providers at random); `None` asks
    /// every member and provider.
    #[serde(default)]
    pub ask_at_most: Option<u32>,
    /// The images the work being placed runs in: among members equally
    /// free by their summaries, those that say they hold one of them are
    /// asked first (`rank::by_summary`).
    #[serde(default)]
    pub images: Vec<[u8; 32]>,
    /// Hosts the summaries should name for this work: twice the tasks it
    /// wants running at once. In a large pool the survey ranks from a
    /// sample of the pool's DHT leaves of about that size
    /// ([`NetHandle::sample`]), so what placing costs follows the work, not
    /// the pool; `None` reads the whole member table (`hosts`).
    #[serde(default)]
    pub sample_hosts: Option<u32>,
}

/// How long a survey waits for the DHT to list the pool's providers.
const DHT_WAIT: Duration = Duration::from_secs(3);

/// The members as their summaries (or, from a version 1 node, its
/// announcement) describe them for `query`'s window and memory, ourselves
/// left out, in no particular order: nothing is asked.
pub fn from_members(
    members: &[Member],
    me: PeerId,
    query: &SurveyQuery,
    now: Instant,
) -> Vec<SurveyedHost> {
    members
        .iter()
        .filter(|m| m.peer != me)
        .map(|m| {
            let mut h = SurveyedHost::new(m.peer);
            fill_from_member(&mut h, m);
            h.by_gossip = true;
            h.heard_secs_ago = Some(now.saturating_duration_since(m.last_seen).as_secs_f64());
            if let Some(summary) = &m.summary {
                fill_from_summary(&mut h, summary, query);
            }
            h
        })
        .collect()
}

/// Finds the pool's hosts and asks them: with `ask_at_most`, that many
/// candidates by their summaries ([`crate::consumer::rank::candidates`],
/// none of `skip`, topped up with DHT providers the summaries do not name,
/// at random, when they name too few, in a small pool only), the other
/// members listed as their summaries say (`answered` false); without it,
/// every member and DHT provider, or with `sample_hosts` every host the
/// sample names. In no particular order.
pub async fn survey(
    net: &NetHandle,
    query: SurveyQuery,
    skip: &[PeerId],
) -> Result<Vec<SurveyedHost>, NetError> {
    let members = match query.sample_hosts {
        Some(hosts) => net.sample(hosts as usize).await?,
        None => net.members().await?,
    };
    let me = net.peer_id();
    let known = from_members(&members, me, &query, Instant::now());
    let mut unasked = Vec::new();
    let chosen = match query.ask_at_most {
        Some(most) => {
            let most = most as usize;
            let exclude: HashSet<PeerId> = skip.iter().copied().collect();
            let picked: Vec<PeerId> = crate::consumer::rank::candidates(
                &known,
                &exclude,
                &query.images,
                most,
                &mut rand::rng(),
            );
            let mut by_peer: BTreeMap<PeerId, SurveyedHost> =
                known.into_iter().map(|h| (h.peer, h)).collect();
            let mut chosen: Vec<SurveyedHost> =
                picked.iter().filter_map(|p| by_peer.remove(p)).collect();
            // In a large pool the sample is the consumer's view, sized to
            // the work: a walk of the whole trie to top it up would cost
            // O(N) DHT queries for every placing round.
            if chosen.len() < most && !net.reachability().summaries.large_pool {
                let mut unknown: Vec<PeerId> = providers(net)
                    .await
                    .into_iter()
                    .filter(|p| *p != me && !by_peer.contains_key(p))
                    .filter(|p| !picked.contains(p) && !exclude.contains(p))
                    .collect();
                unknown.shuffle(&mut rand::rng());
                chosen.extend(unknown.into_iter().take(most - chosen.len()).map(|p| {
                    let mut h = SurveyedHost::new(p);
                    h.by_dht = true;
                    h
                }));
            }
            // The rest of the pool as its summaries say, not asked: what
            // the queue knows of the pool (a host left to run a copy on),
            // never placed on without an answer.
            unasked = by_peer.into_values().collect();
            chosen
        }
        None => {
            let mut hosts: BTreeMap<PeerId, SurveyedHost> =
                known.into_iter().map(|h| (h.peer, h)).collect();
            // Every host: every member and every DHT provider (a walk of
            // the trie). A sample's survey asks what the sample names.
            let everyone = query.sample_hosts.is_none();
            let found = if everyone {
                providers(net).await
            } else {
                Vec::new()
            };
            for p in found {
                hosts
                    .entry(p)
                    .or_insert_with(|| SurveyedHost::new(p))
                    .by_dht = true;
            }
            hosts.remove(&me);
            hosts.into_values().collect()
        }
    };
    let asks = chosen
        .into_iter()
        .map(|report| ask_host(net, report.peer, report, &query));
    let mut hosts = join_all(asks).await;
    hosts.extend(unasked);
    Ok(hosts)
}

/// The pool's DHT providers, waiting at most [`DHT_WAIT`].
async fn providers(net: &NetHandle) -> Vec<PeerId> {
    match tokio::time::timeout(DHT_WAIT, net.find_hosts()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "DHT lookup of the pool's hosts failed");
            Vec::new()
        }
        Err(_) => Vec::new(),
    }
}

fn fill_from_member(h: &mut SurveyedHost, m: &Member) {
    h.addresses.clone_from(&m.addresses);
    h.slot_free = Some(m.status.slot_free);
    h.state = Some(m.status.state);
    h.power = Some(f64::from(m.status.relative_power_milli.min(1000)) / 1000.0);
    h.logical_cpus = Some(m.status.logical_cpus);
    h.memory_mib = Some(m.status.memory_mib);
    h.version = Some(m.version.clone());
}

/// What a (checked) summary says for `query`: TR off the ladder of the
/// lowest memory level at or above the job's (none above every level), as
/// if its windows started now.
fn fill_from_summary(h: &mut SurveyedHost, s: &Summary, query: &SurveyQuery) {
    h.summarised = true;
    let curve = s
        .curve_for(query.mem_mib)
        .filter(|c| !c.points().is_empty());
    h.tr = curve.map(|c| c.tr_at(query.window_secs as f64));
    h.curve = curve.cloned();
    h.days_used = Some(s.days_used);
    // A summary names no method; one whose ladders are a prior says which,
    // as that host's answer would (`pool-prior`, `built-in-prior`).
    h.method = s
        .basis
        .and_then(LadderBasis::answer_method)
        .map(str::to_string);
    h.speed = Some(s.speed);
    h.availability = s.availability;
    h.spells = s.spells;
    h.spell_lengths.clone_from(&s.spell_lengths);
    h.images = s.images.clone().unwrap_or_default();
}

async fn ask_host(
    net: &NetHandle,
    peer: PeerId,
    mut report: SurveyedHost,
    query: &SurveyQuery,
) -> SurveyedHost {
    let wire = ReliabilityQuery {
        window_start_unix: query.window_start_unix,
        length_secs: query.window_secs,
        memory_mib: query.mem_mib,
    };
    // What it answers replaces what its summary said; a host that does
    // not answer is not taken on its summary's word.
    report.summarised = false;
    let mut rtts = Vec::new();
    for _ in 0..query.rounds.max(1) {
        let start = Instant::now();
        let result = net.query_reliability(peer, wire).await;
        let rtt = start.elapsed().as_secs_f64() * 1000.0;
        match result {
            Ok(response) => {
                rtts.push(rtt);
                report.answered = true;
                report.error = None;
                apply_response(&mut report, response);
            }
            Err(e) => {
                report.error = Some(e.to_string());
                // A peer that timed out once would time out every round.
                if matches!(e, NetError::Timeout | NetError::Dial(_)) {
                    break;
                }
            }
        }
    }
    report.responses = u32::try_from(rtts.len()).unwrap_or(u32::MAX);
    report.rtt_ms = rtts.last().copied();
    rtts.sort_by(f64::total_cmp);
    report.rtt_p50_ms = percentile(&rtts, 0.50);
    report.rtt_p99_ms = percentile(&rtts, 0.99);
    report
}

fn apply_response(report: &mut SurveyedHost, response: ReliabilityResponse) {
    match response {
        ReliabilityResponse::Answer(a) => apply_answer(report, a),
        ReliabilityResponse::Unavailable { reason } => {
            report.tr = None;
            report.error = Some(format!("cannot predict: {reason}"));
        }
    }
}

fn apply_answer(report: &mut SurveyedHost, a: ReliabilityAnswer) {
    report.tr = Some(a.tr).filter(|t| (0.0..=1.0).contains(t));
    // A hostile host's probabilities are clamped, as its TR is checked.
    let p = |v: f64| {
        if v.is_finite() {
            v.clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    report.fail_by_cause = Some([p(a.failure.s3), p(a.failure.s4), p(a.failure.s5)]);
    report.initial_state = Some(State::from(a.initial_state));
    report.days_used = Some(a.days_used);
    report.method = Some(a.method.chars().take(32).collect());
    report.power = Some(f64::from(a.relative_power_milli.min(1000)) / 1000.0);
    report.speed = Some(f64::from(a.speed_milli.min(1000)) / 1000.0);
    report.availability = a
        .availability_milli
        .map(|m| f64::from(m.min(1000)) / 1000.0);
    // A curve none of whose points survives the checks (every length 0) is
    // no curve: an empty one would read as a host that never fails, which
    // no claim discount can lower.
    report.curve = Some(TrCurve::new(
        a.curve
            .iter()
            .take(CURVE_POINTS_MAX)
            .map(|&(secs, tr)| (secs as f64, tr)),
    ))
    .filter(|c| !c.points().is_empty());
    report.spells = a.spells.and_then(checked_spells);
    report.spell_lengths = match (&report.spells, a.spell_lengths) {
        (Some(spells), Some(lengths)) => checked_spell_lengths(lengths, spells),
        _ => None,
    };
    report.slot_free = Some(a.slot_free);
}

/// The `q` quantile of sorted values (nearest rank), `None` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::protocol::{FailureByCause, WireSpellLengths, WireSpells, WireState};

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&[3.0], 0.99), Some(3.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn a_hostile_answer_cannot_claim_more_than_certainty() {
        let mut r = SurveyedHost::new(PeerId::random());
        apply_answer(
            &mut r,
            ReliabilityAnswer {
                tr: 7.0,
                failure: FailureByCause {
                    s3: 0.0,
                    s4: 0.0,
                    s5: 0.0,
                },
                initial_state: WireState::S1,
                days_used: 3,
                method: "x".repeat(10_000),
                relative_power_milli: 99_999,
                slot_free: true,
                curve: (1..1000).map(|i| (1000 - i, f64::from(i as u32))).collect(),
                availability_milli: Some(5000),
                speed_milli: 77_777,
                spells: Some(WireSpells {
                    usable_secs: u32::MAX,
                    failing_secs: 10,
                    episodes: 3,
                }),
                spell_lengths: Some(lengths(vec![100, 200], 2)),
            },
        );
        assert_eq!(r.spells, None);
        // Lengths without believable spells are not believed either.
        assert_eq!(r.spell_lengths, None);
        assert_eq!(r.tr, None);
        assert_eq!(r.power, Some(1.0));
        assert_eq!(r.speed, Some(1.0));
        assert_eq!(r.availability, Some(1.0));
        let curve = r.curve.unwrap();
        assert!(curve.points().len() <= CURVE_POINTS_MAX);
        assert!(curve.points().iter().all(|p| (0.0..=1.0).contains(&p.1)));
        assert_eq!(r.method.unwrap().len(), 32);
    }

    #[test]
    fn a_curve_with_no_usable_point_is_no_curve_not_a_host_that_never_fails() {
        let answer = |curve: Vec<(u64, f64)>| ReliabilityAnswer {
            tr: 0.5,
            failure: FailureByCause {
                s3: 0.0,
                s4: 0.0,
                s5: 0.0,
            },
            initial_state: WireState::S1,
            days_used: 3,
            method: "x".into(),
            relative_power_milli: 500,
            slot_free: true,
            curve,
            availability_milli: None,
            speed_milli: 500,
            spells: None,
            spell_lengths: None,
        };
        let mut r = SurveyedHost::new(PeerId::random());
        apply_answer(&mut r, answer(vec![(0, 1.0), (0, 1.0)]));
        assert!(r.curve.is_none(), "every length 0: {:?}", r.curve);
        apply_answer(&mut r, answer(vec![(0, 1.0), (3600, 0.4)]));
        assert_eq!(r.curve.map(|c| c.points().len()), Some(1));
    }

    fn lengths(up_secs: Vec<u32>, up_seen: u32) -> WireSpellLengths {
        WireSpellLengths {
            up_secs,
            up_seen,
            up_cut_secs: vec![5_000],
            outage_secs: vec![600, 300],
            outages_seen: 2,
        }
    }
}
