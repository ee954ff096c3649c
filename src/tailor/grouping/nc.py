"""Configanator network classes (§3.2, App. D, App. F.6): K chosen by NCSpread, stable class ids.

Why this module exists next to :mod:`tailor.grouping.classes` (fixed-K, for the +NC baselines):
Configanator picks K itself -- the smallest K whose per-class spread of *default-configuration* PLT
(one list per class x website, normalised by the list's median; App. D and its footnote 11) is within
``nc_spread`` -- and offers other grouping strategies for App. F.6 (``prefix``, ``latency``, ``pop``).

Where default-configuration PLTs come from (the oracle is never read): (1) the first connection of
every newly seen /24 gets the default (Configanator Fig. 3, steps 1-2) and its own telemetry gives its
features; (2) the policy puts the default first in every website x class bootstrap; (3) any later
default choice (epsilon arm, exploitation, holdback). Rows are (features, website, PLT).

Noise floor: PLTs carry heavy-tailed noise (App. F.7) whose normalised std alone exceeds 5 % on slow
paths, so the literal rule would never stop. The spread compared with NCSpread is therefore the
*excess* over the finest clustering tried: sqrt(max(s(K)^2 - s(K_max)^2, 0)), s = pooled std of
normalised PLT over lists. With noise-free data s(K_max) ~ 0 and this is exactly App. D's rule.

What bounds K here (measured on the default scenario, all 15k page loads, default configuration's PLT):
noise is not what keeps the spread above 5 %. Even the noise-free mode PLT has a pooled std of
log(PLT/median) of 0.79 / 0.58 / 0.43 / 0.39 / 0.34 at K = 3 / 8 / 15 / 24 / 64 (0.82 / 0.60 / 0.45 /
0.41 / 0.35 with noise), and the linear PLT/median std used below is 2-4 (a few 10x page loads dominate
it) and not monotone in K. So no K comes near 5 %, the literal rule would always give ``max_k``, and the
excess rule picks a K below ``max_k`` where the noisy, non-monotone curve dips. A log-scale statistic
(monotone, so K = ``max_k``) was tried and not kept: no better in the evaluation (seed 1: p50 +6.6 %
vs +7.9 %, within run-to-run variation).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from tailor.errors import check

DEVICES = ("desktop", "android", "ios")
STRATEGIES = ("kmeans", "prefix", "latency", "pop")
DEVICE_WEIGHT = 0.5  # one device change ~ a 1.65x RTT change in the metric (same as the +NC baselines)
REGION_WEIGHT = 0.25  # geo-location matters less than the measured path, which it mostly predicts


def nc_row(rtt_ms: float, goodput_mbps: float, loss: float, device: str, region: str, regions: dict) -> np.ndarray:
    """Feature row: log RTT, log goodput, log(1 + loss in 1/1000), device and region one-hot (weighted)."""
    row = np.zeros(3 + len(DEVICES) + len(regions))
    row[0] = math.log(max(rtt_ms, 0.1))
    row[1] = math.log(max(goodput_mbps, 0.01))
    row[2] = math.log1p(1000.0 * max(loss, 0.0))
    if device in DEVICES:
        row[3 + DEVICES.index(device)] = DEVICE_WEIGHT
    if region in regions:
        row[3 + len(DEVICES) + regions[region]] = REGION_WEIGHT
    return row


def pooled_spread(labels: np.ndarray, sites: np.ndarray, plt_ms: np.ndarray, min_list: int = 3) -> float:
    """Pooled std of PLT / median(PLT) over (class, website) lists with >= ``min_list`` members."""
    num, den = 0.0, 0
    for key in np.unique(np.stack([labels, sites]), axis=1).T:
        sel = (labels == key[0]) & (sites == key[1])
        if sel.sum() >= min_list:
            v = plt_ms[sel] / np.median(plt_ms[sel])
            num += float(np.sum((v - v.mean()) ** 2))
            den += int(sel.sum()) - 1
    return math.sqrt(num / den) if den else 0.0


def _kmeans(rows: np.ndarray, k: int, seed: int, init: np.ndarray | None = None) -> KMeans:
    with threadpool_limits(1):  # tiny data: threads cost more than they save, and results stay reproducible
        if init is not None and len(init) == k:
            return KMeans(k, init=init, n_init=1, max_iter=100, tol=1e-4, random_state=seed).fit(rows)
        return KMeans(k, n_init=2, max_iter=100, tol=1e-4, random_state=seed).fit(rows)


def select_k(rows: np.ndarray, default_rows: np.ndarray, sites: np.ndarray, plt_ms: np.ndarray,
             nc_spread: float, max_k: int, seed: int = 0) -> tuple[int, dict[int, float]]:
    """Smallest K whose excess spread of default PLT is <= ``nc_spread``; also every s(K) computed.

    K-means is fitted on ``rows`` (all recent connections); the default-configuration rows are then
    assigned to the nearest centre and their PLT lists give the spread (App. D steps i-iii).
    """
    ks = range(1, min(max_k, len(np.unique(rows, axis=0))) + 1)
    spread = {}
    for k in ks:
        km = _kmeans(rows, k, seed)
        spread[k] = pooled_spread(km.predict(default_rows), sites, plt_ms)
    floor = spread[max(spread)]
    for k in ks:
        if math.sqrt(max(spread[k] ** 2 - floor**2, 0.0)) <= nc_spread:
            return k, spread
    return max(spread), spread


class SpreadClasses:
    """Network classes for Configanator. ``classify`` is a lookup; ``refit`` (at plan) is the heavy part.

    ``k_scale`` inflates the chosen K (Fig. 7 study); class ids persist across refits by matching new
    centres to old ones (Hungarian assignment), so per-class learned state survives a rebuild.
    """

    def __init__(self, strategy: str = "kmeans", nc_spread: float = 0.05, max_k: int = 24, k_scale: float = 1.0,
                 seed: int = 0, window: int = 5000, min_rows: int = 30, reselect_growth: float = 1.25):
        check(strategy in STRATEGIES, "SpreadClasses", "strategy", f"one of {STRATEGIES}", strategy)
        check(max_k >= 1, "SpreadClasses", "max_k", "an integer >= 1", max_k)
        self.strategy, self.nc_spread, self.max_k, self.k_scale = strategy, nc_spread, max_k, k_scale
        self.seed, self.window, self.min_rows, self.reselect_growth = seed, window, min_rows, reselect_growth
        self.regions: dict[str, int] = {}
        self._rows: list[tuple[np.ndarray, int]] = []  # (features, region-vocabulary size when built)
        self._default: list[tuple[int, int, float]] = []  # (row index, site id, PLT ms)
        self._sites: dict[str, int] = {}
        self._centers: np.ndarray | None = None
        self._ids: list[int] = []
        self._next_id = 0
        self._k_rows_at_select = 0
        self.k: int = 1
        self.spread: dict[int, float] = {}

    # -- per connection
    def row(self, rtt_ms: float, goodput_mbps: float, loss: float, device: str, region: str) -> np.ndarray:
        return nc_row(rtt_ms, goodput_mbps, loss, device, region, self.regions)

    def classify(self, rtt_ms: float, goodput_mbps: float, loss: float, device: str, region: str, prefix: str) -> str:
        """Class id of a connection (a lookup: nearest centre, prefix, RTT band or PoP)."""
        if self.strategy == "prefix":
            return f"p:{prefix}"
        if self.strategy == "latency":
            return f"rtt{int(math.floor(2.0 * math.log2(max(rtt_ms, 1.0))))}"  # half-octave RTT bands
        if self.strategy == "pop":
            return f"pop:{region}"
        if self._centers is None:
            return "nc0"
        x = self.row(rtt_ms, goodput_mbps, loss, device, region)[: self._centers.shape[1]]
        return f"nc{self._ids[int(np.argmin(((self._centers - x) ** 2).sum(axis=1)))]}"

    def add(self, rtt_ms: float, goodput_mbps: float, loss: float, device: str, region: str,
            website: str, default_plt_ms: float | None = None) -> None:
        """Record one connection's features (and its PLT when it ran the default configuration)."""
        if region not in self.regions:
            self.regions[region] = len(self.regions)
        self._rows.append(self.row(rtt_ms, goodput_mbps, loss, device, region))
        if default_plt_ms is not None:
            site = self._sites.setdefault(website, len(self._sites))
            self._default.append((len(self._rows) - 1, site, float(default_plt_ms)))
        if len(self._rows) > 4 * self.window:
            self._trim()

    def _trim(self) -> None:
        drop = len(self._rows) - self.window
        self._rows = self._rows[drop:]
        self._default = [(i - drop, s, p) for i, s, p in self._default if i >= drop]

    # -- slow loop
    def _matrix(self, indices=None) -> np.ndarray:
        rows = self._rows if indices is None else [self._rows[i] for i in indices]
        width = 3 + len(DEVICES) + len(self.regions)
        out = np.zeros((len(rows), width))
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out

    def refit(self) -> bool:
        """Re-select K when the default-PLT data grew by ``reselect_growth``, then refit with stable ids."""
        if self.strategy != "kmeans" or len(self._rows) < self.min_rows:
            return False
        rows = self._matrix()[-self.window:]
        if len(self._default) >= max(self.min_rows, self.reselect_growth * self._k_rows_at_select):
            idx, sites, plt = (np.array(v) for v in zip(*self._default))
            base, self.spread = select_k(rows, self._matrix(idx), sites, plt, self.nc_spread, self.max_k, self.seed)
            self.k = max(1, min(int(round(base * self.k_scale)), len(rows)))
            self._k_rows_at_select = len(self._default)
        self._assign(_kmeans(rows, self.k, self.seed, self._padded_centers()).cluster_centers_)
        return True

    def _padded_centers(self) -> np.ndarray | None:
        if self._centers is None:
            return None
        width = 3 + len(DEVICES) + len(self.regions)
        return np.pad(self._centers, ((0, 0), (0, width - self._centers.shape[1])))

    def _assign(self, centers: np.ndarray) -> None:
        """Give new centres the ids of the nearest old ones (one-to-one); the rest get fresh ids."""
        old = self._padded_centers()
        ids = [-1] * len(centers)
        if old is not None:
            cost = ((centers[:, None, :] - old[None, :, :]) ** 2).sum(axis=2)
            for new_i, old_i in zip(*linear_sum_assignment(cost)):
                ids[new_i] = self._ids[old_i]
        for i in range(len(ids)):
            if ids[i] < 0:
                ids[i], self._next_id = self._next_id, self._next_id + 1
        self._centers, self._ids = centers, ids
        self._next_id = max(self._next_id, max(ids) + 1)

    @property
    def fitted(self) -> bool:
        return self._centers is not None or self.strategy != "kmeans"

    def centers(self) -> dict[str, np.ndarray]:
        """Class id -> centre (kmeans only), for decision tables and figures."""
        return {} if self._centers is None else {f"nc{i}": c for i, c in zip(self._ids, self._centers)}
