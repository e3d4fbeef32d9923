//! The image reader against images built here with the tar crate: the three
//! formats, whiteouts, the cache, and one test per hostile class, each
//! checking the refusal names the layer and the entry and that nothing was
//! written outside the cache (nor left in it).

use super::*;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;

/// One entry of a test layer; names and link targets go into the header
/// raw, so hostile ones (absolute, `..`) can be written.
pub enum E<'a> {
    File(&'a str, &'a [u8], u32),
    Dir(&'a str),
    Sym(&'a str, &'a str),
    Hard(&'a str, &'a str),
    Fifo(&'a str),
    Char(&'a str),
}

fn header(name: &str, kind: tar::EntryType, size: u64, mode: u32, link: &str) -> tar::Header {
    let mut h = tar::Header::new_old();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_mtime(0);
    let old = h.as_old_mut();
    old.name[..name.len()].copy_from_slice(name.as_bytes());
    old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.set_cksum();
    h
}

/// A layer tar holding `entries` in order.
pub fn layer(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let (h, data): (tar::Header, &[u8]) = match e {
            E::File(n, d, mode) => (
                header(n, tar::EntryType::Regular, d.len() as u64, *mode, ""),
                d,
            ),
            E::Dir(n) => (header(n, tar::EntryType::Directory, 0, 0o755, ""), &[]),
            E::Sym(n, t) => (header(n, tar::EntryType::Symlink, 0, 0o777, t), &[]),
            E::Hard(n, t) => (header(n, tar::EntryType::Link, 0, 0o644, t), &[]),
            E::Fifo(n) => (header(n, tar::EntryType::Fifo, 0, 0o644, ""), &[]),
            E::Char(n) => (header(n, tar::EntryType::Char, 0, 0o644, ""), &[]),
        };
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

pub fn sha(bytes: &[u8]) -> String {
    super::stream::hex(&Sha256::digest(bytes))
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    g.write_all(bytes).unwrap();
    g.finish().unwrap()
}

fn outer(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

/// An image config with `env`, `cmd` and the diff ids of `layers`.
pub fn config(layers: &[Vec<u8>], env: &[&str], cmd: &[&str]) -> Vec<u8> {
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|l| format!("sha256:{}", sha(l)))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": env, "Cmd": cmd, "WorkingDir": "/srv", "User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap()
}

/// A `docker save` archive of uncompressed `layers` with `config`.
pub fn docker_archive(layers: &[Vec<u8>], config: &[u8]) -> Vec<u8> {
    let mut members = vec![(format!("{}.json", sha(config)), config.to_vec())];
    let mut names = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        names.push(format!("{i}/layer.tar"));
        members.push((format!("{i}/layer.tar"), l.clone()));
    }
    let manifest = serde_json::json!([{"Config": format!("{}.json", sha(config)), "RepoTags": ["t:1"], "Layers": names}]);
    members.push((
        "manifest.json".into(),
        serde_json::to_vec(&manifest).unwrap(),
    ));
    outer(&members)
}

/// An OCI layout archive of `blobs` (stored as given, e.g. gzipped) with
/// `config`; `sizes` overrides the descriptor sizes when given.
pub fn oci_archive(blobs: &[Vec<u8>], config: &[u8], sizes: Option<&[u64]>) -> Vec<u8> {
    let desc = |b: &[u8], t: &str| serde_json::json!({"mediaType": t, "digest": format!("sha256:{}", sha(b)), "size": b.len()});
    let mut layers = Vec::new();
    let mut members = vec![
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        (format!("blobs/sha256/{}", sha(config)), config.to_vec()),
    ];
    for (i, b) in blobs.iter().enumerate() {
        let mut d = desc(b, "application/vnd.oci.image.layer.v1.tar+gzip");
        if let Some(s) = sizes {
            d["size"] = s[i].into();
        }
        layers.push(d);
        members.push((format!("blobs/sha256/{}", sha(b)), b.clone()));
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "config": desc(config, "application/vnd.oci.image.config.v1+json"),
        "layers": layers,
    }))
    .unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [desc(&manifest, "application/vnd.oci.image.manifest.v1+json")]});
    members.push((format!("blobs/sha256/{}", sha(&manifest)), manifest));
    members.push(("index.json".into(), serde_json::to_vec(&index).unwrap()));
    outer(&members)
}

