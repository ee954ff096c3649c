"""The manager without HTTP: learned state, the update cycle, publication, overrides, persistence.

One update cycle (every ``update_freq_s``, or on demand):
write the queued telemetry to the store -> feed the rows after the watermark to the policy, the
prefix archive and the guardrail statistics (:mod:`tailor.manager.feed`) -> rollback tests ->
``policy.plan(now)`` -> guardrails -> publish when the table changed (new version, audit entry) ->
retention -> snapshot of the learned state (atomic). The API calls :meth:`Manager.ingest` and reads
:attr:`Manager.current`; the demo (agent/edge in namespaces) plugs in through the same HTTP API.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from tailor.errors import ParameterError
from tailor.grouping import PrefixArchive
from tailor.manager import publish as pub
from tailor.manager.config import ManagerConfig
from tailor.manager.feed import Feeder
from tailor.manager.guardrails import GuardConfig, GuardState, apply_guardrails, check_rollbacks
from tailor.manager.ingest import IngestQueue, IngestResult, ingest
from tailor.manager.logs import log
from tailor.manager.metrics import Metrics
from tailor.manager.store import Store
from tailor.policies import PolicyEnv, make_policy
from tailor.sim.simulator import ARCHIVE_ALPHA
from tailor.space import AllowedConfig, ConfigSpace

STATE_FORMAT = 1


@dataclass
class CycleSummary:
    version: int
    published: bool
    rows: int
    observed: int
    groups: int
    rollbacks: int
    deleted: int
    duration_s: float
    improvement: float
    window_improvement: float


class Manager:
    def __init__(self, cfg: ManagerConfig, clock=time.time):
        self.cfg, self.clock = cfg, clock
        self.store = Store(cfg.data_dir)
        self.metrics = Metrics()
        self.queue = IngestQueue(cfg.queue_records)
        self.space = ConfigSpace.named(cfg.space, AllowedConfig.parse(cfg.allowed))
        self.guard_cfg = GuardConfig(AllowedConfig.parse(cfg.allowed), cfg.holdback, cfg.explore_budget,
                                     cfg.rollback_alpha, min_improvement=cfg.min_improvement)
        self.knobs = {c.id: dict(c.changes()) for c in self.space.configs}
        self._cycle_lock, self._write_lock = threading.Lock(), threading.Lock()
        self.notifier = pub.Notifier()
        self._restore()
        self.feeder = Feeder(self.policy, self.archive, self.guard)
        self.current = self._load_or_create_table()
        self.feeder.policy_groups = {g["id"] for g in self.current.doc["groups"]}

    # -- state
    def _signature(self) -> dict:
        sig = {"policy": self.cfg.policy, "space": self.cfg.space, "allowed": str(self.guard_cfg.allowed)}
        if self.cfg.policy_params:  # only when set, so state written before this option still loads
            sig["params"] = [list(kv) for kv in self.cfg.policy_params]
        return sig

    def _restore(self) -> None:
        state = self.store.load_state()
        if state is None:
            self.archive = PrefixArchive(ARCHIVE_ALPHA)
            env = PolicyEnv(archive=self.archive, update_period_s=self.cfg.update_freq_s or 300.0)
            params = dict(self.cfg.policy_params)
            self.policy = make_policy(self.cfg.policy, seed=self.cfg.seed, holdback=0.0, **params).reset(self.space, env)
            self.guard, self.fed_seq, self.override_until = GuardState(), 0, None
        else:
            if state.get("signature") != self._signature():
                raise ParameterError(f"The 'data' parameter of tailor manager holds state learned with "
                                     f"{state.get('signature')}; start with those options or a fresh --data. "
                                     f"Got {self._signature()}.")
            self.policy, self.archive, self.guard = state["policy"], state["archive"], state["guard"]
            self.fed_seq, self.override_until = state["fed_seq"], state["override_until"]
        self.written_seq = max(self.store.max_seq(), self.fed_seq)
        log("manager.state", restored=state is not None, fed_seq=self.fed_seq, policy=self.cfg.policy)

    def snapshot(self) -> None:
        self.store.save_state({"format": STATE_FORMAT, "signature": self._signature(), "policy": self.policy,
                               "archive": self.archive, "guard": self.guard, "fed_seq": self.fed_seq,
                               "override_until": self.override_until})

    def _load_or_create_table(self) -> pub.Published:
        latest = self.store.latest_table()
        if latest is not None:
            doc, origin = latest
            return pub.Published.of(doc, origin)
        now = self.clock()
        self.policy.plan(now, compile=False)
        table, _ = apply_guardrails(pub.compile_fast(self.policy, now, self.archive), self.guard, self.guard_cfg, self.knobs)
        self.current = None
        published = self._publish(table, "policy", "manager", "publish", "initial table", now)
        self.snapshot()
        return published

    # -- ingestion
    def ingest(self, body: bytes) -> IngestResult:
        return ingest(body, self.queue, self.metrics, self.clock())

    def flush(self) -> int:
        """Write queued telemetry to the store; returns the number of records written."""
        with self._write_lock:
            items = self.queue.drain()
            if not items:
                return 0
            last = self.store.insert_telemetry(items, self.written_seq)
            n, self.written_seq = last - self.written_seq, last
        self.metrics.stored.inc(n)
        self.metrics.queue.set(len(self.queue))
        return n

    # -- publication
    def _publish(self, table: dict, origin: str, actor: str, action: str, reason: str, now: float) -> pub.Published:
        version = (self.current.version if self.current else 0) + 1
        doc = dict(table, version=version, generated_at=float(now), valid_for_s=self.cfg.valid_for_s)
        published = pub.Published.of(doc, origin)
        self.store.save_table(doc, origin, published.etag, now, actor, action, reason)
        self.current = published
        self.metrics.version.set(version)
        self.metrics.groups.set(len(doc["groups"]))
        self.notifier.notify()
        log("table.published", version=version, origin=origin, groups=len(doc["groups"]),
            rules=len(doc["rules"]), reason=reason)
        return published

    def override(self, doc: dict, actor: str, reason: str, hold_s: float = 0.0) -> pub.Published:
        """Operator table: validated (TableError names the field), AllowedConfig-checked, pinned."""
        table = pub.check_operator_table(doc, self.guard_cfg)
        with self._cycle_lock:
            now = self.clock()
            self.override_until = now + hold_s if hold_s > 0 else math.inf
            published = self._publish(table, "operator", actor, "override", reason or "operator override", now)
            self.snapshot()
        return published

    def clear_override(self, actor: str, reason: str) -> None:
        with self._cycle_lock:
            self.override_until = None
            self.store.audit(self.clock(), self.current.version, actor, "release", reason or "override released")
            self.snapshot()

    def override_active(self, now: float) -> bool:
        return self.override_until is not None and now < self.override_until

    # -- the update cycle
    def run_cycle(self, now: float | None = None) -> CycleSummary:
        with self._cycle_lock:
            return self._cycle(self.clock() if now is None else now)

    def _cycle(self, now: float) -> CycleSummary:
        started = time.perf_counter()
        self.flush()
        rows = self.store.feed_rows(self.fed_seq, self.written_seq)
        report = self.feeder.feed(rows, self.current.resolver())
        self.fed_seq = max(self.fed_seq, report.last_seq)
        events = check_rollbacks(self.guard, self.guard_cfg, self.current.doc["default"])
        self.policy.plan(now, compile=False)
        planned = pub.compile_fast(self.policy, now, self.archive)
        self.feeder.policy_groups = {g["id"] for g in planned["groups"]}
        table, notes = apply_guardrails(planned, self.guard, self.guard_cfg, self.knobs)
        published = self._maybe_publish(table, notes, events, now)
        deleted = self.store.delete_before(now - self.cfg.retention_days * 86400.0)
        self.store.save_prefixes(self.archive)
        duration = time.perf_counter() - started
        summary = self._summarize(report, published, len(events), deleted, duration)
        self._record(now, summary, report)
        self.snapshot()
        log("cycle", **summary.__dict__)
        return summary

    def _maybe_publish(self, table: dict, notes: list[str], events: list[dict], now: float) -> bool:
        for e in events:
            self.metrics.rollbacks.inc()
            self.store.audit(now, self.current.version, "guardrail", "rollback", f"{e['group']}: {e['reason']}")
            log("rollback", **e)
        if self.override_active(now):
            return False
        if self.override_until is not None:  # a timed override expired
            self.override_until = None
            self.store.audit(now, self.current.version, "manager", "release", "override hold expired")
        if pub.content_key(table) == self.current.key:
            return False
        reason = "; ".join(notes[:20]) or "policy update"
        self._publish(table, "policy", "manager", "publish", reason, now)
        return True

    def _summarize(self, report, published: bool, rollbacks: int, deleted: int, duration: float) -> CycleSummary:
        treated, hold = self._overall()
        return CycleSummary(self.current.version, published, report.rows, report.observed,
                            len(self.current.doc["groups"]), rollbacks, deleted, duration,
                            1.0 - treated.ratio_to(hold), report.improvement)

    def _overall(self):
        from tailor.manager.sequential import LogStats

        treated, hold = LogStats(), LogStats()
        for g in set(self.guard.treated) | set(self.guard.holdback):
            treated = treated.merge(self.guard.pooled(g))
            hold = hold.merge(self.guard.holdback.get(g, LogStats()))
        return treated, hold

    def _record(self, now: float, s: CycleSummary, report) -> None:
        m = self.metrics
        m.cycle.observe(s.duration_s)
        m.rate.set(report.rows / max(self.cfg.update_freq_s, s.duration_s, 1e-3))
        for gauge, value in ((m.improvement, s.improvement), (m.window_improvement, s.window_improvement)):
            if not math.isnan(value):
                gauge.set(value)
        self.store.record_cycle((now, s.version, s.duration_s, s.rows, s.groups, _nan_none(s.improvement),
                                 _nan_none(s.window_improvement), report.treated.n, report.holdback.n),
                                pub.group_rows(self.current.doc, self.guard, now))

    def close(self) -> None:
        with self._cycle_lock:
            self.flush()
            self.snapshot()
            self.store.close()


def _nan_none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x

