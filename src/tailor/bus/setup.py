"""The bus's stream, buckets, object store and consumers with docs/bus.md's settings, and the cluster document.

Everything is created only when missing (a second shard, or a restart, finds it and leaves it as it is:
``max_bytes`` of the stream is an operator setting that a shard never overwrites), except the stream's discard
policy and age limit, which :func:`ensure_stream` moves to the bus's guarantee (below). Concurrent creation by
two shards is harmless: a create that loses the race falls back to a lookup.

The telemetry stream never removes a message on its own: ``discard`` is NEW (a full stream refuses the publish,
the edge keeps the batch in its bounded buffer and retries; what the buffer cannot hold is dropped and counted
there) and there is no ``max_age``. Until 2026-12-07 it was ``discard`` OLD with ``max_age`` 7 days: a full
stream silently deleted its oldest messages, acknowledged to the edges and possibly never consumed (found by
review). Acknowledged history is removed by the shards instead (:func:`trim_acknowledged`): a partition's
messages at or below its consumer's ack floor, once the stream is 3/4 full or its oldest message is older than
:data:`HISTORY_S`, and only while the consumer has nothing outstanding (below); nothing a consumer has not
acknowledged is ever removed.

The stream's subjects are the partitions' (``tailor.tel.*.<p>`` for the cluster's ``P``, :func:`stream_subjects`),
exactly what the ``part-<p>`` consumers filter: a publish on any other subject under ``tailor.tel.>`` (which the edge
user may publish on) finds no stream and is refused, rather than stored where no consumer reads it and no trim
removes it, until a discard-new stream full of it refused everyone's telemetry (``tailor.tel.>`` until 2026-12-07,
found by review). :func:`ensure_stream` narrows an older stream's subjects and removes what it stored on the others
(:func:`remove_strays`: nats-server keeps a message whose subject the stream no longer has, holding stream space
that no consumer reads and no trim frees). When ``P`` went down (the cluster document recreated with fewer
partitions) the removed partitions' unacknowledged messages are telemetry no shard will fold: counted
(``messages_lost_repartition``) and logged at ERROR with their subjects (``bus.messages_lost_repartition``; until
2026-12-07 purged with a WARNING only, found by review).

A shard that creates the cluster document sets the stream up for its ``P`` first (:func:`cluster_doc`'s
``before_create``; only adding subjects, never removing any): an edge learns ``P`` from the document and publishes at
once, and until 2026-12-07 its first publishes could find no stream (found by review).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nats.js import api
from nats.js.errors import (BadRequestError, BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError,
                            NotFoundError)

from tailor.bus.partition import DEFAULT_PARTITIONS, MAX_PARTITIONS
from tailor.errors import ParameterError
from tailor.manager.logs import log

GiB, MiB = 1 << 30, 1 << 20
STREAM = "TAILOR_TELEMETRY"
TEL_SUBJECTS = "tailor.tel.>"  # the subject space of telemetry (the edge user's publish permission); the stream's
# subjects are only its partitions' (stream_subjects)
TABLES, ARCHIVE, SHARDS, STATE = "tailor-tables", "tailor-archive", "tailor-shards", "tailor-state"
LEASES = "tailor-leases"  # per partition: who holds it and which state object is the durable one (fencing)
CLUSTER_KEY = "cluster"
CLUSTER_SCHEMA = "tailor.cluster/v1"
MAX_MSG_BYTES = 4 * MiB  # the stream's max message size: one telemetry batch
STREAM_MAX_BYTES = 8 * GiB
HISTORY_S = 7 * 86400.0  # acknowledged messages older than this are trimmed (the stream itself has no max_age)
TRIM_AT = 0.75  # ... and all acknowledged ones once the stream holds this share of its max_bytes (or max_msgs)
DUPLICATE_WINDOW_S = 120.0
HEARTBEAT_S, HEARTBEAT_TTL_S = 1.0, 6.0
# the heartbeat TTL of a replicated bus: longer than its leader elections (4-8 s measured, docs/bus.md "Replicas"), so
# that a shard keeps its partitions while the heartbeat bucket elects a leader; a dead shard's partitions then move
# after this long
REPLICATED_HEARTBEAT_TTL_S = 15.0


def heartbeat_ttl(replicas: int) -> float:
    """The heartbeat bucket's TTL a shard creates it with."""
    return HEARTBEAT_TTL_S if replicas <= 1 else REPLICATED_HEARTBEAT_TTL_S

