"""Off-policy estimation error of `tailor`'s and `cdn-static`'s final tables from `configanator`'s logs: the harness
the cost model of the doubly robust estimator (:func:`tailor.ope.fit_q_model`) is developed with, and the report of
issue 12's check "DR of tailor from configanator's logs within 5% of the truth".

Usage::

    PYTHONPATH=src .venv/bin/python bench/ope_dev.py --cells default:model,developing:measured --seeds 100,101 \
        --variant 'pooled:{"knobs": false}' --variant 'knobs:{}' --variant 'strong:{"knob_shrink": 100}'
    PYTHONPATH=src .venv/bin/python bench/ope_dev.py --acceptance [--cells ...] [--json FILE]

Every (scenario, oracle, seed) world is prepared as ``tailor evaluate`` does (space ``core``, online mode,
UpdateFreq 300 s); ``configanator``, ``tailor`` and ``cdn-static`` run on it, configanator's page loads become the
logs (:func:`tailor.eval.offpolicy.sim_logs`), and each ``--variant`` (``name:JSON``: keyword arguments of
``fit_q_model``, and ``"clip"``, the importance weights' clip of ``table_value``; ``"dr_shrink"``, its
DR weights' optimistic shrinkage lambda (``null``: plain DR; absent: the shipped ``DR_SHRINK``; ``"shrink"`` is
``fit_q_model``'s per-configuration penalty); ``"calibrate"``, a trial not
kept in the estimator: each configuration's prediction times the ratio of its logged records' observed to their
cross-fitted predicted total, shrunk by that many pseudo-records (a number), or one ratio over every record
(``"global"``); ``"knobs": false`` drops the knob values, which are otherwise the space's, as ``tailor evaluate``
passes them) values the two final tables with :func:`tailor.ope.table_value`. The truth is the table's expected
time on the same page loads and noise draws (``_Truth``). Prints DR and DM relative error and whether the 95% DR
interval covers the truth, per run, then per variant the mean absolute error, the share within 5% and the coverage.

Development runs use seeds >= 100 only; ``--acceptance`` evaluates the shipped estimator (no variants) on seeds
0-4 of the ten cells, choosing nothing.
"""

from __future__ import annotations

import argparse
import json
import time
import types

import numpy as np

from tailor.eval.offpolicy import _Truth, sim_logs
from tailor.eval.run import policy_params
from tailor.ope import DR_SHRINK, cohort_clusters, fit_q_model, table_value, target_probabilities
from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator
from tailor.table import DecisionTable
from tailor_dev import finish  # bench/ is the script's directory, first on sys.path

HELD_OUT = 100
CELLS = [f"{s}:{o}" for o in ("model", "measured")
         for s in ("default", "broadband-us", "cellular", "developing", "satellite")]
TARGETS = ("tailor", "cdn-static")


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, params = text.partition(":")
    kw = json.loads(params) if params.strip() else {}
    if not isinstance(kw, dict):
        raise SystemExit(f"bench/ope_dev.py: --variant {text!r}: the part after ':' must be a JSON object")
    cal = kw.get("calibrate")
    if cal is not None and cal != "global" and not (isinstance(cal, (int, float)) and not isinstance(cal, bool)
                                                    and 0 <= cal < float("inf")):
        raise SystemExit(f"bench/ope_dev.py: --variant {text!r}: calibrate must be \"global\" or a number >= 0")
    return name, kw


NOT_Q = ("clip", "calibrate", "dr_shrink")  # variant keys that are not fit_q_model's


def q_kwargs(kw: dict, sim: Simulator) -> dict:
    out = {k: v for k, v in kw.items() if k not in NOT_Q}
    if out.pop("knobs", True):
        out["knobs"] = {c.id: dict(c) for c in sim.space.configs}
    return out


def calibrated(q, logs, calibrate):
    """The cost model ``q`` with each configuration's predictions scaled by its logged records' observed over
    cross-fitted predicted total (shrunk by ``calibrate`` pseudo-records at the configuration's mean prediction),
    or by one ratio over all records (``"global"``); ``None``: ``q`` itself."""
    if calibrate is None:
        return q
    logged = list(dict.fromkeys(logs.config))
    col = {c: k for k, c in enumerate(logged)}
    k = np.fromiter((col[c] for c in logs.config), dtype=np.int64, count=len(logs))
    pred = q(logs, logged)[np.arange(len(logs)), k]
    obs, fit, n = (np.bincount(k, w, len(logged)) for w in (logs.cost, pred, np.ones(len(logs))))
    if calibrate == "global":  # every configuration, logged or not, gets the one ratio
        ratio, default = {}, float(obs.sum() / fit.sum())
    else:
        m = fit / np.maximum(n, 1)
        ratio = {c: float((obs[j] + calibrate * m[j]) / (fit[j] + calibrate * m[j])) for j, c in enumerate(logged)}
        default = 1.0
    return lambda lg, cols: q(lg, cols) * np.array([ratio.get(c, default) for c in cols])[None, :]


