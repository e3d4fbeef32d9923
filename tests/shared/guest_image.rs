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
    let config = probe_config(&[&layer]);
    (layer, config)
}

/// The probe image in two layers, bottom first, and its config: a base
/// layer (the probe and the directories: the same bytes for every image
/// made from one probe) and a top layer holding only `/etc/os-release`. Two
/// such images with different os-release files share their base layer.
pub fn layered_probe_image(probe: &Path, os_release: &str) -> (Vec<Vec<u8>>, Vec<u8>) {
    let base = tar_of(&[
        ("bin/", Vec::new(), 0o755),
        ("bin/probe", std::fs::read(probe).unwrap(), 0o755),
        ("etc/", Vec::new(), 0o755),
        ("srv/", Vec::new(), 0o755),
    ]);
    let top = tar_of(&[("etc/os-release", os_release.as_bytes().to_vec(), 0o644)]);
    let config = probe_config(&[&base, &top]);
    (vec![base, top], config)
}

/// The probe's config over `layers` (bottom first): its Env, Entrypoint,
/// Cmd, WorkingDir and User, and each layer's diff id.
fn probe_config(layers: &[&[u8]]) -> Vec<u8> {
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|l| format!("sha256:{}", sha(l)))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {
            "Env": ["PATH=/bin", "IMAGE_VAR=from-image"],
            "Entrypoint": ["/bin/probe"],
            "Cmd": ["default-arg"],
            "WorkingDir": "/srv",
            "User": "1000",
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap()
}

pub fn docker_archive(layer: &[u8], config: &[u8]) -> Vec<u8> {
    docker_archive_of(&[layer.to_vec()], config)
}

/// A docker-archive of `layers` (bottom first) and `config`.
pub fn docker_archive_of(layers: &[Vec<u8>], config: &[u8]) -> Vec<u8> {
    let names: Vec<String> = (1..=layers.len())
        .map(|i| format!("l{i}/layer.tar"))
        .collect();
    let manifest = serde_json::json!([{
        "Config": format!("{}.json", sha(config)),
        "RepoTags": ["probe:1"],
        "Layers": names,
    }]);
    let config_name = format!("{}.json", sha(config));
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let mut members: Vec<(&str, Vec<u8>, u32)> = vec![(&config_name, config.to_vec(), 0o644)];
    for (name, layer) in names.iter().zip(layers) {
        members.push((name, layer.clone(), 0o644));
    }
    members.push(("manifest.json", manifest, 0o644));
    tar_of(&members)
}

pub fn oci_archive(layer: &[u8], config: &[u8]) -> Vec<u8> {
    oci_archive_of(&[layer.to_vec()], config)
}

/// An OCI image layout tarball of `layers` (bottom first) and `config`.
pub fn oci_archive_of(layers: &[Vec<u8>], config: &[u8]) -> Vec<u8> {
    let desc = |b: &[u8], t: &str| serde_json::json!({"mediaType": t, "digest": format!("sha256:{}", sha(b)), "size": b.len()});
    let layer_descs: Vec<_> = layers
        .iter()
        .map(|l| desc(l, "application/vnd.oci.image.layer.v1.tar"))
        .collect();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "config": desc(config, "application/vnd.oci.image.config.v1+json"),
        "layers": layer_descs,
    }))
    .unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [desc(&manifest, "application/vnd.oci.image.manifest.v1+json")]});
    let blob = |b: &[u8]| format!("blobs/sha256/{}", sha(b));
    let names: Vec<String> = [&manifest[..], config]
        .into_iter()
        .chain(layers.iter().map(|l| &l[..]))
        .map(blob)
        .collect();
    let mut members: Vec<(&str, Vec<u8>, u32)> = vec![
        (
            "oci-layout",
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
            0o644,
        ),
        ("index.json", serde_json::to_vec(&index).unwrap(), 0o644),
        (&names[0], manifest.clone(), 0o644),
        (&names[1], config.to_vec(), 0o644),
    ];
    for (name, layer) in names[2..].iter().zip(layers) {
        members.push((name, layer.clone(), 0o644));
    }
    tar_of(&members)
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
