"""deploy/: the manager's TOML configuration (`tailor manager --config`), the systemd units, and the steps of
docs/deploy.md run for real in network namespaces with the units' own commands (not systemd itself).

The privileged test builds one "host" (a network namespace the test creates; the host's processes enter it with
``nsenter --net``, so they keep the real cgroup and BPF file systems) and one client namespace joined by a veth.
Step 1: nginx (Debian) serves a site from a cgroup standing in for ``system.slice/nginx.service``; the manager
runs from deploy/manager.toml; tailor-agent attaches to nginx's cgroup; an operator table reaches the agent,
a bounded load of curl requests reaches nginx, and every connection's telemetry record reaches the manager with
the configuration the table gave its client. Step 2: nginx moves to 127.0.0.1:8080 and tailor-edge (its unit)
takes :443 in front of it with --upstream, the agent (with the front drop-in) moves to tailor-edge's cgroup, and
an HTTP/2 table reaches the clients through ALPN. Everything started is stopped by PID; namespaces and cgroups
are removed and checked.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailor.cli import _build_parser
from tailor.errors import ParameterError
from tailor.manager.server import GIVEN, config_from_args, with_config_file

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
UNITS = ("tailor-manager", "tailor-agent", "tailor-edge")
ENV = {"TAILOR_TOKEN": "operator-token"}


def _parse(argv: list[str]):
    return _build_parser().parse_args(["manager", *argv])


def _flags() -> dict:
    """Every `tailor manager` flag (long name without dashes) -> its argparse action."""
    sub = next(a for a in _build_parser()._actions if a.dest == "command").choices["manager"]
    return {a.option_strings[-1][2:]: a for a in sub._actions if a.option_strings and a.dest not in ("help", "config")}


def _toml(value) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


# -- tailor manager --config FILE
def test_every_flag_has_a_key_and_the_command_line_wins(tmp_path):
    values = {}
    for key, action in _flags().items():  # a value different from the default, of the flag's own kind
        if action.nargs == 0:
            values[key] = True
        elif isinstance(action.default, list):
            values[key] = ["a=1"] if key == "policy-param" else ["x.example"]
        elif action.type in (int, float):
            values[key] = (action.default or 0) + 3
        elif key == "cohort-salt":
            values[key] = "ab" * 16
        elif action.choices:  # a flag with choices: one of them, not the default
            values[key] = next(c for c in action.choices if c != action.default)
        else:
            values[key] = f"/from-file/{key}" if key != "listen" else "127.0.0.1:9999"
    conf = tmp_path / "m.toml"
    conf.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in values.items()))
    args = with_config_file(_parse(["--config", str(conf)]))
    for key, action in _flags().items():
        assert getattr(args, action.dest) == values[key], key
    given = with_config_file(_parse(["--config", str(conf), "--holdback", "0.2", "--site", "cli.example",
                                     "--data", "/from-cli"]))
    assert (given.holdback, given.site, given.data) == (0.2, ["cli.example"], "/from-cli")  # 0.2 is the default
    assert given.update_freq == values["update-freq"] and given.config is None
    assert with_config_file(given) is given  # resolved once


def test_deploy_manager_toml_is_valid_and_names_every_flag():
    text = (DEPLOY / "manager.toml").read_text()
    cfg = config_from_args(_parse(["--config", str(DEPLOY / "manager.toml")]), environ=ENV)
    assert (cfg.data_dir, cfg.policy, cfg.holdback) == ("/var/lib/tailor-manager", "tailor", 0.2)
    named = set(re.findall(r"^#? ?([a-z][a-z0-9-]*) = ", text, re.M))
    assert set(_flags()) - named == set(), "flags missing from deploy/manager.toml (set or commented)"


def test_units_with_a_dynamic_user_read_nothing_under_etc_tailor_themselves():
    """docs/deploy.md makes /etc/tailor root's (0700): a unit run as a dynamic user gets its files only through
    systemd (EnvironmentFile=, LoadCredential= at %d), never as a path on its command line. (Until 2026-12-07 the
    manager's --config and the edge's --table-pubkey named /etc/tailor files; found by review.)"""
    for unit in ("tailor-manager.service", "tailor-edge.service"):
        svc = read_unit(DEPLOY / unit)["Service"]
        assert svc["DynamicUser"] == ["yes"], unit
        (line,) = svc["ExecStart"]
        assert "/etc/tailor" not in line, (unit, line)
        assert all(spec.split(":", 1)[1].startswith("/etc/tailor/") for spec in svc["LoadCredential"]), unit


@pytest.mark.parametrize("body, key, reason", [
    ("holdback = \"x\"\n", "holdback", "must be a number"),
    ("update_freq = 3\n", "update_freq", "did you mean 'update-freq'"),
    ("operator-token = \"s\"\n", "operator-token", "credentials come from the environment"),
    ("frobnicate = 1\n", "frobnicate", "a flag's name without the dashes"),
    ("ope-gate = 1\n", "ope-gate", "true or false"),
    ("max-rules = 2.5\n", "max-rules", "an integer"),
    ("site = \"a.example\"\n", "site", "a list of strings"),
    ("[manager]\nholdback = 0.3\n", "manager", "not a table"),
    ("holdback = \n", "config", "valid TOML"),
    ("holdback = 1.5\ndata = \"/d\"\n", "holdback", "in [0, 1)"),  # the ManagerConfig's own check
])
def test_config_file_errors_name_the_key_and_the_reason(tmp_path, body, key, reason):
    conf = tmp_path / "bad.toml"
    conf.write_text(body)
    with pytest.raises(ParameterError) as err:
        config_from_args(_parse(["--config", str(conf), "--data", "/d"]), environ=ENV)
    assert f"'{key}'" in str(err.value) and reason in str(err.value)


def test_data_is_required_from_the_command_line_or_the_file(tmp_path):
    with pytest.raises(ParameterError, match="'data'.*--config"):
        config_from_args(_parse([]), environ=ENV)
    with pytest.raises(ParameterError, match="readable TOML file"):
        config_from_args(_parse(["--config", str(tmp_path / "missing.toml")]), environ=ENV)
    assert not getattr(_parse(["--data", "d"]), GIVEN) - {"data"}  # only what the command line gave


# -- the units
def read_unit(path: Path, *dropins: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values, with backslash continuations, comments, and drop-ins applied in order
    (an empty assignment resets a list, as ``ExecStart=`` in a drop-in does)."""
    sections: dict[str, dict[str, list[str]]] = {}
    for p in (path, *dropins):
        section, pending = None, ""
        for raw in p.read_text().splitlines():
            line = (pending + " " + raw.strip()).strip() if pending else raw.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1].strip()
                continue
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = sections.setdefault(line[1:-1], {})
                continue
            key, _, value = line.partition("=")
            if value.strip():
                section.setdefault(key.strip(), []).append(value.strip())
            else:
                section[key.strip()] = []
    return sections


