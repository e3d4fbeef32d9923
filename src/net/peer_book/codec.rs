//! Bytes of the peer book on disk: every key and value `peer_book::store`
//! puts into sled is encoded and decoded here, and nowhere else.
//!
//! - key: the peer id's bytes (its multihash), at most [`KEY_MAX`] bytes;
//! - value: one version byte ([`VERSION`]), then bincode 2 (standard
//!   config) of [`StoredEntry`]: `last_seen` (unix seconds) and the
//!   addresses as multiaddr bytes.
//!
//! The database is outside input (a bad disk, another version, an edit), so
//! every length is bounded before use and a decoder returns an error naming
//! what is wrong, never panics. It knows the book's entry, not the store.

use libp2p::{Multiaddr, PeerId};
use serde::{Deserialize, Serialize};

use super::{BookEntry, ADDRESSES_MAX};

/// The layout this code writes (the first byte of every value).
pub const VERSION: u8 = 1;
/// Longest key we decode: a peer id is a multihash of at most 64 bytes of digest.
pub const KEY_MAX: usize = 80;
/// Longest address we keep, bytes (a relayed address with two peer ids is ~120).
pub const ADDRESS_MAX_BYTES: usize = 300;
/// Longest value we decode: eight longest addresses and their lengths, and the time.
pub const VALUE_MAX: usize = 1 + 16 + ADDRESSES_MAX * (ADDRESS_MAX_BYTES + 4);

/// Why a stored key or value cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BookCodecError {
    #[error("peer book key: {0}")]
    Key(String),
    #[error("peer book entry: {0}")]
    Value(String),
}

/// The value's layout, version 1.
#[derive(Debug, Serialize, Deserialize)]
struct StoredEntry {
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
/// [`ADDRESS_MAX_BYTES`] are left out, so what is written always reads back.
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
    if version != VERSION {
        return bad(format!("version {version}, this node reads {VERSION}"));
    }
    let config = bincode::config::standard().with_limit::<VALUE_MAX>();
    let (stored, used): (StoredEntry, usize) = bincode::serde::decode_from_slice(body, config)
        .map_err(|e| BookCodecError::Value(e.to_string()))?;
    if used != body.len() {
        return bad(format!("{} bytes left over", body.len() - used));
    }
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
    Ok(BookEntry {
        addresses,
        last_seen: stored.last_seen,
    })
}
