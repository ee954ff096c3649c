"""One job = one ``tailor-link run``: fresh namespaces, emulator, nginx, the client script, full teardown.

The link is restarted per job (so no queue, loss-RNG or TCP-metrics state leaks between configurations) but
not per fetch: fetches of one job are separated by a short gap and the server keeps no TCP metrics
(``tcp_no_metrics_save``), so consecutive fetches start from the same state while each sees a different
slice of the loss process (repetitions sample the loss pattern, as the feasibility notes recommend).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from tailor.testbed import client_script, page_client
from tailor.testbed.pages import H2_PORT, page_url, pages_server_cmd, resolver_rules
from tailor.testbed.plan import Fetch, Job, estimate_load_s
from tailor.testbed.server import SERVER_IP, TLS_PORT, TestbedError, object_name, server_cmd

MAX_JOB_S = 1800.0
_LIVE: set[subprocess.Popen] = set()  # running tailor-link harnesses, so an interrupt can stop them by PID
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """SIGTERM every running harness we started (tailor-link then tears its namespaces down)."""
    with _LIVE_LOCK:
        for proc in list(_LIVE):
            if proc.poll() is None:
                proc.terminate()


def job_seed(job: Job, base: int) -> int:
    """Loss-RNG seed per job: stable across runs and machines, different between jobs."""
    return (base * 1_000_003 + zlib.crc32(job.name.encode())) % (2**31 - 1) + 1


def link_args(job: Job, seed: int, stats: Path, timeout_s: float) -> list[str]:
    c = job.condition
    return ["run", "--delay", f"{c.delay_ms:g}", *rate_args(c),
            "--down-loss", f"{c.loss:g}", "--up-loss", f"{c.uplink_loss:g}",
            "--queue-packets", str(c.queue_packets()), "--route-opts", job.transport.route_opts(),
            "--seed", str(seed), "--stats", str(stats), "--timeout", f"{int(timeout_s)}s",
            "--wait-port", str(H2_PORT if job.is_pages else TLS_PORT)]


def rate_args(c) -> list[str]:
    """Fixed rate per direction, or a mahimahi trace replayed by tailor-link (a missing file is a clear error)."""
    out = []
    for d, rate in (("down", c.down_mbps), ("up", c.up_mbps)):
        path = c.trace_path(d)
        if path is None:
            out += [f"--{d}-rate-mbit", f"{rate:g}"]
        elif not os.path.exists(path):
            raise TestbedError(f"condition {c.name!r}: {d} trace {path} does not exist (set $TAILOR_TRACES)")
        else:
            out += [f"--{d}-trace", path]
    return out


def run_job(job: Job, todo: list[Fetch], site: Path, tl_bin: str, seed: int,
            on_row: Callable[[dict], None], pages: dict | None = None) -> dict:
    """Measure ``todo`` (a subset of the job's fetches); call ``on_row`` per finished fetch; return run stats.

    ``pages`` (from ``pages.prepare_pages``) is required for a page job: Chromium loads instead of curl fetches."""
    with tempfile.TemporaryDirectory(prefix="tailor-tb-") as tmp:
        spec, stats = Path(tmp) / "spec.json", Path(tmp) / "stats.json"
        max_time = max(30.0, 6 * max(estimate_load_s(job.condition, f) for f in todo))
        timeout = min(MAX_JOB_S, sum(estimate_load_s(job.condition, f) for f in todo) * 4 + 60)
        if job.is_pages:
            if pages is None:
                raise TestbedError(f"job {job.name}: page loads need the page site (pages.prepare_pages)")
            spec.write_text(json.dumps(page_spec(todo, pages, max_time)))
            client = f"{sys.executable} {page_client.__file__} {spec}"
            server = pages_server_cmd(pages["conf"], pages["origins"], job.transport.server_sysctl())
        else:
            spec.write_text(json.dumps({"url": f"https://{SERVER_IP}:{TLS_PORT}/", "max_time": max_time,
                                        "fetches": [{"key": f.key, "http": f.http, "path": object_name(f.size)}
                                                    for f in todo]}))
            client = f"{sys.executable} {client_script.__file__} {spec}"
            server = server_cmd(site / "nginx.conf", job.transport.server_sysctl())
        cmd = [tl_bin, *link_args(job, seed, stats, timeout), "--server-cmd", server, "--client-cmd", client]
        run = {"run_id": f"{job.name}|{time.time():.3f}", "job": job.name, "seed": seed,
               "load_start": os.getloadavg()[0], "started_unix": time.time()}
        rc, stderr = _stream(cmd, timeout + 30, lambda rec: on_row(_row(job, todo, rec, run)), run)
        run.update(exit=rc, wall_s=time.time() - run["started_unix"], load_end=os.getloadavg()[0],
                   stderr_tail=stderr[-400:], **_emulator_stats(stats))
        return run


def _stream(cmd: list[str], timeout_s: float, on_line: Callable[[dict], None], run: dict) -> tuple[int, str]:
    """Run the harness, hand each JSON stdout line over as it arrives; bounded by ``timeout_s``.

    ``run["harness_pid"]`` records the PID, which names the namespaces (``tl-<pid>-*``) for leak checks."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        run["harness_pid"] = proc.pid
        with _LIVE_LOCK:
            _LIVE.add(proc)
        deadline = time.monotonic() + timeout_s
        try:
            for line in proc.stdout:  # tailor-link's own --timeout ends the client, which closes stdout
                if line.startswith("{"):
                    on_line(json.loads(line))
                if time.monotonic() > deadline:
                    break
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()) + 30)
        except subprocess.TimeoutExpired:
            rc = _terminate(proc)
        except BaseException:  # an interrupt (SIGTERM, SIGINT) or the caller's error: stop the harness, then go on up
            _terminate(proc)
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
        err.seek(0)
        return rc, err.read()


