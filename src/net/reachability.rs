//! How this node can be reached, and which peer addresses are worth dialing.
//!
//! Two parts. `AddressScope` decides, from the pool's kind, which addresses we tell
//! others about and which addresses others tell us that we keep: a loopback address
//! is only meaningful between processes on one machine, a private LAN address only
//! inside one LAN, so a public pool keeps neither (dialing another home's
//! `127.0.0.1:4610` reaches ourselves). `Reachability` is the snapshot the network
//! task keeps of what AutoNAT, the relay client and DCUtR found out, read by
//! `gleaner status`; it is a report for the control API, not a wire type.
//!
//! This module knows multiaddrs and IP ranges; it does not touch the Swarm.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libp2p::multiaddr::Protocol;
use libp2p::Multiaddr;
use serde::{Deserialize, Serialize};

/// Which addresses make sense in this pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressScope {
    /// Every listen address is a loopback address: a pool on one machine (tests,
    /// demos). Loopback addresses are the only way in and are kept.
    Loopback,
    /// A LAN or private pool: LAN addresses are how members reach each other;
    /// loopback addresses would reach the dialer itself and are dropped.
    Lan,
    /// A public pool across the Internet (AutoNAT or relay on): only globally
    /// routable addresses and relayed addresses through such a relay are kept.
    Public,
}

impl AddressScope {
    /// The scope a node with these listen addresses and this pool kind works in.
    pub fn of(listen: &[Multiaddr], public_pool: bool) -> AddressScope {
        let all_loopback = !listen.is_empty()
            && listen
                .iter()
                .all(|a| first_ip(a).is_some_and(|ip| ip.is_loopback()));
        if all_loopback {
            AddressScope::Loopback
        } else if public_pool {
            AddressScope::Public
        } else {
            AddressScope::Lan
        }
    }

    /// True when a peer in this pool could reach `addr`: the address is kept when
    /// heard and told when ours. A relayed address is judged by its relay's part.
    /// Addresses without an IP (DNS names) are kept: the resolver decides.
    pub fn usable(self, addr: &Multiaddr) -> bool {
        let Some(ip) = first_ip(addr) else {
            return true;
        };
        if ip.is_unspecified() || ip.is_multicast() {
            return false;
        }
        if ip.is_loopback() {
            return self == AddressScope::Loopback;
        }
        if is_private(ip) {
            return self != AddressScope::Public;
        }
        true
    }
}

/// The first IP address in a multiaddr (the relay's, for a relayed address).
fn first_ip(addr: &Multiaddr) -> Option<IpAddr> {
    addr.iter().find_map(|p| match p {
        Protocol::Ip4(ip) => Some(IpAddr::V4(ip)),
        Protocol::Ip6(ip) => Some(IpAddr::V6(ip)),
        _ => None,
    })
}

/// RFC 1918, shared (CGNAT, RFC 6598), link-local and unique-local ranges: reachable
/// inside one site only. Documentation ranges are not in here on purpose: they stand
/// for the Internet in our network-namespace tests.
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private() || v4.is_link_local() || is_shared_v4(v4),
        IpAddr::V6(v6) => is_unique_local_v6(v6) || is_link_local_v6(v6),
    }
}

fn is_shared_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    a == 100 && (b & 0xc0) == 64
}

fn is_unique_local_v6(ip: Ipv6Addr) -> bool {
    (ip.segments()[0] & 0xfe00) == 0xfc00
}

fn is_link_local_v6(ip: Ipv6Addr) -> bool {
    (ip.segments()[0] & 0xffc0) == 0xfe80
}

/// True for an address that goes through a relay (`/p2p-circuit`).
pub fn is_relayed(addr: &Multiaddr) -> bool {
    addr.iter().any(|p| matches!(p, Protocol::P2pCircuit))
}