def test_units_bound_their_privileges():
    units = {u: read_unit(DEPLOY / f"{u}.service")["Service"] for u in UNITS}
    for name in ("tailor-manager", "tailor-edge"):
        svc = units[name]
        assert svc["DynamicUser"] == ["yes"] and svc["NoNewPrivileges"] == ["yes"], name
        assert svc["CapabilityBoundingSet"] == ([] if name == "tailor-manager" else ["CAP_NET_BIND_SERVICE"]), name
    agent = units["tailor-agent"]
    assert agent["User"] == ["root"]  # the agent refuses to run otherwise
    assert set(agent["CapabilityBoundingSet"][0].split()) <= {"CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN",
                                                              "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"}
    front = read_unit(DEPLOY / "tailor-agent.service", DEPLOY / "tailor-agent-front.conf")["Service"]["ExecStart"]
    assert len(front) == 1 and "tailor-edge.service" in front[0] and "--telemetry" not in front[0]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze (Debian package systemd)")
@pytest.mark.parametrize("unit, most", [("tailor-manager", 2.0), ("tailor-edge", 2.0), ("tailor-agent", 5.0)])
def test_units_verify_and_their_exposure_is_low(unit, most):
    path = DEPLOY / f"{unit}.service"
    res = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    problems = [ln for ln in res.stderr.splitlines() if ln.strip() and "is not executable" not in ln]
    assert problems == [], problems  # only the binaries this machine has not installed
    res = subprocess.run(["systemd-analyze", "security", "--offline=true", str(path)], capture_output=True,
                         text=True, timeout=60)
    score = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", res.stdout).group(1))
    assert score <= most, res.stdout[-2000:]


