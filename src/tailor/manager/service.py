"""The manager without HTTP: learned state, the update cycle, publication, overrides, persistence.

One update cycle (every ``update_freq_s``, or on demand):
write the queued telemetry to the store -> feed the rows after the watermark to the policy, the
prefix archive and the guardrail statistics (:mod:`tailor.manager.feed`) -> rollback tests (of the policy's
incumbents, and under an operator's override of the table edges serve: :meth:`Manager._watch_override`) ->
``policy.plan(now)`` -> guardrails -> publish when the table changed (new version, audit entry) ->
retention -> snapshot of the learned state (atomic). The API calls :meth:`Manager.ingest` and reads
:attr:`Manager.current`; the demo (agent/edge in namespaces) plugs in through the same HTTP API.
"""

from __future__ import annotations

import logging
import math
import pickle
import secrets
import threading
import time
from dataclasses import dataclass

from tailor.enrich import Enricher
from tailor.errors import ParameterError, TableError
from tailor.grouping import PrefixArchive
from tailor.manager import publish as pub
from tailor.manager.config import ManagerConfig
from tailor.manager.feed import Feeder, SiteFilter
from tailor.manager.guardrails import (GuardConfig, GuardState, apply_guardrails, check_override, check_rollbacks,
                                       move_to_default)
from tailor.manager.ingest import IngestQueue, IngestResult, ingest
from tailor.manager.logs import log
from tailor.manager.metrics import Metrics
from tailor.manager.signing import Signer
from tailor.manager.store import Store
from tailor.policies import PolicyEnv, make_policy
from tailor.sim.simulator import ARCHIVE_ALPHA
from tailor.space import AllowedConfig, ConfigSpace
from tailor.table import compile_table, validate_table

STATE_FORMAT = 1
MAX_EDGES = 10_000  # distinct telemetry sources tracked for the applied-version report
QUARANTINE_AFTER = 3  # consecutive failed cycles from the same watermark before the first one's span is skipped
LOCAL = object()  # Manager(state=LOCAL): the learned state of <data>/state.pkl (the single-machine mode)


class CycleError(RuntimeError):
    """An update cycle failed; the message names the cause (the published table is unchanged)."""