ACK_WAIT_S = 30.0
MAX_ACK_PENDING = 10_000
MAX_STRAY_ROUNDS = 4  # stream-info listings (each up to the server's 100,000 subjects) when removing strays
MAX_LOGGED_SUBJECTS = 20  # subjects (with their message counts) named in a removal's log line
TABLES_HISTORY, ARCHIVE_HISTORY = 64, 1
POP_RE = re.compile(r"[a-z0-9-]{1,32}")


async def kv_keys(js, bucket: str, prefix: str = "") -> list[str]:
    """The keys of ``bucket`` that start with ``prefix`` and hold a message, from one stream-info request.

    nats-py's ``KeyValue.keys()`` watches the bucket and can end its listing before the first entry arrives (it
    compares the consumer's pending count, already 0 once the server has pushed everything, with the entries the
    client has handled so far), so under load it reports a bucket without keys. A deleted key still has its delete
    marker: callers read each key and skip deleted ones."""
    pre = f"$KV.{bucket}."
    try:
        info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"{pre}{prefix}>")
    except NotFoundError:
        return []
    return sorted(s[len(pre):] for s in (info.state.subjects or {}) if s.startswith(pre + prefix))


async def remove_object(js, store, bucket: str, name: str) -> None:
    """Delete object ``name`` of object store ``bucket`` and purge its delete marker. nats-py's delete leaves the
    marker (the metadata with ``deleted``) on the name's metadata subject for good, and a partition's state objects
    are never named twice (``part.<p>.<lease revision>.<write>``): until 2026-12-07 (evening) every state write left
    one, so the bucket's metadata subjects grew with every cycle (1,500 writes: 1,500 subjects; found by review)."""
    import base64

    from nats.js.object_store import OBJ_META_PRE_TEMPLATE

    await store.delete(name)
    subject = OBJ_META_PRE_TEMPLATE.format(bucket=bucket, obj=base64.urlsafe_b64encode(name.encode()).decode())
    await js.purge_stream(f"OBJ_{bucket}", subject=subject)


def tel_subject(pop: str, p: int) -> str:
    return f"tailor.tel.{pop}.{p}"


def partition_filter(p: int) -> str:
    """Partition ``p``'s subjects (any pop): the filter of ``part-<p>``, of its trim, and one subject of the stream."""
    return f"tailor.tel.*.{p}"


def stream_subjects(partitions: int) -> list[str]:
    return [partition_filter(p) for p in range(partitions)]


def is_partition_subject(subject: str, partitions: int) -> bool:
    """``subject`` is one the stream with :func:`stream_subjects` stores (and a ``part-<p>`` consumer reads)."""
    t = subject.split(".")
    return (len(t) == 4 and t[:2] == ["tailor", "tel"] and bool(t[2]) and t[3].isdigit() and
            t[3] == str(int(t[3])) and int(t[3]) < partitions)


def earlier_partition(subject: str, partitions: int) -> int | None:
    """``k`` when ``subject`` is ``tailor.tel.<pop>.<k>`` of a partition ``k >= partitions`` (one of a larger, earlier
    ``P``: the subject its ``part-<k>`` consumer read), else None."""
    t = subject.split(".")
    if (len(t) == 4 and t[:2] == ["tailor", "tel"] and bool(t[2]) and t[3].isdigit() and t[3] == str(int(t[3]))
            and partitions <= int(t[3]) < MAX_PARTITIONS):
        return int(t[3])
    return None


def _covers(pattern: str, subject: str) -> bool:
    """Every subject ``subject`` (itself possibly a wildcard) matches is matched by ``pattern``."""
    a, b = pattern.split("."), subject.split(".")
    for i, tok in enumerate(a):
        if tok == ">":
            return i < len(b)
        if i >= len(b) or b[i] == ">" or (tok != "*" and tok != b[i]) or (tok == "*" and b[i] == ">"):
            return False
    return len(a) == len(b)


def consumer_name(p: int) -> str:
    return f"part-{p}"


def part_key(p: int) -> str:
    return f"part.{p}"


def state_object(p: int, lease_revision: int, write: int) -> str:
    """The name of a state object: one per write (the lease revision it was written under and the worker's write
    count), never overwritten."""
    return f"part.{p}.{lease_revision}.{write}"


