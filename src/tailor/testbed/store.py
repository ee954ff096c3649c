"""Resumable storage: a line journal written per fetch, compacted into Parquet.

Parquet cannot be appended to, so each finished fetch is appended (and fsynced) to ``journal.jsonl`` the moment
its line arrives; emulator runs go to ``runs.jsonl``. ``compact()`` folds both journals into
``measurements.parquet`` / ``runs.parquet`` and removes them. A restart reads the keys from all four, so a
crash or Ctrl-C loses no finished fetch, and nothing is measured twice.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pandas as pd

from tailor.errors import ParameterError, check

MEASUREMENTS = "measurements.parquet"
RUNS = "runs.parquet"


class Store:
    def __init__(self, out_dir: str | Path):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def done_keys(self) -> set[str]:
        """Keys of fetches that finished with a valid response (failed fetches are measured again)."""
        df = self.measurements()
        if df.empty:
            return set()
        return set(df.loc[df["ok"].astype(bool), "key"])

    def append(self, row: dict) -> None:
        self._append_line(self.dir / "journal.jsonl", row)

    def append_run(self, run: dict) -> None:
        self._append_line(self.dir / "runs.jsonl", run)

    def _append_line(self, path: Path, row: dict) -> None:
        line = json.dumps(row, sort_keys=True) + "\n"
        with self._lock, open(path, "a+b") as fh:
            # a crash mid-write leaves a torn last line: the next row starts on its own line (until 2026-12-07 it
            # was glued to the fragment, and the whole journal failed to parse; found by review)
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    line = "\n" + line
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())

    def measurements(self) -> pd.DataFrame:
        return _merge(self.dir / MEASUREMENTS, self.dir / "journal.jsonl")

    def runs(self) -> pd.DataFrame:
        return _merge(self.dir / RUNS, self.dir / "runs.jsonl")

    def requeue_late_runs(self, max_p99_us: float) -> int:
        """Move fetches of runs whose emulator send-lateness p99 exceeded ``max_p99_us`` to discarded.parquet.

        Why: on the shared VM a CPU stall delays the emulator's clock and inflates times; such runs are measured
        again (the next `measure` finds their keys missing) and the discarded rows are kept for transparency."""
        self.compact()
        runs, df = self.runs(), self.measurements()
        if runs.empty or df.empty:
            return 0
        late = set(runs.loc[runs["emu_down_lateness_p99_us"] > max_p99_us, "run_id"])
        return self._discard(df, df["run_id"].isin(late))

    def requeue_conditions(self, conditions: set[str] | list[str]) -> int:
        """Move every fetch of the named conditions to discarded.parquet, so that the next `measure` fetches them again.

        Why: a short round trip shows the endpoints' CPU time (a TLS handshake at 4 ms RTT), which jobs running side by
        side inflate even where the emulator kept time (docs/testbed.md section 4a); such a condition is measured
        again one job at a time (``measure(..., serial=True)``). Unknown names are an error naming them."""
        self.compact()
        df = self.measurements()
        wanted = set(conditions)
        unknown = sorted(wanted - set(df["condition"])) if not df.empty else sorted(wanted)
        if unknown:
            raise ParameterError(f"The 'requeue_conditions' parameter names no measured condition: {', '.join(unknown)} "
                                 f"(no fetch of it in {self.dir}).")
        return self._discard(df, df["condition"].isin(wanted))

    def requeue_slow_handshakes(self, max_excess_ms: float) -> int:
        """Move fetches of runs whose TLS handshakes were slower than the same condition's quietest run's by more
        than ``max_excess_ms`` (:func:`handshake_excess`) to discarded.parquet, so that they are measured again.

        Why: the emulator keeping time does not make the endpoints' CPU time small; jobs side by side on two cores
        inflate every fetch of a run at a short round trip (docs/testbed.md section 4a). The handshake is the same
        bytes in every configuration, so a run's handshakes slower than its condition's quietest run's are the
        machine's, not the configuration's."""
        check(math.isfinite(max_excess_ms) and max_excess_ms > 0, "requeue_slow_handshakes", "max_excess_ms",
              "a positive number of ms", max_excess_ms)
        self.compact()
        df = self.measurements()
        if df.empty:
            return 0
        h = handshake_excess(df)
        slow = set(h.loc[h["excess_ms"] > max_excess_ms, "run_id"])
        return self._discard(df, df["run_id"].isin(slow))

    def _discard(self, df: pd.DataFrame, bad: pd.Series) -> int:
        """Append the rows ``bad`` selects to discarded.parquet, then keep the others as the measurements (so a crash
        in between leaves a row in both, never in neither); the number moved."""
        if bad.any():
            path = self.dir / "discarded.parquet"
            old = pd.read_parquet(path) if path.exists() else pd.DataFrame()
            _write(pd.concat([old, df[bad]], ignore_index=True), path)
            _write(df[~bad].reset_index(drop=True), self.dir / MEASUREMENTS)
        return int(bad.sum())

    def compact(self) -> pd.DataFrame:
        """Fold journals into Parquet (last record per key wins, so a successful retry replaces a failure)."""
        with self._lock:
            df = self.measurements()
            if not df.empty:
                df = df.sort_values("started_unix").drop_duplicates("key", keep="last").reset_index(drop=True)
                _write(df, self.dir / MEASUREMENTS)
            runs = self.runs()
            if not runs.empty:
                _write(runs.drop_duplicates("run_id", keep="last").reset_index(drop=True), self.dir / RUNS)
            for name in ("journal.jsonl", "runs.jsonl"):
                (self.dir / name).unlink(missing_ok=True)
        return df


HANDSHAKE_QUANTILE = 0.25  # a run's handshakes: the machine's contention lifts them all, a lost packet only some
HANDSHAKE_MIN_FETCHES = 3


def handshake_excess(df: pd.DataFrame) -> pd.DataFrame:
    """Per run of object fetches (curl): the lower quartile of its TLS handshake times (``t_tls - t_connect``, ms)
    and its excess over the lowest such quartile among the runs of the same condition with at least
    ``HANDSHAKE_MIN_FETCHES`` valid fetches (runs with fewer get no excess: NaN).

    The server's handshake flight (an EC P-256 certificate) fits every initial window measured, so the handshake
    does not depend on the configuration: what separates two runs of one condition is the machine (or a loss on
    more than a quarter of a run's handshakes, which the quartile leaves to the upper part)."""
    cols = ["run_id", "condition", "t_tls", "t_connect", "ok"]
    if df.empty or any(c not in df for c in cols):
        return pd.DataFrame(columns=["run_id", "condition", "fetches", "q_ms", "excess_ms"])
    d = df[df["ok"].astype(bool)]
    if "page" in d:
        d = d[d["page"].isna() | (d["page"] == "")]
    tls = (pd.to_numeric(d["t_tls"], errors="coerce") - pd.to_numeric(d["t_connect"], errors="coerce")) * 1000.0
    d = d.assign(tls_ms=tls)[tls.notna() & (tls > 0)]
    g = d.groupby("run_id").agg(condition=("condition", "first"), fetches=("tls_ms", "size"),
                                q_ms=("tls_ms", lambda x: float(x.quantile(HANDSHAKE_QUANTILE)))).reset_index()
    enough = g["fetches"] >= HANDSHAKE_MIN_FETCHES
    ref = g[enough].groupby("condition")["q_ms"].min()
    g["excess_ms"] = (g["q_ms"] - g["condition"].map(ref)).where(enough)
    return g


def _merge(parquet: Path, journal: Path) -> pd.DataFrame:
    parts = []
    if parquet.exists():
        parts.append(pd.read_parquet(parquet))
    if journal.exists():
        rows = []
        for line in journal.read_text().splitlines():
            try:
                row = json.loads(line) if line.strip() else None
            except ValueError:  # a line torn by a crash (fetches measured again: not in done_keys)
                continue
            if isinstance(row, dict):
                rows.append(row)
        if rows:
            parts.append(pd.DataFrame(rows))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _write(df: pd.DataFrame, path: Path) -> None:
    """Write atomically: a crash during compaction leaves the old file and the journal intact."""
    tmp = path.with_suffix(".tmp")
    df.to_parquet(tmp, index=False, compression="zstd")
    os.replace(tmp, path)
