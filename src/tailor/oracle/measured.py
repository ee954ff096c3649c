"""MeasuredOracle: the PLT tensor measured by the testbed (``tailor testbed measure``), interpolated.

What it answers: single-object completion times (curl ``time_total``: TCP + TLS 1.3 handshakes, request,
transfer) for the object sizes in the dataset, on any condition cell, for any configuration of a space over
congestion control, initial window and HTTP version (plus knobs the model handles, see below).

Method ("model-shaped interpolation", docs/testbed.md section 4):

* The *mode* at a measured point is the median over repetitions.
* Between measured conditions the oracle interpolates the log of the ratio measured / model
  (``ModelOracle``'s mechanics evaluated at the same condition, buffer and configuration), by inverse-distance
  weighting over the ``neighbours`` nearest measured conditions in (log bandwidth, log RTT, log loss, log queue in
  buffer) space (the buffer since 2026-12-06: ``buffer_form`` "flight", the share of the workload's response the
  queue holds, capped at 1, or "queue", the queue in BDPs; one unit = x``buffer_unit``; ``buffer_unit=inf`` leaves
  it out),
  and multiplies it back onto the model at the query point. The model carries the shape (time scales with
  1/bandwidth and RTT); the measurements fix the level. At a measured condition the weight is exact, so the
  oracle returns the measured median there.
* Away from the measurements the configurations' *order* reverts to the model's (``reach``, since 2026-11-29): each
  measured condition's log ratios are split into their level (the mean over the condition's measured configurations)
  and each configuration's deviation from it; the level is interpolated as above, the deviation is interpolated and
  multiplied by ``exp(-d^2 / reach^2)``, d the query's distance to the nearest condition where that configuration
  was measured (in ``FEATURE_SCALE`` units: x4 bandwidth, x3 RTT, 0 -> 1% loss, and x3 buffer). A measured
  configuration contrast says most about conditions near it; far below the slowest measured link (the scenarios' 2G
  and EDGE clients) the nearest contrasts were extrapolated unchanged before, which ordered a held-out slower page
  condition worse than the model (docs/testbed.md section 8d). ``reach`` = ``REACH`` was chosen by
  leave-one-condition-out cross-validation (docs/testbed.md section 8e); ``reach=inf`` is the earlier interpolation.
  ``BUFFER_UNIT`` and ``BUFFER_FORM`` by the same CV with
  tb-edge-deep and tb-cellular-deep, EDGE / 3G / 4G behind the cellular buffer, which the default dataset reads with
  tb-v2 (``object_extra`` = ``OBJECT_EXTRA``; docs/testbed.md sections 4c, 8g and 8h).
* A configuration whose knob values were not measured (IW 16/64, ``rto_min`` 50, ``syn_rto``, ``sndbuf``,
  ``cwnd_clamp``) is
  anchored on the nearest measured configuration (same CC and HTTP version, nearest IW in log scale): it gets
  that anchor's measured ratio times the model's value for its own knobs. ``strict=True`` refuses such
  configurations with an OracleError instead. Knobs the model refuses (``tailor.oracle.model.REFUSED``:
  ``tcp.rcvbuf_bytes``, ``http.alt_svc``) were neither measured nor modelled: a space setting them is refused.
* Noise (``noise="measured"``, default): theta from the measured dispersion (coefficient of variation over
  repetitions, pooled by median over configurations per condition and size) through the Erlang(k) relation
  CV = sqrt(k) theta / (1 + k theta), interpolated between conditions with the same weights. Lossless emulated
  paths are nearly deterministic (theta at the 0.005 floor), far less noisy than the Internet; ``noise="model"``
  uses the model's theta instead.
* Pages: page-load times of catalog pages loaded by headless Chromium (``pages/`` in the *page dataset*;
  PLT = Navigation Timing loadEventEnd). With the default dataset the page dataset is the page campaign
  (``PAGE_DATASET``, tb-v3: 3 pages, 24 configurations, 12 conditions, adaptive repetitions on a quiet machine),
  not tb-v2's pages (3 repetitions on a loaded machine, split-half rho 0.20: no order in them), together with the
  page campaigns of ``PAGE_EXTRA`` (tb-v3-slow: one condition below tb-v3's range); any other
  dataset reads its own pages unless ``page_dataset`` says otherwise. Pages are treated exactly like objects: one more workload with its own
  ratio matrix over its measured conditions and configurations. With ``pages="catalog"`` (default) the other
  catalog pages are answered too: a page that was not measured borrows the measured/model ratio of the nearest
  measured page (log object count, log bytes) and gets the model's value for its own structure. ``pages="measured"``
  offers only the measured pages. A configuration whose CC was not measured for a workload (reno for pages)
  borrows the ratio of the same IW / HTTP version with the nearest measured CC (cubic first); ``strict`` refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from tailor import paths
from tailor.errors import OracleError
from tailor.oracle.base import NOISE_SHAPE, ConditionGrid, Oracle, Website
from tailor.oracle.model import DEFAULT_GRID, ModelOracle, check_modelled
from tailor.oracle.websites import OBJECT_SIZES, default_catalog
from tailor.space import ConfigSpace

_DATA = paths.DATA_DIR / "oracle"
DEFAULT_DATASET = _DATA / "tb-v2" if (_DATA / "tb-v2" / "measurements.parquet").exists() else _DATA / "tb-v1"
PAGES_SUBDIR = "pages"
# The page campaign made to settle the page oracles (tailor testbed campaign): what their page validation reads
PAGE_DATASET = _DATA / "tb-v3"
# The object campaign (same conditions and configurations, responses of 10 KB / 100 KB / 1 MB): what the oracles'
# object validation reads (the measured oracle still interpolates tb-v2's 41 conditions)
OBJECT_DATASET = _DATA / "tb-v3-objects"
# Page campaigns read with PAGE_DATASET by the default measured oracle: conditions it did not measure
PAGE_EXTRA = (_DATA / "tb-v3-slow",)
# Object campaigns read with the default dataset (tb-v2): conditions it did not measure (tb-edge-deep: EDGE, 3G and 4G
# behind the cellular buffer, docs/testbed.md section 4c; tb-cellular-deep: four more of tb-v2's cellular rows behind it,
# section 8g, read since section 8h)
OBJECT_EXTRA = (_DATA / "tb-edge-deep", _DATA / "tb-cellular-deep")
# How far (FEATURE_SCALE units) a measured configuration contrast carries: the configuration-specific part of the
# log ratio decays as exp(-d^2 / REACH^2). Chosen by leave-one-condition-out cross-validation over tb-v3's pages,
# tb-v3-objects and tb-v2's objects (lowest mean RMS error of the configurations' log contrasts over the grid inf, 2,
# 1, 0.7, 0.5, 0.35, 0.25, 0; docs/testbed.md section 8e)
REACH = 1.0
# The buffer as a fourth distance feature: one unit = a factor BUFFER_UNIT in the buffer (inf: the buffer is ignored,
# the interpolation before 2026-12-06). tb-v2 measured its fixed-rate conditions behind one BDP and the cellular
# families sit behind 5.26, where a one-BDP burst loss does not happen (docs/testbed.md section 4c). How the buffer
# enters (BUFFER_FORM): "queue", the queue in BDPs (2026-12-06, section 8g), or "flight" (since section 8h), the share
# of the workload's response the queue holds in packets, capped at 1: a queue that holds the whole response cannot
# drop any of it, so beyond that its size does not matter, and two conditions whose queues both hold it are at
# buffer distance 0. Both chosen by the same leave-one-condition-out cross-validation (bench/measured_reach.py
# --buffer-unit --buffer-form, docs/testbed.md sections 8g and 8h)
BUFFER_UNIT = 3.0
BUFFER_FORMS = ("queue", "flight")
BUFFER_FORM = "flight"
FLIGHT_TIE = 1e-6  # weight of the queue-in-BDPs term beside the "flight" form's: breaks ties only
KEYS = ["cc", "iw", "rto_min_ms", "http"]
FEATURE_SCALE = np.array([np.log(4.0), np.log(3.0), np.log(11.0)])  # one unit = x4 bw, x3 RTT, 0 -> 1 % loss
THETA_BOUNDS = (0.005, 0.25)
PAGE_MODES = ("catalog", "measured", "none")
CC_FALLBACK = ("cubic", "bbr", "reno")
MTU, MSS = 1500, 1448


def load_fetches(dataset: str | Path, pages: bool = False) -> pd.DataFrame | None:
    """The valid fetches (ok, finite time) of ``dataset``: its single objects, or with ``pages=True`` its Chromium page
    loads (``<dataset>/pages``); None when the file does not exist."""
    path = Path(dataset) / (f"{PAGES_SUBDIR}/measurements.parquet" if pages else "measurements.parquet")
    if not path.exists():
        return None
    df = pd.read_parquet(path)
    df = df[df["ok"].astype(bool) & np.isfinite(df["completion_ms"])]
    if not pages and "page" in df.columns:
        df = df[df["page"].fillna("") == ""]
    return df


def load_medians(dataset: str | Path = DEFAULT_DATASET, pages: bool = False) -> pd.DataFrame:
    """Median, count and coefficient of variation per (condition, workload, configuration) of valid fetches.

    ``pages=True`` reads the Chromium page loads (``<dataset>/pages``; empty frame if there are none)."""
    cond = ["condition", "down_mbps", "rtt_ms", "loss", "queue_packets", "size_bytes"] + (["page"] if pages else [])
    df = load_fetches(dataset, pages)
    if df is None:
        if pages:
            return pd.DataFrame()
        if (Path(dataset) / PAGES_SUBDIR / "measurements.parquet").exists():  # a page campaign only (tb-v3)
            return pd.DataFrame(columns=cond + KEYS + ["median", "n", "mean", "sd", "cv"])
        raise OracleError(f"no measured dataset at {Path(dataset) / 'measurements.parquet'}; run `tailor testbed "
                          "measure` (docs/testbed.md)")
    g = df.groupby(cond + KEYS)["completion_ms"]
    out = g.agg(median="median", n="count", mean="mean", sd="std").reset_index()
    out["cv"] = (out["sd"] / out["mean"]).fillna(0.0)
    return out


class MeasuredOracle(Oracle):
    """Measured completion / page-load times, interpolated across conditions with the model's shape."""

    kind = "measured"
    supports_pages = True  # tb-v2 has Chromium page loads; tb-v1 has none (then ``websites`` holds objects only)

    def __init__(self, dataset: str | Path = DEFAULT_DATASET, strict: bool = False, neighbours: int = 4,
                 power: float = 2.0, shape: str = "model", grid: ConditionGrid = DEFAULT_GRID, noise: str = "measured",
                 pages: str = "catalog", page_dataset: str | Path | None = None,
                 page_extra: tuple | None = None, reach: float = REACH, buffer_unit: float = BUFFER_UNIT,
                 object_extra: tuple | None = None, buffer_form: str = BUFFER_FORM):
        if buffer_form not in BUFFER_FORMS:
            raise OracleError(f"The 'buffer_form' parameter of MeasuredOracle must be one of {BUFFER_FORMS}. "
                              f"Got {buffer_form!r}.")
        if shape not in ("model", "none") or noise not in ("measured", "model") or pages not in PAGE_MODES:
            raise OracleError(f"The 'shape'/'noise'/'pages' parameters of MeasuredOracle must be 'model'|'none', "
                              f"'measured'|'model' and one of {PAGE_MODES}. Got {shape!r}, {noise!r}, {pages!r}.")
        if not reach > 0:  # also refuses NaN; inf is the interpolation without reversion
            raise OracleError(f"The 'reach' parameter of MeasuredOracle must be > 0 (inf: no reversion). Got {reach!r}.")
        if not buffer_unit > 1:
            raise OracleError(f"The 'buffer_unit' parameter of MeasuredOracle must be > 1 (a factor of the queue in "
                              f"BDPs; inf: the buffer is not a distance feature). Got {buffer_unit!r}.")
        self.reach, self.buffer_unit, self.buffer_form = float(reach), float(buffer_unit), buffer_form
        self.noise, self.pages_mode = noise, pages
        self.dataset, self.strict, self.k, self.power, self.shape = Path(dataset), strict, neighbours, power, shape
        self.page_dataset = _page_dataset(self.dataset) if page_dataset is None else Path(page_dataset)
        if page_extra is None:  # the default page campaign comes with the campaigns that extend its conditions
            page_extra = PAGE_EXTRA if self.page_dataset.resolve() == PAGE_DATASET.resolve() else ()
        self.page_extra = tuple(Path(d) for d in page_extra
                                if (Path(d) / PAGES_SUBDIR / "measurements.parquet").exists()) if pages != "none" else ()
        if object_extra is None:  # the default dataset comes with the object campaigns that extend its conditions
            object_extra = OBJECT_EXTRA if self.dataset.resolve() == DEFAULT_DATASET.resolve() else ()
        self.object_extra = tuple(Path(d) for d in object_extra if (Path(d) / "measurements.parquet").exists())
        self.name = f"measured-{self.dataset.name}" + "".join(
            f"+{d.name}" for d in (*self.object_extra, self.page_dataset, *self.page_extra) if d != self.dataset)
        self.grid = grid
        self._model = ModelOracle(grid)
        catalog = default_catalog()
        self.table = pd.concat([load_medians(d) for d in (self.dataset, *self.object_extra)], ignore_index=True)
        names = set(self.table["condition"])
        if self.object_extra and len(self.table.drop_duplicates(["condition", "down_mbps", "rtt_ms", "loss",
                                                                 "queue_packets"])) != len(names):
            raise OracleError(f"{self.name}: a condition name of {[str(d) for d in self.object_extra]} is measured "
                              f"with other parameters in another dataset")
        self.table["workload"] = self.table["size_bytes"].map(_object_name)
        self.table = self.table[self.table["workload"].notna()].reset_index(drop=True)
        page_tables = [load_medians(d, pages=True) for d in (self.page_dataset, *self.page_extra)] \
            if pages != "none" else []
        page_tables = [t for t in page_tables if not t.empty]
        self.page_table = pd.concat(page_tables, ignore_index=True) if page_tables else pd.DataFrame()
        measured_pages = {}
        if not self.page_table.empty:
            self.page_table["workload"] = self.page_table["page"]
            manifest = {}
            for d in (*self.page_extra[::-1], self.page_dataset):  # the main campaign's pages.json last: it wins
                manifest.update(_page_manifest(d))
            measured_pages = {n: manifest.get(n) or catalog[n] for n in sorted(set(self.page_table["page"]))}
        both = pd.concat([t for t in (self.table, self.page_table) if not t.empty] or [self.table], ignore_index=True)
        self.conds = both.drop_duplicates("condition")[["condition", "down_mbps", "rtt_ms", "loss",
                                                        "queue_packets"]].reset_index(drop=True)
        self.anchors = both[KEYS].drop_duplicates().sort_values(KEYS).reset_index(drop=True)
        # workloads = what was measured, by website name (objects from the catalog, pages as really served)
        self.workloads = {n: catalog[n] for n in sorted(set(self.table["workload"]))}
        self.workloads.update(measured_pages)
        self._site_by_size = {catalog[n].total_bytes: catalog[n] for n in set(self.table["workload"])}
        self._borrow = {n: n for n in self.workloads}  # website -> the measured workload whose ratios it uses
        if pages == "catalog" and measured_pages:
            for n, site in catalog.items():
                if site.kind == "page" and n not in measured_pages:
                    self._borrow[n] = _nearest_page(site, measured_pages)
        self.websites = {n: (self.workloads[n] if n in self.workloads else catalog[n]) for n in self._borrow}
        self._log_ratio = {w: self._ratio_matrix(w) for w in self.workloads}
        self._measured_anchor = {w: np.isfinite(lr).any(axis=0) for w, lr in self._log_ratio.items()}
        self._level = {w: _row_mean(lr) for w, lr in self._log_ratio.items()}
        self._theta = {w: self._theta_vector(w) for w in self.workloads}

    # -- Oracle interface ---------------------------------------------------------------------------
    def mode_ms(self, cells, website: str, space: ConfigSpace) -> np.ndarray:
        bw, rtt, loss, q = self.grid.values(np.asarray(cells, dtype=int).ravel())
        return self.mode_at(bw, rtt, loss, q, website, space)

    def noise_theta(self, cells, website: str) -> np.ndarray:
        if self.noise == "model":  # the testbed is near-deterministic without loss; the model's theta is the world's
            return self._model.noise_theta(cells, website)
        self.website(website)
        w_name = self._borrow[website]
        bw, rtt, loss, q = self.grid.values(np.asarray(cells, dtype=int).ravel())
        d2 = self._dist2(np.c_[bw, rtt, loss, q], self._flight(w_name))
        w = self._weights(d2, np.isfinite(self._theta[w_name])[:, None])[:, :, 0]
        return np.clip(w @ np.nan_to_num(self._theta[w_name]), *THETA_BOUNDS)

    def describe(self) -> dict:
        borrowed = {n: w for n, w in self._borrow.items() if n != w}
        pt = self.page_table
        return {"name": self.name, "kind": self.kind, "dataset": str(self.dataset), "page_dataset": str(self.page_dataset),
                "conditions": int(len(self.conds)), "sizes": sorted(int(s) for s in self._site_by_size),
                "measured_configs": [f"{a.cc} iw{a.iw} rto{a.rto_min_ms} h{a.http}" for a in self.anchors.itertuples()],
                "points": int(len(self.table)), "median_reps": float(self.table["n"].median()),
                "pages_measured": sorted(set(pt["page"])) if not pt.empty else [],
                "page_points": int(len(pt)), "page_conditions": int(pt["condition"].nunique()) if not pt.empty else 0,
                "page_extra": [str(d) for d in self.page_extra], "object_extra": [str(d) for d in self.object_extra],
                "reach": self.reach, "buffer_unit": self.buffer_unit, "buffer_form": self.buffer_form,
                "pages_borrowed": borrowed,
                "method": f"IDW (k={self.k}, p={self.power}) of log(measured/model) over (log bw, log RTT, log loss, "
                          f"log {'queue in BDPs' if self.buffer_form == 'queue' else 'share of the response the queue holds'} "
                          f"with unit x{self.buffer_unit:g}); "
                          f"shape={self.shape}; configuration contrasts revert to the model's beyond reach={self.reach:g}; "
                          f"unmeasured knob values anchored on the nearest measured config; "
                          f"unmeasured pages borrow the nearest measured page's ratio (pages={self.pages_mode})",
                "noise": self.noise, "strict": self.strict, "websites": sorted(self.websites)}

    # -- queries at raw condition values ------------------------------------------------------------
    def mode_at(self, bw, rtt, loss, q, website: str, space: ConfigSpace, exclude: str | None = None) -> np.ndarray:
        """Mode for conditions given by value (not cell); ``exclude`` drops one measured condition (LOCO)."""
        site = self.website(website)
        w_name = self._borrow[website]
        bw, rtt, loss, q = (np.asarray(a, dtype=float).ravel() for a in (bw, rtt, loss, q))
        anchor_idx = self._anchor_of(space, workload=w_name)
        lr = self._log_ratio[w_name][:, anchor_idx]  # (m, K)
        avail = np.isfinite(lr)
        if exclude is not None:
            avail[(self.conds["condition"] == exclude).to_numpy()] = False
        query = np.c_[bw, rtt, loss, q]
        dist2 = self._dist2(query, self._flight(w_name))  # (n, m)
        w = self._weights(dist2, avail)  # (n, m, K)
        level = self._level[w_name]  # (m,): each condition's mean log ratio over its measured configurations
        dev = np.nan_to_num(lr - level[:, None])
        d2 = np.where(avail[None, :, :], dist2[:, :, None], np.inf).min(axis=1)  # (n, K), finite
        interp = (np.einsum("nmk,m->nk", w, np.nan_to_num(level))
                  + np.exp(-d2 / self.reach ** 2) * np.einsum("nmk,mk->nk", w, dev))  # reach = inf: the plain IDW
        return np.exp(interp) * self._shape(bw, rtt, loss, q, site, space)

    def covers(self, space: ConfigSpace, websites) -> tuple[bool, str]:
        """Whether every configuration of ``space`` and every website is measured (no anchoring, no borrowing)."""
        missing_sites = sorted(set(websites) - set(self.workloads))
        try:
            for w in {self._borrow.get(n, n) for n in websites} & set(self.workloads) or {None}:
                MeasuredOracle._anchor_of(self, space, strict=True, workload=w)
        except OracleError as err:
            return False, str(err)
        return (not missing_sites, f"websites not measured: {missing_sites[:6]}..." if missing_sites else "covered")

    # -- internals ----------------------------------------------------------------------------------
    def _shape(self, bw, rtt, loss, q, site: Website, space: ConfigSpace) -> np.ndarray:
        if self.shape == "none":
            return np.ones((len(bw), len(space)))
        return _model_ms(site, bw, rtt, loss, q, space)

    def _anchor_of(self, space: ConfigSpace, strict: bool | None = None, workload: str | None = None) -> np.ndarray:
        """Per configuration of ``space``, the index of the measured configuration whose ratios it uses.

        Same CC and HTTP version, nearest IW (log) and rto_min; if this workload has no measurement with that CC,
        the nearest measured CC in the order cubic, bbr, reno (``strict`` refuses both kinds of anchoring)."""
        strict = self.strict if strict is None else strict
        check_modelled(space, self.name)
        measured = self._measured_anchor.get(workload) if workload is not None else None
        a = self.anchors if measured is None else self.anchors[measured]
        idx = []
        for c in space.configs:
            cc, http = c["tcp.congestion_control"], c["http.version"]
            cand = a[(a.cc == cc) & (a.http == http)]
            borrowed_cc = False
            if cand.empty:
                other = [x for x in CC_FALLBACK if x != cc and ((a.cc == x) & (a.http == http)).any()]
                if not other:
                    raise OracleError(f"{self.name}: no measurement with cc={cc} http={http} "
                                      f"(configuration {c.label()}, workload {workload})")
                cand, borrowed_cc = a[(a.cc == other[0]) & (a.http == http)], True
            dist = (np.abs(np.log(cand.iw / c["tcp.initial_cwnd"]))
                    + np.abs(np.log(cand.rto_min_ms / c["tcp.rto_min_ms"])))
            best = dist.idxmin()
            if strict and (borrowed_cc or dist[best] > 0 or _unmeasured_changes(c)):
                raise OracleError(f"{self.name} (strict): configuration {c.label()} {_unmeasured_changes(c) or ''} "
                                  f"is not measured for {workload or 'every workload'}; measured IW "
                                  f"{sorted(set(a.iw))}, CC {sorted(set(a.cc))}, rto_min {sorted(set(a.rto_min_ms))}")
            idx.append(best)
        return np.array(idx, dtype=int)

    def _wtable(self, workload: str) -> pd.DataFrame:
        t = self.page_table if self.workloads[workload].kind == "page" else self.table
        return t[t.workload == workload]

    def _ratio_matrix(self, workload: str) -> np.ndarray:
        """log(measured median / shape) per (measured condition, anchor config); NaN where not measured."""
        t = self._wtable(workload)
        out = np.full((len(self.conds), len(self.anchors)), np.nan)
        aidx = {tuple(r): i for i, r in enumerate(self.anchors[KEYS].itertuples(index=False))}
        space = _anchor_space(self.anchors)
        cidx = {c: i for i, c in enumerate(self.conds.condition)}
        shape = self._shape(*self._cond_values(), self.workloads[workload], space)  # (m, len(space))
        col = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): j
               for j, c in enumerate(space.configs)}
        for r in t.itertuples():
            key = (r.cc, r.iw, r.rto_min_ms, r.http)
            out[cidx[r.condition], aidx[key]] = np.log(r.median / shape[cidx[r.condition], col[key]])
        return out

    def _theta_vector(self, workload: str) -> np.ndarray:
        t = self._wtable(workload)
        t = t[t.n >= 2]
        cv = t.groupby("condition")["cv"].median()
        cv = np.array([cv.get(c, np.nan) for c in self.conds.condition])
        k = NOISE_SHAPE
        theta = cv / np.maximum(np.sqrt(k) - k * cv, 1e-3)
        return np.where(np.isfinite(theta), np.clip(theta, *THETA_BOUNDS), np.nan)

    def _cond_values(self):
        c = self.conds
        q = queue_bdp(c.down_mbps.to_numpy(float), c.rtt_ms.to_numpy(float), c.queue_packets.to_numpy(float))
        return c.down_mbps.to_numpy(float), c.rtt_ms.to_numpy(float), c.loss.to_numpy(float), q

    def _flight(self, workload: str) -> float | None:
        """The workload's response in packets (MSS each) where ``buffer_form`` is "flight", else None."""
        if self.buffer_form != "flight":
            return None
        return max(self.workloads[workload].total_bytes / MSS, 1.0)

    def _dist2(self, query: np.ndarray, flight: float | None = None) -> np.ndarray:
        """Squared distances (n, m) of the queries (bw, RTT, loss, queue in BDPs) to the measured conditions, in
        FEATURE_SCALE units and, unless ``buffer_unit`` is inf, factors ``buffer_unit`` of the buffer: the queue in
        BDPs, or with ``flight`` (packets) the share of it the queue holds, capped at 1 (``buffer_form`` "flight")."""
        bw, rtt, loss, q = self._cond_values()
        diff = _features(query[:, :3])[:, None, :] - _features(np.c_[bw, rtt, loss])[None, :, :]
        d2 = ((diff / FEATURE_SCALE) ** 2).sum(-1)
        if np.isfinite(self.buffer_unit):
            dq = np.log(np.maximum(query[:, 3], 1e-6))[:, None] - np.log(np.maximum(q, 1e-6))[None, :]
            if flight is not None:  # the queue in packets over the response's packets, at most 1
                bq = np.minimum(query[:, 3] * bdp_packets(query[:, 0], query[:, 1]) / flight, 1.0)
                bm = np.minimum(self.conds["queue_packets"].to_numpy(float) / flight, 1.0)
                # the queues' own distance as a tie-break only: where both hold the response the nearer queue still
                # weighs more, and a measured condition stays exact beside one that differs in its queue alone
                d2 = d2 + FLIGHT_TIE * (dq / np.log(self.buffer_unit)) ** 2
                dq = np.log(np.maximum(bq, 1e-6))[:, None] - np.log(np.maximum(bm, 1e-6))[None, :]
            d2 = d2 + (dq / np.log(self.buffer_unit)) ** 2
        return d2

    def _weights(self, dist2: np.ndarray, avail: np.ndarray) -> np.ndarray:
        """IDW weights (n, m, K) from the queries' squared distances (n, m, ``_dist2``) over the k nearest available
        measured conditions, exact at a measured one."""
        d2 = np.where(avail[None, :, :], dist2[:, :, None], np.inf)  # (n, m, K)
        if not np.isfinite(d2).any(axis=1).all():
            raise OracleError(f"{self.name}: a configuration has no measurement at any condition for this workload")
        kth = np.sort(d2, axis=1)[:, min(self.k, d2.shape[1]) - 1: min(self.k, d2.shape[1]), :]
        w = np.where(d2 <= kth, 1.0 / np.maximum(d2, 1e-12) ** (self.power / 2), 0.0)
        exact = d2 < 1e-12
        w = np.where(exact.any(axis=1, keepdims=True), exact.astype(float), w)
        return w / w.sum(axis=1, keepdims=True)


