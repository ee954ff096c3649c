"""Server-side congestion-window traces of Chromium page loads: where loss-based HTTP/2 loses its time.

MODEL.md section 6a ("Loss-based HTTP/2 on the paths where it loses"): over HTTP/2, CUBIC takes 1.1-1.7x BBR's time
on some tb-v3 cells where the page timeline gives 1.0x, and the server's counters do not say why. This harness
measures a few page loads per congestion control on one condition, as the testbed does (``tailor-link``, nginx,
headless Chromium; ``tailor.testbed.campaign.harness``), with the kernel's tracepoints on (a tracefs instance of its
own; root): ``tcp:tcp_probe`` (every segment a server socket on the pages' ports receives: cwnd, ssthresh, srtt,
snd_una, snd_nxt), ``tcp:tcp_cong_state_set`` (Open / Disorder / CWR / Recovery / Loss) and
``tcp:tcp_retransmit_skb``. Per load and server connection it reports bytes, duration, how long the connection had
data in flight, its peak window, its recoveries and timeouts (Loss state entries), retransmissions, the window each
recovery ended at and the time the window spent below the path's BDP while in flight.

    PYTHONPATH=src .venv/bin/python bench/h2_cwnd_trace.py --condition 3g-peak --page page-light-1 --reps 4 \\
        --json bench/results/h2_cwnd_trace.json

With ``--object-bytes N`` it fetches one object of N bytes with curl instead (tb-v2's object workload, the TLS
port): MODEL.md section 6a's `wpt-dsl` 50 KB cell, where whether the one dropped segment is the response's tail
(found by a probe timeout) or has segments after it (found by SACK) decides the time::

    PYTHONPATH=src .venv/bin/python bench/h2_cwnd_trace.py --condition wpt-dsl --object-bytes 51200 --ccs cubic,bbr \\
        --http 1.1,2 --iw 10 --reps 3 --json bench/results/object_ack_trace.json

``--report FILE ...`` prints, from saved files, each load's other large connections (cross-origin, 100 KB or
more): the window at their first loss, after it and at most, and their duration (MODEL.md 6a, 2026-12-03)::

    PYTHONPATH=src .venv/bin/python bench/h2_cwnd_trace.py --report bench/results/h2_cwnd_trace_medium2.json

Per connection it also reports the retransmissions' times and the longest wait for the next cumulative ACK with the
bytes still unacked when it began.

Needs root, Chromium, nginx and tailor-link (``./tailor --help`` builds it); the machine to itself (a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from tailor.testbed.campaign import harness
from tailor.testbed.conditions import CATALOG
from tailor.testbed.pages import H1_PORT, H2_PORT
from tailor.testbed.plan import Plan, Transport
from tailor.testbed.server import TLS_PORT

EVENTS = ("tcp/tcp_probe", "tcp/tcp_cong_state_set", "tcp/tcp_retransmit_skb")
STATES = {0: "open", 1: "disorder", 2: "cwr", 3: "recovery", 4: "loss"}
MSS = 1448
_LINE = re.compile(r"^\s*\S+\s+\[\d+\]\s+\S+\s+([\d.]+):\s+(\w+):\s+(.*)$")
_FIELD = re.compile(r"(\w+)=(\S+)")


class Tracer:
    """A tracefs instance of our own with the three TCP tracepoints, filtered to the pages' and objects' server
    ports."""

    def __init__(self, name: str = "tailor-cwnd"):
        self.mounted = None
        root = Path("/sys/kernel/tracing")
        if not (root / "instances").exists():
            self.mounted = Path(tempfile.mkdtemp(prefix="tailor-tracefs-"))
            subprocess.run(["mount", "-t", "tracefs", "nodev", str(self.mounted)], check=True)
            root = self.mounted
        self.dir = root / "instances" / name
        try:
            if self.dir.exists():
                self.dir.rmdir()
            self.dir.mkdir()
            (self.dir / "trace_clock").write_text("mono")
            (self.dir / "buffer_size_kb").write_text("65536")
            ports = f"sport == {H2_PORT} || sport == {H1_PORT} || sport == {TLS_PORT}"  # pages, objects
            for ev in EVENTS:
                (self.dir / "events" / ev / "filter").write_text(ports)
                (self.dir / "events" / ev / "enable").write_text("1")
        except OSError:
            self.close()
            raise

    def on(self, yes: bool) -> None:
        (self.dir / "tracing_on").write_text("1" if yes else "0")

    def read(self) -> str:
        return (self.dir / "trace").read_text()

    def clear(self) -> None:
        (self.dir / "trace").write_text("")

    def close(self) -> None:
        if self.dir.exists():
            self.on(False)
            for ev in EVENTS:
                (self.dir / "events" / ev / "enable").write_text("0")
            self.dir.rmdir()
        if self.mounted is not None:
            subprocess.run(["umount", str(self.mounted)], check=True)
            self.mounted.rmdir()


def parse(text: str, offset: float) -> list[dict]:
    """Trace lines -> events with wall-clock times (``offset`` = time.time() - time.monotonic())."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        ev = {"t": float(m.group(1)) + offset, "event": m.group(2)}
        ev.update(dict(_FIELD.findall(m.group(3))))
        out.append(ev)
    return out


