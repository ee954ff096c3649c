"""`tailor evaluate`: run policies side by side on one scenario and write results, metadata, report."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tailor import __version__
from tailor.eval import metrics
from tailor.oracle import Oracle
from tailor.policies import POLICIES, make_policy
from tailor.scenario import Scenario
from tailor.sim import RunResult, SimConfig, Simulator

BASELINES = ("default", "random", "optimal", "optimal-stale", "brute", "brute-nc", "bo", "bo-nc", "cherrypick-nc", "mab-nc",
             "cdn-static", "best-static")
SEED_SYSTEMS = ("configanator", "config-snob", "smartiw")
DEFAULT_POLICIES = ("tailor",) + BASELINES + SEED_SYSTEMS  # what `tailor evaluate` runs without --policies


@dataclass
class Evaluation:
    scenario: Scenario
    oracle: Oracle
    config: SimConfig
    results: list[RunResult] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    prepare_s: float = 0.0
    simulator: Simulator | None = None

    def records(self, policy: str) -> dict:
        return next(r.records for r in self.results if r.policy == policy)


def policy_params(name: str, seed: int, overrides: dict) -> dict:
    """Seed plus the overrides the policy's constructor accepts (Table 4 learner knobs)."""
    accepted = getattr(POLICIES[name], "parameters", {})
    return {"seed": seed, **{k: v for k, v in overrides.items() if k in accepted}}


def evaluate(scenario: Scenario, oracle: Oracle, policies: list[str], config: SimConfig,
             overrides: dict | None = None, progress=None) -> Evaluation:
    """Run every policy on the same prepared world; returns records and summary rows."""
    for name in policies:
        make_policy(name)  # fail fast on an unknown name, before any work
    started = time.perf_counter()
    sim = Simulator(scenario, oracle, config)
    ev = Evaluation(scenario, oracle, config, prepare_s=time.perf_counter() - started, simulator=sim)
    for name in policies:
        policy = make_policy(name, **policy_params(name, config.seed, overrides or {}))
        cb = progress(name, len(sim.world)) if progress else None
        result = sim.run(policy, cb)
        ev.results.append(result)
        ev.summaries.append({**metrics.summary(name, result.records), "wall_s": result.wall_s,
                             "conn_per_s": len(sim.world) / max(result.wall_s, 1e-9)})
    # each final table valued from another policy's logs (offpolicy.json, report); a diagnostic: never fails the run
    from tailor.eval.offpolicy import offpolicy_evaluation

    try:
        ev.offpolicy = offpolicy_evaluation(ev)
    except Exception as err:  # noqa: BLE001
        ev.offpolicy = {"logging_policy": None, "reason": f"failed: {type(err).__name__}: {err}", "rows": []}
    return ev


def run_metadata(ev: Evaluation, argv: list[str] | None = None) -> dict:
    return {
        "tailor_version": __version__, "git_commit": _git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": argv or [], "machine": {"host": platform.node(), "python": platform.python_version(),
                                         "platform": platform.platform(), "cpus": os.cpu_count()},
        "sim_config": asdict(ev.config), "space": ev.simulator.space.to_json(), "oracle": ev.oracle.describe(),
        "oracle_validation": getattr(ev.oracle, "validation", None),
        "scenario": {"name": ev.scenario.name, "sessions": len(ev.scenario.sessions), "pageloads": ev.scenario.n_loads,
                     "chunk_s": ev.scenario.chunk_s, "provenance": ev.scenario.provenance},
        "policies": {r.policy: r.params for r in ev.results}, "prepare_s": ev.prepare_s,
    }


def _git_commit() -> str:
    try:
        root = Path(__file__).resolve().parent
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_results(ev: Evaluation, out: Path, argv: list[str] | None = None) -> dict:
    """results.parquet (one row per policy x page load), summary.json, metadata.json, tables/."""
    out.mkdir(parents=True, exist_ok=True)
    meta = run_metadata(ev, argv)
    world = ev.simulator.world
    sessions = world.sessions
    access = np.array([sessions[s].client.access for s in world.session])
    sites = np.array(world.tensor.site_names)[world.site]
    labels = [ev.simulator.space.label(i) for i in range(len(ev.simulator.space))]
    tables = []
    for r in ev.results:
        cols = {"policy": np.full(len(world), r.policy), "access": access, "website": sites,
                "config_label": np.array(labels)[r.records["config"]], **r.records}
        tables.append(pa.table({k: np.asarray(v) for k, v in cols.items()}))
    pq.write_table(pa.concat_tables(tables), out / "results.parquet")
    (out / "summary.json").write_text(json.dumps(ev.summaries, indent=2))
    (out / "metadata.json").write_text(json.dumps(meta, indent=2, default=str))
    tdir = out / "tables"
    tdir.mkdir(exist_ok=True)
    for r in ev.results:
        (tdir / f"{r.policy}.json").write_text(json.dumps(r.final_table))
    if getattr(ev, "offpolicy", None) is not None:
        (out / "offpolicy.json").write_text(json.dumps(ev.offpolicy, indent=2))
    return meta
