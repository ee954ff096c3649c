"""The oracle interface: completion / page-load time for (network condition, workload, configuration).

Like Configanator's PLT tensor, an oracle answers on a grid of network conditions; a session's
continuous condition is mapped to its nearest grid cell. The oracle keeps the noise-free value
(the *mode*, as Configanator App. F.7 uses the tensor's PLT) apart from the noisy observation:

    observed = mode * (1 + X),  X ~ Erlang(k, theta(cell, workload))
    ground-truth mean = mode * (1 + k * theta)

The noise factor does not depend on the configuration, so the optimal configuration of a cell is
the argmin of the mode, and every policy sees the same draw X for the same page load (common random
numbers across policies).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from tailor.errors import OracleError
from tailor.space import ConfigSpace

NOISE_SHAPE = 2  # Erlang shape k shared by every cell (FACTS.md section 4 suggests k in 2..4)


@dataclass(frozen=True)
class WebObject:
    """One HTTP response of a page."""

    size_bytes: int
    origin: int  # index of the origin (hostname) serving it; origin 0 serves the HTML
    level: int  # discovery depth: 0 = HTML, 1 = referenced by HTML, 2 = referenced by level-1 objects
    kind: str  # html | css | js | img | font | other


@dataclass(frozen=True)
class Website:
    """A workload: a synthetic page (many objects, several origins) or a single object."""

    name: str
    objects: tuple[WebObject, ...]
    # What its time measures. "load": from the client's first SYN to the last byte (handshakes included; pages
    # add the browser's time). "response": SmartIW's TCP response time (seed 004 §II-A), from the server's first
    # byte of the response to its last ACK, on a connection whose window starts at the initial window (a new
    # one, or an idle one after slow-start restart): no handshake.
    metric: str = "load"

    def __post_init__(self):
        if self.metric not in ("load", "response"):
            raise OracleError(f"website {self.name!r}: metric must be 'load' or 'response'. Got {self.metric!r}.")

    @property
    def kind(self) -> str:
        return "object" if len(self.objects) == 1 else "page"

    @property
    def total_bytes(self) -> int:
        return sum(o.size_bytes for o in self.objects)

    @property
    def n_origins(self) -> int:
        return len({o.origin for o in self.objects})


@dataclass(frozen=True)
class ConditionGrid:
    """Grid of network conditions; lookups snap to the nearest cell (log scale for bw and RTT)."""

    bw_mbps: tuple[float, ...]
    rtt_ms: tuple[float, ...]
    loss: tuple[float, ...]
    buffer_bdp: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.bw_mbps), len(self.rtt_ms), len(self.loss), len(self.buffer_bdp))

    @property
    def n_cells(self) -> int:
        return math.prod(self.shape)

    def cells(self, bw, rtt, loss, buffer_bdp) -> np.ndarray:
        """Vectorized nearest-cell lookup; returns flat cell indices."""
        ib = _nearest(np.log(self.bw_mbps), np.log(np.asarray(bw, dtype=float)))
        ir = _nearest(np.log(self.rtt_ms), np.log(np.asarray(rtt, dtype=float)))
        il = _nearest(np.log1p(1000 * np.asarray(self.loss)), np.log1p(1000 * np.asarray(loss, dtype=float)))
        iq = _nearest(np.log(self.buffer_bdp), np.log(np.asarray(buffer_bdp, dtype=float)))
        return np.ravel_multi_index((ib, ir, il, iq), self.shape)

    def cell(self, bw: float, rtt: float, loss: float, buffer_bdp: float = 1.0) -> int:
        return int(self.cells([bw], [rtt], [loss], [buffer_bdp])[0])

    def values(self, cells) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(bw_mbps, rtt_ms, loss, buffer_bdp) arrays for flat cell indices."""
        ib, ir, il, iq = np.unravel_index(np.asarray(cells, dtype=int), self.shape)
        return (np.asarray(self.bw_mbps)[ib], np.asarray(self.rtt_ms)[ir],
                np.asarray(self.loss)[il], np.asarray(self.buffer_bdp)[iq])


