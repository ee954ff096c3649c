"""`tailor testbed fairness`: are tuned flows fair to default flows on a shallow shared bottleneck?

Configanator NSDI'22 §6.7 (Fig. 9) asks whether per-connection tuning (e.g. BBR, a large initial window) hurts
the other flows that share a bottleneck. The experiment: ``flows`` long-running bulk TCP flows share one
``tailor-link`` bottleneck (fixed rate, RTT, drop-tail queue of ``buffer_bdp`` x BDP); a share of them (the
*mix*) use the tuned configuration, the rest the default (cubic, IW 10). Per flow we measure goodput over the
steady window (after ``warmup_s``), then Jain's fairness index J = (sum x)^2 / (n sum x^2) over all flows and the
ratio of the mean tuned goodput to the mean default goodput.

How the per-flow configuration is applied (no eBPF agent needed): the client namespace gets a second address
(``TUNED_SRC``); tuned flows connect from it, and the server namespace's route *to that address* carries the
tuned ``congctl``/``initcwnd`` (the default flows' route carries the default). The sender reads each socket's
congestion control back with ``getsockopt(TCP_CONGESTION)``, and the run is rejected if any flow ran the wrong
algorithm. Every run is a fresh ``tailor-link run`` (own namespaces, removed at exit) bounded by a timeout.
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

from tailor.errors import check
from tailor.testbed import fairness_flows
from tailor.testbed.plan import CCS
from tailor.testbed.runner import _stream
from tailor.testbed.server import SERVER_IP, TestbedError

PORT = 9000
TUNED_SRC = "10.231.2.2"
CLIENT_IP = "10.231.0.2"
MTU = 1500


@dataclass(frozen=True)
class FairnessSetup:
    flows: int = 30
    rate_mbit: float = 30.0
    rtt_ms: float = 40.0
    duration_s: float = 25.0
    warmup_s: float = 5.0
    tuned_cc: str = "bbr"
    tuned_iw: int = 32
    default_cc: str = "cubic"
    default_iw: int = 10
    mixes: tuple[float, ...] = (0.0, 0.1, 0.5, 0.9, 1.0)
    buffers_bdp: tuple[float, ...] = (0.5, 1.0)
    seed: int = 1

    def __post_init__(self):
        check(2 <= self.flows <= 200, "FairnessSetup", "flows", "in [2, 200]", self.flows)
        check(0.1 <= self.rate_mbit <= 200, "FairnessSetup", "rate_mbit", "in [0.1, 200]", self.rate_mbit)
        check(1 <= self.rtt_ms <= 2000, "FairnessSetup", "rtt_ms", "in [1, 2000]", self.rtt_ms)
        check(2 <= self.duration_s <= 300, "FairnessSetup", "duration_s", "in [2, 300] s", self.duration_s)
        check(0 <= self.warmup_s < self.duration_s - 1, "FairnessSetup", "warmup_s", "in [0, duration_s - 1)",
              self.warmup_s)
        for name in ("tuned_cc", "default_cc"):
            check(getattr(self, name) in CCS, "FairnessSetup", name, f"one of {CCS}", getattr(self, name))
        for name in ("tuned_iw", "default_iw"):
            check(1 <= getattr(self, name) <= 256, "FairnessSetup", name, "in [1, 256]", getattr(self, name))
        check(bool(self.mixes) and all(0 <= m <= 1 for m in self.mixes), "FairnessSetup", "mixes",
              "non-empty, each a share in [0, 1]", self.mixes)
        check(bool(self.buffers_bdp) and all(0.05 <= b <= 20 for b in self.buffers_bdp), "FairnessSetup",
              "buffers_bdp", "non-empty, each in [0.05, 20] BDP", self.buffers_bdp)

    def bdp_packets(self) -> float:
        return self.rate_mbit * 1e6 / 8 * self.rtt_ms / 1000 / MTU

    def queue_packets(self, buffer_bdp: float) -> int:
        return max(2, int(round(buffer_bdp * self.bdp_packets())))


def jain(x) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one flow takes everything."""
    x = [float(v) for v in x]
    s2 = sum(v * v for v in x)
    return (sum(x) ** 2) / (len(x) * s2) if s2 > 0 else float("nan")


def n_tuned(setup: FairnessSetup, mix: float) -> int:
    return int(round(mix * setup.flows))


