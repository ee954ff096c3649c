"""`tailor testbed campaign`: a measurement campaign with adaptive repetitions, an A/A check and pieces.

What it adds to ``tailor testbed measure`` (same plans, jobs, keys, journal and store):

* **One job at a time.** Nothing else of the campaign runs beside a measurement; the machine's load is recorded
  per fetch and per run as always.
* **Emulator lateness checked.** Before every round, the fetches of runs whose emulator send-lateness p99 exceeded
  ``lateness_ms`` are moved to ``discarded.parquet`` (``Store.requeue_late_runs``) and so measured again; with
  ``handshake_ms``, so are those of runs whose TLS handshakes were slower than their condition's quietest run's by
  more than that (``Store.requeue_slow_handshakes``: other processes' load on the endpoints, which the emulator's
  lateness does not show).
* **Adaptive repetitions per cell** (condition x workload x configuration x HTTP version): every cell gets
  ``min_reps`` valid repetitions, then ``step`` more per round while the distribution-free 95% interval of its
  median (order statistics, :func:`median_interval`) is wider than +-``target`` of the median, up to ``max_reps``.
  The interval of every cell is stored (``intervals.parquet``): a cell at the cap with a wider interval is
  *unresolved*, and the analysis says so instead of ranking its configurations.
* **A/A check.** With ``aa`` in the plan (``{"cc": "cubic", "iw": 10}``), that configuration is measured as two
  batches per condition, the first job and the last job of the condition's round, so the two are separated in
  time by every other job of the condition; :func:`aa_check` compares their medians per cell.
* **Pieces.** After every (round, condition) the journal is folded into Parquet and, with ``commit``, the dataset
  directory alone is committed to git, so an interruption loses at most the job in flight; a rerun resumes from
  what is stored (keys already valid are never measured again).
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import binom

from tailor.errors import check
from tailor.testbed.plan import Fetch, Job, Plan, Transport, fetch_key

CELL = ["condition", "cc", "iw", "rto_min_ms", "http", "workload", "batch"]


@dataclass(frozen=True)
class Adaptive:
    """The repetition rule: at least ``min_reps``, then ``step`` more per round until the median's 95% interval
    is within +-``target`` (relative) or ``max_reps`` valid repetitions are stored."""

    min_reps: int = 6  # the smallest n for which a 95% order-statistic interval of the median exists
    step: int = 3
    max_reps: int = 15
    target: float = 0.03
    level: float = 0.95

    def __post_init__(self):
        check(6 <= self.min_reps <= self.max_reps <= 50, "Adaptive", "min_reps/max_reps",
              "6 <= min_reps <= max_reps <= 50", (self.min_reps, self.max_reps))
        check(1 <= self.step <= 20, "Adaptive", "step", "in [1, 20]", self.step)
        check(0 < self.target < 1 and 0.5 < self.level < 1, "Adaptive", "target/level", "in (0, 1) / (0.5, 1)",
              (self.target, self.level))

    def resolved(self, values) -> bool:
        lo, hi = median_interval(values, self.level)
        return self.within(len(values), float(np.median(values)) if len(values) else math.nan, lo, hi)

    def within(self, n: int, median: float, lo: float, hi: float) -> bool:
        """Resolved: enough repetitions and the median's interval within +-target of it."""
        return (n >= self.min_reps and math.isfinite(lo)
                and lo >= median * (1 - self.target) and hi <= median * (1 + self.target))

    def wanted(self, values) -> int:
        """How many valid repetitions the cell should have after the next round (its count when it is done)."""
        n = len(values)
        if n < self.min_reps:
            return self.min_reps
        if n >= self.max_reps or self.resolved(values):
            return n
        return min(self.max_reps, n + self.step)


