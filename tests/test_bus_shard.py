"""Manager shards on a real nats-server (started by each test on loopback, killed in teardown).

Shards run as subprocesses (``python -m tailor manager --bus ...``) with ``--update-freq 1`` and the hidden
``--bus-ack-wait`` (consumers' ack wait, 30 s in production) at 1-2 s so that a redelivery is quick.
"""

import asyncio
import contextlib
import json
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tailor.bus import testing as T
from tailor.bus.natsd import NatsServer, nats_server_binary
from tailor.bus.partition import assignment, partition
from tailor.manager.signing import load_public_keys, verify

pytestmark = pytest.mark.skipif(nats_server_binary() is None,
                                reason="needs nats-server (apt-get install nats-server; Debian's is /usr/sbin/nats-server)")
SRC = str(Path(__file__).resolve().parents[1] / "src")


class Bus:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.server = NatsServer(tmp / "nats").start()
        self.url = self.server.url
        self.key = tmp / "signing.key"
        self.private = Ed25519PrivateKey.generate()
        self.key.write_bytes(self.private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
        self.procs: dict[str, subprocess.Popen] = {}

    def shard(self, sid: str, partitions: int, ack_wait: float = 2.0, env: dict | None = None,
              extra: tuple[str, ...] = ()) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "tailor", "manager", "--bus", self.url, "--shard-id", sid, "--bus-user", "manager",
               "--bus-password-file", str(self.server.info["users"]["manager"]), "--data", str(self.tmp / sid),
               "--signing-key", str(self.key), "--update-freq", "1", "--bus-ack-wait", str(ack_wait),
               "--partitions", str(partitions), "--policy", "configanator", *extra]  # fast folds: these tests time
        # ownership
        log = open(self.tmp / f"{sid}.log", "ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONPATH=SRC, **(env or {})))
        log.close()
        self.procs[sid] = proc
        return proc

    def run(self, coro):
        """``asyncio.run(coro)``; a failure carries the tails of the shards' logs."""
        try:
            return asyncio.run(coro)
        except AssertionError as err:
            tails = "\n".join(f"--- {sid}\n" + "\n".join(self.log(sid).splitlines()[-15:]) for sid in self.procs)
            raise AssertionError(f"{err}\n{tails}") from None

    def log(self, sid: str) -> str:
        return (self.tmp / f"{sid}.log").read_text()

    def stop(self, sid: str, timeout: float = 30.0) -> int:
        proc = self.procs[sid]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=timeout)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.server.stop()

    def store_records(self, sids) -> list[tuple]:
        """Every telemetry record (client_addr, time) in the shards' partition stores (shards stopped)."""
        from tailor.manager.store import Store

        out = []
        for sid in sids:
            for d in sorted((self.tmp / sid).glob("part-*")):
                st = Store(d)
                try:
                    out += st.query("SELECT client_addr, time FROM telemetry")
                finally:
                    st.close()
        return out


@pytest.fixture
def bus(tmp_path):
    b = Bus(tmp_path)
    try:
        yield b
    finally:
        b.close()


async def _conn(bus, user="manager"):
    nc = await T.connect(bus.url, user, bus.server.password(user))
    return nc, nc.jetstream()


async def _until(what: str, fn, timeout: float, procs=()):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"a shard exited with {p.returncode} while waiting for {what}"
        last = await fn()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last})")


async def _owned(js, want: dict[str, list[int]]):
    hb = await T.heartbeats(js)
    return all(sorted(hb.get(s, {}).get("partitions", [])) == ps for s, ps in want.items()) and hb


async def _archived(js, n: int):
    ar = await T.archives(js)
    total = sum(a["records"] for a in ar.values())
    assert total <= n, f"{total} records folded, {n} published: {ar and {p: a['records'] for p, a in ar.items()}}"
    return total == n and ar


async def _publish_all(pub, recs, partitions):
    for p, rs in T.group(recs, partitions, chunk=100):
        ack = await pub.publish(p, rs)
        assert not ack.duplicate


class _Touch:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):  # unpickling this creates a file: the shard must refuse the object before that
        return (Path.touch, (Path(self.path),))


async def _forge_state(bus, p: int, marker: Path) -> None:
    from tailor.bus import setup as S
    from tailor.bus.state import Watermark, seal

    nc, js = await _conn(bus)
    try:
        await S.ensure_stream(js)
        b = await S.ensure_buckets(js)
        payload = pickle.dumps({"policy": _Touch(str(marker))})
        await b["state"].put(S.part_key(p), seal(b"k" * 32, p, Watermark(), payload))  # not the signing key's HMAC
    finally:
        await nc.close()


def test_kv_keys_lists_what_the_bucket_holds_while_it_is_rewritten(bus):
    """The shards' view of who is alive: the keys under a prefix, from the stream's subjects (nats-py's watcher-based
    ``keys()`` once returned no key while three shards were beating); deleted keys keep a marker, readers skip it."""
    from tailor.bus import setup as S

    async def go():
        nc, js = await _conn(bus)
        try:
            assert await S.kv_keys(js, S.SHARDS, "alive.") == []  # no bucket yet
            kv = (await S.ensure_buckets(js))["shards"]
            for k in ("alive.a", "alive.b", "alive.c", "other.x"):
                await kv.put(k, b'{"partitions": [1]}')
            await kv.delete("alive.c")
            assert await S.kv_keys(js, S.SHARDS, "alive.") == ["alive.a", "alive.b", "alive.c"]
            assert set(await T.heartbeats(js)) == {"a", "b"}
            stop = asyncio.Event()

            async def beat():  # three heartbeats rewritten every 2 ms (history 1: each put deletes the last)
                i = 0
                while not stop.is_set():
                    await kv.put(f"alive.{'abd'[i % 3]}", b'{"partitions": [1]}')
                    i += 1
                    await asyncio.sleep(0.002)

            task = asyncio.create_task(beat())
            try:
                await asyncio.sleep(0.1)
                listings = [await S.kv_keys(js, S.SHARDS, "alive.") for _ in range(200)]
            finally:
                stop.set()
                await task
            assert all(k == ["alive.a", "alive.b", "alive.c", "alive.d"] for k in listings), listings[:3]
        finally:
            await nc.close()

    bus.run(go())


def test_one_shard_owns_all_publishes_verified_tables_and_ingests_once(bus):
    P, N = 4, 800
    marker = bus.tmp / "unpickled"
    asyncio.run(_forge_state(bus, 0, marker))
    proc = bus.shard("a", P)

    async def scenario():
        nc, js = await _conn(bus)
        enc, ejs = await _conn(bus, "edge")
        try:
            await _until("shard a owning every partition", lambda: _owned(js, {"a": list(range(P))}), 30, [proc])
            pub = T.EdgePublisher(ejs, source="edge-1")
            recs = T.records(N)
            await _publish_all(pub, recs, P)
            for seq, (p, rs) in enumerate(T.group(recs, P, chunk=100), 1):  # an edge re-publishing: dropped by the stream
                assert (await pub.publish(p, rs, seq=seq)).duplicate
            stray = [r for r in T.records(20, tag=9) if partition(r["client_prefix"], P) != 0]
            await T.EdgePublisher(ejs, source="edge-2").publish(0, stray)  # records of other partitions on part 0
            await _until(f"{N} records folded", lambda: _archived(js, N), 20, [proc])
            keys = load_public_keys((bus.tmp / "a").joinpath("part-0", "signing.pub").read_bytes())
            assert keys[0].public_bytes_raw() == bus.private.public_key().public_bytes_raw()
            envs = await T.envelopes(js)
            assert sorted(envs) == list(range(P))
            for p, env in envs.items():
                assert env["schema"] == "tailor.table-envelope/v1" and env["partition"] == p
                import base64

                assert verify(base64.b64decode(env["body"]), env["signature"], keys)
                from tailor.table import validate_table

                validate_table(T.envelope_table(env))
            hb = (await T.heartbeats(js))["a"]
            assert hb["counters"]["refused_partition"] == len(stray)
            assert hb["counters"]["records"] == N
        finally:
            await nc.close()
            await enc.close()

    bus.run(scenario())
    wrong = bus.shard("z", P + 1)  # the cluster document says P
    assert wrong.wait(timeout=30) == 2
    assert "must match the cluster document (tailor-tables key cluster), which says 4" in bus.log("z")
    assert bus.stop("a") == 0  # SIGTERM: final cycle, state, acknowledgements
    log = bus.log("a")
    assert '"event": "bus.takeover"' in log and '"event": "bus.stopped"' in log
    refused = [json.loads(line) for line in log.splitlines() if '"bus.state_refused"' in line]
    assert [r["partition"] for r in refused] == [0] and "HMAC does not verify" in refused[0]["reason"]
    assert not marker.exists()  # the forged state was never unpickled; partition 0 started fresh
    assert len(bus.store_records(["a"])) == N


