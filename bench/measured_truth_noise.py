"""How much of a degraded share on the measured oracle is the measured data's own noise (issue 12).

The measured oracle's truth at a measured point is the median of that point's repetitions (tb-v2's objects: 3 each;
the page campaigns: up to 15), and the evaluation calls a page load degraded when its configuration's truth is more
than 5% above the registry default's. Where the repetitions spread by more than that, the yardstick itself is
uncertain. This script holds every decision fixed and moves only the yardstick:

* each world (scenario, seed) is run once per policy on the measured oracle, as ``tailor evaluate --oracle measured``
  does (``Simulator``, space ``core``): the configuration each page load was served is kept;
* ``--boot`` bootstrap truths: every measured point's median recomputed from its repetitions resampled with
  replacement (objects and pages; replicate k draws with seed k), the oracle rebuilt from them (its interpolation,
  anchors and reversion unchanged), and the same page loads rescored: a page load is degraded under a truth when
  its configuration's time there is more than 5% above the default's (the ratio of the two modes, which is the
  metric's ratio: both observations share the page load's noise draw);
* per policy and world: the degraded share under the dataset's medians (checked against the evaluation's own
  figure), the bootstrap truths' mean and 2.5 / 97.5 percentiles, and the share of truths under which it is above 1%.

Decisions held fixed were adapted to the published truth, so under another truth they look worse on average (what a
policy selected as good here is partly this truth's noise): the rescored shares say how firm the yardstick is, not
what the policy would score under another truth. ``--rerun K`` answers that for the first K bootstrap truths: each
policy is run again on the same world with that truth as the oracle (its observations drawn from it), and its own
degraded share there is reported.

The bootstrap of three repetitions is coarse (a resampled median takes one of the three values or their middle
one), so the interval is a lower bound on the yardstick's uncertainty, not its measure.

    PYTHONPATH=src .venv/bin/python bench/measured_truth_noise.py --scenarios default,broadband-us --seeds 0,1,2,3,4 \\
        --policies tailor,cdn-static --boot 30 --json bench/results/measured_truth_noise.json
"""

from __future__ import annotations

import argparse
import json
import time
from unittest import mock

import numpy as np

from tailor.eval import metrics
from tailor.eval.run import _git_commit
from tailor.oracle import measured as measured_mod
from tailor.oracle.base import PLTTensor
from tailor.policies import make_policy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

KEYS_EXTRA = ("condition", "down_mbps", "rtt_ms", "loss", "queue_packets", "size_bytes", "page")


def resampled_fetches(seed: int):
    """``load_fetches`` whose repetitions are resampled with replacement within each measured point."""
    load = measured_mod.load_fetches

    def _load(dataset, pages: bool = False):
        df = load(dataset, pages)
        if df is None or df.empty:
            return df
        keys = [k for k in (*KEYS_EXTRA, *measured_mod.KEYS) if k in df.columns]
        keys = [k for k in keys if not (k == "page" and not pages)]
        return df.groupby(keys, dropna=False, group_keys=False).sample(frac=1.0, replace=True, random_state=seed)

    return _load


def degraded_under(oracle, sim: Simulator, configs: dict[str, np.ndarray]) -> dict[str, float]:
    """Each policy's degraded share when ``oracle`` is the truth, its page loads' configurations held fixed."""
    world = sim.world
    tensor = PLTTensor(oracle, sim.space)
    by_site: dict[str, list[int]] = {}
    for c, s in zip(world.cell.tolist(), world.site.tolist()):
        by_site.setdefault(world.tensor.site_names[s], []).append(c)
    tensor.prepare({site: np.array(cells) for site, cells in by_site.items()})
    modes = np.array([tensor.mode(int(c), tensor.site_index[world.tensor.site_names[int(s)]])
                      for c, s in zip(world.cell, world.site)])
    default = modes[:, sim.space.default_index]
    rows = np.arange(len(modes))
    return {name: float(np.mean(modes[rows, cfg] / default - 1.0 > metrics.DEGRADED)) for name, cfg in configs.items()}


def one_world(scenario: str, seed: int, policies: list[str], boot: int, rerun: int = 0) -> dict:
    oracle = measured_mod.MeasuredOracle()
    scn = load_scenario(scenario, seed=seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=seed))
    configs, published = {}, {}
    for name in policies:
        rec = sim.run(make_policy(name, seed=seed)).records
        configs[name] = np.asarray(rec["config"])
        published[name] = metrics.summary(name, rec)["degraded_share"]
    median_truth = degraded_under(oracle, sim, configs)
    draws: dict[str, list[float]] = {name: [] for name in policies}
    reruns: dict[str, list[float]] = {name: [] for name in policies}
    for k in range(boot):
        with mock.patch.object(measured_mod, "load_fetches", resampled_fetches(k)):
            truth = measured_mod.MeasuredOracle()
        for name, share in degraded_under(truth, sim, configs).items():
            draws[name].append(share)
        if k < rerun:  # the policies run again with this truth as the oracle
            other = Simulator(scn, truth, SimConfig(seed=seed))
            for name in policies:
                reruns[name].append(metrics.summary(name, other.run(make_policy(name, seed=seed)).records)["degraded_share"])
    out = {"scenario": scenario, "seed": seed, "pageloads": len(sim.world), "policies": {}}
    for name in policies:
        d = np.array(draws[name])
        out["policies"][name] = {
            "evaluated": published[name], "medians": median_truth[name],
            "boot_mean": float(d.mean()) if boot else None,
            "boot_lo": float(np.percentile(d, 2.5)) if boot else None,
            "boot_hi": float(np.percentile(d, 97.5)) if boot else None,
            "boot_above_1pct": float(np.mean(d > 0.01)) if boot else None, "boot": d.tolist(),
            "rerun": reruns[name]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="default,broadband-us,cellular,developing")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--policies", default="tailor,cdn-static")
    ap.add_argument("--boot", type=int, default=40)
    ap.add_argument("--rerun", type=int, default=0, help="run the policies again under the first K bootstrap truths")
    ap.add_argument("--json", default=None, help="write every world's figures here")
    args = ap.parse_args()
    if not 0 <= args.boot <= 1000 or not 0 <= args.rerun <= args.boot:
        raise SystemExit("bench/measured_truth_noise.py: --boot must be in [0, 1000] and --rerun in [0, --boot]")
    policies = [p for p in args.policies.split(",") if p]
    started = time.perf_counter()
    worlds = []
    print("| scenario | seed | policy | degraded (evaluated) | on the medians | bootstrap truths: mean [2.5%, 97.5%] "
          "| truths above 1% | run again under truths 1..K |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario in args.scenarios.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            w = one_world(scenario, seed, policies, args.boot, args.rerun)
            worlds.append(w)
            for name, p in w["policies"].items():
                boot = (f"{100 * p['boot_mean']:.2f}% [{100 * p['boot_lo']:.2f}, {100 * p['boot_hi']:.2f}]"
                        if args.boot else "-")
                above = f"{100 * p['boot_above_1pct']:.0f}%" if args.boot else "-"
                again = " / ".join(f"{100 * v:.2f}%" for v in p["rerun"]) or "-"
                print(f"| {scenario} | {seed} | {name} | {100 * p['evaluated']:.2f}% | {100 * p['medians']:.2f}% | "
                      f"{boot} | {above} | {again} |", flush=True)
    meta = {"commit": _git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(time.perf_counter() - started, 1), "boot": args.boot, "rerun": args.rerun,
            "policies": policies}
    print(f"\ncommit {meta['commit']}, {meta['date']}, {meta['seconds']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "worlds": worlds}, f, indent=1)


if __name__ == "__main__":
    main()
