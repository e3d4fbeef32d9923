//! Bytes of the batch queue's store: every key and value `batch::store` puts
//! into sled is encoded and decoded here, and nowhere else. It knows the
//! records (`record`), never the store that writes them.
//!
//! Keys (big-endian, so sled's order is batch then task order):
//! - batch key, 8 bytes: the batch id's number;
//! - task key, 12 bytes: the batch key, then the task index as `u32`.
//!
//! Values are bincode 2 (standard config) of [`BatchRecord`] and
//! [`TaskRecord`], decoded with a size limit: the database is outside input
//! (a bad disk, a future version), so a decoder returns an error, never panics.
//!
//! The `verify` tree (`batch::replicas`) shares the batch key: the batch key
//! alone holds the batch's verification settings (JSON of `VerifySpec`);
//! the batch key, the byte `t`, then a host's peer id (its bytes) marks a
//! host that returned an invalid result for that batch ([`tainted_key`],
//! empty value), so the exclusion survives a restart.
//!
//! Schema versions: the `meta` tree's `schema` key holds the version as a
//! big-endian `u32`. A store without it was written by version 1 (before
//! placement policies, deadlines, checkpoints and copies); version 2's
//! task records lack the owner-kill count of version 3; version 3's batch
//! records lack the image of version 4. `store` upgrades
//! an older store at open with [`upgrade_batch`] and [`upgrade_task`],
//! which read every layout (bincode leaves no byte over in the right one
//! only), so an upgrade cut short is finished by the next open.

use std::path::PathBuf;

use serde::Deserialize;

use crate::consumer::batch::policy::PolicyName;
use crate::consumer::batch::record::{BatchRecord, CheckpointRef, TaskCopy, TaskRecord, TaskState};
use crate::model::ids::{BatchId, JobId};

/// The layout this code writes.
pub const SCHEMA_VERSION: u32 = 4;
/// Key of the schema version in the `meta` tree.
pub const SCHEMA_KEY: &[u8] = b"schema";

/// Length of a batch key.
pub const BATCH_KEY_LEN: usize = 8;
/// Length of a task key.
pub const TASK_KEY_LEN: usize = 12;
/// Largest record we agree to decode: a task carries at most 256 arguments of
/// 64 KiB each, so a real one is far below this.
const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

/// Why a stored record cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("{what} key is {found} bytes long, expected {expected}")]
    KeyLength {
        what: &'static str,
        found: usize,
        expected: usize,
    },
    #[error("{what}: {reason}")]
    Record { what: &'static str, reason: String },
}

pub fn batch_key(id: BatchId) -> [u8; BATCH_KEY_LEN] {
    id.number().to_be_bytes()
}

pub fn decode_batch_key(bytes: &[u8]) -> Result<BatchId, CodecError> {
    let array: [u8; BATCH_KEY_LEN] = bytes.try_into().map_err(|_| CodecError::KeyLength {
        what: "batch",
        found: bytes.len(),
        expected: BATCH_KEY_LEN,
    })?;
    Ok(BatchId::new(u64::from_be_bytes(array)))
}

pub fn task_key(id: BatchId, task: u32) -> [u8; TASK_KEY_LEN] {
    let mut key = [0u8; TASK_KEY_LEN];
    key[..BATCH_KEY_LEN].copy_from_slice(&batch_key(id));
    key[BATCH_KEY_LEN..].copy_from_slice(&task.to_be_bytes());
    key
}

pub fn decode_task_key(bytes: &[u8]) -> Result<(BatchId, u32), CodecError> {
    if bytes.len() != TASK_KEY_LEN {
        return Err(CodecError::KeyLength {
            what: "task",
            found: bytes.len(),
            expected: TASK_KEY_LEN,
        });
    }
    let batch = decode_batch_key(&bytes[..BATCH_KEY_LEN])?;
    let mut task = [0u8; 4];
    task.copy_from_slice(&bytes[BATCH_KEY_LEN..]);
    Ok((batch, u32::from_be_bytes(task)))
}

fn encode<T: serde::Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).map_err(|e| {
        CodecError::Record {
            what,
            reason: e.to_string(),
        }
    })
}

fn decode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, CodecError> {
    let config = bincode::config::standard().with_limit::<MAX_RECORD_BYTES>();
    let (value, used) =
        bincode::serde::decode_from_slice(bytes, config).map_err(|e| CodecError::Record {
            what,
            reason: e.to_string(),
        })?;
    if used != bytes.len() {
        return Err(CodecError::Record {
            what,
            reason: format!("{} bytes left over", bytes.len() - used),
        });
    }
    Ok(value)
}

