"""SmartIW's bottom-up user grouping (Nie et al., §IV-B): subnet (/24) -> ISP (ASN) -> province
(region) -> all.

A group may run its own bandit only when it "satisfies the RL requirement": in every time bin of the
grouping window it has at least S_min samples, and the jitter J (Eq. 5) of its per-bin average reward
is at most θ. Failing sibling subnets are merged into an "Others" node of their ISP; a failing ISP
"Others" is merged with its failing cousins into an "Others" of the province, and so on up to the
root, whose "Others" falls back to the standard IW when it still fails (Steps 1-4).

The per-bin reward used for J is Eq. 4 computed on the *configuration-independent* telemetry
(the server's goodput estimate of the path and the handshake RTT). The paper demands that "the IW
should remain the same in each time bin" so that J measures the network, not the IW; measuring the
network directly satisfies that by construction while the bandits keep changing IWs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# columns of a per-bin statistics row
COUNT, G_SUM, INV_RTT_SUM, G_MAX, RTT_MIN = range(5)
ROOT = "all"


def empty_rows(n: int) -> np.ndarray:
    """``n`` empty per-bin rows (count 0, max goodput 0, min RTT +inf)."""
    rows = np.zeros((n, 5))
    rows[:, RTT_MIN] = np.inf
    return rows


def merge(series: list[np.ndarray]) -> np.ndarray:
    """Per-bin statistics of the union of several nodes (sums add, max/min combine)."""
    out = empty_rows(len(series[0]))
    for s in series:
        out[:, :INV_RTT_SUM + 1] += s[:, :INV_RTT_SUM + 1]
        out[:, G_MAX] = np.maximum(out[:, G_MAX], s[:, G_MAX])
        out[:, RTT_MIN] = np.minimum(out[:, RTT_MIN], s[:, RTT_MIN])
    return out


def reward_series(stats: np.ndarray, alpha: float) -> np.ndarray:
    """Average Eq. 4 reward per bin, normalised by the node's own history max goodput / min RTT."""
    count = np.maximum(stats[:, COUNT], 1)
    g_max = max(stats[:, G_MAX].max(), 1e-12)
    rtt_min = stats[:, RTT_MIN].min()
    return alpha * stats[:, G_SUM] / count / g_max + (1 - alpha) * rtt_min * stats[:, INV_RTT_SUM] / count


def jitter(x: np.ndarray) -> float:
    """Network jitter J of Eq. 5: mean relative change of the reward between consecutive bins."""
    if len(x) < 2:
        return float("inf")
    return float(np.sum(np.abs(np.diff(x)) / x[1:]) / (len(x) - 1))


@dataclass(frozen=True)
class Requirement:
    """The RL requirement of §IV-B: enough samples per bin and J <= θ."""

    s_min: int = 100
    theta: float = 0.1
    alpha: float = 0.8
    coverage: float = 1.0  # share of bins that must hold >= s_min samples (1.0: every bin, "continuously")

    def jitter_of(self, stats: np.ndarray) -> float:
        full = stats[:, COUNT] >= self.s_min
        if full.sum() < 2 or full.mean() < self.coverage:
            return float("inf")
        return jitter(reward_series(stats[full], self.alpha))

    def __call__(self, stats: np.ndarray) -> bool:
        return self.jitter_of(stats) <= self.theta


@dataclass
class Grouping:
    """Result of one grouping run: which node answers for a client, and the members of each group.

    Group ids: ``subnet:<prefix>``, ``isp:<region>/<asn>`` (the ISP's Others), ``region:<region>``
    (the province's Others) and ``all`` (the root's Others). A client whose chain ends nowhere gets
    the standard IW (``lookup`` returns None).
    """

    subnets: set = field(default_factory=set)
    isps: set = field(default_factory=set)
    regions: set = field(default_factory=set)
    root: bool = False
    members: dict = field(default_factory=dict)  # group id -> sorted member prefixes
    jitters: dict = field(default_factory=dict)  # group id -> J at grouping time
    standard: tuple = ()  # prefixes left to the standard IW

    @classmethod
    def root_only(cls) -> Grouping:
        """One group for everybody (SmartIW without grouping, and the cold start before any data)."""
        return cls(root=True)

    def lookup(self, prefix: str, asn: int, region: str) -> str | None:
        """The group of a client: its subnet, else the Others chain ISP -> province -> all."""
        if prefix in self.subnets:
            return f"subnet:{prefix}"
        if (region, asn) in self.isps:
            return f"isp:{region}/{asn}"
        if region in self.regions:
            return f"region:{region}"
        return ROOT if self.root else None


