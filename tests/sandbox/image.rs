//! A guest in an image (issue 31): the test builds a small image itself (a
//! static binary of its own compiled here, an `/etc/os-release` of its own),
//! packs it as a docker-archive tarball and as an OCI layout, unpacks it
//! through the image cache and runs it under the supervisor: the guest sees
//! the image's `/etc/os-release`, not the host's, starts in the image's
//! `WorkingDir` with its `Env`, runs its `Entrypoint` with `Cmd` or the
//! arguments given, cannot write the image, and its outputs come back.

use gleaner::guest::{GuestConfig, GuestEvent, GuestImage, GuestSpec, Supervisor, SystemClock};
use gleaner::image::{ImageCache, ImageLimits, UnpackedImage};
use gleaner::model::ids::JobId;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The guest program: prints what it sees, one `key:value` a line.
const PROBE: &str = r#"
fn main() {
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_else(|e| format!("ERR {e}\n"));
    print!("os-release:{os}");
    let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default();
    println!("cwd:{cwd}");
    println!("env:{}", std::env::var("IMAGE_VAR").unwrap_or_default());
    println!("args:{:?}", std::env::args().skip(1).collect::<Vec<_>>());
    println!("write-image:{}", std::fs::write("/bin/planted", b"x").is_ok());
    println!("write-work:{}", std::fs::write("out.txt", b"from the image").is_ok());
    println!("write-tmp:{}", std::fs::write("/tmp/t", b"x").is_ok());
}
"#;

/// Compiles [`PROBE`] statically with this toolchain's `rustc`.
pub fn static_probe(dir: &Path) -> PathBuf {
    static_binary(dir, "probe", PROBE)
}

/// Compiles `source` statically into `dir/name` with this toolchain's
/// `rustc`: a program an image can hold without a libc of its own.
pub fn static_binary(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.rs"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let status = Command::new(rustc)
        .args(["-O", "-C", "target-feature=+crt-static", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "cannot compile the static {name}");
    out
}

pub fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A tar of `members` (name, bytes, mode; a name ending in `/` a directory).
pub fn tar_of(members: &[(&str, Vec<u8>, u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data, mode) in members {
        let mut h = tar::Header::new_gnu();
        if name.ends_with('/') {
            h.set_entry_type(tar::EntryType::Directory);
        }
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

/// The image's one layer and its config.
pub fn probe_image(probe: &Path, os_release: &str) -> (Vec<u8>, Vec<u8>) {
    let layer = tar_of(&[
        ("bin/", Vec::new(), 0o755),
        ("bin/probe", std::fs::read(probe).unwrap(), 0o755),
        ("etc/", Vec::new(), 0o755),
        ("etc/os-release", os_release.as_bytes().to_vec(), 0o644),
        ("srv/", Vec::new(), 0o755),
    ]);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {
            "Env": ["PATH=/bin", "IMAGE_VAR=from-image"],
            "Entrypoint": ["/bin/probe"],
            "Cmd": ["default-arg"],
            "WorkingDir": "/srv",
            "User": "1000",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha(&layer))]},
    }))
    .unwrap();
    (layer, config)
}

pub fn docker_archive(layer: &[u8], config: &[u8]) -> Vec<u8> {
    let manifest = serde_json::json!([{
        "Config": format!("{}.json", sha(config)),
        "RepoTags": ["probe:1"],
        "Layers": ["l1/layer.tar"],
    }]);
    tar_of(&[
        (&format!("{}.json", sha(config)), config.to_vec(), 0o644),
        ("l1/layer.tar", layer.to_vec(), 0o644),
        (
            "manifest.json",
            serde_json::to_vec(&manifest).unwrap(),
            0o644,
        ),
    ])
}

pub fn oci_archive(layer: &[u8], config: &[u8]) -> Vec<u8> {
    let desc = |b: &[u8], t: &str| serde_json::json!({"mediaType": t, "digest": format!("sha256:{}", sha(b)), "size": b.len()});
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "config": desc(config, "application/vnd.oci.image.config.v1+json"),
        "layers": [desc(layer, "application/vnd.oci.image.layer.v1.tar")],
    }))
    .unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [desc(&manifest, "application/vnd.oci.image.manifest.v1+json")]});
    tar_of(&[
        (
            "oci-layout",
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
            0o644,
        ),
        ("index.json", serde_json::to_vec(&index).unwrap(), 0o644),
        (
            &format!("blobs/sha256/{}", sha(&manifest)),
            manifest.clone(),
            0o644,
        ),
        (
            &format!("blobs/sha256/{}", sha(config)),
            config.to_vec(),
            0o644,
        ),
        (
            &format!("blobs/sha256/{}", sha(layer)),
            layer.to_vec(),
            0o644,
        ),
    ])
}

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

const IMAGE_OS: &str = "ID=gleaner-image-test\nPRETTY_NAME=\"Gleaner test image\"\n";

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
                !super::containment::view_namespaces_allowed(),
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
/// image and with no image, over many runs; and the first use of a
/// 100 MiB image (unpacking it into an empty cache) against finding it.
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

    // A 100 MiB image: 100 files of 1 MiB (incompressible), one layer.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut members = Vec::new();
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
}