pub fn encode_batch(record: &BatchRecord) -> Result<Vec<u8>, CodecError> {
    encode("batch record", record)
}

pub fn decode_batch(bytes: &[u8]) -> Result<BatchRecord, CodecError> {
    decode("batch record", bytes)
}

pub fn encode_task(record: &TaskRecord) -> Result<Vec<u8>, CodecError> {
    encode("task record", record)
}

pub fn decode_task(bytes: &[u8]) -> Result<TaskRecord, CodecError> {
    decode("task record", bytes)
}

pub fn encode_schema(version: u32) -> [u8; 4] {
    version.to_be_bytes()
}

pub fn decode_schema(bytes: &[u8]) -> Result<u32, CodecError> {
    let array: [u8; 4] = bytes.try_into().map_err(|_| CodecError::KeyLength {
        what: "schema version",
        found: bytes.len(),
        expected: 4,
    })?;
    Ok(u32::from_be_bytes(array))
}

/// A batch record of schema 1.
#[derive(Deserialize)]
struct BatchRecordV1 {
    id: BatchId,
    name: Option<String>,
    created_unix: i64,
    command: Vec<String>,
    mem_mib: u64,
    runtime_secs: u64,
    limit_secs: u64,
    outputs: Vec<String>,
    output_dir: Option<PathBuf>,
    max_running: Option<u32>,
    task_count: u32,
    cancelled: bool,
}

/// A task record of schema 1.
#[derive(Deserialize)]
struct TaskRecordV1 {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    inputs: Vec<(PathBuf, String)>,
    state: TaskState,
    attempts: u32,
    host: Option<String>,
    job_id: Option<JobId>,
    avoid: Vec<String>,
    exit_status: Option<i32>,
    started_unix: Option<i64>,
    ended_unix: Option<i64>,
    reason: Option<String>,
    wall_secs: Option<f64>,
}

/// A task record of schema 2 (no owner-kill count).
#[derive(Deserialize)]
struct TaskRecordV2 {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    inputs: Vec<(PathBuf, String)>,
    state: TaskState,
    attempts: u32,
    host: Option<String>,
    job_id: Option<JobId>,
    avoid: Vec<String>,
    exit_status: Option<i32>,
    started_unix: Option<i64>,
    ended_unix: Option<i64>,
    reason: Option<String>,
    wall_secs: Option<f64>,
    cpu_secs: Option<f64>,
    host_gamma: Option<f64>,
    checkpoint: Option<CheckpointRef>,
    copies: Vec<TaskCopy>,
}

/// A batch record of schemas 2 and 3 (no image).
#[derive(Deserialize)]
struct BatchRecordV3 {
    id: BatchId,
    name: Option<String>,
    created_unix: i64,
    command: Vec<String>,
    mem_mib: u64,
    runtime_secs: u64,
    limit_secs: u64,
    outputs: Vec<String>,
    output_dir: Option<PathBuf>,
    max_running: Option<u32>,
    task_count: u32,
    cancelled: bool,
    policy: PolicyName,
    deadline_unix: Option<i64>,
    checkpoint: Option<crate::consumer::batch::record::CheckpointSpec>,
}

/// A stored batch record in the current layout: schema 1's upgraded (its
/// batches placed as they were, by TR), schema 3's without an image, the
/// current one as it is.
pub fn upgrade_batch(bytes: &[u8]) -> Result<BatchRecord, CodecError> {
    if let Ok(v3) = decode::<BatchRecordV3>("batch record (schema 3)", bytes) {
        return Ok(BatchRecord {
            id: v3.id,
            name: v3.name,
            created_unix: v3.created_unix,
            command: v3.command,
            mem_mib: v3.mem_mib,
            runtime_secs: v3.runtime_secs,
            limit_secs: v3.limit_secs,
            outputs: v3.outputs,
            output_dir: v3.output_dir,
            max_running: v3.max_running,
            task_count: v3.task_count,
            cancelled: v3.cancelled,
            policy: v3.policy,
            deadline_unix: v3.deadline_unix,
            checkpoint: v3.checkpoint,
            image: None,
        });
    }
    let Ok(v1) = decode::<BatchRecordV1>("batch record (schema 1)", bytes) else {
        return decode_batch(bytes);
    };
    Ok(BatchRecord {
        id: v1.id,
        name: v1.name,
        created_unix: v1.created_unix,
        command: v1.command,
        mem_mib: v1.mem_mib,
        runtime_secs: v1.runtime_secs,
        limit_secs: v1.limit_secs,
        outputs: v1.outputs,
        output_dir: v1.output_dir,
        max_running: v1.max_running,
        task_count: v1.task_count,
        cancelled: v1.cancelled,
        policy: PolicyName::Tr,
        deadline_unix: None,
        checkpoint: None,
        image: None,
    })
}