/// What AutoNAT concluded about us.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NatStatus {
    /// No verdict yet (AutoNAT off, or no probe has finished).
    #[default]
    Unknown,
    /// Probes failed and no direct address is confirmed: we are behind NAT or a
    /// firewall, and others reach us through a relay (and hole punching).
    Private,
    /// A direct address of ours is confirmed reachable (or we are a relay).
    Public,
}

/// One relay we listen through.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayReport {
    /// The relay's peer id.
    pub relay: String,
    /// A reservation is active: peers can reach us through this relay now.
    pub reserved: bool,
    /// Reservations accepted so far (the first plus renewals after reconnects).
    pub reservations: u32,
    /// Why the last reservation ended or failed, if one did.
    pub last_error: Option<String>,
}

/// One connected peer and how we are connected to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLink {
    /// The peer id.
    pub peer: String,
    /// Open direct connections.
    pub direct: u32,
    /// Open connections through a relay.
    pub relayed: u32,
}

/// The network task's view of how others reach us, kept current as events arrive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reachability {
    /// AutoNAT's verdict.
    pub nat: NatStatus,
    /// Addresses others can use: confirmed external addresses, relayed ones included.
    pub reachable_at: Vec<String>,
    /// Addresses put in our last announcement.
    pub announced: Vec<String>,
    /// AutoNAT v2 probes of our addresses that succeeded and failed.
    pub autonat_ok: u32,
    pub autonat_failed: u32,
    /// The last AutoNAT failure, for people.
    pub autonat_last_error: Option<String>,
    /// Relays we listen through.
    pub relays: Vec<RelayReport>,
    /// Relayed connections DCUtR upgraded to direct ones, and attempts that failed.
    pub dcutr_upgraded: u32,
    pub dcutr_failed: u32,
    /// The last hole-punching failure, for people.
    pub dcutr_last_error: Option<String>,
    /// Connected peers, direct or relayed.
    pub peers: Vec<PeerLink>,
    /// Whether any pool member is reachable, and what the node does about it.
    #[serde(default)]
    pub contact: Contact,
    /// Whether we hear the pool's summaries (`net::listening`).
    #[serde(default)]
    pub summaries: SummaryListening,
    /// What membership has made this node send and hear since its start.
    #[serde(default)]
    pub chatter: Chatter,
}

/// What being a member has cost this node since its start, by cause: for
/// the many-node harness (`examples/many-nodes.sh`), and for an operator
/// asking why an idle node talks as much as it does. Counts only; the bytes
/// are in `status`'s traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Chatter {
    /// Our summary published on our own heartbeat or a change of status.
    pub published: u64,
    /// Republications asked (`net::listening::Republish`), by what asked:
    /// our addresses changed, a peer joined the pool-wide summary topic, a
    /// leaf mate joined our leaf's topic, we joined (or moved to) a leaf.
    pub asked_address: u64,
    pub asked_pool_subscriber: u64,
    pub asked_leaf_mate: u64,
    pub asked_leaf_joined: u64,
    /// Subscriptions that asked for nothing: a member already heard, on a
    /// connection just opened (gossipsub's hello).
    pub hellos_skipped: u64,
    /// Republications sent (those asked within the minimum gap go as one).
    pub republished: u64,
    /// Summaries accepted from the pool-wide topics and from our leaf's.
    pub heard_pool: u64,
    pub heard_leaf: u64,
    /// Connections opened, by who dialed.
    pub connections_in: u64,
    pub connections_out: u64,
    /// Kademlia requests peers made of us.
    pub kad_requests: u64,
}

