"""Metrics of an evaluation, computed only from run records (one row per page load).

Improvement of a page load = 1 - PLT(policy) / PLT(default) on the same page load (same session,
condition and noise draw), as in Configanator Fig. 5. Distance to optimal uses the ground-truth mode,
never the noisy observation.
"""

from __future__ import annotations

import numpy as np

QUANTILES = (5, 25, 50, 75, 95)
DEGRADED = 0.05  # a page load is degraded when it is more than 5% slower than with the default
EXPLORATION_ARMS = frozenset({"explore", "bootstrap", "random", "gp", "epsilon", "lhs"})


def improvement(rec: dict) -> np.ndarray:
    return 1.0 - rec["plt_ms"] / rec["default_ms"]


def gap_to_optimal(rec: dict) -> np.ndarray:
    return rec["mode_ms"] / rec["mode_optimal_ms"] - 1.0


def summary(policy: str, rec: dict) -> dict:
    """The per-policy row of the results table (also the --json object)."""
    imp = improvement(rec)
    q = np.percentile(imp, QUANTILES) if len(imp) else [float("nan")] * len(QUANTILES)
    p95_default = np.percentile(rec["default_ms"], 95)
    p95_policy = np.percentile(rec["plt_ms"], 95)
    row = {"policy": policy, "pageloads": int(len(imp))}
    row.update({f"p{k}": float(v) for k, v in zip(QUANTILES, q)})
    row.update({
        "mean_improvement": float(imp.mean()),
        "p95_plt_ms": float(p95_policy),
        "p95_plt_default_ms": float(p95_default),
        "p95_plt_improvement": float(1.0 - p95_policy / p95_default),
        "median_plt_ms": float(np.median(rec["plt_ms"])),
        "mean_plt_ms": float(np.mean(rec["plt_ms"])) if len(imp) else float("nan"),
        "degraded_share": float(np.mean(imp < -DEGRADED)),
        "median_gap_to_optimal": float(np.median(gap_to_optimal(rec))),
        "optimal_share": float(np.mean(gap_to_optimal(rec) <= 1e-9)),
    })
    return row


def convergence(rec: dict, max_iter: int = 500, bins: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median and p90 distance to optimal vs the page load's rank among loads of its website
    (Configanator Fig. 6 style x-axis: learning iterations), in ``bins`` buckets up to ``max_iter``."""
    rank = np.zeros(len(rec["site"]), dtype=int)
    seen: dict[int, int] = {}
    for i, s in enumerate(rec["site"]):
        rank[i] = seen.get(int(s), 0)
        seen[int(s)] = rank[i] + 1
    gap = gap_to_optimal(rec)
    edges = np.unique(np.linspace(0, max_iter, bins + 1).astype(int))
    mids, med, p90 = [], [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (rank >= lo) & (rank < hi)
        if sel.any():
            mids.append((lo + hi) / 2)
            med.append(np.median(gap[sel]))
            p90.append(np.percentile(gap[sel], 90))
    return np.array(mids), np.array(med), np.array(p90)


def degradation_breakdown(rec: dict) -> dict:
    """Share of page loads degraded > 5% vs default, split by cause (Configanator Fig. 28):
    exploration (an exploring arm chose it), stale class (the choice is optimal for the condition the
    archive reported, not the true one), stuck (exploitation of a sub-optimal configuration). Noise alone
    never degrades a page load: policy and default share the page load's noise draw."""
    imp = improvement(rec)
    bad = imp < -DEGRADED
    arms = rec["arm"]
    # exploration: an exploring arm online; in table mode a draw of a group's minority choice (until 2026-12-07
    # table mode had none: every degraded load counted as stuck or stale; found by review)
    explore = np.isin(arms, list(EXPLORATION_ARMS)) | np.asarray(rec.get("table_minority", np.zeros(len(imp))),
                                                                 dtype=bool)
    stale = rec.get("stale_optimal", np.zeros(len(imp), dtype=bool))
    n = max(len(imp), 1)
    return {
        "exploration": float(np.sum(bad & explore) / n),
        "stale_class": float(np.sum(bad & ~explore & stale) / n),
        "stuck": float(np.sum(bad & ~explore & ~stale) / n),
        "total": float(np.sum(bad) / n),
    }


def by_category(rec: dict, labels: np.ndarray) -> dict[str, float]:
    """Median improvement per category label (e.g. access type, website kind)."""
    imp = improvement(rec)
    return {str(k): float(np.median(imp[labels == k])) for k in np.unique(labels)}
