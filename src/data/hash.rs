//! Names and verification of content: a file is named by its BLAKE3 hash, and
//! split into chunks of [`CHUNK_BYTES`] whose subtree chaining values combine
//! to that hash (BLAKE3's own tree, read through `blake3::hazmat`). A host
//! checks the list of chunk values against the name before it reads a byte,
//! then each chunk against its value as it arrives; a file whose every chunk
//! matched is, by the tree, the file the name names.
//!
//! Pure functions on bytes and files; no network, no async.

use std::fmt;
use std::io::{Read, Seek};
use std::path::Path;

use blake3::hazmat::{left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, HasherExt};

use crate::net::protocol::DATA_CHUNK_BYTES;

/// Bytes of one chunk: the unit of verification and of re-fetching.
pub const CHUNK_BYTES: u64 = DATA_CHUNK_BYTES as u64;

/// One 32-byte value per chunk (a chaining value, or the root for a file of one chunk).
pub type ChunkValue = [u8; 32];

/// The BLAKE3 hash of a whole file: its name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

impl From<blake3::Hash> for ContentHash {
    fn from(h: blake3::Hash) -> Self {
        ContentHash(*h.as_bytes())
    }
}

/// Chunks of a file of `size` bytes; an empty file has one empty chunk.
pub fn chunk_count(size: u64) -> u64 {
    size.div_ceil(CHUNK_BYTES).max(1)
}

/// Bytes of chunk `index` of a file of `size` bytes.
pub fn chunk_len(size: u64, index: u64) -> u64 {
    size.saturating_sub(index.saturating_mul(CHUNK_BYTES))
        .min(CHUNK_BYTES)
}

/// The value of chunk `index` holding `data`, in a file of `chunks` chunks.
pub fn chunk_value(index: u64, data: &[u8], chunks: u64) -> ChunkValue {
    if chunks == 1 {
        return *blake3::hash(data).as_bytes();
    }
    let mut hasher = blake3::Hasher::new();
    hasher.set_input_offset(index * CHUNK_BYTES);
    hasher.update(data);
    hasher.finalize_non_root()
}

/// The file hash the chunk values of a file of `size` bytes combine to, or
/// `None` when their number does not fit the size.
pub fn root_of(size: u64, values: &[ChunkValue]) -> Option<ContentHash> {
    let chunks = chunk_count(size);
    if values.len() as u64 != chunks {
        return None;
    }
    if chunks == 1 {
        return Some(ContentHash(values[0]));
    }
    // BLAKE3's tree is left-full: the left subtree of `len` bytes holds the
    // largest power of two of 1 KiB chunks below `len`; above one chunk of
    // ours that is a whole number of our chunks, so each of our chunks is one
    // subtree and the recursion only merges.
    fn subtree(values: &[ChunkValue], first: usize, len: u64) -> ChunkValue {
        if len <= CHUNK_BYTES {
            return values[first];
        }
        let split = left_subtree_len(len);
        let left = subtree(values, first, split);
        let right = subtree(values, first + (split / CHUNK_BYTES) as usize, len - split);
        merge_subtrees_non_root(&left, &right, blake3::hazmat::Mode::Hash)
    }
    let split = left_subtree_len(size);
    let left = subtree(values, 0, split);
    let right = subtree(values, (split / CHUNK_BYTES) as usize, size - split);
    Some(merge_subtrees_root(&left, &right, blake3::hazmat::Mode::Hash).into())
}

/// Hash, size and chunk values of a file, read once in chunks (never whole).
pub fn hash_file(path: &Path) -> std::io::Result<(ContentHash, u64, Vec<ChunkValue>)> {
    // Never blocks on a FIFO; devices and directories are refused.
    let mut file =
        crate::fsutil::open_regular(path).map_err(|e| std::io::Error::other(e.to_string()))?;
    let size = file.metadata()?.len();
    let (root, values) = hash_reader(&mut file, size)?;
    // The file must not have grown while we read it: its size is part of its name.
    if file.read(&mut [0u8; 1])? != 0 {
        return Err(std::io::Error::other("the file grew while it was hashed"));
    }
    Ok((root, size, values))
}

