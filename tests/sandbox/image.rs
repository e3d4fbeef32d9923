//! A guest in an image (issue 31): the test builds a small image itself (a
//! static binary of its own compiled here, an `/etc/os-release` of its own),
//! packs it as a docker-archive tarball and as an OCI layout, unpacks it
//! through the image cache and runs it under the supervisor: the guest sees
//! the image's `/etc/os-release`, not the host's, starts in the image's
//! `WorkingDir` with its `Env`, runs its `Entrypoint` with `Cmd` or the
//! arguments given, cannot write the image, and its outputs come back.
//! The image itself is built by `tests/shared/guest_image.rs`, which the
//! `it` binary's pool test of images builds it with too.

use crate::guest_image::{
    docker_archive, oci_archive, probe_image, sha, static_probe, tar_of, IMAGE_OS,
};

use gleaner::guest::{GuestConfig, GuestEvent, GuestImage, GuestSpec, Supervisor, SystemClock};
use gleaner::image::{ImageCache, ImageLimits, UnpackedImage};
use gleaner::model::ids::JobId;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The spec a node builds for a job in `img` with `args` after `--`.
pub fn spec_in(img: &UnpackedImage, args: &[String]) -> GuestSpec {
    GuestSpec {
        argv: img.config.argv(args),
        env: img.config.env.clone(),
        mem_mib: 64,
        cpu_time_limit: Duration::from_secs(60),
        wall_limit: Duration::from_secs(60),
        max_output_bytes: 1 << 20,
        allow_network: false,
        user: None,
        inputs: Vec::new(),
        checkpoint: None,
        image: Some(GuestImage {
            rootfs: img.rootfs.clone(),
            work_dir: PathBuf::from(img.config.working_dir.as_deref().unwrap_or("/work")),
            lease: img.lease.clone(),
        }),
    }
}

pub fn supervisor(data_dir: &Path) -> Supervisor {
    Supervisor::new(
        GuestConfig::new(data_dir),
        Arc::new(SystemClock),
        Arc::new(|_: GuestEvent| {}),
    )
    .unwrap()
}

