//! Where the owner's load comes from — measured from `/proc`, replayed from
//! a file, or supplied by an embedding program — with what `status` says of
//! it. It must not know how the load is sampled (`monitor`).

use crate::monitor::{LoadSource, OwnerLoadReplay, ProcLoadSource, SampleError};
use std::path::{Path, PathBuf};

/// Where the owner's load comes from, as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerLoad {
    /// Measured from `/proc` (the normal case).
    Measured,
    /// Replayed from a script or trace file (`--owner-load FILE`).
    Replayed(PathBuf),
    /// Supplied by the program that embeds the node (tests).
    Supplied(String),
}

impl std::fmt::Display for OwnerLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnerLoad::Measured => f.write_str("measured on this host"),
            OwnerLoad::Replayed(path) => write!(f, "replayed from {}", path.display()),
            OwnerLoad::Supplied(what) => write!(f, "supplied: {what}"),
        }
    }
}

/// The owner's load source with what `status` says of it.
pub struct OwnerLoadSource {
    pub source: Box<dyn LoadSource + Send>,
    pub description: OwnerLoad,
}

impl OwnerLoadSource {
    /// `/proc`, or a replay of `file` when one is given.
    pub fn new(file: Option<&Path>) -> Result<OwnerLoadSource, SampleError> {
        match file {
            Some(path) => {
                tracing::warn!(file = %path.display(), "owner load is replayed from a file, not measured");
                Ok(OwnerLoadSource {
                    source: Box::new(OwnerLoadReplay::from_file(path)?),
                    description: OwnerLoad::Replayed(path.to_path_buf()),
                })
            }
            None => Ok(OwnerLoadSource {
                source: Box::new(ProcLoadSource::new()?),
                description: OwnerLoad::Measured,
            }),
        }
    }
}
