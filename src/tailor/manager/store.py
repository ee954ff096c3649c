"""The manager's embedded store (DuckDB, one file under ``--data``) and its atomic state snapshot.

Tables: ``telemetry`` (one column per schema field, plus ``seq``, ``received``, ``source``; a field added to the
schema later is added to an existing store's table when it opens; rows older than the retention are deleted
each cycle), ``prefix_history`` (the per-prefix archive, rewritten
each cycle), ``tables`` (every published decision table, versioned), ``audit`` (who/what changed
the table and why), ``cycles`` and ``group_history`` (what the dashboard plots).

Durability: a telemetry insert is one DuckDB transaction; DuckDB appends it to its write-ahead log
before COMMIT returns, so a record whose insert returned survives ``kill -9`` (tests/test_hardening.py
measures it). A failed write (a full disk, most often) leaves DuckDB "invalidated" until the database is
reopened; :class:`Store` reopens it on the next call, so the store recovers by itself when space returns.
DuckDB can also report a COMMIT that succeeded and is durable together with a failed automatic checkpoint;
that insert counts as written (its rows are there after a reopen), so it is not acknowledged twice.

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


class StoreError(RuntimeError):
    """A store write failed (nothing of it was committed); the store reopens itself on the next call."""


_DURABLE_COMMIT = "COMMIT succeeded and is durable"  # DuckDB's wording when only the auto-checkpoint failed


class Store:
    """Thread-safe (one lock) access to the DuckDB file; every method is one short transaction."""

    def __init__(self, data_dir: str | Path):
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "tailor.duckdb"
        self.lock = threading.Lock()
        self.con = None
        self.write_failures = 0  # writes that failed (counted for /healthz and metrics)
        self.last_error: str | None = None  # the last write's error; None once a write succeeds again
        with self.lock:
            self._open()

    def _open(self) -> None:
        self.con = duckdb.connect(str(self.path))
        for ddl in _DDL:
            self._run(ddl)
        for name, sql_type, _ in FIELDS:  # a store written before a schema field was added (e.g. asn, region)
            self._run(f'ALTER TABLE telemetry ADD COLUMN IF NOT EXISTS "{name}" {sql_type}')

    def _reopen(self) -> None:
        """Close the (possibly invalidated) connection and open the file again (replays DuckDB's WAL)."""
        try:
            if self.con is not None:
                self.con.close()
        except duckdb.Error:
            pass
        self.con = None
        self._open()

    def _run(self, sql: str, params: list | None = None) -> None:
        """Execute a statement and consume its result (DuckDB keeps a connection busy until then)."""
        self.con.execute(sql, params or []).fetchall()

    def _write(self, fn) -> None:
        """Run ``fn()`` (statements of one write) under the lock; on failure reopen and raise StoreError."""
        with self.lock:
            try:
                if self.con is None:
                    self._open()
                fn()
            except (duckdb.Error, OSError) as err:
                durable = _DURABLE_COMMIT in str(err)
                if not durable:
                    self.write_failures += 1
                    self.last_error = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
                try:
                    self._reopen()
                except (duckdb.Error, OSError):
                    self.con = None  # tried again on the next call
                if not durable:
                    raise StoreError(self.last_error) from err
            self.last_error = None

    def _rollback(self) -> None:
        try:
            self.con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # the connection is invalidated; _write reopens it

    def close(self) -> None:
        with self.lock:
            if self.con is not None:
                self.con.close()
                self.con = None

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        with self.lock:
            if self.con is None:
                self._open()
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
        try:
            for name, _, typ in FIELDS:
                cols[name] = _column([r.get(name) for r in recs], typ)
            batch = pa.table(cols)
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as err:  # validation should prevent it
            raise StoreError(f"records cannot be stored: {err}") from err

        def write():
            self.con.register("_incoming", batch)
            try:
                self._run("INSERT INTO telemetry BY NAME SELECT * FROM _incoming")
            finally:
                self.con.unregister("_incoming")

        self._write(write)
        return seq0 + len(recs)

    def feed_rows(self, after_seq: int, upto_seq: int) -> list[tuple]:
        from tailor.manager.feed import FEED_SQL

        return self.query(FEED_SQL, [after_seq, upto_seq])

    def delete_before(self, cutoff: float) -> int:
        n = self.query("SELECT count(*) FROM telemetry WHERE time < ?", [cutoff])[0][0]
        if n:
            self._write(lambda: [self._run(f"DELETE FROM {t} WHERE {c} < ?", [cutoff])
                                 for t, c in (("telemetry", "time"), ("group_history", "ts"), ("cycles", "ts"))])
        return n

    def count_between(self, after_seq: int, upto_seq: int) -> int:
        return self.query("SELECT count(*) FROM telemetry WHERE seq > ? AND seq <= ?", [after_seq, upto_seq])[0][0]

    def telemetry_count(self) -> int:
        return self.query("SELECT count(*) FROM telemetry")[0][0]

    # -- tables and audit
    def save_table(self, doc: dict, origin: str, etag: str, at: float, actor: str, action: str, reason: str) -> None:
        def write():
            self._run("BEGIN TRANSACTION")
            try:
                self._run("INSERT INTO tables VALUES (?, ?, ?, ?, ?)", [doc["version"], at, origin, etag, json.dumps(doc)])
                self._run("INSERT INTO audit VALUES (?, ?, ?, ?, ?)", [at, doc["version"], actor, action, reason])
                self._run("COMMIT")
            except BaseException:
                self._rollback()
                raise

        self._write(write)

    def audit(self, at: float, version: int, actor: str, action: str, reason: str) -> None:
        self._write(lambda: self._run("INSERT INTO audit VALUES (?, ?, ?, ?, ?)", [at, version, actor, action, reason]))

    def latest_table(self) -> tuple[dict, str] | None:
        rows = self.query("SELECT doc, origin FROM tables ORDER BY version DESC LIMIT 1")
        return (json.loads(rows[0][0]), rows[0][1]) if rows else None

    def recent_audit(self, limit: int = 20) -> list[tuple]:
        return self.query("SELECT ts, version, actor, action, reason FROM audit ORDER BY ts DESC, version DESC LIMIT ?", [limit])

    # -- what the dashboard plots
    def record_cycle(self, row: tuple, groups: list[tuple]) -> None:
        def write():
            self._run("INSERT INTO cycles VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", list(row))
            if groups:
                self._insert_groups(groups)

        self._write(write)

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
        def write():
            self.con.register("_prefixes", batch)
            try:
                self._run("BEGIN TRANSACTION")
                self._run("DELETE FROM prefix_history")
                self._run("INSERT INTO prefix_history SELECT * FROM _prefixes")
                self._run("COMMIT")
            except BaseException:
                self._rollback()
                raise
            finally:
                self.con.unregister("_prefixes")

        self._write(write)

    # -- learned state
    def save_state(self, state: dict) -> None:
        self.save_state_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))

    def save_state_bytes(self, data: bytes) -> None:
        save_atomic(self.dir / "state.pkl", data)

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


def save_atomic(path: Path, data: bytes, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` so that readers see either the old or the new content (the file mode 0600).
    ``exclusive``: only where ``path`` does not exist yet (linked into place; FileExistsError if it does)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)  # the rename itself durable (a crash after it keeps the new file)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