def median_interval(values, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval of the median: order statistics x_(l) <= median <= x_(u) covering with
    probability >= ``level`` (binomial(n, 1/2)); (nan, nan) when n is too small for that level (n < 6 at 95%)."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    best = None
    for lo in range(n // 2 + 1):  # the symmetric pair (lo, n-1-lo), narrowest that still covers
        cover = 1 - 2 * binom.cdf(lo, n, 0.5)  # P(x_(lo) <= median <= x_(n-1-lo)), 0-based order statistics
        if cover >= level:
            best = lo
        else:
            break
    if best is None:
        return math.nan, math.nan
    return float(x[best]), float(x[n - 1 - best])


def _workload(df: pd.DataFrame) -> pd.Series:
    page = df["page"].fillna("") if "page" in df.columns else pd.Series("", index=df.index)
    return page.where(page != "", df["size_bytes"].astype("int64").astype(str))


def cells(df: pd.DataFrame, adaptive: Adaptive) -> pd.DataFrame:
    """Per cell: valid repetitions, median, its interval, resolved, at the cap (what intervals.parquet holds)."""
    if df.empty:
        return pd.DataFrame(columns=CELL + ["n", "median_ms", "lo_ms", "hi_ms", "resolved", "capped"])
    rows = []
    for key, g in _valid(df).groupby(CELL, sort=True):
        v = g["completion_ms"].to_numpy()
        lo, hi = median_interval(v, adaptive.level)
        m = float(np.median(v))
        rows.append({**dict(zip(CELL, key, strict=True)), "n": len(v), "median_ms": m,
                     "lo_ms": lo, "hi_ms": hi, "resolved": adaptive.within(len(v), m, lo, hi),
                     "capped": len(v) >= adaptive.max_reps,
                     "cpu_ms_median": float(g["cpu_ms"].median()) if "cpu_ms" in g else math.nan})
    return pd.DataFrame(rows)


def _valid(df: pd.DataFrame) -> pd.DataFrame:
    """The valid fetches (ok, finite time) with their cell's workload and A/A batch."""
    ok = df[df["ok"].astype(bool) & np.isfinite(df["completion_ms"])].copy()
    ok["workload"] = _workload(ok)
    ok["batch"] = ok["key"].map(batch_of)
    return ok


def batch_of(key: str) -> str:
    """``a`` / ``b`` for the A/A batches (keys ending ``|aa-a`` / ``|aa-b``), "" otherwise."""
    return key.rsplit("|aa-", 1)[1] if "|aa-" in key else ""


def round_jobs(plan: Plan, df: pd.DataFrame, adaptive: Adaptive, aa: Transport | None = None) -> list[Job]:
    """The jobs of the next round: per (condition, transport), the fetches that bring every unfinished cell to
    ``adaptive.wanted`` valid repetitions (new repetition indices after the stored ones). With ``aa``, that
    transport's two batches open and close each condition's jobs. Empty when every cell is done.

    Coverage first: the conditions with a cell below ``min_reps`` come before the conditions whose cells only need
    more repetitions, and among them the least covered first (share of cells at ``min_reps``; ties in the plan's
    order), so that a campaign run in pieces of an hour covers every condition before it narrows the intervals
    of the first ones."""
    valid = _valid_reps(df)
    sizes = plan.page_sizes() if plan.pages else {}
    first, later = [], []
    for i, cond in enumerate(plan.conditions):
        per_cond, cells, covered = [], 0, 0
        batches = [("", tr) for tr in plan.transports]
        if aa is not None:
            batches = [("a", aa)] + batches + [("b", aa)]
        works = ([(p, sizes[p]) for p in plan.pages_for(cond)] if plan.pages
                 else [("", s) for s in plan.sizes_for(cond)])
        for batch, tr in batches:
            fetches = []
            for page, size in works:
                for http in plan.http:
                    cell = (cond.name, tr.tag(), http, page or str(size), batch)
                    have = valid.get(cell, [])
                    reps_done = set(valid.get(cell + ("reps",), []))
                    want = adaptive.wanted(have)
                    cells, covered = cells + 1, covered + (len(have) >= adaptive.min_reps)
                    r, need = 0, want - len(have)
                    while need > 0:  # the lowest repetition indices without a valid row
                        if r not in reps_done:
                            key = fetch_key(cond.name, tr, http, page or size, r) + (f"|aa-{batch}" if batch else "")
                            fetches.append(Fetch(key, http, size, r, page))
                            need -= 1
                        r += 1
            if fetches:
                fetches.sort(key=lambda f: (f.rep, f.page, f.size, f.http))  # repetition-major, as plans do
                per_cond.append(Job(cond, tr, tuple(fetches)))
        if covered < cells:  # a cell below min_reps: this condition's first pass is not done
            first.append((covered / max(cells, 1), i, per_cond))
        else:
            later.extend(per_cond)
    return [j for _, _, jobs in sorted(first, key=lambda t: t[:2]) for j in jobs] + later


def _valid_reps(df: pd.DataFrame) -> dict:
    """(condition, transport tag, http, workload, batch) -> valid completion times, and (... , "reps") -> their rep
    indices."""
    if df.empty:
        return {}
    out: dict = {}
    for r in _valid(df).itertuples():
        cell = (r.condition, f"{r.cc}|iw{r.iw}|rto{r.rto_min_ms}", str(r.http), r.workload, r.batch)
        out.setdefault(cell, []).append(float(r.completion_ms))
        out.setdefault(cell + ("reps",), []).append(int(r.rep))
    return out


def aa_check(df: pd.DataFrame, adaptive: Adaptive = Adaptive()) -> pd.DataFrame:
    """Per A/A cell: the two batches' medians, their relative difference, whether each is resolved, the loss."""
    c = cells(df, adaptive)
    if c.empty or not (c["batch"] != "").any():
        return pd.DataFrame(columns=["condition", "workload", "http", "a_ms", "b_ms", "diff", "loss", "resolved"])
    aa = c[c["batch"] != ""]
    rows = []
    for (cond, wl, http), g in aa.groupby(["condition", "workload", "http"]):
        by = {r.batch: r for r in g.itertuples()}
        if {"a", "b"} <= set(by):
            a, b = by["a"], by["b"]
            rows.append({"condition": cond, "workload": wl, "http": http, "a_ms": a.median_ms, "b_ms": b.median_ms,
                         "diff": b.median_ms / a.median_ms - 1, "resolved": bool(a.resolved and b.resolved)})
    out = pd.DataFrame(rows)
    if not out.empty:
        loss = df.drop_duplicates("condition").set_index("condition")["loss"]
        out["loss"] = out["condition"].map(loss).astype(float)
    return out


def campaign(plan: Plan, out_dir: Path, adaptive: Adaptive = Adaptive(), aa: Transport | None = None,
             budget_s: float | None = None, lateness_ms: float = 2.0, commit: bool = False, max_jobs: int | None = None,
             run_job=None, console=None, handshake_ms: float | None = None) -> dict:
    """Run rounds until every cell is resolved or capped, the budget is spent or ``max_jobs`` jobs ran.

    ``run_job(job, todo, on_row) -> run dict`` measures one job (default: the real harness, :func:`harness`)."""
    from tailor.testbed.store import Store

    check(all(t.ssai and not t.notsent_lowat for t in plan.transports), "campaign", "configs",
          "without slow_start_after_idle 0 or notsent_lowat (the campaign's cells are keyed by cc, iw and rto_min only; measure such "
          "a plan with `tailor testbed measure`)", [t.tag() for t in plan.transports])
    store = Store(out_dir)
    if run_job is None:
        with harness(plan, store.dir) as real:
            return campaign(plan, out_dir, adaptive, aa, budget_s, lateness_ms, commit, max_jobs, real, console,
                            handshake_ms)
    (store.dir / "plan.json").write_text(json.dumps({**plan.to_dict(), "adaptive": adaptive.__dict__,
                                                     "aa": aa.__dict__ if aa else None}, indent=1))
    deadline = time.monotonic() + (budget_s if budget_s else 1e12)
    jobs_run, rounds, requeued = 0, 0, 0
    stop = None
    while stop is None:
        requeued += store.requeue_late_runs(lateness_ms * 1000)  # compacts too
        if handshake_ms is not None:
            requeued += store.requeue_slow_handshakes(handshake_ms)
        jobs = round_jobs(plan, store.measurements(), adaptive, aa)
        if not jobs:
            stop = "done"
            break
        rounds += 1
        for cond in dict.fromkeys(j.condition.name for j in jobs):
            for job in (j for j in jobs if j.condition.name == cond):
                if time.monotonic() > deadline:
                    stop = "budget"
                elif max_jobs is not None and jobs_run >= max_jobs:
                    stop = "max_jobs"
                if stop:
                    break
                run = run_job(job, list(job.fetches), store.append)
                store.append_run({**run, "round": rounds})
                jobs_run += 1
            store.compact()
            _write_intervals(store, adaptive)
            if commit:
                commit_piece(store.dir, f"testbed campaign {store.dir.name}: round {rounds}, condition {cond}")
            if stop:
                break
    store.compact()
    c = _write_intervals(store, adaptive)
    return {"stop": stop, "rounds": rounds, "jobs": jobs_run, "requeued_fetches": requeued,
            "cells": int(len(c)), "resolved": int(c["resolved"].sum()) if len(c) else 0,
            "unresolved_capped": int((~c["resolved"] & c["capped"]).sum()) if len(c) else 0}


def estimate(plan: Plan, adaptive: Adaptive, aa: Transport | None, out_dir: Path | None = None) -> dict:
    """The next round's jobs, loads and estimated machine time (``Job.estimate_s``), from what is stored."""
    from tailor.testbed.store import Store

    df = Store(out_dir).measurements() if out_dir is not None and Path(out_dir).exists() else pd.DataFrame()
    jobs = round_jobs(plan, df, adaptive, aa)
    return {"jobs": len(jobs), "loads": sum(len(j.fetches) for j in jobs),
            "estimate_h": round(sum(j.estimate_s() for j in jobs) / 3600, 2),
            "conditions": len({j.condition.name for j in jobs}), "stored_rows": int(len(df))}


@contextlib.contextmanager
def harness(plan: Plan, store_dir: Path):
    """The real measurement of one job (tailor-link namespaces, nginx, curl or Chromium) as ``run_job``."""
    from tailor.testbed.pages import prepare_pages
    from tailor.testbed.runner import job_seed, run_job
    from tailor.testbed.server import prepare_site, require_tools, tailor_link_binary

    require_tools("nginx", "curl", "openssl", "ip", *(["chromium"] if plan.pages else []))
    tl_bin = tailor_link_binary()
    with tempfile.TemporaryDirectory(prefix="tailor-site-") as site:
        pages = None
        if plan.pages:
            pages = prepare_pages(Path(site), plan.pages, plan.seed)
            (store_dir / "pages.json").write_text(json.dumps(pages["manifest"]))
        else:
            prepare_site(Path(site), plan.sizes, plan.seed)

        def run(job: Job, todo: list[Fetch], on_row) -> dict:
            seed = job_seed(job, plan.seed) + sum(f.rep for f in todo)  # a new round's link draws afresh
            return run_job(job, todo, Path(site), tl_bin, seed, on_row, pages)

        yield run


def _write_intervals(store, adaptive: Adaptive) -> pd.DataFrame:
    from tailor.testbed.store import _write

    c = cells(store.measurements(), adaptive)
    if not c.empty:
        _write(c, store.dir / "intervals.parquet")
    return c


def commit_piece(path: Path, message: str) -> None:
    """Commit ``path`` alone (pathspec commit): the campaign's piece survives an interruption."""
    root = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if root.returncode != 0:
        return
    subprocess.run(["git", "-C", root.stdout.strip(), "add", "--", str(path.resolve())], check=True,
                   capture_output=True)
    subprocess.run(["git", "-C", root.stdout.strip(), "commit", "-q", "-m", message, "--", str(path.resolve())],
                   capture_output=True)  # nothing to commit is fine
