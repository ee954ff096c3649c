"""`tailor evaluate --guardrails on`: the manager's guardrails applied to every table the simulated edges apply.

Real simulator, real policies, the model oracle; the guardrail functions are the manager's own.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from tailor.cli import main
from tailor.errors import ParameterError
from tailor.eval import metrics
from tailor.manager.config import ManagerConfig
from tailor.manager.guardrails import GuardConfig, greedy
from tailor.policies import make_policy
from tailor.scenario import load_scenario
from tailor.sim import SimConfig, Simulator
from tailor.sim.guarded import GuardedTables
from tailor.space import AllowedConfig
from tailor.table import validate_table

FREQ = 60.0


@pytest.fixture(scope="module")
def scenario(oracle):
    # 120 sessions of ~40 clients, ~1,300 page loads over 4 hours: ~235 update cycles
    return load_scenario("default", n_sessions=120, seed=3, websites=sorted(oracle.websites))


@pytest.fixture(scope="module")
def guarded(scenario, oracle):
    return Simulator(scenario, oracle, SimConfig(update_freq_s=FREQ, seed=2, guardrails="on"))


@pytest.fixture(scope="module")
def random_runs(scenario, oracle, guarded):
    """random through guarded tables, and through the tables it compiles itself (same world, same seed)."""
    tables = []
    on = guarded.run(make_policy("random", seed=1), on_table=lambda t, doc: tables.append(doc))
    unguarded = Simulator(scenario, oracle, SimConfig(update_freq_s=FREQ, seed=2, mode="table"))
    off = unguarded.run(make_policy("random", seed=1))
    return on, off, tables


def test_sim_config_guardrails_are_the_managers_and_imply_table_mode():
    cfg = SimConfig(guardrails="on")
    assert cfg.mode == "table" and SimConfig().guardrails == "off" and SimConfig().mode == "online"
    mc = ManagerConfig(data_dir="unused", insecure_dev=True)  # a default `tailor manager`
    assert cfg.guard_config() == GuardConfig(AllowedConfig.parse(mc.allowed), mc.holdback, mc.explore_budget,
                                             mc.rollback_alpha, min_improvement=mc.min_improvement)
    assert cfg.guard_holdback == mc.holdback == 0.2
    with pytest.raises(ParameterError, match="'guardrails' parameter of SimConfig"):
        SimConfig(guardrails="yes")
    with pytest.raises(ParameterError, match="'holdback' parameter of GuardConfig"):
        SimConfig(guardrails="on", guard_holdback=1.5)


@pytest.mark.parametrize("name", ["random", "mab-nc"])
def test_every_queued_table_meets_holdback_floor_and_exploration_budget(name, guarded, random_runs):
    gcfg = guarded.config.guard_config()
    if name == "random":
        result, _, tables = random_runs
    else:
        tables = []
        result = guarded.run(make_policy(name, seed=1), on_table=lambda t, doc: tables.append(doc))
    horizon = guarded.world.time_s[-1]
    assert len(tables) == int(horizon // FREQ)  # one table per update cycle
    default_id = guarded.space.configs[guarded.space.default_index].id
    for k, doc in enumerate(tables + [result.final_table]):
        if k % 25 == 0 or doc is result.final_table:
            validate_table(doc)  # in full (JSON Schema too), as the manager does before publishing
        assert doc["holdback"] >= gcfg.holdback and doc["default"] == default_id
        for g in doc["groups"]:
            top = greedy(g["choices"])
            explore = sum(c["p"] for c in g["choices"] if c["config"] != top)
            assert explore <= gcfg.explore_budget + 1e-9, (g["id"], explore)
    arms = set(np.unique(result.records["arm"]))
    assert arms <= {"table", "holdback", "default"} and "holdback" in arms


def test_held_back_share_gets_the_default(guarded, random_runs):
    rec = random_runs[0].records
    h = guarded.config.guard_holdback
    default = guarded.space.default_index
    applied = rec["arm"] != "default"  # page loads after the first table reached the edges
    held = rec["arm"] == "holdback"
    assert np.all(rec["config"][held] == default)
    assert np.all(rec["probability"][held] >= h)  # the marginal decide logs: (1 - h) pi_default + h
    assert np.all((rec["probability"] > 0) & (rec["probability"] <= 1))
    # membership is per client (the cohort draw's high half, spec/decision.md): a client is held back always or never
    clients = np.array([guarded.world.sessions[s].client.client_id for s in guarded.world.session])
    per_client = {}
    for c, hb in zip(clients[applied], held[applied]):
        per_client.setdefault(c, set()).add(bool(hb))
    assert all(len(v) == 1 for v in per_client.values())
    n_held = sum(v == {True} for v in per_client.values())
    assert stats.binomtest(n_held, len(per_client), h).pvalue > 1e-3, (n_held, len(per_client))
    # page-load share: the binomial bound with clients as the units, sd = sqrt(h (1 - h) sum w_c^2)
    _, loads = np.unique(clients[applied], return_counts=True)
    w = loads / loads.sum()
    share = held[applied].mean()
    assert abs(share - h) <= 4 * math.sqrt(h * (1 - h) * np.sum(w ** 2)), share


def test_guardrails_protect_from_a_mostly_bad_policy(random_runs):
    on, off, _ = random_runs
    d_on, d_off = (metrics.summary("random", r.records)["degraded_share"] for r in (on, off))
    assert d_off > 0.02  # random's arms are mostly worse than the default somewhere
    assert d_on < d_off / 2, (d_on, d_off)


def test_guardrails_keep_a_learner_from_degrading_more(scenario, oracle, guarded):
    """configanator explores freely without guardrails; with them, exploration is capped and the incumbent sticky."""
    on = guarded.run(make_policy("configanator", seed=1))
    unguarded = Simulator(scenario, oracle, SimConfig(update_freq_s=FREQ, seed=2, mode="table"))
    off = unguarded.run(make_policy("configanator", seed=1))
    d_on, d_off = (metrics.summary("configanator", r.records)["degraded_share"] for r in (on, off))
    assert d_off > 0.01 and d_on < d_off / 2, (d_on, d_off)
    assert off.guard_notes == [] and off.guard_rollbacks == 0


def test_rollback_blocks_a_slow_incumbent_and_is_noted():
    """The glue: observations keyed by table group and config id, check_rollbacks before apply_guardrails."""
    cfg = SimConfig(guardrails="on")
    space = cfg.config_space()
    guard = GuardedTables.of(cfg, space)
    default_id, bad = space.configs[space.default_index].id, 1 if space.default_index != 1 else 2
    bad_id = space.configs[bad].id
    table = {"schema": "tailor.decision-table/v1", "version": 3, "generated_at": 0.0, "policy": "x", "holdback": 0.0,
             "default": default_id, "configs": {default_id: {}, bad_id: dict(space.configs[bad].changes())},
             "groups": [{"id": "g", "choices": [{"config": bad_id, "p": 1.0}]}],
             "rules": [{"prefix": "0.0.0.0/0", "group": "g"}]}
    guard.state.incumbent["g"] = bad_id  # as if stickiness had switched to it earlier
    rng = np.random.default_rng(0)
    for _ in range(200):
        guard.observe("g", bad, 2000.0 * math.exp(0.2 * rng.standard_normal()), False)
        guard.observe("g", space.default_index, 1000.0 * math.exp(0.2 * rng.standard_normal()), True)
    guard.observe(None, bad, 5000.0, False)  # no rule / no table yet: the feeder's "default" group
    assert guard.state.treated["default"][bad_id].n == 1 and guard.state.holdback["g"].n == 200
    out, notes = guard.plan(table, 600.0)
    assert out["groups"][0]["choices"] == [{"config": default_id, "p": 1.0}] and out["holdback"] == 0.2
    assert bad_id in guard.state.blocked["g"] and len(guard.rollbacks) == 1
    assert notes[0].startswith("rollback g:") and guard.notes[0].startswith("t=600s rollback g:")


def test_cli_guardrails_on_end_to_end(tmp_path, capsys):
    rc = main(["evaluate", "--policies", "default,random", "--sessions", "20", "--guardrails", "on", "--json",
               "--no-report", "--out", str(tmp_path)])
    assert rc == 0
    out, err = capsys.readouterr()
    err = " ".join(err.split())  # the console wraps lines
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["policy"] for r in rows] == ["default", "random"]
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["sim_config"]["guardrails"] == "on" and meta["sim_config"]["mode"] == "table"
    assert "guardrails on" in err and "mode table, not online" in err
    table = json.loads((tmp_path / "tables" / "random.json").read_text())
    assert table["holdback"] >= 0.2


def test_cli_bad_guardrails_value_is_one_error(tmp_path, capsys):
    assert main(["evaluate", "--policies", "default", "--sessions", "5", "--guardrails", "maybe", "--json",
                 "--no-report", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tailor: error:") and "'guardrails' parameter of SimConfig" in err[0]