def run_mix(setup: FairnessSetup, mix: float, buffer_bdp: float, tl_bin: str) -> dict:
    """One bottleneck run: ``round(mix * flows)`` tuned flows + the rest default; per-flow goodput and Jain."""
    k = n_tuned(setup, mix)
    flows = [{"tuned": i < k, "src": TUNED_SRC if i < k else CLIENT_IP} for i in range(setup.flows)]
    flows = [flows[i] for i in _interleave(setup.flows, k)]  # tuned and default flows start interleaved
    with tempfile.TemporaryDirectory(prefix="tailor-fair-") as tmp:
        spec, stats, senders = Path(tmp) / "spec.json", Path(tmp) / "stats.json", Path(tmp) / "senders.json"
        spec.write_text(json.dumps({"server": SERVER_IP, "port": PORT, "seconds": setup.duration_s, "flows": flows,
                                    "stagger_s": 0.01}))
        tuned_route = (f"ip route replace {TUNED_SRC} dev tl-s src {SERVER_IP} initcwnd {setup.tuned_iw} "
                       f"congctl {setup.tuned_cc}")
        server = (f"sysctl -qw net.ipv4.tcp_no_metrics_save=1 && {tuned_route} && "
                  f"exec {sys.executable} {fairness_flows.__file__} send {SERVER_IP} {PORT} {setup.duration_s:g} "
                  f"{senders}")
        client = f"{sys.executable} {fairness_flows.__file__} recv {spec}"
        q = setup.queue_packets(buffer_bdp)
        timeout = setup.duration_s + 60
        cmd = bottleneck_cmd(tl_bin, setup.rtt_ms, setup.rate_mbit, q, setup.seed,
                             f"initcwnd {setup.default_iw} congctl {setup.default_cc}", stats, timeout, server, client)
        lines: list[dict] = []
        run = {"started_unix": time.time(), "load_start": os.getloadavg()[0]}
        rc, stderr = _stream(cmd, timeout + 30, lines.append, run)
        emu = json.loads(stats.read_text()) if stats.exists() else {}
        for _ in range(50):  # the server may still be writing its per-flow list when the client has finished
            if senders.exists():
                break
            time.sleep(0.1)
        lines += [{"sender": s} for s in (json.loads(senders.read_text()) if senders.exists() else [])]
    return summarize(setup, mix, buffer_bdp, q, lines, rc, stderr, emu, run)


def bottleneck_cmd(tl_bin: str, rtt_ms: float, rate_mbit: float, queue: int, seed: int, route_opts: str,
                   stats: Path, timeout_s: float, server: str, client: str) -> list[str]:
    """``tailor-link run`` over one fixed-rate bottleneck, both ways: a drop-tail down queue of ``queue`` packets
    (the up queue at least 64, for the ACKs), the server on ``PORT``, ``route_opts`` on the server's route."""
    return [tl_bin, "run", "--delay", f"{rtt_ms / 2:g}", "--down-rate-mbit", f"{rate_mbit:g}",
            "--up-rate-mbit", f"{rate_mbit:g}", "--down-queue-packets", str(queue),
            "--up-queue-packets", str(max(queue, 64)), "--seed", str(seed), "--route-opts", route_opts,
            "--stats", str(stats), "--timeout", f"{int(timeout_s)}s", "--wait-port", str(PORT),
            "--server-cmd", server, "--client-cmd", client]


