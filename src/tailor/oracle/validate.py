"""``tailor oracle validate``: how well an oracle orders the configurations a testbed dataset measured.

For every measured cell (condition x workload: one object size or one page) with at least ``MIN_CONFIGS``
measured configurations, the oracle predicts the completion time of each of them at that cell's exact
condition (bandwidth, RTT, loss, queue), and the prediction is compared with the measured medians:

* ``rho``: Spearman's rank correlation of predicted and measured times over the cell's configurations;
* ``agree``: whether the oracle's fastest configuration is the measured fastest;
* ``cost``: measured time of the oracle's choice over the measured best, minus 1 (what trusting the oracle
  costs in that cell);
* ``log_error``: median over configurations of |ln(predicted / measured)| (the level, not only the order);
* ``split_half``: Spearman's rho between the medians of the cell's odd and even repetitions (in measurement order)
  over its configurations: how reproducible the measured order itself is, the ceiling an oracle's rho can be
  judged against (a cell whose halves disagree cannot be ordered by anything);
* ``split_half_cost``: the configuration fastest in one half, measured in the other half, over that half's fastest
  (mean of both directions): the cost a second measurement of the cell would pay, the floor the noise puts under an
  oracle's cost (halves hold half the repetitions, so it overstates the full medians' noise by about sqrt 2); the
  summary also gives rho and cost on the *reproducible* cells alone (split-half rho >= ``REPRODUCIBLE_RHO``), where
  the measured order is known well enough to test an oracle's;
* ``contrasts``: per knob, the ratio of the times of two of its values with every other knob held equal
  (:data:`CONTRASTS`; the geometric mean over the cell's matched pairs), measured and predicted: *which*
  mechanism an oracle gets wrong where its order is wrong (e.g. HTTP/1.1 against HTTP/2 at a long RTT);
* ``in_interval``: where the dataset stores the 95% interval of each median (``pages/intervals.parquet``, written
  by ``tailor testbed campaign``), whether the oracle's choice is indistinguishable from the measured best (its
  interval's lower bound at or below the best's upper bound): the cost a dataset of that precision can resolve.

Oracles:

* ``model``: :class:`~tailor.oracle.model.ModelOracle`'s mechanics evaluated at the cell's condition. Nothing
  of it is fitted to the dataset's times, so its in-sample figures are out-of-sample.
* ``measured``: :class:`~tailor.oracle.measured.MeasuredOracle` with the cell's own condition left out of the
  interpolation (leave-one-condition-out): at a measured condition it would return the measurement itself.

QUIC cells (``<dataset>/quic``: QUIC transport parameters over HTTP/3) are counted, and reported as not
covered: neither oracle answers QUIC transport parameters (``tailor knobs`` marks them refused).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from tailor.errors import OracleError
from tailor.oracle.model import VARIANTS
from tailor.oracle.measured import (DEFAULT_DATASET, KEYS, OBJECT_DATASET, PAGE_DATASET, PAGES_SUBDIR, MeasuredOracle, _anchor_space,
                                    _model_ms, _object_name, load_fetches, queue_bdp)

ORACLES = ("model", "measured")  # what `tailor oracle validate` and `tailor evaluate` report by default
NAMES = ORACLES + ("model-timeline",)  # the model with the page timeline (tailor.oracle.timeline), on request
REQUESTED = NAMES + ("model-v6", "model-tailprobe")  # validated when asked for only: not an oracle ``auto`` chooses among
KINDS = ("objects", "pages", "quic")
MIN_CONFIGS = 3  # a rank correlation over fewer configurations says nothing
# Knob contrasts (label, field of the measured keys, value, reference value): time(value) / time(reference) with
# the other knobs equal. A measured ratio within RESOLVED of 1 is not counted in the direction agreement.
CONTRASTS = (("HTTP/1.1 vs 2", "http", "1.1", "2"), ("BBR vs CUBIC", "cc", "bbr", "cubic"),
             ("Reno vs CUBIC", "cc", "reno", "cubic"), ("IW 4 vs 10", "iw", 4, 10), ("IW 32 vs 10", "iw", 32, 10),
             ("IW 64 vs 32", "iw", 64, 32), ("RTO min 50 vs 200 ms", "rto_min_ms", 50, 200))
RESOLVED = 0.03
# A cell whose own odd and even repetitions order its configurations with a Spearman rho below this is not
# reproducible enough to test an oracle's order against: the oracle's rho target (TARGETS["pages"]).
REPRODUCIBLE_RHO = 0.8


def _config_index(space, rows: pd.DataFrame) -> np.ndarray:
    """Index in ``space.configs`` of each measured row's configuration (cc, iw, rto_min, http)."""
    where = {(c["tcp.congestion_control"], int(c["tcp.initial_cwnd"]), int(c["tcp.rto_min_ms"]),
              str(c["http.version"])): i for i, c in enumerate(space.configs)}
    return np.array([where[(r.cc, int(r.iw), int(r.rto_min_ms), str(r.http))] for r in rows.itertuples()])


