"""The one decision rule of spec/decision.md: what a connection gets from a decision table.

``decide`` is used by everything in Python that applies a table (the simulator in both modes, the
manager's view of a published table, the synthetic edges); its pieces (``cohort_draw``, ``held_back``,
``pick``, ``propensity``) are what Config-Snob's sampling and the policies' holdback use. tailor-edge's
``rules.Decide`` and the sock_ops program implement the same rule; the shared vectors are
spec/vectors/decision-table/decide.json.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
from dataclasses import dataclass
from functools import lru_cache

MASK64 = (1 << 64) - 1
TWO32 = 4294967296.0


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK64


def siphash24(key: bytes, msg: bytes) -> int:
    """SipHash-2-4 (Aumasson and Bernstein, 2012) of ``msg`` under the 16-byte ``key``, as an unsigned int."""
    if len(key) != 16:
        raise ValueError("a SipHash key is 16 bytes")
    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rounds(n):
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & MASK64; v1 = _rotl(v1, 13) ^ v0; v0 = _rotl(v0, 32)  # noqa: E702
            v2 = (v2 + v3) & MASK64; v3 = _rotl(v3, 16) ^ v2  # noqa: E702
            v0 = (v0 + v3) & MASK64; v3 = _rotl(v3, 21) ^ v0  # noqa: E702
            v2 = (v2 + v1) & MASK64; v1 = _rotl(v1, 17) ^ v2; v2 = _rotl(v2, 32)  # noqa: E702

    end = len(msg) - len(msg) % 8
    for i in range(0, end, 8):
        m = int.from_bytes(msg[i:i + 8], "little")
        v3 ^= m
        rounds(2)
        v0 ^= m
    m = int.from_bytes(msg[end:], "little") | ((len(msg) & 0xFF) << 56)
    v3 ^= m
    rounds(2)
    v0 ^= m
    v2 ^= 0xFF
    rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


def client_address(addr) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The client of ``addr``: an IPv4-mapped IPv6 address is its IPv4 address."""
    ip = addr if isinstance(addr, (ipaddress.IPv4Address, ipaddress.IPv6Address)) else ipaddress.ip_address(addr)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def cohort_unit(ip) -> bytes:
    """The 16 bytes a client's cohort is hashed from: IPv4-mapped IPv4 address, or an IPv6 address's /64."""
    ip = client_address(ip)
    if ip.version == 4:
        return b"\0" * 10 + b"\xff\xff" + ip.packed
    return ip.packed[:8] + b"\0" * 8


@lru_cache(maxsize=64)
def salt_key(salt: str) -> bytes:
    return bytes.fromhex(salt)


@lru_cache(maxsize=1 << 17)
def cohort_draw(salt: str, addr, version: int) -> int:
    """The client's 64-bit draw under ``salt`` (32 hex digits) in table ``version``.

    High half: of SipHash(salt, unit), the same for the salt's whole lifetime (holdback membership, a
    stable control group); low half: of SipHash(salt, unit || version as 8 bytes little-endian), the same
    for every connection of the client while the table stands, re-drawn by the next version (so
    exploration rotates over clients). Cached: pure Python SipHash costs ~30 us a call.
    """
    key, unit = salt_key(salt), cohort_unit(addr)
    hold = siphash24(key, unit)
    arm = siphash24(key, unit + int(version).to_bytes(8, "little"))
    return (hold & 0xFFFFFFFF00000000) | (arm & 0xFFFFFFFF)


def derive_salt(*parts) -> str:
    """A reproducible salt from ``parts`` (the simulator's seed); the manager draws a random one instead."""
    return hashlib.sha256(("tailor-cohort-salt/" + "/".join(map(str, parts))).encode()).hexdigest()[:32]


def holdback_threshold(holdback: float) -> int:
    return int(math.floor(holdback * TWO32)) if holdback > 0 else 0


def held_back(draw: int, holdback: float) -> bool:
    """Holdback membership: the draw's high half below the holdback share of 2^32."""
    return (draw >> 32) < holdback_threshold(holdback)


def thresholds(ps) -> list[int]:
    """Cumulative thresholds x 2^32 of a group's choice probabilities (float64 sums in table order, floored)."""
    out, acc = [], 0.0
    for p in ps:
        acc += p
        out.append(int(math.floor(acc * TWO32)))
    return out