def _metric(text: str, name: str, labels: str = "") -> float | None:
    m = re.search(r"^" + re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_a_shard_serves_its_counters_and_its_partitions_metrics_read_only(bus):
    """``--metrics-listen``: a shard (no API listener) serves Prometheus metrics: its heartbeat counters as
    tailor_shard_*_total, the partitions it runs and their table versions, and every partition manager's metrics with
    a partition label; /healthz; nothing else (404, 405 on a POST). Until 2026-12-07 a shard's counters were only in
    its heartbeat document: nothing a scraper could read."""
    import httpx

    from tailor.manager.testing import free_port

    P, N = 2, 300
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = bus.shard("m", P, extra=("--metrics-listen", f"127.0.0.1:{port}"))

    async def scenario():
        nc, js = await _conn(bus)
        enc, ejs = await _conn(bus, "edge")
        try:
            await _until("shard m owning every partition", lambda: _owned(js, {"m": list(range(P))}), 30, [proc])
            await _publish_all(T.EdgePublisher(ejs, source="edge-1"), T.records(N), P)
            await _until(f"{N} records folded", lambda: _archived(js, N), 20, [proc])
        finally:
            await nc.close()
            await enc.close()

    bus.run(scenario())
    text = ""
    for _ in range(100):  # the counters as of the last scrape: wait for the fold's cycle
        text = httpx.get(url + "/metrics", timeout=5).text
        if _metric(text, "tailor_shard_records_total") == N and _metric(text, "tailor_shard_cycles_total"):
            break
        time.sleep(0.1)
    print("\n".join(line for line in text.splitlines() if line.startswith(("tailor_shard_", "tailor_store_records_total",
                                                                          "tailor_http_")))[:3000])
    assert _metric(text, "tailor_shard_records_total") == N, text[:2000]
    assert _metric(text, "tailor_shard_messages_total") >= 1 and _metric(text, "tailor_shard_partitions") == P
    for name in ("trimmed", "trims_deferred", "messages_lost_repartition", "stray_messages_removed", "refused_partition"):
        assert _metric(text, f"tailor_shard_{name}_total") == 0, name
    assert _metric(text, "tailor_shard_heartbeat_age_seconds") < 6.0
    for p in range(P):
        assert _metric(text, "tailor_shard_table_version", f'partition="{p}"') >= 1
        assert _metric(text, "tailor_groups", f'partition="{p}"') is not None
    stored = sum(_metric(text, "tailor_store_records_total", f'partition="{p}"') or 0 for p in range(P))
    assert stored == N, stored
    assert "# TYPE tailor_update_cycle_seconds histogram" in text and text.count("# TYPE tailor_groups ") == 1
    health = httpx.get(url + "/healthz", timeout=5).json()
    assert health["status"] == "ok" and health["shard"] == "m" and health["partitions"] == list(range(P)), health
    assert httpx.post(url + "/metrics", content=b"x", timeout=5).status_code == 405
    assert httpx.get(url + "/v1/table", timeout=5).status_code == 404
    assert bus.stop("m") == 0
    with pytest.raises(httpx.ConnectError):  # gone with the shard
        httpx.get(url + "/metrics", timeout=2)


def test_a_shards_metrics_endpoint_serves_https_with_the_managers_certificate(bus, tmp_path, capsys):
    """``--tls-cert``/``--tls-key`` with ``--bus``: the shard's one HTTP endpoint serves HTTPS (until 2026-12-07,
    evening, it was plain HTTP whatever was given, and the flags were ignored). A certificate that does not load, or
    the flags without ``--metrics-listen``, is one error naming the flag, before anything connects."""
    import ssl

    import httpx

    from tailor.bus.metrics import MetricsServer
    from tailor.bus.shard import Shard
    from tailor.cli import main
    from tailor.manager.testing import free_port, self_signed

    cert, key = self_signed(tmp_path)
    port = free_port()
    endpoint = MetricsServer(Shard(_shard_cfg(bus, "tls")), "127.0.0.1", port, (str(cert), str(key)))
    endpoint.start()
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        health = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=trust, timeout=5)
        assert health.status_code == 200 and health.json()["shard"] == "tls", health.text
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served beside it
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        endpoint.stop()
    args = ["manager", "--bus", bus.url, "--shard-id", "tls", "--data", str(tmp_path / "d"), "--tls-cert", str(cert),
            "--tls-key", str(key)]
    assert main(args) == 2
    assert "'tls-cert' parameter of tailor manager must be given with --bus only together with --metrics-listen" in \
        capsys.readouterr().err
    assert main([*args[:-1], str(cert), "--metrics-listen", f"127.0.0.1:{free_port()}"]) == 2  # the cert as its key
    assert "'tls-cert' parameter of tailor manager must be a PEM certificate chain that --tls-key's key matches" in \
        capsys.readouterr().err


def test_a_shards_counters_never_go_down_while_a_partition_is_released(bus):
    """A released worker's counters are counted while it stops (its final cycle and state take seconds) and then in
    the shard's retired total: the heartbeat's and the metrics endpoint's totals never fall. (Until 2026-12-07 the
    worker left the running set before its stop and reached the retired total after it: a scrape in between saw
    every tailor_shard_*_total fall by its counts, which Prometheus takes for a counter reset: found by review.)"""
    from prometheus_client import CollectorRegistry, generate_latest

    from tailor.bus.metrics import ShardCollector
    from tailor.bus.shard import Counters, Shard

    sh = Shard(_shard_cfg(bus, "r"))
    registry = CollectorRegistry()
    registry.register(ShardCollector(sh))
    seen = []

    class Stopping:  # a worker whose stop runs a last cycle
        mgr, version = None, None

        def __init__(self):
            self.counters = Counters(messages=1000, records=40_000)

        async def stop(self):
            seen.append((sh.totals()[0].messages, _metric(generate_latest(registry).decode(), "tailor_shard_messages_total")))
            self.counters.messages += 5

    sh.workers[0], sh.workers[1] = Stopping(), Stopping()
    sh.claims.update({0, 1})
    asyncio.run(sh._release(0))
    assert seen == [(2000, 2000)], seen
    total, running = sh.totals()
    assert total.messages == 2005 and total.records == 80_000 and [p for p, _ in running] == [1] and not sh.releasing
    assert sh.claims == {1}