def is_state_object(p: int, name: str) -> bool:
    """A state object of partition ``p``: ``part.<p>.<revision>.<write>``, or ``part.<p>`` (written before leases)."""
    head = f"part.{p}."
    rest = name[len(head):].split(".") if name.startswith(head) else []
    return name == part_key(p) or (len(rest) == 2 and all(x.isdigit() for x in rest) and len(name) <= 64)


def stream_config(max_bytes: int = STREAM_MAX_BYTES, partitions: int = DEFAULT_PARTITIONS,
                  replicas: int = 1) -> api.StreamConfig:
    """Discard NEW, no max_age: a full stream refuses the publish; nothing stored is removed but by the shards'
    trimming of acknowledged messages (:func:`trim_acknowledged`). Subjects: the ``partitions`` partitions' only.
    ``replicas``: copies on as many servers of a JetStream cluster (a publish is acknowledged once a majority holds
    it); its consumers inherit it."""
    return api.StreamConfig(name=STREAM, subjects=stream_subjects(partitions), storage=api.StorageType.FILE,
                            retention=api.RetentionPolicy.LIMITS, max_age=0, max_bytes=max_bytes,
                            discard=api.DiscardPolicy.NEW, duplicate_window=DUPLICATE_WINDOW_S,
                            max_msg_size=MAX_MSG_BYTES, num_replicas=replicas)


def consumer_config(p: int, ack_wait_s: float = ACK_WAIT_S) -> api.ConsumerConfig:
    return api.ConsumerConfig(durable_name=consumer_name(p), name=consumer_name(p),
                              filter_subject=partition_filter(p), ack_policy=api.AckPolicy.EXPLICIT,
                              ack_wait=ack_wait_s, max_ack_pending=MAX_ACK_PENDING, max_deliver=-1,
                              deliver_policy=api.DeliverPolicy.ALL)


async def ensure_stream(js, max_bytes: int = STREAM_MAX_BYTES, partitions: int = DEFAULT_PARTITIONS, *,
                        widen_only: bool = False, on_removed: Callable[[Strays], None] | None = None,
                        replicas: int = 1) -> str:
    """Create the telemetry stream when missing ("created"); an existing one keeps its settings ("kept") except
    these, which are moved to the bus's ("updated", logged at WARNING):

    * a discard policy OLD or a max_age (a stream created before 2026-12-07, or edited by hand, would delete stored
      messages nobody consumed): discard NEW and none;
    * subjects other than the ``partitions`` partitions' (``tailor.tel.>`` until 2026-12-07; another count when the
      cluster document was recreated with another ``P``): the partitions'.

    Messages the stream holds on any other subject (no consumer reads them, no trim removes them) are then removed
    (:func:`remove_strays`; its result goes to ``on_removed``). When the server refuses the update the shard goes on
    with the stream as it is and says so at ERROR (``bus.stream_unsafe``) at every start: such a stream can still
    lose acknowledged telemetry or fill with messages nobody reads ("unsafe").

    ``widen_only``: before the cluster document exists (:func:`cluster_doc`'s ``before_create``): create the stream
    when missing, else only add the subjects of ``partitions`` it lacks ("widened"); nothing is removed (the document
    another shard creates meanwhile may name another ``P``: the call after the document is read settles it).

    ``replicas``: the stream's copies when it is created; an existing stream keeps its own (a different count is
    logged at WARNING, ``bus.replicas_differ``: the operator moves it with ``nats stream edit``)."""
    want = stream_subjects(partitions)
    try:
        info = await js.stream_info(STREAM)
    except NotFoundError:
        try:
            await js.add_stream(stream_config(max_bytes, partitions, replicas))
            return "created"
        except BadRequestError:  # created meanwhile by another shard (or exists with an operator's settings)
            info = await js.stream_info(STREAM)
    cfg = info.config
    _check_replicas(STREAM, cfg.num_replicas, replicas)
    if widen_only:
        have = list(cfg.subjects or [])
        missing = [s for s in want if not any(_covers(h, s) for h in have)]
        if not missing:
            return "kept"
        cfg.subjects = have + missing
        try:
            await js.update_stream(cfg)
        except Exception as err:  # noqa: BLE001 (settled, or said at ERROR, by the call after the document)
            log("bus.stream_widen_failed", logging.WARNING, stream=STREAM, missing=missing[:8],
                error=f"{type(err).__name__}: {err}"[:300])
            return "kept"
        log("bus.stream_widened", logging.WARNING, stream=STREAM, added=missing[:8] + (
            [f"... {len(missing)} in all"] if len(missing) > 8 else []),
            note="subjects added before the cluster document is created: an edge that learns P publishes at once")
        return "widened"
    status = "kept"
    if cfg.discard != api.DiscardPolicy.NEW or cfg.max_age or sorted(cfg.subjects or []) != sorted(want):
        subjects = list(cfg.subjects or [])
        before = {"discard": str(getattr(cfg.discard, "value", cfg.discard)), "max_age_s": cfg.max_age,
                  "subjects": subjects[:8] + ([f"... {len(subjects)} in all"] if len(subjects) > 8 else [])}
        cfg.discard, cfg.max_age, cfg.subjects = api.DiscardPolicy.NEW, 0, want
        try:
            await js.update_stream(cfg)
        except Exception as err:  # noqa: BLE001 (any refusal: the stream is usable, only not safe)
            log("bus.stream_unsafe", logging.ERROR, stream=STREAM, **before, error=f"{type(err).__name__}: {err}"[:300],
                note=f"the server refused discard NEW without max_age on subjects {partition_filter('<p>')} "
                     f"(p < {partitions}): a full or old stream deletes stored telemetry that may not have been "
                     "consumed, or fills with messages no consumer reads; update it by hand (nats stream edit)")
            return "unsafe"
        log("bus.stream_updated", logging.WARNING, stream=STREAM, **before,
            now={"discard": "new", "max_age_s": 0, "subjects": f"{partition_filter('<p>')} for p < {partitions}"},
            note="a full stream refuses publishes (edges keep and retry) instead of deleting its oldest messages; a "
                 "publish on a subject no partition consumer reads is refused")
        status = "updated"
    try:
        removed = await remove_strays(js, partitions)
    except Exception as err:  # noqa: BLE001 (tried again at the next shard's start)
        log("bus.strays_failed", logging.WARNING, stream=STREAM, error=f"{type(err).__name__}: {err}"[:300])
    else:
        if on_removed is not None:
            on_removed(removed)
    return status


