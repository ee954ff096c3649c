"""Manager benchmarks: ingestion rate (validation + queue + DuckDB), update-cycle time with 1M stored
records and ~1,000 groups, and table publication latency (long-poll wake-up). Prints one JSON object.

    PYTHONPATH=src .venv/bin/python bench/manager_ingest.py [--records 1000000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import numpy as np

from tailor.manager.api import create_app
from tailor.manager.config import ManagerConfig
from tailor.manager.service import Manager
from tailor.manager.synth import SyntheticEdge
from tailor.manager.testing import LiveServer
from tailor.space import ConfigSpace

T0 = 1_795_000_000.0
TOKEN = "bench"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EDGE_TOKEN = "bench-edge"  # telemetry is accepted from edge credentials only (docs/security.md)
EDGE_AUTH = {"Authorization": f"Bearer {EDGE_TOKEN}", "Content-Type": "application/json"}


def edge(n_prefixes: int, n_sites: int, seed: int = 0) -> SyntheticEdge:
    space = ConfigSpace.named("core")
    rng = np.random.default_rng(seed)
    factors = {c.id: float(rng.uniform(0.7, 1.4)) for c in space.configs}
    prefixes = [f"10.{i // 250}.{i % 250}.0/24" for i in range(n_prefixes)]
    e = SyntheticEdge(prefixes, sites=[f"site{k}.example" for k in range(n_sites)], factor=lambda p, c: factors[c],
                      seed=seed, base_ms={p: 300.0 * (1 + i % 9) for i, p in enumerate(prefixes)})
    table = {"schema": "tailor.decision-table/v1", "version": 1, "generated_at": 0.0, "holdback": 0.2,
             "default": space.configs[space.default_index].id,
             "configs": {c.id: dict(c.changes()) for c in space.configs}, "groups": [], "rules": []}
    e.apply(table)
    return e


def bench_ingest(tmp: str, n_batches: int, size: int) -> dict:
    mgr = Manager(ManagerConfig(data_dir=os.path.join(tmp, "ingest"), token=TOKEN, update_freq_s=0))
    src = edge(500, 20)
    bodies = [json.dumps(src.batch(size, T0 + k)).encode() for k in range(n_batches)]
    started, cpu = time.perf_counter(), time.process_time()
    for body in bodies:
        assert mgr.ingest(body).status == 202
        mgr.flush()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    n = n_batches * size
    assert mgr.store.telemetry_count() == n
    validate = _time_validation(bodies[0])
    mgr.close()
    return {"records": n, "batch_size": size, "bytes_per_record": round(len(bodies[0]) / size),
            "records_per_s_wall": round(n / wall), "records_per_s_cpu": round(n / cpu),
            "parse_and_validate_us_per_record": round(validate * 1e6 / size, 2)}


def _time_validation(body: bytes) -> float:
    from tailor.manager.ingest import parse_and_check

    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        parse_and_check(body)
        best = min(best, time.perf_counter() - t)
    return best


def bench_http_ingest(tmp: str, n_batches: int, size: int) -> dict:
    app = create_app(ManagerConfig(data_dir=os.path.join(tmp, "http"), token=TOKEN, edge_tokens=(EDGE_TOKEN,),
                                   update_freq_s=0))
    bodies = [json.dumps(edge(500, 20, seed=k).batch(size, T0 + k)).encode() for k in range(n_batches)]
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        started = time.perf_counter()
        for body in bodies:
            assert c.post("/v1/telemetry", content=body, headers=EDGE_AUTH).status_code == 202
        wall = time.perf_counter() - started
    return {"records": n_batches * size, "records_per_s_wall": round(n_batches * size / wall)}


def bench_cycle(tmp: str, n_records: int, new_records: int) -> dict:
    """Store n_records (fed once: the catch-up cycle), then time a cycle over new_records more."""
    cfg = ManagerConfig(data_dir=os.path.join(tmp, "cycle"), token=TOKEN, update_freq_s=0, seed=1)
    mgr = Manager(cfg)
    src, chunk, t = edge(2000, 50), 100_000, T0
    for k in range(0, n_records, chunk):
        recs = src.records(min(chunk, n_records - k), t, dt=0.001)
        t += chunk * 0.001
        mgr.written_seq = mgr.store.insert_telemetry([("bench", t, recs)], mgr.written_seq)
    started = time.perf_counter()
    first = mgr.run_cycle(now=t + 1)
    catch_up = time.perf_counter() - started
    src.apply(mgr.current.doc)
    recs = src.records(new_records, t + 2, dt=0.001)
    mgr.written_seq = mgr.store.insert_telemetry([("bench", t + 2, recs)], mgr.written_seq)
    started = time.perf_counter()
    second = mgr.run_cycle(now=t + 3 + new_records * 0.001)
    steady = time.perf_counter() - started
    out = {"stored_records": mgr.store.telemetry_count(), "groups": second.groups, "rules": len(mgr.current.doc["rules"]),
           "prefixes": len(mgr.archive), "catch_up_cycle_s": round(catch_up, 2), "catch_up_rows": first.rows,
           "cycle_s": round(steady, 2), "cycle_new_rows": second.rows}
    out.update(_cycle_parts(mgr, t + 10))
    mgr.close()
    return out


def _cycle_parts(mgr: Manager, now: float) -> dict:
    """Where a cycle without new rows spends its time (plan+guardrails, retention, snapshot)."""
    parts = {}
    from tailor.table import compile_table

    for name, fn in (("plan_s", lambda: mgr.policy.plan(now, compile=False)),
                     ("compile_fast_s", lambda: compile_table(mgr.policy, now, 1, mgr.archive)),
                     ("compile_table_jsonschema_s", lambda: compile_table(mgr.policy, now)), ("snapshot_s", mgr.snapshot),
                     ("retention_s", lambda: mgr.store.delete_before(now - 7 * 86400)),
                     ("save_prefixes_s", lambda: mgr.store.save_prefixes(mgr.archive))):
        t = time.perf_counter()
        fn()
        parts[name] = round(time.perf_counter() - t, 3)
    return parts


def bench_publication(tmp: str, rounds: int) -> dict:
    app = create_app(ManagerConfig(data_dir=os.path.join(tmp, "pub"), token=TOKEN, update_freq_s=0))
    lat = []
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=60, headers=AUTH) as c, \
            httpx.Client(base_url=url, timeout=60, headers=AUTH) as w:
        table = c.get("/v1/table").json()
        for k in range(rounds):
            version, result = c.get("/v1/table").json()["version"], {}

            def poll():  # runs and is joined within this round, so the round's version and result are the ones bound
                result["r"] = w.get(f"/v1/table?wait=30&version={version}")  # noqa: B023
                result["t"] = time.perf_counter()  # noqa: B023

            th = threading.Thread(target=poll)
            th.start()
            time.sleep(0.05)
            doc = dict(table, groups=table["groups"] + [{"id": f"bench{k}", "choices": [{"config": table["default"], "p": 1.0}]}])
            sent = time.perf_counter()
            assert c.post("/v1/table", json=doc, headers=AUTH).status_code == 200
            th.join()
            assert result["r"].json()["version"] == version + 1
            lat.append(result["t"] - sent)
    return {"rounds": rounds, "median_s": round(statistics.median(lat), 4), "max_s": round(max(lat), 4),
            "note": "operator POST /v1/table -> long-polling GET /v1/table?wait=30 returns the new version"}


def metadata() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    return {"commit": commit, "date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "argv": sys.argv[1:]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=1_000_000, help="stored records for the cycle benchmark")
    p.add_argument("--new", type=int, default=50_000, help="new records fed by the timed cycle")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = p.parse_args()
    n_rec, n_new, batches = (50_000, 5_000, 5) if args.quick else (args.records, args.new, 30)
    with tempfile.TemporaryDirectory() as tmp:
        out = {"bench": "manager_ingest", **metadata(),
               "ingest": bench_ingest(tmp, batches, 10_000),
               "ingest_http": bench_http_ingest(tmp, max(batches // 3, 2), 10_000),
               "publication_latency": bench_publication(tmp, 20),
               "update_cycle": bench_cycle(tmp, n_rec, n_new)}
    out["targets"] = {"ingest_records_per_s": 50_000, "update_cycle_s": 10, "publication_s": 1}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
