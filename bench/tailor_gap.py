"""Where `tailor`'s gap to Optimal is, and why it serves the baseline there (issue 12's median-gap check).

Usage::

    PYTHONPATH=src .venv/bin/python bench/tailor_gap.py --scenario satellite --oracle measured --seed 118

Runs `tailor`, `cdn-static` and `best-static` on one world (online mode, as ``tailor evaluate``) and prints, for
`tailor`, the share and median gap to Optimal of each arm, the median gap and the baseline's share per hour of the
run, and, for every page load `tailor` served on its baseline by deciding so (arm ``default``), the reason, read
from the policy's state at that decision (the same quantities ``TailorPolicy._select`` uses, computed just before
it):

* ``group has < 10 page loads``: no departure before the budget group has a baseline-time estimate;
* ``no choice 2% better``: the baseline is the safe choice and no eligible configuration's mean beats it by
  ``min_gain`` (the model sees nothing to gain there);
* ``greedy choice, budget refused``: a configuration's mean beats the safe one by ``min_gain`` but the slack does
  not pay its pessimistic cost;
* ``guard's choice, budget refused``: the default guard excludes the baseline (plausibly > 5% slower than the
  registry default) and the slack does not pay for the safe choice among the eligible.

Seeds below 100 are refused (0-4 are the acceptance seeds).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from tailor.eval.metrics import gap_to_optimal
from tailor.eval.run import _git_commit
from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.policies.tailor import TailorPolicy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

HELD_OUT = 100


class ReasonedTailor(TailorPolicy):
    """`tailor` unchanged, recording why each of its own baseline decisions was one."""

    name = "tailor"

    def _init_state(self) -> None:
        super()._init_state()
        self.reasons: list[tuple[float, str]] = []

    def _select(self, ctx):
        cell = self._cell(ctx)
        group = self._group(cell)
        mean, sd, _, _ = self._effects(cell, group)
        ucb, ok, _ = self._bounds(mean, sd)
        safe = int(np.argmin(np.where(ok, ucb, np.inf)))
        best = int(np.argmin(np.where(ok, mean, np.inf)))
        decision = super()._select(ctx)
        if decision.arm == "default":
            if self._times.get(group, (0, 0.0))[0] < 10:
                why = "group has < 10 page loads"
            elif best != safe and mean[best] < ucb[safe] - self.min_gain:
                why = "greedy choice, budget refused"
            elif ucb[safe] <= 0.0:
                why = "no choice 2% better"
            else:
                why = "guard's choice, budget refused"
            self.reasons.append((ctx.time_s, why))
        return decision


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="satellite")
    ap.add_argument("--oracle", default="measured")
    ap.add_argument("--seed", type=int, default=HELD_OUT)
    args = ap.parse_args()
    if args.seed < HELD_OUT:
        raise SystemExit(f"bench/tailor_gap.py: the seed must be >= {HELD_OUT}; got {args.seed}")
    started = time.perf_counter()
    oracle = select_oracle(args.oracle, "core")
    scn = load_scenario(args.scenario, seed=args.seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=args.seed))
    policy = ReasonedTailor(seed=args.seed)
    rec = sim.run(policy).records
    gap, arm, hour = gap_to_optimal(rec), rec["arm"], (rec["time_s"] // 3600).astype(int)
    n = len(gap)
    print(f"{args.scenario} / {oracle.name} / seed {args.seed} ({n:,} page loads)")
    for name in ("cdn-static", "best-static"):
        other = sim.run(make_policy(name, seed=args.seed)).records
        print(f"  {name}: median gap {100 * np.median(gap_to_optimal(other)):.2f}%")
    print(f"  tailor: median gap {100 * np.median(gap):.2f}%")
    print("| arm | share | median gap | share with gap > 2% |\n|---|---|---|---|")
    for a in np.unique(arm):
        s = arm == a
        print(f"| {a} | {100 * s.mean():.1f}% | {100 * np.median(gap[s]):.2f}% | {100 * np.mean(gap[s] > 0.02):.1f}% |")
    reasons = Counter(why for _, why in policy.reasons)
    by_hour = Counter((int(t // 3600), why) for t, why in policy.reasons)
    kinds = [k for k, _ in reasons.most_common()]
    print("\n| hour | page loads | median gap | baseline share | " + " | ".join(kinds) + " |")
    print("|---" * (4 + len(kinds)) + "|")
    for h in np.unique(hour):
        s = hour == h
        print(f"| {h} | {s.sum():,} | {100 * np.median(gap[s]):.2f}% | {100 * np.mean(arm[s] == 'default'):.1f}% | "
              + " | ".join(f"{100 * by_hour[(int(h), k)] / s.sum():.1f}%" for k in kinds) + " |")
    print("| all | " + f"{n:,} | {100 * np.median(gap):.2f}% | {100 * np.mean(arm == 'default'):.1f}% | "
          + " | ".join(f"{100 * reasons[k] / n:.1f}%" for k in kinds) + " |")
    print(f"\ncommit {_git_commit()}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
