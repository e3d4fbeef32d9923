#!/usr/bin/env bash
# `gleaner simulate` at 1,000 hosts: the makespan a consumer gets placing
# from the node's sample of DHT leaves (`--knowledge sample`) and from every
# member's summaries (`summaries`), each against full knowledge in the same
# run (same pool, same tasks), paired by seed: the mean change with its 95 %
# confidence interval (Student's t over the seeds), the median, and the seeds
# over +5 %. Issue 27's must-show; docs/scale.md, "The sample's floor,
# settled on 64 + 64 seeds".
#
#   examples/sample-vs-full.sh                       # seeds 1-64, the shared traces
#   SEEDS="101 164" examples/sample-vs-full.sh       # the held-out seeds
#   VARIANT="min64:--sample-min 64" examples/sample-vs-full.sh   # another sample rule
#   POOL=mixed TRACES="pools/mixed/*.csv" examples/sample-vs-full.sh
#
# Environment: SEEDS ("FIRST LAST", default "1 64"), TASKS (default
# "5 10 20 50 100 500"), HOSTS (1000), RUNTIME (lognormal:3h,0.5), POOL (a
# name for the cache, default shared) and TRACES (a glob, default the shared
# traces), VARIANT ("NAME:ARGS", extra `gleaner simulate` arguments for one
# more `sample` row; its runs place from the sample only; ONLY_VARIANT=1
# makes only those, for another invocation making the rest), JOBS (simulations
# at once, default 1), OUT (the cache of JSON results, default
# target/sample-vs-full). A run already in the cache is not made again, so
# the table can be printed again, or a variant added, at the cost of the new
# runs only. Every simulation runs under nice -n 19 with --threads 1.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${GLEANER_BIN:-$PWD/target/release/gleaner}
[ -x "$B" ] || nice -n 19 cargo build --release --quiet --bin gleaner
read -r FIRST LAST <<<"${SEEDS:-1 64}"
TASKS=${TASKS:-5 10 20 50 100 500}
HOSTS=${HOSTS:-1000}
RUNTIME=${RUNTIME:-lognormal:3h,0.5}
POOL=${POOL:-shared}
# shellcheck disable=SC2206
TRACES=(${TRACES:-../shared/traces/synthetic/lab-1.csv ../shared/traces/synthetic/lab-2.csv ../shared/traces/real/*.csv})
OUT=${OUT:-target/sample-vs-full}/$POOL-$HOSTS
VARIANT=${VARIANT:-}
VNAME=${VARIANT%%:*}
VARGS=${VARIANT#*:}
mkdir -p "$OUT"
if [ -n "$VARIANT" ]; then mkdir -p "$OUT/$VNAME"; fi

# One simulation: $1 tasks, $2 seed, $3 result file, $4 knowledge, then
# extra arguments. Written to a temporary name of its own first: an
# interrupted run leaves no result behind, and two invocations that make the
# same run at once do not write into each other.
sim() {
    local t=$1 s=$2 f=$3 k=$4
    shift 4
    [ -s "$f" ] && return 0
    nice -n 19 "$B" simulate --trace "${TRACES[@]}" --hosts "$HOSTS" --tasks "$t" \
        --runtime "$RUNTIME" --seed "$s" --policy proactive --knowledge "$k" \
        --estimate-runs 0 --backtests 0 --threads 1 --quiet "$@" --json "$f.part$$" >/dev/null
    mv "$f.part$$" "$f"
}
export -f sim
export B HOSTS RUNTIME
export TRACES_LIST="${TRACES[*]}"

jobs_list() {
    for t in $TASKS; do
        for s in $(seq "$FIRST" "$LAST"); do
            if [ -z "${ONLY_VARIANT:-}" ]; then echo "$t $s $OUT/t$t-s$s.json full,summaries,sample"; fi
            if [ -n "$VARIANT" ]; then echo "$t $s $OUT/$VNAME/t$t-s$s.json sample $VARGS"; fi
        done
    done
}
# shellcheck disable=SC2016
jobs_list | xargs -P "${JOBS:-1}" -L 1 bash -c 'read -ra TRACES <<<"$TRACES_LIST"; sim "$@"' _

# makespan of knowledge $2 in file $1
ms() { jq -r --arg k "$2" '.policies[] | select(.knowledge == $k) | .makespan_secs' "$1"; }
# hosts the sample named at most, and digests fetched, for knowledge $2 in $1
cost() { jq -r --arg k "$2" '.policies[] | select(.knowledge == $k) | "\(.probe.cached) \(.probe.digests)"' "$1"; }

echo "pool $POOL ($HOSTS hosts: ${TRACES[*]}), runtime $RUNTIME, seeds $FIRST-$LAST, proactive"
echo
echo "| tasks | consumer | makespan vs full knowledge: mean [95 % CI] | median | seeds over +5 % | hosts named (mean) | digests (mean) |"
echo "|---|---|---|---|---|---|---|"
for t in $TASKS; do
    rows=""
    for s in $(seq "$FIRST" "$LAST"); do
        f=$OUT/t$t-s$s.json
        line="$(ms "$f" full) $(ms "$f" summaries) $(ms "$f" sample) $(cost "$f" sample)"
        if [ -n "$VARIANT" ]; then
            line="$line $(ms "$OUT/$VNAME/t$t-s$s.json" sample) $(cost "$OUT/$VNAME/t$t-s$s.json" sample)"
        fi
        rows+="$line"$'\n'
    done
    printf '%s' "$rows" | awk -v t="$t" -v vname="$VNAME ($VARGS)" '
        # Student t quantile 0.975 with v degrees of freedom (Hill 1970,
        # an expansion in 1/v; within 0.1 % for v >= 5).
        function tq(v,   z) {
            z = 1.959964
            return z + (z^3 + z) / (4 * v) + (5 * z^5 + 16 * z^3 + 3 * z) / (96 * v^2) \
                + (3 * z^7 + 19 * z^5 + 17 * z^3 - 15 * z) / (384 * v^3)
        }
        function row(name, col, ccol, dcol,   i, j, m, sd, h, x, over, med, sorted, named, dig) {
            m = 0; over = 0; named = 0; dig = 0
            for (i = 1; i <= n; i++) {
                x[i] = 100 * (v[i, col] / v[i, 1] - 1)
                m += x[i]; if (x[i] > 5) over++
                if (ccol) { named += v[i, ccol]; dig += v[i, dcol] }
            }
            m /= n
            sd = 0
            for (i = 1; i <= n; i++) sd += (x[i] - m)^2
            sd = sqrt(sd / (n - 1))
            h = tq(n - 1) * sd / sqrt(n)
            for (i = 1; i <= n; i++) {    # insertion sort (mawk has no asort)
                for (j = i; j > 1 && sorted[j - 1] > x[i]; j--) sorted[j] = sorted[j - 1]
                sorted[j] = x[i]
            }
            med = (n % 2) ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
            printf "| %s | %s | **%+.1f %%** [%+.1f, %+.1f] | %+.1f %% | %d of %d | %s | %s |\n", \
                t, name, m, m - h, m + h, med, over, n, \
                ccol ? sprintf("%.0f", named / n) : "all", ccol ? sprintf("%.0f", dig / n) : "–"
        }
        { n++; for (j = 1; j <= NF; j++) v[n, j] = $j; full += $1 }
        END {
            printf "| %s | full knowledge: mean makespan %.1f h | | | | all | – |\n", t, full / n / 3600
            row("summaries of every member", 2, 0, 0)
            row("the node'"'"'s sample", 3, 4, 5)
            if (NF > 5) row("sample, " vname, 6, 7, 8)
        }'
done
