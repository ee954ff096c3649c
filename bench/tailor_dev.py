"""Development runs of the `tailor` policy on held-out seeds: the harness its design choices and hyper-parameters are
made with (never on the acceptance seeds 0-4 of the built-in scenarios).

Usage::

    PYTHONPATH=src .venv/bin/python bench/tailor_dev.py --scenarios default,satellite --oracles model,measured \
        --seeds 100,102 --variant base: --variant greedy:exploit=greedy,beta=1.5 [--policies cdn-static,optimal]
        [--sessions N] [--json FILE]
    PYTHONPATH=src .venv/bin/python bench/tailor_dev.py --pool model.json measured.json

Every (scenario, oracle, seed) world is prepared once (``Simulator``, as ``tailor evaluate`` does: space ``core``,
UpdateFreq 300 s, online mode) and every ``--variant`` (``name:key=value,...``: a `tailor` with those parameters)
and reference policy runs on it. Seeds below 100 are refused. Prints one row per run and variant (median / mean /
p95 per-page-load improvement over the registry default, degraded share, median gap to optimal, share of page loads
per arm), then per variant the mean over runs and the paired difference to the first variant (mean and 95% t
interval over runs) for median, mean, p95, degraded and median gap. ``--pool FILE...`` prints that summary over the
runs of earlier ``--json`` files (a run's two oracle halves, or a ``halves`` file of bench/results) and exits.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy import stats

from tailor.eval import metrics
from tailor.eval.run import _git_commit
from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.policies.base import parse_policy_params
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

HELD_OUT = 100  # the smallest seed a development run may use


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, params = text.partition(":")
    items = [p for p in params.split(",") if p]
    return name or "tailor", dict(parse_policy_params(items, "bench/tailor_dev.py"))


def row_of(label: str, rec: dict) -> dict:
    s = metrics.summary(label, rec)
    arms, counts = np.unique(rec["arm"], return_counts=True)
    return {"policy": label, "median": s["p50"], "mean": s["mean_improvement"], "p95": s["p95"],
            "degraded": s["degraded_share"], "gap": s["median_gap_to_optimal"],
            "arms": {str(a): float(c / len(rec["arm"])) for a, c in zip(arms, counts)}}


def paired(values: list[float]) -> str:
    v = np.array(values)
    if len(v) < 2:
        return f"{v.mean():+.2f}"
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return f"{v.mean():+.2f} [{v.mean() - half:+.2f}, {v.mean() + half:+.2f}]"


def finish(args: argparse.Namespace, started: float, runs: list) -> None:
    """Print the run metadata (commit, date, wall time) and, with ``--json``, write the runs and it to the file."""
    meta = {"commit": _git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": vars(args),
            "wall_s": round(time.perf_counter() - started, 1)}
    print(f"\ncommit {meta['commit']}, {meta['date']}, {meta['wall_s']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "meta": meta}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", default="default")
    ap.add_argument("--oracles", default="model")
    ap.add_argument("--seeds", default="100")
    ap.add_argument("--variant", action="append", default=None, metavar="NAME:KEY=VALUE,...")
    ap.add_argument("--policies", default="cdn-static,optimal", help="reference policies (comma list, may be empty)")
    ap.add_argument("--sessions", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--pool", nargs="+", default=None, metavar="FILE",
                    help="print the paired summary over the runs of these --json files (e.g. a run's two oracle halves) "
                         "and exit")
    args = ap.parse_args()
    if args.pool:
        runs = []
        for path in args.pool:
            with open(path) as f:
                doc = json.load(f)
            runs.extend(doc["runs"] if "runs" in doc else [r for h in doc["halves"].values() for r in h["runs"]])
        summarise(runs)
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    if min(seeds) < HELD_OUT:
        raise SystemExit(f"bench/tailor_dev.py: seeds must be >= {HELD_OUT} (0-4 are the acceptance seeds); got {seeds}")
    variants = [parse_variant(v) for v in (args.variant or ["tailor:"])]
    refs = [p for p in args.policies.split(",") if p]
    runs = []
    started = time.perf_counter()
    for oracle_name in args.oracles.split(","):
        oracle = select_oracle(oracle_name, "core")
        for scenario_name in args.scenarios.split(","):
            for seed in seeds:
                scn = load_scenario(scenario_name, n_sessions=args.sessions, seed=seed, websites=sorted(oracle.websites))
                sim = Simulator(scn, oracle, SimConfig(seed=seed))
                rows = []
                for label, params in variants:
                    rows.append(row_of(label, sim.run(make_policy("tailor", seed=seed, **params)).records))
                for name in refs:
                    rows.append(row_of(name, sim.run(make_policy(name, seed=seed)).records))
                run = {"scenario": scenario_name, "oracle": oracle_name, "seed": seed, "pageloads": len(sim.world),
                       "rows": rows}
                runs.append(run)
                print(f"\n{scenario_name} / {oracle_name} / seed {seed} ({len(sim.world):,} page loads)")
                print("| policy | median | mean | p95 | degraded | gap | arms |\n|---|---|---|---|---|---|---|")
                for r in rows:
                    arms = ", ".join(f"{a} {100 * v:.1f}%" for a, v in sorted(r["arms"].items()))
                    print(f"| {r['policy']} | {100 * r['median']:+.1f}% | {100 * r['mean']:+.1f}% | {100 * r['p95']:+.1f}% "
                          f"| {100 * r['degraded']:.2f}% | {100 * r['gap']:.1f}% | {arms} |", flush=True)
    summarise(runs)
    finish(args, started, runs)


SUMMARY = ("median", "mean", "p95", "degraded", "gap")


def summarise(runs: list) -> None:
    """Per variant (and reference policy) the mean over the runs and the paired difference to the first."""
    labels = [r["policy"] for r in runs[0]["rows"]]
    for run in runs:
        if [r["policy"] for r in run["rows"]] != labels:
            raise SystemExit(f"bench/tailor_dev.py: the runs do not compare the same policies ({labels} against "
                             f"{[r['policy'] for r in run['rows']]} on {run['scenario']} / {run['oracle']} / "
                             f"seed {run['seed']})")
    print(f"\nover {len(runs)} runs: mean, and paired difference to {labels[0]} (points, 95% t interval)")
    print("| policy | " + " | ".join(SUMMARY) + " | " + " | ".join(f"Δ {m}" for m in SUMMARY) + " |\n|"
          + "---|" * (1 + 2 * len(SUMMARY)))
    first = {m: [100 * run["rows"][0][m] for run in runs] for m in SUMMARY}
    for k, label in enumerate(labels):
        col = {m: [100 * run["rows"][k][m] for run in runs] for m in SUMMARY}
        diff = [paired(list(np.subtract(col[m], first[m]))) if k else "" for m in SUMMARY]
        print(f"| {label} | " + " | ".join(f"{np.mean(col[m]):+.2f}" for m in SUMMARY) + " | " + " | ".join(diff) + " |")


if __name__ == "__main__":
    main()
