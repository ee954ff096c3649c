"""One manager shard on the bus (``tailor manager --bus``; docs/bus.md, Managers).

The shard heartbeats ``alive.<id>`` in ``tailor-shards`` every second; its value (JSON, this module's
choice: the contract leaves it open) names the partitions the shard runs (its *claims*) and their table
versions and counters::

    {"shard": "a", "time": 1.7e9, "partitions": [0, 3], "versions": {"0": 4, "3": 2}, "counters": {...}}

Every second it computes the rendezvous owner of every partition among the live shards, stops the workers of
the partitions it lost (final cycle, state, acknowledgements, then the claim goes) and starts a worker for a
partition it won once no other live shard claims it (a clean hand-over: the previous owner's last state is in
the object store before the new owner reads it; a dead owner's claim ends with its heartbeat's TTL). Each
worker holds its partition's lease (``tailor-leases``): every state write is confirmed by a compare-and-set
of the lease before anything is acknowledged, so a shard that was paused past its TTL is fenced.

A :class:`PartitionWorker` runs one :class:`tailor.manager.service.Manager` (``<data>/part-<p>``): it
restores the authenticated state (:mod:`tailor.bus.state`), publishes the table envelope at takeover, pulls
from ``part-<p>``, skips what the state already holds, ingests the rest through ``Manager.ingest`` (records
of another partition refused and counted), and every ``--update-freq``: cycle -> state to the object store ->
acknowledge the folded messages -> envelope when the version changed -> archive summary -> the partition's
acknowledged messages removed from the stream once it is 3/4 full or its oldest message a week old, and only while
its consumer has nothing outstanding (:func:`tailor.bus.setup.trim_acknowledged`; the stream discards nothing itself).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import nats
from nats.js.errors import (APIError, KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError, NoStreamResponseError,
                             NotFoundError, ServiceUnavailableError)

from tailor.bus import pki
from tailor.bus import setup as S
from tailor.bus.partition import owner, partition
from tailor.bus.state import MAX_STATE_BYTES, StateError, Watermark, open_sealed, seal, state_key
from tailor.errors import ParameterError, TableError, TailorError
from tailor.manager.config import ManagerConfig
from tailor.manager.ingest import canonical_prefix
from tailor.manager.logs import log
from tailor.manager.signing import Signer

ENVELOPE_SCHEMA = "tailor.table-envelope/v1"
ARCHIVE_SCHEMA = "tailor.archive-summary/v1"
FETCH_BATCH = 256  # messages per pull request (the consumer's max ack pending, 10,000, bounds what is outstanding)
FETCH_TIMEOUT_S = 0.5
MAX_ARCHIVE_PREFIXES = 5_000  # prefixes in a partition's archive summary (most records first); the rest counted
MAX_HEARTBEAT_BYTES = 256 << 10  # a heartbeat value larger than this is ignored (counted)
SHARD_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
CONNECT_ATTEMPTS = 3  # per server, 1 s apart, at the start
CRASH_ENV = "TAILOR_BUS_CRASH_BEFORE_ACK"  # tests only: "1" exits (137) after the first state write that folds messages
MAX_REPLICAS = 5  # JetStream's largest replica count
# a request the bus did not answer for a moment (no stream leader, no responders, a timeout): retried, not fatal
BUS_TRANSIENT = (TimeoutError, NoStreamResponseError, nats.errors.NoRespondersError, ServiceUnavailableError)
DEFER_LIMIT_S = 60.0  # commits the bus does not answer for longer than this fail the worker (ERROR, released, retaken)
TTL_READ_S = 30.0  # how often a shard reads the heartbeat bucket's TTL again (an operator may change it)
MAX_LEASE_BYTES = 4096  # a lease value larger than this is not read (its state reference is ignored)


@dataclass
class ShardConfig:
    servers: list[str]
    shard_id: str
    data_dir: str
    base: ManagerConfig  # the partitions' settings (data_dir and cohort_salt are replaced per partition)
    user: str | None = None
    password: str | None = None
    partitions: int | None = None  # None: the cluster document's (6 when this shard creates it)
    ack_wait_s: float = S.ACK_WAIT_S  # consumer creation only; tests use a short one (hidden --bus-ack-wait)
    heartbeat_s: float = S.HEARTBEAT_S
    metrics_listen: tuple[str, int] | None = None  # GET /metrics and /healthz on this address (tailor.bus.metrics)
    metrics_tls: tuple[str, str] | None = None  # (certificate chain, key) PEM files: the endpoint serves HTTPS
    replicas: int = 1  # copies of the stream and buckets this shard creates (a JetStream cluster: 3)
    bus_ca: str | None = None  # PEM text of the CA(s) the bus servers' certificates chain to: TLS to the bus (--bus-ca)

    def __post_init__(self):
        if not SHARD_ID_RE.fullmatch(self.shard_id or ""):
            raise ParameterError(f"The 'shard-id' parameter of tailor manager must be 1-64 characters of "
                                 f"[A-Za-z0-9_-]. Got {self.shard_id!r}.")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise ParameterError(f"The 'bus-replicas' parameter of tailor manager must be in [1, {MAX_REPLICAS}]. "
                                 f"Got {self.replicas!r}.")
        for url in self.servers:
            if not re.fullmatch(r"(nats|tls)://[^\s/,]+:\d{1,5}", url):
                raise ParameterError(f"The 'bus' parameter of tailor manager must be nats://HOST:PORT[,nats://...]. "
                                     f"Got {url!r}.")


@dataclass
class Counters:
    messages: int = 0
    duplicates: int = 0  # messages at or below the watermark (already in the state): acknowledged, not ingested
    redelivered: int = 0  # messages delivered again while waiting for their fold: ingested once
    records: int = 0  # records accepted into the partition's store
    refused_partition: int = 0  # records whose client_prefix is in another partition
    rejected: int = 0  # records the ingest validation refused
    invalid_batches: int = 0  # messages refused whole (not JSON, bad header, too large)
    ingest_failed: int = 0  # messages the store could not take (not acknowledged: redelivered)
    cycles: int = 0
    cycles_failed: int = 0
    states_written: int = 0
    envelopes: int = 0
    envelopes_too_large: int = 0
    trimmed: int = 0  # acknowledged messages of the partition removed from the stream (setup.trim_acknowledged)
    trims_failed: int = 0
    trims_deferred: int = 0  # trims due but not run: the consumer had messages delivered and not acknowledged
    trim_races: int = 0  # a pull raced a trim's purge: the consumer was recreated (its messages delivered again)
    fetch_unavailable: int = 0  # pulls the stream did not answer (no leader for a moment): retried
    commits_deferred: int = 0  # state writes the bus did not answer: folded messages kept pending for the next cycle

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def add(self, other: Counters) -> Counters:
        return Counters(**{k: v + getattr(other, k) for k, v in self.__dict__.items()})


def parse_servers(text: str) -> list[str]:
    return [u.strip() for u in text.split(",") if u.strip()]


def envelope(p: int, body: bytes, headers: dict) -> bytes:
    return json.dumps({"schema": ENVELOPE_SCHEMA, "partition": p, "key_id": headers["X-Tailor-Key-Id"],
                       "signature": headers["X-Tailor-Signature"], "body": base64.b64encode(body).decode()},
                      separators=(",", ":")).encode()


def archive_summary(p: int, archive, now: float) -> bytes:
    entries = archive._entries  # read-only use (as Store.save_prefixes)
    ranked = sorted(entries.items(), key=lambda kv: (-kv[1].samples, kv[0]))
    kept = ranked[:MAX_ARCHIVE_PREFIXES]
    doc = {"schema": ARCHIVE_SCHEMA, "partition": p, "time": now, "prefixes_total": len(entries),
           "records": sum(e.samples for e in entries.values()), "truncated": max(0, len(entries) - len(kept)),
           "prefixes": {k: {"goodput_mbps": round(e.goodput_mbps, 4), "loss": round(e.loss, 6),
                            "rtt_ms": round(e.rtt_ms, 3), "records": e.samples} for k, e in kept}}
    return json.dumps(doc, separators=(",", ":")).encode()


async def _bus_error(err: Exception) -> None:
    log("bus.error", logging.WARNING, error=f"{type(err).__name__}: {str(err)[:300]}")


def _bus_event(event: str):
    async def cb() -> None:
        log(event, logging.WARNING if event == "bus.disconnected" else logging.INFO)
    return cb


class Fenced(Exception):
    """Another shard took this partition's lease: this worker must not write, acknowledge or publish again."""


