"""Runs inside a tailor-link namespace (stdlib only): the response server or the replaying client of
`tailor testbed shared-link`.

Server: ``python3 sharedlink_flows.py serve IP PORT SECONDS OUT.jsonl`` accepts connections for SECONDS after the
first one (the client's own schedule bounds the rest); on each it reads one request line (the response size in
bytes, at most ``MAX_RESPONSE``), writes that many incompressible bytes in one call with ``TCP_NODELAY`` set (as
nginx does), waits for the client to close, then reads
the socket's ``TCP_INFO``: the smoothed RTT the sender measured (SmartIW's RTT, §III), the segments it
retransmitted and its retransmission timeouts (``tcpi_total_rto``, Linux 6.7 on; absent on older kernels). Each
connection's record is appended to OUT.jsonl as one line when it closes (the harness ends the server when the client
exits, so nothing is left for the end).

Client: ``python3 sharedlink_flows.py fetch SPEC.json`` opens one connection per scheduled response at its start
time (``flows``: ``[start_s, bytes]``), each in its own thread, and prints one JSON line per response: the time from
the request's send to the last byte (SmartIW's TCP response time: no handshake) and the connect time. It exits
``LINGER_S`` after the last response, so that the server has written every record.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time

CHUNK = 64 * 1024
MAX_RESPONSE = 16 * 1024 * 1024
# One write per response: written in 64 KB pieces, a piece's sub-MSS tail is sent at once and the response's last
# sub-MSS segment then waits, under Nagle's rule (Minshall's variant), for that tail's ACK: one extra round trip for
# every response above 64 KB, whatever the initial window (measured: a 78 KB response 67 ms in one write, 129 ms in
# 64 KB writes, at 60 ms RTT and IW 200). TCP_NODELAY as well, as web servers set it.
MAX_FLOWS = 5000
FLOW_TIMEOUT_S = 60.0
LINGER_S = 1.0
# struct tcp_info (linux/tcp.h): 8 bytes of u8 fields, then u32s; tcpi_rtt is the 16th u32 (us), tcpi_total_retrans
# the 24th; tcpi_total_rto (u16) and tcpi_total_rto_time (u32, ms) at bytes 240 and 244 (Linux 6.7 on).
_TCPI_RTT, _TCPI_TOTAL_RETRANS = 8 + 4 * 15, 8 + 4 * 23
_TCPI_TOTAL_RTO, _TCPI_TOTAL_RTO_TIME, _TCPI_LEN = 240, 244, 248


def tcp_info(sock: socket.socket) -> dict:
    """The smoothed RTT (us), total retransmitted segments and, where the kernel reports them, retransmission
    timeouts and the time spent in their recovery (ms; None before Linux 6.7) of a connected socket."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCPI_LEN)
    rec = {"srtt_us": struct.unpack_from("I", raw, _TCPI_RTT)[0],
           "retrans": struct.unpack_from("I", raw, _TCPI_TOTAL_RETRANS)[0], "rtos": None, "rto_time_ms": None}
    if len(raw) >= _TCPI_LEN:
        rec["rtos"] = struct.unpack_from("H", raw, _TCPI_TOTAL_RTO)[0]
        rec["rto_time_ms"] = struct.unpack_from("I", raw, _TCPI_TOTAL_RTO_TIME)[0]
    return rec


def serve(ip: str, port: int, seconds: float, out_path: str) -> int:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip, port))
    srv.listen(512)
    srv.settimeout(60)
    payload = memoryview(os.urandom(MAX_RESPONSE))
    lock = threading.Lock()
    sink = open(out_path, "a")
    threads: list[threading.Thread] = []
    deadline = None

    def one(conn: socket.socket, peer) -> None:
        rec = {"peer_port": peer[1], "error": ""}
        conn.settimeout(FLOW_TIMEOUT_S)
        try:
            line = b""
            while not line.endswith(b"\n") and len(line) < 32:
                part = conn.recv(32 - len(line))
                if not part:
                    break
                line += part
            size = int(line.strip() or b"-1")
            if not 0 < size <= MAX_RESPONSE:
                raise ValueError(f"request size {size} not in (0, {MAX_RESPONSE}]")
            rec["bytes"] = size
            rec["cc"] = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(payload[:size])
            while conn.recv(CHUNK):  # the client closes once it has every byte: everything is acknowledged
                pass
            rec.update(tcp_info(conn))
        except (OSError, ValueError) as e:
            rec["error"] = str(e)[:200]
        finally:
            conn.close()
        with lock:
            sink.write(json.dumps(rec) + "\n")
            sink.flush()

    try:
        while len(threads) < MAX_FLOWS:
            try:
                conn, peer = srv.accept()
            except TimeoutError:
                break
            if peer[0] == ip:  # tailor-link's readiness probe (--wait-port) dials from inside this namespace
                conn.close()
                continue
            if deadline is None:
                deadline = time.monotonic() + seconds
            t = threading.Thread(target=one, args=(conn, peer), daemon=True)
            t.start()
            threads.append(t)
            srv.settimeout(max(0.5, deadline - time.monotonic()))
    finally:
        srv.close()
    for t in threads:
        t.join(timeout=FLOW_TIMEOUT_S + 5)
    sink.close()
    return 0


def fetch(spec_path: str) -> int:
    spec = json.load(open(spec_path))
    flows = spec["flows"][:MAX_FLOWS]
    results: list[dict | None] = [None] * len(flows)
    start = time.monotonic()

    def run(i: int, at: float, size: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(FLOW_TIMEOUT_S)
        rec = {"flow": i, "start_s": at, "bytes": size, "error": ""}
        try:
            t0 = time.monotonic()
            s.connect((spec["server"], spec["port"]))
            rec["local_port"] = s.getsockname()[1]
            t1 = time.monotonic()
            s.sendall(f"{size}\n".encode())
            got = 0
            while got < size:
                data = s.recv(CHUNK)
                if not data:
                    break
                got += len(data)
            t2 = time.monotonic()
            rec.update(connect_ms=1000 * (t1 - t0), response_ms=1000 * (t2 - t1), late_ms=1000 * (t0 - start - at),
                       received=got)
            if got != size:
                rec["error"] = f"received {got} of {size} bytes"
        except OSError as e:
            rec["error"] = str(e)[:200]
        finally:
            s.close()
        results[i] = rec

    threads = []
    for i, (at, size) in enumerate(flows):
        wait = start + float(at) - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        t = threading.Thread(target=run, args=(i, float(at), int(size)), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=FLOW_TIMEOUT_S + 5)
    time.sleep(LINGER_S)
    for i, r in enumerate(results):
        print(json.dumps(r if r is not None else {"flow": i, "error": "flow did not finish"}), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        sys.exit(serve(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]))
    sys.exit(fetch(sys.argv[2]))
