"""The manager: ingestion semantics, auth, tables (ETag, long-poll, overrides), restart, guardrails."""

import copy
import json
import math
import threading
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tailor.cli import main
from tailor.errors import ParameterError, TableError
from tailor.manager import fastcheck
from tailor.manager.api import create_app
from tailor.manager.config import ManagerConfig
from tailor.manager.guardrails import (GuardConfig, GuardState, apply_guardrails, cap_exploration, check_rollbacks,
                                       move_to_default, sticky)
from tailor.manager.synth import SyntheticEdge
from tailor.manager.testing import LiveServer
from tailor.space import AllowedConfig, Configuration, ConfigSpace
from tailor.space.knobs import SPEC_DIR
from tailor.telemetry import TelemetryError, validate_batch

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
T0 = 1_795_000_000.0
VALID = json.loads((SPEC_DIR / "vectors/telemetry/valid.json").read_text())["batch"]
INVALID = json.loads((SPEC_DIR / "vectors/telemetry/invalid.json").read_text())["cases"]
SPACE = ConfigSpace.named("core")
DEFAULT = SPACE.configs[SPACE.default_index].id
OTHER = [c.id for c in SPACE.configs if c.id != DEFAULT]
PREFIXES = [f"10.{i}.{j}.0/24" for i in range(2) for j in range(10)]


def cfg(tmp_path, **kw) -> ManagerConfig:
    kw.setdefault("cohort_salt", "7e57" * 8)  # reproducible cohorts (a manager draws a random salt)
    kw.setdefault("policy", "configanator")  # the mechanics tests run on a class learner; the default has its own test
    return ManagerConfig(data_dir=str(tmp_path / "data"), token=TOKEN, update_freq_s=0, **kw)


def record(i: int = 0, **kw) -> dict:
    rec = {"time": T0 + i, "kind": "pageload", "client_prefix": "10.1.2.0/24", "config_id": DEFAULT,
           "table_version": 1, "plt_ms": 1000.0 + i, "handshake_rtt_ms": 50.0, "bytes_sent": 1000, "bytes_acked": 1000,
           "duration_ms": 100.0, "sni": "shop.example", "device": "desktop"}
    return {**rec, **kw}


def batch(records) -> bytes:
    return json.dumps({"schema": "tailor.telemetry/v1", "source": "edge-t", "dropped": 0, "records": records}).encode()


def error_of(fn, doc):
    try:
        fn(doc)
    except TelemetryError as err:
        return str(err)
    return None


# -- fast validation keeps validate_batch's semantics
@pytest.mark.parametrize("name", sorted(INVALID))
def test_fastcheck_agrees_on_invalid_vectors(name):
    case = INVALID[name]
    if "raw" in case:  # NaN / Infinity / beyond int64: the manager's parser (ingest) must refuse it
        from tailor.manager.ingest import parse_and_check

        error, _, good, bad = parse_and_check(case["raw"].encode())
        reasons = [error] if error else [r for _, r in bad]
        assert not good and any(f"field {case['field']}" in r and case["contains"] in r for r in reasons), reasons
        return
    slow, fast = error_of(validate_batch, case["batch"]), error_of(fastcheck.validate_batch_fast, case["batch"])
    assert fast == slow and f"telemetry field {case['field']}:" in fast and case["contains"] in fast


def test_fastcheck_agrees_on_valid_vector_and_mutations():
    assert fastcheck.validate_batch_fast(VALID) is VALID
    rng = np.random.default_rng(7)
    values = [None, -1, 0, 0.5, 1, 1.5, 2.0, True, "x", "c-0123456789", [], {}, 1e12]
    for _ in range(400):
        doc = copy.deepcopy(VALID)
        rec = doc["records"][int(rng.integers(3))]
        key = str(rng.choice(sorted(fastcheck.PROPS) + ["bogus"]))
        if rng.random() < 0.2:
            rec.pop(key, None)
        else:
            rec[key] = values[int(rng.integers(len(values)))]
        assert error_of(fastcheck.validate_batch_fast, doc) == error_of(validate_batch, doc), (key, rec.get(key))


def test_fastcheck_refuses_unknown_schema_keywords():
    with pytest.raises(TelemetryError, match="multipleOf"):
        fastcheck.compile_property({"type": "number", "multipleOf": 2})


# -- auth
def test_every_write_needs_the_token(tmp_path):
    app = create_app(cfg(tmp_path))
    writes = [("post", "/v1/telemetry", batch([record()])), ("post", "/v1/table", json.dumps(VALID).encode()),
              ("delete", "/v1/table/override", None), ("post", "/v1/cycle", None)]
    with TestClient(app) as c:
        for method, path, body in writes:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}):
                r = c.request(method, path, content=body, headers=headers)
                assert r.status_code == 401, (method, path, headers)
        assert app.state.manager.store.telemetry_count() == 0
        assert c.post("/v1/telemetry", content=batch([record()]), headers=AUTH).status_code == 202


def test_refuses_to_start_without_token(tmp_path, monkeypatch, capsys):
    with pytest.raises(ParameterError, match="TAILOR_TOKEN"):
        ManagerConfig(data_dir=str(tmp_path))
    monkeypatch.delenv("TAILOR_TOKEN", raising=False)
    assert main(["manager", "--data", str(tmp_path / "d"), "--listen", "127.0.0.1:1"]) == 2
    assert "TAILOR_TOKEN" in capsys.readouterr().err
    assert ManagerConfig(data_dir=str(tmp_path), insecure_dev=True).token is None


# -- ingestion
def test_malformed_flood_rejected_good_records_stored(tmp_path):
    app = create_app(cfg(tmp_path))
    bad = [record(i, kind="flow") for i in range(500)] + [record(i, bytes_sent=-5) for i in range(500)]
    good = [record(i) for i in range(100)]
    mixed = bad[:500] + good + bad[500:] + [record(1, client_prefix="not-an-ip")]
    with TestClient(app, headers=AUTH) as c:
        r = c.post("/v1/telemetry", content=batch(mixed), headers=AUTH)
        assert r.status_code == 202
        body = r.json()
        assert (body["accepted"], body["rejected"]) == (100, 1001)
        assert body["errors"][0].startswith("telemetry field records[0].kind: 'flow' is not one of")
        r = c.post("/v1/telemetry", content=batch(bad), headers=AUTH)  # nothing valid
        assert r.status_code == 400 and r.json()["rejected"] == 1000
        for junk in (b"{not json", b"[]", json.dumps({"schema": "tailor.telemetry/v2", "source": "e", "records": []}).encode()):
            assert c.post("/v1/telemetry", content=junk, headers=AUTH).status_code == 400
        app.state.manager.flush()
        assert app.state.manager.store.telemetry_count() == 100
        prefix = app.state.manager.store.query("SELECT DISTINCT client_prefix FROM telemetry")
        assert prefix == [("10.1.2.0/24",)]
        metrics = c.get("/metrics").text
        assert "tailor_ingest_rejected_records_total 2001.0" in metrics
        assert "tailor_ingest_records_total 100.0" in metrics


def test_request_size_bounded_and_queue_overflow_counted(tmp_path):
    app = create_app(cfg(tmp_path, max_body_bytes=4096, queue_records=30))
    with TestClient(app, headers=AUTH) as c:
        big = batch([record(i) for i in range(40)])
        assert len(big) > 4096 and c.post("/v1/telemetry", content=big, headers=AUTH).status_code == 413
        assert c.post("/v1/telemetry", content=batch([record(i) for i in range(10)]), headers=AUTH).status_code == 202
        assert c.post("/v1/telemetry", content=batch([record(i) for i in range(10)]), headers=AUTH).status_code == 202
        # a reply waits until its batch is durable, so the queue holds only batches in flight: it drained
        assert c.post("/v1/telemetry", content=batch([record(i) for i in range(12)]), headers=AUTH).status_code == 202
        mgr = app.state.manager
        with mgr._write_lock:  # no writer (a reply's group commit, a cycle) drains the batch in flight meanwhile
            mgr.queue.offer("edge-x", T0, [record(i) for i in range(20)])  # a batch in flight
            r = c.post("/v1/telemetry", content=batch([record(i) for i in range(11)]), headers=AUTH)
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["dropped"] == 11
        assert "tailor_ingest_dropped_records_total 11.0" in c.get("/metrics").text
        # an edge reports its own drops with every retry of a batch: they are counted once, when it is acknowledged
        # (until 2026-12-07 with every attempt; found by review)
        def with_drops(n):
            return json.dumps({"schema": "tailor.telemetry/v1", "source": "edge-t", "dropped": 100,
                               "records": [record(i) for i in range(n)]}).encode()

        with mgr._write_lock:
            for _ in range(3):
                assert c.post("/v1/telemetry", content=with_drops(11), headers=AUTH).status_code == 503
        assert c.post("/v1/telemetry", content=json.dumps({"schema": "tailor.telemetry/v1", "source": "edge-t",
                      "dropped": 100, "records": [{"kind": "bogus"}]}), headers=AUTH).status_code == 400
        assert "tailor_edge_dropped_records_total 0.0" in c.get("/metrics").text
        assert c.post("/v1/telemetry", content=with_drops(3), headers=AUTH).status_code == 202
        assert c.post("/v1/telemetry", content=with_drops(0), headers=AUTH).status_code == 202  # drops alone
        assert "tailor_edge_dropped_records_total 200.0" in c.get("/metrics").text


