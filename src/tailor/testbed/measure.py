"""`tailor testbed measure`: run a plan's jobs (resumably, in parallel where the CPU allows), write provenance.

Parallelism: a slow link leaves the CPU idle, so jobs run in three pools at once, by the link's down rate:
fast links (>= ``HEAVY_MBPS``, where the emulator alone takes 0.2-0.6 of a core on this 2-core VM) one at a
time, medium links (>= ``MEDIUM_MBPS``) two at a time, slow links ``parallel`` at a time. Each job has its own
namespace pair, so concurrent jobs share nothing but the CPU. The shared machine's load is recorded per
fetch (``load1``) and per run, and in provenance.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tailor import paths
from tailor.testbed.conditions import QUEUE_FLOOR_PACKETS
from tailor.testbed.pages import prepare_pages
from tailor.testbed.plan import Job, Plan
from tailor.testbed.runner import job_seed, run_job, stop_all
from tailor.testbed.server import prepare_site, require_tools, tailor_link_binary
from tailor.testbed.store import Store

HEAVY_MBPS = 25.0
MEDIUM_MBPS = 5.0
MEDIUM_WIDTH = 2
MAX_ATTEMPTS = 2  # a job whose fetches failed is retried once (only the missing keys)
_STOPPING = threading.Event()


def measure(plan: Plan, out_dir: Path, parallel: int = 3, budget_s: float | None = None,
            console: Console | None = None, requeue_lateness_ms: float | None = None,
            requeue_conditions: list[str] | None = None, serial: bool = False,
            requeue_handshake_ms: float | None = None) -> dict:
    """Measure every fetch of ``plan`` not yet in ``out_dir``; stop starting jobs after ``budget_s``.

    ``requeue_lateness_ms``: first discard (and so re-measure) fetches of runs whose emulator p99 send lateness
    exceeded this many ms. ``requeue_handshake_ms``: first discard fetches of runs whose TLS handshakes were slower
    than their condition's quietest run's by more than this (``Store.requeue_slow_handshakes``: the endpoints' CPU
    contention the lateness check cannot see). ``requeue_conditions``: first discard every fetch of these
    conditions. ``serial``: one job at a time (no pools side by side), for conditions whose round trip is short
    enough that the endpoints' CPU time shows."""
    console = console or Console(stderr=True)
    require_tools("nginx", "curl", "openssl", "ip")
    tl_bin = tailor_link_binary()
    store = Store(out_dir)
    prov = _provenance(plan, tl_bin, parallel)
    if requeue_lateness_ms is not None:
        prov["requeued_fetches"] = store.requeue_late_runs(requeue_lateness_ms * 1000)
        prov["requeue_lateness_ms"] = requeue_lateness_ms
    if requeue_handshake_ms is not None:
        prov["requeued_handshake_fetches"] = store.requeue_slow_handshakes(requeue_handshake_ms)
        prov["requeue_handshake_ms"] = requeue_handshake_ms
    if requeue_conditions:
        prov["requeued_condition_fetches"] = store.requeue_conditions(requeue_conditions)
        prov["requeue_conditions"] = sorted(requeue_conditions)
    prov["serial"] = bool(serial)
    (store.dir / "plan.json").write_text(json.dumps(plan.to_dict(), indent=1))
    done = store.done_keys()
    jobs = [(j, [f for f in j.fetches if f.key not in done]) for j in plan.jobs()]
    jobs = [(j, todo) for j, todo in jobs if todo]
    deadline = time.monotonic() + (budget_s or 1e12)
    _STOPPING.clear()
    with tempfile.TemporaryDirectory(prefix="tailor-site-") as site:
        pages = None
        if plan.pages:
            require_tools("chromium")
            pages = prepare_pages(Path(site), plan.pages, plan.seed)
            (store.dir / "pages.json").write_text(json.dumps(pages["manifest"]))  # what was really served
            prov["pages"] = {n: {"objects": len(r), "bytes": sum(x["size_bytes"] for x in r),
                                 "origins": len({x["origin"] for x in r})} for n, r in pages["manifest"].items()}
        else:
            prepare_site(Path(site), plan.sizes, plan.seed)
        try:
            counts = _run_phases(jobs, Path(site), tl_bin, plan.seed, store, parallel, deadline, console, pages,
                                 serial)
        finally:
            df = store.compact()
    prov.update(finished_utc=_now(), load_end=list(os.getloadavg()), **counts,
                rows=int(len(df)), ok_rows=int(df["ok"].sum()) if len(df) else 0)
    _merge_provenance(store.dir / "provenance.json", prov)
    return prov


