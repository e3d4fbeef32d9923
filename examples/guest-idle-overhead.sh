#!/usr/bin/env bash
# The idle overhead of a node running one contained guest: CPU (percent of one
# core) and RSS of the node process, and of the job's helper processes (the
# PID namespace's keeper and init), over a window while the guest sleeps.
#
#   examples/guest-idle-overhead.sh [SECONDS]     # default 60
#
# The node runs with --no-net and a quiet scripted owner load, in a temp dir;
# the guest is `run-local -- sleep`, so everything measured is the node's own
# upkeep (sampling, the loop, the supervisor) plus the containment's helpers.
# Prints the layers in force (`gleaner status`). GLEANER_BIN picks the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
B=${GLEANER_BIN:-$PWD/target/release/gleaner}
[ -x "$B" ] || cargo build --release --quiet
DIR=$(mktemp -d)
NODE=
cleanup() {
    [ -n "$NODE" ] && kill "$NODE" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
echo "0 5 8000" > "$DIR/quiet-owner.txt"
g() { "$B" --data-dir "$DIR/data" --config "$DIR/config.toml" "$@"; }
"$B" --data-dir "$DIR/data" --config "$DIR/config.toml" \
    node --no-net --owner-load "$DIR/quiet-owner.txt" -q >"$DIR/node.out" 2>"$DIR/node.log" &
NODE=$!
for _ in $(seq 100); do g status >/dev/null 2>&1 && break; sleep 0.2; done
g run-local --runtime 1h -- sleep 100000 >"$DIR/job.log" 2>&1 &
for _ in $(seq 50); do g status | grep -q "^guest .*running" && break; sleep 0.2; done
g status | grep -iE "contain|guest" || true
g status | grep -q "^guest .*running" || { echo "no guest runs:"; cat "$DIR/job.log"; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# The helpers are copy-on-write forks of the node: their RSS counts pages
# they share with it; their private pages are what they add.
pss_kib() { awk '/^Private_(Clean|Dirty):/ {s += $2} END {print s}' "/proc/$1/smaps_rollup"; }
# The guest's ancestors below the node: init and keeper of its PID namespace.
GUEST=$(g status | awk '/^guest / {for (i = 1; i < NF; i++) if ($i == "pid") print $(i + 1)}')
HELPERS=
p=$GUEST
while :; do
    p=$(awk '{print $4}' "/proc/$p/stat")
    [ "$p" = "$NODE" ] || [ "$p" -le 1 ] && break
    HELPERS="$HELPERS $p"
done
HZ=$(getconf CLK_TCK)
n0=$(ticks "$NODE"); h0=0; for h in $HELPERS; do h0=$((h0 + $(ticks "$h"))); done
sleep "$SECS"
n1=$(ticks "$NODE"); h1=0; for h in $HELPERS; do h1=$((h1 + $(ticks "$h"))); done
hrss=0; for h in $HELPERS; do hrss=$((hrss + $(pss_kib "$h"))); done
awk -v n=$((n1 - n0)) -v h=$((h1 - h0)) -v hz="$HZ" -v s="$SECS" \
    -v rss="$(rss_kib "$NODE")" -v hrss="$hrss" -v helpers="$HELPERS" 'BEGIN {
    printf "node: %.2f %% of a core over %d s, RSS %.1f MiB\n", 100 * n / hz / s, s, rss / 1024
    printf "keeper+init (%s): %.2f %% of a core, private %.2f MiB\n", helpers, 100 * h / hz / s, hrss / 1024
}'
