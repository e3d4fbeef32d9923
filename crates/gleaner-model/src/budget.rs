//! Budgets for what peers send: a token bucket that refills at a steady
//! rate up to a burst, so that a peer may send what an honest one would
//! and no more. Pure: the time is a parameter (milliseconds from any fixed
//! origin), so the caller's clock and tests' paused time both work.

/// A token bucket: `capacity` tokens at most, `per_sec` added each second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    capacity: f64,
    per_sec: f64,
    tokens: f64,
    last_ms: Option<u64>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(capacity: u32, per_sec: f64) -> TokenBucket {
        let capacity = f64::from(capacity.max(1));
        TokenBucket {
            capacity,
            per_sec: if per_sec.is_finite() {
                per_sec.max(0.0)
            } else {
                0.0
            },
            tokens: capacity,
            last_ms: None,
        }
    }

    /// Takes one token at `now_ms` if there is one. A time earlier than the
    /// last one adds nothing (a clock that steps back gives no credit).
    pub fn take(&mut self, now_ms: u64) -> bool {
        if let Some(last) = self.last_ms {
            let elapsed = now_ms.saturating_sub(last) as f64 / 1000.0;
            self.tokens = (self.tokens + elapsed * self.per_sec).min(self.capacity);
        }
        self.last_ms = Some(self.last_ms.map_or(now_ms, |l| l.max(now_ms)));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_steady_rate_and_no_credit_for_a_step_back() {
        let mut b = TokenBucket::new(5, 2.0);
        let taken = (0..100).filter(|_| b.take(1_000)).count();
        assert_eq!(taken, 5, "the burst");
        // One second later: two more.
        let taken = (0..100).filter(|_| b.take(2_000)).count();
        assert_eq!(taken, 2);
        // A clock stepping back gives nothing.
        assert!(!b.take(0));
        // A minute of flooding at 1,000 a second gets the rate, not the flood.
        let taken = (0..60_000u64).filter(|i| b.take(2_000 + i)).count();
        assert!((119..=121).contains(&taken), "{taken}");
        // A long quiet refills to the burst only.
        let taken = (0..100).filter(|_| b.take(10_000_000)).count();
        assert_eq!(taken, 5);
    }
}
