//! The batch queue driver's file work: a new batch's inputs checked, a
//! task's results copied to an output directory whole or not at all, the
//! winning attempt's staging moved into the results (never over a result
//! already there) and a losing one's removed, an accepted copy promoted
//! into the results, and a restart's landed copies read back. The core never touches files; these run on the actor's loop
//! (the checks, the scan at start) or on the blocking pool (the copies).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use libp2p::PeerId;

use super::trust::Landing;
use super::types::BatchError;
use crate::consumer::batch::spec;
use crate::consumer::batch::verify::{self, Provenance};

/// Every input must be a readable regular file now, not when a host asks
/// for it. Each distinct file is checked once.
pub(super) fn check_inputs(tasks: &[spec::TaskSpec]) -> Result<(), BatchError> {
    let mut checked = HashSet::new();
    for task in tasks {
        for (local, _) in &task.inputs {
            if checked.insert(local.clone()) {
                check_input(local)?;
            }
        }
    }
    Ok(())
}

fn check_input(path: &Path) -> Result<(), BatchError> {
    crate::fsutil::open_regular(path)
        .map(|_| ())
        .map_err(|e| BatchError::Input {
            path: path.display().to_string(),
            why: e.to_string(),
        })
}

/// The landed copies of one task in its copies directory (one directory per
/// host, named by its peer id, holding an `exit_status`), with the declared
/// outputs each lacks. `None` when the directory cannot be read.
pub(super) fn landed_copies(dir: &Path, outputs: &[String]) -> Option<Vec<Landing>> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut pending = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(host) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if host.starts_with('.') || host.parse::<PeerId>().is_err() {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(path.join("exit_status")) else {
            continue;
        };
        let missing = outputs
            .iter()
            .filter(|o| !path.join(o).exists())
            .cloned()
            .collect();
        pending.push(Landing {
            host,
            dir: path,
            exit_status: status.trim().parse().unwrap_or(-1),
            missing,
            wall_secs: 0.0,
        });
    }
    Some(pending)
}

/// How a winning attempt's staging directory met the task's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Landed {
    /// Renamed into place.
    Moved,
    /// A result was there already (moved by a run of the node killed
    /// before its record said so): it stays, and the staging is left for
    /// the caller to discard.
    KeptEarlier,
}

/// Renames the staging directory `from` to the task's results `to`, never
/// over a result already there: one `renameat2(RENAME_NOREPLACE)` where
/// the system has it, else a look then a rename (the queue's core is the
/// one writer of `to`, so nothing lands between the two).
pub(super) fn land(from: &Path, to: &Path) -> Result<Landed, String> {
    let failed = |e: std::io::Error| format!("cannot rename into {}: {e}", to.display());
    match rename_noreplace(from, to) {
        Ok(()) => Ok(Landed::Moved),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Landed::KeptEarlier),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // The filesystem does not know the flag.
            if to.exists() {
                return Ok(Landed::KeptEarlier);
            }
            std::fs::rename(from, to)
                .map(|()| Landed::Moved)
                .map_err(failed)
        }
        Err(e) => Err(failed(e)),
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE)
        .map_err(std::io::Error::from)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn rename_noreplace(_from: &Path, _to: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// What a result in a task's place says of itself: the host its
/// provenance names and its exit status, each as far as it can be read
/// (two small files).
pub(super) fn kept_result(dir: &Path) -> (Option<String>, Option<i32>) {
    let host = std::fs::read(dir.join(verify::PROVENANCE_FILE))
        .ok()
        .and_then(|json| serde_json::from_slice::<Provenance>(&json).ok())
        .map(|p| p.host);
    let exit_status = std::fs::read_to_string(dir.join("exit_status"))
        .ok()
        .and_then(|text| text.trim().parse().ok());
    (host, exit_status)
}

/// Removes a staging directory whose files are not wanted (a copy that
/// lost, or what an earlier run left); a failure is logged, never fatal.
pub(super) fn discard(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a staging directory")
        }
    }
}

/// Writes `provenance.json` into the accepted copy and renames the copy
/// into the task's results. A result already there (promoted by a run of
/// the node stopped before its record said so) is never deleted: it is
/// first renamed aside into the task's copies directory, as
/// `.replaced-N` (a dot name, so a restart does not judge it as a copy),
/// and each rename is one that never replaces (see [`land`]).
pub(super) fn promote(copy: &Path, to: &Path, provenance: &Provenance) -> Result<(), String> {
    let json = provenance.to_json()?;
    std::fs::write(copy.join(verify::PROVENANCE_FILE), json)
        .map_err(|e| format!("{}: {e}", copy.display()))?;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    // Beside the copy: `<batch>/copies/<task>/`.
    let aside_in = copy
        .parent()
        .ok_or_else(|| format!("{}: no parent", copy.display()))?;
    for _ in 0..PROMOTE_TRIES {
        match land(copy, to)? {
            Landed::Moved => return Ok(()),
            Landed::KeptEarlier => set_aside(to, aside_in)?,
        }
    }
    Err(format!(
        "cannot rename into {}: a result came back {PROMOTE_TRIES} times",
        to.display()
    ))
}

