#!/usr/bin/env python3
"""Issue 29, goal 4 (calibration), prototyped offline on a per-window file
of `gleaner eval --windows FILE`: the goal's figures for `logistic` and for
recalibrations of its forecasts fitted only on windows that had ENDED
before the forecast's local day began (refitted daily; no look-ahead),
plus in-sample ones (with look-ahead: a bound on what such a
recalibration of these forecasts could do). Platt and temperature fits are
ridge (10) towards the identity, as `logistic+hostcal`'s.

Figures use `model::forecast_stats`'s definitions: bias mean(p - y); Cox
slope of logit P(y) = a + b logit p (p clipped to [1e-4, 1 - 1e-4]) with the
sandwich variance summed over (host, date) clusters times G / (G - 1); ECE
over 10 equal-width bins; its floor the 95th percentile of 500 simulated
ECEs of a perfectly calibrated forecaster whose outcomes share a day
factor chosen to match the data's within-day variance inflation (Gaussian
copula; numpy's generator, so the floor differs from `eval`'s in the last
digit). Brier with a paired weekly-block bootstrap against `logistic`.

  python3 examples/goal4-recal.py WINDOWS.csv [CANDIDATE,...]  candidates (1)-(4)
  python3 examples/goal4-recal.py --frozen DEV.csv TEST.csv     (3) as a map frozen on DEV
  python3 examples/goal4-recal.py --overlap WINDOWS.csv         day vs week clusters
  python3 examples/goal4-recal.py --write WINDOWS.csv CANDIDATE,... OUT.csv   their forecasts, same columns
  python3 examples/goal4-recal.py --power WINDOWS.csv           the goal's clauses for a calibrated forecaster
(needs numpy; the forecasts are `logistic`'s rows of the file)
"""
import csv, sys, datetime, collections
import numpy as np

ECE_BINS = 10
CLIP = 1e-4
Z95 = 1.959963984540054


def logit(p):
    p = np.clip(p, CLIP, 1 - CLIP)
    return np.log(p / (1 - p))


def sig(x):
    return 1 / (1 + np.exp(-np.clip(x, -500, 500)))


def ece(p, y):
    b = np.minimum((np.clip(p, 0, 1) * ECE_BINS).astype(int), ECE_BINS - 1)
    sp = np.bincount(b, p, ECE_BINS)
    sy = np.bincount(b, y, ECE_BINS)
    return np.abs(sp - sy).sum() / len(p)


def ece_many(p, Y):
    """ECE of one p against many outcome rows Y (sims x n)."""
    b = np.minimum((np.clip(p, 0, 1) * ECE_BINS).astype(int), ECE_BINS - 1)
    onehot = np.zeros((len(p), ECE_BINS))
    onehot[np.arange(len(p)), b] = 1
    sp = p @ onehot
    sy = Y @ onehot
    return np.abs(sy - sp).sum(axis=1) / len(p)


def inflation(p, Y, cl, ncl):
    """Within-cluster variance inflation of each outcome row of Y."""
    Y = np.atleast_2d(Y)
    r = Y - p
    r = r - r.mean(axis=1, keepdims=True)
    sums = np.zeros((Y.shape[0], ncl))
    for k in range(Y.shape[0]):
        sums[k] = np.bincount(cl, r[k], ncl)
    return (sums ** 2).sum(axis=1) / (r ** 2).sum(axis=1)


def ndtri(q):
    # Acklam's approximation (as forecast_stats::normal_quantile), vectorised.
    a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2,
         1.383577518672690e2, -3.066479806614716e1, 2.506628277459239]
    b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2,
         6.680131188771972e1, -1.328068155288572e1]
    c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838,
         -2.549732539343734, 4.374664141464968, 2.938163982698783]
    d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996,
         3.754408661907416]
    q = np.asarray(q, float)
    out = np.empty_like(q)
    with np.errstate(all="ignore"):
        lo = q < 0.02425
        hi = q > 1 - 0.02425
        mid = ~(lo | hi)
        t = np.sqrt(-2 * np.log(np.where(lo, q, 0.5)))
        out[lo] = ((((((c[0]*t+c[1])*t+c[2])*t+c[3])*t+c[4])*t+c[5]) /
                   ((((d[0]*t+d[1])*t+d[2])*t+d[3])*t+1))[lo]
        t = np.sqrt(-2 * np.log(np.where(hi, 1 - q, 0.5)))
        out[hi] = -((((((c[0]*t+c[1])*t+c[2])*t+c[3])*t+c[4])*t+c[5]) /
                    ((((d[0]*t+d[1])*t+d[2])*t+d[3])*t+1))[hi]
        u = q - 0.5
        r = u * u
        out[mid] = ((((((a[0]*r+a[1])*r+a[2])*r+a[3])*r+a[4])*r+a[5])*u /
                    (((((b[0]*r+b[1])*r+b[2])*r+b[3])*r+b[4])*r+1))[mid]
        out[q <= 0] = -np.inf
        out[q >= 1] = np.inf
    return out