def summarize(setup: FairnessSetup, mix: float, buffer_bdp: float, q: int, lines: list[dict], rc: int,
              stderr: str, emu: dict, run: dict) -> dict:
    """Per-flow goodput over [warmup, duration) from the receiver's 100 ms buckets; Jain; tuned/default ratio."""
    recv = [r for r in lines if "flow" in r]
    sent = [r["sender"] for r in lines if "sender" in r]
    errors = [r.get("error") for r in recv if r.get("error")]
    if rc != 0 or len(recv) != setup.flows or errors:
        raise TestbedError(f"fairness run mix={mix} buffer={buffer_bdp} failed: exit {rc}, {len(recv)} of "
                           f"{setup.flows} flows reported, errors {errors[:3]}; {stderr[-300:]}")
    ccs = {(s["peer"].split(":")[0], s["cc"]) for s in sent}
    want = {(TUNED_SRC, setup.tuned_cc), (CLIENT_IP, setup.default_cc)}
    if len(sent) != setup.flows or not ccs <= want:
        raise TestbedError(f"fairness run mix={mix}: {len(sent)} sender reports, flows ran {sorted(ccs)}; "
                           f"expected {setup.flows} reports and only {sorted(want)}")
    b0, b1 = int(setup.warmup_s / fairness_flows.BUCKET_S), int(setup.duration_s / fairness_flows.BUCKET_S)
    window = (b1 - b0) * fairness_flows.BUCKET_S
    good = [sum(r["buckets"][b0:b1]) * 8 / window / 1e6 for r in recv]
    tuned = [g for g, r in zip(good, recv) if r["tuned"]]
    default = [g for g, r in zip(good, recv) if not r["tuned"]]
    mean = lambda v: sum(v) / len(v) if v else float("nan")  # noqa: E731
    down = emu.get("down", {})
    return {"mix": mix, "buffer_bdp": buffer_bdp, "queue_packets": q, "flows": setup.flows,
            "tuned_flows": len(tuned), "jain": jain(good), "jain_tuned": jain(tuned) if tuned else float("nan"),
            "jain_default": jain(default) if default else float("nan"),
            "total_mbit": sum(good), "utilization": sum(good) / (setup.rate_mbit * 1448 / 1500),
            "tuned_mean_mbit": mean(tuned), "default_mean_mbit": mean(default),
            "tuned_over_default": mean(tuned) / mean(default) if tuned and default else float("nan"),
            "goodput_mbit": [round(g, 4) for g in good], "tuned": [r["tuned"] for r in recv],
            "sender_cc": sorted({s["cc"] for s in sent}),
            "queue_drops": int(down.get("queue_drops", 0)), "queue_hwm_packets": int(down.get("queue_hwm_packets", 0)),
            "emu_lateness_p99_us": float(down.get("send_lateness_us", {}).get("p99", math.nan)),
            "emu_cpu_share": float(emu.get("cpu", {}).get("thread_core_share", math.nan)),
            "load_start": run["load_start"], "load_end": os.getloadavg()[0],
            "wall_s": time.time() - run["started_unix"]}


def _interleave(n: int, k: int) -> list[int]:
    """Order flows so the k tuned ones (indices < k) are spread evenly over the start sequence."""
    order, t, d = [], 0, k
    for i in range(n):
        if math.floor((i + 1) * k / n) > math.floor(i * k / n) and t < k:
            order.append(t)
            t += 1
        else:
            order.append(d)
            d += 1
    return order


def run_experiment(setup: FairnessSetup, tl_bin: str, out: Path | None = None, progress=print) -> dict:
    """Every (buffer, mix) run in turn; writes JSON (+ a Markdown table next to it) when ``out`` is given."""
    result = {"schema": "tailor.testbed-fairness/v1", "setup": asdict(setup), "started_utc": _now(),
              "bdp_packets": setup.bdp_packets(), "kernel": os.uname().release, "cpus": os.cpu_count(),
              "load_start": list(os.getloadavg()), "runs": []}
    for b in setup.buffers_bdp:
        for m in setup.mixes:
            r = run_mix(setup, m, b, tl_bin)
            result["runs"].append(r)
            progress(f"buffer {b:g} BDP, {100 * m:3.0f}% tuned: Jain {r['jain']:.3f}, tuned/default "
                     f"{r['tuned_over_default']:.2f}, utilization {r['utilization']:.2f}")
    result.update(finished_utc=_now(), load_end=list(os.getloadavg()))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, out)
        out.with_suffix(".md").write_text(markdown(result))
    return result


def markdown(result: dict) -> str:
    s = result["setup"]
    lines = [f"Fairness on one bottleneck: {s['flows']} flows, {s['rate_mbit']:g} Mbit/s, RTT {s['rtt_ms']:g} ms "
             f"(BDP {result['bdp_packets']:.0f} packets), {s['duration_s']:g} s per run (first {s['warmup_s']:g} s "
             f"excluded); tuned = {s['tuned_cc']} IW {s['tuned_iw']}, default = {s['default_cc']} IW "
             f"{s['default_iw']}. Measured {result['started_utc']} .. {result.get('finished_utc', '')}.", "",
             "| buffer (BDP) | queue pkts | tuned share | Jain (all) | tuned/default goodput | utilization | "
             "queue drops |", "|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        ratio = "—" if math.isnan(r["tuned_over_default"]) else f"{r['tuned_over_default']:.2f}"
        lines.append(f"| {r['buffer_bdp']:g} | {r['queue_packets']} | {100 * r['mix']:.0f}% ({r['tuned_flows']}) | "
                     f"{r['jain']:.3f} | {ratio} | {r['utilization']:.2f} | {r['queue_drops']} |")
    return "\n".join(lines) + "\n"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

