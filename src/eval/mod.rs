//! Evaluation support: tools that produce or score host traces offline — the
//! synthetic desktop-lab generator and the harness behind `gleaner eval`.
//!
//! The harness is layered: `registry` names the methods, `protocol` picks
//! the test windows and asks every method (rolling origin, no peeking),
//! `metrics` holds the pure scores, `summary` aggregates them with bootstrap
//! intervals, `goals` computes issue 29's goals for the default (the maths in
//! `model::forecast_stats`), `windows` writes every window's forecasts and outcome, `experiments` runs the papers' training-size, cost and noise
//! studies, and `report`/`plots` format the result.
//!
//! This layer sits above `history` and `model`: it may build traces and read
//! states off them, but it knows nothing about the running node, the network
//! or the command line.

pub mod experiments;
pub mod goals;
pub mod load;
pub mod metrics;
pub mod plots;
pub mod protocol;
pub mod registry;
pub mod report;
pub mod summary;
pub mod synth;
pub mod windows;