def test_a_worker_defers_commits_the_bus_does_not_answer_for_a_bounded_time(bus, monkeypatch):
    """A commit the bus does not answer (a timeout, no stream leader) is deferred, not fatal: counted, the worker
    goes on and the next cycle commits again; a success ends the run of deferrals. Past DEFER_LIMIT_S of deferrals
    (a state store without quorum) the worker fails, at ERROR, as it always did."""
    import dataclasses

    import nats

    from tailor.bus import shard as SH

    sh = SH.Shard(_shard_cfg(bus, "d"))
    sh.cfg = dataclasses.replace(sh.cfg, base=dataclasses.replace(sh.cfg.base, update_freq_s=0.02))
    w = SH.PartitionWorker(sh, 0)
    calls = []

    class Quiet:  # a consumer with nothing to deliver
        async def fetch(self, batch, timeout):
            await asyncio.sleep(0.005)
            raise nats.errors.TimeoutError

    answers = {3, 4}  # the calls the bus answers (the first phase: one success between two runs of deferrals)

    async def commit(final=False):
        calls.append(time.monotonic())
        if len(calls) in answers:
            if len(calls) == 4:
                w._stop.set()
            return
        raise nats.js.errors.NoStreamResponseError

    w.sub, w._commit = Quiet(), commit
    monkeypatch.setattr(SH, "DEFER_LIMIT_S", 10.0)
    asyncio.run(asyncio.wait_for(w._run(), 10))
    assert len(calls) == 4 and w.counters.commits_deferred == 2 and w.deferred_since is None

    calls.clear()
    answers.clear()  # the second phase: the bus never answers
    w._stop.clear()
    monkeypatch.setattr(SH, "DEFER_LIMIT_S", 0.2)
    with _Events() as events:
        asyncio.run(asyncio.wait_for(w._run(), 10))  # returns: the worker failed
    assert calls[-1] - calls[0] >= 0.2 and w.counters.commits_deferred > 2
    failed = events.named("bus.worker_failed")
    assert [lvl for lvl, _ in failed] == [logging.ERROR] and "NoStreamResponseError" in failed[0][1]["error"], failed


def test_crash_between_state_and_ack_redelivery_is_not_ingested_twice(bus):
    P, N = 2, 300
    proc = bus.shard("a", P, ack_wait=1.0, env={"TAILOR_BUS_CRASH_BEFORE_ACK": "1"})

    async def scenario():
        nc, js = await _conn(bus)
        try:
            await _until("shard a owning every partition", lambda: _owned(js, {"a": [0, 1]}), 30, [proc])
            await _publish_all(T.EdgePublisher(js, source="edge-1"), T.records(N), P)
            await asyncio.to_thread(proc.wait, 20)
            assert proc.returncode == 137  # state with the records written, acknowledgements never sent
            again = bus.shard("a", P, ack_wait=1.0)
            await _until(f"{N} records folded after the restart", lambda: _archived(js, N), 30, [again])
            await asyncio.sleep(3)  # the redeliveries (ack wait 1 s) arrive and are skipped
            hb = (await T.heartbeats(js))["a"]
            assert hb["counters"]["duplicates"] >= 1
            # the crash came right after one partition's state write: the other partition's records were not in
            # any state and are ingested again from the redelivery; the written partition's are skipped
            assert hb["counters"]["records"] < N
            assert sum(a["records"] for a in (await T.archives(js)).values()) == N
        finally:
            await nc.close()

    bus.run(scenario())
    assert bus.stop("a") == 0
    taken = [json.loads(line) for line in bus.log("a").splitlines() if '"bus.takeover"' in line]
    assert any(t["restored"] for t in taken)  # the second run restored the state the first one wrote
    assert len(set(bus.store_records(["a"]))) == N


def _split_ids(partitions: int) -> tuple[str, str]:
    for i in range(100):
        a, b = f"s{i}a", f"s{i}b"
        owners = assignment(partitions, [a, b])
        if 2 <= sum(o == a for o in owners.values()) <= partitions - 2:
            return a, b
    raise AssertionError("no split")


def _split(partitions: int) -> tuple[str, str, dict[str, list[int]]]:
    """Two shard ids that split the partitions, and the partitions each one owns when both are live."""
    a, b = _split_ids(partitions)
    owners = assignment(partitions, [a, b])
    return a, b, {s: sorted(p for p, o in owners.items() if o == s) for s in (a, b)}


def test_two_shards_split_and_kill_9_takeover_loses_no_acknowledged_record(bus):
    P, N1, N2 = 6, 600, 600
    a, b, mine = _split(P)
    pa, pb = bus.shard(a, P), bus.shard(b, P)

    async def scenario():
        nc, js = await _conn(bus)
        try:
            await _until("the two shards splitting the partitions", lambda: _owned(js, mine), 30, [pa, pb])
            pub = T.EdgePublisher(js, source="edge-1")
            first = T.records(N1, tag=1)
            await _publish_all(pub, first, P)
            await _until(f"{N1} records folded", lambda: _archived(js, N1), 20, [pa, pb])
            await _publish_all(pub, T.records(N2, tag=2), P)  # some of these are in flight when a dies
            pa.kill()  # kill -9
            killed = time.monotonic()
            pa.wait()
            await _until(f"{b} owning every partition", lambda: _owned(js, {b: list(range(P))}), 20, [pb])
            took = time.monotonic() - killed
            assert took <= 6 + 1 + 2 + 5, f"takeover took {took:.1f} s"  # TTL + check + ack wait (+ slack)
            await _until(f"{N1 + N2} records folded", lambda: _archived(js, N1 + N2), 20, [pb])
            return took
        finally:
            await nc.close()

    took = bus.run(scenario())
    assert bus.stop(b) == 0
    stored = bus.store_records([a, b])
    assert len(set(stored)) == N1 + N2  # every published record is in a store (a's stores may hold unacked ones twice)
    log = bus.log(b)
    taken = [json.loads(line) for line in log.splitlines() if '"bus.takeover"' in line]
    # b restored a's partitions (and its own too when a, up first, had them before the split)
    assert set(mine[a]) <= {t["partition"] for t in taken if t["restored"]}
    print(f"takeover in {took:.1f} s")


def test_handover_under_traffic_join_then_sigterm_folds_every_record_once(bus):
    P = 6
    a, b, mine = _split(P)
    pa = bus.shard(a, P)

    async def scenario():
        nc, js = await _conn(bus)
        try:
            await _until(f"{a} owning every partition", lambda: _owned(js, {a: list(range(P))}), 30, [pa])
            pub, sent = T.EdgePublisher(js, source="edge-1"), 0
            pb = bus.shard(b, P)  # joins while telemetry flows: a hands b's partitions over
            deadline = time.monotonic() + 30
            tag = 0
            while time.monotonic() < deadline:
                tag += 1
                recs = T.records(60, prefixes=30, tag=tag)
                await _publish_all(pub, recs, P)
                sent += len(recs)
                if await _owned(js, mine) and tag >= 5:
                    break
                await asyncio.sleep(0.2)
            assert await _owned(js, mine), "the partitions were not split"
            await _publish_all(pub, T.records(120, tag=200), P)
            sent += 120
            await _until(f"{sent} records folded", lambda: _archived(js, sent), 20, [pa, pb])
            pa.send_signal(signal.SIGTERM)  # graceful: final cycle, state, acks, heartbeat deleted
            stopped = time.monotonic()
            await _publish_all(pub, T.records(120, tag=201), P)
            sent += 120
            await _until(f"{b} owning every partition", lambda: _owned(js, {b: list(range(P))}), 15, [pb])
            took = time.monotonic() - stopped
            await _until(f"{sent} records folded", lambda: _archived(js, sent), 20, [pb])
            return sent, took
        finally:
            await nc.close()

    sent, took = bus.run(scenario())
    assert bus.procs[a].wait(timeout=10) == 0
    assert took < 6, f"hand-over after SIGTERM took {took:.1f} s (the heartbeat key is deleted: no TTL wait)"
    assert bus.stop(b) == 0
    assert len(set(bus.store_records([a, b]))) == sent
    print(f"graceful hand-over in {took:.1f} s, {sent} records")


