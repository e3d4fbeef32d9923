//! Rebuilding a store's sled database as a fresh one: every tree copied
//! into a new database beside it, then the new one's files swapped in for
//! the old ones', in steps a crash can interrupt anywhere and the next
//! open finishes (or forgets, before the copy is complete).
//!
//! Why: sled 0.34 never gives back what a tree once held. A store that ever
//! kept two months one key a row (format versions 1 and 2 before their
//! days were sealed, or an import by an older gleaner) opens with sled's
//! page table at that peak for good: measured, 730,000 keys removed leave a
//! database that opens at 38.7 MiB of anonymous memory, dropped as a tree
//! 38.6 MiB, where a fresh database of what is left opens at 1.1 MiB. Once
//! its days are sealed such a store holds a day of rows one key each, so
//! the copy is small and quick.
//!
//! The steps, with a marker file for each that must not be redone:
//! 1. copy every tree into `<store>/.rebuild/`, flush, write
//!    `.rebuild/COMPLETE` (until it exists, the copy is thrown away);
//! 2. move sled's own files (`conf`, `db`, `snap.*`, `blobs`) out of the
//!    store into `<store>/.old/`, then write `.rebuild/OLD_MOVED`;
//! 3. move the copy's files into the store, then remove `.rebuild` and
//!    `.old`.
//!
//! The store's own files (the day files, the high-water mark) stay where
//! they are. It must not know what the trees hold.

use super::day_files;
use super::layout::TREE_META;
use super::{sled_err, StoreError};
use std::fs;
use std::io;
use std::path::Path;

const REBUILD_DIR: &str = ".rebuild";
const OLD_DIR: &str = ".old";
const COMPLETE: &str = "COMPLETE";
const OLD_MOVED: &str = "OLD_MOVED";

