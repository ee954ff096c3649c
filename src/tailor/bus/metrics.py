"""A shard's read-only HTTP endpoint (``tailor manager --bus ... --metrics-listen HOST:PORT``): ``GET /metrics``
(Prometheus) and ``GET /healthz``.

A shard has no API listener (telemetry and tables travel through the bus), so until 2026-12-07 what it counted was
only in its heartbeat document (``tailor cluster`` prints it): no scraper could see a shard's ingest, its trims, the
messages a change of the partition count lost, nor the learning metrics of the partitions it runs. Now:

* ``tailor_shard_<counter>_total`` for every counter of the heartbeat (:class:`tailor.bus.shard.Counters`, summed
  over the partitions the shard runs, is releasing and has released, so that they never fall, with the stream
  counters of its start), and
  ``tailor_shard_heartbeats_ignored_total``;
* ``tailor_shard_partitions`` (the partitions it runs), ``tailor_shard_table_version{partition}``,
  ``tailor_shard_heartbeat_age_seconds`` (since the bus last took its heartbeat: past the TTL the others take its
  partitions);
* every metric of each partition's manager (the single manager's ``/metrics``: ingest, cycles, rollbacks, override
  regressions, ...) with a ``partition`` label; a partition's series end when the shard releases it (its new owner's
  start again from its own counts);
* the endpoint's own HTTP bounds (the manager's: ``--max-connections``, ``--max-connections-per-address``, the
  header, body and write deadlines; ``tailor_http_refused_connections_total{reason}``, ``tailor_http_connections``).

Nothing here changes anything (no credential is asked, as for the manager's ``/metrics``); any other path is 404, any
other method 405. With ``--tls-cert``/``--tls-key`` (the manager's flags) it serves HTTPS, with the certificate checked
at start (one error naming the flag). The server runs uvicorn in a thread of its own (its own event loop, no signal handlers: the shard's
SIGTERM handling stays the shard's); a scrape reads the shard's counters as they are at that moment.
"""

from __future__ import annotations

import json
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

COUNTER_HELP = {
    "messages": "telemetry messages delivered to this shard's partitions",
    "duplicates": "messages at or below a partition's watermark (already in its state): acknowledged, not ingested",
    "redelivered": "messages delivered again while waiting for their fold: ingested once",
    "records": "records accepted into a partition's store",
    "refused_partition": "records whose client_prefix belongs to another partition",
    "rejected": "records the ingest validation refused",
    "invalid_batches": "messages refused whole (not JSON, bad header, too large)",
    "ingest_failed": "messages the store could not take (negatively acknowledged: redelivered)",
    "cycles": "update cycles run",
    "cycles_failed": "update cycles that failed",
    "states_written": "learned states written to the bus",
    "envelopes": "signed tables published to the bus",
    "envelopes_too_large": "signed tables too large for the bucket (not published)",
    "trimmed": "acknowledged messages of a partition removed from the stream",
    "trims_failed": "trims of acknowledged history that failed",
    "trims_deferred": "trims due but not run: the consumer had messages delivered and not acknowledged",
    "trim_races": "pulls that raced a trim's purge (the consumer recreated, its messages delivered again)",
    "fetch_unavailable": "pulls the stream did not answer (no leader for a moment, e.g. during an election): retried",
    "commits_deferred": "cycles whose commit the bus did not answer (if in the state write: the folded messages stay "
                        "pending, not acknowledged, and the next cycle writes the state again; past 60 s the worker "
                        "fails)",
    "messages_lost_repartition": "unacknowledged messages of removed partitions purged at this shard's start "
                                 "(the cluster document recreated with fewer partitions): never folded",
    "stray_messages_removed": "messages on subjects no partition reads, purged at this shard's start",
}


class _HTTPMetrics:
    """What tailor.manager.httpserver counts into: the endpoint's refusals and open connections."""

    def __init__(self, registry: CollectorRegistry):
        self.http_refused = Counter("tailor_http_refused_connections",
                                    "connections the shard's metrics endpoint closed: over --max-connections at accept "
                                    "(connections), over --max-connections-per-address (address), a request's "
                                    "headers or body not complete in time (header_timeout, body_timeout), a client not "
                                    "taking what the server writes in time (write_timeout)", ["reason"],
                                    registry=registry)
        self.http_connections = Gauge("tailor_http_connections", "open connections of the shard's metrics endpoint",
                                      registry=registry)


