"""Size and cost of the `tailor` policy's saved state (what the manager pickles every cycle and a bus shard
hands over at a takeover).

Usage::

    PYTHONPATH=src .venv/bin/python bench/state_size.py [--scenario default] [--sessions 3000] [--seed 901]
        [--oracle model] [--json FILE]

Runs the policy on one simulated world (``Simulator``, as ``tailor evaluate`` does; a held-out seed, >= 100), then
pickles it as the manager does and prints: the pickle's size and the time to write and to read it, the ten largest
parts of the state, the same for the state pickled whole (every attribute as it is held in memory, as before
2026-11-30), and whether the restored state is exactly the saved one (every array equal, the same decisions on
200 fresh contexts). A fresh policy as the manager starts one (nothing learned) is measured the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time

import numpy as np

from tailor.eval.run import _git_commit
from tailor.grouping import PrefixArchive
from tailor.oracle.select import select_oracle
from tailor.policies import PolicyEnv, make_policy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator
from tailor.sim.simulator import ARCHIVE_ALPHA


def _whole(pol) -> tuple[int, float, float]:
    """The state pickled as held in memory (no packing, the covariance included, as before 2026-11-30): bytes and
    the seconds to write and to read it."""
    t = time.perf_counter()
    blob = pickle.dumps(dict(pol.__dict__), protocol=pickle.HIGHEST_PROTOCOL)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    pickle.loads(blob)
    return len(blob), write_s, time.perf_counter() - t


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.random.Generator):
        return isinstance(b, np.random.Generator) and a.bit_generator.state == b.bit_generator.state
    if hasattr(a, "used") and hasattr(a, "keys_"):  # CellRows
        return a.keys_ == b.keys_ and np.array_equal(a.used(), b.used())
    if hasattr(a, "__dict__") and not isinstance(a, type):
        return type(a) is type(b)  # the space, the environment: compared by their use below
    return a == b


def measure(pol, contexts) -> dict:
    t = time.perf_counter()
    blob = pickle.dumps(pol, protocol=pickle.HIGHEST_PROTOCOL)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    back = pickle.loads(blob)
    read_s = time.perf_counter() - t
    parts = {k: len(pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)) for k, v in pol.__getstate__().items()}
    unequal = [k for k, v in pol.__dict__.items() if not _equal(v, back.__dict__.get(k))]
    same = [back.select(c).config for c in contexts] == [pol.select(c).config for c in contexts]
    whole, whole_write_s, whole_read_s = _whole(pol)
    return {"bytes": len(blob), "write_s": round(write_s, 3), "read_s": round(read_s, 3), "whole_bytes": whole,
            "whole_write_s": round(whole_write_s, 3), "whole_read_s": round(whole_read_s, 3),
            "largest": sorted(parts.items(), key=lambda kv: -kv[1])[:10], "unequal": unequal, "same_decisions": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--oracle", default="model")
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=901)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.seed < 100:
        ap.error("--seed: the acceptance seeds (0-99) are not used for development measurements")
    oracle = select_oracle(args.oracle, "core")
    scn = load_scenario(args.scenario, n_sessions=args.sessions, seed=args.seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=args.seed))
    # fresh: as the manager starts one (no websites listed, website_slots entries learned from telemetry)
    fresh = make_policy("tailor", seed=args.seed, holdback=0.0).reset(
        sim.space, PolicyEnv(archive=PrefixArchive(ARCHIVE_ALPHA), update_period_s=300.0, cohort_salt="bench"))
    pol = make_policy("tailor", seed=args.seed)
    seen = []
    select = pol.select
    pol.select = lambda ctx: (seen.append(ctx), select(ctx))[1]  # the run's contexts, for the comparison below
    t = time.perf_counter()
    sim.run(pol)
    run_s = time.perf_counter() - t
    del pol.select
    contexts = seen[-200:]  # the last period's clients, asked again of the saved and the restored state
    out = {"scenario": args.scenario, "oracle": args.oracle, "sessions": args.sessions, "seed": args.seed,
           "commit": _git_commit(), "load": os.getloadavg()[0], "run_s": round(run_s, 1), "learned": measure(pol, contexts),
           "fresh": measure(fresh, contexts)}
    for name in ("learned", "fresh"):
        r = out[name]
        print(f"{name}: {r['bytes'] / 1e6:.1f} MB pickled, write {r['write_s']:.2f} s, read {r['read_s']:.2f} s "
              f"(whole: {r['whole_bytes'] / 1e6:.1f} MB, {r['whole_write_s']:.2f} s, {r['whole_read_s']:.2f} s); "
              f"unequal after a round trip: {r['unequal'] or 'none'}; "
              f"same decisions on {len(contexts)} contexts: {r['same_decisions']}")
        print("  largest parts: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in r["largest"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