def test_feed_mapping(tmp_path):
    app = create_app(cfg(tmp_path))
    g1 = app.state.manager.current.doc["groups"][0]["id"]  # the guardrails keep groups a table has
    conn = {"time": T0, "kind": "connection", "client_prefix": "10.7.7.0/24", "config_id": DEFAULT, "table_version": 1,
            "group": g1, "handshake_rtt_ms": 80.0, "max_delivery_rate_Bps": 250000.0, "bytes_sent": 100000,
            "bytes_retrans": 2000, "duration_ms": 900.0}
    resp = {"time": T0 + 1, "kind": "response", "client_prefix": "10.7.7.0/24", "config_id": DEFAULT,
            "table_version": 1, "group": g1, "ttfb_ms": 100.0, "ttlb_ms": 400.0, "object_bytes": 100000}
    with TestClient(app, headers=AUTH) as c:
        assert c.post("/v1/telemetry", content=batch([conn, resp]), headers=AUTH).status_code == 202
        mgr = app.state.manager
        mgr.run_cycle(now=T0 + 10)
        h = mgr.archive.get("10.7.7.0/24", T0 + 10)
        # first sample: goodput 2 Mbit/s (rate x 8), loss 0.02, rtt 80; second: 100 kB x 8 / 400 ms = 2 Mbit/s
        assert h.samples == 1 and math.isclose(h.goodput_mbps, 2.0) and math.isclose(h.loss, 0.02)
        stats = mgr.guard.treated[g1][DEFAULT]
        assert stats.n == 2 and math.isclose(stats.mean, (math.log(900.0) + math.log(400.0)) / 2)



def test_edge_connection_records_feed_the_archive_not_the_outcomes(tmp_path):
    """tailor-edge's kind "connection" (alpn / tls_fingerprint set) updates the prefix archive only: its
    responses are the outcomes, and its duration includes keep-alive idle time."""
    app = create_app(cfg(tmp_path))
    g1 = app.state.manager.current.doc["groups"][0]["id"]  # the guardrails keep groups a table has
    edge_conn = {"time": T0, "kind": "connection", "client_prefix": "10.8.8.0/24", "config_id": DEFAULT,
                 "table_version": 1, "group": g1, "handshake_rtt_ms": 40.0, "max_delivery_rate_Bps": 500000.0,
                 "bytes_sent": 50000, "bytes_retrans": 500, "duration_ms": 30000.0, "alpn": "h2",
                 "tls_fingerprint": "t13d1516h2_8daaf6152771_02713d6af862"}
    resp = {"time": T0 + 1, "kind": "response", "client_prefix": "10.8.8.0/24", "config_id": DEFAULT,
            "table_version": 1, "group": g1, "ttfb_ms": 50.0, "ttlb_ms": 200.0, "object_bytes": 50000, "alpn": "h2"}
    with TestClient(app, headers=AUTH) as c:
        assert c.post("/v1/telemetry", content=batch([edge_conn, resp]), headers=AUTH).status_code == 202
        mgr = app.state.manager
        mgr.run_cycle(now=T0 + 10)
        h = mgr.archive.get("10.8.8.0/24", T0 + 10)
        assert h.samples >= 1 and math.isclose(h.loss, 0.01)  # the connection record reached the archive
        stats = mgr.guard.treated[g1][DEFAULT]
        assert stats.n == 1 and math.isclose(stats.mean, math.log(200.0))  # only the response is an outcome

# -- tables
def test_etag_304_and_long_poll(tmp_path):
    app = create_app(cfg(tmp_path))
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=10, headers=AUTH) as c:
        r = c.get("/v1/table")
        etag, version = r.headers["etag"], r.json()["version"]
        assert c.get("/v1/table", headers={"If-None-Match": etag}).status_code == 304
        started = time.monotonic()
        assert c.get(f"/v1/table?wait=0.3&version={version}", headers={"If-None-Match": etag}).status_code == 304
        assert 0.25 <= time.monotonic() - started < 3
        table = copy.deepcopy(r.json())
        table["groups"].append({"id": "extra", "choices": [{"config": table["default"], "p": 1.0}]})
        timer = threading.Timer(0.3, lambda: httpx.post(url + "/v1/table", json=table, headers=AUTH, timeout=10))
        timer.start()
        started = time.monotonic()
        r = c.get(f"/v1/table?wait=20&version={version}", headers={"If-None-Match": etag})
        timer.join()
        assert r.status_code == 200 and r.json()["version"] == version + 1 and time.monotonic() - started < 5
        assert r.headers["etag"] != etag


def test_operator_table_validation_and_audit(tmp_path):
    app = create_app(cfg(tmp_path, allowed="NoBBR"))
    with TestClient(app, headers=AUTH) as c:
        table = c.get("/v1/table").json()
        bad = copy.deepcopy(table)
        bad["groups"] = [{"id": "g", "choices": [{"config": DEFAULT, "p": 1.5}]}]
        r = c.post("/v1/table", json=bad, headers=AUTH)
        assert r.status_code == 400 and "groups[0].choices[0].p" in r.json()["error"]
        bbr = next(c_ for c_ in SPACE.configs if c_["tcp.congestion_control"] == "bbr")
        bad = dict(copy.deepcopy(table), configs={**table["configs"], bbr.id: dict(bbr.changes())},
                   groups=[{"id": "g", "choices": [{"config": bbr.id, "p": 1.0}]}])
        r = c.post("/v1/table", json=bad, headers=AUTH)
        assert r.status_code == 400 and "groups[0].choices[0].config" in r.json()["error"] and "AllowedConfig" in r.json()["error"]
        assert c.post("/v1/table", content=b"{", headers=AUTH).status_code == 400
        good = dict(copy.deepcopy(table), holdback=0.05, groups=[{"id": "g", "choices": [{"config": DEFAULT, "p": 1.0}]}],
                    rules=[{"prefix": "10.0.0.0/8", "group": "g"}])
        r = c.post("/v1/table", json=good, headers={**AUTH, "X-Tailor-Reason": "incident 42"})
        assert r.status_code == 200 and r.json()["version"] == table["version"] + 1
        now = c.get("/v1/table").json()
        assert now["rules"] == good["rules"] and now["holdback"] == 0.2  # holdback guardrail enforced
        audit = c.get("/v1/audit").json()
        assert audit[0]["action"] == "override" and audit[0]["reason"] == "incident 42"
        c.post("/v1/telemetry", content=batch([record(i) for i in range(50)]), headers=AUTH)
        assert c.post("/v1/cycle", headers=AUTH).json()["version"] == now["version"]  # pinned
        assert c.delete("/v1/table/override", headers=AUTH).status_code == 200
        assert c.post("/v1/cycle", headers=AUTH).json()["version"] == now["version"] + 1
        assert c.get("/v1/table").json()["rules"] != good["rules"]


# -- restart
def closed_loop(c, edge, cycles, n, t0):
    """Edge applies the current table, reports n records, the manager runs a cycle; returns the summaries."""
    out = []
    for k in range(cycles):
        edge.apply(c.get("/v1/table").json())
        assert c.post("/v1/telemetry", content=json.dumps(edge.batch(n, t0 + 100 * k)), headers=AUTH).status_code == 202
        out.append(c.app.state.manager.run_cycle(now=t0 + 100 * k + 99))
    return out


