//! Opening a sled database when a handle on it was just dropped.
//!
//! sled's background flusher keeps the database's file lock for a moment
//! after the last handle is dropped, so reopening right after closing (a
//! restart within one process, an upgrade test that writes an old store and
//! then opens it) can find the lock taken. The node's stores open through
//! here, so none of them fails on that moment; another process holding the
//! lock for longer still gets the error after [`LOCK_RETRY`].

use std::path::Path;
use std::time::{Duration, Instant};

/// How long an open waits for a file lock that a just-dropped handle holds.
pub const LOCK_RETRY: Duration = Duration::from_secs(2);

/// Opens the database `config` names, retrying while its file lock is busy.
pub fn open_with_lock_retry(config: &sled::Config) -> Result<sled::Db, sled::Error> {
    let started = Instant::now();
    loop {
        match config.open() {
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.to_string().contains("could not acquire lock") =>
            {
                if started.elapsed() >= LOCK_RETRY {
                    return Err(sled::Error::Io(e));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// `sled::open(dir)` with the same retry: sled's default configuration.
pub fn open_dir(dir: &Path) -> Result<sled::Db, sled::Error> {
    open_with_lock_retry(&sled::Config::new().path(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_reopened_at_once_after_its_handle_is_dropped_opens() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..20u8 {
            let db = open_dir(dir.path()).unwrap();
            db.insert([round], &[round][..]).unwrap();
            db.flush().unwrap();
        }
        let db = open_dir(dir.path()).unwrap();
        assert_eq!(db.len(), 20);
    }

    #[test]
    fn a_lock_held_by_a_live_handle_is_still_refused_after_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let held = open_dir(dir.path()).unwrap();
        let err = open_dir(dir.path()).expect_err("the lock is held");
        assert!(err.to_string().contains("lock"), "{err}");
        drop(held);
    }
}
