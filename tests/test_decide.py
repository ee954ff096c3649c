"""The one decision rule (spec/decision.md): shared vectors, stickiness, and the logged probabilities."""

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tailor.table import DecisionTable, decide, validate_table
from tailor.table.decide import cohort_draw, cohort_unit, siphash24

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "spec" / "vectors" / "decision-table" / "decide.json").read_text())
CASES = [(t["name"], c) for t in VECTORS["tables"] for c in t["cases"]]
TABLES = {t["name"]: t["table"] for t in VECTORS["tables"]}


@pytest.mark.parametrize("v", VECTORS["siphash"], ids=lambda v: f"{len(v['msg']) // 2}B")
def test_siphash_reference_vectors(v):
    assert f"{siphash24(bytes.fromhex(v['key']), bytes.fromhex(v['msg'])):016x}" == v["out"]


@pytest.mark.parametrize("v", VECTORS["cohorts"], ids=lambda v: v["addr"])
def test_cohort_vectors(v):
    assert cohort_unit(v["addr"]).hex() == v["unit"]
    assert f"{cohort_draw(v['salt'], v['addr'], v['version']):016x}" == v["draw"]


@pytest.mark.parametrize("name,case", CASES, ids=[f"{n}:{c['why']}" for n, c in CASES])
def test_decision_vectors(name, case):
    table = DecisionTable(TABLES[name])
    a = decide(table, case["addr"], case.get("sni"), case.get("device"), int(case.get("draw", "0"), 16))
    assert (a.group, a.config, a.holdback) == (case["group"], case["config"], case["holdback"])
    assert a.p == pytest.approx(case["p"], abs=1e-12)


def test_vectors_cover_what_the_issue_names():
    cases = [c for _, c in CASES]
    assert any(c["holdback"] and c["group"] for c in cases) and any(c["holdback"] and not c["group"] for c in cases)
    assert any(":" in c["addr"] and c["group"] for c in cases) and any(c["group"] is None for c in cases)
    assert any("tcp" in c["layers"] for c in cases) and any(c["layers"] == ["edge"] for c in cases)
    knobs = {k for t in TABLES.values() for cfg in t["configs"].values() for k in cfg}
    assert any(k.startswith("tcp.") for k in knobs) and any(k.startswith("http") for k in knobs)
    assert "salt" in TABLES["cohorts"] and "salt" not in TABLES["per-connection"]


def _world(n_clients: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [f"10.{int(rng.integers(0, 256))}.{int(rng.integers(0, 256))}.{int(rng.integers(1, 255))}" for _ in range(n_clients)]


def test_cohorts_are_sticky_and_the_holdback_share_is_the_tables():
    table = DecisionTable(TABLES["cohorts"])
    clients = sorted(set(_world(4000)))
    rng = np.random.default_rng(2)
    first = {}
    for _ in range(3):  # three connections per client, each with a different per-connection draw
        for addr in clients:
            a = decide(table, addr, draw=int(rng.integers(0, 2**63)))
            assert first.setdefault(addr, a) == a
    held = sum(a.holdback for a in first.values())
    n, h = len(first), table.holdback
    half = 1.96 * math.sqrt(h * (1 - h) / n)
    assert abs(held / n - h) < half + 1 / n, (held, n)


def test_logged_probability_is_the_marginal_over_clients():
    """Over many clients of one group, each (config) is applied to the share of clients its logged p says."""
    table = DecisionTable(TABLES["cohorts"])
    applied, logged = Counter(), {}
    clients = [f"10.9.{i // 250}.{i % 250 + 1}" for i in range(20000)]
    for addr in clients:
        a = decide(table, addr)
        assert a.group == "fast"
        applied[a.config] += 1
        assert logged.setdefault(a.config, a.p) == a.p  # the same p for held-back and treated connections
    assert sum(logged.values()) == pytest.approx(1.0)
    for cid, p in logged.items():
        assert abs(applied[cid] / len(clients) - p) < 4 * math.sqrt(p * (1 - p) / len(clients)), (cid, applied, logged)


def test_per_connection_draws_without_salt():
    table = DecisionTable(TABLES["per-connection"])
    rng = np.random.default_rng(3)
    seen = {decide(table, "10.9.9.9", draw=int(rng.integers(0, 2**63)) * 2 + 1).config for _ in range(200)}
    assert len(seen) == 2  # the same client gets different arms on different connections


def test_table_without_rules_gives_everyone_the_default():
    doc = dict(TABLES["cohorts"], groups=[], rules=[])
    validate_table(doc)
    a = decide(DecisionTable(doc), "2001:db8::7")
    assert (a.group, a.config, a.p) == (None, doc["default"], 1.0)


def test_holdback_is_stable_across_versions_and_arms_rotate():
    """A new table version keeps every client's holdback membership and re-draws its arm."""
    doc = TABLES["cohorts"]
    v7, v8 = DecisionTable(doc), DecisionTable(dict(doc, version=8))
    clients = [f"10.9.{i // 250}.{i % 250 + 1}" for i in range(2000)]
    a7, a8 = [decide(v7, c) for c in clients], [decide(v8, c) for c in clients]
    assert all(x.holdback == y.holdback for x, y in zip(a7, a8))
    treated = [(x.config, y.config) for x, y in zip(a7, a8) if not x.holdback]
    moved = sum(x != y for x, y in treated) / len(treated)
    # the group's arms have p 0.75 / 0.25: independent re-draws move 2 * 0.75 * 0.25 = 37.5% of clients
    assert 0.30 < moved < 0.45, moved