def learned(policy) -> dict:
    """Per-key observation counts of the manager's policy (Configanator: per website x class pair; tailor: per
    context cell and configuration)."""
    if policy.name == "tailor":
        return {k: n.tolist() for k, (n, _) in policy._stats.items()}
    keyed = policy._pairs.items() if hasattr(policy, "_pairs") else policy._stats.items()
    return {k: (s.stats if hasattr(s, "stats") else s).counts.tolist() for k, s in keyed}


def test_restart_resumes_table_and_learned_state(tmp_path):
    edge = SyntheticEdge(PREFIXES, factor=lambda p, cid: 1.0 if cid == DEFAULT else 0.8, seed=3)
    default = ManagerConfig(data_dir="unused", insecure_dev=True).policy
    with TestClient(create_app(cfg(tmp_path, policy=default)), headers=AUTH) as c:
        closed_loop(c, edge, 3, 1500, T0)
        before = c.get("/v1/table")
        mgr = c.app.state.manager
        stats = learned(mgr.policy)
        assert mgr.policy.name == "tailor" and sum(map(sum, stats.values())) > 0  # the manager's default
        # feeding telemetry decides nothing: the outcomes reach their groups by group_of (no reservations and no
        # decision counts, which select would leave behind)
        assert not mgr.policy._reserved and not mgr.policy._seen
        guard, archive_n, fed = copy.deepcopy(mgr.guard), len(mgr.archive), mgr.fed_seq
    with TestClient(create_app(cfg(tmp_path, policy=default)), headers=AUTH) as c:
        mgr = c.app.state.manager
        after = c.get("/v1/table")
        assert after.headers["etag"] == before.headers["etag"] and after.json() == before.json()
        assert learned(mgr.policy) == stats
        assert mgr.guard == guard and len(mgr.archive) == archive_n and mgr.fed_seq == fed
        assert mgr.run_cycle(now=T0 + 1000).rows == 0  # nothing fed twice
    with pytest.raises(ParameterError, match="fresh --data"):
        create_app(cfg(tmp_path, policy="brute-nc"))


def test_retention_deletes_old_telemetry(tmp_path):
    app = create_app(cfg(tmp_path, retention_days=1.0))
    with TestClient(app, headers=AUTH) as c:
        recs = [record(i, time=T0 - 3 * 86400 + i) for i in range(20)] + [record(i, time=T0 + i) for i in range(30)]
        c.post("/v1/telemetry", content=batch(recs), headers=AUTH)
        summary = app.state.manager.run_cycle(now=T0 + 100)
        assert summary.deleted == 20 and summary.rows == 50
        assert app.state.manager.store.telemetry_count() == 30


# -- guardrails as units
def stream(state, rng, group, config, factor, n, hold_share=0.2, look_every=50, cfg_=GuardConfig()):
    """Feed n synthetic log-normal page loads; run the rollback check every look_every; first event index."""
    for i in range(n):
        hold = rng.random() < hold_share
        state.observe(group, DEFAULT if hold else config, 1000.0 * (1 if hold else factor) * math.exp(0.5 * rng.standard_normal()), hold)
        if i % look_every == look_every - 1 and check_rollbacks(state, cfg_, DEFAULT):
            return i
    return None


def test_rollback_triggers_when_clearly_worse_and_not_on_equal_streams():
    for seed in range(5):
        state = GuardState(incumbent={"g": OTHER[0]})
        at = stream(state, np.random.default_rng(seed), "g", OTHER[0], 1.3, 4000)
        assert at is not None and at < 2000
        assert state.incumbent["g"] == DEFAULT and OTHER[0] in state.blocked["g"]
        table = {"default": DEFAULT, "configs": {DEFAULT: {}, OTHER[0]: dict(SPACE.configs[1].changes())},
                 "groups": [{"id": "g", "choices": [{"config": OTHER[0], "p": 1.0}]}], "rules": []}
        out, _ = apply_guardrails(table, state, GuardConfig())
        assert out["groups"][0]["choices"] == [{"config": DEFAULT, "p": 1.0}]
    for seed in range(20):
        state = GuardState(incumbent={"g": OTHER[0]})
        assert stream(state, np.random.default_rng(100 + seed), "g", OTHER[0], 1.0, 4000) is None


def test_stickiness_needs_confident_improvement():
    rng = np.random.default_rng(1)
    cand = OTHER[3]
    choices = [{"config": cand, "p": 0.9}, {"config": DEFAULT, "p": 0.1}]

    def state_with(factor, n):
        st = GuardState()
        for _ in range(n):
            st.observe("g", DEFAULT, 1000 * math.exp(0.3 * rng.standard_normal()), False)
            st.observe("g", cand, 1000 * factor * math.exp(0.3 * rng.standard_normal()), False)
        return st

    for factor, n in ((0.99, 5000), (0.7, 10)):  # too small an improvement / too little evidence
        st = state_with(factor, n)
        out, note = sticky(choices, "g", st, GuardConfig(), DEFAULT)
        assert note is None and max(out, key=lambda c: c["p"])["config"] == DEFAULT
        assert {c["config"]: c["p"] for c in out}[cand] >= 0.05  # still probed
    st = state_with(0.8, 300)
    out, note = sticky(choices, "g", st, GuardConfig(), DEFAULT)
    assert out == choices and note and st.incumbent["g"] == cand


def test_exploration_budget_and_allowed_config():
    choices = [{"config": c, "p": 0.25} for c in OTHER[:4]]
    capped = cap_exploration(choices, 0.1)
    assert math.isclose(sum(c["p"] for c in capped), 1.0) and math.isclose(max(c["p"] for c in capped), 0.9)
    assert cap_exploration([{"config": DEFAULT, "p": 0.95}, {"config": OTHER[0], "p": 0.05}], 0.1)[0]["p"] == 0.95
    moved = move_to_default(choices, {OTHER[0], OTHER[1]}, DEFAULT)
    assert {c["config"]: c["p"] for c in moved}[DEFAULT] == 0.5
    bbr = [c for c in SPACE.configs if c["tcp.congestion_control"] == "bbr"][:2]
    table = {"default": DEFAULT, "configs": {DEFAULT: {}, **{c.id: dict(c.changes()) for c in bbr}},
             "groups": [{"id": "g", "choices": [{"config": bbr[0].id, "p": 0.5}, {"config": bbr[1].id, "p": 0.5}]}],
             "rules": [], "holdback": 0.0}
    out, notes = apply_guardrails(table, GuardState(), GuardConfig(allowed=AllowedConfig.parse("NoBBR")))
    assert out["groups"][0]["choices"] == [{"config": DEFAULT, "p": 1.0}] and out["holdback"] == 0.2 and notes
    with pytest.raises(TableError):
        from tailor.manager.guardrails import check_allowed
        check_allowed(table, AllowedConfig.parse("NoBBR"))


def test_closed_loop_learns_and_improves_over_holdback(tmp_path):
    rng = np.random.default_rng(0)
    factors = {c.id: (1.0 if c.id == DEFAULT else float(rng.uniform(0.7, 1.4))) for c in SPACE.configs}
    edge = SyntheticEdge(PREFIXES, factor=lambda p, cid: factors[cid], seed=5)
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        summaries = closed_loop(c, edge, 12, 3000, T0)
        mgr = c.app.state.manager
        assert len(mgr.current.doc["rules"]) > 0 and len(mgr.current.doc["groups"]) > 1
        assert mgr.current.doc["holdback"] == 0.2
        # the best configuration is ~30% faster; the first cycle runs the default for everyone. The last cycles'
        # gain against the holdback is 6-12% (six salts, and per-connection draws: the learner starts winning
        # around cycle 8 of 12), so the test asks for the mean of the last four, not one lucky cycle
        assert abs(summaries[0].window_improvement) < 0.05
        late = [s.window_improvement for s in summaries[-4:]]
        assert np.mean(late) > 0.06 and min(late) > 0.03, late
        metrics = c.get("/metrics").text
        for name in ("tailor_update_cycle_seconds_count", "tailor_groups", "tailor_improvement_vs_holdback",
                     "tailor_ingest_records_per_second"):
            assert name in metrics


