"""Config-Snob's two-level client profiling (ATC'24 §3.1): profile tree, sufficiency, profile groups,
time categories.

Level 1 -- :class:`ProfileTree`: one level per fixed feature (region, ISP/ASN, IP subnet, access type,
OS/device, time category); a root-to-leaf path is a *profile* (§3.1.1, Algorithm 1). Every internal
node is also an *overlap* node: it holds the samples of all profiles below it, so a connection whose
profile was never seen resolves to the deepest overlap node that matches its features (§3.1.2,
Fig. 4c: an unseen (Ottawa, Bell) falls back to (overlap, overlap)).

Sufficiency (§3.1.3): a profile is sufficient with at least ``k`` samples *and* a stable reward
distribution, the constraint Config-Snob takes from TCP-RL [33] as "the changes in the normalized
reward between two consecutive updating cycles" (§3.2.3). The seed text gives no formula, so we
choose: the relative change of the profile's mean normalised reward between its last two cycles
with data must be at most ``stability`` (0.25 here, an ASSUMPTION sized to the simulator's PLT noise).

Level 2 -- :class:`ProfileGroups`: K-means over the sufficient profiles' network features (goodput,
loss, RTT; §3.1.4) with Lloyd's algorithm, max_iter=500, random_state=42 (§4.2). Refits warm-start
from the previous centroids so group identities persist across cycles.

:class:`TimeCategories` (§3.1.5): weekday off-peak / weekday peak / weekend, and spike ("spark")
detection that makes inference fall back to the previous category's outcomes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from tailor.context import Context
from tailor.errors import check
from tailor.scenario.generate import time_category as _peak_or_offpeak

FEATURES = ("region", "asn", "subnet", "access", "device", "time")
# §3.1 lists the features "geolocation, ISP, network interface, connection speed, OS, IP subnet, and connection time
# category": the access type and OS above the /24, so a new /24 of a known ISP resolves to the overlap node of its
# access type and OS (no connection-speed level: the server knows no speed before the first connection)
FEATURES_LISTED = ("region", "asn", "access", "device", "subnet", "time")
OVERLAP = "*"
DAY_S = 86400.0


def profile_path(ctx: Context, time_cat: str, levels: tuple[str, ...] = FEATURES) -> tuple[str, ...]:
    """The profile of a connection: its value for every level of ``levels`` (:data:`FEATURES` or
    :data:`FEATURES_LISTED`)."""
    c = ctx.client
    path = (c.region, str(c.asn), c.prefix, c.access, c.device, time_cat)
    return path if levels == FEATURES else tuple(path[FEATURES.index(f)] for f in levels)


@dataclass
class Node:
    """A tree node: a profile (leaf) or an overlap group (internal); ``samples`` are sample ids."""

    children: dict = field(default_factory=dict)
    samples: list = field(default_factory=list)


class ProfileTree:
    """Profile tree of Algorithm 1: insert samples along their path; resolve a path to a profile or overlap."""

    def __init__(self, depth: int = len(FEATURES)):
        self.depth = depth
        self.root = Node()

    def insert(self, path: tuple[str, ...], sample_id: int) -> None:
        """Add a sample to its profile and to every overlap node above it (creates missing nodes)."""
        check(len(path) == self.depth, "ProfileTree", "path", f"a tuple of {self.depth} features", path)
        node = self.root
        node.samples.append(sample_id)
        for value in path:
            node = node.children.setdefault(value, Node())
            node.samples.append(sample_id)

    def resolve(self, path: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
        """(key, seen): the profile itself when seen, else the deepest matching overlap node, whose key
        has ``OVERLAP`` for every level below the match (e.g. ('ca', '*', '*', ...))."""
        node, depth = self.root, 0
        for value in path:
            child = node.children.get(value)
            if child is None:
                break
            node, depth = child, depth + 1
        seen = depth == self.depth
        return tuple(path[:depth]) + (OVERLAP,) * (self.depth - depth), seen

    def node(self, key: tuple[str, ...]) -> Node | None:
        """The node of a profile or overlap key (trailing ``OVERLAP`` levels stop the walk)."""
        node = self.root
        for value in key:
            if value == OVERLAP:
                return node
            node = node.children.get(value)
            if node is None:
                return None
        return node

    def profiles(self):
        """(path, node) of every leaf (profile)."""
        stack = [((), self.root)]
        while stack:
            path, node = stack.pop()
            if len(path) == self.depth:
                yield path, node
                continue
            stack.extend((path + (k,), child) for k, child in node.children.items())


class Sufficiency:
    """Per-profile cycle means of the normalised reward; sufficient = >= k samples and stable (§3.1.3)."""

    def __init__(self, k: int = 20, stability: float = 0.25):
        check(k >= 1, "Sufficiency", "k", "an integer >= 1", k)
        check(stability > 0, "Sufficiency", "stability", "> 0", stability)
        self.k, self.stability = k, stability
        self._means: dict[tuple, list[float]] = {}

    def record_cycle(self, profile: tuple, rewards: list[float]) -> None:
        """The mean normalised reward of a profile's samples in one updating cycle."""
        if rewards:
            hist = self._means.setdefault(profile, [])
            hist.append(float(np.mean(rewards)))
            del hist[:-2]

    def reward_change(self, profile: tuple) -> float:
        """TCP-RL-style distribution factor: |R_t - R_{t-1}| / R_{t-1}; inf before two cycles."""
        hist = self._means.get(profile, [])
        if len(hist) < 2 or hist[0] <= 0:
            return math.inf
        return abs(hist[1] - hist[0]) / hist[0]

    def sufficient(self, profile: tuple, n_samples: int) -> bool:
        return n_samples >= self.k and self.reward_change(profile) <= self.stability


