"""Telemetry records/s through the bus into 1, 2 and 3 manager shards, measured in one run (issue 15).

    PYTHONPATH=src .venv/bin/python bench/bus/throughput.py [--records 200000] [--shards 1 2 3] [--out FILE]

For each shard count, on a fresh nats-server (file storage, authenticated users, loopback): the shards start
(``tailor manager --bus``, one process each, update cycle every 2 s, policy ``--policy``) and the bench waits
until every partition is owned and the ownership has not changed for 3 s (hand-overs done); then ``--records``
page-load records over 4,096 /24s are published as edge batches of 500 records to ``tailor.tel.bench.<p>``
(6 partitions, one publisher awaiting every acknowledgement) and the clock runs from the first publication to
the moment every partition's durable consumer has delivered every message and holds none unacknowledged (a shard
acknowledges a batch only after the learned state that folds it is durably written). Records/s = records / that time. The scaling ratio is each count's rate over the 1-shard rate, all
measured in the same run. The machine's load is recorded before and after; run it with nothing else running.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tailor.bus import testing as T
from tailor.bus.natsd import NatsServer

SRC = str(Path(__file__).resolve().parents[2] / "src")
PARTITIONS = 6


async def _publish(server: NatsServer, n: int) -> float:
    nc = await T.connect(server.url, "manager", server.password("manager"))
    try:
        from tailor.bus import setup as S

        js = nc.jetstream()
        await S.ensure_stream(js)
        pub = T.EdgePublisher(js, source="bench-edge", pop="bench")
        t0 = time.monotonic()
        recs = T.records(n, prefixes=4096)
        for p, rs in T.group(recs, PARTITIONS, chunk=500):
            await pub.publish(p, rs)
        return n / (time.monotonic() - t0)
    finally:
        await nc.close()


async def _settled(server: NatsServer, shards: list[str], timeout: float) -> float:
    """Seconds until every partition is owned by ``shards`` and the ownership was unchanged for 3 s."""
    nc = await T.connect(server.url, "manager", server.password("manager"))
    js = nc.jetstream()
    t0, deadline = time.monotonic(), time.monotonic() + timeout
    try:
        last, since = None, None
        while time.monotonic() < deadline:
            hb = await T.heartbeats(js)
            owners = {p: s for s in shards for p in hb.get(s, {}).get("partitions", [])}
            if sorted(owners) == list(range(PARTITIONS)) and len(set(owners.values())) == len(shards):
                if owners != last:
                    last, since = owners, time.monotonic()
                elif time.monotonic() - since >= 3.0:
                    return since - t0
            await asyncio.sleep(0.2)
        raise RuntimeError(f"ownership did not settle within {timeout} s")
    finally:
        await nc.close()


async def _drained(server: NatsServer, timeout: float) -> float:
    nc = await T.connect(server.url, "manager", server.password("manager"))
    js = nc.jetstream()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await T.all_acked(js, PARTITIONS):
                return time.monotonic()
            await asyncio.sleep(0.1)
        raise RuntimeError(f"not every record folded within {timeout} s")
    finally:
        await nc.close()


def run_one(k: int, n: int, policy: str, tmp: Path) -> dict:
    server = NatsServer(tmp / f"nats-{k}").start()
    procs = []
    try:
        key = tmp / "signing.key"
        if not key.exists():
            key.write_bytes(Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        ids = [f"s{k}-{i}" for i in range(k)]
        for sid in ids:
            cmd = [sys.executable, "-m", "tailor", "manager", "--bus", server.url, "--shard-id", sid,
                   "--bus-user", "manager", "--bus-password-file", str(server.info["users"]["manager"]),
                   "--data", str(tmp / f"data-{k}" / sid), "--signing-key", str(key), "--update-freq", "2",
                   "--partitions", str(PARTITIONS), "--policy", policy]
            log = open(tmp / f"{sid}.log", "ab")
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                          env=dict(os.environ, PYTHONPATH=SRC)))
            log.close()
        startup = asyncio.run(_settled(server, ids, timeout=120))
        t0 = time.monotonic()
        publish_rate = asyncio.run(_publish(server, n))
        done_at = asyncio.run(_drained(server, timeout=900))
        return {"shards": k, "records": n, "records_per_s": n / (done_at - t0), "seconds": done_at - t0,
                "startup_s": startup, "publish_records_per_s": publish_rate}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--shards", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--policy", default="configanator")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "python": platform.python_version(), "cpus": os.cpu_count(),
            "load1_start": os.getloadavg()[0], "partitions": PARTITIONS, "policy": a.policy,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailor-bus-bench-") as tmp:
        for k in a.shards:
            rows.append(run_one(k, a.records, a.policy, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["records_per_s"]
    for r in rows:
        r["ratio_to_first"] = r["records_per_s"] / base
    meta["load1_end"] = os.getloadavg()[0]
    doc = {"meta": meta, "rows": rows}
    print("| shards | records/s | ratio | seconds | start-up s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shards']} | {r['records_per_s']:,.0f} | {r['ratio_to_first']:.2f} | {r['seconds']:.1f} | "
              f"{r['startup_s']:.1f} |")
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
