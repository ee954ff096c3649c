"""A Config-Snob trial on held-out seeds: the default parameters against one variant, paired per world.

    PYTHONPATH=src .venv/bin/python bench/configsnob_trial.py --variant design=batch \\
        --worlds broadband-us:151-157,default:127-129 --jobs 2 --json bench/results/configsnob_design_batch.json

Each world runs ``./tailor evaluate --scenario S --seed K --policies default,config-snob,optimal --json --no-report``
without and with ``--policy-param KEY=VALUE``; the figures are deterministic. The JSON holds, per world, Config-Snob's
figures under ``base`` and under the variant, and Optimal's; the summary prints each world's degraded share and the
paired differences (variant minus base, points) with 95% t intervals. ``--pool FILE`` prints the summary of a file
again. A trial's rule (seeds never used before, what decides) is written in docs/configsnob.md before its runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tailor_dev import paired  # the same paired 95% t interval as the tailor trials

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("p50", "p95", "mean_improvement", "degraded_share", "median_gap_to_optimal", "pageloads")


def worlds(spec: str) -> list[tuple[str, int]]:
    """``broadband-us:151-157,default:127-129`` -> [(scenario, seed), ...]."""
    out = []
    for part in spec.split(","):
        scenario, seeds = part.split(":")
        lo, _, hi = seeds.partition("-")
        out += [(scenario, k) for k in range(int(lo), int(hi or lo) + 1)]
    return out


def evaluate(scenario: str, seed: int, param: str | None) -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="configsnob-trial-") as out:  # its own --out: base and variant run at once
        cmd = [sys.executable, "-m", "tailor", "evaluate", "--scenario", scenario, "--seed", str(seed), "--policies",
               "default,config-snob,optimal", "--json", "--no-report", "--out", out] + (
                   ["--policy-param", param] if param else [])
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=True)
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return {r["policy"]: {k: r[k] for k in FIELDS} for r in rows}


def summary(doc: dict) -> None:
    name = doc.get("variant") or next(k for k in doc["runs"][0] if k not in ("scenario", "seed", "base", "optimal"))
    print(f"{doc['what']}\ncommit {doc['commit']}, {len(doc['runs'])} worlds")
    for r in doc["runs"]:
        print(f"  {r['scenario']} {r['seed']}: degraded {100 * r['base']['degraded_share']:.2f} -> "
              f"{100 * r[name]['degraded_share']:.2f}%, mean {100 * r['base']['mean_improvement']:+.2f} -> "
              f"{100 * r[name]['mean_improvement']:+.2f}%")
    for field in ("degraded_share", "mean_improvement", "p50", "p95", "median_gap_to_optimal"):
        diffs = [100 * (r[name][field] - r["base"][field]) for r in doc["runs"]]
        print(f"  {field}: {paired(diffs)} points ({name} minus base, paired over {len(diffs)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", help="KEY=VALUE passed as --policy-param to the variant's runs")
    ap.add_argument("--worlds", help="scenario:first-last,... (held-out seeds)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="where the per-world figures go (written as worlds finish)")
    ap.add_argument("--pool", help="print the summary of a trial's JSON and exit")
    args = ap.parse_args()
    if args.pool:
        summary(json.loads(Path(args.pool).read_text()))
        return
    if not (args.variant and args.worlds and args.json):
        ap.error("--variant, --worlds and --json are needed (or --pool FILE)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    doc = {"what": f"config-snob {args.variant} trial (docs/configsnob.md): ./tailor evaluate --scenario S --seed K "
                   f"--policies default,config-snob,optimal --json --no-report [--policy-param {args.variant}]",
           "commit": commit, "variant": args.variant, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "runs": []}
    out = Path(args.json)

    def one(world: tuple[str, int]) -> dict:
        scenario, seed = world
        base, var = evaluate(scenario, seed, None), evaluate(scenario, seed, args.variant)
        run = {"scenario": scenario, "seed": seed, "base": base["config-snob"], "optimal": base["optimal"],
               args.variant: var["config-snob"]}
        print(f"{scenario} {seed}: degraded {100 * run['base']['degraded_share']:.2f} -> "
              f"{100 * run[args.variant]['degraded_share']:.2f}%", flush=True)
        return run

    with ThreadPoolExecutor(args.jobs) as pool:
        for run in pool.map(one, worlds(args.worlds)):
            doc["runs"].append(run)
            out.write_text(json.dumps(doc, indent=1) + "\n")
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out.write_text(json.dumps(doc, indent=1) + "\n")
    summary(doc)


if __name__ == "__main__":
    main()