def pick(cum: list[int], draw: int) -> int:
    """Index of the choice the draw's low half picks; the last one when rounding leaves it uncovered."""
    lo = draw & 0xFFFFFFFF
    for k, c in enumerate(cum):
        if lo < c:
            return k
    return len(cum) - 1


def propensity(pi: float, holdback: float, is_default: bool) -> float:
    """Marginal probability of a configuration the group gives with probability ``pi``, under holdback."""
    return (1.0 - holdback) * pi + (holdback if is_default else 0.0)


@dataclass(frozen=True, slots=True)
class Applied:
    """What a connection gets: group (None if no rule matched), config id, marginal probability, holdback."""

    group: str | None
    config: str
    p: float
    holdback: bool


class _Group:
    __slots__ = ("configs", "cum", "p_treated", "p_held", "main")

    def __init__(self, choices: list[dict], default: str, holdback: float):
        self.configs = [c["config"] for c in choices]
        self.cum = thresholds([c["p"] for c in choices])
        pi: dict[str, float] = {}
        for c in choices:
            pi[c["config"]] = pi.get(c["config"], 0.0) + c["p"]
        self.p_treated = [propensity(pi[cid], holdback, cid == default) for cid in self.configs]
        self.p_held = propensity(pi.get(default, 0.0), holdback, True)
        self.main = max(pi, key=pi.__getitem__)  # the most probable configuration (the first on a tie)


class DecisionTable:
    """A validated table indexed for :func:`decide`.

    Longest-prefix match probes each prefix length present in the table (descending), each a dict
    lookup, so the cost grows with the number of distinct prefix lengths, not of rules.
    """

    def __init__(self, doc: dict, validated: bool = False):
        if not validated:
            from tailor.table import validate_table

            validate_table(doc)
        self.doc = doc
        self.default = doc["default"]
        self.holdback = float(doc.get("holdback", 0.0))
        self.salt = doc.get("salt")
        self.version = int(doc["version"])
        self._groups = {g["id"]: _Group(g["choices"], self.default, self.holdback) for g in doc["groups"]}
        self._by_net: dict = {}
        for r in doc["rules"]:
            net = ipaddress.ip_network(r["prefix"])
            self._by_net.setdefault(net, []).append((r.get("sni") is not None, r.get("device") is not None,
                                                     r.get("sni"), r.get("device"), r["group"]))
        for rules in self._by_net.values():
            rules.sort(key=lambda r: (r[0], r[1]), reverse=True)  # most specific first
        self._lengths = {v: sorted({n.prefixlen for n in self._by_net if n.version == v}, reverse=True) for v in (4, 6)}

    def group_of(self, addr, sni: str | None = None, device: str | None = None) -> str | None:
        ip = client_address(addr)
        for length in self._lengths[ip.version]:
            rules = self._by_net.get(ipaddress.ip_network((ip, length), strict=False))
            if rules:
                for _, _, r_sni, r_dev, group in rules:
                    if (r_sni is None or r_sni == sni) and (r_dev is None or r_dev == device):
                        return group
        return None

    def has_group(self, gid: str) -> bool:
        return gid in self._groups

    def main_choice(self, gid: str) -> str:
        """Group ``gid``'s most probable configuration (its choices summed per configuration)."""
        return self._groups[gid].main

    def draw_of(self, addr, draw: int = 0) -> int:
        """The 64-bit draw a connection uses: the client's cohort draw if the table has a salt, else ``draw``."""
        return cohort_draw(self.salt, addr, self.version) if self.salt else draw


def decide(table: DecisionTable, addr, sni: str | None = None, device: str | None = None, draw: int = 0) -> Applied:
    """The decision of spec/decision.md for one connection (``draw``: per-connection 64-bit, used without a salt)."""
    ip = client_address(addr)
    d = table.draw_of(ip, draw)
    hold = held_back(d, table.holdback)
    gid = table.group_of(ip, sni, device)
    if gid is None:
        return Applied(None, table.default, 1.0, hold)
    g = table._groups[gid]
    if hold:
        return Applied(gid, table.default, g.p_held, True)
    k = pick(g.cum, d)
    return Applied(gid, g.configs[k], g.p_treated[k], False)
