"""The server side: a throw-away nginx site (TLS, HTTP/1.1 + HTTP/2) with generated static objects.

Objects are random bytes (incompressible, so gzip or TLS compression cannot shrink them), written once per
measurement session into a temporary directory that the caller removes. nginx listens on the server
namespace's address only: 8443 (TLS; ALPN picks HTTP/2 or HTTP/1.1 as the client asks) and 8080 (cleartext
HTTP/1.1, used by the initial-window check so the first flight is pure response data).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tailor import paths
from tailor.errors import TailorError

SERVER_IP = "10.231.0.1"  # tailor-link's default server address inside its own namespace
TLS_PORT = 8443
PLAIN_PORT = 8080

# What every testbed nginx shares (root, one worker, files under the job's directory, no logs, no gzip);
# format with d=<workdir>, conns=<worker_connections>.
NGINX_HEAD = """\
user root;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections {conns}; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  gzip off;
"""

NGINX_CONF = NGINX_HEAD + """\
  keepalive_timeout 5s;
  server {{
    listen {ip}:{tls} ssl http2;
    listen {ip}:{plain};
    ssl_certificate {d}/cert.pem;
    ssl_certificate_key {d}/key.pem;
    ssl_protocols TLSv1.3;
    root {d}/www;
    add_header Cache-Control no-store;
  }}
}}
"""


class TestbedError(TailorError):
    """A testbed tool is missing or a measurement run failed (message names the tool or the run)."""


def require_tools(*names: str) -> dict[str, str]:
    """Absolute paths of the tools a measurement needs; a clear error naming the Debian package otherwise."""
    pkgs = {"nginx": "nginx", "curl": "curl", "openssl": "openssl", "tcpdump": "tcpdump", "ip": "iproute2",
            "chromium": "chromium"}
    found = {n: shutil.which(n) or shutil.which(n, path="/usr/sbin:/sbin") for n in names}
    missing = [n for n, p in found.items() if not p]
    if missing:
        raise TestbedError(f"missing tools {missing}: apt-get install -y {' '.join(pkgs.get(n, n) for n in missing)}")
    return {n: str(p) for n, p in found.items()}


def object_name(size: int) -> str:
    return f"obj-{size}.bin"


def prepare_site(workdir: Path, sizes: list[int], seed: int = 1) -> Path:
    """Write cert, key, nginx.conf and one object per size into ``workdir``; returns the nginx.conf path."""
    tools = require_tools("nginx", "openssl")
    (workdir / "www").mkdir(parents=True, exist_ok=True)
    (workdir / "tmp").mkdir(exist_ok=True)
    _make_cert(tools["openssl"], workdir)
    rng_bytes = _seeded_bytes(seed, max(sizes))
    for size in sorted(set(sizes)):
        (workdir / "www" / object_name(size)).write_bytes(rng_bytes[:size])
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_CONF.format(d=workdir, conns=512, ip=SERVER_IP, tls=TLS_PORT, plain=PLAIN_PORT))
    return conf


def server_cmd(conf: Path, sysctl: str = "sysctl -qw net.ipv4.tcp_no_metrics_save=1") -> str:
    """nginx in the foreground after ``sysctl`` (TCP metrics caching off, so no fetch inherits ssthresh/RTT from
    the last one)."""
    nginx = require_tools("nginx")["nginx"]
    return f"{sysctl} && exec {nginx} -c {conf} -g 'daemon off;'"


def _make_cert(openssl: str, workdir: Path, san: str = f"IP:{SERVER_IP}") -> None:
    cmd = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", str(workdir / "key.pem"), "-out", str(workdir / "cert.pem"), "-days", "30",
           "-subj", "/CN=tailor-testbed", "-addext", f"subjectAltName={san}"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise TestbedError(f"openssl could not make the self-signed certificate: {res.stderr.strip()[-300:]}")


def _seeded_bytes(seed: int, n: int) -> bytes:
    """Deterministic incompressible content (same bytes on every machine for a given seed)."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8).tobytes()


def tailor_link_binary() -> str:
    """$TAILOR_LINK, else out/bin/tailor-link built from edge/ (kept out of edge/ so other builds don't race)."""
    return go_binary("tailor-link", "TAILOR_LINK")


def tailor_edge_binary() -> str:
    """$TAILOR_EDGE, else out/bin/tailor-edge built from edge/ (the HTTP/3 server of the QUIC workload)."""
    return go_binary("tailor-edge", "TAILOR_EDGE")


def tailor_fetch_binary() -> str:
    """$TAILOR_FETCH, else out/bin/tailor-fetch built from edge/ (the HTTP/3 client of the QUIC workload)."""
    return go_binary("tailor-fetch", "TAILOR_FETCH")


def go_binary(name: str, env_var: str) -> str:
    """``$env_var`` if set, else out/bin/NAME of the checkout, rebuilt when any edge/ Go source is newer."""
    return paths.go_binary(name, env_var, TestbedError)
