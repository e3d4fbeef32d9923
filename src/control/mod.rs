//! The node's local control API: HTTP/1.1 with JSON bodies over a Unix
//! socket in the data dir (mode 0600, never TCP), used by `gleaner status`,
//! `pause`, `resume`, `predict`, `run-local`, `history`, `images`, `hosts` and
//! `submit`.
//!
//! This module owns the wire types ([`api`]), the server that turns HTTP
//! requests into typed calls on the node's actor handles ([`server`]), and
//! the client the CLI uses ([`client`]). It must not know how the node
//! answers a request: the actors own the store, the supervisor and the pool.
//!
//! axum and hyper were chosen over a hand-written HTTP/1.1 parser: they are
//! already the conventions' choice, streaming bodies (`run-local`) and
//! graceful shutdown come for free, and a parser of our own would be one more
//! piece of code facing input.

pub mod api;
mod api_batches;
mod api_images;
pub mod batches;
pub mod client;
mod images;
pub mod server;
mod state;
