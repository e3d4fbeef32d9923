//! Where the node keeps things: the data dir (history, jobs, control socket,
//! lock file) and the config file, and the lock that lets one process at a
//! time own a data dir.
//!
//! Directories follow the platform convention (XDG on Linux, through the
//! `directories` crate); `GLEANER_DATA_DIR` / `GLEANER_CONFIG_DIR` override
//! them, and the `--data-dir` / `--config` flags override those. This module
//! owns that precedence and the file names inside the data dir. It must not
//! know what is stored in them.

use nix::fcntl::{Flock, FlockArg};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Environment variable overriding the data dir.
pub const DATA_DIR_ENV: &str = "GLEANER_DATA_DIR";
/// Environment variable overriding the config dir.
pub const CONFIG_DIR_ENV: &str = "GLEANER_CONFIG_DIR";
/// The config file's name inside the config dir.
pub const CONFIG_FILE: &str = "config.toml";

/// The resolved locations of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub data_dir: PathBuf,
    pub config_file: PathBuf,
}

/// Why the locations cannot be found or prepared.
#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    #[error("cannot find a home directory for the default data and config dirs; set {DATA_DIR_ENV} and {CONFIG_DIR_ENV} or pass --data-dir")]
    NoHome,
    #[error("cannot create the data dir {path}: {source}")]
    CreateDataDir {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Paths {
    /// Resolves the paths from flags, then the process environment, then the
    /// platform defaults.
    pub fn resolve(data_dir: Option<&Path>, config: Option<&Path>) -> Result<Paths, PathsError> {
        Paths::resolve_with(data_dir, config, |k| std::env::var_os(k))
    }

    /// [`resolve`](Self::resolve) with the environment passed in, for tests.
    pub fn resolve_with(
        data_dir: Option<&Path>,
        config: Option<&Path>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Paths, PathsError> {
        let from_env = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let project = || directories::ProjectDirs::from("", "", "gleaner");
        let data_dir = match (data_dir, from_env(DATA_DIR_ENV)) {
            (Some(flag), _) => flag.to_path_buf(),
            (None, Some(env)) => env,
            (None, None) => project()
                .ok_or(PathsError::NoHome)?
                .data_dir()
                .to_path_buf(),
        };
        let config_file = match (config, from_env(CONFIG_DIR_ENV)) {
            (Some(flag), _) => flag.to_path_buf(),
            (None, Some(env)) => env.join(CONFIG_FILE),
            (None, None) => project()
                .ok_or(PathsError::NoHome)?
                .config_dir()
                .join(CONFIG_FILE),
        };
        Ok(Paths {
            data_dir,
            config_file,
        })
    }

    /// Creates the data dir, readable by its owner only (it holds the
    /// control socket and the guests' work).
    pub fn create_data_dir(&self) -> Result<(), PathsError> {
        let err = |source| PathsError::CreateDataDir {
            path: self.data_dir.clone(),
            source,
        };
        if !self.data_dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.data_dir)
                .map_err(err)?;
        }
        Ok(())
    }

    /// The control API's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.data_dir.join("control.sock")
    }

    /// The lock file that one node (or one offline reader) holds.
    pub fn lock_file(&self) -> PathBuf {
        self.data_dir.join("node.lock")
    }

    /// The sled database of the node's history.
    pub fn history_dir(&self) -> PathBuf {
        self.data_dir.join("history")
    }

    /// The image cache (issue 31).
    pub fn images_dir(&self) -> PathBuf {
        images_dir(&self.data_dir)
    }
}

/// The image cache in `data_dir`: for the node, which has its data dir
/// only, and for [`Paths::images_dir`].
pub fn images_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("images")
}

/// An exclusive `flock` on the data dir's lock file, held while it lives.
#[derive(Debug)]
pub struct DataDirLock {
    _lock: Flock<File>,
    path: PathBuf,
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another gleaner process (pid {pid}) is using {dir}; stop it first (lock file {lock})", dir = .dir.display(), lock = .lock.display())]
    Held {
        pid: String,
        dir: PathBuf,
        lock: PathBuf,
    },
    #[error("cannot use the lock file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl DataDirLock {
    /// Takes the lock without waiting, and writes our pid into the file.
    pub fn acquire(paths: &Paths) -> Result<DataDirLock, LockError> {
        let path = paths.lock_file();
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, _errno)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(LockError::Held {
                    pid: pid.trim().to_string(),
                    dir: paths.data_dir.clone(),
                    lock: path.clone(),
                });
            }
        };
        lock.set_len(0).map_err(io)?;
        lock.rewind().map_err(io)?;
        write!(lock, "{}", std::process::id()).map_err(io)?;
        Ok(DataDirLock {
            _lock: lock,
            path: path.clone(),
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_environment_beats_platform_defaults() {
        let env = |k: &str| match k {
            DATA_DIR_ENV => Some(OsString::from("/env/data")),
            CONFIG_DIR_ENV => Some(OsString::from("/env/conf")),
            _ => None,
        };
        let p = Paths::resolve_with(None, None, env).unwrap();
        assert_eq!(p.data_dir, PathBuf::from("/env/data"));
        assert_eq!(p.config_file, PathBuf::from("/env/conf/config.toml"));
        let p =
            Paths::resolve_with(Some(Path::new("/flag")), Some(Path::new("/c.toml")), env).unwrap();
        assert_eq!(p.data_dir, PathBuf::from("/flag"));
        assert_eq!(p.config_file, PathBuf::from("/c.toml"));
    }

    #[test]
    fn a_second_lock_on_the_same_dir_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            data_dir: dir.path().to_path_buf(),
            config_file: dir.path().join("c.toml"),
        };
        let first = DataDirLock::acquire(&paths).unwrap();
        let e = DataDirLock::acquire(&paths).unwrap_err();
        assert!(
            e.to_string().contains(&std::process::id().to_string()),
            "{e}"
        );
        drop(first);
        DataDirLock::acquire(&paths).unwrap();
    }
}
