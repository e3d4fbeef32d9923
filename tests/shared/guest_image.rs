//! A guest image the tests build themselves (issue 31), shared by the
//! `sandbox` and `it` binaries (each includes this file by `#[path]`): a
//! static probe program of its own compiled with this toolchain's `rustc`,
//! an `/etc/os-release` of its own, packed as a docker-archive tarball or
//! an OCI layout; and the proof that the kernel refuses the namespaces an
//! image needs, which a test must give before it skips.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `/etc/os-release` of the probe image.
pub const IMAGE_OS: &str = "ID=gleaner-image-test\nPRETTY_NAME=\"Gleaner test image\"\n";

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

/// The proof a namespace layer is absent: `unshare` refuses an unprivileged
/// user the user, mount and PID namespaces (run as nobody when we are root).
pub fn view_namespaces_allowed() -> bool {
    let mut cmd = if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "unshare",
        ]);
        c
    } else {
        Command::new("unshare")
    };
    cmd.args(["-U", "-m", "-p", "-f", "--map-current-user", "true"])
        .status()
        .is_ok_and(|s| s.success())
}
