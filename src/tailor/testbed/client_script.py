"""Runs inside the client namespace (stdlib only): fetch each object with curl, print one JSON line per fetch.

Why a script rather than a shell loop: each fetch also snapshots the *server* namespace's TCP counters
(``/proc/<nginx pid>/net/{snmp,netstat}``) before and after, so the record carries server-side transport
statistics (segments sent, retransmissions, RTOs, tail-loss probes) without the eBPF agent; and each line
is flushed as soon as the fetch ends, so the harness journals it at once (a crash loses nothing finished).

Usage: python3 client_script.py SPEC.json   (SPEC: {"url": ..., "fetches": [{"key","http","path"}], "max_time": s})
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CURL_FORMAT = ('{"http_version":"%{http_version}","code":%{response_code},"size":%{size_download},'
               '"t_connect":%{time_connect},"t_tls":%{time_appconnect},"t_ttfb":%{time_starttransfer},'
               '"t_total":%{time_total},"num_connects":%{num_connects}}')
COUNTERS = {"Tcp": ("OutSegs", "RetransSegs"),
            "TcpExt": ("TCPTimeouts", "TCPLossProbes", "TCPSackRecovery", "TCPFastRetrans",
                       "TCPSlowStartRetrans", "TCPSpuriousRTOs", "TCPLostRetransmit")}


def server_pid(ns: str) -> str | None:
    """A process of the server namespace (nginx), whose /proc/PID/net/ shows that namespace's counters."""
    try:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    pids = out.split()
    return pids[-1] if pids else None


def counters(pid: str | None, wanted: dict = COUNTERS) -> dict[str, int]:
    if pid is None:
        return {}
    out: dict[str, int] = {}
    for fname in ("snmp", "netstat"):
        try:
            lines = open(f"/proc/{pid}/net/{fname}").read().splitlines()
        except OSError:
            return {}
        for head, vals in zip(lines[::2], lines[1::2]):
            proto, names = head.split(":", 1)
            for name, val in zip(names.split(), vals.split(":", 1)[1].split()):
                if name in wanted.get(proto, ()):
                    out[name] = int(val)
    return out


def fetch(url: str, http: str, max_time: float) -> tuple[dict, str]:
    flag = "--http1.1" if http == "1.1" else "--http2"
    cmd = ["curl", "-sSk", flag, "--max-time", str(max_time), "-o", "/dev/null", "-w", CURL_FORMAT, url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=max_time + 10)
    try:
        rec = json.loads(res.stdout)
    except json.JSONDecodeError:
        rec = {}
    rec["curl_exit"] = res.returncode
    return rec, res.stderr.strip()[-200:]


def main(spec_path: str) -> int:
    spec = json.load(open(spec_path))
    pid = server_pid(os.environ.get("TL_SERVER_NS", ""))
    for f in spec["fetches"]:
        before = counters(pid)
        started = time.time()
        rec, err = fetch(spec["url"] + f["path"], f["http"], float(spec["max_time"]))
        after = counters(pid)
        rec.update(key=f["key"], started_unix=started, error=err,
                   **{f"srv_{k}": after[k] - before.get(k, 0) for k in after})
        print(json.dumps(rec), flush=True)
        time.sleep(float(spec.get("gap_s", 0.05)))  # let the last FIN/ACKs drain so fetches do not overlap
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
