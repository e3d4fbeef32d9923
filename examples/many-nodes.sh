#!/usr/bin/env bash
# N real `gleaner node` processes on 127.0.0.1, as lightly as they can run,
# and what a pool of N costs (issue 27's harness):
#
#   examples/many-nodes.sh 20           # one consumer-only node and 20 hosts
#   IDLE_SECS=120 examples/many-nodes.sh 100
#
# Prints, for the consumer: seconds from the last host's start until
# `gleaner hosts --all` lists every host (and until every host answers with a
# TR; past 64 members a plain `hosts` lists a sample of the pool, see
# docs/scale.md), `hosts --all` latency p50/p90 over HOSTS_ROUNDS calls, and
# the plain `hosts`' beside it (just after the listing,
# while the last hosts are still starting, and again after the idle window), and the consumer's CPU per
# placed task for a batch of 2N trivial tasks (`-- true`); for every node:
# idle CPU (% of one core) and bytes sent and received per minute over an
# idle window of IDLE_SECS (libp2p's bandwidth metrics, read from
# `gleaner status --json`), and RSS at its end, summarised as
# min/p50/p90/max, and what membership made each host send and hear over the
# window, by cause (`status`'s chatter counters, per minute) (KEEP=DIR keeps the
# per-node tables, nodes.tsv and chatter.tsv, and the logs;
# the table also splits each node's RSS into anonymous memory and file pages
# (the binary's and libraries' pages, shared between the nodes), and gives its
# threads and the peers it is connected to at the end of the window).
#
# Every node listens on 127.0.0.1 only, mDNS is off and every host
# bootstraps from the consumer (node 0), as a pool's first members would from
# a known peer. No node serves the dashboard. The owner's load is scripted as quiet, nodes log warnings only
# and run under `nice`; every host imports the same DAYS of synthetic owner
# history so it answers with a TR. The machine's other work shows in these
# figures: run it on a quiet machine, or say how busy it was.
#
# Knobs (environment): IDLE_SECS (60), SETTLE_SECS (0: wait this long
# before the idle window, to leave out what a pool does in its first
# minutes), HOSTS_ROUNDS (10), TASKS (2N),
# LIST_LIMIT (300 s to wait for the full listing), DAYS (8: a weekend day is needed), KEEP (unset),
# NICE (10), GLEANER_BIN (the release build), MIN_FREE_MIB (2048: stop
# starting nodes when the machine has less memory available), START_GAP (0:
# seconds to wait between two starts; on one machine the nodes' own starts
# are each other's load, which a pool of separate machines does not have),
# CONSUMER_CONF (unset: TOML lines appended to the consumer's config, e.g.
# CONSUMER_CONF=$'[batch]\ntail_copies = false' to weigh a queue setting).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: examples/many-nodes.sh N}
IDLE_SECS=${IDLE_SECS:-60}
SETTLE_SECS=${SETTLE_SECS:-0}
HOSTS_ROUNDS=${HOSTS_ROUNDS:-10}
TASKS=${TASKS:-$((2 * N))}
LIST_LIMIT=${LIST_LIMIT:-300}
DAYS=${DAYS:-8}
NICE=${NICE:-10}
MIN_FREE_MIB=${MIN_FREE_MIB:-2048}
START_GAP=${START_GAP:-0}
if [ -z "${GLEANER_BIN:-}" ]; then
    cargo build --release --quiet
fi
B=${GLEANER_BIN:-$PWD/target/release/gleaner}
DIR=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        cp "$DIR/nodes.tsv" "$DIR/chatter.tsv" "$KEEP/" 2>/dev/null || true
        for n in $(seq 0 "$N"); do cp "$DIR/n$n/log" "$KEEP/n$n.log" 2>/dev/null || true; done
    fi
    rm -rf "$DIR"
}
trap cleanup EXIT

g() { local n=$1; shift; "$B" --data-dir "$DIR/n$n/data" --config "$DIR/n$n/config.toml" "$@"; }
now() { date +%s.%N; }
# Sorted numbers on stdin -> "min p50 p90 max".
summary() { sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "-"; exit }
    i50 = int((NR - 1) * 0.5) + 1; i90 = int((NR - 1) * 0.9) + 1
    printf "min %s  p50 %s  p90 %s  max %s\n", v[1], v[i50], v[i90], v[NR] }'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
