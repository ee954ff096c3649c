"""Figures docs/testbed.md reports from a measured dataset: interpolation error, best-vs-default, measured vs model.

Each function returns a DataFrame so bench/testbed_report.py can print it and tests can check it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tailor.errors import OracleError
from tailor.oracle.measured import KEYS, MeasuredOracle, _anchor_space, _model_ms

DEFAULT = ("cubic", 10, 200, "1.1")  # spec/knobs.json defaults of the measured knobs


def loco_errors(oracle: MeasuredOracle, kind: str = "object") -> pd.DataFrame:
    """Leave-one-condition-out: predict every measured point of a condition from the other conditions.

    ``kind``: "object" (single objects) or "page" (Chromium pages). Returns one row per (condition, workload,
    configuration) with the measured median, the prediction and ``rel_err`` = prediction / measured - 1.
    """
    space = _anchor_space(oracle.anchors)
    table = oracle.page_table if kind == "page" else oracle.table
    rows = []
    if table.empty:
        return pd.DataFrame(rows)
    for c in oracle.conds.itertuples():
        q = oracle._cond_values()[3][c.Index]
        for name, site in oracle.workloads.items():
            if site.kind != kind or table[(table.condition == c.condition) & (table.workload == name)].empty:
                continue
            try:
                pred = oracle.mode_at([c.down_mbps], [c.rtt_ms], [c.loss], [q], name, space,
                                      exclude=c.condition)[0]
            except OracleError:  # this workload / configuration was measured at no other condition
                continue
            rows += _compare(table, c.condition, name, space, pred)
    return pd.DataFrame(rows)


def _compare(table: pd.DataFrame, cond: str, workload: str, space, pred: np.ndarray) -> list[dict]:
    t = table[(table.condition == cond) & (table.workload == workload)]
    size = int(t["size_bytes"].iloc[0]) if len(t) else 0
    t = t.set_index(KEYS)["median"]
    out = []
    for j, cfg in enumerate(space.configs):
        key = (cfg["tcp.congestion_control"], cfg["tcp.initial_cwnd"], cfg["tcp.rto_min_ms"], cfg["http.version"])
        if key in t.index:
            out.append({"condition": cond, "workload": workload, "size_bytes": size, "config": " ".join(map(str, key)),
                        "measured_ms": float(t[key]), "pred_ms": float(pred[j]),
                        "rel_err": float(pred[j] / t[key] - 1)})
    return out


def error_summary(err: pd.DataFrame) -> dict:
    """Median and p90 absolute relative error, and the share of points within 10 % / 25 %."""
    a = err["rel_err"].abs()
    return {"points": int(len(a)), "median_abs": float(a.median()), "p90_abs": float(a.quantile(0.9)),
            "within_10pct": float((a <= 0.10).mean()), "within_25pct": float((a <= 0.25).mean())}


def best_vs_default(table: pd.DataFrame) -> pd.DataFrame:
    """Per (condition, workload): the fastest measured configuration, the default's time, and the gain."""
    rows = []
    if "workload" not in table.columns:
        table = table.assign(workload=table["size_bytes"].astype(str))
    for (cond, wl, size), g in table.groupby(["condition", "workload", "size_bytes"]):
        g = g.set_index(KEYS)["median"]
        if DEFAULT not in g.index:
            continue
        best = g.idxmin()
        rows.append({"condition": cond, "workload": wl, "size_bytes": int(size), "best": " ".join(map(str, best)),
                     "best_ms": float(g[best]), "default_ms": float(g[DEFAULT]),
                     "gain": float(g[DEFAULT] / g[best] - 1), "differs": best != DEFAULT})
    return pd.DataFrame(rows)


def measured_vs_model(oracle: MeasuredOracle, kind: str = "object") -> pd.DataFrame:
    """measured median / ModelOracle mode at exactly the measured condition, buffer and configuration."""
    space = _anchor_space(oracle.anchors)
    bw, rtt, loss, q = oracle._cond_values()
    table = oracle.page_table if kind == "page" else oracle.table
    rows = []
    for name, site in oracle.workloads.items():
        if site.kind != kind:
            continue
        model = _model_ms(site, bw, rtt, loss, q, space)
        for c in oracle.conds.itertuples():
            for r in _compare(table, c.condition, name, space, model[c.Index]):
                rows.append({**r, "ratio": r["measured_ms"] / r["pred_ms"]})
    return pd.DataFrame(rows)


def model_choice_regret(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per (condition, size): does the model's fastest configuration match the measured one, and what does
    picking the model's choice cost under the measured times (regret = measured(model's pick) / best - 1)?"""
    rows = []
    for (cond, size), g in ratios.groupby(["condition", "workload"]):
        g = g.set_index("config")
        pick = g["pred_ms"].idxmin()
        rows.append({"condition": cond, "workload": size, "agree": pick == g["measured_ms"].idxmin(),
                     "regret": float(g.loc[pick, "measured_ms"] / g["measured_ms"].min() - 1)})
    return pd.DataFrame(rows)


def best_per_condition(table: pd.DataFrame, workloads: list[str] | None = None) -> pd.DataFrame:
    """Per condition: the configuration with the lowest geometric-mean time over ``workloads`` (default: the
    workloads measured at every condition), the default's, and the gain. Conditions missing one is skipped."""
    if "workload" not in table.columns:
        table = table.assign(workload=table["size_bytes"].astype(str))
    if workloads is None:
        per = table.groupby("workload").condition.nunique()
        workloads = list(per[per == table.condition.nunique()].index)
    t = table[table.workload.isin(workloads)]
    rows = []
    for cond, g in t.groupby("condition"):
        if g.workload.nunique() < len(workloads):
            continue
        gm = g.assign(lg=np.log(g["median"])).groupby(KEYS).lg.agg(["mean", "count"])
        gm = gm[gm["count"] == len(workloads)]["mean"]
        if DEFAULT not in gm.index:
            continue
        best = gm.idxmin()
        rows.append({"condition": cond, "best": " ".join(map(str, best)),
                     "gain": float(np.exp(gm[DEFAULT] - gm[best]) - 1),
                     "differs": best != DEFAULT, "workloads": ",".join(workloads)})
    return pd.DataFrame(rows)
