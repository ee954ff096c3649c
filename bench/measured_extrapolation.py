"""How the oracles order page configurations at conditions the default page dataset never measured (issue 18; the
measured oracle's extrapolation, docs/testbed.md section 8d).

    PYTHONPATH=src .venv/bin/python bench/measured_extrapolation.py data/oracle/tb-v3-slow

For every (condition, page) cell of the given page dataset, the default measured oracle (`--oracle measured`: tb-v2
objects, tb-v3 pages and the extra page campaigns, without the given dataset) predicts the measured configurations
at the cell's condition (the model's shape times the ratios of its nearest measured conditions, the configurations'
contrasts reverting to the model's beyond its `reach`; and with `reach` = inf, the interpolation before 2026-11-29
that carries the nearest contrasts unchanged), as do the model (levels; a page's times are the same on v6 and v7, MODEL.md 6f) and the page
timeline; each is scored against the new medians as `tailor oracle validate` scores a cell (Spearman rho, whether
its choice is the measured best, the cost of its choice, median |log error|, the HTTP/1.1-vs-2 contrast). A catalog page that no page dataset holds is scored for the models only. Prints the
measured best and the registry default's and `cdn-static`'s medians. Reads only; no measurement.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import tailor.oracle.validate as V
from tailor.oracle.measured import PAGE_EXTRA, MeasuredOracle, load_medians
from tailor.oracle.websites import default_catalog


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", help="a page dataset directory (with pages/measurements.parquet)")
    args = ap.parse_args()
    new = load_medians(args.dataset, pages=True)
    if new.empty:
        raise SystemExit(f"no page loads in {args.dataset}/pages")
    extra = tuple(d for d in PAGE_EXTRA if d.resolve() != Path(args.dataset).resolve())
    measured = MeasuredOracle(page_extra=extra)
    before = MeasuredOracle(page_extra=extra, reach=float("inf"))
    catalog = default_catalog()
    measured_pages = set(measured.workloads)
    for (cond, page), cell in new.groupby(["condition", "page"]):
        cell = cell.drop_duplicates(V.KEYS)
        if len(cell) < V.MIN_CONFIGS or page not in catalog:
            continue
        unmeasured = page not in measured_pages  # a page no other page dataset holds: the models only
        if unmeasured:
            measured.workloads[page] = catalog[page]
        first = cell.iloc[0]
        bw, rtt, loss = (float(first[k]) for k in ("down_mbps", "rtt_ms", "loss"))
        preds = {name: V.predict_cell(name, measured, cell, page) for name in ("model", "model-timeline")}
        if not unmeasured:
            preds[f"{measured.name} (reach {measured.reach:g})"] = V.predict_cell("measured", measured, cell, page)
            preds[f"{before.name} (reach inf)"] = V.predict_cell("measured", before, cell, page)
        m = cell["median"].to_numpy()
        keys = [(r.cc, int(r.iw), int(r.rto_min_ms), str(r.http)) for r in cell.itertuples()]
        print(f"{cond} ({bw:g} Mbit/s, {rtt:g} ms, loss {loss:g}) {page}: {len(cell)} configurations, "
              f"repetitions median {cell['n'].median():.0f}, CV median {cell['cv'].median():.3f}")
        for name, p in preds.items():
            s = V.cell_scores(m, p)
            h = V.cell_contrasts(keys, m, p).get("HTTP/1.1 vs 2", {})
            print(f"  {name:45s} rho {s['rho']:.2f}, best agrees {s['agree']}, cost {100 * s['cost']:.1f}%, "
                  f"|log error| {s['log_error']:.3f}, HTTP/1.1 vs 2 measured {h.get('measured', np.nan):.2f} "
                  f"predicted {h.get('oracle', np.nan):.2f}")
        best = keys[int(np.argmin(m))]
        at = {k: v for k, v in zip(keys, m)}
        print(f"  measured best {best[0]} iw{best[1]} rto{best[2]} h{best[3]} {m.min():.0f} ms; registry default "
              f"{at.get(('cubic', 10, 200, '1.1'), np.nan):.0f} ms; cdn-static {at.get(('bbr', 32, 200, '2'), np.nan):.0f} ms")


if __name__ == "__main__":
    main()
