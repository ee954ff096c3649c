"""TLS for the bus: a small certificate authority for ``tailor cluster`` and the tests, and the clients' TLS context.

With TLS, nats-server requires it from every client (edges, agents, shards) and, on a JetStream cluster, from every
route; passwords and telemetry then never cross a network in clear text, and a client talks only to a server whose
certificate the operator's CA signed (``--bus-ca FILE``, the same flag in ``tailor manager --bus``, ``tailor-edge``
and ``tailor-agent``). An operator brings their own CA and server certificates; :func:`make_ca` and :func:`issue`
are what ``tailor cluster`` uses on loopback (ECDSA P-256, one year).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError

from tailor.errors import param_error

MAX_CA_BYTES = 1 << 20  # a CA bundle is a few KiB; a larger --bus-ca file is refused, not read
VALID_DAYS = 365
PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----")


def _write_key(path: Path, key) -> None:
    from cryptography.hazmat.primitives import serialization

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # a file that existed keeps its mode through O_CREAT
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def _name(common: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tailor"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca(directory: Path, name: str = "tailor bus CA", days: int = VALID_DAYS) -> tuple[Path, Path]:
    """A new CA in ``directory``: ``ca.pem`` (give it to every client as ``--bus-ca``) and ``ca-key.pem`` (0600)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "ca.pem", directory / "ca-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return cert_path, key_path


def issue(directory: Path, ca: tuple[Path, Path], stem: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
          days: int = VALID_DAYS) -> tuple[Path, Path]:
    """A certificate for ``hosts`` (IP addresses or DNS names) signed by ``ca`` = (``ca.pem``, ``ca-key.pem``):
    ``<stem>.pem`` and ``<stem>-key.pem`` (0600) in ``directory``. Usable by a server and, on a cluster's routes
    (mutual TLS), as the client side too."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(Path(ca[0]).read_bytes())
    ca_key = serialization.load_pem_private_key(Path(ca[1]).read_bytes(), password=None)
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(stem)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return cert_path, key_path


def read_ca(path: str | os.PathLike, command: str = "tailor manager", param: str = "bus-ca") -> str:
    """The PEM text of a ``--bus-ca`` file: readable, at most :data:`MAX_CA_BYTES`, holding a certificate; else one
    error naming the parameter."""
    def refuse(expected: str, got: str):
        return param_error(command, param, expected, got)

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CA_BYTES + 1)
    except OSError as err:
        raise refuse("a readable PEM file of CA certificates", f"{os.fspath(path)} ({err.strerror})") from None
    if len(data) > MAX_CA_BYTES:
        raise refuse(f"a PEM file of at most {MAX_CA_BYTES} bytes", f"{os.fspath(path)} (larger)")
    if b"PRIVATE KEY-----" in data:  # a bundle with a key in it: the key does not belong on every client
        raise refuse("a PEM file of CA certificates only", f"{os.fspath(path)} (it holds a private key)")
    blocks = PEM_CERT.findall(data)  # comments and explanatory text between them (any encoding) are left out
    if not blocks:
        raise refuse("a PEM file of CA certificates", f"{os.fspath(path)} (no certificate in it)")
    text = "\n".join(b.decode("ascii") for b in blocks) + "\n"
    try:
        ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError, TypeError) as err:
        raise refuse("a PEM file of CA certificates", f"{os.fspath(path)} ({err})") from None
    return text


def client_context(ca_pem: str) -> ssl.SSLContext:
    """The TLS context of a bus client: the server's certificate must chain to ``ca_pem`` (only those CAs, not the
    system's) and name the host the client dialled; TLS 1.2 at least."""
    ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH, cadata=ca_pem)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def system_context() -> ssl.SSLContext:
    """A ``tls://`` URL without ``--bus-ca``: the system's CAs, TLS 1.2 at least."""
    ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class StrictTLSClient(Client):
    """nats-py's client, except that with a TLS context it never speaks to a server in clear text: nats-py upgrades
    to TLS only when the server's INFO asks for it, so a server without TLS (or anyone in the path removing
    ``tls_required`` from the INFO) would receive the CONNECT, password included, unencrypted. The INFO is checked
    before the CONNECT on every (re)connection."""

    async def _process_info(self, info, initial_connection: bool = False) -> None:
        if initial_connection and self.options.get("tls") is not None and not info.get("tls_required"):
            raise NatsError("nats: the server does not offer TLS, and a TLS context was given (--bus-ca or a tls:// "
                            "URL): refused, nothing sent")
        await super()._process_info(info, initial_connection)


async def connect(servers: list[str], tls: ssl.SSLContext | None = None, **options) -> Client:
    """``nats.connect`` for the bus: ``tls`` = None with only ``nats://`` URLs is clear text; otherwise (a context, or
    any ``tls://`` URL, which then gets :func:`system_context`) TLS or nothing (:class:`StrictTLSClient`)."""
    if tls is None and any(str(u).startswith("tls://") for u in servers):
        tls = system_context()
    nc = StrictTLSClient() if tls is not None else Client()
    await nc.connect(servers=servers, tls=tls, **options)
    return nc