def test_compile_table_refuses_a_bad_policy_rule(tmp_path):
    from tailor.table import compile_table

    edge = SyntheticEdge(PREFIXES, factor=lambda p, cid: 1.0, seed=4)
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        closed_loop(c, edge, 2, 1500, T0)
        mgr = c.app.state.manager
        policy = mgr.policy
        table = compile_table(policy, T0, 1, mgr.archive)
        assert len(table["rules"]) > 0 and table["salt"] == policy.cohort_salt
        assert mgr.current.doc["salt"] == policy.cohort_salt  # the manager's tables carry its policy's cohort key
    policy.table_rules = lambda: [{"prefix": "10.0.0.0/8", "group": "default", "weight": 1}]
    with pytest.raises(TableError, match=r"rules\[0\]"):
        compile_table(policy, T0)


def test_tables_reach_edges_that_see_neither_device_nor_sni(tmp_path):
    """Agent-style records (kind connection, no sni, no device): the published table must route each
    learned prefix to a learned group through a rule real edges match (no sni/device), while
    device-specific rules still win for clients whose device is known."""
    from tailor.table import DecisionTable

    rng = np.random.default_rng(2)
    prefixes = ["10.240.1.0/24", "10.240.2.0/24", "10.240.3.0/24"]
    with TestClient(create_app(cfg(tmp_path, policy_params=(("epsilon", 0.3),))), headers=AUTH) as c:
        mgr = c.app.state.manager
        assert mgr.policy.epsilon == 0.3
        for cycle in range(4):
            recs = []
            for i in range(300):
                p = prefixes[i % 3]
                recs.append({"time": T0 + cycle * 100 + i * 0.1, "kind": "connection", "client_prefix": p,
                             "config_id": OTHER[int(rng.integers(len(OTHER)))] if i % 4 else DEFAULT,
                             "table_version": mgr.current.version, "min_rtt_ms": 30.0 * (1 + prefixes.index(p) * 5),
                             "bytes_sent": 300000, "bytes_acked": 300000, "bytes_retrans": 0,
                             "duration_ms": float(rng.lognormal(np.log(500 * (1 + prefixes.index(p))), 0.1))})
            assert c.post("/v1/telemetry", content=batch(recs), headers=AUTH).status_code == 202
            mgr.run_cycle(now=T0 + cycle * 100 + 60)
        doc = mgr.current.doc
        plain = [r for r in doc["rules"] if "sni" not in r and "device" not in r]
        assert sorted(r["prefix"] for r in plain) == prefixes
        res = DecisionTable(doc)
        groups = {g["id"] for g in doc["groups"]} - {"default"}
        for p in prefixes:  # as tailor-agent resolves: address only
            assert res.group_of(p.replace(".0/24", ".2")) in groups
        dev = [r for r in doc["rules"] if r.get("device") == "android" and r["prefix"] == prefixes[0]]
        if dev:  # device-specific rules keep precedence where a device is known
            assert res.group_of("10.240.1.2", dev[0].get("sni"), "android") == dev[0]["group"]


def test_policy_param_option_parsed_validated_and_part_of_state(tmp_path, capsys):
    from tailor.manager.server import parse_policy_params

    assert parse_policy_params(["epsilon=0.3", "classes=4", "flag=true"]) == (("epsilon", 0.3), ("classes", 4),
                                                                              ("flag", True))
    with pytest.raises(ParameterError, match="policy-param"):
        parse_policy_params(["epsilon"])
    with pytest.raises(ParameterError, match="epsilonx"):
        create_app(cfg(tmp_path / "a", policy_params=(("epsilonx", 0.3),)))
    with TestClient(create_app(cfg(tmp_path / "b", policy_params=(("epsilon", 0.3),)))):
        pass
    with pytest.raises(ParameterError, match="params"):  # learned with other parameters: refused
        create_app(cfg(tmp_path / "b"))


def test_cohort_salt_is_kept_across_restarts_and_rotated_on_request(tmp_path):
    first = "ab" * 16
    with TestClient(create_app(cfg(tmp_path, cohort_salt=None)), headers=AUTH) as c:
        drawn = c.get("/v1/table").json()["salt"]
        assert len(drawn) == 32 and drawn != first
    with TestClient(create_app(cfg(tmp_path, cohort_salt=None)), headers=AUTH) as c:
        edge = SyntheticEdge(PREFIXES, factor=lambda p, cid: 1.0, seed=4)
        closed_loop(c, edge, 1, 500, T0)
        assert c.app.state.manager.policy.cohort_salt == drawn  # kept in the saved state
    with TestClient(create_app(cfg(tmp_path, cohort_salt=first)), headers=AUTH) as c:
        assert c.app.state.manager.policy.cohort_salt == first
        closed_loop(c, edge, 1, 500, T0 + 1000)
        assert c.get("/v1/table").json()["salt"] == first
    with pytest.raises(ParameterError, match="cohort_salt"):
        cfg(tmp_path, cohort_salt="AB" * 16)


# -- off-policy publication gate (--ope-gate)
def test_ope_gate_publishes_learned_tables_and_keeps_a_slower_one_out(tmp_path):
    from tailor.cli import _build_parser
    from tailor.manager.server import config_from_args

    args = _build_parser().parse_args(["manager", "--data", str(tmp_path / "x"), "--ope-gate"])
    assert config_from_args(args, environ={"TAILOR_TOKEN": TOKEN}).ope_gate
    assert not ManagerConfig(data_dir="x", insecure_dev=True).ope_gate  # off by default
    fast, slow = OTHER[0], OTHER[1]
    factors = {c.id: 1.0 for c in SPACE.configs} | {fast: 0.6, slow: 3.0}
    edge = SyntheticEdge(PREFIXES, factor=lambda p, cid: factors[cid], seed=5)
    with TestClient(create_app(cfg(tmp_path, ope_gate=True, policy="mab-nc", policy_params=(("epsilon", 0.3),))),
                    headers=AUTH) as c:
        summaries = closed_loop(c, edge, 4, 1500, T0)
        mgr = c.app.state.manager
        assert [s.version for s in summaries] == [2, 3, 4, 5]  # learned tables pass: the gate does not stall learning
        last = mgr.store.query("SELECT reason FROM audit WHERE action = 'publish' ORDER BY version DESC LIMIT 1")
        assert "ope-gate: candidate" in last[0][0]
        version, now = mgr.current.version, T0 + 1000
        bad = copy.deepcopy(mgr.current.doc)
        bad["configs"][slow] = mgr.knobs[slow]
        for g in bad["groups"]:
            g["choices"] = [{"config": slow, "p": 1.0}]
        assert not mgr._maybe_publish(bad, [], [], now)
        assert mgr.current.version == version
        kept = mgr.store.query("SELECT version, actor, reason FROM audit WHERE action = 'ope-gate'")
        assert len(kept) == 1 and kept[0][:2] == (version, "manager")
        assert kept[0][2].startswith(f"ope-gate: kept version {version}: candidate ") and "upper bound >" in kept[0][2]
        # a rollback is never held back by the gate
        assert mgr._maybe_publish(bad, [], [{"group": "g", "config": slow, "reason": "test"}], now)
        assert mgr.current.version == version + 1


