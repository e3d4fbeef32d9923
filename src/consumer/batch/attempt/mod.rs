//! One attempt of one task on one host: hand it over, follow it, and land its
//! results (stdout, stderr, exit status, declared outputs) in the task's
//! result directory, whole or not at all.
//!
//! Results are written under a temporary name and renamed into the
//! attempt's own directory once every file is complete, so a reader (or a
//! restart) never sees half a result. That directory is the attempt's, never
//! the task's: a staging directory named by its job id for a task taken as
//! it comes, a copy directory for a verified one. Which attempt's files
//! become the task's results is the queue's decision (the first to land;
//! a quorum), so two attempts of one task never write the same place and a
//! landed result is never replaced.
//!
//! An attempt follows its job by the host's events and, between them, by
//! asking the host how the job stands (`JobRequest::Query`): a consumer that
//! restarted, or lost an event, still learns how the job ended.
//!
//! `types` holds what the queue's core reads and writes (the plan, the end,
//! the news: values only); `follow` hands a job over and follows it to its
//! landing; `fetch` brings a host's files here.

mod fetch;
mod follow;
mod types;

pub use fetch::{fetch_checkpoint, replace_dir};
pub use follow::{reattach, run};
pub use types::{event_text, AttemptEnd, AttemptNews, AttemptPlan, JobImage};
