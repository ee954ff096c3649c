"""Where `tailor`'s degraded page loads come from, and its baseline's (issue 12; docs/tailor.md "Where the degraded
page loads are").

    PYTHONPATH=src .venv/bin/python bench/tailor_degraded.py --scenario developing --seeds 100 101 [--oracle model]
        [--sessions N] [--policy-param KEY=VALUE ...] [--top 5]

Runs `tailor` alone on each world (space ``core``, online mode, as ``tailor evaluate``). Degraded = more than 5%
slower than the registry default on the same page load (:data:`tailor.eval.metrics.DEGRADED`). Per seed it prints:

* `tailor`'s degraded share by arm, and the baseline's own (``cdn-static``: its noise-free time more than 5% above
  the default's, which with the simulator's common noise draw is the evaluation's degraded page load): what
  `tailor` inherits wherever it stays on the baseline;
* the baseline's degraded page loads by the true network condition (bandwidth x loss) and by client /24, with what
  each /24's page loads would give at the other /24s' rate in the same true bandwidth, RTT, loss and website;
* per website (the ones with a degraded page load): its share of the page loads, `tailor`'s degraded page loads by arm,
  the baseline's, `tailor`'s and Optimal's mean improvement over the default (log time), and for the departures
  (greedy and probes) the posterior's median effect against the baseline at the decision next to the true one and
  the mean of (true - posterior) / sd: where the model promises a gain the website does not have;
* the policy's network cells (its RTT, goodput and loss bins, over every website, device and hour) that hold the
  most of the baseline's degraded page loads, and within each the true conditions it mixes (bandwidth, RTT, loss,
  buffer) with their page loads and the baseline's degraded share: what the cells cannot tell apart;
* with the measured oracle: the page loads whose true condition lies beyond the measured conditions of the workload
  the oracle takes its ratios from (slower, faster or lossier than any measured one), and their share of `tailor`'s
  and the baseline's degraded page loads: there the oracle extrapolates;
* the default guard's test on the baseline at each decision (ruled out by the posterior mean, by its sd only, or
  kept), with how often the baseline was truly degraded in each group and what `tailor` served there;
* at the page loads `tailor` served on the baseline while the baseline was degraded: the policy's posterior (mean
  and sd of the effect against the baseline, log time) of the default configuration and of the configuration that
  is truly best there, against the true effects.

Seeds below 100 are refused (0-4 are the acceptance seeds). Measurement only: a wrapper around the policy's
``_select`` reads the posterior (:meth:`TailorPolicy._effects`) after each decision; it does not change the state
the decisions depend on (``--check`` runs the world a second time without it and compares the choices).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tailor.eval.metrics import DEGRADED
from tailor.eval.run import _git_commit
from tailor.oracle.measured import MeasuredOracle
from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.policies.base import parse_policy_params
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

HELD_OUT = 100
SLOWER = np.log1p(DEGRADED)  # log time: more than 5% slower


def observed(policy) -> list[tuple]:
    """Wrap ``policy._select``: after each decision, record (arm, posterior mean, posterior sd, context cell)."""
    log: list[tuple] = []
    select = policy._select

    def _select(ctx):
        d = select(ctx)
        cell = policy._cell(ctx)
        mean, sd, _, _ = policy._effects(cell, policy._group(cell))
        log.append((d.arm, mean.copy(), sd.copy(), cell))
        return d

    policy._select = _select
    return log


def extrapolated(oracle: MeasuredOracle, world, bw: np.ndarray, loss: np.ndarray) -> dict[str, np.ndarray]:
    """Per page load, whether its true condition lies outside the measured conditions of the workload whose ratios the
    measured oracle applies to its website (``_borrow``): slower than the slowest, faster than the fastest, lossier than
    the lossiest; the oracle's times there are the model's shape times ratios interpolated from farther conditions."""
    names = np.array(world.tensor.site_names)[world.site]
    slower, faster, lossier = (np.zeros(len(bw), dtype=bool) for _ in range(3))
    for name in set(names.tolist()):
        w = oracle._borrow[name]
        measured = np.isfinite(oracle._log_ratio[w]).any(axis=1)
        conds = oracle.conds[measured]
        on = names == name
        slower |= on & (bw < conds["down_mbps"].min())
        faster |= on & (bw > conds["down_mbps"].max())
        lossier |= on & (loss > conds["loss"].max())
    return {"bandwidth below the slowest measured": slower, "bandwidth above the fastest measured": faster,
            "loss above the lossiest measured": lossier, "any of these": slower | faster | lossier}


def tally(keys, flags) -> dict[tuple, list[int]]:
    """Per key: [page loads, flagged page loads]."""
    out: dict[tuple, list[int]] = {}
    for key, f in zip(keys, flags):
        v = out.setdefault(key, [0, 0])
        v[0] += 1
        v[1] += int(f)
    return out


def table(rows: list[tuple], header: str) -> None:
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def guard_test(policy, post_mean: np.ndarray, post_sd: np.ndarray, base_deg: np.ndarray, arm: np.ndarray,
               off: np.ndarray, deg: np.ndarray) -> None:
    """The default guard's test on the baseline at each decision (:meth:`TailorPolicy._bounds` on the posterior the
    decision read): ruled out on the mean alone (the baseline *expected* more than 5% slower than the registry
    default), on the sd only (expected within 5%, but not at ``guard`` sd), or kept; per group of page loads how
    often the baseline was truly degraded there and what `tailor` served."""
    if policy.guard == "off" or policy._base == policy.space.default_index:
        return
    d, b = policy.space.default_index, policy._base
    ruled_out = np.array([not policy._bounds(m, v)[1][b] for m, v in zip(post_mean, post_sd)])
    by_mean = post_mean[:, b] - post_mean[:, d] > SLOWER
    by_sd = ruled_out & ~by_mean
    sd = np.sqrt(post_sd[:, b] ** 2 + post_sd[:, d] ** 2)
    rows = []
    for what, on in (("ruled out by the mean", by_mean), ("ruled out by the sd only", by_sd),
                     ("kept", ~by_mean & ~by_sd)):
        if not on.any():
            continue
        served = ", ".join(f"{a} {100 * np.mean(arm[on] == a):.0f}%" for a in sorted(set(arm[on].tolist())))
        rows.append((what, int(on.sum()), f"{100 * base_deg[on].mean():.2f}%", f"{np.median(sd[on]):.3f}",
                     f"{100 * off[on].mean():.0f}%", f"{100 * deg[on].mean():.2f}%", served))
    table(rows, "\n| the guard on the baseline | page loads | baseline truly degraded | contrast sd (median) | "
                "served off the baseline | tailor degraded | arms |")


def websites(world, rec, arm: np.ndarray, effect: np.ndarray, post_mean: np.ndarray, post_sd: np.ndarray,
             deg: np.ndarray, base_deg: np.ndarray) -> None:
    """Per website with a degraded page load: where `tailor`'s degraded page loads are, what there is to gain there
    (Optimal's mean improvement, noise-free), and how far the departures' posterior was from the truth."""
    names = np.array(world.tensor.site_names)
    gain = np.log(rec["default_ms"] / rec["plt_ms"])
    best = np.log(rec["mode_default_ms"] / rec["mode_optimal_ms"])
    cfg = rec["config"].astype(int)
    k = np.arange(len(cfg))
    dep = (arm == "exploit") | (arm == "explore")
    rows = []
    for s in sorted(set(world.site[deg].tolist()), key=lambda s: (-int((deg & (world.site == s)).sum()), s)):
        on = world.site == s
        d = on & dep
        err = (effect[k[d], cfg[d]] - post_mean[k[d], cfg[d]]) / np.maximum(post_sd[k[d], cfg[d]], 1e-9)
        rows.append((names[s], int(on.sum()), f"{100 * on.mean():.0f}%", int((deg & on).sum()),
                     ", ".join(f"{a} {int((deg & on & (arm == a)).sum())}" for a in sorted(set(arm[on].tolist()))),
                     f"{100 * base_deg[on].mean():.2f}%", f"{gain[on].mean():+.3f}", f"{best[on].mean():+.3f}",
                     f"{100 * d.sum() / on.sum():.0f}%",
                     f"{np.median(post_mean[k[d], cfg[d]]):+.3f} / {np.median(effect[k[d], cfg[d]]):+.3f}" if d.any()
                     else "-", f"{err.mean():+.2f}" if d.any() else "-"))
    table(rows, "\n| website | page loads | share | tailor degraded | by arm | baseline degraded | tailor's gain | "
                "Optimal's gain | departures | their effect: posterior / true (median) | (true - posterior) / sd |")


def mixes(policy, net: list[tuple], conds: list[tuple], base_deg: np.ndarray, top: int) -> None:
    """The three network cells of the policy (RTT, goodput, loss bins) with the most baseline-degraded page loads, and
    per cell its true conditions: where the baseline is degraded in one and fine in another, the cell averages them."""
    rtt_e, gp_e, loss_e = policy._edges

    def span(edges, b) -> str:
        if b < 0:
            return "unknown"
        return f"{edges[b - 1]:g}-{edges[b]:g}" if 0 < b < len(edges) else (f"<{edges[0]:g}" if b == 0 else f">{edges[-1]:g}")

    by_cell = tally(net, base_deg)
    for key, (n, d) in sorted(by_cell.items(), key=lambda kv: (-kv[1][1], kv[0]))[:3]:
        if not d:
            break
        on = [i for i, k in enumerate(net) if k == key]
        rows = [(f"{b:g}", f"{r:g}", f"{lo:g}", f"{q:g}", v[0], v[1], f"{100 * v[1] / v[0]:.0f}%")
                for (b, r, lo, q), v in sorted(tally((conds[i] for i in on), base_deg[on]).items(),
                                               key=lambda kv: (-kv[1][0], kv[0]))[:top]]
        table(rows, f"\nthe cell RTT {span(rtt_e, key[0])} ms, goodput {span(gp_e, key[1])} Mbit/s, loss "
                    f"{span(loss_e, key[2])}: {n} page loads, the baseline degraded at {d}; its true conditions\n"
                    "| bandwidth Mbit/s | RTT ms | loss | buffer BDP | page loads | baseline degraded | share |")


def one(scenario: str, oracle_name: str, seed: int, sessions: int | None, params: dict, top: int, check: bool) -> None:
    oracle = select_oracle(oracle_name, "core")
    scn = load_scenario(scenario, n_sessions=sessions, seed=seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=seed))
    policy = make_policy("tailor", seed=seed, **params)
    log = observed(policy)
    rec = sim.run(policy).records
    if check:
        again = sim.run(make_policy("tailor", seed=seed, **params)).records
        same = bool(np.array_equal(again["config"], rec["config"]))
        print(f"check: the unwrapped run makes the same choices: {same}")
    world, space = sim.world, sim.space
    labels = np.array([space.label(i) for i in range(len(space))])
    base, default = policy._base, space.default_index
    modes = np.array([world.tensor.mode(int(c), int(s)) for c, s in zip(world.cell, world.site)])
    effect = np.log(modes / modes[:, [base]])  # true effect of every configuration against the baseline
    clients = [world.sessions[s].client for s in world.session]
    prefix = np.array([c.prefix for c in clients])
    access = np.array([c.access for c in clients])
    bw, rtt, loss, buffer = oracle.grid.values(world.cell)
    arm = np.array([a for a, _, _, _ in log])
    post_mean = np.array([m for _, m, _, _ in log])  # page loads x configurations
    post_sd = np.array([v for _, _, v, _ in log])
    net = [cell[2:5] for _, _, _, cell in log]  # the policy's RTT, goodput and loss bins
    deg = 1.0 - rec["plt_ms"] / rec["default_ms"] < -DEGRADED
    base_deg = effect[:, default] < -SLOWER
    n = len(deg)
    print(f"\n## {scenario} / {oracle_name} / seed {seed}: {n:,} page loads; tailor degraded {100 * deg.mean():.2f}%, "
          f"the baseline ({labels[base]}) {100 * base_deg.mean():.2f}%")
    rows = []
    for a in sorted(set(arm)):
        on = arm == a
        rows.append((a, int(on.sum()), f"{100 * deg[on].mean():.2f}%", int((deg & on).sum()),
                     f"{100 * (deg & on).sum() / max(deg.sum(), 1):.0f}%"))
    table(rows, "\n| arm | page loads | degraded in arm | degraded | share of tailor's degraded |")
    websites(world, rec, arm, effect, post_mean, post_sd, deg, base_deg)
    cond = tally(zip(bw.tolist(), loss.tolist()), base_deg)
    rows = [(f"{b:g}", f"{lo:g}", v[0], v[1], f"{100 * v[1] / v[0]:.0f}%")
            for (b, lo), v in sorted(cond.items(), key=lambda kv: -kv[1][1])[:top] if v[1]]
    table(rows, "\n| bandwidth Mbit/s | loss | page loads | baseline degraded | share |")
    # what a /24's page loads would give at the rate of the other /24s' page loads of the same true bandwidth, RTT, loss
    # and website (leave the /24 out; page loads with no such peer are counted apart). The truth is a function of the
    # condition cell and the website, so what is left is the cell's last axis, the bottleneck buffer.
    keys = list(zip(bw.tolist(), rtt.tolist(), loss.tolist(), world.site.tolist()))
    rate = tally(keys, base_deg)
    rows = []
    for p in sorted(set(prefix[base_deg]), key=lambda p: (-int((base_deg & (prefix == p)).sum()), p))[:top]:
        on = prefix == p
        at = np.flatnonzero(on)
        expect, seen, alone = 0.0, 0, 0
        for key, (n_own, d_own) in tally((keys[i] for i in at), base_deg[at]).items():
            n_rest, d_rest = rate[key][0] - n_own, rate[key][1] - d_own
            if n_rest:
                expect += n_own * d_rest / n_rest
                seen += d_own
            else:
                alone += n_own
        rows.append((p, access[on][0], int(on.sum()), len(set(world.site[on].tolist())), int((base_deg & on).sum()),
                     f"{seen} / {expect:.1f} ({alone} alone)", int((deg & on).sum()),
                     int((on & (arm == "default")).sum())))
    share = sum(r[4] for r in rows) / max(int(base_deg.sum()), 1)
    table(rows, "\n| /24 | access | page loads | websites | baseline degraded | of them with peers / at the peers' "
                "rate (page loads without peers) | tailor degraded | on the baseline |")
    print(f"(these {len(rows)} /24s hold {100 * share:.0f}% of the baseline's degraded page loads)")
    mixes(policy, net, list(zip(bw.tolist(), rtt.tolist(), loss.tolist(), buffer.tolist())), base_deg, top)
    if cond and max(v[1] for v in cond.values()):
        (b, lo), _ = max(cond.items(), key=lambda kv: kv[1][1])
        here = (bw == b) & (loss == lo)
        on = np.flatnonzero(here & (rec["config"] != base))
        rows = []
        for c in sorted(set(rec["config"][on].tolist()), key=lambda c: (-int((rec["config"][on] == c).sum()), c))[:top]:
            at = on[rec["config"][on] == c]
            rows.append((labels[c], ", ".join(f"{a} {int((arm[at] == a).sum())}" for a in sorted(set(arm[at]))),
                         f"{effect[at, c].mean():+.3f}", f"{post_mean[at, c].mean():+.3f}", f"{post_sd[at, c].mean():.3f}"))
        best = effect[here].mean(axis=0).argmin()
        table(rows, f"\nin the condition with the most ({b:g} Mbit/s, loss {lo:g}): `tailor`'s {len(on)} page loads off "
                    f"the baseline\n| configuration | arms | true effect (mean) | posterior mean | posterior sd |")
        print(f"(the configuration best there on average: {labels[best]}, true effect "
              f"{effect[here, best].mean():+.3f}, played {int((rec['config'][on] == best).sum())} "
              "times)")
    if isinstance(oracle, MeasuredOracle):
        outside = extrapolated(oracle, world, bw, loss)
        rows = [(what, int(on.sum()), f"{100 * on.mean():.1f}%", f"{100 * (deg & on).sum() / max(deg.sum(), 1):.0f}%",
                 f"{100 * (base_deg & on).sum() / max(base_deg.sum(), 1):.0f}%") for what, on in outside.items()]
        table(rows, "\n| where the measured oracle extrapolates (beyond its website's measured conditions) | page loads | "
                    "share | of tailor's degraded | of the baseline's degraded |")
    guard_test(policy, post_mean, post_sd, base_deg, arm, rec["config"] != base, deg)
    stuck = np.flatnonzero(base_deg & (rec["config"] == base))
    if len(stuck):
        mean, sd = post_mean[stuck], post_sd[stuck]
        best = effect[stuck].argmin(axis=1)
        k = np.arange(len(stuck))
        print(f"\n{len(stuck)} page loads served on the baseline while it was degraded; medians over them (log time "
              "against the baseline):")
        print(f"- default ({labels[default]}): true {np.median(effect[stuck, default]):+.3f}, posterior mean "
              f"{np.median(mean[:, default]):+.3f}, sd {np.median(sd[:, default]):.3f}; the posterior's sign is right "
              f"at {100 * np.mean(mean[:, default] < 0):.0f}%")
        print(f"- the truly best configuration: true {np.median(effect[stuck, best]):+.3f}, posterior mean "
              f"{np.median(mean[k, best]):+.3f}, sd {np.median(sd[k, best]):.3f}; its UCB (mean + {policy.beta:g} sd) "
              f"below 0 at {100 * np.mean(mean[k, best] + policy.beta * sd[k, best] < 0):.0f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="developing")
    ap.add_argument("--oracle", default="model")
    ap.add_argument("--seeds", type=int, nargs="+", default=[100])
    ap.add_argument("--sessions", type=int, default=None)
    ap.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--top", type=int, default=5, help="rows of the condition and /24 tables")
    ap.add_argument("--check", action="store_true", help="also run unwrapped and compare the choices")
    args = ap.parse_args()
    if min(args.seeds) < HELD_OUT:
        raise SystemExit(f"bench/tailor_degraded.py: seeds must be >= {HELD_OUT} (0-4 are the acceptance seeds)")
    params = dict(parse_policy_params(args.policy_param, "bench/tailor_degraded.py"))
    started = time.perf_counter()
    for seed in args.seeds:
        one(args.scenario, args.oracle, seed, args.sessions, params, args.top, args.check)
    print(f"\ncommit {_git_commit()}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
