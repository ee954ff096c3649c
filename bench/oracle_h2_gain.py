"""HTTP/2's gain over HTTP/1.1 per measured page cell, measured against the page timeline (MODEL.md section 6a).

Per cell of a page dataset (condition x page) and per control: the median, over the (IW, RTO) pairs measured with both
HTTP versions, of time with HTTP/2 over time with HTTP/1.1, measured and as the oracle predicts it
(``tailor.oracle.validate.predict_cell``, what ``tailor oracle validate`` scores; a measured oracle without the cell's
condition); and
CUBIC over BBR at IW 10 over HTTP/2. Where the measured ratio sits well above the modelled one, the model gives
HTTP/2 a gain the testbed did not see::

    PYTHONPATH=src .venv/bin/python bench/oracle_h2_gain.py [--dataset data/oracle/tb-v3] [--oracle model-timeline]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tailor.oracle.measured import MeasuredOracle
from tailor.oracle.validate import KEYS, MIN_CONFIGS, VARIANTS, predict_cell


def ratios(times: dict, predicted: dict, ccs: tuple[str, ...]) -> tuple[float, float]:
    """Median HTTP/2 over HTTP/1.1 time of the ``ccs`` pairs measured with both: (measured, predicted)."""
    measured, model = [], []
    for (cc, iw, rto, http), t in times.items():
        h1 = (cc, iw, rto, "1.1")
        if cc in ccs and http == "2" and h1 in times:
            measured.append(t / times[h1])
            model.append(predicted[(cc, iw, rto, http)] / predicted[h1])
    return (float(np.median(measured)), float(np.median(model))) if measured else (np.nan, np.nan)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="data/oracle/tb-v3")
    ap.add_argument("--oracle", default="model-timeline", choices=[*sorted(VARIANTS), "measured"])
    args = ap.parse_args(argv)
    ds = Path(args.dataset)
    oracle = MeasuredOracle(ds, pages="measured", page_dataset=ds, page_extra=())
    print(f"{args.dataset}, {args.oracle}; HTTP/2 over HTTP/1.1 time, measured / the oracle's")
    print("| condition | page | CUBIC and Reno | BBR | CUBIC over BBR, IW 10, HTTP/2 |")
    print("|---|---|---|---|---|")
    for (cond, workload), cell in oracle.page_table.groupby(["condition", "workload"], sort=True):
        cell = cell.drop_duplicates(KEYS)
        if len(cell) < MIN_CONFIGS:
            continue
        pred = predict_cell(args.oracle, oracle, cell, workload, exclude=cond)
        keys = [(r.cc, int(r.iw), int(r.rto_min_ms), str(r.http)) for r in cell.itertuples()]
        times = dict(zip(keys, cell["median"].to_numpy()))
        predicted = dict(zip(keys, pred))
        loss_based, bbr = ratios(times, predicted, ("cubic", "reno")), ratios(times, predicted, ("bbr",))
        a, b = ("cubic", 10, 200, "2"), ("bbr", 10, 200, "2")
        cb = (times[a] / times[b], predicted[a] / predicted[b]) if a in times and b in times else (np.nan, np.nan)
        print(f"| {cond} | {workload} | {loss_based[0]:.2f} / {loss_based[1]:.2f} | {bbr[0]:.2f} / {bbr[1]:.2f} | "
              f"{cb[0]:.2f} / {cb[1]:.2f} |")


if __name__ == "__main__":
    main()
