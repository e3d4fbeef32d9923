//! Content-addressed job data: the BLAKE3 hash tree that names and verifies a
//! file chunk by chunk ([`hash`]), the consumer's catalog of files it offers by
//! hash ([`catalog`]), the host's size-capped cache of inputs ([`cache`]) and
//! the transfer over `/gleaner/data/1` between them ([`transfer`]).
//!
//! A submission names each input by hash, size and path; the host takes what
//! it has from its cache and reads the rest from the consumer, one stream per
//! file, verifying every 1 MiB chunk as it arrives and writing it to disk at
//! once, so no file is ever whole in memory. This module knows files, hashes
//! and streams; it does not know jobs, guests or the Swarm (it opens streams
//! through [`crate::net::NetHandle`]).

pub mod cache;
pub mod catalog;
pub mod hash;
pub mod transfer;

pub use cache::{Cache, CacheStats, Pinned};
pub use catalog::{Catalog, ChunkTamper, FilePart, InputSpec, Offer};
pub use hash::ContentHash;
pub use transfer::{fetch_input, obtain_input, serve, DataError, FetchLimits, Fetched, Obtained};