/// A scratch place: the archive and `outside/` (with `precious`) beside
/// the cache, so a test can see nothing outside the cache was touched.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("outside")).unwrap();
        std::fs::write(dir.path().join("outside/precious"), b"keep").unwrap();
        Place { dir }
    }
    fn outside(&self) -> String {
        self.dir.path().join("outside").display().to_string()
    }
    fn cache(&self, limits: ImageLimits) -> ImageCache {
        ImageCache::open(&self.dir.path().join("cache"), limits).unwrap()
    }
    fn unpack(&self, archive: &[u8], limits: ImageLimits) -> Result<UnpackedImage, ImageError> {
        let path = self.dir.path().join("image.tar");
        std::fs::write(&path, archive).unwrap();
        self.cache(limits).unpack(&path)
    }
    /// Refused, the message holding each of `words`; nothing written
    /// outside the cache and nothing left in it.
    fn refused(&self, archive: &[u8], limits: ImageLimits, words: &[&str]) {
        let err = self.unpack(archive, limits).unwrap_err().to_string();
        for w in words {
            assert!(err.contains(w), "{err:?} lacks {w:?}");
        }
        let mut top: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        top.sort();
        assert_eq!(top, ["cache", "image.tar", "outside"], "{err}");
        let outside: Vec<_> = std::fs::read_dir(self.dir.path().join("outside"))
            .unwrap()
            .collect();
        assert_eq!(outside.len(), 1, "something was written outside: {err}");
        assert_eq!(
            std::fs::read(self.dir.path().join("outside/precious")).unwrap(),
            b"keep"
        );
        let cache: Vec<_> = std::fs::read_dir(self.dir.path().join("cache"))
            .unwrap()
            .collect();
        assert_eq!(cache.len(), 1, "only .tmp stays in the cache: {err}");
        assert_eq!(
            std::fs::read_dir(self.dir.path().join("cache/.tmp"))
                .unwrap()
                .count(),
            0
        );
    }
}

/// Two layers with whiteouts, links and a file the upper one replaces.
pub fn two_layers() -> Vec<Vec<u8>> {
    vec![
        layer(&[
            E::Dir("etc/"),
            E::File("etc/os-release", b"ID=lower\n", 0o644),
            E::File("etc/gone", b"x", 0o644),
            E::Dir("d/"),
            E::File("d/lower", b"x", 0o644),
            E::File("bin/tool", b"#!", 0o755),
            E::Sym("bin/sh", "/bin/tool"),
        ]),
        layer(&[
            E::File("etc/.wh.gone", b"", 0o644),
            E::File("d/.wh..wh..opq", b"", 0o644),
            E::File("d/upper", b"y", 0o644),
            E::File("etc/os-release", b"ID=gleaner-test\n", 0o644),
            E::Hard("etc/os-release.link", "etc/os-release"),
        ]),
    ]
}

/// What [`two_layers`] with the config `A=1`, `/bin/tool` unpack to.
pub fn check_two_layers(img: &UnpackedImage) {
    let r = &img.rootfs;
    assert_eq!(
        std::fs::read(r.join("etc/os-release")).unwrap(),
        b"ID=gleaner-test\n"
    );
    assert_eq!(
        std::fs::read(r.join("etc/os-release.link")).unwrap(),
        b"ID=gleaner-test\n"
    );
    assert!(
        !r.join("etc/gone").exists(),
        "the whiteout removed the lower file"
    );
    let d: Vec<_> = std::fs::read_dir(r.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        d,
        ["upper"],
        "the opaque whiteout emptied d of the lower layer"
    );
    assert_eq!(
        std::fs::read_link(r.join("bin/sh")).unwrap(),
        Path::new("/bin/tool")
    );
    assert_eq!(img.config.env, [("A".to_string(), "1".to_string())]);
    assert_eq!(img.config.cmd, ["/bin/tool"]);
    assert_eq!(img.config.working_dir.as_deref(), Some("/srv"));
}

