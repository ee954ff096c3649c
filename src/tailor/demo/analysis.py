"""From fetches and server records to the demo's report: join, bootstrap CIs, text table.

Join: the client cannot see whether the server put its connection on the holdback, so each curl fetch is
matched with the tailor-agent record of the same connection. Same client /24; the record's established
time (``time - duration_ms``) must fall in the window where the fetch's can be: ``[spawn, end - time_total]
+ time_connect + one-way delay`` (widened by ``START_TOL_S``; process start and wake-up delays on a loaded
machine make the window wide, not wrong); the record's duration must be near the fetch's
``time_total - time_connect + RTT`` (the server counts from ESTABLISHED to the end of the close). Cost =
half the duration mismatch + a tenth of the distance from the window's midpoint (both in s); pairs taken greedily
by cost, each record and fetch at most once. Unmatched fetches are counted, not guessed.

Completion time = curl ``time_total`` (ms). Per group, "after learning" = fetches that started in the last
``measure_share`` of the workload time. p50/p95 CIs: percentile bootstrap (``B`` resamples, seeded).
Improvement = 1 - tuned/holdback for p50 and p95, with a bootstrap CI of the ratio; "significant" when the
CI's lower end is above 0.
"""

from __future__ import annotations

import bisect
import ipaddress

import numpy as np

START_TOL_S = 0.35
DUR_TOL_S = 1.0


def prefix24(addr: str) -> str:
    return str(ipaddress.ip_network(f"{addr}/24", strict=False))


def match(fetches: list[dict], records: list[dict], one_way_s: dict[str, float]) -> tuple[list[dict], int]:
    """Attach ``holdback``, ``config_id``, ``table_version``, ``server_ms`` to fetches; returns (joined, unmatched)."""
    by_prefix: dict[str, list[tuple[float, int]]] = {}
    for j, r in enumerate(records):
        by_prefix.setdefault(r["client_prefix"], []).append((r["time"] - r["duration_ms"] / 1000.0, j))
    for v in by_prefix.values():
        v.sort()
    cands = []
    for i, f in enumerate(fetches):
        if not f["ok"]:
            continue
        d = one_way_s.get(f["group"], 0.0)
        lo = f.get("t_spawn", f["t_start"]) + f["connect_s"] + d - START_TOL_S
        hi = f["t_start"] + f["connect_s"] + d + START_TOL_S
        want = f["total_s"] - f["connect_s"] + 2 * d
        starts = by_prefix.get(f["prefix"], [])
        k = bisect.bisect_left(starts, (lo, -1))
        while k < len(starts) and starts[k][0] <= hi:
            start, j = starts[k]
            k += 1
            ddur = abs(records[j]["duration_ms"] / 1000.0 - want)
            if ddur > DUR_TOL_S + 0.5 * want:
                continue
            mid = 0.5 * (lo + hi)
            cands.append((0.5 * ddur + 0.1 * abs(start - mid), i, j))
    cands.sort()
    used_f, used_r, out = set(), set(), []
    for _, i, j in cands:
        if i in used_f or j in used_r:
            continue
        used_f.add(i)
        used_r.add(j)
        r = records[j]
        out.append({**fetches[i], "holdback": bool(r["holdback"]), "config_id": r["config_id"],
                    "table_version": r["table_version"], "server_ms": r["duration_ms"], "record_group": r["group"]})
    unmatched = sum(1 for i, f in enumerate(fetches) if f["ok"] and i not in used_f)
    return out, unmatched