def test_paused_owner_is_fenced_its_stale_state_never_replaces_the_new_owners(bus):
    """A shard paused past its heartbeat's TTL (SIGSTOP: a long GC, a starved VM) wakes up holding partitions
    that another shard took over and folded into. Its stale state must never replace the new owner's: here the
    new owner then dies (kill -9) before any clean hand-over, and the paused shard takes everything back from
    the bus. Without fencing it would restore its own stale state and lose the records the other acknowledged."""
    P, N1, N2 = 6, 600, 600
    a, b, mine = _split(P)
    pa, pb = bus.shard(a, P), bus.shard(b, P)

    async def scenario():
        nc, js = await _conn(bus)
        try:
            await _until("the two shards splitting the partitions", lambda: _owned(js, mine), 30, [pa, pb])
            pub = T.EdgePublisher(js, source="edge-1")
            await _publish_all(pub, T.records(N1, tag=1), P)
            await _until(f"{N1} records folded", lambda: _archived(js, N1), 20, [pa, pb])
            pa.send_signal(signal.SIGSTOP)
            await _until(f"{b} owning every partition", lambda: _owned(js, {b: list(range(P))}), 30, [pb])
            await _publish_all(pub, T.records(N2, tag=2), P)  # folded and acknowledged by b alone
            await _until(f"{N1 + N2} records folded by {b}", lambda: _archived(js, N1 + N2), 20, [pb])
            pb.kill()  # no clean hand-over: the states b wrote are all there is
            pb.wait()
            pa.send_signal(signal.SIGCONT)
            await _until(f"{a} owning every partition", lambda: _owned(js, {a: list(range(P))}), 30, [pa])
            await _until(f"{N1 + N2} records folded after {a} woke up", lambda: _archived(js, N1 + N2), 20, [pa])
            await asyncio.sleep(2)  # a late stale write would show here
            assert sum(x["records"] for x in (await T.archives(js)).values()) == N1 + N2
        finally:
            await nc.close()

    bus.run(scenario())
    assert bus.stop(a) == 0
    log = bus.log(a)
    assert '"event": "bus.fenced"' in log, "the woken shard never noticed it had lost its partitions"
    assert len(set(bus.store_records([a, b]))) == N1 + N2


# -- in-process workers (two shards' PartitionWorkers driven step by step on one real nats-server)
def _shard_cfg(bus, sid: str):
    from tailor.bus.shard import ShardConfig
    from tailor.manager.config import ManagerConfig

    d = str(bus.tmp / sid)
    return ShardConfig(servers=[bus.url], shard_id=sid, data_dir=d, partitions=1, user="manager",
                       password=bus.server.password("manager"),
                       base=ManagerConfig(data_dir=d, policy="configanator", update_freq_s=3600, insecure_dev=True,
                                          signing_key=str(bus.key)))


async def _feed(w, n: int) -> None:
    """Hand ``n`` messages of the worker's consumer to its ``_handle`` (the worker's own loop is not running)."""
    import nats

    got = 0
    for _ in range(40):
        try:
            msgs = await w.sub.fetch(batch=64, timeout=0.5)
        except (nats.errors.TimeoutError, TimeoutError):
            msgs = []
        for m in msgs:
            await w._handle(m)
            got += 1
        if got >= n:
            return
    raise AssertionError(f"{got} of {n} messages delivered")


async def _start(w):
    await w.start()
    w.task.cancel()  # driven by the test
    w.task = None
    return w


@contextlib.asynccontextmanager
async def _two_shards(bus):
    """(js, shard A, shard B, an edge publisher) on the test's nats-server, connections closed after."""
    from tailor.bus.shard import Shard

    nc, js = await _conn(bus)
    A, B = Shard(_shard_cfg(bus, "A")), Shard(_shard_cfg(bus, "B"))
    await A.connect()
    await B.connect()
    try:
        yield js, A, B, T.EdgePublisher(js, source="e")
    finally:
        for s in (A, B):
            await s.nc.close()
        await nc.close()


def test_takeovers_keep_the_bus_table_and_fence_a_paused_owners_envelope(bus):
    """Three takeover paths of one partition, on two in-process shards (found by review, 2026-12-07; each failed
    before): (1) an owner paused between its state and its table envelope (a GC pause) must not overwrite its
    successor's envelope when it wakes: the write is conditional on the revision it read, and it is fenced;
    (2) a shard taking the partition back publishes the table in the bus (its content, above its version), not the
    older one of its own earlier ownership in its local store; (3) a failed read of the envelope (a timeout) fails
    the takeover instead of restarting versions at 1."""
    import nats

    from tailor.bus.shard import Fenced, PartitionWorker
    from tailor.manager import publish as pub

    async def scenario():
        async with _two_shards(bus) as (js, A, B, edge):
            async def in_bus():
                return T.envelope_table((await T.envelopes(js))[0])

            wa = await _start(PartitionWorker(A, 0))
            await edge.publish(0, T.records(300, prefixes=20, tag=1))
            await _feed(wa, 1)
            gate, publish = asyncio.Event(), wa._publish_envelope

            async def paused(force=False):
                await gate.wait()
                await publish(force)

            wa._publish_envelope = paused  # A stalls after its state and acknowledgements, before its envelope
            stalled = asyncio.create_task(wa._commit())
            await asyncio.sleep(1.0)
            wb = await _start(PartitionWorker(B, 0))
            await edge.publish(0, T.records(300, prefixes=60, tag=2))
            await _feed(wb, 1)
            await wb._commit()
            b_table = await in_bus()
            assert b_table["version"] == wb.mgr.current.version
            gate.set()
            with pytest.raises(Fenced):
                await stalled
            assert await in_bus() == b_table  # (1) the paused owner's envelope did not land
            await wb.stop()
            b_table = await in_bus()
            await asyncio.to_thread(wa.mgr.close)
            a_old = wa.mgr.current
            assert a_old.key != pub.content_key(b_table)  # A's local store holds another table
            wa2 = await _start(PartitionWorker(A, 0))  # (2) A takes the partition back
            now = await in_bus()
            assert now["version"] > b_table["version"] and pub.content_key(now) == pub.content_key(b_table)
            await wa2.stop()
            before = await in_bus()
            get = B.tables.get

            async def timeout_once(key, *args, **kwargs):  # fault injection: one read of the envelope times out
                B.tables.get = get
                raise nats.errors.TimeoutError

            B.tables.get = timeout_once
            with pytest.raises(nats.errors.TimeoutError):  # (3) the takeover fails; the shard retries it
                await PartitionWorker(B, 0).start()
            assert await in_bus() == before
            wb2 = await _start(PartitionWorker(B, 0))
            assert (await in_bus())["version"] > before["version"]
            await wb2.stop()

    asyncio.run(scenario())


