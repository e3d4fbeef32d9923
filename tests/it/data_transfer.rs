//! The data layer between two real swarms on 127.0.0.1 in one process: a
//! consumer offers files by hash from its catalog and serves them over
//! `/gleaner/data/1`; a host obtains them into its cache, verified chunk by
//! chunk. A shared input crosses once; a corrupted chunk is refused and read
//! again, never used; a file not offered to this host is refused with a reason;
//! a host holds a few streams at once, and a read past its allowance is
//! reported against it once; a stream the consumer dropped unread is opened
//! again.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gleaner::data::hash::hash_file;
use gleaner::data::{
    obtain_input, serve, Cache, Catalog, ChunkTamper, ContentHash, FetchLimits, InputSpec,
    Obtained, Offer,
};
use gleaner::net::{start, NetConfig, NetEvent, NetHandle};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::Multiaddr;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A swarm on 127.0.0.1 whose node-side events are dropped (the data layer
/// does not use them); cancelled when dropped.
struct Peer {
    net: NetHandle,
    addr: Multiaddr,
    cancel: CancellationToken,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn peer() -> Peer {
    let (peer, mut events) = peer_with_events().await;
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    peer
}

/// A swarm on 127.0.0.1, with its node-side events.
async fn peer_with_events() -> (Peer, tokio::sync::mpsc::Receiver<NetEvent>) {
    let cancel = CancellationToken::new();
    let (net, events, event_loop) = start(
        Keypair::generate_ed25519(),
        NetConfig::loopback(&gleaner::model::ids::PoolName::new("data-test").unwrap()),
        cancel.clone(),
    )
    .unwrap();
    tokio::spawn(event_loop.run());
    let mut addr = None;
    for _ in 0..50 {
        if let Some(a) = net.listen_addrs().await.unwrap().into_iter().next() {
            addr = Some(a);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let addr = addr.expect("listens").with(Protocol::P2p(net.peer_id()));
    (Peer { net, addr, cancel }, events)
}

/// A consumer serving `catalog`, and a host connected to it.
async fn consumer_and_host(catalog: Catalog) -> (Peer, Peer, TaskTracker) {
    let consumer = peer().await;
    let host = peer().await;
    let tracker = TaskTracker::new();
    tracker.spawn(serve(
        consumer.net.clone(),
        catalog,
        tracker.clone(),
        consumer.cancel.clone(),
    ));
    host.net.dial(consumer.addr.clone()).await.unwrap();
    (consumer, host, tracker)
}

/// Writes `mib` MiB of reproducible, incompressible-looking bytes, a MiB at a time.
fn write_input(path: &Path, mib: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for b in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&block).unwrap();
    }
    f.flush().unwrap();
}

/// `catalog`'s offer of the whole file at `local`, named `path`.
async fn offer_whole(catalog: &Catalog, path: &str, local: &Path) -> Offer {
    let spec = InputSpec {
        path: path.into(),
        local: local.to_path_buf(),
        part: None,
    };
    catalog.offer(&[spec]).await.unwrap()
}

fn limits() -> FetchLimits {
    FetchLimits {
        direct_wait: Duration::from_secs(5),
        chunk_timeout: Duration::from_secs(20),
        max_refused: 3,
    }
}

/// Flips one byte of chunk `chunk` the first `times` times it is served.
struct FlipChunk {
    chunk: u64,
    times: AtomicU32,
}

impl ChunkTamper for FlipChunk {
    fn tamper(&self, _: &ContentHash, chunk: u64, data: &mut [u8]) {
        let left = self.times.load(Ordering::SeqCst);
        if chunk == self.chunk && left > 0 {
            self.times.store(left - 1, Ordering::SeqCst);
            data[data.len() / 2] ^= 0x01;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_input_shared_by_two_jobs_crosses_to_the_host_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("shared.bin");
    write_input(&input, 64);
    let catalog = Catalog::new();
    let (_consumer, host, _tracker) = consumer_and_host(catalog.clone()).await;
    let cache = Cache::open(&dir.path().join("cache"), 256 << 20).unwrap();
    let spec = InputSpec {
        path: "data/shared.bin".into(),
        local: input.clone(),
        part: None,
    };
    let (want, _, _) = hash_file(&input).unwrap();
    for job in 0..2 {
        // Each job offers its inputs and lets the host it chose read them.
        let offer = catalog.offer(std::slice::from_ref(&spec)).await.unwrap();
        offer.allow(host.net.peer_id());
        let (pinned, how) = obtain_input(
            &host.net,
            &cache,
            _consumer.net.peer_id(),
            &offer.refs()[0],
            limits(),
        )
        .await
        .unwrap();
        match (job, how) {
            (0, Obtained::Fetched(f)) => assert_eq!(f.bytes, 64 << 20),
            (1, Obtained::Cached) => {}
            other => panic!("job {}: {:?}", other.0, other.1),
        }
        assert_eq!(hash_file(pinned.path()).unwrap().0, want);
    }
    let stats = cache.stats();
    assert_eq!(
        (stats.files_fetched, stats.bytes_fetched),
        (1, 64 << 20),
        "one crossing: {stats:?}"
    );
    assert_eq!((stats.hits, stats.bytes_hit), (1, 64 << 20), "{stats:?}");
    assert_eq!(stats.chunks_refused, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_chunk_is_refused_and_fetched_again_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    write_input(&input, 8);
    let tamper = Arc::new(FlipChunk {
        chunk: 5,
        times: AtomicU32::new(1),
    });
    let catalog = Catalog::with_tamper(tamper.clone());
    let (consumer, host, _tracker) = consumer_and_host(catalog.clone()).await;
    let cache = Cache::open(&dir.path().join("cache"), 256 << 20).unwrap();
    let offer = offer_whole(&catalog, "in.bin", &input).await;
    offer.allow(host.net.peer_id());
    let (pinned, how) = obtain_input(
        &host.net,
        &cache,
        consumer.net.peer_id(),
        &offer.refs()[0],
        limits(),
    )
    .await
    .unwrap();
    assert_eq!(
        how,
        Obtained::Fetched(gleaner::data::Fetched {
            bytes: 8 << 20,
            refused_chunks: 1
        })
    );
    assert_eq!(cache.stats().chunks_refused, 1);
    assert_eq!(
        std::fs::read(pinned.path()).unwrap(),
        std::fs::read(&input).unwrap(),
        "the refused chunk was read again; the file is the consumer's"
    );
    drop(pinned);

    // A chunk that is always corrupted: the host gives up, names the input,
    // and keeps nothing.
    let cache2 = Cache::open(&dir.path().join("cache2"), 256 << 20).unwrap();
    tamper.times.store(u32::MAX, Ordering::SeqCst);
    let err = obtain_input(
        &host.net,
        &cache2,
        consumer.net.peer_id(),
        &offer.refs()[0],
        limits(),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("input in.bin") && err.contains("did not match"),
        "{err}"
    );
    let stats = cache2.stats();
    assert_eq!((stats.files, stats.files_fetched), (0, 0), "{stats:?}");
    assert_eq!(stats.chunks_refused, u64::from(limits().max_refused) + 1);
    assert_eq!(
        std::fs::read_dir(dir.path().join("cache2/tmp"))
            .unwrap()
            .count(),
        0,
        "the partial file is gone"
    );
}

/// A part of a file (an image's layer inside its archive) is named,
/// served and verified as a file of its own: the host receives exactly its
/// bytes, and a refused chunk is read again from the part's own offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_of_a_file_crosses_as_a_file_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("archive.tar");
    write_input(&input, 8);
    let tamper = Arc::new(FlipChunk {
        chunk: 2,
        times: AtomicU32::new(1),
    });
    let catalog = Catalog::with_tamper(tamper);
    let (consumer, host, _tracker) = consumer_and_host(catalog.clone()).await;
    let cache = Cache::open(&dir.path().join("cache"), 256 << 20).unwrap();
    // Not on a chunk boundary, and not a whole number of chunks.
    let (offset, size) = ((3 << 19) + 512, (5 << 20) + 3);
    let offer = catalog
        .offer(&[InputSpec {
            path: "archive.tar layer 1".into(),
            local: input.clone(),
            part: Some(gleaner::data::FilePart { offset, size }),
        }])
        .await
        .unwrap();
    offer.allow(host.net.peer_id());
    let (pinned, how) = obtain_input(
        &host.net,
        &cache,
        consumer.net.peer_id(),
        &offer.refs()[0],
        limits(),
    )
    .await
    .unwrap();
    assert_eq!(
        how,
        Obtained::Fetched(gleaner::data::Fetched {
            bytes: size,
            refused_chunks: 1
        })
    );
    let whole = std::fs::read(&input).unwrap();
    assert!(
        std::fs::read(pinned.path()).unwrap() == whole[offset as usize..(offset + size) as usize],
        "the host holds the part's bytes, the refused chunk read again from its place"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_not_offered_to_this_host_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("secret.bin");
    write_input(&input, 1);
    let catalog = Catalog::new();
    let (consumer, host, _tracker) = consumer_and_host(catalog.clone()).await;
    let cache = Cache::open(&dir.path().join("cache"), 16 << 20).unwrap();
    let offer = offer_whole(&catalog, "secret.bin", &input).await;
    // Offered, but the job was not sent to this host.
    let err = obtain_input(
        &host.net,
        &cache,
        consumer.net.peer_id(),
        &offer.refs()[0],
        limits(),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("input secret.bin") && err.contains("not to"),
        "{err}"
    );
    // A hash nobody offered.
    let mut unknown = offer.refs()[0].clone();
    unknown.hash = [7; 32];
    let err = obtain_input(
        &host.net,
        &cache,
        consumer.net.peer_id(),
        &unknown,
        limits(),
    )
    .await
    .unwrap_err();
    assert!(err.contains("not offered here"), "{err}");
    assert_eq!(cache.stats().files, 0);
}

/// Issue 30, scope 3: a host holds at most `STREAMS_PER_HOST` data streams
/// at a consumer (one more is refused with the reason, unread), and a host
/// that reads an offered file past its allowance is reported against, once
/// for the allowance however often it asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_holds_a_few_streams_and_a_read_past_its_allowance_is_reported_once() {
    use gleaner::data::transfer::STREAMS_PER_HOST;
    use gleaner::model::budget::Overrun;
    use gleaner::net::codec::{read_frame, write_frame, DATA_CAPS};
    use gleaner::net::protocol::{DataRequest, DataResponse, DATA_MAX_REFUSED, DATA_PROTOCOL};

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    std::fs::write(&input, [3u8; 100]).unwrap();
    // Big enough that a stream asking for it and never read stalls on
    // yamux's window with the file unsent: a slot held for as long as needed.
    let big = dir.path().join("big.bin");
    write_input(&big, 4);
    let catalog = Catalog::new();
    let (consumer, mut events) = peer_with_events().await;
    let host = peer().await;
    let tracker = TaskTracker::new();
    tracker.spawn(serve(
        consumer.net.clone(),
        catalog.clone(),
        tracker.clone(),
        consumer.cancel.clone(),
    ));
    host.net.dial(consumer.addr.clone()).await.unwrap();
    // Two offers: an allowance is an offer's (its bytes, read again a few times).
    let offer = offer_whole(&catalog, "in.bin", &input).await;
    let big_offer = offer_whole(&catalog, "big.bin", &big).await;
    offer.allow(host.net.peer_id());
    big_offer.allow(host.net.peer_id());
    let from = consumer.net.peer_id();
    let (input_ref, big_ref) = (offer.refs()[0].clone(), big_offer.refs()[0].clone());
    let request = DataRequest {
        hash: input_ref.hash,
        size: input_ref.size,
        first_chunk: 0,
    };
    let hold = DataRequest {
        hash: big_ref.hash,
        size: big_ref.size,
        first_chunk: 0,
    };

    // Streams held, each known to be held once its header came. A stream
    // the consumer dropped unread (libp2p-stream takes one inbound stream
    // at a time; a loaded machine drops the next) is opened again.
    let mut held = Vec::new();
    for _ in 0..20 {
        if held.len() == STREAMS_PER_HOST as usize {
            break;
        }
        let mut s = host.net.open_stream(from, DATA_PROTOCOL).await.unwrap();
        if write_frame(&mut s, &hold, DATA_CAPS.request).await.is_err() {
            continue;
        }
        match read_frame::<DataResponse, _>(&mut s, DATA_CAPS.response).await {
            Ok(DataResponse::Sending { .. }) => held.push(s),
            Ok(other) => panic!("a stream within the host's share: {other:?}"),
            Err(_) => continue,
        }
    }
    assert_eq!(held.len(), STREAMS_PER_HOST as usize, "streams held");
    // One more is refused unread, with the reason.
    let mut refusal = None;
    for _ in 0..20 {
        let mut one_more = host.net.open_stream(from, DATA_PROTOCOL).await.unwrap();
        let _ = write_frame(&mut one_more, &request, DATA_CAPS.request).await;
        match read_frame::<DataResponse, _>(&mut one_more, DATA_CAPS.response).await {
            Ok(DataResponse::Refused { reason }) => {
                refusal = Some(reason);
                break;
            }
            Ok(other) => panic!("a stream past the host's share: {other:?}"),
            Err(_) => continue,
        }
    }
    let reason = refusal.expect("one stream more than the host's share is answered");
    assert!(reason.contains("data streams here already"), "{reason}");
    drop(held);

    // Its allowance: the file once and again for each chunk it may refuse.
    let fetch = |n: u32| {
        let (net, dest) = (host.net.clone(), dir.path().join(format!("got{n}")));
        async move {
            gleaner::data::fetch_input(
                &net,
                from,
                ContentHash(input_ref.hash),
                input_ref.size,
                &dest,
                limits(),
            )
            .await
        }
    };
    // (A slot given back when its stream is done: a moment.)
    let mut reads = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reads < 1 + DATA_MAX_REFUSED {
        match fetch(reads).await {
            Ok(_) => reads += 1,
            Err(e) if std::time::Instant::now() < deadline => {
                assert!(format!("{:?}", e).contains("already"), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("read {reads}: {e:?}"),
        }
    }
    for n in 0..3 {
        let err = fetch(100 + n).await.unwrap_err();
        assert!(format!("{:?}", err).contains("as often as"), "{err:?}");
    }
    let mut overruns = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(2), events.recv()).await {
        if let NetEvent::Overrun { peer, what } = event {
            overruns.push((peer, what));
        }
    }
    assert_eq!(
        overruns,
        vec![(host.net.peer_id(), Overrun::Reads)],
        "one report for three asks past the allowance"
    );
}

/// A stream the consumer drops unread (libp2p-stream hands its acceptor one
/// inbound stream at a time and drops the next while that one waits: on a
/// loaded machine, or with several hosts starting at once) is opened again
/// and the input arrives: a moment's drop does not fail the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_consumer_drops_unread_is_opened_again_and_the_input_arrives() {
    use futures::StreamExt;
    use gleaner::net::protocol::DATA_PROTOCOL;

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    write_input(&input, 2);
    let catalog = Catalog::new();
    let consumer = peer().await;
    let host = peer().await;
    host.net.dial(consumer.addr.clone()).await.unwrap();
    let offer = offer_whole(&catalog, "in.bin", &input).await;
    offer.allow(host.net.peer_id());
    let input_ref = offer.refs()[0].clone();

    // The consumer's first data stream is dropped unread; then it serves.
    let mut incoming = consumer.net.accept_streams(DATA_PROTOCOL).unwrap();
    let tracker = TaskTracker::new();
    let (net, served, t) = (consumer.net.clone(), catalog.clone(), tracker.clone());
    let cancel = consumer.cancel.clone();
    let dropper = tokio::spawn(async move {
        let (_peer, first) = incoming.next().await.expect("a first stream");
        drop(first);
        drop(incoming);
        t.spawn(serve(net, served, t.clone(), cancel));
    });

    let cache = Cache::open(&dir.path().join("cache"), 256 << 20).unwrap();
    let (pinned, obtained) = obtain_input(
        &host.net,
        &cache,
        consumer.net.peer_id(),
        &input_ref,
        limits(),
    )
    .await
    .expect("the input arrives after its first stream was dropped");
    dropper.await.unwrap();
    assert!(matches!(obtained, Obtained::Fetched(_)), "{obtained:?}");
    assert_eq!(
        hash_file(pinned.path()).unwrap().0,
        hash_file(&input).unwrap().0,
        "the bytes that arrived are the input's"
    );
}
