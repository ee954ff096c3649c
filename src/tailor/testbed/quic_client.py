"""Runs inside the client namespace (stdlib only): one tailor-fetch per fetch, one JSON line per fetch.

Like client_script.py (curl over TCP) it snapshots the *server* namespace's counters around each fetch, here the
UDP ones (datagrams in/out, socket buffer overflows) next to the TCP ones, and flushes each line at once so the
harness journals it when it arrives.

Usage: python3 quic_client.py SPEC.json
  SPEC: {"fetch_bin", "url", "max_time", "fetches": [{"key", "http": "3"|"2", "path"}], "gap_s"}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

try:  # run as a script in the client namespace: sys.path[0] is this directory
    from client_script import COUNTERS, counters, server_pid
except ImportError:  # imported as part of the package (the harness only needs __file__)
    from tailor.testbed.client_script import COUNTERS, counters, server_pid

UDP_COUNTERS = {**COUNTERS, "Udp": ("InDatagrams", "OutDatagrams", "RcvbufErrors", "SndbufErrors")}


def fetch(fetch_bin: str, url: str, http: str, max_time: float) -> tuple[dict, str, int]:
    cmd = [fetch_bin, "--http", http, "--insecure", "--timeout", f"{max_time:g}s", url]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=max_time + 10)
    except subprocess.TimeoutExpired:
        return {}, "tailor-fetch did not end within its timeout", -1
    try:
        rec = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        rec = {}
    return rec, res.stderr.strip()[-200:], res.returncode


def main(spec_path: str) -> int:
    spec = json.load(open(spec_path))
    pid = server_pid(os.environ.get("TL_SERVER_NS", ""))
    for f in spec["fetches"]:
        before = counters(pid, UDP_COUNTERS)
        started = time.time()
        rec, err, rc = fetch(spec["fetch_bin"], spec["url"] + f["path"], f["http"], float(spec["max_time"]))
        after = counters(pid, UDP_COUNTERS)
        rec.update(key=f["key"], started_unix=started, fetch_exit=rc, fetch_stderr=err,
                   **{f"srv_{k}": after[k] - before.get(k, 0) for k in after})
        print(json.dumps(rec), flush=True)
        time.sleep(float(spec.get("gap_s", 0.05)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
