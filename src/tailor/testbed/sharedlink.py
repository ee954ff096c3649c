"""`tailor testbed shared-link`: search responses of one user group replayed through one shaped link (issue 14).

SmartIW's testbed (seed 004 §VII-A) replays each user group's requests "in the original timing order" through one
link shaped with HTB and netem to the hour's 90th-percentile *per-flow* goodput and average RTT, so all of a group's
concurrent responses share that link; its TCP-200 loses to SmartIW there ("directly using a large IW may cause packet
loss and increase the response time", §VII-D, Fig. 13b's long tail). The simulator gives every response its own
path, and there TCP-200 is within 1-2 points of Optimal (docs/smartiw.md). This experiment measures the missing
mechanism on the real kernel: responses drawn from the `mobile-search` size distribution (ten lognormal sizes, mean
120 KB) arrive as a Poisson process at an offered load ``rho`` of one ``tailor-link`` bottleneck (fixed rate, RTT,
drop-tail queue of ``queue`` packets); every response of a run uses the same initial window (the server's route
``initcwnd``, CUBIC, as in the paper's testbed), and every initial window replays the same schedule, so the runs of
a (queue, load, schedule) are paired. Per response: the TCP response time (request sent -> last byte, no handshake),
the server's smoothed RTT (``TCP_INFO``) and its retransmissions.

The client's receive window: the paper sets the initial one above 200 segments so that it does not cap IW 200; the
client here does the same (route ``initrwnd``, ``tcp_rmem`` raised in its namespace). Since Linux 6.10 the first
window may exceed 64 KB when ``initrwnd`` asks for it; checked on this machine's kernel at 100 Mbit/s and 60 ms: a
193-segment response in one round trip at IW 200. The server writes each response in one call with ``TCP_NODELAY``
(``sharedlink_flows``: in 64 KB writes, Nagle's rule held every response above 64 KB one round trip).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tailor.errors import check
from tailor.testbed import sharedlink_flows
from tailor.testbed.fairness import PORT, bottleneck_cmd
from tailor.testbed.runner import _stream
from tailor.testbed.server import SERVER_IP, TestbedError

MTU = 1500
SEGMENT_BYTES = 1448  # an MTU packet's payload (IPv4, TCP timestamps)
LONE_GAP_S = 2.5  # lone responses: longer than any one's time here, so each has the link and the queue to itself
SCHEMA = "tailor.testbed-shared-link/v1"


def search_sizes() -> list[int]:
    """The ten equally likely response sizes of the `mobile-search` scenarios (bytes)."""
    from tailor.oracle.websites import search_catalog

    return sorted(w.total_bytes for w in search_catalog().values())


@dataclass(frozen=True)
class SharedLinkSetup:
    rate_mbit: float = 10.0
    rtt_ms: float = 60.0
    duration_s: float = 30.0
    warmup_s: float = 2.0
    cc: str = "cubic"
    iws: tuple[int, ...] = (10, 32, 64, 200)
    loads: tuple[float, ...] = (0.3, 0.7)
    queues: tuple[int, ...] = (50, 1000)
    seeds: tuple[int, ...] = (1,)
    initrwnd: int = 300
    lone: tuple[int, ...] = ()  # response sizes (segments) sent one at a time instead of the Poisson schedule

    def __post_init__(self):
        check(0.1 <= self.rate_mbit <= 200, "SharedLinkSetup", "rate_mbit", "in [0.1, 200]", self.rate_mbit)
        check(1 <= self.rtt_ms <= 2000, "SharedLinkSetup", "rtt_ms", "in [1, 2000]", self.rtt_ms)
        check(2 <= self.duration_s <= 600, "SharedLinkSetup", "duration_s", "in [2, 600] s", self.duration_s)
        check(0 <= self.warmup_s < self.duration_s - 1, "SharedLinkSetup", "warmup_s", "in [0, duration_s - 1)",
              self.warmup_s)
        check(self.cc in ("cubic", "bbr", "reno"), "SharedLinkSetup", "cc", "one of cubic, bbr, reno", self.cc)
        check(bool(self.iws) and all(1 <= w <= 256 for w in self.iws), "SharedLinkSetup", "iws",
              "non-empty, each in [1, 256]", self.iws)
        check(bool(self.loads) and all(0 < r <= 0.95 for r in self.loads), "SharedLinkSetup", "loads",
              "non-empty, each an offered load in (0, 0.95]", self.loads)
        check(bool(self.queues) and all(2 <= q <= 100_000 for q in self.queues), "SharedLinkSetup", "queues",
              "non-empty, each in [2, 100000] packets", self.queues)
        check(bool(self.seeds) and all(0 <= s < 2**31 for s in self.seeds), "SharedLinkSetup", "seeds",
              "non-empty, each in [0, 2^31)", self.seeds)
        check(max(self.iws) <= self.initrwnd <= 10_000, "SharedLinkSetup", "initrwnd",
              "at least the largest initial window and at most 10000 segments", self.initrwnd)
        check(len(self.lone) <= 100 and all(1 <= n <= 10_000 for n in self.lone), "SharedLinkSetup", "lone",
              "at most 100 sizes, each in [1, 10000] segments", self.lone)
        check(not self.lone or self.duration_s >= self.warmup_s + LONE_GAP_S * len(self.lone), "SharedLinkSetup",
              "duration_s", f"at least warmup_s + {LONE_GAP_S:g} s per lone response", self.duration_s)

    def bdp_packets(self) -> float:
        return self.rate_mbit * 1e6 / 8 * self.rtt_ms / 1000 / MTU


def schedule(setup: SharedLinkSetup, load: float, seed: int, sizes: list[int] | None = None) -> list[tuple[float, int]]:
    """Poisson arrivals over ``duration_s`` at the rate that offers ``load`` of the link's rate in response bytes,
    each with a size drawn uniformly from ``sizes`` (the search responses'); the same for every initial window.
    ``setup.lone``: those sizes (segments of an MTU packet's payload) one at a time, ``LONE_GAP_S`` apart from the
    end of the warm-up, each alone on the link (``load`` and ``seed`` then only label the run)."""
    if setup.lone:
        return [(setup.warmup_s + LONE_GAP_S * i, n * SEGMENT_BYTES) for i, n in enumerate(setup.lone)]
    sizes = search_sizes() if sizes is None else sizes
    rng = np.random.default_rng([seed, int(round(load * 1000))])
    rate = load * setup.rate_mbit * 1e6 / 8 / float(np.mean(sizes))  # responses per second
    out, t = [], 0.0
    while True:
        t += float(rng.exponential(1.0 / rate))
        if t >= setup.duration_s:
            return out
        out.append((round(t, 4), int(sizes[int(rng.integers(len(sizes)))])))


def run_one(setup: SharedLinkSetup, queue: int, load: float, seed: int, iw: int, tl_bin: str) -> dict:
    """One run: the (load, seed) schedule through a ``queue``-packet bottleneck, every response at initial window
    ``iw``."""
    flows = schedule(setup, load, seed)
    with tempfile.TemporaryDirectory(prefix="tailor-shared-") as tmp:
        spec, stats, served = Path(tmp) / "spec.json", Path(tmp) / "stats.json", Path(tmp) / "served.jsonl"
        spec.write_text(json.dumps({"server": SERVER_IP, "port": PORT, "flows": flows}))
        script = sharedlink_flows.__file__
        server = ("sysctl -qw net.ipv4.tcp_no_metrics_save=1 && "
                  "sysctl -qw net.ipv4.tcp_wmem='4096 1048576 8388608' && "
                  f"exec {sys.executable} {script} serve {SERVER_IP} {PORT} {setup.duration_s + 5:g} {served}")
        client = ("sysctl -qw net.ipv4.tcp_rmem='4096 1048576 8388608' && "
                  f"ip route replace $TL_SERVER_IP dev tl-c src $TL_CLIENT_IP initrwnd {setup.initrwnd} && "
                  f"exec {sys.executable} {script} fetch {spec}")
        timeout = setup.duration_s + sharedlink_flows.FLOW_TIMEOUT_S + 30
        cmd = bottleneck_cmd(tl_bin, setup.rtt_ms, setup.rate_mbit, queue, seed, f"initcwnd {iw} congctl {setup.cc}",
                             stats, timeout, server, client)
        lines: list[dict] = []
        run = {"started_unix": time.time(), "load_start": os.getloadavg()[0]}
        rc, stderr = _stream(cmd, timeout + 30, lines.append, run)
        emu = json.loads(stats.read_text()) if stats.exists() else {}
        srv = [json.loads(line) for line in served.read_text().splitlines()] if served.exists() else []
    return summarize(setup, queue, load, seed, iw, flows, lines, srv, rc, stderr, emu, run)


def summarize(setup: SharedLinkSetup, queue: int, load: float, seed: int, iw: int, flows: list, lines: list[dict],
              served: list[dict], rc: int, stderr: str, emu: dict, run: dict) -> dict:
    """Join the client's and the server's records by port; the figures over responses started after warm-up."""
    recv = {r["flow"]: r for r in lines if "flow" in r}
    errors = [r.get("error") for r in recv.values() if r.get("error")] + [s["error"] for s in served if s.get("error")]
    if rc != 0 or len(recv) != len(flows) or errors:
        raise TestbedError(f"shared-link run queue={queue} load={load} seed={seed} iw={iw} failed: exit {rc}, "
                           f"{len(recv)} of {len(flows)} responses reported, errors {errors[:3]}; {stderr[-300:]}")
    by_port = {s["peer_port"]: s for s in served}
    ccs = {s.get("cc") for s in served}
    if len(by_port) != len(flows) or ccs != {setup.cc}:
        raise TestbedError(f"shared-link run iw={iw}: {len(by_port)} server records for {len(flows)} responses, "
                           f"congestion controls {sorted(map(str, ccs))} (expected only {setup.cc})")
    kept = [i for i in range(len(flows)) if flows[i][0] >= setup.warmup_s]
    keep = [recv[i] for i in kept]
    rt = np.array([r["response_ms"] for r in keep])
    srtt = np.array([by_port[r["local_port"]]["srtt_us"] / 1000 for r in keep])
    retr = np.array([by_port[r["local_port"]]["retrans"] for r in keep])
    rtos = [by_port[r["local_port"]].get("rtos") for r in keep]  # None: a kernel before 6.7 (no tcpi_total_rto)
    late = np.array([r["late_ms"] for r in recv.values()])
    down = emu.get("down", {})
    return {"queue_packets": queue, "load": load, "seed": seed, "iw": iw, "responses": len(keep),
            "mean_ms": float(rt.mean()), "p50_ms": float(np.median(rt)), "p95_ms": float(np.percentile(rt, 95)),
            "p99_ms": float(np.percentile(rt, 99)), "srtt_ms": float(srtt.mean()),
            "retrans_share": float((retr > 0).mean()), "retrans_mean": float(retr.mean()),
            "rto_share": (float(np.mean([v > 0 for v in rtos])) if None not in rtos else None),
            "response_ms": [round(float(v), 2) for v in rt], "response_bytes": [int(flows[i][1]) for i in kept],
            "retrans": [int(v) for v in retr], "rtos": rtos,
            "offered_mbit": float(sum(f[1] for f in flows) * 8 / setup.duration_s / 1e6),
            "queue_drops": int(down.get("queue_drops", 0)), "queue_hwm_packets": int(down.get("queue_hwm_packets", 0)),
            "emu_lateness_p99_us": float(down.get("send_lateness_us", {}).get("p99", math.nan)),
            "client_late_p99_ms": float(np.percentile(late, 99)) if late.size else math.nan,
            "load_start": run["load_start"], "load_end": os.getloadavg()[0],
            "wall_s": time.time() - run["started_unix"]}


def _cells(runs: list[dict]):
    """The runs grouped by (queue, load), in order: (queue, load, runs)."""
    for q in sorted({r["queue_packets"] for r in runs}):
        for load in sorted({r["load"] for r in runs}):
            cell = [r for r in runs if r["queue_packets"] == q and r["load"] == load]
            if cell:
                yield q, load, cell


def paired(result: dict) -> list[dict]:
    """Per (queue, load) and initial window: the mean response time over the schedules and its improvement over IW
    10 (the paper's (T_10 - T_iw) / T_10 of the average), the server RTT's change, and the per-response paired
    difference's mean with a 95% interval from a bootstrap over the schedules' responses."""
    out = []
    for q, load, cell in _cells(result["runs"]):
        base = {r["seed"]: r for r in cell if r["iw"] == 10}
        for iw in sorted({r["iw"] for r in cell}):
            rs = [r for r in cell if r["iw"] == iw]
            t = np.concatenate([r["response_ms"] for r in rs])
            row = {"queue_packets": q, "load": load, "iw": iw, "responses": int(t.size),
                   "mean_ms": float(t.mean()), "p95_ms": float(np.percentile(t, 95)),
                   "srtt_ms": float(np.mean([r["srtt_ms"] for r in rs])),
                   "retrans_share": float(np.mean([r["retrans_share"] for r in rs])),
                   "queue_drops": int(sum(r["queue_drops"] for r in rs))}
            if base and all(r["seed"] in base for r in rs):
                b = np.concatenate([base[r["seed"]]["response_ms"] for r in rs])
                row["improvement"] = float((b.mean() - t.mean()) / b.mean())
                row["rtt_change"] = float(row["srtt_ms"] / np.mean([base[r["seed"]]["srtt_ms"] for r in rs]) - 1)
                rng = np.random.default_rng(0)
                idx = rng.integers(0, t.size, size=(2000, t.size))
                boot = (b[idx].mean(axis=1) - t[idx].mean(axis=1)) / b[idx].mean(axis=1)
                row["improvement_ci"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
            out.append(row)
    return out


def behind_best(result: dict) -> list[dict]:
    """Per (queue, load): each initial window's mean response time minus the best one's, in points of IW 10's mean
    (the improvement it gives up), with a 95% interval from a paired bootstrap over the responses of every schedule."""
    out = []
    for q, load, cell in _cells(result["runs"]):
        seeds = sorted({r["seed"] for r in cell})
        by = {(r["seed"], r["iw"]): np.asarray(r["response_ms"]) for r in cell}
        iws = sorted(iw for iw in {r["iw"] for r in cell} if all((s, iw) in by for s in seeds))
        if 10 not in iws or len(iws) < 2:
            continue
        t = {iw: np.concatenate([by[(s, iw)] for s in seeds]) for iw in iws}
        best = min(iws, key=lambda iw: t[iw].mean())
        idx = np.random.default_rng(0).integers(0, t[10].size, size=(2000, t[10].size))
        for iw in iws:
            if iw == best:
                continue
            gap = (t[iw].mean() - t[best].mean()) / t[10].mean()
            boot = (t[iw][idx].mean(axis=1) - t[best][idx].mean(axis=1)) / t[10][idx].mean(axis=1)
            per = [(by[(s, iw)].mean() - by[(s, best)].mean()) / by[(s, 10)].mean() for s in seeds]
            out.append({"queue_packets": q, "load": load, "iw": iw, "best_iw": best, "seeds": seeds,
                        "responses": int(t[10].size), "behind": float(gap),
                        "behind_ci": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
                        "behind_per_seed": [float(v) for v in per]})
    return out


def _setup_key(result: dict) -> dict:
    """What results must share to be one experiment: the setup but for its schedule (seeds, loads, queues)."""
    return {k: v for k, v in result["setup"].items() if k not in ("seeds", "loads", "queues")
            and not (k == "lone" and not v)}


def merge(results: list[dict]) -> dict:
    """Several results of one setup but their schedules (seeds) as one, for :func:`markdown`."""
    first = results[0]
    for r in results:
        if r.get("schema") != SCHEMA or _setup_key(r) != _setup_key(first):
            raise TestbedError("shared-link results to merge must share the schema and the setup but for seeds, "
                               f"loads and queues; {r.get('setup')} differs from {first['setup']}")
    seen, runs = set(), []
    for r in results:
        for run in r["runs"]:
            k = (run["queue_packets"], run["load"], run["seed"], run["iw"])
            if k not in seen:
                seen.add(k)
                runs.append(run)
    setup = dict(first["setup"], seeds=sorted({r["seed"] for r in runs}))
    merged = {"schema": SCHEMA, "setup": setup, "bdp_packets": first["bdp_packets"],
              "started_utc": min(r["started_utc"] for r in results),
              "finished_utc": max(r.get("finished_utc", "") for r in results), "runs": runs}
    merged["paired"] = paired(merged)
    return merged


def run_experiment(setup: SharedLinkSetup, tl_bin: str, out: Path | None = None, progress=print) -> dict:
    """Every (queue, load, seed, initial window) run in turn, written after each run. A rerun with the same ``out``
    skips the runs already there and keeps them, its schedule (seeds, loads, queues) may differ; a file of another
    setup is refused (until 2026-12-07 it was overwritten after the first new run; found by review)."""
    result = {"schema": SCHEMA, "setup": asdict(setup), "started_utc": _now(), "bdp_packets": setup.bdp_packets(),
              "kernel": os.uname().release, "cpus": os.cpu_count(), "runs": []}
    if out is not None and out.exists():
        try:
            old = json.loads(out.read_text())
        except ValueError as err:
            raise TestbedError(f"{out}: not a shared-link result ({err}); give another --out") from None
        new = json.loads(json.dumps(result))
        if old.get("schema") != SCHEMA or _setup_key(old) != _setup_key(new):
            raise TestbedError(f"{out} holds runs of another setup ({old.get('setup')}); give another --out, or the "
                               "same setup but for seeds, loads and queues")
        sched = {k: sorted(set(old["setup"][k]) | set(new["setup"][k])) for k in ("seeds", "loads", "queues")}
        result = dict(old, setup=dict(new["setup"], **sched))
    done = {(r["queue_packets"], r["load"], r["seed"], r["iw"]) for r in result["runs"]}
    for q in setup.queues:
        for load in setup.loads:
            for seed in setup.seeds:
                for iw in setup.iws:
                    if (q, load, seed, iw) in done:
                        continue
                    r = run_one(setup, q, load, seed, iw, tl_bin)
                    result["runs"].append(r)
                    progress(f"queue {q} pkts, load {load:g}, seed {seed}, IW {iw}: mean {r['mean_ms']:.0f} ms, "
                             f"p95 {r['p95_ms']:.0f} ms, srtt {r['srtt_ms']:.0f} ms, retrans {r['retrans_share']:.1%}"
                             f", drops {r['queue_drops']}, lateness p99 {r['emu_lateness_p99_us']:.0f} us")
                    if out is not None:
                        _write(result, out)
    result["finished_utc"] = _now()
    result["paired"] = paired(result)
    if out is not None:
        _write(result, out)
        out.with_suffix(".md").write_text(markdown(result))
    return result


def _write(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, out)


def markdown(result: dict) -> str:
    s = result["setup"]
    runs = result["runs"]
    what = (f"Lone responses ({len(s['lone'])} sizes, {LONE_GAP_S:g} s apart, each alone) on one link: "
            if s.get("lone") else "Search responses (`mobile-search` sizes, mean 120 KB) of one user group on one "
            "shared link: ")
    arrivals = ("one run per queue and IW" if s.get("lone") else
                f"Poisson arrivals for {s['duration_s']:g} s per run (responses started in the first "
                f"{s['warmup_s']:g} s excluded), schedules (seeds) {', '.join(map(str, s['seeds']))}")
    lines = [f"{what}{s['rate_mbit']:g} Mbit/s, RTT {s['rtt_ms']:g} ms (BDP {result['bdp_packets']:.0f} packets), "
             f"{s['cc']}, {arrivals}; client initial "
             f"receive window {s['initrwnd']} segments. Measured {result['started_utc']} .. "
             f"{result.get('finished_utc', '')}; emulator lateness p99 at most "
             f"{max(r['emu_lateness_p99_us'] for r in runs):.0f} us, load average at a run's start "
             f"{min(r['load_start'] for r in runs):.2f}-{max(r['load_start'] for r in runs):.2f}.", "",
             "| queue (pkts) | offered load | IW | responses | mean (ms) | improvement over IW 10 (95% CI) | p95 (ms) "
             "| server RTT (ms) | RTT change | responses retransmitting | queue drops |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result.get("paired") or paired(result):
        imp = (f"{100 * r['improvement']:+.1f}% [{100 * r['improvement_ci'][0]:+.1f}, "
               f"{100 * r['improvement_ci'][1]:+.1f}]" if "improvement" in r else "—")
        rtt = f"{100 * r['rtt_change']:+.1f}%" if "rtt_change" in r else "—"
        lines.append(f"| {r['queue_packets']} | {r['load']:g} | {r['iw']} | {r['responses']} | {r['mean_ms']:.0f} | "
                     f"{imp} | {r['p95_ms']:.0f} | {r['srtt_ms']:.0f} | {rtt} | {100 * r['retrans_share']:.1f}% | "
                     f"{r['queue_drops']} |")
    if s.get("lone"):
        lines += _lone_table(result)
    rows = behind_best(result)
    if rows:
        lines += ["", "Behind the best initial window of its (queue, load): mean response time minus the best's, in "
                  "points of IW 10's mean (paired bootstrap 95% interval over every schedule's responses; then per "
                  "schedule):", "", "| queue (pkts) | offered load | best IW | IW | behind (points) | per schedule |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            per = " / ".join(f"{100 * v:+.1f}" for v in r["behind_per_seed"])
            lines.append(f"| {r['queue_packets']} | {r['load']:g} | {r['best_iw']} | {r['iw']} | "
                         f"{100 * r['behind']:+.1f} [{100 * r['behind_ci'][0]:+.1f}, {100 * r['behind_ci'][1]:+.1f}] | "
                         f"{per} |")
    return "\n".join(lines) + "\n"


def _lone_table(result: dict) -> list[str]:
    """Lone responses: per size, each (queue, IW) run's response time, retransmitted segments and timeouts."""
    runs = sorted(result["runs"], key=lambda r: (r["queue_packets"], r["iw"]))
    head = [f"q {r['queue_packets']} / IW {r['iw']}" for r in runs]
    lines = ["", "Lone responses, one at a time: response time (ms) / segments retransmitted / retransmission "
             "timeouts, per queue (packets) and initial window:", "", "| segments | " + " | ".join(head) + " |",
             "|---|" + "---|" * len(runs)]
    for i, n in enumerate(result["setup"]["lone"]):
        cells = [f"{r['response_ms'][i]:.0f} / {r['retrans'][i]} / {'?' if r['rtos'][i] is None else r['rtos'][i]}"
                 for r in runs if i < len(r["response_ms"])]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
