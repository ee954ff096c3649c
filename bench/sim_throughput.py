"""Benchmark: simulated connections per second (Default, MAB+NC) and the default evaluation's cost.

Usage: PYTHONPATH=src .venv/bin/python bench/sim_throughput.py [--sessions N] [--skip-evaluate]
(after ./tailor has created .venv). "conn/s" is page loads per second of process CPU time, best of 3,
for the per-connection loop only (the world is prepared once, outside the timing).
Prints one JSON object with the figures and run metadata; the README records them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

from tailor.eval.run import _git_commit
from tailor.oracle.select import default_oracle
from tailor.policies import make_policy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator


def conn_per_s(sim: Simulator, name: str, repeats: int = 3) -> float:
    best = 0.0
    for _ in range(repeats):
        started = time.process_time()
        sim.run(make_policy(name, seed=0))
        best = max(best, len(sim.world) / (time.process_time() - started))
    return best


def full_evaluation() -> dict:
    """Wall time and peak RSS of `tailor evaluate` with no arguments, in a child process."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tailor", "evaluate", "--json", "--out", "out/bench-evaluate"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"evaluate_wall_s": round(wall, 1), "evaluate_peak_rss_mb": round(peak_kb / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=None)
    ap.add_argument("--skip-evaluate", action="store_true")
    args = ap.parse_args()
    oracle = default_oracle()
    scn = load_scenario("default", n_sessions=args.sessions, seed=0, websites=sorted(oracle.websites))
    t0 = time.perf_counter()
    sim = Simulator(scn, oracle, SimConfig(seed=0))
    out = {"pageloads": len(sim.world), "prepare_s": round(time.perf_counter() - t0, 2),
           "default_conn_per_s_cpu": round(conn_per_s(sim, "default")),
           "random_conn_per_s_cpu": round(conn_per_s(sim, "random")),
           "mab_nc_conn_per_s_cpu": round(conn_per_s(sim, "mab-nc"))}
    table_sim = Simulator(scn, oracle, SimConfig(seed=0, mode="table"))
    out["mab_nc_table_mode_conn_per_s_cpu"] = round(conn_per_s(table_sim, "mab-nc"))
    if not args.skip_evaluate:
        out.update(full_evaluation())
    out["meta"] = {"commit": _git_commit(), "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                   "cpus": os.cpu_count(), "platform": platform.platform()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
