#!/usr/bin/env python3
"""Issue 28's must-show, paired by seed: which of `proactive`'s comparisons
are beyond the seeds' noise (docs/scheduling.md, "Which of the must-show's
comparisons are beyond noise").

For each pool, `proactive` (tail copies on: BASE/POOL-on-S.json, written by
`examples/desktop-audit.sh run`) against every other policy on the same
seeds: the baselines and the oracle from BASE/POOL-off-S.json (tail copies
off, as the audit), `windows` from BASE/POOL-on-S.json, and `windows` with
bounded holds from BOUNDED/POOL-S.json when given (GLEANER_WINDOW_RULE=
max_wait=21600,max_held=7200, tail copies on). Prints the mean makespan,
the mean difference (other - proactive) with its 95 % interval from a paired
bootstrap over seeds (4,000 resamples, seeded), which side it favours when
the interval excludes 0, and each policy's worst seed against the oracle on
that seed.

    examples/desktop-paired.py BASE [--bounded DIR] [--seeds 1-32] [POOL ...]
"""
import argparse
import json
import random
import statistics as st


def load(path):
    try:
        with open(path) as f:
            return {p["policy"]: p["makespan_secs"] / 3600 for p in json.load(f)["policies"]}
    except (OSError, ValueError, KeyError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--bounded")
    ap.add_argument("--seeds", default="1-32")
    ap.add_argument("pools", nargs="*",
                    default=["office", "mixed", "home", "world", "nightsoff", "weekends", "shared", "vm"])
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.seeds.split("-"))
    rng = random.Random(1)
    for pool in a.pools:
        rows = []
        for s in range(lo, hi + 1):
            on, off = load(f"{a.base}/{pool}-on-{s}.json"), load(f"{a.base}/{pool}-off-{s}.json")
            if not on or not off or "oracle" not in off:
                continue
            r = {"proactive": on["proactive"], "windows": on.get("windows"), "oracle": off["oracle"]}
            for k in ("random", "power", "tr-freq", "tr"):
                r[k] = off.get(k)
            if a.bounded:
                b = load(f"{a.bounded}/{pool}-{s}.json")
                r["bounded"] = b.get("windows") if b else None
            rows.append(r)
        if not rows:
            print(f"{pool}: no runs")
            continue
        P = [r["proactive"] for r in rows]
        O = [r["oracle"] for r in rows]
        worst = max(p / o for p, o in zip(P, O))
        print(f"{pool}: {len(rows)} seeds; proactive {st.mean(P):.1f} h, "
              f"{st.mean(P) / st.mean(O):.2f}x the oracle's {st.mean(O):.1f} h, worst seed {worst:.2f}x")
        for k in ("random", "power", "tr-freq", "tr", "windows", "bounded"):
            pairs = [(r[k], r["proactive"], r["oracle"]) for r in rows if r.get(k) is not None]
            if len(pairs) < 4:
                continue
            d = [x - p for x, p, _ in pairs]
            n = len(d)
            means = sorted(st.mean(rng.choices(d, k=n)) for _ in range(4000))
            low, high = means[100], means[3899]
            side = ("the other lower" if high < 0 else
                    "proactive lower" if low > 0 else "within noise")
            mp = st.mean(p for _, p, _ in pairs)
            print(f"  {k:9s} n={n:2d} {st.mean(x for x, _, _ in pairs):6.1f} h  "
                  f"diff {st.mean(d):+6.2f} h ({100 * st.mean(d) / mp:+5.1f} %) "
                  f"[{low:+.2f}, {high:+.2f}] {side}; worst {max(x / o for x, _, o in pairs):.2f}x")


if __name__ == "__main__":
    main()
