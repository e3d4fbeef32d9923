//! The batch queue: every batch this node submitted, its tasks, and which
//! host runs what, as a pure core and a thin driver.
//!
//! - [`QueueCore`] (`state`, with one file per concern: `rounds`, `placement`,
//!   `retries`, `avoid` (how long a task keeps off the hosts it failed on),
//!   `deadlines`, `tail` (tail copies), `replicas` and `quorum` with their state in
//!   `trust`, `outputs`, `checkpoints`, `restore`, `commands`) decides
//!   everything: it takes one input at a time (a command, a survey's
//!   answer, hosts' answers about later windows (`later`: a task no free
//!   host is likely to finish waits for a host's later window), a member's news, an attempt's news or end, a judged copy, a copied result, a
//!   timer tick), each with the time, and returns the [`Action`]s to
//!   perform. No tokio, no sled, no files, no clock: `tests` drives it alone.
//! - [`BatchQueue`] (`driver`, with `tasks`, `image_offer`, `files` and
//!   `trust_store`) is the thin async half the consumer actor owns: it
//!   reads the clock,
//!   performs the actions (writes through [`crate::consumer::batch::store`]
//!   before acting on a change that must survive a restart, sends task
//!   events, spawns attempts, surveys, judgments and copies as tracked
//!   tasks) and feeds what they report ([`QueueMsg`]) back to the core.
//!
//! Dispatch: while tasks wait, the queue looks at the pool (`rounds`: it asks
//! a few hosts directly when something changed, and otherwise reads the
//! members' summaries, less and less often); the oldest batch
//! with waiting tasks orders the free hosts by its placement policy
//! ([`crate::consumer::batch::PolicyName::order`]) and hands them its
//! waiting tasks that may run there (the batch's `max_running`, hosts that
//! failed the task); the next batch gets the hosts left. Each attempt runs
//! as a task ([`crate::consumer::batch::attempt`]) and reports its end back
//! to the actor as a [`QueueMsg`].

mod avoid;
mod checkpoints;
mod commands;
mod deadlines;
mod driver;
mod files;
mod image_offer;
mod later;
mod outputs;
mod placement;
mod quorum;
mod replicas;
mod restore;
mod retries;
mod rounds;
mod silences;
mod state;
mod tail;
mod tasks;
#[cfg(test)]
mod tests;
mod trust;
mod trust_store;
mod types;

pub use avoid::AVOID_FOR;
pub use driver::BatchQueue;
pub use driver::TICK;
pub use files::copy_task_results;
pub use later::{LATER_HOSTS_MAX, LATER_STARTS};
pub use rounds::{MemberNews, LOOK_EVERY_MAX};
pub use state::{Action, Launch, Now, QueueCore, LATER_WINDOWS_DEFAULT, TAIL_COPIES_DEFAULT};
pub use state::{LATER_UNIT_MIN_SECS, LATER_UNIT_SECS};
pub use trust::{Judge, Landing, Trust, Verdict};
pub use types::IDLE_SURVEY_EVERY;
pub use types::{
    BatchError, BatchView, Counts, HoldView, NewBatch, QueueMsg, TaskEvent,
    DEFAULT_CHECKPOINT_COST_SECS,
};
