//! Gleaner: a peer-to-peer cycle-sharing node that predicts its own temporal
//! reliability — the probability that no resource failure (S3 CPU contention,
//! S4 memory shortage, S5 revocation) hits a guest job in a future window.
//!
//! The library is layered so that dependencies point inward to [`model`]:
//! `model` is pure (no I/O, no clock), `history` reads and stores host
//! records, and `cli` turns command lines into calls. See ARCHITECTURE.md.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod cli;
pub mod clock;
pub mod consumer;
pub mod control;
pub mod cpu_time;
pub mod daemon;
pub mod data;
pub mod eval;
pub mod fsutil;
pub mod guest;
pub mod history;
pub mod human;
pub mod image;
pub mod monitor;
pub mod net;
pub mod node;
pub mod parallel;
pub mod procfs;
pub mod report;
pub mod sled_open;
pub mod ui;

/// The pure model lives in its own crate (`crates/gleaner-model`), so the
/// compiler, not a test, keeps I/O out of it; it is re-exported under its old
/// path so the rest of the node reads `crate::model::...`.
pub use gleaner_model as model;
