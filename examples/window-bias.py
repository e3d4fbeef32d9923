#!/usr/bin/env python3
"""Issue 29, goal 4: each host's bias, mean(forecast - outcome), from a
`gleaner eval --windows FILE` CSV, per (host, length, method), and the same
by 28-day block of the window's date and by weekday / weekend for one
length. Shows whether a host's bias is a steady offset its own past could
correct ("Per-host recalibration, tried" in docs/accuracy.md).

  python3 examples/window-bias.py WINDOWS.csv [LENGTH_S] [METHOD,...]
  (LENGTH_S: 36000; METHOD: logistic,logistic+hostcal)"""
import csv, sys, datetime, collections

path = sys.argv[1]
length = sys.argv[2] if len(sys.argv) > 2 else "36000"
methods = (sys.argv[3] if len(sys.argv) > 3 else "logistic,logistic+hostcal").split(",")
# key -> [windows, sum of forecasts, sum of outcomes]
total = collections.defaultdict(lambda: [0, 0.0, 0.0])
for r in csv.DictReader(open(path)):
    if r["method"] not in methods or r["outcome"] == "":
        continue
    f, y = float(r["forecast"]), float(r["outcome"])
    d = datetime.date.fromisoformat(r["date"])
    keys = [("all", r["host"], r["length_s"], r["method"])]
    if r["length_s"] == length:
        keys.append(("block", r["host"], d.toordinal() // 28, r["method"]))
        keys.append(("weekend", r["host"], d.weekday() >= 5, r["method"]))
    for k in keys:
        s = total[k]
        s[0] += 1
        s[1] += f
        s[2] += y


def bias(k):
    n, f, y = total[k]
    return f"{(f - y) / n:+.3f}" if n else "-"


hosts = sorted({k[1] for k in total})
for part, label in [("all", "length_s"), ("block", f"28-day block ({length} s)"),
                    ("weekend", f"weekend ({length} s)")]:
    print(f"bias by host and {label}; each cell " + " / ".join(methods))
    for h in hosts:
        cells = sorted({k[2] for k in total if k[0] == part and k[1] == h},
                       key=lambda v: int(v) if isinstance(v, str) else v)
        row = [f"{c}: " + "/".join(bias((part, h, c, m)) for m in methods) for c in cells]
        print(f"  {h:22} " + "  ".join(row))