class ShardCollector:
    """Prometheus collector of one :class:`tailor.bus.shard.Shard` (read at each scrape)."""

    def __init__(self, shard):
        self.shard = shard

    def collect(self):
        sh = self.shard
        total, workers = sh.totals()  # a consistent copy: the shard's loop adds and removes workers meanwhile
        counts = total.as_dict() | dict(sh.stream_removed)
        for name, value in counts.items():
            fam = CounterMetricFamily(f"tailor_shard_{name}", COUNTER_HELP.get(name, name.replace("_", " ")))
            fam.add_metric([], value)
            yield fam
        fam = CounterMetricFamily("tailor_shard_heartbeats_ignored", "other shards' heartbeats ignored (too large, "
                                  "not JSON, malformed)")
        fam.add_metric([], sh.heartbeats_ignored)
        yield fam
        yield GaugeMetricFamily("tailor_shard_partitions", "partitions this shard runs", value=len(workers))
        yield GaugeMetricFamily("tailor_shard_heartbeat_age_seconds", "seconds since the bus last took this shard's "
                                "heartbeat (past the TTL the other shards take its partitions)",
                                value=max(time.monotonic() - sh.beat_ok, 0.0))
        versions = GaugeMetricFamily("tailor_shard_table_version", "version of a partition's published table",
                                     labels=["partition"])
        merged: dict[str, Metric] = {}
        for p, w in sorted(workers, key=lambda pw: pw[0]):
            mgr = w.mgr
            if mgr is None:  # starting
                continue
            versions.add_metric([str(p)], mgr.current.version)
            for fam in mgr.metrics.registry.collect():
                if fam.name.startswith("tailor_http_"):  # a partition manager serves no HTTP
                    continue
                out = merged.get(fam.name)
                if out is None:
                    out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                for s in fam.samples:
                    out.add_sample(s.name, {"partition": str(p), **s.labels}, s.value, s.timestamp, s.exemplar)
        yield versions
        yield from merged.values()


def metrics_app(shard, registry: CollectorRegistry):
    """The endpoint's ASGI application: GET /metrics, GET /healthz; 404 and 405 otherwise."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path not in ("/metrics", "/healthz"):
            status, ctype, body = 404, b"text/plain; charset=utf-8", b"not found\n"
        elif method not in ("GET", "HEAD"):
            status, ctype, body = 405, b"text/plain; charset=utf-8", b"method not allowed: GET only\n"
        elif path == "/metrics":
            status, ctype, body = 200, b"text/plain; version=0.0.4; charset=utf-8", generate_latest(registry)
        else:
            status, ctype, body = 200, b"application/json", json.dumps(health(shard)).encode()
        headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
        if status == 405:
            headers.append((b"allow", b"GET, HEAD"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    return app


def health(shard) -> dict:
    """``/healthz``: ok, or degraded (with the problems) when the bus has not taken the shard's heartbeat for over
    half its TTL or a partition's last cycle failed."""
    _, workers = shard.totals()
    age = max(time.monotonic() - shard.beat_ok, 0.0)
    problems = []
    if age > shard.ttl_s / 2:
        problems.append(f"the bus has not taken this shard's heartbeat for {age:.1f} s (TTL {shard.ttl_s:g} s)")
    failing = sorted(p for p, w in workers if w.mgr is not None and w.mgr.health.cycle_error)
    if failing:
        problems.append(f"update cycles failing in partitions {failing}")
    return {"status": "degraded" if problems else "ok", "shard": shard.cfg.shard_id, "problems": problems,
            "partitions": sorted(p for p, _ in workers), "heartbeat_age_s": round(age, 3),
            "versions": {str(p): w.version for p, w in workers}}


class MetricsServer:
    """The endpoint on ``host:port``, served by uvicorn in a daemon thread with the manager's HTTP bounds; HTTPS with
    ``tls`` = (certificate chain, key) PEM files (``tailor manager --bus ... --metrics-listen ... --tls-cert --tls-key``:
    the manager's own flags)."""

    def __init__(self, shard, host: str, port: int, tls: tuple[str, str] | None = None):
        import uvicorn

        from tailor.manager.httpserver import uvicorn_settings

        self.registry = CollectorRegistry()
        self.registry.register(ShardCollector(shard))
        http = _HTTPMetrics(self.registry)
        files = {"ssl_certfile": tls[0], "ssl_keyfile": tls[1]} if tls else {}
        config = uvicorn.Config(metrics_app(shard, self.registry), host=host, port=port, lifespan="off",
                                timeout_graceful_shutdown=5, **uvicorn_settings(shard.cfg.base, http), **files)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"shard-metrics-{port}", daemon=True)

    def start(self, timeout_s: float = 20.0) -> None:
        """Start serving; raises RuntimeError when the server did not start (the port taken, ...)."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the metrics endpoint did not start (is the port taken?)")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=15)
