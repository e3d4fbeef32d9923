//! The guest pid file: which process group the running guest has, so that a
//! node restarted after a crash can kill a guest its previous run left behind.
//!
//! The record carries the boot id and the leader's start time so that a pid
//! reused by an unrelated process is never signalled. This module knows
//! nothing about policy or jobs beyond the job id it stores.

use super::procfs;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::Path;

/// The contents of the pid file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestRecord {
    pub job_id: String,
    /// The guest's process group (and session) id, equal to its leader's pid.
    pub pgid: i32,
    /// The leader's start time in clock ticks after boot.
    pub starttime: u64,
    /// The boot the record was written in.
    pub boot_id: Option<String>,
}

/// Writes the record atomically (temp file, then rename).
pub fn write(path: &Path, record: &GuestRecord) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, serde_json::to_vec(record).map_err(io::Error::other)?)?;
    fs::rename(&tmp, path)
}

/// Reads the record; `None` when there is none or it cannot be parsed.
pub fn read(path: &Path) -> Option<GuestRecord> {
    let bytes = fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Removes the record if present.
pub fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// True when the recorded group still exists and is the one we started.
pub fn is_live(record: &GuestRecord) -> bool {
    if record.pgid <= 1 || record.boot_id != procfs::boot_id() {
        return false;
    }
    match procfs::read_stat(record.pgid) {
        // The leader lives: it is ours only if it started when ours did.
        Some(leader) if leader.is_alive() => leader.starttime == record.starttime,
        // The leader is gone, but a pid is not reused while it names a live
        // group or session, so any member left is one of ours.
        _ => procfs::group_has_members(record.pgid),
    }
}

/// Kills the recorded guest group if it is still alive. Returns true when a
/// group was killed.
pub fn kill_if_live(record: &GuestRecord) -> bool {
    if !is_live(record) {
        return false;
    }
    let _ = killpg(Pid::from_raw(record.pgid), Signal::SIGKILL);
    // Members that left the group but kept the session.
    for p in procfs::all_processes() {
        if p.is_alive() && p.session == record.pgid {
            let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), Signal::SIGKILL);
        }
    }
    true
}
