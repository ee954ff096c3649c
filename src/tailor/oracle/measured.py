"""MeasuredOracle: the PLT tensor measured by the testbed (``tailor testbed measure``), interpolated.

What it answers: single-object completion times (curl ``time_total``: TCP + TLS 1.3 handshakes, request,
transfer) for the object sizes in the dataset, on any condition cell, for any configuration of a space over
congestion control, initial window and HTTP version (plus knobs the model handles, see below).

Method ("model-shaped interpolation", docs/testbed.md section 4):

* The *mode* at a measured point is the median over repetitions.
* Between measured conditions the oracle interpolates the log of the ratio measured / model
  (``ModelOracle``'s mechanics evaluated at the same condition, buffer and configuration), by inverse-distance
  weighting over the ``neighbours`` nearest measured conditions in (log bandwidth, log RTT, log loss) space,
  and multiplies it back onto the model at the query point. The model carries the shape (time scales with
  1/bandwidth and RTT); the measurements fix the level. At a measured condition the weight is exact, so the
  oracle returns the measured median there.
* A configuration whose knob values were not measured (IW 16/64, ``rto_min`` 50, ``syn_rto``, ``sndbuf``) is
  anchored on the nearest measured configuration (same CC and HTTP version, nearest IW in log scale): it gets
  that anchor's measured ratio times the model's value for its own knobs. ``strict=True`` refuses such
  configurations with an OracleError instead.
* Noise (``noise="measured"``, default): theta from the measured dispersion (coefficient of variation over
  repetitions, pooled by median over configurations per condition and size) through the Erlang(k) relation
  CV = sqrt(k) theta / (1 + k theta), interpolated between conditions with the same weights. Lossless emulated paths are nearly deterministic
  (theta at the 0.005 floor), far less noisy than the Internet; ``noise="model"`` uses the model's theta instead.
* Pages (Chromium) are not measured: asking for a page raises OracleError.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tailor.errors import OracleError
from tailor.oracle.base import NOISE_SHAPE, ConditionGrid, Oracle, Website
from tailor.oracle.model import DEFAULT_GRID, ModelOracle
from tailor.oracle.websites import default_catalog
from tailor.space import ConfigSpace

DEFAULT_DATASET = Path(__file__).resolve().parents[3] / "data" / "oracle" / "tb-v1"
KEYS = ["cc", "iw", "rto_min_ms", "http"]
FEATURE_SCALE = np.array([np.log(4.0), np.log(3.0), np.log(11.0)])  # one unit = x4 bw, x3 RTT, 0 -> 1 % loss
THETA_BOUNDS = (0.005, 0.25)
MTU, MSS = 1500, 1448


def load_medians(dataset: str | Path = DEFAULT_DATASET) -> pd.DataFrame:
    """Median, count and coefficient of variation per (condition, size, configuration) of valid fetches."""
    path = Path(dataset) / "measurements.parquet"
    if not path.exists():
        raise OracleError(f"no measured dataset at {path}; run `tailor testbed measure` (docs/testbed.md)")
    df = pd.read_parquet(path)
    df = df[df["ok"].astype(bool) & np.isfinite(df["completion_ms"])]
    cond = ["condition", "down_mbps", "rtt_ms", "loss", "queue_packets", "size_bytes"]
    g = df.groupby(cond + KEYS)["completion_ms"]
    out = g.agg(median="median", n="count", mean="mean", sd="std").reset_index()
    out["cv"] = (out["sd"] / out["mean"]).fillna(0.0)
    return out


class MeasuredOracle(Oracle):
    """Measured single-object completion times, interpolated across conditions with the model's shape."""

    name = "measured-tb-v1"
    kind = "measured"
    supports_pages = False  # Chromium page loads are not in the dataset yet (docs/testbed.md, "missing")

    def __init__(self, dataset: str | Path = DEFAULT_DATASET, strict: bool = False, neighbours: int = 4,
                 power: float = 2.0, shape: str = "model", grid: ConditionGrid = DEFAULT_GRID, noise: str = "measured"):
        if shape not in ("model", "none") or noise not in ("measured", "model"):
            raise OracleError(f"The 'shape'/'noise' parameters of MeasuredOracle must be 'model'|'none' and "
                              f"'measured'|'model'. Got {shape!r}, {noise!r}.")
        self.noise = noise
        self.dataset, self.strict, self.k, self.power, self.shape = Path(dataset), strict, neighbours, power, shape
        self.grid = grid
        self.table = load_medians(dataset)
        self._model = ModelOracle(grid)
        self.conds = self.table.drop_duplicates("condition")[["condition", "down_mbps", "rtt_ms", "loss",
                                                              "queue_packets"]].reset_index(drop=True)
        self.anchors = self.table[KEYS].drop_duplicates().sort_values(KEYS).reset_index(drop=True)
        sizes = set(self.table["size_bytes"])
        self.websites = {n: s for n, s in default_catalog().items() if s.kind == "object" and s.total_bytes in sizes}
        self._site_by_size = {s.total_bytes: s for s in self.websites.values()}
        self._log_ratio = {size: self._ratio_matrix(size) for size in sizes}
        self._theta = {size: self._theta_vector(size) for size in sizes}

    # -- Oracle interface ---------------------------------------------------------------------------
    def mode_ms(self, cells, website: str, space: ConfigSpace) -> np.ndarray:
        bw, rtt, loss, q = self.grid.values(np.asarray(cells, dtype=int).ravel())
        return self.mode_at(bw, rtt, loss, q, website, space)

    def noise_theta(self, cells, website: str) -> np.ndarray:
        if self.noise == "model":  # the testbed is near-deterministic without loss; the model's theta is the world's
            return self._model.noise_theta(cells, website)
        bw, rtt, loss, _ = self.grid.values(np.asarray(cells, dtype=int).ravel())
        size = self.website(website).total_bytes
        w = self._weights(np.c_[bw, rtt, loss], np.isfinite(self._theta[size])[:, None])[:, :, 0]
        return np.clip(w @ np.nan_to_num(self._theta[size]), *THETA_BOUNDS)

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "dataset": str(self.dataset),
                "conditions": int(len(self.conds)), "sizes": sorted(int(s) for s in self._log_ratio),
                "measured_configs": [f"{a.cc} iw{a.iw} rto{a.rto_min_ms} h{a.http}" for a in self.anchors.itertuples()],
                "points": int(len(self.table)), "median_reps": float(self.table["n"].median()),
                "method": f"IDW (k={self.k}, p={self.power}) of log(measured/model) over (log bw, log RTT, log loss); "
                          f"shape={self.shape}; unmeasured knob values anchored on the nearest measured config",
                "noise": self.noise, "strict": self.strict, "websites": sorted(self.websites)}

    # -- queries at raw condition values ------------------------------------------------------------
    def mode_at(self, bw, rtt, loss, q, website: str, space: ConfigSpace, exclude: str | None = None) -> np.ndarray:
        """Mode for conditions given by value (not cell); ``exclude`` drops one measured condition (LOCO)."""
        size = self.website(website).total_bytes
        bw, rtt, loss, q = (np.asarray(a, dtype=float).ravel() for a in (bw, rtt, loss, q))
        anchor_idx = self._anchor_of(space)
        lr = self._log_ratio[size][:, anchor_idx]  # (m, K)
        avail = np.isfinite(lr)
        if exclude is not None:
            avail[(self.conds["condition"] == exclude).to_numpy()] = False
        w = self._weights(np.c_[bw, rtt, loss], avail)  # (n, m, K)
        interp = np.einsum("nmk,mk->nk", w, np.nan_to_num(lr))
        return np.exp(interp) * self._shape(bw, rtt, loss, q, size, space)

    def covers(self, space: ConfigSpace, websites) -> tuple[bool, str]:
        """Whether every configuration of ``space`` and every website is measured (no anchoring needed)."""
        missing_sites = sorted(set(websites) - set(self.websites))
        try:
            MeasuredOracle._anchor_of(self, space, strict=True)
        except OracleError as err:
            return False, str(err)
        return (not missing_sites, f"websites not measured: {missing_sites[:6]}..." if missing_sites else "covered")

    # -- internals ----------------------------------------------------------------------------------
    def _shape(self, bw, rtt, loss, q, size: int, space: ConfigSpace) -> np.ndarray:
        if self.shape == "none":
            return np.ones((len(bw), len(space)))
        return _model_ms(self._site_by_size[size], bw, rtt, loss, q, space)

    def _anchor_of(self, space: ConfigSpace, strict: bool | None = None) -> np.ndarray:
        strict = self.strict if strict is None else strict
        idx = []
        for c in space.configs:
            a = self.anchors
            cand = a[(a.cc == c["tcp.congestion_control"]) & (a.http == c["http.version"])]
            if cand.empty:
                raise OracleError(f"{self.name}: no measurement with cc={c['tcp.congestion_control']} "
                                  f"http={c['http.version']} (configuration {c.label()})")
            dist = (np.abs(np.log(cand.iw / c["tcp.initial_cwnd"]))
                    + np.abs(np.log(cand.rto_min_ms / c["tcp.rto_min_ms"])))
            best = dist.idxmin()
            if strict and (dist[best] > 0 or _unmeasured_changes(c)):
                raise OracleError(f"{self.name} (strict): configuration {c.label()} {_unmeasured_changes(c) or ''} "
                                  f"is not measured; measured IW {sorted(set(self.anchors.iw))}, rto_min "
                                  f"{sorted(set(self.anchors.rto_min_ms))}")
            idx.append(best)
        return np.array(idx, dtype=int)

    def _ratio_matrix(self, size: int) -> np.ndarray:
        """log(measured median / shape) per (measured condition, anchor config); NaN where not measured."""
        t = self.table[self.table.size_bytes == size]
        out = np.full((len(self.conds), len(self.anchors)), np.nan)
        aidx = {tuple(r): i for i, r in enumerate(self.anchors[KEYS].itertuples(index=False))}
        space = _anchor_space(self.anchors)
        cidx = {c: i for i, c in enumerate(self.conds.condition)}
        shape = self._shape(*self._cond_values(), size, space)  # (m, len(space))
        col = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): j
               for j, c in enumerate(space.configs)}
        for r in t.itertuples():
            key = (r.cc, r.iw, r.rto_min_ms, r.http)
            out[cidx[r.condition], aidx[key]] = np.log(r.median / shape[cidx[r.condition], col[key]])
        return out

    def _theta_vector(self, size: int) -> np.ndarray:
        t = self.table[(self.table.size_bytes == size) & (self.table.n >= 2)]
        cv = t.groupby("condition")["cv"].median()
        cv = np.array([cv.get(c, np.nan) for c in self.conds.condition])
        k = NOISE_SHAPE
        theta = cv / np.maximum(np.sqrt(k) - k * cv, 1e-3)
        return np.where(np.isfinite(theta), np.clip(theta, *THETA_BOUNDS), np.nan)

    def _cond_values(self):
        c = self.conds
        bdp_pkts = c.down_mbps * 1e6 / 8 * c.rtt_ms / 1000 / MTU
        q = (c.queue_packets * MTU / MSS) / np.maximum(bdp_pkts * MTU / MSS, 1e-9)
        return c.down_mbps.to_numpy(float), c.rtt_ms.to_numpy(float), c.loss.to_numpy(float), q.to_numpy(float)

    def _weights(self, query: np.ndarray, avail: np.ndarray) -> np.ndarray:
        """IDW weights (n, m, K) over the k nearest available measured conditions, exact at a measured one."""
        bw, rtt, loss, _ = self._cond_values()
        diff = _features(query)[:, None, :] - _features(np.c_[bw, rtt, loss])[None, :, :]
        d2 = ((diff / FEATURE_SCALE) ** 2).sum(-1)
        d2 = np.where(avail[None, :, :], d2[:, :, None], np.inf)  # (n, m, K)
        if not np.isfinite(d2).any(axis=1).all():
            raise OracleError(f"{self.name}: a configuration has no measurement at any condition for this size")
        kth = np.sort(d2, axis=1)[:, min(self.k, d2.shape[1]) - 1: min(self.k, d2.shape[1]), :]
        w = np.where(d2 <= kth, 1.0 / np.maximum(d2, 1e-12) ** (self.power / 2), 0.0)
        exact = d2 < 1e-12
        w = np.where(exact.any(axis=1, keepdims=True), exact.astype(float), w)
        return w / w.sum(axis=1, keepdims=True)


