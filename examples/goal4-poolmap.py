#!/usr/bin/env python3
"""Issue 29, goal 4 (calibration): a pool map a node could use, guarded.

Each host publishes, per window length, its reliability bins of resolved
windows (50 equal-width forecast bins: count, sum of forecasts, sum of
outcomes). The pool map of a length is the isotonic (PAV) fit over the sum
of every host's bins (one weighted point per bin: mean forecast, survival
share, count), applied as `baselines::isotonic`'s knots (linear between,
flat beyond). It is refitted daily from windows that ended before the
forecast's local day began (nothing before 14 resolved pool days: the raw
forecast). A host applies it to its own forecast only while its guard
holds, judged on its own resolved windows (ended before the forecast's
local day) that the map had forecast when they were asked: (PG), the
brief's guard, while Brier of the mapped forecasts < Brier of the raw
ones, over at least GUARD_DAYS such days (else raw); (PH), unless the
mapped Brier is above the raw one beyond the host's day-clustered 95 %
bound, over at least GUARD_DAYS days (else mapped). Either needs three
sums per length on the node: n, sum (p - y)^2, sum (q - y)^2.

Traces of different calendar periods are pooled as hosts that joined on
the same day: each host's first test day is day 0, and a window may feed
a forecast of day k (of any host) once it ended before day k's local
midnight of its own host. The synthetic desktops all start 2025-09-01 UTC,
so within a set of desktops this is the calendar, as `goal4-recal.py`'s
(3) has it.

  python3 examples/goal4-poolmap.py [--bins 50] [--guard-days 7] [--fit KIND,...] [--write PREFIX] KIND=WINDOWS.csv ...

pools every file given (--fit: the map learns from these kinds' windows
only, and is applied to every kind's); prints per kind (file) and length
`logistic`, (3u) the same pool unbinned, (P) the binned map, (PG) and (PH)
the binned map guarded: bias, slope, ECE / floor (numpy's), AUC, Brier and
Brier(logistic) - Brier(candidate) with the paired weekly-block 95 %
bounds of `goal4-recal.py`; the share of windows each maps; and the
hosts' own gains from (P) over their whole test record (what a guard sees
at best). --write PREFIX writes PREFIX-KIND.csv per kind (the file's
`logistic` rows in its order, each followed by the candidates' rows
tagged logistic(3u) / (P) / (PG) / (PH)) for
`examples/goal4_from_windows.rs`, the goal's own code.
(needs numpy; the forecasts are `logistic`'s rows of the files)
"""
import collections
import csv
import importlib.util
import os
import sys

import numpy as np

_spec = importlib.util.spec_from_file_location(
    "recal", os.path.join(os.path.dirname(os.path.abspath(__file__)), "goal4-recal.py"))
recal = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recal)

DAY = 86400
MIN_DAYS = 14


def weighted_knots(mp, my, w):
    """PAV over weighted points (bins) sorted by mean forecast: knots
    (block mean forecast, block survival share), as `iso_knots` and
    `baselines::isotonic::pav` with weights."""
    blocks = []  # [w, sum w p, sum w y]
    for pi, yi, wi in sorted(zip(mp, my, w)):
        blocks.append([wi, wi * pi, wi * yi])
        while len(blocks) > 1 and blocks[-2][2] / blocks[-2][0] > blocks[-1][2] / blocks[-1][0]:
            a, b = blocks[-2], blocks.pop()
            a[0] += b[0]; a[1] += b[1]; a[2] += b[2]
    return (np.array([b[1] / b[0] for b in blocks]), np.array([b[2] / b[0] for b in blocks]))


def pooled_cell(cells):
    """One length's rows of every file, with each row's position on the
    shared day line (host's first test day = 0)."""
    keys = ("host", "kind", "p", "y", "start", "date", "week", "hour")
    out = {k: [] for k in keys}
    for kind, d in cells:
        out["host"].append(np.char.add(kind + ":", d["host"]))
        out["kind"].append(np.full(len(d["p"]), kind))
        for k in keys[2:]:
            out[k].append(d[k])
    c = {k: np.concatenate(v) for k, v in out.items()}
    c["L"] = cells[0][1]["L"]
    # local start: the row's local date and hour, plus the UTC start's minutes
    minute = np.mod(c["start"], 3600)
    first = {h: c["date"][c["host"] == h].min() for h in np.unique(c["host"])}
    c["k"] = c["date"] - np.array([first[h] for h in c["host"]])
    c["end"] = c["k"] * DAY + c["hour"] * 3600 + minute + c["L"]
    return c


def pool_map(c, nbins, fit=None):
    """The map's forecast for every window (q = p before the pool has
    MIN_DAYS resolved days): fitted on the day's cut-off, from bins
    (nbins > 0) or from every window (nbins = 0, `goal4-recal.py`'s (3)),
    of the kinds in `fit` (None: every kind)."""
    p, y, end, k = c["p"], c["y"], c["end"], c["k"]
    q = p.copy()
    order = np.argsort(end, kind="stable")
    if fit is not None:
        order = order[np.isin(c["kind"][order], fit)]
    ends = end[order]
    b = np.minimum((np.clip(p, 0, 1) * max(nbins, 1)).astype(int), max(nbins, 1) - 1)
    for day in np.unique(k):
        n_past = np.searchsorted(ends, day * DAY, side="right")
        past = order[:n_past]
        if len(np.unique(k[past])) < MIN_DAYS:
            continue
        today = k == day
        if nbins:
            n = np.bincount(b[past], minlength=nbins)
            sp = np.bincount(b[past], p[past], nbins)
            sy = np.bincount(b[past], y[past], nbins)
            keep = n > 0
            knots = weighted_knots(sp[keep] / n[keep], sy[keep] / n[keep], n[keep])
        else:
            knots = recal.iso_knots(p[past], y[past])[:2]
        q[today] = np.interp(p[today], knots[0], knots[1])
    return q


