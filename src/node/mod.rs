//! The node's actors, each a task with a cloneable handle and a `Command`
//! enum, and what they share; [`crate::daemon`] builds and wires them.
//!
//! - the *host loop* ([`host_loop`]): store, monitor readings, supervisor, policy;
//! - the *pool host* ([`pool_host`]): peers' jobs, their event queues, output
//!   fetches, reliability answers and announcements;
//! - the *consumer* ([`crate::consumer`]): surveys, ranking, submissions.
//!
//! This module must not know the adapters around the actors (the control
//! API, the dashboard) nor how the daemon starts; it must not know how
//! states are defined (`model`), how the host is measured (`monitor`) or how
//! a guest is sandboxed (`guest`).

pub mod answer;
pub mod config;
mod hardware;
pub mod host_loop;
mod owner_load;
pub mod paths;
pub mod pool_host;
pub mod ready;

pub use hardware::{hardware, Hardware};
pub use owner_load::{OwnerLoad, OwnerLoadSource};