/// A stored task record in the current layout (see [`upgrade_batch`]).
pub fn upgrade_task(bytes: &[u8]) -> Result<TaskRecord, CodecError> {
    if let Ok(v2) = decode::<TaskRecordV2>("task record (schema 2)", bytes) {
        return Ok(TaskRecord {
            argv: v2.argv,
            env: v2.env,
            inputs: v2.inputs,
            state: v2.state,
            attempts: v2.attempts,
            host: v2.host,
            job_id: v2.job_id,
            avoid: v2.avoid,
            exit_status: v2.exit_status,
            started_unix: v2.started_unix,
            ended_unix: v2.ended_unix,
            reason: v2.reason,
            wall_secs: v2.wall_secs,
            cpu_secs: v2.cpu_secs,
            host_gamma: v2.host_gamma,
            checkpoint: v2.checkpoint,
            copies: v2.copies,
            owner_kills: 0,
        });
    }
    let Ok(v1) = decode::<TaskRecordV1>("task record (schema 1)", bytes) else {
        return decode_task(bytes);
    };
    Ok(TaskRecord {
        argv: v1.argv,
        env: v1.env,
        inputs: v1.inputs,
        state: v1.state,
        attempts: v1.attempts,
        host: v1.host,
        job_id: v1.job_id,
        avoid: v1.avoid,
        exit_status: v1.exit_status,
        started_unix: v1.started_unix,
        ended_unix: v1.ended_unix,
        reason: v1.reason,
        wall_secs: v1.wall_secs,
        cpu_secs: None,
        host_gamma: None,
        checkpoint: None,
        copies: Vec::new(),
        owner_kills: 0,
    })
}

/// Tag byte between the batch key and the peer id in a tainted-host key.
const TAINTED_TAG: u8 = b't';
/// Longest peer id we agree to decode (a multihash of an Ed25519 key is 38
/// bytes; an inlined RSA key can be a few hundred).
const MAX_PEER_BYTES: usize = 1024;

/// Key in the `verify` tree marking `peer` as excluded from batch `id`.
pub fn tainted_key(id: BatchId, peer: &libp2p::PeerId) -> Vec<u8> {
    let mut key = batch_key(id).to_vec();
    key.push(TAINTED_TAG);
    key.extend_from_slice(&peer.to_bytes());
    key
}

/// Reads a tainted-host key back: `Ok(None)` for a batch's settings key
/// (the batch key alone), an error for anything else that does not decode.
pub fn decode_verify_key(bytes: &[u8]) -> Result<Option<(BatchId, libp2p::PeerId)>, CodecError> {
    if bytes.len() == BATCH_KEY_LEN {
        return Ok(None);
    }
    let bad = |reason: &str| CodecError::Record {
        what: "verify key",
        reason: reason.to_string(),
    };
    if bytes.len() <= BATCH_KEY_LEN + 1 || bytes.len() > BATCH_KEY_LEN + 1 + MAX_PEER_BYTES {
        return Err(bad(&format!("{} bytes", bytes.len())));
    }
    if bytes[BATCH_KEY_LEN] != TAINTED_TAG {
        return Err(bad("unknown tag"));
    }
    let batch = decode_batch_key(&bytes[..BATCH_KEY_LEN])?;
    let peer = libp2p::PeerId::from_bytes(&bytes[BATCH_KEY_LEN + 1..])
        .map_err(|e| bad(&format!("peer id: {e}")))?;
    Ok(Some((batch, peer)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tainted_keys_round_trip_and_share_the_batch_prefix() {
        let peer = libp2p::PeerId::random();
        let key = tainted_key(BatchId::new(9), &peer);
        assert!(key.starts_with(&batch_key(BatchId::new(9))));
        assert_eq!(
            decode_verify_key(&key).unwrap(),
            Some((BatchId::new(9), peer))
        );
        assert_eq!(
            decode_verify_key(&batch_key(BatchId::new(9))).unwrap(),
            None
        );
        for bad in [&key[..5], &key[..9], &[0u8; 12][..]] {
            assert!(decode_verify_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_sort_by_batch_then_task() {
        let a = task_key(BatchId::new(1), u32::MAX);
        let b = task_key(BatchId::new(2), 0);
        assert!(a < b);
        assert_eq!(decode_task_key(&b).unwrap(), (BatchId::new(2), 0));
        assert!(decode_task_key(&b[..5]).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [&[][..], &[0xff; 3], &[7; 100]] {
            let _ = decode_task(bytes);
            let _ = decode_batch(bytes);
        }
        assert!(decode_task(&[0xff; 16]).is_err());
    }
}
