"""Runs inside a tailor-link namespace (stdlib only): the bulk sender (server side) or the receiver (client side).

Sender: ``python3 fairness_flows.py send IP PORT SECONDS OUT.json`` accepts connections and writes incompressible bytes
on each as fast as TCP allows until SECONDS after the first accept; each connection's congestion control is
read back with ``getsockopt(TCP_CONGESTION)`` and its initial cwnd is whatever the route set, so a run can
check that tuned flows really ran the tuned algorithm. It writes the per-flow list to OUT.json at the end.

Receiver: ``python3 fairness_flows.py recv SPEC.json`` opens the flows (tuned ones bound to the tuned source
address, whose server-side route carries the tuned ``congctl``/``initcwnd``), reads them in threads, and
prints one JSON line per flow: bytes received per 100 ms bucket, so the caller can pick the steady window.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

CHUNK = 64 * 1024
BUCKET_S = 0.1


def send(ip: str, port: int, seconds: float, out_path: str, max_flows: int = 256) -> int:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip, port))
    srv.listen(max_flows)
    srv.settimeout(60)
    payload = os.urandom(CHUNK)
    stats: list[dict] = []
    lock = threading.Lock()
    threads = []
    deadline = [None]

    def pump(conn: socket.socket, peer) -> None:
        cc = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
        sent = 0
        conn.settimeout(5)
        try:
            while time.monotonic() < deadline[0]:
                sent += conn.send(payload)
        except OSError:
            pass
        finally:
            conn.close()
        with lock:
            stats.append({"peer": f"{peer[0]}:{peer[1]}", "cc": cc, "sent": sent})

    try:
        while len(threads) < max_flows:
            try:
                conn, peer = srv.accept()
            except TimeoutError:
                break
            if peer[0] == ip:  # tailor-link's readiness probe (--wait-port) dials from inside this namespace
                conn.close()
                continue
            if deadline[0] is None:
                deadline[0] = time.monotonic() + seconds
            t = threading.Thread(target=pump, args=(conn, peer), daemon=True)
            t.start()
            threads.append(t)
            if time.monotonic() > deadline[0]:
                break
            srv.settimeout(max(0.1, deadline[0] - time.monotonic()))
    finally:
        srv.close()
    for t in threads:
        t.join(timeout=seconds + 10)
    with open(out_path + ".tmp", "w") as fh:  # the server's stdout is not the harness's; the filesystem is shared
        json.dump(stats, fh)
    os.replace(out_path + ".tmp", out_path)
    return 0


def recv(spec_path: str) -> int:
    spec = json.load(open(spec_path))
    flows, seconds = spec["flows"], float(spec["seconds"])
    for addr in {f["src"] for f in flows if f["src"] != os.environ.get("TL_CLIENT_IP")}:
        os.system(f"ip addr add {addr}/32 dev lo 2>/dev/null")  # the tuned source address (client namespace only)
    n_buckets = int(seconds / BUCKET_S) + 20
    results = [None] * len(flows)
    start = time.monotonic()

    def run(i: int, f: dict) -> None:
        buckets = [0] * n_buckets
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((f["src"], 0))
        s.settimeout(10)
        err = ""
        try:
            s.connect((spec["server"], spec["port"]))
            local = s.getsockname()
            while True:
                data = s.recv(CHUNK)
                if not data:
                    break
                b = int((time.monotonic() - start) / BUCKET_S)
                if b < n_buckets:
                    buckets[b] += len(data)
        except OSError as e:
            err, local = str(e), ("", 0)
        finally:
            s.close()
        results[i] = {"flow": i, "tuned": f["tuned"], "src": f["src"], "local_port": local[1],
                      "buckets": buckets, "bytes": sum(buckets), "error": err}

    threads = []
    for i, f in enumerate(flows):
        t = threading.Thread(target=run, args=(i, f), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(float(spec.get("stagger_s", 0.01)))
    for t in threads:
        t.join(timeout=seconds + 30)
    for r in results:
        print(json.dumps(r if r is not None else {"error": "flow did not finish"}), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "send":
        sys.exit(send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]))
    sys.exit(recv(sys.argv[2]))
