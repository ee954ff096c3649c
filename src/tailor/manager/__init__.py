"""The manager: ingests telemetry, runs the policies' update cycle, enforces guardrails, publishes
decision tables to the edges, and keeps its learned state across restarts (docs/manager.md).

Modules: ``config`` (options), ``fastcheck`` (fast telemetry validation), ``ingest`` (batch semantics,
bounded queue), ``store`` (DuckDB and the state snapshot), ``feed`` (telemetry -> Context/Decision/
Outcome), ``sequential`` and ``guardrails`` (always-valid tests, rollback, stickiness, budgets),
``publish`` (tables, ETags, long-poll), ``service`` (the Manager), ``api`` (FastAPI), ``dashboard``,
``server`` (``tailor manager``).
"""

from tailor.manager.config import ManagerConfig

__all__ = ["ManagerConfig"]
