//! The consumer's catalog: the files it offers by hash, and to whom.
//!
//! A submission offers its inputs ([`Catalog::offer`]): each file is hashed
//! once (the hash is remembered while the file's size, modification time and
//! inode stay the same, so a batch sharing one input hashes it once) and
//! registered under its hash. The catalog serves a hash only while an offer
//! holds it, and only to the hosts that offer was sent to ([`Offer::allow`]);
//! dropping the offer withdraws it. Files are served from disk where they
//! are; nothing is copied.
//!
//! Knows files, hashes and peer ids; not the network (see `transfer`).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use libp2p::PeerId;
use serde::{Deserialize, Serialize};

use crate::data::hash::{hash_file, hash_part, ChunkValue, ContentHash};
use crate::model::budget::{read_grant, ByteAllowance};
use crate::net::protocol::{InputRef, DATA_FILE_MAX, DATA_MAX_REFUSED};

/// One input of a task as the consumer knows it: where it goes in the job's
/// work directory, and the local file it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSpec {
    /// Relative path in the job's work directory.
    pub path: String,
    /// Absolute path of the file on the consumer's machine (read by the node).
    pub local: PathBuf,
    /// Only these bytes of `local` are the input, named and served as a
    /// file of their own (an image's layer inside its archive, which thus
    /// crosses once to a host however many images hold it); the whole
    /// file when `None`.
    #[serde(default)]
    pub part: Option<FilePart>,
}

/// Bytes of a file: `size` from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FilePart {
    pub offset: u64,
    pub size: u64,
}

/// A seam for tests: changes the bytes of a chunk as it is served, to prove
/// that hosts refuse corrupted chunks. Reachable only through the library's
/// [`Catalog::with_tamper`]; the node never sets one.
pub trait ChunkTamper: Send + Sync {
    /// Called with every chunk before it is sent.
    fn tamper(&self, hash: &ContentHash, chunk: u64, data: &mut [u8]);
}

/// What the catalog serves for a hash.
#[derive(Debug, Clone)]
pub struct Served {
    /// The file on disk.
    pub path: PathBuf,
    /// Where the served bytes start in it (0 but for a part of a file).
    pub offset: u64,
    /// Bytes served (the file's size when it was hashed, or the part's).
    pub size: u64,
    /// Its chunk values.
    pub values: Arc<Vec<ChunkValue>>,
}

#[derive(Debug)]
struct FileEntry {
    served: Served,
    /// Offers holding this file.
    offers: u32,
}

#[derive(Debug)]
struct OfferEntry {
    hashes: Vec<ContentHash>,
    /// The hosts it was sent to, and the bytes each may still read of it.
    peers: HashMap<PeerId, ByteAllowance>,
    /// Its files' sizes in all: what one allowance grants, times the reads.
    bytes: u64,
}

/// A file's identity on disk: path, size, modification time and inode, and
/// the part of it hashed (the whole file: `None`).
type FileKey = (PathBuf, u64, i64, i64, u64, Option<FilePart>);

#[derive(Debug, Default)]
struct Inner {
    files: HashMap<ContentHash, FileEntry>,
    offers: HashMap<u64, OfferEntry>,
    /// Hashes of files already hashed, while they are unchanged.
    known: HashMap<FileKey, (ContentHash, Arc<Vec<ChunkValue>>)>,
    next_id: u64,
}

/// Files remembered as hashed, at most; past it the memory is cleared.
const KNOWN_MAX: usize = 4096;

/// The catalog; cloneable, shared by the consumer's submissions and the data server.
#[derive(Clone, Default)]
pub struct Catalog {
    inner: Arc<Mutex<Inner>>,
    tamper: Option<Arc<dyn ChunkTamper>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("tamper", &self.tamper.is_some())
            .finish_non_exhaustive()
    }
}

/// A submission's inputs on offer; withdrawn when dropped.
#[derive(Debug)]
pub struct Offer {
    catalog: Catalog,
    id: u64,
    refs: Vec<InputRef>,
}

impl Offer {
    /// The inputs as a submission names them.
    pub fn refs(&self) -> &[InputRef] {
        &self.refs
    }

