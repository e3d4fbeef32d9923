//! `/gleaner/data/1`: a host reads a file from the consumer that offered it,
//! one libp2p stream per file, with yamux's flow control as back-pressure
//! (the reader takes the next chunk only once it has verified and written the
//! last one, so neither side holds more than a chunk or two).
//!
//! The host ([`fetch_input`]) sends a [`DataRequest`]; the consumer ([`serve`])
//! answers with a header carrying the file's chunk values, then the file's
//! raw bytes from the asked chunk on. The host checks that the values combine
//! to the file's hash before reading a byte, then each chunk against its
//! value as it arrives, writing verified chunks to disk at once. A chunk that
//! does not match is refused: the stream is dropped and a new one asks again
//! from that chunk, a bounded number of times. Data moves over direct
//! connections only: over a relayed circuit (limited in bytes and time) the
//! host waits a bounded time for hole punching, then gives up with a reason.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::io::{AsyncReadExt, AsyncWriteExt};
use futures::StreamExt;
use libp2p::PeerId;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::data::cache::{Cache, Pinned};
use crate::data::catalog::Catalog;
use crate::data::hash::{chunk_count, chunk_len, chunk_value, root_of, ContentHash, CHUNK_BYTES};
use crate::model::budget::{Admit, Overrun, PeerBudgets, PeerSlots};
use crate::net::codec::{read_frame, write_frame, DATA_CAPS};
use crate::net::protocol::{
    DataRequest, DataResponse, InputRef, DATA_FILE_MAX, DATA_MAX_REFUSED, DATA_PROTOCOL,
};
use crate::net::NetHandle;

/// Streams a consumer serves at once; more are dropped (the host tries again).
const SERVE_CONCURRENCY: usize = 16;
/// Data streams one host may open in a burst, and per second after it. An
/// honest host opens one per input file (a job has at most 256, and an
/// image) and one more per chunk it refuses, one after another.
pub const OPEN_BURST: u32 = 300;
pub const OPENS_PER_SEC: f64 = 16.0;
/// Opens past the budget forgiven (dropped at once) before the host is cut
/// off: a burst, and one a second.
pub const OPEN_DROPS_FORGIVEN: u32 = 256;
/// The budget of opens of a stranger on probation (new to the node through
/// a source whose peers flooded, `NetHandle::on_probation`), as for its
/// requests (`net::event_loop::requests`): 32 at once, then 8 a second, 32
/// drops forgiven. Enough for a job's first inputs; a flooder with a fresh
/// peer id per connection is cut off after a few dozen streams instead of
/// some 550.
pub const PROBATION_OPEN_BURST: u32 = 32;
pub const PROBATION_OPENS_PER_SEC: f64 = 8.0;
pub const PROBATION_OPEN_DROPS_FORGIVEN: u32 = 32;
/// Hosts with an open budget at once (the one heard from longest ago makes
/// room).
const OPEN_PEERS_MAX: usize = 4096;
/// Data streams one host may hold open at a consumer at once: an honest
/// host reads one file at a time. Past it a stream is refused with a reason,
/// so one host cannot take every one of the [`SERVE_CONCURRENCY`] slots.
pub const STREAMS_PER_HOST: u32 = 4;
/// How long a refusal may take to write before the stream is dropped.
const REFUSAL_WAIT: Duration = Duration::from_secs(2);
/// How long a host may take to send its request.
const REQUEST_WAIT: Duration = Duration::from_secs(10);
/// Streams of one fetch that may end before any answer and be opened again.
/// Why: libp2p-stream hands a protocol's inbound streams to its acceptor
/// through a channel of one, and drops the next while that one waits, so a
/// consumer slow to take its streams (a loaded machine, several hosts
/// starting at once) drops some unread; that is a moment, not the input.
pub const UNANSWERED_STREAMS_RETRIED: u32 = 4;
/// The wait before opening again an unanswered stream, doubled each time.
const UNANSWERED_BACKOFF: Duration = Duration::from_millis(100);

