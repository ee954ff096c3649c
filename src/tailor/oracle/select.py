"""Which oracle `tailor evaluate` uses (``--oracle auto``): the one whose validation holds.

Both oracles are validated against the measured campaigns (``tailor oracle validate``; cached): per workload kind
of the evaluation (objects on the object campaign tb-v3-objects, pages on the page campaign tb-v3, each where it
exists, else on the measured oracle's dataset tb-v2), the oracle's order of the measured configurations must meet
issue 18's targets (``tailor.oracle.validate.TARGETS``; the measured oracle is validated leave-one-condition-out). Among the
oracles that hold on every kind, the measured one is preferred when it covers the evaluated space with measured
values (no configuration anchored on a neighbour) and every default website, then the model, then the model with
the page timeline (``model-timeline``). When no oracle
holds, the coverage rule alone decides (measured only with full coverage, else the model) and the selection says
that no validation holds, with the figures. The choice, its reason and the figures are attached to the oracle
(``oracle.validation``) for the run's metadata and report.
"""

from __future__ import annotations

from tailor.errors import OracleError
from tailor.oracle.base import Oracle

ORACLES = ("auto", "model", "model-v6", "model-timeline", "model-tailprobe", "measured", "measured-quic")
QUIC_KNOBS = ("http.alt_svc", "quic.")  # a space tuning these is answered by the QUIC dataset only


def default_oracle() -> Oracle:
    """The measured oracle if the newest dataset (``data/oracle/tb-v2``) covers core + the default websites, else the model."""
    return select_oracle("auto")


def select_oracle(name: str = "auto", space: str = "core") -> Oracle:
    """``model``: ModelOracle (v7: an object's or response's lone lost tail found by the tail-loss probe and the RTO,
    ``tails="probe"``, MODEL.md 6f; ``model-tailprobe`` is the same name kept for the commands that asked for it);
    ``model-v6``: the model before (``tails="sack"``), what the README's figures dated before 2026-12-02 ran on;
    ``model-timeline``: ModelOracle with the page timeline (``pages="timeline"``, not yet the default: every figure
    of the README was measured on the levels); ``measured``: MeasuredOracle (OracleError
    without a dataset); ``measured-quic``: QuicOracle (``tailor.oracle.quic``), also what ``auto`` picks for a space that tunes HTTP/3 or QUIC knobs;
    ``auto``: see module."""
    if name not in ORACLES:
        raise OracleError(f"The 'oracle' parameter must be one of {ORACLES}. Got {name!r}.")
    from tailor.oracle.model import VARIANTS, ModelOracle

    if name in VARIANTS:
        return _with_validation(ModelOracle(**VARIANTS[name]), name, f"asked for (--oracle {name})")
    if name == "measured":
        return _with_validation(_measured(), "measured", "asked for (--oracle measured)")
    if name == "measured-quic" or _tunes_quic(space):
        from tailor.oracle.quic import QuicOracle

        oracle = QuicOracle()
        oracle.validation = {"chosen": "measured-quic", "reason": "asked for (--oracle measured-quic)"
                             if name == "measured-quic" else f"space {space!r} tunes HTTP/3 and QUIC knobs, which "
                             "only the QUIC dataset measures (no oracle validation exists for QUIC)"}
        return oracle
    measured = _measured_or_none() if _could_cover_defaults() else None
    if measured is None:
        oracle = ModelOracle()
        oracle.validation = {"chosen": "model", "reason": "no measured dataset to validate against"}
        return oracle
    from tailor.oracle.validate import cached_validation

    figures = cached_validation(measured.dataset)["oracles"]
    ok = _holds(figures)
    covers = _covers(measured, space)
    if ok["measured"] and covers:
        chosen, reason = "measured", "its validation holds and it covers the space"
    elif ok["model"]:
        chosen, reason = "model", "its validation holds"
    elif ok.get("model-timeline"):
        chosen, reason = "model-timeline", "its validation holds (the model with the page timeline)"
    else:
        chosen = "measured" if covers else "model"
        reason = ("no oracle's validation holds on both objects and pages; by coverage: "
                  + ("the measured dataset covers the space" if covers else "the measured dataset does not cover "
                     f"space {space!r} and the default pages with measured values"))
    pages = "timeline" if chosen == "model-timeline" else "levels"
    oracle = measured if chosen == "measured" else ModelOracle(pages=pages)
    oracle.validation = {"chosen": chosen, "reason": reason, "dataset": measured.dataset.name,
                         "holds": ok, "figures": figures}
    return oracle


def _with_validation(oracle, name: str, reason: str):
    """Attach the validation figures of ``oracle`` when a measured dataset exists (cached; else only the reason)."""
    measured = oracle if name == "measured" else (_measured_or_none() if _could_cover_defaults() else None)
    oracle.validation = {"chosen": name, "reason": reason}
    if measured is not None:
        from tailor.oracle.validate import cached_validation

        figures = cached_validation(measured.dataset)["oracles"]
        oracle.validation.update(dataset=measured.dataset.name, figures=figures, holds=_holds(figures))
    return oracle


def _holds(figures: dict) -> dict[str, bool]:
    """Per oracle: whether its validation meets the targets on both objects and pages."""
    from tailor.oracle.validate import holds

    return {o: all(holds(kinds[k], k) for k in ("objects", "pages")) for o, kinds in figures.items()}


def _tunes_quic(space: str) -> bool:
    """Whether the named space gives an HTTP/3 or QUIC knob a value other than its default."""
    from tailor.space import ConfigSpace

    try:
        grid = ConfigSpace.named(space).grid
    except (OracleError, ValueError, KeyError):
        return False
    return any(k.startswith(QUIC_KNOBS) and len(v) > 1 for k, v in grid.items())


def _could_cover_defaults() -> bool:
    from tailor.oracle.measured import MeasuredOracle
    from tailor.oracle.websites import default_catalog

    return MeasuredOracle.supports_pages or all(s.kind == "object" for s in default_catalog().values())


def _measured():
    from tailor.oracle.measured import MeasuredOracle

    return MeasuredOracle()


def _measured_or_none():
    try:
        return _measured()
    except OracleError:
        return None


def _covers(oracle, space: str = "core") -> bool:
    from tailor.oracle.websites import default_catalog
    from tailor.space import ConfigSpace

    try:
        ok, _ = oracle.covers(ConfigSpace.named(space), default_catalog())
    except (OracleError, ValueError, KeyError):
        return False
    return ok
