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
:data:`HISTORY_S`; nothing a consumer has not acknowledged is ever removed.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time

from nats.js import api
from nats.js.errors import BadRequestError, BucketNotFoundError, KeyWrongLastSequenceError, NotFoundError

from tailor.bus.partition import DEFAULT_PARTITIONS, MAX_PARTITIONS
from tailor.errors import ParameterError
from tailor.manager.logs import log

GiB, MiB = 1 << 30, 1 << 20
STREAM = "TAILOR_TELEMETRY"
TEL_SUBJECTS = "tailor.tel.>"
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
ACK_WAIT_S = 30.0
MAX_ACK_PENDING = 10_000
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


def tel_subject(pop: str, p: int) -> str:
    return f"tailor.tel.{pop}.{p}"


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


def stream_config(max_bytes: int = STREAM_MAX_BYTES) -> api.StreamConfig:
    """Discard NEW, no max_age: a full stream refuses the publish; nothing stored is removed but by the shards'
    trimming of acknowledged messages (:func:`trim_acknowledged`)."""
    return api.StreamConfig(name=STREAM, subjects=[TEL_SUBJECTS], storage=api.StorageType.FILE,
                            retention=api.RetentionPolicy.LIMITS, max_age=0, max_bytes=max_bytes,
                            discard=api.DiscardPolicy.NEW, duplicate_window=DUPLICATE_WINDOW_S,
                            max_msg_size=MAX_MSG_BYTES)


def consumer_config(p: int, ack_wait_s: float = ACK_WAIT_S) -> api.ConsumerConfig:
    return api.ConsumerConfig(durable_name=consumer_name(p), name=consumer_name(p),
                              filter_subject=f"tailor.tel.*.{p}", ack_policy=api.AckPolicy.EXPLICIT,
                              ack_wait=ack_wait_s, max_ack_pending=MAX_ACK_PENDING, max_deliver=-1,
                              deliver_policy=api.DeliverPolicy.ALL)


async def ensure_stream(js, max_bytes: int = STREAM_MAX_BYTES) -> str:
    """Create the telemetry stream when missing ("created"); an existing one keeps its settings ("kept") except a
    discard policy OLD or a max_age, which are moved to NEW and none ("updated", logged at WARNING: a stream
    created before 2026-12-07, or edited by hand, would delete stored messages nobody consumed). When the server
    refuses that update the shard goes on with the stream as it is and says so at ERROR (``bus.stream_unsafe``)
    at every start: such a stream can still lose acknowledged telemetry ("unsafe")."""
    try:
        info = await js.stream_info(STREAM)
    except NotFoundError:
        try:
            await js.add_stream(stream_config(max_bytes))
            return "created"
        except BadRequestError:  # created meanwhile by another shard (or exists with an operator's settings)
            info = await js.stream_info(STREAM)
    cfg = info.config
    if cfg.discard == api.DiscardPolicy.NEW and not cfg.max_age:
        return "kept"
    before = {"discard": str(getattr(cfg.discard, "value", cfg.discard)), "max_age_s": cfg.max_age}
    cfg.discard, cfg.max_age = api.DiscardPolicy.NEW, 0
    try:
        await js.update_stream(cfg)
    except Exception as err:  # noqa: BLE001 (any refusal: the stream is usable, only not safe)
        log("bus.stream_unsafe", logging.ERROR, stream=STREAM, **before, error=f"{type(err).__name__}: {err}"[:300],
            note="the server refused discard NEW without max_age: a full or old stream deletes stored telemetry "
                 "that may not have been consumed; update it by hand (nats stream edit)")
        return "unsafe"
    log("bus.stream_updated", logging.WARNING, stream=STREAM, **before, now={"discard": "new", "max_age_s": 0},
        note="a full stream now refuses publishes (edges keep and retry) instead of deleting its oldest messages")
    return "updated"