@dataclass
class Health:
    """What /healthz reports beyond liveness: failed cycles, quarantined records (store errors live in Store)."""

    cycle_error: str | None = None
    consecutive_failures: int = 0
    failed_span: tuple[int, int] | None = None
    quarantined: int = 0
    cycles_failed: int = 0

    def cycle_failed(self, error: str, span: tuple[int, int]) -> int:
        """Count a failed cycle over the telemetry ``span`` (fed_seq, written_seq). Failures from the same start are
        consecutive even when new telemetry has arrived in between (live traffic moves the span's end every cycle:
        counting only identical spans, as until 2026-12-06, never reached the quarantine); ``failed_span`` keeps
        the first of them, the span every one of those cycles failed on."""
        self.cycles_failed += 1
        if self.failed_span is not None and span[0] == self.failed_span[0]:
            self.consecutive_failures += 1
        else:
            self.consecutive_failures, self.failed_span = 1, span
        self.cycle_error = error
        return self.consecutive_failures

    def cycle_ok(self) -> None:
        self.cycle_error, self.consecutive_failures, self.failed_span = None, 0, None


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
    def __init__(self, cfg: ManagerConfig, clock=time.time, state=LOCAL):
        """``state``: LOCAL (the data directory's), or the learned state to start from (a dict as pickled by
        :meth:`_state_bytes`, None for a fresh one), as a bus partition worker does (tailor.bus.shard); then the
        telemetry already in the local store counts as fed (it is in that state, or JetStream redelivers it)."""
        self.cfg, self.clock = cfg, clock
        self._given_state = state
        self.version_floor = 0  # a published version is above this (a bus takeover continues the partition's versions)
        self.enricher = Enricher(cfg.geoip_asn, cfg.geoip_region)  # first: a bad database file stops the start
        self.store = Store(cfg.data_dir)
        self.metrics = Metrics()
        self.queue = IngestQueue(cfg.queue_records)
        self.space = ConfigSpace.named(cfg.space, AllowedConfig.parse(cfg.allowed))
        self.guard_cfg = GuardConfig(AllowedConfig.parse(cfg.allowed), cfg.holdback, cfg.explore_budget,
                                     cfg.rollback_alpha, min_improvement=cfg.min_improvement)
        self.knobs = {c.id: dict(c.changes()) for c in self.space.configs}
        self._cycle_lock, self._write_lock = threading.Lock(), threading.Lock()
        self.health = Health()
        self.signer = Signer.for_data_dir(cfg.data_dir, cfg.signing_key)
        self._signed: tuple[str, dict] | None = None
        self.edge_versions: dict[str, tuple[int, float]] = {}  # source -> (table version, last seen)
        self.edges_untracked = 0
        self.notifier = pub.Notifier()
        self._published_wall = time.time()  # a publication resets it; after a restart, edges get a grace period
        self._restore()
        # the override's own tables stay above its first version (the watch tells records decided before it by their
        # version) even when the store's tables are gone: a recreated database, a takeover without the envelope
        self.version_floor = max(self.version_floor, self.override_version or 0)
        self.feeder = Feeder(self.policy, self.archive, self.guard, self.sites, self.enricher, self._override_watch)
        if self.enricher.configured:
            log("enrich.databases", **self.enricher.describe())
        self.current = self._load_or_create_table()
        self._set_policy_table()
        self._good_state = self._state_bytes()  # what a failed cycle rolls back to

    # -- state
    def _signature(self) -> dict:
        sig = {"policy": self.cfg.policy, "space": self.cfg.space, "allowed": str(self.guard_cfg.allowed)}
        if self.cfg.policy_params:  # only when set, so state written before this option still loads
            sig["params"] = [list(kv) for kv in self.cfg.policy_params]
        return sig

    def _restore(self) -> None:
        given = self._given_state is not LOCAL
        state = self._given_state if given else self.store.load_state()
        self._given_state = None
        if state is None:
            self.archive = PrefixArchive(ARCHIVE_ALPHA)
            env = PolicyEnv(archive=self.archive, update_period_s=self.cfg.update_freq_s or 300.0,
                            cohort_salt=self.cfg.cohort_salt or secrets.token_hex(16))  # kept in the policy's state across restarts
            params = dict(self.cfg.policy_params)
            self.policy = make_policy(self.cfg.policy, seed=self.cfg.seed, holdback=0.0, **params).reset(self.space, env)
            self.guard, self.fed_seq, self.override_until = GuardState(), 0, None
            self.override_findings, self.override_base, self.override_version = [], None, None
            self.sites, self._policy_choices = self._new_sites(), None
        else:
            if state.get("signature") != self._signature():
                raise ParameterError(f"The 'data' parameter of tailor manager holds state learned with "
                                     f"{state.get('signature')}; start with those options or a fresh --data. "
                                     f"Got {self._signature()}.")
            self._adopt(state)
            if self.cfg.cohort_salt and self.cfg.cohort_salt != self.policy.cohort_salt:
                self.policy.cohort_salt = self.cfg.cohort_salt  # rotation: every client's cohort is drawn afresh
                log("cohort.rotated", logging.WARNING)
        if given:
            self.fed_seq = self.store.max_seq()
        self.written_seq = max(self.store.max_seq(), self.fed_seq)
        log("manager.state", restored=state is not None, fed_seq=self.fed_seq, policy=self.cfg.policy)

    def _new_sites(self) -> SiteFilter:
        return SiteFilter(self.cfg.sites, self.cfg.site_min_records, self.cfg.max_sites)

    def _state_bytes(self) -> bytes:
        return pickle.dumps({"format": STATE_FORMAT, "signature": self._signature(), "policy": self.policy,
                             "archive": self.archive, "guard": self.guard, "fed_seq": self.fed_seq,
                             "override_until": self.override_until, "override_findings": self.override_findings,
                             "override_base": self.override_base, "override_version": self.override_version,
                             "sites": self.sites,
                             "policy_choices": self.feeder.policy_choices},
                            protocol=pickle.HIGHEST_PROTOCOL)

    def snapshot(self) -> None:
        data = self._state_bytes()
        self._good_state = data  # what a failed cycle rolls back to, even when the disk write below fails
        self.store.save_state_bytes(data)

    def _adopt(self, state: dict) -> None:
        self.policy, self.archive, self.guard = state["policy"], state["archive"], state["guard"]
        self.fed_seq, self.override_until = state["fed_seq"], state["override_until"]
        self.override_findings = state.get("override_findings") or []  # state written before 2026-12-07 has none
        # the guardrails' evidence when the override began (None in state written before 2026-12-07: all evidence)
        self.override_base = state.get("override_base")
        # the override's first table version (None in state written before 2026-12-07, evening: records decided
        # under an earlier table but stored after the override began count as its evidence, as they did)
        self.override_version = state.get("override_version")
        self.sites = state.get("sites") or self._new_sites()  # state written before SNI admission has none
        self._policy_choices = state.get("policy_choices")  # state written before 2026-12-06 has none

    def _set_policy_table(self) -> None:
        """The feeder's view of the policy's own table (before the guardrails), as the last good state had it: a
        record that the guardrails served instead (stickiness, a rollback) is fed as ``served``, not charged to the
        policy. Until 2026-12-06 a restart and a failed cycle's rollback gave the feeder the published table (after
        the guardrails), so for a cycle such records were fed as the policy's own decisions. A state without it
        (written before, or fresh) falls back to the published table."""
        if self._policy_choices is not None:
            self.feeder.policy_choices = {g: set(c) for g, c in self._policy_choices.items()}
        else:
            self.feeder.set_policy_table(self.current.doc)

    def _rollback_state(self) -> None:
        """Back to the learned state of the last good snapshot (a failed cycle may have half-fed the policy). The
        override's findings stay: they were audited and counted, and the table an ``apply`` published stays too."""
        findings = self.override_findings
        self._adopt(pickle.loads(self._good_state))
        self.override_findings = findings
        self.feeder = Feeder(self.policy, self.archive, self.guard, self.sites, self.enricher, self._override_watch)
        self._set_policy_table()

    def _load_or_create_table(self) -> pub.Published:
        latest = self.store.latest_table()
        if latest is not None:
            doc, origin = latest
            return pub.Published.of(doc, origin)
        now = self.clock()
        self.policy.plan(now, compile=False)
        planned = compile_table(self.policy, now, 1, self.archive, self.feeder.place_of)
        self.feeder.set_policy_table(planned)
        self._policy_choices = self.feeder.policy_choices
        table, _ = apply_guardrails(planned, self.guard, self.guard_cfg, self.knobs)
        self.current = None
        published = self._publish(table, "policy", "manager", "publish", "initial table", now)
        self.snapshot()
        return published

    # -- ingestion
    def ingest(self, body: bytes) -> IngestResult:
        """Validate and queue a batch, then return only once it is durable (202) or its write failed (503)."""
        result = ingest(body, self.queue, self.metrics, self.clock())
        ticket = result.ticket
        if ticket is None:
            return result
        deadline = time.monotonic() + self.cfg.ack_timeout_s
        while not ticket.done.is_set():  # group commit: the first waiter to get the lock writes for all
            left = deadline - time.monotonic()
            if left <= 0 or not self._write_lock.acquire(timeout=left):
                break
            try:
                if not ticket.done.is_set():
                    self._flush_locked()
            finally:
                self._write_lock.release()
        m = self.metrics
        if ticket.ok:
            self._saw_edge(result.source, result.table_version)
            m.records.inc(result.accepted)
            m.edge_dropped.inc(result.edge_dropped)
            m.batches.labels("partial" if result.rejected else "accepted").inc()
            return result
        m.batches.labels("write_failed").inc()
        error = ticket.error or f"not written within {self.cfg.ack_timeout_s:g} s (still queued; resending may duplicate)"
        result.status, result.dropped, result.accepted = 503, result.accepted, 0
        result.reasons = [f"store: {error}"] + result.reasons
        return result

    def _saw_edge(self, source: str | None, version: int | None) -> None:
        if source is None or version is None:
            return
        if source not in self.edge_versions and len(self.edge_versions) >= MAX_EDGES:
            self.edges_untracked += 1
            return
        old = self.edge_versions.get(source)
        self.edge_versions[source] = (max(version, old[0]) if old else version, time.time())

    def edges_report(self, now: float | None = None) -> dict:
        """Per table version, the edges (telemetry sources seen in the last ``window``) running it."""
        now = time.time() if now is None else now
        window = max(300.0, 3 * self.cfg.update_freq_s)
        # a copy: ingest threads add sources while this runs (iterating the dict itself raised "changed size")
        active = {s: v for s, (v, seen) in self.edge_versions.copy().items() if now - seen <= window}
        by_version: dict[int, int] = {}
        for v in active.values():
            by_version[v] = by_version.get(v, 0) + 1
        cur = self.current.version
        age = now - self._published_wall
        on_current = sum(n for v, n in by_version.items() if v >= cur)
        alert = None
        if active and age > self.cfg.apply_grace_s and on_current == 0:
            alert = (f"table version {cur} published {age:.0f} s ago is applied by 0 of {len(active)} active edges "
                     f"(they report {sorted(by_version)})")
        return {"current_version": cur, "published_s_ago": round(age, 1), "active_edges": len(active),
                "on_current": on_current, "by_version": {str(v): n for v, n in sorted(by_version.items())},
                "untracked_sources": self.edges_untracked, "window_s": window, "alert": alert}

    def signature(self, published: pub.Published) -> dict:
        """Signature headers of a published table's body (computed once per version)."""
        if self._signed is None or self._signed[0] != published.etag:
            self._signed = (published.etag, self.signer.sign(published.body))
        return self._signed[1]

    def flush(self) -> int:
        """Write queued telemetry to the store; returns the number of records written."""
        with self._write_lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        items = self.queue.drain()
        if not items:
            return 0
        n = 0
        try:  # one transaction for everything queued (group commit)
            n = self._insert(items)
        except Exception as err:  # StoreError, or anything unforeseen: no waiter may be left unsettled
            if len(items) == 1:
                self._failed(items, str(err))
            else:  # isolate the batch the store refuses; the others are written
                for item in items:
                    try:
                        n += self._insert([item])
                    except Exception as one:
                        self._failed([item], str(one))
        self.metrics.queue.set(len(self.queue))
        return n

    def _insert(self, items) -> int:
        last = self.store.insert_telemetry([(s, t, r) for s, t, r, _ in items], self.written_seq)
        n, self.written_seq = last - self.written_seq, last
        for *_, ticket in items:
            ticket.settle(True)
        self.metrics.stored.inc(n)
        return n

    def _failed(self, items, error: str) -> None:
        for _, _, records, ticket in items:
            self.metrics.write_failed.inc(len(records))
            ticket.settle(False, error)

    # -- publication
    def _publish(self, table: dict, origin: str, actor: str, action: str, reason: str, now: float) -> pub.Published:
        version = max(self.current.version if self.current else 0, self.version_floor) + 1
        doc = dict(table, version=version, generated_at=float(now), valid_for_s=self.cfg.valid_for_s)
        validate_table(doc)  # in full, schema included: never publish what an edge would refuse
        published = pub.Published.of(doc, origin)
        if len(published.body) > pub.MAX_TABLE_BYTES:
            raise TableError(f"decision table of {len(published.body)} bytes is over the edges' limit of "
                             f"{pub.MAX_TABLE_BYTES} bytes (lower --max-rules)")
        self.store.save_table(doc, origin, published.etag, now, actor, action, reason)
        self.current = published
        self._published_wall = time.time()
        self.metrics.version.set(version)
        self.metrics.groups.set(len(doc["groups"]))
        self.notifier.notify()
        log("table.published", version=version, origin=origin, groups=len(doc["groups"]),
            rules=len(doc["rules"]), reason=reason)
        return published

    def override(self, doc: dict, actor: str, reason: str, hold_s: float = 0.0) -> pub.Published:
        """Operator table: validated (TableError names the field), AllowedConfig-checked, pinned."""
        table = pub.check_operator_table(doc, self.guard_cfg)
        salt = self.policy.cohort_salt  # None only in a policy pickled before cohorts existed: the table's own
        if salt is not None:
            if table.get("salt", salt) != salt:  # holdback membership is the manager's; rotation is --cohort-salt's
                raise TableError(f"decision table field salt: an override keeps the manager's cohort salt (leave it "
                                 f"out or give {salt}); rotate it with --cohort-salt")
            table["salt"] = salt  # until 2026-12-07 an override without one re-drew every client (found by review)
        with self._cycle_lock:
            now = self.clock()
            base = self.guard.copy()  # a new override is watched afresh, on the evidence gathered from now on
            published = self._publish(table, "operator", actor, "override", reason or "operator override", now)
            # only once it is published: until 2026-12-07 (evening) a publication that failed (a full disk, a table
            # over MAX_TABLE_BYTES) left the manager pinned for good to the policy's table (found by review)
            self.override_until = now + hold_s if hold_s > 0 else math.inf
            self.override_findings, self.override_base, self.override_version = [], base, published.version
            self.snapshot()
        return published

    def republish(self, floor: int, reason: str) -> pub.Published:
        """The current table again under a version above ``floor`` (a bus takeover: the partition's previous
        owner published versions up to ``floor``)."""
        with self._cycle_lock:
            self.version_floor = max(self.version_floor, floor)
            published = self._publish(self.current.doc, self.current.origin, "manager", "publish", reason, self.clock())
            self.snapshot()
        return published

    def adopt(self, doc: dict, floor: int, reason: str) -> pub.Published:
        """Publish ``doc``'s content under a version above ``floor``: a bus takeover adopts the partition's table in
        force (the learned state it restores is the previous owner's, and so is that table; this shard's local
        store holds an older one). Validated in full by the publication."""
        with self._cycle_lock:
            self.version_floor = max(self.version_floor, floor)
            now = self.clock()
            origin = "operator" if self.override_active(now) else "policy"
            table = {k: v for k, v in doc.items() if k not in ("version", "generated_at", "valid_for_s")}
            published = self._publish(table, origin, "manager", "publish", reason, now)
            self.snapshot()
        return published

    def clear_override(self, actor: str, reason: str) -> None:
        with self._cycle_lock:
            self.override_until, self.override_findings, self.override_base, self.override_version = None, [], None, None
            self.store.audit(self.clock(), self.current.version, actor, "release", reason or "override released")
            self.snapshot()

    def _override_watch(self):
        """(the override's first table version, the guardrails' evidence when it began) while an override is watched,
        else None: the feeder adds a record decided under an earlier table to that base too, so the override's
        evidence (the guardrails' statistics minus the base) holds only records its own tables decided."""
        if self.override_base is None or self.override_version is None:
            return None
        return self.override_version, self.override_base

    def override_active(self, now: float) -> bool:
        return self.override_until is not None and now < self.override_until

    # -- the update cycle
    def run_cycle(self, now: float | None = None) -> CycleSummary:
        """One update cycle. A failure is isolated: the learned state rolls back to the last good snapshot,
        the published table stays, /healthz and the metrics report it, and the next cycle tries again. When
        ``QUARANTINE_AFTER`` cycles in a row fail from the same watermark, the span the first of them read is skipped
        (counted), so one poisoned record cannot stop learning for good, also while telemetry keeps arriving."""
        with self._cycle_lock:
            self._cycle_upto = self.written_seq  # _cycle moves it to what its flush made durable
            try:
                summary = self._cycle(self.clock() if now is None else now)
            except Exception as err:
                self._cycle_failed(err, self._cycle_upto)
                raise CycleError(f"update cycle failed: {type(err).__name__}: {err}") from err
            self.health.cycle_ok()
            return summary

    def _cycle_failed(self, err: Exception, upto: int) -> None:
        self.metrics.cycle_failures.inc()
        # the span starts where the last good state had fed to: the failed cycle may have moved fed_seq past its
        # rows before it failed (until 2026-12-07 the span started there, so a failure after the feed never counted
        # as consecutive under live traffic and the quarantine never came)
        self._rollback_state()
        span = (self.fed_seq, upto)
        n = self.health.cycle_failed(f"{type(err).__name__}: {str(err)[:300]}", span)
        log("cycle.failed", logging.ERROR, error=str(err)[:300], consecutive=n, fed_seq=self.fed_seq, upto=upto)
        upto = self.health.failed_span[1]  # the quarantine skips the span the first of these failures had
        if n >= QUARANTINE_AFTER and upto > self.fed_seq:
            skipped = self.store.count_between(self.fed_seq, upto)
            self.metrics.quarantined.inc(skipped)
            log("cycle.quarantine", logging.ERROR, after_seq=self.fed_seq, upto_seq=upto, records=skipped)
            self.fed_seq = upto
            self.health.quarantined += skipped
            try:
                self.snapshot()
            except Exception as snap_err:  # e.g. a full disk: the in-memory state moves on regardless
                log("snapshot.failed", logging.ERROR, error=str(snap_err)[:300])

    def _cycle(self, now: float) -> CycleSummary:
        started = time.perf_counter()
        self.flush()
        self._cycle_upto = self.written_seq
        rows = self.store.feed_rows(self.fed_seq, self.written_seq)
        report = self.feeder.feed(rows, self.current.resolver())
        self.fed_seq = max(self.fed_seq, report.last_seq)
        events = check_rollbacks(self.guard, self.guard_cfg, self.current.doc["default"])
        regressions = self._watch_override(now) if self.override_active(now) else []
        self.policy.plan(now, compile=False)
        planned = compile_table(self.policy, now, 1, self.archive, self.feeder.place_of)
        self.feeder.set_policy_table(planned)
        served = dict(self.guard.incumbent)  # the main choices the edges serve (after this cycle's rollbacks)
        table, notes = apply_guardrails(planned, self.guard, self.guard_cfg, self.knobs)
        notes += pub.enforce_budget(table, self.cfg.max_rules)
        published = self._maybe_publish(table, notes, events, now)
        if not published and pub.content_key(table) != self.current.key:
            # held (an override, the OPE gate): stickiness's switches wait for a table that edges serve, and the
            # rollback test keeps watching the incumbents they do serve (until 2026-12-07 the switch stayed)
            self.guard.incumbent = served
        deleted = self.store.delete_before(now - self.cfg.retention_days * 86400.0)
        self.store.save_prefixes(self.archive)
        duration = time.perf_counter() - started
        applied = self.cfg.override_rollback == "apply" and bool(regressions)
        summary = self._summarize(report, published or applied, len(events) + (len(regressions) if applied else 0),
                                  deleted, duration)
        self._record(now, summary, report)
        self.snapshot()
        self.metrics.not_guarded.labels("foreign_config").inc(report.foreign)
        self.metrics.not_guarded.labels("unknown_group").inc(report.unknown_group)
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
            self.override_until, self.override_findings, self.override_base, self.override_version = None, [], None, None
            self.store.audit(now, self.current.version, "manager", "release", "override hold expired")
        if pub.content_key(table) == self.current.key:
            return False
        reason = "; ".join(notes[:20]) or "policy update"
        if self.cfg.ope_gate and not events:  # a rollback is never held back: it removes a configuration proven worse
            publish, why = self._ope_check(table, now)
            if not publish:
                self.store.audit(now, self.current.version, "manager", "ope-gate",
                                 f"ope-gate: kept version {self.current.version}: {why}")
                log("ope_gate.kept", version=self.current.version, reason=why)
                return False
            reason = f"{reason}; ope-gate: {why}"
        self._publish(table, "policy", "manager", "publish", reason, now)
        return True

    def _watch_override(self, now: float) -> list[dict]:
        """The rollback test on the operator's pinned table (:func:`check_override`). Each (group, configuration) it
        finds (any configuration the table serves, on the evidence since the override began: ``override_base``)
        is reported once per override: an audit entry ``override-regression`` (actor ``guardrail``),
        ``tailor_override_regressions_total``, a warning log line, and /healthz while the override stands. With
        ``--override-rollback apply`` the configurations also lose their mass to the default in their groups and the
        table is republished (origin operator, audited ``rollback``), still pinned; by default the table is the
        operator's and stays as it is."""
        doc = self.current.doc
        seen = {(f["group"], f["config"]) for f in self.override_findings}
        found = check_override(doc, self.guard, self.guard_cfg, seen, self.override_base)
        if not found:
            return []
        apply = self.cfg.override_rollback == "apply"
        if apply:  # first: when the publication fails (the cycle fails), nothing is recorded and the next cycle retries
            drop: dict[str, set[str]] = {}
            for e in found:
                drop.setdefault(e["group"], set()).add(e["config"])
            groups = [dict(g, choices=move_to_default(g["choices"], drop[g["id"]], doc["default"]))
                      if g["id"] in drop else g for g in doc["groups"]]
            table = {k: v for k, v in doc.items() if k not in ("version", "generated_at", "valid_for_s")}
            reason = "; ".join(f"{e['group']}: {e['reason']}" for e in found[:20])
            more = f"; and {len(found) - 20} more" if len(found) > 20 else ""
            self._publish(dict(table, groups=groups), "operator", "guardrail", "rollback",
                          f"{reason}{more} (operator's override, still pinned)", now)
        then = ("its mass moved to the default (--override-rollback apply)" if apply
                else "the pinned table serves it unchanged (--override-rollback alert)")
        for e in found:
            e.update(version=doc["version"], at=now, action="apply" if apply else "alert")
            self.override_findings.append(e)
            self.metrics.override_regressions.inc()
            self.store.audit(now, doc["version"], "guardrail", "override-regression", f"{e['reason']}; {then}")
            log("override.regression", logging.WARNING, group=e["group"], config=e["config"], slower=e["slower"],
                n=e["n"], n_holdback=e["n_holdback"], version=doc["version"], action=e["action"])
        return found

    def _ope_check(self, table: dict, now: float) -> tuple[bool, str]:
        """``tailor.ope.ope_gate`` on SNIPS estimates (cluster-robust intervals by client cohort) of the candidate and
        the current table from the telemetry of the last ``ope_window_s`` (records with a logged probability); a
        failure keeps the current table."""
        from tailor.ope import cohort_clusters, ope_gate, table_value
        from tailor.table import DecisionTable

        try:
            logs = ope_logs(self.store, now - self.cfg.ope_window_s)
            if logs is None:
                return True, "no telemetry with a logged probability in the window: published"
            clusters = cohort_clusters(logs.client)  # a client keeps its draws for a table version
            candidate = table_value(DecisionTable(table, validated=True), logs, cluster=clusters)["snips"]
            current = table_value(self.current.resolver(), logs, cluster=clusters)["snips"]
            return ope_gate(candidate, current, self.cfg.ope_tolerance, self.cfg.ope_max_unsupported)
        except Exception as err:  # noqa: BLE001 (the gate fails closed; the cycle and learning go on)
            log("ope_gate.failed", logging.ERROR, error=str(err)[:300])
            return False, f"gate failed: {type(err).__name__}: {str(err)[:200]}"

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

    def health_report(self) -> dict:
        """/healthz: "ok", or "degraded" with the problems (a failed store write, a failed cycle, edges not on the
        current table, an override serving a configuration slower than holdback); ``override_regressions``: what the
        rollback test found in the pinned override table (empty without an override)."""
        problems = []
        if self.store.last_error:
            problems.append(f"store write failing: {self.store.last_error}")
        h = self.health
        if h.cycle_error:
            problems.append(f"update cycle failing ({h.consecutive_failures} in a row): {h.cycle_error}")
        alert = self.edges_report()["alert"]
        if alert:
            problems.append(alert)
        findings = self.override_findings if self.override_active(self.clock()) else []
        served = [f for f in findings if f["action"] == "alert"]
        if served:
            listed = "; ".join(f"{f['config']} in {f['group']} +{100 * f['slower']:.1f}%" for f in served[:5])
            problems.append(f"override table serves {len(served)} group configuration(s) significantly slower than "
                            f"holdback: {listed}{' ...' if len(served) > 5 else ''} (--override-rollback alert; "
                            f"audit 'override-regression')")
        out = {"status": "degraded" if problems else "ok", "version": self.current.version,
               "queue_records": len(self.queue), "store_write_failures": self.store.write_failures,
               "cycles_failed": h.cycles_failed, "quarantined_records": h.quarantined,
               "override_regressions": [_finding(f) for f in findings[:MAX_HEALTH_FINDINGS]]}
        if problems:
            out["problems"] = problems
        return out

    def close(self) -> None:
        with self._cycle_lock:
            self.flush()
            self.snapshot()
            self.store.close()
            self.enricher.close()


