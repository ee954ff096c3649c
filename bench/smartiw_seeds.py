"""SmartIW's Fig. 12 over several seeds, with paired intervals (issue 14).

Usage::

    PYTHONPATH=src .venv/bin/python bench/smartiw_seeds.py --scenario mobile-search-day --seeds 0,1,2,3,4 \
        [--oracle model-v6] [--policy-param reward_scale=flow] [--json bench/results/smartiw_seeds_day.json]

Per seed: ``tailor evaluate --scenario S --space iw-only --oracle model (v7; or model-v6) --policies
default,tcp-200,smartiw-nogroup,smartiw,optimal --seed K`` (the same world and policies, through
:func:`tailor.eval.run.evaluate`) and the report's Fig. 12 figures (``tailor.eval.figures_smartiw``: average
response-time improvement over IW 10 = 1 - mean time / mean time at IW 10, reward, goodput, RTT degradation). Then
per policy the mean over the seeds and, for SmartIW, the paired difference to every other policy (points, 95% t
interval). The paper ranks SmartIW > SmartIW without grouping > TCP-200 > TCP-10 (§VII-B/C/D, Fig. 12).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from tailor.eval.figures_smartiw import BASE, _improvements, _metrics
from tailor.eval.run import _git_commit, evaluate
from tailor.oracle.select import select_oracle
from tailor.policies.base import parse_policy_params
from tailor.scenario import load_scenario
from tailor.sim import SimConfig
from tailor_acceptance import fmt, interval  # bench/: the acceptance report's mean [95% t]

POLICIES = ("default", "tcp-200", "smartiw-nogroup", "smartiw", "optimal")
FIGURES = ("time", "reward", "goodput", "rtt")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="mobile-search-day")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma list; must include default and smartiw (e.g. add tailor, Tailor's own policy)")
    ap.add_argument("--oracle", choices=("model", "model-v6", "model-tailprobe"), default="model",
                    help="model (v7; model-tailprobe is the same): a first flight's lone lost tail waits for the probe "
                         "and the RTO (MODEL.md 6f); model-v6: the model before")
    ap.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                    help="a constructor parameter of every listed policy that has it (as tailor evaluate's), e.g. "
                         "reward_scale=flow")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    oracle = select_oracle(args.oracle, "iw-only")
    policies = tuple(args.policies.split(","))
    if "default" not in policies or "smartiw" not in policies:
        raise SystemExit(f"--policies must include default and smartiw; got {args.policies!r}")
    same = {k: v for k, v in vars(args).items() if k not in ("seeds", "json")}  # what a resumed file must share
    runs = _resume(args.json, same)
    for seed in (int(s) for s in args.seeds.split(",")):
        if any(r["seed"] == seed for r in runs):
            continue
        scn = load_scenario(args.scenario, seed=seed, websites=sorted(oracle.websites))
        ev = evaluate(scn, oracle, list(policies), SimConfig(space="iw-only", seed=seed),
                      dict(parse_policy_params(args.policy_param, "smartiw_seeds.py")))
        data = _metrics(ev)
        figs = {name: _improvements(data[name], data[BASE]) for name in policies}
        runs.append({"seed": seed, "responses": len(ev.simulator.world), "figures": figs})
        print(f"\n{args.scenario} seed {seed} ({len(ev.simulator.world):,} responses): avg response time / reward / "
              "goodput / RTT degradation over IW 10")
        for name in policies:
            print(f"  {name:16s} " + "  ".join(f"{100 * figs[name][k]:+6.1f}%" for k in FIGURES), flush=True)
        _write(args.json, runs, {"argv": same, "oracle": oracle.name, "partial": True})
    print(f"\nover {len(runs)} seeds: mean (95% t interval), points")
    for name in policies:
        print(f"  {name:16s} avg response time {fmt(interval([r['figures'][name]['time'] for r in runs]))}")
    for lead in ("smartiw", "tailor"):
        if lead not in policies:
            continue
        print(f"{lead} minus, paired (avg response-time improvement, points):")
        for name in policies:
            if name != lead:
                print(f"  {name:16s} " + fmt(interval([r["figures"][lead]["time"] - r["figures"][name]["time"] for r in runs])))
    meta = {"commit": _git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": vars(args),
            "oracle": oracle.name, "wall_s": round(time.perf_counter() - started, 1)}
    print(f"\ncommit {meta['commit']}, {meta['date']}, {meta['wall_s']} s (this invocation)")
    _write(args.json, runs, meta)


def _resume(path: str | None, same: dict) -> list[dict]:
    """The seeds already in ``path`` when it was written with the same arguments (but seeds), else none."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        old = json.load(f)
    argv = {k: v for k, v in old.get("meta", {}).get("argv", {}).items() if k not in ("seeds", "json")}
    return old["runs"] if argv == same else []


def _write(path: str | None, runs: list[dict], meta: dict) -> None:
    """Write the runs so far (after every seed: a long run resumes where it stopped), atomically."""
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump({"runs": runs, "meta": meta}, f, indent=1)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
