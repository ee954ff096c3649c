"""Network classes: K-means over connection features known at the handshake (Configanator §3.2).

Features: handshake RTT, the prefix archive's goodput and loss, and the device class. This is the
simple fixed-K variant the baselines (+NC) use; the NCSpread-driven choice of K belongs to the
Configanator policy. Refits warm-start from the previous centroids so class identities (and what
policies learned per class) stay stable across refits.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from tailor.context import Context, PrefixHistory
from tailor.errors import check

DEVICES = ("desktop", "android", "ios")


def features(ctx: Context) -> np.ndarray | None:
    """Feature row of a connection, or None when its prefix has no history yet."""
    if ctx.history is None:
        return None
    return feature_row(ctx.handshake_rtt_ms, ctx.history, ctx.client.device)


def feature_row(rtt_ms: float, h: PrefixHistory, device: str) -> np.ndarray:
    dev = [0.5 if device == d else 0.0 for d in DEVICES]
    return np.array([math.log(max(rtt_ms, 0.1)), math.log(max(h.goodput_mbps, 0.01)), math.log1p(1000.0 * h.loss), *dev])


class NetworkClasses:
    """Fixed-K K-means network classes, refit on recent connections at each plan()."""

    def __init__(self, k: int = 8, seed: int = 0, window: int = 5000, min_rows: int = 50):
        check(k >= 1, "NetworkClasses", "k", "an integer >= 1", k)
        self.k, self.seed, self.window, self.min_rows = k, seed, window, min_rows
        self._rows: list[np.ndarray] = []
        self._centers: np.ndarray | None = None

    def classify(self, ctx: Context) -> str | None:
        """Class id ('nc3'), or None for an unknown prefix (gets the default configuration)."""
        x = features(ctx)
        return None if x is None else self.classify_row(x)

    def classify_row(self, x: np.ndarray) -> str:
        if self._centers is None:
            return "nc0"
        return f"nc{int(np.argmin(((self._centers - x) ** 2).sum(axis=1)))}"

    def add(self, ctx: Context) -> None:
        x = features(ctx)
        if x is not None:
            self._rows.append(x)
            if len(self._rows) > 2 * self.window:
                del self._rows[: len(self._rows) - self.window]

    def refit(self) -> bool:
        """Refit on the most recent rows; returns True when the classes changed."""
        rows = np.array(self._rows[-self.window:])
        if len(rows) < max(self.min_rows, self.k):
            return False
        # one thread: on small data OpenMP start-up costs more than the fit, and results stay reproducible
        with threadpool_limits(1):
            if self._centers is None:
                km = KMeans(self.k, n_init=4, max_iter=100, tol=1e-3, random_state=self.seed).fit(rows)
            else:
                km = KMeans(self.k, init=self._centers, n_init=1, max_iter=100, tol=1e-3, random_state=self.seed).fit(rows)
        self._centers = km.cluster_centers_
        return True

    @property
    def fitted(self) -> bool:
        return self._centers is not None