def test_a_paused_owner_does_not_overwrite_its_successors_archive_summary(bus):
    """The archive summary (the global view other partitions' policies read) is written conditionally on the revision
    the worker read at takeover or last wrote, as the table envelope is: an owner paused before its summary write
    wakes fenced, and its older archive does not replace its successor's (it did until 2026-12-07: the write was
    unconditional)."""
    from tailor.bus.shard import Fenced, PartitionWorker

    async def scenario():
        async with _two_shards(bus) as (js, A, B, edge):
            wa = await _start(PartitionWorker(A, 0))
            await edge.publish(0, T.records(200, prefixes=10, tag=1))
            await _feed(wa, 1)
            await wa._commit()
            assert (await T.archives(js))[0]["prefixes_total"] == 10
            gate, kv = asyncio.Event(), A.archive

            def gated(name):
                write = getattr(kv, name)

                async def paused(*args, **kwargs):  # A stalls before its summary write (a GC pause)
                    await gate.wait()
                    return await write(*args, **kwargs)
                return paused

            for name in ("put", "create", "update"):
                setattr(kv, name, gated(name))
            await edge.publish(0, T.records(200, prefixes=10, tag=1))
            await _feed(wa, 1)
            stalled = asyncio.create_task(wa._commit())
            await asyncio.sleep(1.0)
            wb = await _start(PartitionWorker(B, 0))
            await edge.publish(0, T.records(300, prefixes=60, tag=2))
            await _feed(wb, 1)
            await wb._commit()
            b_summary = await T.archives(js)
            assert b_summary[0]["prefixes_total"] > 10
            gate.set()
            with pytest.raises(Fenced):
                await stalled
            assert await T.archives(js) == b_summary
            await wb.stop()

    asyncio.run(scenario())


def test_a_replaced_state_objects_delete_marker_is_purged(bus):
    """Every state write names a new object and deletes the one before; nats-py's delete leaves a delete marker on
    the old name's metadata subject for good, so until 2026-12-07 (evening) the state bucket gained one subject per
    cycle. remove_object purges the marker too: after 30 writes one metadata subject is left, the live object's."""
    import nats

    from tailor.bus import setup as S

    async def scenario():
        nc, js = await _conn(bus)
        try:
            obj = (await S.ensure_buckets(js, 1))["state"]
            previous = None
            for k in range(30):
                name = f"part.0.7.{k}"
                await obj.put(name, os.urandom(2000))
                if previous is not None:
                    await S.remove_object(js, obj, S.STATE, previous)
                previous = name
            info = await js.stream_info(f"OBJ_{S.STATE}", subjects_filter=f"$O.{S.STATE}.>")
            metas = [x for x in info.state.subjects or {} if ".M." in x]
            assert len(metas) == 1 and len([x for x in info.state.subjects if ".C." in x]) == 1, info.state.subjects
            assert len((await obj.get("part.0.7.29")).data) == 2000
            with pytest.raises(nats.js.errors.ObjectNotFoundError):  # gone, marker and all
                await obj.get_info("part.0.7.28")
        finally:
            await nc.close()

    asyncio.run(scenario())


def test_a_shard_reads_the_heartbeat_ttl_again_when_the_operator_changes_it(bus, monkeypatch, caplog):
    """An operator raises the heartbeat bucket's TTL (nats stream edit, e.g. for a replicated bus's elections): a
    running shard takes it at its next ownership check once TTL_READ_S has passed; until 2026-12-07 (evening) only at
    its restart, so a shard on the old TTL released its partitions on another schedule than the shards started after
    the change. A read the bus does not answer keeps the TTL read last."""
    import nats

    from tailor.bus import setup as S
    from tailor.bus import shard as SH

    class Checked(Exception):  # ends the ownership check after the TTL read (no partition is claimed)
        pass

    async def scenario():
        nc, js = await _conn(bus)
        sh = SH.Shard(_shard_cfg(bus, "ttl"))
        await sh.connect()

        async def live():
            raise Checked

        sh.live = live
        try:
            assert sh.ttl_s == S.HEARTBEAT_TTL_S
            info = await js.stream_info(f"KV_{S.SHARDS}")
            info.config.max_age = 12.0
            await js.update_stream(info.config)
            with pytest.raises(Checked):
                await sh.rebalance()
            assert sh.ttl_s == S.HEARTBEAT_TTL_S  # read within the last TTL_READ_S: not yet
            monkeypatch.setattr(SH, "TTL_READ_S", 0.0)
            with pytest.raises(Checked):
                await sh.rebalance()
            assert sh.ttl_s == 12.0

            async def unanswered(*args, **kwargs):
                raise nats.errors.TimeoutError

            sh.js.stream_info = unanswered
            with pytest.raises(Checked):
                await sh.rebalance()
            assert sh.ttl_s == 12.0
        finally:
            await sh.nc.close()
            await nc.close()

    with caplog.at_level(logging.INFO, logger="tailor.manager"):
        asyncio.run(scenario())
    events = [r.fields["event"] for r in caplog.records if hasattr(r, "fields")]
    assert events.count("bus.heartbeat_ttl") == 1 and events.count("bus.ttl_read_failed") == 1, events


def test_a_deeply_nested_batch_is_refused_and_the_partition_goes_on(bus):
    """A batch nested thousands of levels deep made ``json.loads`` raise RecursionError in the worker, which died
    on it and on every redelivery after its restart: the partition was wedged (found by review, 2026-12-07). It is
    now a refused batch (acknowledged with the next state), and the records behind it are learned."""
    from tailor.bus.shard import PartitionWorker, Shard

    async def scenario():
        nc, js = await _conn(bus)
        sh = Shard(_shard_cfg(bus, "A"))
        await sh.connect()
        try:
            w = await _start(PartitionWorker(sh, 0))
            nested = b"[" * 100_000 + b"]" * 100_000
            from tailor.bus import setup as S

            await js.publish(S.tel_subject("default", 0), nested, headers={"Nats-Msg-Id": "e/n0/poison"})
            edge = T.EdgePublisher(js, source="e")
            await edge.publish(0, T.records(50, prefixes=10, tag=3))
            await edge.publish(0, [{"kind": "bogus"}], dropped=100)  # refused, yet its drop count arrives once
            await _feed(w, 3)
            assert w.counters.invalid_batches == 2 and w.counters.records == 50
            assert w.mgr.metrics.edge_dropped._value.get() == 100
            await w._commit()
            assert await T.all_acked(js, 1)
            await w.stop()
        finally:
            await sh.nc.close()
            await nc.close()

    asyncio.run(scenario())


# -- a full stream refuses; nothing stored is removed but acknowledged history (2026-12-07, found by review)

STREAM_FULL = 10077  # JetStream's err_code for a store refusal ("maximum bytes exceeded")


async def _publish_until_full(js, subjects: list[str], body: bytes, attempts: int = 60) -> tuple[dict, int]:
    """Publish ``body`` round-robin over ``subjects`` until the stream refuses 3 times (at most ``attempts``):
    ({stream seq: subject} of the acknowledged publishes, refusals)."""
    from nats.js.errors import APIError

    acked, refused = {}, 0
    for i in range(attempts):
        subject = subjects[i % len(subjects)]
        try:
            ack = await js.publish(subject, body, headers={"Nats-Msg-Id": f"fill/n0/{i}"})
        except APIError as err:
            assert err.err_code == STREAM_FULL, f"publish {i}: {err!r} ({err.err_code} {err.description})"
            refused += 1
            if refused == 3:
                break
            continue
        acked[ack.seq] = subject
    return acked, refused


def test_a_full_stream_refuses_the_publish_and_keeps_every_acknowledged_message(bus):
    """The telemetry stream as the shards create it, filled beyond its max_bytes: each publish is either
    acknowledged and stays stored, or refused (the edge keeps the batch and retries). With discard OLD (until
    2026-12-07) every publish was acknowledged and the oldest messages, acknowledged and never consumed, were
    deleted without a trace."""
    from tailor.bus import setup as S

    async def go():
        nc, js = await _conn(bus)
        try:
            await S.ensure_stream(js, max_bytes=64 << 10)
            acked, refused = await _publish_until_full(js, [S.tel_subject("default", 0)], b"x" * 8000)
            st = (await js.stream_info(S.STREAM)).state
            evicted = sorted(s for s in acked if s < st.first_seq)
            assert not evicted, (f"{len(acked)} publishes acknowledged into a 64 KiB stream, {refused} refused; "
                                 f"the stream holds {st.messages} (first sequence {st.first_seq}): {len(evicted)} "
                                 f"acknowledged messages deleted unconsumed")
            assert refused == 3 and st.messages == len(acked) and st.first_seq == 1
            for seq in acked:
                assert (await js.get_msg(S.STREAM, seq=seq)).data == b"x" * 8000
        finally:
            await nc.close()

    bus.run(go())