def pool_groups(jobs, parallel: int, pages: bool = False, serial: bool = False) -> list[tuple[list, int]]:
    """The (jobs, width) groups that run side by side: by down rate (fast links one at a time, medium ones
    ``MEDIUM_WIDTH``, slow ones ``parallel``); page jobs in one group of ``parallel``; ``serial``: every job in one
    group of width 1. Longest first within a group (it packs the pools best)."""
    by_time = sorted(jobs, key=lambda x: -x[0].estimate_s())
    if serial:
        return [(by_time, 1)]
    if pages:  # Chromium needs real CPU itself: page jobs run ``parallel`` at a time (use 1 or 2)
        return [(by_time, parallel)]
    heavy = [x for x in by_time if x[0].condition.down_mbps >= HEAVY_MBPS]
    medium = [x for x in by_time if MEDIUM_MBPS <= x[0].condition.down_mbps < HEAVY_MBPS]
    slow = [x for x in by_time if x[0].condition.down_mbps < MEDIUM_MBPS]
    return [(heavy, 1), (medium, MEDIUM_WIDTH), (slow, parallel)]


def _run_phases(jobs, site, tl_bin, seed, store, parallel, deadline, console, pages=None, serial=False) -> dict:
    groups = pool_groups(jobs, parallel, pages is not None, serial)
    total = sum(len(todo) for _, todo in jobs)
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn())
    counts = {"fetches_planned_now": total, "fetches_ok": 0, "fetches_failed": 0, "jobs_skipped_budget": 0,
              "jobs_by_group": [len(g) for g, _ in groups]}
    with Progress(*cols, console=console) as bar:
        task = bar.add_task("testbed", total=total)

        failed: set[str] = set()
        valid: set[str] = set()

        def on_row(row: dict) -> None:
            store.append(row)
            counts["fetches_ok" if row["ok"] else "fetches_failed"] += 1
            (valid if row["ok"] else failed).add(row["key"])
            bar.update(task, advance=1, description=f"{row['condition']:>16} {row['cc']:>5} iw{row['iw']:<3}")

        def work(j, todo):
            _job_with_retry(j, todo, site, tl_bin, seed, store, on_row, pages)

        try:
            _pools(groups, work, deadline, counts)
        finally:  # a failed fetch whose retry came back valid is not a failure of the run
            counts["fetches_failed_final"] = len(failed - valid)
    return counts


def _pools(groups, work, deadline: float, counts: dict) -> None:
    """Run each (jobs, width) group in its own pool, all groups at the same time; re-raise the first error."""
    executors = [ThreadPoolExecutor(max_workers=max(1, w)) for _, w in groups]
    try:
        futures = [ex.submit(_guarded, work, j, todo, deadline, counts)
                   for ex, (group, _) in zip(executors, groups) for j, todo in group]
        for fut in as_completed(futures):
            fut.result()
    except BaseException:
        _STOPPING.set()  # a worker thread between two jobs must not start another one after the interrupt
        for ex in executors:
            ex.shutdown(wait=False, cancel_futures=True)
        stop_all()
        raise
    finally:
        for ex in executors:
            ex.shutdown(wait=True, cancel_futures=True)


