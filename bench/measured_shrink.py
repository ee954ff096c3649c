"""Would the measured oracle's medians be better estimates if shrunk towards a smooth structure? Split-half check.

At a measured point (condition, object size, configuration) the measured oracle returns the median of its
repetitions (``tailor.oracle.measured``). On the lossy links six repetitions leave that median noisy (docs/testbed.md
section 4b: two replicates' |log ratio| p90 0.4-0.56 at 1-5% loss). Empirical Bayes would pull each point's log
median towards a structure fitted over all points (a level per condition and size, plus configuration effects per
condition and/or per size), by the share of its deviation that its sampling variance explains.

This script decides whether that pays, on the measurements alone (no policy, no scenario): for every point with at
least ``2 * half`` repetitions it draws ``--splits`` random splits into two halves of ``--half`` repetitions; each
estimator sees half A and is scored against half B's log median (B's own noise adds the same amount to every
estimator's error, so differences between estimators are what counts). Scored: the points' log medians and their
contrasts with the registry default (cubic, IW 10, HTTP/1.1) at the same condition and size, which decide a "more
than 5% slower than the default" verdict, and how often that verdict agrees with half B's.

Estimators: ``raw`` (A's log median, what the oracle does) and ``eb:<structure>`` for structures ``cs`` (level per
condition x size only), ``cs+ck`` (plus a configuration effect per condition), ``cs+sk`` (per size), ``cs+ck+sk``.
The structure is least squares on A's log medians; the prior variance tau^2 of the deviations per condition by the
method of moments (mean squared residual minus mean sampling variance, at least 0), the sampling variance of a
median of ``half`` repetitions from the point's condition x size pooled within-point variance of log times times
``MEDIAN_EFF`` (pi / 2, the large-sample variance ratio of the median to the mean; approximate for 3).

Usage: PYTHONPATH=src .venv/bin/python bench/measured_shrink.py [--dataset data/oracle/tb-v2] [--splits 20]
[--half 3] [--json FILE]. Reads only; deterministic (``--seed``).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import pandas as pd

from tailor.eval.run import _git_commit

MEDIAN_EFF = math.pi / 2.0
STRUCTURES = ("cs", "cs+ck", "cs+sk", "cs+ck+sk")
POOLS = ("mean", "median")  # how a condition x size pools its points' within-point variances
SCALES = (0.25, 0.5, 1.0, MEDIAN_EFF)  # the sampling variance of a median of n: scale x pooled variance / n
DEFAULT = ("cubic", 10, "1.1")
DEGRADED = math.log(1.05)


def points(dataset: str, min_reps: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The object points with at least ``min_reps`` valid repetitions at the 200 ms minimum RTO: their keys and a
    (points x min_reps) matrix of log completion times (the first ``min_reps`` repetitions by number)."""
    m = pd.read_parquet(f"{dataset}/measurements.parquet")
    m = m[m["ok"] & (m["page"].fillna("") == "") & (m["rto_min_ms"] == 200)].copy()
    m["pt"] = m["key"].str.rsplit("|", n=1).str[0]
    m = m.sort_values(["pt", "rep"])
    m["i"] = m.groupby("pt").cumcount()
    m = m[m["i"] < min_reps]
    keep = m.groupby("pt")["i"].transform("size") == min_reps
    m = m[keep]
    wide = m.pivot(index="pt", columns="i", values="completion_ms")
    meta = m.drop_duplicates("pt").set_index("pt").loc[wide.index, ["condition", "size", "cc", "iw", "http"]]
    meta["iw"] = meta["iw"].astype(int)
    meta["http"] = meta["http"].astype(str)
    return meta.reset_index(), np.log(wide.to_numpy(float))


def design(meta: pd.DataFrame, structure: str) -> np.ndarray:
    """Dummy design of a structure (dense; a few hundred columns)."""
    cs = meta["condition"].astype(str) + "|" + meta["size"].astype(str)
    cfg = meta["cc"].astype(str) + "|" + meta["iw"].astype(str) + "|" + meta["http"].astype(str)
    blocks = [pd.get_dummies(cs).to_numpy(float)]
    if "ck" in structure:
        blocks.append(pd.get_dummies(meta["condition"].astype(str) + "#" + cfg).to_numpy(float))
    if "sk" in structure:
        blocks.append(pd.get_dummies(meta["size"].astype(str) + "#" + cfg).to_numpy(float))
    return np.hstack(blocks)


