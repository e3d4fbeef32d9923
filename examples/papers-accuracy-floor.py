#!/usr/bin/env python3
"""Issue 29, goal 6: the papers' accuracy of each method from a `gleaner eval
--windows FILE` CSV (the same figure `gleaner eval` prints: 1 - |mean forecast
- survival share| / survival share per (host, day kind, start hour, length)
group, averaged over groups), and what a forecaster whose forecasts ARE the
truth would score on the same groups: the outcomes redrawn as Bernoulli(p) of
REF's forecasts, independently (optimistic: one day's windows overlap, which
makes the real outcomes noisier still), 200 times.

What it shows: the metric falls with the windows a group holds, whoever
forecasts; below ~25 windows a group a perfect forecaster scores under 90 %
at 3 h on a host with many low-survival hours.

  python3 examples/papers-accuracy-floor.py WINDOWS.csv [REF]   (REF: logistic)"""
import csv, sys, random, datetime, collections, statistics
path, ref = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "logistic")
reps = 200
g = collections.defaultdict(lambda: ([], []))
for r in csv.DictReader(open(path)):
    d = datetime.date.fromisoformat(r["date"])
    kind = "we" if d.weekday() >= 5 else "wd"
    key = (r["length_s"], r["method"], r["host"], kind, r["hour"])
    g[key][0].append(float(r["forecast"])); g[key][1].append(int(r["outcome"]))
def acc(groups):
    v = []
    for p, y in groups:
        ey = sum(y) / len(y)
        if ey > 0:
            v.append(1 - abs(sum(p) / len(p) - ey) / ey)
    return sum(v) / len(v), len(v)
by = collections.defaultdict(list)
for (L, m, *_), (p, y) in g.items():
    by[(L, m)].append((p, y))
rng = random.Random(1)
for L in sorted({k[0] for k in by}, key=int):
    rows = sorted(((acc(v)[0], m) for (l, m), v in by.items() if l == L), reverse=True)
    print(f"T = {int(L)//3600} h: " + ", ".join(f"{m} {a*100:.1f}" for a, m in rows[:6]))
    base = by[(L, ref)]
    sims = []
    for _ in range(reps):
        sims.append(acc([(p, [1 if rng.random() < q else 0 for q in p]) for p, _ in base])[0])
    sims.sort()
    n = [len(p) for p, _ in base]
    print(f"   perfectly calibrated ({ref}'s p as truth, independent draws, {reps} reps): "
          f"mean {statistics.mean(sims)*100:.1f} %, 95th pct {sims[int(.95*reps)]*100:.1f} %, max {sims[-1]*100:.1f} %;"
          f" groups {len(base)}, windows a group median {statistics.median(n)}")