def network_row(goodput_mbps: float, loss: float, rtt_ms: float) -> np.ndarray:
    """Clustering features of §3.1.4 on comparable scales (log goodput, log1p per-mille loss, log RTT)."""
    return np.array([math.log(max(goodput_mbps, 0.01)), math.log1p(1000.0 * max(loss, 0.0)),
                     math.log(max(rtt_ms, 0.1))])


class ProfileGroups:
    """K-means profile groups over sufficient profiles' mean network features (§3.1.4, §4.2)."""

    def __init__(self, k: int = 8, seed: int = 42, max_iter: int = 500):
        check(k >= 1, "ProfileGroups", "k", "an integer >= 1", k)
        self.k, self.seed, self.max_iter = k, seed, max_iter
        self._centers: np.ndarray | None = None

    def fit(self, rows: np.ndarray) -> np.ndarray:
        """Cluster labels of ``rows`` (one per sufficient profile); warm-started when K is unchanged."""
        rows = np.asarray(rows, dtype=float)
        if len(rows) == 0:
            return np.zeros(0, dtype=int)
        k = min(self.k, len(np.unique(rows.round(6), axis=0)))
        warm = self._centers is not None and len(self._centers) == k
        with threadpool_limits(1):
            km = KMeans(k, init=self._centers if warm else "k-means++", n_init=1 if warm else 4,
                        max_iter=self.max_iter, random_state=self.seed).fit(rows)
        self._centers = km.cluster_centers_
        return km.labels_


class TimeCategories:
    """Weekday off-peak / weekday peak / weekend (§3.1.5), and spike detection.

    Scenario time 0 is ``start_hour`` o'clock of day ``start_weekday`` (0 = Monday); peak hours are
    the FCC MBA ones (``tailor.scenario.generate.time_category``). A *spike* is a cycle whose mean log
    goodput departs from its category's running mean by more than ``spike_z`` running standard
    deviations (an ASSUMPTION: the paper names no detector). During a spike the category's models are
    not trained with the cycle's samples and inference uses the previous category's outcomes. The paper
    says a spark "can last for a few updating cycles"; after ``max_spike`` consecutive spike cycles the
    shift is taken as the new normal (otherwise a lasting regime change would freeze learning).
    """

    def __init__(self, start_hour: float = 17.0, start_weekday: int = 0, spike_z: float = 3.0, warmup: int = 4,
                 max_spike: int = 3):
        self.start_hour, self.start_weekday, self.spike_z, self.warmup = start_hour, start_weekday, spike_z, warmup
        self.max_spike = max_spike
        self._run = 0  # consecutive spike cycles
        self._stats: dict[str, list[float]] = {}  # category -> [n, mean, M2] of cycle means (Welford)
        self._order: list[str] = []  # categories in the order they were entered
        self.spike = False
        self.spikes = 0

    def category(self, t_s: float) -> str:
        day = (self.start_weekday + int((t_s + self.start_hour * 3600.0) // DAY_S)) % 7
        if day >= 5:
            return "weekend"
        return "weekday-" + _peak_or_offpeak(t_s, self.start_hour)

    def serving(self, t_s: float) -> str:
        """The category whose models answer now: the current one, or the previous one during a spike."""
        current = self.category(t_s)
        if self.spike:
            earlier = [c for c in self._order if c != current]
            return earlier[-1] if earlier else current
        return current

    def update(self, t_s: float, cycle_mean_log_goodput: float | None) -> bool:
        """Feed one cycle's mean log goodput; returns True (and sets ``spike``) when it is a spike."""
        cat = self.category(t_s)
        if not self._order or self._order[-1] != cat:
            self._order.append(cat)
        if cycle_mean_log_goodput is None:
            self.spike = False
            return False
        n, mean, m2 = self._stats.setdefault(cat, [0.0, 0.0, 0.0])
        sd = math.sqrt(m2 / (n - 1)) if n > 1 else math.inf
        far = n >= self.warmup and abs(cycle_mean_log_goodput - mean) > self.spike_z * max(sd, 1e-6)
        self._run = self._run + 1 if far else 0
        self.spike = far and self._run <= self.max_spike
        if self.spike:
            self.spikes += 1
            return True
        n += 1
        delta = cycle_mean_log_goodput - mean
        mean += delta / n
        self._stats[cat] = [n, mean, m2 + delta * (cycle_mean_log_goodput - mean)]
        return False
