"""``tailor oracle calibrate``: choose the model's fitted constant by leave-one-condition-out cross-validation.

The model oracle has one constant fitted to measurements, ``tcp.OVERSHOOT_RECOVERY_RTT`` (the recovery round of a
loss-based slow start that overflows BDP + buffer; MODEL.md section 6a); the page timeline (``--oracle
model-timeline``) fits its own, ``timeline.RECOVERY_RTT`` (MODEL.md section 3a). For every candidate value the model is
validated on the dataset's cells (``tailor.oracle.validate``); then, for each condition in turn, the value that
minimises the objective on the *other* conditions' cells is taken and that condition's cells are scored with it.
The held-out rows together give the figures a condition never seen in fitting would get. The objective is the
mean cost of the model's choice over the measured best plus 0.1 x (1 - mean Spearman rho): the cost is what an
evaluation's Optimal pays for a wrong order, rho keeps the rest of the order honest.

``--check`` datasets are scored at the value fitted on all of ``--dataset`` (and at the committed value), as data
from a different campaign (other pages, other conditions, other machine load) that took no part in the choice.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from tailor.errors import OracleError
from tailor.oracle import tcp, timeline
from tailor.oracle.measured import MeasuredOracle
from tailor.oracle.validate import summarize, validate_oracle

PARAMETER = "OVERSHOOT_RECOVERY_RTT"
CANDIDATES = (0.0, 0.25, 0.5, 0.75, 1.0)  # above 1 RTT an overflow would cost more than
# the random loss that pre-empts it (tcp.overshoot_ms), and time would fall as loss rises
RHO_WEIGHT = 0.1
MODELS = ("model", "model-timeline")  # the page model the constant is fitted for


def _home(model: str):
    """(module, name) of the constant a page model uses: the levels' ``tcp.OVERSHOOT_RECOVERY_RTT``, the timeline's
    ``timeline.RECOVERY_RTT``."""
    return (timeline, "RECOVERY_RTT") if model == "model-timeline" else (tcp, PARAMETER)


@contextmanager
def _constant(value: float, model: str = "model"):
    """The page model's constant set to ``value`` for the block (restored after, also on error)."""
    module, name = _home(model)
    old = getattr(module, name)
    setattr(module, name, float(value))
    try:
        yield
    finally:
        setattr(module, name, old)


def objective(rows: pd.DataFrame) -> float:
    """Mean cost of the choice + RHO_WEIGHT x (1 - mean rho) over the cells (rho undefined in a cell: skipped)."""
    if rows.empty:
        raise OracleError("calibrate: no cells to fit on")
    rho = rows["rho"].dropna()
    return float(rows["cost"].mean() + RHO_WEIGHT * (1.0 - (rho.mean() if len(rho) else 0.0)))


def score_rows(dataset: Path, values, kinds=("objects", "pages"), model: str = "model") -> dict[float, pd.DataFrame]:
    """Per candidate value, the model's per-cell validation rows on ``dataset`` (every kind it measured);
    ``model``: ``model`` (pages as levels) or ``model-timeline`` (the page timeline)."""
    oracle = MeasuredOracle(dataset, pages="measured", page_dataset=dataset, page_extra=())
    out = {}
    for v in values:
        with _constant(v, model):
            rows = []
            for kind in kinds:
                rows += [{**r, "kind": kind} for r in validate_oracle(model, oracle, kind)[1]]
        out[float(v)] = pd.DataFrame(rows)
    return out


def _summary(rows: pd.DataFrame) -> dict:
    return {kind: summarize(g.drop(columns="kind").to_dict("records")) for kind, g in rows.groupby("kind")}


def calibrate(dataset: str | Path, check=(), values=CANDIDATES, model: str = "model") -> dict:
    """Leave-one-condition-out choice of the constant on ``dataset``; held-out figures; ``check`` datasets scored.
    ``model``: which page model the constant is fitted for (``model`` or ``model-timeline``)."""
    if model not in MODELS:
        raise OracleError(f"The 'oracle' parameter of tailor oracle calibrate must be one of {MODELS}. Got {model!r}.")
    dataset = Path(dataset)
    values = tuple(float(v) for v in values)
    if not values or not all(math.isfinite(v) and 0 <= v <= 1 for v in values):
        raise OracleError(f"calibrate: candidate values must be in [0, 1] (RTTs), got {values}")
    per_value = score_rows(dataset, values, model=model)
    conditions = sorted(set(per_value[values[0]]["condition"]))
    if len(conditions) < 2:
        raise OracleError(f"calibrate: leave-one-condition-out needs >= 2 measured conditions, {dataset} has "
                          f"{len(conditions)}")
    held, folds = [], []
    for cond in conditions:
        train = {v: rows[rows["condition"] != cond] for v, rows in per_value.items()}
        chosen = min(values, key=lambda v: (objective(train[v]), v))  # ties: the smaller constant
        held.append(per_value[chosen][per_value[chosen]["condition"] == cond])
        folds.append({"held_out": cond, "chosen": chosen})
    held_rows = pd.concat(held, ignore_index=True)
    fitted = min(values, key=lambda v: (objective(per_value[v]), v))
    module, name = _home(model)
    committed = float(getattr(module, name))
    result = {"dataset": dataset.name, "oracle": model, "parameter": name, "where": module.__name__,
              "candidates": list(values),
              "objective": f"mean cost + {RHO_WEIGHT} x (1 - mean rho)",
              "folds": folds, "held_out": _summary(held_rows), "fitted_on_all": fitted, "committed": committed,
              "in_sample": {str(v): {"objective": objective(per_value[v]), **_summary(per_value[v])} for v in values},
              "check": {}}
    for other in check:
        other = Path(other)
        rows = score_rows(other, sorted({fitted, committed, 0.0}), model=model)
        result["check"][other.name] = {str(v): _summary(r) for v, r in rows.items()}
    return result


def format_report(result: dict) -> str:
    def line(label, s):
        return (f"| {label} | {s['cells']} | {s['rho_median']:.2f} | {s['rho_p25']:.2f} | {s['best_agrees']:.0%} | "
                f"{s['cost_median']:.1%} | {s['cost_p90']:.1%} | {s['log_error_median']:.3f} |")

    head = ["| figures | cells | rho median | rho p25 | best agrees | cost median | cost p90 | |log error| median |",
            "|---|---|---|---|---|---|---|---|"]
    picks = pd.Series([f["chosen"] for f in result["folds"]]).value_counts().sort_index()
    lines = [f"dataset {result['dataset']}, oracle {result.get('oracle', 'model')}: {result['parameter']} by "
             "leave-one-condition-out "
             f"(objective {result['objective']}; candidates {result['candidates']})",
             "chosen per held-out condition: " + ", ".join(f"{v:g} x{n}" for v, n in picks.items()),
             f"fitted on all conditions: {result['fitted_on_all']:g}; committed in {result.get('where', 'tailor.oracle.tcp')}: "
             f"{result['committed']:g}" + ("" if result["fitted_on_all"] == result["committed"] else
                                            "  ** differs: the committed constant is not the fitted one **"), ""]
    lines += head
    for kind, s in result["held_out"].items():
        lines.append(line(f"{kind}, held-out conditions", s))
    for v in (0.0, result["committed"]):
        for kind, s in result["in_sample"][str(v)].items():
            if isinstance(s, dict):
                lines.append(line(f"{kind}, all conditions at {v:g}", s))
    for name, by_value in result["check"].items():
        for v, kinds in by_value.items():
            for kind, s in kinds.items():
                lines.append(line(f"check {name} {kind} at {float(v):g}", s))
    return "\n".join(lines)