def guarded(c, q, guard_days, rule="lowered"):
    """Per host: q or p on each day, from the host's own resolved windows
    (ended before the day) that the map forecast. rule "lowered" (the
    brief's guard): q when Brier(q) < Brier(p) over at least guard_days
    days, else p. rule "harm": q unless, over at least guard_days days,
    Brier(q) is above Brier(p) beyond the day-clustered 95 % bound (the map
    shown to harm this host); with less evidence, q."""
    p, y, end, k = c["p"], c["y"], c["end"], c["k"]
    out = p.copy()
    on = np.zeros(len(p), bool)
    mapped = q != p
    gain_all = (p - y) ** 2 - (q - y) ** 2
    for h in np.unique(c["host"]):
        idx = np.where(c["host"] == h)[0]
        ev = idx[mapped[idx]]
        for day in np.unique(k[idx]):
            today = idx[k[idx] == day]
            e = ev[end[ev] <= day * DAY]
            days, cl = np.unique(k[e], return_inverse=True)
            apply = rule == "harm"
            if len(days) >= guard_days:
                g = gain_all[e]
                if rule == "lowered":
                    apply = g.sum() > 0
                else:
                    m = g.mean()
                    per_day = np.bincount(cl, g - m)
                    se = np.sqrt((per_day ** 2).sum() * len(days) / (len(days) - 1)) / len(g)
                    apply = m + recal.Z95 * se >= 0
            if apply:
                out[today] = q[today]
                on[today] = mapped[today]
    return out, on


def own_gains(d, q):
    """What a guard sees at best: each host's Brier(p) - Brier(q) over all
    its mapped windows, with its day-clustered 95 % half-width."""
    gains = []
    for h in np.unique(d["host"]):
        sel = (d["host"] == h) & (q != d["p"])
        if sel.sum() < 2:
            continue
        g = (d["p"][sel] - d["y"][sel]) ** 2 - (q[sel] - d["y"][sel]) ** 2
        _, cl = np.unique(d["date"][sel], return_inverse=True)
        m, G = g.mean(), cl.max() + 1
        half = recal.Z95 * np.sqrt((np.bincount(cl, g - m) ** 2).sum() * G / (G - 1)) / len(g)
        gains.append((m, half))
    if not gains:
        return "(P) never mapped a host's windows"
    m, half = np.array(gains).T
    return (f"(P) per host, own gain over all its mapped windows: {m.min():+.4f} to {m.max():+.4f}, "
            f"95 % half-widths {half.min():.4f}-{half.max():.4f}; interval excludes 0 for "
            f"{(np.abs(m) > half).sum()} of {len(m)} hosts")


def main():
    args = sys.argv[1:]
    nbins, guard_days, prefix, fit = 50, 7, None, None
    while args and args[0].startswith("--"):
        flag, val = args[0], args[1]
        args = args[2:]
        if flag == "--bins":
            nbins = int(val)
        elif flag == "--guard-days":
            guard_days = int(val)
        elif flag == "--write":
            prefix = val
        elif flag == "--fit":
            fit = val.split(",")
    files = [a.split("=", 1) for a in args]
    data = {kind: recal.load(path, "logistic") for kind, path in files}
    lengths = sorted({L for d in data.values() for (m, L) in d if m == "logistic"})
    forecasts = {}
    for L in lengths:
        c = pooled_cell([(kind, data[kind][("logistic", L)]) for kind, _ in files])
        cands = {"(3u)": pool_map(c, 0, fit), "(P)": pool_map(c, nbins, fit)}
        cands["(PG)"], on = guarded(c, cands["(P)"], guard_days)
        cands["(PH)"], on_h = guarded(c, cands["(P)"], guard_days, "harm")
        for kind, _ in files:
            sel = c["kind"] == kind
            d = {key: (v[sel] if isinstance(v, np.ndarray) and len(v) == len(sel) else v)
                 for key, v in c.items()}
            cl = recal.ids(d["host"], d["date"])
            wk = recal.ids(d["host"], d["week"])
            counts = recal.counts_for(wk)
            print(f"{kind} {L // 3600} h: {sel.sum()} windows, {cl.max() + 1} host-days; "
                  f"pool of {len(c['p'])} windows; windows mapped: (P) {(cands['(P)'] != c['p'])[sel].mean():.0%}, "
                  f"(PG) {on[sel].mean():.0%}, (PH) {on_h[sel].mean():.0%}",
                  flush=True)
            recal.figures(d, d["p"], d["p"], counts, wk, cl, "logistic")
            print("  " + own_gains(d, cands["(P)"][sel]), flush=True)
            for tag, q in cands.items():
                recal.figures(d, q[sel], d["p"], counts, wk, cl, tag)
                forecasts[(kind, L, tag)] = q[sel]
    if prefix:
        for kind, path in files:
            seen = collections.Counter()
            with open(path) as src, open(f"{prefix}-{kind}.csv", "w", newline="") as dst:
                reader = csv.DictReader(src)
                writer = csv.DictWriter(dst, fieldnames=reader.fieldnames, lineterminator="\n")
                writer.writeheader()
                for r in reader:
                    if r["method"] != "logistic" or r["outcome"] == "":
                        continue
                    L = int(r["length_s"])
                    j = seen[L]
                    seen[L] += 1
                    writer.writerow(r)
                    for tag in ("(3u)", "(P)", "(PG)", "(PH)"):
                        writer.writerow({**r, "method": f"logistic{tag}",
                                         "forecast": repr(float(forecasts[(kind, L, tag)][j]))})


if __name__ == "__main__":
    main()
