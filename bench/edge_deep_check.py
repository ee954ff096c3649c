"""Does the measured oracle hold where the cellular scenarios' 2G clients are? A check against a new measurement.

The cellular families' 2G clients are EDGE links (0.24-0.25 Mbit/s, 720-840 ms: FACTS.md 1.4) behind the cellular
buffer (``CELLULAR_BUFFER_BDP`` = 5.26 BDP, docs/scenarios.md), perturbed per /24, client and segment. tb-v2 measured
EDGE only behind one BDP (``2g-edge``, ``2g-edge-lossy``), so ``--oracle measured`` answers those clients from the
1-BDP measurements times the model's buffer effect; on held-out cellular worlds most of the baseline's "degraded"
page loads are there (docs/tailor.md, "Outside the tuning set" and Next steps). ``data/oracle/plans/edge-deep-check.json``
measures EDGE (0.24 Mbit/s down, 0.2 up, 840 ms, no loss) behind 5.26 BDP (89 packets) into its own directory (read by
the default measured oracle since 2026-12-06, see below), and ``cellular-deep-check.json`` tb-v2's FCC+ 3G and 4G peak rows behind the same buffer; this script compares, per object size, the measured medians with what ``--oracle measured`` (and the
model) predict at that condition, on what decides a page load's verdict: each configuration's time against the
registry default's (cubic, IW 10, HTTP/1.1), and whether it is more than 5% slower.

Since the measured oracle reads tb-edge-deep itself (``OBJECT_EXTRA``, 2026-12-06), each condition is predicted
without itself (leave-one-condition-out, as ``tailor oracle validate``), so the check stays held out.
``--buffer-unit U`` / ``--buffer-form F`` / ``--no-extra`` check the oracle with another buffer unit / buffer form /
without the extra campaigns.

Usage: PYTHONPATH=src .venv/bin/python bench/edge_deep_check.py [--dataset data/oracle/tb-edge-deep]
[--buffer-unit U] [--buffer-form queue|flight] [--no-extra] [--json FILE]. Reads only.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tailor.eval.run import _git_commit
from tailor.oracle.measured import BUFFER_FORM, BUFFER_FORMS, BUFFER_UNIT, KEYS, MeasuredOracle
from tailor.oracle.select import select_oracle
from tailor.oracle.validate import cell_scores, predict_cell

DEFAULT = ("cubic", 10, 200, "1.1")
DEGRADED = math.log(1.05)
ORACLES = ("measured", "model")
REFERENCE = "edge-deep=2g-edge,3g-peak-deep=3g-peak,4g-peak-deep=4g-peak"


def compare(measured: np.ndarray, predicted: np.ndarray, keys: list[tuple]) -> dict:
    """One cell: the oracle's scores (rank correlation, cost of its choice, median |log error|), and against the
    registry default: the log contrasts' median absolute error, the "> 5% slower" verdicts' agreement and the counts
    of verdicts each side gives."""
    d = keys.index(DEFAULT)
    cm, cp = np.log(measured / measured[d]), np.log(predicted / predicted[d])
    other = np.arange(len(keys)) != d
    vm, vp = cm[other] > DEGRADED, cp[other] > DEGRADED
    return {**cell_scores(measured, predicted), "contrast_error_median": float(np.median(np.abs(cp - cm)[other])),
            "verdict_agrees": float(np.mean(vm == vp)), "slower_measured": int(vm.sum()), "slower_oracle": int(vp.sum()),
            "configs": int(other.sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="data/oracle/tb-edge-deep")
    ap.add_argument("--reference", default=REFERENCE,
                    help="deep=shallow pairs: each measured condition's one-BDP counterpart in tb-v2, for the buffer's effect")
    ap.add_argument("--buffer-unit", type=float, default=None, help="the measured oracle's buffer unit (default: its own)")
    ap.add_argument("--buffer-form", choices=BUFFER_FORMS, default=None,
                    help="the measured oracle's buffer form (default: its own)")
    ap.add_argument("--no-extra", action="store_true", help="the measured oracle without its extra object campaigns")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    started = time.time()
    new = MeasuredOracle(Path(args.dataset), pages="measured", page_dataset=Path(args.dataset), page_extra=())
    if args.buffer_unit is None and args.buffer_form is None and not args.no_extra:
        ref = select_oracle("measured", "core")  # what `tailor evaluate --oracle measured` reads
    else:  # the same oracle with another buffer unit or form, or without its extra object campaigns
        ref = MeasuredOracle(buffer_unit=BUFFER_UNIT if args.buffer_unit is None else args.buffer_unit,
                             buffer_form=args.buffer_form or BUFFER_FORM, object_extra=() if args.no_extra else None)
    pairs = dict(p.split("=", 1) for p in args.reference.split(",") if p)
    out = {"cells": []}
    print(f"{args.dataset}: measured medians against what the oracles predict there, each condition held out (the "
          f"oracle {ref.name}, buffer unit x{ref.buffer_unit:g}, form {ref.buffer_form})")
    print("| condition | workload | oracle | rho | cost of its choice | median abs log error | contrast error (median) | "
          "'> 5% slower' verdicts agree | slower: measured / oracle |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (cond, workload), cell in new.table.groupby(["condition", "workload"], sort=True):
        cell = cell.drop_duplicates(KEYS).reset_index(drop=True)
        keys = [(r.cc, int(r.iw), int(r.rto_min_ms), str(r.http)) for r in cell.itertuples()]
        if DEFAULT not in keys:
            continue
        measured = cell["median"].to_numpy(float)
        row = {"condition": cond, "workload": workload, "reps_median": float(cell["n"].median()),
               "cv_median": float(cell["cv"].median()), "oracles": {}}
        for name in ORACLES:
            pred = predict_cell(name, ref, cell, workload, exclude=cond)  # held out if the oracle reads it
            s = compare(measured, pred, keys)
            row["oracles"][name] = s
            print(f"| {cond} | {workload} | {name} | {s['rho']:.2f} | {100 * s['cost']:.1f}% | {s['log_error']:.3f} | "
                  f"{s['contrast_error_median']:.3f} | {100 * s['verdict_agrees']:.0f}% | "
                  f"{s['slower_measured']} / {s['slower_oracle']} of {s['configs']} |")
        shallow = ref.table[(ref.table["condition"] == pairs.get(cond, "")) & (ref.table["workload"] == workload)]
        base = shallow.drop_duplicates(KEYS).set_index(KEYS)["median"]
        deep = pd.Series(measured, index=pd.MultiIndex.from_tuples(keys, names=KEYS))
        both = deep.index.intersection(base.index)
        if len(both):
            ratio = np.log(deep[both] / base[both])
            row["deep_vs_shallow"] = {"reference": pairs[cond], "configs": int(len(both)), "log_ratio_median": float(ratio.median()),
                                      "log_ratio_min": float(ratio.min()), "log_ratio_max": float(ratio.max())}
        out["cells"].append(row)
    for row in out["cells"]:
        d = row.get("deep_vs_shallow")
        if d:
            print(f"{row['condition']} {row['workload']}: against {d['reference']} (one BDP), log ratio per "
                  f"configuration median {d['log_ratio_median']:+.3f} (range {d['log_ratio_min']:+.3f} .. "
                  f"{d['log_ratio_max']:+.3f}, {d['configs']} configurations); repetitions median "
                  f"{row['reps_median']:.0f}, CV median {row['cv_median']:.3f}")
    for name in ORACLES:
        cells = [r["oracles"][name] for r in out["cells"]]
        agree = sum(c["verdict_agrees"] * c["configs"] for c in cells) / max(sum(c["configs"] for c in cells), 1)
        out.setdefault("summary", {})[name] = {
            "verdict_agrees": agree, "slower_measured": sum(c["slower_measured"] for c in cells),
            "slower_oracle": sum(c["slower_oracle"] for c in cells),
            "contrast_error_median_mean": float(np.mean([c["contrast_error_median"] for c in cells]))}
        print(f"{name}: '> 5% slower' verdicts agree on {100 * agree:.1f}% of the {len(cells)} cells' configurations; "
              f"slower measured {out['summary'][name]['slower_measured']}, predicted "
              f"{out['summary'][name]['slower_oracle']}; mean of the cells' median contrast errors "
              f"{out['summary'][name]['contrast_error_median_mean']:.3f}")
    out["meta"] = {"commit": _git_commit(), "dataset": args.dataset, "oracle": ref.name, "buffer_unit": ref.buffer_unit,
                   "buffer_form": ref.buffer_form, "elapsed_s": round(time.time() - started, 1),
                   "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    print(f"\ncommit {out['meta']['commit']}, {out['meta']['when']}, {out['meta']['elapsed_s']} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
