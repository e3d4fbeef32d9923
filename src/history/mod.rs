//! Host history: trace files (format v1) and the node's sled store.
//!
//! This layer turns outside records into `model::series::HostSeries` and back.

pub mod codec;
pub mod store;
pub mod trace;
