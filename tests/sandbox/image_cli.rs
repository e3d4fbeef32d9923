//! `gleaner run-local --image FILE -- cat /etc/os-release` through the real
//! binary and a real node (issue 31): the command prints the image's
//! `/etc/os-release`, not the host's. The image is built here with the
//! image tests' helpers (`image.rs`) around a static `cat` of the test's
//! own, and holds a setuid `bin/su` as Debian's images do: a node with the
//! default `[guest] image_setuid` refuses it naming the file, one with
//! "strip" runs it. `gleaner images list|prune` then see the cached image,
//! through the node and from the stopped node's data dir.

use crate::guest_image::{docker_archive, sha, static_binary, tar_of};
use crate::node_support::NodeFixture;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A `cat` without libc: each argument's bytes to stdout.
const CAT: &str = r#"
use std::io::Write;
fn main() {
    let mut code = 0;
    for path in std::env::args().skip(1) {
        match std::fs::read(&path) {
            Ok(bytes) => { let _ = std::io::stdout().write_all(&bytes); }
            Err(e) => { eprintln!("cat: {path}: {e}"); code = 1; }
        }
    }
    std::process::exit(code);
}
"#;

const IMAGE_OS: &str = "ID=gleaner-cli-test\nPRETTY_NAME=\"Gleaner CLI test image\"\n";

/// A docker-archive holding the static `cat`, a setuid `bin/su` and an
/// `/etc/os-release` of its own; returns its path and its digest.
fn cat_image(dir: &Path) -> (PathBuf, String) {
    let cat = static_binary(dir, "cat", CAT);
    let layer = tar_of(&[
        ("bin/", Vec::new(), 0o755),
        ("bin/cat", std::fs::read(cat).unwrap(), 0o755),
        ("bin/su", b"#!not really su\n".to_vec(), 0o4755),
        ("etc/", Vec::new(), 0o755),
        ("etc/os-release", IMAGE_OS.as_bytes().to_vec(), 0o644),
    ]);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha(&layer))]},
    }))
    .unwrap();
    let path = dir.join("cat-image.tar");
    std::fs::write(&path, docker_archive(&layer, &config)).unwrap();
    (path, format!("sha256:{}", sha(&config)))
}

/// A node on no network and no dashboard, with `guest` in `[guest]`.
fn config(guest: &str) -> String {
    format!(
        "[net]\nenabled = false\n\n[ui]\nlisten = \"\"\n\n[monitor]\nmin_period_secs = 1\nmax_period_secs = 1\nextra_sample_chance = 0.0\n\n[guest]\n{guest}"
    )
}

fn run_cat(node: &NodeFixture, image: &Path) -> Output {
    node.gleaner()
        .arg("run-local")
        .arg("--image")
        .arg(image)
        .args(["--", "cat", "/etc/os-release"])
        .output()
        .unwrap()
}

fn images(node: &NodeFixture, args: &[&str]) -> Value {
    let mut all = vec!["images"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(&node.run_ok(&all)).unwrap()
}

#[test]
fn run_local_with_an_image_prints_the_images_os_release_and_images_lists_and_prunes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (image, digest) = cat_image(dir.path());

    // The default refuses the setuid file, by name, and keeps nothing.
    let mut node = NodeFixture::new(&config(""), Some("0 5 8000\n"));
    node.start();
    let refused = run_cat(&node, &image);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    for word in ["bin/su", "setuid", "image_setuid"] {
        assert!(err.contains(word), "{err:?} lacks {word:?}");
    }
    assert_eq!(images(&node, &["list"])["images"], serde_json::json!([]));
    assert_eq!(node.stop().code(), Some(0));

    // With "strip" the same image runs and the guest sees its os-release.
    std::fs::write(
        node.dir.join("config.toml"),
        config("image_setuid = \"strip\"\n"),
    )
    .unwrap();
    node.start();
    let ran = run_cat(&node, &image);
    let (out, err) = (
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr),
    );
    if !ran.status.success() && err.contains("narrow view") {
        assert!(
            !crate::guest_image::view_namespaces_allowed(),
            "the kernel offers the namespaces but the image was refused: {err}\nnode log:\n{}",
            node.log()
        );
        eprintln!("SKIP: no narrow view here, so no image: {err}");
        return;
    }
    assert!(
        ran.status.success(),
        "run-local failed: {err}\nnode log:\n{}",
        node.log()
    );
    assert_eq!(out, IMAGE_OS, "the image's os-release, nothing else");
    let host = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    assert_ne!(out, host);

    // The image is cached, no longer in use; a prune that keeps 1 GiB
    // keeps it.
    let listed = images(&node, &["list"]);
    let cached = listed["images"].as_array().unwrap();
    assert_eq!(cached.len(), 1, "{listed}");
    assert_eq!(cached[0]["digest"], digest.as_str());
    assert_eq!(cached[0]["in_use"], false);
    let bytes = cached[0]["bytes"].as_u64().unwrap();
    assert!(bytes > IMAGE_OS.len() as u64, "{listed}");
    assert_eq!(listed["used_bytes"], bytes);
    let kept = images(&node, &["prune", "--keep-mib", "1024"]);
    assert_eq!(kept["removed"], serde_json::json!([]), "{kept}");
    assert_eq!(node.stop().code(), Some(0));

    // With the node stopped, the same commands read its data dir.
    let offline = images(&node, &["list"]);
    assert_eq!(offline["images"][0]["digest"], digest.as_str());
    let pruned = images(&node, &["prune"]);
    assert_eq!(pruned["removed"][0]["digest"], digest.as_str(), "{pruned}");
    assert_eq!(pruned["freed_bytes"], bytes);
    assert_eq!(pruned["left"]["images"], serde_json::json!([]));
    let text = node.run_ok(&["images", "list"]);
    assert!(text.contains("0 images"), "{text}");
}
