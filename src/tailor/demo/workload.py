"""The bounded client workload: curl fetches from inside the client namespaces.

Each worker thread runs ``ip netns exec <ns> curl`` one fetch at a time (a new process, TLS handshake and
TCP connection per fetch, HTTP/1.1), with a short think time, until the demo's deadline or its fetch
budget. Every fetch is bounded by curl's ``--max-time``. The client-side ``time_total`` is the ground
truth the report uses; the wall-clock times let the report join each fetch with the server's record.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from dataclasses import asdict, dataclass

CURL_FORMAT = "%{http_code} %{size_download} %{time_connect} %{time_appconnect} %{time_starttransfer} %{time_total} %{local_port}"


@dataclass
class Fetch:
    group: str
    ns: str
    worker: int
    url: str
    t_start: float  # wall clock, latest possible curl start (end - time_total)
    t_end: float  # wall clock after curl returned
    t_spawn: float  # wall clock before the process was spawned (earliest possible start)
    ok: bool
    code: int
    size: int
    connect_s: float
    appconnect_s: float
    ttfb_s: float
    total_s: float
    local_port: int
    curl_exit: int
    source: str = ""  # the client address the fetch used (--interface), "" for the namespace's first

    def to_dict(self) -> dict:
        return asdict(self)


def fetch_once(ns: str, url: str, max_time_s: float, expect_size: int, group: str = "", worker: int = 0,
               source: str = "") -> Fetch:
    cmd = ["ip", "netns", "exec", ns, "curl", "-sk", "--http1.1", "-o", "/dev/null", "--max-time",
           f"{max_time_s:g}", "-w", CURL_FORMAT, *(["--interface", source] if source else []), url]
    t0 = time.time()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=max_time_s + 15)
        out, rc = res.stdout.split(), res.returncode
    except subprocess.TimeoutExpired:
        out, rc = [], -9
    t1 = time.time()
    try:
        code, size = int(out[0]), int(out[1])
        conn, app, ttfb, total = (float(x) for x in out[2:6])
        port = int(out[6])
    except (IndexError, ValueError):
        code, size, conn, app, ttfb, total, port = 0, 0, 0.0, 0.0, 0.0, t1 - t0, 0
    ok = rc == 0 and code == 200 and size == expect_size
    return Fetch(group, ns, worker, url, max(t0, t1 - total), t1, t0, ok, code, size, conn, app, ttfb, total, port, rc,
                 source)


class Workload:
    """Worker threads per client group; ``stop()`` ends them after their current fetch."""

    def __init__(self, seed: int, think_s: float = 0.2, max_fetches: int = 20_000):
        self.rng = random.Random(seed)
        self.think_s, self.max_fetches = think_s, max_fetches
        self.fetches: list[Fetch] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, group: str, ns: str, url: str, workers: int, max_time_s: float, size: int, deadline: float,
              sources: tuple[str, ...] = ("",)) -> None:
        """``sources``: the group's client addresses; each fetch comes from one drawn at random (clients of a
        group, so that the sticky per-client holdback of spec/decision.md splits every group)."""
        for w in range(workers):
            delay = self.rng.uniform(0, 1.0)  # stagger the workers of a group
            t = threading.Thread(target=self._loop, args=(group, ns, url, w, max_time_s, size, deadline, delay,
                                                          self.rng.randrange(1 << 30), tuple(sources)), daemon=True,
                                 name=f"wl-{group}-{w}")
            self._threads.append(t)
            t.start()

    def _loop(self, group, ns, url, worker, max_time_s, size, deadline, delay, seed, sources) -> None:
        rng = random.Random(seed)
        if self._stop.wait(delay):
            return
        while not self._stop.is_set() and time.time() + 1.0 < deadline:
            with self._lock:
                if len(self.fetches) >= self.max_fetches:
                    return
            f = fetch_once(ns, url, max_time_s, size, group, worker, rng.choice(sources))  # not cut at the deadline
            with self._lock:
                self.fetches.append(f)
            self._stop.wait(self.think_s * rng.uniform(0.5, 1.5))

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        end = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(timeout=max(0.1, end - time.monotonic()))

    def snapshot(self) -> list[Fetch]:
        with self._lock:
            return list(self.fetches)