#[test]
fn a_docker_archive_unpacks_with_whiteouts_and_its_config_and_is_cached_by_id() {
    let p = Place::new();
    let layers = two_layers();
    let cfg = config(&layers, &["A=1"], &["/bin/tool"]);
    let img = p
        .unpack(&docker_archive(&layers, &cfg), ImageLimits::default())
        .unwrap();
    assert!(!img.cached);
    assert_eq!(img.id.hex(), sha(&cfg));
    check_two_layers(&img);
    let again = p
        .unpack(&docker_archive(&layers, &cfg), ImageLimits::default())
        .unwrap();
    assert!(again.cached);
    assert_eq!(again.config, img.config);
}

#[test]
fn an_oci_layout_with_gzipped_layers_unpacks_to_the_same_image_id() {
    let p = Place::new();
    let layers = two_layers();
    let cfg = config(&layers, &["A=1"], &["/bin/tool"]);
    let blobs: Vec<Vec<u8>> = layers.iter().map(|l| gzip(l)).collect();
    let img = p
        .unpack(&oci_archive(&blobs, &cfg, None), ImageLimits::default())
        .unwrap();
    assert_eq!(
        img.id.hex(),
        sha(&cfg),
        "the id is the config's digest in both formats"
    );
    check_two_layers(&img);
}

#[test]
fn a_plain_rootfs_tar_is_one_layer_named_by_its_digest() {
    let p = Place::new();
    let tar = layer(&[E::File("etc/os-release", b"ID=plain\n", 0o644)]);
    let img = p.unpack(&tar, ImageLimits::default()).unwrap();
    assert_eq!(img.id.hex(), sha(&tar));
    assert_eq!(
        std::fs::read(img.rootfs.join("etc/os-release")).unwrap(),
        b"ID=plain\n"
    );
    assert_eq!(img.config, ImageConfig::default());
}

#[test]
fn absolute_and_dotdot_paths_are_refused_by_name() {
    let p = Place::new();
    p.refused(
        &layer(&[E::File("/etc/evil", b"x", 0o644)]),
        ImageLimits::default(),
        &["layer 1", "\"/etc/evil\"", "absolute"],
    );
    let p = Place::new();
    p.refused(
        &layer(&[E::File("../outside/evil", b"x", 0o644)]),
        ImageLimits::default(),
        &["\"../outside/evil\"", "'..'"],
    );
}

#[test]
fn links_pointing_out_of_the_root_are_refused_and_never_followed() {
    let p = Place::new();
    p.refused(
        &layer(&[E::Sym("a/evil", "../../outside")]),
        ImageLimits::default(),
        &["\"a/evil\"", "points out"],
    );
    // An absolute link is the image's own (read in the guest's root), but
    // nothing is ever written through it on the host.
    let p = Place::new();
    let out = p.outside();
    let tar = layer(&[E::Sym("s", &out), E::File("s/payload", b"x", 0o644)]);
    p.refused(
        &tar,
        ImageLimits::default(),
        &["\"s/payload\"", "symbolic link"],
    );
}

#[test]
fn hard_links_across_layers_or_out_are_refused() {
    let p = Place::new();
    let layers = vec![
        layer(&[E::File("a", b"x", 0o644)]),
        layer(&[E::Hard("b", "a")]),
    ];
    let cfg = config(&layers, &[], &[]);
    p.refused(
        &docker_archive(&layers, &cfg),
        ImageLimits::default(),
        &["layer 2", "\"b\"", "across layers"],
    );
    let p = Place::new();
    let out = format!("{}/precious", p.outside());
    p.refused(
        &layer(&[E::Hard("b", &out)]),
        ImageLimits::default(),
        &["\"b\"", "absolute"],
    );
}

#[test]
fn device_nodes_and_fifos_are_refused() {
    let p = Place::new();
    p.refused(
        &layer(&[E::Char("dev/null")]),
        ImageLimits::default(),
        &["\"dev/null\"", "character device"],
    );
    let p = Place::new();
    p.refused(
        &layer(&[E::Fifo("pipe")]),
        ImageLimits::default(),
        &["\"pipe\"", "FIFO"],
    );
}