def shrunk(y: np.ndarray, x: np.ndarray, v: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Empirical Bayes: y = structure + deviation, deviation ~ N(0, tau_g^2), observed with sampling variance v;
    the posterior mean of structure + deviation (the structure taken as known: it pools hundreds of points)."""
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    mu = x @ beta
    r = y - mu
    out = np.empty_like(y)
    for g in np.unique(groups):
        k = groups == g
        tau2 = max(float(np.mean(r[k] ** 2) - np.mean(v[k])), 0.0)
        out[k] = mu[k] + tau2 / (tau2 + v[k]) * r[k]
    return out


def contrasts(meta: pd.DataFrame, logt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each point's log time minus the registry default's at the same condition and size (NaN where that is not
    measured) and a mask of the non-default points with a default."""
    cs = (meta["condition"].astype(str) + "|" + meta["size"].astype(str)).to_numpy()
    is_def = ((meta["cc"] == DEFAULT[0]) & (meta["iw"] == DEFAULT[1]) & (meta["http"] == DEFAULT[2])).to_numpy()
    pos = {c: i for i, c in zip(np.flatnonzero(is_def), cs[is_def])}
    ref = np.array([pos.get(c, -1) for c in cs])
    ok = (ref >= 0) & ~is_def
    out = np.full(len(cs), np.nan)
    out[ok] = logt[ok] - logt[ref[ok]]
    return out, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="data/oracle/tb-v2")
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--half", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    started = time.time()
    meta, logt = points(args.dataset, 2 * args.half)
    cs = (meta["condition"].astype(str) + "|" + meta["size"].astype(str)).to_numpy()
    cond = meta["condition"].astype(str).to_numpy()
    designs = {s: design(meta, s) for s in STRUCTURES}
    rng = np.random.default_rng(args.seed)
    scores: dict[str, list[list[float]]] = {}  # estimator -> per split [MSE, contrast MSE, verdict agreement]

    def score(name: str, est: np.ndarray, cb: np.ndarray, ok: np.ndarray, yb: np.ndarray) -> None:
        ce, _ = contrasts(meta, est)
        scores.setdefault(name, []).append([float(np.mean((est - yb) ** 2)), float(np.mean((ce[ok] - cb[ok]) ** 2)),
                                            float(np.mean((ce[ok] > DEGRADED) == (cb[ok] > DEGRADED)))])

    for _ in range(args.splits):
        perm = np.argsort(rng.random(logt.shape), axis=1)
        a = np.take_along_axis(logt, perm[:, :args.half], axis=1)
        b = np.take_along_axis(logt, perm[:, args.half:2 * args.half], axis=1)
        ya, yb = np.median(a, axis=1), np.median(b, axis=1)
        cb, ok = contrasts(meta, yb)
        score("raw", ya, cb, ok, yb)
        var = pd.Series(np.var(a, axis=1, ddof=1))
        for pool in POOLS:
            within = var.groupby(cs).transform(pool).to_numpy()
            for scale in SCALES:
                v = scale * within / args.half
                for s in STRUCTURES:
                    for tau_by, groups in (("cond", cond), ("cs", cs)):
                        score(f"eb:{s} tau/{tau_by} var:{pool} x{scale:.2f}", shrunk(ya, designs[s], v, groups),
                              cb, ok, yb)
    raw = np.array(scores["raw"])
    rows = {}
    for name, sc in scores.items():
        sc = np.array(sc)
        d = sc - raw
        half = 1.96 * d.std(axis=0, ddof=1) / math.sqrt(len(d)) if len(d) > 1 else np.full(3, math.nan)
        rows[name] = {"mse": float(sc[:, 0].mean()), "mse_contrast": float(sc[:, 1].mean()),
                      "agree": float(sc[:, 2].mean()), "d": d.mean(axis=0).tolist(), "d_half": half.tolist()}
    order = sorted(rows, key=lambda k: -rows[k]["agree"])
    print(f"{len(meta)} points with >= {2 * args.half} repetitions ({len(np.unique(cond))} conditions), {args.splits} "
          f"splits into {args.half} + {args.half}; scored against half B; {len(rows) - 1} shrinkage variants, the "
          f"{args.top} with the highest verdict agreement and raw")
    print("| estimator | MSE log median (vs raw, 95% t) | MSE contrast (vs raw) | degraded verdict agrees (vs raw) |")
    print("|---|---|---|---|")
    for k in order[:args.top] + ([] if "raw" in order[:args.top] else ["raw"]):
        r = rows[k]
        print(f"| {k} | {r['mse']:.4f} ({r['d'][0]:+.4f} +- {r['d_half'][0]:.4f}) | {r['mse_contrast']:.4f} "
              f"({r['d'][1]:+.4f} +- {r['d_half'][1]:.4f}) | {r['agree']:.3f} ({r['d'][2]:+.3f} +- {r['d_half'][2]:.3f}) |")
    best_mse = min(rows, key=lambda k: rows[k]["mse_contrast"])
    print(f"lowest contrast MSE: {best_mse}: {rows[best_mse]['mse_contrast']:.4f}, verdict agreement "
          f"{rows[best_mse]['agree']:.3f}")
    meta_out = {"commit": _git_commit(), "dataset": args.dataset, "splits": args.splits, "half": args.half,
                "seed": args.seed, "points": len(meta), "elapsed_s": round(time.time() - started, 1),
                "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print(f"\ncommit {meta_out['commit']}, {meta_out['when']}, {meta_out['elapsed_s']} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"meta": meta_out, "estimators": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