def test_ope_gate_keeps_out_a_table_that_moves_a_group_where_the_logs_have_nothing(tmp_path):
    """Self-normalised IPS values a candidate on the records that could have had its choices: a candidate that sends
    the slow half of the traffic to a configuration the window never logged (twice as slow) was valued on the fast
    half alone and published (found by review, 2026-12-06). The gate now keeps a candidate out when more than
    ``ope_max_unsupported`` of its choices are unseen in the logs."""
    from tailor.manager.service import Manager

    fast = [f"10.0.{j}.0/24" for j in range(10)]
    slow = [f"10.1.{j}.0/24" for j in range(10)]
    shown, unseen = OTHER[0], OTHER[1]
    factor = {DEFAULT: 1.0, shown: 0.9, unseen: 2.0}
    mgr = Manager(cfg(tmp_path, ope_gate=True), clock=lambda: T0)
    cur = copy.deepcopy(mgr.current.doc)
    cur["configs"] = {c: mgr.knobs[c] for c in (DEFAULT, shown, unseen)}
    cur["groups"] = [{"id": g, "choices": [{"config": DEFAULT, "p": 0.9}, {"config": shown, "p": 0.1}]}
                     for g in ("gfast", "gslow")]
    cur["rules"] = [{"prefix": "10.0.0.0/16", "group": "gfast"}, {"prefix": "10.1.0.0/16", "group": "gslow"}]
    mgr.override(cur, "op", "test")
    edge = SyntheticEdge(fast + slow, base_ms={p: 1000.0 for p in fast} | {p: 3000.0 for p in slow},
                         factor=lambda p, c: factor[c], seed=1)
    edge.apply(mgr.current.doc)
    assert mgr.ingest(batch(edge.records(6000, T0))).status == 202
    mgr.clear_override("op", "done")
    version, now = mgr.current.version, T0 + 100
    candidate = copy.deepcopy(mgr.current.doc)
    candidate["groups"][1]["choices"] = [{"config": unseen, "p": 1.0}]
    assert not mgr._maybe_publish(candidate, [], [], now) and mgr.current.version == version
    kept = mgr.store.query("SELECT reason FROM audit WHERE action = 'ope-gate'")
    assert "the logs show only" in kept[-1][0]
    both = copy.deepcopy(mgr.current.doc)  # the same move as a tenth probe: within what the gate allows
    both["groups"][1]["choices"] = [{"config": DEFAULT, "p": 0.85}, {"config": shown, "p": 0.1},
                                    {"config": unseen, "p": 0.05}]
    ok, why = mgr._ope_check(both, now)
    assert "the logs show only" not in why
    mgr.close()


def test_ope_logs_resolve_a_quic_record_as_the_edge_decided_it(tmp_path):
    """tailor-edge chooses a QUIC connection's configuration from the client address alone (its first Initial
    packet comes before the ClientHello), so the gate's logs give a QUIC record (alpn h3) no SNI and no device,
    and a table's SNI rule does not change what the estimate assumes it was drawn with; TCP records keep them."""
    from tailor.manager.service import Manager, ope_logs

    mgr = Manager(cfg(tmp_path), clock=lambda: T0)
    response = {"time": T0 + 1, "kind": "response", "client_prefix": "10.1.2.0/24", "client_addr": "10.1.2.9",
                "config_id": DEFAULT, "probability": 0.5, "table_version": 1, "ttfb_ms": 100.0, "ttlb_ms": 400.0,
                "object_bytes": 100_000, "sni": "shop.example", "device": "desktop"}
    records = [{**response, "alpn": "h3"}, {**response, "time": T0 + 2, "alpn": "h2"}]
    assert mgr.ingest(batch(records)).status == 202
    mgr.flush()
    logs = ope_logs(mgr.store, T0)
    assert len(logs) == 2 and set(zip(logs.sni, logs.device)) == {(None, None), ("shop.example", "desktop")}
    mgr.close()


def test_the_feeder_keeps_the_policys_own_table_across_a_restart_and_a_rollback(tmp_path):
    """The feed tells a guardrail's service (stickiness's incumbent) from the policy's own decisions by the policy's
    table before the guardrails. A restart and a failed cycle's rollback must give the feeder that table as the last
    good state had it, not the published (guarded) one (until 2026-12-06 they gave the published one, so for a cycle
    the incumbent's page loads were fed as the policy's own: found by review)."""
    from tailor.manager.service import Manager

    conf = cfg(tmp_path, policy="mab-nc", policy_params=(("epsilon", 0.3),))
    mgr = Manager(conf, clock=lambda: T0)
    edge = SyntheticEdge(PREFIXES, factor=lambda p, c: 0.6 if c == OTHER[0] else 1.0, seed=5)

    def post(m, records):
        assert m.ingest(batch(records)).status == 202

    edge.apply(mgr.current.doc)
    post(mgr, edge.records(1500, T0))
    mgr.run_cycle(now=T0 + 99)
    for g in mgr.current.doc["groups"]:  # stickiness keeps an incumbent the policy no longer gives
        mgr.guard.incumbent[g["id"]] = OTHER[-1]
    edge.apply(mgr.current.doc)
    post(mgr, edge.records(1500, T0 + 100))
    mgr.run_cycle(now=T0 + 199)
    own = {g: set(c) for g, c in mgr.feeder.policy_choices.items()}
    published = {g["id"]: {c["config"] for c in g["choices"]} for g in mgr.current.doc["groups"]}
    assert any(OTHER[-1] in published[g] and OTHER[-1] not in own.get(g, set()) for g in published)
    mgr.close()
    again = Manager(conf, clock=lambda: T0 + 250)  # a restart from the same data directory
    assert again.feeder.policy_choices == own
    again._rollback_state()  # what a failed cycle does
    assert again.feeder.policy_choices == own
    again.close()


def test_feed_marks_what_a_guardrail_served_and_tailor_does_not_charge_it(tmp_path):
    """A configuration the policy's own (planned) table does not give a record's group was served by a guardrail
    (stickiness kept the incumbent): the feed passes it as arm 'served', and tailor learns from it without
    charging its budget; a configuration from the policy's table is charged."""
    from tailor.grouping import PrefixArchive
    from tailor.manager.feed import Feeder
    from tailor.manager.guardrails import GuardState
    from tailor.policies import PolicyEnv, make_policy
    from tailor.space import ConfigSpace

    space = ConfigSpace.named("core")
    archive = PrefixArchive(0.3)
    policy = make_policy("tailor", seed=0).reset(space, PolicyEnv(archive=archive))
    feeder = Feeder(policy, archive, GuardState())
    base = space.configs[policy.baseline_index].id
    other = next(c.id for c in space.configs if c.id != base)
    feeder.set_policy_table({"groups": [{"id": "g1", "choices": [{"config": base, "p": 1.0}]}]})

    def row(seq, cid):  # seq, t, prefix, addr, group, cid, prob, hold, sni, device, done_ms, rtt, goodput, loss, bytes,
        # asn, region, table_version
        return (seq, T0 + seq, "10.1.2.0/24", None, "g1", cid, 1.0, False, "shop.example", "desktop", 5000.0, 80.0,
                5.0, 0.0, 100_000, None, None, 1)

    feeder.feed([row(1, other)])
    assert policy._slack == {} and policy._n == 0 and len(policy._rows) == 1  # learned from, not charged
    feeder.feed([row(2, other), row(3, base)])
    (group, slack), = policy._slack.items()
    assert slack == pytest.approx(policy.alpha * 5000.0)  # only the baseline page load: alpha x its time
    feeder.set_policy_table({"groups": [{"id": "g1", "choices": [{"config": base, "p": 0.9}, {"config": other, "p": 0.1}]}]})
    feeder.feed([row(4, other)])
    assert policy._slack[group] < slack  # the policy's own probe is charged


def test_stickiness_moves_its_incumbent_only_when_the_table_is_published(tmp_path):
    """Stickiness switches a group's incumbent when the policy's candidate beats it with confidence; until 2026-12-07
    it switched it also in a cycle whose table was not published (an operator's override, the OPE gate), so the
    state named as incumbent a configuration no edge served as the group's main choice, and the one edges did serve
    was no longer the one the rollback test watched (found by review). Now a held table leaves the incumbents as the
    last published table has them, and the next published cycle switches them."""
    from tailor.manager.service import Manager

    fast = OTHER[0]
    mgr = Manager(cfg(tmp_path, policy="mab-nc", policy_params=(("epsilon", 0.3),)), clock=lambda: T0)
    edge = SyntheticEdge(PREFIXES, factor=lambda p, c: 0.5 if c == fast else 1.0, seed=5)
    edge.apply(mgr.current.doc)
    assert mgr.ingest(batch(edge.records(1500, T0))).status == 202
    assert mgr.run_cycle(now=T0 + 99).published
    frozen = copy.deepcopy(mgr.current.doc)  # the operator serves half of every group with the fast configuration
    for g in frozen["groups"]:
        g["choices"] = [{"config": DEFAULT, "p": 0.5}, {"config": fast, "p": 0.5}]
    frozen["configs"][fast] = mgr.knobs[fast]
    held = mgr.override(frozen, "op", "freeze")
    edge.apply(mgr.current.doc)
    assert mgr.ingest(batch(edge.records(3000, T0 + 100))).status == 202
    before = dict(mgr.guard.incumbent)
    summary = mgr.run_cycle(now=T0 + 199)
    assert not summary.published and mgr.current.version == held.version
    assert mgr.guard.incumbent == before  # nothing the policy chose was served
    mgr.clear_override("op", "done")
    summary = mgr.run_cycle(now=T0 + 299)
    assert summary.published
    switched = {g for g, c in mgr.guard.incumbent.items() if c == fast}
    assert switched  # the evidence of the held cycle switches them once a table is published
    greedy_of = {g["id"]: max(g["choices"], key=lambda c: c["p"])["config"] for g in mgr.current.doc["groups"]}
    assert all(greedy_of[g] == fast for g in switched)
    mgr.close()


