"""``tailor cluster``: a whole scaled-out deployment on loopback (docs/bus.md).

Starts a nats-server (JetStream, file storage in ``<dir>/nats``, users ``manager`` and ``edge`` with random
passwords in 0600 files, TLS with a new CA in ``<dir>/nats/pki`` unless ``--bus-tls off``), ``--shards`` manager shards (``tailor manager --bus``, one signing key
``<dir>/signing.key`` for all) and ``--edges`` tailor-edge processes reading the tables from the bus, prints
where everything listens, then a status line every ``--status-every`` seconds (partitions per shard, table
version per partition). On Ctrl-C, SIGTERM or the end of ``--duration`` it stops what it started, by PID
(shards first, with SIGTERM: their final cycle, state and acknowledgements), and removes no file.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tailor.bus.natsd import NatsCluster, NatsServer, free_port, write_secret
from tailor.bus.partition import DEFAULT_PARTITIONS, MAX_PARTITIONS
from tailor.errors import check

STOP_GRACE_S = 20.0


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="run nats-server, manager shards and edges on loopback (docs/bus.md)")
    p.add_argument("--shards", type=int, default=2, help="manager shards (default 2)")
    p.add_argument("--edges", type=int, default=1, help="tailor-edge processes (default 1; 0: none)")
    p.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    p.add_argument("--dir", default=None,
                   help="working directory (nats data, shard data, logs, keys; default a new temporary directory); "
                        "nothing in it is removed")
    p.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, help="partitions (default 6)")
    p.add_argument("--bus-nodes", type=int, default=1,
                   help="nats-servers forming one JetStream cluster (default 1; 3: the stream, buckets and state "
                        "with 3 replicas, so that one server may die)")
    p.add_argument("--bus-tls", choices=("on", "off"), default="on",
                   help="TLS on the bus: a new CA, a certificate per nats-server, every client and route TLS, the "
                        "shards and edges verifying the servers with --bus-ca (default on)")
    p.add_argument("--update-freq", type=float, default=10.0, help="the shards' update period in seconds (default 10)")
    p.add_argument("--policy", default="tailor", help="the shards' policy (default tailor)")
    p.add_argument("--status-every", type=float, default=5.0, help="seconds between status lines (default 5)")
    p.add_argument("--edge-arg", action="append", default=[], metavar="ARG",
                   help="one more tailor-edge argument for every edge (repeatable), e.g. --edge-arg=--full-address")
    p.add_argument("--shard-arg", action="append", default=[], metavar="ARG",
                   help="one more tailor manager argument for every shard (repeatable)")


def _signing_key(directory: Path) -> tuple[Path, Path]:
    key, pub = directory / "signing.key", directory / "signing.pub"
    if not key.exists():
        private = Ed25519PrivateKey.generate()
        write_secret(key, private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()).decode().strip())
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    pub.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, pub


def _www(directory: Path) -> Path:
    root = directory / "www"
    root.mkdir(exist_ok=True)
    index = root / "index.html"
    if not index.exists():
        index.write_text("<!doctype html><title>tailor cluster</title><p>served by tailor-edge</p>\n")
    return root


class Cluster:
    def __init__(self, args):
        check(args.shards >= 1, "tailor cluster", "shards", ">= 1", args.shards)
        check(args.edges >= 0, "tailor cluster", "edges", ">= 0", args.edges)
        check(args.duration is None or args.duration > 0, "tailor cluster", "duration", "> 0", args.duration)
        check(1 <= args.partitions <= MAX_PARTITIONS, "tailor cluster", "partitions", f"in [1, {MAX_PARTITIONS}]",
              args.partitions)
        check(args.update_freq > 0, "tailor cluster", "update-freq", "> 0", args.update_freq)
        check(args.status_every > 0, "tailor cluster", "status-every", "> 0", args.status_every)
        check(1 <= getattr(args, "bus_nodes", 1) <= 5, "tailor cluster", "bus-nodes", "in [1, 5]",
              getattr(args, "bus_nodes", 1))
        self.args = args
        self.dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tailor-cluster-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.edges: dict[str, dict] = {}  # name -> {"cmd", "log", "url", "metrics"}: what restart_edge needs
        self.shard_metrics: dict[str, str] = {}  # shard name -> its metrics endpoint (--metrics-listen)
        self.server: NatsServer | NatsCluster | None = None
        self.stopping = False

    def _spawn(self, name: str, cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=f, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)  # Ctrl-C reaches us only: we stop them in order
        self.children.append((name, proc))
        return proc

    def start(self) -> None:
        a = self.args
        nodes = getattr(a, "bus_nodes", 1)
        # self.server is set before it starts: stop() stops what a failed or interrupted start left running
        tls = getattr(a, "bus_tls", "on") == "on"
        if nodes > 1:
            self.server = NatsCluster(self.dir / "nats", nodes, tls=tls)
            servers = self.server.nodes
        else:
            self.server = NatsServer(self.dir / "nats", tls=tls)
            servers = [self.server]
        self.server.start()
        users = self.server.info["users"]
        for n in servers:
            print(f"nats-server  pid {n.proc.pid}  {n.url}  config {n.info['conf']}", flush=True)
        print(f"bus {self.server.url}  passwords {users['manager']} {users['edge']}"
              f"{f'  CA {self.server.ca}' if self.server.ca else '  no TLS'}", flush=True)
        replicas = ["--bus-replicas", str(min(nodes, 3))] if nodes > 1 else []
        ca = ["--bus-ca", str(self.server.ca)] if self.server.ca else []
        key, pub = _signing_key(self.dir)
        src = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
        for i in range(a.shards):
            sid, mport = f"shard-{i}", free_port()
            cmd = [sys.executable, "-m", "tailor", "manager", "--bus", self.server.url, "--shard-id", sid,
                   "--bus-user", "manager", "--bus-password-file", str(users["manager"]), "--data", str(self.dir / sid),
                   "--signing-key", str(key), "--partitions", str(a.partitions), "--update-freq", str(a.update_freq),
                   "--policy", a.policy, "--metrics-listen", f"127.0.0.1:{mport}", *replicas, *ca,
                   *getattr(a, "shard_arg", [])]
            proc = self._spawn(sid, cmd, self.dir / sid / "manager.log", env)
            self.shard_metrics[sid] = f"http://127.0.0.1:{mport}/metrics"
            print(f"{sid}  pid {proc.pid}  metrics {self.shard_metrics[sid]}  data {self.dir / sid}  "
                  f"log {self.dir / sid / 'manager.log'}", flush=True)
        if a.edges:
            from tailor.paths import go_binary

            binary = go_binary("tailor-edge", "TAILOR_EDGE")
            root = _www(self.dir)
            for i in range(a.edges):
                port, mport, d = free_port(), free_port(), self.dir / f"edge-{i}"
                cmd = [binary, "--bus", self.server.url, "--bus-user", "edge", "--bus-password-file", str(users["edge"]),
                       *ca, "--pop", f"pop{i}", "--table-cache", str(d / "cache"), "--table-pubkey", str(pub),
                       "--self-signed", "--listen", f"127.0.0.1:{port}", "--root", str(root),
                       "--metrics", f"127.0.0.1:{mport}", *getattr(a, "edge_arg", [])]
                (d / "cache").mkdir(parents=True, exist_ok=True)
                name = f"edge-{i}"
                self.edges[name] = {"cmd": cmd, "log": d / "edge.log", "url": f"https://127.0.0.1:{port}/",
                                    "metrics": f"http://127.0.0.1:{mport}/metrics"}
                proc = self._spawn(name, cmd, d / "edge.log")
                print(f"{name}  pid {proc.pid}  https://127.0.0.1:{port}/  metrics http://127.0.0.1:{mport}/metrics  "
                      f"log {d / 'edge.log'}", flush=True)
        print(f"tables signed by {key} (public key {pub}); directory {self.dir}", flush=True)

    def process(self, name: str) -> subprocess.Popen:
        """The newest process started under ``name`` (``shard-<i>``, ``edge-<i>``)."""
        return [p for n, p in self.children if n == name][-1]

    def restart_edge(self, name: str) -> subprocess.Popen:
        """Stop edge ``name`` (SIGTERM, by PID) and start it again with the same command line (and cache)."""
        old = self.process(name)
        if old.poll() is None:
            old.send_signal(signal.SIGTERM)
            try:
                old.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                old.kill()
                old.wait()
        e = self.edges[name]
        return self._spawn(name, e["cmd"], e["log"])

    async def status(self) -> str:
        from tailor.bus import testing as T

        nc = await T.connect(self.server.url, "manager", self.server.password("manager"), self.server.tls_context())
        try:
            js = nc.jetstream()
            hb = await T.heartbeats(js)
            envs = await T.envelopes(js)
        finally:
            await nc.close()
        shards = " ".join(f"{s}:{','.join(map(str, d.get('partitions', []))) or '-'}" for s, d in sorted(hb.items()))
        versions = " ".join(f"{p}:v{T.envelope_table(e).get('version')}" for p, e in sorted(envs.items()))
        return f"[{time.strftime('%H:%M:%S')}] shards {shards or '-'} | tables {versions or '-'}"

    async def watch(self) -> None:
        a = self.args
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        deadline = None if a.duration is None else time.monotonic() + a.duration
        reported: set[str] = set()
        while not stop.is_set():
            for name, proc in self.children:
                if proc.poll() is not None and name not in reported:
                    reported.add(name)
                    print(f"{name} (pid {proc.pid}) exited with {proc.returncode}", flush=True)
            try:
                print(await asyncio.wait_for(self.status(), 10), flush=True)
            except Exception as err:  # noqa: BLE001 (the bus may be starting or gone: say so, go on)
                print(f"status unavailable: {type(err).__name__}: {err}", flush=True)
            wait = a.status_every if deadline is None else min(a.status_every, max(0.0, deadline - time.monotonic()))
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except TimeoutError:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                break
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    def stop(self) -> None:
        """SIGTERM to the shards (graceful), then the edges; SIGKILL to whatever is left after the grace time; then
        the nats-server. Only the processes started here, by PID."""
        for group in ("shard", "edge"):
            procs = [p for n, p in self.children if n.startswith(group) and p.poll() is None]
            for p in procs:
                p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            for p in procs:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for name, p in self.children:
            print(f"{name} (pid {p.pid}) stopped: exit {p.returncode}", flush=True)
        if self.server is not None:
            self.server.stop()
            print(f"nats-server stopped; files kept in {self.dir}", flush=True)


def run(args) -> int:
    cluster = Cluster(args)
    try:
        cluster.start()
        asyncio.run(cluster.watch())
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    failed = [n for n, p in cluster.children if p.returncode not in (0, -signal.SIGTERM)]
    if failed:
        print(json.dumps({"exited_abnormally": failed}), file=sys.stderr)
    return 1 if failed else 0
