//! The pure model: the five states, host series, semi-Markov estimation and
//! the reliability solver.
//!
//! Nothing here performs I/O, reads a clock, or knows about sled, libp2p or
//! tokio: every function takes `now`, the data and the limits as parameters.
//! The crate's dependency list keeps those libraries out; `clippy.toml`
//! beside the manifest forbids std's file, network, process and clock calls
//! and jiff's `now` and system time zone.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod admit;
pub mod baselines;
pub mod budget;
pub mod cpu_budget;
pub mod forecast_stats;
pub mod ids;
pub mod kernel;
pub mod newcomers;
pub mod owner;
pub mod pace;
pub mod period;
pub mod policy;
pub mod predict;
pub mod predictor;
pub mod relpath;
pub mod sched;
pub mod series;
pub mod solver;
pub mod sources;
pub mod state;
pub mod timeseries;
pub mod trust;
