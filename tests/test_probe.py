"""`tailor probe` against tailor-edge and Debian's nginx, each in a network namespace with known settings.

The probe runs in a client namespace joined to the server's by a veth pair. The initial window is set with
`ip route ... initcwnd N` in the server namespace (what the kernel uses for every connection on that route),
the HTTP version and SETTINGS with nginx's `listen ... http2` / `http2_max_concurrent_streams` /
`http2_body_preread_size` and tailor-edge's table. The server namespace runs Reno, a window-based congestion
control: there the TLS count is the window; one run with BBR checks that its count is the window plus the
handshake's segments, as the probe's note says. SYN-ACK RTO: Linux's default (1 s) in every run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tailor.probe import probe_binary
from tailor.space import Configuration

ROOT = Path(__file__).resolve().parents[1]
NGINX = "/usr/sbin/nginx"


def _run(*args: str, ns: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_refuses_public_addresses_without_ownership():
    for target in ("8.8.8.8", "203.0.113.7:8443", "[2001:db8::1]:443"):
        res = _run(probe_binary(), target, timeout=30)
        assert res.returncode == 2, res
        assert "not this host's own address" in res.stderr
        assert "--i-own-this-host" in res.stderr and res.stdout == ""


def test_cli_passes_arguments_and_exit_status_through():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "tailor", "probe", "198.51.100.9", "--json"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2 and "tailor-probe: error: target 198.51.100.9" in res.stderr
    res = _run(probe_binary(), "--mss", "40", "127.0.0.1")
    assert res.returncode == 2 and "--mss 40: must be 88..65495" in res.stderr
    res = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "tailor", "probe", "127.0.0.1", "--iw-trials", "6"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2 and "--iw-trials 6: must be 1..5" in res.stderr


def _probe(ns: str, target: str, *flags: str) -> dict:
    res = _run(probe_binary(), "--json", "--synack-wait=1.5s", "--path=/big.bin", *flags, target, ns=ns, timeout=90)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    table = _run(probe_binary(), "--raw=false", "--path=/big.bin", *flags, target, ns=ns).stdout
    print(f"\n$ tailor probe {' '.join(flags)} {target}\n{table}{json.dumps(out.get('initial_window'))}\n"
          f"{json.dumps(out.get('synack'))}")
    return out


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces, the probe's packet capture and BPF filter")
    if not os.path.exists(NGINX) or not shutil.which("openssl"):
        pytest.skip("needs nginx and openssl (apt-get install -y nginx openssl)")
    from tailor.demo.world import World, ip

    work = tmp_path_factory.mktemp("probe")
    world = World(prefix=f"tpb{os.getpid()}-", workdir=work)
    octet = os.getpid() % 200 + 20
    srv_ip, cli_ip = f"10.236.{octet}.1", f"10.236.{octet}.2"
    try:
        srv, cli = world.netns("srv"), world.netns("cli")
        ip("link", "add", f"tpb{octet}s", "netns", srv, "type", "veth", "peer", "name", f"tpb{octet}c", "netns", cli)
        ip("-n", srv, "addr", "add", f"{srv_ip}/24", "dev", f"tpb{octet}s")
        ip("-n", cli, "addr", "add", f"{cli_ip}/24", "dev", f"tpb{octet}c")
        ip("-n", srv, "link", "set", f"tpb{octet}s", "up")
        ip("-n", cli, "link", "set", f"tpb{octet}c", "up")
        _run("sysctl", "-qw", "net.ipv4.tcp_congestion_control=reno", ns=srv)
        (work / "www").mkdir()
        (work / "www" / "big.bin").write_bytes(os.urandom(1 << 20))
        (work / "tmp").mkdir()
        res = _run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                   "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem"), "-days", "2", "-subj", "/CN=probe",
                   "-addext", f"subjectAltName=IP:{srv_ip}")
        assert res.returncode == 0, res.stderr

        def initcwnd(n: int) -> None:
            ip("-n", srv, "route", "replace", f"10.236.{octet}.0/24", "dev", f"tpb{octet}s", "initcwnd", str(n))

        yield {"world": world, "srv": srv, "cli": cli, "ip": srv_ip, "work": work, "initcwnd": initcwnd}
    finally:
        problems = world.close()
        assert not problems, problems


NGINX_CONF = """user root; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 64; }}
http {{ access_log off; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp; gzip off;
  server {{ listen {ip}:8443 ssl{h2}; listen {ip}:8080; ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;
    root {d}/www; {extra} }}
}}
"""


def _wait_port(ns: str, port: int) -> None:
    for _ in range(100):
        if f":{port} " in _run("ss", "-ltnH", ns=ns).stdout:
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port} in {ns}")


def _check_common(out: dict, iw: int, h2: bool) -> None:
    assert out["http_version"] == ("2" if h2 else "1.1")
    h2_alone = out["alpn"][0]
    assert (h2_alone["selected"] == "h2") == h2 and (h2 or h2_alone["error"] or not h2_alone["selected"])
    assert out["alpn"][1]["selected"] == "http/1.1"
    assert out["initial_window"]["segments"] == iw, out["initial_window"]
    assert len(out["initial_window"]["trials"]) == 2 and min(out["initial_window"]["trials"]) == iw
    assert out["initial_window"]["retransmission"] and not out["initial_window"]["lower_bound"]
    assert 900 <= out["synack"]["init_rto_ms"] <= 1400, out["synack"]
    assert out["synack"]["mss"] == 1460


@pytest.mark.privileged
@pytest.mark.parametrize("iw,h2,extra,settings", [
    (10, True, "", {"MAX_CONCURRENT_STREAMS": 128, "INITIAL_WINDOW_SIZE": 65536}),
    (4, False, "", None),
    (32, True, "http2_max_concurrent_streams 77; http2_body_preread_size 32k;",
     {"MAX_CONCURRENT_STREAMS": 77, "INITIAL_WINDOW_SIZE": 32768}),
])
def test_probe_reads_nginx_configuration(net, iw, h2, extra, settings):
    d = net["work"]
    conf = d / "nginx.conf"
    conf.write_text(NGINX_CONF.format(d=d, ip=net["ip"], h2=" http2" if h2 else "", extra=extra))
    net["initcwnd"](iw)
    proc = net["world"].spawn(f"nginx-{iw}", ["ip", "netns", "exec", net["srv"], NGINX, "-c", str(conf),
                                              "-g", "daemon off;"])
    try:
        _wait_port(net["srv"], 8443)
        out = _probe(net["cli"], f"{net['ip']}:8443")
        _check_common(out, iw, h2)
        assert out["http"]["server"].startswith("nginx/")
        if settings:
            for k, v in settings.items():
                assert out["http2_settings"]["values"][k] == v
        else:
            assert "http2_settings" not in out
        plain = _probe(net["cli"], f"{net['ip']}:8080", "--plain")
        assert plain["initial_window"]["segments"] == iw and plain["initial_window"]["method"] == "cleartext"
    finally:
        net["world"].stop(proc)


def _edge_table(path: Path, knobs: dict) -> None:
    cfg = Configuration(knobs)
    path.write_text(json.dumps({"schema": "tailor.decision-table/v1", "version": 1, "generated_at": time.time(),
                                "valid_for_s": 3600, "policy": "probe-test", "holdback": 0.0, "default": cfg.id,
                                "configs": {cfg.id: cfg.changes()}, "groups": [], "rules": []}))


@pytest.mark.privileged
@pytest.mark.parametrize("iw,knobs,settings,cc", [
    (10, {"http.version": "2"}, {"MAX_CONCURRENT_STREAMS": 100, "INITIAL_WINDOW_SIZE": 65535}, "reno"),
    (4, {"http.version": "1.1"}, None, "reno"),
    (32, {"http.version": "2", "http2.max_concurrent_streams": 32, "http2.initial_window_size": 262144,
          "http2.max_frame_size": 32768},
     {"MAX_CONCURRENT_STREAMS": 32, "INITIAL_WINDOW_SIZE": 262144, "MAX_FRAME_SIZE": 32768}, "reno"),
    (10, {"http.version": "2", "tcp.congestion_control": "bbr"}, None, "bbr"),
])
def test_probe_reads_tailor_edge_configuration(net, iw, knobs, settings, cc):
    from tailor.testbed.server import tailor_edge_binary

    d = net["work"]
    _edge_table(d / "table.json", knobs)
    net["initcwnd"](iw)
    proc = net["world"].spawn(f"edge-{iw}-{cc}", ["ip", "netns", "exec", net["srv"], tailor_edge_binary(),
                                                  "--listen", f"{net['ip']}:9443", "--root", str(d / "www"),
                                                  "--cert", str(d / "cert.pem"), "--key", str(d / "key.pem"),
                                                  "--table", str(d / "table.json")])
    try:
        _wait_port(net["srv"], 9443)
        out = _probe(net["cli"], f"{net['ip']}:9443")
        if cc == "bbr":  # BBR grows its window on every ACK of the TLS handshake: the note's IW + handshake
            hs = out["initial_window"]["handshake_segments"]
            assert hs >= 1 and out["initial_window"]["segments"] == iw + hs, out["initial_window"]
            assert "BBR" in out["initial_window"]["note"]
            return
        _check_common(out, iw, knobs["http.version"] == "2")
        if settings:
            for k, v in settings.items():
                assert out["http2_settings"]["values"][k] == v
        else:
            assert "http2_settings" not in out
            assert out["alpn"][0]["error"].startswith("remote error")  # Go refuses h2-only offers
    finally:
        net["world"].stop(proc)
