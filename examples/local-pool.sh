#!/usr/bin/env bash
# A three-node Gleaner pool on 127.0.0.1, in one command:
#
#   examples/local-pool.sh            # demo: hosts, a job, a host killed mid-job
#   examples/local-pool.sh --measure  # also: query RTT over 1000 queries, join time, job overhead
#
# Every node listens on 127.0.0.1 only, mDNS is off and nodes bootstrap from
# the first one; each gets three weeks of synthetic owner history ending today
# (`gleaner trace synth --end now`), so hosts answer with real TRs. The live
# owner load is scripted as quiet (`gleaner node --owner-load FILE`), so
# the demo does not depend on how busy this machine is
# (`LOAD_SCRIPT=real examples/local-pool.sh` lets the nodes measure it).
# Everything lives in a temp dir that is removed at the end. Needs only cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
MEASURE=${1:-}
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

OWNER_LOAD=()
if [ "${LOAD_SCRIPT:-}" != real ]; then
    echo "0 5 8000" > "$DIR/quiet-owner.txt"
    OWNER_LOAD=(--owner-load "$DIR/quiet-owner.txt")
fi
g() { local n=$1; shift; "$B" --data-dir "$DIR/n$n/data" --config "$DIR/n$n/config.toml" "$@"; }
ms() { date +%s%3N; }

for n in 1 2 3 4; do
    mkdir -p "$DIR/n$n"
    cat > "$DIR/n$n/config.toml" <<CONF
[net]
pool = "demo"
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]
announce_secs = 5
CONF
    g "$n" trace synth --seed "$n" --days 21 --step 60 --end now --out "$DIR/n$n/history.csv" >/dev/null
    g "$n" history import "$DIR/n$n/history.csv" >/dev/null
done

# start N [flags...]: runs node N and waits for "ready" (not in a subshell: PIDS must stick).
start() {
    local n=$1; shift
    "$B" --data-dir "$DIR/n$n/data" --config "$DIR/n$n/config.toml" node "${OWNER_LOAD[@]}" "$@" > "$DIR/n$n/out" 2> "$DIR/n$n/log" &
    PIDS[$n]=$!
    for _ in $(seq 100); do grep -q '^ready' "$DIR/n$n/out" 2>/dev/null && break; sleep 0.1; done
}
addr() { grep '^listening:' "$DIR/n$1/out" | head -1 | awk '{print $2}'; }
peer() { grep '^peer id:' "$DIR/n$1/out" | awk '{print $3}'; }

echo "== starting three nodes on 127.0.0.1 (node 3 is consumer-only)"
start 1
BOOT=$(addr 1)
start 2 --bootstrap "$BOOT"
start 3 --bootstrap "$BOOT" --no-guest
for _ in $(seq 100); do
    [ "$(g 3 hosts --json | grep -o '"tr":[0-9.]*' | wc -l)" -ge 2 ] && break
    sleep 0.3
done
echo "== gleaner hosts (from node 3), window 3h"
g 3 hosts --window 3h

echo "== a job with an input and an output file"
echo "hello pool" > "$DIR/words.txt"
g 3 submit --runtime 5m --input "$DIR/words.txt" --output upper.txt --output-dir "$DIR/results" \
    -- sh -c 'cat words.txt; tr a-z A-Z < words.txt > upper.txt'
echo "exit status $?; upper.txt: $(cat "$DIR/results/upper.txt")"

echo "== the host dies mid-job: the job finishes elsewhere"
g 3 --json submit --runtime 5m -- sh -c 'sleep 3; echo survived on $(hostname)' > "$DIR/kill.jsonl" &
SUB=$!
for _ in $(seq 100); do grep -q '"event":"started"' "$DIR/kill.jsonl" 2>/dev/null && break; sleep 0.1; done
HOST=$(grep '"state":"running"' "$DIR/kill.jsonl" | head -1 | grep -o '"host":"[^"]*"' | cut -d'"' -f4)
for n in 1 2; do
    if [ "$(peer "$n")" = "$HOST" ]; then echo "killing node $n (kill -9) while it runs the job"; kill -9 "${PIDS[$n]}"; fi
done
wait "$SUB" && echo "submit exited 0"
# The task went back to the queue from the dead host, then ended elsewhere.
grep '"state":"queued"' "$DIR/kill.jsonl" | grep -o '"host":"[^"]*","attempts":[0-9]*\|"reason":"[^"]*"' | paste - -
grep -o '"type":"result".*"attempts":[0-9]*' "$DIR/kill.jsonl"

[ "$MEASURE" = "--measure" ] || exit 0

echo "== measurements on 127.0.0.1"
# Restart whichever host was killed, then time a fourth node's appearance.
for n in 1 2; do kill -0 "${PIDS[$n]}" 2>/dev/null || start "$n" --bootstrap "$(addr 3)"; done
T0=$(ms)
start 4 --bootstrap "$(addr 3)"
P4=$(peer 4)
until g 3 hosts --json | grep -q "$P4"; do sleep 0.05; done
echo "new node listed by gleaner hosts after $(( $(ms) - T0 )) ms (from its start)"
g 3 hosts --window 1h --rounds 1000 --json | grep -o '"peer":"[^"]*"\|"rtt_p50_ms":[0-9.]*\|"rtt_p99_ms":[0-9.]*\|"responses":[0-9]*' | paste - - - - | sed 's/^/rtt over 1000 queries: /'
for i in 1 2 3 4 5; do
    T0=$(ms)
    g 3 --json submit --runtime 1m -- true | while read -r line; do echo "$(ms) $line"; done > "$DIR/job$i.jsonl"
    START=$(grep '"event":"started"' "$DIR/job$i.jsonl" | awk '{print $1}' || true)
    FIN=$(grep '"event":"finished' "$DIR/job$i.jsonl" | awk '{print $1}' || true)
    DONE=$(grep '"type":"result"' "$DIR/job$i.jsonl" | awk '{print $1}' || true)
    if [ -z "$START" ] || [ -z "$FIN" ] || [ -z "$DONE" ]; then
        echo "job $i: a line is missing:"; cut -c1-300 "$DIR/job$i.jsonl"; continue
    fi
    echo "job $i: submit→started $((START - T0)) ms, finished→outputs back $((DONE - FIN)) ms, total $((DONE - T0)) ms"
done