def _features(x: np.ndarray) -> np.ndarray:
    return np.c_[np.log(x[:, 0]), np.log(x[:, 1]), np.log1p(x[:, 2] / 0.001)]


def _unmeasured_changes(c) -> dict:
    skip = {"tcp.congestion_control", "tcp.initial_cwnd", "http.version", "tcp.rto_min_ms"}
    return {k: v for k, v in c.changes().items() if k not in skip}


def _anchor_space(anchors: pd.DataFrame) -> ConfigSpace:
    grid = {"tcp.congestion_control": sorted(set(anchors.cc) | {"cubic"}),
            "tcp.initial_cwnd": sorted(set(int(i) for i in anchors.iw) | {10}),
            "tcp.rto_min_ms": sorted(set(int(r) for r in anchors.rto_min_ms) | {200}),
            "http.version": sorted(set(anchors.http) | {"1.1"})}
    return ConfigSpace(grid, name="measured-anchors")


def _model_ms(site: Website, bw, rtt, loss, q, space: ConfigSpace) -> np.ndarray:
    from tailor.oracle.model import _stack, load_ms

    stack, h2 = _stack(space)
    col = lambda a: np.asarray(a, dtype=float)[:, None]  # noqa: E731
    out = np.empty((len(bw), len(space)))
    for is_h2 in (False, True):
        cols = h2 == is_h2
        if cols.any():
            out[:, cols] = load_ms(site, col(bw), col(rtt), col(loss), col(q), stack.take(cols), is_h2)
    return out
