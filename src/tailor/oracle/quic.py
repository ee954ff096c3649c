"""QuicOracle: measured QUIC / HTTP-3 and TCP completion times over the ``quic`` space (``data/oracle/tb-v2/quic``).

What it answers: single-object completion times (tailor-fetch on a fresh connection: handshake, request, transfer;
docs/testbed.md section 12) for the sizes of the QUIC dataset (10 KB, 100 KB, 1 MB, 2 MB), on any condition cell,
for every configuration of a space over

* ``http.alt_svc``: true (the default) = the client uses HTTP/3 over QUIC (it has the server's Alt-Svc); false =
  it stays on TCP (CUBIC, IW 10), with ``http.version`` 1.1 or 2;
* ``quic.initial_packet_size`` and ``quic.initial_stream_receive_window``: the quic-go parameters tailor-edge
  applies per connection, at the values the dataset measured (1280 / 1452 bytes; 64 KiB / 512 KiB / 8 MiB).

Method (the measured oracle's "model-shaped interpolation", ``tailor.oracle.measured``): at each measured condition
the log ratio of the measured median to the model's TCP time for the same object and condition (HTTP/2, CUBIC,
IW 10: the model has no QUIC, so its TCP time carries the shape over conditions), interpolated by inverse-distance
weighting over the ``neighbours`` nearest measured conditions (exact at a measured one) and multiplied back onto
the model at the query point. TCP over HTTP/1.1 was not measured in this dataset: it gets HTTP/2's measured ratio on
the model's HTTP/1.1 time. A QUIC configuration measured as such (the plan's ``default``, ``win-small``,
``win-large``, ``pkt1452``) gets its own ratio; the two combinations not measured (1452-byte packets with a small or
large window) add the two measured effects in log time (``strict=True`` refuses them). The measured windows came
with a connection window of twice the stream window; the space leaves the connection window at its default
(768 KiB): both bound only what the client sends, which the dataset shows has no resolvable effect on downloads.

Knobs of the space outside these (any non-default value) were not measured and are refused with an OracleError.
Noise: the model's theta (the emulated paths are near-deterministic; docs/testbed.md section 12).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tailor import paths
from tailor.errors import OracleError
from tailor.oracle.base import ConditionGrid, Oracle
from tailor.oracle.measured import MeasuredOracle, _model_ms, _object_name
from tailor.oracle.model import DEFAULT_GRID, ModelOracle
from tailor.oracle.websites import default_catalog
from tailor.space import ConfigSpace

QUIC_DATASET = paths.DATA_DIR / "oracle" / "tb-v2" / "quic"
PACKET, WINDOW = "quic.initial_packet_size", "quic.initial_stream_receive_window"
ANSWERED = ("http.alt_svc", "http.version", PACKET, WINDOW)
TCP = "tcp-h2"  # the variant name of the dataset's TCP comparison fetches
UNANSWERED_COLUMNS = {"quic_max_incoming_streams": "quic.max_incoming_streams",
                      "quic_max_idle_timeout_ms": "quic.max_idle_timeout_ms"}
REFERENCE = ConfigSpace({"http.version": ("1.1", "2")}, name="quic-reference")  # model TCP times: HTTP/1.1, HTTP/2


class QuicOracle(Oracle):
    """Measured QUIC and TCP object times, interpolated across conditions with the model's TCP shape."""

    kind = "measured"
    supports_pages = False

    def __init__(self, dataset: str | Path = QUIC_DATASET, strict: bool = False, neighbours: int = 4,
                 power: float = 2.0, grid: ConditionGrid = DEFAULT_GRID):
        self.dataset, self.strict, self.k, self.power, self.grid = Path(dataset), strict, neighbours, power, grid
        self.name = f"measured-quic-{self.dataset.parent.name}"
        self._model = ModelOracle(grid)
        path = self.dataset / "measurements.parquet"
        if not path.exists():
            raise OracleError(f"no QUIC dataset at {path}; run `tailor testbed quic` (docs/testbed.md section 12)")
        df = pd.read_parquet(path)
        df = df[df["ok"].astype(bool) & np.isfinite(df["completion_ms"])].copy()
        df["variant"] = np.where(df["http"].astype(str) == "3", df["quic_config"].astype(str), TCP)
        cond = ["condition", "down_mbps", "rtt_ms", "loss", "queue_packets"]
        self.table = (df.groupby(cond + ["size_bytes", "variant"])["completion_ms"]
                      .agg(median="median", n="count").reset_index())
        self.conds = self.table.drop_duplicates("condition")[cond].sort_values("condition").reset_index(drop=True)
        catalog = default_catalog()
        self.websites = {n: catalog[n] for n in sorted({_object_name(s) for s in self.table["size_bytes"]} - {None})}
        quic = df[df["variant"] != TCP].drop_duplicates("variant")
        # measured QUIC variant -> its (packet size, stream window), for the variants whose other knobs (streams,
        # idle timeout) were at their defaults: those are points of the space ("default" is the knobs' defaults)
        registry = REFERENCE.registry
        at_default = np.ones(len(quic), dtype=bool)
        for column, knob in UNANSWERED_COLUMNS.items():
            at_default &= quic[column].to_numpy() == registry[knob].default
        self.variants = {str(r.variant): (int(r.quic_initial_packet_size), int(r.quic_initial_stream_receive_window))
                         for r in quic[at_default].itertuples()}
        self.outside = sorted(set(quic["variant"]) - set(self.variants))  # measured, but not points of the space
        if "default" not in self.variants or TCP not in set(df["variant"]):
            raise OracleError(f"{path}: the QUIC dataset needs the 'default' QUIC configuration and the TCP (h2) fetches")
        self._columns = [TCP] + sorted(self.variants) + self.outside
        self._log_ratio = {w: self._ratio_matrix(site) for w, site in self.websites.items()}

    # -- Oracle interface ---------------------------------------------------------------------------
    def mode_ms(self, cells, website: str, space: ConfigSpace) -> np.ndarray:
        site = self.website(website)
        bw, rtt, loss, q = self.grid.values(np.asarray(cells, dtype=int).ravel())
        plan = self._plan(space)
        lr = self._log_ratio[site.name]  # (m, V)
        w = self._weights(self._dist2(np.c_[bw, rtt, loss, q]), np.isfinite(lr))  # (n, m, V)
        interp = np.einsum("nmv,mv->nv", w, np.nan_to_num(lr))
        ref = _model_ms(site, bw, rtt, loss, q, REFERENCE)  # (n, 2): TCP HTTP/1.1, HTTP/2
        col = {v: i for i, v in enumerate(self._columns)}
        out = np.empty((len(bw), len(space)))
        for j, (variants, h1) in enumerate(plan):
            log_ratio = sum(sign * interp[:, col[v]] for v, sign in variants)
            out[:, j] = np.exp(log_ratio) * ref[:, 0 if h1 else 1]
        return out

    def noise_theta(self, cells, website: str) -> np.ndarray:
        return self._model.noise_theta(cells, website)

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "dataset": str(self.dataset),
                "conditions": int(len(self.conds)), "points": int(len(self.table)),
                "median_reps": float(self.table["n"].median()),
                "variants": {v: {PACKET: p, WINDOW: w} for v, (p, w) in sorted(self.variants.items())},
                "measured_outside_the_space": self.outside,
                "method": f"IDW (k={self.k}, p={self.power}) of log(measured / model TCP HTTP/2) over (log bw, log RTT, "
                          "log loss), times the model's TCP time; TCP HTTP/1.1 takes HTTP/2's ratio; unmeasured QUIC "
                          "combinations add the measured effects in log time",
                "noise": "model", "strict": self.strict, "websites": sorted(self.websites)}

    # -- internals ----------------------------------------------------------------------------------
    def _plan(self, space: ConfigSpace) -> list[tuple[list[tuple[str, int]], bool]]:
        """Per configuration: the variants whose interpolated log ratios add up to its own (name, sign), and
        whether its reference time is the model's HTTP/1.1 (TCP over HTTP/1.1) rather than HTTP/2."""
        for name in space.grid:
            if name not in ANSWERED and any(v != space.registry[name].default for v in space.grid[name]):
                raise OracleError(f"{self.name} answers only {', '.join(ANSWERED)}; space {space.name!r} sets {name} "
                                  f"to {list(space.grid[name])}, which the QUIC dataset did not measure")
        by_knobs = {knobs: v for v, knobs in self.variants.items()}
        default = self.variants["default"]
        plan = []
        for c in space.configs:
            if not c["http.alt_svc"]:
                plan.append(([(TCP, 1)], c["http.version"] == "1.1"))
                continue
            knobs = (int(c[PACKET]), int(c[WINDOW]))
            if knobs in by_knobs:
                plan.append(([(by_knobs[knobs], 1)], False))
                continue
            alone = {"packet": (knobs[0], default[1]), "window": (default[0], knobs[1])}
            missing = [k for k, v in alone.items() if v not in by_knobs]
            if self.strict or missing:
                raise OracleError(f"{self.name}: QUIC configuration {PACKET}={knobs[0]}, {WINDOW}={knobs[1]} was not "
                                  f"measured" + (f", nor its {' and '.join(missing)} alone" if missing else
                                                 " (strict: no composition of measured effects)"))
            plan.append(([(by_knobs[alone["packet"]], 1), (by_knobs[alone["window"]], 1), ("default", -1)], False))
        return plan

    def _ratio_matrix(self, site) -> np.ndarray:
        """log(measured median / model TCP HTTP/2 time) per measured condition (rows) and variant (columns)."""
        t = self.table[self.table["size_bytes"] == site.total_bytes]
        bw, rtt, loss, q = self._cond_values()
        ref = _model_ms(site, bw, rtt, loss, q, REFERENCE)[:, 1]
        out = np.full((len(self.conds), len(self._columns)), np.nan)
        row = {c: i for i, c in enumerate(self.conds["condition"])}
        col = {v: i for i, v in enumerate(self._columns)}
        for r in t.itertuples():
            out[row[r.condition], col[r.variant]] = np.log(r.median / ref[row[r.condition]])
        return out

    # the measured oracle's conditions (bw, RTT, loss, buffer in BDPs) and IDW weights: they read only ``conds``,
    # ``k``, ``power``, ``buffer_unit`` and ``name``; the buffer is not a distance feature here (not cross-validated
    # on the QUIC dataset, whose conditions all sit behind one BDP)
    buffer_unit = float("inf")
    _cond_values = MeasuredOracle._cond_values
    _weights = MeasuredOracle._weights
    _dist2 = MeasuredOracle._dist2
