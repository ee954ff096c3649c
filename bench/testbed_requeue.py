"""What re-measuring a dataset's late runs changed (`tailor testbed measure --requeue-lateness-ms X`; docs/testbed.md
section 4a).

    PYTHONPATH=src .venv/bin/python bench/testbed_requeue.py [data/oracle/tb-v2] [--since 2026-12-06] [--json F]

`--requeue-lateness-ms` moves the fetches of runs whose emulator send-lateness p99 exceeded X ms to
`discarded.parquet` and the next `measure` fetches the same keys again. This pairs every discarded fetch requeued
on or after `--since` (the day the discarded run was measured is before it; its key measured again after it) with
the fetch that replaced it, and compares them per measured point (condition, size, configuration: the median over
its repetitions, what the measured oracle reads): the runs' lateness before and after, the median log change per
condition, how many points moved by more than 5%, and, per (condition, size) cell, whether the fastest
configuration and the order of the configurations (Spearman rho of old and new medians) stayed. Reads only.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

KEYS = ["condition", "size_bytes", "cc", "iw", "rto_min_ms", "http"]


def pairs(dataset: Path, since: float) -> pd.DataFrame:
    """One row per re-measured fetch: old and new completion time and the two runs' down-link lateness p99 (ms)."""
    old = pd.read_parquet(dataset / "discarded.parquet")
    new = pd.read_parquet(dataset / "measurements.parquet")
    runs = pd.read_parquet(dataset / "runs.parquet").drop_duplicates("run_id", keep="last")
    late = runs.set_index("run_id")["emu_down_lateness_p99_us"] / 1000.0
    new = new[new["started_unix"] >= since]
    old = old[old["started_unix"] < since].sort_values("started_unix").drop_duplicates("key", keep="last")
    m = old.merge(new[["key", "completion_ms", "run_id", "ok"]], on="key", suffixes=("_old", "_new"))
    m = m[m["ok_old"].astype(bool) & m["ok_new"].astype(bool)]
    m["late_old_ms"] = m["run_id_old"].map(late)
    m["late_new_ms"] = m["run_id_new"].map(late)
    return m


def points(m: pd.DataFrame) -> pd.DataFrame:
    """Per measured point: the median over repetitions before and after, and the log change."""
    g = m.groupby(KEYS).agg(old=("completion_ms_old", "median"), new=("completion_ms_new", "median"),
                            reps=("completion_ms_new", "size")).reset_index()
    g["dlog"] = np.log(g["new"] / g["old"])
    return g


def cells(p: pd.DataFrame, new: str = "new") -> pd.DataFrame:
    """Per (condition, size) with at least three configurations: does the best agree, Spearman rho of the ``old``
    medians and those in column ``new``."""
    rows = []
    for (cond, size), c in p.groupby(["condition", "size_bytes"]):
        if len(c) < 3:
            continue
        rho = spearmanr(c["old"], c[new]).statistic
        best_old, best_new = c["old"].idxmin(), c[new].idxmin()
        rows.append({"condition": cond, "size_bytes": int(size), "configs": len(c), "rho": float(rho),
                     "best_agrees": bool(best_old == best_new),
                     # what keeping the old best costs under the new medians
                     "old_best_cost": float(c.loc[best_old, new] / c[new].min() - 1.0)})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", nargs="?", default="data/oracle/tb-v2")
    ap.add_argument("--since", default="2026-12-06", help="UTC date (YYYY-MM-DD) the re-measurement started")
    ap.add_argument("--json", default=None, help="write the per-condition and per-cell tables here")
    args = ap.parse_args()
    since = datetime.fromisoformat(args.since).replace(tzinfo=UTC).timestamp()
    m = pairs(Path(args.dataset), since)
    if m.empty:
        raise SystemExit(f"no fetch of {args.dataset} was discarded before {args.since} and measured again after it")
    p = points(m)
    c = cells(p)
    print(f"{len(m)} fetches re-measured ({len(p)} points, {m['condition'].nunique()} conditions); runs' down-link "
          f"lateness p99 median {m['late_old_ms'].median():.1f} ms before (max {m['late_old_ms'].max():.1f}), "
          f"{m['late_new_ms'].median():.2f} ms after (max {m['late_new_ms'].max():.2f})")
    q = np.quantile(p["dlog"], [0.1, 0.5, 0.9])
    print(f"points: log(new / old median) p10 / p50 / p90 {q[0]:+.3f} / {q[1]:+.3f} / {q[2]:+.3f}; "
          f"faster by > 5%: {(p['dlog'] < np.log(1 / 1.05)).sum()}, slower by > 5%: {(p['dlog'] > np.log(1.05)).sum()}")
    by = p.groupby("condition").agg(points=("dlog", "size"), median_dlog=("dlog", "median"),
                                    faster_5=("dlog", lambda x: int((x < np.log(1 / 1.05)).sum())),
                                    slower_5=("dlog", lambda x: int((x > np.log(1.05)).sum())))
    lat = m.groupby("condition").agg(late_old_ms=("late_old_ms", "median"), late_new_ms=("late_new_ms", "median"))
    by = by.join(lat).join(c.groupby("condition").agg(cells=("rho", "size"), rho_median=("rho", "median"),
                                                      best_agrees=("best_agrees", "sum")))
    print("\n| condition | points | lateness before / after (ms) | median log change | > 5% faster / slower | "
          "cells | rho old vs new (median) | best agrees |")
    print("|---|---|---|---|---|---|---|---|")
    for cond, r in by.sort_values("median_dlog").iterrows():
        cells_s = f"{int(r['cells'])}" if np.isfinite(r["cells"]) else "0"
        rho_s = f"{r['rho_median']:.2f}" if np.isfinite(r["rho_median"]) else "-"
        agree_s = f"{int(r['best_agrees'])}" if np.isfinite(r["best_agrees"]) else "-"
        print(f"| {cond} | {int(r['points'])} | {r['late_old_ms']:.1f} / {r['late_new_ms']:.2f} | "
              f"{r['median_dlog']:+.3f} | {int(r['faster_5'])} / {int(r['slower_5'])} | {cells_s} | {rho_s} | {agree_s} |")
    if len(c):
        print(f"\ncells (condition x size, >= 3 configurations): {len(c)}; best agrees in {int(c['best_agrees'].sum())}; "
              f"rho median {c['rho'].median():.2f} (p10 {c['rho'].quantile(0.1):.2f}); the old best's cost under the "
              f"new medians median {100 * c['old_best_cost'].median():.1f}%, p90 {100 * c['old_best_cost'].quantile(0.9):.1f}%, "
              f"max {100 * c['old_best_cost'].max():.1f}%")
    big = p.reindex(p["dlog"].abs().sort_values(ascending=False).index).head(10)
    print("\nlargest changes (median over repetitions, ms):")
    for r in big.itertuples():
        print(f"  {r.condition} {r.size_bytes // 1024} KB {r.cc} IW {r.iw} rto {r.rto_min_ms} HTTP/{r.http}: "
              f"{r.old:.0f} -> {r.new:.0f} ({r.dlog:+.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "dataset": args.dataset, "since": args.since, "fetches": int(len(m)), "points": int(len(p)),
            "conditions": by.reset_index().replace({np.nan: None}).to_dict("records"),
            "cells": c.to_dict("records")}, indent=1))


if __name__ == "__main__":
    main()