def simulate(z, cl, ncl, rho, k, rng):
    D = rng.standard_normal((k, ncl))
    E = rng.standard_normal((k, len(z)))
    return (np.sqrt(rho) * D[:, cl] + np.sqrt(1 - rho) * E < z).astype(float)


def ece_floor(p, y, cl, sims=500, seed=1):
    ncl = cl.max() + 1
    infl = inflation(p, y, cl, ncl)[0]
    z = ndtri(np.clip(p, 0, 1))
    rng = np.random.default_rng(seed)
    best = (np.inf, 0.0)
    for k in range(20):
        rho = k * 0.05
        m = inflation(p, simulate(z, cl, ncl, rho, 40, rng), cl, ncl).mean()
        if abs(m - infl) < best[0]:
            best = (abs(m - infl), rho)
    e = []
    for _ in range(sims // 50):
        e.extend(ece_many(p, simulate(z, cl, ncl, best[1], 50, rng)))
    e = np.sort(e)
    return np.quantile(e, 0.95), np.quantile(e, 0.5), best[1], infl


def cox(p, y, cl):
    x = logit(p)
    X = np.column_stack([np.ones_like(x), x])
    beta = np.array([0.0, 1.0])
    for _ in range(100):
        mu = sig(X @ beta)
        w = mu * (1 - mu)
        g = X.T @ (y - mu)
        H = (X * w[:, None]).T @ X
        step = np.linalg.solve(H, g)
        s = min(1.0, 5.0 / max(abs(step).max(), 1e-300))
        beta = beta + s * step
        if abs(step).max() < 1e-10:
            break
    mu = sig(X @ beta)
    H = (X * (mu * (1 - mu))[:, None]).T @ X
    inv = np.linalg.inv(H)
    ncl = cl.max() + 1
    S = np.column_stack([np.bincount(cl, (y - mu), ncl), np.bincount(cl, (y - mu) * x, ncl)])
    S = S[np.bincount(cl, minlength=ncl) > 0]
    G = len(S)
    V = inv @ (S.T @ S) @ inv * G / (G - 1)
    se = np.sqrt(V[1, 1])
    return beta[1], beta[1] - Z95 * se, beta[1] + Z95 * se


def paired(pa, pb, y, wk, counts):
    """Brier(A) - Brier(B) and its weekly-block 95 % bounds."""
    nw = counts.shape[1]
    da = np.bincount(wk, (pa - y) ** 2 - (pb - y) ** 2, nw)
    nn = np.bincount(wk, minlength=nw).astype(float)
    d = da.sum() / nn.sum()
    boot = (counts @ da) / (counts @ nn)
    return d, np.quantile(boot, 0.025), np.quantile(boot, 0.975)


def load(path, method):
    rows = collections.defaultdict(list)
    for r in csv.DictReader(open(path)):
        if r["outcome"] == "":
            continue
        rows[(r["method"], int(r["length_s"]))].append(r)
    data = {}
    for (m, L), rs in rows.items():
        host = np.array([r["host"] for r in rs])
        start = np.array([datetime.datetime.fromisoformat(r["start"].replace("Z", "+00:00")).timestamp()
                          for r in rs])
        date = [datetime.date.fromisoformat(r["date"]) for r in rs]
        data[(m, L)] = dict(
            host=host, start=start, L=L,
            date=np.array([d.toordinal() for d in date]),
            weekend=np.array([d.weekday() >= 5 for d in date]),
            week=np.array([(d - datetime.date(1970, 1, 5)).days // 7 for d in date]),
            hour=np.array([int(r["hour"]) for r in rs]),
            p=np.array([float(r["forecast"]) for r in rs]),
            y=np.array([float(r["outcome"]) for r in rs]))
    return data


def ids(*cols):
    keys = list(zip(*cols))
    table = {}
    return np.array([table.setdefault(k, len(table)) for k in keys])


# ---- recalibrations: each returns q for every window -------------------

def fit_platt(x, y, w, ridge, slope_only=False):
    """Weighted ridge logistic y ~ a + b x with offset, pulled to (0, 1)."""
    c = np.zeros(2)
    X = np.column_stack([np.ones_like(x), x])
    for _ in range(30):
        mu = sig(x + X @ c)
        g = X.T @ (w * (y - mu)) - ridge * c
        H = (X * (w * mu * (1 - mu))[:, None]).T @ X + ridge * np.eye(2)
        if slope_only:
            g[0] = 0
            H[0, :] = 0
            H[:, 0] = 0
            H[0, 0] = 1
        step = np.linalg.solve(H, g)
        c += step
        if abs(step).max() < 1e-9:
            break
    return c[0], 1 + c[1]


def rolling(d, group_of, min_days=14, half_life=None, ridge=10.0, slope_only=False,
            reach_days=None):
    """Per window: fit on earlier windows of the same group that ended
    before its start (and before its local date began: fitted once a day),
    apply to its forecast. Groups: any key per window (host, host x day kind...)."""
    p, y, start, L = d["p"], d["y"], d["start"], d["L"]
    x = logit(p)
    q = p.copy()
    g = group_of(d)
    end = start + L
    for key in np.unique(g):
        idx = np.where(g == key)[0]
        days = np.unique(d["date"][idx])
        for day in days:
            today = idx[d["date"][idx] == day]
            t0 = start[today].min()  # fit once a day, before its first window
            past = idx[end[idx] <= t0]
            if reach_days is not None:
                past = past[d["date"][past] >= day - reach_days]
            if len(np.unique(d["date"][past])) < min_days:
                continue
            w = np.ones(len(past))
            if half_life:
                w = 0.5 ** ((day - d["date"][past]) / half_life)
            a, b = fit_platt(x[past], y[past], w, ridge, slope_only)
            q[today] = sig(a + b * x[today])
    return q


def insample(d, group_of, slope_only=False):
    """Look-ahead: each group's Platt fitted on all its own windows."""
    x = logit(d["p"])
    q = d["p"].copy()
    g = group_of(d)
    for key in np.unique(g):
        idx = np.where(g == key)[0]
        a, b = fit_platt(x[idx], d["y"][idx], np.ones(len(idx)), 1e-6, slope_only)
        q[idx] = sig(a + b * x[idx])
    return q


def iso_knots(p, y):
    """PAV blocks as (mean forecast, survival share) knots, as
    `baselines::isotonic::Isotonic` keeps them (linear between, flat beyond)."""
    order = np.argsort(p, kind="stable")
    blocks = []  # [sum p, sum y, n]
    for pi, yi in zip(p[order], y[order]):
        blocks.append([pi, yi, 1.0])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            sp, sy, n = blocks.pop()
            blocks[-1][0] += sp; blocks[-1][1] += sy; blocks[-1][2] += n
    kp = np.array([b[0] / b[2] for b in blocks])
    ky = np.array([b[1] / b[2] for b in blocks])
    return kp, ky, np.array([b[2] for b in blocks])


def apply_knots(knots, p):
    return np.interp(p, knots[0], knots[1])


def auc(p, y):
    order = np.argsort(p, kind="stable")
    ps, ys = p[order], y[order]
    # ranks with ties averaged
    _, inv, cnt = np.unique(ps, return_inverse=True, return_counts=True)
    cum = np.cumsum(cnt)
    rank = (cum - (cnt - 1) / 2.0)[inv]
    npos = ys.sum(); nneg = len(ys) - npos
    return (rank[ys == 1].sum() - npos * (npos + 1) / 2) / (npos * nneg)


def rolling_iso(d, group_of, min_days=14, pseudo=0.0, refit_days=1):
    """Per group (host, or all hosts pooled): PAV knots fitted on the group's
    windows that ended before the day's first window, refitted every
    `refit_days`, blended (n q + K p) / (n + K) towards the forecast."""
    p, y, start, L = d["p"], d["y"], d["start"], d["L"]
    end = start + L
    q = p.copy()
    g = group_of(d)
    for key in np.unique(g):
        idx = np.where(g == key)[0]
        cache = None
        for day in np.unique(d["date"][idx]):
            today = idx[d["date"][idx] == day]
            if cache is None or day - cache[0] >= refit_days:
                past = idx[end[idx] <= start[today].min()]
                if len(np.unique(d["date"][past])) < min_days:
                    continue
                cache = (day, iso_knots(p[past], y[past]), len(past))
            n = cache[2]
            q[today] = (n * apply_knots(cache[1], p[today]) + pseudo * p[today]) / (n + pseudo)
    return q


def figures(d, q, base, counts, wk, cl, label):
    b = (q - d["y"]).mean()
    s, lo, hi = cox(q, d["y"], cl)
    e = ece(q, d["y"])
    f95, f50, rho, infl = ece_floor(q, d["y"], cl)
    dB, dlo, dhi = paired(base, q, d["y"], wk, counts)
    ok = abs(b) <= 0.03 and lo <= 1 <= hi and lo >= 0.8 and e <= f95
    print(f"  {label:34} bias {b:+.3f}  slope {s:.2f} [{lo:.2f}, {hi:.2f}]  "
          f"ECE {e:.3f} / floor {f95:.3f}  AUC {auc(q, d['y']):.3f}  Brier {((q - d['y'])**2).mean():.4f} "
          f"dBrier(logistic-this) {dB:+.4f} [{dlo:+.4f}, {dhi:+.4f}]  goal4 {'MET' if ok else 'no'}",
          flush=True)


def counts_for(wk, seed=1, resamples=1000):
    rng = np.random.default_rng(seed)
    nw = wk.max() + 1
    return np.stack([np.bincount(rng.integers(0, nw, nw), minlength=nw) for _ in range(resamples)])


def candidates():
    by_host = lambda d: d["host"]
    by_kind = lambda d: np.char.add(d["host"], np.where(d["weekend"], ":we", ":wd"))
    pooled = lambda d: np.zeros(len(d["p"]), int)
    return {
        "logistic": lambda d: d["p"],
        "(1) roll host x daykind Platt, hl 28d": lambda d: rolling(d, by_kind, half_life=28),
        "(1b) roll host x daykind Platt": lambda d: rolling(d, by_kind),
        "(2) roll host temperature, 180d": lambda d: rolling(d, by_host, slope_only=True, reach_days=180),
        "(2b) roll pool temperature": lambda d: rolling(d, pooled, slope_only=True),
        "(3) roll pool isotonic": lambda d: rolling_iso(d, pooled),
        "(3b) roll pool isotonic, weekly": lambda d: rolling_iso(d, pooled, refit_days=7),
        "(3c) roll pool Platt": lambda d: rolling(d, pooled),
        "(4) roll host isotonic": lambda d: rolling_iso(d, by_host),
        "(4b) roll host isotonic, K=100": lambda d: rolling_iso(d, by_host, pseudo=100.0),
        "(4c) roll host isotonic, K=1000": lambda d: rolling_iso(d, by_host, pseudo=1000.0),
        "(4d) roll host x daykind isotonic, K=100": lambda d: rolling_iso(d, by_kind, pseudo=100.0),
        "LOOKAHEAD host Platt": lambda d: insample(d, by_host),
        "LOOKAHEAD host x daykind Platt": lambda d: insample(d, by_kind),
    }


def run_candidates(path, method, which):
    data = load(path, method)
    for L in sorted({L for (m, L) in data if m == method}):
        d = data[(method, L)]
        cl = ids(d["host"], d["date"])
        wk = ids(d["host"], d["week"])
        print(f"length {L // 3600} h: {len(d['p'])} windows, {cl.max() + 1} host-days, {wk.max() + 1} host-weeks")
        counts = counts_for(wk)
        for name, fn in candidates().items():
            if which and not any(name.split(" ")[0] == w or name == w for w in which):
                continue
            figures(d, fn(d), d["p"], counts, wk, cl, name)


def run_frozen(dev_path, test_path, method):
    """(3) for a new host: one pooled isotonic map per length, fitted on all
    of DEV's windows and frozen, applied to TEST's forecasts."""
    dev, data = load(dev_path, method), load(test_path, method)
    for L in sorted({L for (m, L) in data if m == method}):
        dv, d = dev[(method, L)], data[(method, L)]
        knots = iso_knots(dv["p"], dv["y"])
        cl, wk = ids(d["host"], d["date"]), ids(d["host"], d["week"])
        print(f"length {L // 3600} h: map of {len(knots[0])} knots from {dev_path}, tested on {test_path}")
        counts = counts_for(wk)
        figures(d, d["p"], d["p"], counts, wk, cl, method)
        figures(d, apply_knots(knots, d["p"]), d["p"], counts, wk, cl, "(3f) frozen pooled isotonic")


def run_overlap(path, method):
    """Is the day the right cluster for the floor? The variance inflation
    and the floor with (host, date) clusters against (host, ISO week), and
    how many hosts meet the floor on their own."""
    data = load(path, method)
    for L in sorted({L for (m, L) in data if m == method}):
        d = data[(method, L)]
        p, y = d["p"], d["y"]
        day, wk = ids(d["host"], d["date"]), ids(d["host"], d["week"])
        fd, fw = ece_floor(p, y, day), ece_floor(p, y, wk)
        hosts = np.unique(d["host"])
        met = sum(ece(p[d["host"] == h], y[d["host"] == h])
                  <= ece_floor(p[d["host"] == h], y[d["host"] == h], ids(d["date"][d["host"] == h]), 300)[0]
                  for h in hosts)
        print(f"{L // 3600} h: ECE {ece(p, y):.3f}; by day R {fd[3]:.1f}, floor {fd[0]:.3f}; "
              f"by host-week R {fw[3]:.1f}, floor {fw[0]:.3f}; hosts whose own ECE <= own floor {met}/{len(hosts)}",
              flush=True)


def run_power(path, method, sims=200):
    """How often a perfectly calibrated forecaster with these forecasts and
    this overlap (the floor's copula) passes the slope clause (interval
    holds 1, lower bound >= 0.8) and the ECE clause (against the floor
    simulated from the data, as the goal does)."""
    data = load(path, method)
    for L in sorted({L for (m, L) in data if m == method}):
        d = data[(method, L)]
        p, y = d["p"], d["y"]
        cl = ids(d["host"], d["date"])
        ncl = cl.max() + 1
        f95, _, rho, _ = ece_floor(p, y, cl)
        z = ndtri(np.clip(p, 0, 1))
        rng = np.random.default_rng(7)
        slope_ok, ece_ok, los = 0, 0, []
        for _ in range(sims):
            ys = simulate(z, cl, ncl, rho, 1, rng)[0]
            s, lo, hi = cox(p, ys, cl)
            los.append(lo)
            slope_ok += lo <= 1 <= hi and lo >= 0.8
            ece_ok += ece(p, ys) <= f95
        print(f"{L // 3600} h: rho {rho:.2f}; a calibrated forecaster meets the slope clause in "
              f"{slope_ok}/{sims} (median lower bound {np.median(los):.2f}), the ECE clause in {ece_ok}/{sims}",
              flush=True)


def run_write(path, method, which, out):
    """The file's `method` rows and, beside each, the same window forecast
    by each candidate named (method column: the candidate's tag, e.g.
    `(3)`), in the file's order, for `examples/goal4_from_windows.rs`."""
    data = load(path, method)
    fns = {name.split(" ")[0]: fn for name, fn in candidates().items()
           if name.split(" ")[0] in which}
    q = {(tag, L): fn(data[(method, L)]) for tag, fn in fns.items()
         for (m, L) in data if m == method}
    seen = collections.Counter()
    with open(path) as src, open(out, "w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=reader.fieldnames, lineterminator="\n")
        writer.writeheader()
        for r in reader:
            if r["method"] != method or r["outcome"] == "":
                continue
            L = int(r["length_s"])
            k = seen[L]
            seen[L] += 1
            writer.writerow(r)
            for tag in fns:
                writer.writerow({**r, "method": f"{method}{tag}", "forecast": repr(float(q[(tag, L)][k]))})


def main():
    args = sys.argv[1:]
    method = "logistic"
    if args[0] == "--frozen":
        run_frozen(args[1], args[2], method)
    elif args[0] == "--write":
        run_write(args[1], method, args[2].split(","), args[3])
    elif args[0] == "--power":
        run_power(args[1], method)
    elif args[0] == "--overlap":
        run_overlap(args[1], method)
    else:
        run_candidates(args[0], method, args[1].split(",") if len(args) > 1 else None)


if __name__ == "__main__":
    main()
