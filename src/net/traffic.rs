//! How many bytes this node has sent and received over libp2p since it
//! started: libp2p's bandwidth metrics (`libp2p-metrics`' bandwidth transport,
//! which counts the bytes of every muxed stream, by direction and transport
//! stack) read back as two totals for `gleaner status` and the many-node
//! harness (`examples/many-nodes.sh`).
//!
//! This module owns the metrics registry the Swarm's transport writes into
//! and the reading of it; it does not know which protocol a byte belonged to.

use std::sync::Arc;

use libp2p::metrics::Registry;
use serde::{Deserialize, Serialize};

/// The counter `libp2p-metrics`' bandwidth transport registers (a prefix, a
/// name and a unit, as the text encoding writes them).
const BANDWIDTH_COUNTER: &str = "libp2p_bandwidth_bytes_total";

/// Bytes over libp2p since the node started, every connection and protocol
/// together (stream payloads: Noise and Yamux framing are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Bytes received from peers.
    pub bytes_in: u64,
    /// Bytes sent to peers.
    pub bytes_out: u64,
}

/// The registry the Swarm's transport counts into, shared with every
/// `NetHandle` so `status` reads it without asking the network task.
#[derive(Clone, Default)]
pub struct TrafficMeter {
    registry: Arc<Registry>,
}

impl std::fmt::Debug for TrafficMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrafficMeter").finish_non_exhaustive()
    }
}

impl TrafficMeter {
    /// A meter over `registry`, which the transport has registered its
    /// counters in.
    pub(crate) fn new(registry: Registry) -> Self {
        Self {
            registry: Arc::new(registry),
        }
    }

    /// The totals now; zero if the registry cannot be encoded (it is ours and
    /// holds counters only, so that does not happen).
    pub fn read(&self) -> Traffic {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            return Traffic::default();
        }
        totals(&text)
    }
}

/// Sums the bandwidth counter's samples by direction from the registry's
/// text encoding (`libp2p_bandwidth_bytes_total{protocols="/ip4/tcp",direction="Inbound"} 123`).
fn totals(text: &str) -> Traffic {
    let mut t = Traffic::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(BANDWIDTH_COUNTER) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        if labels.contains("direction=\"Inbound\"") {
            t.bytes_in = t.bytes_in.saturating_add(value);
        } else if labels.contains("direction=\"Outbound\"") {
            t.bytes_out = t.bytes_out.saturating_add(value);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_every_stack_by_direction() {
        let text = "# HELP libp2p_bandwidth_bytes Bandwidth usage.\n\
            # TYPE libp2p_bandwidth_bytes counter\n\
            # UNIT libp2p_bandwidth_bytes bytes\n\
            libp2p_bandwidth_bytes_total{protocols=\"/ip4/tcp\",direction=\"Inbound\"} 100\n\
            libp2p_bandwidth_bytes_total{protocols=\"/ip4/tcp\",direction=\"Outbound\"} 7\n\
            libp2p_bandwidth_bytes_total{protocols=\"/ip4/udp/quic-v1\",direction=\"Inbound\"} 23\n\
            libp2p_other_total{direction=\"Inbound\"} 999\n\
            # EOF\n";
        assert_eq!(
            totals(text),
            Traffic {
                bytes_in: 123,
                bytes_out: 7
            }
        );
    }

    #[test]
    fn an_empty_registry_reads_zero() {
        assert_eq!(TrafficMeter::default().read(), Traffic::default());
    }
}