/// Renames tried by [`promote`]: the queue's core is the one writer of a
/// task's results, so the second always lands; the bound is against a loop.
const PROMOTE_TRIES: usize = 3;

/// Names tried for a result set aside before giving up.
const ASIDE_NAMES_MAX: usize = 1_000;

/// Renames `result` into `dir` under the first free `.replaced-N`.
fn set_aside(result: &Path, dir: &Path) -> Result<(), String> {
    for n in 0..ASIDE_NAMES_MAX {
        let aside = dir.join(format!(".replaced-{n}"));
        if land(result, &aside)? == Landed::Moved {
            tracing::warn!(
                result = %result.display(),
                aside = %aside.display(),
                "a result was already in place: set aside, not deleted"
            );
            return Ok(());
        }
    }
    Err(format!(
        "cannot set {} aside: {ASIDE_NAMES_MAX} names taken in {}",
        result.display(),
        dir.display()
    ))
}

/// Copies a landed task's results `from` to `to` (its entry in an output
/// directory), whole or not at all: into `.<name>.partial` beside `to`,
/// renamed over it. Files are hard-linked where the filesystem allows,
/// else copied into new files.
///
/// Two copies to one place never run at once in this process (the queue's
/// copy at a landing, a restart's, `batch results`, a second batch with the
/// same output directory): they would share the temporary directory. They
/// did (issue 30, finding 6): one removed the other's temporary directory
/// and linked its files anew, and the other's `fs::copy` of a file it then
/// found there opened that link, a link to the landed result itself, with
/// `O_TRUNC` and copied the now empty file onto itself, so the task's
/// landed stdout (and its copy in the output directory) became empty. And
/// a copy never writes into a file already there, so nothing else sharing
/// the place can make it truncate a result either.
pub fn copy_task_results(from: &Path, to: &Path) -> Result<(), String> {
    let parent = to.parent().ok_or("no parent directory")?;
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let name = to.file_name().and_then(|n| n.to_str()).ok_or("no name")?;
    let tmp: PathBuf = parent.join(format!(".{name}.partial"));
    let _alone = CopyingTo::take(&tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    copy_tree(from, &tmp).map_err(|e| format!("{}: {e}", from.display()))?;
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    std::fs::rename(&tmp, to).map_err(|e| format!("{}: {e}", to.display()))
}

/// The temporary directories copies are being made into, in this process.
static COPYING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
static COPIED: std::sync::Condvar = std::sync::Condvar::new();

/// One copy's hold on its temporary directory: taken when no other copy
/// holds it (waiting for the one that does), given back when dropped.
struct CopyingTo(PathBuf);

impl CopyingTo {
    fn take(tmp: &Path) -> CopyingTo {
        // One key per place however it is spelled: the parent exists.
        let key = match (tmp.parent().map(Path::canonicalize), tmp.file_name()) {
            (Some(Ok(parent)), Some(name)) => parent.join(name),
            _ => tmp.to_path_buf(),
        };
        // A panic while held leaves a list that is still whole.
        let mut copying = COPYING.lock().unwrap_or_else(|e| e.into_inner());
        while copying.contains(&key) {
            copying = COPIED.wait(copying).unwrap_or_else(|e| e.into_inner());
        }
        copying.push(key.clone());
        CopyingTo(key)
    }
}

impl Drop for CopyingTo {
    fn drop(&mut self) {
        let mut copying = COPYING.lock().unwrap_or_else(|e| e.into_inner());
        copying.retain(|k| k != &self.0);
        COPIED.notify_all();
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            match std::fs::hard_link(entry.path(), &target) {
                Ok(()) => {}
                // Whatever is there may be a link to the result itself.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(e),
                Err(_) => copy_into_new(&entry.path(), &target)?,
            }
        }
    }
    Ok(())
}

