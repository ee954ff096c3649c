"""The manager's guardrails in the simulator (``tailor evaluate --guardrails on``).

The simulator's table mode applies each table a policy compiles; a deployment applies what the
manager publishes instead: the policy's table after :func:`tailor.manager.guardrails.check_rollbacks`
and :func:`tailor.manager.guardrails.apply_guardrails` (AllowedConfig, rollback blocks, stickiness of
the incumbent, exploration budget, holdback floor), with the guardrail statistics fed from every
record as :class:`tailor.manager.feed.Feeder` feeds them. :class:`GuardedTables` is that glue, and
only glue: the functions and state are the manager's own, imported, so an evaluation shows what the
manager would publish.

Order per update cycle, as ``Manager._cycle``: outcomes delivered so far are observed (the
simulator's ``_deliver`` runs before ``_plan``) -> ``check_rollbacks`` -> ``policy.plan`` ->
``apply_guardrails``. :meth:`GuardedTables.plan` runs ``check_rollbacks`` after ``policy.plan``
rather than before; the two touch disjoint state (guard statistics vs. the policy), so the result is
the same.

Not modelled: the manager's initial table at start-up (before the first cycle the simulated edges
apply no table, i.e. the default), its rule budget (``max_rules``, far above simulated table sizes),
and its skipping of unchanged tables (the simulator queues a table every cycle, each with the
policy's own version, so exploration arms are re-drawn every cycle).
"""

from __future__ import annotations

from dataclasses import fields

from tailor.manager.config import ManagerConfig
from tailor.manager.guardrails import GuardConfig, GuardState, apply_guardrails, check_rollbacks
from tailor.space import AllowedConfig, ConfigSpace
from tailor.table import validate_table

# the guardrail settings of a default `tailor manager` (ManagerConfig overrides these GuardConfig fields)
MANAGER_DEFAULTS = {f.name: f.default for f in fields(ManagerConfig)
                    if f.name in ("holdback", "explore_budget", "min_improvement", "rollback_alpha")}


def manager_guard_config(allowed: str = "", holdback: float = MANAGER_DEFAULTS["holdback"],
                         explore_budget: float = MANAGER_DEFAULTS["explore_budget"],
                         rollback_alpha: float = MANAGER_DEFAULTS["rollback_alpha"],
                         min_improvement: float = MANAGER_DEFAULTS["min_improvement"]) -> GuardConfig:
    """The GuardConfig the manager builds from its options (``Manager.__init__``); others: GuardConfig's defaults."""
    return GuardConfig(AllowedConfig.parse(allowed), holdback, explore_budget, rollback_alpha,
                       min_improvement=min_improvement)


class GuardedTables:
    """Guardrail state of one simulated deployment: what the manager's cycle does to each table."""

    def __init__(self, space: ConfigSpace, cfg: GuardConfig):
        self.space, self.cfg = space, cfg
        self.state = GuardState()
        self.knobs = {c.id: dict(c.changes()) for c in space.configs}  # as Manager.knobs
        self._ids = [c.id for c in space.configs]
        self.notes: list[str] = []  # every guardrail note and rollback, prefixed with the simulated time
        self.rollbacks: list[dict] = []  # check_rollbacks events, with "time_s"

    @classmethod
    def of(cls, sim_config, space: ConfigSpace) -> GuardedTables:
        return cls(space, sim_config.guard_config())

    def plan(self, table: dict, now: float) -> tuple[dict, list[str]]:
        """The table the manager would publish for the policy's ``table`` at ``now``, and this cycle's notes."""
        events = check_rollbacks(self.state, self.cfg, table["default"])
        guarded, notes = apply_guardrails(table, self.state, self.cfg, self.knobs)
        validate_table(guarded, schema=False)  # the manager validates before publishing
        notes = [f"rollback {e['group']}: {e['reason']}" for e in events] + notes
        self.rollbacks += [dict(e, time_s=float(now)) for e in events]
        self.notes += [f"t={now:.0f}s {n}" for n in notes]
        return guarded, notes

    def observe(self, table_group: str | None, config: int, completion_ms: float, holdback: bool) -> None:
        """One delivered outcome, as ``Feeder._feed_one`` feeds it: the table's group (for a held-back
        connection the group the table would have given; "default" when no rule matched or no table
        was applied yet), the applied configuration's id, the completion time and the holdback flag."""
        self.state.observe(table_group or "default", self._ids[config], completion_ms, holdback)
