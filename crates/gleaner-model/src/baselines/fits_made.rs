//! How many fits `logistic` and its later model have made on the calling
//! thread: a test tells an answer that found its fits ready from one that
//! made them. Its own file, so both methods count here without importing
//! each other.

thread_local! {
    /// Fits this thread has made ([`fits_made_here`]).
    static FITS_MADE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many `logistic` fits (its later model's too) the calling thread
/// has made so far.
pub fn fits_made_here() -> u64 {
    FITS_MADE.with(|n| n.get())
}

/// Counts a fit made on this thread.
pub(super) fn count_fit_made() {
    FITS_MADE.with(|n| n.set(n.get() + 1));
}