/// Whether the node hears the pool's summaries, and why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryListening {
    /// On the pool's summary topic.
    pub listening: bool,
    /// The pool was seen large: the node listens only while something asks
    /// for its members (a survey, `hosts`).
    pub large_pool: bool,
    /// In a large pool, the depth of the leaf of the pool's DHT trie whose
    /// summary topic we are on; `None` off every leaf topic.
    #[serde(default)]
    pub leaf_depth: Option<u8>,
    /// Leaf mates' summaries we keep for our digest.
    #[serde(default)]
    pub leaf_heard: u32,
    /// Hosts the consumer's sample of a large pool names now.
    #[serde(default)]
    pub sampled: u32,
    /// Leaf digests fetched since the start.
    #[serde(default)]
    pub digests: u32,
    /// The pool's size as our place in its DHT trie says
    /// (`pool_shards::pool_size_estimate`); `None` before we are placed.
    #[serde(default)]
    pub pool_estimate: Option<u64>,
    /// The estimate is a floor: our own key is full, and members below it
    /// are out of our sight.
    #[serde(default)]
    pub pool_estimate_at_least: bool,
}

impl Default for SummaryListening {
    fn default() -> Self {
        SummaryListening {
            listening: true,
            large_pool: false,
            leaf_depth: None,
            leaf_heard: 0,
            sampled: 0,
            digests: 0,
            pool_estimate: None,
            pool_estimate_at_least: false,
        }
    }
}

/// Whether the node is in touch with its pool, since when not, and what it is
/// trying: what `status`, `hosts` and `batch status` say when no host is found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contact {
    /// Connected peers that are members of the pool (heard announcing,
    /// remembered in the peer book, or bootstrap peers).
    pub members_connected: u32,
    /// Unix seconds since when no member has been connected; `None` while
    /// one is.
    pub alone_since: Option<i64>,
    /// The peer book is on (`[net] peer_book`).
    pub peer_book: bool,
    /// Members remembered in the peer book.
    pub remembered: u32,
    /// Remembered members being redialed: dialed now or waiting for their
    /// next attempt.
    pub redialing_remembered: u32,
    /// Bootstrap addresses not connected, being redialed.
    pub redialing_bootstrap: u32,
}

impl Contact {
    /// "no member reachable since 12:03:10; redialing 3 remembered peers and
    /// 1 bootstrap address", or `None` while a member is connected; `time`
    /// shows a Unix time to people.
    pub fn alone_text(&self, time: impl Fn(i64) -> String) -> Option<String> {
        let since = self.alone_since?;
        let plural =
            |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut trying = Vec::new();
        if self.redialing_remembered > 0 {
            trying.push(plural(
                self.redialing_remembered,
                "remembered peer",
                "remembered peers",
            ));
        }
        if self.redialing_bootstrap > 0 {
            trying.push(plural(
                self.redialing_bootstrap,
                "bootstrap address",
                "bootstrap addresses",
            ));
        }
        let doing = if trying.is_empty() {
            let book = if !self.peer_book {
                "the peer book is off"
            } else if self.remembered == 0 {
                "no member remembered"
            } else {
                "every remembered member tried"
            };
            format!("nothing to redial ({book}, no bootstrap peer); waiting to be found")
        } else {
            format!("redialing {}", trying.join(" and "))
        };
        Some(format!(
            "no member reachable since {}; {doing}",
            time(since)
        ))
    }
}

impl Reachability {
    /// Recomputes `nat` from the probe counts and the confirmed addresses.
    pub(crate) fn settle_nat(&mut self, relay_server: bool) {
        let direct_confirmed = self
            .reachable_at
            .iter()
            .any(|a| a.parse::<Multiaddr>().is_ok_and(|m| !is_relayed(&m)));
        self.nat = if relay_server || direct_confirmed {
            NatStatus::Public
        } else if self.autonat_failed > 0 {
            NatStatus::Private
        } else {
            NatStatus::Unknown
        };
    }