# -- the deployment, run in namespaces with the units' commands
SERVER_IP, CLIENTS = "10.213.0.1", [f"10.213.0.{i}" for i in range(2, 10)]  # 8 clients: holdback is per client
CGROUP_ROOT = Path("/sys/fs/cgroup/unified")
REQUESTS = 40  # step 1: connections to nginx, 5 per client
TOOLS = ("nginx", "curl", "openssl", "nsenter", "ip")


def _missing_tools() -> list[str]:
    return [t for t in TOOLS if not (shutil.which(t) or shutil.which(t, path="/usr/sbin:/sbin"))]


class Host:
    """The test's host: a namespace its processes enter with nsenter --net, the units' paths mapped into a
    temporary directory, the units' commands run as the units give them."""

    def __init__(self, world, tmp: Path):
        from tailor.demo.binaries import binary

        self.world, self.tmp = world, tmp
        self.stopped = []
        self.ns = world.netns("host")
        self.cli = world.netns("cli")
        self.etc, self.state, self.www = tmp / "etc", tmp / "var-lib-tailor-manager", tmp / "www"
        for d in (self.etc, self.state, self.www, tmp / "nginx" / "tmp"):
            d.mkdir(parents=True)
        self.cgroup = {"nginx": CGROUP_ROOT / f"{world.prefix}nginx.service",
                       "tailor-edge": CGROUP_ROOT / f"{world.prefix}tailor-edge.service"}
        self.paths = {"/sys/fs/cgroup/system.slice/nginx.service": str(self.cgroup["nginx"]),
                      "/sys/fs/cgroup/system.slice/tailor-edge.service": str(self.cgroup["tailor-edge"]),
                      "/sys/fs/cgroup": str(CGROUP_ROOT), "/etc/tailor/": f"{self.etc}/",
                      "/var/lib/tailor-manager": str(self.state), "/var/www/html": str(self.www)}
        self.exe = {"/opt/tailor/venv/bin/tailor": [sys.executable, "-m", "tailor"],
                    "/usr/local/bin/tailor-agent": [binary("tailor-agent")],
                    "/usr/local/bin/tailor-edge": [binary("tailor-edge")]}

    def sub(self, text: str) -> str:
        keys = sorted(self.paths, key=len, reverse=True)
        return re.sub("|".join(map(re.escape, keys)), lambda m: self.paths[m.group(0)], text)

    def enter(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.ns}"]

    def unit_command(self, unit: str, *dropins: str) -> tuple[list[str], dict]:
        """ExecStart and the environment of a unit: EnvironmentFile read, LoadCredential copied to %d."""
        svc = read_unit(DEPLOY / unit, *(DEPLOY / d for d in dropins))["Service"]
        creds = self.tmp / "credentials" / unit
        creds.mkdir(parents=True, exist_ok=True)
        for spec in svc.get("LoadCredential", []):
            name, _, src = spec.partition(":")
            shutil.copy(self.sub(src), creds / name)
        env = {}
        for f in svc.get("EnvironmentFile", []):
            for line in Path(self.sub(f)).read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    k, _, v = line.partition("=")
                    env[k.strip()] = v.strip()
        (line,) = svc["ExecStart"]
        argv = [self.sub(a) for a in shlex.split(line.replace("%d", str(creds)))]
        return self.exe[argv[0]] + argv[1:], env

    def start(self, name: str, argv: list[str], env: dict | None = None, cgroup: Path | None = None):
        """argv inside the host namespace (and, first, inside ``cgroup``, as systemd starts a service)."""
        cmd = self.enter() + argv
        if cgroup is not None:
            cmd = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *cmd]
        return self.world.spawn(name, cmd, {"PYTHONPATH": str(DEPLOY.parent / "src"), **(env or {})})

    def stop(self, name: str, timeout_s: float = 30.0) -> None:
        """Stop a process by PID (its group), as systemctl stop would; it leaves the world's alive checks."""
        proc = next(p for p in self.world.procs if p.name == name)
        self.world.stop(proc, timeout_s)
        self.world.procs.remove(proc)
        self.stopped.append(proc)

    def curl(self, *args: str, ns: str | None = None, timeout: float = 15) -> subprocess.CompletedProcess:
        pre = ["ip", "netns", "exec", ns] if ns else self.enter()
        return subprocess.run([*pre, "curl", "-sS", "--max-time", str(timeout), *args], capture_output=True,
                              text=True, timeout=timeout + 10)

    def wait(self, what: str, ok, timeout_s: float = 60.0) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            self.world.check_alive()
            if ok():
                return
            time.sleep(0.3)
        logs = {p.name: p.log.read_text(errors="replace")[-800:] for p in self.world.procs}
        raise AssertionError(f"timed out waiting for {what}: {logs}")


