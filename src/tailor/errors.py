"""One exception root for Tailor, with a few subclasses, and one message format.

Messages follow "The '<field>' parameter of <Owner> must be <rule>. Got <value>." so that
a user always sees which field was wrong and why.
"""

from __future__ import annotations


class TailorError(Exception):
    """Root of every error Tailor raises on purpose."""


class ParameterError(TailorError, ValueError):
    """A hyper-parameter, option or knob value is out of its domain."""


class ScenarioError(TailorError):
    """A scenario file or trace is malformed (message names file, line and field)."""


class TableError(TailorError):
    """A decision table is invalid (message names the field and the reason)."""


class OracleError(TailorError):
    """An oracle cannot answer (unknown workload, configuration outside its data)."""


def param_error(owner: str, field: str, rule: str, got: object) -> ParameterError:
    """Build the house-style message: The 'x' parameter of Y must be Z. Got W."""
    return ParameterError(f"The {field!r} parameter of {owner} must be {rule}. Got {got!r}.")


def check(ok: bool, owner: str, field: str, rule: str, got: object) -> None:
    """Raise a ParameterError in house style unless ``ok``."""
    if not ok:
        raise param_error(owner, field, rule, got)
