"""Does CUBIC's HyStart cost HTTP/2 page loads what BBR does not lose? (issue 18, MODEL.md 6a)

The testbed's page loads over HTTP/2 on lossy or deep paths take CUBIC 1.2-1.7x BBR's time where single objects do
not (MODEL.md 6a, "Loss-based HTTP/2 on the paths where it loses"); the kernel traces there showed CUBIC leaving slow
start without a loss at about 55 segments against a BDP of 86 (HyStart's delay exit) and staying below the BDP.
This measures the same page loads with CUBIC's HyStart on (the kernel default) and off, BBR beside them.

HyStart is a parameter of the built-in ``tcp_cubic`` (``/sys/module/tcp_cubic/parameters/hystart``), global to the
machine, not per namespace: the script sets it for its "off" phase only, one measurement job at a time, and writes
the value it found back in a ``finally`` (also on an interrupt). Nothing else may run on the machine meanwhile.

    PYTHONPATH=src .venv/bin/python bench/cubic_hystart_pages.py --out data/oracle/hystart-pages --reps 8
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tailor.testbed.measure import measure
from tailor.testbed.plan import Plan

HYSTART = Path("/sys/module/tcp_cubic/parameters/hystart")
CONDITIONS = ("4g-peak", "3g-peak", "dev-5m-1pct")
PAGES = ("page-medium-2", "page-light-1")
TB_V3_PLAN = Path(__file__).resolve().parent.parent / "data/oracle/tb-v3/pages/plan.json"


def plan(configs: list[dict], reps: int) -> Plan:
    conds = [c for c in json.loads(TB_V3_PLAN.read_text())["conditions"] if c["name"] in CONDITIONS]
    return Plan.from_dict({"conditions": conds, "sizes": [], "configs": configs, "http": ["2"], "reps": reps,
                           "max_fetch_s": 10.0, "seed": 1, "pages": list(PAGES)})


def run(out: Path, reps: int) -> None:
    found = HYSTART.read_text().strip()
    if found != "1":
        sys.exit(f"cubic_hystart_pages: {HYSTART} is {found!r}, expected the kernel default 1; not touching it")
    measure(plan([{"cc": "cubic", "iw": 10}, {"cc": "bbr", "iw": 10}], reps), out / "on", parallel=1)
    try:
        HYSTART.write_text("0")
        measure(plan([{"cc": "cubic", "iw": 10}], reps), out / "off", parallel=1)
    finally:
        HYSTART.write_text(found)


def summary(out: Path) -> pd.DataFrame:
    rows = []
    for phase in ("on", "off"):
        m = pd.read_parquet(out / phase / "measurements.parquet")
        m = m[m["ok"]]
        for (cond, page, cc), g in m.groupby(["condition", "page", "cc"]):
            x = g["completion_ms"].to_numpy()
            boot = np.median(np.random.default_rng(0).choice(x, (2000, len(x))), axis=1)
            rows.append({"condition": cond, "page": page, "config": f"{cc} hystart={phase}" if cc == "cubic" else cc,
                         "n": len(x), "median_ms": float(np.median(x)), "lo_ms": float(np.quantile(boot, 0.025)),
                         "hi_ms": float(np.quantile(boot, 0.975)),
                         "retrans": float(g["srv_RetransSegs"].median())})
    return pd.DataFrame(rows).sort_values(["condition", "page", "config"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--summary-only", action="store_true", help="print the table of an earlier run")
    a = ap.parse_args()
    if not a.summary_only:
        run(a.out, a.reps)
    print(summary(a.out).to_string(index=False, float_format=lambda v: f"{v:.0f}"))


if __name__ == "__main__":
    main()