NGINX_SITE = """\
  server {{
    listen {listen};
    root {www};
    location /app/ {{ default_type text/plain; return 200 "nginx app $remote_addr\\n"; }}
  }}
}}
"""


def _nginx(host: Host, listen: str):
    from tailor.testbed.server import NGINX_HEAD

    d = host.tmp / "nginx"
    conf = d / f"nginx-{listen.replace(':', '_')}.conf"
    conf.write_text(NGINX_HEAD.format(d=d, conns=256) + NGINX_SITE.format(listen=listen, www=host.www))
    return host.start("nginx", ["nginx", "-c", str(conf), "-g", "daemon off;"], cgroup=host.cgroup["nginx"])


def _credentials(host: Host) -> dict:
    """What the operator writes to /etc/tailor (docs/deploy.md): tokens, the table signing key pair, the
    edge's certificate, and manager.toml as shipped."""
    tokens = {"operator": "op-" + os.urandom(12).hex(), "edge": "edge-" + os.urandom(12).hex()}
    (host.etc / "manager.env").write_text(f"TAILOR_OPERATOR_TOKEN={tokens['operator']}\n"
                                          f"TAILOR_EDGE_TOKENS={tokens['edge']}\n")
    for f in ("agent.env", "edge.env"):
        (host.etc / f).write_text(f"TAILOR_TOKEN={tokens['edge']}\n")
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True, timeout=60)  # noqa: E731
    run("genpkey", "-algorithm", "ed25519", "-out", str(host.etc / "signing.key"))
    run("pkey", "-in", str(host.etc / "signing.key"), "-pubout", "-out", str(host.etc / "signing.pub"))
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
        "-keyout", str(host.etc / "edge-key.pem"), "-out", str(host.etc / "edge-cert.pem"),
        "-subj", "/CN=deploy-test", "-addext", f"subjectAltName=IP:{SERVER_IP}")
    (host.etc / "manager.toml").write_text(host.sub((DEPLOY / "manager.toml").read_text()))
    return tokens


def _table(changes: dict) -> dict:
    """An operator table: the test's clients (10.213.0.0/24) get the configuration with ``changes``."""
    from tailor.space import ConfigSpace

    space = ConfigSpace.named("core")
    default = space.configs[space.default_index].id
    cid = next(c.id for c in space.configs if dict(c.changes()) == changes)
    return {"schema": "tailor.decision-table/v1", "version": 1, "generated_at": time.time(), "valid_for_s": 3600,
            "policy": "operator", "holdback": 0.2, "default": default, "configs": {default: {}, cid: changes},
            "groups": [{"id": "deploy-clients", "choices": [{"config": cid, "p": 1.0}]}],
            "rules": [{"prefix": "10.213.0.0/24", "group": "deploy-clients"}]}


def _push(host: Host, tokens: dict, table: dict) -> int:
    body = host.tmp / f"table-{time.time_ns()}.json"
    body.write_text(json.dumps(table))
    res = host.curl("-X", "POST", "-H", f"Authorization: Bearer {tokens['operator']}", "-H",
                    "Content-Type: application/json", "--data-binary", f"@{body}",
                    "http://127.0.0.1:8470/v1/table?reason=deploy-test")
    return json.loads(res.stdout)["version"]


def _metric(host: Host, name: str, port: int = 8470) -> float:
    """A metric's value summed over its label sets (0 when absent) from the /metrics on ``port``."""
    text = host.curl(f"http://127.0.0.1:{port}/metrics").stdout
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M))


def _veth(host: Host) -> None:
    from tailor.demo.world import ip

    a, b = f"{host.world.prefix}h"[-15:], f"{host.world.prefix}c"[-15:]
    ip("link", "add", a, "netns", host.ns, "type", "veth", "peer", "name", b, "netns", host.cli)
    ip("-n", host.ns, "addr", "add", f"{SERVER_IP}/24", "dev", a)
    ip("-n", host.ns, "link", "set", a, "up")
    for k, addr in enumerate(CLIENTS):
        ip("-n", host.cli, "addr", "add", f"{addr}/{24 if k == 0 else 32}", "dev", b)
    ip("-n", host.cli, "link", "set", b, "up")


