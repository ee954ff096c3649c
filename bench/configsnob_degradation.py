"""Where Config-Snob's degraded page loads come from (issue 14; docs/configsnob.md "Degradation breakdown").

    PYTHONPATH=src .venv/bin/python bench/configsnob_degradation.py --scenario broadband-us --seeds 100 101 \
        --sessions 300 [--policy-param KEY=VALUE ...]

Runs config-snob alone on the scenario and splits its page loads by the phase of the group that served
them (``default``: no decision / unknown prefix; ``initial``: an overlap node's initial trials for a new
profile, §3.1.2; ``cold``: a group's BO model 1; ``steady``: Best / BO model 2 / BO model 3, §3.2.2), by
arm and by the configuration served, and prints, per seed, the causal forest's covariates. Degraded = > 5% slower
than the default on the same page load (tailor.eval.metrics.DEGRADED). Measurement only: the phase label is attached by a
wrapper around the policy's ``_draw``; the policy's choices are unchanged.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from tailor.eval.metrics import DEGRADED
from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.policies.base import Decision, parse_policy_params
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator

STEADY_ARMS = ("best", "bo2", "bo3")


def labelled(policy):
    """Wrap ``policy._draw`` so each Decision's arm reads '<phase>/<arm>'."""
    draw = policy._draw

    def _draw(gid, ctx):
        d = draw(gid, ctx)
        choices = policy._choices[gid]
        if d.arm == "reference":  # default_share: the default's share of every group's loads (§5.2)
            phase, arm = "reference", "-"
        elif gid.startswith("ov:"):
            phase, arm = "initial", d.arm
        elif len(choices) != 3:  # a cold group: BO model 1 alone, or (controlled) its safe choice + a proposal
            phase, arm = "cold", d.arm
        else:
            k = next(j for j, c in enumerate(choices) if c[0] == d.config and c[2] == d.arm)
            phase, arm = "steady", STEADY_ARMS[k] if len(choices) == 3 else d.arm
        return Decision(d.config, d.probability, d.group, f"{phase}/{arm}")

    policy._draw = _draw
    return policy


def breakdown(scenario_name: str, seed: int, sessions: int, params: dict | None = None) -> dict:
    oracle = select_oracle("auto")
    scenario = load_scenario(scenario_name, n_sessions=sessions or None, seed=seed, websites=sorted(oracle.websites))
    sim = Simulator(scenario, oracle, SimConfig(seed=seed))
    policy = labelled(make_policy("config-snob", seed=seed, **(params or {})))
    rec = sim.run(policy).records
    arm = np.array([a if "/" in a else f"{a or 'default'}/-" for a in rec["arm"]])
    imp = 1.0 - rec["plt_ms"] / rec["default_ms"]
    bad = imp < -DEGRADED
    t = np.asarray(rec["time_s"], float)
    hour = np.where(t - t.min() < 3600.0, "first hour", "later")
    rows = {}
    for key in sorted(set(arm)):
        m = arm == key
        rows[key] = (int(m.sum()), int((m & bad).sum()), int((m & bad & (hour == "first hour")).sum()))
    site = np.asarray(rec["site"])
    by_site = {w: (int((site == w).sum()), int(((site == w) & bad).sum())) for w in sorted(set(site))}
    config = np.asarray(rec["config"])
    by_config = {sim.space.label(int(c)): (int((config == c).sum()), int(((config == c) & bad).sum()),
                                           int(((config == c) & bad & (hour == "first hour")).sum()))
                 for c in sorted(set(config[bad].tolist()))}
    return {"n": len(arm), "degraded": int(bad.sum()), "rows": rows, "by_site": by_site, "by_config": by_config,
            "covariates": policy._ci.diagnostics.get("covariates"), "ci": dict(policy._ci.diagnostics),
            "median_imp": float(np.median(imp)), "mean_imp": float(np.mean(imp)),
            "degraded_first_hour": int((bad & (hour == "first hour")).sum())}


def add(counter: Counter, table: dict) -> None:
    """Add one seed's (page loads, degraded[, degraded in the first hour]) per key to the pooled counts."""
    for key, counts in table.items():
        for name, value in zip(("n", "bad", "bad1"), counts):
            counter[key, name] += value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="broadband-us")
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101])
    ap.add_argument("--sessions", type=int, default=300, help="0 = the scenario's own (what tailor evaluate runs)")
    ap.add_argument("--policy-param", action="append", default=[])
    a = ap.parse_args()
    params = dict(parse_policy_params(a.policy_param, "configsnob_degradation"))
    total: Counter = Counter()
    sites: Counter = Counter()
    configs: Counter = Counter()
    for seed in a.seeds:
        r = breakdown(a.scenario, seed, a.sessions, params)
        print(f"# {a.scenario} seed {seed}: {r['degraded']}/{r['n']} degraded ({100 * r['degraded'] / r['n']:.2f}%), "
              f"{r['degraded_first_hour']} in the first hour; median impr {100 * r['median_imp']:+.1f}%, "
              f"mean {100 * r['mean_imp']:+.1f}%; CF covariates {r['covariates']}")
        add(configs, r["by_config"])
        add(sites, r["by_site"])
        add(total, r["rows"])
        for key, (n, b, b1) in r["rows"].items():
            print(f"  {key:18s} {n:6d} loads {b:5d} degraded ({100 * b / max(n, 1):5.1f}%), {b1} in first hour")
    keys = sorted({k for k, _ in total})
    alln = sum(total[k, "n"] for k in keys)
    allb = sum(total[k, "bad"] for k in keys)
    print("\n| phase/arm | page loads | degraded | degraded share in phase | share of all degraded | of which first hour |")
    print("|---|---:|---:|---:|---:|---:|")
    for k in keys:
        n, b, b1 = total[k, "n"], total[k, "bad"], total[k, "bad1"]
        print(f"| {k} | {n} | {b} | {100 * b / max(n, 1):.1f}% | {100 * b / max(allb, 1):.0f}% | {b1} |")
    print(f"| all | {alln} | {allb} | {100 * allb / max(alln, 1):.2f}% | 100% | |")
    print("\n| website | page loads | degraded | degraded share on the website | share of all degraded |")
    print("|---|---:|---:|---:|---:|")
    for w in sorted({w for w, _ in sites}, key=lambda w: (-sites[w, "bad"], w)):
        n, b = sites[w, "n"], sites[w, "bad"]
        print(f"| {w} | {n} | {b} | {100 * b / max(n, 1):.1f}% | {100 * b / max(allb, 1):.0f}% |")

    print("\n| configuration | page loads | degraded | degraded share on it | share of all degraded | of which first hour |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in sorted({c for c, _ in configs}, key=lambda c: (-configs[c, "bad"], c)):
        n, b, b1 = configs[c, "n"], configs[c, "bad"], configs[c, "bad1"]
        print(f"| {c} | {n} | {b} | {100 * b / max(n, 1):.1f}% | {100 * b / max(allb, 1):.0f}% | {b1} |")


if __name__ == "__main__":
    main()