/// Bounds of one fetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    /// How long to wait for a direct connection when only a relayed one exists.
    pub direct_wait: Duration,
    /// Longest wait for one chunk (or the header) before the fetch counts as stalled.
    pub chunk_timeout: Duration,
    /// Corrupted chunks refused in one file before giving up on it.
    pub max_refused: u32,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            direct_wait: Duration::from_secs(30),
            chunk_timeout: Duration::from_secs(30),
            max_refused: DATA_MAX_REFUSED,
        }
    }
}

/// Why a file could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// Only a relayed circuit to the consumer, and no direct connection came.
    #[error("only a relayed connection to the consumer; data moves over direct connections only, and hole punching gave none within {0:?}")]
    RelayedOnly(Duration),
    /// The consumer would not send the file.
    #[error("the consumer refused: {0}")]
    Refused(String),
    /// The chunk values the consumer sent do not combine to the file's hash.
    #[error("the consumer's chunk hashes do not combine to the file's hash")]
    BadChunkList,
    /// Too many chunks did not match their hash.
    #[error("{0} chunks did not match their hash; giving up")]
    Corrupt(u32),
    /// The stream failed.
    #[error("stream: {0}")]
    Stream(String),
    /// Nothing arrived for too long.
    #[error("no data for {0:?}")]
    Stalled(Duration),
    /// The file cannot be written here.
    #[error("writing the file: {0}")]
    Disk(String),
    /// The file is larger than the protocol moves.
    #[error("{0} bytes is more than the data protocol moves ({DATA_FILE_MAX})")]
    TooLarge(u64),
}

/// What one fetch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fetched {
    /// Verified bytes received.
    pub bytes: u64,
    /// Chunks refused (and fetched again).
    pub refused_chunks: u32,
}

/// How one stream of a fetch ended.
enum Pass {
    Done,
    /// Chunk at this index was refused; ask again from it.
    Refused,
    /// The stream failed before any answer came (dropped unread).
    Unanswered(String),
}

/// Where an input came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obtained {
    /// It was in the cache: nothing crossed.
    Cached,
    /// It was read from the consumer.
    Fetched(Fetched),
}

/// An input of a job, verified and pinned in `cache`: found there, or
/// fetched from `consumer` and admitted. Errors name the input.
pub async fn obtain_input(
    net: &NetHandle,
    cache: &Cache,
    consumer: PeerId,
    input: &InputRef,
    limits: FetchLimits,
) -> Result<(Pinned, Obtained), String> {
    let hash = ContentHash(input.hash);
    let name = &input.path;
    if let Some(pinned) = cache.lookup(hash, input.size) {
        return Ok((pinned, Obtained::Cached));
    }
    let temp = cache.temp_path();
    match fetch_input(net, consumer, hash, input.size, &temp, limits).await {
        Ok(fetched) => {
            cache.record_fetch(fetched.bytes, u64::from(fetched.refused_chunks));
            let pinned = cache
                .admit(hash, input.size, &temp)
                .map_err(|e| format!("input {name}: cannot keep it: {e}"))?;
            Ok((pinned, Obtained::Fetched(fetched)))
        }
        Err((e, refused)) => {
            cache.record_refused(u64::from(refused));
            let _ = tokio::fs::remove_file(&temp).await;
            Err(format!("input {name}: {e}"))
        }
    }
}

