"""The one policy interface shared by the simulator and the live manager.

Every learner implements ``_select`` (and usually ``_observe`` and ``_plan``); the public methods
add the guardrails every policy must honour:

* ``select(ctx)``: the holdback share of clients gets the default -- membership is the client's cohort
  draw (spec/decision.md), so a client is held back on every connection or on none; the returned
  configuration must be in the (AllowedConfig-restricted) space, otherwise the default is applied and
  the violation counted.
* ``observe(ctx, decision, outcome)``: feedback of one connection / page load.
* ``plan(now)``: periodic model update (UpdateFreq); returns the decision table the edges apply.

Constructors store hyper-parameters only; ``reset(space, env)`` creates learned state; every
policy owns a seeded ``numpy.random.Generator``.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tailor.context import Context, Decision, Outcome, PrefixHistory  # noqa: F401 (re-exported)
from tailor.errors import ParameterError, check
from tailor.space import ConfigSpace
from tailor.table.decide import cohort_draw, derive_salt, held_back, propensity


@dataclass
class PolicyEnv:
    """What the evaluation harness gives a policy at reset. ``oracle`` is only set for oracle policies."""

    websites: tuple[str, ...] = ()
    oracle: Any = None  # a PLTTensor, for oracle baselines only
    hindsight: Any = None  # (cell, site) arrays of every page load of the run, for oracle baselines only
    archive: Any = None  # the PrefixArchive (telemetry history per prefix), for compiling tables
    update_period_s: float = 300.0
    cohort_salt: str | None = None  # 32 hex digits; None: derived from the policy's name and seed (reproducible)


class Policy(ABC):
    """Base class of every policy. Subclasses set ``name`` and implement ``_select``."""

    name: ClassVar[str] = "policy"
    needs_oracle: ClassVar[bool] = False
    # name -> (default, validator, rule shown in the error message)
    parameters: ClassVar[dict[str, tuple[Any, Callable[[Any], bool], str]]] = {}
    cohort_salt: str | None = None  # the key of its clients' cohorts (spec/decision.md), set at reset
    _epoch = 0  # plan() calls so far (a class default for policies pickled before it existed)

    def __init__(self, *, seed: int = 0, holdback: float = 0.0, **params: Any):
        check(0.0 <= holdback < 1.0, type(self).__name__, "holdback", "in [0, 1)", holdback)
        self.seed = seed
        self.holdback = holdback
        for key in params:
            if key not in self.parameters:
                raise ParameterError(f"{type(self).__name__} has no parameter {key!r}; known: {sorted(self.parameters)}")
        for key, (default, ok, rule) in self.parameters.items():
            value = params.get(key, default)
            check(ok(value), type(self).__name__, key, rule, value)
            setattr(self, key, value)
        self.space: ConfigSpace | None = None

    # -- lifecycle
    def reset(self, space: ConfigSpace, env: PolicyEnv | None = None) -> Policy:
        """Forget everything learned and prepare for ``space``."""
        env = env or PolicyEnv()
        if self.needs_oracle and env.oracle is None:
            raise ParameterError(f"policy {self.name!r} is an oracle baseline and needs env.oracle")
        self.space = space
        self.env = env
        self.cohort_salt = env.cohort_salt or derive_salt(self.name, self.seed)
        self._rng = np.random.default_rng(self.seed)
        self._violations = 0
        self._epoch = 0  # plan() calls so far: the online counterpart of a table version
        self._init_state()
        return self

    def _init_state(self) -> None:
        """Create learned state (override)."""

    def clone(self) -> Policy:
        """A fresh, unfitted policy with the same hyper-parameters."""
        fresh = copy.copy(self)
        fresh.__dict__ = {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in ("space", "env")}
        fresh.space = None
        return fresh

    def hyper_parameters(self) -> dict[str, Any]:
        return {"seed": self.seed, "holdback": self.holdback, **{k: getattr(self, k) for k in self.parameters}}

    # -- per connection
    def cohort(self, ctx: Context) -> int:
        """The client's 64-bit cohort draw (spec/decision.md): holdback membership in the high half (fixed
        while the salt stands), the exploration arm in the low half (fixed until the next ``plan``)."""
        return cohort_draw(self.cohort_salt, ctx.client.client_id, self._epoch)

    def select(self, ctx: Context) -> Decision:
        """The online decision: the learner's choice, with the holdback of spec/decision.md applied.

        The probability of a treated connection is the marginal ``(1 - h) p + h [default]``; a held-back
        one logs ``h``, a lower bound of its marginal (the learner's probability of the default is not
        known without asking it, which would change its state). Held-back outcomes never reach the
        learner. Tables (``--mode table``, the manager) log the exact marginal for both.
        """
        h = self.holdback
        if h and held_back(self.cohort(ctx), h):
            return Decision(self.space.default_index, h, self.group_of(ctx), "holdback")
        decision = self._select(ctx)
        if not 0 <= decision.config < len(self.space.configs):
            self._violations += 1
            return Decision(self.space.default_index, 1.0, decision.group, "guardrail")
        if h:
            p = propensity(decision.probability, h, decision.config == self.space.default_index)
            return Decision(decision.config, p, decision.group, decision.arm)
        return decision

    @abstractmethod
    def _select(self, ctx: Context) -> Decision:
        """Choose a configuration index for this connection."""

    def group_of(self, ctx: Context) -> str:
        """The learner group this connection belongs to, without choosing a configuration.

        Needed when the configuration was applied by an edge from a decision table (simulator table
        mode, live manager): the outcome must reach the learner state of the context's own group.
        Generic fallback: ask ``_select`` with the RNG state restored afterwards; learners that know
        their key cheaply override this.
        """
        state = self._rng.bit_generator.state
        try:
            return self._select(ctx).group
        finally:
            self._rng.bit_generator.state = state

    def observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        if decision.arm in ("holdback", "guardrail"):
            return
        self._observe(ctx, decision, outcome)

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        """Learn from one outcome (override)."""

    def observe_batch(self, items: Sequence[tuple[Context, Decision, Outcome]]) -> None:
        """Learn from many outcomes in arrival order (the manager's ingest): :meth:`observe` of each, unless the
        learner folds a batch faster (``_observe_batch``; its docstring says how it differs from one by one)."""
        todo = [item for item in items if item[1].arm not in ("holdback", "guardrail")]
        if todo:
            self._observe_batch(todo)

    def _observe_batch(self, items: Sequence[tuple[Context, Decision, Outcome]]) -> None:
        for ctx, decision, outcome in items:
            self._observe(ctx, decision, outcome)

    # -- slow loop
    def plan(self, now: float, compile: bool = True):
        """Periodic update (UpdateFreq); returns the decision table the edges would apply: the one
        ``tailor.table.compile_table`` builds, with the edge rules of ``env.archive`` -- what the
        manager publishes before its guardrails.

        The simulator's online mode passes ``compile=False`` between tables to skip compilation.
        """
        from tailor.table import compile_table

        self._plan(now)
        self._epoch += 1
        if not compile:
            return None
        return compile_table(self, now, self._epoch, self.env.archive)

    def _plan(self, now: float) -> None:
        """Heavy model updates: refit classes, retrain trees (override)."""

    def table_groups(self) -> dict[str, dict[int, float]]:
        """For decision tables: group id -> {config index: probability}.

        The default publishes one group holding the default configuration; learners override it.
        """
        return {"default": {self.space.default_index: 1.0}}

    def table_rules(self) -> list[dict]:
        """Rules mapping prefixes (and optionally SNI / device) to the groups of ``table_groups``."""
        return []

    @property
    def violations(self) -> int:
        return self._violations


POLICIES: dict[str, Callable[..., Policy]] = {}


def register(name: str):
    """Class decorator: make a policy constructible by name (``make_policy``)."""

    def wrap(cls):
        cls.name = name
        POLICIES[name] = cls
        return cls

    return wrap


def make_policy(name: str, **params: Any) -> Policy:
    if name not in POLICIES:
        raise ParameterError(f"The 'policies' parameter must name registered policies {sorted(POLICIES)}. Got {name!r}.")
    return POLICIES[name](**params)


def parse_policy_params(items: list[str], program: str = "tailor") -> tuple[tuple[str, object], ...]:
    """``--policy-param`` items of ``program`` (tailor manager, tailor evaluate): ``["epsilon=0.3", "classes=4"]``
    -> ``(("epsilon", 0.3), ("classes", 4))`` (int, float, bool or text)."""
    out = []
    for item in items:
        key, eq, text = item.partition("=")
        check(bool(eq) and key.strip().isidentifier(), program, "policy-param", "KEY=VALUE", item)
        value: object = text.strip()
        for cast in (int, float):
            try:
                value = cast(text)
                break
            except ValueError:
                pass
        else:
            value = {"true": True, "false": False}.get(text.strip().lower(), value)
        out.append((key.strip(), value))
    return tuple(out)
