"""Configurations and configuration spaces.

A :class:`Configuration` is an immutable, hashable assignment of per-connection knobs with a stable id
(a hash of its non-default values, so adding a knob to the registry does not change existing ids).
A :class:`ConfigSpace` is a grid over some knobs (others stay at their defaults), restricted by an
:class:`AllowedConfig`, that can be enumerated, sampled (uniformly or by Latin hypercube) and encoded
for a Gaussian process.

>>> space = ConfigSpace.named("core")
>>> len(space), space.configs[space.default_index]["tcp.congestion_control"]
(60, 'cubic')
>>> len(space.restrict(AllowedConfig.parse("NoBBR,NoHighICW")))
16
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import qmc

from tailor.errors import ParameterError, check
from tailor.space.knobs import KnobRegistry, load_registry


class Configuration(Mapping[str, Any]):
    """Immutable assignment of every per-connection knob; hashable; ``id`` is stable."""

    __slots__ = ("_values", "_id", "_hash")

    def __init__(self, values: Mapping[str, Any], registry: KnobRegistry | None = None):
        registry = registry or load_registry()
        full = registry.defaults()
        full.update(registry.validate(dict(values)))
        self._values = dict(sorted(full.items()))
        changed = {k: v for k, v in self._values.items() if v != registry[k].default}
        digest = hashlib.sha1(json.dumps(changed, sort_keys=True).encode()).hexdigest()
        self._id = "c-" + digest[:10]
        self._hash = hash(self._id)

    @property
    def id(self) -> str:
        return self._id

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Configuration) and other._id == self._id

    def __repr__(self) -> str:
        return f"Configuration({self.label()})"

    def __reduce__(self):
        return (Configuration, (self._values,))

    def changes(self, registry: KnobRegistry | None = None) -> dict[str, Any]:
        """The knobs that differ from their defaults."""
        registry = registry or load_registry()
        return {k: v for k, v in self._values.items() if v != registry[k].default}

    def label(self, knobs: Iterable[str] | None = None) -> str:
        """Short human label, e.g. 'cubic iw10 h1.1 rto200'."""
        short = {"tcp.congestion_control": "{}", "tcp.initial_cwnd": "iw{}", "http.version": "h{}",
                 "tcp.rto_min_ms": "rto{}", "tcp.syn_rto_ms": "synrto{}", "tcp.sndbuf_bytes": "sndbuf{}"}
        names = list(knobs) if knobs is not None else [k for k in short if k in self._values]
        return " ".join(short.get(k, k.split(".")[-1] + "={}").format(self._values[k]) for k in names)


_RULE = re.compile(r"^\s*([a-z0-9_.]+)\s*(<=|>=|!=|==|<|>)\s*([^\s]+)\s*$")
_ALIASES = {"nobbr": "bbr", "nohighicw": "high_icw", "noaggressiverto": "aggressive_rto"}


@dataclass(frozen=True)
class AllowedConfig:
    """Operator restriction of the configuration space (Configanator's AllowedConfig knob).

    ``exclude_tags`` drops every configuration carrying a fairness tag; ``rules`` are comparisons
    such as ``("tcp.initial_cwnd", "<=", 10)`` that every allowed configuration must satisfy.
    """

    exclude_tags: frozenset[str] = frozenset()
    rules: tuple[tuple[str, str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> AllowedConfig:
        """Parse 'NoBBR,NoHighICW,tcp.initial_cwnd<=32' (case-insensitive aliases)."""
        if not text:
            return cls()
        tags, rules = set(), []
        for part in filter(None, (p.strip() for p in text.split(","))):
            if part.lower() in _ALIASES:
                tags.add(_ALIASES[part.lower()])
            elif part.lower().startswith("no:"):
                tags.add(part[3:])
            elif m := _RULE.match(part):
                rules.append((m.group(1), m.group(2), _literal(m.group(3))))
            else:
                raise ParameterError(
                    f"The 'allowed' parameter must be a comma list of NoBBR, NoHighICW, no:<tag> or "
                    f"'<knob><op><value>'. Got {part!r}.")
        return cls(frozenset(tags), tuple(rules))

    def permits(self, config: Configuration, registry: KnobRegistry | None = None) -> bool:
        registry = registry or load_registry()
        for name, value in config.items():
            if self.exclude_tags & registry[name].tags(value):
                return False
        return all(_compare(config[k], op, v) for k, op, v in self.rules)

    def __str__(self) -> str:
        parts = [f"no:{t}" for t in sorted(self.exclude_tags)] + [f"{k}{op}{v}" for k, op, v in self.rules]
        return ",".join(parts) or "all"


def _literal(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _compare(a: Any, op: str, b: Any) -> bool:
    if op in ("==", "!="):
        return (str(a) == str(b)) == (op == "==")
    if isinstance(a, str):
        raise ParameterError(f"AllowedConfig rule {op}{b!r} needs a numeric knob; value {a!r} is not numeric")
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


@dataclass(frozen=True, eq=False)
class ConfigSpace:
    """A grid over some knobs, restricted by an AllowedConfig. Enumerated once, then indexed by int."""

    grid: Mapping[str, tuple]
    allowed: AllowedConfig = AllowedConfig()
    name: str = "custom"
    registry: KnobRegistry = field(default_factory=load_registry, repr=False)

    def __post_init__(self):
        grid = {k: tuple(v) for k, v in self.grid.items()}
        check(len(grid) > 0, "ConfigSpace", "grid", "a non-empty mapping of knob -> values", self.grid)
        for name, values in grid.items():
            knob = self.registry[name]
            check(knob.per_connection, "ConfigSpace", "grid", "made of per-connection knobs", name)
            check(knob.default in values, "ConfigSpace", f"grid[{name!r}]", f"a list containing the default {knob.default!r}", list(values))
            for v in values:
                knob.check(v)
        object.__setattr__(self, "grid", grid)
        configs = [Configuration(dict(zip(grid, combo)), self.registry) for combo in itertools.product(*grid.values())]
        default = Configuration({}, self.registry)
        if not self.allowed.permits(default, self.registry):
            raise ParameterError(f"AllowedConfig {self.allowed} excludes the default configuration; the default must stay allowed")
        kept = [c for c in configs if self.allowed.permits(c, self.registry)]
        object.__setattr__(self, "configs", tuple(kept))
        object.__setattr__(self, "_index", {c.id: i for i, c in enumerate(kept)})
        object.__setattr__(self, "default_index", self._index[default.id])
        object.__setattr__(self, "_codes", self._encode_all())

    @classmethod
    def named(cls, name: str, allowed: AllowedConfig | str | None = None) -> ConfigSpace:
        registry = load_registry()
        check(name in registry.spaces, "ConfigSpace", "name", f"one of {sorted(registry.spaces)}", name)
        if not isinstance(allowed, AllowedConfig):
            allowed = AllowedConfig.parse(allowed)
        return cls(registry.spaces[name], allowed, name, registry)

    def restrict(self, allowed: AllowedConfig) -> ConfigSpace:
        merged = AllowedConfig(self.allowed.exclude_tags | allowed.exclude_tags, self.allowed.rules + allowed.rules)
        return ConfigSpace(self.grid, merged, self.name, self.registry)

    def __len__(self) -> int:
        return len(self.configs)

    def index_of(self, config: Configuration | str) -> int:
        key = config if isinstance(config, str) else config.id
        try:
            return self._index[key]
        except KeyError:
            raise ParameterError(f"configuration {key} is not in space {self.name!r} ({self.allowed})") from None

    @property
    def knobs(self) -> tuple[str, ...]:
        return tuple(self.grid)

    # -- encoding for a GP: categorical one-hot, ordered numeric scaled to [0, 1] (log when spread > 8x)
    def _encode_all(self) -> np.ndarray:
        cols = []
        for name, values in self.grid.items():
            col = np.array([c[name] for c in self.configs], dtype=object)
            knob = self.registry[name]
            if knob.type in ("categorical", "boolean"):
                cols.extend((col == v).astype(float) for v in values)
            else:
                cols.append(_scale([float(x) for x in col], [float(v) for v in values]))
        return np.column_stack(cols) if cols else np.zeros((len(self.configs), 0))

    def encode(self, indices: Iterable[int] | None = None) -> np.ndarray:
        """Rows of the GP design matrix for configuration indices (all when None)."""
        return self._codes if indices is None else self._codes[np.asarray(list(indices), dtype=int)]

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self.configs)))

    def lhs(self, n: int, rng: np.random.Generator) -> list[int]:
        """Latin-hypercube sample of ``n`` distinct allowed configurations (Configanator App. D)."""
        n = min(n, len(self.configs))
        sampler = qmc.LatinHypercube(d=len(self.grid), rng=rng)
        points = sampler.random(n)
        chosen: list[int] = []
        for p in points:
            target = {name: values[min(int(u * len(values)), len(values) - 1)]
                      for (name, values), u in zip(self.grid.items(), p)}
            idx = self._nearest(Configuration(target, self.registry), exclude=chosen)
            chosen.append(idx)
        return chosen

    def _nearest(self, config: Configuration, exclude: list[int]) -> int:
        if config.id in self._index and self._index[config.id] not in exclude:
            return self._index[config.id]
        probe = ConfigSpace.__new__(ConfigSpace)
        object.__setattr__(probe, "grid", self.grid)
        object.__setattr__(probe, "registry", self.registry)
        object.__setattr__(probe, "configs", (config,))
        code = probe._encode_all()[0]
        dist = np.abs(self._codes - code).sum(axis=1)
        dist[exclude] = np.inf
        return int(np.argmin(dist))

    def label(self, index: int) -> str:
        """Human label of configuration ``index`` over this space's knobs, e.g. 'bbr iw32 h2 rto50'."""
        return self.configs[index].label(self.grid)

    def to_json(self) -> dict:
        return {"name": self.name, "grid": {k: list(v) for k, v in self.grid.items()}, "allowed": str(self.allowed),
                "size": len(self)}


def _scale(col: list[float], values: list[float]) -> np.ndarray:
    lo, hi = min(values), max(values)
    if hi == lo:
        return np.zeros(len(col))
    if lo > 0 and hi / lo > 8:
        return np.array([(math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo)) for x in col])
    return np.array([(x - lo) / (hi - lo) for x in col])