def _terminate(proc: subprocess.Popen) -> int:
    """SIGTERM the harness (tailor-link tears its namespaces down) and wait for it; its exit status."""
    proc.terminate()
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise TestbedError(f"tailor-link (pid {proc.pid}) did not stop; run `tailor-link sweep`") from None


def page_spec(todo: list[Fetch], pages: dict, max_time: float) -> dict:
    """What page_client.py needs: the browser, the origin name map, and per load the URL and resource count."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise TestbedError("chromium is not installed: apt-get install -y chromium")
    loads = [{"key": f.key, "http": f.http, "url": page_url(f.page, f.http),
              "expect_resources": len(pages["manifest"][f.page]) - 1,
              "expect_names": [_base(r) for r in pages["manifest"][f.page][1:] if r["kind"] != "font"],
              "fonts": [_base(r) for r in pages["manifest"][f.page] if r["kind"] == "font"]} for f in todo]
    return {"chromium": chromium, "resolver_rules": resolver_rules(pages["origins"]),
            "extra_routes": ["10.231.1.0/24"] if pages["origins"] > 1 else [], "dev": "tl-c",
            "max_time": max_time, "loads": loads}


def _base(row: dict) -> str:
    return row["path"].rsplit("/", 1)[1]


def _row(job: Job, todo: list[Fetch], rec: dict, run: dict) -> dict:
    f = next(x for x in todo if x.key == rec["key"])
    c, t = job.condition, job.transport
    if f.page:
        ok = bool(rec.get("page_ok"))
        rec = {**rec, "t_total": rec.get("load_end", float("nan")) / 1000.0 if ok else float("nan")}
    else:
        ok = rec.get("curl_exit") == 0 and rec.get("code") == 200 and rec.get("size") == f.size
    return {**rec, "ok": bool(ok), "condition": c.name, "family": c.family, "down_mbps": c.down_mbps,
            "up_mbps": c.up_mbps, "up_loss": c.uplink_loss, "trace": c.down_trace or "", "rtt_ms": c.rtt_ms,
            "loss": c.loss, "queue_packets": c.queue_packets(),
            "cc": t.cc, "iw": t.iw, "rto_min_ms": t.rto_min_ms, "ssai": t.ssai, "notsent_lowat": t.notsent_lowat,
            "http": f.http, "size_bytes": f.size,
            "rep": f.rep, "page": f.page, "run_id": run["run_id"], "load1": os.getloadavg()[0],
            "completion_ms": 1000.0 * float(rec.get("t_total", "nan") or "nan")}


def _emulator_stats(path: Path) -> dict:
    """The link's own counters for the run (drops, queue high-water mark, timing lateness, CPU)."""
    try:
        s = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {"emu_stats": False}
    out = {"emu_stats": True, "emu_sched_fifo": bool(s.get("sched_fifo")),
           "emu_cpu_share": float(s.get("cpu", {}).get("thread_core_share", float("nan")))}
    for d in ("down", "up"):
        x = s.get(d, {})
        for k in ("packets_in", "random_drops", "queue_drops", "queue_hwm_packets"):
            out[f"emu_{d}_{k}"] = int(x.get(k, 0))
        out[f"emu_{d}_lateness_p99_us"] = float(x.get("send_lateness_us", {}).get("p99", float("nan")))
        out[f"emu_{d}_lateness_max_us"] = float(x.get("send_lateness_us", {}).get("max", float("nan")))
    return out