def test_a_client_address_must_be_an_address_and_a_deep_body_is_refused(tmp_path):
    """The schema bounds ``client_addr`` by length only: a lone surrogate ("\\ud800") passed, the store could not
    encode it, and the batch failed with 503 forever (a bus worker redelivered it without end; found by review,
    2026-12-07). It is now refused with the field named, and the batch's other records are stored. A body nested
    too deeply for the JSON parser is one clear 400 (a bus worker died on its RecursionError)."""
    from tailor.manager.service import Manager

    mgr = Manager(cfg(tmp_path), clock=lambda: T0)
    records = [record(0, client_addr="\ud800"), record(1, client_addr="10.1.2.x"), record(2, client_addr="10.1.2.7"),
               record(3, client_addr="2001:db8::1")]
    r = mgr.ingest(json.dumps({"schema": "tailor.telemetry/v1", "source": "edge-t", "dropped": 0,
                               "records": records}).encode())
    assert r.status == 202 and r.accepted == 2 and r.rejected == 2
    assert all("client_addr" in e and "is not an IP address" in e for e in r.reasons)
    deep = mgr.ingest(b"[" * 100_000 + b"]" * 100_000)
    assert deep.status == 400 and deep.reasons == ["telemetry field (root): body is nested too deeply"]
    mgr.close()


def test_an_ipv4_mapped_prefix_is_its_ipv4_prefix_and_no_table_carries_one(tmp_path):
    """Python spells the IPv4-mapped network of 10.1.2.0/24 '::ffff:a01:200/120', Go's edges '::ffff:10.1.2.0/120'
    and refuse the other spelling: one forged record with that client_prefix put a rule every edge refused into
    every table from then on (found by review, 2026-12-07). Such a prefix is now the IPv4 prefix it maps (edges unmap
    client addresses), and a table rule inside ::ffff:0:0/96 is refused, an operator's too."""
    from tailor.manager.service import Manager

    mgr = Manager(cfg(tmp_path), clock=lambda: T0)
    r = mgr.ingest(batch([record(0, client_prefix="::ffff:10.1.2.0/120"), record(1, client_prefix="::ffff:10.1.3.9")]))
    assert r.status == 202 and r.accepted == 2
    mgr.flush()
    assert sorted(p for (p,) in mgr.store.query("SELECT client_prefix FROM telemetry")) == ["10.1.2.0/24", "10.1.3.9/32"]
    doc = copy.deepcopy(mgr.current.doc)
    doc["rules"] = [{"prefix": "::ffff:a01:200/120", "group": doc["groups"][0]["id"]}]
    with pytest.raises(TableError, match="IPv4-mapped prefix"):
        mgr.override(doc, "op", "a mapped rule")
    # learned state from before keeps such a prefix in its archive: the cycle leaves it out of the table (it
    # failed every cycle, and quarantined good records, with the validation alone; found by review)
    mgr.archive.update("::ffff:a01:200/120", T0, 5.0, 0.0, 50.0)
    mgr.ingest(batch([record(i) for i in range(3, 60)]))
    mgr.run_cycle(now=T0 + 99)
    assert mgr.health.quarantined == 0 and not any(r["prefix"].startswith("::ffff:") for r in mgr.current.doc["rules"])
    mgr.close()


def test_override_parameters_salt_and_error_sizes_are_bounded(tmp_path):
    """Found by review (2026-12-07), each accepted before: a hold of nan or -5 s pinned an override for good; an
    operator's reason of any length went to the audit log; an override without the manager's cohort salt (or with
    another) re-drew every client's holdback membership; a body nested too deeply answered 500; an error quoted a
    megabyte value back in full."""
    app = create_app(cfg(tmp_path))
    with TestClient(app, headers=AUTH) as c:
        table = c.get("/v1/table").json()
        salt = table["salt"]
        for hold in ("nan", "-5", "inf"):
            r = c.post(f"/v1/table?hold_s={hold}", json=table, headers=AUTH)
            assert r.status_code == 400 and "hold_s" in r.json()["error"], hold
        r = c.post("/v1/table", json=table, headers={**AUTH, "X-Tailor-Reason": "x" * 5000})
        assert r.status_code == 400 and "reason" in r.json()["error"]
        other = dict(copy.deepcopy(table), salt="ab" * 16)
        r = c.post("/v1/table", json=other, headers=AUTH)
        assert r.status_code == 400 and "field salt" in r.json()["error"]
        unsalted = {k: v for k, v in copy.deepcopy(table).items() if k != "salt"}
        assert c.post("/v1/table", json=unsalted, headers=AUTH).status_code == 200
        assert c.get("/v1/table").json()["salt"] == salt
        r = c.post("/v1/table", content=b"[" * 5000 + b"]" * 5000, headers=AUTH)
        assert r.status_code == 400 and "nested too deeply" in r.json()["error"]
        r = c.post("/v1/table", json=dict(copy.deepcopy(table), version="V" * 1_000_000), headers=AUTH)
        assert r.status_code == 400 and "version" in r.json()["error"] and len(r.content) < 1000
        r = c.post("/v1/telemetry", content=batch([record(0, time="C" * 1_000_000)]), headers=AUTH)
        assert r.status_code == 400 and "records[0].time" in r.json()["errors"][0] and len(r.content) < 1000


# -- the rollback test under an operator's override
OWN = Configuration({"tcp.initial_cwnd": 7})  # an operator's configuration outside the manager's space (core)
ZONES = {"g-slow": "10.0", "g-own": "10.1", "g-fine": "10.2"}  # group -> the /16 of its clients


def pin_override(c, main: dict[str, str], minor: dict[str, str] | None = None) -> dict:
    """POST an operator's table whose group g gives main[g] 0.9 and the default 0.1 (with ``minor[g]``: main[g]
    0.6, minor[g] 0.3, the default 0.1); returns the published table."""
    minor = minor or {}
    table = copy.deepcopy(c.get("/v1/table").json())
    table["configs"] = {DEFAULT: {}, **{cid: dict(SPACE.configs[SPACE.index_of(cid)].changes()) if cid != OWN.id
                                        else dict(OWN.changes()) for cid in [*main.values(), *minor.values()]}}
    table["groups"] = [{"id": g, "choices": [{"config": DEFAULT, "p": 0.1}, {"config": cid, "p": 0.9}]
                        if g not in minor else [{"config": DEFAULT, "p": 0.1}, {"config": cid, "p": 0.6},
                                                {"config": minor[g], "p": 0.3}]}
                       for g, cid in main.items()]
    table["rules"] = [{"prefix": f"{ZONES[g]}.0.0/16", "group": g} for g in main]
    r = c.post("/v1/table", json=table, headers={**AUTH, "X-Tailor-Reason": "incident 7"})
    assert r.status_code == 200, r.text
    return c.get("/v1/table").json()


def serve(c, edge, n, t, cycle_at):
    """The edge applies the current table, reports n page loads from time t; a cycle runs at cycle_at."""
    edge.apply(c.get("/v1/table").json())
    assert c.post("/v1/telemetry", content=batch(edge.records(n, t)),
                  headers=AUTH).status_code == 202
    return c.app.state.manager.run_cycle(now=cycle_at)


def override_edge(factors: dict[str, float], seed: int) -> SyntheticEdge:
    prefixes = [f"{z}.{j}.0/24" for z in ZONES.values() for j in range(10)]
    return SyntheticEdge(prefixes, factor=lambda p, cid: factors.get(cid, 1.0), seed=seed)


def audit_rows(mgr, action: str) -> list[tuple]:
    return mgr.store.query("SELECT version, actor, reason FROM audit WHERE action = ? ORDER BY ts, reason", [action])