def _guarded(work, job, todo, deadline, counts) -> None:
    if _STOPPING.is_set():
        return
    if time.monotonic() > deadline:
        counts["jobs_skipped_budget"] += 1
        return
    work(job, todo)


def _job_with_retry(job: Job, todo, site, tl_bin, seed, store: Store, on_row, pages=None) -> None:
    """Run a job; if some fetches did not come back valid, run only those once more (new link, new seed)."""
    retry_missing(todo, lambda rest, attempt, keep: run_job(job, rest, site, tl_bin, job_seed(job, seed + attempt),
                                                             keep, pages), store, on_row)


def retry_missing(todo: list, attempt_run, store: Store, on_row) -> None:
    """Up to MAX_ATTEMPTS runs of ``attempt_run(todo, attempt, keep)``, each over the fetches still without a valid
    row; every run is stored with its attempt number, every row passes through ``on_row``."""
    for attempt in range(MAX_ATTEMPTS):
        if _STOPPING.is_set():
            return
        good: set[str] = set()

        def keep(row: dict) -> None:  # called only during this attempt's run
            on_row(row)
            if row["ok"]:
                good.add(row["key"])  # noqa: B023

        run = attempt_run(todo, attempt, keep)
        store.append_run({**run, "attempt": attempt})
        todo = [f for f in todo if f.key not in good]
        if not todo:
            return


def _provenance(plan: Plan, tl_bin: str, parallel: int) -> dict:
    root = paths.CHECKOUT or paths.ROOT
    return {"started_utc": _now(), "commit": _cmd(["git", "-C", str(root), "rev-parse", "HEAD"]),
            "dirty_tree": bool(_cmd(["git", "-C", str(root), "status", "--porcelain", "--", "src", "edge"])),
            "kernel": platform.release(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_start": list(os.getloadavg()), "parallel_light_jobs": parallel, "heavy_mbps": HEAVY_MBPS,
            "nginx": _cmd([shutil.which("nginx") or "nginx", "-v"], stderr=True),
            "curl": _cmd(["curl", "--version"]).splitlines()[0] if shutil.which("curl") else "",
            "tailor_link_sha256": hashlib.sha256(Path(tl_bin).read_bytes()).hexdigest(),
            "emulator": {"tool": "edge/cmd/tailor-link run", "delay": "one-way = RTT/2 each direction",
                         "loss": "i.i.d., same fraction down and up", "queue": f"1 BDP of the down link in "
                         f"1500-byte packets, floor {QUEUE_FLOOR_PACKETS}, drop-tail, both directions",
                         "route_opts": "initcwnd N congctl CC [rto_min Xms]", "server_sysctl": "tcp_no_metrics_save=1"},
            "server": "nginx, TLS 1.3 self-signed P-256, one listener (ALPN h2 / http/1.1), gzip off, random bytes",
            "client": ("headless Chromium over the DevTools pipe, one browser per job, a fresh browser context "
                       "per load, cache disabled; PLT = PerformanceNavigationTiming.loadEventEnd" if plan.pages else
                       "curl --http1.1 / --http2, new process and connection per fetch; completion = time_total"),
            "chromium": _cmd(["chromium", "--version"]) if plan.pages else "",
            "plan": plan.to_dict()}


def _merge_provenance(path: Path, prov: dict) -> None:
    """Keep one entry per measuring session, so a resumed dataset shows every session that fed it."""
    sessions = json.loads(path.read_text()).get("sessions", []) if path.exists() else []
    tmp = path.with_suffix(".json.tmp")  # atomic: an interrupted write must not lose the earlier sessions
    tmp.write_text(json.dumps({"schema": "tailor.testbed-provenance/v1", "sessions": sessions + [prov]}, indent=1))
    os.replace(tmp, path)


def _cmd(cmd: list[str], stderr: bool = False) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (res.stderr if stderr else res.stdout).strip()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
