"""Configanator cost: decisions per second and model-update (plan) time, for 10K sessions by default.

The paper (App. F.9, footnote 12): "It takes ~2 minutes to update the models for 10K sessions";
target here: <= 10 s. Runs the default scenario with N sessions through the simulator, timing every
plan() (class rebuild, pair bests, tree retraining) and the per-connection loop; then one final plan()
on everything learned. Prints one JSON object with run metadata.

    PYTHONPATH=src .venv/bin/python bench/configanator_update.py [--sessions 10000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time

import numpy as np

from tailor.oracle.select import default_oracle
from tailor.policies import make_policy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", default="configanator")
    args = ap.parse_args()
    oracle = default_oracle()
    scn = load_scenario("default", n_sessions=args.sessions, seed=args.seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=args.seed))
    policy = make_policy(args.policy, seed=args.seed)
    plan_s: list[float] = []
    inner = policy._plan

    def timed(now: float) -> None:
        t = time.perf_counter()
        inner(now)
        plan_s.append(time.perf_counter() - t)

    policy._plan = timed
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = sim.run(policy)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    t = time.perf_counter()
    inner(float(sim.world.time_s[-1]))
    final = time.perf_counter() - t
    n = len(sim.world)
    print(json.dumps({
        "bench": "configanator_update", "policy": args.policy, "sessions": args.sessions, "pageloads": n,
        "decisions_per_s_wall": n / max(wall - sum(plan_s), 1e-9), "run_wall_s": wall, "run_cpu_s": cpu,
        "plans": len(plan_s), "plan_s_median": float(np.median(plan_s)) if plan_s else 0.0,
        "plan_s_max": max(plan_s, default=0.0), "plan_s_total": sum(plan_s), "final_plan_s": final,
        "model": policy.model_stats(), "p50": float(np.median(1 - result.records["plt_ms"] / result.records["default_ms"])),
        "commit": _commit(), "python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1))


if __name__ == "__main__":
    main()
