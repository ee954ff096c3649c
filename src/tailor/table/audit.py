"""Audit of what edges logged against the one decision rule (spec/decision.md).

Given a decision table and the telemetry records edges sent while it was applied, check what off-policy
estimates and the holdback comparison rest on:

* every record's (group, configuration, probability, holdback) is what ``tailor.table.decide`` gives its
  client (records need ``client_addr``: tailor-edge/agent ``--full-address``);
* per (group, configuration) the logged probability equals the table's marginal, and the share of
  clients given it is consistent with it;
* the held-back share of clients is within the binomial 95% interval of the table's holdback;
* a client seen on several connections is always in the same cohort (holdback flag and, within one
  table version, configuration).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from tailor.table.decide import DecisionTable, decide


def binomial_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval of a binomial share (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def audit_decisions(doc: dict, records: list[dict], tol: float = 1e-6) -> dict:
    """Summary of the checks above for the records of ``doc``'s version (others are ignored)."""
    table = DecisionTable(doc)
    mine = [r for r in records if r.get("table_version") == doc["version"] and r.get("client_addr")]
    mismatched, p_wrong = [], []
    logged: dict[tuple, set] = defaultdict(set)
    cohort: dict[str, set] = defaultdict(set)
    config: dict[str, set] = defaultdict(set)
    for r in mine:
        addr = r["client_addr"]
        want = decide(table, addr, r.get("sni"), r.get("device"))
        got = (r.get("group"), r["config_id"], bool(r.get("holdback")))
        if got != (want.group, want.config, want.holdback):
            mismatched.append({"addr": addr, "logged": got, "rule": (want.group, want.config, want.holdback)})
        if abs(float(r["probability"]) - want.p) > tol:
            p_wrong.append({"addr": addr, "logged": r["probability"], "rule": want.p})
        logged[(r.get("group"), r["config_id"])].add(round(float(r["probability"]), 9))
        cohort[addr].add(bool(r.get("holdback")))
        config[addr].add(r["config_id"])
    clients = sorted(cohort)
    held = sum(True in cohort[a] for a in clients)
    lo, hi = binomial_interval(held, len(clients))
    h = float(doc.get("holdback", 0.0))
    per_pair = {f"{g}|{c}": sorted(ps) for (g, c), ps in sorted(logged.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))}
    return {
        "version": doc["version"], "records": len(mine), "clients": len(clients),
        "multi_connection_clients": sum(n > 1 for n in Counter(r["client_addr"] for r in mine).values()),
        "decision_mismatches": len(mismatched), "probability_mismatches": len(p_wrong),
        "examples": (mismatched + p_wrong)[:5], "logged_p": per_pair,
        "holdback": h, "held_back_clients": held, "held_back_share": held / len(clients) if clients else 0.0,
        "held_back_interval95": [lo, hi], "holdback_in_interval": lo <= h <= hi,
        "clients_switching_cohort": sum(len(v) > 1 for v in cohort.values()),
        "clients_switching_config": sum(len(v) > 1 for v in config.values()),
    }
