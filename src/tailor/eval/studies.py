"""`tailor study configanator`: the paper's side studies, each bounded to a few minutes on 2 cores.

* ``k_scaling`` (Fig. 7): K inflated x1.5/x2/x3 over Configanator's NCSpread-chosen K; per-page-load
  PLT ratio Configanator / {MAB+NC, Brute+NC} (< 1: Configanator faster), median and p95.
* ``critical_knobs`` (Fig. 13): brute force over the oracle tensor -- Optimal restricted to subsets of
  knobs (others at default); improvement of the noise-free PLT over default per page load.
* ``fairness`` (Fig. 10): AllowedConfig NoBBR / NoHighICW / both, Configanator vs Optimal.
* ``update_freq`` (App. F.9): UpdateFreq from 120 s to 1 day.
* ``local_global`` (App. F.9): one learner per region group (local managers) vs one for all.

Every run uses the same seeded world per configuration; studies use ``--sessions`` (default 600) to
stay within budget. Output: one JSON object per study row on stdout and ``studies.json`` in --out.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from tailor.eval import metrics
from tailor.oracle import PLTTensor
from tailor.policies import make_policy
from tailor.scenario import Scenario
from tailor.sim import SimConfig, Simulator
from tailor.space import ConfigSpace

KNOB_SUBSETS = {"http": ("http.version",), "cc": ("tcp.congestion_control",), "iw": ("tcp.initial_cwnd",),
                "transport": ("tcp.congestion_control", "tcp.initial_cwnd", "tcp.rto_min_ms"),
                "app": ("http.version",), "all": None}
REGION_GROUPS = {"us": ("us-",), "eu": ("eu-",), "grid": ("grid",)}  # anything else: "rest"


def _row(study: str, label: str, rec: dict, **extra) -> dict:
    s = metrics.summary(label, rec)
    return {"study": study, "label": label, "p50": s["p50"], "p95": s["p95"],
            "median_gap_to_optimal": s["median_gap_to_optimal"], **extra}


def k_scaling(scn: Scenario, oracle, seed: int) -> list[dict]:
    sim = Simulator(scn, oracle, SimConfig(seed=seed))
    base = make_policy("configanator", seed=seed)
    sim.run(base)
    k0 = base._nc.k
    rows = []
    for scale in (1.0, 1.5, 2.0, 3.0):
        k = max(1, int(round(k0 * scale)))
        ours = sim.run(make_policy("configanator", seed=seed, k_scale=scale)).records
        for other in ("mab-nc", "brute-nc"):
            rec = sim.run(make_policy(other, seed=seed, classes=k)).records
            ratio = ours["plt_ms"] / rec["plt_ms"]
            rows.append({"study": "k_scaling", "label": f"x{scale} vs {other}", "k": k, "ratio_p50": float(np.median(ratio)),
                         "ratio_p95": float(np.percentile(ratio, 95)), "ratio_of_means": float(ours["plt_ms"].mean() / rec["plt_ms"].mean())})
    return rows


def critical_knobs(scn: Scenario, oracle, seed: int) -> list[dict]:
    world = Simulator(scn, oracle, SimConfig(seed=seed)).world
    core = ConfigSpace.named("core")
    rows = []
    for name, knobs in KNOB_SUBSETS.items():
        grid = {k: (v if knobs is None or k in knobs else (core.registry[k].default,)) for k, v in core.grid.items()}
        space = ConfigSpace(grid, name=f"core[{name}]")
        tensor = PLTTensor(oracle, space)
        modes = np.array([tensor.mode(int(c), int(s)) for c, s in zip(world.cell, world.site)])
        imp = 1.0 - modes.min(axis=1) / modes[:, space.default_index]
        rows.append({"study": "critical_knobs", "label": name, "configs": len(space), "p50": float(np.median(imp)),
                     "p95": float(np.percentile(imp, 95)), "mean": float(imp.mean())})
    return rows


def fairness(scn: Scenario, oracle, seed: int) -> list[dict]:
    rows = []
    for allowed in ("", "NoBBR", "NoHighICW", "NoBBR,NoHighICW"):
        sim = Simulator(scn, oracle, SimConfig(seed=seed, allowed=allowed))
        for name in ("configanator", "optimal"):
            rows.append(_row("fairness", f"{name} {allowed or 'all'}", sim.run(make_policy(name, seed=seed)).records,
                             configs=len(sim.space)))
    return rows


def update_freq(scn: Scenario, oracle, seed: int) -> list[dict]:
    rows = []
    for freq in (120.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0):
        sim = Simulator(scn, oracle, SimConfig(seed=seed, update_freq_s=freq))
        rows.append(_row("update_freq", f"{int(freq)} s", sim.run(make_policy("configanator", seed=seed)).records))
    return rows


def _region_group(region: str) -> str:
    return next((g for g, prefixes in REGION_GROUPS.items() if region.startswith(prefixes)), "rest")


def local_global(scn: Scenario, oracle, seed: int) -> list[dict]:
    """Local: one Configanator per region group, each seeing only its sessions; global: one for all.
    Each side is summarised over the same page loads (improvement is against default on the same load)."""
    glob = Simulator(scn, oracle, SimConfig(seed=seed)).run(make_policy("configanator", seed=seed)).records
    groups = {}
    for s in scn.sessions:
        groups.setdefault(_region_group(s.client.region), []).append(s)
    local_imp, local_gap = [], []
    for g, sessions in sorted(groups.items()):
        sub = Scenario(f"{scn.name}[{g}]", tuple(sessions), scn.chunk_s, scn.description, scn.provenance)
        rec = Simulator(sub, oracle, SimConfig(seed=seed)).run(make_policy("configanator", seed=seed)).records
        local_imp.append(metrics.improvement(rec))
        local_gap.append(metrics.gap_to_optimal(rec))
    imp, gap = np.concatenate(local_imp), np.concatenate(local_gap)
    return [_row("local_global", "global (one manager)", glob),
            {"study": "local_global", "label": f"local ({len(groups)} managers)", "p50": float(np.median(imp)),
             "p95": float(np.percentile(imp, 95)), "median_gap_to_optimal": float(np.median(gap))}]


STUDIES = {"k_scaling": k_scaling, "critical_knobs": critical_knobs, "fairness": fairness,
           "update_freq": update_freq, "local_global": local_global}


def run_studies(names: list[str], scn: Scenario, oracle, seed: int, out: Path) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        started = time.perf_counter()
        for row in STUDIES[name](scn, oracle, seed):
            row["wall_s"] = round(time.perf_counter() - started, 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
    (out / "studies.json").write_text(json.dumps(rows, indent=1))
    return rows
