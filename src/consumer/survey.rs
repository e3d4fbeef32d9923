//! Asking the pool: every member heard on gossip and every provider of the
//! pool's DHT key is queried in parallel for its temporal reliability over a
//! window; a member that does not answer within the request timeout is listed
//! with the error, never waited on for longer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use libp2p::PeerId;
use serde::{Deserialize, Serialize};

use crate::net::handle::Member;
use crate::net::protocol::{ReliabilityAnswer, ReliabilityQuery, ReliabilityResponse};
use crate::net::{NetError, NetHandle};

/// What one survey asks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SurveyQuery {
    /// Window start, Unix seconds.
    pub window_start_unix: i64,
    /// Window length, seconds.
    pub window_secs: u64,
    /// The job's memory, MiB.
    pub mem_mib: u64,
    /// Queries per host (1 for a listing; more to measure round trips).
    pub rounds: u32,
}

/// One host as a survey saw it: what it announced and what it answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    /// Peer id (base58).
    pub peer: String,
    /// How we found it: "gossip" and/or "dht".
    pub found_by: Vec<String>,
    /// Addresses it announced.
    pub addresses: Vec<String>,
    /// It returned a reliability response (an answer or "unavailable").
    pub answered: bool,
    /// Temporal reliability for the window, when it could predict.
    pub tr: Option<f64>,
    /// Failure probability by cause ("S3", "S4", "S5").
    pub fail_by_cause: BTreeMap<String, f64>,
    /// State the prediction starts from.
    pub initial_state: Option<String>,
    /// History days behind the prediction.
    pub days_used: Option<u32>,
    /// Its estimator.
    pub method: Option<String>,
    /// Effective computing power Γ = P·A (0..1).
    pub power: Option<f64>,
    /// Guest slot free (from the answer, else from its announcement).
    pub slot_free: Option<bool>,
    /// Current state from its announcement.
    pub state: Option<String>,
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
}

/// How long a survey waits for the DHT to list the pool's providers.
const DHT_WAIT: Duration = Duration::from_secs(3);

/// Finds the pool's hosts (gossip members and DHT providers, ourselves left
/// out) and queries each; returns them in no particular order.
pub async fn survey(net: &NetHandle, query: SurveyQuery) -> Result<Vec<HostReport>, NetError> {
    let members = net.members().await?;
    let providers = match tokio::time::timeout(DHT_WAIT, net.find_hosts()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "DHT lookup of the pool's hosts failed");
            Vec::new()
        }
        Err(_) => Vec::new(),
    };
    let mut hosts: BTreeMap<PeerId, HostReport> = BTreeMap::new();
    for m in &members {
        let h = hosts.entry(m.peer).or_default();
        fill_from_member(h, m);
        h.found_by.push("gossip".into());
    }
    for p in providers {
        let h = hosts.entry(p).or_insert_with(|| HostReport {
            peer: p.to_base58(),
            ..HostReport::default()
        });
        h.found_by.push("dht".into());
    }
    hosts.remove(&net.peer_id());
    let asks = hosts
        .into_iter()
        .map(|(peer, report)| ask_host(net, peer, report, query));
    Ok(join_all(asks).await)
}

fn fill_from_member(h: &mut HostReport, m: &Member) {
    h.peer = m.peer.to_base58();
    h.addresses = m.addresses.iter().map(ToString::to_string).collect();
    h.slot_free = Some(m.status.slot_free);
    h.state = Some(m.status.state.label().to_string());
    h.power = Some(f64::from(m.status.relative_power_milli) / 1000.0);
    h.logical_cpus = Some(m.status.logical_cpus);
    h.memory_mib = Some(m.status.memory_mib);
    h.version = Some(m.version.clone());
}

async fn ask_host(
    net: &NetHandle,
    peer: PeerId,
    mut report: HostReport,
    query: SurveyQuery,
) -> HostReport {
    let wire = ReliabilityQuery {
        window_start_unix: query.window_start_unix,
        length_secs: query.window_secs,
        memory_mib: query.mem_mib,
    };
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

fn apply_response(report: &mut HostReport, response: ReliabilityResponse) {
    match response {
        ReliabilityResponse::Answer(a) => apply_answer(report, a),
        ReliabilityResponse::Unavailable { reason } => {
            report.tr = None;
            report.error = Some(format!("cannot predict: {reason}"));
        }
    }
}

fn apply_answer(report: &mut HostReport, a: ReliabilityAnswer) {
    report.tr = Some(a.tr).filter(|t| (0.0..=1.0).contains(t));
    report.fail_by_cause = BTreeMap::from([
        ("S3".to_string(), a.failure.s3),
        ("S4".to_string(), a.failure.s4),
        ("S5".to_string(), a.failure.s5),
    ]);
    report.initial_state = Some(
        crate::model::state::State::from(a.initial_state)
            .label()
            .into(),
    );
    report.days_used = Some(a.days_used);
    report.method = Some(a.method.chars().take(32).collect());
    report.power = Some(f64::from(a.relative_power_milli.min(1000)) / 1000.0);
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
    use crate::net::protocol::{FailureByCause, WireState};

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
        let mut r = HostReport::default();
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
            },
        );
        assert_eq!(r.tr, None);
        assert_eq!(r.power, Some(1.0));
        assert_eq!(r.method.unwrap().len(), 32);
    }
}
