"""Which oracle `tailor evaluate` uses: the measured testbed dataset when it covers the evaluation, else the model.

The measured oracle (``tailor.oracle.measured``) only replaces the model by default when it covers the
``core`` space with measured values (no configuration anchored on a neighbour) *and* every default website:
an evaluation silently mixing measured objects with modelled pages would report numbers with no single
provenance. Until then it is selectable by name (``select_oracle("measured")``).
"""

from __future__ import annotations

from tailor.errors import OracleError
from tailor.oracle.base import Oracle

ORACLES = ("auto", "model", "measured")


def default_oracle() -> Oracle:
    """The measured oracle if the newest dataset (``data/oracle/tb-v2``) covers core + the default websites, else the model."""
    return select_oracle("auto")


def select_oracle(name: str = "auto") -> Oracle:
    """``model``: ModelOracle; ``measured``: MeasuredOracle (OracleError without a dataset); ``auto``: see module."""
    if name not in ORACLES:
        raise OracleError(f"The 'oracle' parameter must be one of {ORACLES}. Got {name!r}.")
    from tailor.oracle.model import ModelOracle

    if name == "model":
        return ModelOracle()
    if name == "measured":
        return _measured()
    if not _could_cover_defaults():
        return ModelOracle()  # skip loading the dataset: it cannot cover the default pages yet
    measured = _measured_or_none()
    return measured if measured is not None and _covers_defaults(measured) else ModelOracle()


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


def _covers_defaults(oracle) -> bool:
    from tailor.oracle.websites import default_catalog
    from tailor.space import ConfigSpace

    ok, _ = oracle.covers(ConfigSpace.named("core"), default_catalog())
    return ok