# "anon_kib file_kib threads" of a process.
mem_split() { awk '/^RssAnon:/ { a = $2 } /^RssFile:/ { f = $2 } /^Threads:/ { t = $2 }
    END { print a + 0, f + 0, t + 0 }' "/proc/$1/status"; }
free_mib() { awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo; }
# "bytes_in bytes_out" from a node's status; its chatter counters (what
# membership made it send and hear, by cause) go to chatter file $2.
traffic() {
    local s t
    s=$(g "$1" status --json 2>/dev/null | tr -d ' \n' || true)
    t=$(grep -o '"traffic":{[^}]*}' <<<"$s" | grep -o '[0-9]\+' | paste -sd' ' || true)
    { grep -o '"chatter":{[^}]*}' <<<"$s" || true; } > "$2"
    echo "${t:-0 0}"
}
# "bytes_in bytes_out peers depth" as traffic, peers: how many peers it is
# connected to, and depth: its leaf's depth in the pool's trie (-1 off every
# leaf).
traffic_peers() {
    local s t p d
    s=$(g "$1" status --json 2>/dev/null | tr -d ' \n' || true)
    t=$(grep -o '"traffic":{[^}]*}' <<<"$s" | grep -o '[0-9]\+' | paste -sd' ' || true)
    { grep -o '"chatter":{[^}]*}' <<<"$s" || true; } > "$2"
    p=$({ grep -o '"direct":' <<<"$s" || true; } | wc -l)
    d=$({ grep -o '"leaf_depth":[0-9]*' <<<"$s" || true; } | grep -o '[0-9]*$' || true)
    echo "${t:-0 0} $p ${d:--1}"
}
HZ=$(getconf CLK_TCK)

echo "== $N hosts and a consumer on 127.0.0.1 ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), ${START_GAP} s between starts)"
echo "0 5 8000" > "$DIR/quiet-owner.txt"
mkdir -p "$DIR/n0"
"$B" --data-dir "$DIR/n0/data" trace synth --seed 1 --days "$DAYS" --step 60 --end now \
    --out "$DIR/history.csv" >/dev/null
for n in $(seq 0 "$N"); do
    mkdir -p "$DIR/n$n"
    cat > "$DIR/n$n/config.toml" <<CONF
[net]
pool = "many"
mdns = false
listen = ["/ip4/127.0.0.1/tcp/0"]
[ui]
listen = ""
CONF
    if [ "$n" -eq 0 ] && [ -n "${CONSUMER_CONF:-}" ]; then printf '%s\n' "$CONSUMER_CONF" >> "$DIR/n0/config.toml"; fi
    if [ "$n" -gt 0 ]; then g "$n" history import "$DIR/history.csv" >/dev/null; fi
done

# start N [flags...]: runs node N and waits for its "ready" line.
start() {
    local n=$1; shift
    GLEANER_LOG=warn nice -n "$NICE" "$B" --data-dir "$DIR/n$n/data" --config "$DIR/n$n/config.toml" \
        node --owner-load "$DIR/quiet-owner.txt" "$@" > "$DIR/n$n/out" 2> "$DIR/n$n/log" &
    PIDS[$n]=$!
    for _ in $(seq 600); do grep -q '^ready' "$DIR/n$n/out" 2>/dev/null && return 0; sleep 0.05; done
    echo "node $n is not ready after 30 s; its log:"; tail -5 "$DIR/n$n/log"; exit 1
}
T_FIRST=$(now)
start 0 --no-guest
BOOT=$(grep '^listening:' "$DIR/n0/out" | head -1 | awk '{print $2}')
for n in $(seq 1 "$N"); do
    if [ "$(free_mib)" -lt "$MIN_FREE_MIB" ]; then
        echo "only $(free_mib) MiB of memory left after $((n - 1)) hosts: stopping here"
        exit 1
    fi
    start "$n" --bootstrap "$BOOT"
    if [ "$n" -lt "$N" ]; then sleep "$START_GAP"; fi
done
T_LAST=$(now)
awk -v a="$T_FIRST" -v b="$T_LAST" -v n="$N" 'BEGIN { printf "started %d nodes in %.1f s\n", n + 1, b - a }'

echo "== the consumer's view"
listed=0; answered=0; t_listed=""; t_answered=""
while :; do
    out=$(g 0 hosts --all --json 2>/dev/null || true)
    listed=$({ grep -o '"peer":"' <<<"$out" || true; } | wc -l)
    answered=$({ grep -o '"tr":[0-9]' <<<"$out" || true; } | wc -l)
    t=$(now)
    if [ -z "$t_listed" ] && [ "$listed" -ge "$N" ]; then t_listed=$t; fi
    if [ -z "$t_answered" ] && [ "$answered" -ge "$N" ]; then t_answered=$t; fi
    [ -n "$t_answered" ] && break
    if awk -v a="$T_LAST" -v b="$t" -v l="$LIST_LIMIT" 'BEGIN { exit !(b - a > l) }'; then break; fi
    sleep 1
done
since() { if [ -n "$1" ]; then awk -v a="$T_LAST" -v b="$1" 'BEGIN { printf "after %.1f s", b - a }'; else echo "never within ${LIST_LIMIT} s"; fi; }
echo "every host listed by hosts --all:   $(since "$t_listed") (last seen: $listed of $N)"
echo "every host answering with a TR:     $(since "$t_answered") (last seen: $answered of $N)"
if [ -z "$t_answered" ] && [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; echo "$out" > "$KEEP/hosts.json"; fi

# hosts_latency LABEL: times HOSTS_ROUNDS `gleaner hosts --all --json` calls,
# then as many plain `hosts --json` (a sample in a large pool).
hosts_latency() {
    for all in --all ""; do
        for _ in $(seq "$HOSTS_ROUNDS"); do
            a=$(now); g 0 hosts $all --json >/dev/null 2>&1 || true; b=$(now)
            awk -v a="$a" -v b="$b" 'BEGIN { printf "%.0f\n", (b - a) * 1000 }'
        done > "$DIR/hosts-ms.txt"
        echo "gleaner hosts ${all:-(sample)} latency over $HOSTS_ROUNDS calls $1, ms: $(summary < "$DIR/hosts-ms.txt")"
    done
}
hosts_latency "(just after the listing)"

if [ "$SETTLE_SECS" -gt 0 ]; then
    echo "== letting the pool settle for $SETTLE_SECS s"
    sleep "$SETTLE_SECS"
fi
echo "== every node idle for $IDLE_SECS s"
for n in $(seq 0 "$N"); do
    echo "$n $(now) $(cpu_ticks "${PIDS[$n]}") $(traffic "$n" "$DIR/n$n/chatter0")"
done > "$DIR/idle0.txt"
sleep "$IDLE_SECS"
for n in $(seq 0 "$N"); do
    p=${PIDS[$n]}
    echo "$n $(now) $(cpu_ticks "$p") $(traffic_peers "$n" "$DIR/n$n/chatter1") $(rss_kib "$p") $(mem_split "$p")"
done > "$DIR/idle1.txt"
join <(sort -k1,1 "$DIR/idle0.txt") <(sort -k1,1 "$DIR/idle1.txt") | sort -n | awk -v hz="$HZ" '
    BEGIN { print "node\tidle_cpu_pct\trss_mib\tbytes_in_per_min\tbytes_out_per_min\tanon_mib\tfile_mib\tthreads\tpeers\tleaf_depth" }
    { dt = $6 - $2; printf "%d\t%.3f\t%.1f\t%.0f\t%.0f\t%.1f\t%.1f\t%d\t%d\t%d\n", $1, ($7 - $3) / hz / dt * 100,
        $12 / 1024, ($8 - $4) / dt * 60, ($9 - $5) / dt * 60, $13 / 1024, $14 / 1024, $15, $10, $11 }' > "$DIR/nodes.tsv"
col() { awk -v c="$1" -v from="$2" 'NR > 1 && $1 >= from { print $c }' "$DIR/nodes.tsv"; }
echo "consumer: $(awk 'NR == 2 { printf "idle CPU %s %%, RSS %s MiB, %s B/min in, %s B/min out", $2, $3, $4, $5 }' "$DIR/nodes.tsv")"
echo "hosts idle CPU, % of a core: $(col 2 1 | summary)"
echo "hosts RSS, MiB:              $(col 3 1 | summary)"
echo "hosts bytes in per minute:   $(col 4 1 | summary)"
echo "hosts bytes out per minute:  $(col 5 1 | summary)"
echo "hosts anonymous RSS, MiB:    $(col 6 1 | summary)"
echo "hosts file RSS, MiB:         $(col 7 1 | summary)"
echo "hosts threads:               $(col 8 1 | summary)"
echo "hosts connected peers:       $(col 9 1 | summary)"
# Each host's chatter over the window, per minute, by cause (field names as
# `status --json` gives them): the table chatter.tsv, and a summary a line.
for n in $(seq 1 "$N"); do
    paste <(grep -o '"[a-z_]*":[0-9][0-9]*' "$DIR/n$n/chatter0" 2>/dev/null) \
          <(grep -o '"[a-z_]*":[0-9][0-9]*' "$DIR/n$n/chatter1" 2>/dev/null) |
        tr '":' '  ' | awk -v n="$n" -v w="$IDLE_SECS" '{ printf "%d\t%s\t%.2f\n", n, $1, ($4 - $2) / w * 60 }'
done > "$DIR/chatter.tsv"
for field in $(cut -f2 "$DIR/chatter.tsv" | awk '!seen[$0]++'); do
    printf 'hosts %-22s per minute: %s\n' "$field" "$(awk -v f="$field" '$2 == f { print $3 }' "$DIR/chatter.tsv" | summary)"
done
hosts_latency "(after the idle window)"

echo "== $TASKS trivial tasks from the consumer"
before=$(cpu_ticks "${PIDS[0]}")
t0=$(now)
g 0 batch submit --quiet --range "0..$TASKS" --runtime 1m --output-dir "$DIR/results" --wait -- true >/dev/null
t1=$(now)
after=$(cpu_ticks "${PIDS[0]}")
awk -v n="$TASKS" -v t0="$t0" -v t1="$t1" -v c=$((after - before)) -v hz="$HZ" 'BEGIN {
    s = t1 - t0
    printf "%d tasks in %.1f s (%.1f tasks/s); consumer CPU %.2f s, %.1f ms per placed task\n",
        n, s, n / s, c / hz, c / hz * 1000 / n }'
