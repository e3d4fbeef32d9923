//! Batches: many tasks from one submission, queued durably on the consumer's
//! node and run concurrently on every free host of the pool.
//!
//! - [`spec`]: the user's batch (command template, `--range`/`--params`)
//!   expanded into tasks and checked before anything is queued;
//! - [`record`]: batches and tasks as plain values;
//! - [`store`] and [`codec`]: the durable queue in sled (both read
//!   [`record`]; `store` encodes through `codec`);
//! - [`queue`]: the queue itself, owned by the consumer actor: placement,
//!   retries, deadlines, verified copies, output copies, cancel, re-attach
//!   after a restart, one file per concern;
//! - [`estimate`]: the batch's turnaround estimate (`batch estimate`);
//! - [`policy`]: the named placement policies (`--policy`);
//! - [`runtime`]: the batch's run time as its landed tasks show it (the
//!   declared `--runtime` as the prior; CPU · P or wall · Γ per task);
//! - [`checkpoint`]: checkpoint intervals (Young/Daly) and each task's
//!   latest verified checkpoint, offered to its next attempt;
//! - [`attempt`]: one attempt of one task on one host, with its results
//!   landed whole or not at all;
//! - [`verify`]: verified results (`--replicas`, `--quorum`, `--verify
//!   adaptive`, `--validator`): digests, the validator, provenance; the
//!   queue's side is `queue::quorum` (docs/trust.md).

pub mod attempt;
pub mod checkpoint;
pub mod codec;
pub mod estimate;
pub mod policy;
pub mod queue;
pub mod record;
pub mod runtime;
pub mod spec;
pub mod store;
#[cfg(test)]
mod tests;
pub mod verify;

pub use policy::PolicyName;
pub use queue::{
    BatchError, BatchQueue, BatchView, Counts, HoldView, NewBatch, QueueMsg, TaskEvent,
};
pub use record::{BatchRecord, CheckpointRef, CheckpointSpec, TaskCopy, TaskRecord, TaskState};
