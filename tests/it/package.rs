//! The Debian package: `dist/deb/build.sh` packs the binary this test run
//! built (the dev profile, so no release build is needed) with the unit,
//! config, man page and completions; the package is unpacked into a
//! throwaway root with `dpkg -x`, and `gleaner --version` runs from there.
//! Needs `cargo-deb` and `dpkg-deb` on the PATH (`.ci/run` installs them).
//! Without them a newcomer's `cargo test` skips it loudly; under `.ci/run`
//! (`GLEANER_CI=1`) it fails instead, so CI can never skip it silently.

use std::path::Path;
use std::process::Command;

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_debian_package_installs_into_a_throwaway_root_and_runs() {
    for tool in ["cargo-deb", "dpkg-deb"] {
        if on_path(tool) {
            continue;
        }
        let why = format!(
            "{tool} is missing: run .ci/run, or `cargo install cargo-deb --locked` and `apt-get install dpkg`"
        );
        assert!(std::env::var_os("GLEANER_CI").is_none(), "{why}");
        eprintln!("\n\n*** SKIPPED package: {why} ***\n\n");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = Path::new(env!("CARGO_BIN_EXE_gleaner"));
    let profile_dir = bin.parent().expect("target/<profile>");
    let out = tempfile::tempdir().expect("temp dir");
    let mut build = Command::new(root.join("dist/deb/build.sh"));
    build
        .args(["--no-build", "--fast", "--output"])
        .arg(out.path())
        .current_dir(root);
    // The test binary's own profile directory (debug, or whatever built it).
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => build.args(["--profile", "dev"]),
        Some(other) => build.args(["--profile", other]),
        None => panic!("odd binary path {}", bin.display()),
    };
    if let Some(target) = profile_dir.parent() {
        build.env("CARGO_TARGET_DIR", target);
    }
    let built = build.output().expect("run dist/deb/build.sh");
    assert!(
        built.status.success(),
        "build.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = std::fs::read_dir(out.path())
        .expect("output dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("a .deb was written");

    // Control data: the dependency on adduser and the maintainer scripts.
    let info = Command::new("dpkg-deb")
        .arg("--info")
        .arg(&deb)
        .output()
        .expect("dpkg-deb --info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("Package: gleaner"), "{info}");
    assert!(info.contains("adduser"), "{info}");
    for script in ["postinst", "prerm", "postrm"] {
        assert!(info.contains(script), "no {script}:\n{info}");
    }

    let tree = tempfile::tempdir().expect("root");
    let unpacked = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(tree.path())
        .status()
        .expect("dpkg-deb -x");
    assert!(unpacked.success());
    let r = tree.path();
    for file in [
        "usr/bin/gleaner",
        "lib/systemd/system/gleaner.service",
        "etc/gleaner/config.toml",
        "usr/share/man/man1/gleaner.1.gz",
        "usr/share/bash-completion/completions/gleaner",
        "usr/share/zsh/vendor-completions/_gleaner",
        "usr/share/fish/vendor_completions.d/gleaner.fish",
    ] {
        assert!(r.join(file).is_file(), "{file} is not in the package");
    }
    let unit = std::fs::read_to_string(r.join("lib/systemd/system/gleaner.service")).expect("unit");
    for line in [
        "User=gleaner",
        "Nice=19",
        "CPUSchedulingPolicy=idle",
        "Delegate=yes",
        "NoNewPrivileges=yes",
        "ExecStart=/usr/bin/gleaner node",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    // The shipped config is the commented defaults: it parses to the defaults.
    let config = std::fs::read_to_string(r.join("etc/gleaner/config.toml")).expect("config");
    let parsed = gleaner::node::config::Config::parse(&config, Path::new("config.toml"))
        .expect("the packaged config parses");
    assert_eq!(parsed, gleaner::node::config::Config::default());

    let version = Command::new(r.join("usr/bin/gleaner"))
        .arg("--version")
        .output()
        .expect("run the packaged gleaner");
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("gleaner {}", env!("CARGO_PKG_VERSION"))
    );
}
