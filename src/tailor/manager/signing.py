"""Ed25519 signatures over published decision tables (verified by tailor-edge and tailor-agent).

The manager signs the exact bytes ``GET /v1/table`` serves and sends the signature with them:

* ``X-Tailor-Signature``: standard base64 of the 64-byte Ed25519 signature over the response body;
* ``X-Tailor-Key-Id``: lowercase hex of the first 8 bytes of sha256 of the raw 32-byte public key.

Edges started with ``--table-pubkey FILE`` (one or more PEM ``PUBLIC KEY`` blocks, so that a key can be
rotated) refuse a table whose signature does not verify and keep their last good one. The private key is
``--signing-key PATH`` (PEM PKCS#8); without it the manager creates ``<data>/signing.key`` (mode 0600) on
first start and writes the public half to ``<data>/signing.pub``. Rotation: docs/security.md.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tailor.errors import ParameterError
from tailor.manager.store import save_atomic

SIGNATURE_HEADER, KEY_ID_HEADER = "X-Tailor-Signature", "X-Tailor-Key-Id"


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).digest()[:8].hex()


def public_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class Signer:
    def __init__(self, private: Ed25519PrivateKey):
        self.private = private
        self.public = private.public_key()
        self.key_id = key_id(self.public)

    @classmethod
    def load(cls, path: str | Path) -> Signer:
        try:
            key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as err:
            raise ParameterError(f"The 'signing-key' parameter of tailor manager must be a PEM Ed25519 private key; "
                                 f"got {path} ({err}).") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ParameterError(f"The 'signing-key' parameter of tailor manager must be an Ed25519 key; got "
                                 f"{type(key).__name__} in {path}.")
        return cls(key)

    @classmethod
    def for_data_dir(cls, data_dir: str | Path, path: str | None = None) -> Signer:
        """``path`` when given, else ``<data>/signing.key`` (created on first use, 0600) + ``signing.pub``."""
        if path:
            signer = cls.load(path)
        else:
            key_path = Path(data_dir) / "signing.key"
            if not key_path.exists():
                pem = Ed25519PrivateKey.generate().private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
                # written whole under a temporary name, then linked into place (fails if another process made one
                # first): a crash leaves no empty signing.key that every later start refuses (until 2026-12-07)
                try:
                    save_atomic(key_path, pem, exclusive=True)
                except FileExistsError:
                    pass  # another process's key won: use it
            signer = cls.load(key_path)
        pub = Path(data_dir) / "signing.pub"
        if not pub.exists() or pub.read_bytes() != public_pem(signer.public):
            pub.write_bytes(public_pem(signer.public))
        return signer

    def sign(self, body: bytes) -> dict[str, str]:
        """The response headers that carry the signature of ``body``."""
        sig = self.private.sign(body)
        return {SIGNATURE_HEADER: base64.b64encode(sig).decode(), KEY_ID_HEADER: self.key_id}


def load_public_keys(pem: bytes) -> list[Ed25519PublicKey]:
    """Every ``PUBLIC KEY`` block of a PEM file (several during a rotation)."""
    keys, marker = [], b"-----END PUBLIC KEY-----"
    for block in pem.split(marker)[:-1]:
        key = serialization.load_pem_public_key(block.strip() + b"\n" + marker + b"\n")
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"not an Ed25519 public key: {type(key).__name__}")
        keys.append(key)
    return keys


def verify(body: bytes, signature_b64: str, keys: list[Ed25519PublicKey]) -> bool:
    """True when ``signature_b64`` is a valid signature of ``body`` by one of ``keys``."""
    try:
        sig = base64.b64decode(signature_b64, validate=True)
    except ValueError:
        return False
    for key in keys:
        try:
            key.verify(sig, body)
            return True
        except InvalidSignature:
            continue
    return False