def bdp_packets(down_mbps, rtt_ms) -> np.ndarray:
    """The bandwidth-delay product in packets of MTU bytes."""
    return np.asarray(down_mbps, float) * 1e6 / 8 * np.asarray(rtt_ms, float) / 1000 / MTU


def queue_bdp(down_mbps, rtt_ms, queue_packets) -> np.ndarray:
    """The emulator's queue (packets) in bandwidth-delay products: the buffer unit of the model oracle's ``q``."""
    return np.asarray(queue_packets, float) / np.maximum(bdp_packets(down_mbps, rtt_ms), 1e-9)


def _page_dataset(dataset: Path) -> Path:
    """Where the pages of ``dataset`` come from: the page campaign for the default dataset (when it exists), else
    ``dataset`` itself."""
    if (dataset.resolve() == DEFAULT_DATASET.resolve()
            and (PAGE_DATASET / PAGES_SUBDIR / "measurements.parquet").exists()):
        return PAGE_DATASET
    return dataset


def _object_name(size: int) -> str | None:
    return {s: n for n, s in OBJECT_SIZES.items()}.get(int(size))


def _page_manifest(dataset: Path) -> dict[str, Website]:
    """The pages as really served (``pages/pages.json`` written by the harness), as Websites."""
    path = dataset / PAGES_SUBDIR / "pages.json"
    if not path.exists():
        return {}
    from tailor.oracle.websites import make_page

    rows = json.loads(path.read_text())
    return {n: make_page(n, [(r["size_bytes"], r["origin"], r["level"], r["kind"]) for r in rs])
            for n, rs in rows.items()}