/// Reads the file `hash` of `size` bytes from `peer` into `dest` (created or
/// truncated), verifying every chunk. On error, `dest` may hold a partial
/// file: the caller deletes it. Counts refused chunks in both outcomes.
pub async fn fetch_input(
    net: &NetHandle,
    peer: PeerId,
    hash: ContentHash,
    size: u64,
    dest: &Path,
    limits: FetchLimits,
) -> Result<Fetched, (DataError, u32)> {
    if size > DATA_FILE_MAX {
        return Err((DataError::TooLarge(size), 0));
    }
    if !net.is_direct(&peer) && !net.wait_direct(&peer, limits.direct_wait).await {
        return Err((DataError::RelayedOnly(limits.direct_wait), 0));
    }
    let mut file = tokio::fs::File::create(dest)
        .await
        .map_err(|e| (DataError::Disk(e.to_string()), 0))?;
    let chunks = chunk_count(size);
    let mut next = 0u64;
    let mut refused = 0u32;
    let mut unanswered = 0u32;
    let mut buf = vec![0u8; CHUNK_BYTES as usize];
    while next < chunks {
        let pass = fetch_pass(
            net, peer, hash, size, &mut next, &mut file, &mut buf, limits,
        )
        .await
        .map_err(|e| (e, refused))?;
        match pass {
            Pass::Done => {}
            Pass::Unanswered(e) => {
                if unanswered >= UNANSWERED_STREAMS_RETRIED {
                    return Err((DataError::Stream(e), refused));
                }
                tracing::debug!(%peer, %hash, error = %e, "a data stream ended before any answer: opening another");
                tokio::time::sleep(UNANSWERED_BACKOFF.saturating_mul(1 << unanswered)).await;
                unanswered += 1;
            }
            Pass::Refused => {
                refused += 1;
                tracing::warn!(%peer, %hash, chunk = next, refused, "a chunk did not match its hash: refused, asking again");
                if refused > limits.max_refused {
                    return Err((DataError::Corrupt(refused), refused));
                }
            }
        }
    }
    file.flush()
        .await
        .map_err(|e| (DataError::Disk(e.to_string()), refused))?;
    file.sync_all()
        .await
        .map_err(|e| (DataError::Disk(e.to_string()), refused))?;
    Ok(Fetched {
        bytes: size,
        refused_chunks: refused,
    })
}

/// One stream: from chunk `*next` to the end or to the first refused chunk.
#[allow(clippy::too_many_arguments)]
async fn fetch_pass(
    net: &NetHandle,
    peer: PeerId,
    hash: ContentHash,
    size: u64,
    next: &mut u64,
    file: &mut tokio::fs::File,
    buf: &mut [u8],
    limits: FetchLimits,
) -> Result<Pass, DataError> {
    let wait = limits.chunk_timeout;
    let mut stream = match tokio::time::timeout(wait, net.open_stream(peer, DATA_PROTOCOL))
        .await
        .map_err(|_| DataError::Stalled(wait))?
    {
        Ok(s) => s,
        Err(e) => return Ok(Pass::Unanswered(e.to_string())),
    };
    let request = DataRequest {
        hash: hash.0,
        size,
        first_chunk: *next,
    };
    let asked = tokio::time::timeout(wait, write_frame(&mut stream, &request, DATA_CAPS.request))
        .await
        .map_err(|_| DataError::Stalled(wait))?;
    if let Err(e) = asked {
        return Ok(Pass::Unanswered(e.to_string()));
    }
    let header = tokio::time::timeout(wait, read_frame(&mut stream, DATA_CAPS.response))
        .await
        .map_err(|_| DataError::Stalled(wait))?;
    let header: DataResponse = match header {
        Ok(h) => h,
        // Dropped unread: reset or closed before a byte of the answer.
        Err(e) if is_unanswered(&e) => return Ok(Pass::Unanswered(e.to_string())),
        Err(e) => return Err(DataError::Stream(e.to_string())),
    };
    let values = match header {
        DataResponse::Refused { reason } => return Err(DataError::Refused(reason)),
        DataResponse::Sending { chunk_hashes } => chunk_hashes,
    };
    if root_of(size, &values) != Some(hash) {
        return Err(DataError::BadChunkList);
    }
    let chunks = chunk_count(size);
    file.seek(std::io::SeekFrom::Start(*next * CHUNK_BYTES))
        .await
        .map_err(|e| DataError::Disk(e.to_string()))?;
    while *next < chunks {
        let len = chunk_len(size, *next) as usize;
        let data = &mut buf[..len];
        tokio::time::timeout(wait, stream.read_exact(data))
            .await
            .map_err(|_| DataError::Stalled(wait))?
            .map_err(|e| DataError::Stream(e.to_string()))?;
        let index = usize::try_from(*next).unwrap_or(usize::MAX);
        if values.get(index) != Some(&chunk_value(*next, data, chunks)) {
            // Never written, never used: the stream is dropped (reset) and a
            // new one asks for this chunk again.
            return Ok(Pass::Refused);
        }
        file.write_all(data)
            .await
            .map_err(|e| DataError::Disk(e.to_string()))?;
        *next += 1;
    }
    let _ = stream.close().await;
    Ok(Pass::Done)
}