class BusError(TailorError):
    """The bus cannot be used (unreachable, credentials refused)."""


class PartitionWorker:
    def __init__(self, shard: Shard, p: int):
        self.shard, self.p = shard, p
        self.name = S.consumer_name(p)
        self.counters = Counters()
        self.mgr = None
        self.sub = None
        self.watermark = Watermark()
        self.pending: dict[int, object] = {}  # stream seq -> latest delivery: ingested, not yet folded nor acknowledged
        self.ack_wait_s = S.ACK_WAIT_S
        self._progress_at = time.monotonic()
        self.published_version: int | None = None
        self.env_rev: int | None = None  # revision of tailor-tables part.<p> this worker last read or wrote
        self.arch_rev: int | None = None  # revision of tailor-archive part.<p> this worker last read or wrote
        self.lease_rev: int | None = None  # revision of tailor-leases part.<p> this worker last wrote
        self.state_name: str | None = None  # the state object the lease names (the durable state)
        self.fenced = False
        self.deferring = False  # the last due trim was deferred (logged once per episode)
        self.deferred_since: float | None = None  # the first commit of the current run of commits the bus did not answer
        self.archive_due = False  # folds whose archive summary is not written yet
        self.writes = 0  # state objects written by this worker (part of their names: none is ever overwritten)
        self._stop = asyncio.Event()
        self.task: asyncio.Task | None = None

    @property
    def version(self) -> int | None:
        return self.mgr.current.version if self.mgr is not None else None

    # -- takeover
    async def _take_lease(self) -> str | None:
        """Compare-and-set ``part.<p>`` in tailor-leases to this shard; returns the state object it names (the
        durable state; before any lease existed, the pre-lease object ``part.<p>``). A shard that takes it over
        afterwards changes the revision, so this worker's next state confirmation fails: it is fenced."""
        sh, key = self.shard, S.part_key(self.p)
        try:
            entry = await sh.leases.get(key)
            last, raw = entry.revision, entry.value or b""
        except (KeyNotFoundError, KeyDeletedError):
            last, raw = None, None
        named = key if raw is None else None
        if raw is not None:
            try:
                doc = json.loads(raw) if len(raw) <= MAX_LEASE_BYTES else None
            except ValueError:
                doc = None
            named = doc.get("state") if isinstance(doc, dict) else None
            if named is not None and not (isinstance(named, str) and S.is_state_object(self.p, named)):
                log("bus.lease_refused", logging.ERROR, partition=self.p,
                    reason=f"lease field 'state' must name a state object of partition {self.p}", action="starting fresh")
                named = None
        value = self._lease_value(named)
        self.lease_rev = await (sh.leases.create(key, value) if last is None else
                                sh.leases.update(key, value, last=last))
        self.state_name = named
        return named

    def _lease_value(self, state_name: str | None) -> bytes:
        return json.dumps({"shard": self.shard.cfg.shard_id, "state": state_name, "time": time.time()},
                          separators=(",", ":")).encode()

    async def _confirm(self, name: str) -> None:
        """Point the lease at the state object just written, compare-and-set on this worker's revision; raises
        :class:`Fenced` when another shard took the partition meanwhile (nothing is then acknowledged)."""
        sh = self.shard
        try:
            self.lease_rev = await sh.leases.update(S.part_key(self.p), self._lease_value(name), last=self.lease_rev)
        except KeyWrongLastSequenceError:
            # not deleted: after an update whose reply was lost the lease may name it (an orphan otherwise, removed
            # at the next takeover)
            self.fenced = True
            log("bus.fenced", logging.WARNING, partition=self.p, shard=sh.cfg.shard_id, unacknowledged=len(self.pending),
                note="another shard holds the partition: this worker's folds are dropped, their messages redelivered")
            raise Fenced(self.p) from None
        previous, self.state_name = self.state_name, name
        if previous is not None and previous != name:
            try:
                await S.remove_object(sh.js, sh.obj, S.STATE, previous)
            except Exception:  # noqa: BLE001 (an orphan: removed at the next takeover)
                pass

    async def _remove_orphans(self) -> None:
        """State objects of this partition that the lease does not name: writes of a fenced worker, or of a
        worker that died between its write and its confirmation."""
        sh = self.shard
        try:
            infos = await sh.obj.list(ignore_deletes=True)
        except Exception:  # noqa: BLE001 (NotFoundError: no objects; anything else: tried again at the next takeover)
            return
        for info in infos:
            if S.is_state_object(self.p, info.name) and info.name != self.state_name:
                try:
                    await S.remove_object(sh.js, sh.obj, S.STATE, info.name)
                except Exception:  # noqa: BLE001
                    pass

    async def _load_state(self, name: str | None):
        sh = self.shard
        if name is None:
            return None
        try:
            info = await sh.obj.get_info(name)
        except NotFoundError:
            if name != S.part_key(self.p):
                log("bus.state_refused", logging.ERROR, partition=self.p, reason=f"the lease names {name}, not found",
                    action="starting fresh")
            return None
        if (info.size or 0) > MAX_STATE_BYTES:
            log("bus.state_refused", logging.ERROR, partition=self.p, reason=f"object of {info.size} bytes")
            return None
        res = await sh.obj.get(name)
        try:
            header, wm, state = await asyncio.to_thread(open_sealed, sh.state_key, self.p, res.data or b"")
        except StateError as err:
            log("bus.state_refused", logging.ERROR, partition=self.p, reason=str(err), action="starting fresh")
            return None
        except Exception as err:  # noqa: BLE001 (authentic but unreadable, e.g. written by another version)
            log("bus.state_refused", logging.ERROR, partition=self.p, reason=f"{type(err).__name__}: {err}",
                action="starting fresh")
            return None
        self.watermark = wm
        return header, state

    async def _previous_table(self) -> tuple[int, dict | None]:
        """The version of the partition's table in the bus (0 without one) and its envelope (None when unreadable);
        notes the entry's revision, on which this worker's envelope writes are conditional. A failed read (a
        timeout) fails the takeover, which the shard retries: until 2026-12-07 it counted as no table, and the new
        owner published version 1 over version 5 (found by review)."""
        try:
            entry = await self.shard.tables.get(S.part_key(self.p))
        except (KeyNotFoundError, KeyDeletedError, NotFoundError):
            self.env_rev = None
            return 0, None
        self.env_rev = entry.revision
        try:
            env = json.loads(entry.value)
            return int(json.loads(base64.b64decode(env["body"]))["version"]), env
        except Exception as err:  # noqa: BLE001 (an unreadable envelope: versions restart above 0)
            log("bus.envelope_unreadable", logging.ERROR, partition=self.p, error=f"{type(err).__name__}: {err}"[:300])
            return 0, None

    def _bus_table(self, env: dict | None) -> dict | None:
        """The table of the partition's envelope when it is this cluster's (its signature verifies with the shards'
        key) and says something else than the restored manager's own table, else None."""
        from tailor.manager import publish as pub
        from tailor.manager.signing import verify
        from tailor.table import loads_strict

        if env is None or env.get("partition") != self.p:
            return None
        try:
            body = base64.b64decode(env["body"], validate=True)
            if not verify(body, env["signature"], [self.mgr.signer.public]):
                log("bus.envelope_unverified", logging.ERROR, partition=self.p, action="not adopted")
                return None
            doc = loads_strict(body)
        except Exception as err:  # noqa: BLE001 (an unreadable envelope is not adopted)
            log("bus.envelope_unreadable", logging.ERROR, partition=self.p, error=f"{type(err).__name__}: {err}"[:300])
            return None
        return doc if pub.content_key(doc) != self.mgr.current.key else None

    def _new_manager(self, state):
        from tailor.manager.service import Manager

        sh = self.shard
        d = Path(sh.cfg.data_dir) / f"part-{self.p}"
        d.mkdir(parents=True, exist_ok=True)
        cfg = replace(sh.cfg.base, data_dir=str(d), cohort_salt=sh.salt, signing_key=sh.signing_key_path)
        try:
            return Manager(cfg, state=state)
        except ParameterError as err:  # a state learned with other options (policy, space, ...)
            if state is None:
                raise
            log("bus.state_refused", logging.ERROR, partition=self.p, reason=str(err)[:300], action="starting fresh")
            self.watermark = Watermark()
            return Manager(cfg, state=None)

    async def start(self) -> None:
        sh = self.shard
        loaded = await self._load_state(await self._take_lease())
        await self._remove_orphans()
        prev, env = await self._previous_table()
        self.arch_rev = await self._archive_revision()
        self.mgr = await asyncio.to_thread(self._new_manager, loaded[1] if loaded else None)
        if self.mgr.current.version <= prev:
            # the table edges serve is the bus's, the learned state the previous owner's: adopt that table, not this
            # shard's local one of an earlier ownership (served until the next cycle until 2026-12-07; found by review)
            doc = self._bus_table(env)
            adopted = False
            if doc is not None:
                try:
                    await asyncio.to_thread(self.mgr.adopt, doc, prev, "takeover: the partition's table in the bus")
                    adopted = True
                except TableError as err:  # e.g. a rule that today's validation refuses: this shard's own table
                    log("bus.envelope_not_adopted", logging.ERROR, partition=self.p, reason=str(err)[:300])
            if not adopted:
                await asyncio.to_thread(self.mgr.republish, prev, "takeover")
        await self._publish_envelope(force=True)
        # created when missing: a trim that recreated it (setup.trim_acknowledged) may have failed half-way
        info = await S.ensure_consumer(sh.js, self.p, sh.cfg.ack_wait_s)
        self.sub = await sh.js.pull_subscribe_bind(consumer=self.name, stream=S.STREAM)
        self.ack_wait_s = info.config.ack_wait or S.ACK_WAIT_S
        log("bus.takeover", partition=self.p, shard=sh.cfg.shard_id, restored=loaded is not None,
            watermark=self.watermark.floor, folded_above=len(self.watermark.above), previous_version=prev,
            version=self.mgr.current.version)
        self.task = asyncio.create_task(self._run(), name=f"part-{self.p}")

    # -- the loop
    async def _run(self) -> None:
        freq = self.shard.cfg.base.update_freq_s or 10.0
        next_cycle = time.monotonic() + freq
        try:
            while not self._stop.is_set():
                room = S.MAX_ACK_PENDING - len(self.pending)
                if room > 0:
                    try:
                        msgs = await self.sub.fetch(batch=min(FETCH_BATCH, room), timeout=FETCH_TIMEOUT_S)
                    except (nats.errors.TimeoutError, TimeoutError):
                        msgs = []
                    except (NoStreamResponseError, nats.errors.NoRespondersError, ServiceUnavailableError):
                        # the stream has no leader for a moment (a replicated bus electing one after a server's
                        # loss): a pull to retry, not a failed worker. Until 2026-12-07 the worker failed, was
                        # released and taken back, and re-ingested its unacknowledged messages (found by review)
                        self.counters.fetch_unavailable += 1
                        msgs = []
                        await asyncio.sleep(FETCH_TIMEOUT_S)
                    for msg in msgs:
                        await self._handle(msg)
                else:
                    await asyncio.sleep(FETCH_TIMEOUT_S)
                if self.pending and time.monotonic() - self._progress_at > self.ack_wait_s / 3:
                    await self._keep_pending()
                if time.monotonic() >= next_cycle:
                    next_cycle = time.monotonic() + freq
                    try:
                        await self._commit()
                    except BUS_TRANSIENT as err:
                        # the bus did not answer for a moment (a replicated bus electing leaders): what was folded
                        # stays pending and the next cycle writes the state again; an ambiguous lease write shows
                        # there as a changed revision (Fenced). Until 2026-12-07 the worker failed, was released and
                        # taken back, re-ingesting its unacknowledged messages (found by review). For at most
                        # DEFER_LIMIT_S: past it (a state store without quorum), the worker fails as it did, at ERROR
                        now = time.monotonic()
                        self.deferred_since = self.deferred_since if self.deferred_since is not None else now
                        if now - self.deferred_since > DEFER_LIMIT_S:
                            raise
                        self.counters.commits_deferred += 1
                        log("bus.commit_deferred", logging.WARNING, partition=self.p, pending=len(self.pending),
                            error=f"{type(err).__name__}: {str(err)[:200]}")
                    else:
                        self.deferred_since = None
        except asyncio.CancelledError:
            raise
        except Fenced:
            return  # released at the shard's next check
        except Exception as err:  # noqa: BLE001 (logged; the shard restarts the worker at its next check)
            log("bus.worker_failed", logging.ERROR, partition=self.p, error=f"{type(err).__name__}: {str(err)[:300]}")

    async def _keep_pending(self) -> None:
        """A cycle longer than the ack wait: tell JetStream the ingested messages are still being worked on."""
        self._progress_at = time.monotonic()
        for m in self.pending.values():
            await m.in_progress()

    async def _handle(self, msg) -> None:
        c = self.counters
        c.messages += 1
        seq = msg.metadata.sequence.stream
        if seq in self.pending:  # redelivered before its state was written (e.g. a long cycle): ingested once
            c.redelivered += 1
            self.pending[seq] = msg
            return
        if self.watermark.folded(seq):  # in a written state (what is folded but not written is in pending)
            c.duplicates += 1
            await msg.ack()
            return
        if len(msg.data) > S.MAX_MSG_BYTES:
            c.invalid_batches += 1
            log("bus.batch_refused", logging.WARNING, partition=self.p, seq=seq,
                reason=f"message field (root): {len(msg.data)} bytes is over {S.MAX_MSG_BYTES}")
            self.pending[seq] = msg
            return
        try:
            body = self._own_records(msg.data, seq)
            result = await asyncio.to_thread(self.mgr.ingest, body)
        except Exception as err:  # noqa: BLE001 (a batch no retry can help: acknowledged with the next state)
            # until 2026-12-07 the worker died on it, and on every redelivery after its restart (found by review)
            c.invalid_batches += 1
            log("bus.batch_refused", logging.ERROR, partition=self.p, seq=seq,
                reason=f"ingest failed: {type(err).__name__}: {str(err)[:200]}")
            self.pending[seq] = msg
            return
        if result.status == 503:
            c.ingest_failed += 1
            await msg.nak(delay=5)
            return
        if result.status == 400 and not result.accepted:  # acknowledged with the next state: resending cannot help
            # the edge's drop count arrives once on the bus (its sink forgets it with the PubAck), so it is counted
            # with a refused batch too (over HTTP the edge sends it again with its next batch)
            self.mgr.metrics.edge_dropped.inc(result.edge_dropped)
            c.invalid_batches += 1
            log("bus.batch_refused", logging.WARNING, partition=self.p, seq=seq, reasons=result.reasons[:3])
        c.records += result.accepted
        c.rejected += result.rejected
        self.pending[seq] = msg

    def _own_records(self, data: bytes, seq: int) -> bytes:
        """The batch without the records of other partitions (counted); anything unparsable goes to the ingest
        validation as it is (which refuses it with its reason)."""
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return data
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
            return data
        n_parts, kept = self.shard.partitions, []
        for rec in doc["records"]:
            prefix = rec.get("client_prefix") if isinstance(rec, dict) else None
            canon = canonical_prefix(prefix) if isinstance(prefix, str) else None
            if canon is not None and partition(canon, n_parts) != self.p:
                self.counters.refused_partition += 1
                continue
            kept.append(rec)
        if len(kept) == len(doc["records"]):
            return data
        log("bus.records_refused", logging.WARNING, partition=self.p, seq=seq,
            records=len(doc["records"]) - len(kept), reason="client_prefix not in this partition")
        doc["records"] = kept
        return json.dumps(doc).encode()

    async def _commit(self, final: bool = False) -> None:
        """Cycle -> state (object store) -> acknowledgements -> envelope -> archive summary."""
        from tailor.manager.service import CycleError

        c, mgr, sh = self.counters, self.mgr, self.shard
        if self.fenced:
            raise Fenced(self.p)
        folded = list(self.pending.values())
        try:
            summary = await asyncio.to_thread(mgr.run_cycle)
        except CycleError as err:
            c.cycles_failed += 1
            if mgr.fed_seq < mgr.written_seq:  # not folded: acknowledged after a later cycle, or redelivered
                log("bus.cycle_failed", logging.ERROR, partition=self.p, error=str(err)[:300], pending=len(folded))
                return
            summary = None  # the span was quarantined: folded (skipped) for good
        self.pending = {}
        c.cycles += 1
        if folded or c.states_written == 0 or final or (summary and summary.published):
            wm = Watermark(self.watermark.floor, set(self.watermark.above))
            wm.add(m.metadata.sequence.stream for m in folded)
            try:
                info = await sh.js.consumer_info(S.STREAM, self.name)
                wm.advance(info.ack_floor.stream_seq)
                blob = await asyncio.to_thread(seal, sh.state_key, self.p, wm, mgr._good_state)
                self.writes += 1
                name = S.state_object(self.p, self.lease_rev, self.writes)
                await sh.obj.put(name, blob)
                await self._confirm(name)
            except Fenced:
                raise
            except BaseException:
                # folded in memory, not durable: kept pending (acknowledged after the next written state; a
                # redelivery meanwhile is not ingested again)
                self.pending.update({m.metadata.sequence.stream: m for m in folded})
                self.watermark = wm
                raise
            self.watermark = wm
            c.states_written += 1
            if folded and os.environ.get(CRASH_ENV) == "1":  # tests only: a crash between state and acknowledgements
                os._exit(137)
            for m in folded:
                await m.ack()
            await sh.nc.flush()
        await self._publish_envelope()
        # due until written: a summary write the bus did not answer (a deferred commit, its folds already
        # acknowledged) is written at the next cycle, not only at the next fold (until 2026-12-07 it waited for new
        # folds, so after an election the archive could stay short of what was folded; seen in CI)
        self.archive_due = self.archive_due or bool(folded) or final or c.cycles == 1
        if self.archive_due:
            await self._put_archive()
            self.archive_due = False
        if not final:
            await self._trim()
        log("bus.cycle", partition=self.p, shard=sh.cfg.shard_id, version=mgr.current.version,
            folded_messages=len(folded), watermark=self.watermark.floor, records=c.records,
            duplicates=c.duplicates, refused_partition=c.refused_partition, final=final,
            rows=summary.rows if summary else None)

    async def _trim(self) -> None:
        """Remove the partition's acknowledged history when the stream is nearly full or old (discard NEW: a full
        stream refuses publishes, so consumed messages must not fill it). Called between cycles, when this worker
        has nothing pending and fetches nothing (setup.trim_acknowledged relies on it); a trim deferred because the
        consumer has messages outstanding (nak'd, a previous owner's in flight) or a failure is counted and tried
        again after the next cycle."""
        sh, c = self.shard, self.counters
        try:
            t = await S.trim_acknowledged(sh.nc, sh.js, self.p)
        except Exception as err:  # noqa: BLE001 (a timeout, the bus away: the next cycle tries again)
            c.trims_failed += 1
            log("bus.trim_failed", logging.WARNING, partition=self.p, error=f"{type(err).__name__}: {err}"[:300])
            return
        if t.deferred:
            c.trims_deferred += 1
            if not self.deferring:
                log("bus.trim_deferred", partition=self.p, note="the consumer has messages delivered and not "
                    "acknowledged (nak'd, or in flight to an earlier owner): trimmed once they are acknowledged")
            self.deferring = True
            return
        self.deferring = False
        c.trim_races += t.repaired
        if t.removed:
            c.trimmed += t.removed
            log("bus.trimmed", partition=self.p, messages=t.removed, note="acknowledged history removed from the stream")

    async def _publish_envelope(self, force: bool = False) -> None:
        mgr = self.mgr
        if not force and self.published_version == mgr.current.version:
            return
        published = mgr.current
        env = envelope(self.p, published.body, mgr.signature(published))
        if len(env) > self.shard.nc.max_payload - 1024:
            self.counters.envelopes_too_large += 1
            log("bus.envelope_too_large", logging.ERROR, partition=self.p, bytes=len(env),
                max_payload=self.shard.nc.max_payload, version=published.version)
            return
        # conditional on the revision this worker last read or wrote: a worker paused past its lease (a GC pause, a
        # stopped VM) must not overwrite its successor's table when it wakes (it did until 2026-12-07; found by review)
        key = S.part_key(self.p)
        try:
            self.env_rev = await (self.shard.tables.create(key, env) if self.env_rev is None else
                                  self.shard.tables.update(key, env, last=self.env_rev))
        except KeyWrongLastSequenceError as err:
            self.fenced = True
            raise Fenced(self.p) from err
        self.published_version = published.version
        self.counters.envelopes += 1
        log("bus.table_published", partition=self.p, version=published.version, bytes=len(env))

    async def _archive_revision(self) -> int | None:
        """The revision of the partition's archive summary (None without one), on which this worker's summary
        writes are conditional; a failed read fails the takeover, as the envelope's does."""
        try:
            return (await self.shard.archive.get(S.part_key(self.p))).revision
        except (KeyNotFoundError, KeyDeletedError, NotFoundError):
            return None

    async def _put_archive(self) -> None:
        body = await asyncio.to_thread(archive_summary, self.p, self.mgr.archive, time.time())
        if len(body) > self.shard.nc.max_payload - 1024:
            return
        # conditional, as the envelope: a paused owner must not overwrite its successor's summary with its older
        # archive when it wakes (it could until 2026-12-07)
        key, kv = S.part_key(self.p), self.shard.archive
        try:
            self.arch_rev = await (kv.create(key, body) if self.arch_rev is None else
                                   kv.update(key, body, last=self.arch_rev))
        except KeyWrongLastSequenceError as err:
            self.fenced = True
            raise Fenced(self.p) from err

    async def stop(self) -> None:
        """Stop fetching, fold what was ingested (cycle, state, acknowledgements), close the manager."""
        self._stop.set()
        if self.task is not None:
            await self.task
        try:
            if self.mgr is not None and not self.fenced:
                await self._commit(final=True)
        except Fenced:
            pass
        finally:
            if self.sub is not None:
                try:
                    await self.sub.unsubscribe()
                except Exception:  # noqa: BLE001 (connection gone: the server drops the subscription)
                    pass
            if self.mgr is not None:
                await asyncio.to_thread(self.mgr.close)
        log("bus.released", partition=self.p, shard=self.shard.cfg.shard_id, counters=self.counters.as_dict())


