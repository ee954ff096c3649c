"""How far a measured configuration contrast carries: the measured oracle's ``reach`` and ``buffer_unit`` by
leave-one-condition-out cross-validation (issue 18; docs/testbed.md sections 8e, 8g).

    PYTHONPATH=src .venv/bin/python bench/measured_reach.py [--reach 0 0.25 0.35 0.5 0.7 1 2 inf]
        [--buffer-unit inf] [--buffer-form queue|flight ...] [--sets 3|4|5] [--json FILE]

For each dataset whose conditions the measured oracle interpolates (tb-v3's pages, tb-v3-objects, tb-v2's objects),
each measured cell (condition x workload) is predicted from the other conditions alone (``tailor oracle validate``'s
LOCO) with the oracle's ``reach`` set to each value of the grid (0 stands for 1e-4: the model's contrasts at every
unmeasured condition, the measured level; inf: the nearest contrasts carried unchanged). Printed per dataset and
value: the cells' median Spearman rho (and p25), the median and p90 cost of the oracle's choice, the median |log
error| and the mean over cells of the RMS error of the configurations' log contrasts (log time minus the cell's mean:
the order and spacing of the configurations, without the level). The chosen ``REACH`` is the value with the lowest
contrast error averaged over the three datasets. Reads only; about 1 minute.

``--buffer-unit`` adds the buffer (the queue in BDPs, one unit = that factor; inf: not a feature) to the distance,
on the grid reach x buffer unit; ``--sets 4`` adds a fourth set, tb-v2's objects with tb-edge-deep's (EDGE, 3G and 4G
behind 5.26 BDP, where tb-v2 measured them behind one), and every row also gives the contrast error on the cells whose
queue is >= 2 BDP alone (``contrast_rms_deep``; 10 of tb-v2's 41 conditions, the 3 of tb-edge-deep). ``--sets 5``
adds a fifth, tb-v2 with tb-edge-deep's and tb-cellular-deep's objects (four more cellular rows behind 5.26 BDP).
``--buffer-form queue flight`` also crosses the grid with the buffer's form (the queue in BDPs, or the share of the
response the queue holds, capped at 1; docs/testbed.md section 8h). The choice is still the lowest contrast error
averaged over the sets.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

import tailor.oracle.validate as V
from tailor import paths
from tailor.oracle.measured import (BUFFER_FORM, BUFFER_FORMS, DEFAULT_DATASET, OBJECT_DATASET, PAGE_DATASET,
                                   MeasuredOracle, queue_bdp)

EDGE_DEEP = paths.DATA_DIR / "oracle" / "tb-edge-deep"
CELLULAR_DEEP = paths.DATA_DIR / "oracle" / "tb-cellular-deep"
SETS = (("tb-v3 pages", PAGE_DATASET, "pages", ()), ("tb-v3-objects", OBJECT_DATASET, "objects", ()),
        ("tb-v2 objects", DEFAULT_DATASET, "objects", ()),
        ("tb-v2+edge-deep objects", DEFAULT_DATASET, "objects", (EDGE_DEEP,)),
        ("tb-v2+both deep objects", DEFAULT_DATASET, "objects", (EDGE_DEEP, CELLULAR_DEEP)))
DEEP_BDP = 2.0


def contrast_errors(oracle: MeasuredOracle, kind: str) -> tuple[float, float]:
    """Mean over the LOCO cells of the RMS error of the configurations' log times around the cell's mean: over all
    cells, and over the cells whose queue is >= DEEP_BDP bandwidth-delay products (NaN without any)."""
    errs, deep = [], []
    for (cond, workload), cell in V._cells(oracle, kind).groupby(["condition", "workload"]):
        cell = cell.drop_duplicates(V.KEYS)
        if len(cell) < V.MIN_CONFIGS:
            continue
        p = np.log(V.predict_cell("measured", oracle, cell, workload, exclude=cond))
        m = np.log(cell["median"].to_numpy())
        errs.append(float(np.sqrt(np.mean(((p - p.mean()) - (m - m.mean())) ** 2))))
        first = cell.iloc[0]
        if queue_bdp(first["down_mbps"], first["rtt_ms"], first["queue_packets"]) >= DEEP_BDP:
            deep.append(errs[-1])
    return float(np.mean(errs)), float(np.mean(deep)) if deep else float("nan")


def contrast_error(oracle: MeasuredOracle, kind: str) -> float:
    """Mean over the LOCO cells of the RMS error of the configurations' log times around the cell's mean."""
    return contrast_errors(oracle, kind)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reach", nargs="+", type=float, default=[0, 0.25, 0.35, 0.5, 0.7, 1, 2, float("inf")])
    ap.add_argument("--buffer-unit", nargs="+", type=float, default=[float("inf")],
                    help="factors of the queue (BDPs) that count as one distance unit; inf: not a feature")
    ap.add_argument("--buffer-form", nargs="+", choices=BUFFER_FORMS, default=[BUFFER_FORM],
                    help="how the buffer enters the distance (the oracle's buffer_form); moot where the unit is inf")
    ap.add_argument("--sets", type=int, choices=(3, 4, 5), default=3,
                    help="4: also tb-v2 with tb-edge-deep's objects; 5: also with tb-cellular-deep's")
    ap.add_argument("--json", help="also write the figures as JSON")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of empty rows in the per-cell scores
    out, mean_err, deep_err = [], {}, {}
    for label, dataset, kind, extra in SETS[:args.sets]:
        variants = [(u, f) for f in args.buffer_form for u in args.buffer_unit if np.isfinite(u)]
        variants += [(u, BUFFER_FORM) for u in args.buffer_unit if not np.isfinite(u)][:1]
        for unit, form in variants:
            for reach in args.reach:
                oracle = MeasuredOracle(dataset, pages="measured" if kind == "pages" else "none",
                                        page_dataset=dataset, page_extra=(), object_extra=extra,
                                        reach=max(reach, 1e-4), buffer_unit=unit, buffer_form=form)
                s, _ = V.validate_oracle("measured", oracle, kind)
                err, deep = contrast_errors(oracle, kind)
                key = (reach, unit, form if np.isfinite(unit) else "-")
                mean_err.setdefault(key, []).append(err)
                deep_err.setdefault(key, []).append(deep)
                row = {"dataset": label, "reach": reach, "buffer_unit": unit, "buffer_form": key[2], "cells": s["cells"],
                       "rho_median": s["rho_median"], "rho_p25": s["rho_p25"], "cost_median": s["cost_median"],
                       "cost_p90": s["cost_p90"], "log_error_median": s["log_error_median"], "contrast_rms": err,
                       "contrast_rms_deep": deep}
                out.append(row)
                print(f"{label:23s} reach {reach:<6g} buffer x{unit:<4g} {key[2]:6s} cells {s['cells']:3d}  rho "
                      f"{s['rho_median']:.3f} / {s['rho_p25']:.3f}  cost {s['cost_median']:.2%} / {s['cost_p90']:.2%}  "
                      f"|log error| {s['log_error_median']:.3f}  contrast RMS {err:.4f} (deep {deep:.4f})", flush=True)
    print(f"mean contrast RMS over the {args.sets} datasets (deep cells): " + ", ".join(
        f"reach {r:g} x{u:g} {f}: {np.mean(e):.4f} ({np.nanmean(deep_err[r, u, f]):.4f})"
        for (r, u, f), e in mean_err.items()))
    best = min(mean_err, key=lambda k: np.mean(mean_err[k]))
    print(f"lowest: reach {best[0]:g}, buffer unit x{best[1]:g}, form {best[2]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": out, "sets": args.sets,
                       "mean_contrast_rms": [{"reach": r, "buffer_unit": u, "buffer_form": bf,
                                              "mean": float(np.mean(e)), "deep_mean": float(np.nanmean(deep_err[r, u, bf]))}
                                             for (r, u, bf), e in mean_err.items()],
                       "lowest": {"reach": best[0], "buffer_unit": best[1], "buffer_form": best[2]}}, f, indent=1)


if __name__ == "__main__":
    main()