@dataclass(frozen=True)
class Strays:
    """What one :func:`remove_strays` removed, in messages."""

    lost: int = 0  # unacknowledged messages of partitions >= P (a larger, earlier P): telemetry no shard folded
    acknowledged: int = 0  # messages of such partitions at or below their old consumer's ack floor (folded history)
    other: int = 0  # messages on subjects that are no partition's (stored while the subjects were tailor.tel.>)
    lost_subjects: dict[str, int] = field(default_factory=dict)  # subject -> lost messages (the first few subjects)
    other_subjects: dict[str, int] = field(default_factory=dict)  # subject -> messages (the first few subjects)

    @property
    def removed(self) -> int:
        return self.lost + self.acknowledged + self.other


async def remove_strays(js, partitions: int) -> Strays:
    """Purge the stream's messages on subjects that are not a partition's (:func:`is_partition_subject`): stored
    while its subjects were ``tailor.tel.>``, or on the partitions of a larger earlier ``P``. nats-server keeps a
    message whose subject the stream no longer has (checked with 2.9.10): it holds stream space forever, no
    ``part-<p>`` consumer of this ``P`` reads it and no trim removes it, so a discard-NEW stream would fill with them.

    A subject ``tailor.tel.<pop>.<k>`` with ``k >= partitions`` is partition ``k`` of a larger ``P`` (the cluster
    document was recreated with fewer partitions): its messages at or below the ack floor of the old ``part-<k>``
    consumer were folded by a shard (``acknowledged``, history); the others were never folded and are purged as
    ``lost`` (no shard of this ``P`` reads that subject; their records would belong to other partitions now), logged at
    ERROR (``bus.messages_lost_repartition``, subjects and counts) for the caller to count. Everything else is
    ``other`` (``bus.strays_removed``, WARNING).

    One filtered purge per exact subject (two for ``k >= partitions``: up to the floor, then the rest): no current
    ``part-<p>`` consumer's filter matches such a subject, so none of them is touched (nats-server 2.9 resets the
    pending list of the consumers a purge matches; see :func:`trim_acknowledged`). The counts are the server's."""
    nc = js._nc
    lost = acked = other = 0
    lost_subjects: dict[str, int] = {}
    other_subjects: dict[str, int] = {}
    floors: dict[int, int] = {}
    for _ in range(MAX_STRAY_ROUNDS):  # a listing holds at most 100,000 subjects (nats-server): bounded rounds
        info = await js.stream_info(STREAM, subjects_filter=">")
        strays = [s for s in (info.state.subjects or {}) if not is_partition_subject(s, partitions)]
        if not strays:
            break
        for subject in strays:
            k = earlier_partition(subject, partitions)
            if k is None:
                n = await _purge(nc, subject)
                other += n
                if n and len(other_subjects) < MAX_LOGGED_SUBJECTS:
                    other_subjects[subject] = other_subjects.get(subject, 0) + n
                continue
            if k not in floors:
                try:
                    floors[k] = (await js.consumer_info(STREAM, consumer_name(k))).ack_floor.stream_seq or 0
                except NotFoundError:
                    floors[k] = 0
            if floors[k]:
                acked += await _purge(nc, subject, floors[k] + 1)
            n = await _purge(nc, subject)
            lost += n
            if n and (subject in lost_subjects or len(lost_subjects) < MAX_LOGGED_SUBJECTS):
                lost_subjects[subject] = lost_subjects.get(subject, 0) + n
    out = Strays(lost, acked, other, lost_subjects, other_subjects)
    if lost:
        log("bus.messages_lost_repartition", logging.ERROR, stream=STREAM, messages=lost, subjects=lost_subjects,
            partitions=partitions,
            note=f"unacknowledged telemetry on partitions >= {partitions} (the cluster document was recreated with fewer "
                 "partitions): no shard of this cluster reads those subjects; purged (nats-server would keep them, "
                 "filling the stream), counted in the heartbeat's messages_lost_repartition")
    if acked or other:
        log("bus.strays_removed", logging.WARNING, stream=STREAM, messages=acked + other, acknowledged_history=acked,
            subjects=other_subjects,
            note=f"messages no partition consumer reads (partitions 0-{partitions - 1}): acknowledged history of "
                 "removed partitions, and messages on subjects that are no partition's")
    return out


