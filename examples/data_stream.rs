//! Streams one large input (1 GiB by default) from a consumer to a host over
//! `/gleaner/data/1` on 127.0.0.1 — two real swarms (TCP + Noise + Yamux) in
//! this process, the host verifying every 1 MiB chunk against the file's
//! BLAKE3 tree and writing it into its cache — and, in the same run, copies
//! the same file over a plain TCP socket on the same loopback (file → socket
//! → file, the same disk work without encryption, multiplexing or hashing).
//! Prints both rates and the process's peak RSS (VmHWM), which covers both
//! sides of the transfer.
//!
//!     cargo run --release --example data_stream [-- MIB]
//!
//! The file lives in a temporary directory under `$TMPDIR` (about 3× its size
//! on disk at the peak: the file, the cache's copy, the TCP copy).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use gleaner::data::{obtain_input, serve, Cache, Catalog, FetchLimits, InputSpec};
use gleaner::net::{start, NetConfig, NetHandle};
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::Multiaddr;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn write_input(path: &Path, mib: u64) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for b in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&block)?;
    }
    f.sync_all()
}

async fn peer(cancel: &CancellationToken) -> (NetHandle, Multiaddr) {
    let (net, mut events, event_loop) = start(
        Keypair::generate_ed25519(),
        NetConfig::loopback(
            &gleaner::model::ids::PoolName::new("data-bench").expect("a valid name"),
        ),
        cancel.clone(),
    )
    .expect("swarm");
    tokio::spawn(event_loop.run());
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    loop {
        if let Some(a) = net.listen_addrs().await.expect("net").into_iter().next() {
            let addr = a.with(Protocol::P2p(net.peer_id()));
            return (net, addr);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// file → 127.0.0.1 socket → file, 1 MiB buffers, synced like the cache's copy.
fn tcp_copy(source: &Path, dest: &Path) -> std::io::Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let dest = dest.to_path_buf();
    let started = Instant::now();
    let receiver = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut sock, _) = listener.accept()?;
        let mut out = std::fs::File::create(&dest)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = sock.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n])?;
        }
        out.sync_all()
    });
    let mut sock = TcpStream::connect(addr)?;
    sock.set_nodelay(true)?;
    let mut input = std::fs::File::open(source)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sock.write_all(&buf[..n])?;
    }
    drop(sock);
    receiver
        .join()
        .map_err(|_| std::io::Error::other("receiver panicked"))??;
    Ok(started.elapsed())
}

fn main() -> anyhow::Result<()> {
    let mib: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1024);
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("input.bin");
    write_input(&input, mib)?;
    let bytes = mib << 20;
    let rate = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e6;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (gleaner_time, hash_time) = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let (consumer, consumer_addr) = peer(&cancel).await;
        let (host, _) = peer(&cancel).await;
        let catalog = Catalog::new();
        let tracker = TaskTracker::new();
        tracker.spawn(serve(
            consumer.clone(),
            catalog.clone(),
            tracker.clone(),
            cancel.clone(),
        ));
        host.dial(consumer_addr).await?;
        let hashed = Instant::now();
        let offer = catalog
            .offer(&[InputSpec {
                path: "input.bin".into(),
                local: input.clone(),
                part: None,
            }])
            .await
            .map_err(anyhow::Error::msg)?;
        let hash_time = hashed.elapsed();
        offer.allow(host.peer_id());
        let cache = Cache::open(&dir.path().join("cache"), bytes * 2)?;
        let started = Instant::now();
        let (pinned, _) = obtain_input(
            &host,
            &cache,
            consumer.peer_id(),
            &offer.refs()[0],
            FetchLimits::default(),
        )
        .await
        .map_err(anyhow::Error::msg)?;
        let elapsed = started.elapsed();
        anyhow::ensure!(std::fs::metadata(pinned.path())?.len() == bytes);
        drop(pinned);
        cancel.cancel();
        anyhow::Ok((elapsed, hash_time))
    })?;
    let tcp_time = tcp_copy(&input, &dir.path().join("tcp-copy.bin"))?;
    let hwm_mib = vm_hwm_kib() as f64 / 1024.0;

    println!("input: {mib} MiB on loopback (127.0.0.1), 1 MiB chunks");
    println!(
        "consumer hashing (BLAKE3 tree, once per file): {:.0} MB/s",
        rate(hash_time)
    );
    println!(
        "gleaner /gleaner/data/1 (Noise+Yamux, verified, to the cache): {:.0} MB/s ({:.2} s)",
        rate(gleaner_time),
        gleaner_time.as_secs_f64()
    );
    println!(
        "plain TCP copy, file -> socket -> file:                      {:.0} MB/s ({:.2} s)",
        rate(tcp_time),
        tcp_time.as_secs_f64()
    );
    println!(
        "ratio: {:.2} of plain TCP (goal: at least 0.5)",
        tcp_time.as_secs_f64() / gleaner_time.as_secs_f64()
    );
    println!(
        "peak RSS of this process (both nodes), VmHWM: {hwm_mib:.1} MiB (goal: under 100 MiB)"
    );
    Ok(())
}
