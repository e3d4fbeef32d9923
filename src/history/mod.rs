//! Host history: trace files (format v1) today, the node's sled store later.
//!
//! This layer turns outside records into `model::series::HostSeries` and back.

pub mod trace;
