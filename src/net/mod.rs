//! The network layer of a pool: wire types, the frame codec, the node's identity key,
//! and the libp2p Swarm with the handle through which the rest of the node talks to it.
//!
//! `net/` knows libp2p and the wire format; it does not know how reliability is
//! computed or how jobs run: inbound requests leave as `NetEvent`s with a responder,
//! and the node answers them.

pub mod codec;
#[cfg(test)]
mod contract;
mod cpu_ledger;
pub mod deaf_links;
pub mod event_loop;
pub mod handle;
pub mod identity;
pub mod leaf_digest;
pub mod listening;
pub mod members;
pub mod peer_book;
pub mod pool_shards;
pub mod protocol;
mod quarantine;
pub mod reachability;
pub mod routing_table;
pub mod summary;
pub mod swarm;
pub mod traffic;
pub mod trim;

pub use cpu_ledger::PEER_CPU_PERCENT;
pub use event_loop::{start, EventLoop};
pub use handle::{LocalStatus, Member, NetError, NetEvent, NetHandle, Responder, SummaryBody};
pub use members::SummaryCache;
pub use quarantine::SOURCE_NEW_PEERS;
pub use reachability::{Contact, NatStatus, Reachability, SummaryListening};
pub use swarm::{read_swarm_key, BuildError, NetConfig};
pub use traffic::Traffic;
