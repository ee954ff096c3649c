"""Helpers for the bus tests and ``tailor cluster``: edge-like telemetry publication and bus read-outs."""

from __future__ import annotations

import base64
import json

from nats.js.errors import KeyNotFoundError, NotFoundError

from tailor.bus import pki
from tailor.bus import setup as S
from tailor.bus.partition import partition

SCHEMA = "tailor.telemetry/v1"


def default_config_id(space: str = "core") -> str:
    from tailor.space import AllowedConfig, ConfigSpace

    s = ConfigSpace.named(space, AllowedConfig.parse(""))
    return s.configs[s.default_index].id


def records(n: int, prefixes: int = 64, t0: float | None = None, tag: int = 0, config_id: str | None = None) -> list[dict]:
    """``n`` valid page-load records over ``prefixes`` /24s (10.<tag>.<i>.0/24), ending about now."""
    import time

    t0 = time.time() - n * 0.001 if t0 is None else t0
    config_id = config_id or default_config_id()
    out = []
    for i in range(n):
        k = i % prefixes
        prefix = f"10.{tag % 256}.{k}.0/24"
        out.append({"time": t0 + i * 0.001, "kind": "pageload", "client_prefix": prefix,
                    "client_addr": f"10.{tag % 256}.{k}.{1 + i % 250}", "config_id": config_id, "probability": 1.0,
                    "table_version": 1, "holdback": False, "handshake_rtt_ms": 40.0 + k % 7, "plt_ms": 900.0 + i % 300,
                    "bytes_sent": 1_000_000, "bytes_retrans": 1000 * (i % 5), "duration_ms": 900.0 + i % 300,
                    "bytes_acked": 1_000_000, "sni": "shop.example", "device": "desktop"})
    return out


def group(recs: list[dict], partitions: int, chunk: int = 500) -> list[tuple[int, list[dict]]]:
    """What an edge's flush publishes: per partition, chunks of at most ``chunk`` records."""
    by: dict[int, list[dict]] = {}
    for r in recs:
        by.setdefault(partition(r["client_prefix"], partitions), []).append(r)
    return [(p, rs[i:i + chunk]) for p, rs in sorted(by.items()) for i in range(0, len(rs), chunk)]


class EdgePublisher:
    """Publishes batches to ``tailor.tel.<pop>.<p>`` with ``Nats-Msg-Id: <source>/<boot-nonce>/<batch-seq>``."""

    def __init__(self, js, source: str = "test-edge", pop: str = "default", nonce: str = "n0"):
        self.js, self.source, self.pop, self.nonce = js, source, pop, nonce
        self.seq = 0

    async def publish(self, p: int, recs: list[dict], seq: int | None = None, dropped: int = 0):
        if seq is None:
            self.seq += 1
            seq = self.seq
        body = json.dumps({"schema": SCHEMA, "source": self.source, "dropped": dropped, "records": recs}).encode()
        return await self.js.publish(S.tel_subject(self.pop, p), body,
                                     headers={"Nats-Msg-Id": f"{self.source}/{self.nonce}/{seq}"})


async def connect(url: str, user: str | None = None, password: str | None = None, tls=None):
    """A connection to ``url`` (``nats://HOST:PORT[,nats://...]``: a cluster's nodes); ``tls``: the servers'
    ``tls_context()`` when they require TLS."""
    return await pki.connect(servers=url.split(","), user=user, password=password, max_reconnect_attempts=2,
                             connect_timeout=3, tls=tls)


async def kv_values(js, bucket: str, prefix: str) -> dict[str, bytes]:
    try:
        kv = await js.key_value(bucket)
    except NotFoundError:
        return {}
    keys = await S.kv_keys(js, bucket, prefix)
    out = {}
    for k in keys:  # all under prefix (kv_keys filters)
        try:
            out[k] = (await kv.get(k)).value or b""
        except (KeyNotFoundError, NotFoundError):
            pass
    return out


async def heartbeats(js) -> dict[str, dict]:
    return {k[len("alive."):]: json.loads(v) for k, v in (await kv_values(js, S.SHARDS, "alive.")).items()}


async def archives(js) -> dict[int, dict]:
    return {int(k.split(".")[1]): json.loads(v) for k, v in (await kv_values(js, S.ARCHIVE, "part.")).items()}


async def envelopes(js) -> dict[int, dict]:
    return {int(k.split(".")[1]): json.loads(v) for k, v in (await kv_values(js, S.TABLES, "part.")).items()}


async def all_acked(js, partitions: int) -> bool:
    """Every partition's durable consumer has delivered everything and holds nothing unacknowledged: every record
    is folded into a durably written state (shards acknowledge only after it)."""
    for p in range(partitions):
        info = await js.consumer_info(S.STREAM, S.consumer_name(p))
        if info.num_pending or info.num_ack_pending:
            return False
    return True


def envelope_table(env: dict) -> dict:
    return json.loads(base64.b64decode(env["body"]))