/// Whether a stream failed as one dropped unread does: closed or reset
/// before the answer, not an answer that could not be decoded.
fn is_unanswered(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{
        BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof, WriteZero,
    };
    matches!(
        e.kind(),
        BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof | WriteZero
    )
}

/// Serves the catalog's files to hosts until `shutdown`: one task per
/// stream (at most [`SERVE_CONCURRENCY`]), each owned by `tracker`. Each
/// host's opens are counted against its budget first ([`OPEN_BURST`], then
/// [`OPENS_PER_SEC`]; a stranger on probation the smaller
/// [`PROBATION_OPEN_BURST`] and [`PROBATION_OPENS_PER_SEC`]), then against
/// its account of CPU (`NetHandle::admit_stream`): past either a
/// stream is dropped unread, a strike against the host's source, and a host
/// that goes on past [`OPEN_DROPS_FORGIVEN`] more is cut off (a flood in
/// its record). A host holds at most [`STREAMS_PER_HOST`] at once (more are
/// refused with a reason), and one that reads an offered file past its
/// allowance has that in its record once per allowance.
pub async fn serve(
    net: NetHandle,
    catalog: Catalog,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    let Some(mut incoming) = net.accept_streams(DATA_PROTOCOL) else {
        tracing::warn!("another part of the node already serves {DATA_PROTOCOL}");
        return;
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(SERVE_CONCURRENCY));
    let mut opens = PeerBudgets::new(
        (OPEN_BURST, OPENS_PER_SEC),
        (OPEN_DROPS_FORGIVEN, 1.0),
        OPEN_PEERS_MAX,
    );
    let mut probation = PeerBudgets::new(
        (PROBATION_OPEN_BURST, PROBATION_OPENS_PER_SEC),
        (PROBATION_OPEN_DROPS_FORGIVEN, 1.0),
        OPEN_PEERS_MAX,
    );
    let origin = tokio::time::Instant::now();
    let held = Arc::new(Mutex::new(PeerSlots::new(STREAMS_PER_HOST)));
    loop {
        let (peer, stream) = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = incoming.next() => match next {
                Some(s) => s,
                None => return,
            },
        };
        // Before anything is spawned or read: what a flooding host costs
        // is this count and a reset stream.
        let now_ms = u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        let budgets = if net.on_probation(&peer) {
            &mut probation
        } else {
            &mut opens
        };
        // Within its count of opens, then its account of CPU, the one its
        // requests and summaries are charged to (`NetHandle::admit_stream`).
        let (admitted, what) = match budgets.admit(&peer, now_ms) {
            Admit::Serve => (net.admit_stream(&peer), Overrun::Cpu),
            past => (past, Overrun::DataStreams),
        };
        match admitted {
            Admit::Serve => {}
            Admit::Drop => {
                // A strike against its source (once per peer): fresh peer
                // ids that each take a burst of streams and leave before
                // they are cut off make the source suspect.
                net.past_budget(&peer);
                continue;
            }
            Admit::CutOff => {
                tracing::warn!(%peer, what = what.label(), "a host opened data streams past its budget: cut off");
                net.overrun(peer, what, true);
                continue;
            }
        }
        let Some(own) = HeldStream::take(&held, peer) else {
            // Within its budget of opens, so these small tasks are bounded too.
            let reason = format!(
                "{peer} holds {STREAMS_PER_HOST} data streams here already; one file at a time"
            );
            tracing::debug!(%peer, "{reason}: refused");
            tracker.spawn(refuse(stream, reason));
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "too many data streams: dropping one");
            continue;
        };
        let (catalog, net) = (catalog.clone(), net.clone());
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            tokio::select! {
                r = serve_one(peer, stream, &catalog, &net) => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "data stream ended early");
                    }
                }
                _ = shutdown.cancelled() => {}
            }
            drop(slot);
            drop(own);
        });
    }
}

