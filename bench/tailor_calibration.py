"""Is `tailor`'s uncertainty what its budget assumes, and does the budget hold in a scenario world?

    PYTHONPATH=src .venv/bin/python bench/tailor_calibration.py --scenario cellular --seed 100 \
        [--variant known:cell_level=known --variant joint:] [--budget]

Runs `tailor` (one run per ``--variant``, ``name:key=value,...``) on one world as ``tailor evaluate`` does (model
oracle, space ``core``, online mode) and compares, for every page load it served with a configuration other than
its baseline, the effect it predicted at the decision (posterior mean and sd of the log time against the baseline)
with the truth (the log of the oracle's noise-free time over the baseline's on the same page load):

* calibration: the share of those page loads whose true effect lies above mean + 1 sd and above mean + ``budget_z``
  sd (the bound the budget charges; 15.9% and 0.1% if the posterior were calibrated), and the median z;
* the greedy arm: predicted against true effect of its page loads, by how many page loads of the chosen
  configuration the cell had seen, and the share truly slower than the baseline.

``--budget``: per budget group (the policy's RTT x goodput bin), the running sum of the policy's times against
(1 + alpha) x the baseline's on the same page loads (the same noise draw): how many groups exceed it at some moment
and by how much (relative to the group's baseline total). A diagnostic: seeds below 100 are refused (0-4 are the
acceptance seeds).
"""

from __future__ import annotations

import argparse

import numpy as np

from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.policies.base import parse_policy_params
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

HELD_OUT = 100


def run_variant(sim: Simulator, truth_modes: np.ndarray, seed: int, params: dict) -> dict:
    """One run; per page load the prediction for the served configuration, then the figures."""
    pol = make_policy("tailor", seed=seed, **params)
    pred: list[tuple[float, float, float]] = []
    select = pol._select

    def recording(ctx):
        d = select(ctx)
        cell = pol._cell(ctx)
        mean, sd, _, _ = pol._effects(cell, pol._group(cell))
        seen = pol._stats[cell[:5]][0][d.config] if cell[:5] in pol._stats else 0.0
        pred.append((float(mean[d.config]), float(sd[d.config]), float(seen)))
        return d

    pol._select = recording
    rec = sim.run(pol).records
    cfg, arm = np.asarray(rec["config"]), np.asarray(rec["arm"])
    base = pol.baseline_index
    truth = np.log(truth_modes[np.arange(len(cfg)), cfg] / truth_modes[:, base])
    mean, sd, seen = (np.array(v) for v in zip(*pred))
    other = cfg != base
    z = (truth[other] - mean[other]) / np.maximum(sd[other], 1e-9)
    out = {"loads": len(cfg), "non_baseline": int(other.sum()), "above_1sd": float(np.mean(z > 1.0)),
           "above_bound": float(np.mean(z > pol.budget_z)), "median_z": float(np.median(z)) if len(z) else float("nan")}
    greedy = arm == "exploit"
    rows = []
    for lo, hi in ((0, 1), (1, 10), (10, 50), (50, np.inf)):
        m = greedy & (seen >= lo) & (seen < hi)
        if m.any():
            rows.append({"seen": f"[{lo}, {hi})", "loads": int(m.sum()), "predicted": float(mean[m].mean()),
                         "sd": float(sd[m].mean()), "truth": float(truth[m].mean()), "slower": float(np.mean(truth[m] > 0))})
    out["greedy"] = rows
    plt, mode = np.asarray(rec["plt_ms"]), np.asarray(rec["mode_ms"])
    baseline_ms = truth_modes[:, base] * plt / mode  # the baseline on the same page load, the same noise draw
    groups = np.array([g.split("|")[0] for g in rec["group"]])
    over = []
    for g in np.unique(groups):
        m = groups == g
        excess = np.cumsum(plt[m]) - (1.0 + pol.alpha) * np.cumsum(baseline_ms[m])
        over.append((float(excess.max() / baseline_ms[m].sum()), str(g), int(m.sum())))
    out["budget"] = {"groups": len(over), "over": sum(1 for r, _, _ in over if r > 0),
                     "worst": sorted(over, reverse=True)[:3], "total_ratio": float(plt.sum() / baseline_ms.sum())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="cellular")
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--variant", action="append", default=None, metavar="NAME:KEY=VALUE,...")
    ap.add_argument("--budget", action="store_true", help="also the budget's running sums per group")
    args = ap.parse_args()
    if args.seed < HELD_OUT:
        raise SystemExit(f"bench/tailor_calibration.py: the seed must be >= {HELD_OUT} (0-4 are the acceptance seeds)")
    oracle = select_oracle("model", "core")
    scn = load_scenario(args.scenario, seed=args.seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=args.seed))
    w = sim.world
    modes = np.array([w.tensor.mode(int(c), int(s)) for c, s in zip(w.cell, w.site)])
    for text in args.variant or ["tailor:"]:
        name, _, params = text.partition(":")
        params = dict(parse_policy_params([p for p in params.split(",") if p], "bench/tailor_calibration.py"))
        r = run_variant(sim, modes, args.seed, params)
        print(f"\n{args.scenario} seed {args.seed}, {name or 'tailor'} {params or ''}: {r['non_baseline']:,} of "
              f"{r['loads']:,} page loads off the baseline; true effect above mean + 1 sd {100 * r['above_1sd']:.1f}% "
              f"(15.9% if calibrated), above the budget's bound {100 * r['above_bound']:.1f}% (0.1%), median z "
              f"{r['median_z']:+.2f}")
        print("| greedy: cell's page loads of the choice | page loads | predicted | sd | truth | truly slower |\n"
              "|---|---|---|---|---|---|")
        for g in r["greedy"]:
            print(f"| {g['seen']} | {g['loads']} | {g['predicted']:+.3f} | {g['sd']:.3f} | {g['truth']:+.3f} | "
                  f"{100 * g['slower']:.0f}% |")
        if args.budget:
            b = r["budget"]
            worst = ", ".join(f"{g} {100 * x:+.2f}% ({n} loads)" for x, g, n in b["worst"])
            print(f"budget: {b['over']} of {b['groups']} groups over (1 + alpha) x the baseline at some moment; "
                  f"total time / the baseline's {b['total_ratio']:.4f}; largest excess per group: {worst}")


if __name__ == "__main__":
    main()