def test_ensure_stream_moves_an_old_stream_to_discard_new(bus):
    """A stream created before 2026-12-07 (discard OLD, max_age 7 days) is updated in place at a shard's start;
    the operator's max_bytes stays."""
    from nats.js import api

    from tailor.bus import setup as S

    async def go():
        nc, js = await _conn(bus)
        try:
            old = S.stream_config(max_bytes=12_345_678)
            old.discard, old.max_age = api.DiscardPolicy.OLD, 7 * 86400.0
            await js.add_stream(old)
            assert await S.ensure_stream(js, max_bytes=1 << 20) == "updated"  # found: its max_bytes is kept
            cfg = (await js.stream_info(S.STREAM)).config
            assert cfg.discard == api.DiscardPolicy.NEW and not cfg.max_age and cfg.max_bytes == 12_345_678
            assert await S.ensure_stream(js) == "kept"
        finally:
            await nc.close()

    bus.run(go())


def test_trimming_removes_only_acknowledged_history(bus):
    """``trim_acknowledged`` removes a partition's messages at or below its consumer's ack floor, once the stream is
    3/4 full or its oldest message older than a week, and nothing else: not the partition's unacknowledged messages
    (while any is delivered and not acknowledged, nothing is: nats-server 2.9's purge would reset their redelivery),
    not another partition's (its consumer still delivers every one), so a full stream takes publishes again."""
    from tailor.bus import setup as S

    async def go():
        nc, js = await _conn(bus)
        try:
            await S.ensure_stream(js, max_bytes=64 << 10)
            await S.ensure_consumers(js, 2)
            subjects = [S.tel_subject("default", 0), S.tel_subject("pop-b", 1)]
            acked, refused = await _publish_until_full(js, subjects, b"y" * 4000)
            assert refused == 3
            p0 = sorted(s for s, subj in acked.items() if subj == subjects[0])
            p1 = sorted(s for s, subj in acked.items() if subj == subjects[1])
            assert await S.trim_acknowledged(nc, js, 0) == S.Trim()  # full, but nothing acknowledged yet
            sub0 = await js.pull_subscribe_bind(consumer=S.consumer_name(0), stream=S.STREAM)
            msgs = await sub0.fetch(len(p0), timeout=5)
            assert [m.metadata.sequence.stream for m in msgs] == p0
            for m in msgs[:-2]:
                await m.ack_sync()
            # two delivered and not acknowledged: deferred (test_a_trim_never_costs_an_unacknowledged_message)
            assert await S.trim_acknowledged(nc, js, 0) == S.Trim(deferred=True)
            for m in msgs[-2:]:
                await m.nak()
            redelivered = await sub0.fetch(2, timeout=5)
            assert [m.metadata.sequence.stream for m in redelivered] == p0[-2:]
            assert await S.trim_acknowledged(nc, js, 0) == S.Trim(deferred=True)  # redelivered, not acknowledged
            for m in redelivered:
                await m.ack_sync()
            assert await S.trim_acknowledged(nc, js, 0) == S.Trim(len(p0))  # full: the acknowledged ones go
            st = (await js.stream_info(S.STREAM)).state
            assert st.messages == len(p1) and st.bytes < S.TRIM_AT * (64 << 10)
            ack = await js.publish(subjects[1], b"z" * 4000)  # room again
            p1.append(ack.seq)
            ack = await js.publish(subjects[0], b"z" * 4000)
            last = await sub0.fetch(1, timeout=5)
            await last[0].ack_sync()
            assert await S.trim_acknowledged(nc, js, 0) == S.Trim()  # below 3/4 and young: history kept
            assert await S.trim_acknowledged(nc, js, 0, now=time.time() + S.HISTORY_S + 60) == S.Trim(1)  # week old
            assert await S.trim_acknowledged(nc, js, 1, now=time.time() + S.HISTORY_S + 60) == S.Trim()  # none acked
            sub1 = await js.pull_subscribe_bind(consumer=S.consumer_name(1), stream=S.STREAM)
            got = [m.metadata.sequence.stream for m in await sub1.fetch(len(p1) + 5, timeout=3)]
            assert got == p1, f"partition 1's consumer delivers {got}, {p1} were acknowledged to the publisher"
        finally:
            await nc.close()

    bus.run(go())


