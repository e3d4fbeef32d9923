//! A peer's job made ready to start: each input taken from the cache or
//! fetched from the consumer and verified, then copied into the job's own
//! directory (the guest gets its own copy). It must not know the pool host's
//! loop; errors name the input.

use std::path::{Path, PathBuf};

use libp2p::PeerId;

use crate::data::{obtain_input, Cache, FetchLimits, Obtained};
use crate::net::protocol::InputRef;

/// A job's inputs, verified and copied into its own directory.
#[derive(Debug)]
pub(super) struct PreparedInputs {
    /// (path in the work directory, prepared file).
    pub(super) files: Vec<(String, PathBuf)>,
    pub(super) fetched_bytes: u64,
    pub(super) cached_bytes: u64,
}

/// Takes each input from the cache or fetches it from `consumer`, verified,
/// and copies it into `stage_dir` (the guest gets its own copy; the cached
/// one stays pinned only while it is copied). Errors name the input.
pub(super) async fn prepare_inputs(
    net: crate::net::NetHandle,
    cache: Cache,
    consumer: PeerId,
    inputs: Vec<InputRef>,
    stage_dir: PathBuf,
) -> Result<PreparedInputs, String> {
    let dir = stage_dir.clone();
    tokio::task::spawn_blocking(move || std::fs::create_dir_all(&dir))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot make {}: {e}", stage_dir.display()))?;
    let mut prepared = PreparedInputs {
        files: Vec::with_capacity(inputs.len()),
        fetched_bytes: 0,
        cached_bytes: 0,
    };
    for (index, input) in inputs.into_iter().enumerate() {
        let (pinned, obtained) =
            obtain_input(&net, &cache, consumer, &input, FetchLimits::default()).await?;
        match obtained {
            Obtained::Cached => prepared.cached_bytes += input.size,
            Obtained::Fetched(f) => prepared.fetched_bytes += f.bytes,
        }
        let name = &input.path;
        let dest = stage_dir.join(index.to_string());
        let source = pinned.path().to_path_buf();
        let to = dest.clone();
        tokio::task::spawn_blocking(move || copy_input(&source, &to))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("input {name}: copying from the cache: {e}"))?;
        drop(pinned);
        prepared.files.push((input.path, dest));
    }
    Ok(prepared)
}

/// Copies a cached input for one job (the kernel copies; nothing is read
/// into memory).
fn copy_input(source: &Path, dest: &Path) -> std::io::Result<()> {
    std::fs::copy(source, dest).map(|_| ())
}
