"""``tailor cluster`` (with --edges 0: the edges' bus flags are the Go side's) and the bus users' permissions."""

import asyncio
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tailor.bus import setup as S
from tailor.bus import testing as T
from tailor.bus.natsd import NatsServer, nats_server_binary

pytestmark = pytest.mark.skipif(nats_server_binary() is None,
                                reason="needs nats-server (apt-get install nats-server; Debian's is /usr/sbin/nats-server)")
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_cluster_runs_shards_prints_status_and_stops_everything(tmp_path):
    d = tmp_path / "given"
    d.mkdir()
    (d / "mine.txt").write_text("the user's file")
    res = subprocess.run([sys.executable, "-m", "tailor", "cluster", "--shards", "2", "--edges", "0", "--duration", "45",
                          "--dir", str(d), "--partitions", "4", "--update-freq", "1", "--status-every", "1.5"],
                         capture_output=True, text=True, timeout=150, env=dict(os.environ, PYTHONPATH=SRC))
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert re.search(r"nats-server  pid \d+  nats://127\.0\.0\.1:\d+", out)
    owned = [line for line in out.splitlines() if line.startswith("[") and "shard-0:" in line and "shard-1:" in line]
    assert owned, out

    def parts(line):
        return sorted(int(p) for s in re.findall(r"shard-\d:([\d,]+)", line) for p in s.split(","))

    # Shards starting together can both start a partition on different views of the live set (the lease fences
    # the loser, tests/test_bus_shard.py), and a hand-over leaves a partition briefly unowned; so only the steady
    # state is asserted: in one of the last three lines every partition is owned exactly once, each with a table.
    # 20 s: under a loaded machine (a CI run beside other work) the hand-overs of a 12 s run had not always settled.
    # 45 s since 2026-11-30: an empty `tailor` state pickles to 59 MB (its Gram and covariance blocks, 1,920 rows
    # square), and on this machine a takeover of it took 18 s (not broken down further), so the second shard was
    # still loading its first partition when a 20 s run stopped it (killed after the grace period). Since the state
    # shrank (2c812b8: the covariance recomputed on load, sparse sums; 0.1 MB fresh) a takeover takes 0.2-0.5 s
    # (docs/bus.md, "Default policy"); the 45 s are kept as margin for a loaded machine.
    steady = [line for line in owned[-3:] if parts(line) == [0, 1, 2, 3]]
    assert steady, owned[-3:]
    last = steady[-1]
    assert all(f"{p}:v" in last for p in range(4)), last
    pids = set(int(p) for p in re.findall(r"pid (\d+)", out))
    assert len(pids) == 3 and not any(_alive(p) for p in pids)
    assert (d / "mine.txt").read_text() == "the user's file"
    for f in ("nats/manager.password", "nats/edge.password", "nats/nats-server.conf", "signing.key",
              "nats/pki/server-key.pem"):
        assert stat.S_IMODE((d / f).stat().st_mode) == 0o600, f
    assert not (d / "nats" / "pki" / "ca-key.pem").exists()  # the CA's key goes once the server's cert is signed
    conf = (d / "nats" / "nats-server.conf").read_text()
    assert '"tailor.tel.>"' in conf and "authorization" in conf
    # TLS by default: the shards folded everything above over connections that verified the server with the CA
    assert "tls {" in conf and f"CA {d / 'nats' / 'pki' / 'ca.pem'}" in out
    assert '"event": "bus.connected"' in (d / "shard-0" / "manager.log").read_text()


def test_edge_user_may_publish_telemetry_but_not_write_tables_or_read_state(tmp_path):
    async def scenario(srv):
        m = await T.connect(srv.url, "manager", srv.password("manager"))
        e = await T.connect(srv.url, "edge", srv.password("edge"))
        try:
            mjs = m.jetstream()
            await S.ensure_stream(mjs, partitions=3)  # the production subjects of P = 3: tailor.tel.*.0-2
            b = await S.ensure_buckets(mjs)
            await b["tables"].put("part.0", b"{}")
            ejs = e.jetstream()
            ack = await T.EdgePublisher(ejs).publish(2, T.records(3))
            assert ack.stream == S.STREAM
            with pytest.raises(Exception):  # noqa: B017 (partition 3 of a larger P: no stream answers)
                await T.EdgePublisher(ejs).publish(3, T.records(1))
            assert (await mjs.stream_info(S.STREAM)).state.messages == 1
            with pytest.raises(Exception):  # noqa: B017 (a permissions violation surfaces as a timeout or an error)
                await ejs.publish("$KV.tailor-tables.part.0", b"forged", timeout=1)
            with pytest.raises(Exception):  # noqa: B017
                await e.request("$JS.API.STREAM.INFO.OBJ_tailor-state", b"", timeout=1)
            assert (await b["tables"].get("part.0")).value == b"{}"
        finally:
            await e.close()
            await m.close()

    with NatsServer(tmp_path / "nats") as srv:
        asyncio.run(scenario(srv))
        log = (tmp_path / "nats" / "nats-server.log").read_text()
    assert 'Publish Violation - User "edge", Subject "$KV.tailor-tables.part.0"' in log
    assert 'Publish Violation - User "edge", Subject "$JS.API.STREAM.INFO.OBJ_tailor-state"' in log