@dataclass(frozen=True)
class Trim:
    """What one :func:`trim_acknowledged` did."""

    removed: int = 0  # messages removed from the stream
    deferred: bool = False  # due, but the consumer had something outstanding: nothing removed (tried next cycle)
    repaired: bool = False  # a delivery raced the purge: the consumer was recreated (see trim_acknowledged)


async def _purge(nc, subject: str, seq: int | None = None) -> int:
    """Purge ``subject``'s messages below ``seq`` (all without it); the number the server purged."""
    req = json.dumps({"filter": subject} if seq is None else {"filter": subject, "seq": seq}).encode()
    resp = json.loads((await nc.request(f"$JS.API.STREAM.PURGE.{STREAM}", req, timeout=5)).data)
    if "error" in resp:
        raise BadRequestError(description=str(resp["error"])[:300])
    return int(resp.get("purged") or 0)


async def trim_acknowledged(nc, js, p: int, now: float | None = None) -> Trim:
    """Remove partition ``p``'s acknowledged history: its messages at or below the ack floor of ``part-<p>``
    (every one of them acknowledged: folded into a durable state), when the stream holds :data:`TRIM_AT` of its
    ``max_bytes`` or ``max_msgs`` or its oldest message is older than :data:`HISTORY_S`, and the consumer has
    nothing outstanding (else ``Trim(deferred=True)``: the caller tries again after its next cycle).

    Without it the stream (limits retention: consumed messages stay) would fill with consumed history and refuse
    new telemetry. A message nobody acknowledged is never removed: with discard NEW a stream full of unconsumed
    telemetry refuses publishes, and the edges keep, retry and count.

    Why "nothing outstanding": the trim is a filtered purge of ``tailor.tel.*.<p>`` up to the floor, and
    nats-server 2.9 (Debian's; this machine's 2.9.10) resets the delivered-but-unacknowledged list of every
    consumer the purge's filter matches (``o.pending = nil``), whatever their sequences. A message pending then is
    never redelivered, the next acknowledgement moves the ack floor past it and the next trim deletes it: a batch
    nak'd on an ingest 503, a crashed previous owner's in-flight batches, a restarted worker's (until 2026-12-07,
    found by review). So the purge runs only when the consumer info read just before it shows nothing delivered and
    unacknowledged (``num_ack_pending``: it includes what was nak'd or awaits redelivery after the ack wait;
    ``num_redelivered``) and no pull request waiting on the server (``num_waiting``: e.g. the worker's last fetch,
    still open, could be handed a message during the purge).

    The race between that read and the purge: only a pull can add to the pending list, and nothing the owner does
    pulls meanwhile (its worker trims between its cycles, fetching nothing; the lease keeps other shards off the
    partition). A client that pulls anyway in that window (a shard paused past its lease that wakes up, an
    operator's ``nats consumer next``) is caught by a second read after the purge: every delivery raises the
    consumer's delivered sequence, so an unchanged one proves the purge reset an empty list. A changed one (or a
    second read that fails three times) recreates the consumer with the same settings (deliver all): with nothing
    pending at the first read the ack floor was the last delivered message, so the partition's messages left in the
    stream are exactly those never delivered before and those the racing pull took; all are delivered again (the
    worker skips what its state already holds). Counted by the caller (``trims_deferred``, ``trim_races``)."""
    info = await js.stream_info(STREAM)
    cfg, st = info.config, info.state
    due = ((cfg.max_bytes or 0) > 0 and st.bytes >= TRIM_AT * cfg.max_bytes) or \
          ((cfg.max_msgs or 0) > 0 and st.messages >= TRIM_AT * cfg.max_msgs)
    if not due and st.messages:
        try:
            first = await js.get_msg(STREAM, seq=st.first_seq)
        except NotFoundError:  # removed meanwhile
            return Trim()
        now = time.time() if now is None else now
        due = first.time is not None and first.time.timestamp() < now - HISTORY_S
    if not due:
        return Trim()
    name = consumer_name(p)
    before = await js.consumer_info(STREAM, name)
    if before.num_ack_pending or before.num_redelivered or before.num_waiting:
        return Trim(deferred=True)
    floor = before.ack_floor.stream_seq
    if not floor:
        return Trim()
    # filtered purge of the partition's subjects below floor + 1 (other partitions' messages and consumers are not
    # touched: tests/test_bus_shard.py::test_trimming_removes_only_acknowledged_history checks it on the server)
    removed = await _purge(nc, partition_filter(p), floor + 1)
    delivered = None
    for attempt in range(3):
        try:
            delivered = (await js.consumer_info(STREAM, name)).delivered.consumer_seq
            break
        except Exception:  # noqa: BLE001 (a timeout: read again; unknown after three: repaired as a race)
            await asyncio.sleep(0.2 * (attempt + 1))
    if delivered == before.delivered.consumer_seq:
        return Trim(removed)
    await recreate_consumer(js, p, before.config.ack_wait or ACK_WAIT_S)
    log("bus.trim_raced", logging.WARNING, partition=p, removed=removed,
        delivered_before=before.delivered.consumer_seq, delivered_after=delivered,
        note="a pull on the partition's consumer raced its trim (its pending list may have been reset): the consumer "
             "was recreated, its unacknowledged messages are delivered again")
    return Trim(removed, repaired=True)


