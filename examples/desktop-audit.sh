#!/usr/bin/env bash
# Issue 28's must-show on desktop pools, as audited in docs/scheduling.md
# ("Audit of issue 28's must-show"): six pools of 40 `trace synth` hosts
# (office, home, mixed, world, nights-off, weekends-away), the shared lab
# samples and the Bitbrains VMs; every policy, tail copies off and on.
#
#   examples/desktop-audit.sh pools DIR [END]      # the six desktop pools, 40 traces each
#                                                   (ending at END: another submission day)
#   examples/desktop-audit.sh run DIR OUT [SEEDS]   # simulations (default seeds 1-16) into OUT
#   examples/desktop-audit.sh summary OUT [A-B]     # the tables (seeds A-B, default 1-16)
#
# `gleaner` is $GLEANER_BIN, else target/release/gleaner. Everything runs
# at nice 19 with --threads 1. Extra `windows` variants: set
# GLEANER_WINDOW_RULE yourself and run with OUT of its own.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=${GLEANER_BIN:-$ROOT/target/release/gleaner}
S=${SHARED_TRACES:-$ROOT/../shared/traces}
MODE=${1:-}
case $MODE in
pools)
    D=$2
    END=${3:-}
    H=(any office evening nights-off weekends-away)
    Z=(America/New_York Europe/Berlin Asia/Tokyo UTC)
    mkdir -p "$D"/{office,home,mixed,world,nightsoff,weekends}
    for i in $(seq 0 39); do
        # A third argument ends the traces there (`trace synth --end`), so
        # that the batch is submitted on another day of the week.
        syn() { nice -n 19 "$G" trace synth --days 28 --step 60 ${END:+--end "$END"} "$@" >/dev/null; }
        syn --seed $((1000 + i)) --habit office --out "$D/office/h$i.csv"
        syn --seed $((2000 + i)) --habit evening --out "$D/home/h$i.csv"
        syn --seed $((5000 + i)) --habit "${H[$((i % 5))]}" --out "$D/mixed/h$i.csv"
        syn --seed $((7000 + i)) --habit "${H[$((i % 5))]}" --tz "${Z[$((i % 4))]}" --out "$D/world/h$i.csv"
        syn --seed $((8000 + i)) --habit nights-off --out "$D/nightsoff/h$i.csv"
        syn --seed $((9000 + i)) --habit weekends-away --out "$D/weekends/h$i.csv"
    done
    ;;
run)
    D=$2
    OUT=$3
    SEEDS=${4:-$(seq 1 16)}
    mkdir -p "$OUT"
    R=(--tasks 200 --runtime lognormal:3h,0.5 --backtests 0 --estimate-runs 0 --threads 1)
    ALL=random,power,tr-freq,tr,proactive,proactive+checkpoint,oracle
    sim() {
        local out=$1
        shift
        [ -f "$out" ] || nice -n 19 "$G" simulate "$@" --json "$out" >/dev/null
    }
    for s in $SEEDS; do
        for pool in office home mixed world nightsoff weekends; do
            T=("$D/$pool"/*.csv)
            sim "$OUT/$pool-off-$s.json" --trace "${T[@]}" "${R[@]}" --seed "$s" --tail-copies off --policy $ALL
            sim "$OUT/$pool-on-$s.json" --trace "${T[@]}" "${R[@]}" --seed "$s" --tail-copies on \
                --policy proactive,proactive+checkpoint,windows
        done
        LAB=(--trace "$S/synthetic/lab-1.csv" "$S/synthetic/lab-2.csv" --hosts 40)
        sim "$OUT/shared-off-$s.json" "${LAB[@]}" "${R[@]}" --seed "$s" --tail-copies off --policy $ALL
        sim "$OUT/shared-on-$s.json" "${LAB[@]}" "${R[@]}" --seed "$s" --tail-copies on \
            --policy proactive,proactive+checkpoint
        VM=(--trace "$S"/real/bitbrains-{60,72,363,407}.csv --hosts 60 --tasks 600
            --runtime lognormal:3h,0.5 --backtests 0 --estimate-runs 0 --threads 1)
        sim "$OUT/vm-off-$s.json" "${VM[@]}" --seed "$s" --tail-copies off \
            --policy proactive,proactive+checkpoint,oracle
        sim "$OUT/vm-on-$s.json" "${VM[@]}" --seed "$s" --tail-copies on \
            --policy proactive,proactive+checkpoint
    done
    ;;
summary)
    python3 - "$2" "${3:-1-16}" <<'PY'
import json, os, statistics as st, sys
d, seeds = sys.argv[1], sys.argv[2]
lo, hi = (int(x) for x in seeds.split("-"))
def load(pool, tc, s):
    f = f"{d}/{pool}-{tc}-{s}.json"
    return {p["label"]: p for p in json.load(open(f))["policies"]} if os.path.exists(f) else None
for tc in ("off", "on"):
    for pool in ("office", "home", "mixed", "world", "nightsoff", "weekends", "shared", "vm"):
        runs = {s: load(pool, tc, s) for s in range(lo, hi + 1)}
        offs = {s: load(pool, "off", s) for s in range(lo, hi + 1)}
        seeds = [s for s in runs if runs[s] and offs[s] and "oracle" in offs[s]]
        if not seeds:
            continue
        orc = {s: offs[s]["oracle"]["makespan_secs"] / 3600 for s in seeds}
        om = st.mean(orc.values())
        print(f"\n{pool}, tail copies {tc}, seeds {lo}-{hi} ({len(seeds)} run), oracle {om:.1f} h")
        print("  policy                 mean h  worst h  mean/oracle  worst/oracle(same seed)  kills/task  tail CPU % useful")
        for l in runs[seeds[0]]:
            if any(l not in runs[s] for s in seeds):
                continue
            ms = [runs[s][l]["makespan_secs"] / 3600 for s in seeds]
            wr = max(m / orc[s] for m, s in zip(ms, seeds))
            kills = st.mean(sum(runs[s][l]["kills"]) / runs[s][l]["tasks"] for s in seeds)
            tail = sum(runs[s][l]["tail_cpu_secs"] for s in seeds) / sum(runs[s][l]["useful_cpu_secs"] for s in seeds)
            print(f"  {l:22s} {st.mean(ms):6.1f}  {max(ms):7.1f}  {st.mean(ms) / om:11.2f}  {wr:23.2f}  {kills:10.2f}  {100 * tail:17.1f}")
PY
    ;;
*)
    sed -n 2,14p "$0"
    exit 64
    ;;
esac
