"""A real uvicorn server on 127.0.0.1 in a background thread, bounded in time, stopped by handle, with the
settings of ``tailor manager`` (tailor.manager.httpserver.uvicorn_settings: connection cap, header and body deadlines).

Used by the tests, the benchmark and (later) the demo harness (and :func:`self_signed`, a certificate for HTTPS in tests):

    with LiveServer(create_app(cfg)) as url:
        httpx.get(url + "/healthz")
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import threading
import time
from pathlib import Path

import uvicorn

from tailor.manager.httpserver import uvicorn_settings


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 valid for an hour and its key, as PEM files ``cert.pem`` and
    ``key.pem`` in ``directory`` (HTTPS in tests: the manager's and a shard's metrics endpoint)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tailor-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, app, port: int | None = None, start_timeout_s: float = 20.0):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        mgr = app.state.manager  # an app of tailor.manager.api.create_app: its bounds and counters
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, lifespan="on", timeout_graceful_shutdown=5,
                                **uvicorn_settings(mgr.cfg, mgr.metrics))  # the real server's settings too
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{self.port}", daemon=True)
        self.start_timeout_s = start_timeout_s

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def __exit__(self, *exc) -> None:
        self.stop()
