//! The pure model: the five states, host series, semi-Markov estimation and
//! the reliability solver.
//!
//! Nothing here performs I/O, reads a clock, or knows about sled, libp2p or
//! tokio: every function takes `now`, the data and the limits as parameters.

pub mod baselines;
pub mod kernel;
pub mod period;
pub mod policy;
pub mod predict;
pub mod predictor;
pub mod series;
pub mod solver;
pub mod state;
pub mod timeseries;
