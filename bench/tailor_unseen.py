"""`tailor` on client populations built from throughput series that no built-in scenario, tuning or acceptance
run has used: one look, outside the tuning set (issue 12: "Tailor will also be evaluated on client populations and
links that are not in this repository").

Usage::

    PYTHONPATH=src .venv/bin/python bench/tailor_unseen.py --oracle model --seeds 0,1,2 \\
        --out bench/results/tailor_unseen_model.json          # and --oracle measured ... _measured.json
    PYTHONPATH=src .venv/bin/python bench/tailor_acceptance.py --merge bench/results/tailor_unseen_model.json \\
        bench/results/tailor_unseen_measured.json --out bench/results/tailor_unseen.json
    PYTHONPATH=src .venv/bin/python bench/tailor_acceptance.py --report-only --out bench/results/tailor_unseen.json \\
        --cells unseen-throughput:model,unseen-throughput:measured --seeds 0,1,2

The population (``unseen-throughput``): four trace sets of ``data/traces/unseen/`` (a seeded sample of 24 files
each from the Pensieve-format throughput series, data/traces/unseen/README.md), a quarter of the clients each, every
session's bandwidth from one of its set's traces (a random start, looped); round-trip time, loss and buffer are
stated assumptions per set (``SETS`` below, two RTT points each), perturbed per /24, client and segment as every
generated scenario is (docs/scenarios.md). Sessions, page loads and websites are the generator's, as for the
built-in scenarios. The figures of the traces (mean throughput per file, p10 / p50 / p90 over each whole upstream
set): Puffer 0.64 / 1.91 / 3.06 Mbit/s, Oboe 0.97 / 2.98 / 4.62, FCC web browsing 0.53 / 1.19 / 2.53, Norway HSDPA
0.81 / 1.37 / 2.41: low-rate links with their own variation, which no built-in family has.

Each run is what ``tailor evaluate --oracle O --seed K`` computes on that population (every default policy, space
``core``, online mode), stored as ``bench/tailor_acceptance.py`` stores its runs (resumable, rewritten atomically
after each), so its report and checks apply unchanged. Nothing here chooses anything.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tailor_acceptance import run_world, store_runs  # bench/ is the script's directory, first on sys.path

from tailor.oracle.select import select_oracle
from tailor.scenario.facts import Condition
from tailor.scenario.families import CELLULAR_BUFFER_BDP, DEVICES_HOME, DEVICES_MOBILE, Tier
from tailor.scenario.generate import TRACE_DIR, generate

NAME = "unseen-throughput"
SOURCE = "data/traces/unseen/README.md; RTT, loss and buffer: ASSUMPTIONS of bench/tailor_unseen.py"
# ASSUMPTIONS [M], none fitted to anything: (set, access, regions, devices, buffer in BDP, loss, RTT points in ms).
# Puffer viewers and FCC MBA panellists are US home broadband (RTT to a CDN edge 20-40 ms near, 60-90 ms to a
# farther PoP), Oboe's sessions a mix of home and mobile video clients, the Norway traces 3G/HSDPA on buses and
# trams (RTT 100-200 ms, loss 0.5%, cellular buffers as the built-in cellular family's).
SETS = (
    ("puffer", "cable", ("us-east", "us-west"), DEVICES_HOME, 1.0, 0.001, (25.0, 80.0)),
    ("oboe", "wifi", ("us-central", "eu-west"), DEVICES_HOME, 2.0, 0.002, (40.0, 120.0)),
    ("fcc-web", "dsl", ("us-south", "us-central"), DEVICES_HOME, 1.0, 0.001, (30.0, 60.0)),
    ("hsdpa", "3g", ("eu-north",), DEVICES_MOBILE, CELLULAR_BUFFER_BDP, 0.005, (100.0, 200.0)),
)


def tiers() -> tuple[tuple[str, Tier], ...]:
    """The population: per set two tiers (near / far RTT) of equal weight, every session trace-driven."""
    out = []
    for name, access, regions, devices, buffer, loss, rtts in SETS:
        files = tuple(f"unseen/{name}/{f}" for f in sorted(os.listdir(TRACE_DIR / "unseen" / name)))
        for rtt in rtts:
            c = Condition(1.0, rtt, loss, SOURCE)  # the bandwidth comes from the traces (trace_share 1)
            out.append((name, Tier(f"{name}-{rtt:g}ms", access, 1.0 / (2 * len(SETS)), c, c, buffer, regions, devices,
                                   traces=files, trace_share=1.0)))
    return tuple(out)


def run_one(oracle_name: str, seed: int, sessions: int) -> dict:
    oracle = select_oracle(oracle_name, "core")
    world = generate(NAME, sessions, seed=seed, websites=sorted(oracle.websites), tiers=tiers())
    run = run_world(world, oracle, seed)
    run["meta"]["sessions"] = sessions
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oracle", choices=("model", "measured"), default="model")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sessions", type=int, default=1500)
    ap.add_argument("--out", type=Path, required=True, help="one file per process (merge them with "
                    "bench/tailor_acceptance.py --merge)")
    a = ap.parse_args()
    store_runs(a.out, NAME, a.oracle, [int(s) for s in a.seeds.split(",")], lambda seed: run_one(a.oracle, seed, a.sessions))


if __name__ == "__main__":
    main()
