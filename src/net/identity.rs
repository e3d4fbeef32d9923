//! The node's Ed25519 identity: created on first run, kept in the data dir as a
//! protobuf-encoded libp2p keypair with mode 0600, and loaded on every later start so
//! the peer id is stable.
//!
//! A key file that other users can read is a leaked key: we refuse to load it rather
//! than quietly tightening the mode, because whoever could read it may already have a
//! copy; the error tells the owner to delete it (a new identity is made) or to chmod
//! it after judging the risk. This module knows files and keys, not the Swarm.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use libp2p::identity::Keypair;

/// File name of the key inside the data dir.
pub const KEY_FILE_NAME: &str = "node_key.ed25519";

/// Largest key file we read: a protobuf Ed25519 keypair is 68 bytes.
const KEY_FILE_MAX: u64 = 1024;

/// Why the identity could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading or writing the key file failed.
    #[error("key file {path}: {source}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The key file is readable or writable by group or others.
    #[error(
        "key file {path} has mode {mode:o}; group and others must have no access. \
         Delete it to make a new identity, or `chmod 600` it if you are sure nobody copied it"
    )]
    TooOpen {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file does not hold an Ed25519 keypair.
    #[error("key file {path} is not an Ed25519 keypair: {reason}")]
    Malformed {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Loads the keypair from `data_dir`, creating it (mode 0600) if there is none.
pub fn load_or_create(data_dir: &Path) -> Result<Keypair, IdentityError> {
    let path = data_dir.join(KEY_FILE_NAME);
    let io_err = |source| IdentityError::Io {
        path: path.clone(),
        source,
    };
    match fs::metadata(&path) {
        Ok(meta) => load(&path, &meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let key = Keypair::generate_ed25519();
            let bytes = key
                .to_protobuf_encoding()
                .map_err(|e| IdentityError::Malformed {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            // create_new: if another process raced us, we fail instead of overwriting its key.
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(io_err)?;
            file.write_all(&bytes).map_err(io_err)?;
            file.sync_all().map_err(io_err)?;
            Ok(key)
        }
        Err(e) => Err(io_err(e)),
    }
}

fn load(path: &Path, meta: &fs::Metadata) -> Result<Keypair, IdentityError> {
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(IdentityError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    let malformed = |reason: String| IdentityError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    if meta.len() > KEY_FILE_MAX {
        return Err(malformed(format!("{} bytes is too long", meta.len())));
    }
    let bytes = fs::read(path).map_err(|source| IdentityError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let key = Keypair::from_protobuf_encoding(&bytes).map_err(|e| malformed(e.to_string()))?;
    if key.clone().try_into_ed25519().is_err() {
        return Err(malformed("key type is not Ed25519".into()));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_run_creates_a_0600_key_and_later_runs_reuse_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let second = load_or_create(dir.path()).unwrap();
        assert_eq!(first.public().to_peer_id(), second.public().to_peer_id());
    }

    #[test]
    fn a_world_readable_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        load_or_create(dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create(dir.path()).unwrap_err();
        assert!(
            matches!(err, IdentityError::TooOpen { mode: 0o644, .. }),
            "{err}"
        );
    }

    #[test]
    fn garbage_in_the_key_file_is_an_error_not_a_new_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        fs::write(&path, b"not a key").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            load_or_create(dir.path()),
            Err(IdentityError::Malformed { .. })
        ));
        assert_eq!(fs::read(&path).unwrap(), b"not a key");
    }
}