def run_cell(scenario: str, oracle_name: str, seed: int, variants: list[tuple[str, dict]]) -> dict:
    oracle = select_oracle(oracle_name, "core")
    config = SimConfig(space="core", seed=seed)
    sim = Simulator(load_scenario(scenario, seed=seed, websites=sorted(oracle.websites)), oracle, config)
    runs = {name: sim.run(make_policy(name, **policy_params(name, seed, {})))
            for name in ("configanator",) + TARGETS}
    ev = types.SimpleNamespace(simulator=sim)
    logs = sim_logs(ev, runs["configanator"])
    truth, clusters = _Truth(ev), cohort_clusters(logs.client)
    ids = [c.id for c in sim.space.configs]
    rows, models = [], {}
    for label, kw in variants:
        started = time.perf_counter()
        qkw = q_kwargs(kw, sim)
        key = json.dumps({k: v for k, v in kw.items() if k not in NOT_Q}, sort_keys=True)
        if key not in models:  # variants that differ only in the weights' clip or the calibration share a model
            models[key] = fit_q_model(logs, ids, **qkw)
        q = calibrated(models[key], logs, kw.get("calibrate"))
        for target in TARGETS:
            table = DecisionTable(runs[target].final_table, validated=True)
            tp = target_probabilities(table, logs)
            est = table_value(table, logs, q=q, target=tp, cluster=clusters, clip=kw.get("clip"),
                              shrink=kw.get("dr_shrink", DR_SHRINK))
            true = truth.value(tp)
            rows.append({"variant": label, "target": target, "true_ms": true, "ess": est["snips"].ess,
                         **{f"{e}_rel_error": est[e].value / true - 1.0 for e in ("dr", "dm", "snips")},
                         "dr_covers": bool(est["dr"].low <= true <= est["dr"].high),
                         "fit_s": time.perf_counter() - started})
    return {"scenario": scenario, "oracle": oracle_name, "seed": seed, "pageloads": len(sim.world), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default=None, help="scenario:oracle,... (default: default:model; all ten with "
                                                  "--acceptance)")
    ap.add_argument("--seeds", default=None)
    ap.add_argument("--variant", action="append", default=None, metavar="NAME:JSON")
    ap.add_argument("--acceptance", action="store_true", help="the shipped estimator on seeds 0-4 (no variants)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.acceptance:
        if args.variant:
            raise SystemExit("bench/ope_dev.py: --acceptance evaluates the shipped estimator only (no --variant)")
        variants, seeds = [("shipped", {})], [int(s) for s in (args.seeds or "0,1,2,3,4").split(",")]
        cells = (args.cells or ",".join(CELLS)).split(",")
    else:
        variants = [parse_variant(v) for v in (args.variant or ["shipped:"])]
        seeds = [int(s) for s in (args.seeds or "100").split(",")]
        cells = (args.cells or "default:model").split(",")
        if min(seeds) < HELD_OUT:
            raise SystemExit(f"bench/ope_dev.py: development seeds must be >= {HELD_OUT}; got {seeds}")
    started, out = time.perf_counter(), []
    print("| cell | seed | variant | target | DR err | covers | DM err | SNIPS err | ESS |\n|---|---|---|---|---|---|---|---|---|")
    for cell in cells:
        scenario, _, oracle_name = cell.partition(":")
        for seed in seeds:
            run = run_cell(scenario, oracle_name or "model", seed, variants)
            out.append(run)
            for r in run["rows"]:
                print(f"| {cell} | {seed} | {r['variant']} | {r['target']} | {100 * r['dr_rel_error']:+.1f}% | "
                      f"{'yes' if r['dr_covers'] else 'no'} | {100 * r['dm_rel_error']:+.1f}% | "
                      f"{100 * r['snips_rel_error']:+.1f}% | {r['ess']:,.0f} |", flush=True)
    print("\n| variant | target | mean abs DR err | within 5% | DR covers | mean abs DM err |\n|---|---|---|---|---|---|")
    for label, _ in variants:
        for target in TARGETS:
            rs = [r for run in out for r in run["rows"] if r["variant"] == label and r["target"] == target]
            dr = np.array([abs(r["dr_rel_error"]) for r in rs])
            print(f"| {label} | {target} | {100 * dr.mean():.1f}% | {int(np.sum(dr <= 0.05))}/{len(rs)} | "
                  f"{sum(r['dr_covers'] for r in rs)}/{len(rs)} | "
                  f"{100 * np.mean([abs(r['dm_rel_error']) for r in rs]):.1f}% |")
    finish(args, started, out)


if __name__ == "__main__":
    main()
