#!/usr/bin/env bash
# What a volunteer's node costs in its second month: a lone node (network on
# 127.0.0.1 only, mDNS off, no dashboard, a quiet scripted owner) with DAYS
# days of STEP-second history, for one or more gleaner binaries side by side
# on the same trace, in the same run.
#
#   NEW=target/release/gleaner [OLD=/path/to/older/gleaner] [UPGRADE=1] \
#     [DAYS=56] [STEP=6] [WIN=240] examples/long-history.sh
#
# Each binary imports the trace into its own store (the way it imports); with
# UPGRADE=1 NEW also runs on a copy of OLD's store after OLD has run on it (the
# upgrade a volunteer's node goes through). For each node it prints the seconds
# until `ready`, idle CPU over WIN seconds (with `status` asked once a minute,
# as a dashboard or a consumer would), RSS split into anonymous and file pages,
# peak RSS and the store's size; then each node is restarted on its store and
# its RSS read again after a minute and a `status`.
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${NEW:?set NEW to a gleaner binary}
OLD=${OLD:-}
DAYS=${DAYS:-56}
STEP=${STEP:-6}
WIN=${WIN:-240}
UPGRADE=${UPGRADE:-0}
DIR=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
HZ=$(getconf CLK_TCK)
now() { date +%s.%N; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
mem() { awk '/^VmRSS:/ { r = $2 } /^RssAnon:/ { a = $2 } /^RssFile:/ { f = $2 } /^VmHWM:/ { h = $2 }
    END { printf "RSS %.1f MiB (anonymous %.1f, file %.1f), peak %.1f", r / 1024, a / 1024, f / 1024, h / 1024 }' "/proc/$1/status"; }

echo "== $DAYS days of ${STEP} s history; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$NEW" --data-dir "$DIR/gen" trace synth --seed 7 --days "$DAYS" --step "$STEP" --end now \
    --out "$DIR/history.csv" >/dev/null
echo "0 5 8000" > "$DIR/quiet-owner.txt"
NAMES=()
declare -A BIN
setup() { # setup NAME BINARY: a config and a store the binary imported
    local name=$1 bin=$2
    mkdir -p "$DIR/$name"
    cat > "$DIR/$name/config.toml" <<CONF
[net]
pool = "long-history-$name"
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]
[ui]
listen = ""
CONF
    local t0; t0=$(now)
    "$bin" --data-dir "$DIR/$name/data" --config "$DIR/$name/config.toml" \
        history import "$DIR/history.csv" >/dev/null
    awk -v a="$t0" -v b="$(now)" -v n="$name" 'BEGIN { printf "%s: imported in %.1f s\n", n, b - a }'
    NAMES+=("$name")
    BIN[$name]=$bin
}
# start NAME: runs the node, waits for `ready`, prints how long it took.
start() {
    local name=$1 t0; t0=$(now)
    GLEANER_LOG=warn "${BIN[$name]}" --data-dir "$DIR/$name/data" --config "$DIR/$name/config.toml" \
        node --owner-load "$DIR/quiet-owner.txt" --no-guest > "$DIR/$name/out" 2> "$DIR/$name/log" &
    PIDS+=($!)
    eval "PID_$name=$!"
    for _ in $(seq 1200); do
        if grep -q '^ready' "$DIR/$name/out" 2>/dev/null; then
            awk -v a="$t0" -v b="$(now)" -v n="$name" 'BEGIN { printf "%s: ready after %.1f s\n", n, b - a }'
            return 0
        fi
        sleep 0.1
    done
    echo "$name is not ready after 120 s; its log:"; tail -5 "$DIR/$name/log"; exit 1
}
pid_of() { eval "echo \$PID_$1"; }
stop() { local p; p=$(pid_of "$1"); kill -INT "$p"; wait "$p" 2>/dev/null || true; }
status_all() { for n in "${NAMES[@]}"; do "${BIN[$n]}" --data-dir "$DIR/$n/data" --config "$DIR/$n/config.toml" status >/dev/null 2>&1 || true; done; }
measure() { # measure SECONDS: idle CPU of every node over SECONDS, status once a minute
    local secs=$1 n
    declare -A c0
    for n in "${NAMES[@]}"; do c0[$n]=$(cpu_ticks "$(pid_of "$n")"); done
    local t0; t0=$(now)
    local left=$secs
    while [ "$left" -gt 0 ]; do
        status_all
        local s=$((left < 60 ? left : 60)); sleep "$s"; left=$((left - s))
    done
    local t1; t1=$(now)
    for n in "${NAMES[@]}"; do
        local p; p=$(pid_of "$n")
        awk -v a="${c0[$n]}" -v b="$(cpu_ticks "$p")" -v t0="$t0" -v t1="$t1" -v hz="$HZ" -v n="$n" -v m="$(mem "$p")" \
            -v store="$(du -sm "$DIR/$n/data" | cut -f1)" \
            'BEGIN { printf "%s: idle CPU %.3f %% of a core over %d s; %s MiB; data dir %s MB\n", n, 100 * (b - a) / hz / (t1 - t0), t1 - t0, m, store }'
    done
}

if [ -n "$OLD" ]; then setup old "$OLD"; fi
setup new "$NEW"
for n in "${NAMES[@]}"; do start "$n"; done
if [ "$UPGRADE" = 1 ] && [ -n "$OLD" ]; then
    stop old
    cp -a "$DIR/old" "$DIR/upgraded"
    NAMES+=(upgraded); BIN[upgraded]=$NEW
    start old
    start upgraded
fi
echo "== first start, $WIN s"
measure "$WIN"
echo "== restarted, 60 s"
for n in "${NAMES[@]}"; do stop "$n"; done
for n in "${NAMES[@]}"; do start "$n"; done
measure 60