OPE_MAX_RECORDS = 100_000  # the gate values tables on at most this many of the window's most recent records
OPE_SQL = """
SELECT coalesce(client_addr, split_part(client_prefix, '/', 1)),
       CASE WHEN alpn = 'h3' THEN NULL ELSE sni END, CASE WHEN alpn = 'h3' THEN NULL ELSE device END,
       config_id, probability,
       CASE WHEN kind = 'pageload' THEN plt_ms WHEN kind = 'response' THEN ttlb_ms
            WHEN alpn IS NULL AND tls_fingerprint IS NULL THEN duration_ms END AS done
FROM telemetry WHERE time >= ? AND probability IS NOT NULL AND done IS NOT NULL AND done > 0
ORDER BY time DESC, seq DESC LIMIT ?
"""
# tailor-edge decides a QUIC connection (alpn h3) on its first Initial packet, from the client address alone
# (edge/internal/edge/quic.go): its record reports the SNI and device learned later, but a table's rules naming
# them never chose its configuration, so the off-policy estimate resolves it as the edge did (until 2026-12-06 it
# resolved it with them: the logged probability was not the one the estimate assumed, found by review)


def ope_logs(store: Store, since: float, limit: int = OPE_MAX_RECORDS):
    """The stored telemetry since ``since`` as :class:`tailor.ope.Logs` (completion time as in the feed, clipped
    to its bounds; client = address, else the prefix's network address; records whose client is not an address
    are left out; a QUIC record without its SNI and device, as the edge decided it), or None when there is none."""
    import ipaddress

    from tailor.manager.feed import BOUNDS
    from tailor.ope import Logs

    rows = store.query(OPE_SQL, [since, limit])
    ok: dict[str, bool] = {}

    def valid(addr) -> bool:
        if addr not in ok:
            try:
                ipaddress.ip_address(addr)
                ok[addr] = True
            except (ValueError, TypeError):
                ok[addr] = False
        return ok[addr]

    rows = [r for r in rows if valid(r[0]) and math.isfinite(r[5])]
    if not rows:
        return None
    client, sni, device, config, prob, done = zip(*rows)
    lo, hi = BOUNDS["done_ms"]
    return Logs(list(client), [x or None for x in sni], [x or None for x in device], list(config), list(prob),
                [min(max(d, lo), hi) for d in done])


MAX_HEALTH_FINDINGS = 20  # /healthz lists at most this many of the override's findings (all are in the audit log)


def _finding(f: dict) -> dict:
    return {"group": f["group"], "config": f["config"], "slower": round(f["slower"], 4), "n": f["n"],
            "n_holdback": f["n_holdback"], "version": f["version"], "action": f["action"]}


def _nan_none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x

