//! Bytes of the batch queue's store: every key and value `batch::store` puts
//! into sled is encoded and decoded here, and nowhere else.
//!
//! Keys (big-endian, so sled's order is batch then task order):
//! - batch key, 8 bytes: the batch id's number;
//! - task key, 12 bytes: the batch key, then the task index as `u32`.
//!
//! Values are bincode 2 (standard config) of [`BatchRecord`] and
//! [`TaskRecord`], decoded with a size limit: the database is outside input
//! (a bad disk, a future version), so a decoder returns an error, never panics.

use crate::consumer::batch::store::{BatchRecord, TaskRecord};
use crate::model::ids::BatchId;

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

#[cfg(test)]
mod tests {
    use super::*;

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
