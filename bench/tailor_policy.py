"""Tailor policy cost: decisions per second (online and table mode), model update for 1M records / 1K groups,
and the policy's memory.

Usage: PYTHONPATH=src .venv/bin/python bench/tailor_policy.py [--records 1000000] [--groups 1000] [--quick]
(--quick: 50,000 records, a CI smoke run). Prints a markdown table (figure | value | target) and the run's
metadata; ``--json FILE`` also writes the figures as one JSON object.

1. **Decisions per second.** The default scenario (``--sessions`` 500: ~5K page loads) is prepared once in a
   ``Simulator`` and run through the ``tailor`` policy (select / observe / plan, as ``tailor evaluate`` does, but
   with UpdateFreq ``--train-update-s`` 1800 s: the training run's cost is its plans), which trains it.
   Then, on that world's contexts: ``policy.select(ctx)`` (online mode) and ``tailor.table.decide`` on the
   run's final compiled table (table mode). CPU time, best of ``--repeats`` (the first online pass after a
   ``plan`` is also shown: it fills the per-cell prediction cache).
2. **Model update.** ``--records`` synthetic observations over ``--groups`` client /24s, each with its own device,
   RTT, goodput and loss (10% unknown to the archive); website (18) and hour vary per record; configurations
   drawn uniformly (a logging policy that explores everything); log page-load time = a context level + a fixed
   per-configuration effect scaled by the context (RTT, device, goodput) + N(0, 0.3^2) noise. They go through
   ``policy.observe_batch`` in batches of ``--batch`` records (default 50,000: the manager folds each cycle's new
   rows as one batch, and bench/manager_ingest.py's cycle brings 50,000; CPU time of the calls only, building the
   objects is not timed; the calibration policy also measures ``policy.observe`` one by one), then
   ``policy.plan(now, compile=False)`` (the refit, wall and CPU time: BLAS uses every core), then
   ``compile_table`` (the table for the archived prefixes). The target (issue): model update for 1M records
   and 1K groups <= 10 s.

   The refit materialises one row (page loads and sum of log times per configuration) per context cell touched
   since the last plan and one rank-one level correction per touched level cell; a throwaway calibration policy (``--calibrate`` rows) measures that transient memory per context cell
   (tracemalloc). If one plan over all
   records would exceed ``--mem-budget-gb`` (default: half of MemAvailable), the records are fed in chunks
   with a plan after each, as UpdateFreq would do: the table says how many plans the refit took. If feeding
   all records through ``observe`` would take longer than ``--max-feed-s`` (projected from the calibration),
   only ``--fallback-records`` are fed and the rest is extrapolated linearly: marked "extrapolated".
   BLAS threads: the library default unless ``--blas-threads``; on a busy machine the refit's multi-threaded
   Cholesky can be many times slower than single-threaded (the load is recorded with the results).
3. **Memory.** Peak RSS growth (``ru_maxrss`` after the update minus RSS before feeding) and the RSS the
   policy still holds after the update (garbage collected), plus the refit's transient bytes per row.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import time
import tracemalloc

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from tailor.eval.run import _git_commit
from tailor.grouping import PrefixArchive
from tailor.grouping.classes import DEVICES
from tailor.oracle.select import default_oracle
from tailor.policies import Context, Decision, Outcome, PolicyEnv, PrefixHistory, make_policy
from tailor.policies.base import parse_policy_params
from tailor.scenario import load_scenario
from tailor.scenario.model import ClientInfo
from tailor.sim import SimConfig, Simulator
from tailor.space import ConfigSpace
from tailor.table import DecisionTable, compile_table, decide

TARGET_UPDATE_S = 10.0
CHUNK = 50_000  # records per observe_batch call (--batch; objects are built outside the timed calls)
SPAN_S = 2 * 86400.0  # the synthetic records span two days (every hour of day)
LOSSES = (0.0, 0.002, 0.01, 0.03, 0.08)


# -- measurement helpers
def rss_mb() -> float:
    """Current resident set size of this process (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def mem_available_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 4.0


class Timer:
    """Wall and process CPU time of a block."""

    def __enter__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall0, time.process_time() - self.cpu0


# -- 1. decisions per second on the default scenario
def context_of(world, i: int) -> Context:
    """The Context the simulator's loop builds for page load ``i`` (tailor.sim.simulator._Loop.step)."""
    s = world.sessions[world.session[i]]
    return Context(float(world.time_s[i]), s.session_id, s.client, world.tensor.site_names[world.site[i]],
                   float(world.handshake_rtt_ms[i]), world.histories[i], int(world.load_index[i]),
                   int(world.cell[i]), int(world.stale_cell[i]))


PARAMS: dict = {}  # --policy-param: the policy's parameters for every policy this bench builds


def decision_rates(sessions: int | None, update_s: float, repeats: int) -> dict:
    oracle = default_oracle()
    scn = load_scenario("default", n_sessions=sessions, seed=0, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=0, update_freq_s=update_s))
    world = sim.world
    policy = make_policy("tailor", seed=0, **PARAMS)
    with Timer() as train:
        result = sim.run(policy)  # trains the policy; ends with plan(end) and its compiled table
    ctxs = [context_of(world, i) for i in range(len(world))]

    def online_pass() -> float:
        started = time.process_time()
        for ctx in ctxs:
            policy.select(ctx)
        return len(ctxs) / (time.process_time() - started)

    cold = online_pass()  # right after the final plan: per-cell predictions are computed on first use
    online = max(online_pass() for _ in range(repeats))

    table = result.final_table
    with Timer() as build:
        resolver = DecisionTable(table, validated=True)
    draws = np.random.default_rng(7919).integers(0, 2**64, len(ctxs), dtype=np.uint64).tolist()
    args = [(ctx.client.client_id, ctx.website, ctx.client.device, d) for ctx, d in zip(ctxs, draws)]

    def table_pass() -> float:
        started = time.process_time()
        for addr, sni, device, draw in args:
            decide(resolver, addr, sni, device, draw)
        return len(args) / (time.process_time() - started)

    table_rate = max(table_pass() for _ in range(repeats))
    arms = np.unique(result.records["arm"], return_counts=True)
    return {"pageloads": len(world), "train_wall_s": train.wall, "train_plans": int(world.time_s[-1] // update_s) + 1,
            "online_dps": online, "online_cold_dps": cold,
            "table_dps": table_rate, "table_groups": len(table["groups"]), "table_rules": len(table["rules"]),
            "table_build_s": build.wall, "train_arms": {str(a): int(n) for a, n in zip(*arms)}}


# -- 2./3. model update on synthetic records
class Synthetic:
    """``groups`` client /24s with fixed profiles; ``n`` records in time order (module docstring)."""

    def __init__(self, n: int, groups: int, websites: list[str], n_configs: int, default: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.n, self.websites = n, websites
        g = np.arange(groups)
        self.rtt = np.exp(rng.uniform(math.log(10.0), math.log(700.0), groups))
        self.goodput = np.exp(rng.uniform(math.log(0.2), math.log(200.0), groups))
        self.loss = rng.choice(LOSSES, groups)
        self.device = [DEVICES[k] for k in rng.integers(len(DEVICES), size=groups)]
        self.known = rng.random(groups) >= 0.1  # 10% of the prefixes are unknown to the archive
        self.prefix = [f"10.{k // 256}.{k % 256}.0/24" for k in g]
        self.clients = [ClientInfo(f"10.{k // 256}.{k % 256}.7", self.prefix[k], 64512 + k % 100, "bench",
                                   self.device[k], "bench") for k in g]
        self.histories = [PrefixHistory(float(self.goodput[k] * 0.85), float(self.loss[k]), float(self.rtt[k]), 50,
                                        60.0) if self.known[k] else None for k in g]
        self.sessions = [f"bench-{k}" for k in g]
        site_kb = rng.uniform(200.0, 3000.0, len(websites))
        # the truth: per-configuration effect (default 0), scaled up on long RTT, android and slow links
        effect = rng.normal(-0.03, 0.12, n_configs)
        effect[default] = 0.0
        scale = 0.5 + 0.5 * (self.rtt > 100) + 0.3 * np.array([d == "android" for d in self.device]) \
            + 0.3 * (self.goodput < 2.0)
        # the records
        self.group = rng.integers(groups, size=n)
        self.site = rng.integers(len(websites), size=n)
        self.time = np.linspace(0.0, SPAN_S, n, endpoint=False)
        self.hs_rtt = self.rtt[self.group] * rng.uniform(1.0, 1.1, n)
        self.config = rng.integers(n_configs, size=n)
        level = 150.0 + 6.0 * self.rtt[self.group] + site_kb[self.site] * 8.0 / self.goodput[self.group]
        self.completion = level * np.exp(scale[self.group] * effect[self.config] + rng.normal(0.0, 0.3, n))
        self.bytes = (site_kb * 1024).astype(int)
        self.p = 1.0 / n_configs

    def archive(self) -> PrefixArchive:
        archive = PrefixArchive(0.3)
        for k, h in enumerate(self.histories):
            if h is not None:
                archive.update(self.prefix[k], 0.0, h.goodput_mbps, h.loss, h.rtt_ms)
        return archive

    def batch(self, lo: int, hi: int) -> list[tuple]:
        out = []
        for i in range(lo, hi):
            g = int(self.group[i])
            ctx = Context(float(self.time[i]), self.sessions[g], self.clients[g], self.websites[self.site[i]],
                          float(self.hs_rtt[i]), self.histories[g], i)
            out.append((ctx, Decision(int(self.config[i]), self.p, "bench", "explore"),
                        Outcome(float(self.completion[i]), float(self.goodput[g]), float(self.hs_rtt[i]),
                                float(self.loss[g]), int(self.bytes[self.site[i]]))))
        return out

    def now(self, i: int) -> float:
        return float(self.time[i - 1]) + 1.0 if i else 0.0


def fresh_policy(data: Synthetic, space: ConfigSpace, archive: PrefixArchive):
    return make_policy("tailor", seed=0, **PARAMS).reset(space, PolicyEnv(websites=tuple(data.websites),
                                                                          archive=archive))


def feed(policy, data: Synthetic, lo: int, hi: int, batch: bool = True) -> float:
    """Records [lo, hi) in batches of CHUNK through ``observe_batch`` (the manager's ingest) or, with
    ``batch=False``, one by one through ``observe`` (the simulator's online loop); returns the CPU seconds spent
    inside those calls."""
    spent = 0.0
    for a in range(lo, hi, CHUNK):
        items = data.batch(a, min(a + CHUNK, hi))
        started = time.process_time()
        if batch:
            policy.observe_batch(items)
        else:
            for ctx, d, out in items:
                policy.observe(ctx, d, out)
        spent += time.process_time() - started
    return spent


def calibrate(data: Synthetic, space: ConfigSpace, archive: PrefixArchive, rows: int) -> dict:
    """Observe rate and the refit's transient memory per row, on a throwaway policy."""
    one = fresh_policy(data, space, archive)
    one_cpu = feed(one, data, 0, rows, batch=False)  # one by one, for the simulator's rate
    del one
    policy = fresh_policy(data, space, archive)
    cpu = feed(policy, data, 0, rows)
    cells = len(policy._rows)  # the plan's transient memory grows with the context cells touched, not the records
    tracemalloc.start()
    with Timer() as t:
        policy.plan(data.now(rows), compile=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del policy
    gc.collect()
    return {"rows": rows, "observe_per_s": rows / cpu, "observe_one_per_s": rows / one_cpu,
            "plan_bytes_per_cell": peak / cells, "cells": cells, "plan_wall_s": t.wall}


def model_update(n: int, groups: int, calib_rows: int, mem_budget_gb: float, max_feed_s: float,
                 fallback_rows: int) -> dict:
    space = ConfigSpace.named("core")
    websites = sorted(default_oracle().websites)
    data = Synthetic(n, groups, websites, len(space), space.default_index)
    archive = data.archive()
    cal = calibrate(data, space, archive, min(calib_rows, n))
    projected = n / cal["observe_per_s"]
    fed = n if projected <= max_feed_s else min(n, fallback_rows)
    # context cells the records touch, at most: one per client /24 x website x hour bin (/24s sharing bins share cells)
    cells = len(np.unique((data.group * len(websites) + data.site) * 4 + (data.time // 21600).astype(int) % 4))
    single = cal["plan_bytes_per_cell"] * cells
    per_plan = fed if single <= mem_budget_gb * 2**30 else max(int(fed * mem_budget_gb * 2**30 / single), CHUNK)
    bounds = list(range(0, fed, per_plan)) + [fed]

    gc.collect()
    rss0 = rss_mb()
    policy = fresh_policy(data, space, archive)
    observe_cpu, plans = 0.0, []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        observe_cpu += feed(policy, data, lo, hi)
        with Timer() as t:
            policy.plan(data.now(hi), compile=False)
        plans.append((hi - lo, t.wall, t.cpu))
    now = data.now(fed)
    with Timer() as empty:  # the refit's fixed cost: factorisation, covariance, misfit, no new rows
        policy.plan(now, compile=False)
    with Timer() as comp:
        table = compile_table(policy, now, 1, archive)
    peak_rss = maxrss_mb()
    del table
    gc.collect()
    held = rss_mb() - rss0

    # distinct learner groups the records span (one context per client group x website x hour bin)
    ids = set()
    for g, s, hour in {(int(g), int(s), int(t // 21600) % 4) for g, s, t in zip(data.group, data.site, data.time)}:
        ids.add(policy.group_of(Context(hour * 21600.0 + 1.0, data.sessions[g], data.clients[g], websites[s],
                                        float(data.rtt[g]), data.histories[g])))
    fixed = empty.wall
    per_row = max(sum(w for _, w, _ in plans) - len(plans) * fixed, 0.0) / fed  # refit wall seconds per row

    def refit_at(rows: int) -> float:  # linear in rows, plus the fixed cost of each plan the memory budget needs
        return per_row * rows + math.ceil(rows / per_plan) * fixed

    return {"records": n, "fed": fed, "refit_per_row_us": per_row * 1e6,
            "refit_1m_wall_s": refit_at(1_000_000), "observe_1m_s": 1_000_000 * observe_cpu / fed,
            "groups": groups, "learner_groups": len(ids), "calibration": cal,
            "observe_per_s": fed / observe_cpu, "observe_s": n * observe_cpu / fed,
            "plans": len(plans), "rows_per_plan": max(r for r, _, _ in plans),
            "refit_wall_s": sum(w for _, w, _ in plans) if fed == n else refit_at(n),
            "refit_cpu_s": sum(c for _, _, c in plans) * n / fed,
            "refit_fixed_wall_s": fixed, "compile_wall_s": comp.wall, "peak_rss_growth_mb": peak_rss - rss0,
            "held_rss_mb": held, "single_plan_gb": single / 2**30, "cells": cells,
            "projected_observe_s": projected, "mem_budget_gb": mem_budget_gb, "batch": CHUNK}


# -- report
def fmt(x: float, digits: int = 3) -> str:
    return f"{x:,.{digits}g}" if abs(x) < 10 ** digits else f"{x:,.0f}"


def table_rows(dec: dict, upd: dict) -> list[tuple[str, str, str]]:
    n, fed = upd["records"], upd["fed"]
    extra = "" if fed == n else f" (extrapolated from {fed:,})"
    update_s = upd["observe_s"] + upd["refit_wall_s"]
    dominant = "observe" if upd["observe_s"] >= upd["refit_wall_s"] else "refit (plan)"
    plans = upd["plans"]
    refit_how = ("one plan" if plans == 1 else
                 f"{plans} plans of <= {upd['rows_per_plan']:,} rows (one plan would need "
                 f"~{upd['single_plan_gb']:.1f} GB > --mem-budget-gb {upd['mem_budget_gb']:.1f})")
    rows = [
        ("online decisions/s (select, warm; CPU)", f"{fmt(dec['online_dps'])}", ""),
        ("online decisions/s, first pass after plan (cold cache)", f"{fmt(dec['online_cold_dps'])}", ""),
        ("table decisions/s (tailor.table.decide; CPU)", f"{fmt(dec['table_dps'])}", ""),
        ("table size (groups / rules)", f"{dec['table_groups']:,} / {dec['table_rules']:,}", ""),
        (f"training run (default scenario, {dec['pageloads']:,} page loads, {dec['train_plans']} plans; wall)",
         f"{dec['train_wall_s']:.1f} s", ""),
        ("records / client groups / learner groups (group_of)",
         f"{n:,} / {upd['groups']:,} / {upd['learner_groups']:,}", ""),
        (f"**model update, {n:,} records: observe + refit (wall)**{extra}", f"**{update_s:.1f} s**",
         f"<= {TARGET_UPDATE_S:g} s"),
        ("dominant part", dominant, ""),
    ]
    if n != 1_000_000:
        rows += [("model update extrapolated to 1,000,000 records (observe linear; refit linear + fixed cost per plan)",
                  f"{upd['observe_1m_s'] + upd['refit_1m_wall_s']:.0f} s (observe {upd['observe_1m_s']:.0f} s, "
                  f"refit {upd['refit_1m_wall_s']:.0f} s)", f"<= {TARGET_UPDATE_S:g} s")]
    rows += [
        (f"observe throughput, batches of {CHUNK:,} (observe_batch: the manager's ingest; CPU){extra}",
         f"{fmt(upd['observe_per_s'])} records/s = {upd['observe_s']:.1f} s", ""),
        (f"observe throughput, one by one (observe: the simulator's loop; CPU, {upd['calibration']['rows']:,} records)",
         f"{fmt(upd['calibration']['observe_one_per_s'])} records/s", ""),
        (f"refit: plan(compile=False), {refit_how} (wall / CPU){extra}",
         f"{upd['refit_wall_s']:.1f} s / {upd['refit_cpu_s']:.1f} s", f"<= {TARGET_UPDATE_S:g} s"),
        ("refit per row (wall, fixed cost removed)", f"{upd['refit_per_row_us']:.0f} us", ""),
        ("refit fixed cost: plan with no new rows (wall)", f"{upd['refit_fixed_wall_s']:.2f} s", ""),
        (f"compile_table ({upd['groups']:,} client /24s, 10% unknown; wall)", f"{upd['compile_wall_s']:.2f} s", ""),
        ("refit transient memory (tracemalloc, calibration plan)",
         f"{upd['calibration']['plan_bytes_per_cell'] / 1024:.1f} KB per context cell (one plan on all "
         f"{upd['cells']:,} cells: ~{upd['single_plan_gb']:.1f} GB)", ""),
        (f"peak RSS growth, feed {fed:,} + refit (ru_maxrss)", f"{upd['peak_rss_growth_mb']:,.0f} MB", ""),
        (f"RSS held by the policy after {fed:,} records", f"{upd['held_rss_mb']:,.0f} MB", ""),
    ]
    return rows


def main() -> None:
    global CHUNK
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="50,000 records (CI smoke)")
    ap.add_argument("--sessions", type=int, default=500, help="default-scenario sessions for the decision rates")
    ap.add_argument("--train-update-s", type=float, default=1800.0,
                    help="UpdateFreq of the training run (the plans, not the page loads, dominate its cost)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calibrate", type=int, default=10_000, help="rows of the calibration policy")
    ap.add_argument("--mem-budget-gb", type=float, default=None, help="transient memory one plan may use")
    ap.add_argument("--max-feed-s", type=float, default=180.0)
    ap.add_argument("--fallback-records", type=int, default=200_000)
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="limit BLAS/OpenMP threads (threadpoolctl); default: the libraries' own")
    ap.add_argument("--batch", type=int, default=CHUNK,
                    help="records per observe_batch call (the manager: one cycle's new rows)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter of the tailor policy (repeatable), e.g. budget_unit=time")
    args = ap.parse_args()
    PARAMS.update(parse_policy_params(args.policy_param, "bench/tailor_policy.py"))
    CHUNK = args.batch
    limits = threadpool_limits(args.blas_threads) if args.blas_threads else None  # noqa: F841 (held for the run)
    n = 50_000 if args.quick else args.records
    budget = args.mem_budget_gb if args.mem_budget_gb is not None else mem_available_gb() / 2
    load0 = os.getloadavg()
    started = time.perf_counter()
    upd = model_update(n, args.groups, args.calibrate, budget, args.max_feed_s, args.fallback_records)
    dec = decision_rates(args.sessions, args.train_update_s, args.repeats)
    meta = {"commit": _git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "python": platform.python_version(),
            "numpy": np.__version__, "cpus": os.cpu_count(), "platform": platform.platform(),
            "load_start": [round(x, 2) for x in load0], "load_end": [round(x, 2) for x in os.getloadavg()],
            "blas": sorted({f"{i['internal_api']} x{i['num_threads']}" for i in threadpool_info()}),
            "mem_budget_gb": round(budget, 1), "total_wall_s": round(time.perf_counter() - started, 1),
            "policy_params": dict(PARAMS)}
    print("| figure | value | target |\n|---|---|---|")
    for row in table_rows(dec, upd):
        print("| " + " | ".join(row) + " |")
    print(f"\ncommit {meta['commit']}, {meta['date']}, Python {meta['python']}, numpy {meta['numpy']}, "
          f"{meta['cpus']} CPUs, BLAS {', '.join(meta['blas'])}, load {meta['load_start']} -> {meta['load_end']}, "
          f"{meta['platform']}, total {meta['total_wall_s']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "tailor_policy", "decisions": dec, "update": upd, "meta": meta}, f, indent=1)


if __name__ == "__main__":
    main()
