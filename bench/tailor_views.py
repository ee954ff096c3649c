"""How much the server's view of a page load's network condition limits a policy (issue 12; docs/tailor.md, Next steps 7).

    PYTHONPATH=src .venv/bin/python bench/tailor_views.py --scenario default --oracle measured --seeds 181 [--sessions N]

A policy decides from what the server knows at the handshake: the connection's own RTT and the archive of earlier
telemetry (goodput, loss, RTT), which the simulator keeps per client /24 (:class:`tailor.grouping.archive.PrefixArchive`,
``ARCHIVE_ALPHA``). A /24's clients sit behind different paths, so its archive averages several true conditions. This
script asks what each view would be worth if the truth at the condition it points to were known: per page load, the
view's condition (snapped to the oracle's grid, with the page load's own bottleneck buffer, as `optimal-stale` does) and
the configuration fastest there, played at the page load's true condition. Views:

* the /24 archive with its archived RTT (what `optimal-stale` sees);
* the /24 archive with the handshake RTT (what `tailor`'s cells key on);
* an archive per client address, and one per session, with the handshake RTT (replayed from the same telemetry, with
  the same weight and latency): what a per-client history of the path would add.

Per view: the share of page loads it knows (an unseen key gets the registry default), how often its condition is the
true one, and that configuration's degraded share (> 5% slower than the default, noise-free), mean improvement over the
default and median gap to Optimal. A ceiling of each view, not a policy: it knows the truth at the viewed condition.
Seeds below 100 are refused (0-4 are the acceptance seeds).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tailor.eval.metrics import DEGRADED
from tailor.eval.run import _git_commit
from tailor.oracle.select import select_oracle
from tailor.policies import make_policy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator
from tailor.sim.simulator import replay_histories

HELD_OUT = 100


def one(scenario: str, oracle_name: str, seed: int, sessions: int | None) -> None:
    oracle = select_oracle(oracle_name, "core")
    scn = load_scenario(scenario, n_sessions=sessions, seed=seed, websites=sorted(oracle.websites))
    sim = Simulator(scn, oracle, SimConfig(seed=seed))
    sim.run(make_policy("default"))  # builds the world (conditions, telemetry, the /24 archive)
    world, grid, space = sim.world, oracle.grid, sim.space
    n, default = len(world), space.default_index
    _, _, _, buffer = grid.values(world.cell)
    clients = [world.sessions[s].client.client_id for s in world.session]
    latency = sim.config.update_latency_s
    views = {"/24 archive, archived RTT (`optimal-stale`'s)": (world.histories, False),
             "/24 archive, handshake RTT": (world.histories, True),
             "per client address, handshake RTT": (replay_histories(world, clients.__getitem__, latency), True),
             "per session, handshake RTT": (replay_histories(world, lambda i: int(world.session[i]), latency), True)}
    true = np.array([world.tensor.mode(int(c), int(s)) for c, s in zip(world.cell, world.site)])
    base, best = true[:, default], true.min(axis=1)
    print(f"\n## {scenario} / {oracle_name} / seed {seed}: {n:,} page loads")
    print("| view | known | its condition the true one | degraded | mean improvement | median gap to Optimal |")
    print("|---|---|---|---|---|---|")
    for name, (history, handshake) in views.items():
        choice, same, known = np.full(n, default), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        for i, h in enumerate(history):
            if h is None:
                continue
            rtt = world.handshake_rtt_ms[i] if handshake else h.rtt_ms
            cell = grid.cell(h.goodput_mbps, rtt, h.loss, buffer[i])
            known[i], same[i] = True, cell == world.cell[i]
            choice[i] = int(np.argmin(world.tensor.mode(cell, int(world.site[i]))))
        t = true[np.arange(n), choice]
        print(f"| {name} | {100 * known.mean():.1f}% | {100 * same[known].mean():.1f}% | "
              f"{100 * np.mean(t > (1.0 + DEGRADED) * base):.2f}% | {100 * np.mean(1.0 - t / base):+.2f}% | "
              f"{100 * np.median(t / best - 1.0):.2f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--oracle", default="measured")
    ap.add_argument("--seeds", type=int, nargs="+", default=[181])
    ap.add_argument("--sessions", type=int, default=None)
    args = ap.parse_args()
    if min(args.seeds) < HELD_OUT:
        raise SystemExit(f"bench/tailor_views.py: seeds must be >= {HELD_OUT} (0-4 are the acceptance seeds)")
    started = time.perf_counter()
    for seed in args.seeds:
        one(args.scenario, args.oracle, seed, args.sessions)
    print(f"\ncommit {_git_commit()}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
