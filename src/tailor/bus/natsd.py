"""A nats-server on loopback for ``tailor cluster`` and the tests: configuration file, users, start, stop.

The configuration (``nats-server.conf``) enables JetStream with file storage in ``<dir>/jetstream`` and, when
users are asked for, authorization with two users (docs/bus.md, Security):

* ``manager``: the JetStream API and everything the shards touch (``tailor.>``, the buckets' and object
  store's subjects, acknowledgements), replies in ``_INBOX.>``;
* ``edge``: :data:`EDGE_PUBLISH` / :data:`EDGE_SUBSCRIBE` only: publish telemetry, watch the ``tailor-tables``
  bucket (stream info, an ordered consumer and its flow control), nothing else: an edge cannot
  write a table, read learned state or the archive, or touch the telemetry consumers.

Passwords are random (32 hex digits) and written to ``<dir>/<user>.password`` with mode 0600.

:class:`NatsCluster` runs several such servers as one JetStream cluster on loopback (``<dir>/node-<i>``, the same
users and passwords, routes between them authenticated with a random route password): streams and buckets created
with 3 replicas survive one server's loss (``tailor cluster --bus-nodes 3``, ``tailor manager --bus-replicas 3``).

With ``tls`` (``tailor.bus.pki``: a CA and a certificate per server), every client connection must be TLS (the
server's certificate, the clients verify it with ``--bus-ca``) and so must every route (mutual TLS: each node's
certificate verified by the others against the same CA), so that passwords and telemetry never cross a network in
clear text.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

from tailor.bus import pki
from tailor.errors import TailorError

TABLES_STREAM = "KV_tailor-tables"
EDGE_PUBLISH = [  # the same list as edge/internal/bus/bustest.EdgePermissions (what nats.go's KV watch needs)
    "tailor.tel.>",  # telemetry batches (the PubAck comes back to an _INBOX reply)
    f"$JS.API.STREAM.INFO.{TABLES_STREAM}",  # binding the key-value bucket
    f"$JS.API.CONSUMER.CREATE.{TABLES_STREAM}.>",  # the watch's ordered consumer (filtered form, nats-server >= 2.9)
    f"$JS.API.CONSUMER.DELETE.{TABLES_STREAM}.>",  # the watch's end
    f"$JS.FC.{TABLES_STREAM}.>",  # flow-control replies of the watch's push consumer
]
EDGE_SUBSCRIBE = ["_INBOX.>"]  # request replies and the watch's deliveries
MANAGER_PUBLISH = ["tailor.>", "$JS.>", "$KV.>", "$O.>", "_INBOX.>"]
MANAGER_SUBSCRIBE = ["_INBOX.>", "tailor.>", "$KV.>", "$O.>"]
MAX_PAYLOAD = 8 << 20  # a table envelope up to 8 MiB (telemetry messages stay within the stream's 4 MiB)
TLS_TIMEOUT_S = 5  # the TLS handshake's deadline on the client port and the routes (nats-server's default is 0.5 s)


def nats_server_binary() -> str | None:
    """``$TAILOR_NATS_SERVER``, else ``nats-server`` on PATH, else Debian's /usr/sbin or /usr/bin."""
    env = os.environ.get("TAILOR_NATS_SERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    for cand in (shutil.which("nats-server"), "/usr/sbin/nats-server", "/usr/bin/nats-server"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)


def _list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _tls_block(tls: dict, indent: str, verify: bool) -> list[str]:
    lines = [f"{indent}tls {{", f"{indent}  cert_file: {json.dumps(str(tls['cert']))}",
             f"{indent}  key_file: {json.dumps(str(tls['key']))}", f"{indent}  timeout: {TLS_TIMEOUT_S}"]
    if verify:  # the peer must present a certificate the CA signed (the routes: mutual TLS)
        lines += [f"{indent}  ca_file: {json.dumps(str(tls['ca']))}", f"{indent}  verify: true"]
    return lines + [f"{indent}}}"]


def write_config(directory: Path, port: int, users: bool = True, cluster: dict | None = None,
                 passwords: dict[str, str] | None = None, tls: dict | None = None) -> dict:
    """Write ``nats-server.conf`` (and the password files); returns {"conf", "url", "users": {name: file}}.

    ``cluster``: {"name", "server", "port", "routes": [route ports of the others], "password"}: this server as one
    node of a JetStream cluster. ``passwords``: the users' passwords (a cluster's nodes share them); random when
    None. ``tls``: {"cert", "key", "ca"} PEM files: clients must connect with TLS (and verify ``cert`` against
    ``ca``), and the routes are mutual TLS with the same certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"listen: 127.0.0.1:{port}", f"max_payload: {MAX_PAYLOAD}", "jetstream {",
             f"  store_dir: {json.dumps(str(directory / 'jetstream'))}", "}"]
    if tls is not None:
        lines += _tls_block(tls, "", verify=False)
    if cluster is not None:
        routes = ", ".join(json.dumps(f"nats-route://route:{cluster['password']}@127.0.0.1:{p}")
                           for p in cluster["routes"])
        lines += [f"server_name: {json.dumps(cluster['server'])}", "cluster {", f"  name: {json.dumps(cluster['name'])}",
                  f"  listen: 127.0.0.1:{cluster['port']}",
                  f"  authorization {{ user: route, password: {json.dumps(cluster['password'])} }}",
                  *(_tls_block(tls, "  ", verify=True) if tls is not None else []),
                  f"  routes: [{routes}]", "}"]
    files = {}
    if users:
        entries = []
        for name, pub, sub in (("manager", MANAGER_PUBLISH, MANAGER_SUBSCRIBE), ("edge", EDGE_PUBLISH, EDGE_SUBSCRIBE)):
            password = (passwords or {}).get(name) or secrets.token_hex(16)
            files[name] = directory / f"{name}.password"
            write_secret(files[name], password)
            entries.append(f"    {{user: {json.dumps(name)}, password: {json.dumps(password)}, permissions: {{"
                           f"publish: {_list(pub)}, subscribe: {_list(sub)}}}}}")
        lines += ["authorization {", "  users: [", *entries, "  ]", "}"]
    conf = directory / "nats-server.conf"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the passwords
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    return {"conf": conf, "url": f"nats://127.0.0.1:{port}", "users": files}


class NatsServer:
    """A nats-server child process on loopback; :meth:`stop` kills it by PID and waits for it."""

    def __init__(self, directory: Path, port: int | None = None, users: bool = True, cluster: dict | None = None,
                 passwords: dict[str, str] | None = None, tls: dict | bool | None = None):
        """``tls``: {"cert", "key", "ca"} PEM files; ``True``: a new CA and a certificate for 127.0.0.1 in
        ``<dir>/pki`` (``self.ca`` is the CA file clients verify the server with)."""
        binary = nats_server_binary()
        if binary is None:
            raise TailorError("nats-server not found (apt-get install nats-server, or set $TAILOR_NATS_SERVER)")
        self.binary, self.dir = binary, Path(directory)
        self.port = port or free_port()
        if tls is True:
            ca = pki.make_ca(self.dir / "pki")
            cert, key = pki.issue(self.dir / "pki", ca, "server")
            ca[1].unlink()  # the CA signed what it had to: its key is not left on disk
            tls = {"cert": cert, "key": key, "ca": ca[0]}
        self.tls: dict | None = tls or None
        self.ca: Path | None = Path(self.tls["ca"]) if self.tls else None
        self.info = write_config(self.dir, self.port, users, cluster, passwords, self.tls)
        self.url = self.info["url"]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 10.0) -> NatsServer:
        log = open(self.dir / "nats-server.log", "ab")
        self.proc = subprocess.Popen([self.binary, "-c", str(self.info["conf"])], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TailorError(f"nats-server exited with {self.proc.returncode}: see {self.dir / 'nats-server.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TailorError(f"nats-server did not listen on 127.0.0.1:{self.port} within {timeout_s:g} s")

    def password(self, user: str) -> str:
        return self.info["users"][user].read_text().strip()

    def tls_context(self) -> ssl.SSLContext | None:
        """A client's TLS context for this server (None without TLS)."""
        return pki.client_context(pki.read_ca(self.ca)) if self.ca else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class NatsCluster:
    """``nodes`` nats-servers on loopback forming one JetStream cluster (``<dir>/node-<i>``, the same users and
    passwords on each); ``url`` lists every node (clients fail over between them). :meth:`start` returns once a
    JetStream request is answered (the cluster has a meta leader); :meth:`stop` stops every node by PID."""

    def __init__(self, directory: Path, nodes: int = 3, users: bool = True, tls: bool = False):
        """``tls``: a new CA in ``<dir>/pki`` and a certificate per node: clients and routes TLS (``self.ca``)."""
        if nodes < 1:
            raise TailorError(f"a JetStream cluster needs at least one node, got {nodes}")
        self.dir = Path(directory)
        ports = [(free_port(), free_port()) for _ in range(nodes)]
        route_password = secrets.token_hex(16)
        passwords = {"manager": secrets.token_hex(16), "edge": secrets.token_hex(16)} if users else None
        ca = pki.make_ca(self.dir / "pki") if tls else None
        self.ca: Path | None = ca[0] if ca else None

        def node_tls(i: int) -> dict | None:
            if ca is None:
                return None
            cert, key = pki.issue(self.dir / "pki", ca, f"node-{i}")
            return {"cert": cert, "key": key, "ca": ca[0]}

        self.nodes = [NatsServer(self.dir / f"node-{i}", port=client, users=users, passwords=passwords,
                                 cluster={"name": "tailor", "server": f"node-{i}", "port": route,
                                          "routes": [r for j, (_, r) in enumerate(ports) if j != i],
                                          "password": route_password}, tls=node_tls(i))
                      for i, (client, route) in enumerate(ports)]
        if ca is not None:
            ca[1].unlink()  # every node's certificate is signed: the CA's key is not left on disk
        self.info = self.nodes[0].info  # the users' password files (every node's hold the same passwords)
        self.url = ",".join(n.url for n in self.nodes)

    def start(self, timeout_s: float = 30.0) -> NatsCluster:
        """Start every node; once each node answers a JetStream request (it joined the cluster, which has a meta
        leader), return. On any failure (or an interruption) every node started so far is stopped. Not from inside
        a running event loop (the readiness check runs its own)."""
        try:
            for n in self.nodes:
                n.start()
            deadline = time.monotonic() + timeout_s
            while not self._jetstream_ready():
                for n in self.nodes:
                    if n.proc is None or n.proc.poll() is not None:
                        raise TailorError(f"nats-server {n.dir.name} exited: see {n.dir / 'nats-server.log'}")
                if time.monotonic() > deadline:
                    raise TailorError(f"the JetStream cluster in {self.dir} was not ready within {timeout_s:g} s "
                                      f"(a node that did not join, or no meta leader)")
                time.sleep(0.25)
        except BaseException:
            self.stop()
            raise
        return self

    def _jetstream_ready(self) -> bool:
        """Every node, asked on its own, answers $JS.API.INFO (as the manager user, when there are users)."""
        import asyncio

        async def ask(url: str) -> bool:
            user = "manager" if self.info["users"] else None
            nc = await pki.connect(servers=[url], user=user, password=self.password("manager") if user else None,
                                   connect_timeout=2, max_reconnect_attempts=0, allow_reconnect=False,
                                   tls=self.tls_context())
            try:
                await nc.jetstream().account_info()
                return True
            except Exception:  # noqa: BLE001 (no meta leader yet: JetStream not available)
                return False
            finally:
                await nc.close()

        async def every() -> bool:
            return all([await ask(n.url) for n in self.nodes])

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise TailorError("NatsCluster.start cannot run inside an event loop (use asyncio.to_thread)")
        try:
            return asyncio.run(every())
        except Exception:  # noqa: BLE001 (not listening yet)
            return False

    def password(self, user: str) -> str:
        return self.nodes[0].password(user)

    def tls_context(self) -> ssl.SSLContext | None:
        return pki.client_context(pki.read_ca(self.ca)) if self.ca else None

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

