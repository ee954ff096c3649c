"""Prometheus metrics of one manager (its own registry, so several managers can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.batches = Counter("tailor_ingest_batches", "telemetry batches by result", ["result"], registry=r)
        self.records = Counter("tailor_ingest_records", "telemetry records acknowledged (validated and durable in the store)", registry=r)
        self.rejected = Counter("tailor_ingest_rejected_records", "telemetry records rejected by validation", registry=r)
        self.dropped = Counter("tailor_ingest_dropped_records", "valid records dropped: ingest queue full", registry=r)
        self.edge_dropped = Counter("tailor_edge_dropped_records", "records edges report they dropped", registry=r)
        self.write_failed = Counter("tailor_store_write_failed_records",
                                    "valid records whose store write failed (answered 503, not acknowledged)", registry=r)
        self.cycle_failures = Counter("tailor_update_cycle_failures", "update cycles that failed (last good table kept)",
                                      registry=r)
        self.quarantined = Counter("tailor_quarantined_records",
                                   "stored records skipped by learning after repeated failed cycles over them", registry=r)
        self.not_guarded = Counter("tailor_feed_unguarded_records",
                                   "records the guardrails do not keep: a configuration outside the space or a group "
                                   "no table has", ["reason"], registry=r)
        self.stored = Counter("tailor_store_records", "telemetry records written to the store", registry=r)
        self.queue = Gauge("tailor_ingest_queue_records", "records waiting in the ingest queue", registry=r)
        self.rate = Gauge("tailor_ingest_records_per_second", "records stored per second over the last cycle", registry=r)
        self.cycle = Histogram("tailor_update_cycle_seconds", "duration of an update cycle", registry=r,
                               buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.groups = Gauge("tailor_groups", "groups in the published decision table", registry=r)
        self.version = Gauge("tailor_table_version", "version of the published decision table", registry=r)
        self.improvement = Gauge("tailor_improvement_vs_holdback",
                                 "1 - treated/holdback geometric-mean completion time (cumulative)", registry=r)
        self.window_improvement = Gauge("tailor_improvement_vs_holdback_window",
                                        "1 - treated/holdback geometric-mean completion time (last cycle)", registry=r)
        self.rollbacks = Counter("tailor_rollbacks", "group configurations rolled back", registry=r)
        self.override_regressions = Counter("tailor_override_regressions",
                                            "group configurations of an operator's override found significantly "
                                            "slower than holdback (once per override)", registry=r)
        # the HTTP server's own bounds (tailor.manager.httpserver): --max-connections, --max-connections-per-address,
        # --header-timeout, --body-timeout, --write-timeout
        self.http_refused = Counter("tailor_http_refused_connections",
                                    "connections the HTTP server closed: over --max-connections at accept "
                                    "(connections), over --max-connections-per-address from one client address "
                                    "(address), a request's headers or body not complete in time "
                                    "(header_timeout, body_timeout), a client not taking what the server writes "
                                    "in time (write_timeout)", ["reason"], registry=r)
        self.http_connections = Gauge("tailor_http_connections", "open HTTP connections", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
