"""Learned state in the object store, authenticated before it is unpickled (docs/bus.md, Takeover).

Object ``part.<p>.<lease revision>`` of ``tailor-state`` (the lease in ``tailor-leases`` names the durable one)::

    MAGIC (b"TAILOR-STATE/1\\n") | tag (32 bytes) | header length (4 bytes, big-endian) | header (JSON) | state

``tag`` = HMAC-SHA256(state key, MAGIC | header length | header | state); the state key =
HMAC-SHA256(raw 32-byte Ed25519 private signing key, b"tailor.bus.state-key/v1"), so every shard that signs
tables with the operator's key also authenticates state, and nobody who can merely write the bucket can make
a shard unpickle bytes of their choosing. The header (JSON) carries ``partition`` (a state is refused for any
other partition), ``watermark`` (the consumer's ack floor, stream sequence: every message at or below it is
acknowledged and therefore folded in), ``folded`` (stream sequences above the watermark already folded in;
bounded) and ``written_at``; ``state`` is the pickle of ``Manager._state_bytes``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pickle
import struct
import time
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization

MAGIC = b"TAILOR-STATE/1\n"
LABEL = b"tailor.bus.state-key/v1"
MAX_STATE_BYTES = 1 << 30  # an object larger than this is refused before it is read
MAX_HEADER_BYTES = 16 << 20
MAX_FOLDED = 1_000_000  # stream sequences above the watermark kept in a state (8 bytes each at most)


class StateError(ValueError):
    """A state object that is refused (the message says why); its bytes are never unpickled."""


def state_key(private_key) -> bytes:
    """The HMAC key of learned state: HMAC-SHA256 of a fixed label under the raw Ed25519 private key."""
    raw = private_key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                    serialization.NoEncryption())
    return hmac.new(raw, LABEL, hashlib.sha256).digest()


@dataclass
class Watermark:
    """Which stream sequences a state holds: everything <= ``floor`` and the sequences in ``above``."""

    floor: int = 0
    above: set[int] = field(default_factory=set)

    def folded(self, seq: int) -> bool:
        return seq <= self.floor or seq in self.above

    def add(self, seqs) -> None:
        self.above.update(s for s in seqs if s > self.floor)

    def advance(self, ack_floor: int) -> None:
        """The consumer's ack floor moved: sequences at or below it are never redelivered."""
        if ack_floor > self.floor:
            self.floor = ack_floor
            self.above = {s for s in self.above if s > ack_floor}


def seal(key: bytes, partition: int, watermark: Watermark, state: bytes, now: float | None = None) -> bytes:
    if len(watermark.above) > MAX_FOLDED:
        raise StateError(f"{len(watermark.above)} folded sequences above the watermark (limit {MAX_FOLDED})")
    header = json.dumps({"partition": partition, "watermark": watermark.floor, "folded": sorted(watermark.above),
                         "written_at": time.time() if now is None else now}, separators=(",", ":")).encode()
    signed = struct.pack(">I", len(header)) + header + state
    return MAGIC + hmac.new(key, MAGIC + signed, hashlib.sha256).digest() + signed


def open_sealed(key: bytes, partition: int, blob: bytes) -> tuple[dict, Watermark, dict]:
    """(header, watermark, state dict) of a sealed object; :class:`StateError` when it does not verify."""
    if len(blob) > MAX_STATE_BYTES:
        raise StateError(f"state object of {len(blob)} bytes is over the limit of {MAX_STATE_BYTES}")
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 36:
        raise StateError("state object does not start with the state format's magic")
    tag, signed = blob[len(MAGIC):len(MAGIC) + 32], blob[len(MAGIC) + 32:]
    if not hmac.compare_digest(tag, hmac.new(key, MAGIC + signed, hashlib.sha256).digest()):
        raise StateError("state object's HMAC does not verify (written with another signing key, or altered)")
    (n,) = struct.unpack(">I", signed[:4])
    if n > MAX_HEADER_BYTES or 4 + n > len(signed):
        raise StateError(f"state header length {n} is out of bounds")
    try:
        header = json.loads(signed[4:4 + n])
        floor, folded, part = int(header["watermark"]), header["folded"], header["partition"]
    except (ValueError, KeyError, TypeError) as err:
        raise StateError(f"state header is not valid: {err}") from None
    if part != partition:
        raise StateError(f"state object is partition {part}'s, not {partition}'s")
    if not isinstance(folded, list) or len(folded) > MAX_FOLDED:
        raise StateError("state header field 'folded' must be a list of at most 1000000 sequences")
    state = pickle.loads(signed[4 + n:])  # authenticated above: written by a holder of the signing key
    if not isinstance(state, dict):
        raise StateError(f"state is a {type(state).__name__}, not a dict")
    return header, Watermark(floor, {int(s) for s in folded}), state