async def recreate_consumer(js, p: int, ack_wait_s: float) -> None:
    """Delete ``part-<p>`` and create it again (deliver all, the same settings): every message of the partition
    still in the stream is delivered again."""
    try:
        await js.delete_consumer(STREAM, consumer_name(p))
    except NotFoundError:
        pass
    await ensure_consumer(js, p, ack_wait_s)


def _check_replicas(name: str, have: int | None, want: int) -> None:
    if (have or 1) != want:
        log("bus.replicas_differ", logging.WARNING, stream=name, replicas=have or 1, asked=want,
            note="an existing stream or bucket keeps its replicas; change them with nats stream edit")


async def _kv(js, bucket: str, replicas: int = 1, **settings):
    try:
        kv = await js.key_value(bucket)
    except BucketNotFoundError:
        try:
            return await js.create_key_value(api.KeyValueConfig(bucket=bucket, storage=api.StorageType.FILE,
                                                                replicas=replicas, **settings))
        except BadRequestError:
            kv = await js.key_value(bucket)
    _check_replicas(f"KV_{bucket}", (await js.stream_info(f"KV_{bucket}")).config.num_replicas, replicas)
    return kv


async def _object_store(js, bucket: str, replicas: int = 1):
    try:
        obj = await js.object_store(bucket)
    except BucketNotFoundError:
        try:
            return await js.create_object_store(bucket, api.ObjectStoreConfig(storage=api.StorageType.FILE,
                                                                              replicas=replicas))
        except BadRequestError:
            obj = await js.object_store(bucket)
    _check_replicas(f"OBJ_{bucket}", (await js.stream_info(f"OBJ_{bucket}")).config.num_replicas, replicas)
    return obj


