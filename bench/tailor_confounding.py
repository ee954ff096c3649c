"""Are `tailor`'s within-cell contrasts confounded by when each configuration was played? (issue 12; docs/tailor.md,
"Why the greedy arm's predictions were optimistic")

    PYTHONPATH=src .venv/bin/python bench/tailor_confounding.py --scenario cellular --seeds 100 101 \
        [--oracle model] [--policy-param KEY=VALUE ...] [--windows 300 900 3600] [--json FILE]

`tailor` learns a configuration's effect from contrasts inside a level cell (website, device, RTT, goodput and loss
bins): its page loads against the baseline's page loads in the same cell. Its decisions are not randomised, so a
configuration is played when the model has come to favour it, usually later in the run than the baseline. If the
cell's true conditions drift in between, the contrast carries the drift. This script runs `tailor` alone on each
world (space ``core``, online mode, as ``tailor evaluate``) and measures, for every (level cell, configuration other
than the baseline) with at least 3 page loads of each:

* the condition difference: the mean, over the configuration's page loads, of the baseline's noise-free log time
  (the oracle's mode at the page load's true condition) minus the same mean over the baseline's page loads in the
  cell. It is 0 when the assignment is independent of the conditions;
* the true effect (the oracle's modes, same page loads) and the naive contrast (observed log times);
* the same condition difference against the baseline's page loads within ``--windows`` seconds of each of the
  configuration's page loads (concurrent controls).

Means are weighted by the configuration's page loads. ``--check-random`` also runs a world in which the choices are
drawn at random (half the baseline, half uniform over the space) while `tailor` still learns: the condition
difference must then be near 0, a check of the measurement. Seeds below 100 are refused (0-4 are the acceptance
seeds).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np

from tailor.context import Decision
from tailor.eval.run import _git_commit
from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.policies.base import parse_policy_params
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

HELD_OUT = 100


def measure(scenario: str, seed: int, oracle_name: str, params: dict, windows: list[float],
            randomise: bool = False) -> dict:
    oracle = select_oracle(oracle_name, "core")
    scn = load_scenario(scenario, seed=seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=seed))
    w = sim.world
    modes = np.array([w.tensor.mode(int(c), int(s)) for c, s in zip(w.cell, w.site)])
    pol = make_policy("tailor", seed=seed, **params)
    keys: list[tuple] = []
    select = pol._select
    rng = np.random.default_rng(seed)

    def recording(ctx):
        d = select(ctx)
        keys.append(pol._cell(ctx)[:5])
        if randomise:  # the measurement's check: choices independent of everything
            c = pol.baseline_index if rng.random() < 0.5 else int(rng.integers(len(pol.space)))
            d = Decision(c, 1.0, d.group, "explore")
        return d

    pol._select = recording
    rec = sim.run(pol).records
    cfg, plt = np.asarray(rec["config"]), np.asarray(rec["plt_ms"])
    t = np.asarray(rec["time_s"])
    base, n = pol.baseline_index, len(cfg)
    cond = np.log(modes[:, base])
    truth = np.log(modes[np.arange(n), cfg] / modes[:, base])
    by_cell: dict[tuple, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        by_cell[k].append(i)
    pairs = []
    near: dict[float, list[tuple[float, float]]] = {win: [] for win in windows}
    for idx in by_cell.values():
        idx = np.array(idx)
        b = idx[cfg[idx] == base]
        for c in np.unique(cfg[idx]):
            if c == base:
                continue
            x = idx[cfg[idx] == c]
            if len(b) >= 3 and len(x) >= 3:
                pairs.append((len(x), cond[x].mean() - cond[b].mean(), truth[x].mean(),
                              np.log(plt[x]).mean() - np.log(plt[b]).mean()))
        if len(b):
            for i in idx[cfg[idx] != base]:
                for win in windows:
                    m = np.abs(t[b] - t[i]) <= win
                    if m.any():
                        near[win].append((cond[i] - cond[b[m]].mean(), truth[i]))
    a = np.array(pairs).reshape(-1, 4)
    wts = a[:, 0] if len(a) else np.ones(0)

    def avg(j):
        return float(np.average(a[:, j], weights=wts)) if len(a) else float("nan")

    return {"scenario": scenario, "seed": seed, "oracle": oracle_name, "params": params, "randomised": randomise,
            "loads": n, "off_baseline": int(np.sum(cfg != base)), "pairs": len(a),
            "condition_difference": avg(1), "true_effect": avg(2), "naive_contrast": avg(3),
            "concurrent": {str(int(win)): {"loads": len(v), "condition_difference": float(np.mean([d for d, _ in v]))
                                           if v else float("nan"),
                                           "true_effect": float(np.mean([e for _, e in v])) if v else float("nan")}
                           for win, v in near.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="cellular")
    ap.add_argument("--seeds", type=int, nargs="+", default=[100])
    ap.add_argument("--oracle", default="model")
    ap.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--windows", type=float, nargs="+", default=[300.0, 900.0, 3600.0])
    ap.add_argument("--check-random", action="store_true", help="also a world with random choices (the check)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if min(args.seeds) < HELD_OUT:
        raise SystemExit(f"bench/tailor_confounding.py: seeds must be >= {HELD_OUT} (0-4 are the acceptance seeds)")
    params = dict(parse_policy_params(args.policy_param, "bench/tailor_confounding.py"))
    out = {"commit": _git_commit(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": []}
    for seed in args.seeds:
        for randomise in ([False, True] if args.check_random else [False]):
            t0 = time.time()
            r = measure(args.scenario, seed, args.oracle, params, args.windows, randomise)
            r["wall_s"] = round(time.time() - t0, 1)
            out["runs"].append(r)
            print(f"{args.scenario} / {args.oracle} / seed {seed}{' (random choices)' if randomise else ''} "
                  f"{params or ''}: {r['off_baseline']:,} of {r['loads']:,} page loads off the baseline; "
                  f"{r['pairs']} (cell, configuration) pairs: condition difference {r['condition_difference']:+.3f}, "
                  f"true effect {r['true_effect']:+.3f}, naive contrast {r['naive_contrast']:+.3f} ({r['wall_s']} s)")
            for win, c in r["concurrent"].items():
                print(f"  against the baseline's page loads within {win} s: {c['loads']:,} page loads, condition "
                      f"difference {c['condition_difference']:+.3f}, true effect {c['true_effect']:+.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
