#!/usr/bin/env bash
# A parameter sweep on a pool of four nodes on 127.0.0.1 (three hosts and a
# consumer-only node; mDNS off, nothing leaves loopback).
#
#   examples/batch-sweep.sh              # a 20-task sweep with params and a shared input
#   examples/batch-sweep.sh --measure N  # N trivial tasks: tasks per second, and the
#                                        # consumer node's CPU time per task
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-}
N=${2:-1000}
cargo build --release --quiet
B=${GLEANER_BIN:-$PWD/target/release/gleaner}
DIR=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

echo "0 5 8000" > "$DIR/quiet-owner.txt"
g() { local n=$1; shift; "$B" --data-dir "$DIR/n$n/data" --config "$DIR/n$n/config.toml" "$@"; }
for n in 1 2 3 4; do
    mkdir -p "$DIR/n$n"
    cat > "$DIR/n$n/config.toml" <<CONF
[net]
pool = "sweep"
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]
announce_secs = 2
CONF
    if [ "$n" -le 3 ]; then
        g "$n" trace synth --seed "$n" --days 15 --step 60 --end now --out "$DIR/n$n/history.csv" >/dev/null
        g "$n" history import "$DIR/n$n/history.csv" >/dev/null
    fi
done
start() {
    local n=$1; shift
    "$B" --data-dir "$DIR/n$n/data" --config "$DIR/n$n/config.toml" node \
        --owner-load "$DIR/quiet-owner.txt" "$@" > "$DIR/n$n/out" 2> "$DIR/n$n/log" &
    PIDS[$n]=$!
    for _ in $(seq 300); do grep -q '^ready' "$DIR/n$n/out" 2>/dev/null && break; sleep 0.1; done
}
addr() { grep '^listening:' "$DIR/n$1/out" | head -1 | awk '{print $2}'; }

echo "== four nodes on 127.0.0.1: three hosts and a consumer-only node"
start 1
start 2 --bootstrap "$(addr 1)"
start 3 --bootstrap "$(addr 1)"
start 4 --bootstrap "$(addr 1)" --no-guest
for _ in $(seq 100); do
    [ "$(g 4 hosts --json | grep -o '"tr":[0-9.]*' | wc -l)" -ge 3 ] && break
    sleep 0.3
done
g 4 hosts --window 10m

if [ "$MODE" = --measure ]; then
    cpu() { awk '{print $14 + $15}' "/proc/${PIDS[4]}/stat"; }
    echo "== $N trivial tasks"
    before=$(cpu)
    t0=$(date +%s.%N)
    g 4 batch submit --quiet --range "0..$N" --runtime 1m --output-dir "$DIR/results" --wait -- true >/dev/null
    t1=$(date +%s.%N)
    after=$(cpu)
    hz=$(getconf CLK_TCK)
    awk -v n="$N" -v t0="$t0" -v t1="$t1" -v c=$((after - before)) -v hz="$hz" 'BEGIN {
        s = t1 - t0
        printf "%d tasks on 3 hosts in %.1f s: %.1f tasks/s, %.1f ms of wall time per task and host\n", n, s, n / s, s * 3 * 1000 / n
        printf "consumer node CPU: %.2f s in all, %.2f ms per task\n", c / hz, c / hz * 1000 / n
    }'
    exit 0
fi

echo "== a 20-task sweep: params, a shared input, an output per task"
head -c 1000000 /dev/urandom > "$DIR/shared.bin"
{ echo "alpha,beta"; for i in $(seq 0 19); do echo "0.$i,$((i * i))"; done; } > "$DIR/sweep.csv"
g 4 batch submit --name demo --params "$DIR/sweep.csv" --input "$DIR/shared.bin" \
    --output result.txt --output-dir "$DIR/results" --runtime 1m --wait -- \
    sh -c 'echo "alpha={alpha} beta={beta} task={} shared=$(wc -c < shared.bin)" > result.txt'
echo "== results"
for t in 0 7 19; do echo "task $t: $(cat "$DIR/results/$t/result.txt")"; done
