//! The CPU time the calling thread has used: what a handler that computed
//! an answer for a peer charges to it (`net::cpu_ledger`). Linux's
//! per-thread clock; it must not know what the time is charged for.

use std::time::Duration;

/// CPU time the calling thread has used so far (user and system). Zero
/// where the clock cannot be read.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_thread_is_charged_its_own_cpu_not_the_wall_clock() {
        let from = thread_cpu();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu() - from;
        assert!(slept < Duration::from_millis(20), "sleeping cost {slept:?}");
        // Spinning advances it (within 10 s of wall time on a loaded machine).
        let from = thread_cpu();
        let started = Instant::now();
        let mut x = 0u64;
        while thread_cpu() - from < Duration::from_millis(10) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the clock stood still"
            );
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}
