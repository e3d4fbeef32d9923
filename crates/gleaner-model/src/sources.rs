//! What strangers from one source may cost (issue 30): a source is the
//! block of addresses one party is likely to hold ([`source_block`]), and
//! each source has a tolerance for strikes (its peers going past their
//! budgets, connections of a blocked peer the node had to handshake and
//! refuse, peer ids the node never met past the source's allowance of
//! newcomers, [`SourceBudgets::newcomer`]): past it the source is
//! *suspect* for a while, and while suspect
//! its new connections are admitted at a steady rate only ([`Gate`]), and
//! the peers that come through are strangers on probation (smaller
//! budgets, the caller's). A flooder that takes a fresh peer id for every
//! connection is never blocked by peer id; by its source it is.
//!
//! Nothing changes for a source none of whose peers ever went past a
//! budget: every node of a test pool on 127.0.0.1, or of a LAN behind one
//! address, shares a source, and an honest pool never spends the
//! tolerance. While a source
//! is suspect, its peers already known keep their connections and budgets;
//! only new connections are rationed.
//!
//! Pure: the time is a parameter (milliseconds from any fixed origin). It
//! must not know what a peer sent or how a connection is held or refused.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::budget::TokenBucket;

/// The block of addresses `ip` counts in: a public IPv4 address's /24 and a
/// public IPv6 address's /48 (what one party can take new addresses from at
/// will: a hosting provider's range, a site's IPv6 prefix); any other
/// address as it is (loopback, private, link-local, unique local: those
/// are one machine each on a LAN, and an attacker on the LAN is not who
/// rotates addresses). An IPv4-mapped IPv6 address counts as its IPv4.
pub fn source_block(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4_block(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4_block(v4)),
            None => IpAddr::V6(v6_block(v6)),
        },
    }
}

fn v4_block(ip: Ipv4Addr) -> Ipv4Addr {
    let [a, b, c, _] = ip.octets();
    // 100.64.0.0/10: carrier-grade NAT, shared like a private range.
    let shared = a == 100 && (b & 0xc0) == 64;
    if ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified() || shared {
        ip
    } else {
        Ipv4Addr::new(a, b, c, 0)
    }
}

fn v6_block(ip: Ipv6Addr) -> Ipv6Addr {
    let s = ip.segments();
    let unique_local = (s[0] & 0xfe00) == 0xfc00;
    let link_local = (s[0] & 0xffc0) == 0xfe80;
    if ip.is_loopback() || ip.is_unspecified() || unique_local || link_local {
        ip
    } else {
        Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0)
    }
}

/// What to do with a new connection from a source, by [`SourceBudgets::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The source is not suspect: as any connection.
    Open,
    /// The source is suspect and this connection is within its ration: let
    /// it in, its peer a stranger on probation.
    Stranger,
    /// The source is suspect and past its ration: not before its ration
    /// allows another (the caller holds or refuses it, before any
    /// handshake where it can).
    Shut,
}

/// What a newcomer from a source was, by [`SourceBudgets::newcomer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newcomer {
    /// Within the source's allowance of newcomers.
    Counted,
    /// Past it: a strike against the source, which is `suspect` after it
    /// (made so or kept so) or still within its tolerance.
    Strike { suspect: bool },
}

/// The tolerances of [`SourceBudgets`]; each pair is (burst, per second).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourceLimits {
    /// Strikes (peers past a budget, blocked peers' connections refused)
    /// a source is forgiven before it is suspect.
    pub strikes: (u32, f64),
    /// New connections a suspect source gets.
    pub connections: (u32, f64),
    /// Peer ids the node has not met (`newcomers::MetPeers`) a source may
    /// bring before each further one is a strike; `None`: no count. An
    /// honest node keeps its identity, so this is what a pool of many
    /// nodes behind one address may bring at once.
    pub newcomers: Option<(u32, f64)>,
    /// Peer ids the node has not met that all sources together may bring
    /// before each further one is a strike against its own source, even
    /// within that source's allowance; `None`: no node-wide count. Without
    /// it each of a botnet's address blocks brings its own allowance of
    /// newcomers and its own tolerance; with it the botnet's blocks share
    /// one allowance, and past it each block is forgiven only its
    /// tolerance of strikes.
    pub all_newcomers: Option<(u32, f64)>,
    /// How long a source stays suspect after its last strike past the
    /// tolerance.
    pub suspect_for_ms: u64,
    /// Sources with an entry at once (the one heard from longest ago makes
    /// room).
    pub max_sources: usize,
}

