//! Bringing a host's files here: one output (or the job's latest
//! checkpoint) fetched in chunks and checked against the hash its host
//! reports, a checkpoint kept only when it is the one announced, and a
//! landed directory renamed into the attempt's own place.

use std::path::Path;

use tokio::io::AsyncWriteExt;

use super::types::AttemptPlan;
use crate::consumer::job_pool::JobPool;
use crate::net::protocol::{JobRequest, JobResponse, OutputName, OUTPUT_CHUNK_MAX};

/// Fetches the host's snapshot of the job's checkpoint into `dest` (through
/// a temporary file beside it), and keeps it only when it matches the `hash`
/// and `size` the host reported in its `Checkpointed` event. Returns the
/// seconds the fetch took.
pub async fn fetch_checkpoint<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    dest: &Path,
    size: u64,
    hash: [u8; 32],
) -> Result<f64, String> {
    let started = tokio::time::Instant::now();
    let dir = dest.parent().ok_or("the checkpoint path has no parent")?;
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let name = dest
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("the checkpoint path has no name")?;
    let tmp = dir.join(format!(".{name}.{}.part", plan.job_id));
    let result = async {
        let found = fetch_to_file(pool, plan, OutputName::Checkpoint, &tmp).await?;
        if !found {
            return Err("the host has no checkpoint".to_string());
        }
        // Hashed as it streams from disk: a checkpoint is never whole in memory.
        let path = tmp.clone();
        let (got_size, got_hash) = tokio::task::spawn_blocking(move || {
            let file = std::fs::File::open(&path)?;
            let size = file.metadata()?.len();
            let mut hasher = blake3::Hasher::new();
            hasher.update_reader(file)?;
            Ok::<_, std::io::Error>((size, *hasher.finalize().as_bytes()))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        // A newer snapshot may have replaced the one the event named: it is
        // not the one announced, so it waits for its own event.
        if got_size != size || got_hash != hash {
            return Err("does not match the hash its host announced; discarded".to_string());
        }
        tokio::fs::rename(&tmp, dest)
            .await
            .map_err(|e| format!("cannot rename into {}: {e}", dest.display()))
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result.map(|()| started.elapsed().as_secs_f64())
}

/// Renames `from` onto `to`, replacing what an earlier landing of the same
/// attempt left there. `to` is the attempt's own directory (its staging, a
/// verified copy's directory), never a task's results: those are the
/// queue's to fill, once (`queue::files::land`).
pub async fn replace_dir(from: &Path, to: &Path) -> Result<(), String> {
    if tokio::fs::metadata(to).await.is_ok() {
        tokio::fs::remove_dir_all(to)
            .await
            .map_err(|e| format!("cannot replace {}: {e}", to.display()))?;
    }
    tokio::fs::rename(from, to)
        .await
        .map_err(|e| format!("cannot rename into {}: {e}", to.display()))
}

/// Why an output did not come: here (a file we could not write, the
/// network), or the host's fault: what it sent contradicts what it said
/// (a hash that does not match, more or fewer bytes than announced, an
/// answer that is no chunk).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FetchError {
    Failed(String),
    HostLied(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Failed(why) | FetchError::HostLied(why) => f.write_str(why),
        }
    }
}

impl From<FetchError> for String {
    fn from(e: FetchError) -> String {
        e.to_string()
    }
}

/// Fetches one output into `path`, checked against its host's hash.
/// `Ok(false)` when the host says the job wrote no such file.
pub(crate) async fn fetch_to_file<P: JobPool>(
    pool: &P,
    plan: &AttemptPlan,
    name: OutputName,
    path: &Path,
) -> Result<bool, FetchError> {
    let failed = FetchError::Failed;
    let lied = |why: String| FetchError::HostLied(why);
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| failed(e.to_string()))?;
    }
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| failed(format!("cannot create {}: {e}", path.display())))?;
    let mut offset = 0u64;
    let mut hasher = blake3::Hasher::new();
    let mut reported: Option<[u8; 32]> = None;
    loop {
        let request = JobRequest::Fetch {
            job_id: plan.job_id.to_string(),
            name: name.clone(),
            offset,
            len: OUTPUT_CHUNK_MAX,
        };
        let (data, total_len) = match pool.request(plan.host, request).await {
            Ok(JobResponse::Chunk {
                data,
                total_len,
                hash,
            }) => {
                if offset == 0 {
                    reported = hash;
                }
                (data, total_len)
            }
            Ok(JobResponse::NotFound) if offset == 0 => {
                drop(file);
                let _ = tokio::fs::remove_file(path).await;
                return Ok(false);
            }
            // An honest host may drop the job off its list mid-fetch, or
            // refuse a peer its allowlist dropped: not counted as lies.
            Ok(JobResponse::NotFound) => {
                return Err(failed("the output went away while fetched".into()))
            }
            Ok(other) => return Err(failed(format!("unexpected answer {other:?}"))),
            Err(e) => return Err(failed(e.to_string())),
        };
        if total_len > plan.settings.max_output_bytes {
            // Not a lie: the task may write more than this node takes.
            return Err(failed(format!(
                "{total_len} bytes is over the cap of {} bytes",
                plan.settings.max_output_bytes
            )));
        }
        if data.len() as u64 > u64::from(OUTPUT_CHUNK_MAX)
            || offset.saturating_add(data.len() as u64) > total_len
        {
            return Err(lied("the host sent more than it announced".into()));
        }
        file.write_all(&data)
            .await
            .map_err(|e| failed(e.to_string()))?;
        hasher.update(&data);
        offset += data.len() as u64;
        if data.is_empty() || offset >= total_len {
            if offset != total_len {
                return Err(lied(format!("the host sent {offset} of {total_len} bytes")));
            }
            // Checked before the results are renamed into place: a
            // corrupted output fails the attempt and never lands.
            if reported != Some(*hasher.finalize().as_bytes()) {
                return Err(lied(
                    "does not match the hash its host reported; discarded".into(),
                ));
            }
            break;
        }
    }
    file.flush().await.map_err(|e| failed(e.to_string()))?;
    file.sync_all().await.map_err(|e| failed(e.to_string()))?;
    Ok(true)
}
