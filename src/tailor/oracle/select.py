"""Which oracle `tailor evaluate` uses: the measured testbed dataset when present, else the model."""

from __future__ import annotations

from tailor.oracle.base import Oracle


def default_oracle() -> Oracle:
    """The model oracle (grounded in TCP mechanics, see tailor/oracle/MODEL.md).

    The measured PLT tensor of the testbed replaces it once data/oracle/ holds a dataset.
    """
    from tailor.oracle.model import ModelOracle

    return ModelOracle()