    /// Bytes of all inputs.
    pub fn total_bytes(&self) -> u64 {
        self.refs.iter().map(|r| r.size).sum()
    }

    /// Lets `host` read these inputs (call before sending it the
    /// submission): each of its files once, and again for each chunk the
    /// host may refuse ([`DATA_MAX_REFUSED`]); no more (issue 30).
    pub fn allow(&self, host: PeerId) {
        if let Some(o) = self.catalog.lock().offers.get_mut(&self.id) {
            let grant = read_grant(o.bytes, DATA_MAX_REFUSED);
            o.peers.entry(host).or_default().grant(grant);
        }
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        let mut inner = self.catalog.lock();
        let Some(offer) = inner.offers.remove(&self.id) else {
            return;
        };
        for hash in offer.hashes {
            let gone = inner.files.get_mut(&hash).is_some_and(|f| {
                f.offers = f.offers.saturating_sub(1);
                f.offers == 0
            });
            if gone {
                inner.files.remove(&hash);
            }
        }
    }
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// A catalog that passes every chunk it serves through `tamper` (tests only).
    pub fn with_tamper(tamper: Arc<dyn ChunkTamper>) -> Catalog {
        Catalog {
            tamper: Some(tamper),
            ..Catalog::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn tamper(&self) -> Option<&Arc<dyn ChunkTamper>> {
        self.tamper.as_ref()
    }

    /// Hashes (or recalls) each input and offers them together. Errors name
    /// the input. Hashing runs off the async threads.
    pub async fn offer(&self, inputs: &[InputSpec]) -> Result<Offer, String> {
        let mut refs = Vec::with_capacity(inputs.len());
        let mut found = Vec::with_capacity(inputs.len());
        for input in inputs {
            let (hash, served) = self.hash_input(input).await?;
            refs.push(InputRef {
                path: input.path.clone(),
                hash: hash.0,
                size: served.size,
            });
            found.push((hash, served));
        }
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        let mut hashes = Vec::with_capacity(found.len());
        for (hash, served) in found {
            inner
                .files
                .entry(hash)
                .or_insert(FileEntry { served, offers: 0 })
                .offers += 1;
            hashes.push(hash);
        }
        inner.offers.insert(
            id,
            OfferEntry {
                hashes,
                peers: HashMap::new(),
                bytes: refs.iter().fold(0u64, |t, r| t.saturating_add(r.size)),
            },
        );
        drop(inner);
        Ok(Offer {
            catalog: self.clone(),
            id,
            refs,
        })
    }

    async fn hash_input(&self, input: &InputSpec) -> Result<(ContentHash, Served), String> {
        let name = || format!("input {} ({})", input.path, input.local.display());
        let local = input.local.clone();
        let meta = std::fs::metadata(&local).map_err(|e| format!("{}: {e}", name()))?;
        if !meta.is_file() {
            return Err(format!("{}: not a regular file", name()));
        }
        if meta.len() > DATA_FILE_MAX {
            return Err(format!(
                "{}: {} bytes is more than the {DATA_FILE_MAX} bytes one file may have",
                name(),
                meta.len()
            ));
        }
        if let Some(part) = input.part {
            if part
                .offset
                .checked_add(part.size)
                .is_none_or(|end| end > meta.len())
            {
                return Err(format!(
                    "{}: bytes {}..+{} lie past its end ({} bytes)",
                    name(),
                    part.offset,
                    part.size,
                    meta.len()
                ));
            }
        }
        let (offset, wanted) = input.part.map_or((0, meta.len()), |p| (p.offset, p.size));
        let key: FileKey = (
            local.clone(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ino(),
            input.part,
        );
        if let Some((hash, values)) = self.lock().known.get(&key).cloned() {
            let served = Served {
                path: local,
                offset,
                size: wanted,
                values,
            };
            return Ok((hash, served));
        }
        let path = local.clone();
        let part = input.part;
        let (hash, size, values) = tokio::task::spawn_blocking(move || match part {
            None => hash_file(&path),
            Some(p) => hash_part(&path, p.offset, p.size).map(|(h, v)| (h, p.size, v)),
        })
        .await
        .map_err(|e| format!("{}: hashing stopped: {e}", name()))?
        .map_err(|e| format!("{}: {e}", name()))?;
        let values = Arc::new(values);
        {
            let mut inner = self.lock();
            if inner.known.len() >= KNOWN_MAX {
                inner.known.clear();
            }
            if size == wanted {
                inner.known.insert(key, (hash, values.clone()));
            }
        }
        Ok((
            hash,
            Served {
                path: local,
                offset,
                size,
                values,
            },
        ))
    }

    /// What to serve `peer` for `hash` of `size` bytes, or why not.
    pub fn find(&self, peer: &PeerId, hash: &ContentHash, size: u64) -> Result<Served, String> {
        let inner = self.lock();
        let Some(file) = inner.files.get(hash).filter(|f| f.served.size == size) else {
            return Err(format!("{hash} ({size} bytes) is not offered here"));
        };
        let allowances: Vec<u64> = inner
            .offers
            .values()
            .filter(|o| o.hashes.contains(hash))
            .filter_map(|o| o.peers.get(peer).map(ByteAllowance::left))
            .collect();
        if allowances.is_empty() {
            return Err(format!(
                "{hash} is offered, but not to {peer}: no job using it was sent there"
            ));
        }
        if size > 0 && allowances.iter().all(|&left| left == 0) {
            return Err(format!(
                "{hash} has been read by {peer} as often as its jobs allow"
            ));
        }
        Ok(file.served.clone())
    }

    /// `peer` asked `wanted` bytes of `hash` and none of its offers of it
    /// has that much left: true the first time for each such offer, so that
    /// each exhausted allowance is one flood in the peer's record however
    /// often it asks again. False for a file never offered to the peer (a
    /// refusal, not an overdraw) and for one with enough left.
    pub fn overdrawn(&self, peer: &PeerId, hash: &ContentHash, wanted: u64) -> bool {
        let mut inner = self.lock();
        let mut first = false;
        for allowance in inner
            .offers
            .values_mut()
            .filter(|o| o.hashes.contains(hash))
            .filter_map(|o| o.peers.get_mut(peer))
        {
            if allowance.left() < wanted {
                first |= allowance.overdraw();
            }
        }
        first
    }

    /// Spends `bytes` of what `peer` may read of `hash`, from the first
    /// offer holding it that has that much left; false when none has.
    pub fn spend(&self, peer: &PeerId, hash: &ContentHash, bytes: u64) -> bool {
        let mut inner = self.lock();
        inner
            .offers
            .values_mut()
            .filter(|o| o.hashes.contains(hash))
            .filter_map(|o| o.peers.get_mut(peer))
            .any(|allowance| allowance.spend(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_offered_files_go_only_to_allowed_hosts_and_only_while_offered() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("in.txt");
        std::fs::write(&local, b"shared input").unwrap();
        let catalog = Catalog::new();
        let spec = InputSpec {
            path: "data/in.txt".into(),
            local: local.clone(),
            part: None,
        };
        let first = catalog.offer(std::slice::from_ref(&spec)).await.unwrap();
        let second = catalog.offer(std::slice::from_ref(&spec)).await.unwrap();
        let r = &first.refs()[0];
        assert_eq!(r.hash, *blake3::hash(b"shared input").as_bytes());
        assert_eq!((r.size, r.path.as_str()), (12, "data/in.txt"));
        let hash = ContentHash(r.hash);
        let (host, stranger) = (PeerId::random(), PeerId::random());
        assert!(
            catalog.find(&host, &hash, 12).is_err(),
            "not sent anywhere yet"
        );
        first.allow(host);
        assert_eq!(catalog.find(&host, &hash, 12).unwrap().path, local);
        let refused = catalog.find(&stranger, &hash, 12).unwrap_err();
        assert!(refused.contains("not to"), "{refused}");
        assert!(
            catalog.find(&host, &hash, 13).is_err(),
            "size is part of the name"
        );
        drop(first);
        assert!(
            catalog.find(&host, &hash, 12).is_err(),
            "withdrawn with its offer"
        );
        second.allow(host);
        assert!(catalog.find(&host, &hash, 12).is_ok());
        drop(second);
        assert!(catalog.lock().files.is_empty());
    }

    /// Issue 30, scope 3: a host reads what it was offered a bounded
    /// number of times (once, and again for each chunk it may refuse), not
    /// forever; a new offer to it grants again.
    #[tokio::test]
    async fn a_host_reads_an_offered_file_a_bounded_number_of_times() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("in.bin");
        std::fs::write(&local, [5u8; 100]).unwrap();
        let catalog = Catalog::new();
        let spec = InputSpec {
            path: "in.bin".into(),
            local,
            part: None,
        };
        let offer = catalog.offer(std::slice::from_ref(&spec)).await.unwrap();
        let hash = ContentHash(offer.refs()[0].hash);
        let (host, other) = (PeerId::random(), PeerId::random());
        assert!(!catalog.spend(&host, &hash, 1), "not offered to it yet");
        offer.allow(host);
        offer.allow(other);
        let reads = 1 + DATA_MAX_REFUSED;
        for read in 0..reads {
            assert!(catalog.find(&host, &hash, 100).is_ok(), "read {read}");
            assert!(catalog.spend(&host, &hash, 100), "read {read}");
        }
        assert!(!catalog.spend(&host, &hash, 1), "a byte past the allowance");
        let refused = catalog.find(&host, &hash, 100).unwrap_err();
        assert!(refused.contains("as often as"), "{refused}");
        // Asking past it is an overdraw, noted once however often it asks;
        // not for a host with enough left, nor for one never offered it.
        assert!(catalog.overdrawn(&host, &hash, 1), "the first ask past it");
        assert!(!catalog.overdrawn(&host, &hash, 1), "noted once");
        assert!(!catalog.overdrawn(&other, &hash, 100), "it has enough left");
        assert!(
            !catalog.overdrawn(&PeerId::random(), &hash, 1),
            "never offered"
        );
        // Another host's allowance is its own.
        assert!(catalog.spend(&other, &hash, 100));
        // A second offer of the file to the host grants again.
        let again = catalog.offer(std::slice::from_ref(&spec)).await.unwrap();
        again.allow(host);
        assert!(catalog.find(&host, &hash, 100).is_ok());
        assert!(catalog.spend(&host, &hash, 100));
    }

    #[tokio::test]
    async fn a_missing_input_is_named() {
        let catalog = Catalog::new();
        let err = catalog
            .offer(&[InputSpec {
                path: "x".into(),
                local: "/nonexistent/file.bin".into(),
                part: None,
            }])
            .await
            .unwrap_err();
        assert!(err.contains("input x (/nonexistent/file.bin)"), "{err}");
    }

    #[tokio::test]
    async fn a_part_of_a_file_is_offered_and_served_as_a_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("archive.tar");
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&local, &data).unwrap();
        let catalog = Catalog::new();
        let part = |offset, size| InputSpec {
            path: "archive.tar layer 1".into(),
            local: local.clone(),
            part: Some(FilePart { offset, size }),
        };
        let offer = catalog.offer(&[part(1000, 3000)]).await.unwrap();
        let r = &offer.refs()[0];
        assert_eq!(r.hash, *blake3::hash(&data[1000..4000]).as_bytes());
        assert_eq!(r.size, 3000);
        let host = PeerId::random();
        offer.allow(host);
        let served = catalog.find(&host, &ContentHash(r.hash), 3000).unwrap();
        assert_eq!(
            (served.path, served.offset, served.size),
            (local.clone(), 1000, 3000)
        );
        // Remembered as hashed, apart from the whole file and other parts.
        let again = catalog.offer(&[part(1000, 3000)]).await.unwrap();
        assert_eq!(again.refs()[0].hash, r.hash);
        let whole = catalog
            .offer(&[InputSpec {
                part: None,
                ..part(0, 0)
            }])
            .await
            .unwrap();
        assert_eq!(whole.refs()[0].hash, *blake3::hash(&data).as_bytes());
        let err = catalog.offer(&[part(4000, 1001)]).await.unwrap_err();
        assert!(err.contains("past its end"), "{err}");
    }
}
