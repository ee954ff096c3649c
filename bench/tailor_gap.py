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

With ``--decompose``, for the "no choice 2% better" page loads after the first hour whose Optimal configuration is
not the baseline, it splits the model's mean effect of Optimal's configuration there into the shared model's terms
(per context block of psi, and per knob term of the configuration's coding: each knob value's main effect and each
two-knob product), the pool's correction and the cell's own update, beside the true effect (the world's noise-free
times; the diagnosis reads them, the policy never does). Then, for the eight non-baseline configurations played most,
the evidence where they were played: their page loads' contrast with the baseline's in the same level cell and clock
hour (weighted n_c n_b / (n_c + n_b), as a fixed-effects fit weighs it), observed and true, beside the model's
end-of-run mean at those page loads (shared, and the cell's posterior), and the posterior and the truth averaged over
every page load of the run (played there or not).

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
from tailor.policies.tailor import TailorPolicy, knob_terms
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

HELD_OUT = 100


class ReasonedTailor(TailorPolicy):
    """`tailor` unchanged, recording why each of its own baseline decisions was one."""

    name = "tailor"

    world = None  # set by main() for --decompose: the world's noise-free times (never read by the decisions)

    def _init_state(self) -> None:
        super()._init_state()
        self.reasons: list[tuple[float, str]] = []
        self.parts: list[dict] = []  # --decompose: one row per "no choice 2% better" page load after hour 0
        self.cell_of: dict[tuple, tuple] = {}  # --decompose: (time, session) -> the page load's context cell

    def _decompose(self, ctx, cell: tuple, group: str, mean: np.ndarray) -> None:
        """The mean effect of Optimal's configuration in ``cell``, split into its terms (see the module)."""
        modes = self.world.tensor.mode(int(ctx.cell), int(self.world.tensor.site_index[ctx.website]))
        c = int(np.argmin(modes))
        if c == self._base:
            return
        idx, val = self._slots([cell])
        slots = self._int_slots
        w_int = self._mu[self._n_psi:].reshape(self._n_int, self._n_e)
        rows = w_int[self._int_pos[idx[0, slots]]] * val[0, slots][:, None]  # slots x knob terms
        by_term = rows.sum(axis=0) * self._d[c]
        blocks = list(self._blocks())
        _, shared, _, _ = self._predict_many([cell])
        pooled, _ = self._pooled([cell], shared, np.zeros_like(shared))
        row = self._stats.find([cell[:5]])[0]
        self.parts.append({
            "config": c, "true": float(np.log(modes[c] / modes[self._base])), "rtt": cell[2],
            "blocks": {blocks[k]: float(rows[i] @ self._d[c]) for i, k in enumerate(slots.tolist())},
            "terms": {j: float(by_term[j]) for j in np.flatnonzero(self._d[c]).tolist()},
            "shared": float(shared[0, c]), "pool": float(pooled[0, c] - shared[0, c]),
            "cell": float(mean[c] - pooled[0, c]),
            "played": bool(row >= 0 and self._stats.data[0, row, c] > 0)})

    def _select(self, ctx):
        cell = self._cell(ctx)
        if self.world is not None:
            self.cell_of[(ctx.time_s, ctx.session)] = cell
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
            if self.world is not None and why == "no choice 2% better" and ctx.time_s >= 3600.0:
                self._decompose(ctx, cell, group, mean)
        return decision


def decomposition(policy: ReasonedTailor, sim: Simulator, rec: dict) -> None:
    """Print the --decompose tables (see the module)."""
    parts, space, names = policy.parts, sim.space, knob_terms(sim.space, policy._base)[1]
    if not parts:
        print("\nno page load to decompose")
        return
    med = lambda key: np.median([p[key] for p in parts])  # noqa: E731
    print(f"\n{len(parts):,} 'no choice 2% better' page loads after hour 0 where Optimal is not the baseline; "
          f"{100 * np.mean([p['played'] for p in parts]):.0f}% in level cells that had played it")
    print(f"median effect of Optimal's configuration (log time): true {med('true'):+.3f}, model "
          f"{np.median([p['shared'] + p['pool'] + p['cell'] for p in parts]):+.3f} = shared {med('shared'):+.3f} "
          f"+ pool {med('pool'):+.3f} + cell {med('cell'):+.3f}")
    top = Counter(p["config"] for p in parts).most_common(3)
    print("Optimal's configurations there: " + ", ".join(
        f"{space.label(c)} {100 * k / len(parts):.0f}%" for c, k in top))
    print("\n| shared term | mean over these page loads |\n|---|---|")
    for b in parts[0]["blocks"]:
        print(f"| block {b} | {np.mean([p['blocks'][b] for p in parts]):+.3f} |")
    terms = Counter(j for p in parts for j in p["terms"])
    for j, k in terms.most_common():
        if k < 0.01 * len(parts):
            break
        print(f"| term {names[j]} ({100 * k / len(parts):.0f}% of them) | "
              f"{np.mean([p['terms'][j] for p in parts if j in p['terms']]):+.3f} |")
    # the evidence where it was played: per configuration, its page loads' contrast with the baseline's in the same
    # level cell (website, device, RTT, goodput and loss bins) and clock hour, weighted n_c n_b / (n_c + n_b) as a
    # fixed-effects fit weighs it, beside the true contrast and the model's end-of-run mean at those page loads
    world, base = sim.world, policy._base
    keys = [policy.cell_of.get((t, world.sessions[k].session_id)) for t, k in zip(world.time_s.tolist(), world.session)]
    known = sorted({c for c in keys if c is not None})
    at = {c: k for k, c in enumerate(known)}
    post, _, _, _ = policy._effects_many(known, [policy._group(c) for c in known])
    shared = policy._predict_many(known)[1]
    modes = np.array([world.tensor.mode(int(c), int(s)) for c, s in zip(world.cell, world.site)])  # page loads x configs
    effect = np.log(modes / modes[:, [base]])  # every configuration's true effect at every page load
    logy, true = np.log(rec["plt_ms"]), np.log(rec["mode_ms"] / modes[:, base])
    level: dict[tuple, list[list[int]]] = {}
    for i, c in enumerate(keys):
        if c is not None:
            level.setdefault(c[:5] + (int(world.time_s[i] // 3600),), [[], []])[int(rec["config"][i] != base)].append(i)
    print("\n| configuration | page loads | contrast weight | observed contrast | true contrast | model (shared) | model "
          "(cell posterior) | model over every page load | truth over every page load |\n|---|---|---|---|---|---|---|---|---|")
    every = np.array([at[c] if c is not None else -1 for c in keys])
    ok = every >= 0
    for c, k in Counter(int(c) for c in rec["config"] if c != base).most_common(8):
        w = obs = tr = sh = po = 0.0
        for b, others in level.values():
            mine = [i for i in others if rec["config"][i] == c]
            if b and mine:
                wt = len(mine) * len(b) / (len(mine) + len(b))
                rows = [at[keys[i]] for i in mine]
                w += wt
                obs += wt * (logy[mine].mean() - logy[b].mean())
                tr += wt * true[mine].mean()
                sh += wt * shared[rows, c].mean()
                po += wt * post[rows, c].mean()
        if w == 0:
            continue
        print(f"| {space.label(c)} | {k:,} | {w:.0f} | {obs / w:+.3f} | {tr / w:+.3f} | {sh / w:+.3f} | {po / w:+.3f} | "
              f"{post[every[ok], c].mean():+.3f} | {effect[ok, c].mean():+.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="satellite")
    ap.add_argument("--oracle", default="measured")
    ap.add_argument("--seed", type=int, default=HELD_OUT)
    ap.add_argument("--decompose", action="store_true",
                    help="split the model's mean effect of Optimal's configuration where tailor saw no gain")
    args = ap.parse_args()
    if args.seed < HELD_OUT:
        raise SystemExit(f"bench/tailor_gap.py: the seed must be >= {HELD_OUT}; got {args.seed}")
    started = time.perf_counter()
    oracle = select_oracle(args.oracle, "core")
    scn = load_scenario(args.scenario, seed=args.seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=args.seed))
    policy = ReasonedTailor(seed=args.seed)
    if args.decompose:
        policy.world = sim.world
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
    if args.decompose:
        decomposition(policy, sim, rec)
    print(f"\ncommit {_git_commit()}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
