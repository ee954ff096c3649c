"""A synthetic edge for tests, benchmarks and dry runs: applies a decision table with the one decision
rule (spec/decision.md, ``tailor.table.decide``) and reports spec telemetry records whose completion
times depend on the configuration through a known factor.

It is a stand-in for the real edge in the closed loop until the demo runs agent and edge in
namespaces; it never replaces the simulator's oracle for evaluating policies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tailor.table import DecisionTable, decide

SCHEMA = "tailor.telemetry/v1"


@dataclass
class SyntheticEdge:
    """Clients in ``prefixes`` (each a /24 with a base page-load time) visiting ``sites``.

    ``factor(prefix, config_id)`` multiplies the base time (1.0 = as fast as the default); noise is
    log-normal with ``sigma``. ``holdback_group`` stamps holdback records with their group, as the spec
    says edges do; without it they carry none (as from an older edge) and the manager resolves it itself.
    """

    prefixes: list[str]
    sites: list[str] = field(default_factory=lambda: ["shop.example"])
    base_ms: dict[str, float] = field(default_factory=dict)
    factor: object = None  # callable (prefix, config_id) -> float
    sigma: float = 0.3
    seed: int = 0
    devices: tuple[str, ...] = ("desktop", "android", "ios")
    holdback_group: bool = False

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)
        self.resolver: DecisionTable | None = None
        self.table: dict | None = None

    def apply(self, table: dict) -> None:
        self.table, self.resolver = table, DecisionTable(table)

    def records(self, n: int, t0: float, dt: float = 0.01) -> list[dict]:
        rng, table = self.rng, self.table
        out = []
        for i in range(n):
            prefix = self.prefixes[int(rng.integers(len(self.prefixes)))]
            addr = prefix.split("/")[0].rsplit(".", 1)[0] + f".{int(rng.integers(1, 255))}"
            site, device = self.sites[int(rng.integers(len(self.sites)))], self.devices[int(rng.integers(len(self.devices)))]
            a = decide(self.resolver, addr, site, device, int(rng.integers(0, 2**64, dtype=np.uint64)))
            group, cid, p, hold = a.group, a.config, a.p, a.holdback
            f = self.factor(prefix, cid) if self.factor else 1.0
            plt = self.base_ms.get(prefix, 1000.0) * f * math.exp(self.sigma * rng.standard_normal())
            rec = {"time": t0 + i * dt, "kind": "pageload", "client_prefix": prefix, "client_addr": addr,
                   "config_id": cid, "probability": p, "table_version": table["version"], "holdback": bool(hold),
                   "handshake_rtt_ms": 40.0 + 10 * (sum(map(ord, prefix)) % 7), "plt_ms": round(plt, 3),
                   "bytes_sent": 1_000_000, "bytes_retrans": int(rng.integers(0, 20_000)), "duration_ms": round(plt, 3),
                   "bytes_acked": 1_000_000, "sni": site, "device": device}
            if group is not None and (not hold or self.holdback_group):
                rec["group"] = group
            out.append(rec)
        return out

    def batch(self, n: int, t0: float, dt: float = 0.01, source: str = "synth-edge") -> dict:
        return {"schema": SCHEMA, "source": source, "dropped": 0, "records": self.records(n, t0, dt)}
