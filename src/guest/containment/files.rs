//! The few ways this module touches a cgroup's files: write a control
//! file (naming it in the error), open `cgroup.procs` for a guest to join,
//! list a group's processes, wait until it is empty, remove its directory
//! once it is, and read a counter from a flat-keyed file.
//!
//! It must not know the layout of v1 or v2 hierarchies or what a job is.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a kill waits for the group to empty before it reports failure.
const KILL_WAIT: Duration = Duration::from_secs(2);

pub(super) fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

pub(super) fn open_procs(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join("cgroup.procs"))
}

/// Makes `dir` a new empty group, killing and removing one left there.
pub(super) fn fresh_dir(dir: &Path, kill: impl Fn(&Path) -> io::Result<()>) -> io::Result<()> {
    if dir.exists() {
        let _ = kill(dir);
        rmdir_retrying(dir)?;
    }
    fs::create_dir(dir)
}

/// A group's directory can be removed only once its last process is gone
/// (a killed process leaves when it has exited, not when signalled).
pub(super) fn rmdir_retrying(dir: &Path) -> io::Result<()> {
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

pub(super) fn procs_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn wait_empty(dir: &Path) -> io::Result<()> {
    let deadline = Instant::now() + KILL_WAIT;
    while !procs_in(dir).is_empty() {
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} still has processes", dir.display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// `name N` from a flat-keyed cgroup file.
pub(super) fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}