def bootstrap(tuned: np.ndarray, hold: np.ndarray, rng: np.random.Generator, b: int = 2000) -> dict:
    """p50/p95 of both sides with 95% CIs, and the improvement 1 - tuned/holdback with its CI."""
    out: dict = {"n_tuned": int(len(tuned)), "n_holdback": int(len(hold))}
    if len(tuned) < 5 or len(hold) < 5:
        out["note"] = "too few samples for a bootstrap (need >= 5 per side)"
        for q in (50, 95):
            out[f"p{q}_tuned_ms"] = float(np.percentile(tuned, q)) if len(tuned) else None
            out[f"p{q}_holdback_ms"] = float(np.percentile(hold, q)) if len(hold) else None
        return out
    ti = rng.integers(0, len(tuned), size=(b, len(tuned)))
    hi = rng.integers(0, len(hold), size=(b, len(hold)))
    for q in (50, 95):
        tq = np.percentile(tuned[ti], q, axis=1)
        hq = np.percentile(hold[hi], q, axis=1)
        imp = 1.0 - tq / hq
        pt, ph = float(np.percentile(tuned, q)), float(np.percentile(hold, q))
        out[f"p{q}_tuned_ms"], out[f"p{q}_tuned_ci"] = pt, [float(x) for x in np.percentile(tq, [2.5, 97.5])]
        out[f"p{q}_holdback_ms"], out[f"p{q}_holdback_ci"] = ph, [float(x) for x in np.percentile(hq, [2.5, 97.5])]
        lo, hi_ = (float(x) for x in np.percentile(imp, [2.5, 97.5]))
        out[f"p{q}_improvement"], out[f"p{q}_improvement_ci"] = 1.0 - pt / ph, [lo, hi_]
        out[f"p{q}_significant"] = lo > 0.0
    return out


def summarize(joined: list[dict], groups: list[dict], t_measure: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    res = {}
    for g in groups:
        rows = [f for f in joined if f["group"] == g["name"] and f["t_start"] >= t_measure]
        tuned = np.array([1000 * f["total_s"] for f in rows if not f["holdback"]])
        hold = np.array([1000 * f["total_s"] for f in rows if f["holdback"]])
        res[g["name"]] = bootstrap(tuned, hold, rng)
    return res


def by_config(joined: list[dict], group: str, t_measure: float) -> list[dict]:
    """After learning, per (configuration, holdback): count and p50/p95 of the client completion time."""
    cells: dict[tuple, list[float]] = {}
    for f in joined:
        if f["group"] == group and f["t_start"] >= t_measure:
            cells.setdefault((f["config_id"], f["holdback"]), []).append(1000 * f["total_s"])
    return [{"config": c, "holdback": h, "n": len(v), "p50_ms": float(np.percentile(v, 50)),
             "p95_ms": float(np.percentile(v, 95))} for (c, h), v in sorted(cells.items(), key=lambda kv: -len(kv[1]))]


def _fmt_ci(v, ci) -> str:
    if v is None:
        return "-"
    if ci is None:
        return f"{v:.0f}"
    return f"{v:.0f} [{ci[0]:.0f},{ci[1]:.0f}]"


def _fmt_imp(s: dict, q: int) -> str:
    v = s.get(f"p{q}_improvement")
    if v is None:
        return "-"
    lo, hi = s[f"p{q}_improvement_ci"]
    star = "*" if s.get(f"p{q}_significant") else " "
    return f"{100 * v:+.1f}% [{100 * lo:+.0f},{100 * hi:+.0f}]{star}"


def text_table(report: dict) -> str:
    head = (f"{'group':<12} {'condition':<14} {'n tun/hold':>10}  {'p50 tuned ms':>18} {'p50 holdback ms':>18} "
            f"{'p50 gain':>19}  {'p95 tuned ms':>18} {'p95 holdback ms':>18} {'p95 gain':>19}  chosen config")
    lines = [head, "-" * len(head)]
    for g in report["groups"]:
        s = g["after_learning"]
        lines.append(
            f"{g['name']:<12} {g['condition']:<14} {s['n_tuned']:>5}/{s['n_holdback']:<4}  "
            f"{_fmt_ci(s.get('p50_tuned_ms'), s.get('p50_tuned_ci')):>18} "
            f"{_fmt_ci(s.get('p50_holdback_ms'), s.get('p50_holdback_ci')):>18} {_fmt_imp(s, 50):>19}  "
            f"{_fmt_ci(s.get('p95_tuned_ms'), s.get('p95_tuned_ci')):>18} "
            f"{_fmt_ci(s.get('p95_holdback_ms'), s.get('p95_holdback_ci')):>18} {_fmt_imp(s, 95):>19}  "
            f"{g['chosen']['summary']}")
    lines.append("gain = 1 - tuned/holdback (positive = tuned faster); [95% bootstrap CI]; * = CI above 0")
    return "\n".join(lines)