/// Starts a guest in `img`, which this test process has just unpacked.
/// Other tests of this binary fork guests at the same time, and a child
/// forked while the cache was writing `/bin/probe` holds that write
/// descriptor until its setup closes it (the keeper and init never `exec`),
/// so the probe's `exec` may meet ETXTBSY for a while: seen in 2 of 7 runs
/// of `cargo test --test sandbox image` on a loaded machine. A node starts
/// one guest at a time, after its image is unpacked, so this is the test
/// process's race, not the node's: the start is tried again (a fresh job
/// id each time), for up to 10 s.
pub fn start_unpacked(
    sup: &mut Supervisor,
    img: &UnpackedImage,
    args: &[String],
) -> Result<gleaner::guest::GuestHandle, gleaner::guest::StartError> {
    let mut attempt = 0;
    loop {
        let job = JobId::new(format!("img-{attempt}")).unwrap();
        match sup.start(&job, spec_in(img, args)) {
            Err(gleaner::guest::StartError::Spawn(e))
                if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 100 =>
            {
                eprintln!("start {attempt}: {e}; again in 100 ms");
                std::thread::sleep(Duration::from_millis(100));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Runs the probe image packed by `pack` with `args`; `None` when the
/// kernel refuses the narrow view an image needs (after proving it).
fn run(pack: fn(&[u8], &[u8]) -> Vec<u8>, args: &[String]) -> Option<(String, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    let probe = static_probe(dir.path());
    let (layer, config) = probe_image(&probe, IMAGE_OS);
    let archive = dir.path().join("image.tar");
    std::fs::write(&archive, pack(&layer, &config)).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let cache = ImageCache::open(&data.join("images"), ImageLimits::default()).unwrap();
    let img = cache.unpack(&archive).unwrap();
    let mut sup = supervisor(&data);
    let handle = match start_unpacked(&mut sup, &img, args) {
        Ok(h) => h,
        Err(gleaner::guest::StartError::Image(why)) => {
            assert!(
                !crate::guest_image::view_namespaces_allowed(),
                "the kernel offers the namespaces but the image was refused: {why}"
            );
            eprintln!("SKIP: no narrow view here, so no image: {why}");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    let status = sup.wait_exit(Duration::from_secs(60)).unwrap();
    let out = std::fs::read_to_string(handle.dir.join("stdout")).unwrap_or_default();
    let err = std::fs::read_to_string(handle.dir.join("stderr")).unwrap_or_default();
    eprintln!("guest: {out:?} {err:?} {:?}", status.exit);
    let landed = std::fs::read_to_string(handle.work_dir.join("out.txt")).unwrap_or_default();
    assert!(
        !img.rootfs.join("bin/planted").exists(),
        "the guest wrote into the cache"
    );
    // Kept alive until here: the work dir is in it.
    let _keep = dir;
    Some((out, PathBuf::from(landed)))
}

fn check_sees_the_image(out: &str, landed: &Path) {
    assert!(out.contains("os-release:ID=gleaner-image-test"), "{out}");
    let host = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let host_id = host
        .lines()
        .find(|l| l.starts_with("ID="))
        .unwrap_or("ID=none");
    assert!(
        !out.contains(&format!("os-release:{host_id}")),
        "saw the host's: {out}"
    );
    assert!(out.contains("cwd:/srv\n"), "{out}");
    assert!(out.contains("env:from-image\n"), "{out}");
    assert!(out.contains("write-image:false"), "{out}");
    assert!(out.contains("write-work:true"), "{out}");
    assert!(out.contains("write-tmp:true"), "{out}");
    assert_eq!(landed, Path::new("from the image"), "the output came back");
}

#[test]
fn a_guest_in_a_docker_archive_sees_the_images_os_release_and_runs_its_cmd() {
    let Some((out, landed)) = run(docker_archive, &[]) else {
        return;
    };
    check_sees_the_image(&out, &landed);
    assert!(out.contains("args:[\"default-arg\"]"), "{out}");
}

#[test]
fn a_guest_in_an_oci_layout_sees_the_images_os_release_and_args_replace_cmd() {
    let Some((out, landed)) = run(oci_archive, &["given".to_string()]) else {
        return;
    };
    check_sees_the_image(&out, &landed);
    assert!(out.contains("args:[\"given\"]"), "{out}");
}

/// The figures for docs/images.md (run with `--ignored --nocapture`): the
/// time from `start` to the end of a guest that does nothing, in a cached
/// image and with no image, over many runs; the first use of a 100 MiB
/// image (unpacking it into an empty cache) against finding it; and its
/// first use over loopback through the data layer (transfer, check,
/// unpack, start) against a cached start.
#[test]
#[ignore]
fn measure_image_start_and_first_use() {
    let dir = tempfile::tempdir().unwrap();
    let probe = static_probe(dir.path());
    let (layer, config) = probe_image(&probe, IMAGE_OS);
    let archive = dir.path().join("image.tar");
    std::fs::write(&archive, docker_archive(&layer, &config)).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let cache = ImageCache::open(&data.join("images"), ImageLimits::default()).unwrap();
    let img = cache.unpack(&archive).unwrap();
    let mut sup = supervisor(&data);
    let runs = 20;
    let mut started = 0u32;
    let mut timed = |with_image: bool, n: usize| -> Vec<f64> {
        let mut ms = Vec::new();
        for _ in 0..n {
            started += 1;
            let t = std::time::Instant::now();
            let mut spec = if with_image {
                // A task's start includes finding its image in the cache.
                let img = cache.unpack(&archive).unwrap();
                assert!(img.cached);
                spec_in(&img, &["x".into()])
            } else {
                let mut s = spec_in(&img, &[]);
                s.image = None;
                s.argv = vec!["true".into()];
                s.env = Vec::new();
                s
            };
            spec.wall_limit = Duration::from_secs(30);
            let job = JobId::new(format!("m{started}")).unwrap();
            match sup.start(&job, spec) {
                Ok(_) => {}
                Err(gleaner::guest::StartError::Image(why)) => {
                    eprintln!("SKIP: {why}");
                    return Vec::new();
                }
                Err(e) => panic!("{e}"),
            }
            sup.wait_exit(Duration::from_secs(30)).unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        ms
    };
    let show = |name: &str, ms: &[f64]| {
        if let (Some(lo), Some(hi)) = (ms.first(), ms.last()) {
            eprintln!(
                "{name}: n={} min {lo:.1} ms, median {:.1} ms, p90 {:.1} ms, max {hi:.1} ms",
                ms.len(),
                ms[ms.len() / 2],
                ms[ms.len() * 9 / 10],
            );
        }
    };
    let _ = timed(true, 3);
    let none = timed(false, runs);
    let cached = timed(true, runs);
    show("start to end, no image (host `true`)", &none);
    show("start to end, cached image (its static probe)", &cached);

    // A 100 MiB image: 100 files of 1 MiB (incompressible), one layer,
    // with the probe and its os-release so a guest runs in it.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut members = vec![
        ("bin/".to_string(), Vec::new(), 0o755),
        (
            "bin/probe".to_string(),
            std::fs::read(&probe).unwrap(),
            0o755,
        ),
        ("etc/".to_string(), Vec::new(), 0o755),
        (
            "etc/os-release".to_string(),
            IMAGE_OS.as_bytes().to_vec(),
            0o644,
        ),
        ("srv/".to_string(), Vec::new(), 0o755),
    ];
    for i in 0..100 {
        let mut bytes = vec![0u8; 1 << 20];
        for chunk in bytes.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
        }
        members.push((format!("data/f{i}"), bytes, 0o644));
    }
    let refs: Vec<(&str, Vec<u8>, u32)> = members
        .iter()
        .map(|(n, b, m)| (n.as_str(), b.clone(), *m))
        .collect();
    let big_layer = tar_of(&refs);
    let (_, big_config) = probe_image(&probe, IMAGE_OS);
    let mut cfg: serde_json::Value = serde_json::from_slice(&big_config).unwrap();
    cfg["rootfs"]["diff_ids"] = serde_json::json!([format!("sha256:{}", sha(&big_layer))]);
    let big_config = serde_json::to_vec(&cfg).unwrap();
    let big = dir.path().join("big.tar");
    std::fs::write(&big, docker_archive(&big_layer, &big_config)).unwrap();
    let size = std::fs::metadata(&big).unwrap().len();
    let fresh = ImageCache::open(&dir.path().join("fresh"), ImageLimits::default()).unwrap();
    let t = std::time::Instant::now();
    assert!(!fresh.unpack(&big).unwrap().cached);
    let first = t.elapsed();
    let t = std::time::Instant::now();
    assert!(fresh.unpack(&big).unwrap().cached);
    let again = t.elapsed();
    eprintln!(
        "100 MiB image ({size} bytes, docker-archive, 1 layer, 100 files): first use (check and unpack) {:.0} ms, found in the cache {:.1} ms",
        first.as_secs_f64() * 1e3,
        again.as_secs_f64() * 1e3
    );

    // Its first use on a host over loopback, as a pool job has it: the
    // consumer offers the archive from its catalog (hashing it), the host
    // reads it over /gleaner/data/1 (each 1 MiB chunk checked against its
    // BLAKE3 value), checks and unpacks it into an empty image cache and
    // runs the guest in it; against a start that finds it unpacked.
    let rt = tokio::runtime::Runtime::new().unwrap();
    for round in 0..3 {
        let host_dir = dir.path().join(format!("host{round}"));
        let t = std::time::Instant::now();
        let (offered, fetched) = rt.block_on(over_loopback(&big, &host_dir));
        let transfer = t.elapsed() - offered;
        let host_images =
            ImageCache::open(&host_dir.join("images"), ImageLimits::default()).unwrap();
        let t = std::time::Instant::now();
        let img = host_images.unpack(&fetched).unwrap();
        assert!(!img.cached);
        let unpack = t.elapsed();
        let t = std::time::Instant::now();
        let run = run_in(&mut sup, &img, &format!("big{round}"));
        let start = t.elapsed();
        assert!(run.contains("os-release:ID=gleaner-image-test"), "{run}");
        let t = std::time::Instant::now();
        let found = host_images.cached(&img.id).unwrap();
        let run = run_in(&mut sup, &found, &format!("bigc{round}"));
        let cached_start = t.elapsed();
        assert!(run.contains("os-release:ID=gleaner-image-test"), "{run}");
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        eprintln!(
            "100 MiB image over loopback, round {round}: consumer hashes it {:.0} ms; host: transfer (verified per chunk) {:.0} ms, check and unpack {:.0} ms, start to end {:.0} ms: first use {:.0} ms; cached start (find it, start to end) {:.0} ms",
            ms(offered),
            ms(transfer),
            ms(unpack),
            ms(start),
            ms(transfer + unpack + start),
            ms(cached_start),
        );
    }
}

/// Runs the probe in `img` to its end; its stdout.
fn run_in(sup: &mut Supervisor, img: &UnpackedImage, job: &str) -> String {
    let mut spec = spec_in(img, &["x".into()]);
    spec.wall_limit = Duration::from_secs(30);
    let handle = sup.start(&JobId::new(job).unwrap(), spec).unwrap();
    sup.wait_exit(Duration::from_secs(30)).unwrap();
    std::fs::read_to_string(handle.dir.join("stdout")).unwrap_or_default()
}

/// One swarm on 127.0.0.1 for [`over_loopback`].
async fn loopback_peer(
    cancel: &tokio_util::sync::CancellationToken,
) -> (gleaner::net::NetHandle, libp2p::Multiaddr) {
    let pool = gleaner::model::ids::PoolName::new("image-test").unwrap();
    let (net, mut events, event_loop) = gleaner::net::start(
        libp2p::identity::Keypair::generate_ed25519(),
        gleaner::net::NetConfig::loopback(&pool),
        cancel.clone(),
    )
    .unwrap();
    tokio::spawn(event_loop.run());
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    for _ in 0..50 {
        if let Some(a) = net.listen_addrs().await.unwrap().into_iter().next() {
            let addr = a.with(libp2p::multiaddr::Protocol::P2p(net.peer_id()));
            return (net, addr);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the swarm does not listen");
}

/// A consumer offers `archive` from its catalog and a host on loopback
/// reads it into its input cache in `host_dir`, as a pool job's image
/// crosses: how long the offer (hashing) took, and the host's copy.
async fn over_loopback(archive: &Path, host_dir: &Path) -> (Duration, PathBuf) {
    use gleaner::data::{obtain_input, serve, Cache, Catalog, FetchLimits, InputSpec, Obtained};
    let cancel = tokio_util::sync::CancellationToken::new();
    let (consumer, consumer_addr) = loopback_peer(&cancel).await;
    let (host, _) = loopback_peer(&cancel).await;
    let catalog = Catalog::new();
    let tracker = tokio_util::task::TaskTracker::new();
    tracker.spawn(serve(
        consumer.clone(),
        catalog.clone(),
        tracker.clone(),
        cancel.clone(),
    ));
    host.dial(consumer_addr).await.unwrap();
    let t = std::time::Instant::now();
    let offer = catalog
        .offer(&[InputSpec {
            path: "big.tar".into(),
            local: archive.to_path_buf(),
            part: None,
        }])
        .await
        .unwrap();
    let offered = t.elapsed();
    offer.allow(host.peer_id());
    let cache = Cache::open(&host_dir.join("cache"), 1 << 30).unwrap();
    let (pinned, how) = obtain_input(
        &host,
        &cache,
        consumer.peer_id(),
        &offer.refs()[0],
        FetchLimits::default(),
    )
    .await
    .unwrap();
    assert!(matches!(how, Obtained::Fetched(_)), "{how:?}");
    let kept = host_dir.join("big.tar");
    std::fs::copy(pinned.path(), &kept).unwrap();
    cancel.cancel();
    (offered, kept)
}
