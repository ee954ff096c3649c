"""How far a measured configuration contrast carries: the measured oracle's ``reach`` by leave-one-condition-out
cross-validation (issue 18; docs/testbed.md section 8e).

    PYTHONPATH=src .venv/bin/python bench/measured_reach.py [--reach 0 0.25 0.35 0.5 0.7 1 2 inf] [--json FILE]

For each dataset whose conditions the measured oracle interpolates (tb-v3's pages, tb-v3-objects, tb-v2's objects),
each measured cell (condition x workload) is predicted from the other conditions alone (``tailor oracle validate``'s
LOCO) with the oracle's ``reach`` set to each value of the grid (0 stands for 1e-4: the model's contrasts at every
unmeasured condition, the measured level; inf: the nearest contrasts carried unchanged). Printed per dataset and
value: the cells' median Spearman rho (and p25), the median and p90 cost of the oracle's choice, the median |log
error| and the mean over cells of the RMS error of the configurations' log contrasts (log time minus the cell's mean:
the order and spacing of the configurations, without the level). The chosen ``REACH`` is the value with the lowest
contrast error averaged over the three datasets. Reads only; about 1 minute.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

import tailor.oracle.validate as V
from tailor.oracle.measured import DEFAULT_DATASET, OBJECT_DATASET, PAGE_DATASET, MeasuredOracle

SETS = (("tb-v3 pages", PAGE_DATASET, "pages"), ("tb-v3-objects", OBJECT_DATASET, "objects"),
        ("tb-v2 objects", DEFAULT_DATASET, "objects"))


def contrast_error(oracle: MeasuredOracle, kind: str) -> float:
    """Mean over the LOCO cells of the RMS error of the configurations' log times around the cell's mean."""
    errs = []
    for (cond, workload), cell in V._cells(oracle, kind).groupby(["condition", "workload"]):
        cell = cell.drop_duplicates(V.KEYS)
        if len(cell) < V.MIN_CONFIGS:
            continue
        p = np.log(V.predict_cell("measured", oracle, cell, workload, exclude=cond))
        m = np.log(cell["median"].to_numpy())
        errs.append(float(np.sqrt(np.mean(((p - p.mean()) - (m - m.mean())) ** 2))))
    return float(np.mean(errs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reach", nargs="+", type=float, default=[0, 0.25, 0.35, 0.5, 0.7, 1, 2, float("inf")])
    ap.add_argument("--json", help="also write the figures as JSON")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of empty rows in the per-cell scores
    out, mean_err = [], {}
    for label, dataset, kind in SETS:
        for reach in args.reach:
            oracle = MeasuredOracle(dataset, pages="measured" if kind == "pages" else "none", page_dataset=dataset,
                                    page_extra=(), reach=max(reach, 1e-4))
            s, _ = V.validate_oracle("measured", oracle, kind)
            err = contrast_error(oracle, kind)
            mean_err.setdefault(reach, []).append(err)
            row = {"dataset": label, "reach": reach, "cells": s["cells"], "rho_median": s["rho_median"],
                   "rho_p25": s["rho_p25"], "cost_median": s["cost_median"], "cost_p90": s["cost_p90"],
                   "log_error_median": s["log_error_median"], "contrast_rms": err}
            out.append(row)
            print(f"{label:14s} reach {reach:<6g} cells {s['cells']:3d}  rho {s['rho_median']:.3f} / {s['rho_p25']:.3f}  "
                  f"cost {s['cost_median']:.2%} / {s['cost_p90']:.2%}  |log error| {s['log_error_median']:.3f}  "
                  f"contrast RMS {err:.4f}", flush=True)
    print("mean contrast RMS over the three datasets: " + ", ".join(
        f"{r:g}: {np.mean(e):.4f}" for r, e in mean_err.items()))
    best = min(mean_err, key=lambda r: np.mean(mean_err[r]))
    print(f"lowest: reach {best:g}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": out, "mean_contrast_rms": {str(r): float(np.mean(e)) for r, e in mean_err.items()},
                       "lowest": best}, f, indent=1)


if __name__ == "__main__":
    main()