def cell_scores(measured: np.ndarray, predicted: np.ndarray) -> dict:
    """The four figures of one cell from measured and predicted times of the same configurations."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    if measured.shape != predicted.shape or measured.size < 2:
        raise OracleError(f"cell_scores needs two equal-length vectors of >= 2 times, got {measured.shape} "
                          f"and {predicted.shape}")
    if not (np.isfinite(measured).all() and np.isfinite(predicted).all() and (measured > 0).all()
            and (predicted > 0).all()):
        raise OracleError("cell_scores needs finite positive times")
    rho = spearmanr(predicted, measured).statistic if np.ptp(predicted) > 0 and np.ptp(measured) > 0 else math.nan
    choice = int(np.argmin(predicted))
    return {"rho": float(rho), "agree": bool(measured[choice] == measured.min()),
            "cost": float(measured[choice] / measured.min() - 1.0),
            "log_error": float(np.median(np.abs(np.log(predicted / measured))))}


def cell_contrasts(keys: list[tuple], measured, predicted) -> dict:
    """{label: {"measured": ratio, "oracle": ratio, "pairs": n}} for every contrast of :data:`CONTRASTS` with at
    least one matched pair among the cell's configurations; ``keys`` are (cc, iw, rto_min_ms, http) per
    configuration (the measured keys, :data:`KEYS`), in the order of ``measured`` and ``predicted``."""
    index = {k: i for i, k in enumerate(keys)}
    lm, lp = np.log(np.asarray(measured, float)), np.log(np.asarray(predicted, float))
    out = {}
    for label, field, value, ref in CONTRASTS:
        j = KEYS.index(field)
        partners = ((i, index.get(k[:j] + (ref,) + k[j + 1:])) for i, k in enumerate(keys) if k[j] == value)
        pairs = [(i, p) for i, p in partners if p is not None]
        if pairs:
            a, b = np.array(pairs).T
            out[label] = {"measured": float(np.exp(np.mean(lm[a] - lm[b]))),
                          "oracle": float(np.exp(np.mean(lp[a] - lp[b]))), "pairs": len(pairs)}
    return out


def contrast_summary(rows: list[dict]) -> dict:
    """Per contrast over the cells that have it: cells, median measured and predicted ratio, the share of cells
    whose measured ratio is resolved (beyond ``RESOLVED`` of 1) where the oracle has the same direction, the median
    |ln(predicted ratio / measured ratio)|, and the cell where that error is largest."""
    out = {}
    for label, *_ in CONTRASTS:
        have = [(r["condition"], r["workload"], r["contrasts"][label]) for r in rows if label in r.get("contrasts", {})]
        if not have:
            continue
        m = np.array([c["measured"] for _, _, c in have])
        o = np.array([c["oracle"] for _, _, c in have])
        err = np.abs(np.log(o / m))
        resolved = np.abs(np.log(m)) > RESOLVED
        worst = int(np.argmax(err))
        out[label] = {"cells": len(have), "measured_median": float(np.median(m)), "oracle_median": float(np.median(o)),
                      "direction_agrees": float(np.mean(np.sign(np.log(o[resolved])) == np.sign(np.log(m[resolved]))))
                      if resolved.any() else None, "resolved": int(resolved.sum()),
                      "log_error_median": float(np.median(err)),
                      "worst": {"condition": have[worst][0], "workload": have[worst][1],
                                "measured": float(m[worst]), "oracle": float(o[worst])}}
    return out


def _cells(oracle: MeasuredOracle, kind: str) -> pd.DataFrame:
    return oracle.table if kind == "objects" else oracle.page_table


def _intervals(dataset: Path, kind: str) -> dict:
    """{(condition, workload, cc, iw, rto_min_ms, http): (lo, hi)} of the campaign's stored intervals, else {}: a page
    campaign's (``pages/intervals.parquet``) or an object campaign's (``intervals.parquet``, whose workload is the
    size in bytes, named here as the catalog's object of that size)."""
    path = dataset / PAGES_SUBDIR / "intervals.parquet" if kind == "pages" else dataset / "intervals.parquet"
    if kind not in ("pages", "objects") or not path.exists():
        return {}
    iv = pd.read_parquet(path)
    iv = iv[iv["batch"].fillna("") == ""] if "batch" in iv.columns else iv
    if kind == "objects":
        iv = iv.assign(workload=[_object_name(int(w)) if str(w).isdigit() else None for w in iv["workload"]])
        iv = iv[iv["workload"].notna()]
    return {(r.condition, r.workload, r.cc, int(r.iw), int(r.rto_min_ms), str(r.http)): (r.lo_ms, r.hi_ms)
            for r in iv.itertuples()}


def _half_medians(dataset: Path, kind: str) -> dict:
    """{(condition, size_bytes, page): (odd medians, even medians)}: per cell with >= MIN_CONFIGS configurations
    measured at least twice, the median of each configuration's odd and of its even repetitions (in measurement
    order; ``page`` is "" for objects)."""
    df = load_fetches(dataset, pages=kind == "pages")
    if df is None:
        return {}
    df = df.assign(page=df["page"].fillna("") if "page" in df.columns else "")
    order = "started_unix" if "started_unix" in df.columns else "rep"
    out = {}
    for key, cell in df.sort_values(order).groupby(["condition", "size_bytes", "page"], sort=False):
        halves = []
        for _, runs in cell.groupby(KEYS, sort=False):
            t = runs["completion_ms"].to_numpy()
            if len(t) >= 2:
                halves.append((np.median(t[0::2]), np.median(t[1::2])))
        if len(halves) >= MIN_CONFIGS:
            a, b = np.array(halves).T
            out[(key[0], int(key[1]), key[2])] = (a, b)
    return out


def _half_rho(a: np.ndarray, b: np.ndarray) -> float:
    return float(spearmanr(a, b).statistic) if np.ptp(a) > 0 and np.ptp(b) > 0 else math.nan


def _half_cost(a: np.ndarray, b: np.ndarray) -> float:
    """The configuration fastest in one half, measured in the other, over that half's fastest, minus 1; the mean
    of both directions."""
    def cost(by, on):
        return float(on[int(np.argmin(by))] / on.min() - 1.0)
    return (cost(a, b) + cost(b, a)) / 2


def split_halves(dataset: Path, kind: str) -> dict:
    """{(condition, size_bytes, page): split-half rho} from the raw repetitions of every cell with >= MIN_CONFIGS
    configurations measured at least twice (``page`` is "" for objects)."""
    return {key: _half_rho(a, b) for key, (a, b) in _half_medians(dataset, kind).items()}


def split_half_costs(dataset: Path, kind: str) -> dict:
    """{(condition, size_bytes, page): split-half cost}: what choosing a cell's configuration by one half of its
    repetitions costs in the other half. The floor the dataset's noise puts under any oracle's cost (an oracle
    beats it only by luck): a second measurement of the same cell does no better."""
    return {key: _half_cost(a, b) for key, (a, b) in _half_medians(dataset, kind).items()}


def predict_cell(name: str, oracle: MeasuredOracle, cell: pd.DataFrame, workload: str,
                 exclude: str | None = None) -> np.ndarray:
    """Oracle ``name``'s times for the measured configurations of one cell (rows of one condition and workload, one
    per configuration), in the rows' order: the model (levels or timeline) at the cell's condition, or the measured
    ``oracle`` interpolated there, without condition ``exclude`` (leave-one-condition-out)."""
    space = _anchor_space(cell[KEYS])
    idx = _config_index(space, cell)
    first = cell.iloc[0]
    bw, rtt, loss = ([float(first[k])] for k in ("down_mbps", "rtt_ms", "loss"))
    q = [float(queue_bdp(bw[0], rtt[0], float(first["queue_packets"])))]  # the model's buffer unit: BDPs
    if name in VARIANTS:
        return _model_ms(oracle.workloads[workload], bw, rtt, loss, q, space, **VARIANTS[name])[0, idx]
    return oracle.mode_at(bw, rtt, loss, q, workload, space, exclude=exclude)[0, idx]


def validate_oracle(name: str, oracle: MeasuredOracle, kind: str) -> tuple[dict, list[dict]]:
    """(summary, per-cell rows) of oracle ``name`` on the dataset behind ``oracle`` for one workload kind."""
    if name not in REQUESTED:
        raise OracleError(f"The 'oracle' parameter of tailor oracle validate must be one of {REQUESTED}. "
                          f"Got {name!r}.")
    table = _cells(oracle, kind)
    source = oracle.page_dataset if kind == "pages" else oracle.dataset
    intervals = _intervals(source, kind)
    halves = _half_medians(source, kind)
    rows = []
    if not table.empty:
        for (cond, workload), cell in table.groupby(["condition", "workload"], sort=True):
            cell = cell.drop_duplicates(KEYS)
            if len(cell) < MIN_CONFIGS:
                continue
            first = cell.iloc[0]
            pred = predict_cell(name, oracle, cell, workload, exclude=cond)
            scores = cell_scores(cell["median"].to_numpy(), pred)
            keys = [(cond, workload, r.cc, int(r.iw), int(r.rto_min_ms), str(r.http)) for r in cell.itertuples()]
            contrasts = cell_contrasts([k[2:] for k in keys], cell["median"].to_numpy(), pred)
            chosen, best = keys[int(np.argmin(pred))], keys[int(np.argmin(cell["median"].to_numpy()))]
            inside = bool(intervals[chosen][0] <= intervals[best][1]) if chosen in intervals and best in intervals \
                else math.nan
            page = str(first["page"]) if "page" in cell.columns and isinstance(first["page"], str) else ""
            half = halves.get((cond, int(first["size_bytes"]), page))
            rows.append({"condition": cond, "workload": workload, "configs": int(len(cell)),
                         "reps_median": float(cell["n"].median()), "cv_median": float(cell["cv"].median()),
                         **scores, "in_interval": inside, "contrasts": contrasts,
                         "split_half": _half_rho(*half) if half else math.nan,
                         "split_half_cost": _half_cost(*half) if half else math.nan})
    return summarize(rows), rows


def summarize(rows: list[dict]) -> dict:
    """Median and p25 of rho, share of agreeing cells, median and p90 of the cost, median log error; the noise
    floor (median and p90 of the split-half cost); and rho and cost on the reproducible cells alone."""
    if not rows:
        return {"cells": 0}
    df = pd.DataFrame(rows)
    rho = df["rho"].dropna()
    out = {"cells": int(len(df)), "conditions": int(df["condition"].nunique()),
           "rho_median": float(rho.median()) if len(rho) else math.nan,
           "rho_p25": float(rho.quantile(0.25)) if len(rho) else math.nan,
           "best_agrees": float(df["agree"].mean()),
           "cost_median": float(df["cost"].median()), "cost_p90": float(df["cost"].quantile(0.9)),
           "log_error_median": float(df["log_error"].median()),
           "cv_median": float(df["cv_median"].median()),
           "split_half_median": float(df["split_half"].median()) if "split_half" in df and df["split_half"].notna().any()
           else None,
           "in_interval": float(df["in_interval"].dropna().astype(float).mean())
           if "in_interval" in df and df["in_interval"].notna().any() else None}  # None: the dataset has no intervals
    floor = df["split_half_cost"].dropna() if "split_half_cost" in df else pd.Series(dtype=float)
    out["noise_floor"] = {"cells": int(len(floor)), "cost_median": float(floor.median()),
                          "cost_p90": float(floor.quantile(0.9))} if len(floor) else None
    if "split_half" in df:
        rep = df[df["split_half"] >= REPRODUCIBLE_RHO]
        rep_rho = rep["rho"].dropna()
        out["reproducible"] = {"cells": int(len(rep)), "of": int(df["split_half"].notna().sum()),
                               "rho_median": float(rep_rho.median()) if len(rep_rho) else math.nan,
                               "cost_median": float(rep["cost"].median()) if len(rep) else math.nan,
                               "cost_p90": float(rep["cost"].quantile(0.9)) if len(rep) else math.nan}
    return out


def _share(x) -> str:
    return "n/a (no intervals)" if x is None or not math.isfinite(x) else f"{x:.0%}"


def _rho(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.2f}"


def quic_cells(dataset: Path) -> int:
    path = dataset / "quic" / "measurements.parquet"
    if not path.exists():
        return 0
    df = pd.read_parquet(path, columns=["condition", "size_bytes", "ok"])
    return int(df[df["ok"].astype(bool)].groupby(["condition", "size_bytes"]).ngroups)


def validate(dataset: str | Path = DEFAULT_DATASET, oracles=ORACLES, kinds=KINDS) -> dict:
    """Validation figures of every oracle in ``oracles`` per workload kind, plus the per-cell rows."""
    dataset = Path(dataset)
    measured = MeasuredOracle(dataset, pages="measured", page_dataset=dataset, page_extra=())
    out = {"dataset": str(dataset.name), "method": __doc__.split("\n\n")[1].replace("\n", " "), "oracles": {}}
    for name in oracles:
        per_kind = {}
        for kind in kinds:
            if kind == "quic":
                per_kind[kind] = {"cells": quic_cells(dataset), "covered": False,
                                  "why": "no oracle answers QUIC transport parameters"}
                continue
            summary, rows = validate_oracle(name, measured, kind)
            per_kind[kind] = {**summary, "covered": summary["cells"] > 0, "contrasts": contrast_summary(rows),
                              "rows": rows}
        out["oracles"][name] = per_kind
    return out


def format_report(result: dict) -> str:
    lines = [f"dataset {result['dataset']}: per measured cell, the oracle's order of the measured configurations",
             "| oracle | workload | cells | conditions | rho median | rho p25 | best agrees | cost median | "
             "cost p90 | |log error| median | measured CV median | measured split-half rho median | "
             "choice within the best's 95% interval |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, kinds in result["oracles"].items():
        for kind, s in kinds.items():
            if not s.get("covered"):
                lines.append(f"| {name} | {kind} | {s['cells']} | not covered: "
                             f"{s.get('why', 'no measured cells')} |||||||||")
                continue
            lines.append(f"| {name}{' (LOCO)' if name == 'measured' else ''} | {kind} | {s['cells']} | "
                         f"{s['conditions']} | {s['rho_median']:.2f} | {s['rho_p25']:.2f} | {s['best_agrees']:.0%} | "
                         f"{s['cost_median']:.1%} | {s['cost_p90']:.1%} | {s['log_error_median']:.3f} | "
                         f"{s['cv_median']:.3f} | {_rho(s.get('split_half_median'))} | {_share(s.get('in_interval'))} |")
    noisy = [(name, kind, s) for name, kinds in result["oracles"].items() for kind, s in kinds.items()
             if s.get("covered") and s.get("noise_floor")]
    if noisy:
        lines += ["", "Noise: the split-half cost is what choosing a cell's configuration by one half of its repetitions "
                  "(odd or even, in measurement order) costs in the other half, the floor the measurements' own noise "
                  "puts under any oracle's cost; then the oracle's figures on the reproducible cells alone (split-half "
                  f"rho >= {REPRODUCIBLE_RHO:g}).",
                  "| oracle | workload | split-half cost median | split-half cost p90 | reproducible cells | "
                  "rho median there | cost median there | cost p90 there |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, kind, s in noisy:
            f, r = s["noise_floor"], s.get("reproducible") or {}
            there = (f"{r['cells']} of {r['of']} | {_rho(r['rho_median'])} | {r['cost_median']:.1%} | "
                     f"{r['cost_p90']:.1%}") if r.get("cells") else f"0 of {r.get('of', 0)} | n/a | n/a | n/a"
            lines.append(f"| {name}{' (LOCO)' if name == 'measured' else ''} | {kind} | {f['cost_median']:.1%} | "
                         f"{f['cost_p90']:.1%} | {there} |")
    contrasts = [(name, kind, label, c) for name, kinds in result["oracles"].items() for kind, s in kinds.items()
                 for label, c in s.get("contrasts", {}).items()]
    if contrasts:
        lines += ["", "Per knob: time with one value over time with the other, every other knob equal (geometric mean "
                  "over a cell's matched pairs; median over cells). Direction agrees: among cells whose measured ratio is "
                  f"more than {RESOLVED:.0%} from 1.",
                  "| oracle | workload | contrast | cells | measured ratio median | oracle ratio median | "
                  "direction agrees | |log error| median | worst cell (measured / oracle) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, kind, label, c in contrasts:
            w = c["worst"]
            agrees = "n/a" if c["direction_agrees"] is None else f"{c['direction_agrees']:.0%} of {c['resolved']}"
            lines.append(f"| {name}{' (LOCO)' if name == 'measured' else ''} | {kind} | {label} | {c['cells']} | "
                         f"{c['measured_median']:.2f} | {c['oracle_median']:.2f} | {agrees} | "
                         f"{c['log_error_median']:.3f} | {w['condition']} {w['workload']} "
                         f"({w['measured']:.2f} / {w['oracle']:.2f}) |")
    return "\n".join(lines)


# -- what `tailor evaluate` and `--oracle auto` use ------------------------------------------------------
# Issue 18's targets for an oracle to be trusted on a workload kind (cells held out from any fitting).
TARGETS = {"pages": {"rho_median": 0.8, "cost_median": 0.02, "cost_p90": 0.10},
           "objects": {"cost_median": 0.01, "cost_p90": 0.05}}


def holds(summary: dict, kind: str) -> bool:
    """Whether ``summary`` (one oracle, one workload kind) meets TARGETS[kind]."""
    t = TARGETS[kind]
    if not summary.get("covered"):
        return False
    ok = summary["cost_median"] <= t["cost_median"] and summary["cost_p90"] <= t["cost_p90"]
    return ok and ("rho_median" not in t or summary["rho_median"] >= t["rho_median"])


def _cache_key(*datasets: Path) -> str:
    import hashlib

    h = hashlib.sha1()
    files = [f for d in datasets for f in sorted(d.glob("measurements.parquet")) + sorted(d.glob("*/measurements.parquet"))]
    here = Path(__file__).parent
    for f in files + [here / n for n in ("model.py", "measured.py", "validate.py", "websites.py", "tcp.py", "timeline.py")]:
        if f.exists():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _has_pages(dataset: Path) -> bool:
    return (dataset / PAGES_SUBDIR / "measurements.parquet").exists()


def _has_objects(dataset: Path) -> bool:
    return (dataset / "measurements.parquet").exists()


def _campaign_for(kind_dataset: str | Path | None, dataset: Path, has) -> Path | None:
    """``kind_dataset`` when it is another dataset than ``dataset`` and has the kind's measurements (``has``)."""
    if kind_dataset is None:
        return None
    path = Path(kind_dataset)
    return path if path.resolve() != dataset.resolve() and has(path) else None


def cached_validation(dataset: str | Path = DEFAULT_DATASET, pages_dataset: str | Path | None = PAGE_DATASET,
                      objects_dataset: str | Path | None = OBJECT_DATASET) -> dict:
    """Summaries (no per-cell rows) of every oracle (``NAMES``) on ``dataset``, cached by the content of the datasets and of
    the oracles' code (``$TAILOR_CACHE_DIR``, default ``~/.cache/tailor``): a changed model is re-validated.

    Page figures come from ``pages_dataset`` (the page campaign, tb-v3: adaptive repetitions on a quiet machine)
    when it has page loads, object figures from ``objects_dataset`` (the object campaign, tb-v3-objects) when it has
    fetches; each kind's figures name the dataset they were computed on."""
    import json
    import os

    dataset = Path(dataset)
    pages = _campaign_for(pages_dataset, dataset, _has_pages)
    objects = _campaign_for(objects_dataset, dataset, _has_objects)
    extra = [(d, kind) for d, kind in ((objects, "objects"), (pages, "pages")) if d is not None]
    cache = Path(os.environ.get("TAILOR_CACHE_DIR") or Path.home() / ".cache" / "tailor")
    name = "+".join([dataset.name] + [d.name for d, _ in extra])
    path = cache / f"oracle-validation-{name}-{_cache_key(dataset, *[d for d, _ in extra])}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    result = validate(dataset, NAMES)
    for kinds in result["oracles"].values():
        for s in kinds.values():
            s["dataset"] = dataset.name
    for other, kind in extra:
        kind_result = validate(other, NAMES, kinds=(kind,))
        for oracle, kinds in kind_result["oracles"].items():
            result["oracles"][oracle][kind] = {**kinds[kind], "dataset": other.name}
    result["dataset"] = name
    for kinds in result["oracles"].values():
        for s in kinds.values():
            s.pop("rows", None)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: validate again next time
    return result


def one_line(name: str, kinds: dict) -> str:
    """``objects rho 0.73, cost 0.4%/19.7% (p50/p90, 184 cells on tb-v2, ...; on its 96 reproducible cells rho 0.85, cost
    0.1%/4.6%, noise floor p90 35.2%): does not hold; pages ...`` for one oracle."""
    parts = []
    for kind in ("objects", "pages"):
        s = kinds.get(kind, {})
        if s.get("covered"):
            on = f" on {s['dataset']}" if s.get("dataset") else ""
            worst = max((s.get("contrasts") or {}).items(), key=lambda kv: kv[1]["log_error_median"], default=None)
            weakest = "" if worst is None else \
                f", furthest off on {worst[0]} (|log error| {worst[1]['log_error_median']:.3f})"
            r, f = s.get("reproducible") or {}, s.get("noise_floor") or {}
            noise = (f"; on its {r['cells']} reproducible cells rho {_rho(r['rho_median'])}, cost "
                     f"{r['cost_median']:.1%}/{r['cost_p90']:.1%}, noise floor p90 {f['cost_p90']:.1%}"
                     if r.get("cells") and f else "")
            parts.append(f"{kind} rho {s['rho_median']:.2f}, cost {s['cost_median']:.1%}/{s['cost_p90']:.1%} "
                         f"(p50/p90, {s['cells']} cells{on}{weakest}{noise}): "
                         f"{'holds' if holds(s, kind) else 'does not hold'}")
    return f"{name}: " + "; ".join(parts)