def build_groups(series: dict[str, np.ndarray], meta: dict[str, tuple[str, int]],
                 ok: Callable[[np.ndarray], bool], score: Callable[[np.ndarray], float] | None = None) -> Grouping:
    """Steps 1-4 of §IV-B over subnets ``series`` (prefix -> per-bin rows) with ``meta`` (prefix ->
    (region, asn)); ``ok`` is the RL requirement, ``score`` (optional) the J recorded per group."""
    g = Grouping()
    by_isp: dict[tuple[str, int], list[str]] = defaultdict(list)
    for p in sorted(series):
        by_isp[meta[p]].append(p)
    left_region: dict[str, list[str]] = defaultdict(list)
    for (region, asn), prefixes in sorted(by_isp.items()):
        failing = [p for p in prefixes if not _accept(g, f"subnet:{p}", [p], series, ok, score)]
        g.subnets.update(p for p in prefixes if p not in failing)
        if failing and _accept(g, f"isp:{region}/{asn}", failing, series, ok, score):
            g.isps.add((region, asn))
        else:
            left_region[region].extend(failing)
    left_root: list[str] = []
    for region, prefixes in sorted(left_region.items()):
        if prefixes and _accept(g, f"region:{region}", prefixes, series, ok, score):
            g.regions.add(region)
        else:
            left_root.extend(prefixes)
    g.root = bool(left_root) and _accept(g, ROOT, left_root, series, ok, score)
    g.standard = () if g.root else tuple(sorted(left_root))
    return g


def _accept(g: Grouping, gid: str, prefixes: list[str], series, ok, score) -> bool:
    """Check one (merged) node; record it as a group when it satisfies the requirement."""
    stats = merge([series[p] for p in prefixes])
    if not ok(stats):
        return False
    g.members[gid] = sorted(prefixes)
    g.jitters[gid] = score(stats) if score else float("nan")
    return True


class GroupingData:
    """Per-subnet, per-time-bin telemetry summaries (count, goodput sum, 1/RTT sum, max goodput,
    min RTT) that the grouping reads; the network features of each subnet are kept alongside."""

    def __init__(self, bin_s: float):
        self.bin_s = bin_s
        self.meta: dict[str, tuple[str, int]] = {}
        self._bins: dict[str, dict[int, np.ndarray]] = defaultdict(dict)

    def add(self, prefix: str, asn: int, region: str, time_s: float, goodput_mbps: float, rtt_ms: float) -> None:
        self.meta[prefix] = (region, asn)
        b = int(time_s // self.bin_s)
        row = self._bins[prefix].get(b)
        if row is None:
            row = self._bins[prefix][b] = empty_rows(1)[0]
        row[COUNT] += 1
        row[G_SUM] += goodput_mbps
        row[INV_RTT_SUM] += 1.0 / max(rtt_ms, 1e-3)
        row[G_MAX] = max(row[G_MAX], goodput_mbps)
        row[RTT_MIN] = min(row[RTT_MIN], rtt_ms)

    def window(self, first_bin: int, end_bin: int) -> dict[str, np.ndarray]:
        """Rows for bins [first_bin, end_bin) of every subnet seen in that window."""
        out = {}
        for prefix, bins in self._bins.items():
            rows = empty_rows(max(end_bin - first_bin, 0))
            for b, row in bins.items():
                if first_bin <= b < end_bin:
                    rows[b - first_bin] = row
            if rows[:, COUNT].any():
                out[prefix] = rows
        return out

    def prune(self, before_bin: int) -> None:
        """Forget bins older than ``before_bin`` (bounded memory between regroupings)."""
        for bins in self._bins.values():
            for b in [b for b in bins if b < before_bin]:
                del bins[b]
