//! Bytes of the peer book on disk: every key and value `peer_book::store`
//! puts into sled is encoded and decoded here, and nowhere else.
//!
//! - key: the peer id's bytes (its multihash), at most [`KEY_MAX`] bytes;
//! - value: one version byte ([`VERSION`]), then bincode 2 (standard
//!   config) of the entry: version 2 (written since the book keeps
//!   summaries) is `last_seen` (unix seconds), the addresses as multiaddr
//!   bytes, then an optional summary: when it was heard (unix seconds) and
//!   its gossipsub message bytes, at most [`SUMMARY_MAX_BYTES`]; version 1
//!   (still read, as a book written before) is the same without the summary.
//!
//! The database is outside input (a bad disk, another version, an edit), so
//! every length is bounded before use and a decoder returns an error naming
//! what is wrong, never panics. It knows the book's entry, not the store.

use libp2p::{Multiaddr, PeerId};
use serde::{Deserialize, Serialize};

use super::{BookEntry, HeardSummary, ADDRESSES_MAX};
use crate::net::protocol::SUMMARY_MAX_BYTES;

/// The layout this code writes (the first byte of every value).
pub const VERSION: u8 = 2;
/// The layout before summaries were kept: still read.
pub const VERSION_1: u8 = 1;
/// Longest key we decode: a peer id is a multihash of at most 64 bytes of digest.
pub const KEY_MAX: usize = 80;
/// Longest address we keep, bytes (a relayed address with two peer ids is ~120).
pub const ADDRESS_MAX_BYTES: usize = 300;
/// Longest value we decode: eight longest addresses and their lengths, the
/// time, and the longest summary with its time and length.
pub const VALUE_MAX: usize =
    1 + 16 + ADDRESSES_MAX * (ADDRESS_MAX_BYTES + 4) + 1 + 16 + SUMMARY_MAX_BYTES + 4;

/// Why a stored key or value cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BookCodecError {
    #[error("peer book key: {0}")]
    Key(String),
    #[error("peer book entry: {0}")]
    Value(String),
}

/// The value's layout, version 2.
#[derive(Debug, Serialize, Deserialize)]
struct StoredEntry {
    last_seen: i64,
    addresses: Vec<Vec<u8>>,
    /// `(heard_unix, bytes)` of its last summary.
    summary: Option<(i64, Vec<u8>)>,
}

/// The value's layout, version 1 (no summary).
#[derive(Debug, Serialize, Deserialize)]
struct StoredEntryV1 {
    last_seen: i64,
    addresses: Vec<Vec<u8>>,
}

pub fn encode_key(peer: &PeerId) -> Vec<u8> {
    peer.to_bytes()
}

pub fn decode_key(bytes: &[u8]) -> Result<PeerId, BookCodecError> {
    if bytes.is_empty() || bytes.len() > KEY_MAX {
        return Err(BookCodecError::Key(format!(
            "{} bytes long, expected 1..={KEY_MAX}",
            bytes.len()
        )));
    }
    PeerId::from_bytes(bytes).map_err(|e| BookCodecError::Key(e.to_string()))
}

/// Encodes an entry; addresses past [`ADDRESSES_MAX`] or longer than
/// [`ADDRESS_MAX_BYTES`], and a summary longer than [`SUMMARY_MAX_BYTES`],
/// are left out, so what is written always reads back.
pub fn encode_value(entry: &BookEntry) -> Result<Vec<u8>, BookCodecError> {
    let stored = StoredEntry {
        last_seen: entry.last_seen,
        addresses: entry
            .addresses
            .iter()
            .map(Multiaddr::to_vec)
            .filter(|a| a.len() <= ADDRESS_MAX_BYTES)
            .take(ADDRESSES_MAX)
            .collect(),
        summary: entry
            .summary
            .as_ref()
            .filter(|s| s.bytes.len() <= SUMMARY_MAX_BYTES)
            .map(|s| (s.heard_unix, s.bytes.to_vec())),
    };
    let mut out = vec![VERSION];
    let body = bincode::serde::encode_to_vec(&stored, bincode::config::standard())
        .map_err(|e| BookCodecError::Value(e.to_string()))?;
    out.extend(body);
    Ok(out)
}

pub fn decode_value(bytes: &[u8]) -> Result<BookEntry, BookCodecError> {
    let bad = |why: String| Err(BookCodecError::Value(why));
    if bytes.len() > VALUE_MAX {
        return bad(format!("{} bytes, at most {VALUE_MAX}", bytes.len()));
    }
    let Some((&version, body)) = bytes.split_first() else {
        return bad("empty".into());
    };
    let stored: StoredEntry = match version {
        VERSION => decode_body(body)?,
        VERSION_1 => {
            let old: StoredEntryV1 = decode_body(body)?;
            StoredEntry {
                last_seen: old.last_seen,
                addresses: old.addresses,
                summary: None,
            }
        }
        _ => {
            return bad(format!(
                "version {version}, this node reads {VERSION_1} and {VERSION}"
            ))
        }
    };
    if stored.addresses.len() > ADDRESSES_MAX {
        return bad(format!(
            "{} addresses, at most {ADDRESSES_MAX}",
            stored.addresses.len()
        ));
    }
    let addresses = stored
        .addresses
        .into_iter()
        .map(|a| {
            if a.len() > ADDRESS_MAX_BYTES {
                return Err(BookCodecError::Value(format!(
                    "an address of {} bytes, at most {ADDRESS_MAX_BYTES}",
                    a.len()
                )));
            }
            Multiaddr::try_from(a).map_err(|e| BookCodecError::Value(format!("an address: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let summary = match stored.summary {
        Some((_, bytes)) if bytes.len() > SUMMARY_MAX_BYTES => {
            return bad(format!(
                "a summary of {} bytes, at most {SUMMARY_MAX_BYTES}",
                bytes.len()
            ))
        }
        Some((heard_unix, bytes)) => Some(HeardSummary {
            heard_unix,
            bytes: bytes.into(),
        }),
        None => None,
    };
    Ok(BookEntry {
        addresses,
        last_seen: stored.last_seen,
        summary,
    })
}

/// One layout's body: bincode within [`VALUE_MAX`], nothing left over.
fn decode_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BookCodecError> {
    let config = bincode::config::standard().with_limit::<VALUE_MAX>();
    let (stored, used): (T, usize) = bincode::serde::decode_from_slice(body, config)
        .map_err(|e| BookCodecError::Value(e.to_string()))?;
    if used != body.len() {
        return Err(BookCodecError::Value(format!(
            "{} bytes left over",
            body.len() - used
        )));
    }
    Ok(stored)
}