async def trim_acknowledged(nc, js, p: int, now: float | None = None) -> int:
    """Remove partition ``p``'s acknowledged history: its messages at or below the ack floor of ``part-<p>``
    (every one of them acknowledged: folded into a durable state), when the stream holds :data:`TRIM_AT` of its
    ``max_bytes`` or ``max_msgs`` or its oldest message is older than :data:`HISTORY_S`. Returns the number of
    messages removed (0 when nothing is due).

    Without it the stream (limits retention: consumed messages stay) would fill with consumed history and refuse
    new telemetry. A message nobody acknowledged is never removed: with discard NEW a stream full of unconsumed
    telemetry refuses publishes, and the edges keep, retry and count."""
    info = await js.stream_info(STREAM)
    cfg, st = info.config, info.state
    due = ((cfg.max_bytes or 0) > 0 and st.bytes >= TRIM_AT * cfg.max_bytes) or \
          ((cfg.max_msgs or 0) > 0 and st.messages >= TRIM_AT * cfg.max_msgs)
    if not due and st.messages:
        try:
            first = await js.get_msg(STREAM, seq=st.first_seq)
        except NotFoundError:  # removed meanwhile
            return 0
        now = time.time() if now is None else now
        due = first.time is not None and first.time.timestamp() < now - HISTORY_S
    if not due:
        return 0
    floor = (await js.consumer_info(STREAM, consumer_name(p))).ack_floor.stream_seq
    if not floor:
        return 0
    # filtered purge of the partition's subjects below floor + 1 (other partitions' messages and consumers are not
    # touched: tests/test_bus_shard.py::test_trimming_removes_only_acknowledged_history checks it on the server)
    req = json.dumps({"filter": f"tailor.tel.*.{p}", "seq": floor + 1}).encode()
    resp = json.loads((await nc.request(f"$JS.API.STREAM.PURGE.{STREAM}", req, timeout=5)).data)
    if "error" in resp:
        raise BadRequestError(description=str(resp["error"])[:300])
    return int(resp.get("purged") or 0)


async def _kv(js, bucket: str, **settings):
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    try:
        return await js.create_key_value(api.KeyValueConfig(bucket=bucket, storage=api.StorageType.FILE, **settings))
    except BadRequestError:
        return await js.key_value(bucket)


async def _object_store(js, bucket: str):
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        pass
    try:
        return await js.create_object_store(bucket, api.ObjectStoreConfig(storage=api.StorageType.FILE))
    except BadRequestError:
        return await js.object_store(bucket)


async def ensure_buckets(js) -> dict:
    """{"tables", "archive", "shards", "leases", "state"}: the four key-value buckets and the object store."""
    return {"tables": await _kv(js, TABLES, history=TABLES_HISTORY),
            "leases": await _kv(js, LEASES, history=1),
            "archive": await _kv(js, ARCHIVE, history=ARCHIVE_HISTORY),
            "shards": await _kv(js, SHARDS, history=1, ttl=HEARTBEAT_TTL_S),
            "state": await _object_store(js, STATE)}


async def ensure_consumers(js, partitions: int, ack_wait_s: float = ACK_WAIT_S) -> None:
    for p in range(partitions):
        try:
            await js.consumer_info(STREAM, consumer_name(p))
            continue
        except NotFoundError:
            pass
        try:
            await js.add_consumer(STREAM, consumer_config(p, ack_wait_s))
        except BadRequestError:
            await js.consumer_info(STREAM, consumer_name(p))


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


async def cluster_doc(tables, partitions: int | None) -> tuple[dict, bool]:
    """(the cluster document, created by this call). The first shard creates it (compare-and-set create) with
    ``partitions`` (default 6) and a random salt; a later shard reads it, and one started with a different
    ``--partitions`` fails with one error."""
    want = DEFAULT_PARTITIONS if partitions is None else partitions
    doc = {"schema": CLUSTER_SCHEMA, "partitions": want, "salt": secrets.token_hex(16)}
    created = False
    try:
        await tables.create(CLUSTER_KEY, json.dumps(doc).encode())
        created = True
    except KeyWrongLastSequenceError:
        entry = await tables.get(CLUSTER_KEY)
        doc = check_cluster_doc(entry.value or b"")
    if partitions is not None and doc["partitions"] != partitions:
        raise ParameterError(f"The 'partitions' parameter of tailor manager must match the cluster document "
                             f"({TABLES} key {CLUSTER_KEY}), which says {doc['partitions']}: omit --partitions or "
                             f"pass --partitions {doc['partitions']}. Got {partitions}.")
    return doc, created
