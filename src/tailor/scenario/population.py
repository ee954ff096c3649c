"""Synthetic client population: ISPs (ASN + region + access), /24 prefixes, clients and their habits.

Addresses come from 10.0.0.0/8 (RFC 1918), allocated from 10.1.0.0/24 upward, each ISP a contiguous
run of /24s; ASNs come from the private-use range 64512-65534 (RFC 6996), so no generated client is
mistaken for a real network. Clients of one ISP share a prefix-level perturbation of their condition
(the ISP's distance to the edge, its peering), so per-prefix history carries information.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tailor.errors import ScenarioError
from tailor.scenario.families import Tier
from tailor.scenario.model import ClientInfo

FIRST_ASN = 64512  # RFC 6996 private-use 16-bit ASNs
LAST_ASN = 65534
FIRST_PREFIX = 256  # /24 number within 10.0.0.0/8: 256 = 10.1.0.0/24
CLIENTS_PER_ISP = 600  # an ISP key (family, access, region) gets another ISP per this many clients


@dataclass(frozen=True)
class Client:
    info: ClientInfo
    family: str
    tier: Tier
    factor: np.ndarray  # multiplicative (bw, rtt, loss) offsets: prefix-level x client-level
    favourites: np.ndarray  # indices of preferred websites


@dataclass(frozen=True)
class Spreads:
    """Lognormal sigmas of (bw, rtt, loss) at each level (ASSUMPTION; scaled by ``Tier.spread``)."""

    prefix: tuple[float, float, float] = (0.15, 0.15, 0.4)
    client: tuple[float, float, float] = (0.20, 0.08, 0.3)
    segment: tuple[float, float, float] = (0.15, 0.06, 0.3)


def lognormal_factor(rng: np.random.Generator, sigmas, spread: float) -> np.ndarray:
    return np.exp(rng.normal(0.0, np.asarray(sigmas) * spread))


def site_popularity(rng: np.random.Generator, n_sites: int, zipf_s: float = 1.0) -> np.ndarray:
    """Zipf popularity over a seeded random ranking of the websites (the given order carries no rank)."""
    ranks = rng.permutation(n_sites)
    pop = 1.0 / (ranks + 1.0) ** zipf_s
    return pop / pop.sum()


def build_clients(rng, tiers, n_clients: int, clients_per_prefix: float, popularity: np.ndarray,
                  spreads: Spreads = Spreads(), isps_per_pool: int = 0) -> list[Client]:
    """Draw each client's tier and region, group clients into ISPs and /24s, and give them habits. A pool (family,
    access, region) gets ``isps_per_pool`` ISPs, or with 0 one per CLIENTS_PER_ISP clients (at least 2)."""
    tier_idx = stratified(rng, np.array([t.weight for _, t in tiers]), n_clients)
    by_key: dict[tuple[str, str, str, str], list[int]] = {}  # clients per ISP pool (family, access, region)
    for c, ti in enumerate(tier_idx):
        family, tier = tiers[ti]
        region = tier.regions[rng.integers(len(tier.regions))]
        by_key.setdefault((family, tier.access, region, tier.name if tier.own_isps else ""), []).append(c)
    clients: list[Client | None] = [None] * n_clients
    alloc = _Allocator()
    for key in sorted(by_key):
        members = by_key[key]
        wanted = isps_per_pool or max(2, math.ceil(len(members) / CLIENTS_PER_ISP))
        n_isps = min(len(members), wanted)
        isp_of = rng.integers(n_isps, size=len(members))
        for isp in range(n_isps):
            ids = [m for m, i in zip(members, isp_of) if i == isp]
            asn = alloc.asn()
            for prefix, chunk in _pack(rng, ids, clients_per_prefix, alloc):
                pfactor = lognormal_factor(rng, spreads.prefix, 1.0)
                for cid, host in zip(chunk, rng.choice(np.arange(1, 255), size=len(chunk), replace=False)):
                    family, tier = tiers[tier_idx[cid]]
                    clients[cid] = _client(rng, family, tier, prefix, int(host), asn, key[2], pfactor,
                                           popularity, spreads)
    return clients


def stratified(rng, weights: np.ndarray, n: int) -> np.ndarray:
    """``n`` tier indices in shuffled order, each tier getting floor(n * share) or one more (so small
    scenarios still cover every tier of weight >= 1/n, e.g. all 48 workshop-grid points)."""
    share = weights / weights.sum() * n
    counts = np.floor(share).astype(int)
    rest = n - counts.sum()
    if rest:
        frac = share - counts
        counts[rng.choice(len(weights), size=rest, replace=False, p=frac / frac.sum())] += 1
    return rng.permutation(np.repeat(np.arange(len(weights)), counts))


def _pack(rng, ids: list[int], clients_per_prefix: float, alloc: _Allocator):
    """Split an ISP's clients into /24s of 1 + Poisson(mean - 1) clients each."""
    i = 0
    while i < len(ids):
        size = min(1 + int(rng.poisson(max(clients_per_prefix - 1.0, 0.0))), 254)
        yield alloc.prefix(), ids[i:i + size]
        i += size


class _Allocator:
    """Hands out ASNs and consecutive /24s of 10.0.0.0/8."""

    def __init__(self):
        self._asn, self._p24 = FIRST_ASN, FIRST_PREFIX

    def asn(self) -> int:
        if self._asn > LAST_ASN:
            raise ScenarioError(f"scenario needs more than {LAST_ASN - FIRST_ASN + 1} private-use ASNs")
        self._asn += 1
        return self._asn - 1

    def prefix(self) -> str:
        if self._p24 >= 1 << 16:
            raise ScenarioError("scenario needs more /24 prefixes than 10.0.0.0/8 holds; use fewer sessions")
        self._p24 += 1
        p = self._p24 - 1
        return f"10.{p >> 8}.{p & 255}.0/24"


def _client(rng, family, tier: Tier, prefix: str, host: int, asn: int, region: str, pfactor,
            popularity, spreads: Spreads) -> Client:
    devices, shares = zip(*tier.devices)
    device = devices[rng.choice(len(devices), p=np.asarray(shares) / sum(shares))]
    address = prefix.rsplit(".", 1)[0] + f".{host}"
    info = ClientInfo(address, prefix, asn, region, device, tier.access)
    factor = pfactor * lognormal_factor(rng, spreads.client, 1.0)
    factor = factor ** tier.spread  # spread 0 keeps the exact published point
    n_fav = min(len(popularity), 1 + int(rng.poisson(2.0)))
    favourites = rng.choice(len(popularity), size=n_fav, replace=False, p=popularity)
    return Client(info, family, tier, factor, favourites)


def sessions_per_client(rng, n_clients: int, n_sessions: int) -> np.ndarray:
    """Every client gets one session; the rest follow a lognormal activity (a few heavy users)."""
    activity = rng.lognormal(0.0, 1.0, n_clients)
    return 1 + rng.multinomial(n_sessions - n_clients, activity / activity.sum())
