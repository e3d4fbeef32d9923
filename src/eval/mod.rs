//! Evaluation support: tools that produce or score host traces offline, such
//! as the synthetic desktop-lab generator.
//!
//! This layer sits above `history` and `model`: it may build traces and read
//! states off them, but it knows nothing about the running node, the network
//! or the command line.

pub mod experiments;
pub mod metrics;
pub mod plots;
pub mod protocol;
pub mod registry;
pub mod report;
pub mod summary;
pub mod synth;
