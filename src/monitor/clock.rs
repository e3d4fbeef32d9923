//! The monitor's clock is the crate-wide [`crate::clock`]; this module keeps
//! the old paths (`monitor::clock::…`) working. It owns nothing itself.

pub use crate::clock::{unix_secs, Clock, ManualClock, SystemClock};