class Shard:
    def __init__(self, cfg: ShardConfig):
        self.cfg = cfg
        self.workers: dict[int, PartitionWorker] = {}
        self.claims: set[int] = set()
        self.stopping = asyncio.Event()
        self.heartbeats_ignored = 0
        self.retired = Counters()  # counters of the workers released so far
        # workers being released (out of ``workers``, their counters not yet in ``retired``): counted still, so that
        # the totals never go down (a scrape during a release saw them fall by the worker's counts until 2026-12-07)
        self.releasing: dict[int, PartitionWorker] = {}
        # guards workers / releasing / retired against the metrics endpoint's thread reading them half-moved
        self.counts_lock = threading.Lock()
        self.beat_ok = time.monotonic()  # last heartbeat the bus took
        self.ttl_s = S.HEARTBEAT_TTL_S  # the heartbeat bucket's TTL (read at connect, then every TTL_READ_S)
        self.ttl_read = 0.0  # when it was last read (0: not yet)
        # messages this shard removed from the stream at its start (setup.remove_strays): unacknowledged ones of
        # partitions >= P (the cluster document recreated with fewer partitions: never folded), and those on subjects
        # that are no partition's
        self.stream_removed = {"messages_lost_repartition": 0, "stray_messages_removed": 0}
        key_path = cfg.base.signing_key
        Path(cfg.data_dir).mkdir(parents=True, exist_ok=True)
        if not key_path:  # one key for every partition of this shard; other shards must be given the same one
            Signer.for_data_dir(cfg.data_dir)
            key_path = str(Path(cfg.data_dir) / "signing.key")
            log("bus.signing_key", logging.WARNING, path=key_path,
                note="no --signing-key: every shard of a cluster must sign with the same key")
        self.signing_key_path = key_path
        self.state_key = state_key(Signer.load(key_path).private)

    async def connect(self) -> None:
        cfg = self.cfg
        try:  # a few attempts at the start (one clear error), then reconnect forever once connected
            self.nc = await pki.connect(servers=cfg.servers, user=cfg.user, password=cfg.password,
                                        tls=pki.client_context(cfg.bus_ca) if cfg.bus_ca else None,
                                        name=f"tailor-manager-{cfg.shard_id}", max_reconnect_attempts=CONNECT_ATTEMPTS,
                                        reconnect_time_wait=1, connect_timeout=5, error_cb=_bus_error,
                                        disconnected_cb=_bus_event("bus.disconnected"),
                                        reconnected_cb=_bus_event("bus.reconnected"))
            self.nc.options["max_reconnect_attempts"] = -1
        except Exception as err:  # noqa: BLE001 (no server, refused credentials, ...: one clear error)
            raise BusError(f"tailor manager: cannot connect to the bus {','.join(cfg.servers)}"
                           f"{' as ' + cfg.user if cfg.user else ''}: {type(err).__name__}: {err}") from None
        self.js = self.nc.jetstream()
        try:
            await self._set_up()
        except APIError as err:  # e.g. more replicas than servers: one clear error, not a traceback
            try:
                await self.nc.close()
            except Exception:  # noqa: BLE001
                pass
            raise BusError(f"tailor manager: the bus {','.join(cfg.servers)} refused to set up the stream and "
                           f"buckets ({type(err).__name__}: {err}); --bus-replicas {cfg.replicas} needs a JetStream "
                           f"cluster of at least {cfg.replicas} servers, all running") from None
        log("bus.connected", shard=cfg.shard_id, servers=cfg.servers, partitions=self.partitions,
            cluster_created=self._created)

    async def _set_up(self) -> None:
        """The buckets, the cluster document, the stream and the partitions' consumers (created when missing)."""
        cfg = self.cfg
        buckets = await S.ensure_buckets(self.js, cfg.replicas)
        self.tables, self.archive, self.shards, self.obj = (buckets["tables"], buckets["archive"], buckets["shards"],
                                                            buckets["state"])
        self.leases = buckets["leases"]
        await self.read_ttl()

        async def stream_first(partitions: int) -> None:  # before edges can read P (and publish): the stream takes it
            await S.ensure_stream(self.js, partitions=partitions, widen_only=True, replicas=cfg.replicas)

        doc, self._created = await S.cluster_doc(self.tables, cfg.partitions, before_create=stream_first)
        self.partitions, self.salt = doc["partitions"], doc["salt"]
        # the stream's subjects are the partitions'; what it held on others is removed and counted
        await S.ensure_stream(self.js, partitions=self.partitions, on_removed=self._count_removed, replicas=cfg.replicas)
        await S.ensure_consumers(self.js, self.partitions, cfg.ack_wait_s)

    def _count_removed(self, removed: S.Strays) -> None:
        self.stream_removed["messages_lost_repartition"] += removed.lost
        self.stream_removed["stray_messages_removed"] += removed.other

    def totals(self) -> tuple[Counters, list[tuple[int, PartitionWorker]]]:
        """The shard's counters (its running workers', those being released and those released) and its running
        workers, read consistently (also from the metrics endpoint's thread)."""
        with self.counts_lock:
            workers, parts = list(self.workers.items()), [*self.workers.values(), *self.releasing.values()]
            total = self.retired
        for w in parts:
            total = total.add(w.counters)
        return total, workers

    async def read_ttl(self) -> None:
        """The heartbeat TTL is the bucket's (the first shard created it: 6 s, or 15 s on a replicated bus), so every
        shard releases its partitions, when the bus takes no heartbeat, before the others may take them. Read at
        connect and again every ``TTL_READ_S`` (until 2026-12-07, evening, at connect only: an operator's ``nats
        stream edit`` of the bucket reached a shard only at its restart, and a shard still on a longer TTL than the
        bucket's released its partitions after the others could take them)."""
        ttl = (await self.js.stream_info(f"KV_{S.SHARDS}")).config.max_age
        ttl_s = float(ttl) if ttl else S.HEARTBEAT_TTL_S
        known, self.ttl_read = self.ttl_read > 0.0, time.monotonic()
        if ttl_s == self.ttl_s and known:
            return
        if known:  # lowered, this shard released on the longer one until now: the risky direction
            log("bus.heartbeat_ttl", logging.WARNING if ttl_s < self.ttl_s else logging.INFO, shard=self.cfg.shard_id,
                ttl_s=ttl_s, was_s=self.ttl_s)
        if ttl_s <= 2 * self.cfg.heartbeat_s:
            log("bus.heartbeat_ttl_too_short", logging.ERROR, ttl_s=ttl_s, heartbeat_s=self.cfg.heartbeat_s,
                note=f"the heartbeat bucket {S.SHARDS}'s TTL leaves no time between heartbeats: every check releases "
                     f"this shard's partitions; raise its max_age (nats stream edit)")
        self.ttl_s = ttl_s
        if self.cfg.replicas > 1 and ttl_s < S.REPLICATED_HEARTBEAT_TTL_S:
            log("bus.heartbeat_ttl_short", logging.WARNING, ttl_s=ttl_s, replicas=self.cfg.replicas,
                note=f"the heartbeat bucket {S.SHARDS} (created earlier) has a TTL shorter than a replicated bus's "
                     f"leader elections: an election can make every shard release its partitions; raise its max_age to "
                     f"{S.REPLICATED_HEARTBEAT_TTL_S:g} s with nats stream edit (every shard reads it within "
                     f"{TTL_READ_S:g} s)")

    async def heartbeat(self) -> None:
        total, _ = self.totals()
        doc = {"shard": self.cfg.shard_id, "time": time.time(), "pid": os.getpid(), "partitions": sorted(self.claims),
               "versions": {str(p): w.version for p, w in self.workers.items()},
               "counters": total.as_dict() | self.stream_removed}
        sent = time.monotonic()  # the bus took it after this: its TTL runs out after sent + TTL at the earliest
        await self.shards.put(f"alive.{self.cfg.shard_id}", json.dumps(doc, separators=(",", ":")).encode())
        self.beat_ok = sent

    async def _beat_forever(self) -> None:
        """Heartbeats on their own task: starting many partitions (seconds) never lets the TTL lapse."""
        while not self.stopping.is_set():
            try:
                await self.heartbeat()
            except Exception as err:  # noqa: BLE001 (bus away: the check below releases the partitions in time)
                log("bus.heartbeat_failed", logging.WARNING, error=f"{type(err).__name__}: {err}")
            try:
                await asyncio.wait_for(self.stopping.wait(), self.cfg.heartbeat_s)
            except TimeoutError:
                pass

    async def live(self) -> dict[str, dict]:
        """{shard id: heartbeat document} of the shards whose heartbeat has not expired."""
        keys = await S.kv_keys(self.js, S.SHARDS, "alive.")
        out = {}
        for k in keys:  # all under "alive." (kv_keys filters)
            try:
                entry = await self.shards.get(k)
            except (KeyNotFoundError, KeyDeletedError):
                continue
            value = entry.value or b""
            try:
                doc = json.loads(value) if len(value) <= MAX_HEARTBEAT_BYTES else None
            except ValueError:
                doc = None
            if not isinstance(doc, dict) or not isinstance(doc.get("partitions", []), list):
                # (a "partitions" that is no list raised in rebalance and stopped the shard until 2026-12-07)
                self.heartbeats_ignored += 1
                doc = {}
            out[k[len("alive."):]] = doc
        out[self.cfg.shard_id] = {"partitions": sorted(self.claims)}
        return out

    async def rebalance(self) -> None:
        if time.monotonic() - self.beat_ok > self.ttl_s - 2 * self.cfg.heartbeat_s and self.workers:
            # our heartbeat is about to expire (bus away): the others will take our partitions; stop first
            log("bus.ownership", logging.WARNING, shard=self.cfg.shard_id, lost=sorted(self.workers),
                reason="heartbeat not taken by the bus")
            await asyncio.gather(*(self._release(p) for p in list(self.workers)))
            return
        if time.monotonic() - self.ttl_read > TTL_READ_S:  # after the release check: a bus away delays no release
            try:
                await self.read_ttl()
            except (TimeoutError, nats.errors.Error) as err:  # the bus away: the TTL read last stands
                log("bus.ttl_read_failed", logging.WARNING, error=f"{type(err).__name__}: {err}")
                self.ttl_read = time.monotonic()
        live = await self.live()
        me = self.cfg.shard_id
        claimants: dict[int, list[str]] = {}
        for s, d in live.items():
            if s != me:
                for p in d.get("partitions") or []:
                    if isinstance(p, int):
                        claimants.setdefault(p, []).append(s)
        others_claim = set(claimants)
        gained, lost = [], []
        for p in range(self.partitions):
            mine = owner(p, live) == me
            w = self.workers.get(p)
            if w is not None and w.task is not None and w.task.done() and not self.stopping.is_set():
                lost.append(p)  # a failed worker: released now, started again at the next check
            elif mine and w is None and p not in others_claim:
                gained.append(p)
            elif not mine and w is not None:
                lost.append(p)
            elif w is not None and any(owner(p, [me, s]) != me for s in claimants.get(p, [])):
                lost.append(p)  # two shards started p on different views of the live set: the lighter one yields
        if lost:
            log("bus.ownership", shard=me, lost=lost, live=sorted(live))
            await asyncio.gather(*(self._release(p) for p in lost))
            await self.heartbeat()
        if gained:
            log("bus.ownership", shard=me, gained=gained, live=sorted(live))
            self.claims.update(gained)
            await self.heartbeat()  # claim first: no other shard starts these partitions meanwhile
            for p in gained:
                w = PartitionWorker(self, p)
                try:
                    await w.start()
                except Exception as err:  # noqa: BLE001 (retried at the next check)
                    log("bus.takeover_failed", logging.ERROR, partition=p, error=f"{type(err).__name__}: {err}")
                    self.claims.discard(p)
                    with self.counts_lock:  # what it counted before failing
                        self.retired = self.retired.add(w.counters)
                    if w.mgr is not None:
                        await asyncio.to_thread(w.mgr.close)
                    continue
                with self.counts_lock:
                    self.workers[p] = w

    async def _release(self, p: int) -> None:
        with self.counts_lock:
            w = self.workers.pop(p)
            self.releasing[p] = w
        try:
            await w.stop()
        except Exception as err:  # noqa: BLE001
            log("bus.release_failed", logging.ERROR, partition=p, error=f"{type(err).__name__}: {err}")
        finally:
            with self.counts_lock:
                self.retired = self.retired.add(w.counters)
                self.releasing.pop(p, None)
        self.claims.discard(p)

    async def run(self) -> int:
        await self.connect()
        endpoint = None
        try:
            if self.cfg.metrics_listen is not None:
                from tailor.bus.metrics import MetricsServer

                host, port = self.cfg.metrics_listen
                endpoint = MetricsServer(self, host, port, self.cfg.metrics_tls)
                try:
                    await asyncio.to_thread(endpoint.start)
                except RuntimeError as err:
                    await self._drain()
                    raise BusError(f"tailor manager: metrics-listen {host}:{port}: {err}") from None
                log("bus.metrics", host=host, port=port, tls=self.cfg.metrics_tls is not None)
            return await self._serve()
        finally:  # the endpoint ends with the shard, however the shard ends (its thread would keep the port bound)
            if endpoint is not None:
                await asyncio.to_thread(endpoint.stop)

    async def _drain(self) -> None:
        try:
            await self.nc.drain()
        except Exception as err:  # noqa: BLE001 (the bus away or the connection closed: nothing left to flush)
            log("bus.drain_failed", logging.WARNING, error=f"{type(err).__name__}: {err}")

    async def _serve(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        await self.heartbeat()
        beats = asyncio.create_task(self._beat_forever(), name="heartbeat")
        try:
            while not self.stopping.is_set():
                try:
                    await self.rebalance()
                except (TimeoutError, nats.errors.Error) as err:
                    log("bus.check_failed", logging.WARNING, error=f"{type(err).__name__}: {err}")
                try:
                    await asyncio.wait_for(self.stopping.wait(), self.cfg.heartbeat_s)
                except TimeoutError:
                    pass
        finally:
            log("bus.stopping", shard=self.cfg.shard_id, partitions=sorted(self.workers))
            self.stopping.set()
            await asyncio.gather(*(self._release(p) for p in list(self.workers)), return_exceptions=True)
            await beats
            try:
                await self.shards.delete(f"alive.{self.cfg.shard_id}")  # the others take over without waiting the TTL
            except Exception:  # noqa: BLE001
                pass
            await self._drain()
            log("bus.stopped", shard=self.cfg.shard_id)
        return 0


def run_shard(cfg: ShardConfig) -> int:
    return asyncio.run(Shard(cfg).run())
