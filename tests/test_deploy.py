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
import re
import shutil
import subprocess
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
    assert (cfg.data_dir, cfg.policy, cfg.holdback) == ("/var/lib/tailor-manager", "configanator", 0.2)
    named = set(re.findall(r"^#? ?([a-z][a-z0-9-]*) = ", text, re.M))
    assert set(_flags()) - named == set(), "flags missing from deploy/manager.toml (set or commented)"


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
