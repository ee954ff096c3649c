"""The manager's embedded store (DuckDB, one file under ``--data``) and its atomic state snapshot.

Tables: ``telemetry`` (one column per schema field, plus ``seq``, ``received``, ``source``; rows older
than the retention are deleted each cycle), ``prefix_history`` (the per-prefix archive, rewritten
each cycle), ``tables`` (every published decision table, versioned), ``audit`` (who/what changed
the table and why), ``cycles`` and ``group_history`` (what the dashboard plots).

Learned state (policy object, archive, guardrail evidence, the telemetry watermark) is one pickle,
written to a temporary file, fsynced and renamed over ``state.pkl``: a crash leaves either the old or
the new snapshot, and telemetry after the snapshot's watermark is fed again on restart.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import threading
from pathlib import Path

import duckdb
import pyarrow as pa

from tailor.table import load_schema

_SQL_TYPES = {"number": ("DOUBLE", pa.float64()), "integer": ("BIGINT", pa.int64()),
              "string": ("VARCHAR", pa.string()), "boolean": ("BOOLEAN", pa.bool_())}


def _telemetry_fields() -> list[tuple[str, str, pa.DataType]]:
    props = load_schema("telemetry.schema.json")["properties"]["records"]["items"]["properties"]
    return [(name, *_SQL_TYPES[sub.get("type", "string")]) for name, sub in props.items()]


FIELDS = _telemetry_fields()
_DDL = [
    "CREATE TABLE IF NOT EXISTS telemetry (seq BIGINT, received DOUBLE, source VARCHAR, "
    + ", ".join(f'"{n}" {t}' for n, t, _ in FIELDS) + ")",
    "CREATE TABLE IF NOT EXISTS tables (version BIGINT PRIMARY KEY, published_at DOUBLE, origin VARCHAR, "
    "etag VARCHAR, doc VARCHAR)",
    "CREATE TABLE IF NOT EXISTS audit (ts DOUBLE, version BIGINT, actor VARCHAR, action VARCHAR, reason VARCHAR)",
    "CREATE TABLE IF NOT EXISTS cycles (ts DOUBLE, version BIGINT, duration_s DOUBLE, rows BIGINT, groups BIGINT, "
    "improvement DOUBLE, window_improvement DOUBLE, treated BIGINT, holdback BIGINT)",
    "CREATE TABLE IF NOT EXISTS group_history (ts DOUBLE, grp VARCHAR, config VARCHAR, p DOUBLE, "
    "n_treated BIGINT, n_holdback BIGINT, improvement DOUBLE)",
    "CREATE TABLE IF NOT EXISTS prefix_history (prefix VARCHAR, goodput_mbps DOUBLE, loss DOUBLE, rtt_ms DOUBLE, "
    "samples BIGINT, last_s DOUBLE)",
]


class Store:
    """Thread-safe (one lock) access to the DuckDB file; every method is one short transaction."""

    def __init__(self, data_dir: str | Path):
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(str(self.dir / "tailor.duckdb"))
        self.lock = threading.Lock()
        with self.lock:
            for ddl in _DDL:
                self._run(ddl)

    def _run(self, sql: str, params: list | None = None) -> None:
        """Execute a statement and consume its result (DuckDB keeps a connection busy until then)."""
        self.con.execute(sql, params or []).fetchall()

    def close(self) -> None:
        with self.lock:
            self.con.close()

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        with self.lock:
            return self.con.execute(sql, params or []).fetchall()

    # -- telemetry
    def max_seq(self) -> int:
        return self.query("SELECT coalesce(max(seq), 0) FROM telemetry")[0][0]

    def insert_telemetry(self, batches: list[tuple[str, float, list[dict]]], seq0: int) -> int:
        """Append (source, received, records) batches; rows get seq0+1, seq0+2, ...; returns the last seq."""
        recs = [r for _, _, rs in batches for r in rs]
        if not recs:
            return seq0
        cols = {"seq": pa.array(range(seq0 + 1, seq0 + 1 + len(recs)), pa.int64()),
                "received": pa.array([t for _, t, rs in batches for _ in rs], pa.float64()),
                "source": pa.array([s for s, _, rs in batches for _ in rs], pa.string())}
        for name, _, typ in FIELDS:
            cols[name] = _column([r.get(name) for r in recs], typ)
        batch = pa.table(cols)
        with self.lock:
            self.con.register("_incoming", batch)
            try:
                self._run("INSERT INTO telemetry SELECT * FROM _incoming")
            finally:
                self.con.unregister("_incoming")
        return seq0 + len(recs)

    def feed_rows(self, after_seq: int, upto_seq: int) -> list[tuple]:
        from tailor.manager.feed import FEED_SQL

        return self.query(FEED_SQL, [after_seq, upto_seq])

    def delete_before(self, cutoff: float) -> int:
        with self.lock:
            n = self.con.execute("SELECT count(*) FROM telemetry WHERE time < ?", [cutoff]).fetchall()[0][0]
            if n:
                self._run("DELETE FROM telemetry WHERE time < ?", [cutoff])
                self._run("DELETE FROM group_history WHERE ts < ?", [cutoff])
                self._run("DELETE FROM cycles WHERE ts < ?", [cutoff])
            return n

    def telemetry_count(self) -> int:
        return self.query("SELECT count(*) FROM telemetry")[0][0]

    # -- tables and audit
    def save_table(self, doc: dict, origin: str, etag: str, at: float, actor: str, action: str, reason: str) -> None:
        with self.lock:
            self._run("INSERT INTO tables VALUES (?, ?, ?, ?, ?)", [doc["version"], at, origin, etag, json.dumps(doc)])
            self._run("INSERT INTO audit VALUES (?, ?, ?, ?, ?)", [at, doc["version"], actor, action, reason])

    def audit(self, at: float, version: int, actor: str, action: str, reason: str) -> None:
        with self.lock:
            self._run("INSERT INTO audit VALUES (?, ?, ?, ?, ?)", [at, version, actor, action, reason])

    def latest_table(self) -> tuple[dict, str] | None:
        rows = self.query("SELECT doc, origin FROM tables ORDER BY version DESC LIMIT 1")
        return (json.loads(rows[0][0]), rows[0][1]) if rows else None

    def recent_audit(self, limit: int = 20) -> list[tuple]:
        return self.query("SELECT ts, version, actor, action, reason FROM audit ORDER BY ts DESC, version DESC LIMIT ?", [limit])

    # -- what the dashboard plots
    def record_cycle(self, row: tuple, groups: list[tuple]) -> None:
        with self.lock:
            self._run("INSERT INTO cycles VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", list(row))
            if groups:
                self._insert_groups(groups)

    def _insert_groups(self, groups: list[tuple]) -> None:
        cols = list(zip(*groups))
        names = ("ts", "grp", "config", "p", "n_treated", "n_holdback", "improvement")
        types = (pa.float64(), pa.string(), pa.string(), pa.float64(), pa.int64(), pa.int64(), pa.float64())
        batch = pa.table({n: pa.array(list(c), t) for n, c, t in zip(names, cols, types)})
        self.con.register("_groups", batch)
        try:
            self._run("INSERT INTO group_history SELECT * FROM _groups")
        finally:
            self.con.unregister("_groups")

    def save_prefixes(self, archive) -> None:
        entries = archive._entries  # the archive exposes no bulk accessor; read-only use
        batch = pa.table({"prefix": list(entries), "goodput_mbps": [e.goodput_mbps for e in entries.values()],
                          "loss": [e.loss for e in entries.values()], "rtt_ms": [e.rtt_ms for e in entries.values()],
                          "samples": [e.samples for e in entries.values()], "last_s": [e.last_s for e in entries.values()]})
        with self.lock:
            self.con.register("_prefixes", batch)
            try:
                self._run("DELETE FROM prefix_history")
                self._run("INSERT INTO prefix_history SELECT * FROM _prefixes")
            finally:
                self.con.unregister("_prefixes")

    # -- learned state
    def save_state(self, state: dict) -> None:
        save_atomic(self.dir / "state.pkl", pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))

    def load_state(self) -> dict | None:
        path = self.dir / "state.pkl"
        if not path.exists():
            return None
        with open(path, "rb") as f:
            return pickle.load(f)


def _column(values: list, typ: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # e.g. 3.0 for an integer field (valid JSON Schema integer)
        return pa.array([None if v is None else int(v) for v in values], typ)


def save_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old or the new content."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