def counter(mgr, name: str) -> float:
    line = next(x for x in mgr.metrics.render().decode().splitlines() if x.startswith(name + " "))
    return float(line.split()[1])


def test_an_override_slower_than_holdback_is_found_audited_once_and_left_pinned(tmp_path):
    """Until 2026-12-07 the rollback test watched only the policy's incumbents: under an operator's override the
    edges served the operator's table and nothing noticed a group it made slower than its holdback (and records of
    an operator's configuration outside the space were 'foreign', kept by no guardrail). Now the same test runs on
    the pinned table's main choices: each finding is audited once per override, counted, on /healthz and the
    dashboard, and by default (--override-rollback alert) the operator's table stays as it is."""
    slow = OTHER[0]
    main = {"g-slow": slow, "g-own": OWN.id, "g-fine": OTHER[1]}
    edge = override_edge({slow: 1.4, OWN.id: 1.4}, seed=11)
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        mgr = c.app.state.manager
        pinned = pin_override(c, main)
        serve(c, edge, 3000, T0, T0 + 99)
        found = audit_rows(mgr, "override-regression")
        assert [(v, actor) for v, actor, _ in found] == [(pinned["version"], "guardrail")] * 2, found
        reasons = sorted(r for _, _, r in found)
        assert reasons[0].startswith(f"override-regression: {slow} is ") and " in g-slow (n=" in reasons[0]
        assert reasons[1].startswith(f"override-regression: {OWN.id} is ") and " in g-own (n=" in reasons[1]
        assert all("% slower than holdback" in r and "--override-rollback alert" in r for r in reasons)
        assert counter(mgr, "tailor_override_regressions_total") == 2
        health = c.get("/healthz").json()
        assert health["status"] == "degraded" and any("override table serves 2" in p for p in health["problems"])
        assert {(f["group"], f["config"], f["action"]) for f in health["override_regressions"]} == {
            ("g-slow", slow, "alert"), ("g-own", OWN.id, "alert")}
        assert all(0.25 < f["slower"] < 0.55 for f in health["override_regressions"])
        assert "Override regressions" in c.get("/").text
        now = c.get("/v1/table").json()
        assert now == pinned and mgr.override_active(T0 + 99)  # the operator's table, untouched and still pinned
        serve(c, edge, 3000, T0 + 100, T0 + 199)  # more evidence, same override: no second alert
        assert len(audit_rows(mgr, "override-regression")) == 2 and counter(mgr, "tailor_override_regressions_total") == 2
        assert c.get("/v1/table").json() == pinned
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:  # a restart remembers what this override found
        mgr = c.app.state.manager
        mgr.run_cycle(now=T0 + 249)
        assert len(audit_rows(mgr, "override-regression")) == 2 and len(c.get("/healthz").json()["override_regressions"]) == 2
        assert c.delete("/v1/table/override", headers=AUTH).status_code == 200
        assert c.get("/healthz").json()["override_regressions"] == []
        pin_override(c, main)  # a new override is watched afresh, on the evidence gathered under it only
        mgr.run_cycle(now=T0 + 299)
        assert len(audit_rows(mgr, "override-regression")) == 2 and c.get("/healthz").json()["override_regressions"] == []
        serve(c, edge, 3000, T0 + 300, T0 + 399)
        assert len(audit_rows(mgr, "override-regression")) == 4 and counter(mgr, "tailor_override_regressions_total") == 2


def test_override_rollback_apply_moves_the_mass_to_the_default_and_keeps_the_pin(tmp_path):
    from tailor.cli import _build_parser
    from tailor.manager.server import config_from_args

    args = _build_parser().parse_args(["manager", "--data", str(tmp_path / "x"), "--override-rollback", "apply"])
    assert config_from_args(args, environ={"TAILOR_TOKEN": TOKEN}).override_rollback == "apply"
    assert ManagerConfig(data_dir="x", insecure_dev=True).override_rollback == "alert"  # the default
    with pytest.raises(ParameterError, match="override_rollback"):
        ManagerConfig(data_dir="x", insecure_dev=True, override_rollback="rewrite")
    slow = OTHER[0]
    main = {"g-slow": slow, "g-own": OWN.id, "g-fine": OTHER[1]}
    edge = override_edge({slow: 1.4, OWN.id: 1.4}, seed=11)
    with TestClient(create_app(cfg(tmp_path, override_rollback="apply")), headers=AUTH) as c:
        mgr = c.app.state.manager
        pinned = pin_override(c, main)
        summary = serve(c, edge, 3000, T0, T0 + 99)
        assert summary.published and summary.rollbacks == 2
        now = c.get("/v1/table").json()
        assert now["version"] == pinned["version"] + 1 and mgr.current.origin == "operator"
        groups = {g["id"]: g["choices"] for g in now["groups"]}
        assert groups["g-slow"] == [{"config": DEFAULT, "p": 1.0}] and groups["g-own"] == [{"config": DEFAULT, "p": 1.0}]
        assert groups["g-fine"] == next(g["choices"] for g in pinned["groups"] if g["id"] == "g-fine")
        assert now["rules"] == pinned["rules"] and now["salt"] == pinned["salt"]
        (version, actor, reason), = audit_rows(mgr, "rollback")
        assert (version, actor) == (now["version"], "guardrail") and "g-slow: override-regression: " in reason
        assert "still pinned" in reason
        assert len(audit_rows(mgr, "override-regression")) == 2 and counter(mgr, "tailor_override_regressions_total") == 2
        health = c.get("/healthz").json()
        assert {f["action"] for f in health["override_regressions"]} == {"apply"}
        assert not any("override table serves" in p for p in health.get("problems", []))
        assert mgr.override_active(T0 + 199)
        summary = serve(c, edge, 3000, T0 + 100, T0 + 199)  # the pin stays: the policy's table is not published
        assert not summary.published and c.get("/v1/table").json() == now
        assert len(audit_rows(mgr, "rollback")) == 1 and len(audit_rows(mgr, "override-regression")) == 2


def test_an_override_watches_every_configuration_it_serves_not_only_the_main_one(tmp_path):
    """A configuration holding a minority of a group's mass (0.3 beside a fine main one at 0.6) that is slower than
    holdback is found too, at the group's alpha split over its two tested configurations; the fine main one is not.
    (Until 2026-12-07 only the main configuration was tested: found by review.)"""
    slow, fine = OTHER[0], OTHER[1]
    edge = override_edge({slow: 1.4}, seed=13)
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        mgr = c.app.state.manager
        pin_override(c, {"g-slow": fine, "g-own": fine, "g-fine": fine}, minor={"g-slow": slow})
        for k in range(3):
            serve(c, edge, 3000, T0 + 100 * k, T0 + 100 * k + 99)
        assert mgr.guard.treated["g-slow"][slow].n > 150  # the minority's evidence
        found = {(f["group"], f["config"]) for f in c.get("/healthz").json()["override_regressions"]}
        assert found == {("g-slow", slow)}, found


def test_the_override_watch_counts_only_the_evidence_gathered_under_the_override():
    """A configuration with much good evidence from before the override, slower than holdback since the override
    began: found on the evidence since (``since``, the guardrails' state copied at the override's start), not on
    everything ever recorded, where the old records hide it. Holdback's side is the override's period too."""
    from tailor.manager.guardrails import check_override

    rng = np.random.default_rng(5)
    state, gcfg = GuardState(), GuardConfig()
    table = {"default": DEFAULT, "groups": [{"id": "g", "choices": [{"config": DEFAULT, "p": 0.1},
                                                                     {"config": OTHER[0], "p": 0.9}]}]}
    for _ in range(20_000):  # weeks of evidence: as fast as holdback
        state.observe("g", OTHER[0], float(rng.lognormal(6.0, 0.5)), holdback=False)
    for _ in range(2_000):
        state.observe("g", DEFAULT, float(rng.lognormal(6.0, 0.5)), holdback=True)
    base = state.copy()
    for _ in range(300):  # under the override: 30% slower
        state.observe("g", OTHER[0], float(rng.lognormal(6.0 + math.log(1.3), 0.5)), holdback=False)
    for _ in range(100):
        state.observe("g", DEFAULT, float(rng.lognormal(6.0, 0.5)), holdback=True)
    assert check_override(table, state, gcfg) == []  # the old evidence dilutes the slowdown to about 0.4%
    (found,) = check_override(table, state, gcfg, since=base)
    assert found["config"] == OTHER[0] and found["n"] == 300 and found["n_holdback"] == 100
    assert 0.15 < found["slower"] < 0.45, found
    assert base.treated["g"][OTHER[0]].n == 20_000  # the copy is not the live state


