#!/usr/bin/env bash
# Builds the Debian package: the binary, then what is generated from it
# (man page, shell completions, the default config), then `cargo deb`.
#
#   dist/deb/build.sh                 # release build, .deb in target/debian/
#   dist/deb/build.sh --profile dev --no-build --fast --output DIR
#                                     # the test's way: the debug binary already built
set -euo pipefail
cd "$(dirname "$0")/../.."

profile=release
build=yes
output=
fast=no
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile=$2; shift 2 ;;
        --no-build) build=no; shift ;;
        --output) output=$2; shift 2 ;;
        --fast) fast=yes; shift ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$profile" in
    dev) dir=debug ;;
    *) dir=$profile ;;
esac
target=${CARGO_TARGET_DIR:-target}

if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "cargo-deb is missing: cargo install cargo-deb --locked" >&2
    exit 1
fi
if [ "$build" = yes ]; then
    cargo build --profile "$profile" --bin gleaner
fi
bin="$target/$dir/gleaner"
# cargo-deb's asset paths are fixed in Cargo.toml: target/deb-assets.
assets=target/deb-assets
rm -rf "$assets"
mkdir -p "$assets/completions"
"$bin" man > "$assets/gleaner.1"
gzip -9n -f "$assets/gleaner.1"
"$bin" completions bash > "$assets/completions/gleaner"
"$bin" completions zsh > "$assets/completions/_gleaner"
"$bin" completions fish > "$assets/completions/gleaner.fish"
"$bin" config --defaults --commented > "$assets/config.toml"

args=(--no-build --profile "$profile")
[ -n "$output" ] && args+=(--output "$output")
# Quicker, larger compression (the test's unoptimised binary is big).
[ "$fast" = yes ] && args+=(--fast)
cargo deb "${args[@]}"