/// Hash and chunk values of the `size` bytes of a file from `offset` (a
/// part of it named as a file of its own: an image's layer inside its
/// archive), read once in chunks. A file too short to hold them is an error.
pub fn hash_part(
    path: &Path,
    offset: u64,
    size: u64,
) -> std::io::Result<(ContentHash, Vec<ChunkValue>)> {
    let mut file =
        crate::fsutil::open_regular(path).map_err(|e| std::io::Error::other(e.to_string()))?;
    file.seek(std::io::SeekFrom::Start(offset))?;
    hash_reader(&mut file, size)
}

/// Hash and chunk values of the next `size` bytes of `reader`.
fn hash_reader(
    reader: &mut impl Read,
    size: u64,
) -> std::io::Result<(ContentHash, Vec<ChunkValue>)> {
    let chunks = chunk_count(size);
    let mut values = Vec::with_capacity(usize::try_from(chunks).unwrap_or(0).min(1 << 16));
    let mut buf = vec![0u8; CHUNK_BYTES as usize];
    for index in 0..chunks {
        let want = chunk_len(size, index) as usize;
        reader.read_exact(&mut buf[..want])?;
        values.push(chunk_value(index, &buf[..want], chunks));
    }
    let root = root_of(size, &values).ok_or_else(|| std::io::Error::other("chunk count"))?;
    Ok((root, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    fn values_of(data: &[u8]) -> Vec<ChunkValue> {
        let size = data.len() as u64;
        let chunks = chunk_count(size);
        (0..chunks)
            .map(|i| {
                let start = (i * CHUNK_BYTES) as usize;
                let end = start + chunk_len(size, i) as usize;
                chunk_value(i, &data[start..end], chunks)
            })
            .collect()
    }

    /// The chunk values combine to the plain BLAKE3 hash of the file, for
    /// sizes around every boundary of the tree.
    #[test]
    fn chunk_values_combine_to_the_files_blake3_hash() {
        let c = CHUNK_BYTES as usize;
        for len in [
            0,
            1,
            1024,
            c - 1,
            c,
            c + 1,
            2 * c,
            2 * c + 5,
            3 * c,
            4 * c + 1024,
            5 * c + 77,
            8 * c,
            9 * c - 1,
        ] {
            let data = bytes(len);
            let values = values_of(&data);
            assert_eq!(values.len() as u64, chunk_count(len as u64));
            assert_eq!(
                root_of(len as u64, &values),
                Some(ContentHash::from(blake3::hash(&data))),
                "len {len}"
            );
        }
    }

    #[test]
    fn a_flipped_bit_or_a_wrong_count_does_not_verify() {
        let data = bytes(3 * CHUNK_BYTES as usize + 10);
        let size = data.len() as u64;
        let values = values_of(&data);
        let mut bad = data[..CHUNK_BYTES as usize].to_vec();
        bad[100] ^= 1;
        assert_ne!(chunk_value(0, &bad, 4), values[0]);
        // The same bytes at another offset are another chunk.
        assert_ne!(chunk_value(1, &data[..CHUNK_BYTES as usize], 4), values[0]);
        assert!(root_of(size, &values[..3]).is_none());
        let mut lying = values.clone();
        lying[2][0] ^= 1;
        assert_ne!(root_of(size, &lying), root_of(size, &values));
    }

    #[test]
    fn files_hash_like_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data = bytes(2 * CHUNK_BYTES as usize + 3);
        std::fs::write(&path, &data).unwrap();
        let (hash, size, values) = hash_file(&path).unwrap();
        assert_eq!(hash, ContentHash::from(blake3::hash(&data)));
        assert_eq!(size, data.len() as u64);
        assert_eq!(values, values_of(&data));
        assert!(hash_file(dir.path()).is_err());
        assert_eq!(hash.to_string().len(), 64);
    }

    #[test]
    fn a_part_of_a_file_hashes_like_its_bytes_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data = bytes(3 * CHUNK_BYTES as usize + 17);
        std::fs::write(&path, &data).unwrap();
        let (offset, size) = (1000u64, 2 * CHUNK_BYTES + 5);
        let part = &data[offset as usize..(offset + size) as usize];
        let (hash, values) = hash_part(&path, offset, size).unwrap();
        assert_eq!(hash, ContentHash::from(blake3::hash(part)));
        assert_eq!(values, values_of(part));
        assert!(
            hash_part(&path, offset, data.len() as u64).is_err(),
            "past the end of the file"
        );
    }
}