@pytest.mark.privileged
@pytest.mark.skipif(bool(_missing_tools()), reason=f"needs {', '.join(TOOLS)} (apt-get install -y nginx curl "
                                                   "openssl util-linux iproute2)")
@pytest.mark.skipif(not (CGROUP_ROOT / "cgroup.controllers").exists(), reason=f"needs cgroup v2 at {CGROUP_ROOT}")
def test_deployment_steps_in_namespaces(tmp_path):
    from tailor.demo.world import World, cgroups_left, leftovers, pid_alive

    world = World(prefix=f"tdp{os.getpid() % 100000}-", workdir=tmp_path / "logs")
    world.workdir.mkdir()
    host = None
    try:
        host = Host(world, tmp_path)
        for cg in host.cgroup.values():
            cg.mkdir()
            world.cgroups.append(cg)
        _veth(host)
        tokens = _credentials(host)
        (host.www / "index.html").write_text("<html><body>deploy test</body></html>\n")
        (host.www / "obj.bin").write_bytes(os.urandom(200_000))
        _step_one(host, tokens)
        _step_two(host, tokens)
    finally:
        problems = world.close()
        procs = world.procs + (host.stopped if host is not None else [])
        left, alive = leftovers(world.prefix), [p.popen.pid for p in procs if pid_alive(p.popen.pid)]
        cgs = cgroups_left(world.cgroups)
    assert (problems, left, alive, cgs) == ([], [], [], [])
    records = _stored_records(tmp_path / "var-lib-tailor-manager" / "tailor.duckdb")
    for name in ("edge", "agent-front"):  # their shutdown lines (telemetry dropped or undelivered), shown on failure
        log = tmp_path / "logs" / f"{name}.log"
        print(f"{name}.log ends:", log.read_text(errors="replace").splitlines()[-4:] if log.exists() else "(none)")
    _check_records(records, world.steps)


def _step_one(host: Host, tokens: dict) -> None:
    """nginx + manager + tailor-agent on one host; a table reaches the agent; load; telemetry reaches the manager."""
    world = host.world
    _nginx(host, f"{SERVER_IP}:80")
    argv, env = host.unit_command("tailor-manager.service")
    host.start("manager", argv, env)
    host.wait("the manager's /healthz", lambda: host.curl("http://127.0.0.1:8470/healthz").returncode == 0, 90)
    host.wait("nginx", lambda: host.curl(f"http://{SERVER_IP}/", ns=host.cli).returncode == 0)
    version = _push(host, tokens, _table({"tcp.congestion_control": "bbr", "tcp.initial_cwnd": 16}))
    argv, env = host.unit_command("tailor-agent.service")
    agent = host.start("agent", argv, env)
    installed = f"installed table version {version} "
    host.wait("the table at the agent", lambda: installed in agent.log.read_text(errors="replace"), 30)
    before = _metric(host, "tailor_ingest_records_total")
    for i in range(REQUESTS):
        res = host.curl("--interface", CLIENTS[i % len(CLIENTS)], "-o", "/dev/null", "-w", "%{http_code}",
                        f"http://{SERVER_IP}/obj.bin", ns=host.cli)
        assert res.stdout == "200", res.stderr
    host.wait(f"{REQUESTS} connection records at the manager",
              lambda: _metric(host, "tailor_ingest_records_total") - before >= REQUESTS, 30)
    time.sleep(1.0)
    assert _metric(host, "tailor_ingest_records_total") - before == REQUESTS  # one per connection, no more
    # the agent's own /metrics (the unit's --metrics): one decision per connection closed, by group and config
    host.wait("the agent's decisions in its /metrics",
              lambda: _metric(host, "tailor_agent_decisions_total", 9465) >= REQUESTS, 15)
    assert _metric(host, "tailor_agent_decisions_total", 9465) == REQUESTS
    dash = host.curl("-u", f"operator:{tokens['operator']}", "http://127.0.0.1:8470/")
    assert dash.returncode == 0 and "deploy-clients" in dash.stdout
    host.stop("agent")
    world.steps = {"agent_version": version}