#[test]
fn setid_files_are_refused_or_stripped_by_the_limits_choice() {
    let tar = layer(&[E::File("bin/su", b"x", 0o4755)]);
    let p = Place::new();
    p.refused(&tar, ImageLimits::default(), &["\"bin/su\"", "setuid"]);
    let p = Place::new();
    let strip = ImageLimits {
        set_id: SetIdBits::Strip,
        ..ImageLimits::default()
    };
    let img = p.unpack(&tar, strip).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(img.rootfs.join("bin/su"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
}

#[test]
fn whiteouts_that_escape_are_refused() {
    let p = Place::new();
    p.refused(
        &layer(&[E::File("etc/.wh...", b"", 0o644)]),
        ImageLimits::default(),
        &["\"etc/.wh...\"", "escapes"],
    );
    // Through a link of a lower layer a whiteout would remove what it
    // points to outside the root.
    let p = Place::new();
    let out = p.outside();
    let layers = vec![
        layer(&[E::Sym("up", &out)]),
        layer(&[E::File("up/.wh.precious", b"", 0o644)]),
    ];
    let cfg = config(&layers, &[], &[]);
    p.refused(
        &docker_archive(&layers, &cfg),
        ImageLimits::default(),
        &["layer 2", "\"up/.wh.precious\"", "symbolic link"],
    );
}

#[test]
fn a_layer_over_its_limit_is_refused_counting_while_reading() {
    let small = ImageLimits {
        max_layer_bytes: 1 << 20,
        ..ImageLimits::default()
    };
    // A gzip bomb: 8 MiB of zeros stored in a few kilobytes. Nothing but
    // counting the decompressed stream can see it.
    let big = vec![0u8; 8 << 20];
    let bomb = layer(&[E::File("zeros", &big, 0o644)]);
    let p = Place::new();
    let cfg = config(std::slice::from_ref(&bomb), &[], &[]);
    let stored = gzip(&bomb);
    assert!(stored.len() < 1 << 20);
    p.refused(
        &oci_archive(&[stored], &cfg, None),
        small,
        &["layer 1", "layer limit"],
    );
}

#[test]
fn a_layer_unlike_its_declared_size_is_refused() {
    let l = layer(&[E::File("a", b"x", 0o644)]);
    let cfg = config(std::slice::from_ref(&l), &[], &[]);
    let p = Place::new();
    p.refused(
        &oci_archive(std::slice::from_ref(&l), &cfg, Some(&[100])),
        ImageLimits::default(),
        &["layer 1", "descriptor says 100"],
    );
}

#[test]
fn an_image_over_its_limit_is_refused() {
    let limits = ImageLimits {
        max_image_bytes: 1 << 20,
        ..ImageLimits::default()
    };
    let part = vec![1u8; 600 << 10];
    let layers = vec![
        layer(&[E::File("a", &part, 0o644)]),
        layer(&[E::File("b", &part, 0o644)]),
    ];
    let cfg = config(&layers, &[], &[]);
    let p = Place::new();
    p.refused(
        &docker_archive(&layers, &cfg),
        limits,
        &["layer 2", "\"b\"", "image is over"],
    );
}

#[test]
fn too_many_files_are_refused() {
    let names: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    let entries: Vec<E<'_>> = names.iter().map(|n| E::File(n, b"", 0o644)).collect();
    let limits = ImageLimits {
        max_files: 20,
        ..ImageLimits::default()
    };
    let p = Place::new();
    p.refused(
        &layer(&entries),
        limits,
        &["\"f20\"", "more than 20 entries"],
    );
}

#[test]
fn a_layer_unlike_its_digest_is_refused() {
    let layers = two_layers();
    let mut cfg_layers = layers.clone();
    cfg_layers[1] = layer(&[E::File("other", b"x", 0o644)]);
    let cfg = config(&cfg_layers, &[], &[]);
    let p = Place::new();
    p.refused(
        &docker_archive(&layers, &cfg),
        ImageLimits::default(),
        &["layer 2", "the config says"],
    );
}
