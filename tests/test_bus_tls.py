"""TLS on the bus (docs/bus.md, Security): a nats-server with a certificate takes only TLS clients that verify it with
the operator's CA (``--bus-ca``), a cluster's routes are mutual TLS, and a shard folds telemetry over it."""

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailor.bus import pki
from tailor.bus import setup as S
from tailor.bus import testing as T
from tailor.bus.natsd import NatsCluster, NatsServer, nats_server_binary

pytestmark = pytest.mark.skipif(nats_server_binary() is None,
                                reason="needs nats-server (apt-get install nats-server; Debian's is /usr/sbin/nats-server)")
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _info(port: int) -> dict:
    """The INFO line a nats-server sends first on a plain TCP connection (client or route port)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    line = buf.split(b"\r\n", 1)[0].decode()
    assert line.startswith("INFO "), line
    return json.loads(line[5:])


async def _once(url: str, password: str, tls):
    """One connection attempt, no reconnects (nats-py's connect retries a TLS failure as long as it may)."""
    import nats

    nc = await nats.connect(servers=[url], user="edge", password=password, tls=tls, allow_reconnect=False,
                            max_reconnect_attempts=0, connect_timeout=3)
    await nc.close()


def _route_handshake(port: int, ctx: ssl.SSLContext) -> str:
    """"ok" when a TLS session with ``ctx`` is up and the server then speaks (routes: INFO over TLS), else the error
    (TLS 1.3: a refused client certificate shows at the first read, not in the handshake)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                data = s.recv(4096)
                return "ok" if data.startswith(b"INFO ") else f"no INFO: {data[:40]!r}"
    except (ssl.SSLError, OSError) as err:
        return f"{type(err).__name__}: {err}"


def test_a_tls_bus_takes_only_clients_that_verify_its_certificate(tmp_path):
    other_ca = pki.make_ca(tmp_path / "other")

    async def scenario(srv):
        ctx = srv.tls_context()
        m = await T.connect(srv.url, "manager", srv.password("manager"), ctx)
        e = await T.connect(srv.url, "edge", srv.password("edge"), ctx)
        try:
            assert m.connected_url is not None and e.client_id is not None
            mjs = m.jetstream()
            await S.ensure_stream(mjs, partitions=2)
            ack = await T.EdgePublisher(e.jetstream()).publish(1, T.records(5))
            assert ack.stream == S.STREAM and (await mjs.stream_info(S.STREAM)).state.messages == 1
        finally:
            await e.close()
            await m.close()
        # without the CA (nats-py then upgrades with the system's CAs) and with another CA: the server's certificate
        # does not verify, so the password is never sent
        for tls in (None, pki.client_context(pki.read_ca(other_ca[0]))):
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.wait_for(_once(srv.url, srv.password("edge"), tls), 20)

    with NatsServer(tmp_path / "nats", tls=True) as srv:
        assert _info(srv.port).get("tls_required") is True
        asyncio.run(scenario(srv))


def test_a_client_given_tls_never_speaks_to_a_server_in_clear_text(tmp_path):
    """nats-py upgrades only when the server's INFO asks for TLS: with --bus-ca (or a tls:// URL) a server without TLS
    (or anyone in the path removing the flag) would get the CONNECT, password included, in clear text. The bus's
    client refuses it before the CONNECT; without TLS asked for, a plain server is still spoken to."""
    ca = pki.make_ca(tmp_path / "ca")
    ctx = pki.client_context(pki.read_ca(ca[0]))

    async def scenario(srv):
        for servers, tls in (([srv.url], ctx), ([srv.url.replace("nats://", "tls://")], None)):
            with pytest.raises(Exception, match="does not offer TLS"):
                await asyncio.wait_for(pki.connect(servers, tls, user="edge", password=srv.password("edge"),
                                                   allow_reconnect=False, max_reconnect_attempts=0,
                                                   connect_timeout=3), 20)
        nc = await pki.connect([srv.url], None, user="edge", password=srv.password("edge"), connect_timeout=3)
        assert nc.is_connected
        await nc.close()

    with NatsServer(tmp_path / "plain") as srv:
        asyncio.run(scenario(srv))


def test_the_ca_file_is_read_for_its_certificates_only(tmp_path):
    """A bundle with comments in any encoding between its certificates loads (as Go's reader takes it); a file with
    a private key in it is refused (it does not belong on every client), as is one without a certificate."""
    ca = pki.make_ca(tmp_path / "ca")
    other = pki.make_ca(tmp_path / "other")
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes("# Tailor's bus CA, Zürich\n".encode("latin-1") + ca[0].read_bytes() + b"\xff\xfe notes\n"
                       + other[0].read_bytes())
    text = pki.read_ca(bundle)
    assert text.count("BEGIN CERTIFICATE") == 2 and text.isascii()
    with_key = tmp_path / "with-key.pem"
    with_key.write_bytes(ca[0].read_bytes() + ca[1].read_bytes())
    with pytest.raises(Exception, match="'bus-ca' parameter .* must be a PEM file of CA certificates only"):
        pki.read_ca(with_key)
    garbled = tmp_path / "garbled.pem"
    garbled.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    with pytest.raises(Exception, match="'bus-ca' parameter .* must be a PEM file of CA certificates"):
        pki.read_ca(garbled)


def test_a_clusters_routes_are_mutual_tls_and_replicate(tmp_path):
    """Every route port is TLS from the first byte and asks for the peer's certificate (a node without one of the
    CA cannot join), and a 3-replica stream is created and written over the routes (they work)."""
    cluster = NatsCluster(tmp_path / "nats", nodes=3, tls=True).start()
    try:
        node = cluster.nodes[0].tls  # a certificate of the cluster's CA, as another node would present
        member = pki.client_context(pki.read_ca(cluster.ca))
        member.load_cert_chain(node["cert"], node["key"])
        stranger = pki.client_context(pki.read_ca(cluster.ca))  # trusts the servers, but has no certificate
        for n in cluster.nodes:
            route_port = int(n.info["conf"].read_text().split("cluster {")[1].split("listen: 127.0.0.1:")[1].split()[0])
            assert _route_handshake(route_port, member) == "ok"
            assert _route_handshake(route_port, stranger) != "ok"

        async def scenario():
            nc = await T.connect(cluster.url, "manager", cluster.password("manager"), cluster.tls_context())
            try:
                js = nc.jetstream()
                await S.ensure_stream(js, partitions=1, replicas=3)
                await T.EdgePublisher(js).publish(0, T.records(3))
                info = await js.stream_info(S.STREAM)
                assert info.config.num_replicas == 3 and info.state.messages == 1
                assert info.cluster.leader and len(info.cluster.replicas or []) == 2, info.cluster
                assert all(r.current for r in info.cluster.replicas), info.cluster.replicas
            finally:
                await nc.close()

        asyncio.run(scenario())
    finally:
        cluster.stop()
    logs = "".join((n.dir / "nats-server.log").read_text() for n in cluster.nodes)
    errors = [line for line in logs.splitlines() if "route handshake error" in line]
    # the three strangers' refusals, and nothing else: the nodes' own routes verified each other (the client ports'
    # "TLS handshake error: EOF" lines are the start's readiness probes, a bare TCP connect)
    assert len(errors) == 3 and all("client didn't provide a certificate" in e for e in errors), errors


def test_a_shard_folds_telemetry_over_tls_and_refuses_a_bad_ca_file(tmp_path, capsys):
    from tailor.cli import main

    P, N = 2, 200
    srv = NatsServer(tmp_path / "nats", tls=True).start()
    cmd = [sys.executable, "-m", "tailor", "manager", "--bus", srv.url, "--shard-id", "a", "--bus-user", "manager",
           "--bus-password-file", str(srv.info["users"]["manager"]), "--bus-ca", str(srv.ca), "--data",
           str(tmp_path / "a"), "--update-freq", "1",
           "--partitions", str(P), "--policy", "configanator"]
    log = open(tmp_path / "a.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=SRC))
    log.close()

    async def scenario():
        ctx = srv.tls_context()
        nc = await T.connect(srv.url, "manager", srv.password("manager"), ctx)
        enc = await T.connect(srv.url, "edge", srv.password("edge"), ctx)
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + 60
            while sorted((await T.heartbeats(js)).get("a", {}).get("partitions", [])) != list(range(P)):
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "a.log").read_text()[-3000:]
                await asyncio.sleep(0.3)
            pub = T.EdgePublisher(enc.jetstream(), source="edge-tls")
            for p, rs in T.group(T.records(N), P, chunk=50):
                await pub.publish(p, rs)
            while sum(a["records"] for a in (await T.archives(js)).values()) < N:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "a.log").read_text()[-3000:]
                await asyncio.sleep(0.3)
            assert sorted(await T.envelopes(js)) == list(range(P))
        finally:
            await enc.close()
            await nc.close()

    try:
        asyncio.run(scenario())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.stop()
    base = ["manager", "--bus", srv.url, "--shard-id", "b", "--data", str(tmp_path / "b")]
    big = tmp_path / "big.pem"
    big.write_bytes(b"x" * (pki.MAX_CA_BYTES + 1))
    empty = tmp_path / "empty.pem"
    empty.write_text("no certificate here\n")
    for path, why in ((tmp_path / "missing.pem", "a readable PEM file of CA certificates"),
                      (big, f"a PEM file of at most {pki.MAX_CA_BYTES} bytes"),
                      (empty, "a PEM file of CA certificates")):
        assert main([*base, "--bus-ca", str(path)]) == 2
        assert f"'bus-ca' parameter of tailor manager must be {why}" in capsys.readouterr().err
    assert main(["manager", "--data", str(tmp_path / "c"), "--bus-ca", str(srv.ca), "--insecure-dev"]) == 2
    assert "'bus-ca' parameter of tailor manager must be given with --bus only" in capsys.readouterr().err