def _nearest(axis: np.ndarray, x: np.ndarray) -> np.ndarray:
    idx = np.clip(np.searchsorted(axis, x), 1, len(axis) - 1)
    left = axis[idx - 1]
    right = axis[idx]
    return np.where(np.abs(x - left) <= np.abs(right - x), idx - 1, idx) if len(axis) > 1 else np.zeros_like(idx)


class Oracle(ABC):
    """Maps (condition cell, website, configuration) to a noise-free completion time in ms."""

    name: str = "oracle"
    kind: str = "model"  # "model" or "measured"
    grid: ConditionGrid
    websites: dict[str, Website]

    @abstractmethod
    def mode_ms(self, cells: np.ndarray, website: str, space: ConfigSpace) -> np.ndarray:
        """Noise-free time in ms, shape (len(cells), len(space)), for every configuration of ``space``."""

    @abstractmethod
    def noise_theta(self, cells: np.ndarray, website: str) -> np.ndarray:
        """Erlang scale theta per cell for this website (shape k is NOISE_SHAPE)."""

    def srtt_ms(self, cells: np.ndarray, website: str, space: ConfigSpace) -> np.ndarray:
        """Mean RTT the server measures over the workload, shape (len(cells), len(space)).

        This default has no queueing model: the cell's path RTT for every configuration. The model oracle adds
        the queue the configuration's own flights build (``tcp.mean_rtt_ms``)."""
        rtt = np.asarray(self.grid.values(np.asarray(cells, dtype=int))[1], dtype=float)
        return np.repeat(rtt[:, None], len(space), axis=1)

    def describe(self) -> dict:
        """Provenance shown in reports: what this oracle is and what it rests on."""
        return {"name": self.name, "kind": self.kind}

    def website(self, name: str) -> Website:
        try:
            return self.websites[name]
        except KeyError:
            raise OracleError(f"website {name!r} is unknown to oracle {self.name!r}; known: {sorted(self.websites)[:12]}...") from None


class PLTTensor:
    """Lazily filled tensor cells x websites x configurations for one oracle and one space."""

    def __init__(self, oracle: Oracle, space: ConfigSpace):
        self.oracle = oracle
        self.space = space
        self.site_names = sorted(oracle.websites)
        self.site_index = {n: i for i, n in enumerate(self.site_names)}
        self._mode: dict[tuple[int, int], np.ndarray] = {}
        self._theta: dict[tuple[int, int], float] = {}
        self._srtt: dict[tuple[int, int], np.ndarray] = {}

    def prepare(self, cells_by_site: dict[str, np.ndarray]) -> None:
        """Batch-compute every (cell, website) pair that a scenario will visit."""
        for site, cells in cells_by_site.items():
            s = self.site_index[site]
            todo = np.array(sorted({int(c) for c in cells if (int(c), s) not in self._mode}), dtype=int)
            if len(todo) == 0:
                continue
            modes = self.oracle.mode_ms(todo, site, self.space)
            thetas = self.oracle.noise_theta(todo, site)
            for c, row, th in zip(todo, modes, thetas):
                self._mode[(int(c), s)] = row
                self._theta[(int(c), s)] = float(th)

    def mode(self, cell: int, site: int) -> np.ndarray:
        key = (cell, site)
        if key not in self._mode:
            self.prepare({self.site_names[site]: np.array([cell])})
        return self._mode[key]

    def srtt(self, cell: int, site: int) -> np.ndarray:
        """The oracle's mean RTT for every configuration; computed per website in one batch over every cell
        this tensor holds for it, on first use."""
        row = self._srtt.get((cell, site))
        if row is None:
            cells = np.array(sorted({c for c, s in self._mode if s == site} | {cell}), dtype=int)
            for c, r in zip(cells, self.oracle.srtt_ms(cells, self.site_names[site], self.space)):
                self._srtt[(int(c), site)] = r
            row = self._srtt[(cell, site)]
        return row

    def theta(self, cell: int, site: int) -> float:
        if (cell, site) not in self._theta:
            self.mode(cell, site)
        return self._theta[(cell, site)]

    def mean(self, cell: int, site: int) -> np.ndarray:
        """Ground-truth mean of the observed time for every configuration."""
        return self.mode(cell, site) * (1.0 + NOISE_SHAPE * self.theta(cell, site))