def test_a_shard_trims_its_folded_history_and_a_full_stream_takes_telemetry_again(bus):
    """A partition worker on a 128 KiB stream, fed five times its capacity by an edge that retries refused batches
    (as tailor-edge's sink does): its cycles trim what they folded and acknowledged, every record arrives once."""
    from nats.js.errors import APIError

    from tailor.bus import setup as S
    from tailor.bus.shard import PartitionWorker, Shard

    async def scenario():
        nc, js = await _conn(bus)
        await S.ensure_stream(js, max_bytes=128 << 10)  # the shard keeps an existing stream's max_bytes
        sh = Shard(_shard_cfg(bus, "A"))
        await sh.connect()
        try:
            w = await _start(PartitionWorker(sh, 0))
            edge, batches, refused = T.EdgePublisher(js, source="e"), 0, 0
            recs = T.records(1500, prefixes=30, tag=5)
            for i in range(0, len(recs), 50):
                for _ in range(20):  # a refused batch: the worker's next cycle makes room, the edge retries
                    try:
                        await edge.publish(0, recs[i:i + 50], seq=i // 50 + 1)
                        batches += 1
                        break
                    except APIError as err:
                        assert err.err_code == STREAM_FULL, repr(err)
                        refused += 1
                        pending = (await js.consumer_info(S.STREAM, S.consumer_name(0))).num_pending
                        await _feed(w, pending)
                        await w._commit()
                else:
                    raise AssertionError(f"batch {i // 50 + 1} refused 20 times: {w.counters.as_dict()}")
            await _feed(w, (await js.consumer_info(S.STREAM, S.consumer_name(0))).num_pending)
            await w._commit()
            assert refused > 0 and w.counters.trimmed > 0, (refused, w.counters.as_dict())
            assert batches == 30 and w.counters.records == 1500 and w.counters.trims_failed == 0
            assert await T.all_acked(js, 1)
            await w.stop()
        finally:
            await sh.nc.close()
            await nc.close()

    bus.run(scenario())



# -- a trim never costs an unacknowledged message; nothing is stored that no consumer reads (2026-12-07, review)

async def _fetch_msgs(sub, n: int, timeout: float = 3.0) -> list:
    """Up to ``n`` messages the pull subscription is delivered within ``timeout`` (none: [])."""
    import nats

    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        try:
            out += await sub.fetch(n - len(out), timeout=min(1.0, max(0.1, deadline - time.monotonic())))
        except (nats.errors.TimeoutError, TimeoutError):
            continue
    return out


def _seqs(msgs) -> list[int]:
    return [m.metadata.sequence.stream for m in msgs]


def test_a_trim_never_costs_an_unacknowledged_message(bus):
    """nats-server 2.9's filtered purge resets the delivered-but-unacknowledged list of the consumer it matches.
    Until 2026-12-07 a trim while ``part-0`` had messages out (nak'd on an ingest 503, a crashed owner's in flight)
    lost them: never redelivered, the next acknowledgement moved the ack floor past them and the next trim deleted
    them (found by review). The trim now waits until nothing is outstanding; what was out is redelivered after the
    ack wait and removed only once acknowledged."""
    from tailor.bus import setup as S

    async def go():
        nc, js = await _conn(bus)
        try:
            await S.ensure_stream(js, max_bytes=1 << 20)
            await S.ensure_consumers(js, 1, ack_wait_s=1.0)
            subj = S.tel_subject("default", 0)
            seqs = [(await js.publish(subj, b"m%d" % i, headers={"Nats-Msg-Id": f"e/n/{i}"})).seq for i in range(5)]
            sub = await js.pull_subscribe_bind(consumer=S.consumer_name(0), stream=S.STREAM)
            msgs = await sub.fetch(5, timeout=3)
            for m in msgs[:3]:
                await m.ack_sync()
            week = time.time() + S.HISTORY_S + 60  # the age trigger (a 3/4-full stream takes the same path)
            first = await S.trim_acknowledged(nc, js, 0, now=week)
            ack = await js.publish(subj, b"m5", headers={"Nats-Msg-Id": "e/n/5"})  # a new batch
            await asyncio.sleep(1.5)  # past the ack wait
            got = {m.metadata.sequence.stream: m for m in await _fetch_msgs(sub, 3)}
            assert sorted(got) == seqs[3:] + [ack.seq], (
                f"trim {first}: {seqs[3:]} were delivered and not acknowledged; delivered after the ack wait: "
                f"{sorted(got)}")
            assert first == S.Trim(deferred=True)
            await got.pop(ack.seq).ack_sync()  # 4 and 5 still out: deferred again, both stay stored
            assert await S.trim_acknowledged(nc, js, 0, now=week) == S.Trim(deferred=True)
            assert [(await js.get_msg(S.STREAM, seq=s)).data for s in seqs[3:]] == [b"m3", b"m4"]
            for m in got.values():
                await m.ack_sync()
            assert await S.trim_acknowledged(nc, js, 0, now=week) == S.Trim(6)  # all acknowledged: all go
            assert (await js.stream_info(S.STREAM)).state.messages == 0
        finally:
            await nc.close()

    bus.run(go())


class _RacingConnection:
    """A connection whose stream purge is preceded by ``before()`` (a pull by another client in the trim's window)."""

    def __init__(self, nc, before):
        self.nc, self.before = nc, before

    async def request(self, subject, payload=b"", timeout=5):
        if ".STREAM.PURGE." in subject:
            await self.before()
        return await self.nc.request(subject, payload, timeout=timeout)


def test_a_pull_racing_a_trim_gets_its_messages_delivered_again(bus):
    """The trim reads the consumer (nothing outstanding) and then purges; a pull by another client in between (a
    shard paused past its lease that wakes up) would have its delivery wiped from the pending list by the purge and
    never redelivered. The second read sees the delivered sequence moved and recreates the consumer: the owner is
    delivered the raced message again (the ack wait here is 30 s: it is not the ack wait that brings it back)."""
    from tailor.bus import setup as S

    async def go():
        nc, js = await _conn(bus)
        znc, zjs = await _conn(bus)
        try:
            await S.ensure_stream(js, max_bytes=1 << 20)
            await S.ensure_consumers(js, 1, ack_wait_s=30.0)
            subj = S.tel_subject("default", 0)
            for i in range(3):
                await js.publish(subj, b"m%d" % i)
            sub = await js.pull_subscribe_bind(consumer=S.consumer_name(0), stream=S.STREAM)
            for m in await sub.fetch(3, timeout=3):
                await m.ack_sync()
            later = [(await js.publish(subj, b"m%d" % i)).seq for i in (3, 4)]
            zsub = await zjs.pull_subscribe_bind(consumer=S.consumer_name(0), stream=S.STREAM)
            raced = []

            async def zombie_pull():
                raced.extend(await zsub.fetch(1, timeout=3))

            week = time.time() + S.HISTORY_S + 60
            t = await S.trim_acknowledged(_RacingConnection(nc, zombie_pull), js, 0, now=week)
            assert _seqs(raced) == later[:1]
            got = await _fetch_msgs(sub, 2)
            assert _seqs(got) == later, f"trim {t}: the raced message {later[0]} is not delivered again: {_seqs(got)}"
            assert t == S.Trim(3, repaired=True)
            info = await js.consumer_info(S.STREAM, S.consumer_name(0))
            assert info.config.ack_wait == 30.0 and info.config.filter_subject == S.partition_filter(0)
        finally:
            await znc.close()
            await nc.close()

    bus.run(go())


def test_a_worker_defers_its_trim_while_a_crashed_owners_batches_are_in_flight(bus, monkeypatch):
    """A previous owner acknowledged two batches and crashed with two more in flight; the new owner folds the rest
    and its trim is due: it defers (counted), the in-flight batches come back after the ack wait, and every record
    is folded once before the partition's history goes."""
    from tailor.bus import setup as S
    from tailor.bus.shard import PartitionWorker, Shard

    monkeypatch.setattr(S, "HISTORY_S", 0.0)  # every trim due (the age trigger)

    async def scenario():
        nc, js = await _conn(bus)
        await S.ensure_stream(js)
        await S.ensure_consumers(js, 1, ack_wait_s=2.0)
        edge = T.EdgePublisher(js, source="e")
        recs = T.records(300, prefixes=30, tag=6)
        for i in range(0, 300, 50):
            await edge.publish(0, recs[i:i + 50])
        old = await js.pull_subscribe_bind(consumer=S.consumer_name(0), stream=S.STREAM)
        for m in await old.fetch(2, timeout=3):
            await m.ack_sync()
        in_flight = _seqs(await old.fetch(2, timeout=3))  # the previous owner dies holding these
        await old.unsubscribe()
        sh = Shard(_shard_cfg(bus, "B"))
        await sh.connect()
        try:
            w = await _start(PartitionWorker(sh, 0))
            await _feed(w, 2)
            await w._commit()  # folds and acknowledges batches 5 and 6; its trim is due
            first = w.counters.as_dict()
            await asyncio.sleep(2.5)  # the ack wait
            back = await _fetch_msgs(w.sub, 2, timeout=5)
            assert _seqs(back) == in_flight, (f"the crashed owner's in-flight batches {in_flight}, redelivered after "
                                              f"the ack wait: {_seqs(back)}; counters after the first cycle: {first}")
            assert first["trims_deferred"] == 1 and first["trimmed"] == 0, first
            for m in back:
                await w._handle(m)
            await w._commit()
            c = w.counters
            assert c.records == 200 and c.trimmed == 6 and c.trims_deferred == 1 and c.trim_races == 0, c.as_dict()
            assert (await js.stream_info(S.STREAM)).state.messages == 0
            await w.stop()
        finally:
            await sh.nc.close()
            await nc.close()

    bus.run(scenario())


def test_a_publish_on_a_subject_no_partition_reads_is_refused(bus):
    """The edge user may publish on ``tailor.tel.>``; the stream stores only the partitions' subjects
    (``tailor.tel.*.<p>``, p < P), what the ``part-<p>`` consumers read. Until 2026-12-07 its subject was
    ``tailor.tel.>``: a batch on ``tailor.tel.x.99`` was acknowledged and stored, never consumed, never trimmed, and
    with discard NEW such messages would fill the stream and refuse everyone's telemetry (found by review)."""
    from tailor.bus import setup as S

    async def go():
        nc, js = await _conn(bus)
        enc, ejs = await _conn(bus, "edge")
        try:
            await S.ensure_stream(js)  # P = 6, the default
            stored = []
            for subject in ("tailor.tel.x.99", "tailor.tel.a.b.0", "tailor.tel.x.6", "tailor.tel.x.05", "tailor.tel.0"):
                try:
                    ack = await ejs.publish(subject, b"{}", timeout=2)
                except Exception:  # noqa: BLE001 (no stream answers: nats-py's NoStreamResponseError)
                    continue
                stored.append((subject, ack.seq))
            assert not stored, f"acknowledged and stored where no consumer reads them: {stored}"
            assert (await ejs.publish(S.tel_subject("pop-a", 5), b"{}")).stream == S.STREAM
            assert (await js.stream_info(S.STREAM)).state.messages == 1
        finally:
            await enc.close()
            await nc.close()

    bus.run(go())


def test_a_shard_narrows_an_old_streams_subjects_and_removes_its_strays(bus):
    """A stream created before 2026-12-07 (subjects ``tailor.tel.>``) holding messages no consumer reads: a shard's
    start moves it to its cluster's partitions (P = 1 here) and purges those messages subject by subject, leaving the
    partition's messages and its consumer's unacknowledged one (redelivered after the ack wait) as they were."""
    from tailor.bus import setup as S
    from tailor.bus.shard import Shard

    async def go():
        nc, js = await _conn(bus)
        try:
            old = S.stream_config(max_bytes=1 << 20)
            old.subjects = [S.TEL_SUBJECTS]
            await js.add_stream(old)
            await S.ensure_consumers(js, 1, ack_wait_s=1.0)
            keep = [(await js.publish(S.tel_subject("a", 0), b"p0-%d" % i)).seq for i in range(2)]
            for subject in ("tailor.tel.x.99", "tailor.tel.a.b.0", "tailor.tel.a.1", "tailor.tel.b.1"):
                await js.publish(subject, b"stray")
            sub = await js.pull_subscribe_bind(consumer=S.consumer_name(0), stream=S.STREAM)
            held = await sub.fetch(2, timeout=3)
            await held[0].ack_sync()  # the second stays delivered and not acknowledged
            sh = Shard(_shard_cfg(bus, "A"))  # partitions=1
            await sh.connect()
            await sh.nc.close()
            info = await js.stream_info(S.STREAM, subjects_filter=">")
            assert info.config.subjects == ["tailor.tel.*.0"]
            assert info.state.subjects == {"tailor.tel.a.0": 2} and info.state.messages == 2
            assert _seqs(await _fetch_msgs(sub, 1)) == keep[1:]  # its pending list was not touched
            assert await S.ensure_stream(js, partitions=1) == "kept" and (await S.remove_strays(js, 1)).removed == 0
        finally:
            await nc.close()

    bus.run(go())


class _Events(logging.Handler):
    """The tailor.manager log events (their fields) emitted while installed."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.events: list[tuple[int, dict]] = []

    def emit(self, record):
        self.events.append((record.levelno, dict(getattr(record, "fields", None) or {})))

    def __enter__(self):
        logging.getLogger("tailor.manager").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("tailor.manager").removeHandler(self)

    def named(self, event: str) -> list[tuple[int, dict]]:
        return [(lvl, f) for lvl, f in self.events if f.get("event") == event]


def test_fewer_partitions_count_and_log_the_removed_partitions_unacknowledged_messages(bus):
    """The cluster document recreated with fewer partitions (P 8 -> 6, an operator's reset): a shard's start narrows
    the stream to ``tailor.tel.*.<p>`` for p < 6 and purges what it held on partitions 6 and 7 (nats-server keeps a
    message whose subject the stream no longer has: it would hold stream space forever). Partition 6's message that
    its consumer acknowledged is history; partition 7's three were never folded: counted in the heartbeat's
    ``messages_lost_repartition`` and logged at ERROR with their subjects (until 2026-12-07 purged with a WARNING
    ``bus.strays_removed`` only, counted nowhere; found by review). A publish on partition 7 is then refused."""
    from dataclasses import replace

    from tailor.bus import setup as S
    from tailor.bus.shard import Shard

    async def go():
        nc, js = await _conn(bus)
        enc, ejs = await _conn(bus, "edge")
        try:
            assert await S.ensure_stream(js, max_bytes=1 << 20, partitions=8) == "created"
            await S.ensure_consumers(js, 8, ack_wait_s=1.0)
            for p in range(8):
                await js.publish(S.tel_subject("fra", p), b"p%d" % p)
            await js.publish(S.tel_subject("fra", 7), b"p7-b")
            await js.publish(S.tel_subject("lis", 7), b"p7-c")
            sub6 = await js.pull_subscribe_bind(consumer=S.consumer_name(6), stream=S.STREAM)
            await (await sub6.fetch(1, timeout=3))[0].ack_sync()  # partition 6's message was folded
            await asyncio.sleep(0.2)
            with _Events() as ev:
                sh = Shard(replace(_shard_cfg(bus, "A"), partitions=6))  # creates the cluster document: P = 6
                await sh.connect()
                await sh.heartbeat()
                await sh.nc.close()
            info = await js.stream_info(S.STREAM, subjects_filter=">")
            assert info.config.subjects == S.stream_subjects(6)
            assert info.state.subjects == {S.tel_subject("fra", p): 1 for p in range(6)}
            counters = (await T.heartbeats(js))["A"]["counters"]
            assert counters["messages_lost_repartition"] == 3 and counters["stray_messages_removed"] == 0, counters
            lost = ev.named("bus.messages_lost_repartition")
            assert len(lost) == 1 and lost[0][0] == logging.ERROR, ev.events
            assert lost[0][1]["messages"] == 3
            assert lost[0][1]["subjects"] == {"tailor.tel.fra.7": 2, "tailor.tel.lis.7": 1}
            (lvl, removed), = ev.named("bus.strays_removed")
            assert removed["acknowledged_history"] == 1 and removed["messages"] == 1
            with pytest.raises(Exception):  # noqa: B017 (no stream stores the subject: NoStreamResponseError)
                await ejs.publish(S.tel_subject("fra", 7), b"late", timeout=1)
            assert (await S.remove_strays(js, 6)).removed == 0
        finally:
            await enc.close()
            await nc.close()

    bus.run(go())


def test_the_stream_takes_the_partitions_subjects_before_the_cluster_document_exists(bus, monkeypatch):
    """Edges publish as soon as they read ``P`` in the cluster document: the shard that creates the document sets the
    stream up for ``P`` first. Until 2026-12-07 it created the document, then the stream: an edge publishing in between
    got no answer (nats.go's ErrNoStreamResponse, counted nowhere; found by review). Before the document exists the
    stream is only widened: a stream of another ``P`` keeps its subjects and messages until the document is read."""
    from nats.js.errors import NotFoundError
    from nats.js.kv import KeyValue

    from tailor.bus import setup as S
    from tailor.bus.shard import Shard

    async def go():
        nc, js = await _conn(bus)
        seen = []
        create = KeyValue.create

        async def spying_create(self, key, value, *args, **kwargs):
            if key == S.CLUSTER_KEY:
                try:
                    seen.append((await js.stream_info(S.STREAM)).config.subjects)
                except NotFoundError:
                    seen.append(None)
            return await create(self, key, value, *args, **kwargs)

        monkeypatch.setattr(KeyValue, "create", spying_create)
        try:
            sh = Shard(_shard_cfg(bus, "A"))  # partitions=1
            await sh.connect()
            await sh.nc.close()
            assert seen == [S.stream_subjects(1)], seen
            # widening only: a stream of P = 2 is left alone, one of tailor.tel.> too (it covers every partition)
            assert await S.ensure_stream(js, partitions=1) == "kept"
            assert await S.ensure_stream(js, partitions=3, widen_only=True) == "widened"
            assert (await js.stream_info(S.STREAM)).config.subjects == S.stream_subjects(3)
            assert await S.ensure_stream(js, partitions=2, widen_only=True) == "kept"
            assert (await js.stream_info(S.STREAM)).config.subjects == S.stream_subjects(3)
        finally:
            await nc.close()

    bus.run(go())