#[derive(Debug, Clone, Copy)]
struct Source {
    strikes: TokenBucket,
    connections: TokenBucket,
    newcomers: Option<TokenBucket>,
    /// Suspect until then (milliseconds), if it ever was.
    suspect_until_ms: Option<u64>,
    last_ms: u64,
}

/// Per source: its tolerance for strikes and, while suspect, its ration of
/// new connections. Bounded by [`SourceLimits::max_sources`].
#[derive(Debug, Clone)]
pub struct SourceBudgets<K> {
    limits: SourceLimits,
    sources: HashMap<K, Source>,
    /// The newcomers all sources together may still bring
    /// ([`SourceLimits::all_newcomers`]).
    all_newcomers: Option<TokenBucket>,
}

impl<K: std::hash::Hash + Eq + Clone> SourceBudgets<K> {
    pub fn new(limits: SourceLimits) -> SourceBudgets<K> {
        SourceBudgets {
            limits: SourceLimits {
                max_sources: limits.max_sources.max(1),
                ..limits
            },
            sources: HashMap::new(),
            all_newcomers: limits
                .all_newcomers
                .map(|(burst, per_sec)| TokenBucket::new(burst, per_sec)),
        }
    }

    fn entry(&mut self, source: &K, now_ms: u64) -> &mut Source {
        if !self.sources.contains_key(source) && self.sources.len() >= self.limits.max_sources {
            // Make room: a source heard from longest ago, and never a
            // suspect one while another is not (forgetting a suspect
            // source forgives it).
            let oldest = self
                .sources
                .iter()
                .min_by_key(|(_, s)| (s.suspect_until_ms.is_some_and(|u| u > now_ms), s.last_ms))
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.sources.remove(&oldest);
            }
        }
        let limits = self.limits;
        let entry = self
            .sources
            .entry(source.clone())
            .or_insert_with(|| Source {
                strikes: TokenBucket::new(limits.strikes.0, limits.strikes.1),
                connections: TokenBucket::new(limits.connections.0, limits.connections.1),
                newcomers: limits
                    .newcomers
                    .map(|(burst, per_sec)| TokenBucket::new(burst, per_sec)),
                suspect_until_ms: None,
                last_ms: now_ms,
            });
        entry.last_ms = entry.last_ms.max(now_ms);
        entry
    }

    /// One strike against `source` at `now_ms`: true when it made the
    /// source suspect or kept it so (a strike while suspect extends the
    /// suspicion, whatever the tolerance has refilled), false while it is
    /// within its tolerance.
    pub fn strike(&mut self, source: &K, now_ms: u64) -> bool {
        let suspect_for = self.limits.suspect_for_ms;
        let s = self.entry(source, now_ms);
        let suspect = s.suspect_until_ms.is_some_and(|until| until > now_ms);
        if s.strikes.take(now_ms) && !suspect {
            return false;
        }
        s.suspect_until_ms = Some(now_ms.saturating_add(suspect_for));
        true
    }

    /// A peer id the node has not met came from `source` at `now_ms`:
    /// counted against the source's newcomers and those of all sources
    /// together, and past either a strike ([`SourceBudgets::strike`]). Says
    /// whether it was a strike, and whether the source is suspect after it.
    pub fn newcomer(&mut self, source: &K, now_ms: u64) -> Newcomer {
        let own = match &mut self.entry(source, now_ms).newcomers {
            Some(bucket) => bucket.take(now_ms),
            None => true,
        };
        let within = own
            && match &mut self.all_newcomers {
                Some(bucket) => bucket.take(now_ms),
                None => true,
            };
        if within {
            Newcomer::Counted
        } else {
            Newcomer::Strike {
                suspect: self.strike(source, now_ms),
            }
        }
    }

    /// Whether `source` is suspect at `now_ms`.
    pub fn is_suspect(&self, source: &K, now_ms: u64) -> bool {
        self.sources
            .get(source)
            .and_then(|s| s.suspect_until_ms)
            .is_some_and(|until| until > now_ms)
    }

    /// A new connection from `source` at `now_ms`.
    pub fn admit(&mut self, source: &K, now_ms: u64) -> Gate {
        if !self.is_suspect(source, now_ms) {
            return Gate::Open;
        }
        if self.entry(source, now_ms).connections.take(now_ms) {
            Gate::Stranger
        } else {
            Gate::Shut
        }
    }

    /// Sources with an entry.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// True when no source has an entry.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn public_addresses_count_by_their_block_and_local_ones_as_they_are() {
        assert_eq!(source_block(ip("203.0.113.77")), ip("203.0.113.0"));
        assert_eq!(source_block(ip("203.0.113.5")), ip("203.0.113.0"));
        assert_ne!(source_block(ip("203.0.114.5")), ip("203.0.113.0"));
        assert_eq!(
            source_block(ip("2001:db8:1:2:3::9")),
            ip("2001:db8:1::"),
            "a /48"
        );
        assert_eq!(source_block(ip("::ffff:203.0.113.9")), ip("203.0.113.0"));
        for local in [
            "127.0.0.1",
            "127.0.0.2",
            "10.1.2.3",
            "192.168.1.20",
            "172.16.5.4",
            "169.254.1.1",
            "100.64.3.2",
            "::1",
            "fd00::1:2",
            "fe80::1",
        ] {
            assert_eq!(source_block(ip(local)), ip(local), "{local}");
        }
    }

    fn limits() -> SourceLimits {
        SourceLimits {
            strikes: (4, 1.0 / 60.0),
            connections: (8, 1.0),
            newcomers: Some((512, 1.0)),
            all_newcomers: Some((512, 8.0)),
            suspect_for_ms: 600_000,
            max_sources: 16,
        }
    }

    #[test]
    fn a_source_is_suspect_past_its_strikes_and_then_rationed() {
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        // An honest source's connections are never counted.
        assert!((0..10_000).all(|_| b.admit(&1, 0) == Gate::Open));
        for _ in 0..4 {
            assert!(!b.strike(&1, 1_000), "within the tolerance");
        }
        assert_eq!(b.admit(&1, 1_000), Gate::Open);
        assert!(b.strike(&1, 1_000), "the fifth strike at once");
        assert!(b.is_suspect(&1, 1_000));
        // Rationed: the burst, then one a second.
        let said: Vec<Gate> = (0..20).map(|_| b.admit(&1, 2_000)).collect();
        assert_eq!(said.iter().filter(|g| **g == Gate::Stranger).count(), 8);
        assert_eq!(said[8..], [Gate::Shut; 12]);
        let later: usize = (3..=12u64)
            .map(|s| {
                (0..100)
                    .filter(|_| b.admit(&1, s * 1_000) == Gate::Stranger)
                    .count()
            })
            .sum();
        assert_eq!(later, 10, "one a second for ten seconds");
        // Another source is not touched.
        assert_eq!(b.admit(&2, 2_000), Gate::Open);
        assert!(!b.is_suspect(&2, 2_000));
        // Ten minutes after the last strike it is forgiven.
        assert!(b.is_suspect(&1, 600_999));
        assert!(!b.is_suspect(&1, 601_000));
        assert_eq!(b.admit(&1, 601_000), Gate::Open);
    }

    #[test]
    fn strikes_spread_at_the_refill_rate_never_make_a_source_suspect() {
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        // One peer cut off a minute, for a day.
        for minute in 0..1_440u64 {
            assert!(!b.strike(&1, minute * 60_000), "minute {minute}");
        }
        assert!(!b.is_suspect(&1, 1_440 * 60_000));
    }

    #[test]
    fn a_suspect_source_that_goes_on_stays_suspect() {
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        for _ in 0..5 {
            let _ = b.strike(&1, 0);
        }
        // A strike every five minutes keeps it suspect past the first ten,
        // though its tolerance refills meanwhile.
        for k in 1..=6u64 {
            assert!(b.strike(&1, k * 300_000), "{k}");
            assert!(b.is_suspect(&1, k * 300_000 + 599_999), "{k}");
        }
    }

    #[test]
    fn fresh_sources_cost_a_bounded_map_and_do_not_push_a_suspect_one_out() {
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        for _ in 0..5 {
            let _ = b.strike(&0, 0);
        }
        assert!(b.is_suspect(&0, 0));
        for source in 1..1_000u32 {
            let _ = b.strike(&source, u64::from(source));
        }
        assert_eq!(b.len(), 16);
        assert!(b.is_suspect(&0, 1_000), "the suspect source is kept");
    }

    #[test]
    fn an_honest_pool_of_300_nodes_behind_one_address_is_never_suspect() {
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        // 300 nodes on one address that all meet this node within six
        // minutes (examples/many-nodes.sh starts them one after another),
        // or all in the same millisecond: never a strike.
        for node in 0..300u64 {
            assert_eq!(b.newcomer(&1, node * 1_200), Newcomer::Counted);
            assert_eq!(b.newcomer(&2, 0), Newcomer::Counted);
        }
        assert!(!b.is_suspect(&1, 360_000) && !b.is_suspect(&2, 0));
        // Nor a pool that grows by one node a second, for a day.
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        for s in 0..86_400u64 {
            assert_eq!(b.newcomer(&1, s * 1_000), Newcomer::Counted, "second {s}");
        }
    }

    #[test]
    fn a_source_bringing_thousands_of_fresh_peer_ids_is_suspect_after_517() {
        // All at once: 512 newcomers, then four strikes forgiven, and the
        // fifth makes the source suspect.
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        let first_suspect = (1..=10_000u32)
            .find(|_| b.newcomer(&1, 0) == Newcomer::Strike { suspect: true })
            .unwrap();
        assert_eq!(first_suspect, 512 + 5);
        // A hundred a second (what the rogue test's flood brings): a few
        // more, refilled meanwhile.
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        let first_suspect = (1..=10_000u64)
            .find(|k| b.newcomer(&1, k * 10) == Newcomer::Strike { suspect: true })
            .unwrap();
        assert!((517..=530).contains(&first_suspect), "{first_suspect}");
        assert!(b.is_suspect(&1, 10_000));
        // Another source is not touched, and with no allowance set nothing
        // counts.
        assert!(!b.is_suspect(&2, 10_000));
        let mut off: SourceBudgets<u32> = SourceBudgets::new(SourceLimits {
            newcomers: None,
            all_newcomers: None,
            ..limits()
        });
        assert!((0..10_000).all(|_| off.newcomer(&1, 0) == Newcomer::Counted));
        assert!(!off.is_suspect(&1, 0));
    }

    /// A botnet: fresh peer ids from 100 address blocks at once, each block
    /// bringing as many as it can. With each block's allowance alone that
    /// was 517 handshaken newcomers a block before every block was suspect
    /// (51,700); with one allowance for all, past it each block is forgiven
    /// its four strikes only: 512 + 5 a block.
    #[test]
    fn a_botnet_of_many_sources_shares_one_allowance_of_newcomers() {
        let blocks = 100u32;
        let until_all_suspect = |limits: SourceLimits| {
            let mut b: SourceBudgets<u32> = SourceBudgets::new(SourceLimits {
                max_sources: 1_000,
                ..limits
            });
            let mut newcomers = 0u32;
            for source in 0..blocks {
                while !b.is_suspect(&source, 0) {
                    newcomers += 1;
                    let _ = b.newcomer(&source, 0);
                }
            }
            newcomers
        };
        assert_eq!(until_all_suspect(limits()), 512 + 5 * blocks);
        let each_alone = SourceLimits {
            all_newcomers: None,
            ..limits()
        };
        assert_eq!(until_all_suspect(each_alone), 517 * blocks);
    }

    /// What the node-wide allowance costs honest sources: a node restarted
    /// in a large pool meets 5,000 members afresh within minutes, each from
    /// its own address (or up to four behind one): none is ever suspect,
    /// whatever the allowance left.
    #[test]
    fn a_large_pool_meeting_a_node_afresh_from_many_addresses_is_never_suspect() {
        let mut b: SourceBudgets<u32> = SourceBudgets::new(SourceLimits {
            max_sources: 10_000,
            ..limits()
        });
        for node in 0..5_000u32 {
            // Four nodes behind each address, all in the first minute.
            let source = node / 4;
            let _ = b.newcomer(&source, u64::from(node) * 12);
            assert!(!b.is_suspect(&source, 60_000), "node {node}");
        }
    }

    #[test]
    fn newcomers_from_fresh_sources_cost_a_bounded_map() {
        let mut b: SourceBudgets<u32> = SourceBudgets::new(limits());
        for _ in 0..517 {
            let _ = b.newcomer(&0, 0);
        }
        assert!(b.is_suspect(&0, 0));
        // One each (past the allowance all sources share, a strike each,
        // within each one's tolerance).
        for source in 1..100_000u32 {
            let _ = b.newcomer(&source, u64::from(source));
            assert!(!b.is_suspect(&source, u64::from(source)));
        }
        assert_eq!(b.len(), 16);
        assert!(b.is_suspect(&0, 100_000), "the suspect source is kept");
    }
}
