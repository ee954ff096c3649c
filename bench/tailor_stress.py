"""`tailor` on client populations at the edges of what the repository's scenarios hold: one look, outside the tuning
set (issue 12: "Tailor will also be evaluated on client populations and links that are not in this repository").

Usage::

    PYTHONPATH=src .venv/bin/python bench/tailor_stress.py --population extremes --oracle model --seeds 0,1 \\
        --out bench/results/tailor_stress_extremes_model.json        # ... one process per file
    PYTHONPATH=src .venv/bin/python bench/tailor_acceptance.py --merge F1 F2 ... --out bench/results/tailor_stress.json
    PYTHONPATH=src .venv/bin/python bench/tailor_acceptance.py --report-only --out bench/results/tailor_stress.json \\
        --cells stress-extremes:model,stress-extremes:measured,stress-one-tier:model,stress-one-tier:measured \\
        --seeds 0,1

The populations (``POPULATIONS``; every number an ASSUMPTION of this script, chosen to lie at or beyond the ends of
the built-in families, not fitted to anything):

* ``stress-extremes``: four tiers of equal weight, each a link no built-in family has: a data-centre-near fibre
  client (1 Gbit/s, 3 ms, no loss, 1 BDP buffer), a heavily lossy Wi-Fi path (5 Mbit/s, 80 ms, 8% random loss), a
  2G client behind a satellite backhaul (30 kbit/s, 1.5 s, 2% loss, 4 BDP) and a bufferbloated cable line
  (20 Mbit/s, 40 ms, 50 BDP);
* ``stress-one-tier``: one homogeneous LTE population (12 Mbit/s, 60 ms, 0.3% loss, 5 BDP): a single client group,
  where a learner has nothing to tell apart.

Perturbed per /24, client and segment as every generated scenario is (docs/scenarios.md); sessions, page loads and
websites are the generator's. Each run is what ``tailor evaluate --oracle O --seed K`` computes on that population
(every default policy, space ``core``, online mode), stored as ``bench/tailor_acceptance.py`` stores its runs
(resumable, rewritten atomically after each), so its report and checks apply unchanged. Nothing here chooses
anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tailor_acceptance import run_world, store_runs  # bench/ is the script's directory, first on sys.path

from tailor.oracle.select import select_oracle
from tailor.scenario.facts import Condition
from tailor.scenario.families import DEVICES_HOME, DEVICES_MOBILE, Tier
from tailor.scenario.generate import generate

SOURCE = "ASSUMPTIONS of bench/tailor_stress.py (links at or beyond the ends of the built-in families)"
REGIONS = ("us-east", "eu-west")
# (tier, access, bandwidth Mbit/s, RTT ms, loss, buffer in BDP, devices); equal weights within a population
POPULATIONS = {
    "stress-extremes": (
        ("dc-fibre", "fiber", 1000.0, 3.0, 0.0, 1.0, DEVICES_HOME),
        ("lossy-wifi", "wifi", 5.0, 80.0, 0.08, 1.0, DEVICES_HOME),
        ("sat-2g", "2g", 0.03, 1500.0, 0.02, 4.0, DEVICES_MOBILE),
        ("bloat-cable", "cable", 20.0, 40.0, 0.0, 50.0, DEVICES_HOME),
    ),
    "stress-one-tier": (
        ("lte-mid", "lte", 12.0, 60.0, 0.003, 5.0, DEVICES_MOBILE),
    ),
}


def tiers(population: str) -> tuple[tuple[str, Tier], ...]:
    """A population's (family, tier) pairs: one family per tier, equal weights, the same condition off-peak and at
    peak."""
    rows = POPULATIONS[population]
    out = []
    for name, access, bw, rtt, loss, buffer, devices in rows:
        c = Condition(bw, rtt, loss, SOURCE)
        out.append((name, Tier(name, access, 1.0 / len(rows), c, c, buffer, REGIONS, devices)))
    return tuple(out)


def run_one(population: str, oracle_name: str, seed: int, sessions: int) -> dict:
    oracle = select_oracle(oracle_name, "core")
    world = generate(population, sessions, seed=seed, websites=sorted(oracle.websites), tiers=tiers(population))
    run = run_world(world, oracle, seed)
    run["meta"]["sessions"] = sessions
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--population", choices=sorted(POPULATIONS), required=True)
    ap.add_argument("--oracle", choices=("model", "measured"), default="model")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--sessions", type=int, default=1500)
    ap.add_argument("--out", type=Path, required=True, help="one file per process (merge them with "
                    "bench/tailor_acceptance.py --merge)")
    a = ap.parse_args()
    store_runs(a.out, a.population, a.oracle, [int(s) for s in a.seeds.split(",")], lambda seed: run_one(a.population, a.oracle, seed, a.sessions))


if __name__ == "__main__":
    main()
