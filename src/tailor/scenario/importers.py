"""Importers: turn link traces into per-ChunkSize capacity series.

Two formats (see data/traces/README.md):

* Mahimahi ``mm-link`` packet-delivery traces: one integer millisecond timestamp per line, each line one
  opportunity to deliver a 1500-byte packet; a repeated timestamp means several packets in that ms. The
  file loops with period = its last timestamp. Capacity over a window = lines * 1500 * 8 / window.
* Throughput series (Pensieve "cooked" format, e.g. confiwent/Real-world-bandwidth-traces):
  ``<time_s> <Mbps>`` per line; the value at ``time_s`` holds until the next line's time.

Both return ``(t_s, bw_mbps)`` with ``t_s = 0, chunk_s, 2*chunk_s, ...`` and the mean capacity of each
chunk (a final partial chunk is averaged over its own length). Capacities may be 0 (outages); callers
that need a positive bandwidth clamp with :data:`MIN_BW_MBPS`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tailor.errors import ScenarioError

PACKET_BITS = 1500 * 8  # mm-link delivers 1500-byte packets
MIN_BW_MBPS = 0.02  # floor for 0-capacity chunks: FB ATC 2G-DevelopingRural is 20 kbps (FACTS.md §1.4)


def _fail(path, line: int | None, field: str, rule: str, got: object) -> ScenarioError:
    where = f"{path}:{line}" if line else f"{path}"
    return ScenarioError(f"{where}: the {field!r} field must be {rule}. Got {got!r}.")


def _check_chunk(path, chunk_s: float) -> None:
    if not (isinstance(chunk_s, (int, float)) and chunk_s > 0):
        raise _fail(path, None, "chunk_s", "a number > 0", chunk_s)


def _read_lines(path: str | os.PathLike) -> list[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers; a missing or empty file is an error."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read trace file ({exc})") from exc
    rows = [(i, ln.strip()) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not rows:
        raise ScenarioError(f"{path}: trace file is empty (no data lines)")
    return rows


def parse_mahimahi(path: str | os.PathLike) -> np.ndarray:
    """Delivery timestamps (ms, non-decreasing integers) of an mm-link trace, validated line by line."""
    rows = _read_lines(path)
    try:  # fast path; any problem is re-found below by the line-by-line check that names the line
        stamps = np.array([text for _, text in rows], dtype=np.int64)
        ok = stamps[0] >= 0 and np.all(np.diff(stamps) >= 0)
    except (ValueError, OverflowError):
        ok = False
    if not ok:
        stamps = _check_mahimahi_lines(path, rows)
    if stamps[-1] <= 0:
        raise ScenarioError(f"{path}: trace spans 0 ms (last timestamp must be > 0 to define its period)")
    return stamps


def _check_mahimahi_lines(path, rows: list[tuple[int, str]]) -> np.ndarray:
    stamps, prev = [], 0
    for line, text in rows:
        try:
            ms = int(text)
        except ValueError:
            raise _fail(path, line, "timestamp_ms", "an integer number of milliseconds", text) from None
        if ms < 0:
            raise _fail(path, line, "timestamp_ms", ">= 0", text)
        if ms < prev:
            raise _fail(path, line, "timestamp_ms", f"non-decreasing (previous line has {prev})", text)
        stamps.append(ms)
        prev = ms
    return np.asarray(stamps, dtype=np.int64)


def load_mahimahi(path: str | os.PathLike, chunk_s: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Capacity (Mbps) per ``chunk_s`` step of one period of an mm-link trace."""
    _check_chunk(path, chunk_s)
    stamps = parse_mahimahi(path)
    period_s = stamps[-1] / 1000.0
    n = max(int(np.ceil(period_s / chunk_s - 1e-9)), 1)
    idx = np.minimum((stamps / 1000.0 // chunk_s).astype(np.int64), n - 1)
    packets = np.bincount(idx, minlength=n).astype(float)
    return _per_chunk(packets * PACKET_BITS / 1e6, period_s, chunk_s, n)


def _per_chunk(megabits: np.ndarray, duration_s: float, chunk_s: float, n: int):
    """Divide the megabits delivered in each chunk by that chunk's length (the last may be partial)."""
    t_s = np.arange(n) * chunk_s
    lengths = np.minimum(t_s + chunk_s, duration_s) - t_s
    return t_s, megabits / lengths


def parse_throughput_series(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """``(time_s, Mbps)`` rows of a throughput series, validated line by line."""
    times, rates = [], []
    for line, text in _read_lines(path):
        cols = text.split()
        if len(cols) != 2:
            raise _fail(path, line, "line", "two columns '<time_s> <Mbps>'", text)
        t = _number(path, line, "time_s", cols[0])
        mbps = _number(path, line, "Mbps", cols[1])
        if t < 0 or mbps < 0:
            raise _fail(path, line, "time_s" if t < 0 else "Mbps", ">= 0", cols[0] if t < 0 else cols[1])
        if times and t <= times[-1]:
            raise _fail(path, line, "time_s", f"greater than the previous time {times[-1]:g}", cols[0])
        times.append(t)
        rates.append(mbps)
    return np.asarray(times), np.asarray(rates)


def _number(path, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _fail(path, line, field, "a number", text) from None
    if not np.isfinite(value):
        raise _fail(path, line, field, "a finite number", text)
    return value


def load_throughput_series(path: str | os.PathLike, chunk_s: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean capacity (Mbps) per ``chunk_s`` step of a ``time_s Mbps`` series.

    Times are shifted to start at 0; the last sample lasts one median sample spacing (the format does
    not say how long it holds; a single-sample file lasts one chunk).
    """
    _check_chunk(path, chunk_s)
    times, rates = parse_throughput_series(path)
    times = times - times[0]
    last = float(np.median(np.diff(times))) if len(times) > 1 else chunk_s
    edges = np.append(times, times[-1] + last)
    duration = float(edges[-1])
    n = max(int(np.ceil(duration / chunk_s - 1e-9)), 1)
    # Megabits delivered up to each chunk boundary, from the cumulative step function.
    cum = np.concatenate([[0.0], np.cumsum(rates * np.diff(edges))])
    bounds = np.minimum(np.arange(n + 1) * chunk_s, duration)
    return _per_chunk(np.diff(np.interp(bounds, edges, cum)), duration, chunk_s, n)


def load_trace(path: str | os.PathLike, chunk_s: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Either format, told apart by the first data line: one column = mm-link, two = throughput series."""
    first = _read_lines(path)[0][1]
    if len(first.split()) == 1:
        return load_mahimahi(path, chunk_s)
    return load_throughput_series(path, chunk_s)
