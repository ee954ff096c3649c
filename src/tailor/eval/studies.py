"""`tailor study configanator`: the paper's side studies, each bounded to a few minutes on 2 cores.

* ``k_scaling`` (Fig. 7): K inflated x1.5/x2/x3 over Configanator's NCSpread-chosen K; per-page-load
  PLT ratio Configanator / {MAB+NC, Brute+NC} (< 1: Configanator faster), median and p95.
* ``critical_knobs`` (Fig. 13): brute force over the oracle tensor -- Optimal restricted to subsets of
  knobs (others at default); improvement of the noise-free PLT over default per page load.
* ``fairness`` (Fig. 10): AllowedConfig NoBBR / NoHighICW / both, Configanator vs Optimal.
* ``update_freq`` (App. F.9): UpdateFreq from 120 s to 1 day.
* ``local_global`` (App. F.9): one learner per region group (local managers) vs one for all.
* ``nc_strategies`` (Figs. 25, 26, App. F.6): Configanator with each network-class strategy (kmeans =
  Configanator, prefix = IP-Prefix /24, latency = Latency Driven, pop = CDN Aggr.; Hobbit needs topology
  data Tailor does not have). Per strategy: the number of classes the policy's *final* class state gives
  the run's page loads, the within-class spread of the default configuration's PLT, and Configanator's
  improvement with that strategy. Spread = pooled std of ln(PLT) over (class, website) lists of >= 3
  page loads, weighted by list size (``spread``: observed default PLT, noise included; ``spread_mode``:
  the noise-free mode PLT); ``covered`` = share of page loads in such lists.
* ``plt_variability`` (Fig. 27): (a) observed / mode PLT over the run's page loads (1 + theta * X, X ~
  Erlang(NOISE_SHAPE, 1)); (b) proximity: share of Configanator's decisions identical between the noisy
  world and the same world without noise (NoVari, ``SimConfig(noise=False)``), for PerfMemory 0 (all) and
  a short window; over page loads, and median over true (condition cell, website) groups of >= 5 loads;
  ``proximity_exploit``: the same share over the page loads both runs served from the exploitation arm.

Every run uses the same seeded world per configuration; studies use ``--sessions`` (default 600) to
stay within budget. Output: one JSON object per study row on stdout and ``studies.json`` in --out.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from tailor.eval import metrics
from tailor.oracle import NOISE_SHAPE, PLTTensor
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


STRATEGY_NAMES = {"kmeans": "Configanator", "prefix": "IP-Prefix /24", "latency": "Latency Driven",
                  "pop": "CDN Aggr."}
SHORT_MEMORY = 5  # the short PerfMemory of plt_variability: last 5 page loads per configuration and pair
MIN_GROUP = 5  # loads a (cell, website) group needs to enter the median proximity


def _log_spread(labels: np.ndarray, sites: np.ndarray, plt_ms: np.ndarray, min_list: int = 3) -> tuple[float, float]:
    """Pooled std of ln(PLT) over (class, website) lists with >= ``min_list`` loads; share of loads covered."""
    num, den, covered = 0.0, 0, 0
    keys = {}
    for i, key in enumerate(zip(labels, sites)):
        keys.setdefault(key, []).append(i)
    for idx in keys.values():
        if len(idx) >= min_list:
            v = np.log(plt_ms[idx])
            num += float(np.sum((v - v.mean()) ** 2))
            den += len(idx) - 1
            covered += len(idx)
    return (math.sqrt(num / den) if den else float("nan")), covered / max(len(labels), 1)


def final_classes(policy, world) -> np.ndarray:
    """Each page load's class under the policy's class state at the end of the run, from the features the
    policy itself uses (handshake RTT + the prefix archive's goodput and loss; own telemetry when unknown)."""
    nc = policy._nc
    labels = []
    for i in range(len(world)):
        c = world.sessions[world.session[i]].client
        h = world.histories[i]
        path = ((float(world.handshake_rtt_ms[i]), h.goodput_mbps, h.loss) if h is not None else
                (float(world.handshake_rtt_ms[i]), float(world.goodput_est[i]), float(world.loss_est[i])))
        labels.append(nc.classify(*path, c.device, c.region, c.prefix))
    return np.array(labels)


def nc_strategies(scn: Scenario, oracle, seed: int) -> list[dict]:
    sim = Simulator(scn, oracle, SimConfig(seed=seed))
    w = sim.world
    default_obs = w.mode_default * (1.0 + w.theta * w.noise)
    rows = []
    for strategy, name in STRATEGY_NAMES.items():
        policy = make_policy("configanator", seed=seed, classes=strategy)
        rec = sim.run(policy).records
        labels = final_classes(policy, w)
        spread, covered = _log_spread(labels, w.site, default_obs)
        spread_mode, _ = _log_spread(labels, w.site, w.mode_default)
        s = metrics.summary(name, rec)
        rows.append({"study": "nc_strategies", "label": name, "strategy": strategy, "classes": len(set(labels)),
                     "spread": spread, "spread_mode": spread_mode, "covered": covered, "p50": s["p50"],
                     "p95": s["p95"], "mean_improvement": s["mean_improvement"],
                     "p95_plt_improvement": s["p95_plt_improvement"], "degraded_share": s["degraded_share"],
                     "median_gap_to_optimal": s["median_gap_to_optimal"]})
    return rows


def proximity(a: np.ndarray, b: np.ndarray, groups: np.ndarray, min_group: int = MIN_GROUP) -> tuple[float, float]:
    """Share of identical decisions over page loads, and its median over groups of >= ``min_group`` loads."""
    same = a == b
    per = [same[groups == g].mean() for g in np.unique(groups) if (groups == g).sum() >= min_group]
    return float(same.mean()), (float(np.median(per)) if per else float("nan"))


def plt_variability(scn: Scenario, oracle, seed: int) -> list[dict]:
    noisy = Simulator(scn, oracle, SimConfig(seed=seed))
    quiet = Simulator(scn, oracle, SimConfig(seed=seed, noise=False))
    w = noisy.world
    ratio = 1.0 + w.theta * w.noise
    qs = (5, 25, 50, 75, 95, 99)
    rows = [{"study": "plt_variability", "label": "observed / mode PLT", "shape": NOISE_SHAPE,
             **{f"q{q}": float(np.percentile(ratio, q)) for q in qs}, "mean": float(ratio.mean()),
             "theta_p50": float(np.median(w.theta)), "pageloads": len(w)}]
    groups = w.cell.astype(np.int64) * (int(w.site.max()) + 1) + w.site
    for memory in (0, SHORT_MEMORY):
        recs = {}
        for label, sim in (("noise", noisy), ("novari", quiet)):
            recs[label] = sim.run(make_policy("configanator", seed=seed, perf_memory=memory)).records
        loads, median = proximity(recs["noise"]["config"], recs["novari"]["config"], groups)
        opt = {k: float(np.mean(metrics.gap_to_optimal(r) <= 1e-9)) for k, r in recs.items()}
        # PLT proximity: the noise-free time of the noisy run's choice over that of the no-noise run's choice, load by
        # load (the same loads in the same cells): how much the noise costs, not whether the decisions coincide
        cost = recs["noise"]["mode_ms"] / recs["novari"]["mode_ms"]
        both = (recs["noise"]["arm"] == "exploit") & (recs["novari"]["arm"] == "exploit")
        exploit = float(np.mean(recs["noise"]["config"][both] == recs["novari"]["config"][both])) if both.any() \
            else float("nan")
        rows.append({"study": "plt_variability", "label": f"perf_memory {memory or 'all'}", "perf_memory": memory,
                     "proximity_loads": loads, "proximity_median_group": median, "proximity_exploit": exploit,
                     "exploit_both_share": float(both.mean()),
                     "plt_ratio_p50": float(np.median(cost)), "plt_ratio_mean": float(cost.mean()),
                     "plt_within_5pct": float(np.mean(cost <= 1.05)),
                     "optimal_share_noise": opt["noise"], "optimal_share_novari": opt["novari"],
                     "p50_noise": float(np.median(metrics.improvement(recs["noise"]))),
                     "p50_novari": float(np.median(metrics.improvement(recs["novari"])))})
    return rows


STUDIES = {"k_scaling": k_scaling, "critical_knobs": critical_knobs, "fairness": fairness,
           "update_freq": update_freq, "local_global": local_global, "nc_strategies": nc_strategies,
           "plt_variability": plt_variability}


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