def _nearest_page(site: Website, measured: dict[str, Website]) -> str:
    """The measured page closest in (log object count, log bytes): its measured/model ratios stand in."""
    def dist(m: Website) -> float:
        return (np.log(len(m.objects) / len(site.objects)) ** 2 + np.log(m.total_bytes / site.total_bytes) ** 2)
    return min(sorted(measured), key=lambda n: dist(measured[n]))


def _row_mean(a: np.ndarray) -> np.ndarray:
    """Mean of each row's finite entries; NaN for a row without any."""
    ok = np.isfinite(a)
    n = ok.sum(axis=1)
    return np.where(n > 0, np.where(ok, a, 0.0).sum(axis=1) / np.maximum(n, 1), np.nan)


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


def _model_ms(site: Website, bw, rtt, loss, q, space: ConfigSpace, pages: str = "levels",
              tails: str = "sack") -> np.ndarray:
    from functools import partial

    from tailor.oracle import model, timeline

    load_ms = partial(timeline.load_ms, tails=tails) if pages == "timeline" else partial(model.load_ms, tails=tails)
    stack, h2 = model._stack(space)
    col = lambda a: np.asarray(a, dtype=float)[:, None]  # noqa: E731
    out = np.empty((len(bw), len(space)))
    for is_h2 in (False, True):
        cols = h2 == is_h2
        if cols.any():
            out[:, cols] = load_ms(site, col(bw), col(rtt), col(loss), col(q), stack.take(cols), is_h2)
    return out
