"""Partitions of client prefixes and their owners (docs/bus.md, vectors in spec/vectors/bus/partition.json)."""

from __future__ import annotations

from collections.abc import Iterable

FNV_OFFSET, FNV_PRIME = 0x811C9DC5, 0x01000193
MAX_PARTITIONS = 256
DEFAULT_PARTITIONS = 6


def fnv1a32(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFF
    return h


def partition(client_prefix: str, partitions: int) -> int:
    """FNV-1a-32 of the canonical prefix text (UTF-8) modulo the partition count."""
    return fnv1a32(client_prefix.encode("utf-8")) % partitions


def weight(p: int, shard_id: str) -> int:
    """Rendezvous weight of ``shard_id`` for partition ``p``: FNV-1a-32 of ``"<p>/<shard-id>"``."""
    return fnv1a32(f"{p}/{shard_id}".encode())


def owner(p: int, shards: Iterable[str]) -> str | None:
    """The live shard with the highest weight for ``p`` (ties, which need equal 32-bit hashes, go to the
    larger shard id); None without live shards."""
    best = None
    for s in shards:
        key = (weight(p, s), s)
        if best is None or key > best:
            best = key
    return None if best is None else best[1]


def assignment(partitions: int, shards: Iterable[str]) -> dict[int, str | None]:
    live = sorted(set(shards))
    return {p: owner(p, live) for p in range(partitions)}
