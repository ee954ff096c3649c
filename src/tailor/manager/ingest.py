"""Telemetry ingestion: parse, validate, queue (bounded), and write to the store in bulk.

Batch semantics of ``POST /v1/telemetry`` (also in docs/manager.md):

* The body must be JSON, at most ``max_body_bytes``. A batch whose *header* is invalid (not an
  object, wrong ``schema``, missing ``source``, ``records`` not an array or longer than the schema's
  ``maxItems``) is rejected whole: 400 with the reason; nothing is stored.
* Otherwise every record is checked on its own (schema, plus: ``client_prefix`` must be an IP
  address or prefix; it is stored in canonical CIDR form). Invalid records are rejected with their
  reasons and counted; the valid ones are queued. Reply 202 with ``accepted``, ``rejected`` and the
  first reasons; 400 when the batch had records and none was valid.
* Queue admission is all-or-nothing per batch: if the valid records do not fit in the bounded queue,
  none is queued, they are counted as dropped, and the reply is 503 with ``Retry-After`` so the
  sender can resend the same batch without creating duplicates.
* Nothing is acknowledged before it is durable: a queued batch carries a :class:`Ticket`, and the
  reply waits until the store has committed it (group commit: whichever request takes the write lock
  writes every batch queued so far in one transaction, see ``Manager.ingest``). A failed write answers
  503 with ``Retry-After`` and the store's error, and is counted; the sender resends.
"""

from __future__ import annotations

import ipaddress
import threading
from collections import deque
from dataclasses import dataclass, field

from tailor.manager.fastcheck import MAX_RECORDS, check_batch, short_repr
from tailor.manager.feed import normalize_prefix
from tailor.table import loads_strict

MAX_REASONS = 10  # rejection reasons returned per reply


class Ticket:
    """The fate of one queued batch: set once, by the writer, to written (``ok``) or failed (``error``)."""

    __slots__ = ("done", "ok", "error")

    def __init__(self):
        self.done = threading.Event()
        self.ok, self.error = False, None

    def settle(self, ok: bool, error: str | None = None) -> None:
        self.ok, self.error = ok, error
        self.done.set()


@dataclass
class IngestResult:
    status: int
    accepted: int = 0
    rejected: int = 0
    dropped: int = 0
    reasons: list[str] = field(default_factory=list)
    ticket: Ticket | None = None  # set for a queued batch: the reply waits for it
    source: str | None = None
    table_version: int | None = None  # the highest table version the batch's valid records were decided with
    edge_dropped: int = 0  # the drops the edge reports; counted once the batch is acknowledged (202)

    def body(self) -> dict:
        out = {"accepted": self.accepted, "rejected": self.rejected, "dropped": self.dropped}
        if self.reasons:
            out["errors"] = self.reasons
        return out


class IngestQueue:
    """Bounded queue of (source, received time, records, ticket); capacity counted in records."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: deque = deque()
        self._size = 0
        self._lock = threading.Lock()
        self.ready = threading.Event()

    def offer(self, source: str, received: float, records: list[dict]) -> Ticket | None:
        """Queue a batch; None (nothing queued) when it does not fit."""
        ticket = Ticket()
        with self._lock:
            if self._size + len(records) > self.capacity:
                return None
            self._items.append((source, received, records, ticket))
            self._size += len(records)
        self.ready.set()
        return ticket

    def drain(self) -> list[tuple[str, float, list[dict], Ticket]]:
        with self._lock:
            items, self._items, self._size = list(self._items), deque(), 0
            self.ready.clear()
        return items

    def __len__(self) -> int:
        return self._size


_PREFIXES: dict[str, str | None] = {}


def canonical_prefix(text: str) -> str | None:
    out = _PREFIXES.get(text, "")
    if out == "":
        out = normalize_prefix(text)
        if len(_PREFIXES) > 100_000:
            _PREFIXES.clear()
        _PREFIXES[text] = out
    return out


MAX_REASON_CHARS = 300


def clip(reason: str) -> str:
    """A reason as returned to a client: the field and the why come first; a value quoted in full (a megabyte
    string) is cut (until 2026-12-07 a reply could copy back 10 MB; found by review)."""
    return reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS - 20] + f"... ({len(reason)} chars)"


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def parse_and_check(body: bytes) -> tuple[str | None, dict | None, list[dict], list[tuple[int, str]]]:
    """(batch error, batch, good records, [(index, reason)]); records get canonical prefixes."""
    try:
        doc = loads_strict(body)
    except (ValueError, UnicodeDecodeError) as err:
        return f"telemetry field (root): body is not JSON: {err}", None, [], []
    except RecursionError:  # a deeply nested body (a bus worker crashed on it until 2026-12-07; found by review)
        return "telemetry field (root): body is nested too deeply", None, [], []
    error, good, bad = check_batch(doc)
    if error:
        return error, doc if isinstance(doc, dict) else None, [], []
    kept = []
    for i, rec in good:
        prefix = canonical_prefix(rec["client_prefix"])
        if prefix is None:
            bad.append((i, f"telemetry field records[{i}].client_prefix: {rec['client_prefix']!r} is not an IP prefix"))
            continue
        rec["client_prefix"] = prefix
        addr = rec.get("client_addr")
        if addr is not None and not _is_address(addr):  # the schema bounds only its length: "\ud800" failed the store
            bad.append((i, f"telemetry field records[{i}].client_addr: {short_repr(addr)} is not an IP address"))
            continue
        kept.append(rec)
    bad.sort()
    return None, doc, kept, bad


def ingest(body: bytes, queue: IngestQueue, metrics, received: float) -> IngestResult:
    """Validate one batch and queue its valid records (see the module doc for the semantics)."""
    error, doc, good, bad = parse_and_check(body)
    if error:
        recs = doc.get("records") if doc else None
        n = min(len(recs), MAX_RECORDS) if isinstance(recs, list) else 0  # an oversized array is not 5M records
        metrics.batches.labels("rejected").inc()
        metrics.rejected.inc(n)
        return IngestResult(400, rejected=n, reasons=[clip(error)])
    # the edge reports its drop count again with every retry of a batch (503, 400), so it is counted only with the
    # acknowledgement (until 2026-12-07 with every attempt: three 503s of one batch counted its drops three times)
    edge_dropped = int(doc.get("dropped", 0))
    metrics.rejected.inc(len(bad))
    reasons = [clip(r) for _, r in bad[:MAX_REASONS]]
    if bad and not good:
        metrics.batches.labels("rejected").inc()
        return IngestResult(400, rejected=len(bad), reasons=reasons, edge_dropped=edge_dropped)
    ticket = queue.offer(doc["source"], received, good) if good else None
    if good and ticket is None:
        metrics.dropped.inc(len(good))
        metrics.batches.labels("dropped").inc()
        return IngestResult(503, rejected=len(bad), dropped=len(good), reasons=reasons)
    metrics.queue.set(len(queue))
    version = max((int(r["table_version"]) for r in good), default=None)
    if ticket is None:  # nothing to write (a batch that only reports drops): acknowledged now
        metrics.edge_dropped.inc(edge_dropped)
    return IngestResult(202, accepted=len(good), rejected=len(bad), reasons=reasons, ticket=ticket,
                        source=doc["source"], table_version=version, edge_dropped=edge_dropped)