    /// The entry of `relay`, created on first use.
    pub(crate) fn relay_mut(&mut self, relay: &str) -> &mut RelayReport {
        let at = match self.relays.iter().position(|r| r.relay == relay) {
            Some(i) => i,
            None => {
                self.relays.push(RelayReport {
                    relay: relay.to_string(),
                    ..RelayReport::default()
                });
                self.relays.len() - 1
            }
        };
        &mut self.relays[at]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Multiaddr {
        s.parse().unwrap()
    }

    #[test]
    fn scopes_follow_the_listen_addresses_and_the_pool_kind() {
        let lo = vec![m("/ip4/127.0.0.1/tcp/0")];
        let any = vec![
            m("/ip4/0.0.0.0/tcp/4610"),
            m("/ip4/0.0.0.0/udp/4610/quic-v1"),
        ];
        assert_eq!(AddressScope::of(&lo, true), AddressScope::Loopback);
        assert_eq!(AddressScope::of(&any, false), AddressScope::Lan);
        assert_eq!(AddressScope::of(&any, true), AddressScope::Public);
        assert_eq!(AddressScope::of(&[], true), AddressScope::Public);
    }

    #[test]
    fn a_public_pool_keeps_only_routable_and_relayed_addresses() {
        let s = AddressScope::Public;
        assert!(!s.usable(&m("/ip4/127.0.0.1/tcp/4610")));
        assert!(!s.usable(&m("/ip4/192.168.20.2/udp/4610/quic-v1")));
        assert!(!s.usable(&m("/ip4/10.1.2.3/tcp/1")));
        assert!(!s.usable(&m("/ip4/100.64.0.1/tcp/1")));
        assert!(!s.usable(&m("/ip4/0.0.0.0/tcp/1")));
        assert!(!s.usable(&m("/ip6/::1/tcp/1")));
        assert!(!s.usable(&m("/ip6/fe80::1/tcp/1")));
        assert!(s.usable(&m("/ip4/198.51.100.10/tcp/4610")));
        assert!(s.usable(&m("/dns4/relay.example.org/tcp/4610")));
        let circuit = "/ip4/198.51.100.1/tcp/4610/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit";
        assert!(s.usable(&m(circuit)));
        assert!(is_relayed(&m(circuit)));
        assert!(!s.usable(&m(&circuit.replace("198.51.100.1", "127.0.0.1"))));
    }

    #[test]
    fn lan_and_loopback_pools_keep_what_reaches_their_members() {
        assert!(!AddressScope::Lan.usable(&m("/ip4/127.0.0.1/tcp/4610")));
        assert!(AddressScope::Lan.usable(&m("/ip4/192.168.1.5/tcp/4610")));
        assert!(AddressScope::Loopback.usable(&m("/ip4/127.0.0.1/tcp/4610")));
    }

    #[test]
    fn contact_says_since_when_no_member_is_reachable_and_what_is_tried() {
        let time = |t: i64| format!("t{t}");
        let mut c = Contact {
            members_connected: 2,
            peer_book: true,
            remembered: 5,
            ..Contact::default()
        };
        assert_eq!(c.alone_text(time), None);
        c.members_connected = 0;
        c.alone_since = Some(7);
        c.redialing_remembered = 3;
        c.redialing_bootstrap = 1;
        assert_eq!(
            c.alone_text(time).unwrap(),
            "no member reachable since t7; redialing 3 remembered peers and 1 bootstrap address"
        );
        c.redialing_remembered = 0;
        c.redialing_bootstrap = 0;
        c.peer_book = false;
        assert_eq!(
            c.alone_text(time).unwrap(),
            "no member reachable since t7; nothing to redial (the peer book is off, no bootstrap peer); waiting to be found"
        );
    }

    #[test]
    fn nat_status_needs_a_failed_probe_and_no_direct_address() {
        let mut r = Reachability::default();
        r.settle_nat(false);
        assert_eq!(r.nat, NatStatus::Unknown);
        r.autonat_failed = 1;
        r.reachable_at = vec!["/ip4/198.51.100.1/tcp/4610/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit".into()];
        r.settle_nat(false);
        assert_eq!(r.nat, NatStatus::Private);
        r.reachable_at.push("/ip4/198.51.100.10/tcp/4610".into());
        r.settle_nat(false);
        assert_eq!(r.nat, NatStatus::Public);
        r.reachable_at.clear();
        r.autonat_failed = 0;
        r.settle_nat(true);
        assert_eq!(r.nat, NatStatus::Public);
    }
}
