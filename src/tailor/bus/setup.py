"""The bus's stream, buckets, object store and consumers with docs/bus.md's settings, and the cluster document.

Everything is created only when missing (a second shard, or a restart, finds it and leaves it as it is:
``max_bytes`` of the stream is an operator setting that a shard never overwrites). Concurrent creation by
two shards is harmless: a create that loses the race falls back to a lookup.
"""

from __future__ import annotations

import json
import re
import secrets

from nats.js import api
from nats.js.errors import BadRequestError, BucketNotFoundError, KeyWrongLastSequenceError, NotFoundError

from tailor.bus.partition import DEFAULT_PARTITIONS, MAX_PARTITIONS
from tailor.errors import ParameterError

GiB, MiB = 1 << 30, 1 << 20
STREAM = "TAILOR_TELEMETRY"
TEL_SUBJECTS = "tailor.tel.>"
TABLES, ARCHIVE, SHARDS, STATE = "tailor-tables", "tailor-archive", "tailor-shards", "tailor-state"
LEASES = "tailor-leases"  # per partition: who holds it and which state object is the durable one (fencing)
CLUSTER_KEY = "cluster"
CLUSTER_SCHEMA = "tailor.cluster/v1"
MAX_MSG_BYTES = 4 * MiB  # the stream's max message size: one telemetry batch
STREAM_MAX_BYTES = 8 * GiB
STREAM_MAX_AGE_S = 7 * 86400.0
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
    return api.StreamConfig(name=STREAM, subjects=[TEL_SUBJECTS], storage=api.StorageType.FILE,
                            retention=api.RetentionPolicy.LIMITS, max_age=STREAM_MAX_AGE_S, max_bytes=max_bytes,
                            discard=api.DiscardPolicy.OLD, duplicate_window=DUPLICATE_WINDOW_S,
                            max_msg_size=MAX_MSG_BYTES)


def consumer_config(p: int, ack_wait_s: float = ACK_WAIT_S) -> api.ConsumerConfig:
    return api.ConsumerConfig(durable_name=consumer_name(p), name=consumer_name(p),
                              filter_subject=f"tailor.tel.*.{p}", ack_policy=api.AckPolicy.EXPLICIT,
                              ack_wait=ack_wait_s, max_ack_pending=MAX_ACK_PENDING, max_deliver=-1,
                              deliver_policy=api.DeliverPolicy.ALL)


async def ensure_stream(js, max_bytes: int = STREAM_MAX_BYTES) -> None:
    try:
        await js.stream_info(STREAM)
        return
    except NotFoundError:
        pass
    try:
        await js.add_stream(stream_config(max_bytes))
    except BadRequestError:  # created meanwhile by another shard (or exists with an operator's settings)
        await js.stream_info(STREAM)


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
