"""What more repetitions with fresh loss draws changed in a dataset's lossy points (docs/testbed.md section 4b).

    PYTHONPATH=src .venv/bin/python bench/testbed_more_reps.py [data/oracle/tb-v2] [--first 3] [--json F]

A plan measured again with more ``reps`` and a new ``seed`` (data/oracle/plans/tb-v2-lossy-reps-*.json) adds
repetitions ``first`` .. to points that had ``first`` of them, with new loss draws. Per measured point (condition,
size, configuration) this compares the median the measured oracle read before (repetitions below ``first``), the
median of the new repetitions alone (an independent replicate: their log ratio is the old median's noise plus any
drift of the machine between the sessions, whose median should be about 0) and the median over all of them (what the
oracle reads now). Per (condition, size) cell with the registry default (CUBIC IW 10, HTTP/1.1) measured it also
counts the points whose "more than 5% slower than the default" verdict -- the evaluation's degraded page load --
changed, and whether the fastest configuration stayed. Reads only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from testbed_requeue import cells  # bench/ is the script's directory, first on sys.path

KEYS = ["condition", "size_bytes", "cc", "iw", "rto_min_ms", "http"]
DEFAULT = {"cc": "cubic", "iw": 10, "http": "1.1"}
CDN_STATIC = {"cc": "bbr", "iw": 32, "http": "2"}


def points(df: pd.DataFrame, first: int) -> pd.DataFrame:
    """Per point with repetitions on both sides of ``first``: old / new-only / all medians and their counts."""
    df = df[df["ok"].astype(bool) & (df["page"].isna() | (df["page"] == ""))].copy()
    df["http"] = df["http"].astype(str)
    df["new"] = df["rep"] >= first
    g = df.groupby(KEYS + ["new"])["completion_ms"].agg(["median", "size"]).unstack("new")
    g = g.dropna()
    out = pd.DataFrame({"old": g[("median", False)], "new_only": g[("median", True)],
                        "n_old": g[("size", False)].astype(int), "n_new": g[("size", True)].astype(int)})
    allm = df.groupby(KEYS)["completion_ms"].median()
    out["all"] = allm.reindex(out.index)
    out = out.reset_index()
    out["replicate"] = np.log(out["new_only"] / out["old"])  # independent draws: noise (+ drift)
    out["change"] = np.log(out["all"] / out["old"])  # what the oracle reads, after / before
    loss = df.drop_duplicates("condition").set_index("condition")["loss"]
    out["loss"] = out["condition"].map(loss).astype(float)
    return out


def _is(p: pd.DataFrame, cfg: dict) -> pd.Series:
    return (p["cc"] == cfg["cc"]) & (p["iw"] == cfg["iw"]) & (p["http"] == cfg["http"])


def verdicts(p: pd.DataFrame) -> pd.DataFrame:
    """Per point: slower than the same cell's default by more than 5%, before and after."""
    d = p[_is(p, DEFAULT)][["condition", "size_bytes", "old", "all"]]
    q = p.merge(d, on=["condition", "size_bytes"], suffixes=("", "_default"))
    q = q[~_is(q, DEFAULT)].copy()
    q["slow_before"] = q["old"] > 1.05 * q["old_default"]
    q["slow_after"] = q["all"] > 1.05 * q["all_default"]
    return q


def q3(x) -> list[float]:
    return [round(float(v), 3) for v in np.quantile(np.asarray(x, float), [0.1, 0.5, 0.9])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default="data/oracle/tb-v2")
    ap.add_argument("--first", type=int, default=3, help="the first added repetition (default 3)")
    ap.add_argument("--json", help="write the summary here")
    a = ap.parse_args()
    ds = Path(a.dataset)
    p = points(pd.read_parquet(ds / "measurements.parquet"), a.first)
    if p.empty:
        raise SystemExit(f"{ds}: no point has repetitions below and from {a.first}")
    v = verdicts(p)
    c = cells(p, new="all")
    summary = {
        "dataset": str(ds), "first": a.first, "points": int(len(p)), "conditions": int(p["condition"].nunique()),
        "reps_old_median": float(p["n_old"].median()), "reps_new_median": float(p["n_new"].median()),
        "replicate_log_p10_p50_p90": q3(p["replicate"]),
        "replicate_abs_over_5pct": round(float((p["replicate"].abs() > np.log(1.05)).mean()), 3),
        "change_log_p10_p50_p90": q3(p["change"]),
        "change_abs_over_5pct": round(float((p["change"].abs() > np.log(1.05)).mean()), 3),
        "verdict_points": int(len(v)), "slow_before": int(v["slow_before"].sum()), "slow_after": int(v["slow_after"].sum()),
        "slow_to_not": int((v["slow_before"] & ~v["slow_after"]).sum()),
        "not_to_slow": int((~v["slow_before"] & v["slow_after"]).sum()),
        "cdn_static_slow_before": int(v[_is(v, CDN_STATIC)]["slow_before"].sum()),
        "cdn_static_slow_after": int(v[_is(v, CDN_STATIC)]["slow_after"].sum()),
        "cdn_static_points": int(_is(v, CDN_STATIC).sum()),
        "cells": int(len(c)), "cells_same_best": int(c["best_agrees"].sum()) if len(c) else 0,
        "cells_rho_median": round(float(c["rho"].median()), 3) if len(c) else None,
        "old_best_cost_p50_p90_max": ([round(float(x), 3) for x in np.quantile(c["old_best_cost"], [0.5, 0.9, 1.0])]
                                      if len(c) else None),
    }
    per = p.groupby("condition").agg(loss=("loss", "first"), points=("change", "size"),
                                     replicate_p50=("replicate", "median"),
                                     replicate_abs_p90=("replicate", lambda x: float(np.quantile(np.abs(x), 0.9))),
                                     change_abs_p90=("change", lambda x: float(np.quantile(np.abs(x), 0.9))))
    vv = v.groupby("condition").agg(slow_before=("slow_before", "sum"), slow_after=("slow_after", "sum"))
    per = per.join(vv)
    summary["per_condition"] = {k: {kk: (round(float(vv_), 4) if isinstance(vv_, float) else int(vv_))
                                    for kk, vv_ in r.items()} for k, r in per.iterrows()}
    print(f"{ds}: {summary['points']} points in {summary['conditions']} conditions, repetitions "
          f"{summary['reps_old_median']:g} before + {summary['reps_new_median']:g} new (median)")
    print(f"new repetitions alone vs before, log p10/p50/p90 {summary['replicate_log_p10_p50_p90']} "
          f"(|.| > 5%: {summary['replicate_abs_over_5pct']:.1%})")
    print(f"all vs before (what the oracle reads), log p10/p50/p90 {summary['change_log_p10_p50_p90']} "
          f"(|.| > 5%: {summary['change_abs_over_5pct']:.1%})")
    print(f"> 5% slower than the default: {summary['slow_before']} -> {summary['slow_after']} of "
          f"{summary['verdict_points']} points ({summary['slow_to_not']} no longer, {summary['not_to_slow']} newly); "
          f"BBR IW 32 HTTP/2 {summary['cdn_static_slow_before']} -> {summary['cdn_static_slow_after']} of "
          f"{summary['cdn_static_points']}")
    if len(c):
        print(f"cells: fastest the same in {summary['cells_same_best']} of {summary['cells']}, rho median "
              f"{summary['cells_rho_median']}, the old fastest's cost p50/p90/max {summary['old_best_cost_p50_p90_max']}")
    print(per.round(3).to_string())
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
