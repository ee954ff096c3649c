"""The knob registry: spec/knobs.json loaded once and validated as data.

Every other module (configuration spaces, decision tables, the edge) reads knob facts from here,
never from its own copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tailor import paths
from tailor.errors import ParameterError

SPEC_DIR = paths.SPEC_DIR
KNOBS_PATH = SPEC_DIR / "knobs.json"
PER_CONNECTION = frozenset({"sockops", "setsockopt", "route", "edge", "edge-quic"})


@dataclass(frozen=True)
class FairnessRule:
    """A fairness tag that applies to some values of a knob (Configanator section 6.7)."""

    tag: str
    values: tuple = ()
    above: float | None = None
    below: float | None = None

    def matches(self, value: Any) -> bool:
        if value in self.values:
            return True
        if self.above is not None and not isinstance(value, str) and value > self.above:
            return True
        return self.below is not None and not isinstance(value, str) and value < self.below


@dataclass(frozen=True)
class Knob:
    """One tunable setting: its domain, default, where it applies and its fairness tags."""

    name: str
    layer: str
    type: str  # categorical | integer | boolean
    default: Any
    apply: tuple[str, ...]
    values: tuple = ()
    bounds: tuple[float, float] | None = None
    unit: str = ""
    fairness: tuple[FairnessRule, ...] = field(default=())
    doc: str = ""

    @property
    def per_connection(self) -> bool:
        return bool(PER_CONNECTION.intersection(self.apply))

    def check(self, value: Any) -> Any:
        """Return ``value`` if valid for this knob, else raise naming the knob and the reason."""
        if self.type == "categorical":
            if value not in self.values:
                raise ParameterError(f"knob {self.name!r}: value {value!r} is not one of {list(self.values)}")
            return value
        if self.type == "boolean":
            if not isinstance(value, bool):
                raise ParameterError(f"knob {self.name!r}: value {value!r} is not a boolean")
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParameterError(f"knob {self.name!r}: value {value!r} is not an integer")
        lo, hi = self.bounds
        if not lo <= value <= hi:
            raise ParameterError(f"knob {self.name!r}: value {value} is outside [{lo}, {hi}]")
        return value

    def tags(self, value: Any) -> frozenset[str]:
        return frozenset(r.tag for r in self.fairness if r.matches(value))


@dataclass(frozen=True)
class KnobRegistry:
    """All knobs by name, plus the named configuration spaces of the spec."""

    knobs: dict[str, Knob]
    spaces: dict[str, dict[str, list]]

    def __getitem__(self, name: str) -> Knob:
        try:
            return self.knobs[name]
        except KeyError:
            raise ParameterError(f"unknown knob {name!r}; known knobs: {sorted(self.knobs)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.knobs

    def defaults(self) -> dict[str, Any]:
        """Default value of every per-connection knob."""
        return {k.name: k.default for k in self.knobs.values() if k.per_connection}

    def validate(self, assignment: dict[str, Any]) -> dict[str, Any]:
        """Check every value of an assignment; knobs must be per-connection."""
        for name, value in assignment.items():
            knob = self[name]
            if not knob.per_connection:
                raise ParameterError(f"knob {name!r} is host-wide only ({list(knob.apply)}); it cannot be set per connection")
            knob.check(value)
        return assignment


def _knob_from_json(d: dict) -> Knob:
    rules = tuple(
        FairnessRule(tag=r["tag"], values=tuple(r.get("values", ())), above=r.get("above"), below=r.get("below"))
        for r in d.get("fairness", [])
    )
    knob = Knob(
        name=d["name"], layer=d["layer"], type=d["type"], default=d["default"], apply=tuple(d["apply"]),
        values=tuple(d.get("values", ())), bounds=tuple(d["bounds"]) if "bounds" in d else None,
        unit=d.get("unit", ""), fairness=rules, doc=d.get("doc", ""),
    )
    knob.check(knob.default)
    return knob


@lru_cache(maxsize=4)
def load_registry(path: str | Path = KNOBS_PATH) -> KnobRegistry:
    """Load and validate the knob registry (cached)."""
    raw = json.loads(Path(path).read_text())
    knobs = {d["name"]: _knob_from_json(d) for d in raw["knobs"]}
    spaces = {name: s["grid"] for name, s in raw.get("spaces", {}).items()}
    registry = KnobRegistry(knobs=knobs, spaces=spaces)
    for grid in spaces.values():
        for name, values in grid.items():
            for v in values:
                registry[name].check(v)
    return registry