def _step_two(host: Host, tokens: dict) -> None:
    """nginx behind tailor-edge (--upstream); the agent on tailor-edge's cgroup; an HTTP/2 table via ALPN."""
    world = host.world
    host.stop("nginx")
    _nginx(host, "127.0.0.1:8080")
    host.wait("nginx on 127.0.0.1:8080", lambda: host.curl("http://127.0.0.1:8080/app/").returncode == 0)
    version = _push(host, tokens, _table({"http.version": "2", "tcp.congestion_control": "bbr"}))
    argv, env = host.unit_command("tailor-edge.service")
    edge = host.start("edge", argv, env, cgroup=host.cgroup["tailor-edge"])
    argv, env = host.unit_command("tailor-agent.service", "tailor-agent-front.conf")
    agent = host.start("agent-front", argv, env)
    installed = f"installed table version {version} "
    host.wait("the table at the front agent", lambda: installed in agent.log.read_text(errors="replace"), 30)
    host.wait("the table at tailor-edge", lambda: f"version {version}" in edge.log.read_text(errors="replace"), 30)
    alpn = []
    for i in range(24):
        path = "/app/x" if i % 2 else "/obj.bin"  # both proxied to nginx: a location and a file of its root
        res = host.curl("-k", "--http2", "--interface", CLIENTS[i % len(CLIENTS)], "-o", str(host.tmp / "body"),
                        "-w", "%{http_code} %{http_version}", f"https://{SERVER_IP}{path}", ns=host.cli)
        code, version_seen = res.stdout.split()
        assert code == "200", res.stderr
        body = (host.tmp / "body").read_bytes()
        assert body.startswith(b"nginx app 127.0.0.1") if i % 2 else len(body) == 200_000
        alpn.append(version_seen)
    assert set(alpn) <= {"2", "1.1"} and "2" in alpn
    assert _metric(host, "tailor_edge_decisions_total", 9464) == 24  # the edge's /metrics: one per connection
    host.wait("the edge's telemetry", lambda: _sources(host, tokens, "edge"), 30)
    world.steps.update(edge_version=version, alpn=alpn)
    for name in ("agent-front", "edge", "manager"):  # graceful: telemetry flushed, the store closed
        host.stop(name, 60)


def _sources(host: Host, tokens: dict, kind: str) -> bool:
    res = host.curl("-H", f"Authorization: Bearer {tokens['operator']}", "http://127.0.0.1:8470/v1/edges")
    return res.returncode == 0 and kind in res.stdout


def _stored_records(db: Path) -> list[dict]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT kind, source, config_id, holdback, table_version, congestion_control, alpn, "
                          "client_prefix FROM telemetry ORDER BY seq")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]
    finally:
        con.close()


def _check_records(records: list[dict], steps: dict) -> None:
    """Step 1: one agent record per request, each with the configuration its client's cohort got; step 2: the
    edge's response records, HTTP/2 exactly where the table's configuration applied."""
    from collections import Counter

    print("stored records (kind, source, holdback, config, cc, alpn, version):", dict(Counter(
        (r["kind"], r["source"], r["holdback"], r["config_id"], r["congestion_control"], r["alpn"], r["table_version"])
        for r in records)), "steps:", steps)  # shown with -s, and on failure
    tuned = _table({"tcp.congestion_control": "bbr", "tcp.initial_cwnd": 16})
    h2 = _table({"http.version": "2", "tcp.congestion_control": "bbr"})
    agent = [r for r in records if r["source"].startswith("agent-")]
    assert len(agent) == REQUESTS and {r["table_version"] for r in agent} == {steps["agent_version"]}
    for r in agent:
        want = tuned["default"] if r["holdback"] else tuned["groups"][0]["choices"][0]["config"]
        assert r["config_id"] == want and r["congestion_control"] == ("cubic" if r["holdback"] else "bbr"), r
    assert any(not r["holdback"] for r in agent)
    responses = [r for r in records if r["kind"] == "response"]
    assert len(responses) == len(steps["alpn"])
    for r in responses:
        assert r["table_version"] == steps["edge_version"]
        want = h2["default"] if r["holdback"] else h2["groups"][0]["choices"][0]["config"]
        assert r["config_id"] == want and r["alpn"] == ("http/1.1" if r["holdback"] else "h2"), r