async def ensure_buckets(js, replicas: int = 1) -> dict:
    """{"tables", "archive", "shards", "leases", "state"}: the four key-value buckets and the object store, created
    with ``replicas`` copies (existing ones keep theirs, a different count logged: ``bus.replicas_differ``)."""
    r = replicas
    return {"tables": await _kv(js, TABLES, r, history=TABLES_HISTORY),
            "leases": await _kv(js, LEASES, r, history=1),
            "archive": await _kv(js, ARCHIVE, r, history=ARCHIVE_HISTORY),
            "shards": await _kv(js, SHARDS, r, history=1, ttl=heartbeat_ttl(r)),
            "state": await _object_store(js, STATE, r)}


async def ensure_consumer(js, p: int, ack_wait_s: float = ACK_WAIT_S):
    """``part-<p>``'s consumer info; the consumer is created when missing."""
    try:
        return await js.consumer_info(STREAM, consumer_name(p))
    except NotFoundError:
        pass
    try:
        return await js.add_consumer(STREAM, consumer_config(p, ack_wait_s))
    except BadRequestError:
        return await js.consumer_info(STREAM, consumer_name(p))


async def ensure_consumers(js, partitions: int, ack_wait_s: float = ACK_WAIT_S) -> None:
    for p in range(partitions):
        await ensure_consumer(js, p, ack_wait_s)


def check_cluster_doc(raw: bytes) -> dict:
    """The cluster document, checked field by field (one error naming the field)."""
    def bad(field: str, rule: str, got) -> ParameterError:
        return ParameterError(f"The '{field}' field of the cluster document ({TABLES} key {CLUSTER_KEY}) must be "
                              f"{rule}. Got {str(got)[:80]!r}.")

    if len(raw) > 4096:
        raise bad("(root)", "at most 4096 bytes", f"{len(raw)} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise bad("(root)", "JSON", err) from None
    if not isinstance(doc, dict):
        raise bad("(root)", "an object", doc)
    if doc.get("schema") != CLUSTER_SCHEMA:
        raise bad("schema", repr(CLUSTER_SCHEMA), doc.get("schema"))
    p = doc.get("partitions")
    if not isinstance(p, int) or isinstance(p, bool) or not 1 <= p <= MAX_PARTITIONS:
        raise bad("partitions", f"an integer in [1, {MAX_PARTITIONS}]", p)
    salt = doc.get("salt")
    if not isinstance(salt, str) or re.fullmatch(r"[0-9a-f]{32}", salt) is None:
        raise bad("salt", "32 lower-case hex digits", salt)
    return doc


async def cluster_doc(tables, partitions: int | None,
                      before_create: Callable[[int], Awaitable[object]] | None = None) -> tuple[dict, bool]:
    """(the cluster document, created by this call). The first shard creates it (compare-and-set create) with
    ``partitions`` (default 6) and a random salt; a later shard reads it, and one started with a different
    ``--partitions`` fails with one error. ``before_create(P)`` runs before this call creates the document (the
    shard sets the stream up for ``P`` there: edges publish as soon as they read ``P``)."""
    want = DEFAULT_PARTITIONS if partitions is None else partitions
    doc = {"schema": CLUSTER_SCHEMA, "partitions": want, "salt": secrets.token_hex(16)}
    created = False
    try:
        entry = await tables.get(CLUSTER_KEY)  # (a deleted key raises KeyNotFoundError too)
    except KeyNotFoundError:
        entry = None
    if entry is None:
        if before_create is not None:
            await before_create(want)
        try:
            await tables.create(CLUSTER_KEY, json.dumps(doc).encode())
            created = True
        except KeyWrongLastSequenceError:
            entry = await tables.get(CLUSTER_KEY)
    if not created:
        doc = check_cluster_doc(entry.value or b"")
    if partitions is not None and doc["partitions"] != partitions:
        raise ParameterError(f"The 'partitions' parameter of tailor manager must match the cluster document "
                             f"({TABLES} key {CLUSTER_KEY}), which says {doc['partitions']}: omit --partitions or "
                             f"pass --partitions {doc['partitions']}. Got {partitions}.")
    return doc, created
