//! Scheduling maths for a pool of non-dedicated hosts (issue 11): SDPN's
//! slowdowns (`power`), CISNE's remaining-time and CPU-time estimators
//! (`cisne`), TR curves over window lengths with Young/Daly checkpointing
//! (`curve`), the proactive placement rule (`place`), the Monte Carlo
//! turnaround estimate after CISNE's Algorithm 1 (`estimate`), the runtime
//! estimate learnt from completed tasks (`runtime`), the trace-driven pool
//! simulator (`sim`), the chance that a copy of a task meets a deadline
//! (`deadline`), a host's failure spells over its past (`spells`), and
//! the windows that come later: hold a task for the best (host, start)
//! pair, exclusion, bounded kills (`window`), how many hosts
//! placement asks and which (`probe`), which running tasks get a
//! copy in a batch's tail (`tail`), and the one locality rule: hosts that
//! hold a task's image first (`holds`), and which of plain placement and
//! bounded holds a batch is placed by (`duel`).
//!
//! The consumer describes a host by [`HostView`] (relative power, predicted
//! availability, TR curve) and a task by its reference runtime; nothing here
//! knows about the network, the clock or the store.

pub mod backtest;
pub mod cisne;
pub mod curve;
pub mod deadline;
pub mod duel;
pub mod estimate;
pub mod holds;
pub mod place;
pub mod power;
pub mod probe;
pub mod runtime;
pub mod sim;
pub mod spells;
pub mod tail;
pub mod timeline;
pub mod window;

pub use curve::{young_daly_interval, TrCurve};
pub use estimate::{
    estimate, Estimate, EstimateError, EstimateHost, EstimateInput, PastFailures, Quantiles,
    RunningTask,
};
pub use place::{choose_host, longest_first, pick_task_for_host, HostView};
pub use runtime::{Completion, RuntimeEstimate};
