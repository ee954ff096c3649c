"""Scenario data model: client sessions with attributes and a piecewise-constant network time series.

A session's network condition is constant within each ChunkSize step (Configanator App. F.1: each
linear state is at least ChunkSize long) and may jump at change points. Page loads happen at given
offsets within the session and name a website (a workload known to the oracle).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tailor.errors import ScenarioError


@dataclass(frozen=True)
class ClientInfo:
    """Attributes known about a client: what a CDN sees at the handshake or in its logs."""

    client_id: str  # an address, e.g. "10.1.2.7"
    prefix: str  # the /24 (or /48) it belongs to, e.g. "10.1.2.0/24"
    asn: int
    region: str  # e.g. "us-east", "in-north", "ng"
    device: str  # device class from the TLS fingerprint, e.g. "android", "desktop", "ios"
    access: str  # e.g. "cable", "dsl", "fiber", "lte", "3g", "2g", "geo-satellite", "leo-satellite"


@dataclass(frozen=True, eq=False)
class ConditionSeries:
    """Network condition per step: step i covers [t_s[i], t_s[i+1]) seconds from session start."""

    t_s: np.ndarray  # step start times, strictly increasing, t_s[0] == 0
    bw_mbps: np.ndarray  # bottleneck (downlink) bandwidth
    rtt_ms: np.ndarray  # base round-trip time
    loss: np.ndarray  # random loss probability, fraction in [0, 1)
    buffer_bdp: float = 1.0  # bottleneck buffer in multiples of the BDP (Configanator's testbed used 1)

    def __post_init__(self):
        arrays = [np.asarray(a, dtype=float) for a in (self.t_s, self.bw_mbps, self.rtt_ms, self.loss)]
        for name, arr in zip(("t_s", "bw_mbps", "rtt_ms", "loss"), arrays):
            object.__setattr__(self, name, arr)
        n = len(self.t_s)
        if n == 0 or any(len(a) != n for a in arrays):
            raise ScenarioError("ConditionSeries: t_s, bw_mbps, rtt_ms and loss must be non-empty and of equal length")
        if self.t_s[0] != 0 or np.any(np.diff(self.t_s) <= 0):
            raise ScenarioError("ConditionSeries: t_s must start at 0 and strictly increase")
        if np.any(self.bw_mbps <= 0) or np.any(self.rtt_ms <= 0):
            raise ScenarioError("ConditionSeries: bw_mbps and rtt_ms must be > 0")
        if np.any(self.loss < 0) or np.any(self.loss >= 1):
            raise ScenarioError("ConditionSeries: loss must be in [0, 1)")
        if not self.buffer_bdp > 0:
            raise ScenarioError("ConditionSeries: buffer_bdp must be > 0")

    def step_at(self, t: float) -> int:
        """Index of the step covering offset ``t`` seconds."""
        return max(int(np.searchsorted(self.t_s, t, side="right")) - 1, 0)

    def at(self, t: float) -> tuple[float, float, float]:
        i = self.step_at(t)
        return float(self.bw_mbps[i]), float(self.rtt_ms[i]), float(self.loss[i])

    def change_points(self) -> np.ndarray:
        """Offsets at which any of bandwidth, RTT or loss changes."""
        same = (np.diff(self.bw_mbps) == 0) & (np.diff(self.rtt_ms) == 0) & (np.diff(self.loss) == 0)
        return self.t_s[1:][~same]


@dataclass(frozen=True, eq=False)
class Session:
    """One client's visit: attributes, network time series, and page loads (offset seconds, website)."""

    session_id: str
    client: ClientInfo
    start_s: float  # absolute scenario time at which the session starts
    conditions: ConditionSeries
    loads: tuple[tuple[float, str], ...]  # (offset_s from start, website name), offsets non-decreasing

    def __post_init__(self):
        offsets = [t for t, _ in self.loads]
        if any(b < a for a, b in zip(offsets, offsets[1:])) or any(t < 0 for t in offsets):
            raise ScenarioError(f"session {self.session_id}: page-load offsets must be >= 0 and non-decreasing")


@dataclass(frozen=True, eq=False)
class Scenario:
    """A named set of sessions plus where its numbers came from."""

    name: str
    sessions: tuple[Session, ...]
    chunk_s: float = 5.0  # Configanator's ChunkSize: seconds per measurement step
    description: str = ""
    provenance: dict = field(default_factory=dict)  # sources of every figure used (FACTS.md rows, traces)

    @property
    def n_loads(self) -> int:
        return sum(len(s.loads) for s in self.sessions)

    def websites(self) -> list[str]:
        return sorted({w for s in self.sessions for _, w in s.loads})

    def head(self, n_sessions: int) -> Scenario:
        """The first ``n_sessions`` sessions in start order (for --sessions N)."""
        ordered = sorted(self.sessions, key=lambda s: (s.start_s, s.session_id))
        return Scenario(self.name, tuple(ordered[:n_sessions]), self.chunk_s, self.description, self.provenance)