/// Copies the sled database in `dir` into a fresh one, with `fresh_key`
/// set in its `meta` tree, and swaps it in. The database must not be open.
pub(super) fn rebuild(dir: &Path, fresh_key: &[u8]) -> Result<(), StoreError> {
    let new_dir = dir.join(REBUILD_DIR);
    if new_dir.exists() {
        fs::remove_dir_all(&new_dir).map_err(|e| io_err("clearing", &new_dir, e))?;
    }
    {
        let old = crate::sled_open::open_dir(dir).map_err(|source| StoreError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let new = crate::sled_open::open_dir(&new_dir).map_err(|source| StoreError::Open {
            path: new_dir.clone(),
            source,
        })?;
        for name in old.tree_names() {
            let from = old.open_tree(&name).map_err(sled_err("rebuilding"))?;
            let to = new.open_tree(&name).map_err(sled_err("rebuilding"))?;
            for item in from.iter() {
                let (k, v) = item.map_err(sled_err("rebuilding"))?;
                to.insert(k, v).map_err(sled_err("rebuilding"))?;
            }
        }
        new.open_tree(TREE_META)
            .and_then(|meta| meta.insert(fresh_key, &[][..]))
            .map_err(sled_err("rebuilding"))?;
        new.flush().map_err(sled_err("rebuilding"))?;
    }
    mark(&new_dir, COMPLETE)?;
    finish(dir)
}

/// At open, before sled opens the store: finishes a rebuild a crash
/// interrupted after its copy was complete, or throws away one that was
/// not; removes what a finished one left.
pub(super) fn recover(dir: &Path) -> Result<(), StoreError> {
    let new_dir = dir.join(REBUILD_DIR);
    if new_dir.join(COMPLETE).exists() {
        return finish(dir);
    }
    if new_dir.exists() {
        fs::remove_dir_all(&new_dir).map_err(|e| io_err("clearing", &new_dir, e))?;
    }
    let old_dir = dir.join(OLD_DIR);
    if old_dir.exists() {
        fs::remove_dir_all(&old_dir).map_err(|e| io_err("clearing", &old_dir, e))?;
    }
    Ok(())
}

/// Steps 2 and 3, each redone from where a crash left it.
fn finish(dir: &Path) -> Result<(), StoreError> {
    let new_dir = dir.join(REBUILD_DIR);
    let old_dir = dir.join(OLD_DIR);
    if !new_dir.join(OLD_MOVED).exists() {
        // No file of the copy has moved yet: every sled file here is old.
        fs::create_dir_all(&old_dir).map_err(|e| io_err("creating", &old_dir, e))?;
        move_entries(dir, &old_dir, is_sleds)?;
        mark(&new_dir, OLD_MOVED)?;
    }
    move_entries(&new_dir, dir, is_sleds)?;
    fs::remove_dir_all(&new_dir).map_err(|e| io_err("clearing", &new_dir, e))?;
    fs::remove_dir_all(&old_dir).map_err(|e| io_err("clearing", &old_dir, e))?;
    sync_dir(dir)
}

/// The names sled 0.34 gives the files of a database.
fn is_sleds(name: &str) -> bool {
    matches!(name, "conf" | "db" | "blobs") || name.starts_with("snap.")
}

fn move_entries(from: &Path, to: &Path, which: fn(&str) -> bool) -> Result<(), StoreError> {
    for entry in fs::read_dir(from).map_err(|e| io_err("listing", from, e))? {
        let entry = entry.map_err(|e| io_err("listing", from, e))?;
        let name = entry.file_name();
        if name.to_str().is_some_and(which) {
            let target = to.join(&name);
            fs::rename(entry.path(), &target).map_err(|e| io_err("moving", &target, e))?;
        }
    }
    sync_dir(from)?;
    sync_dir(to)
}

fn mark(dir: &Path, name: &str) -> Result<(), StoreError> {
    let path = dir.join(name);
    fs::File::create(&path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err("writing", &path, e))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    day_files::sync_dir(dir).map_err(|e| io_err("syncing", dir, e))
}

fn io_err(doing: &'static str, path: &Path, source: io::Error) -> StoreError {
    StoreError::Rebuild {
        doing,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database in `dir` whose tree `t` says `which`.
    fn make_db(dir: &Path, which: &str) {
        let db = crate::sled_open::open_dir(dir).unwrap();
        let t = db.open_tree("t").unwrap();
        t.insert("which", which.as_bytes()).unwrap();
        for i in 0u32..500 {
            t.insert(i.to_be_bytes(), &[7u8; 11][..]).unwrap();
        }
        db.flush().unwrap();
    }

    fn which(dir: &Path) -> String {
        let db = crate::sled_open::open_dir(dir).unwrap();
        let t = db.open_tree("t").unwrap();
        assert_eq!(t.len(), 501, "every key is there");
        String::from_utf8(t.get("which").unwrap().unwrap().to_vec()).unwrap()
    }

    fn leftovers(dir: &Path) -> bool {
        dir.join(REBUILD_DIR).exists() || dir.join(OLD_DIR).exists()
    }

    #[test]
    fn a_rebuild_copies_every_tree_and_marks_the_copy_fresh() {
        let dir = tempfile::tempdir().unwrap();
        make_db(dir.path(), "old");
        fs::write(dir.path().join("days-and-mark"), b"ours").unwrap();
        rebuild(dir.path(), b"fresh").unwrap();
        assert_eq!(which(dir.path()), "old");
        let db = crate::sled_open::open_dir(dir.path()).unwrap();
        assert!(db
            .open_tree(TREE_META)
            .unwrap()
            .contains_key("fresh")
            .unwrap());
        assert!(!leftovers(dir.path()));
        assert_eq!(fs::read(dir.path().join("days-and-mark")).unwrap(), b"ours");
    }

    #[test]
    fn a_copy_cut_short_is_thrown_away_and_the_old_database_stays() {
        let dir = tempfile::tempdir().unwrap();
        make_db(dir.path(), "old");
        make_db(&dir.path().join(REBUILD_DIR), "new");
        recover(dir.path()).unwrap();
        assert_eq!(which(dir.path()), "old");
        assert!(!leftovers(dir.path()));
    }

    #[test]
    fn a_complete_copy_is_swapped_in_whatever_step_a_crash_stopped() {
        // Copied, nothing moved.
        let dir = tempfile::tempdir().unwrap();
        make_db(dir.path(), "old");
        let new_dir = dir.path().join(REBUILD_DIR);
        make_db(&new_dir, "new");
        mark(&new_dir, COMPLETE).unwrap();
        recover(dir.path()).unwrap();
        assert_eq!(which(dir.path()), "new");
        assert!(!leftovers(dir.path()));

        // The old files moved out and some of the new ones in.
        let dir = tempfile::tempdir().unwrap();
        make_db(dir.path(), "old");
        let new_dir = dir.path().join(REBUILD_DIR);
        make_db(&new_dir, "new");
        mark(&new_dir, COMPLETE).unwrap();
        let old_dir = dir.path().join(OLD_DIR);
        fs::create_dir_all(&old_dir).unwrap();
        move_entries(dir.path(), &old_dir, is_sleds).unwrap();
        mark(&new_dir, OLD_MOVED).unwrap();
        move_entries(&new_dir, dir.path(), |n| n == "conf").unwrap();
        recover(dir.path()).unwrap();
        assert_eq!(which(dir.path()), "new");
        assert!(!leftovers(dir.path()));
    }
}
