"""Configanator report sections: arm contribution (Fig. 22), tail per minute (Fig. 23), stability (Fig. 24).

Shown only when a ``configanator*`` policy ran; everything is computed from run records.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from tailor.eval import metrics
from tailor.eval.report import png
from tailor.eval.sections import report_section

ARMS = (("bootstrap", "#e69f00"), ("explore", "#56b4e9"), ("epsilon", "#009e73"), ("exploit", "#0072b2"),
        ("default", "#999999"))


def _site_rank(rec: dict) -> np.ndarray:
    """Page-load number within its website: the x axis of Configanator's convergence figures."""
    rank, seen = np.zeros(len(rec["site"]), dtype=int), {}
    for i, s in enumerate(rec["site"]):
        rank[i] = seen.get(int(s), 0)
        seen[int(s)] = rank[i] + 1
    return rank


def arm_shares(rec: dict, bins: int = 25, max_iter: int = 1000) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Share of page loads per arm vs learning iteration (Fig. 22)."""
    rank = _site_rank(rec)
    edges = np.unique(np.geomspace(1, max_iter, bins).astype(int))
    edges = np.concatenate([[0], edges])
    mids, shares = [], {a: [] for a, _ in ARMS}
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (rank >= lo) & (rank < hi)
        if sel.any():
            mids.append((lo + hi) / 2)
            for a, _ in ARMS:
                shares[a].append(float(np.mean(rec["arm"][sel] == a)))
    return np.array(mids), {a: np.array(v) for a, v in shares.items()}


def tail_per_minute(rec: dict, q: float = 95) -> np.ndarray:
    """Per one-minute segment, the q-th percentile distance to optimal (Fig. 23's worst-case tail)."""
    minute = (rec["time_s"] // 60).astype(int)
    gap = metrics.gap_to_optimal(rec)
    return np.array([np.percentile(gap[minute == m], q) for m in np.unique(minute)])


def stability(rec: dict) -> np.ndarray:
    """Per class (pair), the connection number after which the exploited configuration never changes (Fig. 24)."""
    out = []
    sel = rec["arm"] == "exploit"
    for g in np.unique(rec["group"][sel]):
        cfg = rec["config"][sel & (rec["group"] == g)]
        changes = np.flatnonzero(np.diff(cfg) != 0)
        out.append(int(changes[-1] + 1) if len(changes) else 0)
    return np.array(out)


def _fig_arms(results) -> str:
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4), squeeze=False, sharey=True)
    for ax, r in zip(axes[0], results):
        x, shares = arm_shares(r.records)
        ax.stackplot(x, *[100 * shares[a] for a, _ in ARMS], labels=[a for a, _ in ARMS], colors=[c for _, c in ARMS])
        ax.set_xscale("log")
        ax.set_title(r.policy)
        ax.set_xlabel("page load of the website (iteration)")
    axes[0][0].set_ylabel("% of page loads")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    return png(fig)


def _fig_tail(ev) -> str:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for r in ev.results:
        if r.policy in ("default", "random", "optimal", "optimal-stale", "brute", "bo"):
            continue
        v = np.sort(100 * tail_per_minute(r.records))
        ax.plot(v, np.linspace(0, 1, len(v)), label=r.policy)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("p95 distance to optimal within a minute (%)")
    ax.set_ylabel("CDF over minutes")
    ax.legend(fontsize=7)
    return png(fig)


def _fig_stability(results) -> str:
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for r in results:
        v = np.sort(stability(r.records))
        if len(v):
            ax.plot(np.maximum(v, 1), np.linspace(0, 1, len(v)), label=f"{r.policy} ({len(v)} pairs)")
    ax.set_xscale("log")
    ax.set_xlabel("exploit decisions of the pair before its last configuration change")
    ax.set_ylabel("CDF over website x class pairs")
    ax.legend(fontsize=7)
    return png(fig)