/// One of a host's [`STREAMS_PER_HOST`] slots, given back when dropped
/// (the stream served, or the server shutting down).
struct HeldStream {
    held: Arc<Mutex<PeerSlots<PeerId>>>,
    peer: PeerId,
}

impl HeldStream {
    fn take(held: &Arc<Mutex<PeerSlots<PeerId>>>, peer: PeerId) -> Option<HeldStream> {
        let took = held.lock().unwrap_or_else(|p| p.into_inner()).take(&peer);
        took.then(|| HeldStream {
            held: held.clone(),
            peer,
        })
    }
}

impl Drop for HeldStream {
    fn drop(&mut self) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .give_back(&self.peer);
    }
}

/// Refuses a stream with `reason` without reading its request.
async fn refuse(mut stream: libp2p::Stream, reason: String) {
    let header = DataResponse::Refused { reason };
    let _ = tokio::time::timeout(REFUSAL_WAIT, async {
        write_frame(&mut stream, &header, DATA_CAPS.response).await?;
        stream.close().await
    })
    .await;
}

async fn serve_one(
    peer: PeerId,
    mut stream: libp2p::Stream,
    catalog: &Catalog,
    net: &NetHandle,
) -> std::io::Result<()> {
    let timeout = |what: &str| std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_string());
    let request: DataRequest =
        tokio::time::timeout(REQUEST_WAIT, read_frame(&mut stream, DATA_CAPS.request))
            .await
            .map_err(|_| timeout("no request"))??;
    let hash = ContentHash(request.hash);
    let served = match catalog.find(&peer, &hash, request.size) {
        Ok(s) => s,
        Err(reason) => {
            tracing::info!(%peer, %hash, %reason, "data request refused");
            if request.size > 0 && catalog.overdrawn(&peer, &hash, 1) {
                net.overrun(peer, Overrun::Reads, false);
            }
            let header = DataResponse::Refused { reason };
            write_frame(&mut stream, &header, DATA_CAPS.response).await?;
            return stream.close().await;
        }
    };
    let chunks = chunk_count(served.size);
    let mut file = tokio::fs::File::open(&served.path).await?;
    let header = DataResponse::Sending {
        chunk_hashes: served.values.as_ref().clone(),
    };
    write_frame(&mut stream, &header, DATA_CAPS.response).await?;
    // A part of a file (an image's layer in its archive) starts at its offset.
    file.seek(std::io::SeekFrom::Start(
        served
            .offset
            .saturating_add(request.first_chunk.saturating_mul(CHUNK_BYTES)),
    ))
    .await?;
    let mut buf = vec![0u8; CHUNK_BYTES as usize];
    for index in request.first_chunk..chunks {
        let data = &mut buf[..chunk_len(served.size, index) as usize];
        // Each offer lets a host read its files a bounded number of times
        // (issue 30): past it, the stream ends and the host gives up.
        if !catalog.spend(&peer, &hash, data.len() as u64) {
            tracing::warn!(%peer, %hash, chunk = index, "a host read past its allowance of this file; stream ended");
            if catalog.overdrawn(&peer, &hash, data.len() as u64) {
                net.overrun(peer, Overrun::Reads, false);
            }
            return Err(std::io::Error::other("read past the host's allowance"));
        }
        file.read_exact(data).await?;
        if let Some(t) = catalog.tamper() {
            t.tamper(&hash, index, data);
        }
        // A host that stops reading holds us here (back-pressure); one that
        // is gone for good is dropped after a while.
        tokio::time::timeout(FetchLimits::default().chunk_timeout, stream.write_all(data))
            .await
            .map_err(|_| timeout("host stopped reading"))??;
    }
    stream.close().await
}
