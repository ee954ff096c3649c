"""Figures docs/testbed.md reports from a measured dataset: interpolation error, best-vs-default, measured vs model.

Each function returns a DataFrame so bench/testbed_report.py can print it and tests can check it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tailor.errors import OracleError
from tailor.oracle.measured import KEYS, MeasuredOracle, _anchor_space, _model_ms

DEFAULT = ("cubic", 10, 200, "1.1")  # spec/knobs.json defaults of the measured knobs


def loco_errors(oracle: MeasuredOracle) -> pd.DataFrame:
    """Leave-one-condition-out: predict every measured point of a condition from the other conditions.

    Returns one row per (condition, size, configuration) with the measured median, the prediction and
    ``rel_err`` = prediction / measured - 1.
    """
    space = _anchor_space(oracle.anchors)
    rows = []
    for c in oracle.conds.itertuples():
        q = oracle._cond_values()[3][c.Index]
        for size, site in oracle._site_by_size.items():
            try:
                pred = oracle.mode_at([c.down_mbps], [c.rtt_ms], [c.loss], [q], site.name, space,
                                      exclude=c.condition)[0]
            except OracleError:  # this size was measured at no other condition
                continue
            rows += _compare(oracle.table, c.condition, size, space, pred)
    return pd.DataFrame(rows)


def _compare(table: pd.DataFrame, cond: str, size: int, space, pred: np.ndarray) -> list[dict]:
    t = table[(table.condition == cond) & (table.size_bytes == size)].set_index(KEYS)["median"]
    out = []
    for j, cfg in enumerate(space.configs):
        key = (cfg["tcp.congestion_control"], cfg["tcp.initial_cwnd"], cfg["tcp.rto_min_ms"], cfg["http.version"])
        if key in t.index:
            out.append({"condition": cond, "size_bytes": size, "config": " ".join(map(str, key)),
                        "measured_ms": float(t[key]), "pred_ms": float(pred[j]),
                        "rel_err": float(pred[j] / t[key] - 1)})
    return out


def error_summary(err: pd.DataFrame) -> dict:
    """Median and p90 absolute relative error, and the share of points within 10 % / 25 %."""
    a = err["rel_err"].abs()
    return {"points": int(len(a)), "median_abs": float(a.median()), "p90_abs": float(a.quantile(0.9)),
            "within_10pct": float((a <= 0.10).mean()), "within_25pct": float((a <= 0.25).mean())}


def best_vs_default(table: pd.DataFrame) -> pd.DataFrame:
    """Per (condition, size): the fastest measured configuration, the default's time, and the gain."""
    rows = []
    for (cond, size), g in table.groupby(["condition", "size_bytes"]):
        g = g.set_index(KEYS)["median"]
        if DEFAULT not in g.index:
            continue
        best = g.idxmin()
        rows.append({"condition": cond, "size_bytes": int(size), "best": " ".join(map(str, best)),
                     "best_ms": float(g[best]), "default_ms": float(g[DEFAULT]),
                     "gain": float(g[DEFAULT] / g[best] - 1), "differs": best != DEFAULT})
    return pd.DataFrame(rows)


def measured_vs_model(oracle: MeasuredOracle) -> pd.DataFrame:
    """measured median / ModelOracle mode at exactly the measured condition, buffer and configuration."""
    space = _anchor_space(oracle.anchors)
    bw, rtt, loss, q = oracle._cond_values()
    rows = []
    for size, site in oracle._site_by_size.items():
        model = _model_ms(site, bw, rtt, loss, q, space)
        for c in oracle.conds.itertuples():
            for r in _compare(oracle.table, c.condition, size, space, model[c.Index]):
                rows.append({**r, "ratio": r["measured_ms"] / r["pred_ms"]})
    return pd.DataFrame(rows)


def model_choice_regret(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per (condition, size): does the model's fastest configuration match the measured one, and what does
    picking the model's choice cost under the measured times (regret = measured(model's pick) / best - 1)?"""
    rows = []
    for (cond, size), g in ratios.groupby(["condition", "size_bytes"]):
        g = g.set_index("config")
        pick = g["pred_ms"].idxmin()
        rows.append({"condition": cond, "size_bytes": size, "agree": pick == g["measured_ms"].idxmin(),
                     "regret": float(g.loc[pick, "measured_ms"] / g["measured_ms"].min() - 1)})
    return pd.DataFrame(rows)