/// Copies the file `from` into `to`, which must not exist (never opened
/// with `O_TRUNC`, unlike `fs::copy`), with `from`'s permissions.
fn copy_into_new(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut source = std::fs::File::open(from)?;
    let mut target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    std::io::copy(&mut source, &mut target)?;
    target.set_permissions(source.metadata()?.permissions())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(dir: &Path, stdout: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("stdout"), stdout).unwrap();
        std::fs::write(dir.join("exit_status"), "0\n").unwrap();
    }

    /// A landed result is never replaced: a second landing of the task
    /// leaves the first one's files and reports so; the first one moves in.
    #[test]
    fn a_later_landing_cannot_replace_a_landed_result() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (
            dir.path().join(".landing/b-t0-a0"),
            dir.path().join(".landing/b-t0-a1"),
        );
        let to = dir.path().join("0");
        result(&first, "first\n");
        result(&second, "second\n");
        assert_eq!(land(&first, &to), Ok(Landed::Moved));
        assert!(!first.exists());
        assert_eq!(land(&second, &to), Ok(Landed::KeptEarlier));
        assert_eq!(
            std::fs::read_to_string(to.join("stdout")).unwrap(),
            "first\n"
        );
        discard(&second);
        assert!(!second.exists());
        // Discarding what is gone already is no error.
        discard(&second);
    }

    /// What a second copy to the same place found mid-way: its own
    /// temporary directory holding a link to the result. The copy refuses
    /// to write into it; before, `fs::copy` truncated the result through
    /// the link and copied nothing onto it (finding 6).
    #[test]
    fn a_copy_out_never_writes_into_a_file_already_there() {
        let dir = tempfile::tempdir().unwrap();
        let (from, tmp) = (
            dir.path().join("results/0"),
            dir.path().join("out/.0.partial"),
        );
        result(&from, "8\n");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::hard_link(from.join("stdout"), tmp.join("stdout")).unwrap();
        let copied = copy_tree(&from, &tmp);
        assert!(copied.is_err(), "{copied:?}");
        assert_eq!(
            std::fs::read_to_string(from.join("stdout")).unwrap(),
            "8\n",
            "the landed result is untouched"
        );
    }

    /// Copies of one task's results to one output directory at once (the
    /// queue's, `batch results`', another batch's into the same directory)
    /// leave the result and the copy whole. Before, they shared a temporary
    /// directory and emptied the landed result within a few rounds.
    #[test]
    fn copies_out_of_one_task_at_once_never_empty_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("results/0"), dir.path().join("out/0"));
        result(&from, "8\n");
        for i in 0..32 {
            std::fs::write(from.join(format!("output-{i}")), "8\n").unwrap();
        }
        let copiers: Vec<_> = (0..3)
            .map(|_| {
                let (from, to) = (from.clone(), to.clone());
                std::thread::spawn(move || {
                    (0..100)
                        .filter_map(|_| copy_task_results(&from, &to).err())
                        .collect::<Vec<String>>()
                })
            })
            .collect();
        let errors: Vec<String> = copiers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        for entry in std::fs::read_dir(&from).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let want = if path.ends_with("exit_status") {
                "0\n"
            } else {
                "8\n"
            };
            assert_eq!(text, want, "{}", path.display());
            let copy = to.join(path.file_name().unwrap());
            assert_eq!(std::fs::read_to_string(&copy).unwrap(), want);
        }
        assert!(errors.is_empty(), "{errors:?}");
    }

    fn provenance() -> Provenance {
        Provenance::single(
            0,
            verify::VerifyMode::Replicate,
            "12D3KooWNew".into(),
            &[0; 32],
            0,
        )
    }

    /// Promoting an accepted copy over a result already in place (a run
    /// stopped between the rename and its record) keeps the earlier result,
    /// set aside beside the copies, and puts the accepted copy in place.
    #[test]
    fn a_promotion_never_deletes_a_result_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let copies = dir.path().join("copies/0");
        let (copy, to) = (copies.join("12D3KooWNew"), dir.path().join("results/0"));
        result(&copy, "accepted\n");
        result(&to, "earlier\n");
        promote(&copy, &to, &provenance()).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("stdout")).unwrap(),
            "accepted\n"
        );
        assert!(to.join(verify::PROVENANCE_FILE).exists());
        assert!(!copy.exists());
        let aside = copies.join(".replaced-0");
        assert_eq!(
            std::fs::read_to_string(aside.join("stdout")).unwrap(),
            "earlier\n",
            "the earlier result is kept"
        );
        // Again, over the result just promoted: a second name.
        result(&copy, "again\n");
        promote(&copy, &to, &provenance()).unwrap();
        let second = std::fs::read_to_string(copies.join(".replaced-1/stdout")).unwrap();
        assert_eq!(second, "accepted\n");
    }
}