def _port(ev: dict) -> str | None:
    """The client's port: the connection's key within one load (tcp_cong_state_set prints no socket address)."""
    if "dport" in ev:
        return ev["dport"]
    dest = ev.get("dest", "")
    return dest.rsplit(":", 1)[1] if ":" in dest else None


def connections(events: list[dict]) -> dict:
    """Per server connection (client port): its probe samples, state changes and retransmissions, in time order."""
    conns: dict = defaultdict(lambda: {"probe": [], "state": [], "retrans": []})
    for ev in events:
        port = _port(ev)
        if port is None:
            continue
        if ev["event"] == "tcp_probe":
            conns[port]["probe"].append((ev["t"], int(ev["snd_cwnd"]), int(ev["ssthresh"]), int(ev["srtt"]),
                                         int(ev["snd_una"], 16), int(ev["snd_nxt"], 16)))
        elif ev["event"] == "tcp_cong_state_set":
            conns[port]["state"].append((ev["t"], int(ev["cong_state"])))
        elif ev["event"] == "tcp_retransmit_skb":
            conns[port]["retrans"].append(ev["t"])
    return conns


def summary(conn: dict, bdp: float) -> dict | None:
    """One server connection of a load: what it sent and where its time went."""
    p = conn["probe"]
    if len(p) < 2:
        return None
    t = np.array([x[0] for x in p])
    cwnd = np.array([x[1] for x in p], float)
    una = np.array([x[4] for x in p], dtype=np.int64)
    nxt = np.array([x[5] for x in p], dtype=np.int64)
    acked = int((una[-1] - una[0]) % 2**32)
    inflight = ((nxt - una) % 2**32) > 0
    dt = np.diff(t, append=t[-1])
    states = conn["state"]
    ends, time_in = [], defaultdict(float)  # the window when each recovery or loss episode ended; time per state
    for (ts, s), nxt_s in zip(states, states[1:] + [(None, None)]):
        time_in[STATES.get(s, str(s))] += max((t[-1] if nxt_s[0] is None else nxt_s[0]) - ts, 0.0)
        if s in (3, 4) and nxt_s[0] is not None:
            ends.append(int(cwnd[min(np.searchsorted(t, nxt_s[0]), len(cwnd) - 1)]))
    first = next((ts for ts, st in states if st in (3, 4)), None)  # the window when the first episode began
    at_first = int(cwnd[max(np.searchsorted(t, first) - 1, 0)]) if first is not None else None
    # the longest wait for the next cumulative ACK while data was in flight, and how many bytes were still unacked
    # when it began (1448 = only the last segment: a lost tail, found by a probe timeout)
    moved = np.concatenate([[0], np.flatnonzero(((una[1:] - una[:-1]) % 2**32) > 0) + 1])
    gaps = np.diff(t[moved])
    k = int(np.argmax(gaps)) if len(gaps) else None
    step = max(1, len(t) // 60)
    series = [[round(1000 * (t[i] - t[0])), int(cwnd[i]), int(p[i][2]) if p[i][2] < 1e6 else -1,
               int((nxt[i] - una[i]) % 2**32) // MSS] for i in range(0, len(t), step)]
    return {"series_ms_cwnd_ssthresh_inflight": series, "bytes": acked, "start": float(t[0]),
            "duration_ms": round(1000 * (t[-1] - t[0]), 1),
            "busy_ms": round(1000 * float(dt[inflight].sum()), 1),
            "below_bdp_busy_ms": round(1000 * float(dt[inflight & (cwnd < bdp)].sum()), 1),
            "cwnd_max": int(cwnd.max()), "srtt_max_ms": round(max(x[3] for x in p) / 1000, 1),  # tcp_probe: srtt_us >> 3 = microseconds
            "recoveries": sum(1 for _, s in states if s == 3), "timeouts": sum(1 for _, s in states if s == 4),
            "retransmits": len(conn["retrans"]), "retransmit_ms": [round(1000 * (x - t[0])) for x in conn["retrans"]],
            "longest_ack_wait_ms": round(1000 * float(gaps[k]), 1) if k is not None else None,
            "unacked_at_longest_wait": int((una[-1] - una[moved[k]]) % 2**32) if k is not None else None,
            "cwnd_at_first_episode": at_first, "cwnd_after_episodes": ends,
            "ms_in": {k: round(1000 * v, 1) for k, v in time_in.items()}}


def _keep_one_series(conns: list[dict]) -> list[dict]:
    """The window's time series only for a load's largest connection (the file stays small)."""
    for c in conns[1:]:
        c.pop("series_ms_cwnd_ssthresh_inflight", None)
    return conns


OTHER_BYTES = 100_000  # a connection other than the page's first that carries at least this much


def report_others(results: dict) -> None:
    """Per load: the page's first connection and every other connection carrying ``OTHER_BYTES`` or more (a
    cross-origin bundle or image), with the window at its first loss episode, its largest window and its duration:
    MODEL.md 6a's finding of 2026-12-03 (a second connection cut early stays small under a loss-based sender)."""
    for key, loads in results.items():
        if key == "emulator":
            continue
        print(f"\n{key}: PLT median {np.median([ld['plt_ms'] for ld in loads]):.0f} ms")
        for ld in loads:
            conns = ld["connections"]
            if not conns:
                continue
            t0 = min(c["start"] for c in conns)
            first = max((c for c in conns if c["start"] == t0), key=lambda c: c["bytes"])
            others = sorted((c for c in conns if c is not first and c["bytes"] >= OTHER_BYTES), key=lambda c: c["start"])
            print(f"  PLT {ld['plt_ms']:5.0f} ms; first connection {first['bytes'] // 1000} KB in {first['duration_ms']:.0f} ms, "
                  f"cwnd max {first['cwnd_max']}" + "".join(
                      f"; +{1000 * (c['start'] - t0):.0f} ms: {c['bytes'] // 1000} KB in {c['duration_ms']:.0f} ms, cwnd "
                      f"at first loss {c['cwnd_at_first_episode']}, after {c['cwnd_after_episodes'][:2]}, max {c['cwnd_max']}"
                      for c in others))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", nargs="+", metavar="FILE", default=None,
                    help="no measurement: print the other large connections' windows from saved --json files")
    ap.add_argument("--condition", default="3g-peak", choices=sorted(CATALOG))
    ap.add_argument("--page", default="page-light-1")
    ap.add_argument("--object-bytes", type=int, default=None,
                    help="fetch one object of this size with curl instead of a page with Chromium")
    ap.add_argument("--ccs", default="cubic,bbr")
    ap.add_argument("--http", default="2", help="comma-separated HTTP versions (2, 1.1)")
    ap.add_argument("--iw", type=int, default=10)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.report:
        for f in args.report:
            for name, run in json.loads(Path(f).read_text()).items():
                print(f"## {name} (BDP {run['meta']['bdp_segments']:.0f} segments)")
                report_others(run["loads"])
        return
    if os.geteuid() != 0:
        raise SystemExit("bench/h2_cwnd_trace.py: needs root (network namespaces and tracefs)")
    cond = CATALOG[args.condition]
    bdp = cond.down_mbps * 1e6 / 8 * cond.rtt_ms / 1000 / MSS
    plan = Plan([cond], [args.object_bytes] if args.object_bytes else [],
                [Transport(cc, args.iw) for cc in args.ccs.split(",")], http=args.http.split(","), reps=args.reps,
                max_fetch_s=120.0, pages=[] if args.object_bytes else [args.page])
    started = time.time()
    offset = time.time() - time.monotonic()
    results: dict = {}
    tracer = Tracer()
    try:
        with tempfile.TemporaryDirectory(prefix="tailor-cwnd-") as store, harness(plan, Path(store)) as run:
            for job in plan.jobs():
                rows: list[dict] = []
                tracer.clear()
                tracer.on(True)
                stats = run(job, list(job.fetches), rows.append)
                tracer.on(False)
                events = parse(tracer.read(), offset)
                loads = sorted((r for r in rows if r.get("ok")), key=lambda r: r["started_unix"])
                n_conns = 0
                for r in loads:  # a load's events: those inside its wall time
                    end = r["started_unix"] + (r["wall_ms"] if "wall_ms" in r else r["completion_ms"] + 500.0) / 1000
                    conns = connections([e for e in events if r["started_unix"] <= e["t"] < end])
                    n_conns += len(conns)
                    own = [s for s in (summary(c, bdp) for c in conns.values()) if s]
                    key = f"{job.transport.cc} HTTP/{r['http']}"
                    results.setdefault(key, []).append({
                        "plt_ms": r["completion_ms"], "server": {k: r.get(f"srv_{k}") for k in
                                                                 ("RetransSegs", "TCPSackRecovery", "TCPTimeouts")},
                        "connections": _keep_one_series(sorted(own, key=lambda s: -s["bytes"]))})
                print(f"{job.name}: {len(loads)} loads, {n_conns} server connections, emulator down p99 "
                      f"lateness {stats.get('emu_down_lateness_p99_us')} us, queue drops "
                      f"{stats.get('emu_down_queue_drops')}, random drops {stats.get('emu_down_random_drops')}",
                      flush=True)
                results.setdefault("emulator", {})[job.name] = {
                    k: v for k, v in stats.items() if k.startswith("emu_") or k in ("load_start", "load_end")}
    finally:
        tracer.close()
    for key, loads in results.items():
        if key == "emulator":
            continue
        print(f"\n{key} (BDP {bdp:.0f} segments)")
        for ld in loads:
            big = ld["connections"][0] if ld["connections"] else {}
            print(f"  PLT {ld['plt_ms']:7.0f} ms, {len(ld['connections'])} conns; largest: {big.get('bytes', 0) // 1024} KB "
                  f"busy {big.get('busy_ms')} ms (cwnd < BDP {big.get('below_bdp_busy_ms')} ms), cwnd max "
                  f"{big.get('cwnd_max')} (at the first episode {big.get('cwnd_at_first_episode')}), recoveries {big.get('recoveries')}, timeouts {big.get('timeouts')}, "
                  f"retrans {big.get('retransmits')} at {big.get('retransmit_ms')} ms, cwnd after "
                  f"{big.get('cwnd_after_episodes')}, in {big.get('ms_in')}; longest ACK wait {big.get('longest_ack_wait_ms')} ms "
                  f"with {big.get('unacked_at_longest_wait')} bytes unacked")
    if not args.object_bytes:
        report_others(results)
    if args.json:
        what = f"object {args.object_bytes} B" if args.object_bytes else args.page
        meta = {"condition": args.condition, "page": what, "iw": args.iw, "reps": args.reps, "bdp_segments": bdp,
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_s": round(time.time() - started, 1),
                "load1": os.getloadavg()[0]}
        path = Path(args.json)
        data = json.loads(path.read_text()) if path.exists() else {}
        data[f"{args.condition} {what} IW {args.iw} HTTP/{args.http}"] = {"meta": meta, "loads": results}
        path.write_text(json.dumps(data, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    sys.exit(main())