def test_records_decided_under_an_earlier_table_are_not_the_overrides_evidence(tmp_path):
    """A record carries the table version its edge decided with. Until 2026-12-07 (evening) the override's evidence was
    every record stored after it began, so records decided under the earlier table, arriving late (an edge's queue,
    a bus), counted as the override's: here 6,000 of them, as fast as holdback, hide a configuration the override made
    30% slower. The feeder adds such records to the override's base as well, so check_override sees only the
    override's own. Then the manager's wiring: the override's first version and base are saved and restored."""
    from tailor.grouping import PrefixArchive
    from tailor.manager.feed import Feeder
    from tailor.manager.guardrails import check_override
    from tailor.policies import PolicyEnv, make_policy

    rng = np.random.default_rng(9)
    archive = PrefixArchive(0.3)
    policy = make_policy("tailor", seed=0).reset(SPACE, PolicyEnv(archive=archive))
    table = {"default": DEFAULT, "groups": [{"id": "g", "choices": [{"config": DEFAULT, "p": 0.1},
                                                                     {"config": OTHER[0], "p": 0.9}]}]}

    def rows(seq0, n, cid, factor, hold, version):  # the feed's columns, then the record's table version
        return [(seq0 + k, T0 + seq0 + k, "10.1.2.0/24", None, "g", cid, 1.0, hold, "shop.example", "desktop",
                 float(rng.lognormal(6.0 + math.log(factor), 0.4)), 80.0, 5.0, 0.0, 100_000, None, None, version)
                for k in range(n)]

    found = {}
    for watched in (False, True):
        state = GuardState()
        watch = {}
        feeder = Feeder(policy, archive, state, override_watch=lambda watch=watch: watch.get("w"))
        feeder.set_policy_table(table)
        feeder.feed(rows(0, 2000, OTHER[0], 1.0, False, 3) + rows(2000, 500, DEFAULT, 1.0, True, 3))
        base = state.copy()
        if watched:
            watch["w"] = (4, base)  # the override is version 4
        late = rows(3000, 6000, OTHER[0], 1.0, False, 3)  # decided under version 3, stored after the override began
        own = rows(10_000, 400, OTHER[0], 1.3, False, 4) + rows(11_000, 150, DEFAULT, 1.0, True, 4)
        order = rng.permutation(len(late) + len(own))
        feeder.feed([(late + own)[k] for k in order])
        found[watched] = check_override(table, state, GuardConfig(), since=base)
        assert state.treated["g"][OTHER[0]].n == 8400  # the live statistics keep every record
    assert found[False] == []  # the late records dilute the override's 30% to about 4%
    (hit,) = found[True]
    assert hit["config"] == OTHER[0] and hit["n"] == 400 and hit["n_holdback"] == 150 and hit["slower"] > 0.15, hit

    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        mgr = c.app.state.manager
        assert mgr._override_watch() is None
        pinned = pin_override(c, {"g-slow": OTHER[0]})
        version, base = mgr._override_watch()
        assert version == pinned["version"] and base is mgr.override_base
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:  # restarted: the watch is restored with the state
        mgr = c.app.state.manager
        assert mgr._override_watch()[0] == pinned["version"]
        c.delete("/v1/table/override", headers={**AUTH, "X-Tailor-Reason": "done"})
        assert mgr._override_watch() is None


def test_late_records_of_the_earlier_table_do_not_hide_an_overrides_regression_end_to_end(tmp_path):
    """The same through the API and the store: an operator pins a table, edges serve it (fast), the operator pins
    another one under which the configuration is 30% slower; the first table's records arrive only after that. The
    cycle reads each record's table_version from the store (FEED_SQL): the late records stay out of the second
    override's evidence, and the regression is found."""
    main = {"g-slow": OTHER[0]}
    before, after = override_edge({}, seed=21), override_edge({OTHER[0]: 1.3}, seed=22)
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        mgr = c.app.state.manager
        first = pin_override(c, main)
        before.apply(first)
        late = [before.batch(2500, T0 + 3 * k) for k in range(4)]  # decided under the first, not yet delivered
        second = pin_override(c, main)
        assert second["version"] > first["version"]
        after.apply(second)
        own = after.batch(1500, T0 + 20)
        for b in [*late, own]:
            assert c.post("/v1/telemetry", content=json.dumps(b), headers=AUTH).status_code == 202
        mgr.run_cycle(now=T0 + 99)
        found = audit_rows(mgr, "override-regression")
        assert [(v, actor) for v, actor, _ in found] == [(second["version"], "guardrail")], found
        n_own = sum(r.get("group") == "g-slow" and r["config_id"] == OTHER[0] and not r["holdback"] for r in own["records"])
        assert f" in g-slow (n={n_own} vs " in found[0][2], (n_own, found)  # the second table's records alone
        assert mgr.guard.treated["g-slow"][OTHER[0]].n > 4 * n_own  # the live statistics hold the late ones too


def test_an_override_survives_a_lost_table_store_above_its_first_version(tmp_path):
    """The watch tells an override's records by their table version, so the override's tables must stay above its
    first version: a data directory whose table store is gone (state.pkl kept) restarts its versions above it, not
    at 1 (where every record of the override's own tables would read as decided before it)."""
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        pinned = pin_override(c, {"g-slow": OTHER[0]})
    (tmp_path / "data" / "tailor.duckdb").unlink()
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH) as c:
        mgr = c.app.state.manager
        assert mgr._override_watch()[0] == pinned["version"] and mgr.current.version > pinned["version"]


def test_an_override_that_fails_to_publish_leaves_no_override_behind(tmp_path, monkeypatch):
    """Until 2026-12-07 (evening) the override's hold was set before its table was published: a publication that
    failed (here the store refusing the write) left the manager pinned for good to the policy's table, every later
    policy table held back. Now nothing of the override is kept, and the next cycle publishes."""
    from tailor.manager.store import StoreError

    edge = override_edge({}, seed=23)
    with TestClient(create_app(cfg(tmp_path)), headers=AUTH, raise_server_exceptions=False) as c:
        mgr = c.app.state.manager
        version = mgr.current.version

        def refuse(*args, **kwargs):
            raise StoreError("disk full")

        with monkeypatch.context() as m:
            m.setattr(mgr.store, "save_table", refuse)
            table = copy.deepcopy(c.get("/v1/table").json())
            r = c.post("/v1/table", json=table, headers={**AUTH, "X-Tailor-Reason": "incident 8"})
        assert r.status_code >= 500 and mgr.current.version == version
        assert mgr.override_until is None and mgr._override_watch() is None and not mgr.override_active(T0)
        serve(c, edge, 3000, T0, T0 + 99)
        assert mgr.current.version > version and mgr.current.origin == "policy"


@pytest.mark.parametrize("mode", ["alert", "apply"])
def test_an_override_as_fast_as_holdback_raises_nothing(tmp_path, mode):
    main = {"g-slow": OTHER[0], "g-own": OWN.id, "g-fine": OTHER[1]}
    edge = override_edge({}, seed=12)  # every configuration as fast as the default
    conf = cfg(tmp_path) if mode == "alert" else cfg(tmp_path, override_rollback=mode)  # alert: the default
    with TestClient(create_app(conf), headers=AUTH) as c:
        mgr = c.app.state.manager
        pinned = pin_override(c, main)
        for k in range(4):
            serve(c, edge, 3000, T0 + 100 * k, T0 + 100 * k + 99)
        for g, cid in main.items():  # the test had its evidence, the operator's own configuration included
            assert mgr.guard.treated[g][cid].n > 2000 and mgr.guard.holdback[g].n > 500, (g, cid)
        assert audit_rows(mgr, "override-regression") == [] and audit_rows(mgr, "rollback") == []
        assert counter(mgr, "tailor_override_regressions_total") == 0
        health = c.get("/healthz").json()
        assert health["override_regressions"] == [] and health["status"] == "ok", health
        assert c.get("/v1/table").json() == pinned and "Override regressions" not in c.get("/").text