def headline_figures(rec: dict) -> dict:
    """The numbers the paper quotes from Figs. 22-24 and 28, for one policy's records: exploring share in the first
    10 and after 100 page loads of a website, share of exploit decisions beyond 100 (the DT's takeover), median
    over minutes of the p95 distance to optimal, median and max exploit decisions before a pair's last change,
    and the degraded share by cause."""
    rank = _site_rank(rec)
    explore = np.isin(rec["arm"], list(metrics.EXPLORATION_ARMS))
    stable = stability(rec)
    late = rank >= 100
    return {"exploring_first_10": float(explore[rank < 10].mean()) if (rank < 10).any() else float("nan"),
            "exploring_after_100": float(explore[late].mean()) if late.any() else float("nan"),
            "exploit_after_100": float(np.mean(rec["arm"][late] == "exploit")) if late.any() else float("nan"),
            "tail_p95_gap_median": float(np.median(tail_per_minute(rec))),
            "stable_after_median": float(np.median(stable)) if len(stable) else float("nan"),
            "stable_after_max": int(stable.max()) if len(stable) else 0,
            "degraded": metrics.degradation_breakdown(rec)}


def _caption(results) -> str:
    rows = []
    for r in results:
        h = headline_figures(r.records)
        d = h["degraded"]
        rows.append(f"<tr><td>{r.policy}</td><td>{100 * h['exploring_first_10']:.1f}% / {100 * h['exploring_after_100']:.1f}%"
                    f"</td><td>{100 * h['exploit_after_100']:.1f}%</td><td>{100 * h['tail_p95_gap_median']:.1f}%</td>"
                    f"<td>{h['stable_after_median']:.0f} / {h['stable_after_max']}</td><td>{100 * d['exploration']:.2f}% / "
                    f"{100 * d['stale_class']:.2f}% / {100 * d['stuck']:.2f}%</td></tr>")
    return ("<table><tr><th>policy</th><th>exploring: first 10 / after 100 page loads of a website (Fig. 22)</th>"
            "<th>exploit after 100</th><th>median over minutes of the p95 gap to optimal (Fig. 23)</th>"
            "<th>exploit decisions before a pair's last change: median / max (Fig. 24)</th>"
            "<th>degraded &gt;5%: exploration / stale class / stuck (Fig. 28)</th></tr>" + "".join(rows) + "</table>")


@report_section
def configanator_sections(ev) -> list[tuple[str, str]]:
    ours = [r for r in ev.results if r.policy.startswith("configanator")]
    if not ours:
        return []
    return [("Configanator: headline figures of Figs. 22-24 and 28", _caption(ours)),
            ("Configanator: arm contribution (Fig. 22)", f"<img src='{_fig_arms(ours)}'>"),
            ("Configanator: tail distance to optimal per minute (Fig. 23)", f"<img src='{_fig_tail(ev)}'>"),
            ("Configanator: configuration stability per pair (Fig. 24)", f"<img src='{_fig_stability(ours)}'>")]


@report_section
def connreuse_section(ev) -> list[tuple[str, str]]:
    """Configanator's improvement over ConnReuse per page load (Fig. 8), when both ran."""
    names = {r.policy for r in ev.results}
    if "connreuse" not in names or not any(n.startswith("configanator") for n in names):
        return []
    base = ev.records("connreuse")["plt_ms"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    rows = []
    for r in ev.results:
        if r.policy.startswith("configanator"):
            imp = 100 * (1 - r.records["plt_ms"] / base)
            ax.boxplot([imp], positions=[len(rows)], whis=(5, 95), showfliers=False)
            rows.append(f"<tr><td>{r.policy}</td><td>{np.median(imp):+.1f}%</td><td>{np.percentile(imp, 95):+.1f}%</td></tr>")
    ax.set_xticks(range(len(rows)), [r.policy for r in ev.results if r.policy.startswith("configanator")])
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_ylabel("PLT improvement over ConnReuse (%)")
    table = "<table><tr><th>policy</th><th>median</th><th>p95</th></tr>" + "".join(rows) + "</table>"
    return [("Configanator vs ConnReuse (Fig. 8)", table + f"<img src='{png(fig)}' alt='connreuse'>")]
