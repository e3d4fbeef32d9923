//! The node's resource monitor: samples the host CPU load L_H (everything but
//! the guest's process tree) and the memory available to a guest, classifies
//! each sample with the model's [`Thresholds`](crate::model::state::Thresholds)
//! and [`ExcursionTracker`](crate::model::state::ExcursionTracker), and paces
//! itself with the model's [`AdaptivePeriod`](crate::model::period::AdaptivePeriod).
//!
//! This module owns reading the machine (`/proc`) and the clock. It must not
//! know how states are defined (that is `model::state`), how the period adapts
//! (`model::period`), nor what is done with a reading (recording, predicting,
//! renicing the guest): readings leave through a channel.

pub mod bench;
pub mod clock;
pub mod live;
pub mod power;
pub mod proc;
pub mod replay;

pub use crate::procfs::{process_tree, ProcessScope};
pub use clock::{Clock, ManualClock, SystemClock};
pub use live::{run, Monitor, MonitorConfig, MonitorReading};
pub use proc::ProcLoadSource;
pub use replay::OwnerLoadReplay;

use std::path::PathBuf;

/// One raw measurement of the host, before classification.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawSample {
    /// Host CPU load L_H since the previous sample: CPU used by everything
    /// except the guest's process tree, in percent of all logical CPUs (0..=100).
    pub cpu: f64,
    /// Memory available to a guest, MiB (the kernel's MemAvailable estimate).
    pub free_mib: u64,
}

/// Where raw samples come from. Kept to one required method so tests can
/// script the host's behaviour.
pub trait LoadSource {
    /// Measures the host since the previous call, not counting the CPU used by
    /// the processes in `guest_pids` (the whole guest tree, already expanded).
    fn sample(&mut self, guest_pids: &[i32]) -> Result<RawSample, SampleError>;

    /// Resolves where the guest's processes are into the pids to exclude;
    /// done once per sample.
    fn guest_tree(&mut self, scope: &ProcessScope) -> Vec<i32> {
        scope.pids()
    }
}

impl<S: LoadSource + ?Sized> LoadSource for Box<S> {
    fn sample(&mut self, guest_pids: &[i32]) -> Result<RawSample, SampleError> {
        (**self).sample(guest_pids)
    }
    fn guest_tree(&mut self, scope: &ProcessScope) -> Vec<i32> {
        (**self).guest_tree(scope)
    }
}

/// Why a sample could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot understand {path}: {what}")]
    Parse { path: PathBuf, what: &'static str },
    #[error("no CPU time has passed since the previous sample")]
    TooSoon,
}
